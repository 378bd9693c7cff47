"""`mascot stack up | down | status`: the supervisor of the team tracking stack, loopback only.

PostgreSQL (MLflow's backend store), SeaweedFS (an S3 object store for MLflow artifacts and the DVC remote)
and `mlflow server` with basic-auth and proxied artifacts, all data under one folder, so that `down` then
`up` keeps every run and model version. Secrets come only from the environment; nothing here writes them
to a file, a log or a command line (`ps` shows command lines: the database URI goes in the environment).

Every process is started in its own process group and stopped by group: `mlflow server` leaves workers
behind when only its PID is killed. PostgreSQL refuses to run as root, so as root it runs as `postgres`.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

import psutil

from mascot.ops import processes
from mascot.ops.stack.common import SECRETS, StackConfig, StackError, group_of, secret, stop_service, wait_until
from mascot.ops.stack.mlflow_server import mlflow_healthy, start_mlflow
from mascot.ops.stack.postgres import postmaster_pid, start_postgres, stop_postgres
from mascot.ops.stack.seaweedfs import s3_ready, start_seaweedfs

SERVICES = ("postgres", "seaweedfs", "mlflow")


def running(cfg: StackConfig) -> dict[str, list[int]]:
    """Service -> its live process ids (empty when it is down)."""
    out = {}
    pm = postmaster_pid(cfg)
    out["postgres"] = [pm, *[c.pid for c in psutil.Process(pm).children(recursive=True)]] if pm else []
    for name in ("seaweedfs", "mlflow"):
        pgid = group_of(cfg, name)
        out[name] = processes.group_pids(pgid) if pgid else []
    return out


# what `mascot stack up` needs beyond `make setup`: the team extra (and Debian's PostgreSQL)
TEAM_MODULES = {"psycopg2": "postgres", "boto3": "mlflow"}
DEPS_HINT = "install the team stack's dependencies with `make stack-deps` (the `team` extra and PostgreSQL)"


def missing_modules(services: tuple[str, ...]) -> list[str]:
    return [m for m, service in TEAM_MODULES.items() if service in services and importlib.util.find_spec(m) is None]


def up(cfg: StackConfig, services: tuple[str, ...] = SERVICES, timeout_s: float = 120.0) -> dict[str, float]:
    """Start what is not running, wait for health; returns seconds to healthy per service started. A step that
    fails stops every service this call started (what was running before is left alone) and says what failed."""
    for name in SECRETS:
        secret(name)  # fail before starting anything
    missing = missing_modules(services)
    if missing:
        raise StackError(f"Python module(s) {', '.join(missing)} not installed: {DEPS_HINT}")
    cfg.save()
    (cfg.path / "logs").mkdir(parents=True, exist_ok=True)
    live, took, started = running(cfg), {}, []
    start = time.monotonic()
    steps = {
        "postgres": lambda: start_postgres(cfg),
        "seaweedfs": lambda: (start_seaweedfs(cfg), wait_until(
            lambda: s3_ready(cfg), f"SeaweedFS S3 on {cfg.s3_endpoint}", timeout_s,
            cfg.path / "logs" / "seaweedfs.log", lambda: group_of(cfg, "seaweedfs")))[1],
        "mlflow": lambda: (start_mlflow(cfg), wait_until(
            lambda: mlflow_healthy(cfg), f"mlflow server on {cfg.tracking_uri}", timeout_s,
            cfg.path / "logs" / "mlflow.log", lambda: group_of(cfg, "mlflow")))[1],
    }
    for name in SERVICES:
        if name not in services or live[name]:
            continue
        started.append(name)  # before the step: a step that fails half-way may have left its process running
        try:
            waited = steps[name]()
        except BaseException as exc:
            down(cfg, tuple(started))
            left = {k: v for k, v in running(cfg).items() if v and k in started}
            why = str(exc) if isinstance(exc, StackError) else f"{type(exc).__name__}: {exc}"
            raise StackError(f"starting {name} failed: {why}; stopped what this `up` had started "
                             f"({', '.join(reversed(started))})" + (f", but processes are left: {left}" if left else "")
                             + (f"; {DEPS_HINT}" if isinstance(exc, ImportError) else "")) from exc
        took[name] = waited if waited is not None else time.monotonic() - start
    took["total"] = time.monotonic() - start
    return took


def down(cfg: StackConfig, services: tuple[str, ...] = SERVICES) -> None:
    # the server first, so that nothing writes to a store that is going away
    if "mlflow" in services:
        stop_service(cfg, "mlflow")
    if "seaweedfs" in services:
        stop_service(cfg, "seaweedfs")
    if "postgres" in services:
        stop_postgres(cfg)


def status(cfg: StackConfig) -> dict:
    def memory_mb(pids, kind):
        """RSS counts shared pages (PostgreSQL's shared buffers) once per process; PSS splits them fairly."""
        total = 0
        for pid in pids:
            try:
                info = psutil.Process(pid)
                total += info.memory_info().rss if kind == "rss" else info.memory_full_info().pss
            except (psutil.Error, AttributeError):
                pass
        return round(total / 2**20, 1)

    live = running(cfg)
    where = {"postgres": f"postgresql://127.0.0.1:{cfg.pg_port}/{cfg.db_name}", "seaweedfs": cfg.s3_endpoint,
             "mlflow": cfg.tracking_uri}
    return {name: {"running": bool(pids), "address": where[name], "processes": len(pids),
                   "rss_mb": memory_mb(pids, "rss"), "pss_mb": memory_mb(pids, "pss")}
            for name, pids in live.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mascot stack", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("services", nargs="*", metavar="SERVICE",
                        help=f"only these ({', '.join(SERVICES)}); default: all")
    parser.add_argument("--root", default=os.environ.get("MASCOT_STACK_ROOT", ".mascot/stack"),
                        help="the folder that holds all of the stack's data (default: .mascot/stack, "
                             "or $MASCOT_STACK_ROOT)")
    for port in ("pg_port", "s3_port", "mlflow_port"):
        parser.add_argument(f"--{port.replace('_', '-')}", type=int, dest=port, default=None)
    args = parser.parse_intermixed_args(argv)  # `down --root R postgres` as well as `down postgres --root R`
    unknown = set(args.services) - set(SERVICES)
    if unknown:
        parser.error(f"unknown service(s) {sorted(unknown)}; known: {', '.join(SERVICES)}")
    cfg = StackConfig.load(args.root, pg_port=args.pg_port, s3_port=args.s3_port, mlflow_port=args.mlflow_port)
    services = tuple(args.services) or SERVICES
    try:
        if args.command == "up":
            took = up(cfg, services)
            print(json.dumps({"seconds_to_healthy": {k: round(v, 1) for k, v in took.items()},
                              "status": status(cfg)}, indent=2))
            print(f"export MLFLOW_TRACKING_URI={cfg.tracking_uri}\n"
                  f"# and MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (or ~/.mlflow/credentials)\n"
                  f"# DVC remote: dvc remote modify team endpointurl {cfg.s3_endpoint}")
        elif args.command == "down":
            down(cfg, services)
            left = {k: v for k, v in running(cfg).items() if v and k in services}
            print(json.dumps({"stopped": list(services), "processes_left": left}))
            return 1 if left else 0
        else:
            print(json.dumps(status(cfg), indent=2))
    except StackError as exc:
        print(f"mascot stack {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0
