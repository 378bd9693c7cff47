"""A GRPO step against the sum of its parts, side by side in one process.

The stage's own trainer (`mascot/policy/engine.py: build_trainer`, params.yaml's `grpo` block, the reward model in
`models/reward`, no watch, no tracking) runs `--steps` steps with a timer on each of TRL's phases: generation
(`_generate_single_turn`), reward scoring (`_calculate_rewards`), the policy's log-prob forward (`compute_loss`),
the backward (the rest of `training_step`) and the optimizer step with the trainer's bookkeeping (the rest of the
step). Then each part alone on the same prompt, in the same process: `generate` of `num_generations` completions
of `max_completion_length` tokens, the reward model on them, and one forward and backward of the policy over them
(the head on the completion's positions only, as the loss reads them). A step near the sum of the parts alone has no work of its own to cut.

The numerics side by side too (`--variants`): the policy's frozen base in fp32 without autocast, fp32 under bf16
autocast (which casts every frozen weight at every op, decoding included), and a bf16 base under autocast with
fp32 LoRA weights (the stages' choice where bf16 is native, mascot/precision.py); `allrows` is that one with TRL's
fused head projecting every position of prompt and completion, as TRL 1.16 does off Triton devices
(`grpo.head_on_completions_only` has it project the completion's only).

    python benchmarks/grpo_step.py --repo <a tree after `dvc repro promote`> [--steps 6] [--variants fp32,autocast,allrows,bf16]
"""
from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {"fp32": ("fp32 base, no autocast", "float32", False),
            "autocast": ("fp32 base, bf16 autocast", "float32", True),
            "allrows": ("bf16 base, the head on every position (TRL 1.16 on a CPU)", "bfloat16", True),
            "bf16": ("bf16 base, bf16 autocast, fp32 LoRA (the stages')", "bfloat16", True)}
PHASES = ("generation", "reward scoring", "log-prob forward", "backward", "optimizer and bookkeeping")


def timed(obj, name: str, log: dict, key: str) -> None:
    inner = getattr(obj, name)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            log.setdefault(key, []).append(time.perf_counter() - start)
    setattr(obj, name, wrapper)


def train_timed(trainer, steps: int) -> list[dict]:
    """Per step: its wall seconds and each phase's."""
    from transformers import TrainerCallback

    log: dict[str, list[float]] = {}
    for name, key in (("_generate_single_turn", "generation"), ("_calculate_rewards", "reward scoring"),
                      ("_generate_and_score_completions", "generate_and_score"), ("compute_loss", "loss"),
                      ("training_step", "training_step")):
        timed(trainer, name, log, key)
    walls: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            walls.append(time.perf_counter() - self.start)
    trainer.add_callback(StepTimer())
    trainer.train()
    rows = []
    for i, wall in enumerate(walls):
        gen, rew = log["generation"][i], log["reward scoring"][i]
        rows.append({"step": wall, "generation": gen, "reward scoring": rew, "log-prob forward": log["loss"][i],
                     "backward": log["training_step"][i] - log["generate_and_score"][i] - log["loss"][i],
                     "optimizer and bookkeeping": wall - log["training_step"][i],
                     "generate_and_score other": log["generate_and_score"][i] - gen - rew})
    return rows


