"""The `evaluate_group` stage: the trained Director against the base, a random and a round-robin order on
held-out conversations."""
from __future__ import annotations

from pathlib import Path

from mascot.annotate.controls import planted_persona
from mascot.annotate.episodes import Branch, DirectorPerBranch, Sampling, episode_record, roll_forward
from mascot.annotate.function_judge import make_judge, scorer_for
from mascot.annotate.score import resolve_prompt_style, score_units
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.granularity import BLOCK, REPLY
from mascot.io import load_jsonl, read_json, write_json, write_jsonl
from mascot.llm.factory import make_backend
from mascot.policy.evaluate_group import (block_words, build_directors, conversations_table, describe_results,
                                          heldout_conversations, judge_condition, paired_vs, planted_feature,
                                          planted_figures, planted_rate, trained_minus_base_parse_rate,
                                          unconstrained_parse_rates)
from mascot.progress import bar
from mascot.resume import Journal
from mascot.splits import conversation_of


def log_condition(params: Params, experiment_id: str, run_name: str, tags: dict, queries_path: str, metrics: dict,
                  table: dict[str, list]) -> None:
    """One condition's MLflow run: its inputs, settings, figures and conversations table."""
    import mlflow

    from mascot import registry

    p = params.evaluate_group
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=tags):
        registry.log_input_file(queries_path, "eval")
        mlflow.log_params({"evaluate_group.agent_turns": p.agent_turns, "evaluate_group.max_queries": p.max_queries,
                           "evaluate_group.director_temperature": p.director_temperature,
                           "score.mode": params.score.mode})
        mlflow.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))}
                           | {f"usage_{k}": v for k, v in metrics["speaker_usage"].items()})
        mlflow.log_table(data=table, artifact_file="evaluate_group_conversations.json")


def journaled_score(params: Params, condition: str, judges: tuple, prompt_style: str | None,
                    journal_dir: Path | None = None):
    """One condition's `score(units, rubric)` for judge_condition: score_units on the collective rubric with the
    collective judge, on any other with the per-reply one (`judges`: (collective rubric, its judge, per-reply
    judge)). Journaled per condition and rubric (a journal keeps only its last call's records): a killed
    evaluate_group rolls its seeded conversations out again and reuses every judgement already made."""
    collective, judge, reply_judge = judges

    def score(units: list[dict], rubric) -> list[dict]:
        journal = Journal(f"evaluate_group-{condition}-{rubric.name}", journal_dir)
        try:
            return score_units(units, rubric, params.score, judge if rubric is collective else reply_judge, journal,
                               prompt_style=prompt_style)
        finally:
            journal.close()
    return score


