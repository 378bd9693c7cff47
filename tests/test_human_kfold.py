"""The k-fold figure of reward models against people (benchmarks/human_kfold.py) and the
human pairs' weight (pairs.human_weight): no fold's model sees its conversations, the weight is a repetition."""
import pytest

from benchmarks.human_kfold import (conversation_folds, fold_scores_in, fold_training_pairs, parse_condition,
                                    standardised, worst_case)


def _pair(conv: str, source: str, k: int = 0) -> dict:
    return {"pair_id": f"{conv}-{source}-{k}", "conversation_id": conv, "pair_source": source, "split": "eval"}


def test_conditions_are_parsed_and_a_bad_one_says_what_is_allowed():
    assert parse_condition("judge") == ("judge", 1) and parse_condition("both:4") == ("both", 4)
    for bad in ("both", "both:0", "both:x", "human:2", "odin"):
        with pytest.raises(ValueError, match="condition"):
            parse_condition(bad)


def test_folds_deal_every_conversation_once_evenly_and_the_same_way_for_a_seed():
    convs = [f"c{k}" for k in range(53)] * 2  # repeats: one fold per conversation whatever its pairs
    folds = conversation_folds(convs, 5, seed=0)
    assert set(folds) == set(convs) and set(folds.values()) == set(range(5))
    sizes = [sum(f == k for f in folds.values()) for k in range(5)]
    assert max(sizes) - min(sizes) <= 1
    assert folds == conversation_folds(reversed(convs), 5, seed=0) and folds != conversation_folds(convs, 5, seed=1)
    with pytest.raises(ValueError, match="k 1"):
        conversation_folds(convs, 1)


def test_a_fold_trains_on_no_pair_of_its_own_conversations_and_weighs_the_human_pairs():
    judge = [_pair(c, "judge", k) for c in ("a", "b", "c") for k in range(2)]
    human = [_pair(c, "human") for c in ("a", "b", "c", "d")]
    held = {"a", "d"}
    for cond in ("judge", "human", "both:1", "both:3"):
        pairs = fold_training_pairs(cond, judge, human, held)
        assert pairs and not {p["conversation_id"] for p in pairs} & held
        assert all(p["split"] == "train" for p in pairs)
    assert {p["pair_source"] for p in fold_training_pairs("judge", judge, human, held)} == {"judge"}
    assert {p["pair_source"] for p in fold_training_pairs("human", judge, human, held)} == {"human"}
    both = fold_training_pairs("both:3", judge, human, held)
    assert len(both) == 4 + 2 and all(p.get("weight") == 3 for p in both if p["pair_source"] == "human")
    assert all("weight" not in p for p in fold_training_pairs("both:1", judge, human, held))
    with pytest.raises(ValueError, match="worst"):
        fold_training_pairs("worst", judge, human, held)


def test_the_worst_case_is_the_lower_of_two_standardised_scores_not_of_two_scales():
    a = {"x": 100.0, "y": 101.0, "z": 102.0}  # a model with a high scale
    b = {"x": 2.0, "y": 1.0, "z": 0.0}
    assert standardised({"x": 3.0, "y": 3.0}) == {"x": 0.0, "y": 0.0}
    worst = worst_case(a, b)
    assert worst["y"] == pytest.approx(0.0) and worst["x"] == worst["z"] == pytest.approx(-1.224744871391589)
    assert set(worst_case(a, {"x": 1.0})) == {"x"}


def test_the_train_split_repeats_a_pair_by_its_weight():
    from mascot.reward.train import weighted_train_pairs

    pairs = [{"pair_id": "j", "split": "train"}, {"pair_id": "h", "split": "train", "weight": 3},
             {"pair_id": "e", "split": "eval", "weight": 2}]
    assert [p["pair_id"] for p in weighted_train_pairs(pairs)] == ["j", "h", "h", "h"]


def test_the_train_pair_count_is_of_distinct_pairs_and_the_repeated_rows_are_said_apart():
    from mascot.reward.train import train_pair_counts, weighted_train_pairs

    pairs = [{"pair_id": "j", "split": "train"}, {"pair_id": "h", "split": "train", "weight": 3},
             {"pair_id": "e", "split": "eval"}]
    assert train_pair_counts(pairs, len(weighted_train_pairs(pairs))) == {"train_pairs": 2, "train_rows": 4}
    # unweighted (the default): the one key, as before
    assert train_pair_counts(pairs[:1] + pairs[2:], 1) == {"train_pairs": 1}


def test_human_pairs_carry_the_weight_and_a_weight_without_human_pairs_is_refused(personas):
    from pydantic import ValidationError

    from mascot.config import PairsParams
    from mascot.pairs import human_pair_rows

    items = [{"item_id": f"c-{k}", "conversation_id": "c", "rating": r, "words": 5, "reply": "r", "context": [],
              "persona": "The Anchor"} for k, r in enumerate([1, 5])]
    assert "weight" not in human_pair_rows(items, personas, 2)[0]
    assert human_pair_rows(items, personas, 2, weight=4)[0]["weight"] == 4
    with pytest.raises(ValidationError, match="pairs.human false"):
        PairsParams(human=False, human_weight=2)
    assert PairsParams(human=True, human_weight=2).human_weight == 2


def test_the_pooled_row_reads_every_pair_once_with_its_equal_length_figure():
    from benchmarks.human_kfold import describe, pooled_row

    items = [{"item_id": f"c{c}-{k}", "conversation_id": f"c{c}", "rating": r, "words": w, "reply": "r",
              "context": [], "persona": "p"} for c in range(12) for k, (r, w) in enumerate([(1, 20), (5, 8), (3, 12)])]
    by_rating = {i["item_id"]: float(i["rating"]) for i in items}
    row = pooled_row("human", items, by_rating, 2, 10)
    assert row["pairs"]["n"] == 36 and row["pairs"]["mean"] == 1.0  # (5,1), (3,1), (5,3) in each conversation
    assert row["length_baseline"]["mean"] == 0.0 and row["controlled"]["n"] == 36
    assert row["equal_length"]["n"] == 36 and "at equal length" in describe(row)


def test_another_runs_condition_is_read_only_when_all_its_folds_are_there(tmp_path):
    """--against pairs a condition with the same condition of another run (another training) on the same pairs: a
    run with a fold missing has no pooled scores to pair with, rather than a part of them."""
    import json

    for fold, scores in enumerate(({"a": 0.1}, {"b": 0.2})):
        (tmp_path / f"fold{fold}-both_1.json").write_text(json.dumps({"train_pairs": 3, "scores": scores}))
    assert fold_scores_in(tmp_path, "both:1", 2) == {"a": 0.1, "b": 0.2}
    assert fold_scores_in(tmp_path, "both:1", 3) is None
    assert fold_scores_in(tmp_path, "judge", 2) is None
