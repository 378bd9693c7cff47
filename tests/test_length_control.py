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


def test_the_calibration_takes_off_what_a_word_bought_the_base_policy():
    from mascot.policy.rewards import LengthCalibrated, LengthCalibration

    rng = np.random.default_rng(0)
    words = rng.integers(5, 30, 64).astype(float)
    quality = rng.normal(0, 0.2, 64)
    cal = LengthCalibration(list(words), list(0.1 * words + quality), degree=1, pay_shorter=True)  # symmetric
    assert abs(cal.figures()["length_calibration_slope_per_word"] - 0.1) < 0.02 and cal.n == 64
    adjusted = np.asarray(cal.adjust(list(0.1 * words + quality), list(words)))
    assert abs(np.corrcoef(adjusted, words)[0, 1]) < 0.05  # no length left in what GRPO is paid
    assert abs(adjusted.mean() - (0.1 * words + quality).mean()) < 1e-9  # the level kept
    # a reply twice the base policy's longest buys nothing more on a line either
    assert abs(cal.adjust([0.1 * 60], [60])[0] - 0.1 * cal.reference) < 0.3  # raw, it would be 4.3 more

    def reward_model(prompts, completions, **_):
        return [0.1 * len(c.split()) for c in completions]
    calibrated = LengthCalibrated(reward_model, cal)
    assert calibrated.__name__ == "reward_model" and calibrated.figures() == cal.figures()
    short, long = calibrated(prompts=["p", "p"], completions=["a b c", " ".join(["w"] * 25)])
    assert abs(short - long) < 0.2  # the same reply quality at two lengths: the same pay, near enough


def test_by_default_a_short_reply_is_not_credited_the_words_it_lacks():
    """The length control's failure (2026-12-07): a reward model that pays ~2.5 a word on the base policy's answers
    but scores a clean one-word string like a four-word reply. Credited the slope for its missing words, the
    one-word string outbid every reply with the planted feature, and GRPO collapsed to it. One-sided, it is paid
    what the reward model pays it."""
    from mascot.policy.rewards import LengthCalibration

    rng = np.random.default_rng(1)
    words = rng.integers(1, 7, 64).astype(float)
    scores = list(2.5 * words + rng.normal(0, 0.5, 64))
    one_sided, symmetric = LengthCalibration(list(words), scores), LengthCalibration(list(words), scores, pay_shorter=True)
    assert one_sided.figures()["length_calibration_pays_shorter"] is False
    mean = one_sided.reference
    hole = 2.5 * 4  # the one-word string, scored as four words are
    feature = 2.5 * round(mean) + 3.0  # a reply of about the mean length with the feature (+3)
    assert symmetric.adjust([hole], [1])[0] > symmetric.adjust([feature], [round(mean)])[0]  # the collapse
    assert one_sided.adjust([hole], [1])[0] < one_sided.adjust([feature], [round(mean)])[0]
    assert one_sided.bias(1) == 0.0 and one_sided.bias(mean - 0.5) == 0.0
    # beyond the mean the fit is taken off as before: six words buy what the mean buys
    assert abs(one_sided.adjust([2.5 * 6], [6])[0] - 2.5 * mean) < 0.5


def test_a_curve_is_held_at_the_ends_of_what_it_was_fitted_on():
    from mascot.policy.rewards import LengthCalibration

    words = [float(w) for w in range(5, 25)]
    cal = LengthCalibration(words, [0.01 * w * w for w in words], degree=2)
    assert cal.bias(100) == cal.bias(24) and cal.bias(1) == cal.bias(5)


def test_a_calibration_without_length_to_fit_says_what_to_change():
    import pytest

    from mascot.policy.rewards import LengthCalibration

    with pytest.raises(ValueError, match="length_calibration.samples or max_completion_length"):
        LengthCalibration([24.0] * 10, [0.5] * 10)


def test_the_directors_length_lever_reads_the_blocks_words_and_measures_when_off(repo_root):
    """The Director's length_calibration is its own: only within_group (a directive's words are not what the group
    reward model reads); the speaker's base_policy_fit is refused there, naming the key."""
    import pytest
    import yaml

    from mascot.config import ConfigError, parse_params

    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    params = parse_params(raw)
    assert params.grpo.length_calibration.enabled is True  # the shipped default
    assert params.train_director.length_calibration.method == "within_group"
    raw["train_director"]["length_calibration"] = {"enabled": True, "method": "base_policy_fit"}
    with pytest.raises(ConfigError, match=r"train_director\.length_calibration\.method"):
        parse_params(raw)


