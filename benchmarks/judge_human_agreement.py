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
    python benchmarks/judge_human_agreement.py --model models/judge-1.5b --styles chat --all \
        --rubric data/rubrics/persona-length-neutral.yaml --fit-aggregation --pairwise
    python benchmarks/judge_human_agreement.py --model models/judge-1.5b --styles chat --all \
        --rubric data/rubrics/persona-length-neutral.yaml --against data/rubrics/persona.yaml   # paired

`--all`: every rated turn of the set. Judge methods that might beat length (docs/judge.md): `--rubric` another
rubric file (persona-length-neutral.yaml: length is not quality, with anchors of a long poor and a short
excellent reply); `--against` another rubric on the same turns and the paired difference (each pair's win under
one minus under the other, at equal length too); `--fit-aggregation` the five dimensions weighted as people
weigh them, weights fitted on half the conversations and measured on the other
(mascot/annotate/fitted_aggregation.py); `--pairwise` the two turns of each human pair judged side by side, both
orders, a disagreement a tie (mascot/annotate/pairwise.py).

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
    parser.add_argument("--all", action="store_true", help="every rated turn (human.judge_items null)")
    parser.add_argument("--rubric", default=None, help="a rubric file in place of score.rubric")
    parser.add_argument("--against", default=None, metavar="RUBRIC",
                        help="also this rubric on the same turns (or its earlier run's journal), and the paired "
                             "difference")
    parser.add_argument("--fit-aggregation", action="store_true", help="also the dimensions' weights fitted to people")
    parser.add_argument("--pairwise", action="store_true", help="also pairwise, both orders (no rubric scores)")
    parser.add_argument("--pairwise-only", action="store_true", help="pairwise only: no rubric scoring")
    parser.add_argument("--length-neutral", action="store_true", help="pairwise: say that length is not quality")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: two runs side by side; the whole machine is faster alone)")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="reports/bench/judge_human_agreement.jsonl")
    parser.add_argument("--survey", type=int, default=0, help="stage 2 against the survey, on N conversations")
    args = parser.parse_args()
    if args.survey:
        return survey(args)

    import torch

    torch.set_num_threads(args.threads)
    from mascot.annotate.judge_check import load_human_items
    from mascot.stage_args import dvc_cmd_options
    from mascot.annotate.score import score_units
    from mascot.config import load_params
    from mascot.data import human_ratings
    from mascot.data.personas import load_personas
    from mascot.granularity import REPLY
    from mascot.llm.factory import make_backend
    from mascot.resume import Journal

    params = load_params(args.params)
    shipped_rubric = params.score.rubric  # before --rubric replaces it: the journal name leaves it unsaid
    if args.items or args.all:
        params = params.model_copy(update={"human": params.human.model_copy(
            update={"judge_items": None if args.all else args.items})})
    if args.rubric:
        params = params.model_copy(update={"score": params.score.model_copy(update={"rubric": args.rubric})})
    items = load_human_items(params, dvc_cmd_options("judge_check")["human_items_path"])
    if not items:
        sys.exit("no human reference set: run `mascot human_set` first")
    def journal_for(rubric_file: str | None, style: str, mode: str) -> Journal:
        # the name says what was judged: a rerun of the same resumes, another set or rubric starts afresh
        other = rubric_file and rubric_file != shipped_rubric
        return Journal(f"bench-human-{Path(args.model).name}{'-' + Path(rubric_file).stem if other else ''}-"
                       f"{len(items)}-{style}-{mode}")

    tag = f"{Path(args.model).name}{'-' + Path(args.rubric).stem if args.rubric else ''}-{len(items)}"
    personas = load_personas(params.prepare.personas_file)
    units = REPLY.judge_units(*human_ratings.as_candidates(items), personas)
    rubric = REPLY.rubric(params)
    backend = make_backend(params.llm.judge.model_copy(update={"model": args.model}), "llm.judge")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for mode in ([] if args.pairwise_only else args.modes.split(",")):
            for style in args.styles.split(","):
                journal = journal_for(args.rubric, style, mode)
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
                row = {"model": args.model, "rubric": rubric.name, "style": style, "mode": mode, "items": len(items),
                       "scored": len(total), "threads": args.threads,
                       "seconds_per_item": round(seconds / len(items), 2),
                       "resumed": seconds < 1.0, **fig, "best_dimension": best[0]}
                if args.fit_aggregation:
                    row["fitted_aggregation"] = fitted(items, dims, params.human.min_gap)
                if args.against:
                    row["paired_against"] = against(args, items, units, params, backend, style, mode, total,
                                                    journal_for(args.against, style, mode))
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"{Path(args.model).name} {style}/{mode}: {human_ratings.describe_agreement(fig)}; Spearman "
                      f"{fig['spearman']['mean']} [{fig['spearman']['ci_low']}, {fig['spearman']['ci_high']}]; best "
                      f"dimension {best[0]} {best[1]['pairs']}; {row['seconds_per_item']} s/item", flush=True)
                if args.fit_aggregation:
                    fa = row["fitted_aggregation"]
                    print(f"  fitted aggregation (weights {fa['weights']}): "
                          f"{human_ratings.describe_agreement(fa['figure'])}", flush=True)
        if args.pairwise or args.pairwise_only:  # once, after every mode's rubric scores
            for style in args.styles.split(","):
                pairwise(args, items, backend, style, params.human.min_gap, tag, out)
    finally:
        backend.close()