def main(params: Params, *, queries_path: str, episodes_path: str, director_dir: str, champion_path: str,
         judge_check_path: str, figures_path: str, conversations_path: str) -> None:
    """`champion_path`: the promote_group stage's decision (the group reward model every condition is scored by);
    `judge_check_path`: the judge's figures (the judge takes the prompt format they chose)."""
    from mascot import registry
    from mascot.reward.scorer import RewardScorer

    p, d = params.evaluate_group, params.train_director
    registry.setup_tracking(params)
    exp = registry.experiment_id(params.mlflow.director_experiment, params.mlflow.artifact_root)
    personas = load_personas(params.prepare.personas_file)
    all_queries = load_jsonl(queries_path)

    queries = heldout_conversations(all_queries, load_jsonl(episodes_path), params.heldout, p.max_queries)
    by_q = {q["query_id"]: q for q in all_queries}
    rm_name, alias = params.train_group_rm.registered_model, d.reward_alias
    rm_version, alias = registry.check_recorded_champion(rm_name, alias, champion_path, "evaluate_group",
                                                         "promote_group")
    scorer = RewardScorer.from_registry(f"models:/{rm_name}@{alias}")
    speaker = make_backend(params.llm.speaker, "llm.speaker")
    # the collective judge (score_group.scorer where set) and the per-reply one: one backend where they are one
    judge = make_judge(params, BLOCK.score_block)
    reply_judge = judge if scorer_for(params, BLOCK.score_block) is params.score.scorer else make_judge(params)
    style = resolve_prompt_style(params.score, judge_check_path)
    director_version = read_json(Path(director_dir) / "registered.json", "run train_director first")
    sampling = Sampling(params.episodes.temperature, params.episodes.top_p, p.max_tokens, p.seed)
    git = {**registry.git_state(), **registry.dvc_experiment_tags(), **registry.decision_tags(champion_path)}
    directors = build_directors(params, personas, director_dir)
    branches = {c: [Branch(q["query_id"], 0, q["context"]) for q in queries] for c in p.conditions}
    everyone = [b for c in p.conditions for b in branches[c]]
    # every condition's conversations in one rollout: each turn's speaker replies decode in one batch
    rollout = bar(len(everyone) * p.agent_turns, "evaluate_group rollout (agent turns)")
    roll_forward(everyone, p.agent_turns, DirectorPerBranch({id(b): directors[c] for c in p.conditions
                                                             for b in branches[c]}),
                 speaker, personas, sampling, p.user_turns, progress=rollout.update)
    rollout.close()
    # after the rollout (its batches seed themselves): the same Directors and prompts, without the grammar
    free = (unconstrained_parse_rates(directors, queries, p.unconstrained_samples, d.temperature)
            if p.measure_unconstrained else {})
    rubrics = (BLOCK.rubric(params), REPLY.rubric(params))
    results, records_all, totals, words, features, rates = {}, [], {}, {}, {}, {}
    persona = planted_persona(scorer_for(params, BLOCK.score_block))
    for condition in p.conditions:
        records = [episode_record(b, by_q[b.query_id].get("source"), {"director": directors[condition].name,
                                                                       "speaker": speaker.model_name},
                                  sampling.__dict__) for b in branches[condition]]
        metrics, totals[condition], judged = judge_condition(
            records, by_q, personas, rubrics, journaled_score(params, condition, (rubrics[0], judge, reply_judge), style),
            scorer.score)
        if persona:  # a stage-2 control: the rate of what its judge plants, beside the judge's own figures
            features[condition] = planted_feature(records, persona)
            rates[condition] = planted_rate(features[condition], params.stats.min_n)
            metrics["planted_feature_rate"] = rates[condition]["mean"]
        if condition in free:
            metrics.update(directive_parse_rate_unconstrained=free[condition]["parse_rate"],
                           unconstrained_invalid_reasons=free[condition]["invalid_reasons"])
        tags = {**git, "condition": condition, "evaluation": "true", "group_reward_model": rm_name,
                "group_reward_model_version": str(rm_version), "queries": str(len(queries))}
        if condition == "trained":
            tags.update(director_model=director_version["name"], director_version=director_version["version"])
        log_condition(params, exp, f"eval-group-{condition}-{git['git_commit'][:7]}", tags, queries_path, metrics,
                      conversations_table(judged, by_q))
        results[condition] = metrics
        words[condition] = block_words(records)
        records_all += [{"condition": condition, **e} for e in judged]
    if (free_vs := trained_minus_base_parse_rate(free, params.stats.min_n)) is not None:
        results["trained_minus_base_unconstrained_parse_rate"] = free_vs
    if persona:
        results["planted_feature"] = planted_figures(features, persona, params.stats.min_n, rates)
    conversation = {q["query_id"]: conversation_of(q) for q in queries}
    if "trained" in totals and "base" in totals:  # what GRPO did to the Director, also at equal block length
        results["trained_minus_base_collective_total"] = paired_vs(
            totals["base"], totals["trained"], params.stats.min_n, (words["base"], words["trained"]), conversation)
    if "random" in totals:
        results["minus_random_collective_total"] = {
            c: paired_vs(totals["random"], t, params.stats.min_n, (words["random"], words[c]), conversation)
            for c, t in totals.items() if c != "random"}
    speaker.close()
    judge.close()
    if reply_judge is not judge:
        reply_judge.close()
    write_json(figures_path, results)
    write_jsonl(conversations_path, records_all)
    for line in describe_results(results, p.conditions, len(queries), p.agent_turns, params.stats.min_n):
        print(line)
