"""dvc.yaml lists the code each stage runs, computed from the code, so a stage is never stale without DVC saying so."""
import re
import shutil

import pytest
import yaml

from mascot.stage_deps import ROOT, folded, listed_code, stage_code
from tests.conftest import sh


def stages():
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def test_dvc_yaml_lists_exactly_the_modules_each_stage_imports():
    wrong = {}
    for name, stage in stages().items():
        need, listed = set(stage_code(name)), listed_code(stage.get("deps", []))
        if need != listed:
            wrong[name] = {"missing": sorted(need - listed), "not run by it": sorted(listed - need)}
    assert not wrong, ("dvc.yaml's code deps drifted from the imports; put these lists in (python -m "
                       f"mascot.stage_deps):\n{yaml.safe_dump(wrong)}\n" +
                       "\n".join(f"{n}: {folded(stage_code(n))}" for n in wrong))


def test_stages_list_the_data_and_models_they_read():
    s = stages()
    for name in ("evaluate", "evaluate_group", "promote", "promote_group"):
        assert {"models/base", "models/small", "data/personas.yaml"} <= set(s[name]["deps"]), name
    for name in ("train_grpo", "train_director", "train_rm", "train_group_rm"):  # either model can be the base
        assert {"data/personas.yaml", "models/base", "models/small"} <= set(s[name]["deps"]), name


def _declared(stage: dict) -> set[str]:
    outs = [o for key in ("outs", "metrics", "plots") for o in stage.get(key, [])]
    return {str(d) for d in stage.get("deps", [])} | {next(iter(o)) if isinstance(o, dict) else o for o in outs}


def test_every_file_a_stage_is_handed_is_one_dvc_tracks_for_it():
    """dvc.yaml's cmd hands each stage its files (mascot/stage_args.py): the stage function takes exactly those,
    and each is a dep or an out of that stage, or a folder holding them (report and plot folders), or inside one
    (a model folder's registered.json), so DVC reruns the stage when one changes."""
    import importlib

    from mascot.cli import STAGES
    from mascot.stage_args import stage_files
    from mascot.stage_deps import EXTRA_STAGES

    untracked = {}
    for name, target in {**STAGES, **EXTRA_STAGES}.items():
        module, _, function = target.partition(":")
        files = stage_files(getattr(importlib.import_module(module), function or "main"), name, {},
                            ROOT / "dvc.yaml")
        declared = _declared(stages()[name])
        lost = [f for f in files.values() if not any(f == d or d.startswith(f.rstrip("/") + "/")
                                                     or f.startswith(d.rstrip("/") + "/") for d in declared)]
        if lost:
            untracked[name] = lost
    assert not untracked, untracked


def test_a_stage_is_refused_an_option_it_does_not_take_and_told_what_it_misses(tmp_path):
    from mascot.stage_args import StageArgsError, stage_files

    def stage(params, *, queries_path: str, figures_path: str, extra_path: str | None = None):
        pass

    (tmp_path / "dvc.yaml").write_text("stages:\n  demo:\n    cmd: mascot demo --queries-path q.jsonl\n")
    assert stage_files(stage, "demo", {"figures_path": "f.json"}, tmp_path / "dvc.yaml") == {
        "queries_path": "q.jsonl", "figures_path": "f.json"}
    with pytest.raises(StageArgsError, match="give --figures-path"):
        stage_files(stage, "demo", {}, tmp_path / "dvc.yaml")
    with pytest.raises(StageArgsError, match="no option --pairs-path .*--queries-path, --figures-path, --extra-path"):
        stage_files(stage, "demo", {"pairs_path": "p.jsonl"}, tmp_path / "dvc.yaml")


def test_a_stage_headline_goes_where_dvc_yaml_declares_it_from_the_figures_it_was_handed(tmp_path, monkeypatch):
    """`mascot <stage>` writes the headline file dvc.yaml's `metrics:` names, from the figures file its cmd (or an
    option by hand) handed the stage, not from paths of its own."""
    from mascot.headline import write_headline
    from mascot.stage_args import StageArgsError, metrics_file

    assert all(metrics_file(name, ROOT / "dvc.yaml") == (entry.get("metrics") or [None])[0]
               for name, entry in stages().items())
    (tmp_path / "dvc.yaml").write_text("stages:\n  pairs:\n    cmd: mascot pairs\n    metrics:\n"
                                       "      - out/pairs-headline.json:\n          cache: false\n"
                                       "  two:\n    cmd: mascot two\n    metrics: [a.json, b.json]\n")
    assert metrics_file("pairs", tmp_path / "dvc.yaml") == "out/pairs-headline.json"
    assert metrics_file("prepare", tmp_path / "bare" / "dvc.yaml") == "metrics/prepare.json"
    with pytest.raises(StageArgsError, match="stages.two.metrics lists 2 files"):
        metrics_file("two", tmp_path / "dvc.yaml")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere.json").write_text('{"pairs": 12, "chosen_longer_fraction": 0.5, "not_a_headline": 3}')
    write_headline("pairs", "elsewhere.json", metrics_file("pairs"))
    assert yaml.safe_load((tmp_path / "out/pairs-headline.json").read_text()) == {"pairs": 12, "chosen_longer": 0.5}


@pytest.mark.integration
def test_editing_one_shared_module_makes_exactly_its_importers_stale(dvc_repo, tmp_path):
    work, env = dvc_repo
    sh("dvc repro", work, env)  # a no-op when the pipeline test ran first in this session
    copy = tmp_path / "repo"
    shutil.copytree(work, copy, symlinks=True)
    env = {**env, "MASCOT_RESUME_DIR": str(copy / ".mascot/resume")}
    assert "Data and pipelines are up to date" in sh("dvc status", copy, env)
    module = "mascot/reward/prompt.py"
    with open(copy / module, "a") as fh:
        fh.write("\n# an edit\n")
    out = sh("dvc status", copy, env)
    print(f"\n`dvc status` after editing {module}:\n{out}")
    stale = set(re.findall(r"^(\w+):\s*$", out, re.MULTILINE))
    expected = {name for name in stages() if module in stage_code(name)}
    assert stale == expected, (stale, expected)
    assert {"train_rm", "train_grpo", "evaluate", "train_director", "evaluate_group"} <= stale
    assert not stale & {"prepare", "generate", "score", "pairs", "episodes"}