def against(args, items: list[dict], units: list, params, backend, style: str, mode: str, total: dict,
            journal) -> dict:
    """The same turns scored on the `--against` rubric, and this run's wins minus its on the same pairs, paired."""
    from mascot.annotate.rubric import load_rubric
    from mascot.annotate.score import score_units
    from mascot.data import human_ratings

    other = load_rubric(args.against)
    try:
        records = score_units(units, other, params.score.model_copy(update={"mode": mode}), backend, journal,
                              prompt_style=style)
    finally:
        journal.close()
    fig = human_ratings.paired_difference(items, human_ratings.scores_by_item(items, records, other.dimensions)[0],
                                          total, params.human.min_gap, params.stats.min_n)
    raw, eq = fig["raw"], fig["equal_length"]
    print(f"  paired, this rubric - {other.name}: {raw['mean']} [{raw['ci_low']}, {raw['ci_high']}] on {raw['n']} "
          f"pairs; at equal length {eq['mean']} [{eq['ci_low']}, {eq['ci_high']}]", flush=True)
    return {"rubric": other.name, **fig}


def fitted(items: list[dict], dims: dict, min_gap: int) -> dict:
    from mascot.data import human_ratings
    from mascot.annotate.fitted_aggregation import cross_fitted_scores

    scores, weights = cross_fitted_scores(items, dims, min_gap)
    return {"weights": weights, "figure": human_ratings.agreement(items, scores, min_gap)}


def pairwise(args, items: list[dict], backend, style: str, min_gap: int, tag: str, out: Path) -> None:
    """The human pairs judged side by side, both orders, in chunks journaled as they finish (a rerun resumes)."""
    from mascot.annotate.pairwise import CHOICES, both_orders, verdicts
    from mascot.data.human_ratings import human_pairs, wins_agreement
    from mascot.progress import bar
    from mascot.resume import Journal

    pairs = human_pairs(items, min_gap)
    prompts = both_orders(pairs, style, args.length_neutral)
    journal = Journal(f"bench-pairwise-{tag}-{style}{'-neutral' if args.length_neutral else ''}")
    start, chunk, probs = time.perf_counter(), 16, []
    try:
        with bar(len(prompts), f"pairwise {style}") as progress:
            for k in range(0, len(prompts), chunk):
                done = journal.get(str(k))
                if done is None:
                    dist = backend.choice_distribution(prompts[k: k + chunk], list(CHOICES))
                    done = {"p_a": [d.probs["A"] for d in dist]}
                    journal.add(str(k), done)
                probs.extend(done["p_a"])
                progress.update(len(done["p_a"]))
    finally:
        journal.close()
    wins, bias = verdicts(probs)
    figures = wins_agreement(pairs, wins)  # the rubric rows' own figures, from the two orders' verdicts
    fig, eq, nl = figures["pairs"], figures["equal_length"], figures["controlled"]
    row = {"model": args.model, "method": "pairwise", "style": style, "length_neutral": args.length_neutral,
           "pairs": fig, "equal_length": eq, "controlled": nl, **bias,
           "seconds_per_pair": round((time.perf_counter() - start) / max(len(pairs), 1), 2)}
    with out.open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(f"{Path(args.model).name} {style} pairwise, both orders: {fig['mean']} [{fig['ci_low']}, {fig['ci_high']}] "
          f"on {fig['n']} pairs ({bias['ties']} ties; first position picked {bias['picked_first_position']}); at equal "
          f"length {eq['mean']} [{eq['ci_low']}, {eq['ci_high']}]; not longer {nl['mean']} [{nl['ci_low']}, "
          f"{nl['ci_high']}] n {nl['n']}; {row['seconds_per_pair']} s/pair", flush=True)


def survey(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
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
