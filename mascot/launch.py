"""More than one training process: the training stages re-run themselves under `accelerate launch`.

The DVC stage command stays `mascot train_rm`; `train_rm.num_processes` (or `grpo.`, `train_group_rm.`,
`train_director.`) decides whether it runs in this process or as N DDP ranks. `--multi_gpu` is used even on a
CPU: `accelerate launch --cpu --num_processes N` exits 0 having run ONE process, while `--multi_gpu` starts N
ranks that fall back to gloo without GPUs. After training, only the main rank saves, scores, logs to MLflow
and registers (after a barrier): N ranks make one registered version.
"""
from __future__ import annotations

import os
from pathlib import Path
import subprocess
import sys

# stage -> its params block
TRAINING_STAGES = {"train_rm": "train_rm", "train_group_rm": "train_group_rm", "train_grpo": "grpo",
                   "train_director": "train_director"}


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return rank() == 0


def under_launcher() -> bool:
    return "LOCAL_RANK" in os.environ or "WORLD_SIZE" in os.environ


def launch_command(argv: list[str], num_processes: int, config_file: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if config_file:
        cmd += ["--config_file", config_file, "--num_processes", str(num_processes)]
    else:
        cmd += ["--multi_gpu", "--num_processes", str(num_processes), "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no"]
    # the same `mascot` as this process (`-m mascot.cli` would import a `mascot/` folder in the working directory)
    script = Path(sys.executable).parent / "mascot"
    return [*cmd, str(script), *argv] if script.exists() else [*cmd, "-m", "mascot.cli", *argv]


def relaunch(stage: str, params, argv: list[str]) -> int | None:
    """Run the stage as N ranks and return their exit status, or None to run it here (N = 1, or already a rank)."""
    key = TRAINING_STAGES.get(stage)
    if key is None or under_launcher():
        return None
    p = getattr(params, key)
    if p.num_processes <= 1 and not p.accelerate_config:
        return None
    cmd = launch_command(argv, p.num_processes, p.accelerate_config)
    print(f"{stage}: {p.num_processes} processes: {' '.join(cmd[1:])}", flush=True)
    return subprocess.call(cmd)


def rank_tag() -> str:
    return f"[rank {rank()}/{world_size()}]"


def one_write_per_line() -> None:
    """A rank's stdout and stderr write each line in one piece, so ranks sharing a pipe never splice their lines.

    Unbuffered (PYTHONUNBUFFERED=1, as in CI) `print` writes the text and its newline separately, and another
    rank's line lands between them; line buffering makes each line one write, which POSIX keeps whole on a
    pipe up to PIPE_BUF bytes. tqdm flushes its carriage-return bars itself.
    """
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # not a stand-in stream (pytest's capsys)
            stream.reconfigure(line_buffering=True, write_through=False)
