"""The GRPO engine every policy stage shares: TRL's GRPOTrainer on a LoRA policy (its config, the fused-head switch,
an epoch order that survives a resume), the reward model an alias points at, one MLflow run per stage with its
registered version, curves and watch, and the `champion` alias the watch gives or refuses. A stage says what it
is with a `PolicyStage`; the speaker's stage is mascot/policy/grpo.py, the Director's mascot/policy/director.py."""
from __future__ import annotations

from collections.abc import Callable
import csv
from dataclasses import dataclass, field
import json
from pathlib import Path
import shutil
from statistics import fmean
import sys

import numpy as np
import torch

from mascot import checkpoints, precision, registry
from mascot.config import Params, PolicyGRPOParams
from mascot.io import InputError, write_json
from mascot.launch import is_main_process, rank_tag, world_size
from mascot.llm.identity import folder_digest
from mascot.policy.rollout_grammar import constrain_trainer
from mascot.policy.watch.callback import Watch
from mascot.policy.watch.verdict import OVER
from mascot.reward.scorer import RewardScorer
from mascot.trainer_args import build_config


def grpo_config(params: PolicyGRPOParams, checkpoint_dir: Path, per_device_batch: int, reward_weights: list[float],
                on_gpu: bool, report_to: tuple[str, ...] = ("mlflow",)):
    """TRL's GRPOConfig from the block, with its trainer_args on top; `report_to` () for a check that logs nowhere."""
    return build_config("grpo", dict(
        output_dir=str(checkpoint_dir), per_device_train_batch_size=per_device_batch,
        num_generations=params.num_generations, max_completion_length=params.max_completion_length,
        max_steps=params.max_steps, beta=params.beta, learning_rate=params.learning_rate,
        temperature=params.temperature, reward_weights=list(reward_weights),
        logging_steps=1, save_strategy="steps", save_steps=params.checkpoint_steps, save_total_limit=2,
        seed=params.seed, use_cpu=not on_gpu,
        bf16=precision.native_bf16(), gradient_checkpointing=on_gpu, report_to=list(report_to),
        dataloader_num_workers=0, disable_dropout=True, ddp_find_unused_parameters=False), params.trainer_args)


def head_on_completions_only() -> None:
    """Have TRL's fused LM head project only the completion's positions, on the CPU too. TRL 1.16 scores only
    the labelled positions on Triton devices but every position elsewhere (static tile shapes for Neuron's
    compiler); on the CPU a loss pass of 4 x 268 tokens then projects 1,072 rows through Gemma's 262k-row head
    instead of the 96 the loss reads, 8 of a step's 12 s (torch's profiler, docs/performance.md). The rows it
    skips are masked out of the loss either way: the same log-probs and gradients (tests/test_policy.py)."""
    from trl.trainer import utils as trl_utils

    scores_all = getattr(trl_utils, "_use_triton", None)
    if scores_all is None:  # a TRL without this switch: slower, not wrong (the test pins the pinned TRL's)
        print("grpo: TRL's fused head has no _use_triton switch; every position is projected", file=sys.stderr)
        return
    if hasattr(scores_all, "__wrapped__"):  # already switched
        return

    def compact(device) -> bool:
        return device.type == "cpu" or scores_all(device)
    compact.__wrapped__ = scores_all  # TRL's own rule, for a benchmark or a test to put back
    trl_utils._use_triton = compact


