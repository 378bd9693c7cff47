"""The `evaluate` stage: the base policy and the GRPO policy side by side on held-out queries.

Each policy answers the same queries; replies get the champion reward model's score and the data half's
rubric judge scores. One MLflow run per policy (comparable in `mlflow ui`), and a DVC metrics file.
"""
from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

from mascot.annotate.function_judge import make_judge
from mascot.annotate.generate import generate_candidates
from mascot.annotate.rubric import load_rubric
from mascot.annotate.score import resolve_prompt_style, score_candidates
from mascot.config import GenerateParams
from mascot.data.personas import load_personas
from mascot.granularity import persona_fields
from mascot.io import columns_of, load_jsonl, write_json, write_jsonl
from mascot.splits import held_out
from mascot.stats import DEFAULT_MIN_N, describe, mean_with_ci


def evaluate_policy(backend, queries, personas, judge, scorer, params) -> tuple[dict, list[dict]]:
    gen = GenerateParams(num_agents_per_query=1, prompt_style=params.grpo.prompt_style,
                         temperature=params.evaluate.temperature, max_tokens=params.evaluate.max_tokens,
                         seed=params.evaluate.seed)
    candidates = generate_candidates(queries, personas, gen, backend)
    by_q = {q["query_id"]: q for q in queries}
    rm = scorer.score([(persona_fields(personas[c["persona"]]), by_q[c["query_id"]]["context"], c["text"])
                       for c in candidates])
    scores = score_candidates(candidates, by_q, personas, params.score, judge,
                              prompt_style=resolve_prompt_style(params.score))
    scored = [s for s in scores if s["status"] == "scored"]
    metrics = {"replies": len(candidates), "rm_mean_score": round(fmean(rm), 4) if rm else None,
               "mean_reply_words": round(fmean(len(c["text"].split()) for c in candidates), 2) if candidates else None,
               # replies cut at the token budget: a policy that gains only by running to the limit shows here
               "clipped_fraction": round(fmean(c.get("finish_reason") == "length" for c in candidates), 4)
               if candidates else None,
               "judge_scored": len(scored),
               "judge_total_reward": round(fmean(s["total_reward"] for s in scored), 4) if scored else None,
               **{f"judge_{d}": round(fmean(s["scores"][d] for s in scored), 4) if scored else None
                  for d in load_rubric(params.score.rubric).dimensions}}
    replies = [{**c, "rm_score": r, "judge": s} for c, r, s in zip(candidates, rm, scores)]
    return metrics, replies


def completions_table(replies: list[dict], queries: dict[str, dict]) -> dict[str, list]:
    """The evaluated replies as table columns: query, persona, the user's last message, the reply, how it ended,
    the reward model's score, the judge's total and each of its dimensions."""
    rows = []
    for r in replies:
        judge = r.get("judge") or {}
        rows.append({"probe": r["query_id"], "persona": r.get("persona"),
                     "prompt": queries[r["query_id"]]["context"][-1]["content"], "completion": r["text"],
                     "finish_reason": r.get("finish_reason"), "reward_model": r.get("rm_score"),
                     "judge_total": judge.get("total_reward"),
                     **{f"judge_{d}": v for d, v in (judge.get("scores") or {}).items()}})
    return columns_of(rows)


def _judged(name: str | None):
    """A reply's judge total (name None) or one dimension's score; None when the judge left it unscored."""
    def get(r):
        if r["judge"]["status"] != "scored":
            return None
        return r["judge"]["total_reward"] if name is None else r["judge"]["scores"][name]
    return get


def _words(r) -> int:
    return len(r["text"].split())


