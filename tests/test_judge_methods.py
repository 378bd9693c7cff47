"""Judge methods that might beat length (docs/judge.md): pairwise judging in both orders, the dimensions weighted
as people weigh them (fitted on one half of the conversations, measured on the other), the length-neutral rubric."""
import random

import pytest

from mascot.annotate.pairwise import both_orders, order_verdict, pairwise_prompt, verdicts
from mascot.annotate.rubric import load_rubric
from mascot.annotate.fitted_aggregation import conversation_halves, cross_fitted_scores, fit_weights

HI = {"context": [{"role": "user", "content": "I lost my job"}],
      "reply": "That is a hard blow. How are you holding up?"}
LO = {"context": [{"role": "user", "content": "thanks"}], "reply": "ok"}


def test_a_pairwise_prompt_shows_each_reply_after_its_own_context_and_ends_where_the_letter_goes():
    chat = pairwise_prompt(HI, LO, "chat")
    assert chat[-1]["role"] == "assistant" and chat[-1]["content"].endswith(": ")
    body = chat[1]["content"]
    assert body.index("I lost my job") < body.index("Reply A: That is a hard blow") < body.index("thanks") \
        < body.index("Reply B: ok")
    plain = pairwise_prompt(HI, LO, "plain", length_neutral=True)
    assert plain.endswith("The more helpful reply: ") and "Length is not quality" in plain
    assert "Length is not quality" not in pairwise_prompt(HI, LO, "plain")
    prompts = both_orders([(HI, LO)], "chat")
    assert "Reply A: That is" in prompts[0][1]["content"] and "Reply A: ok" in prompts[1][1]["content"]


def test_an_order_disagreement_is_a_tie_so_a_judge_that_always_says_A_scores_one_half():
    assert order_verdict(0.9, 0.2) == 1.0  # preferred as A, and as B (P(A) low)
    assert order_verdict(0.3, 0.8) == 0.0
    assert order_verdict(0.9, 0.9) == 0.5 and order_verdict(0.1, 0.1) == 0.5
    wins, bias = verdicts([0.95] * 20)  # a judge that picks whatever comes first
    assert set(wins) == {0.5} and bias == {"ties": 10, "picked_first_position": 1.0}
    with pytest.raises(ValueError, match="two per pair"):
        verdicts([0.5])


def _items(n_conv: int, seed: int = 0):
    """Turns whose rating follows dimension `a` only; `b` is noise and `len` follows words."""
    rng, items, dims = random.Random(seed), [], {"a": {}, "b": {}}
    for c in range(n_conv):
        for k, rating in enumerate([1, 3, 5]):
            iid = f"c{c}-{k}"
            items.append({"item_id": iid, "conversation_id": f"c{c}", "rating": rating, "words": 10})
            dims["a"][iid] = rating + rng.gauss(0, 0.3)
            dims["b"][iid] = rng.uniform(1, 5)
    return items, dims


def test_fitted_weights_find_the_dimension_people_follow_and_every_item_is_scored_by_the_other_half():
    items, dims = _items(30)
    weights = fit_weights(items, dims, 2)
    assert weights["a"] > 1.0 and abs(weights["b"]) < weights["a"] / 3
    scores, halves = cross_fitted_scores(items, dims, 2)
    assert set(scores) == {i["item_id"] for i in items} and len(halves) == 2
    first, second = conversation_halves(items)
    assert not first & second and first | second == {i["conversation_id"] for i in items}
    # a score comes from the weights of the half its conversation is not in
    item = next(i for i in items if i["conversation_id"] in second)
    assert scores[item["item_id"]] == pytest.approx(sum(halves[0][d] * dims[d][item["item_id"]] for d in dims))
    with pytest.raises(ValueError, match="too few"):
        fit_weights(items[:3], dims, 5)


def test_the_length_neutral_rubric_is_the_persona_rubric_with_the_length_line_and_both_kinds_of_anchor():
    base, neutral = load_rubric("data/rubrics/persona.yaml"), load_rubric("data/rubrics/persona-length-neutral.yaml")
    assert neutral.dimensions == base.dimensions and "Length is not quality" in neutral.header
    words = [len(item.split("Reply:")[1].split()) for item, _ in neutral.anchors]
    totals = [sum(s.values()) for _, s in neutral.anchors]
    longest_poor = max(w for w, t in zip(words, totals) if t <= 10)
    shortest_excellent = min(w for w, t in zip(words, totals) if t >= 20)
    assert shortest_excellent < longest_poor  # a short excellent reply, a long poor one
