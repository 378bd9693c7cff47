"""The `score` and `score_group` stages: each candidate (reply or block) judged on its rubric."""
from __future__ import annotations

from pathlib import Path

from mascot.annotate.director import example_episodes
from mascot.annotate.function_judge import make_judge
from mascot.annotate.score import mean_total_by_source, resolve_prompt_style, score_metrics, score_units
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.granularity import BLOCK, Granularity, REPLY
from mascot.io import load_jsonl, write_json, write_jsonl
from mascot.resume import Journal


def _run(params: Params, units: list[dict], granularity: Granularity, journal_name: str, out: str, metrics: str,
         queries: dict[str, dict], judge_check_path: str) -> dict:
    """Score the units of `granularity` on the rubric its params block names."""
    backend = make_judge(params, granularity.score_block)
    journal, stats = Journal(journal_name), {}
    style = resolve_prompt_style(params.score, judge_check_path)
    rubric = granularity.rubric(params)
    try:
        scores = score_units(units, rubric, params.score, backend, journal, stats=stats, prompt_style=style)
    finally:
        journal.close()
        backend.close()
    write_jsonl(out, scores)
    m = {**score_metrics(scores, rubric, granularity.group_fields), "rubric": rubric.name, "prompt_style": style,
         "resumed": stats["reused"], "mean_total_reward_by_source": mean_total_by_source(scores, queries)}
    write_json(metrics, m)
    print(f"{journal_name}: {m['scored']} scored, {m['unscored']} unscored on the {rubric.name} rubric -> {out}")
    return m


def main(params: Params, *, queries_path: str, candidates_path: str, judge_check_path: str, scores_path: str,
         figures_path: str) -> None:
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    units = REPLY.judge_units(load_jsonl(candidates_path), queries, load_personas(params.prepare.personas_file))
    _run(params, units, REPLY, "score", scores_path, figures_path, queries, judge_check_path)


def main_group(params: Params, *, queries_path: str, episodes_path: str, judge_check_path: str, scores_path: str,
               figures_path: str, examples_path: str) -> None:
    """`judge_check_path`: the reply judge's check, whose chosen prompt format `score.prompt_style: auto` takes."""
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    episodes = load_jsonl(episodes_path)
    units = BLOCK.judge_units(episodes, queries, load_personas(params.prepare.personas_file))
    _run(params, units, BLOCK, "score_group", scores_path, figures_path, queries, judge_check_path)
    Path(examples_path).parent.mkdir(parents=True, exist_ok=True)
    Path(examples_path).write_text("# Example episodes (collective rubric)\n\n"
                                   + example_episodes(episodes, load_jsonl(scores_path), queries), encoding="utf-8")
