"""The controls, end to end through DVC, TRL and MLflow on the tiny models (docs/controls.md).

Planted preference and length, one chain: the judge pays a digit (the tiny speaker writes one in about a seventh of
its replies) and every word. The chain must recover the digit: pairs that carry it, a reward model that ranks by it
at equal length and passes the interval gate, and GRPO with the length lever on raising it on held-out probes
without buying words; with the lever off it must buy words and be told so. (Until 2026-12 a chain of its own, the
positive control, planted the digit alone; its recovery is the lever-on arm here.)
Negative: a judge of seeded noise; the chain must say it found nothing.
Stage 2's pair (a Director that gives a stated persona the floor, and noise on blocks) continues the negative
chain's repo: stage 2 reads none of stage 1's judge.
Each chain is `mascot profile tiny controls control-<kind>` in a fresh git + DVC repo (the negative's about 4
minutes, the length control's about 9, its reward model Gemma-3-270m's first 6 layers)."""
import json
import re
import subprocess

import pytest
from ruamel.yaml import YAML

from tests.conftest import sh

pytestmark = pytest.mark.integration
DIGIT = re.compile(r"[0-9]")


def _repo(repo_root, tmp_path_factory, kind: str):
    from benchmarks.pipeline_copy import fresh_pipeline_copy

    work = tmp_path_factory.mktemp(f"control-{kind}") / "repo"
    env = fresh_pipeline_copy(repo_root, work)
    sh(f"mascot profile tiny controls control-{kind}", work, env)
    return work, env


def _metrics(work, name: str) -> dict:
    return json.loads((work / "reports" / "figures" / f"{name}.json").read_text())


def _set_params(work, blocks: dict) -> None:
    """Merge `blocks` into the repo's params.yaml (a gate's settings, as a user would edit them)."""
    from mascot.profiles import merge_params

    merge_params(work / "params.yaml", blocks, "the test's blocks")


@pytest.fixture(scope="module")
def negative(repo_root, tmp_path_factory):
    work, env = _repo(repo_root, tmp_path_factory, "negative")
    sh("dvc repro promote", work, env)
    return work, env


def _control_params(work, env, *names: str) -> None:
    """The control's own params again (another test of the shared repo may have moved a gate), and its chain
    brought up to date through promote."""
    sh("git checkout -q params.yaml", work, env)
    sh("mascot profile tiny controls " + " ".join(names), work, env)
    sh("dvc repro promote", work, env)


def test_negative_control_reward_model_finds_nothing_and_the_gates_stop(negative):
    work, env = negative
    _control_params(work, env, "control-negative")  # in any order: the watch test below turns the gate off
    rm = _metrics(work, "train_rm")
    assert rm["eval_pairs"] >= 100
    # within chance: a random score per reply reaches this accuracy on these very pairs in at least 1% of draws.
    # (Seeded noise draws one accuracy per seed; a valid 95% interval excludes 0.5 for 1 seed in 20, and this
    # chain's seed is one: 0.569 [0.509, 0.629], chance p 0.045 at 16 epochs; 0.434 [0.375, 0.489], chance p 0.069
    # at 5, the positive's number of steps; docs/controls.md)
    assert rm["eval_accuracy_null_p"] >= 0.01, rm
    assert rm["eval_accuracy_ci_low"] < 0.55
    promote = _metrics(work, "promote")
    assert not promote["promoted"], promote["reason"]
    assert "learned nothing" in promote["reason"] or "below the threshold" in promote["reason"]
    # the real profile's gates on the same data: validate stops at the judge's bar
    real = YAML(typ="safe").load((work / "profiles/real.yaml").read_text())
    _set_params(work, {"validate": real["validate"], "promote": real["promote"]})
    out = subprocess.run("mascot validate", cwd=work, env=env, shell=True, capture_output=True, text=True)
    assert out.returncode != 0, out.stdout[-2000:]
    assert "judge" in (out.stdout + out.stderr).lower()
    assert not _metrics(work, "validate")["success"]


def test_negative_control_watch_does_not_call_noise_improving(negative):
    work, env = negative
    _control_params(work, env, "control-negative")
    # the gate off, so that GRPO runs against the noise reward model and the watch must say what it sees
    _set_params(work, {"promote": {"min_eval_accuracy": 0.0, "require_beat_length_baseline": False, "bar_on": "point",
                                   "max_null_p": None}})
    sh("dvc repro train_grpo", work, env)
    grpo = _metrics(work, "train_grpo")
    assert grpo["watch_n"] >= 10 and grpo["watch_verdict"] != "improving"


# The length control: the judge pays the digit and every word (profiles/control-length.yaml); one chain through
# promote, then GRPO and evaluate twice against its champion, the length lever off and then on
@pytest.fixture(scope="module")
def length(repo_root, tmp_path_factory):
    work, env = _repo(repo_root, tmp_path_factory, "length")
    runs = {}
    for levers, enabled in (("off", False), ("on", True)):
        _set_params(work, {"grpo": {"length_calibration": {"enabled": enabled}}})
        sh("dvc repro evaluate", work, env)
        runs[levers] = {name: _metrics(work, name) for name in ("train_grpo", "evaluate")}
        runs[levers]["replies"] = _jsonl(work / "reports/evaluate_replies.jsonl")
        runs[levers]["watch"] = json.loads((work / "plots/train_grpo/watch_checks.json").read_text())
    return work, runs


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _judge(text: str) -> float:
    """The length control's judge (profiles/control-length.yaml): 1, +2 for a digit, +0.5 a word, held in [1, 5]."""
    return round(min(5.0, max(1.0, 1.0 + (2.0 if DIGIT.search(text) else 0.0) + 0.5 * len(text.split()))), 4)


