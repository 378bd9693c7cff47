"""The human reference set: ESConv's seeker ratings become items and within-conversation pairs, and a scorer's
agreement with them is measured with intervals over conversations (mascot/data/human_ratings.py)."""
import json

import pytest

from mascot.annotate.judge_check import choose_style, survey_agreement
from mascot.data import human_ratings
from mascot.data.dialogue import Dialogue, Turn
from mascot.data.sources.esconv import load_esconv
from mascot.data.sources.jsonl import load_jsonl_dialogues
from mascot.io import BadRows, InputError
from mascot.stats import cluster_mean_with_ci, mean_with_ci

WORDS = lambda text: len(text.split())  # noqa: E731


def _conv(turns):
    return {"emotion_type": "sadness", "survey_score": {"seeker": {"empathy": "4", "relevance": "2"}},
            "dialog": [{"speaker": s, "annotation": ({"feedback": f} if f else {}), "content": c} for s, c, f in turns]}


def test_a_rating_rates_the_supporters_turns_since_the_seeker_last_spoke(tmp_path):
    path = tmp_path / "FailedESConv.json"
    path.write_text(json.dumps([_conv([
        ("speaker", "hello", None), ("listener", "hi, how are you?", None),
        ("speaker", "bad day", "2"),  # rates "hi, how are you?"
        ("listener", "I am sorry.", None), ("listener", "Do you want to talk about it?", None),
        ("speaker", "yes", "5"), ("speaker", "my boss yelled", None),  # rates both listener turns, joined
        ("listener", "That sounds hard.", None), ("speaker", "it was", "1")])]))
    dialogues = load_esconv(path, BadRows(skip=False))
    assert dialogues[0].metadata["survey_score"] == {"empathy": 4.0, "relevance": 2.0}
    items = human_ratings.build_human_set(dialogues, 96, WORDS, "The Anchor")
    assert [(i["reply"], i["rating"]) for i in items] == [
        ("hi, how are you?", 2), ("I am sorry. Do you want to talk about it?", 5), ("That sounds hard.", 1)]
    assert items[1]["context"][-1] == {"role": "user", "content": "bad day"}
    assert items[2]["context"][-1]["content"] == "yes my boss yelled"
    assert {i["conversation_id"] for i in items} == {"FailedESConv-0"}
    pairs = human_ratings.human_pairs(items, min_gap=2)
    assert [(hi["rating"], lo["rating"]) for hi, lo in pairs] == [(5, 2), (5, 1)]  # 2 vs 1 is 1 apart


def test_a_bad_rating_names_the_file_conversation_and_turn(tmp_path):
    path = tmp_path / "esconv.json"
    path.write_text(json.dumps([_conv([("seeker", "hi", None), ("supporter", "hello", None), ("seeker", "x", "6")])]))
    with pytest.raises(InputError, match=r"esconv.json conversation 0 dialog\[2\]: annotation.feedback '6'"):
        load_esconv(path, BadRows(skip=False))


def test_a_jsonl_source_carries_ratings_on_user_messages(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "c1", "context": [
        {"role": "user", "content": "I failed"}, {"role": "assistant", "content": "Oh no."},
        {"role": "user", "content": "yes", "rating": 4}]}) + "\n"
        + json.dumps({"id": "c2", "context": [{"role": "user", "content": "a", "rating": 9}]}) + "\n")
    bad = BadRows(skip=True)
    dialogues = load_jsonl_dialogues(path, bad)
    assert [(i["reply"], i["rating"]) for i in human_ratings.build_human_set(dialogues, 96, WORDS, "x")] == [("Oh no.", 4)]
    assert "d.jsonl:2 context[0]: rating 9 is not a whole number 1-5" in bad.messages[0]


def _items(ratings_by_conv, words=None):
    out = []
    for conv, ratings in ratings_by_conv.items():
        for k, r in enumerate(ratings):
            out.append({"item_id": f"{conv}-{k}", "conversation_id": conv, "source": "esconv", "rating": r,
                        "words": (words or {}).get(f"{conv}-{k}", 10), "reply": "r", "context": [], "persona": "p"})
    return out


def test_agreement_is_one_for_the_ratings_themselves_and_zero_for_their_negation():
    items = _items({"a": [1, 3, 5], "b": [5, 2], "c": [4, 1, 2]})
    ratings = {i["item_id"]: float(i["rating"]) for i in items}
    assert human_ratings.agreement(items, ratings, 2)["pairs"]["mean"] == 1.0
    flipped = human_ratings.agreement(items, {k: -v for k, v in ratings.items()}, 2)
    assert flipped["pairs"]["mean"] == 0.0
    assert flipped["pairs"]["n"] == 6 and flipped["pairs"]["clusters"] == 3
    assert flipped["spearman"]["mean"] == -1.0


