"""Which judge agrees with people: each judge model, prompt format and mode scored on the human reference set
(supporter turns the ESConv seekers rated 1-5), with the pair accuracy [interval over conversations], n pairs /
n conversations, the length-controlled figure, Spearman, the best dimension and seconds per item; the
"longer turn wins" baseline on the same pairs. The table of docs/judge.md "Against people".

Runs judge_check's own selection (`human.judge_items` whole conversations, held-out ones first) and the score
stage's `score_units`, one thread, each run journaled under .mascot/resume/ (a rerun resumes).

    mascot human_set          # data/human/items.jsonl (after base_model)
    python benchmarks/judge_human_agreement.py --model models/base --styles plain,chat --modes expected
    python benchmarks/judge_human_agreement.py --model models/judge-1.5b --styles chat --items 48
    python benchmarks/judge_human_agreement.py --survey 48   # stage 2: the collective judge against the survey

`--survey N`: the collective judge (score_group's rubric) on the human supporter's blocks of N conversations
that carry the seekers' survey (judge_check_group's reference blocks, the human variant only), against the
survey's empathy and relevance (Spearman, interval over conversations).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/base", help="a local judge model folder")
    parser.add_argument("--styles", default="plain,chat")
    parser.add_argument("--modes", default="expected")
    parser.add_argument("--items", type=int, default=None, help="default: human.judge_items")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="reports/bench/judge_human_agreement.jsonl")
    parser.add_argument("--survey", type=int, default=0, help="stage 2 against the survey, on N conversations")
    args = parser.parse_args()
    if args.survey:
        return survey(args)

    import torch

    torch.set_num_threads(1)
    from mascot.annotate.judge_check import load_human_items
    from mascot.annotate.score import score_units
    from mascot.config import load_params
    from mascot.data import human_ratings
    from mascot.data.personas import load_personas
    from mascot.granularity import REPLY
    from mascot.llm.factory import make_backend
    from mascot.resume import Journal

    params = load_params(args.params)
    if args.items:
        params = params.model_copy(update={"human": params.human.model_copy(update={"judge_items": args.items})})
    items = load_human_items(params)
    if not items:
        sys.exit("no human reference set: run `mascot human_set` first")
    personas = load_personas(params.prepare.personas_file)
    units = REPLY.judge_units(*human_ratings.as_candidates(items), personas)
    rubric = REPLY.rubric(params)
    backend = make_backend(params.llm.judge.model_copy(update={"model": args.model}), "llm.judge")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for mode in args.modes.split(","):
            for style in args.styles.split(","):
                journal = Journal(f"bench-human-{Path(args.model).name}-{style}-{mode}")
                start = time.perf_counter()
                try:
                    records = score_units(units, rubric, params.score.model_copy(update={"mode": mode}), backend,
                                          journal, prompt_style=style)
                finally:
                    journal.close()
                seconds = time.perf_counter() - start
                total, dims = human_ratings.scores_by_item(items, records, rubric.dimensions)
                fig = human_ratings.agreement(items, total, params.human.min_gap, dims)
                best = max(fig["by_dimension"].items(), key=lambda kv: kv[1]["pairs"] if kv[1]["pairs"] is not None else -1)
                row = {"model": args.model, "style": style, "mode": mode, "items": len(items),
                       "scored": len(total), "seconds_per_item": round(seconds / len(items), 2),
                       "resumed": seconds < 1.0, **fig, "best_dimension": best[0]}
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"{Path(args.model).name} {style}/{mode}: {human_ratings.describe_agreement(fig)}; Spearman "
                      f"{fig['spearman']['mean']} [{fig['spearman']['ci_low']}, {fig['spearman']['ci_high']}]; best "
                      f"dimension {best[0]} {best[1]['pairs']}; {row['seconds_per_item']} s/item", flush=True)
    finally:
        backend.close()


def survey(args) -> None:
    import torch

    torch.set_num_threads(1)
    from mascot.annotate.judge_check import survey_agreement
    from mascot.annotate.score import score_units
    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.data.prepare import load_source, token_counter
    from mascot.granularity import BLOCK
    from mascot.io import BadRows
    from mascot.llm.factory import make_backend
    from mascot.resume import Journal

    params = load_params(args.params)
    p = params.prepare
    personas = load_personas(p.personas_file)
    dialogues = [d for spec in p.sources for d in load_source(spec, BadRows(skip=p.skip_bad_rows))
                 if d.metadata.get("survey_score")]
    block = params.judge_check_group.model_copy(update={"items": args.survey})
    items = BLOCK.reference_set(dialogues, personas, p.max_context_tokens, token_counter(p.tokenizer), block, set())
    variants, units = BLOCK.reference_units(items, personas)
    keep = [k for k, v in enumerate(variants) if v["reply_type"] == "reference"]
    variants, units = [variants[k] for k in keep], [units[k] for k in keep]
    backend = make_backend(params.llm.judge.model_copy(update={"model": args.model}), "llm.judge")
    style = args.styles.split(",")[0]
    journal = Journal(f"bench-survey-{Path(args.model).name}-{style}")
    start = time.perf_counter()
    try:
        records = score_units(units, BLOCK.rubric(params), params.score.model_copy(update={"mode": "expected"}),
                              backend, journal, prompt_style=style)
    finally:
        journal.close()
        backend.close()
    fig = survey_agreement(items, variants, records)
    row = {"model": args.model, "style": style, "survey_items": len(items),
           "seconds_per_item": round((time.perf_counter() - start) / max(len(items), 1), 2), **fig}
    with Path(args.out).open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(f"collective judge {Path(args.model).name} {style} against the survey ({len(items)} conversations): "
          + "; ".join(f"{k} Spearman {f['mean']} [{f['ci_low']}, {f['ci_high']}] n {f['n']}" for k, f in fig.items()))


if __name__ == "__main__":
    main()
