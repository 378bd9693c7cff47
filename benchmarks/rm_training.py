"""Reward-model training: our `train_rm` core against a bare TRL script, same work, in one run.

Both sides train the same base model with the same LoRA config on the same pairs (the same token ids: pairs
whose reward input is not cut), batch size, accumulation, sequence lengths and number of steps, with the same
eval pairs (transformers evaluates them once when training ends, on both sides) and no tracking (`report_to`
empty on both). The bare side calls TRL's
`RewardTrainer` the way TRL's examples do: a text dataset ("chosen"/"rejected") that TRL tokenizes, a
`LoraConfig` with the score head in `modules_to_save`. Each side runs in a fresh process; rounds alternate the
order; the table shows medians. Then one run of our full stage function (`reward.train.main`, against a
throwaway sqlite store) gives the fixed costs around training: model load, tokenisation, saving, eval and probe
scoring, MLflow artifact logging and registration.

    python benchmarks/rm_training.py                      # params.yaml's train_rm, data/pairs.jsonl (make repro)
    python benchmarks/rm_training.py --steps 10 --rounds 3
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REPO = ROOT  # the working tree whose params.yaml, models/ and data/pairs.jsonl are used (--repo)


def select_pairs(params, n_train: int, n_eval: int) -> tuple[list[dict], list[dict]]:
    """Train pairs whose reward inputs fit `max_length` uncut (so that TRL's own tokenisation of the rendered
    text gives the very ids ours does), relabelled: the first `n_train` train, the next `n_eval` eval."""
    from transformers import AutoTokenizer

    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.granularity import REPLY
    from mascot.reward.prompt import reward_input_ids

    p = params.train_rm
    tokenizer = AutoTokenizer.from_pretrained(p.base_model)
    personas = load_personas(params.prepare.personas_file)
    chosen = []
    for pair in load_jsonl(REPO / "data/pairs.jsonl"):
        persona, ctx, c, r = REPLY.pair_sides(pair, personas)
        ids = [reward_input_ids(tokenizer, REPLY, persona, ctx, side, p.max_length) for side in (c, r)]
        if any(cut for _, cut in ids):
            continue
        chosen.append({**pair, "chosen_text": REPLY.reward_text(persona, ctx, c), "rejected_text": REPLY.reward_text(persona, ctx, r),
                       "tokens": len(ids[0][0]) + len(ids[1][0])})
        if len(chosen) == n_train + n_eval:
            break
    if len(chosen) < n_train + n_eval:
        raise SystemExit(f"only {len(chosen)} uncut pairs in data/pairs.jsonl; lower --steps")
    train = [{**x, "split": "train"} for x in chosen[:n_train]]
    return train, [{**x, "split": "eval"} for x in chosen[n_train:]]


def run_side(side: str, workdir: Path, steps: int) -> dict:
    """One side in a fresh process (`--side`), returning what it printed as JSON."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, __file__, "--side", side, "--workdir", str(workdir), "--steps", str(steps),
                          "--repo", str(REPO)], capture_output=True, text=True, env=env, cwd=REPO)
    if out.returncode:
        raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def side_ours(workdir: Path) -> dict:
    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.reward.train import train_reward_model

    params = load_params(REPO / "params.yaml")
    p = params.train_rm.model_copy(update={"epochs": 1, "eval_steps": 10**6, "checkpoint_steps": 10**6})
    pairs = load_jsonl(workdir / "pairs.jsonl")
    result = train_reward_model(pairs, load_personas(params.prepare.personas_file), p, workdir / "ours",
                                workdir / "ours-ckpt", None, report_to=())
    m = result["metrics"]
    return {"train_s": m["time_train_s"], "steps": m["train_steps"], "pairs": m["train_pairs"],
            "fixed": {k: v for k, v in m.items() if k.startswith("time_") and k != "time_train_s"}}