def test_length_control_pairs_carry_the_planted_feature_and_the_judge_is_the_function_everywhere(length):
    work, runs = length
    candidates = [r["text"] for r in _jsonl(work / "data/candidates.jsonl")]
    rate = sum(bool(DIGIT.search(t)) for t in candidates) / len(candidates)
    assert 0.03 < rate < 0.5, f"the base speaker shows the feature in {rate:.2f} of its replies: not 'sometimes'"
    pairs = _jsonl(work / "data/pairs.jsonl")
    assert len(pairs) >= 300
    with_digit = {side: sum(bool(DIGIT.search(p[side][-1]["content"])) for p in pairs) / len(pairs)
                  for side in ("chosen", "rejected")}
    # the pairs carry the digit: chosen 0.19, rejected 0.009 (2026-12-06; the rates follow the speaker's, 0.09-0.14)
    assert with_digit["chosen"] > 0.1 and with_digit["chosen"] > 5 * with_digit["rejected"], with_digit
    assert {s["judge_mode"] for s in _jsonl(work / "data/scores.jsonl")} == {"function"}
    assert _metrics(work, "judge_check")["judge_model"] == "function:mascot.annotate.controls:planted_feature_and_length"
    for levers in ("off", "on"):  # evaluate's judge and the watch's are the same function of the text
        assert all(abs(r["judge"]["total_reward"] - _judge(r["text"])) < 1e-6 for r in runs[levers]["replies"]
                   if r["text"].strip())
        watch = runs[levers]["watch"]
        checks = watch if isinstance(watch, list) else watch["checks"]
        assert all(abs(j - _judge(a)) < 1e-6 for c in checks for a, j in zip(c["answers"], c["judge"]) if a.strip())


def test_length_control_reward_model_learns_the_feature_and_the_words(length):
    work, _ = length
    rm = _metrics(work, "train_rm")
    assert rm["eval_pairs"] >= 100
    assert rm["eval_score_length_pearson"] > 0.3  # it pays words, as the judge does
    # and the digit beside them, at equal length: 0.68 [0.59, 0.76] on 297 pairs, and on other draws of the same
    # speaker 0.58 [0.50, 0.67] on 304 (2026-12-06: the interval's foot sits on 0.5 from draw to draw); among the pairs
    # of about one length 0.79 on 43
    assert rm["eval_accuracy_equal_length"] > 0.55 and not rm["eval_accuracy_equal_length_extrapolated"], rm
    assert rm["eval_accuracy_equal_length_matched"] > 0.6 and rm["eval_accuracy_equal_length_matched_n"] >= 20, rm
    assert rm["eval_accuracy_null_p"] < 0.01  # no scorer that learned nothing does this on these pairs
    promote = _metrics(work, "promote")  # through the interval gate (the real profile's bar_on)
    assert promote["promoted"] and promote["alias"] == "champion" and promote["bar_on"] == "lower_bound", promote
    assert not promote["too_few_to_tell"]


def test_length_control_levers_off_the_policy_buys_words_and_evaluate_says_length(length):
    _, runs = length
    gain = runs["off"]["evaluate"]["grpo_minus_base"]
    assert gain["reply_words"]["n"] >= 10 and gain["reply_words"]["ci_low"] > 0, gain["reply_words"]
    assert runs["off"]["evaluate"]["judge_gain_is"] == "length", gain["judge_total"]
    assert "length_calibration_active" not in runs["off"]["train_grpo"]  # the lever was off: no fit made


def test_length_control_levers_on_the_planted_feature_rises_and_the_words_do_not(length):
    """The planted preference recovered: with the lever on, GRPO raises the digit on held-out probes (the watch
    calls it improving), without buying a word."""
    _, runs = length
    grpo, gain = runs["on"]["train_grpo"], runs["on"]["evaluate"]["grpo_minus_base"]
    assert grpo["length_calibration_active"] is True and grpo["length_calibration_slope_per_word"] > 0
    assert gain["planted_feature"]["n"] >= 10 and gain["planted_feature"]["ci_low"] > 0, gain["planted_feature"]
    replies = runs["on"]["replies"]
    rate = {policy: sum(bool(DIGIT.search(r["text"])) for r in replies if r["policy"] == policy)
            / sum(r["policy"] == policy for r in replies) for policy in ("base", "grpo")}
    assert rate["grpo"] > rate["base"] + 0.3, rate
    assert grpo["watch_verdict"] == "improving" and grpo["watch_n"] >= 10, grpo["watch_why"]
    # the stated bound: not one word longer than the base policy (the interval's top)
    assert gain["reply_words"]["ci_high"] < 1.0, gain["reply_words"]
    equal = gain["judge_total"]["equal_length"]
    assert equal["ci_low"] > 0 and not equal["extrapolated"], equal
    assert runs["on"]["evaluate"]["judge_gain_is"] == "gain"


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
    figures = {name: _metrics(work, name) for name in GROUP_FIGURES}
    figures["episodes"] = _jsonl(work / "data/group/episodes.jsonl")
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
    rm = _metrics(work, "train_group_rm")
    assert rm["eval_pairs"] >= 20 and rm["eval_accuracy_ci_low"] < 0.5 < rm["eval_accuracy_ci_high"], rm
    promote = _metrics(work, "promote_group")
    assert not promote["promoted"], promote
    # the gate off, so that the Director trains against the noise and its watch must say what it sees
    _set_params(work, {"promote_group": {"min_eval_accuracy": 0.0, "require_beat_length_baseline": False,
                                         "bar_on": "point", "max_null_p": None}})
    sh("dvc repro train_director", work, env)
    director = _metrics(work, "train_director")
    assert director["watch_n"] >= 10 and director["watch_verdict"] != "improving", director["watch_why"]
