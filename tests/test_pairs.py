import pytest

from mascot.config import PairsParams
from mascot.pairs import build_pairs, split_of


def make(query, persona, totals, texts=None):
    cands, scores = [], []
    for i, total in enumerate(totals):
        cid = f"{query}|{persona}|{i}"
        cands.append({"candidate_id": cid, "query_id": query, "persona": persona, "candidate_index": i,
                      "text": (texts or [f"reply {i}"] * len(totals))[i] if texts else f"reply {i}"})
        if total is None:
            scores.append({"candidate_id": cid, "query_id": query, "persona": persona, "status": "unscored",
                           "scores": None, "total_reward": None})
        else:
            scores.append({"candidate_id": cid, "query_id": query, "persona": persona, "status": "scored",
                           "scores": {}, "total_reward": total})
    return cands, scores


@pytest.fixture
def queries():
    return {q: {"query_id": q, "context": [{"role": "user", "content": f"help {q}"}]} for q in ("q1", "q2", "q3")}


def test_pair_rule_on_hand_made_scores(personas, queries):
    cands, scores = make("q1", "The Anchor", [4.0, 3.5, 3.2, None, 1.0])
    pairs = build_pairs(cands, scores, queries, personas, PairsParams(score_margin=0.5))
    got = {(p["chosen_id"].split("|")[-1], p["rejected_id"].split("|")[-1]) for p in pairs}
    # 4.0-3.5 = 0.5 counts (exactly the margin); 3.5-3.2 does not; the unscored one never pairs
    assert got == {("0", "1"), ("0", "2"), ("0", "4"), ("1", "4"), ("2", "4")}
    for p in pairs:
        assert p["score_chosen"] - p["score_rejected"] >= 0.5 - 1e-9
        assert p["margin"] == pytest.approx(p["score_chosen"] - p["score_rejected"])
        assert p["prompt"][0]["role"] == "system" and "The Anchor" in p["prompt"][0]["content"]
        assert p["prompt"][-1] == {"role": "user", "content": "help q1"}
        assert p["chosen"][0]["role"] == "assistant"


def test_ties_and_identical_texts_never_pair(personas, queries):
    cands, scores = make("q1", "The Anchor", [3.0, 3.0, 5.0], texts=["same", "x", "same"])
    pairs = build_pairs(cands, scores, queries, personas, PairsParams(score_margin=0.0))
    assert {(p["chosen_id"][-1], p["rejected_id"][-1]) for p in pairs} == {("2", "1")}
    assert all(p["score_chosen"] > p["score_rejected"] for p in pairs)


def test_out_of_range_total_is_refused(personas, queries):
    cands, scores = make("q1", "The Anchor", [6.0, 3.0])
    with pytest.raises(ValueError, match="outside"):
        build_pairs(cands, scores, queries, personas, PairsParams())


def test_split_by_query_is_deterministic_and_disjoint(personas, queries):
    c1, s1 = make("q1", "The Anchor", [5.0, 1.0])
    c2, s2 = make("q2", "The Beacon", [5.0, 1.0])
    c3, s3 = make("q3", "The Beacon", [5.0, 1.0, 3.0])
    args = (c1 + c2 + c3, s1 + s2 + s3, queries, personas, PairsParams(eval_fraction=0.1))
    pairs = build_pairs(*args)
    assert pairs == build_pairs(*args)
    by_query = {}
    for p in pairs:
        by_query.setdefault(p["query_id"], set()).add(p["split"])
    assert all(len(s) == 1 for s in by_query.values())
    assert {"train", "eval"} == {s for v in by_query.values() for s in v}  # at least one eval query
    ids = [f"q{i}" for i in range(2000)]
    frac = sum(v == "eval" for v in split_of(ids, 0.1, 0).values()) / len(ids)
    assert 0.08 < frac < 0.12
