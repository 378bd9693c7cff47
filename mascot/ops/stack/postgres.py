"""PostgreSQL, MLflow's backend store: initialised once under the stack's folder, run as `postgres` when this is
root (PostgreSQL refuses to run as root), started and stopped with its own pg_ctl."""
from __future__ import annotations

import os
from pathlib import Path
import shutil
import tempfile

from mascot.ops import processes
from mascot.ops.stack.common import StackConfig, StackError, run, secret


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
    return pid if processes.pid_alive(pid) else None


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
