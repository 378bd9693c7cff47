"""A copy of the pipeline to run apart from the user's working tree: the tests' repos, the benchmarks' and
`make evidence`'s working folders. Test and benchmark helpers, not part of the `mascot` package: a copy holds the
repository's committable files as a fresh git repo, with an environment that runs its own code offline."""
from __future__ import annotations

import os
from pathlib import Path
import shutil
import subprocess
import sys


def copy_tracked_files(repo: Path, dest: Path) -> None:
    """The files git would commit (tracked, and untracked but not ignored) of `repo`, copied into `dest`:
    a fresh working tree for running the pipeline apart (tests, benchmarks)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=repo, capture_output=True,
                           text=True, check=True).stdout.split()
    for rel in files:
        if (repo / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, dest / rel)


def pipeline_env(dest: Path, **extra_env: str) -> dict[str, str]:
    """The environment to run the pipeline copy in `dest` apart (fresh_pipeline_copy's, also for a copy made before)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1",
            "HF_HUB_OFFLINE": "1", "MASCOT_RESUME_DIR": str(dest / ".mascot/resume"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(dest), os.environ.get("PYTHONPATH")])), **extra_env}


def fresh_pipeline_copy(repo: Path, dest: Path, **extra_env: str) -> dict[str, str]:
    """`repo`'s committable files as a fresh git repo in `dest`, and the environment to run the pipeline there
    apart (this interpreter's `mascot`/`dvc` first on PATH, the copy's own `mascot` package first on the import
    path rather than an editable install's, offline, its own resume folder)."""
    copy_tracked_files(repo, dest)
    env = pipeline_env(dest, **extra_env)
    subprocess.run("git init -q && git add -A && git -c user.email=m@m -c user.name=mascot commit -qm copy",
                   shell=True, cwd=dest, env=env, check=True, capture_output=True)
    return env
