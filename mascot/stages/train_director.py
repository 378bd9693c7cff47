"""The `train_director` stage: GRPO on the Director against the promoted group reward model."""
from __future__ import annotations

import os

from mascot.annotate.director import directive_pattern
from mascot.annotate.episodes import Sampling, speaker_sampling
from mascot.annotate.function_judge import make_judge
from mascot.annotate.score import resolve_prompt_style
from mascot.config import DirectorParams, Params
from mascot.data.personas import load_personas
from mascot.granularity import BLOCK
from mascot.io import load_jsonl
from mascot.launch import is_main_process
from mascot.llm.factory import make_backend
from mascot.policy.director import (director_states, director_watch, length_figures, make_director_rewards,
                                    unparseable_floor)


def main(params: Params, *, queries_path: str, episodes_path: str, champion_path: str, judge_check_path: str,
         director_dir: str, figures_path: str, rewards_plot: str, watch_plot: str) -> None:
    """`champion_path`: the promote_group stage's decision, which names the group reward model the Director trains
    against; `judge_check_path`: the judge's figures (the watch's judge takes the prompt format they chose)."""
    from mascot import registry
    from mascot.policy.choice_probe import ChoiceProbe, choice_step_figures, rows_prompts
    from mascot.policy.engine import PolicyStage, champion_scorer, run_policy_stage

    p: DirectorParams = params.train_director
    os.environ.setdefault("HF_MLFLOW_LOG_ARTIFACTS", "0")
    registry.setup_tracking(params)
    rm_name = params.train_group_rm.registered_model
    _, rm_alias = registry.check_recorded_champion(rm_name, p.reward_alias, champion_path,
                                                   "train_director", "promote_group")
    rm_version, rm_uri, scorer = champion_scorer(rm_name, rm_alias, "train_director", "promote_group")
    personas = load_personas(params.prepare.personas_file)
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    episodes = load_jsonl(episodes_path)
    rows = director_states(episodes, queries, personas, p)
    speaker = make_backend(params.llm.speaker, "llm.speaker")
    rollout = Sampling(**{**speaker_sampling(params.episodes).__dict__, "max_tokens": p.rollout_max_tokens})
    tags = {**registry.git_state(), "reward_model": rm_name, "reward_model_version": rm_version,
            "reward_model_alias": rm_alias, "reward_model_uri": rm_uri, "speaker_model": speaker.model_name,
            "base_model": p.base_model, "granularity": "block", "rubric_aggregate": BLOCK.rubric(params).aggregation,
            **registry.base_model_tags(p.base_model), **registry.decision_tags(champion_path)}

    floor = unparseable_floor(scorer, episodes, queries)
    rewards = make_director_rewards(scorer, speaker, personas, p, rollout, params.episodes.constrain_directives, floor)
    probe = ChoiceProbe(rows_prompts(rows, p.choice_probe), list(personas), p.prompt_style) if p.choice_probe else None

    def format_figures(history: list[dict]) -> dict:
        # the policy samples freely (its format reward teaches the form): this is its unconstrained parse rate;
        # 1.0 by construction under train_director.constrain_rollouts
        fmt = [h.get("rewards/directive_format/mean") for h in history]
        return {"directive_format_first_step": fmt[0] if fmt else None,
                "directive_format_last_step": fmt[-1] if fmt else None,
                "completion_kinds": dict(rewards[1].completion_kinds), "unparseable_floor": floor,
                **length_figures(rewards[0].length["slopes"], p.length_calibration.enabled),
                **choice_step_figures(rewards[0].choices["steps"]), **(probe.figures() if probe else {})}

    series = {rewards_plot: ["step", "reward", "rewards/group_reward_model/mean", "rewards/directive_format/mean",
                           "rewards/speaker_diversity/mean", "completions/mean_length", "reward_std",
                           "frac_reward_zero_std", "completions/clipped_ratio"]}

    judge = make_judge(params, BLOCK.score_block) if p.watch.enabled and is_main_process() else None
    try:
        watch = (director_watch(params, p, queries, personas, scorer, speaker, judge, rollout,
                                resolve_prompt_style(params.score, judge_check_path)) if judge else None)
        stage = PolicyStage(
            "train_director", p, params.mlflow.director_experiment,
            "LoRA Director policy (one directive per completion) trained with GRPO", rewards,
            [p.reward_weight, p.format_weight, p.diversity_weight], tags, director_dir, figures_path, series,
            format_figures, watch=watch, watch_plot=watch_plot, inputs=[(episodes_path, "train")],
            completion_regex=directive_pattern(list(personas), p.prompt_style == "transcript")
            if p.constrain_rollouts else None,
            rollout_regexes=[directive_pattern([agent], p.prompt_style == "transcript") for agent in personas]
            if p.explore_choices == "stratified" else None, counters={"completion_kinds": rewards[1].completion_kinds,
                                                                       "length": rewards[0].length},
            callbacks=[probe] if probe and is_main_process() else [])
        metrics, version = run_policy_stage(params, stage, rows)
    finally:
        speaker.close()
        if judge is not None:
            judge.close()
    if version is None:  # a DDP rank other than the main one
        return
    print(f"train_director: {metrics['steps']} steps on {len(rows)} Director states, reward "
          f"{metrics['reward_first_step']} -> {metrics['reward_last_step']}, directive format "
          f"{metrics['directive_format_first_step']} -> {metrics['directive_format_last_step']}; group reward model "
          f"{rm_name} v{rm_version} ({rm_uri}); registered {version.name} v{version.version}")
    if watch is not None:
        print(f"train_director: watch verdict {metrics['watch_verdict']}: {metrics['watch_why']}")