def paired_differences(base: list[dict], grpo: list[dict], dimensions: tuple[str, ...] = (),
                       min_n: int = DEFAULT_MIN_N) -> dict:
    """GRPO minus base on the same queries: mean difference, paired bootstrap 95% interval, n, for the
    reward-model score, the judge total, each rubric dimension in `dimensions` and the reply length (words);
    and the judge total again on the probes where the GRPO reply is not longer than the base reply, so that
    a gain that is all length shows as such. An interval that holds 0 is no evidence of a difference."""
    b_by = {r["candidate_id"].rsplit("|", 1)[0]: r for r in base}
    pairs = [(b_by[k], r) for r in grpo if (k := r["candidate_id"].rsplit("|", 1)[0]) in b_by]
    not_longer = [(b, g) for b, g in pairs if _words(g) <= _words(b)]
    out = {}
    for name, get, subset in (("rm_score", lambda r: r["rm_score"], pairs),
                              ("judge_total", _judged(None), pairs),
                              *((f"judge_{d}", _judged(d), pairs) for d in dimensions),
                              ("judge_total_not_longer", _judged(None), not_longer),
                              ("reply_words", _words, pairs)):
        vals = [(get(b), get(g)) for b, g in subset]
        vals = [(x, y) for x, y in vals if x is not None and y is not None]
        fig = mean_with_ci([y - x for x, y in vals], min_n=min_n)
        out[name] = {"base": round(fmean(x for x, _ in vals), 4) if vals else None,
                     "grpo": round(fmean(y for _, y in vals), 4) if vals else None,
                     "diff": fig["mean"], **{k: v for k, v in fig.items() if k != "mean"}}
    return out


def load_policy(base_model: str, adapter_dir: str | None):
    from transformers import AutoTokenizer

    from mascot.precision import load_causal_lm

    return load_causal_lm(base_model, adapter_dir=adapter_dir), AutoTokenizer.from_pretrained(base_model)


def main(params, queries_path: str = "data/queries.jsonl",
         policy_dir: str = "models/policy", metrics_path: str = "metrics/evaluate.json",
         replies_path: str = "reports/evaluate_replies.jsonl") -> None:
    import mlflow

    from mascot import registry
    from mascot.llm.local_backend import LocalBackend
    from mascot.reward.scorer import RewardScorer

    registry.setup_tracking(params)
    exp = registry.experiment_id(params.mlflow.policy_experiment, params.mlflow.artifact_root)
    personas = load_personas(params.prepare.personas_file)

    # queries no model trained on: never in pairs (the reward model), never GRPO prompts (the policy)
    queries = held_out(load_jsonl(queries_path), params.heldout, params.evaluate.max_queries)
    rm_name, alias = params.train_rm.registered_model, params.grpo.reward_alias
    rm_version = registry.check_recorded_champion(rm_name, alias, "metrics/promote.json", "evaluate", "promote")
    scorer = RewardScorer.from_registry(f"models:/{rm_name}@{alias}")
    judge = make_judge(params)
    policy = json.loads((Path(policy_dir) / "registered.json").read_text())
    results, all_replies = {}, []
    git = {**registry.git_state(), **registry.dvc_experiment_tags()}
    for label, adapter in (("base", None), ("grpo", policy_dir)):
        model, tokenizer = load_policy(params.grpo.base_model, adapter)
        backend = LocalBackend.from_model(model, tokenizer, f"{params.grpo.base_model}+{label}",
                                          params.llm.speaker.batch_size)
        tags = {**git, "policy": label, "evaluation": "true", "reward_model": rm_name,
                "reward_model_version": str(rm_version), "queries": str(len(queries)),
                "rubric_aggregate": load_rubric(params.score.rubric).aggregation}
        if label == "grpo":
            tags.update(policy_model=policy["name"], policy_version=policy["version"])
        with mlflow.start_run(experiment_id=exp, run_name=f"eval-{label}-{git['git_commit'][:7]}", tags=tags):
            registry.log_input_file(queries_path, "eval")
            metrics, replies = evaluate_policy(backend, queries, personas, judge, scorer, params)
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
                               tuple(load_rubric(params.score.rubric).dimensions), params.stats.min_n)
    results["grpo_minus_base"] = diffs
    write_json(metrics_path, results)
    write_jsonl(replies_path, all_replies)

    print("evaluate: GRPO - base on the same held-out queries (paired bootstrap 95% interval, n):")
    for name, d in diffs.items():
        print(f"  {name}: base {d['base']} grpo {d['grpo']} diff {describe({**d, 'mean': d['diff']}, params.stats.min_n)}")
