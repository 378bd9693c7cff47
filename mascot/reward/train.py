"""A LoRA scalar reward model trained with TRL's RewardTrainer (the `train_rm` stages: mascot/stages/train_rm.py),
tracked in MLflow and registered as a new version of the registered model. The same trainer for both
granularities: replies (the persona reward model) and blocks of group turns (the group reward model)."""
from __future__ import annotations

import csv
import json
from pathlib import Path
import random
import shutil
import time

import torch

from mascot import checkpoints, precision, registry
from mascot.config import TrainRMParams
from mascot.granularity import GRANULARITIES, REPLY, Granularity
from mascot.io import InputError
from mascot.launch import rank_tag
from mascot.llm.identity import folder_digest
from mascot.pairs import side_words
from mascot.reward.evaluation import HumanCheck, human_set_metrics, pair_metrics, reference_set_metrics
from mascot.reward.odin import OdinRewardTrainer
from mascot.reward.prompt import reward_input_ids
from mascot.reward.scorer import META_FILE, RewardScorer, load_base_classifier
from mascot.stats import DEFAULT_MIN_N
from mascot.trainer_args import build_config


def probe_items(personas: dict, granularity: str = "reply") -> list[tuple]:
    return GRANULARITIES[granularity].probe_items(personas)


def tokenize_pairs(pairs: list[dict], personas: dict, tokenizer, max_length: int,
                   g: Granularity = REPLY, with_words: bool = False) -> tuple[list[dict], int]:
    """TRL's rows (chosen and rejected input ids, the margin) and how many pairs were cut to fit; `with_words`
    adds each side's words (what a length head is held to)."""
    rows, cut = [], 0
    for p in pairs:
        persona, context, chosen_text, rejected_text = g.pair_sides(p, personas)
        # a human pair's sides replied to two moments of one conversation: each is read after its own context
        rejected_context = ([m for m in p["rejected_prompt"] if m["role"] != "system"] if p.get("rejected_prompt")
                            else context)
        chosen, c_cut = reward_input_ids(tokenizer, g, persona, context, chosen_text, max_length)
        rejected, r_cut = reward_input_ids(tokenizer, g, persona, rejected_context, rejected_text, max_length)
        cut += c_cut or r_cut
        rows.append({"chosen_ids": chosen, "rejected_ids": rejected, "margin": float(p["margin"])})
        if with_words:
            rows[-1].update(chosen_words=side_words(p["chosen"]), rejected_words=side_words(p["rejected"]))
    return rows, cut


def length_grouped(rows: list[dict], batch_size: int, seed: int = 0, megabatch: int = 8) -> list[dict]:
    """`rows` in batches of about one length: shuffled (seeded), sorted by their longer side within runs of
    `megabatch` batches, cut into batches, and the batches shuffled again, so that an epoch still meets the pairs
    in a random order while a batch pads to little more than its own pairs (the CPU default's pairs padded to
    1.29x their tokens in random batches, 1.14x sorted: two sides of one pair differ)."""
    rng = random.Random(seed)
    order = list(range(len(rows)))
    rng.shuffle(order)
    span = batch_size * megabatch
    length = [max(len(r["chosen_ids"]), len(r["rejected_ids"])) for r in rows]
    runs = [sorted(order[i: i + span], key=lambda k: length[k]) for i in range(0, len(order), span)]
    batches = [run[i: i + batch_size] for run in runs for i in range(0, len(run), batch_size)]
    rng.shuffle(batches)
    return [rows[k] for batch in batches for k in batch]


def repeat_by_weight(pairs: list[dict], rows: list) -> list:
    """Each of `rows` (one per pair) as many times as its pair's `weight` (pairs.human_weight; 1 when absent):
    the weight by repetition, which TRL's RewardTrainer takes as it is (one epoch sees the pair W times)."""
    return [row for p, row in zip(pairs, rows) for _ in range(int(p.get("weight", 1)))]


def weighted_train_pairs(pairs: list[dict]) -> list[dict]:
    """The train split, a pair of `weight` W W times (`repeat_by_weight`)."""
    train = [p for p in pairs if p["split"] == "train"]
    return repeat_by_weight(train, train)


def train_pair_counts(pairs: list[dict], train_rows: int) -> dict:
    """`train_pairs`: the distinct train pairs; with a weight above 1 (pairs.human_weight), also `train_rows`, the
    rows one epoch trains on (the repeated pairs counted as often as they are seen)."""
    distinct = sum(1 for p in pairs if p["split"] == "train")
    return {"train_pairs": distinct, **({"train_rows": train_rows} if train_rows != distinct else {})}


def training_throughput(train_pairs: int, params: TrainRMParams, steps: int, processes: int, train_s: float,
                        log_history: list[dict]) -> dict:
    """Pairs actually trained (each epoch's pairs; never more than the steps could hold, since a last batch is
    short) per second of training, the evaluation passes inside trainer.train() taken out."""
    capacity = steps * params.batch_size * params.gradient_accumulation_steps * processes
    trained = min(round(train_pairs * params.epochs), capacity)
    eval_s = sum(h.get("eval_runtime", 0.0) for h in log_history)
    seconds = max(train_s - eval_s, 1e-9)
    return {"trained_pairs": trained, "time_eval_in_train_s": round(eval_s, 3),
            "train_pairs_per_s": round(trained / seconds, 4)}


