"""judge_check: the reference set, the figures it reports, and the gate that stops on a weak judge."""
import pytest

from mascot.annotate.judge_check import analyse, choose_style, headline, mode_agreement
from mascot.annotate.reference_set import COLD_REPLIES, NEUTRAL_SENTENCE, as_candidates, build_reference_set
from mascot.annotate.rubric import DIMENSIONS
from mascot.data.dialogue import Dialogue, Turn


def conversation(k: int) -> Dialogue:
    turns = [Turn("user", f"hello, I am person {k}"), Turn("assistant", f"hi {k}, how are you feeling today?"),
             Turn("user", f"I feel awful about thing {k}"), Turn("assistant", f"that sounds really hard, thing {k}")]
    return Dialogue(f"conv-{k}", "esconv", turns)


def meeting(k: int, line: int) -> Dialogue:
    return Dialogue(f"qmsum-{line}-{k}", "qmsum", [Turn("user", f"What was decided about item {k}?")],
                    {"transcript": [Turn("meeting", "we decided things", "A")], "focus_turns": [0],
                     "meeting_line": line, "answer": f"They decided item {k} would ship."})


def test_reference_set_from_the_corpus():
    dialogues = [conversation(k) for k in range(5)] + [meeting(0, 1), meeting(1, 1), meeting(2, 2)]
    items = build_reference_set(dialogues, ["The Anchor", "The Beacon"], 200, lambda t: len(t.split()),
                                dialogue_items=3, qa_items=2, exclude={"conv-0"})
    dia = [i for i in items if i["kind"] == "dialogue"]
    qa = [i for i in items if i["kind"] == "qa"]
    assert len(dia) == 3 and len(qa) == 2
    assert all(not i["item_id"].startswith("ref-conv-0@") for i in dia)  # query dialogues avoided
    for item in dia:
        r = item["replies"]
        assert set(r) == {"reference", "off_topic", "cold", "reference_padded"}
        assert item["context"][-1]["role"] == "user"
        assert r["off_topic"] != r["reference"] and r["cold"] in COLD_REPLIES
        assert r["reference_padded"] == f"{r['reference']} {NEUTRAL_SENTENCE}"
        own = item["item_id"].split("@")[0].removeprefix("ref-conv-")
        assert f"thing {own}" in r["reference"] and f"thing {own}" not in r["off_topic"]
    for item in qa:  # another meeting's answer, never the same meeting's
        assert item["replies"]["off_topic"] != item["replies"]["reference"]
    cands, queries = as_candidates(items)
    assert len(cands) == 3 * 4 + 2 * 2 and set(queries) == {i["item_id"] for i in items}


def scored(cid, qid, rtype, kind, total, text="some words here", mass=0.9):
    return ({"candidate_id": cid, "query_id": qid, "reply_type": rtype, "kind": kind, "text": text},
            {"candidate_id": cid, "status": "scored", "total_reward": total, "scores": {d: total for d in DIMENSIONS},
             "choice_mass": {d: mass for d in DIMENSIONS}})


def fake_run(ref_scores, off_scores, cold_scores):
    cands, scores = [], []
    for k, (r, o, c) in enumerate(zip(ref_scores, off_scores, cold_scores)):
        for rtype, total, text in (("reference", r, "a long human reply " * 3), ("off_topic", o, "other reply"),
                                   ("cold", c, "Ok."), ("reference_padded", r + 0.1, "a long human reply padded")):
            cand, score = scored(f"i{k}|{rtype}", f"i{k}", rtype, "dialogue", total, text)
            cands.append(cand)
            scores.append(score)
    return cands, scores


def test_analyse_reports_accuracy_intervals_and_length():
    cands, scores = fake_run([4, 4, 4, 3, 2], [3, 3, 4, 4, 1], [1, 1, 1, 1, 1])
    fig = analyse(cands, scores, "expected")
    assert fig["ref_gt_off_topic"]["mean"] == pytest.approx((1 + 1 + 0.5 + 0 + 1) / 5)  # a tie is half
    assert fig["ref_gt_off_topic"]["ties"] == 1 and fig["ref_gt_off_topic"]["n"] == 5
    lo, hi = fig["ref_gt_off_topic"]["ci_low"], fig["ref_gt_off_topic"]["ci_high"]
    assert 0 <= lo <= fig["ref_gt_off_topic"]["mean"] <= hi <= 1
    assert fig["ref_gt_cold"]["mean"] == 1.0
    assert fig["length_probe"]["up_fraction"] == 1.0 and fig["length_probe"]["mean"] == pytest.approx(0.1)
    assert fig["mean_choice_mass"] == pytest.approx(0.9)
    assert fig["first_component_share"] == pytest.approx(1.0)  # five identical dimensions: one signal
    flat = headline(fig)
    assert flat["ref_gt_cold"] == 1.0 and "ref_gt_off_topic_ci_low" in flat


def test_choose_style_and_mode_agreement():
    good = analyse(*fake_run([4, 4, 4], [1, 1, 1], [1, 1, 1]), "expected")
    bad = analyse(*fake_run([1, 1, 1], [4, 4, 4], [4, 4, 4]), "expected")
    assert choose_style({"plain": bad, "chat": good}) == "chat"
    cands, a = fake_run([4, 4, 4], [1, 1, 1], [1, 1, 1])
    _, b = fake_run([4, 4, 4], [1, 5, 1], [1, 1, 1])
    agree = mode_agreement(cands, a, b)
    assert agree["same_call"]["mean"] == pytest.approx(5 / 6, abs=1e-4)
