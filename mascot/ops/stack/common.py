"""What every service of the team stack shares: its configuration (ports, the data folder), secrets from the
environment, health waits, and the process groups the supervisor starts and stops (mascot/ops/processes.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
import json
import os
from pathlib import Path
import shutil
import socket
import subprocess
import sys
import time

from mascot.ops import processes

# name -> (environment variable, what it is); `up` refuses to start without them
SECRETS = {"db_password": ("MASCOT_STACK_DB_PASSWORD", "the PostgreSQL password of the stack's database user"),
           "s3_access_key": ("AWS_ACCESS_KEY_ID", "the object store's access key (its admin identity)"),
           "s3_secret_key": ("AWS_SECRET_ACCESS_KEY", "the object store's secret key"),
           "admin_password": ("MLFLOW_AUTH_ADMIN_PASSWORD", "the MLflow admin's password (basic-auth)")}


class StackError(RuntimeError):
    pass


@dataclass
class StackConfig:
    """Where the stack keeps its data and which loopback ports it takes. Saved in `<root>/stack.json` by the
    first `up`; later commands read it from there (a flag given again overrides it)."""
    root: str = ".mascot/stack"
    pg_port: int = 5433
    s3_port: int = 8333
    mlflow_port: int = 5001
    weed_master_port: int = 9433
    weed_volume_port: int = 8433
    weed_filer_port: int = 8988
    weed_metrics_port: int = 9434
    db_user: str = "mascot"
    db_name: str = "mlflow"
    admin_username: str = "admin"
    buckets: list[str] = field(default_factory=lambda: ["mlflow", "dvc"])

    @property
    def path(self) -> Path:
        return Path(self.root).resolve()

    @property
    def tracking_uri(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @classmethod
    def load(cls, root: str, **overrides) -> "StackConfig":
        saved = Path(root) / "stack.json"
        values = json.loads(saved.read_text()) if saved.exists() else {}
        values.update({k: v for k, v in overrides.items() if v is not None})
        values["root"] = root
        return cls(**values)

    def save(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "stack.json").write_text(json.dumps(asdict(self), indent=2))


def secret(name: str) -> str:
    var, what = SECRETS[name]
    value = os.environ.get(var)
    if not value:
        raise StackError(f"set {var} ({what}) in the environment; the stack never stores secrets itself")
    return value


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_until(check, what: str, timeout_s: float, log: Path | None = None, alive=lambda: True) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s and alive():
        if check():
            return time.monotonic() - start
        time.sleep(0.25)
    tail = ""
    if log and log.exists():
        tail = "\n  ".join(log.read_text(errors="replace").splitlines()[-15:])
        tail = f"; last lines of {log}:\n  {tail}"
    why = f"did not become healthy within {timeout_s:.0f} s" if alive() else "exited"
    raise StackError(f"{what} {why}{tail}")


def run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}")


def bin_path(tool: str) -> str:
    """A console script of this environment (weed, mlflow) even when its bin folder is not on PATH."""
    here = Path(sys.executable).parent / tool
    found = str(here) if here.exists() else shutil.which(tool)
    if not found:
        raise StackError(f"`{tool}` was not found; install the team extra: make stack-deps (or pip install -e '.[team]')")
    return found


def pidfile(cfg: StackConfig, name: str) -> Path:
    return cfg.path / "run" / f"{name}.pgid"


def group_of(cfg: StackConfig, name: str) -> int | None:
    """The process group a service was started in, while any of it lives."""
    try:
        pgid = int(pidfile(cfg, name).read_text())
    except (OSError, ValueError):
        return None
    return pgid if processes.group_pids(pgid) else None


def start_service(cfg: StackConfig, name: str, cmd: list[str], env: dict[str, str]) -> int:
    """`cmd` in its own process group, its output in logs/NAME.log, its group id in run/NAME.pgid."""
    pgid = processes.start_group(cmd, cfg.path / "logs" / f"{name}.log", env, cfg.path)
    pidfile(cfg, name).parent.mkdir(parents=True, exist_ok=True)
    pidfile(cfg, name).write_text(str(pgid))
    return pgid


def stop_service(cfg: StackConfig, name: str, grace_s: float = 20.0) -> None:
    pgid = group_of(cfg, name)
    if pgid is not None:
        processes.stop_group(pgid, grace_s)
    pidfile(cfg, name).unlink(missing_ok=True)