def test_the_directors_reward_takes_the_blocks_length_slope_off_within_each_group(monkeypatch, personas):
    """Two prompts, three directives each; the reward model pays 1 a block word: with the lever the scores of a
    group no longer rise with its blocks' words (the group's mean kept), without it they do, and the slope is
    measured either way."""
    import json

    from mascot.config import DirectorParams
    from mascot.policy import director

    words = {"The Anchor": 2, "The Beacon": 5, "Action Guide": 9}

    def roll_forward(branches, turns, follow, speaker, personas, sampling, first):
        for b, d in zip(branches, first):
            agent = d.split("\n")[0].split(":", 1)[1].strip()
            b.turns = b.turns + [{"role": "agent", "speaker": agent, "text": " ".join(["w"] * words[agent])}]

    class Scorer:
        def score(self, items):
            return [float(sum(len(m["content"].split()) for m in block)) for _, _, block in items]

    monkeypatch.setattr(director, "roll_forward", roll_forward)
    monkeypatch.setattr(director, "LLMDirector", lambda *a, **k: None)
    completions = [f" {a}\nAction: ask\nTone: warm" for a in words] * 2  # after the prompt's "Agent:"
    prompts = ["p1"] * 3 + ["p2"] * 3
    kw = dict(query_id=["q1"] * 3 + ["q2"] * 3, context=[json.dumps([{"role": "user", "content": "hi"}])] * 6,
              turns=["[]"] * 6)
    for enabled in (False, True):
        p = DirectorParams(length_calibration={"enabled": enabled})
        reward = director.make_director_rewards(Scorer(), None, personas, p, None, floor=0.0)[0]
        scores = reward(prompts=prompts, completions=completions, **kw)
        assert reward.length["slopes"] and all(abs(x - 1.0) < 1e-9 for x in reward.length["slopes"])
        if enabled:
            assert max(scores[:3]) - min(scores[:3]) < 1e-9 and abs(sum(scores[:3]) / 3 - 16 / 3) < 1e-9
        else:
            assert scores[:3] == [2.0, 5.0, 9.0]


def test_the_length_controls_judge_pays_the_feature_and_each_word_within_the_scale():
    from mascot.annotate.controls import planted_feature_and_length, planted_pattern
    from mascot.annotate.rubric import load_rubric
    from mascot.config import ScorerParams

    rubric = load_rubric("data/rubrics/persona.yaml")
    score = lambda text: planted_feature_and_length({"text": text}, rubric, "[0-9]")["perceived_empathy"]  # noqa: E731
    assert score("a b") == 1.4 and score("a 2") == 3.4 and score("w " * 40) == 5.0
    assert planted_pattern(ScorerParams(kind="function", target="mascot.annotate.controls:planted_feature_and_length",
                                        kwargs={"pattern": "[0-9]"})) == "[0-9]"
    assert planted_pattern(ScorerParams(kind="function", target="mascot.annotate.controls:seeded_noise")) is None


def test_evaluate_reports_the_planted_features_rate_with_the_length_control():
    from mascot.policy.evaluate import paired_differences

    def reply(policy, q, text):
        return {"candidate_id": f"q{q}|The Anchor|0", "query_id": f"q{q}", "text": text, "rm_score": 0.0,
                "policy": policy, "judge": {"status": "scored", "total_reward": 1.0, "scores": {}}}

    base = [reply("base", q, "one two three") for q in range(12)]
    grpo = [reply("grpo", q, "one 2 three" if q % 3 else "one two three") for q in range(12)]
    d = paired_differences(base, grpo, (), 10, feature="[0-9]")
    assert d["planted_feature"]["base"] == 0.0 and d["planted_feature"]["grpo"] == round(8 / 12, 4)
    assert d["planted_feature"]["ci_low"] > 0 and d["planted_feature"]["equal_length"]["mean"] == round(8 / 12, 4)