def check_score_head(adapter_dir: Path) -> list[str]:
    """The score head must travel with the adapter, or a reload scores with a random head."""
    from safetensors import safe_open

    with safe_open(adapter_dir / "adapter_model.safetensors", "pt") as f:
        keys = [k for k in f.keys() if ".score." in k or k.endswith("score.weight")]
    if not keys:
        raise RuntimeError(f"{adapter_dir}: adapter_model.safetensors has no score-head weights; "
                           "add 'score' to modules_to_save")
    return keys


def reward_config(params: TrainRMParams, checkpoint_dir: Path, evaluates: bool, report_to: tuple[str, ...],
                  on_gpu: bool):
    """TRL's RewardConfig from the block, with its trainer_args on top."""
    return build_config("reward", dict(
        output_dir=str(checkpoint_dir), per_device_train_batch_size=params.batch_size,
        per_device_eval_batch_size=params.batch_size, gradient_accumulation_steps=params.gradient_accumulation_steps,
        learning_rate=params.learning_rate, num_train_epochs=params.epochs, max_length=None,
        eval_strategy="steps" if evaluates else "no", eval_steps=params.eval_steps, save_strategy="steps",
        save_steps=params.checkpoint_steps, save_total_limit=params.save_total_limit, logging_steps=1, seed=params.seed,
        bf16=precision.native_bf16(), gradient_checkpointing=on_gpu, use_cpu=not on_gpu,  # bf16 autocast where native
        disable_dropout=False,  # keep the configured lora_dropout (TRL's default zeroes it)
        report_to=list(report_to), dataloader_num_workers=0, remove_unused_columns=True,
        # group_by_length: the rows come in the order `length_grouped` gave them
        train_sampling_strategy="sequential" if params.group_by_length else "random",
        ddp_find_unused_parameters=False), params.trainer_args)  # LoRA uses every weight: no extra DDP pass


