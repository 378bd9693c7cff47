"""Runs that `mlflow ui` can compare: input files as datasets (digest = DVC's md5), DVC experiment tags."""
import hashlib

from mascot import registry
from mascot.io import write_jsonl


def test_an_input_file_is_a_dataset_with_its_dvc_md5_and_context(tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
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


def test_a_queued_experiment_tracks_into_the_repository_it_was_queued_from(tmp_path, monkeypatch):
    """DVC runs a queued or --temp experiment in `<repo>/.dvc/tmp/exps/tmpXXXX`: the embedded store is the repo's."""
    temp = tmp_path / "repo/.dvc/tmp/exps/tmpabc123"
    temp.mkdir(parents=True)
    monkeypatch.chdir(temp)
    assert registry.experiment_origin() == (tmp_path / "repo").resolve()
    assert registry.embedded_uri("sqlite:///mlflow.db") == f"sqlite:///{(tmp_path / 'repo/mlflow.db').resolve()}"
    assert registry.store_path("mlartifacts") == (tmp_path / "repo/mlartifacts").resolve()
    assert registry.embedded_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    monkeypatch.chdir(tmp_path)
    assert registry.experiment_origin() is None
    assert registry.embedded_uri("sqlite:///mlflow.db") == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"


def test_two_queue_workers_take_the_embedded_store_one_at_a_time(tmp_path):
    """`dvc queue start -j 2`: two experiments' stages at once; the second waits for the first, and says why."""
    import subprocess
    import sys
    import time

    import os

    temps = [tmp_path / f"repo/.dvc/tmp/exps/tmp{k}" for k in "ab"]
    # the embedded store of params, not a server an earlier test left in the environment (MLflow exports it)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    code = ("import sys, time, types; from mascot import registry; "
            "p = types.SimpleNamespace(mlflow=types.SimpleNamespace(tracking_uri='sqlite:///mlflow.db')); "
            "uri = registry.setup_tracking(p); print('got', uri, time.time(), flush=True); time.sleep(2); "
            "print('done', time.time(), flush=True)")
    procs = []
    for temp in temps:
        temp.mkdir(parents=True)
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=temp, stdout=subprocess.PIPE, env=env,
                                      stderr=subprocess.PIPE, text=True))
        time.sleep(1.0)
    results = [p.communicate(timeout=120) for p in procs]
    held = sorted((float(out.splitlines()[0].split()[-1]), float(out.splitlines()[1].split()[-1]), err, out.split()[1])
                  for out, err in results)
    (got_first, done_first, _, uri_first), (got_second, _, err_second, uri_second) = held
    assert uri_first == uri_second == f"sqlite:///{(tmp_path / 'repo/mlflow.db').resolve()}"
    assert got_second >= done_first  # the second took the store only after the first had finished with it
    assert "is in use by another stage" in err_second and "a team server several" in err_second
