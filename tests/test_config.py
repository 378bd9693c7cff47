import pytest
import yaml

from mascot.config import ConfigError, load_params, parse_params


def base(repo_root):
    return yaml.safe_load((repo_root / "params.yaml").read_text())


def test_shipped_params_and_profiles_validate(repo_root, tmp_path):
    from mascot.profiles import apply_profile

    assert load_params(repo_root / "params.yaml").pairs.score_margin == pytest.approx(0.1)
    for profile in ("tiny", "real", "evidence"):
        target = tmp_path / f"{profile}.yaml"
        target.write_text((repo_root / "params.yaml").read_text())
        apply_profile(profile, target, repo_root / "profiles")
        parsed = load_params(target)
        assert parsed.prepare.sources  # untouched keys survive the merge
    assert load_params(tmp_path / "real.yaml").pairs.score_margin == 0.5
    assert load_params(tmp_path / "evidence.yaml").grpo.length_calibration.enabled  # the lever the control chose
    assert "# Embedded CPU default" in (tmp_path / "real.yaml").read_text()  # comments kept


def test_a_regex_survives_merges_one_after_another(repo_root, tmp_path):
    """A pattern with YAML indicators, merged from a profile and then again with other blocks, reads back as
    the stages read it; before, the second merge wrote "\\?" bare in a flow mapping and train_grpo failed."""
    from mascot.profiles import apply_profile, merge_params

    target = tmp_path / "params.yaml"
    target.write_text((repo_root / "params.yaml").read_text())
    (tmp_path / "regex.yaml").write_text(
        'score: {scorer: {kind: function, target: "mascot.annotate.controls:planted_feature_and_length",\n'
        '                 kwargs: {pattern: "\\\\?", feature: 1.0, per_word: 0.05}}}\n')
    apply_profile("regex", target, tmp_path)
    merge_params(target, {"grpo": {"length_calibration": {"enabled": True}}})
    merge_params(target, {"grpo": {"length_calibration": {"enabled": False}}})
    merge_params(target, {"score": {"scorer": {"kwargs": {"pattern": "[?]{1}"}}}})
    merge_params(target, {"train_rm": {"epochs": 3}})
    parsed = load_params(target)
    assert parsed.score.scorer.kwargs["pattern"] == "[?]{1}"
    assert parsed.train_rm.epochs == 3 and not parsed.grpo.length_calibration.enabled
    merge_params(target, {"score": {"scorer": {"kwargs": {"pattern": "\\?"}}}})
    merge_params(target, {"train_rm": {"epochs": 4}})
    assert load_params(target).score.scorer.kwargs["pattern"] == "\\?"


def test_unknown_key_is_named(repo_root):
    raw = base(repo_root)
    raw["generate"]["num_agent_per_query"] = 3
    with pytest.raises(ConfigError, match=r"generate\.num_agent_per_query: unknown key"):
        parse_params(raw)


def test_wrong_type_is_named(repo_root):
    raw = base(repo_root)
    raw["pairs"]["score_margin"] = "half"
    with pytest.raises(ConfigError, match=r"pairs\.score_margin: .*'half'"):
        parse_params(raw)


def test_unknown_top_level_block(repo_root):
    raw = base(repo_root)
    raw["genrate"] = {}
    with pytest.raises(ConfigError, match="genrate: unknown key"):
        parse_params(raw)


def test_openai_backend_needs_url(repo_root):
    raw = base(repo_root)
    raw["llm"]["judge"] = {"backend": "openai", "model": "x"}
    with pytest.raises(ConfigError, match=r"llm\.judge.*base_url"):
        parse_params(raw)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("prepare: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(bad)


def test_training_stages_relaunch_under_accelerate_only_when_asked(monkeypatch):
    from types import SimpleNamespace

    from mascot.config import TrainRMParams
    from mascot.launch import launch_command, relaunch

    for var in ("LOCAL_RANK", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(var, raising=False)
    assert relaunch("train_rm", SimpleNamespace(train_rm=TrainRMParams()), ["train_rm"]) is None  # runs here
    cmd = launch_command(["train_rm"], 2, None)
    # --multi_gpu even on a CPU: `--cpu --num_processes 2` silently runs one process
    assert cmd[cmd.index("--num_processes") + 1] == "2" and "--multi_gpu" in cmd and "--cpu" not in cmd
    assert cmd[-1] == "train_rm"
    cmd = launch_command(["train_grpo"], 8, "profiles/accelerate/ddp_1node_8gpu.yaml")
    assert cmd[cmd.index("--config_file") + 1].endswith("ddp_1node_8gpu.yaml") and "--multi_gpu" not in cmd
    monkeypatch.setenv("LOCAL_RANK", "0")  # already a rank: never launch again
    params = SimpleNamespace(train_rm=TrainRMParams(num_processes=2))
    assert relaunch("train_rm", params, ["train_rm"]) is None


def test_ranks_sharing_a_pipe_unbuffered_never_splice_their_lines():
    """Two ranks print at once into one pipe with PYTHONUNBUFFERED=1, as CI runs them; every line arrives whole.

    Without one_write_per_line, 532-1064 of these 6,000 lines came spliced (print writes the newline apart)."""
    import os
    import re
    import subprocess
    import sys

    code = ("import sys; from mascot.launch import one_write_per_line\n"
            "one_write_per_line()\n"
            "for i in range(3000):\n"
            "    print(f'train_rm[rank {sys.argv[1]}/2]:', 'x' * 60, flush=True)\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CODE": code}
    with subprocess.Popen(f'{sys.executable} -c "$CODE" 0 & {sys.executable} -c "$CODE" 1 & wait',
                          shell=True, stdout=subprocess.PIPE, env=env, text=True) as proc:
        lines = proc.stdout.read().splitlines()
    whole = [ln for ln in lines if re.fullmatch(r"train_rm\[rank [01]/2\]: x{60}", ln)]
    assert len(whole) == len(lines) == 6000, f"{len(lines) - len(whole)} lines spliced"


def _defaults_that_differ(model_cls, data: dict, path: str = "") -> list[str]:
    """Every key of `data` whose schema default (what applies when the key is deleted) differs from its value."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    out = []
    for key, value in data.items():
        name = next((n for n, f in model_cls.model_fields.items() if key in (n, f.alias)), None)
        assert name is not None, f"{path}{key}: not in the schema"
        field = model_cls.model_fields[name]
        block = next((t for t in getattr(field.annotation, "__args__", (field.annotation,))
                      if isinstance(t, type) and issubclass(t, BaseModel)), None)
        if block is not None and isinstance(value, dict):
            out += _defaults_that_differ(block, value, f"{path}{key}.")
            continue
        if field.is_required():
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump()
        if default is not PydanticUndefined and default != value:
            out.append(f"{path}{key}: schema {default!r}, params.yaml {value!r}")
    return out


def test_schema_defaults_are_the_shipped_params(repo_root):
    """One source of truth: deleting a key from the shipped params.yaml changes nothing."""
    import yaml

    from mascot.config import Params

    assert _defaults_that_differ(Params, yaml.safe_load((repo_root / "params.yaml").read_text())) == []
