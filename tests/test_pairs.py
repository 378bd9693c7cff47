import pytest

from mascot.config import PairsParams
from mascot.pairs import build_pairs
from mascot.splits import split_of


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
    ids = [{"query_id": f"q{i}"} for i in range(2000)]
    frac = sum(v == "eval" for v in split_of(ids, 0.1, 0).values()) / len(ids)
    assert 0.08 < frac < 0.12


@pytest.mark.parametrize("seed", range(12))
def test_sibling_queries_of_one_conversation_share_a_split_for_every_seed(personas, seed):
    """Two queries cut from one ESConv conversation (or two questions on one QMSum meeting) share their turns:
    held out, train or eval, they always go together, whatever the seed."""
    from mascot.config import HeldOutParams
    from mascot.splits import conversation_of, is_held_out

    heldout = HeldOutParams(fraction=0.3, seed=seed)
    ids = [f"conv{c}@{turn}" for c in range(40) for turn in (3, 9, 15)]
    cands, scores, queries = _scored(ids)
    for q in queries.values():
        q.update(dialogue_id=q["query_id"].split("@")[0], conversation_id=q["query_id"].split("@")[0])
    role = {}
    for q in queries.values():
        role.setdefault(conversation_of(q), set()).add("heldout" if is_held_out(q, heldout) else "rest")
    pairs = build_pairs(cands, scores, queries, personas,
                        PairsParams(score_margin=0.5, eval_fraction=0.3, split_seed=seed), heldout)
    for p in pairs:
        role[p["conversation_id"]].add(p["split"])
    assert all(r in ({"heldout"}, {"rest", "train"}, {"rest", "eval"}) for r in role.values()), role
    assert {"heldout"} in role.values() and {"rest", "eval"} in role.values() and {"rest", "train"} in role.values()
    # QMSum: the meeting is the conversation, whatever the question's own id
    meeting = [{"query_id": f"qmsum-7-{k}", "dialogue_id": f"qmsum-7-{k}", "conversation_id": "qmsum-7"}
               for k in range(6)]
    assert len(set(split_of(meeting, 0.5, seed).values())) == 1
    assert len({is_held_out(q, heldout) for q in meeting}) == 1


def _scored(query_ids):
    from mascot.annotate.rubric import PERSONA

    cands, scores = [], []
    for q in query_ids:
        for i, total in enumerate((4.0, 2.0)):
            cid = f"{q}|The Anchor|{i}"
            cands.append({"candidate_id": cid, "query_id": q, "persona": "The Anchor", "candidate_index": i,
                          "text": f"reply {i} to {q}"})
            scores.append({"candidate_id": cid, "query_id": q, "persona": "The Anchor", "status": "scored",
                           "total_reward": total, "scores": {d: total for d in PERSONA.dimensions}})
    return cands, scores, {q: {"query_id": q, "context": [{"role": "user", "content": "hi"}]} for q in query_ids}


def test_adding_or_removing_other_queries_never_moves_a_pair(personas):
    from mascot.config import HeldOutParams

    heldout = HeldOutParams(fraction=0.25)
    params = PairsParams(score_margin=0.5, eval_fraction=0.3)
    ids = [f"q{i}" for i in range(40)]
    base = {p["pair_id"]: p["split"] for p in build_pairs(*_scored(ids), personas, params, heldout)}
    fewer = {p["pair_id"]: p["split"] for p in build_pairs(*_scored(ids[::3]), personas, params, heldout)}
    more = {p["pair_id"]: p["split"] for p in build_pairs(*_scored(ids + [f"x{i}" for i in range(25)]), personas,
                                                          params, heldout)}
    assert fewer and all(base[k] == v for k, v in fewer.items())
    assert all(more[k] == v for k, v in base.items())
    assert {"train", "eval"} <= set(base.values())


def test_one_rule_evaluation_uses_only_queries_no_model_trained_on(personas):
    """The reward model trains on train pairs, the speaker's GRPO on eval-split queries, the Director's on the
    episodes' prefixes: evaluate and evaluate_group take held-out queries, which are in none of them."""
    from mascot.annotate.episodes import episode_queries
    from mascot.config import GRPOParams, HeldOutParams
    from mascot.policy.grpo import grpo_prompts
    from mascot.splits import held_out

    heldout = HeldOutParams(fraction=0.25)
    ids = [f"q{i}" for i in range(40)]
    cands, scores, queries = _scored(ids)
    pairs = build_pairs(cands, scores, queries, personas, PairsParams(score_margin=0.5, eval_fraction=0.3), heldout)
    evaluated = {q["query_id"] for q in held_out(list(queries.values()), heldout)}
    trained = ({p["query_id"] for p in pairs}
               | {r["query_id"] for r in grpo_prompts(queries, pairs, personas, GRPOParams())}
               | {q["query_id"] for q in episode_queries(list(queries.values()), None, 7, heldout)})
    assert evaluated and not evaluated & trained
    assert evaluated | trained == set(ids)
    with pytest.raises(ValueError, match="none of the 1 queries is held out"):
        held_out([{"query_id": sorted(set(ids) - evaluated)[0]}], heldout)
