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


# The CPU default's gate (params.yaml's promote block), on the tiny chain's reward model: at chance on a handful of
# pairs, which no gate can tell from a good one
CPU_DEFAULT_GATE = {"min_eval_accuracy": 0.5, "require_beat_length_baseline": True, "bar_on": "point"}
DROP_CHAMPION = """
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import setup_tracking
setup_tracking(load_params())
MlflowClient().delete_registered_model_alias("mascot-persona-rm", "champion")
print("{}")
"""
READ_TAGS = """
import json
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import setup_tracking
setup_tracking(load_params())
c = MlflowClient()
exp = c.get_experiment_by_name("mascot-speaker").experiment_id
# (a search for a tag "!=" a value leaves out the runs without that tag: GRPO's have none)
latest = c.search_runs([exp], order_by=["attributes.start_time DESC"], max_results=50)
runs = [r for r in latest if r.data.tags.get("evaluation") != "true"]
evals = [r for r in latest if r.data.tags.get("evaluation") == "true"]
champion = c.get_model_version_by_alias("mascot-persona-rm", "champion")
print(json.dumps({"grpo": runs[0].data.tags, "evaluate": evals[0].data.tags, "champion": str(champion.version),
                  "champion_tags": champion.tags}))
"""


def _way_out(message: str) -> str:
    """The first command an error names between backticks that starts with `mascot promote`, its reason filled in."""
    import re

    command = next(c for c in re.findall(r"`([^`]+)`", message) if c.startswith("mascot promote"))
    return command.replace("'...'", "'the seekers agree with it more than the judge does'")


@pytest.fixture(scope="module")
def gate_story(dvc_repo, tmp_path_factory):
    """On a copy of the tiny chain, with the CPU default's gate: (1) a fresh registry, `dvc repro`: too few to tell,
    promoted, and the chain runs on; (2) the gate on the interval's lower bound, a fresh registry: refused, and
    `dvc repro` stops at train_grpo naming a command; that command, then `dvc repro`: the chain runs on against
    the hand-promoted version; (3) the alias moved outside the pipeline: refused, naming two commands, each run."""
    import shutil

    from mascot.profiles import merge_params
    from tests.conftest import script_json, sh

    work, env = dvc_repo
    sh("dvc repro", work, env)
    copy = tmp_path_factory.mktemp("gate") / "repo"
    shutil.copytree(work, copy, symlinks=True)
    env = {**env, "MASCOT_RESUME_DIR": str(copy / ".mascot/resume")}
    story = {}

    merge_params(copy / "params.yaml", {"promote": CPU_DEFAULT_GATE})
    script_json(DROP_CHAMPION, copy, env, "drop.py")
    story["point_repro"] = sh("dvc repro evaluate", copy, env)
    story["point"] = json.loads((copy / "reports/figures/promote.json").read_text())
    story["point_tags"] = script_json(READ_TAGS, copy, env, "tags.py")

    merge_params(copy / "params.yaml", {"promote": {"bar_on": "lower_bound"}})
    script_json(DROP_CHAMPION, copy, env, "drop.py")
    refused = subprocess.run("dvc repro evaluate", shell=True, cwd=copy, env=env, capture_output=True, text=True,
                             timeout=1200)
    story["refused_rc"], story["refused_out"] = refused.returncode, refused.stdout + refused.stderr
    story["refused"] = json.loads((copy / "reports/figures/promote.json").read_text())
    story["hand_command"] = _way_out(story["refused_out"])
    story["hand_out"] = sh(story["hand_command"], copy, env)
    story["hand_repro"] = sh("dvc repro evaluate", copy, env)
    story["hand"] = json.loads((copy / "reports/figures/promote.json").read_text())
    story["hand_tags"] = script_json(READ_TAGS, copy, env, "tags.py")
    story["hand_status"] = sh("dvc status promote", copy, env)

    second = """
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import mark_complete, setup_tracking
setup_tracking(load_params())
c = MlflowClient()
v1 = c.get_model_version("mascot-persona-rm", "1")
v2 = c.create_model_version("mascot-persona-rm", v1.source, run_id=v1.run_id)
mark_complete("mascot-persona-rm", v2.version)
c.set_registered_model_alias("mascot-persona-rm", "champion", v2.version)  # in the registry's UI, say
print("{}")
"""
    script_json(second, copy, env, "second.py")
    moved = subprocess.run("mascot train_grpo", shell=True, cwd=copy, env=env, capture_output=True, text=True,
                           timeout=600)
    story["moved_rc"], story["moved_out"] = moved.returncode, moved.stdout + moved.stderr
    story["adopt_command"] = _way_out(story["moved_out"])
    sh(story["adopt_command"], copy, env)
    story["adopt_repro"] = sh("dvc repro evaluate", copy, env)
    story["adopt_tags"] = script_json(READ_TAGS, copy, env, "tags.py")
    script_json(second, copy, env, "third.py")  # moved again (v3), and this time the gate decides
    again = subprocess.run("mascot evaluate", shell=True, cwd=copy, env=env, capture_output=True, text=True,
                           timeout=600)
    story["again_rc"], story["again_out"] = again.returncode, again.stdout + again.stderr
    story["gate_again_repro"] = sh("dvc repro --force --single-item promote", copy, env) + sh("dvc repro evaluate",
                                                                                              copy, env)
    story["gate_again"] = json.loads((copy / "reports/figures/promote.json").read_text())
    return story


