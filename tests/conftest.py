import os
import re
import subprocess
from pathlib import Path

import pytest

from mascot.ops.processes import stop_group

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


# With pytest-xdist (`make test` runs two workers, `--dist loadgroup`), a chain a session fixture builds must be built
# by one worker only: the tests that share one run on one worker. An integration test's module keeps its module
# fixtures on one worker too; unit tests go wherever a worker is free.
SHARED_CHAINS = ("dvc_repo", "vllm_server")


# xdist reads the groups in its own collection hook as a suffix on each test's id: this hook wraps it, so that the
# marks are made first (a plain conftest hook runs after xdist's), and the constraints hold pytest at 9.1 (9.2 ignores
# the suffix: a node's id is no longer `_nodeid`). Found when a CI run built the length control on both workers.
@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    by_module: dict[str, str] = {}  # a module any of whose tests shares a chain goes with that chain, whole
    for item in items:
        shared = next((f for f in SHARED_CHAINS if f in getattr(item, "fixturenames", ())), None)
        if shared is not None:
            by_module.setdefault(item.module.__name__, shared)
    for item in items:
        group = by_module.get(item.module.__name__)
        if group is None and item.get_closest_marker("integration") is not None:
            group = item.module.__name__
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    return (yield)


# MLflow's set_tracking_uri and set_registry_uri export MLFLOW_TRACKING_URI and MLFLOW_REGISTRY_URI into
# os.environ, and a pipeline copy's stages inherit os.environ: a test that points MLflow at its own store in-process
# would otherwise become the store of every pipeline a later test runs (found by a shuffled order).
MLFLOW_URI_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")


@pytest.fixture(autouse=True)
def _mlflow_uris_restored():
    saved = {name: os.environ.get(name) for name in MLFLOW_URI_VARIABLES}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def corpora() -> Path:
    """The real-format corpus slices every clone ships (data/corpora: ESConv, QMSum), so that the source tests
    run everywhere, never skip for a folder outside the repository."""
    return REPO / "data" / "corpora"


@pytest.fixture(scope="session")
def personas():
    from mascot.data.personas import load_personas

    return load_personas(REPO / "data" / "personas.yaml")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Qwen3 with a tokenizer trained on the demo corpus (seconds, offline)."""
    from mascot.llm.base_model import build_tiny_model

    out = tmp_path_factory.mktemp("tiny") / "model"
    lines = (REPO / "data/demo/dialogues.jsonl").read_text().splitlines()
    lines += (REPO / "data/personas.yaml").read_text().splitlines()
    build_tiny_model(out, lines)
    return out


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from mascot.config import LLMEndpoint
    from mascot.llm.local_backend import LocalBackend

    # fp32: the tests of our own logic compare paths exactly; the bf16 path has its own test (test_llm_local.py)
    return LocalBackend(LLMEndpoint(model=str(tiny_model_dir), batch_size=8, dtype="float32"))


@pytest.fixture
def demo_queries(personas):
    from mascot.data.queries import build_queries
    from mascot.data.sources.jsonl import load_jsonl_dialogues
    from mascot.io import BadRows

    dialogues = load_jsonl_dialogues(REPO / "data/demo/dialogues.jsonl", BadRows())
    return build_queries(dialogues, list(personas), 64, lambda t: len(t.split()), max_queries=3)


def free_port() -> int:
    """A loopback port nothing listens on now (for a server the test starts, or a replica that refuses)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(cmd, cwd, env, check=True, timeout_s: float = 1800):
    """`cmd` in a shell of its own process group. Past `timeout_s` the whole group is killed, so that no child
    lives on holding a lock (a hung `dvc push` left DVC's repo lock to every later test), and TimeoutExpired
    carries what it printed."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc.pid, grace_s=5, reap=proc.poll)  # the shell leads its group: its pid is the group's id
        stdout, stderr = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout_s, output=stdout, stderr=stderr) from None
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{stdout[-4000:]}\n{stderr[-4000:]}")
    return stdout + stderr


def script_json(code: str, cwd, env, name: str = "check.py"):
    """Run `code` as a script in `cwd` (a pipeline copy, with its environment) and read the JSON its last line
    prints: a look at the copy's registry or store from its own process."""
    import json

    (Path(cwd) / ".mascot").mkdir(exist_ok=True)
    (Path(cwd) / ".mascot" / name).write_text(code)
    return json.loads(sh(f"python .mascot/{name}", cwd, env).strip().splitlines()[-1])


def ran_stages(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


VLLM_PYTHON = REPO / ".venv-vllm/bin/python"
# the names the shared server answers to: the tests' own ("tiny") and the rehearsal's, whose profile names the
# speaker and judge by their folder (its models/base is a copy of the same tiny model)
SERVED_NAMES = ["tiny", "models/base"]


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """One real vLLM CPU server for the session, serving the tiny model (its start is a minute or more of CI): the
    server tests and the rehearsal share it. Its log is the server's own; a test that counts requests in it reads
    what was added while it ran (`log_offset`)."""
    from mascot.ops.processes import group_pids
    from mascot.ops.serve import ServeConfig, VLLMServer

    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} not found: create the serving environment with `make vllm-env`")
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = VLLMServer(ServeConfig(model=str(tiny_model_dir), served_model_name=SERVED_NAMES, port=free_port(),
                                    max_model_len=4096, python=str(VLLM_PYTHON), log_path=str(log),
                                    ready_timeout_s=600))
    try:
        server.start()
    except Exception:
        print(log.read_text()[-5000:] if log.exists() else "no log")
        raise
    yield server
    pgid = server.proc.pid
    server.stop()
    assert not group_pids(pgid), "vLLM left processes behind"


def log_offset(server) -> int:
    """Where the server's log ends now: what a test reads from here on is what the server logged since."""
    path = Path(server.cfg.log_path)
    return path.stat().st_size if path.exists() else 0


@pytest.fixture(scope="session")
def dvc_repo(repo_root, tmp_path_factory):
    """A copy of the project (the files git would commit) as a fresh git + DVC repo on the tiny profile."""
    from benchmarks.pipeline_copy import fresh_pipeline_copy

    work = tmp_path_factory.mktemp("pipeline") / "repo"
    env = fresh_pipeline_copy(repo_root, work)
    # every stage records the parameters and files it reads (mascot/reads.py): tests/test_pipeline_dvc.py holds
    # dvc.yaml to them
    env["MASCOT_RECORD_READS"] = str(work / ".mascot" / "reads")
    sh("mascot profile tiny", work, env)
    # the whole chain once, then once more, here: every test that shares this repo finds it reproduced, and what
    # the two runs did is kept for tests/test_pipeline_dvc.py whichever test asked for the repo first
    for log in FIRST_REPRO_LOGS:
        (work / log).parent.mkdir(parents=True, exist_ok=True)
        (work / log).write_text(sh("dvc repro", work, env))
    return work, env


# what the shared repo's first and second `dvc repro` printed (dvc_repo writes them)
FIRST_REPRO_LOGS = (".mascot/repro-first.log", ".mascot/repro-second.log")


def handed(function, stage: str, **over) -> dict:
    """The files the repository's dvc.yaml hands `stage` (relative paths: call the stage in a folder laid out as the
    pipeline is), as keyword arguments for its `function`; `over` replaces some."""
    from mascot.stage_args import stage_files

    return stage_files(function, stage, {k: str(v) for k, v in over.items()}, Path(__file__).resolve().parents[1] / "dvc.yaml")
