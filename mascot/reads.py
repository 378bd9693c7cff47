"""What a stage reads while it runs: the parameter keys (every field of `params.yaml` the code touches) and the
input files (through `mascot.io`). `dvc.yaml` must declare both, or a change leaves results stale without a word.

Recording is off unless `MASCOT_RECORD_READS` names a folder: then each stage process writes
`<folder>/<stage>.<pid>.json` when it ends. `python -m mascot.param_deps` compares the records of a run with
dvc.yaml and writes the `params:` lists from them (`--write`); `tests/test_pipeline_dvc.py` records the tiny
chain and fails where dvc.yaml misses a key or a file a stage read.
"""
from __future__ import annotations

import atexit
from contextlib import contextmanager
import json
import os
from pathlib import Path

ENV = "MASCOT_RECORD_READS"

_params: set[str] = set()
_files: set[str] = set()
_paused = 0
_stage: str | None = None


def recording() -> bool:
    return _stage is not None and not _paused


def param_read(path: str) -> None:
    if recording():
        _params.add(path)


def file_read(path: str | Path) -> None:
    if recording():
        _files.add(str(path))


@contextmanager
def paused():
    """Reads that decide nothing a stage outputs (a checkpoint folder's key over every parameter) are not recorded."""
    global _paused
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1


def start(stage: str) -> None:
    """Record this process's reads under `stage` when MASCOT_RECORD_READS is set (written at exit)."""
    global _stage
    if os.environ.get(ENV) and _stage is None:
        _stage = stage
        atexit.register(flush)


def flush() -> None:
    folder = os.environ.get(ENV)
    if not folder or _stage is None:
        return
    out = Path(folder) / f"{_stage}.{os.getpid()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cwd = Path.cwd().resolve()
    files = set()
    for f in _files:
        p = Path(f)
        p = (p if p.is_absolute() else cwd / p).resolve()
        if p.is_relative_to(cwd):  # inside the repository: what dvc.yaml can declare
            files.add(p.relative_to(cwd).as_posix())
    out.write_text(json.dumps({"stage": _stage, "params": sorted(_params), "files": sorted(files)}, indent=1))


def load(folder: str | Path) -> dict[str, dict[str, set[str]]]:
    """{stage: {"params": keys, "files": paths}}, the union of every process's record in `folder`."""
    out: dict[str, dict[str, set[str]]] = {}
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        entry = out.setdefault(rec["stage"], {"params": set(), "files": set()})
        entry["params"].update(rec["params"])
        entry["files"].update(rec["files"])
    return out
