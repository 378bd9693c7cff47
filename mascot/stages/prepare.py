"""The `prepare` stage: corpora + personas -> queries."""
from __future__ import annotations

from collections import Counter
import sys

from mascot.config import Params, PrepareParams
from mascot.data.personas import load_personas
from mascot.data.prepare import load_source, token_counter
from mascot.data.queries import build_queries, sample_queries
from mascot.io import BadRows, InputError, write_json, write_jsonl
from mascot.splits import conversation_of, split_counts


def main(params: Params, *, queries_path: str, figures_path: str) -> None:
    p: PrepareParams = params.prepare
    bad = BadRows(skip=p.skip_bad_rows)
    personas = load_personas(p.personas_file)
    per_source = [(spec, load_source(spec, bad)) for spec in p.sources]
    dialogues = [d for _, ds in per_source for d in ds]
    if not dialogues:
        raise InputError("prepare.sources: no dialogues were loaded")
    count = token_counter(p.tokenizer)
    # Each source is sampled to its own cap first, so that a large corpus cannot crowd out a small one.
    pool = [q for spec, ds in per_source for q in build_queries(
        ds, list(personas), p.max_context_tokens, count, per_dialogue=p.queries_per_dialogue,
        max_queries=spec.max_queries, min_user_chars=p.min_user_chars, seed=p.seed)]
    queries = sample_queries(pool, list(personas), p.personas_per_query, p.max_queries, p.seed)
    write_jsonl(queries_path, queries)
    splits = split_counts(queries, params.heldout)
    write_json(figures_path, {"dialogues": len(dialogues), "queries": len(queries), "skipped_bad_rows": len(bad.messages),
                         "conversations": len({conversation_of(q) for q in queries}), **splits,
                         "queries_by_source": dict(Counter(q["source"] for q in queries)),
                         "queries_by_persona": dict(Counter(n for q in queries for n in q["personas"]))})
    print(f"prepare: {len(dialogues)} dialogues -> {len(queries)} queries -> {queries_path}"
          + (f" ({len(bad.messages)} bad rows skipped)" if bad.messages else "")
          + f"; held out: {splits['heldout_queries']} queries of {splits['heldout_conversations']} conversations, "
            f"the rest: {splits['trainable_queries']} of {splits['trainable_conversations']}")
    if not splits["heldout_queries"] or not splits["trainable_queries"]:
        empty = "held-out" if not splits["heldout_queries"] else "trainable"
        print(f"prepare: WARNING: no {empty} query (heldout.fraction {params.heldout.fraction} over "
              f"{splits['heldout_conversations'] + splits['trainable_conversations']} conversations): raise or lower "
              "heldout.fraction, or add conversations; validate will stop the run", file=sys.stderr)
