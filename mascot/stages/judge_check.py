"""The `judge_check` and `judge_check_group` stages: the judge on its reference set (and against people)."""
from __future__ import annotations

from pathlib import Path

from mascot.annotate.function_judge import make_judge
from mascot.annotate.judge_check import (describe_check, judge_formats, load_human_items, log_check, plot_distributions,
                                         run_judge_check, summarise)
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.data.prepare import load_source, token_counter
from mascot.granularity import GRANULARITIES
from mascot.io import BadRows, InputError, load_jsonl, write_json, write_jsonl
from mascot.resume import Journal


def main(params: Params, *, queries_path: str, reference_path: str, scores_path: str, report_path: str, plot_path: str,
         figures_path: str, human_items_path: str | None = None, human_scores_path: str | None = None,
         judge_check_path: str | None = None, granularity: str = "reply") -> None:
    """Build the granularity's reference set from the corpus, score it on the rubric its params block names,
    and write the figures (metrics, report, plot, MLflow run in the judge experiment). `queries_path`: the
    prepared queries, whose dialogues the reference set leaves out; the human set's items (and where their
    scores go) for the reply judge; `judge_check_path`: the reply judge's figures, whose chosen format a check
    that measures none takes."""
    g = GRANULARITIES[granularity]
    stage = g.judge_check_stage
    block, p, rubric = getattr(params, stage), params.prepare, g.rubric(params)
    files = {"items": reference_path, "scores": scores_path, "report": report_path, "plot": plot_path}
    personas = load_personas(p.personas_file)
    bad = BadRows(skip=p.skip_bad_rows)
    dialogues = [d for spec in p.sources for d in load_source(spec, bad)]
    used = {q["dialogue_id"] for q in load_jsonl(queries_path)} if Path(queries_path).exists() else set()
    items = g.reference_set(dialogues, personas, p.max_context_tokens, token_counter(p.tokenizer), block, used)
    if not items:
        raise InputError(f"{stage}: the corpus gave no reference items (no user turn followed by enough supporter "
                         "turns, no QMSum answers); add a dialogue source")
    write_jsonl(files["items"], items)
    styles, modes = judge_formats(params, block, g.score_block, judge_check_path)
    human_items = load_human_items(params, human_items_path) if g.human_ratings and human_items_path else None
    backend = make_judge(params, g.score_block)
    journals = {}  # one per (format, mode, part): a journal keeps only its own run's records

    def journal_for(style, mode, part):
        name = f"{stage}-{style}-{mode}" + ("" if part == "reference" else f"-{part}")
        return journals.setdefault(name, Journal(name))
    try:
        report, raw, candidates = run_judge_check(items, personas, params.score, backend, styles, modes, journal_for,
                                                  g, rubric, human_items, params.human.min_gap,
                                                  params.stats.min_n, getattr(block, "survey_min_gap", 2))
    finally:
        for j in journals.values():
            j.close()
        backend.close()
    metrics, chosen, score_rows, human_rows = summarise(report, raw, candidates, items, styles, modes, g, rubric,
                                                        backend.model_name, human_items)
    write_jsonl(files["scores"], score_rows)
    if human_scores_path:  # train_rm measures its reward model beside the judge on the same human pairs
        write_jsonl(human_scores_path, human_rows)
    write_json(files["report"], report)
    write_json(figures_path, metrics)
    Path(files["plot"]).parent.mkdir(parents=True, exist_ok=True)
    plot_distributions(candidates, raw, files["plot"])
    log_check(params, stage, metrics, styles, modes, g, files)
    for line in describe_check(stage, metrics, report, items, styles, modes, g, rubric, human_items,
                               params.stats.min_n):
        print(line)


def main_group(params: Params, *, queries_path: str, reference_path: str, scores_path: str, report_path: str,
               plot_path: str, figures_path: str, judge_check_path: str) -> None:
    """Stage 2's judge on the collective rubric: human blocks against echo, off-topic and redundant ones."""
    main(params, queries_path=queries_path, reference_path=reference_path, scores_path=scores_path,
         report_path=report_path, plot_path=plot_path, figures_path=figures_path, judge_check_path=judge_check_path,
         granularity="block")
