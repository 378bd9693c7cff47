"""Fault injection: flaky or broken servers, and a stage killed with SIGKILL mid-way."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from mascot.annotate.generate import generate_candidates
from mascot.config import GenerateParams, LLMEndpoint
from mascot.llm.openai_backend import OpenAIBackend, ServerError
from mascot.resume import Journal
from tests.stand_in import StandIn, server  # noqa: F401  (fixture)


@pytest.fixture
def many_queries(repo_root, personas):
    from mascot.data.queries import build_queries
    from mascot.data.sources.jsonl import load_jsonl_dialogues
    from mascot.io import BadRows

    dialogues = load_jsonl_dialogues(repo_root / "data/demo/dialogues.jsonl", BadRows())
    return build_queries(dialogues, list(personas), 64, lambda t: len(t.split()), max_queries=5,
                         personas_per_query=4)  # 20 (query, persona) groups: chunks of 8, 8, 4


def client(url, **kw):
    return OpenAIBackend(LLMEndpoint(backend="openai", model="m", base_url=url, backoff_s=0.01, **kw))


def test_server_dies_midway_work_is_kept_and_resumed(server, many_queries, personas, tmp_path):
    params = GenerateParams(num_agents_per_query=2)
    StandIn.ok_budget, StandIn.fault = 8, "503"  # the first chunk's 8 requests, then 503 for good
    with pytest.raises(ServerError, match="InternalServerError after 3 attempts"):
        generate_candidates(many_queries, personas, params, client(server, max_retries=2), Journal("g", tmp_path))
    assert Journal("g", tmp_path).resumed == 8  # the finished chunk survived the failure
    # requests already on the wire when the error ended the stage reach the stand-in's thread a moment later on a
    # loaded machine (seen once under two test workers: 14 asked again, not 12): count from when it is quiet
    sent_before, quiet_since = len(StandIn.bodies), time.monotonic()
    while time.monotonic() - quiet_since < 0.5:
        time.sleep(0.05)
        if len(StandIn.bodies) != sent_before:
            sent_before, quiet_since = len(StandIn.bodies), time.monotonic()
    StandIn.ok_budget = None
    out = generate_candidates(many_queries, personas, params, client(server), Journal("g", tmp_path))
    assert len(out) == 40 and len({c["candidate_id"] for c in out}) == 40
    assert len(StandIn.bodies) - sent_before == 12  # only the 12 unfinished groups were asked again


def test_stalled_server_times_out_with_retries(server, many_queries, personas, tmp_path):
    """Each attempt ends at the client's timeout (a stalled answer would arrive after 3 s and succeed): two
    attempts, each a timeout, then the stage's error."""
    StandIn.ok_budget, StandIn.fault, StandIn.stall_s = 0, "stall", 3.0
    with pytest.raises(ServerError, match="APITimeoutError after 2 attempts"):
        generate_candidates(many_queries[:1], personas, GenerateParams(num_agents_per_query=1),
                            client(server, timeout_s=0.3, max_retries=1), Journal("g", tmp_path))
    sent = Counter(json.dumps(body["messages"]) for _, body in StandIn.bodies)  # attempts per request
    assert max(sent.values()) == 2


