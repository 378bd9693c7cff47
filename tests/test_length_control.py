"""Differences at equal length (`stats.equal_length_difference`) and where the pipeline reports them."""
import numpy as np

from mascot.stats import describe_equal_length, equal_length_difference


def _planted(n: int, at_equal_length: float, per_word: float, seed: int = 0, spread: float = 8.0, shift: float = 0.0):
    rng = np.random.default_rng(seed)
    dl = rng.normal(shift, spread, n)
    return list(at_equal_length + per_word * dl + rng.normal(0, 0.05, n)), list(dl)


def test_a_gain_that_is_all_length_reads_zero_at_equal_length_and_its_slope_is_the_price_of_a_word():
    diffs, dl = _planted(60, 0.0, 0.03, shift=2.0)
    fig = equal_length_difference(diffs, dl, clusters=[f"c{k // 3}" for k in range(60)])
    assert np.mean(diffs) > 0.04  # the raw difference says "better"
    assert fig["ci_low"] < 0 < fig["ci_high"] and abs(fig["mean"]) < 0.03
    assert abs(fig["slope"] - 0.03) < 0.005
    assert fig["n"] == 60 and fig["clusters"] == 20 and not fig["extrapolated"] and fig["unit"] == "words"


def test_a_real_gain_survives_the_length_control():
    diffs, dl = _planted(60, 0.4, 0.03)
    fig = equal_length_difference(diffs, dl)
    assert fig["ci_low"] > 0.3 and abs(fig["mean"] - 0.4) < 0.05


def test_no_overlap_with_equal_length_is_called_an_extrapolation():
    diffs, dl = _planted(40, 0.0, 0.03, spread=2.0, shift=12.0)  # every trained reply much longer
    fig = equal_length_difference(diffs, dl)
    assert fig["overlap"] == 0.0 and fig["extrapolated"] is True
    assert "EXTRAPOLATED" in describe_equal_length(fig)


def test_the_interval_resamples_conversations_not_items():
    # two conversations' worth of clones: as items they look like 40 independent draws, as clusters they are 4
    diffs, dl = _planted(4, 0.2, 0.0, seed=3)
    many = equal_length_difference(diffs * 10, dl * 10)
    few = equal_length_difference(diffs * 10, dl * 10, clusters=[f"c{k % 4}" for k in range(40)])
    assert few["clusters"] == 4 and (few["ci_high"] - few["ci_low"]) > (many["ci_high"] - many["ci_low"])


def test_all_at_equal_length_is_the_plain_mean_and_one_shared_length_gap_reads_nothing():
    same = equal_length_difference([0.1, 0.3, 0.2, 0.4], [0, 0, 0, 0])
    assert same["mean"] == 0.25 and same["extrapolated"] is False
    gap = equal_length_difference([0.1, 0.3, 0.2, 0.4], [5, 5, 5, 5])
    assert gap["mean"] is None and gap["extrapolated"] is True
    assert "no line to read" in describe_equal_length(gap)


def test_the_length_matched_subset_keeps_pairs_within_the_stated_share():
    lengths = [(10, 11), (10, 20), (20, 19), (5, 30)]
    fig = equal_length_difference([1.0, 5.0, 2.0, 9.0], [b - a for a, b in lengths], lengths=lengths, min_n=2)
    assert fig["matched"]["n"] == 2 and fig["matched"]["mean"] == 1.5 and fig["matched"]["within"] == 0.2


def test_too_few_items_says_so():
    fig = equal_length_difference([0.1, 0.2, 0.3], [1, 2, 3], min_n=10)
    assert fig["too_few_to_tell"] and "too few to tell" in describe_equal_length(fig, 10)
