"""`trainer_args:` in a training block: settings passed through to TRL's `RewardConfig` / `GRPOConfig` (bf16,
gradient_checkpointing, use_vllm, deepspeed, ...), so a GPU user sets them in params.yaml without code changes.

Checked against the config class itself: an unknown key is refused with its name (and the nearest known one);
a key that the block already has a parameter for is refused with that parameter's name, so one setting never
has two places.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any

# TRL config field -> the block's own key that sets it (None: mascot sets it itself, from the stage)
OWNED = {
    "reward": {"output_dir": None, "report_to": None, "per_device_train_batch_size": "batch_size",
               "per_device_eval_batch_size": "batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
               "learning_rate": "learning_rate", "num_train_epochs": "epochs", "max_length": "max_length",
               "eval_steps": "eval_steps", "save_steps": "checkpoint_steps", "save_strategy": None,
               "save_total_limit": "save_total_limit", "train_sampling_strategy": "group_by_length",
               "seed": "seed"},
    "grpo": {"output_dir": None, "report_to": None, "reward_weights": "reward_weight / format_weight",
             "per_device_train_batch_size": "prompts_per_step (x num_generations)",
             "num_generations": "num_generations", "max_completion_length": "max_completion_length",
             "max_steps": "max_steps", "beta": "beta", "learning_rate": "learning_rate",
             "temperature": "temperature", "seed": "seed", "save_steps": "checkpoint_steps", "save_strategy": None,
             "save_total_limit": None},
}


def config_class(kind: str):
    if kind == "reward":
        from trl import RewardConfig

        return RewardConfig
    from trl import GRPOConfig

    return GRPOConfig


def check_trainer_args(args: dict[str, Any], kind: str) -> None:
    """Raise ValueError naming every unknown or owned key of a block's trainer_args (the caller's error names the
    block)."""
    if not args:
        return
    cls = config_class(kind)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    problems = []
    for key in args:
        if key in OWNED[kind]:
            owner = OWNED[kind][key]
            problems.append(f"'{key}' is set by mascot from the stage" if owner is None
                            else f"'{key}' has its own key in this block: set {owner.split(' ')[0]}" +
                            (f" ({owner})" if " " in owner else ""))
        elif key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            problems.append(f"'{key}' is not a field of TRL's {cls.__name__}" + (f" (did you mean '{near[0]}'?)"
                                                                                 if near else ""))
    if problems:
        raise ValueError("; ".join(problems))


def build_config(kind: str, ours: dict[str, Any], overrides: dict[str, Any]):
    """TRL's config from mascot's settings with the block's trainer_args on top (checked at start-up)."""
    return config_class(kind)(**{**ours, **overrides})