def test_within_group_the_reward_model_pays_no_word_and_keeps_the_feature():
    from mascot.policy.rewards import WithinGroupLength

    # a reward model that pays a digit 1.0 and each word 0.5 past 5 words only (flat where the base policy writes,
    # steep beyond it: the shape a fit on base samples misses); two prompts, 8 completions each
    def reward_model(prompts, completions, **_):
        return [float(any(ch.isdigit() for ch in c)) + 0.5 * max(0, len(c.split()) - 5) for c in completions]
    texts = ["a", "a b 7", "a b c d e f g", "a b c d e f g h 9", "x y", "x y z 1 w v u t s", "q", "7"]
    prompts = ["p1"] * 8 + [[{"role": "user", "content": "p2"}]] * 8
    completions = texts + texts[::-1]
    adjusted = WithinGroupLength(reward_model)
    assert adjusted.__name__ == "reward_model"
    out = np.asarray(adjusted(prompts=prompts, completions=completions))
    raw = np.asarray(reward_model(prompts, completions))
    words = np.asarray([len(c.split()) for c in completions], dtype=float)
    digit = np.asarray([any(ch.isdigit() for ch in c) for c in completions], dtype=float)
    for g in (slice(0, 8), slice(8, 16)):
        assert abs(np.corrcoef(out[g], words[g])[0, 1]) < 1e-6  # no word pays within a group
        assert abs(out[g].mean() - raw[g].mean()) < 1e-9  # the group's level kept
        # what is left is the feature: a digit reply above a plain one of its group at every length, on average
        assert out[g][digit[g] == 1].mean() > out[g][digit[g] == 0].mean()
    figures = adjusted.figures()
    assert figures["length_within_group_groups"] == 2 and figures["length_within_group_slope_per_word"] > 0


def test_within_group_leaves_a_group_of_one_length_alone():
    from mascot.policy.rewards import within_group_length_removed

    out, slopes = within_group_length_removed([1.0, 2.0, 3.0, 4.0], [3, 3, 3, 3], [[0, 1, 2, 3]])
    assert out == [1.0, 2.0, 3.0, 4.0] and slopes == []


def test_the_calibration_never_pays_for_words_and_leaves_noise_alone():
    """The second evidence run's fit: -0.023 a word at R^2 0.065 on 32 base answers; subtracted, it paid GRPO for
    every word. A slope that is not a rise (noise, or length costing the base policy) leaves the score as it is."""
    from mascot.policy.rewards import LengthCalibration

    rng = np.random.default_rng(1)
    words = rng.integers(5, 57, 32).astype(float)
    noise = LengthCalibration(list(words), list(rng.normal(-7.0, 1.0, 32)))
    falling = LengthCalibration(list(words), list(-0.05 * words + rng.normal(0, 0.2, 32)))
    for cal in (noise, falling):
        assert not cal.active and cal.adjust([1.0, 1.0], [5, 80]) == [1.0, 1.0]
        assert cal.figures()["length_calibration_active"] is False
    rising = LengthCalibration(list(words), list(0.05 * words + rng.normal(0, 0.2, 32)))
    assert rising.active and rising.figures()["length_calibration_trend_p"] < 0.05
    assert rising.adjust([1.0], [80])[0] < 1.0 - 0.04 * (80 - rising.reference)


def test_an_accuracy_at_equal_length_stays_an_accuracy():
    """A win regressed on a few pairs' length differences can put the intercept and its bootstrap replicates
    past 1 (the CPU default's 10 eval pairs read 0.70 [0.45, 2.0]); an accuracy is held to [0, 1] and says so."""
    from mascot.stats import describe_equal_length, equal_length_accuracy, equal_length_difference, equal_length_figures

    wins, gaps = [1, 1, 1, 1, 0, 0, 1, 0], [1, 1, 2, 3, 8, 9, 2, 7]
    free = equal_length_difference(wins, gaps, [f"c{k}" for k in range(8)], null=0.5)
    held = equal_length_difference(wins, gaps, [f"c{k}" for k in range(8)], null=0.5, bounds=(0.0, 1.0))
    assert free["mean"] > 1 and free["ci_high"] > 1
    assert held["mean"] == held["ci_high"] == 1.0 and held["held_to_bounds"] is True
    assert 0 <= held["ci_low"] <= held["mean"] <= 1 and held["slope"] == free["slope"]
    assert "held to it" in describe_equal_length(held)
    # the stages' helper is the same figure, and the flat keys (metrics files, MLflow) carry the flag
    helper = equal_length_accuracy(wins, gaps, [f"c{k}" for k in range(8)], [(g, 0) for g in gaps])
    assert {k: v for k, v in helper.items() if k != "matched"} == held
    assert equal_length_figures(held, "accuracy_equal_length")["accuracy_equal_length_held_to_bounds"] is True
    assert "x_held_to_bounds" not in equal_length_figures(free, "x")
    inside = equal_length_difference([1, 0, 1, 0, 1, 1], [1, -1, 2, -2, 0, 1], bounds=(0.0, 1.0))
    assert inside["held_to_bounds"] is False