def parts_alone(trainer, tokenizer, scorer, row: dict, personas, p, rounds: int) -> dict:
    """Each part once more on its own: generate, reward-model scores, one forward and backward."""
    import torch

    from mascot.granularity import persona_fields
    from mascot.policy.rewards import first_line

    model = trainer.model
    prompt = tokenizer(row["prompt"], return_tensors="pt")
    out: dict[str, list[float]] = {"generation": [], "reward scoring": [], "forward and backward": []}
    for _ in range(rounds):
        start = time.perf_counter()
        with torch.no_grad(), trainer.accelerator.autocast():
            ids = model.generate(**prompt, do_sample=True, temperature=p.temperature, max_new_tokens=p.max_completion_length,
                                 min_new_tokens=p.max_completion_length, num_return_sequences=p.num_generations,
                                 pad_token_id=tokenizer.pad_token_id)
        out["generation"].append(time.perf_counter() - start)
        texts = tokenizer.batch_decode(ids[:, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
        import json

        start = time.perf_counter()
        scorer.score([(persona_fields(personas[row["persona"]]), json.loads(row["context"]), first_line(t))
                      for t in texts])
        out["reward scoring"].append(time.perf_counter() - start)
        start = time.perf_counter()
        with trainer.accelerator.autocast():
            # only the completion's positions through the head, as the loss needs
            logits = model(input_ids=ids, logits_to_keep=p.max_completion_length + 1).logits[:, :-1].float()
            loss = -torch.log_softmax(logits, -1).gather(-1, ids[:, prompt["input_ids"].shape[1]:, None]).mean()
        loss.backward()
        model.zero_grad(set_to_none=True)
        out["forward and backward"].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(ROOT))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the parts alone (medians)")
    parser.add_argument("--variants", default="allrows,bf16", help="of " + ", ".join(VARIANTS))
    args = parser.parse_args()
    os.chdir(args.repo)
    os.environ.setdefault("HF_MLFLOW_LOG_ARTIFACTS", "0")

    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.policy.engine import build_trainer
    from mascot.policy.grpo import grpo_prompts
    from mascot.policy.rewards import make_format_reward, make_reward_model_reward, stop_token_ids
    from mascot.precision import native_bf16
    from mascot.reward.scorer import RewardScorer

    import torch
    from transformers.integrations import MLflowCallback
    from trl.trainer import utils as trl_utils

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    queries = {q["query_id"]: q for q in load_jsonl("data/queries.jsonl")}
    scorer = RewardScorer.from_dir("models/reward")
    variants = args.variants.split(",")
    if not set(variants) <= set(VARIANTS) or (("autocast" in variants or "bf16" in variants) and not native_bf16()):
        sys.exit(f"--variants {args.variants}: of {', '.join(VARIANTS)}; the bf16 ones need native bf16 "
                 f"(this machine: {native_bf16()})")
    meds, alone = {}, None
    for name in variants:
        label, dtype, autocast = VARIANTS[name]
        p = params.grpo.model_copy(update={"max_steps": args.steps,
                                           "trainer_args": {**params.grpo.trainer_args, "bf16": autocast}})
        rows = grpo_prompts(queries, load_jsonl("data/pairs.jsonl"), personas, p)
        with tempfile.TemporaryDirectory() as tmp:
            rewards = [make_reward_model_reward(scorer, personas), make_format_reward(stop_token_ids(p.base_model))]
            trainer, tokenizer = build_trainer(rows, rewards,
                                               [p.reward_weight, p.format_weight], p, Path(tmp),
                                               dtype=getattr(torch, dtype))
            trainer.remove_callback(MLflowCallback)  # no tracking: the stage's MLflow logging is not what is timed
            completions_only = trl_utils._use_triton
            if name == "allrows":  # TRL's own rule, undoing build_trainer's head_on_completions_only
                trl_utils._use_triton = completions_only.__wrapped__
            try:
                steps = train_timed(trainer, args.steps)[1:]  # the first step warms up
            finally:
                trl_utils._use_triton = completions_only
            meds[label] = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
            if name == variants[-1]:
                alone = parts_alone(trainer, tokenizer, scorer, rows[0], personas, p, args.rounds)
    print(f"# GRPO step, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, no GPU; "
          f"{p.base_model}, LoRA r={p.lora.r}, {p.num_generations} completions of up to {p.max_completion_length} "
          f"tokens a step; seconds a step, medians of steps 2-{args.steps}")
    labels = list(meds)
    print("| phase | " + " | ".join(labels) + " |\n| --- |" + " ---: |" * len(labels))
    for k in (*PHASES, "generate_and_score other", "step"):
        print(f"| {'**step**' if k == 'step' else k} | " + " | ".join(f"{meds[lb][k]:.2f}" for lb in labels) + " |")
    med = meds[labels[-1]]
    print(f"\nthe parts alone, {labels[-1]}:")
    parts = sum(alone.values())
    print("\n| part alone, same prompt (median) | seconds |\n| --- | ---: |")
    for k, v in alone.items():
        print(f"| {k} | {v:.2f} |")
    print(f"| **sum of the parts** | {parts:.2f} |")
    print(f"\nstep / sum of its parts alone: {med['step'] / parts:.2f}x")


if __name__ == "__main__":
    main()