def side_bare(workdir: Path) -> dict:
    """TRL's example, as it writes it: the model and tokenizer by name, a text dataset, RewardTrainer."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    from mascot.config import load_params
    from mascot.io import load_jsonl

    p = load_params(REPO / "params.yaml").train_rm
    rows = load_jsonl(workdir / "pairs.jsonl")
    train, evaluation = (Dataset.from_list([{"chosen": r["chosen_text"], "rejected": r["rejected_text"]}
                                            for r in rows if r["split"] == split]) for split in ("train", "eval"))
    tokenizer = AutoTokenizer.from_pretrained(p.base_model)
    torch.manual_seed(p.seed)
    model = AutoModelForSequenceClassification.from_pretrained(p.base_model, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    args = RewardConfig(output_dir=str(workdir / "bare-ckpt"), per_device_train_batch_size=p.batch_size,
                        gradient_accumulation_steps=p.gradient_accumulation_steps, learning_rate=p.learning_rate,
                        num_train_epochs=1, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                        seed=p.seed, disable_dropout=False,
                        # the same numerics and memory trade as ours on a CPU: RewardConfig defaults to bf16
                        # autocast and gradient checkpointing, which on this CPU did not finish 3 steps in 4 min
                        bf16=False, gradient_checkpointing=False,
                        # as our stage configures it: transformers evaluates once when training ends
                        eval_strategy="steps", eval_steps=10**6, per_device_eval_batch_size=p.batch_size)
    peft_config = LoraConfig(task_type="SEQ_CLS", r=p.lora.r, lora_alpha=p.lora.alpha, lora_dropout=p.lora.dropout,
                             target_modules=list(p.lora.target_modules), modules_to_save=["score"])
    trainer = RewardTrainer(model=model, args=args, processing_class=tokenizer, train_dataset=train,
                            eval_dataset=evaluation, peft_config=peft_config)
    tokens = sum(len(x["chosen_ids"]) + len(x["rejected_ids"]) for x in trainer.train_dataset)
    start = time.perf_counter()
    result = trainer.train()
    return {"train_s": time.perf_counter() - start, "steps": result.global_step, "pairs": len(train),
            "tokens": tokens}


def fixed_costs_of_the_stage(workdir: Path) -> dict:
    """Our whole stage function once, tracked into a throwaway sqlite store: its time_* metrics."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'bench.db'}", "HF_HUB_OFFLINE": "1"}
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from mascot.config import load_params; from mascot.stages.train_rm import main; "
            f"p=load_params('params.yaml'); p=p.model_copy(update={{'mlflow': p.mlflow.model_copy(update="
            f"{{'artifact_root': '{workdir / 'artifacts'}'}})}}); "
            f"main(p, pairs_path='{workdir / 'pairs.jsonl'}', model_dir='{workdir / 'stage'}', "
            f"figures_path='{workdir / 'stage.json'}', plots_dir='{workdir / 'plots'}', reference_path=None)")
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    if out.returncode:
        raise SystemExit(f"the stage failed:\n{out.stderr[-3000:]}")
    m = json.loads((workdir / "stage.json").read_text())
    return {**{k: v for k, v in m.items() if k.startswith("time_")}, "stage_wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repo", default=str(ROOT), help="a working tree after `make repro` (default: this one)")
    parser.add_argument("--side", choices=["ours", "bare"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global REPO
    REPO = Path(args.repo).resolve()
    os.chdir(REPO)  # params.yaml's paths (models/small, data/personas.yaml) are relative to the repo
    if args.side:
        print(json.dumps((side_ours if args.side == "ours" else side_bare)(Path(args.workdir))))
        return

    from mascot.config import load_params
    from mascot.io import write_jsonl

    params = load_params(REPO / "params.yaml")
    p = params.train_rm
    per_step = p.batch_size * p.gradient_accumulation_steps
    workdir = Path(tempfile.mkdtemp(prefix="rm-bench-"))
    train, evaluation = select_pairs(params, args.steps * per_step, 8)
    write_jsonl(workdir / "pairs.jsonl", train + evaluation)
    runs = {"ours": [], "bare": []}
    for r in range(args.rounds):
        for side in (("ours", "bare") if r % 2 == 0 else ("bare", "ours")):
            runs[side].append(run_side(side, workdir, args.steps))
            print(f"round {r + 1} {side}: {runs[side][-1]['train_s']:.1f} s", file=sys.stderr)
    fixed = fixed_costs_of_the_stage(workdir)

    def rate(side):
        return statistics.median(x["pairs"] / x["train_s"] for x in runs[side])

    tokens = statistics.mean(x["tokens"] for x in train) if train else 0
    print(f"# reward-model training, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, "
          f"{'GPU' if _has_gpu() else 'no GPU'}; {p.base_model}, LoRA r={p.lora.r}, batch {p.batch_size} x accumulation "
          f"{p.gradient_accumulation_steps}, {len(train)} pairs ({tokens:.0f} tokens a pair, both sides), "
          f"{args.steps} steps, median of {args.rounds} interleaved rounds")
    print("| trainer | steps | seconds (median) | pairs/s |\n| --- | ---: | ---: | ---: |")
    for side, label in (("ours", "mascot train_reward_model"), ("bare", "bare TRL RewardTrainer script")):
        print(f"| {label} | {runs[side][0]['steps']} | {statistics.median(x['train_s'] for x in runs[side]):.1f} "
              f"| {rate(side):.2f} |")
    print(f"\nours / bare TRL = {rate('ours') / rate('bare'):.3f}x (target >= 0.90x); bare TRL tokenised "
          f"{runs['bare'][0]['tokens']} tokens, ours {sum(x['tokens'] for x in train)}")
    print("\n| fixed cost in the stage | seconds |\n| --- | ---: |")
    for key, value in fixed.items():
        print(f"| {key.removeprefix('time_').removesuffix('_s').replace('_', ' ')} | {value:.2f} |")


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
