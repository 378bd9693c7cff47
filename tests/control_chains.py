"""What the control chains' test modules share (tests/test_control_positive.py, test_control_length.py,
test_controls.py): a control's repo made from the profiles, and the readers of its figures. Each chain is a module
of its own, so that the two test workers build them side by side (tests/conftest.py groups a module's tests)."""
import json
import re

from tests.conftest import sh

DIGIT = re.compile(r"[0-9]")


def control_repo(repo_root, tmp_path_factory, kind: str):
    """A fresh git + DVC copy of the pipeline with `mascot profile tiny controls control-<kind>` applied."""
    from benchmarks.pipeline_copy import fresh_pipeline_copy

    work = tmp_path_factory.mktemp(f"control-{kind}") / "repo"
    env = fresh_pipeline_copy(repo_root, work)
    sh(f"mascot profile tiny controls control-{kind}", work, env)
    return work, env


def control_chain(repo_root, tmp_path_factory, kind: str, target: str):
    """A control's repo (control_repo) with its chain run through `dvc repro <target>`: a module fixture's body."""
    work, env = control_repo(repo_root, tmp_path_factory, kind)
    sh(f"dvc repro {target}", work, env)
    return work, env


def metrics(work, name: str) -> dict:
    return json.loads((work / "reports" / "figures" / f"{name}.json").read_text())


def set_params(work, blocks: dict) -> None:
    """Merge `blocks` into the repo's params.yaml (a gate's settings, as a user would edit them)."""
    from mascot.profiles import merge_params

    merge_params(work / "params.yaml", blocks, "the test's blocks")


def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def digit_rate(replies: list[dict], policy: str) -> float:
    """The share of `policy`'s replies (evaluate_replies.jsonl) that show the planted digit."""
    mine = [r for r in replies if r["policy"] == policy]
    return sum(bool(DIGIT.search(r["text"])) for r in mine) / len(mine)
