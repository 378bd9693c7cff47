"""How many conversations have queries in more than one role (held out, train, eval) under a split rule: the
queries `prepare` cuts from the shipped corpora at the real profile's settings, split per query (the rule before
2026-12-02) and per conversation (mascot/splits.py). Prints one line per rule.

    python benchmarks/split_leakage.py [--queries-per-dialogue 3] [--eval-fraction 0.1]
"""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from mascot.config import HeldOutParams
from mascot.data.queries import build_queries
from mascot.data.sources.esconv import load_esconv
from mascot.data.sources.qmsum import load_qmsum
from mascot.io import BadRows
from mascot.splits import conversation_of, is_held_out, split_of

ROOT = Path(__file__).resolve().parents[1]
CORPORA = [(load_esconv, "data/corpora/esconv-sample.json"), (load_esconv, "data/corpora/esconv-more.json"),
           (load_qmsum, "data/corpora/qmsum-val.jsonl")]


def per_query_roles(queries, heldout, eval_fraction, seed=0):
    """The rule before: each query's own id hashed."""
    def unit(tag, s, qid):
        return int(hashlib.sha256(f"{tag}{s}:{qid}".encode()).hexdigest()[:12], 16) / 16**12
    return {q["query_id"]: "heldout" if unit("heldout:", heldout.seed, q["query_id"]) < heldout.fraction
            else ("eval" if unit("", seed, q["query_id"]) < eval_fraction else "train") for q in queries}


def per_conversation_roles(queries, heldout, eval_fraction, seed=0):
    rest = [q for q in queries if not is_held_out(q, heldout)]
    split = split_of(rest, eval_fraction, seed)
    return {q["query_id"]: "heldout" if is_held_out(q, heldout) else split[q["query_id"]] for q in queries}


def leakage(queries, roles) -> str:
    by_conv: dict[str, set] = {}
    for q in queries:
        by_conv.setdefault(conversation_of(q), set()).add(roles[q["query_id"]])
    mixed = sum(len(r) > 1 for r in by_conv.values())
    held = [r for r in by_conv.values() if "heldout" in r]
    return (f"{len(queries)} queries from {len(by_conv)} conversations; {mixed} conversations in two or more roles; "
            f"{sum(len(r) > 1 for r in held)} of the {len(held)} conversations holding a held-out query also hold a "
            "trained-on or eval query")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries-per-dialogue", type=int, default=3)
    ap.add_argument("--eval-fraction", type=float, default=0.1)
    args = ap.parse_args()
    dialogues = [d for load, path in CORPORA for d in load(ROOT / path, BadRows())]
    queries = build_queries(dialogues, ["The Anchor"], 1024, lambda t: len(t.split()),
                            per_dialogue=args.queries_per_dialogue)
    heldout = HeldOutParams()
    print("per query (before):       " + leakage(queries, per_query_roles(queries, heldout, args.eval_fraction)))
    print("per conversation (after): " + leakage(queries, per_conversation_roles(queries, heldout, args.eval_fraction)))


if __name__ == "__main__":
    main()