def test_length_controlled_pairs_are_those_whose_preferred_turn_is_not_longer():
    items = _items({"a": [5, 1], "b": [5, 1]}, words={"a-0": 30, "a-1": 5, "b-0": 5, "b-1": 30})
    fig = human_ratings.agreement(items, {i["item_id"]: float(i["words"]) for i in items}, 2)
    assert fig["length_baseline"]["mean"] == 0.5
    assert fig["controlled"]["n"] == 1 and fig["length_baseline_controlled"]["mean"] == 0.0


def test_at_equal_length_a_length_rule_is_a_coin_and_a_scorer_of_the_ratings_is_still_right():
    # 12 conversations; the preferred turn is longer in most, shorter in some: every pair, not only the not-longer
    ratings, words = {}, {}
    for c in range(12):
        ratings[f"c{c}"] = [5, 1]
        words[f"c{c}-0"], words[f"c{c}-1"] = 10 + (c % 4) * 6, 16 + (c % 3) * 2
    items = _items(ratings, words)
    by_length = human_ratings.agreement(items, {i["item_id"]: float(i["words"]) for i in items}, 2)
    by_rating = human_ratings.agreement(items, {i["item_id"]: float(i["rating"]) for i in items}, 2)
    assert by_length["pairs"]["mean"] != 0.5 and abs(by_length["equal_length"]["mean"] - 0.5) < 0.15
    assert by_rating["equal_length"]["mean"] == 1.0 and by_rating["equal_length"]["n"] == 12
    assert by_rating["equal_length"]["clusters"] == 12 and not by_rating["equal_length"]["extrapolated"]
    assert "at equal length" in human_ratings.describe_agreement(by_rating)


def test_side_by_side_wins_get_the_rubric_scores_figures():
    """A pairwise judge's verdicts (wins, not scores) are read by the same rule as a scorer's: the same pairs,
    not-longer subset and equal-length figure as the scores that give those wins."""
    ratings, words = {}, {}
    for c in range(12):
        ratings[f"c{c}"] = [5, 1]
        words[f"c{c}-0"], words[f"c{c}-1"] = 10 + (c % 4) * 6, 16 + (c % 3) * 2
    items = _items(ratings, words)
    score = {i["item_id"]: float(i["words"]) for i in items}  # the longer turn wins
    pairs = human_ratings.human_pairs(items, 2)
    wins = [1.0 if score[hi["item_id"]] > score[lo["item_id"]] else 0.0 if score[hi["item_id"]] < score[lo["item_id"]]
            else 0.5 for hi, lo in pairs]
    from_wins, from_scores = human_ratings.wins_agreement(pairs, wins), human_ratings.agreement(items, score, 2)
    for key in ("pairs", "controlled", "equal_length"):
        assert from_wins[key] == from_scores[key]
    assert from_wins["controlled"]["n"] == sum(hi["words"] <= lo["words"] for hi, lo in pairs) < len(pairs)


def test_two_scorers_are_compared_pair_by_pair_on_the_pairs_both_scored():
    ratings = {f"c{c}": [5, 1] for c in range(12)}
    items = _items(ratings)
    right = {i["item_id"]: float(i["rating"]) for i in items}
    coin = {i["item_id"]: 3.0 for i in items}  # every pair a tie: 0.5
    fig = human_ratings.paired_difference(items, coin, right, 2)
    assert fig["raw"]["mean"] == 0.5 and fig["raw"]["n"] == 12 and fig["raw"]["ci_low"] == 0.5
    assert fig["equal_length"]["n"] == 12
    del right["c0-0"]  # a turn one scorer left unscored takes its pair out of both
    assert human_ratings.paired_difference(items, coin, right, 2)["raw"]["n"] == 11


def test_the_interval_resamples_conversations_not_pairs():
    # ten conversations, each all right or all wrong: pairs within one are not independent evidence
    values, clusters = [], []
    for c in range(10):
        values += [float(c % 2)] * 20
        clusters += [f"c{c}"] * 20
    by_pair, by_conv = mean_with_ci(values), cluster_mean_with_ci(values, clusters)
    assert by_conv["clusters"] == 10 and by_conv["n"] == 200
    assert (by_conv["ci_high"] - by_conv["ci_low"]) > 3 * (by_pair["ci_high"] - by_pair["ci_low"])


def test_selection_takes_whole_paired_conversations_held_out_first():
    items = _items({"a": [1, 5], "b": [3, 3], "c": [1, 4, 5], "d": [2, 5]})
    chosen = human_ratings.select_items(items, 2, limit=5, first={"d"})
    assert [i["conversation_id"] for i in chosen] == ["d", "d", "a", "a"]  # b has no pair; c would pass 5
    assert len(human_ratings.select_items(items, 2, None)) == 7


