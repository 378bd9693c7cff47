"""The promotion gate against a real MLflow registry (sqlite in a temp folder)."""
import json
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import handed
from tests.test_reward import make_pairs


@pytest.fixture
def workspace(tmp_path, monkeypatch, repo_root, tiny_model_dir, personas):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    raw["prepare"]["personas_file"] = str(repo_root / "data/personas.yaml")
    raw["train_rm"].update(base_model=str(tiny_model_dir), batch_size=2, learning_rate=5e-3, epochs=3,
                           max_length=512, eval_steps=50, lora={"r": 4, "alpha": 8})
    raw["promote"]["min_eval_accuracy"] = 0.0  # so that the comparison with the champion decides
    # these pairs' chosen reply is always the longer one (baseline 1.0): here the champion comparison is tested;
    # the length gate has its own tests (test_shortcuts.py)
    raw["promote"]["require_beat_length_baseline"] = False
    raw["mlflow"] = {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "artifact_root": str(tmp_path / "art")}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "data").mkdir()
    with open(tmp_path / "data/pairs.jsonl", "w") as fh:
        for p in make_pairs(personas, 16):
            fh.write(json.dumps(p) + "\n")
    from mascot.config import load_params

    return tmp_path, load_params(tmp_path / "params.yaml")


def negate_score_head(adapter_dir):
    from safetensors.torch import load_file, save_file

    path = adapter_dir / "adapter_model.safetensors"
    weights = load_file(path)
    save_file({k: (-v if ".score." in k else v) for k, v in weights.items()}, path)


def test_worse_model_gets_challenger_and_champion_stays(workspace, personas):
    import mlflow
    from mlflow.tracking import MlflowClient

    from mascot import registry
    from mascot.stages import promote
    from mascot.reward.train import probe_items
    from mascot.stages import train_rm as train
    from mascot.reward.scorer import RewardScorer

    tmp, params = workspace
    train.main(params, **handed(train.main, "train_rm"))
    promote.main(params, **handed(promote.main, "promote"))
    first = json.loads((tmp / "reports/figures/promote.json").read_text())
    assert first["promoted"] and first["alias"] == "champion" and first["new_accuracy"] > 0.5

    # A deliberately worse model: the same adapter with its score head negated, registered as v2.
    worse = tmp / "worse"
    shutil.copytree(tmp / "models/reward", worse)
    negate_score_head(worse)
    probes = RewardScorer.from_dir(worse).score(probe_items(personas))
    registry.setup_tracking(params)
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(worse), artifact_path="reward_model")
        v2 = registry.register_version("mascot-persona-rm", run.info.run_id, "reward_model", {"note": "negated"})
    registry.mark_complete(v2.name, v2.version)
    (tmp / "models/reward/registered.json").write_text(json.dumps({"name": v2.name, "version": v2.version,
                                                                    "probe_scores": probes}))
    promote.main(params, **handed(promote.main, "promote"))
    second = json.loads((tmp / "reports/figures/promote.json").read_text())
    client = MlflowClient()
    assert not second["promoted"] and second["alias"] == "challenger"
    assert "worse than the champion" in second["reason"]
    assert str(client.get_model_version_by_alias("mascot-persona-rm", "champion").version) == "1"
    assert str(client.get_model_version_by_alias("mascot-persona-rm", "challenger").version) == "2"
    tags = client.get_model_version("mascot-persona-rm", "2").tags
    assert tags["challenger_compared_with_version"] == "1" and float(tags["challenger_champion_accuracy"]) > 0.5

    # By hand: roll champion to v2 and back, each recorded.
    promote.promote_by_hand(params, "2", "champion", "test rollout")
    assert str(client.get_model_version_by_alias("mascot-persona-rm", "champion").version) == "2"
    promote.promote_by_hand(params, "1", "champion", "rollback")
    assert str(client.get_model_version_by_alias("mascot-persona-rm", "champion").version) == "1"
    assert client.get_model_version("mascot-persona-rm", "1").tags["champion_reason"] == "by hand: rollback"


