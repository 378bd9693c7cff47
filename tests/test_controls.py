"""The negative controls, end to end through DVC, TRL and MLflow on the tiny models (docs/controls.md).

Negative: a judge of seeded noise; the chain must say it found nothing.
Stage 2's pair (a Director that gives a stated persona the floor, and noise on blocks) continues the negative
chain's repo: stage 2 reads none of stage 1's judge.
The planted preference and the length lever are chains of their own (tests/test_control_positive.py,
tests/test_control_length.py), so that the two test workers build them beside this one. Each chain is
`mascot profile tiny controls control-<kind>` in a fresh git + DVC repo (this one's about 4 minutes)."""
import subprocess

import pytest
from ruamel.yaml import YAML

from tests.conftest import sh
from tests.control_chains import control_chain, jsonl, metrics, set_params

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def negative(repo_root, tmp_path_factory):
    return control_chain(repo_root, tmp_path_factory, "negative", "promote")


def _control_params(work, env, *names: str) -> None:
    """The control's own params again (another test of the shared repo may have moved a gate), and its chain
    brought up to date through promote."""
    sh("git checkout -q params.yaml", work, env)
    sh("mascot profile tiny controls " + " ".join(names), work, env)
    sh("dvc repro promote", work, env)


def test_negative_control_reward_model_finds_nothing_and_the_gates_stop(negative):
    work, env = negative
    _control_params(work, env, "control-negative")  # in any order: the watch test below turns the gate off
    rm = metrics(work, "train_rm")
    assert rm["eval_pairs"] >= 100
    # within chance: a random score per reply reaches this accuracy on these very pairs in at least 1% of draws.
    # (Seeded noise draws one accuracy per seed; a valid 95% interval excludes 0.5 for 1 seed in 20, and this
    # chain's seed is one: 0.569 [0.509, 0.629], chance p 0.045 at 16 epochs; 0.434 [0.375, 0.489], chance p 0.069
    # at 5, the positive's number of steps; docs/controls.md)
    assert rm["eval_accuracy_null_p"] >= 0.01, rm
    assert rm["eval_accuracy_ci_low"] < 0.55
    promote = metrics(work, "promote")
    assert not promote["promoted"], promote["reason"]
    assert "learned nothing" in promote["reason"] or "below the threshold" in promote["reason"]
    # the real profile's gates on the same data: validate stops at the judge's bar
    real = YAML(typ="safe").load((work / "profiles/real.yaml").read_text())
    set_params(work, {"validate": real["validate"], "promote": real["promote"]})
    out = subprocess.run("mascot validate", cwd=work, env=env, shell=True, capture_output=True, text=True)
    assert out.returncode != 0, out.stdout[-2000:]
    assert "judge" in (out.stdout + out.stderr).lower()
    assert not metrics(work, "validate")["success"]


def test_negative_control_watch_does_not_call_noise_improving(negative):
    work, env = negative
    _control_params(work, env, "control-negative")
    # the gate off, so that GRPO runs against the noise reward model and the watch must say what it sees
    set_params(work, {"promote": {"min_eval_accuracy": 0.0, "require_beat_length_baseline": False, "bar_on": "point",
                                   "max_null_p": None}})
    sh("dvc repro train_grpo", work, env)
    grpo = metrics(work, "train_grpo")
    assert grpo["watch_n"] >= 10 and grpo["watch_verdict"] != "improving"


# Stage 2's controls continue the negative chain's repo (stage 1's outputs stay cached; only the stage-2 stages
# run), each with a collective judge of its own (score_group.scorer); they share its episodes. Each fixture keeps
# the figures it made: the other may have run since.
GROUP_FIGURES = ("train_group_rm", "promote_group", "evaluate_group", "train_director")


@pytest.fixture(scope="module")
def group_positive(negative):
    work, env = negative
    sh("git checkout -q params.yaml", work, env)
    sh("mascot profile tiny controls control-negative controls-group control-group-positive", work, env)
    sh("dvc repro evaluate_group", work, env)
    figures = {name: metrics(work, name) for name in GROUP_FIGURES}
    figures["episodes"] = jsonl(work / "data/group/episodes.jsonl")
    return figures


@pytest.fixture(scope="module")
def group_negative(negative):
    work, env = negative
    sh("git checkout -q params.yaml", work, env)
    sh("mascot profile tiny controls control-negative controls-group control-group-negative", work, env)
    sh("dvc repro promote_group", work, env)
    return work, env


def test_group_positive_control_the_group_reward_model_learns_who_has_the_floor(group_positive):
    first = [next(t["speaker"] for t in e["turns"] if t["role"] == "agent") for e in group_positive["episodes"]
             if e["valid"]]
    rate = first.count("The Beacon") / len(first)
    assert 0.1 < rate < 0.5, f"The Beacon has the floor first in {rate:.2f} of the base episodes: not 'sometimes'"
    rm = group_positive["train_group_rm"]
    assert rm["eval_pairs"] >= 20
    assert rm["eval_accuracy_ci_low"] > max(0.5, rm["eval_length_baseline_accuracy"]), rm
    promote = group_positive["promote_group"]
    assert promote["promoted"] and promote["bar_on"] == "lower_bound", promote["reason"]


def test_group_positive_control_the_trained_director_gives_the_floor_as_the_judge_pays(group_positive):
    planted = group_positive["evaluate_group"]["planted_feature"]
    assert planted["persona"] == "The Beacon"
    for other in ("base", "random"):
        fig = planted[f"trained_minus_{other}"]
        assert fig["n"] >= 20 and fig["ci_low"] > 0, (other, planted)
    director = group_positive["train_director"]
    assert director["watch_verdict"] == "improving", director["watch_why"]


def test_group_negative_control_finds_nothing_and_the_gate_stops(group_negative):
    work, env = group_negative
    _control_params(work, env, "control-negative", "controls-group", "control-group-negative")  # in any order
    sh("dvc repro promote_group", work, env)
    rm = metrics(work, "train_group_rm")
    assert rm["eval_pairs"] >= 20 and rm["eval_accuracy_ci_low"] < 0.5 < rm["eval_accuracy_ci_high"], rm
    promote = metrics(work, "promote_group")
    assert not promote["promoted"], promote
    # the gate off, so that the Director trains against the noise and its watch must say what it sees
    set_params(work, {"promote_group": {"min_eval_accuracy": 0.0, "require_beat_length_baseline": False,
                                         "bar_on": "point", "max_null_p": None}})
    sh("dvc repro train_director", work, env)
    director = metrics(work, "train_director")
    assert director["watch_n"] >= 10 and director["watch_verdict"] != "improving", director["watch_why"]
