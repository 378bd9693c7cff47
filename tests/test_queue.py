"""DVC's own way to sweep, `dvc exp run --queue -S ...` then `dvc queue start`: each experiment runs in a temporary
copy of the repository, and what it tracks (runs, registered versions, aliases) must land in the repository's
MLflow store, not in the copy's, which DVC deletes with it (mascot/registry.py: store_path)."""
import json
import shutil
import subprocess
import time

import pytest

from tests.conftest import script_json, sh

pytestmark = pytest.mark.integration

LISTING = """
import json
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import setup_tracking
setup_tracking(load_params())
c = MlflowClient()
runs = c.search_runs([c.get_experiment_by_name("mascot-reward-model").experiment_id])
versions = c.search_model_versions("name='mascot-persona-rm'")
print(json.dumps({
    "runs": sorted([r.data.tags.get("dvc_exp_name") or "", r.data.params.get("train_rm.learning_rate")] for r in runs),
    "versions": {v.version: {"run_exp": c.get_run(v.run_id).data.tags.get("dvc_exp_name"),
                             "champion_reason": v.tags.get("champion_reason"),
                             "challenger_reason": v.tags.get("challenger_reason")} for v in versions},
    "champion": str(c.get_model_version_by_alias("mascot-persona-rm", "champion").version)}, default=str))
"""


def _listing(repo, env) -> dict:
    return script_json(LISTING, repo, env, "listing.py")


def test_two_queued_experiments_track_into_the_repository_store(dvc_repo, tmp_path):
    work, env = dvc_repo
    sh("dvc repro promote", work, env)
    repo = tmp_path / "repo"
    shutil.copytree(work, repo, symlinks=True)
    env = {**env, "MASCOT_RESUME_DIR": str(repo / ".mascot/resume")}
    sh("git add -A && git -c user.email=m@m -c user.name=mascot commit -qm 'pipeline ran'", repo, env)
    before = _listing(repo, env)
    for name, lr in (("lr-high", "5e-3"), ("lr-low", "1e-4")):
        sh(f"dvc exp run --queue -n {name} -S train_rm.learning_rate={lr} promote", repo, env)
    sh("dvc queue start -j 1", repo, env)
    deadline = time.time() + 1500
    while time.time() < deadline:
        status = subprocess.run("dvc queue status", shell=True, cwd=repo, env=env, capture_output=True, text=True).stdout
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(5)
    print(status)
    assert status.count("Success") == 2, status + sh("dvc queue logs lr-high; dvc queue logs lr-low", repo, env,
                                                      check=False)
    after = _listing(repo, env)
    print(f"registry before the queue: {before}\nafter it: {json.dumps(after, indent=1)}")
    new_runs = [r for r in after["runs"] if r not in before["runs"]]
    assert sorted(new_runs) == [["lr-high", "0.005"], ["lr-low", "0.0001"]]
    new_versions = {v: t for v, t in after["versions"].items() if v not in before["versions"]}
    assert sorted(t["run_exp"] for t in new_versions.values()) == ["lr-high", "lr-low"]
    # each new version went through the gate: it got the champion or the challenger alias, with the gate's reason
    assert all(t["champion_reason"] or t["challenger_reason"] for t in new_versions.values())
    champion = after["versions"][after["champion"]]
    assert champion["champion_reason"] and not champion["champion_reason"].startswith("by hand")
    assert not list((repo / ".dvc/tmp/exps").glob("tmp*/mlflow.db"))  # nothing tracked into a temporary copy
