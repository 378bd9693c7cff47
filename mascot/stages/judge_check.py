"""The `judge_check` and `judge_check_group` stages: the judge on its reference set (and against people)."""
from __future__ import annotations

from pathlib import Path

from mascot.annotate.function_judge import make_judge
from mascot.annotate.judge_check import (HUMAN_SCORES, describe_check, judge_formats, load_human_items, log_check,
                                         plot_distributions, run_judge_check, summarise)
from mascot.data.personas import load_personas
from mascot.data.prepare import load_source, token_counter
from mascot.granularity import GRANULARITIES
from mascot.io import BadRows, InputError, load_jsonl, write_json, write_jsonl
from mascot.resume import Journal


def main(params, granularity: str = "reply") -> None:
    """Build the granularity's reference set from the corpus, score it on the rubric its params block names,
    and write the figures (metrics, report, plot, MLflow run in the judge experiment)."""
    g = GRANULARITIES[granularity]
    stage = Path(g.judge_check_metrics).stem  # judge_check | judge_check_group
    block, p, rubric = getattr(params, stage), params.prepare, g.rubric(params)
    files = {"items": f"data/{stage}/reference.jsonl", "scores": f"data/{stage}/scores.jsonl",
             "report": f"reports/{stage}.json", "plot": f"plots/{stage}/score_distribution.png"}
    personas = load_personas(p.personas_file)
    bad = BadRows(skip=p.skip_bad_rows)
    dialogues = [d for spec in p.sources for d in load_source(spec, bad)]
    used = {q["dialogue_id"] for q in load_jsonl("data/queries.jsonl")} if Path("data/queries.jsonl").exists() else set()
    items = g.reference_set(dialogues, personas, p.max_context_tokens, token_counter(p.tokenizer), block, used)
    if not items:
        raise InputError(f"{stage}: the corpus gave no reference items (no user turn followed by enough supporter "
                         "turns, no QMSum answers); add a dialogue source")
    write_jsonl(files["items"], items)
    styles, modes = judge_formats(params, block, g.score_block)
    human_items = load_human_items(params) if g.human_ratings else None
    backend = make_judge(params, g.score_block)
    journals = {}  # one per (format, mode, part): a journal keeps only its own run's records

    def journal_for(style, mode, part):
        name = f"{stage}-{style}-{mode}" + ("" if part == "reference" else f"-{part}")
        return journals.setdefault(name, Journal(name))
    try:
        report, raw, candidates = run_judge_check(items, personas, params.score, backend, styles, modes, journal_for,
                                                  g, rubric, human_items, params.human.min_gap,
                                                  params.stats.min_n)
    finally:
        for j in journals.values():
            j.close()
        backend.close()
    metrics, chosen, score_rows, human_rows = summarise(report, raw, candidates, items, styles, modes, g, rubric,
                                                        backend.model_name, human_items)
    write_jsonl(files["scores"], score_rows)
    if g.human_ratings:  # train_rm measures its reward model beside the judge on the same human pairs
        write_jsonl(HUMAN_SCORES, human_rows)
    write_json(files["report"], report)
    write_json(g.judge_check_metrics, metrics)
    Path(files["plot"]).parent.mkdir(parents=True, exist_ok=True)
    plot_distributions(candidates, raw, files["plot"])
    log_check(params, stage, metrics, styles, modes, g, files)
    for line in describe_check(stage, metrics, report, items, styles, modes, g, rubric, human_items,
                               params.stats.min_n):
        print(line)


def main_group(params) -> None:
    """Stage 2's judge on the collective rubric: human blocks against echo, off-topic and redundant ones."""
    main(params, "block")
