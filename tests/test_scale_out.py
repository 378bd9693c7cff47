"""Training under `accelerate launch --multi_gpu --num_processes 2` (gloo on this CPU), chosen by a parameter:
both ranks train on their shard, only the main rank saves, measures and registers (one version, not two)."""
import json
import re
import shutil

import pytest
import yaml

from tests.conftest import sh

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repo_copy(dvc_repo, tmp_path_factory):
    work, env = dvc_repo
    sh("dvc repro", work, env)  # the tiny pipeline's outputs (a no-op when the pipeline tests ran first)
    copy = tmp_path_factory.mktemp("scale") / "repo"
    shutil.copytree(work, copy, symlinks=True)
    return copy, {**env, "MASCOT_RESUME_DIR": str(copy / ".mascot/resume")}


def set_params(repo, **blocks):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for block, values in blocks.items():
        params[block].update(values)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def versions(repo, name):
    import sqlite3

    with sqlite3.connect(repo / "mlflow.db") as db:
        return [v for (v,) in db.execute("SELECT version FROM model_versions WHERE name = ?", (name,))]


def test_two_process_train_rm_registers_one_version(repo_copy):
    from mascot.reward.scorer import RewardScorer
    from mascot.reward.train import check_score_head

    repo, env = repo_copy
    before = versions(repo, "mascot-persona-rm")
    set_params(repo, train_rm={"num_processes": 2})
    out = sh("mascot train_rm", repo, env)
    ranks = re.findall(r"^train_rm\[rank (\d)/2\]: (\d+) steps on (\d+) batches.*$", out, re.M)
    assert sorted(r[0] for r in ranks) == ["0", "1"], out[-3000:]
    assert len({(steps, batches) for _, steps, batches in ranks}) == 1  # the same steps on each rank's shard
    after = versions(repo, "mascot-persona-rm")
    assert len(after) == len(before) + 1, (before, after)
    adapter = repo / "models/reward"
    assert check_score_head(adapter)
    registered = json.loads((adapter / "registered.json").read_text())
    assert str(max(after)) == registered["version"]
    from mascot.data.personas import load_personas
    from mascot.reward.train import probe_items

    base = repo / json.loads((adapter / "mascot_reward.json").read_text())["base_model"]  # relative to the repo
    scores = RewardScorer.from_dir(adapter, base_model=str(base)).score(
        probe_items(load_personas(repo / "data/personas.yaml")))
    assert max(abs(a - b) for a, b in zip(scores, registered["probe_scores"])) <= 1e-4
    single = sum(1 for line in (repo / "plots/train_rm/train_curve.csv").read_text().splitlines()[1:] if line)
    print("\n".join(line for line in out.splitlines() if line.startswith("train_rm")))
    print(f"versions of mascot-persona-rm: {before} -> {after}; logged steps {single}")


def test_two_process_grpo_registers_one_version(repo_copy):
    repo, env = repo_copy
    before = versions(repo, "mascot-speaker")
    set_params(repo, grpo={"num_processes": 2})
    sh("mascot promote", repo, env)  # the reward model the first test registered, through the gate
    out = sh("mascot train_grpo", repo, env)
    ranks = re.findall(r"^grpo\[rank (\d)/2\]: (\d+) steps", out, re.M)
    assert sorted(r[0] for r in ranks) == ["0", "1"] and all(int(s) > 0 for _, s in ranks), out[-3000:]
    assert len(versions(repo, "mascot-speaker")) == len(before) + 1
    print("\n".join(line for line in out.splitlines() if line.startswith(("grpo", "train_grpo"))))
