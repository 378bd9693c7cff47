"""Processes in their own groups, started and stopped by group: a server that forks workers (vLLM, `mlflow
server`) leaves them behind when only its own PID is killed. Zombies do not count as alive."""
from __future__ import annotations

import os
from pathlib import Path
import signal
import subprocess
import time

import psutil


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_pids(pgid: int) -> list[int]:
    """The live (not zombie) members of process group `pgid`."""
    pids = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return pids


def start_group(cmd: list[str], log: Path, env: dict[str, str], cwd: Path | None = None) -> int:
    """`cmd` as the leader of a new process group (its id is the leader's pid), output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=cwd)
    return proc.pid


def stop_group(pgid: int, grace_s: float = 20.0, reap=None) -> None:
    """SIGTERM to the whole group, SIGKILL whatever is left after `grace_s`; returns when no member lives.
    `reap` (a started Popen's poll) collects the leader when this process is its parent."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while group_pids(pgid) and time.monotonic() < deadline:
        if reap:
            reap()
        time.sleep(0.2)
    if group_pids(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        while group_pids(pgid):
            if reap:
                reap()
            time.sleep(0.1)
