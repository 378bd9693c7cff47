"""The `score` and `score_group` stages: each candidate (reply or block) judged on its rubric."""
from __future__ import annotations

from pathlib import Path

from mascot.annotate.director import example_episodes
from mascot.annotate.function_judge import make_judge
from mascot.annotate.score import mean_total_by_source, resolve_prompt_style, score_metrics, score_units
from mascot.data.personas import load_personas
from mascot.granularity import BLOCK, Granularity, REPLY
from mascot.io import load_jsonl, write_json, write_jsonl
from mascot.resume import Journal


def _run(params, units: list[dict], granularity: Granularity, journal_name: str, out: str, metrics: str,
         queries: dict[str, dict]) -> dict:
    """Score the units of `granularity` on the rubric its params block names."""
    backend = make_judge(params, granularity.score_block)
    journal, stats = Journal(journal_name), {}
    style = resolve_prompt_style(params.score)
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


def main(params, queries_path: str = "data/queries.jsonl", candidates_path: str = "data/candidates.jsonl",
         out: str = "data/scores.jsonl", metrics: str = "reports/figures/score.json") -> None:
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    units = REPLY.judge_units(load_jsonl(candidates_path), queries, load_personas(params.prepare.personas_file))
    _run(params, units, REPLY, "score", out, metrics, queries)


def main_group(params, queries_path: str = "data/queries.jsonl", episodes_path: str = "data/group/episodes.jsonl",
               out: str = "data/group/scores.jsonl", metrics: str = "reports/figures/score_group.json",
               examples: str = "reports/group/examples.md") -> None:
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    episodes = load_jsonl(episodes_path)
    units = BLOCK.judge_units(episodes, queries, load_personas(params.prepare.personas_file))
    _run(params, units, BLOCK, "score_group", out, metrics, queries)
    Path(examples).parent.mkdir(parents=True, exist_ok=True)
    Path(examples).write_text("# Example episodes (collective rubric)\n\n"
                              + example_episodes(episodes, load_jsonl(out), queries), encoding="utf-8")
