"""The length control, end to end through DVC, TRL and MLflow (docs/controls.md): the judge pays a digit (the tiny
speaker writes one in about a tenth of its replies) and every word (profiles/control-length.yaml). The chain must
carry both to the reward model, and GRPO runs twice against that one champion: with the length lever off the
policy must buy words and `evaluate` must say so; with it on, the words must not come with it. The positive control
(tests/test_control_positive.py) is the planted preference's recovery on its own. About 10 minutes: the reward
model is Gemma-3-270m's first 6 layers."""
import json

import pytest

from tests.conftest import sh
from tests.control_chains import DIGIT, control_repo, jsonl, metrics, set_params

pytestmark = pytest.mark.integration


# The length control: the judge pays the digit and every word (profiles/control-length.yaml); one chain through
# promote, then GRPO and evaluate twice against its champion, the length lever off and then on
@pytest.fixture(scope="module")
def length(repo_root, tmp_path_factory):
    work, env = control_repo(repo_root, tmp_path_factory, "length")
    runs = {}
    for levers, enabled in (("off", False), ("on", True)):
        set_params(work, {"grpo": {"length_calibration": {"enabled": enabled}}})
        sh("dvc repro evaluate", work, env)
        runs[levers] = {name: metrics(work, name) for name in ("train_grpo", "evaluate")}
        runs[levers]["replies"] = jsonl(work / "reports/evaluate_replies.jsonl")
        runs[levers]["watch"] = json.loads((work / "plots/train_grpo/watch_checks.json").read_text())
    return work, runs


def _judge(text: str) -> float:
    """The length control's judge (profiles/control-length.yaml): 1, +2 for a digit, +0.5 a word, held in [1, 5]."""
    return round(min(5.0, max(1.0, 1.0 + (2.0 if DIGIT.search(text) else 0.0) + 0.5 * len(text.split()))), 4)


def test_length_control_pairs_carry_the_planted_feature_and_the_judge_is_the_function_everywhere(length):
    work, runs = length
    candidates = [r["text"] for r in jsonl(work / "data/candidates.jsonl")]
    rate = sum(bool(DIGIT.search(t)) for t in candidates) / len(candidates)
    assert 0.03 < rate < 0.5, f"the base speaker shows the feature in {rate:.2f} of its replies: not 'sometimes'"
    pairs = jsonl(work / "data/pairs.jsonl")
    assert len(pairs) >= 300
    with_digit = {side: sum(bool(DIGIT.search(p[side][-1]["content"])) for p in pairs) / len(pairs)
                  for side in ("chosen", "rejected")}
    # the pairs carry the digit: chosen 0.19, rejected 0.009 (2026-12-06; the rates follow the speaker's, 0.09-0.14)
    assert with_digit["chosen"] > 0.1 and with_digit["chosen"] > 5 * with_digit["rejected"], with_digit
    assert {s["judge_mode"] for s in jsonl(work / "data/scores.jsonl")} == {"function"}
    assert metrics(work, "judge_check")["judge_model"] == "function:mascot.annotate.controls:planted_feature_and_length"
    for levers in ("off", "on"):  # evaluate's judge and the watch's are the same function of the text
        assert all(abs(r["judge"]["total_reward"] - _judge(r["text"])) < 1e-6 for r in runs[levers]["replies"]
                   if r["text"].strip())
        watch = runs[levers]["watch"]
        checks = watch if isinstance(watch, list) else watch["checks"]
        assert all(abs(j - _judge(a)) < 1e-6 for c in checks for a, j in zip(c["answers"], c["judge"]) if a.strip())


def test_length_control_reward_model_learns_the_feature_and_the_words(length):
    work, _ = length
    rm = metrics(work, "train_rm")
    assert rm["eval_pairs"] >= 100
    assert rm["eval_score_length_pearson"] > 0.3  # it pays words, as the judge does
    # and the digit beside them, at equal length: 0.68 [0.59, 0.76] on 297 pairs, and on other draws of the same
    # speaker 0.58 [0.50, 0.67] on 304 (2026-12-06: the interval's foot sits on 0.5 from draw to draw); among the pairs
    # of about one length 0.79 on 43
    assert rm["eval_accuracy_equal_length"] > 0.55 and not rm["eval_accuracy_equal_length_extrapolated"], rm
    assert rm["eval_accuracy_equal_length_matched"] > 0.6 and rm["eval_accuracy_equal_length_matched_n"] >= 20, rm
    assert rm["eval_accuracy_null_p"] < 0.01  # no scorer that learned nothing does this on these pairs
    promote = metrics(work, "promote")  # through the interval gate (the real profile's bar_on)
    assert promote["promoted"] and promote["alias"] == "champion" and promote["bar_on"] == "lower_bound", promote
    assert not promote["too_few_to_tell"]


def test_length_control_levers_off_the_policy_buys_words_and_evaluate_says_length(length):
    _, runs = length
    gain = runs["off"]["evaluate"]["grpo_minus_base"]
    assert gain["reply_words"]["n"] >= 10 and gain["reply_words"]["ci_low"] > 0, gain["reply_words"]
    assert runs["off"]["evaluate"]["judge_gain_is"] == "length", gain["judge_total"]
    assert "length_calibration_active" not in runs["off"]["train_grpo"]  # the lever was off: no fit made


def test_length_control_levers_on_the_words_do_not_come_and_the_feature_is_kept(length):
    """With the lever on, GRPO against the same champion: the length gain the lever-off arm bought is mostly gone,
    the policy does not collapse to short answers, keeps the digit the lever-off policy traded for words, and the
    watch sees the judge rise at equal length. (Until 2026-12-07 the lever credited a short reply the fit's pay for
    each missing word: on this draw the policy collapsed to one one-word string the reward model scores like four
    words, -2.0 words and the digit -0.19; the lever is now one-sided, `length_calibration.pay_shorter: false`.)"""
    _, runs = length
    grpo, on, off = runs["on"]["train_grpo"], runs["on"]["evaluate"], runs["off"]["evaluate"]
    assert grpo["length_calibration_active"] is True and grpo["length_calibration_slope_per_word"] > 0
    assert grpo["length_calibration_pays_shorter"] is False
    words_on, words_off = on["grpo_minus_base"]["reply_words"], off["grpo_minus_base"]["reply_words"]
    # 2026-12-07: on +0.55 [-0.19, 1.23], off +4.97 [4.32, 5.61], n 31: the lever took off nine tenths of it
    assert words_on["n"] >= 10 and words_on["ci_high"] < words_off["ci_low"], (words_on, words_off)
    assert words_on["diff"] < words_off["diff"] / 4, (words_on, words_off)
    assert words_on["ci_low"] > -1.0, words_on  # no collapse: not a word shorter than the base policy
    # the digit: on +0.19 [0.0, 0.39], off -0.19 [-0.32, -0.06] (the lever-off policy writes words instead)
    digit_on, digit_off = on["grpo_minus_base"]["planted_feature"], off["grpo_minus_base"]["planted_feature"]
    assert digit_on["diff"] >= 0 and digit_on["diff"] > digit_off["diff"], (digit_on, digit_off)
    # the watch's judge up at equal length (0.59 [0.16, 1.09] on 31 probes), and evaluate does not call it length
    assert grpo["watch_verdict"] == "improving" and grpo["watch_n"] >= 10, grpo["watch_why"]
    assert on["judge_gain_is"] != "length", on["grpo_minus_base"]["judge_total"]
