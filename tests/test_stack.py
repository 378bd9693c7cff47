"""The team stack for real: PostgreSQL, SeaweedFS (S3) and `mlflow server` with basic-auth, started by
`mascot stack up`; the tiny pipeline's train_rm -> promote -> train_grpo against it; a colleague's clone; a READ
user and an anonymous client refused; the server killed during registration; PostgreSQL restarted between
stages; the DVC remote over S3 and a local folder; then `mascot stack down` leaving no process.

The tests share the stack and the tiny pipeline repo (tests/conftest.py); what one needs from another (the team
clone, a champion registered on the server) is a module fixture, so each test runs alone, with `-k` or in any order.
"""
import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import warnings
from glob import glob
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mascot.ops.stack.common import port_open
from tests.conftest import free_port, ran_stages, sh

pytestmark = pytest.mark.integration
RM = "mascot-persona-rm"


@pytest.fixture(scope="module")
def stack(dvc_repo):
    if not glob("/usr/lib/postgresql/*/bin/initdb"):
        pytest.skip("PostgreSQL is not installed: `make stack-deps` (as root) or `apt-get install postgresql`")
    work, env = dvc_repo
    root = Path(tempfile.mkdtemp(prefix="mascot-stack-"))
    root.chmod(0o755)  # PostgreSQL runs as `postgres` and must reach its folder
    ports = {k: free_port() for k in ("pg", "s3", "mlflow")}
    secret_env = {"MASCOT_STACK_DB_PASSWORD": secrets.token_hex(12), "AWS_ACCESS_KEY_ID": "mascot-" + secrets.token_hex(4),
                  "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16), "MLFLOW_AUTH_ADMIN_PASSWORD": secrets.token_hex(12)}
    admin_env = {**env, **secret_env}
    stack_cmd = f"mascot stack {{}} --root {root}"
    ports_args = f" --pg-port {ports['pg']} --s3-port {ports['s3']} --mlflow-port {ports['mlflow']}"
    start = time.monotonic()
    out = sh(stack_cmd.format("up") + ports_args, work, admin_env)
    took = time.monotonic() - start
    uri = f"http://127.0.0.1:{ports['mlflow']}"
    state = {"root": root, "ports": ports, "uri": uri, "secret_env": secret_env, "admin_env": admin_env,
             "cmd": stack_cmd, "up_output": out, "up_seconds": took,
             # a client: the server's URL and its MLflow user, no S3 keys and no database password
             "client_env": {**env, "MLFLOW_TRACKING_URI": uri, "MLFLOW_TRACKING_USERNAME": "admin",
                            "MLFLOW_TRACKING_PASSWORD": secret_env["MLFLOW_AUTH_ADMIN_PASSWORD"]}}
    yield state
    sh(stack_cmd.format("down"), work, admin_env, check=False)
    shutil.rmtree(root, ignore_errors=True)  # the database, the bucket and the logs: 70 MB a run otherwise


def json_in(text: str):
    """The JSON object a command printed (indented or on one line), among other lines (warnings)."""
    start = text.index("{")
    depth = 0
    for i, ch in enumerate(text[start:], start):
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return json.loads(text[start:i + 1])
    raise ValueError(text)


def pids_of(status: dict) -> int:
    return sum(s["processes"] for s in status.values())


def test_stack_up_is_healthy_and_keeps_no_secret(stack, dvc_repo):
    work, _ = dvc_repo
    out = stack["up_output"]
    status = json_in(sh(stack["cmd"].format("status"), work, stack["admin_env"]))
    assert all(s["running"] for s in status.values()), status
    memory = sum(s["rss_mb"] for s in status.values())
    print(f"mascot stack up: healthy in {stack['up_seconds']:.1f} s (wall, command), "
          f"{json_in(out)['seconds_to_healthy']}; {pids_of(status)} processes, "
          f"{memory:.0f} MB RSS: { {k: v['rss_mb'] for k, v in status.items()} }")
    assert f"MLFLOW_TRACKING_URI={stack['uri']}" in out
    # secrets live only in the environment: not in the stack's files, its logs or its output
    for value in stack["secret_env"].values():
        assert value not in out
        for path in (stack["root"] / "stack.json", stack["root"] / "basic_auth.ini", *stack["root"].glob("logs/*")):
            assert value not in path.read_text(errors="replace"), path
    # an anonymous client is refused
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{stack['uri']}/api/2.0/mlflow/experiments/search?max_results=1", timeout=10)
    assert refused.value.code == 401


def use_team_remote(stack, repo, env):
    """The shipped `team` remote pointed at this stack; the keys go only in .dvc/config.local."""
    s3 = stack["secret_env"]
    sh(f"dvc remote modify --local team endpointurl http://127.0.0.1:{stack['ports']['s3']} && "
       f"dvc remote modify --local team access_key_id {s3['AWS_ACCESS_KEY_ID']} && "
       f"dvc remote modify --local team secret_access_key {s3['AWS_SECRET_ACCESS_KEY']}", repo, env)


def pushed_pipeline(stack, dvc_repo) -> str:
    """The tiny pipeline run and committed in the shared repo, its outputs pushed to the team remote (once)."""
    work, env = dvc_repo
    if "pushed" not in stack:
        sh("dvc repro", work, env)  # up to date when the pipeline tests ran first; else this runs it
        sh("git add -A && git -c user.email=t@t -c user.name=t commit -qm 'pipeline outputs' --allow-empty", work, env)
        use_team_remote(stack, work, env)
        stack["pushed"] = dvc_transfer("dvc push -r team", work, env, stack)
    return stack["pushed"]


def dvc_transfer(cmd: str, cwd, env, stack, attempts: int = 2, timeout_s: float = 300) -> str:
    """`dvc push`/`dvc pull` against the S3 remote, bounded: DVC's transfer to an S3-compatible endpoint can hang
    with no traffic (treeverse/dvc#10374, open; once in CI, 30 minutes here). The tiny pipeline moves 3 MB in
    about 5 s, so a stall is killed at `timeout_s`, said in a warning with DVC's verbose log and SeaweedFS's, and
    tried again as a user would: the second run moves only what is missing."""
    for attempt in range(1, attempts + 1):
        try:
            out = sh(f"{cmd} -v", cwd, env, timeout_s=timeout_s)
            return "\n".join(line for line in out.splitlines() if " DEBUG: " not in line)
        except subprocess.TimeoutExpired as stalled:
            weed_log = stack["root"] / "logs" / "seaweedfs.log"
            told = (f"`{cmd}` stalled past {timeout_s:.0f} s (attempt {attempt} of {attempts}); DVC's log ends:\n"
                    f"{(stalled.stdout or '')[-1500:]}{(stalled.stderr or '')[-1500:]}\nSeaweedFS's log ends:\n"
                    f"{weed_log.read_text(errors='replace')[-1500:] if weed_log.exists() else '(none)'}")
            if attempt == attempts:
                raise AssertionError(told) from None
            warnings.warn(told)


def pulled_clone(stack, dvc_repo, folder: Path, remote: str, local_remote: Path | None = None) -> tuple[str, str]:
    """A fresh clone of the shared repo in `folder` that pulls its outputs from `remote`: (pull's output, status)."""
    work, env = dvc_repo
    sh(f"git clone -q {work} {folder}", folder.parent, env)
    if remote == "team":
        use_team_remote(stack, folder, env)
    else:
        sh(f"dvc remote add --local {remote} {local_remote}", folder, env)
    pulled = dvc_transfer(f"dvc pull -r {remote}", folder, env, stack) if remote == "team" else \
        sh(f"dvc pull -r {remote}", folder, env)
    return pulled, sh("dvc status", folder, env)


@pytest.fixture(scope="module")
def team_clone(stack, dvc_repo, tmp_path_factory) -> Path:
    """A colleague's clone that pulled the pipeline's outputs from the team remote."""
    pushed_pipeline(stack, dvc_repo)
    clone = tmp_path_factory.mktemp("team") / "clone-team"
    pulled_clone(stack, dvc_repo, clone, "team")
    return clone


@pytest.fixture(scope="module")
def team_champion(stack, team_clone) -> dict:
    """train_rm -> promote -> train_grpo run in the team clone against the server: its output and the version."""
    out = sh("dvc repro -f -s train_rm promote train_grpo", team_clone, stack["client_env"])
    registered = json.loads((team_clone / "models/reward/registered.json").read_text())
    return {"out": out, "registered": registered, "version": registered["version"]}


def test_dvc_push_then_a_fresh_clone_pulls_and_reruns_nothing(stack, dvc_repo, tmp_path):
    work, env = dvc_repo
    pushed = pushed_pipeline(stack, dvc_repo)
    print(f"dvc push -r team: {pushed.strip().splitlines()[-1]}")
    committed = (work / ".dvc/config").read_text()
    assert "s3://dvc/" in committed and stack["secret_env"]["AWS_SECRET_ACCESS_KEY"] not in committed
    local_remote = tmp_path / "offline-remote"
    sh(f"dvc remote add --local offline {local_remote} && dvc push -r offline", work, env)

    for remote in ("team", "offline"):
        clone = tmp_path / f"clone-{remote}"
        pulled, status = pulled_clone(stack, dvc_repo, clone, remote, local_remote)
        assert "Data and pipelines are up to date" in status, status
        again = sh("dvc repro", clone, env)
        assert ran_stages(again) == set(), again
        print(f"fresh clone, dvc pull -r {remote}: {pulled.strip().splitlines()[-1]}; dvc status: {status.strip()}; "
              f"dvc repro ran {sorted(ran_stages(again))}")


def s3_keys(stack) -> list[str]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{stack['ports']['s3']}", region_name="us-east-1",
                      aws_access_key_id=stack["secret_env"]["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=stack["secret_env"]["AWS_SECRET_ACCESS_KEY"])
    keys, token = [], {}
    while True:
        page = s3.list_objects_v2(Bucket="mlflow", **token)
        keys += [o["Key"] for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return keys
        token = {"ContinuationToken": page["NextContinuationToken"]}


def pg_rows(stack, sql: str) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=stack["ports"]["pg"], user="mascot", dbname="mlflow",
                            password=stack["secret_env"]["MASCOT_STACK_DB_PASSWORD"])
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def test_pipeline_runs_unchanged_against_the_team_server(stack, team_clone, team_champion):
    out, registered = team_champion["out"], team_champion["registered"]
    assert ran_stages(out) == {"train_rm", "promote", "train_grpo"}, out
    assert "-> @champion" in out and f"models:/{RM}@champion" in out
    keys = s3_keys(stack)
    adapter_keys = [k for k in keys if k.endswith("reward_model/adapter_model.safetensors")
                    and registered["run_id"] in k]
    assert adapter_keys and any(k.endswith("policy/adapter_model.safetensors") for k in keys)
    assert not (team_clone / "mlartifacts" / "mascot-reward").exists()  # nothing written to the client's disk
    versions = pg_rows(stack, "SELECT name, version, source FROM model_versions ORDER BY name, version")
    aliases = pg_rows(stack, "SELECT name, alias, version FROM registered_model_aliases")
    assert (RM, "champion", int(registered["version"])) in aliases
    assert all(src.startswith("mlflow-artifacts:/") for _, _, src in versions)
    print(f"team server: {RM} v{registered['version']} @champion; rows in PostgreSQL: {versions}, aliases {aliases}; "
          f"{len(keys)} objects in s3://mlflow, e.g. {adapter_keys[0]}")


@pytest.fixture
def as_admin(stack, monkeypatch):
    for k in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.setenv(k, stack["client_env"][k])
    import mlflow

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(stack["uri"])
    mlflow.set_registry_uri(stack["uri"])
    yield
    mlflow.set_tracking_uri(before)
    mlflow.set_registry_uri(before)


def test_a_colleague_reads_the_champion_but_cannot_move_it(stack, team_champion, as_admin, tmp_path, dvc_repo,
                                                          monkeypatch):
    from mlflow.server import get_app_client
    from mlflow.tracking import MlflowClient

    champion = str(MlflowClient().get_model_version_by_alias(RM, "champion").version)

    work, env = dvc_repo
    auth = get_app_client("basic-auth", tracking_uri=stack["uri"])
    password = secrets.token_hex(8)
    auth.create_user("colleague", password)
    auth.grant_user_permission("colleague", "registered_model", RM, "READ")
    colleague = tmp_path / "colleague"
    sh(f"git clone -q {work} {colleague}", tmp_path, env)
    colleague_env = {**env, "MLFLOW_TRACKING_URI": stack["uri"], "MLFLOW_TRACKING_USERNAME": "colleague",
                     "MLFLOW_TRACKING_PASSWORD": password}
    without_base = sh("mascot probe", colleague, colleague_env, check=False)
    assert "is not here; fetch it with `dvc pull`" in without_base, without_base[-2000:]
    # the registry holds the adapter; its base model comes from the team's DVC remote
    use_team_remote(stack, colleague, env)
    dvc_transfer("dvc pull -r team base_model small_model", colleague, env, stack)
    probe = json_in(sh("mascot probe", colleague, colleague_env))
    assert probe["version"] == champion and probe["max_abs_diff"] <= 1e-4, probe
    print(f"colleague's clone: models:/{RM}@champion -> v{probe['version']}, probe scores {probe['scores_now']}, "
          f"max |diff| vs training {probe['max_abs_diff']:.2e}")

    refused = sh(f"mascot promote --version {champion} --alias champion --reason 'not mine to move'", colleague,
                 colleague_env, check=False)
    assert "PERMISSION_DENIED" in refused and f"MLflow at {stack['uri']}" in refused, refused
    assert str(MlflowClient().get_model_version_by_alias(RM, "champion").version) == champion
    print(f"READ user moving the alias: {refused.strip().splitlines()[0][:300]}")

    anonymous = {k: v for k, v in colleague_env.items() if k not in ("MLFLOW_TRACKING_USERNAME",
                                                                     "MLFLOW_TRACKING_PASSWORD")}
    anonymous["HOME"] = str(tmp_path)  # and no ~/.mlflow/credentials
    denied = sh("mascot probe", colleague, anonymous, check=False)
    assert "mascot probe: error: MLflow at" in denied and ("401" in denied or "UNAUTHENTICATED" in denied), denied
    print(f"anonymous client: {denied.strip().splitlines()[0][:300]}")

    # registering a version as the READ user is refused by the server too
    import mlflow
    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "colleague")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
    with pytest.raises(MlflowException, match="(?i)permission"):
        MlflowClient().create_model_version(RM, source="mlflow-artifacts:/nothing", run_id=None)
    assert mlflow.get_tracking_uri() == stack["uri"]


class KillingProxy(BaseHTTPRequestHandler):
    """Between the client and the tracking server: forwards every request, and right after the server has
    answered the creation of a model version, kills the server (its process group) and stops answering."""

    upstream_port: int = 0
    kill = None
    dead = False
    seen: list = []

    def log_message(self, *args):
        pass

    def _forward(self):
        cls = type(self)
        if cls.dead:
            self.close_connection = True
            self.connection.close()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        conn = http.client.HTTPConnection("127.0.0.1", cls.upstream_port, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        cls.seen.append(self.path)
        if self.command == "POST" and self.path.endswith("/model-versions/create"):
            cls.dead = True
            cls.kill()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward


def test_server_killed_during_registration_then_rerun_finishes(stack, team_clone, team_champion, as_admin, dvc_repo):
    import signal

    from mlflow.tracking import MlflowClient

    champion = str(MlflowClient().get_model_version_by_alias(RM, "champion").version)
    work, _ = dvc_repo
    clone = team_clone
    before = {int(mv.version) for mv in MlflowClient().search_model_versions(f"name='{RM}'")}
    pgid = int((stack["root"] / "run/mlflow.pgid").read_text())
    KillingProxy.upstream_port, KillingProxy.dead, KillingProxy.seen = stack["ports"]["mlflow"], False, []
    KillingProxy.kill = staticmethod(lambda: os.killpg(pgid, signal.SIGKILL))
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), KillingProxy)
    proxy.daemon_threads = True
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    proxy_uri = f"http://127.0.0.1:{proxy.server_address[1]}"
    try:
        failed = sh("mascot train_rm", clone, {**stack["client_env"], "MLFLOW_TRACKING_URI": proxy_uri,
                                               "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}, check=False)
    finally:
        proxy.shutdown()
    assert KillingProxy.dead, "the stage never reached registration"
    assert f"mascot train_rm: error: MLflow at {proxy_uri}" in failed and "mascot stack up" in failed, failed[-2000:]
    print(f"server killed after creating the version: {failed.strip().splitlines()[-2][:300]}")

    restarted = sh(stack["cmd"].format("up"), work, stack["admin_env"])
    assert '"mlflow"' in restarted.split('"status"')[0]  # only the server was started again
    half = {int(mv.version) for mv in MlflowClient().search_model_versions(f"name='{RM}'")} - before
    assert len(half) == 1
    half_version = str(half.pop())
    assert MlflowClient().get_model_version(RM, half_version).tags["mascot_registration"] == "incomplete"
    assert str(MlflowClient().get_model_version_by_alias(RM, "champion").version) == champion  # no alias moved

    rerun = sh("mascot train_rm", clone, stack["client_env"])
    assert f"versions {half_version} of {RM} were left half-registered" in rerun
    assert MlflowClient().get_model_version(RM, half_version).tags["mascot_registration"] == "abandoned"
    new = json.loads((clone / "models/reward/registered.json").read_text())["version"]
    assert MlflowClient().get_model_version(RM, new).tags["mascot_registration"] == "complete"
    print(f"rerun after `mascot stack up`: v{half_version} tagged abandoned, v{new} registered complete")


def test_postgres_restart_between_stages_loses_nothing(stack, team_clone, team_champion, as_admin, dvc_repo):
    from mlflow.tracking import MlflowClient

    work, _ = dvc_repo
    # the version the clone's last train_rm registered (the champion's run, or a later rerun's)
    new = json.loads((team_clone / "models/reward/registered.json").read_text())["version"]
    before = sorted((mv.version, mv.tags.get("mascot_registration")) for mv in
                    MlflowClient().search_model_versions(f"name='{RM}'"))
    sh(stack["cmd"].format("down") + " postgres", work, stack["admin_env"])
    sh(stack["cmd"].format("up"), work, stack["admin_env"])
    out = sh("mascot promote", team_clone, stack["client_env"])
    assert f"{RM} v{new} -> @" in out
    after = sorted((mv.version, mv.tags.get("mascot_registration")) for mv in
                   MlflowClient().search_model_versions(f"name='{RM}'"))
    assert after == before, (before, after)
    print(f"PostgreSQL restarted between train_rm and promote: {len(after)} versions before and after; {out.strip()}")


def test_stack_down_leaves_no_process_and_up_keeps_everything(stack, team_clone, team_champion, as_admin, dvc_repo):
    import psutil
    from mlflow.tracking import MlflowClient

    work, _ = dvc_repo
    versions = sorted(mv.version for mv in MlflowClient().search_model_versions(f"name='{RM}'"))
    sh(stack["cmd"].format("down"), work, stack["admin_env"])
    sh(stack["cmd"].format("up"), work, stack["admin_env"])  # down then up: every run and version is still there
    assert sorted(mv.version for mv in MlflowClient().search_model_versions(f"name='{RM}'")) == versions
    probe = json_in(sh("mascot probe", team_clone, stack["client_env"]))  # artifacts still in the bucket
    assert probe["max_abs_diff"] <= 1e-4
    status = json_in(sh(stack["cmd"].format("status"), work, stack["admin_env"]))
    out = json_in(sh(stack["cmd"].format("down"), work, stack["admin_env"]))
    assert out["processes_left"] == {}
    root = str(stack["root"])
    left = [p.info for p in psutil.process_iter(["pid", "cmdline"])
            if any(root in part for part in (p.info["cmdline"] or []))
            or any(f"--port {port}" in " ".join(p.info["cmdline"] or []) for port in stack["ports"].values())]
    assert left == [], left
    listening = [port for port in stack["ports"].values() if socket.socket().connect_ex(("127.0.0.1", port)) == 0]
    assert listening == []
    print(f"mascot stack down, up, down: {len(versions)} versions kept across it; {pids_of(status)} processes before "
          f"the last down, 0 after; ports {sorted(stack['ports'].values())} closed")


def test_up_that_fails_half_way_stops_what_it_started_and_says_what_failed(monkeypatch):
    """PostgreSQL and SeaweedFS start, then the MLflow step fails: `up` stops the two it started and names the
    failure; a second `up` after the fix starts from a clean slate (no "Address already in use")."""
    from mascot.ops.stack import supervisor as stack

    if not glob("/usr/lib/postgresql/*/bin/initdb"):
        pytest.skip("PostgreSQL is not installed: `make stack-deps` (as root) or `apt-get install postgresql`")
    root = Path(tempfile.mkdtemp(prefix="mascot-stack-half-"))
    root.chmod(0o755)
    for var, value in {"MASCOT_STACK_DB_PASSWORD": secrets.token_hex(8), "AWS_ACCESS_KEY_ID": "k" + secrets.token_hex(4),
                       "AWS_SECRET_ACCESS_KEY": secrets.token_hex(12),
                       "MLFLOW_AUTH_ADMIN_PASSWORD": secrets.token_hex(8)}.items():
        monkeypatch.setenv(var, value)
    cfg = stack.StackConfig(root=str(root), pg_port=free_port(), s3_port=free_port(), mlflow_port=free_port(),
                            weed_master_port=free_port(), weed_volume_port=free_port(), weed_filer_port=free_port(),
                            weed_metrics_port=free_port())

    def broken_mlflow(cfg):
        raise ModuleNotFoundError("No module named 'psycopg2'")

    monkeypatch.setattr(stack, "start_mlflow", broken_mlflow)
    try:
        with pytest.raises(stack.StackError) as failed:
            stack.up(cfg, ("postgres", "seaweedfs", "mlflow"), timeout_s=60)
        message = str(failed.value)
        assert "starting mlflow failed" in message and "psycopg2" in message and "make stack-deps" in message
        assert "stopped what this `up` had started (mlflow, seaweedfs, postgres)" in message
        assert not any(stack.running(cfg).values()), stack.running(cfg)
        assert not port_open(cfg.pg_port) and not port_open(cfg.s3_port)
        # the fix made: the same ports come up again
        took = stack.up(cfg, ("postgres", "seaweedfs"), timeout_s=60)
        assert set(took) == {"postgres", "seaweedfs", "total"}
        stack.down(cfg, ("postgres", "seaweedfs"))
        assert not any(stack.running(cfg).values())
    finally:
        stack.down(cfg)
        shutil.rmtree(root, ignore_errors=True)


def test_up_refuses_before_starting_anything_when_the_team_extra_is_missing(monkeypatch, tmp_path):
    from mascot.ops.stack import supervisor as stack

    for var in ("MASCOT_STACK_DB_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_AUTH_ADMIN_PASSWORD"):
        monkeypatch.setenv(var, "x")
    monkeypatch.setattr(stack, "TEAM_MODULES", {"no_such_module_here": "postgres"})
    with pytest.raises(stack.StackError, match="no_such_module_here not installed: install the team stack's "
                                               "dependencies with `make stack-deps`"):
        stack.up(stack.StackConfig(root=str(tmp_path / "s")))
    assert not (tmp_path / "s").exists()
