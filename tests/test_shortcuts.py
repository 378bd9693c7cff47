"""Length as a shortcut: pairs report and balance it, reward-model metrics compare against it, promotion
can require beating it."""
import pytest

from mascot.pairs import balance_length, chosen_longer_fraction
from mascot.registry import decide_promotion
from mascot.reward.evaluation import pair_metrics


def pair(pid, chosen_words, rejected_words, margin=0.5, split="train"):
    return {"pair_id": pid, "split": split, "margin": margin,
            "chosen": [{"role": "assistant", "content": " ".join(["w"] * chosen_words)}],
            "rejected": [{"role": "assistant", "content": " ".join(["w"] * rejected_words)}]}


def test_chosen_longer_fraction_and_balancing():
    pairs = [pair("a", 9, 3, 0.2), pair("b", 8, 3, 0.9), pair("c", 7, 3, 0.5), pair("d", 2, 6, 0.3),
             pair("e", 4, 4, 0.4)]
    assert chosen_longer_fraction(pairs) == 0.75  # 3 of the 4 pairs that differ in length
    kept, dropped = balance_length(pairs)
    assert dropped == 2 and chosen_longer_fraction(kept) == 0.5
    assert [p["pair_id"] for p in kept] == ["b", "d", "e"]  # smallest-margin longer pairs went first


def test_length_baseline_and_accuracy_where_chosen_is_not_longer():
    pairs = [pair("a", 9, 3), pair("b", 8, 3), pair("c", 2, 6), pair("d", 4, 4)]
    m = pair_metrics([{**p, "margin": 0.5} for p in pairs], [1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0])
    assert m["accuracy"] == 0.75
    assert m["length_baseline_accuracy"] == pytest.approx((1 + 1 + 0 + 0.5) / 4)
    assert m["not_longer_pairs"] == 2 and m["accuracy_not_longer"] == 0.5


def test_promotion_requires_beating_the_length_baseline():
    new = {"accuracy": 0.7, "mean_margin": 0.3, "length_baseline_accuracy": 0.8}
    ok, reason = decide_promotion(new, None, 0.5, beat_length_baseline=True)
    assert not ok and "longer-reply-wins baseline 0.8000" in reason
    assert decide_promotion(new, None, 0.5, beat_length_baseline=False)[0]
    assert decide_promotion({**new, "accuracy": 0.85}, None, 0.5, beat_length_baseline=True)[0]


def test_on_too_few_pairs_the_length_baseline_is_said_not_decided_under_a_point_bar():
    """The CPU default on a bf16 machine: 0.5 on 6 eval pairs against a baseline of 0.5 refused the model, and
    `dvc repro` stopped at train_grpo; on 6 pairs that comparison cannot tell, as the point bar already says."""
    tie = {"accuracy": 0.5, "mean_margin": 0.1, "length_baseline_accuracy": 0.5, "pairs": 6,
           "accuracy_ci_low": 0.5, "accuracy_ci_high": 0.5}
    ok, reason = decide_promotion(tie, None, 0.5, beat_length_baseline=True, bar_on="point", min_n=10)
    assert ok and "not above the longer-reply-wins baseline 0.5000" in reason and "too few to tell" in reason
    # at min_n pairs and more it refuses where its interval cannot reach above the baseline (here a point); an
    # interval bar refuses below min_n anyway
    assert not decide_promotion({**tie, "pairs": 10}, None, 0.5, beat_length_baseline=True, min_n=10)[0]
    wide = {**tie, "pairs": 10, "accuracy_ci_low": 0.2, "accuracy_ci_high": 0.8}
    ok, reason = decide_promotion(wide, None, 0.5, beat_length_baseline=True, min_n=10)
    assert ok and "too few to tell" in reason  # the 0.5 of 10: its interval holds everything
    assert not decide_promotion(tie, None, 0.5, beat_length_baseline=True, bar_on="lower_bound", min_n=10)[0]
