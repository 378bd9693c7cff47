"""The positive control, end to end through DVC, TRL and MLflow on the tiny models (docs/controls.md): the judge
pays a digit alone (the tiny speaker writes one in about a ninth of its replies; profiles/control-positive.yaml).
The chain must recover it: pairs that carry it, a reward model that ranks by it beyond chance and length and passes
the interval gate, and a GRPO policy that shows it more often on held-out probes. About 4 minutes."""
import json

import pytest

from tests.control_chains import DIGIT, control_chain, digit_rate, jsonl, metrics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def positive(repo_root, tmp_path_factory):
    return control_chain(repo_root, tmp_path_factory, "positive", "evaluate")


def test_positive_control_pairs_carry_the_feature_and_the_reward_model_learns_it(positive):
    work, _ = positive
    pairs = jsonl(work / "data/pairs.jsonl")
    assert len(pairs) >= 150
    assert all(DIGIT.search(p["chosen"][-1]["content"]) and not DIGIT.search(p["rejected"][-1]["content"])
               for p in pairs)
    candidates = [r["text"] for r in jsonl(work / "data/candidates.jsonl")]
    rate = sum(bool(DIGIT.search(t)) for t in candidates) / len(candidates)
    assert 0.03 < rate < 0.5, f"the base speaker shows the feature in {rate:.2f} of its replies: not 'sometimes'"
    rm = metrics(work, "train_rm")
    assert rm["eval_pairs"] >= 100
    # it learned the planted preference, beyond chance and beyond length (0.83-0.92 on every draw measured since
    # 2026-12-03: the bar is the interval above length and chance, 0.8 a floor under it)
    assert rm["eval_accuracy"] >= 0.8, rm["eval_accuracy"]
    assert rm["eval_accuracy_ci_low"] > rm["eval_length_baseline_accuracy"]
    assert rm["eval_accuracy_null_p"] < 0.01  # no scorer that learned nothing does this on these pairs
    promote = metrics(work, "promote")
    assert promote["promoted"] and promote["alias"] == "champion" and promote["bar_on"] == "lower_bound"


def test_positive_control_judges_run_as_functions_everywhere(positive):
    work, _ = positive
    assert {s["judge_mode"] for s in jsonl(work / "data/scores.jsonl")} == {"function"}
    assert metrics(work, "judge_check")["judge_model"] == "function:mascot.annotate.controls:planted_feature"
    replies = jsonl(work / "reports/evaluate_replies.jsonl")
    assert all(r["judge"]["total_reward"] == (5.0 if DIGIT.search(r["text"]) else 1.0)
               for r in replies if r["text"].strip())
    watch = json.loads((work / "plots/train_grpo/watch_checks.json").read_text())
    checks = watch if isinstance(watch, list) else watch["checks"]
    assert all(j == (5.0 if DIGIT.search(a) else 1.0) for c in checks for a, j in zip(c["answers"], c["judge"])
               if a.strip())


def test_positive_control_grpo_raises_the_feature_on_heldout_probes(positive):
    work, _ = positive
    grpo, evaluate = metrics(work, "train_grpo"), metrics(work, "evaluate")
    assert grpo["watch_verdict"] == "improving" and grpo["watch_n"] >= 10, grpo["watch_why"]
    assert grpo["watch_judge_change_ci_low"] > 0
    judge = evaluate["grpo_minus_base"]["judge_total"]
    assert judge["n"] >= 10 and judge["ci_low"] > 0, judge
    # the judge's total is the feature's indicator here: its rate on the held-out probes, base against GRPO
    replies = jsonl(work / "reports/evaluate_replies.jsonl")
    assert digit_rate(replies, "grpo") > digit_rate(replies, "base") + 0.3