def build_trainer(rows: list[dict], reward_funcs: list, reward_weights: list[float], params: PolicyGRPOParams,
                  checkpoint_dir: Path, callbacks: list | None = None, dtype=None,
                  report_to: tuple[str, ...] = ("mlflow",), completion_regex: str | None = None,
                  rollout_regexes: list[str] | None = None):
    """(TRL's GRPOTrainer on a LoRA policy, its tokenizer), as the GRPO stages train it (and
    benchmarks/grpo_step.py times it). The frozen base in `dtype` (default: bf16 where native,
    mascot/precision.py), the LoRA weights in fp32 (PEFT keeps an adapter fp32 on a bf16 base).
    `completion_regex`: every rollout decodes under it (vLLM's structured outputs, or xgrammar in-process).
    `rollout_regexes`: the rows of each group decode under these in turn during training rollouts (in-process
    only; mascot/policy/rollout_grammar.py)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(params.base_model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(params.seed)
    # a bf16 base decodes without autocast casting every frozen weight at every token
    model = precision.load_causal_lm(params.base_model, dtype)
    head_on_completions_only()
    on_gpu = torch.cuda.is_available()
    # prompts_per_step x num_generations completions a step in all, split over the ranks: N processes train
    # the same steps as one, faster
    per_step = params.prompts_per_step * params.num_generations
    if per_step % world_size():
        raise InputError(f"prompts_per_step x num_generations = {per_step} completions a step do not split over "
                         f"{world_size()} processes; make it a multiple of num_processes")
    config = grpo_config(params, checkpoint_dir, per_step // world_size(), reward_weights, on_gpu, report_to)
    if completion_regex and config.use_vllm:
        config.vllm_structured_outputs_regex = completion_regex
    lora = LoraConfig(task_type="CAUSAL_LM", r=params.lora.r, lora_alpha=params.lora.alpha,
                      lora_dropout=params.lora.dropout, target_modules=list(params.lora.target_modules))
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, reward_funcs=reward_funcs,
                          train_dataset=Dataset.from_list(rows), peft_config=lora, callbacks=callbacks)
    if rollout_regexes and config.use_vllm:
        raise InputError("stratified rollouts (train_director.explore_choices) decode in-process: vLLM's structured "
                         "outputs take one grammar; set explore_choices: sampled or drop trainer_args.use_vllm")
    if completion_regex and not config.use_vllm:
        trainer.choice_exploration = constrain_trainer(trainer, tokenizer, completion_regex, rollout_regexes,
                                                       params.num_generations, params.seed)
    sampler_of = trainer._get_train_sampler
    trainer._get_train_sampler = lambda *a, **k: EpochSampler(sampler_of(*a, **k))
    return trainer, tokenizer


class EpochSampler(torch.utils.data.Sampler):
    """TRL's RepeatSampler draws each epoch's prompt order from one generator, seeded once, so epoch k's order is
    the k-th draw. A resumed run starts at a later epoch with a fresh generator and would repeat the first epoch's
    order; this wrapper draws (and drops) the epochs it skipped when the trainer announces the epoch (accelerate
    calls `set_epoch` before each epoch), so a resumed run sees the order an uninterrupted one saw."""

    def __init__(self, inner):
        self.inner, self.epoch, self.passes = inner, 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        while self.passes < self.epoch:
            for _ in self.inner:
                pass
            self.passes += 1
        self.passes += 1
        return iter(self.inner)


def train_policy(rows: list[dict], reward_funcs: list, reward_weights: list[float], params: PolicyGRPOParams,
                 out_dir: Path, checkpoint_dir: Path, meta: dict | None = None, watch=None,
                 completion_regex: str | None = None, counters: dict[str, dict] | None = None,
                 extra_callbacks: list | None = None, rollout_regexes: list[str] | None = None) -> dict:
    """GRPO on a LoRA policy: the speakers' (stage 1) and the Director's (stage 2). `rows` hold the prompt and
    the columns the reward functions read; `watch` (mascot/policy/watch/) checks the policy as it trains;
    `counters` (name -> {key: count}, dicts the reward functions count into) are kept across a resume."""
    stage = (meta or {}).get("stage", "grpo")
    counters = counters or {}
    resume = checkpoints.last_checkpoint(checkpoint_dir)

    def save_state(folder: Path) -> None:
        if watch is not None:
            watch.save_to(folder)
        if counters:
            checkpoints.save_counters(folder, counters)

    # what save_state put beside the checkpoint comes back here, before the trainer starts
    watch_resumed = resume is not None and watch is not None and watch.load_from(resume)
    if watch_resumed:
        print(f"watch: resumed with {len(watch.checks)} checks (steps {[c['step'] for c in watch.checks]}) "
              f"from {resume}", flush=True)
    if resume is not None and counters and checkpoints.restore_counters(resume, counters):
        print(f"{stage}{rank_tag()}: counts so far restored from {resume}: {counters}", flush=True)
    callbacks = [checkpoints.callback(save_state)]
    if watch is not None:
        callbacks.append(watch.callback(first_check=not watch_resumed))
    callbacks += list(extra_callbacks or [])
    trainer, tokenizer = build_trainer(rows, reward_funcs, reward_weights, params, checkpoint_dir, callbacks,
                                       completion_regex=completion_regex, rollout_regexes=rollout_regexes)
    if resume is not None:
        print(f"{stage}{rank_tag()}: resuming from step {checkpoints.step_of(resume)} of {params.max_steps} "
              f"({resume}): adapter, optimizer, scheduler and RNG states", flush=True)
    result = trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)

    if result.global_step == 0:
        raise InputError(f"GRPO ran 0 steps on {len(rows)} prompts: fewer prompts than one step takes "
                           f"(prompts_per_step {params.prompts_per_step}); add prompts or lower prompts_per_step")
    history = [h for h in trainer.state.log_history if "reward" in h]
    print(f"{stage}{rank_tag()}: {result.global_step} steps, {len(rows)} prompts, "
          f"last reward {history[-1]['reward'] if history else None}", flush=True)
    trainer.accelerator.wait_for_everyone()
    if not trainer.accelerator.is_main_process:  # under DDP only the main rank saves; see mascot/launch.py
        return None
    kept = watch.restore_best(trainer.model) if watch is not None else None
    if kept is not None:
        print(f"{(meta or {}).get('stage', 'grpo')}: stopped at step {watch.stopped_at} (over-optimising for "
              f"{params.watch.patience} checks); keeping the adapter of step {kept}, the judge's best", flush=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    trainer.model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "mascot_policy.json").write_text(json.dumps({"base_model": params.base_model,
                                                            "prompt_style": params.prompt_style, **(meta or {})},
                                                           indent=2))
    return {"history": history}


def reward_trend(history: list[dict]) -> dict:
    """Mean reward of the first and last quarter of the steps, and the least-squares slope per step: one
    step's reward (a few completions of one prompt) is noise, a trend over many steps is not."""
    rewards = [h["reward"] for h in history]
    if len(rewards) < 4:
        return {}
    q = max(1, len(rewards) // 4)
    slope = float(np.polyfit(np.arange(len(rewards)), rewards, 1)[0])
    lengths = [h.get("completions/mean_length") for h in history if h.get("completions/mean_length") is not None]
    return {"reward_first_quarter": round(float(np.mean(rewards[:q])), 4),
            "reward_last_quarter": round(float(np.mean(rewards[-q:])), 4), "reward_slope_per_step": round(slope, 5),
            **({"completion_length_first_quarter": round(float(np.mean(lengths[:q])), 2),
                "completion_length_last_quarter": round(float(np.mean(lengths[-q:])), 2)} if len(lengths) >= 4 else {})}


def champion_scorer(rm_name: str, alias: str, stage: str, promote_stage: str):
    """(version, uri, scorer) of the reward model an alias points at; a missing alias says what to run."""
    version = registry.alias_version(rm_name, alias)
    if version is None:
        raise InputError(f"{stage}: registered model '{rm_name}' has no alias '{alias}'; run the {promote_stage} stage "
                         f"or `mascot promote --model {rm_name} --version N --alias {alias}`")
    uri = f"models:/{rm_name}@{alias}"
    return version, uri, RewardScorer.from_registry(uri)


def health_signals(history: list[dict]) -> dict:
    """TRL's own signs of a step that teaches nothing: groups whose completions all got the same reward (no
    advantage, no gradient), the reward's spread within groups, completions cut at max_completion_length."""
    def series(key):
        return [h[key] for h in history if h.get(key) is not None]
    zero, std, clipped = series("frac_reward_zero_std"), series("reward_std"), series("completions/clipped_ratio")
    return {"mean_frac_reward_zero_std": round(fmean(zero), 4) if zero else None,
            "steps_without_reward_spread_fraction": round(fmean(z >= 1.0 for z in zero), 4) if zero else None,
            "mean_reward_std": round(fmean(std), 4) if std else None,
            "mean_clipped_ratio": round(fmean(clipped), 4) if clipped else None}


@dataclass
class PolicyStage:
    """What one GRPO stage is (the speaker's `train_grpo`, the Director's `train_director`): its name and params
    block, where it is tracked and registered, what rewards it, what watches it, and where its outputs go."""
    name: str  # the stage, and the prefix of its MLflow params ("grpo", "train_director")
    params: PolicyGRPOParams  # its params block: GRPOParams or DirectorParams
    experiment: str  # the MLflow experiment of its runs
    description: str  # the registered version's description
    reward_funcs: list  # TRL reward functions, weighted by reward_weights
    reward_weights: list[float]
    tags: dict  # lineage: git state, the reward model (name, version, alias, uri), the base model
    out_dir: str  # the adapter
    metrics_path: str  # the metrics JSON (dvc metrics)
    plot_series: dict[str, list[str]]  # CSV file -> the TRL log columns it holds (dvc plots)
    extra_metrics: Callable[[list[dict]], dict] | None = None  # stage figures from TRL's log history
    watch: Watch | None = None
    watch_plot: str | None = None  # the watch's CSV
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (file, context) logged as MLflow datasets
    completion_regex: str | None = None  # rollouts decode under it (the Director's directive grammar)
    rollout_regexes: list[str] | None = None  # each group's rows decode under these in turn (stratified choices)
    counters: dict[str, dict] = field(default_factory=dict)  # counts its figures report, kept across a resume
    callbacks: list = field(default_factory=list)  # more TrainerCallbacks (a diagnostic probe), main rank only


def run_policy_stage(params: Params, stage: PolicyStage, rows: list[dict]) -> tuple[dict, object]:
    """One GRPO stage on its prompt `rows`, speaker or Director: an MLflow run (params, metrics, the adapter, its input files as
    datasets), a registered version marked complete only at the end, the curves as CSV for `dvc plots`, and,
    with a `watch`, its checks (plot, verdict) and the `champion` alias given or refused by the verdict."""
    p, name, tags, out_dir, metrics_path = stage.params, stage.name, stage.tags, stage.out_dir, stage.metrics_path
    watch = stage.watch
    import mlflow

    if p.watch.stop_when_over_optimising and world_size() > 1:
        raise InputError(f"{name}.watch.stop_when_over_optimising: the watch runs on the main rank only, so it "
                         f"cannot stop {world_size()} DDP ranks together; turn it off, or train with num_processes 1")
    # what shapes the run: a rerun with all of it the same resumes from the last checkpoint, anything else starts over
    ckpt = checkpoints.checkpoint_dir(name, checkpoints.params_key(params), rows, tags.get("reward_model"),
                                      tags.get("reward_model_version"), folder_digest(p.base_model), world_size())
    if not is_main_process():  # a DDP rank other than the main one: train, then leave the rest to rank 0
        train_policy(rows, stage.reward_funcs, stage.reward_weights, p, Path(out_dir), ckpt, meta={"stage": name},
                     completion_regex=stage.completion_regex, counters=stage.counters,
                     rollout_regexes=stage.rollout_regexes)
        return None, None
    registry.abandon_incomplete(p.registered_model)
    exp = registry.experiment_id(stage.experiment, params.mlflow.artifact_root)
    run_name = (f"{name}-{Path(p.base_model).name}-rm-v{tags['reward_model_version']}-lr{p.learning_rate:g}-"
                f"{tags['git_commit'][:7]}")
    tags = {**tags, **registry.dvc_experiment_tags()}
    resumed_run = checkpoints.remembered_run(ckpt)  # a resumed training goes on in its own MLflow run
    with (mlflow.start_run(run_id=resumed_run) if resumed_run else
          mlflow.start_run(experiment_id=exp, run_name=run_name, tags=tags)) as run:
        checkpoints.remember_run(ckpt, run.info.run_id)
        for path, context in stage.inputs:
            registry.log_input_file(path, context)
        mlflow.log_params({f"{name}.{k}": v for k, v in p.model_dump().items() if k not in ("lora", "watch")}
                          | {f"{name}.lora.{k}": v for k, v in p.lora.model_dump().items()}
                          | {f"{name}.watch.{k}": v for k, v in p.watch.model_dump().items()}
                          | {"reward_model": tags["reward_model"], "reward_model_version": tags["reward_model_version"],
                             "prompts": len(rows), "world_size": world_size()})
        result = train_policy(rows, stage.reward_funcs, stage.reward_weights, p, Path(out_dir), ckpt,
                              meta={"stage": name}, watch=watch, completion_regex=stage.completion_regex,
                              counters=stage.counters, extra_callbacks=stage.callbacks,
                              rollout_regexes=stage.rollout_regexes)
        history = result["history"]
        metrics = {"steps": len(history), "prompts": len(rows), "reward_model_version": tags["reward_model_version"],
                   "reward_first_step": history[0]["reward"] if history else None,
                   "reward_last_step": history[-1]["reward"] if history else None, **reward_trend(history),
                   **health_signals(history), **(stage.extra_metrics(history) if stage.extra_metrics else {})}
        watched = None
        if watch is not None:
            watched, watch_metrics = watch.report(name, stage.watch_plot)
            metrics.update(watch_metrics)
        write_json(metrics_path, metrics)
        mlflow.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                            and v is not None and k.startswith(("watch_", "mean_", "steps_without"))})
        mlflow.log_artifact(metrics_path)
        mlflow.log_artifacts(out_dir, artifact_path="policy")
        version_tags = {**tags, "reward_first_step": metrics["reward_first_step"],
                        "reward_last_step": metrics["reward_last_step"],
                        **({k: v for k, v in metrics.items() if k.startswith("watch_") and v is not None}
                           if watched else {})}
        version = registry.register_version(p.registered_model, run.info.run_id, "policy", version_tags,
                                             stage.description)
    write_curves(history, stage.plot_series)
    write_json(Path(out_dir) / "registered.json", {"name": version.name, "version": version.version,
                                                    "run_id": version.run_id})
    registry.mark_complete(version.name, version.version)
    checkpoints.finished(ckpt)
    if watched is not None:
        metrics["champion"] = policy_alias(version, watched, p.watch, name)
        write_json(metrics_path, metrics)
    return metrics, version


def write_curves(history: list[dict], series: dict[str, list[str]]) -> None:
    """TRL's log history as CSV files for `dvc plots`: each file its columns, one row a step."""
    for path, keys in series.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
            writer.writeheader()
            writer.writerows({k: h.get(k) for k in keys} for h in history)


def policy_alias(version, watched: dict, w, stage: str) -> bool:
    """`champion` for the new policy version unless its watch says over-optimising and
    watch.refuse_over_optimising holds; either way the version's tags say why."""
    from mlflow import MlflowClient

    if watched["verdict"] == OVER and w.refuse_over_optimising:
        why = (f"not promoted: the watch says over-optimising ({watched['why']}); "
               "watch.refuse_over_optimising: true")
        MlflowClient().set_model_version_tag(version.name, version.version, "champion_refused", why)
        print(f"{stage}: {version.name} v{version.version} registered without @champion: {why}")
        return False
    registry.set_alias(version.name, "champion", version.version, f"watch verdict: {watched['verdict']}",
                       {"watch_verdict": watched["verdict"]})
    return True