def test_counts_by_source_give_the_length_baseline():
    items = _items({"a": [5, 1]}, words={"a-0": 30, "a-1": 5}) + [
        {**i, "corpus": "other"} for i in _items({"z": [1, 5]}, words={"z-0": 30, "z-1": 5})]
    c = human_ratings.counts(items, 2)
    assert c["items"] == 4 and c["pairs"] == 2
    assert c["by_source"]["esconv"]["length_baseline"]["mean"] == 1.0
    assert c["by_source"]["other"]["length_baseline"]["mean"] == 0.0


def test_the_format_that_agrees_with_people_is_chosen_over_the_synthetic_contrasts():
    def fig(synthetic, human):
        return {"ref_gt_off_topic": {"mean": synthetic}, "ref_gt_cold": {"mean": synthetic},
                **({"human": {"pairs": {"mean": human}}} if human is not None else {})}
    assert choose_style({"plain": fig(0.9, 0.45), "chat": fig(0.6, 0.6)}) == "chat"
    assert choose_style({"plain": fig(0.9, None), "chat": fig(0.6, None)}) == "plain"


def test_stage_two_judge_is_set_against_the_seekers_survey():
    items = [{"item_id": f"b{k}", "conversation_id": f"c{k}", "survey": {"empathy": float(k % 5 + 1)}}
             for k in range(12)]
    variants = [{"query_id": i["item_id"], "reply_type": t} for i in items for t in ("reference", "echo")]
    scores = [{"status": "scored", "total_reward": i["survey"]["empathy"] if t == "reference" else 1.0}
              for i in items for t in ("reference", "echo")]
    fig = survey_agreement(items, variants, scores)
    assert fig["empathy"]["spearman"]["mean"] == 1.0 and fig["empathy"]["spearman"]["n"] == 12
    # the pair figure: every two conversations 2 or more apart in empathy, the better-rated scored higher
    assert fig["empathy"]["pairs"]["mean"] == 1.0 and fig["empathy"]["pairs"]["n"] > 0
    assert fig["relevance"]["spearman"]["n"] == 0 and fig["relevance"]["spearman"]["mean"] is None


def test_a_dialogue_without_ratings_gives_no_items():
    d = Dialogue("x", "esconv", [Turn("user", "hi"), Turn("assistant", "hello"), Turn("user", "ok")])
    assert human_ratings.build_human_set([d], 96, WORDS, "p") == []


def test_promotion_carries_the_human_figure_and_a_bar_can_require_it():
    from mascot.promote import human_gate

    human = {"human_pairs": 0.62, "human_pairs_ci_low": 0.51, "human_pairs_ci_high": 0.72, "human_pairs_n": 60,
             "human_pairs_conversations": 14, "human_length_baseline": 0.58, "human_pairs_controlled": 0.55,
             "human_pairs_controlled_n": 25}
    ok, reason = human_gate(True, "eval accuracy 0.8", human, None, "point")
    assert ok and "human pairs 0.62 [0.51, 0.72] on 60 untrained pairs of 14 conversations" in reason
    ok, reason = human_gate(True, "eval accuracy 0.8", human, 0.55, "lower_bound")
    assert not ok and "its lower bound 0.51 is below promote.min_human_agreement 0.55" in reason
    assert human_gate(True, "r", human, 0.55, "point")[0]
    assert not human_gate(True, "r", {}, 0.5, "point")[0]
    assert human_gate(True, "r", {}, None, "point") == (True, "r")
    assert human_gate(False, "below the bar", human, 0.5, "point")[0] is False


def test_human_pairs_come_from_train_split_conversations_only_and_read_each_side_in_its_context(personas):
    from mascot.config import HeldOutParams, PairsParams
    from mascot.pairs import build_human_pairs
    from mascot.splits import is_held_out, split_of

    items = _items({f"c{k}": [1, 5, 3] for k in range(40)})
    for i in items:
        i["persona"], i["context"] = "The Anchor", [{"role": "user", "content": f"before {i['item_id']}"}]
    heldout, params = HeldOutParams(fraction=0.25, seed=0), PairsParams(eval_fraction=0.25, split_seed=0)
    pairs = build_human_pairs(items, personas, 2, params, heldout)
    convs = {p["conversation_id"] for p in pairs}
    assert convs and all(p["split"] == "train" and p["pair_source"] == "human" for p in pairs)
    rows = [{"query_id": c, "conversation_id": c} for c in {i["conversation_id"] for i in items}]
    split = split_of(rows, 0.25, 0)
    assert all(not is_held_out(r, heldout) and split[r["query_id"]] == "train" for r in rows if r["query_id"] in convs)
    assert len(convs) < 40 and len(pairs) == 3 * len(convs)  # (5,1), (3,1) and (5,3)
    p = pairs[0]
    assert p["prompt"][-1]["content"] == f"before {p['chosen_id']}"
    assert p["rejected_prompt"][-1]["content"] == f"before {p['rejected_id']}"