def test_backoff_doubles_with_jitter_and_a_cap():
    from mascot.llm.openai_backend import backoff_delay

    assert [backoff_delay(1.0, a, 0.5) for a in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff_delay(1.0, 1, 0.0) == 0.5 and backoff_delay(1.0, 1, 0.999) == pytest.approx(1.499)
    assert backoff_delay(1.0, 10, 0.5) == 30.0  # capped: a long outage is retried every 30 s or so, not hours apart


def test_garbage_answer_is_a_clear_error_not_a_retry(server, many_queries, personas, tmp_path):
    StandIn.ok_budget, StandIn.fault = 0, "garbage"
    with pytest.raises(ServerError, match=r"\(not retried\)"):
        generate_candidates(many_queries[:1], personas, GenerateParams(num_agents_per_query=1, prompt_style="transcript"),
                            client(server, max_retries=3), Journal("g", tmp_path))
    prompts = [b["prompt"] for _, b in StandIn.bodies]
    assert 1 <= len(prompts) <= 4 and len(prompts) == len(set(prompts))  # none was sent twice


def test_cli_reports_server_error_and_exit_code(repo_root, tmp_path, monkeypatch, capsys):
    from mascot import cli

    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    raw["prepare"]["personas_file"] = str(repo_root / "data/personas.yaml")
    raw["llm"]["speaker"] = {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                             "max_retries": 1, "backoff_s": 0.01}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    shutil.copy2(repo_root / "dvc.yaml", tmp_path)  # the stage's files, as dvc.yaml hands them
    (tmp_path / "data").mkdir()
    (tmp_path / "data/queries.jsonl").write_text(json.dumps(
        {"query_id": "q", "context": [{"role": "user", "content": "hi"}], "personas": ["The Anchor"]}) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MASCOT_RESUME_DIR", str(tmp_path / "resume"))
    import mascot.resume
    monkeypatch.setattr(mascot.resume, "RESUME_DIR", tmp_path / "resume")
    assert cli.main(["generate"]) == 3
    err = capsys.readouterr().err
    assert "APIConnectionError after 2 attempts" in err and "rerun the stage to resume" in err


# --- kill -9 in the middle of a stage -------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_workspace(repo_root, tmp_path_factory):
    """A project copy on the tiny profile with plenty of generation work, its model and queries ready."""
    import shutil

    work = tmp_path_factory.mktemp("killws")
    for rel in ("params.yaml", "dvc.yaml", "profiles", "data/personas.yaml", "data/demo"):
        src, dst = repo_root / rel, work / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    subprocess.run("mascot profile tiny", shell=True, cwd=work, env=env, check=True, capture_output=True)
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["prepare"].update(max_queries=None, queries_per_dialogue=3, personas_per_query=4,
                             sources=[{"format": "jsonl", "path": "data/demo/dialogues.jsonl"}])
    params["generate"].update(num_agents_per_query=2, max_tokens=24)
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    for stage in ("base_model", "prepare"):
        subprocess.run(f"mascot {stage}", shell=True, cwd=work, env=env, check=True, capture_output=True)
    return work, env


def run_stage(module, work, env, resume_dir, out):
    """A journaled stage (`module`'s main) in its own process, writing to `out`: killable mid-way."""
    stage = module.rpartition(".")[2]
    written = {"generate": "candidates_path", "episodes": "episodes_path"}[stage]
    dvc_yaml = str(Path(__file__).resolve().parents[1] / "dvc.yaml")  # the files the repository's dvc.yaml hands it
    cmd = [sys.executable, "-c", f"from {module} import main; from mascot.config import load_params; "
                                 f"from mascot.stage_args import stage_files; "
                                 f"main(load_params(), **stage_files(main, {stage!r}, {{{written!r}: {str(out)!r}}}, "
                                 f"{dvc_yaml!r}))"]
    return subprocess.Popen(cmd, cwd=work, env={**env, "MASCOT_RESUME_DIR": str(resume_dir)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_generate(work, env, resume_dir, out):
    return run_stage("mascot.stages.generate", work, env, resume_dir, out)


def journal_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_kill_9_mid_stage_then_resume_equals_clean_run(tiny_workspace):
    work, env = tiny_workspace
    clean = run_generate(work, env, work / "resume-clean", "data/clean.jsonl")
    assert clean.wait(timeout=600) == 0, clean.stderr.read().decode()[-2000:]

    journal = work / "resume-killed/generate.jsonl"
    proc = run_generate(work, env, work / "resume-killed", "data/killed.jsonl")
    deadline = time.time() + 300
    while journal_lines(journal) < 16 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (work / "data/killed.jsonl").exists(), "the stage finished before the kill: nothing was tested"
    before = journal_lines(journal)
    total_groups = len([q for q in (work / "data/queries.jsonl").read_text().splitlines()]) * 4

    resumed = run_generate(work, env, work / "resume-killed", "data/killed.jsonl")
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read().decode()[-2000:]
    metrics = json.loads((work / "reports/figures/generate.json").read_text())
    got = [json.loads(x) for x in (work / "data/killed.jsonl").read_text().splitlines()]
    want = [json.loads(x) for x in (work / "data/clean.jsonl").read_text().splitlines()]
    ids = [c["candidate_id"] for c in got]
    report = {"groups_total": total_groups, "journal_groups_at_kill": before, "resumed_groups": metrics["resumed_groups"],
              "candidates": len(got), "duplicates": len(ids) - len(set(ids)), "equal_to_clean_run": got == want}
    print("KILL9", json.dumps(report))
    assert 0 < before < total_groups
    assert metrics["resumed_groups"] >= before - 1  # a torn last line at most
    assert report["duplicates"] == 0
    assert ids == [c["candidate_id"] for c in want]  # exactly the keys of a clean run
    assert got == want  # and, with fixed chunks and seeds, exactly its records


def run_episodes(work, env, resume_dir, out):
    return run_stage("mascot.stages.episodes", work, env, resume_dir, out)


def test_kill_9_during_episodes_then_resume_equals_clean_run(tiny_workspace):
    """Stage 2's rollouts reuse generate's journal and fixed chunks: the same guarantee."""
    work, env = tiny_workspace
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["episodes"].update(max_queries=None, branches=3, agent_turns=2, user_turns=True, max_tokens=16)
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    clean = run_episodes(work, env, work / "ep-clean", "data/ep-clean.jsonl")
    assert clean.wait(timeout=600) == 0, clean.stderr.read().decode()[-2000:]
    want = [json.loads(x) for x in (work / "data/ep-clean.jsonl").read_text().splitlines()]
    prefixes = len({e["prefix_id"] for e in want})

    journal = work / "ep-killed/episodes.jsonl"
    proc = run_episodes(work, env, work / "ep-killed", "data/ep-killed.jsonl")
    deadline = time.time() + 300
    while journal_lines(journal) < 5 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (work / "data/ep-killed.jsonl").exists(), "the stage finished before the kill: nothing was tested"
    before = journal_lines(journal)
    resumed = run_episodes(work, env, work / "ep-killed", "data/ep-killed.jsonl")
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read().decode()[-2000:]
    got = [json.loads(x) for x in (work / "data/ep-killed.jsonl").read_text().splitlines()]
    metrics = json.loads((work / "reports/figures/episodes.json").read_text())
    print("KILL9-EPISODES", json.dumps({"prefixes": prefixes, "journal_prefixes_at_kill": before,
                                       "resumed_prefixes": metrics["resumed_prefixes"], "episodes": len(got),
                                       "equal_to_clean_run": got == want}))
    assert 0 < before < prefixes and metrics["resumed_prefixes"] >= before - 1
    assert [e["episode_id"] for e in got] == [e["episode_id"] for e in want]
    assert got == want


def test_a_stalled_test_command_leaves_no_child_holding_a_lock(tmp_path):
    """The tests' `sh` kills a stalled command's whole group: a hung `dvc push` once kept DVC's repo lock from
    every later test in CI. Here a shell's child holds a lock as DVC does; after the timeout the lock is free."""
    import fcntl

    from tests.conftest import sh

    lock = tmp_path / "lock"
    lock.touch()
    with pytest.raises(subprocess.TimeoutExpired) as stalled:
        sh(f"echo started; flock {lock} sleep 60; echo never", tmp_path, os.environ.copy(), timeout_s=2)
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while the child lives
    assert "started" in stalled.value.stdout and "never" not in stalled.value.stdout
