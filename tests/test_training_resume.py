"""Training that resumes: train_grpo killed with SIGKILL after its first checkpoint, then rerun, ends with the
adapter an uninterrupted run ends with, in one MLflow run and one registered version (mascot/checkpoints.py)."""
import json
import os
import shutil
import signal
import subprocess
import time

import pytest
import yaml

from tests.conftest import script_json, sh

pytestmark = pytest.mark.integration


def _copy(work, dest, env):
    shutil.copytree(work, dest, symlinks=True)
    params = yaml.safe_load((dest / "params.yaml").read_text())
    params["grpo"].update(max_steps=24, checkpoint_steps=4)
    params["grpo"]["watch"].update(every_steps=4)
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return dest, {**env, "MASCOT_RESUME_DIR": str(dest / ".mascot/resume")}


REGISTRY = """
import json
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import setup_tracking
setup_tracking(load_params())
c = MlflowClient()
runs = c.search_runs([c.get_experiment_by_name("mascot-speaker").experiment_id])
print(json.dumps({"versions": sorted(int(v.version) for v in c.search_model_versions("name='mascot-speaker'")),
                  "training_runs": sum(r.data.tags.get("evaluation") != "true" for r in runs)}))
"""


def _registry(copy, env) -> dict:
    return script_json(REGISTRY, copy, env, "registry_check.py")


def test_train_grpo_killed_after_a_checkpoint_resumes_to_the_same_adapter(dvc_repo, tmp_path):
    from safetensors.torch import load_file

    work, env = dvc_repo
    sh("dvc repro train_grpo", work, env)
    clean, clean_env = _copy(work, tmp_path / "clean", env)
    sh("mascot train_grpo", clean, clean_env)
    killed, killed_env = _copy(work, tmp_path / "killed", env)
    before = _registry(killed, killed_env)

    proc = subprocess.Popen("exec mascot train_grpo", shell=True, cwd=killed, env=killed_env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if list((killed / ".mascot/checkpoints/grpo").glob("*/checkpoint-*/mascot_complete.json")):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "train_grpo finished before its first checkpoint could be waited for"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    marked = sorted(int(p.parent.name.split("-")[1]) for p in
                    (killed / ".mascot/checkpoints/grpo").glob("*/checkpoint-*/mascot_complete.json"))
    assert marked and not (killed / "models/policy/registered.json").read_text() == ""  # the old output is untouched

    out = sh("mascot train_grpo", killed, killed_env)
    resumed = [line for line in out.splitlines() if "resuming from step" in line]
    print("\n".join(resumed))
    assert resumed and f"resuming from step {marked[-1]} of 24" in resumed[0]
    assert "watch: resumed with" in out
    # the same adapter as the uninterrupted run (one machine, one thread count: bitwise)
    a = load_file(clean / "models/policy/adapter_model.safetensors")
    b = load_file(killed / "models/policy/adapter_model.safetensors")
    assert a.keys() == b.keys()
    diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    print(f"max |clean - resumed| over the adapter's weights: {diff}")
    assert diff == 0.0
    # one new registered version and one MLflow run, not two; the checkpoints are gone once registered
    after = _registry(killed, killed_env)
    print(f"registry before: {before}; after the kill and the resume: {after}")
    assert after["versions"] == before["versions"] + [before["versions"][-1] + 1]
    assert after["training_runs"] == before["training_runs"] + 1
    assert not list((killed / ".mascot/checkpoints/grpo").glob("*/checkpoint-*"))
    watch = json.loads((killed / "plots/train_grpo/watch_checks.json").read_text())
    clean_watch = json.loads((clean / "plots/train_grpo/watch_checks.json").read_text())
    assert [c["step"] for c in watch["checks"]] == [c["step"] for c in clean_watch["checks"]] == [0, 4, 8, 12, 16, 20, 24]
    assert [c["answers"] for c in watch["checks"]] == [c["answers"] for c in clean_watch["checks"]]
