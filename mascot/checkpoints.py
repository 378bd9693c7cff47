"""Training that resumes: checkpoints keyed on a training stage's inputs.

A training stage (train_rm, train_group_rm, train_grpo, train_director) saves a checkpoint every
`checkpoint_steps` steps under `.mascot/checkpoints/<stage>/<key>`, the key a fingerprint of everything that
shapes the run (the params, the data, the base and reward models' digests, the number of processes). A rerun
with the same inputs resumes from the last complete checkpoint (transformers' `resume_from_checkpoint`: the
adapter, the optimizer, the scheduler and the RNG states, plus the stage's own state: the watch's checks, the
counts its figures report) and continues the same MLflow run; with other inputs
it starts over. A preempted job (Slurm, a spot machine, kill -9) loses at most `checkpoint_steps` steps.

transformers writes a checkpoint folder in place, so one cut short by a kill looks like any other: a checkpoint
counts once `CheckpointCallback.on_save` has marked it, which transformers calls after the save is done.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
import re
import shutil

from mascot import reads
from mascot.config import Params
from mascot.resume import fingerprint

CHECKPOINT_ROOT = Path(os.environ.get("MASCOT_CHECKPOINT_DIR", ".mascot/checkpoints"))
COMPLETE = "mascot_complete.json"
RUN_FILE = "mlflow_run.json"
COUNTERS = "mascot_counters.json"
_STEP = re.compile(r"^checkpoint-(\d+)$")


def params_key(params: Params) -> dict:
    """Every parameter, for a checkpoint folder's key (a rerun resumes only with all of them unchanged). Not a read
    that decides what the stage outputs, so not recorded as one (mascot/reads.py)."""
    with reads.paused():
        return params.model_dump()


def checkpoint_dir(stage: str, *inputs, root: Path | None = None) -> Path:
    """The folder of this stage's checkpoints for these inputs; the stage's folders for other inputs are removed
    (their runs can never resume: the inputs changed)."""
    base = (root or CHECKPOINT_ROOT) / stage
    key = fingerprint(*inputs)
    if base.is_dir():
        for other in base.iterdir():
            if other.name != key and other.is_dir():
                shutil.rmtree(other, ignore_errors=True)
    return base / key


def last_checkpoint(directory: Path) -> Path | None:
    """The highest-step checkpoint that was saved whole, or None (a fresh start)."""
    if not Path(directory).is_dir():
        return None
    done = [(int(m.group(1)), p) for p in Path(directory).iterdir()
            if (m := _STEP.match(p.name)) and (p / COMPLETE).exists()]
    return max(done)[1] if done else None


def step_of(checkpoint: Path) -> int:
    return int(_STEP.match(Path(checkpoint).name).group(1))


def remembered_run(directory: Path) -> str | None:
    """The MLflow run a resumed training continues (None when there is nothing to resume)."""
    if last_checkpoint(directory) is None:
        return None
    try:
        return json.loads((Path(directory) / RUN_FILE).read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return None


def remember_run(directory: Path, run_id: str) -> None:
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / RUN_FILE).write_text(json.dumps({"run_id": run_id}))


def finished(directory: Path) -> None:
    """The run is registered: its checkpoints are no longer needed."""
    shutil.rmtree(directory, ignore_errors=True)


def save_counters(folder: Path, counters: dict[str, dict]) -> None:
    """A stage's running counts (name -> {key: count}) beside a checkpoint, so that a resumed run counts on from
    them rather than from 0 (a figure counted over the run would otherwise hold only the steps since the resume)."""
    (Path(folder) / COUNTERS).write_text(json.dumps(counters))


def restore_counters(folder: Path, counters: dict[str, dict]) -> bool:
    """The counts saved with a checkpoint, put back into `counters`' own dicts (the reward functions hold them);
    False when the checkpoint has none."""
    saved_file = Path(folder) / COUNTERS
    if not saved_file.exists():
        return False
    saved = json.loads(saved_file.read_text())
    for name, counts in counters.items():
        counts.update(saved.get(name, {}))
    return True


def callback(save_extra=None):
    """A TrainerCallback that marks each checkpoint complete once transformers has written it, after
    `save_extra(folder)` has put the stage's own state beside it (the watch's checks so far)."""
    from transformers import TrainerCallback

    class CheckpointCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if not state.is_world_process_zero:
                return
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                if save_extra is not None:
                    save_extra(folder)
                (folder / COMPLETE).write_text(json.dumps({"step": state.global_step}))

    return CheckpointCallback()
