"""Runs that `mlflow ui` can compare: input files as datasets (digest = DVC's md5), DVC experiment tags."""
import hashlib

from mascot import registry
from mascot.io import write_jsonl


def test_an_input_file_is_a_dataset_with_its_dvc_md5_and_context(tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    path = tmp_path / "pairs.jsonl"
    write_jsonl(path, [{"pair_id": "a>b", "split": "train", "margin": 0.5, "chosen": [{"role": "assistant"}]},
                       {"pair_id": "c>d", "split": "eval", "margin": 1.0, "chosen": [{"role": "assistant"}]}])
    monkeypatch.setenv("DVC_EXP_NAME", "rm-lr-1e-3")
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "0123abcd")
    with mlflow.start_run(tags=registry.dvc_experiment_tags()) as run:
        registry.log_input_file(path, "train")
    got = MlflowClient().get_run(run.info.run_id)
    (inp,) = got.inputs.dataset_inputs
    assert inp.dataset.digest == hashlib.md5(path.read_bytes()).hexdigest() == registry.file_md5(path)
    assert inp.dataset.name == str(path) and [t.value for t in inp.tags] == ["train"]
    assert '"pair_id"' in inp.dataset.schema and '"chosen"' not in inp.dataset.schema  # scalar columns only
    assert got.data.tags["dvc_exp_name"] == "rm-lr-1e-3" and got.data.tags["dvc_exp_baseline_rev"] == "0123abcd"


def test_outside_dvc_exp_run_there_are_no_experiment_tags(monkeypatch):
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    monkeypatch.delenv("DVC_EXP_BASELINE_REV", raising=False)
    assert registry.dvc_experiment_tags() == {}
