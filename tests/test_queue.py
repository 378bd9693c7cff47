"""DVC's own way to sweep, `dvc exp run --queue -S ...` then `dvc queue start`: each experiment runs in a temporary
copy of the repository, and what it tracks (runs, registered versions, aliases) must land in the repository's
MLflow store, not in the copy's, which DVC deletes with it (mascot/registry.py: store_path). A sweep compares
candidates: inside an experiment the gate records its decision under the experiment's own alias and leaves the
team's `champion` alone; `mascot promote --from-experiment NAME` makes one experiment's version the team's."""
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
# search_model_versions leaves aliases empty: each version is read on its own
versions = [c.get_model_version("mascot-persona-rm", v.version) for v in c.search_model_versions("name='mascot-persona-rm'")]
evals = c.search_runs([e.experiment_id for e in c.search_experiments()], "tags.evaluation = 'true'",
                      order_by=["attributes.start_time DESC"])
print(json.dumps({
    "runs": sorted([r.data.tags.get("dvc_exp_name") or "", r.data.params.get("train_rm.learning_rate")] for r in runs),
    "versions": {v.version: {"run_exp": c.get_run(v.run_id).data.tags.get("dvc_exp_name"), "aliases": v.aliases,
                             "tags": {k: t for k, t in v.tags.items() if k.endswith("_reason")}} for v in versions},
    "champion": str(c.get_model_version_by_alias("mascot-persona-rm", "champion").version),
    "last_evaluation_rm_version": evals[0].data.tags.get("reward_model_version") if evals else None}, default=str))
"""
CHECK = ("from mascot.config import load_params; from mascot.registry import setup_tracking, check_recorded_champion;"
         " setup_tracking(load_params()); print('ok', check_recorded_champion('mascot-persona-rm', 'champion', "
         "'reports/figures/promote.json', 'evaluate', 'promote'))")


def _listing(repo, env) -> dict:
    return script_json(LISTING, repo, env, "listing.py")


def test_queued_experiments_are_isolated_and_one_is_promoted_after(dvc_repo, tmp_path):
    work, env = dvc_repo
    sh("dvc repro promote", work, env)
    repo = tmp_path / "repo"
    shutil.copytree(work, repo, symlinks=True)
    env = {**env, "MASCOT_RESUME_DIR": str(repo / ".mascot/resume")}
    sh("git add -A && git -c user.email=m@m -c user.name=mascot commit --allow-empty -qm 'pipeline ran'", repo, env)
    before = _listing(repo, env)
    # a checkpoint interval changes nothing learned (seeded): that experiment trains the workspace's model again, which
    # the gate must pass (a tie with the champion on the same eval pairs), so the promotion after the sweep is sure
    for name, setting in (("same-model", "train_rm.checkpoint_steps=7"), ("lr-high", "train_rm.learning_rate=5e-3")):
        sh(f"dvc exp run --queue -n {name} -S {setting} promote", repo, env)
    sh("dvc queue start -j 2", repo, env)
    deadline = time.time() + 1500
    while time.time() < deadline:
        status = subprocess.run("dvc queue status", shell=True, cwd=repo, env=env, capture_output=True, text=True).stdout
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(5)
    print(status)
    assert status.count("Success") == 2, status + sh("dvc queue logs same-model; dvc queue logs lr-high", repo, env,
                                                      check=False)
    # what a person compares after the sweep: every changed figure and parameter, headed by its short name, in 200
    # columns (the changed dependencies' hashes, e.g. models/reward, are what DVC folds into "…" when space runs out)
    table = sh("dvc exp show --only-changed --no-pager", repo, {**env, "COLUMNS": "200"})
    print(table)
    changed = sh("dvc exp show --only-changed --csv", repo, env).splitlines()[0].split(",")
    figures = [c for c in changed if c not in ("Experiment", "rev", "typ", "Created", "parent", "State", "Executor")
               and "/" not in c]
    assert "rm_acc" in figures and "train_rm.learning_rate" in figures, changed
    assert max(map(len, table.splitlines())) <= 200 and all(c in table for c in figures), (figures, table)
    after = _listing(repo, env)
    print(f"registry before the queue: {before}\nafter it: {json.dumps(after, indent=1)}")
    new_runs = [r for r in after["runs"] if r not in before["runs"]]
    assert sorted(r[0] for r in new_runs) == ["lr-high", "same-model"] and ["lr-high", "0.005"] in new_runs
    new_versions = {v: t for v, t in after["versions"].items() if v not in before["versions"]}
    assert sorted(t["run_exp"] for t in new_versions.values()) == ["lr-high", "same-model"]
    # the team's champion did not move; each experiment's decision is on its version, under its own name
    assert after["champion"] == before["champion"]
    for version, t in new_versions.items():
        assert set(t["tags"]) == {f"exp-{t['run_exp']}_reason"}, t
        assert t["aliases"] in ([], [f"exp-{t['run_exp']}"]), t
        assert (t["aliases"] == []) == t["tags"][f"exp-{t['run_exp']}_reason"].startswith("refused"), t
    assert not list((repo / ".dvc/tmp/exps").glob("tmp*/mlflow.db"))  # nothing tracked into a temporary copy
    # the workspace is untouched: nothing stale, and its recorded champion still resolves
    assert "up to date" in sh("dvc status", repo, env)
    assert f"ok ('{before['champion']}', 'champion')" in sh(f'python -c "{CHECK}"', repo, env)
    # after comparing: one command makes the experiment's version the team's, and the later stages use it
    same = next(v for v, t in new_versions.items() if t["run_exp"] == "same-model")
    assert after["versions"][same]["aliases"] == ["exp-same-model"], after["versions"][same]
    out = sh("mascot promote --from-experiment same-model", repo, env)
    assert f"v{same} is now @champion" in out, out
    final = _listing(repo, env)
    assert final["champion"] == same
    assert final["versions"][same]["tags"]["champion_reason"].startswith("from DVC experiment same-model: ")
    sh("dvc repro evaluate", repo, env)
    assert _listing(repo, env)["last_evaluation_rm_version"] == same
