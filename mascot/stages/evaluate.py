"""The `evaluate` stage: the GRPO policy against the base policy on held-out queries."""
from __future__ import annotations

from pathlib import Path
import time

from mascot.annotate.controls import planted_pattern
from mascot.annotate.function_judge import make_judge
from mascot.annotate.rubric import load_rubric
from mascot.annotate.score import resolve_prompt_style
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.io import load_jsonl, read_json, write_json, write_jsonl
from mascot.policy.evaluate import (completions_table, describe_differences, evaluate_policy, flat_differences,
                                    length_verdict, load_policy, paired_differences)
from mascot.splits import conversation_of, held_out


def main(params: Params, *, queries_path: str, policy_dir: str, champion_path: str, judge_check_path: str,
         figures_path: str, replies_path: str) -> None:
    """`champion_path`: the promote stage's decision (the reward model both policies are scored by);
    `judge_check_path`: the judge's figures (the judge takes the prompt format they chose)."""
    import mlflow
    from mlflow.entities import Metric, RunTag

    from mascot import registry
    from mascot.llm.local_backend import LocalBackend
    from mascot.reward.scorer import RewardScorer

    registry.setup_tracking(params)
    exp = registry.experiment_id(params.mlflow.policy_experiment, params.mlflow.artifact_root)
    personas = load_personas(params.prepare.personas_file)

    # queries no model trained on: never in pairs (the reward model), never GRPO prompts (the policy)
    queries = held_out(load_jsonl(queries_path), params.heldout, params.evaluate.max_queries)
    rm_name, alias = params.train_rm.registered_model, params.grpo.reward_alias
    rm_version, alias = registry.check_recorded_champion(rm_name, alias, champion_path, "evaluate", "promote")
    scorer = RewardScorer.from_registry(f"models:/{rm_name}@{alias}")
    judge = make_judge(params)
    policy = read_json(Path(policy_dir) / "registered.json", "run train_grpo first")
    results, all_replies, run_ids = {}, [], {}
    git = {**registry.git_state(), **registry.dvc_experiment_tags(), **registry.decision_tags(champion_path)}
    for label, adapter in (("base", None), ("grpo", policy_dir)):
        model, tokenizer = load_policy(params.grpo.base_model, adapter)
        backend = LocalBackend.from_model(model, tokenizer, f"{params.grpo.base_model}+{label}",
                                          params.llm.speaker.batch_size)
        tags = {**git, "policy": label, "evaluation": "true", "reward_model": rm_name,
                "reward_model_version": str(rm_version), "queries": str(len(queries)),
                "rubric_aggregate": load_rubric(params.score.rubric).aggregation}
        if label == "grpo":
            tags.update(policy_model=policy["name"], policy_version=policy["version"])
        with mlflow.start_run(experiment_id=exp, run_name=f"eval-{label}-{git['git_commit'][:7]}", tags=tags) as run:
            run_ids[label] = run.info.run_id
            registry.log_input_file(queries_path, "eval")
            metrics, replies = evaluate_policy(backend, queries, personas, judge, scorer, params,
                                               resolve_prompt_style(params.score, judge_check_path))
            mlflow.log_params({"evaluate.max_queries": params.evaluate.max_queries,
                               "evaluate.temperature": params.evaluate.temperature,
                               "evaluate.max_tokens": params.evaluate.max_tokens, "score.mode": params.score.mode})
            mlflow.log_metrics({k: v for k, v in metrics.items() if v is not None})
            # every reply where `mlflow ui` shows tables; the same file name in both runs, to read side by side
            mlflow.log_table(data=completions_table(replies, {q["query_id"]: q for q in queries}),
                             artifact_file="evaluate_completions.json")
        results[label] = metrics
        all_replies += [{"policy": label, **r} for r in replies]
    diffs = paired_differences([r for r in all_replies if r["policy"] == "base"],
                               [r for r in all_replies if r["policy"] == "grpo"],
                               tuple(load_rubric(params.score.rubric).dimensions), params.stats.min_n,
                               {q["query_id"]: conversation_of(q) for q in queries}, planted_pattern(params.score.scorer))
    results["grpo_minus_base"] = diffs
    results["judge_gain_is"] = length_verdict(diffs["judge_total"])
    results["rm_gain_is"] = length_verdict(diffs["rm_score"])
    # the comparison beside the GRPO run's own figures in `mlflow ui`
    mlflow.MlflowClient().log_batch(run_ids["grpo"], metrics=[
        Metric(k, v, int(time.time() * 1000), 0) for k, v in flat_differences(diffs).items()],
        tags=[RunTag("judge_gain_is", results["judge_gain_is"])])
    write_json(figures_path, results)
    write_jsonl(replies_path, all_replies)

    for line in describe_differences(diffs, params.stats.min_n):
        print(line)
    print(f"  the judge's gain is: {results['judge_gain_is']} (gain: above 0 at equal length too; length: above 0 "
          "raw only, or at equal length only by extrapolation; none: no raw gain)")
