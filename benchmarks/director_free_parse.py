"""The Director's format without the grammar, on a finished pipeline copy: evaluate_group's own measure
(`unconstrained_parse_rates`: each language-model Director's first directive of every held-out conversation,
sampled at train_director's temperature without the directive grammar) for a copy whose evaluate_group ran
before the measure existed, with trained - base paired by conversation.

    python benchmarks/director_free_parse.py --workdir runs/evidence [--samples 4]
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
import sys
import time

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, help="a pipeline copy whose train_director and episodes have run")
    ap.add_argument("--samples", type=int, default=None, help="a conversation (default: evaluate_group's)")
    args = ap.parse_args()
    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl, write_json
    from mascot.policy.evaluate_group import (build_directors, heldout_conversations, trained_minus_base_parse_rate,
                                              unconstrained_parse_rates)
    from mascot.stats import describe

    os.chdir(args.workdir)
    params = load_params("params.yaml")
    p = params.evaluate_group
    samples = args.samples or p.unconstrained_samples
    queries = heldout_conversations(load_jsonl("data/queries.jsonl"), load_jsonl("data/group/episodes.jsonl"),
                                    params.heldout, p.max_queries)
    start = time.perf_counter()
    directors = build_directors(params, load_personas(params.prepare.personas_file), "models/director")
    rates = unconstrained_parse_rates(directors, queries, samples, params.train_director.temperature)
    out = {"conversations": len(queries), "samples_per_conversation": samples,
           "temperature": params.train_director.temperature, "rates": rates,
           "seconds": round(time.perf_counter() - start, 1)}
    if (free_vs := trained_minus_base_parse_rate(rates, params.stats.min_n)) is not None:
        out["trained_minus_base"] = free_vs
    write_json("reports/director_free_parse.json", out)
    for condition, r in rates.items():
        print(f"{condition}: {r['parse_rate']} of {r['directives']} directives parse without the grammar "
              f"({r['invalid_reasons'] or 'all parse'})")
    if "trained_minus_base" in out:
        print(f"trained - base, paired by conversation: {describe(out['trained_minus_base'], params.stats.min_n)}")
    print(f"-> {Path(args.workdir) / 'reports/director_free_parse.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