@pytest.mark.integration
def test_a_gate_that_cannot_tell_does_not_stop_the_chain(gate_story):
    """Under the CPU default's point bar, a reward model at chance on a handful of pairs is "too few to tell":
    promoted, said in the decision, on the version's tags and on the runs that train against it."""
    point = gate_story["point"]
    assert point["promoted"] and point["too_few_to_tell"] and "too few to tell" in point["reason"], point["reason"]
    assert "Running stage 'train_grpo'" in gate_story["point_repro"]
    assert "Running stage 'evaluate'" in gate_story["point_repro"]
    tags = gate_story["point_tags"]
    assert tags["champion_tags"]["champion_too_few_to_tell"] == "True"
    assert tags["grpo"]["reward_model_decision"] == "gate (too few to tell)"
    assert tags["evaluate"]["reward_model_decision"] == "gate (too few to tell)"


@pytest.mark.integration
def test_under_a_lower_bound_the_gate_refuses_and_the_named_command_gets_the_chain_going(gate_story):
    refused = gate_story["refused"]
    assert not refused["promoted"] and refused["champion_version"] is None
    assert gate_story["refused_rc"] != 0
    assert "lower bound" in refused["reason"] and "is below the threshold" in refused["reason"]  # today's message
    assert "promoted no version of mascot-persona-rm" in gate_story["refused_out"]
    assert gate_story["hand_command"].startswith("mascot promote --model mascot-persona-rm --version 1")
    # the hand move is the gate's record now (committed to dvc.lock): promote does not run again, the rest does
    hand = gate_story["hand"]
    assert hand["by_hand"] and hand["champion_version"] == "1" and hand["reason"].startswith("by hand: the seekers")
    assert hand["gate_decision"]["promoted"] is False and "is below the threshold" in hand["gate_decision"]["reason"]
    assert "Running stage 'promote'" not in gate_story["hand_repro"]
    assert "Running stage 'train_grpo'" in gate_story["hand_repro"]
    assert "Data and pipelines are up to date" in gate_story["hand_status"]
    tags = gate_story["hand_tags"]
    assert tags["grpo"]["reward_model_decision"] == "by hand"
    assert "the seekers agree" in tags["grpo"]["reward_model_decision_reason"]
    assert tags["champion_tags"]["champion_reason"].startswith("by hand: the seekers")


@pytest.mark.integration
def test_an_alias_moved_outside_the_pipeline_is_refused_and_both_named_ways_out_work(gate_story):
    assert gate_story["moved_rc"] == 2, gate_story["moved_out"]
    out = gate_story["moved_out"]
    assert "models:/mascot-persona-rm@champion now resolves to version 2, but promote recorded version 1" in out
    assert "`dvc repro --force --single-item promote`, then `dvc repro`" in out
    assert gate_story["adopt_command"].startswith("mascot promote --model mascot-persona-rm --version 2")
    assert "Running stage 'train_grpo'" in gate_story["adopt_repro"]
    assert gate_story["adopt_tags"]["grpo"]["reward_model_decision"] == "by hand"
    # moved again outside the pipeline: evaluate refuses too; the other way out lets the gate decide again
    assert gate_story["again_rc"] == 2 and "now resolves to version 3" in gate_story["again_out"]
    assert "Running stage 'promote'" in gate_story["gate_again_repro"]
    again = gate_story["gate_again"]
    assert not again.get("by_hand") and again["champion_version"] in ("1", "3")
