"""Where a stage's seconds go: `mascot <stage>` under py-spy (sampling, native frames off), its samples sorted
into what they were doing, by the first matching frame from the root of each stack.

    python benchmarks/profile_stages.py --workdir <a DVC workspace whose upstream outputs exist> train_grpo evaluate
    python benchmarks/profile_stages.py --from-raw profiles/train_grpo.raw     # classify a saved profile again

Run it in a copy where `dvc repro <stage>` has run once (the stage's inputs are there); each stage is run
again as its own command, so DVC's own time is not in it. py-spy comes from PyPI (`pip install py-spy`); the
raw profiles land in `<workdir>/profiles/`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# (category, substrings of a frame "function (file:line)"), in priority order: a sample belongs to the first
# category that any frame of its stack matches
CATEGORIES = [
    ("imports", ("_find_and_load", "_call_with_frames_removed")),
    ("GGUF parse", ("gguf_reader", "_gguf_parse_value")),
    ("GGUF dequantize", ("dequantize",)),
    ("mlflow", ("mlflow/",)),
    ("model load", ("from_pretrained", "load_state_dict", "safetensors", "download_artifacts",
                    "load_base_classifier", "load_adapter")),
    ("backward", ("backward", "run_backward", "_engine_run_backward")),
    ("optimizer", ("optimizer", "adamw", "step (torch/optim")),
    ("the watch: greedy answers", ("greedy_answers",)),
    ("judge (expected mode)", ("choice_distribution",)),
    ("judge (json mode)", ("json_complete",)),
    ("reward-model scoring", ("score_ids",)),
    ("generation (decode)", ("generate (", "_sample (", "_prefill_and_generate")),
    ("tokenisation", ("tokenizer", "tokenize", "apply_chat_template", "encode (", "_batch_encode")),
    ("policy forward (logps)", ("_get_per_token_logps", "compute_loss", "_compute_loss", "selective_log_softmax")),
    ("TRL / Trainer bookkeeping", ("trl/", "transformers/trainer", "accelerate/")),
    ("our Python", ("mascot/",)),
]


IDLE = ("Condition.wait", "_worker (concurrent/futures", "select (selectors", "_recv_msg", "wait (threading")


def classify(stack: str) -> str:
    frames = stack.split(";")
    if frames and any(p in frames[-1] for p in IDLE):
        return "idle"  # a waiting thread (a thread pool, MLflow's async logging): not the stage's work
    for name, patterns in CATEGORIES:
        if any(p in frame for frame in frames for p in patterns):
            return name
    return "other"


def summarise(raw: Path) -> tuple[Counter, int]:
    counts, total = Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        what = classify(stack)
        if what == "idle":
            continue
        counts[what] += int(n)
        total += int(n)
    return counts, total


def print_summary(stage: str, counts: Counter, total: int, wall: float | None) -> None:
    head = f"## {stage}" + (f": {wall:.0f} s wall" if wall else "") + f", {total} samples of working threads"
    print(head)
    print("| what | share | seconds |\n| --- | ---: | ---: |")
    for name, n in counts.most_common():
        share = n / total if total else 0.0
        print(f"| {name} | {share:.0%} | {share * wall:.0f} |" if wall else f"| {name} | {share:.0%} | |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stages", nargs="*")
    ap.add_argument("--workdir", default=".")
    ap.add_argument("--rate", type=int, default=20, help="samples per second")
    ap.add_argument("--from-raw", nargs="*", default=[])
    ap.add_argument("--resume", action="store_true", help="let a stage reuse its resume journal (default: a fresh, "
                                                          "empty one, so that the profile measures the work)")
    args = ap.parse_args()
    for raw in args.from_raw:
        counts, total = summarise(Path(raw))
        print_summary(Path(raw).stem, counts, total, None)
    spy = shutil.which("py-spy")
    if args.stages and not spy:
        sys.exit("py-spy is not installed: pip install py-spy")
    work = Path(args.workdir)
    (work / "profiles").mkdir(exist_ok=True)
    mascot = shutil.which("mascot") or f"{sys.executable} -m mascot.cli"
    for stage in args.stages:
        raw = work / "profiles" / f"{stage}.raw"
        env = os.environ.copy()
        if not args.resume:
            env["MASCOT_RESUME_DIR"] = tempfile.mkdtemp(prefix=f"profile-{stage}-")
        start = time.perf_counter()
        proc = subprocess.run([spy, "record", "-r", str(args.rate), "-f", "raw", "-o", str(raw), "--",
                               *mascot.split(), stage], cwd=work, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode:
            print(f"{stage}: exited {proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        counts, total = summarise(raw)
        print_summary(stage, counts, total, wall)


if __name__ == "__main__":
    main()