def test_half_registered_version_is_never_promoted(workspace):
    import mlflow
    from mlflow.tracking import MlflowClient

    from mascot import registry
    from mascot.stages import promote
    from mascot.stages import train_rm as train

    tmp, params = workspace
    train.main(params, **handed(train.main, "train_rm"))
    promote.main(params, **handed(promote.main, "promote"))
    # A crash right after create_model_version: v2 exists, its stage never finished.
    registry.setup_tracking(params)
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(tmp / "models/reward"), artifact_path="reward_model")
        v2 = registry.register_version("mascot-persona-rm", run.info.run_id, "reward_model", {})
    with pytest.raises(RuntimeError, match="registration is 'incomplete'"):
        promote.promote_by_hand(params, v2.version, "champion", "should be refused")
    (tmp / "models/reward/registered.json").write_text(json.dumps({"name": v2.name, "version": v2.version,
                                                                    "probe_scores": []}))
    with pytest.raises(RuntimeError, match="did not finish"):
        promote.main(params, **handed(promote.main, "promote"))
    client = MlflowClient()
    assert str(client.get_model_version_by_alias("mascot-persona-rm", "champion").version) == "1"
    assert registry.abandon_incomplete("mascot-persona-rm") == ["2"]  # what the next train_rm run does first
    assert client.get_model_version("mascot-persona-rm", "2").tags["mascot_registration"] == "abandoned"
    assert client.get_model_version("mascot-persona-rm", "1").tags["mascot_registration"] == "complete"


@pytest.mark.integration
def test_a_hand_moved_champion_is_caught_by_train_grpo(dvc_repo, tmp_path):
    """promote records the version it decided (reports/figures/promote.json, a DVC output); an alias moved outside the
    pipeline afterwards is refused by the stages that train or evaluate against it."""
    import shutil

    from tests.conftest import sh

    work, env = dvc_repo
    sh("dvc repro", work, env)
    copy = tmp_path / "repo"
    shutil.copytree(work, copy, symlinks=True)
    env = {**env, "MASCOT_RESUME_DIR": str(copy / ".mascot/resume")}
    second = r"""
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import mark_complete, setup_tracking
setup_tracking(load_params())
c = MlflowClient()
v1 = c.get_model_version("mascot-persona-rm", "1")
v2 = c.create_model_version("mascot-persona-rm", v1.source, run_id=v1.run_id)
mark_complete("mascot-persona-rm", v2.version)
print(v2.version)
"""
    (copy / ".mascot").mkdir(exist_ok=True)
    (copy / ".mascot/second.py").write_text(second)
    sh("python .mascot/second.py", copy, env)
    sh("mascot promote --version 2 --reason 'a hand move'", copy, env)
    proc = subprocess.run("mascot train_grpo", shell=True, cwd=copy, env=env, capture_output=True, text=True,
                          timeout=600)
    print(proc.stderr)
    assert proc.returncode == 2
    assert ("models:/mascot-persona-rm@champion now resolves to version 2, but promote recorded version 1 "
            "(reports/figures/promote.json)") in proc.stderr and "dvc repro -f promote" in proc.stderr
    proc = subprocess.run("mascot evaluate", shell=True, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "now resolves to version 2" in proc.stderr
    # moved back, the recorded decision holds again
    sh("mascot promote --version 1 --reason 'back'", copy, env)
    check = ("from mascot.config import load_params; from mascot.registry import setup_tracking, check_recorded_champion;"
             " setup_tracking(load_params()); print('ok', check_recorded_champion('mascot-persona-rm', 'champion', "
             "'reports/figures/promote.json', 'train_grpo', 'promote'))")
    assert "ok ('1', 'champion')" in sh(f'python -c "{check}"', copy, env)