def save_adapter(model, tokenizer, out_dir: Path, params: TrainRMParams, g: Granularity) -> list[str]:
    """The adapter, its tokenizer and what RewardScorer.from_dir checks at load (the base weights' digest, where
    they came from, the code); returns the score head's tensors."""
    shutil.rmtree(out_dir, ignore_errors=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    head_keys = check_score_head(out_dir)
    (out_dir / META_FILE).write_text(json.dumps({
        "base_model": params.base_model, "max_length": params.max_length, "granularity": g.name,
        "template_hash": g.template_hash, "num_labels": 2 if params.length_head.enabled else 1,
        "keep_layers": params.keep_layers,
        # column 0 scores; an ODIN model's column 1 is its length head, never used downstream
        "heads": ["quality", "length"] if params.length_head.enabled else ["reward"],
        "base_model_digest": folder_digest(params.base_model),
        "base_model_source": registry.base_model_tags(params.base_model).get("base_model_source"),
        "git_commit": registry.git_state()["git_commit"],
        "loader": "mascot.reward.scorer.RewardScorer.from_dir"}, indent=2))
    return head_keys


def measure_trained(scorer: RewardScorer, eval_rows: list[dict], eval_pairs: list[dict], personas: dict,
            reference_items: list[dict] | None, human: HumanCheck | None, min_n: int,
            survey_min_gap: float = 2) -> tuple[dict, list, list]:
    """The trained model on its eval pairs, the judge's reference set and the untrained human pairs: (figures,
    chosen scores, rejected scores)."""
    chosen = scorer.score_ids([r["chosen_ids"] for r in eval_rows])
    rejected = scorer.score_ids([r["rejected_ids"] for r in eval_rows])
    metrics = {f"eval_{k}": v for k, v in pair_metrics(eval_pairs, chosen, rejected, min_n).items()}
    if reference_items:
        metrics.update(reference_set_metrics(scorer, reference_items, personas, min_n, survey_min_gap))
    if human is not None:
        metrics.update(human_set_metrics(scorer, human, personas))
    return metrics, chosen, rejected


def train_reward_model(pairs: list[dict], personas: dict, params: TrainRMParams, out_dir: Path,
                       checkpoint_dir: Path, reference_items: list[dict] | None = None,
                       granularity: str = "reply", report_to: tuple[str, ...] = ("mlflow",),
                       human: HumanCheck | None = None, min_n: int = DEFAULT_MIN_N,
                       survey_min_gap: float = 2) -> dict | None:
    """Train on the train split, evaluate on the eval split (and on judge_check's reference set and the held-out
    human pairs, if given; below `min_n` pairs a figure is "too few to tell"), save the adapter to `out_dir`.
    Under DDP every rank trains and only the main one saves and measures: the others return None."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import RewardTrainer

    g = GRANULARITIES[granularity]
    train_pairs = [p for p in pairs if p["split"] == "train"]
    eval_pairs = [p for p in pairs if p["split"] == "eval"]
    if not train_pairs:
        raise InputError(f"{g.rm_block}: the pairs file has no "
                         "train-split pairs; lower the pairs' score_margin or add data")
    timings, last = {}, [time.perf_counter()]  # the fixed costs around training, logged as time_* metrics

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name], last[0] = now - last[0], now
    tokenizer = AutoTokenizer.from_pretrained(params.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    odin = params.length_head
    train_rows, train_cut = tokenize_pairs(train_pairs, personas, tokenizer, params.max_length, g, odin.enabled)
    eval_rows, eval_cut = tokenize_pairs(eval_pairs, personas, tokenizer, params.max_length, g, odin.enabled)
    if not params.use_margin:
        for row in train_rows + eval_rows:
            row.pop("margin")
    # a weighted pair is tokenized (and counted as cut) once, then repeated
    train_rows = repeat_by_weight(train_pairs, train_rows)
    lap("tokenize_s")

    torch.manual_seed(params.seed)
    model = load_base_classifier(params.base_model, tokenizer, num_labels=2 if odin.enabled else 1,
                                 keep_layers=params.keep_layers)
    if params.group_by_length:
        train_rows = length_grouped(train_rows, params.batch_size * params.gradient_accumulation_steps, params.seed)
    lora = LoraConfig(task_type="SEQ_CLS", r=params.lora.r, lora_alpha=params.lora.alpha,
                      lora_dropout=params.lora.dropout, target_modules=list(params.lora.target_modules),
                      modules_to_save=["score"])
    config = reward_config(params, checkpoint_dir, bool(eval_rows), report_to, torch.cuda.is_available())
    trainer_class, odin_args = RewardTrainer, {}
    if odin.enabled:
        trainer_class = OdinRewardTrainer
        odin_args = {"length_weight": odin.length_weight, "quality_weight": odin.quality_weight}
    trainer = trainer_class(model=model, args=config, processing_class=tokenizer,
                            train_dataset=Dataset.from_list(train_rows),
                            eval_dataset=Dataset.from_list(eval_rows) if eval_rows else None, peft_config=lora,
                            callbacks=[checkpoints.callback()], **odin_args)
    lap("load_model_s")
    resume = checkpoints.last_checkpoint(checkpoint_dir)
    if resume is not None:
        print(f"{g.rm_block}{rank_tag()}: resuming from step {checkpoints.step_of(resume)} ({resume}): adapter, "
              "optimizer, scheduler and RNG states", flush=True)
    result = trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
    lap("train_s")

    # every rank says what it trained on (its shard of the pairs); then only the main one goes on
    print(f"{g.rm_block}{rank_tag()}: {result.global_step} steps on "
          f"{len(trainer.get_train_dataloader())} batches of at most {params.batch_size} pairs, "
          f"train loss {result.training_loss:.4f}", flush=True)
    trainer.accelerator.wait_for_everyone()
    if not trainer.accelerator.is_main_process:
        return None

    head_keys = save_adapter(trainer.model, tokenizer, out_dir, params, g)
    lap("save_s")
    # without the trainer's autocast wrapper: scored in fp32, as every later stage scores the saved adapter
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    scorer = RewardScorer(model, tokenizer, params.max_length, batch_size=params.batch_size, granularity=g)
    metrics, chosen, rejected = measure_trained(scorer, eval_rows, eval_pairs, personas, reference_items, human, min_n,
                                                survey_min_gap)
    lap("score_eval_s")
    probe_scores = scorer.score(g.probe_items(personas))
    lap("probe_s")
    metrics.update(**train_pair_counts(pairs, len(train_rows)), eval_pairs=len(eval_rows), cut_pairs=train_cut + eval_cut,
                   train_loss=round(result.training_loss, 6), train_steps=result.global_step,
                   score_head_tensors=len(head_keys), **training_throughput(
                       len(train_rows), params, result.global_step, trainer.accelerator.num_processes,
                       timings["train_s"], trainer.state.log_history),
                   **{f"time_{k}": round(v, 3) for k, v in timings.items()})
    return {"metrics": metrics, "chosen_scores": chosen, "rejected_scores": rejected,
            "probe_scores": probe_scores, "log_history": trainer.state.log_history}


def write_curves(log_history: list[dict], plots: Path) -> None:
    """Per-step training and eval curves as CSV for `dvc plots`."""
    series = {"train_curve.csv": ("loss", "accuracy", "margin", "learning_rate"),
              "eval_curve.csv": ("eval_loss", "eval_accuracy", "eval_margin")}
    for name, keys in series.items():
        rows = [h for h in log_history if keys[0] in h]
        with open(plots / name, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=["step", *keys], extrasaction="ignore")
            writer.writeheader()
            writer.writerows({"step": h["step"], **{k: h.get(k) for k in keys}} for h in rows)
