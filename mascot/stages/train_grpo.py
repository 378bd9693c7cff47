"""The `train_grpo` stage: GRPO on a speaker policy against the promoted reward model."""
from __future__ import annotations

import os
from pathlib import Path

from mascot import registry
from mascot.annotate.function_judge import make_judge
from mascot.annotate.score import resolve_prompt_style
from mascot.config import GRPOParams, Params
from mascot.data.personas import load_personas
from mascot.granularity import REPLY
from mascot.io import load_jsonl
from mascot.launch import is_main_process
from mascot.policy.engine import PolicyStage, champion_scorer, run_policy_stage
from mascot.policy.grpo import base_policy_calibration, grpo_prompts, speaker_watch
from mascot.policy.rewards import (LengthCalibrated, WithinGroupLength, make_format_reward, make_reward_model_reward,
                                   stop_token_ids)


def main(params: Params, *, queries_path: str, pairs_path: str, champion_path: str, judge_check_path: str, policy_dir: str,
         figures_path: str, rewards_plot: str, watch_plot: str) -> None:
    """`champion_path`: the promote stage's decision, which names the reward model this policy trains against;
    `judge_check_path`: the judge's figures (the watch's judge takes the prompt format they chose)."""
    p: GRPOParams = params.grpo
    os.environ.setdefault("HF_MLFLOW_LOG_ARTIFACTS", "0")
    registry.setup_tracking(params)
    rm_name = params.train_rm.registered_model
    _, rm_alias = registry.check_recorded_champion(rm_name, p.reward_alias, champion_path, "train_grpo",
                                                   "promote")
    rm_version, rm_uri, scorer = champion_scorer(rm_name, rm_alias, "train_grpo", "promote")
    personas = load_personas(params.prepare.personas_file)
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    rows = grpo_prompts(queries, load_jsonl(pairs_path), personas, p)
    tags = {**registry.git_state(), "reward_model": rm_name, "reward_model_version": rm_version,
            "reward_model_alias": rm_alias, "reward_model_uri": rm_uri,
            "personas": ",".join(sorted({r["persona"] for r in rows})), "base_model": p.base_model,
            "rubric_aggregate": REPLY.rubric(params).aggregation,
            **registry.base_model_tags(p.base_model), **registry.decision_tags(champion_path)}
    series = {rewards_plot: ["step", "reward", "rewards/reward_model/mean", "rewards/format_reward/mean", "reward_std",
                           "frac_reward_zero_std", "completions/clipped_ratio"],
              str(Path(rewards_plot).with_name("completion_length.csv")): ["step", "completions/mean_length"]}
    reward_model = make_reward_model_reward(scorer, personas)
    calibrated = None  # a lever against length: its figures() go to the stage's metrics after training
    if p.length_calibration.enabled and p.length_calibration.method == "within_group":
        reward_model = calibrated = WithinGroupLength(reward_model)
        print("train_grpo: length calibration within each prompt's group: GRPO is paid the reward model's score "
              "less the group's own slope on words")
    elif p.length_calibration.enabled:
        calibration = base_policy_calibration(p, rows, scorer, personas)
        reward_model = calibrated = LengthCalibrated(reward_model, calibration)
        fitted = calibration.figures()
        tags.update({k: str(v) for k, v in fitted.items()})
        print(f"train_grpo: length calibration on {calibration.n} base-policy answers "
              f"({calibration.low:g}-{calibration.high:g} words): the reward model paid "
              f"{fitted['length_calibration_slope_per_word']:+.4g} a word (R^2 {calibration.r2:.3f}, one-sided "
              f"p {calibration.trend_p:.3g}); " + ("GRPO is paid the score less that fit" if calibration.active else
                                                   "no rise with words to take off: GRPO is paid the score as it is"))
    judge = None
    if p.watch.enabled and is_main_process():
        judge = make_judge(params)
    try:
        watch = (speaker_watch(params, p, queries, personas, scorer, judge,
                               resolve_prompt_style(params.score, judge_check_path)) if judge is not None else None)
        stage = PolicyStage(
            "grpo", p, params.mlflow.policy_experiment, "LoRA speaker policy trained with GRPO",
            [reward_model, make_format_reward(stop_token_ids(p.base_model))],
            [p.reward_weight, p.format_weight], tags, policy_dir, figures_path, series, watch=watch,
            watch_plot=watch_plot, inputs=[(pairs_path, "train")],
            extra_metrics=(lambda history: calibrated.figures()) if calibrated is not None else None)
        metrics, version = run_policy_stage(params, stage, rows)
    finally:
        if judge is not None:
            judge.close()
    if version is None:  # a DDP rank other than the main one
        return
    if watch is not None:
        print(f"train_grpo: watch verdict {metrics['watch_verdict']}: {metrics['watch_why']}")
    print(f"train_grpo: {metrics['steps']} steps, reward {metrics['reward_first_step']} -> "
          f"{metrics['reward_last_step']}, reward model {rm_name} v{rm_version} ({rm_uri}); "
          f"registered {version.name} v{version.version}")
