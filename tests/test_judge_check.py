"""judge_check: the reference set, the figures it reports, and the gate that stops on a weak judge."""
import pytest

from mascot.annotate.judge_check import analyse, choose_style, headline, mode_agreement
from mascot.annotate.reference_set import COLD_REPLIES, NEUTRAL_SENTENCE, as_candidates, build_reference_set
from mascot.annotate.rubric import PERSONA
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
            {"candidate_id": cid, "status": "scored", "total_reward": total, "scores": {d: total for d in PERSONA.dimensions},
             "choice_mass": {d: mass for d in PERSONA.dimensions}})


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


def group_conversation(k: int) -> Dialogue:
    return Dialogue(f"conv-{k}", "esconv", [
        Turn("user", f"hello, I am person {k}"), Turn("assistant", f"hi {k}, what is on your mind today?"),
        Turn("user", f"I feel awful about thing {k}"), Turn("assistant", f"that sounds really hard, thing {k} weighs"),
        Turn("assistant", f"what part of thing {k} worries you the most?"), Turn("user", "all of it, honestly")])


def test_block_reference_set_holds_the_four_variants_of_each_human_block():
    from mascot.annotate.reference_set import ECHO_LEADS, build_block_reference_set
    from mascot.granularity import BLOCK

    names = ["The Anchor", "The Catalyst", "The Beacon"]
    items = build_block_reference_set([group_conversation(k) for k in range(4)], names, 200, lambda t: len(t.split()),
                                      items=3, turns=2, exclude={"conv-0"})
    assert len(items) == 3 and all(not i["item_id"].startswith("block-conv-0@") for i in items)
    for item in items:
        b = item["blocks"]
        assert set(b) == {"reference", "echo", "off_topic", "redundant", "reference_padded"}
        ref = b["reference"]
        own = item["item_id"].split("@")[0].removeprefix("block-conv-")
        assert [m["role"] for m in ref] == ["assistant", "assistant"] and item["context"][-1]["role"] == "user"
        assert f"thing {own}" in ref[0]["content"] and ref[0]["name"] != ref[1]["name"]
        # echo: the second companion restates the first (same speakers); off-topic: another conversation's turns
        # under the same speakers; redundant: the companions' turns said twice
        assert b["echo"][0] == ref[0] and b["echo"][1]["name"] == ref[1]["name"]
        assert b["echo"][1]["content"].startswith(ECHO_LEADS[0].format(name=ref[0]["name"]))
        assert ref[0]["content"][1:] in b["echo"][1]["content"]
        assert [m["name"] for m in b["off_topic"]] == [m["name"] for m in ref]
        assert f"thing {own}" not in " ".join(m["content"] for m in b["off_topic"])
        assert b["redundant"] == ref + ref
        assert all(m["content"].endswith(NEUTRAL_SENTENCE) for m in b["reference_padded"])
    from mascot.data.personas import load_personas

    variants, units = BLOCK.reference_units(items, load_personas("data/personas.yaml"))
    assert len(variants) == len(units) == 3 * 5 and "Block:\nThe" in units[0]["item"]


def test_the_collective_figures_compare_the_human_block_with_each_worse_one():
    from mascot.granularity import BLOCK

    dims = ["fidelity", "engagement_contribution", "originality_specificity", "group_coherence"]
    cands, scores = [], []
    for k in range(12):
        for variant, total in (("reference", 4.0), ("echo", 2.0), ("off_topic", 4.0 if k < 6 else 1.0),
                               ("redundant", 3.0 + (k % 2) * 2), ("reference_padded", 4.5)):
            cands.append({"query_id": f"b{k}", "reply_type": variant, "kind": "dialogue", "text": "w " * (5 + k)})
            scores.append({"status": "scored", "total_reward": total, "scores": {d: total for d in dims},
                           "choice_mass": {d: 0.9 for d in dims}})
    fig = analyse(cands, scores, "expected", BLOCK, dims)
    assert fig["ref_gt_echo"]["mean"] == 1.0 and fig["ref_gt_echo"]["n"] == 12
    assert fig["ref_gt_off_topic"]["mean"] == 0.75  # 6 ties (0.5 each) and 6 wins
    assert fig["ref_gt_redundant"]["mean"] == 0.5 and fig["ref_gt_redundant"]["by_dimension"]["fidelity"] == 0.5
    assert fig["ref_gt_echo"]["by_dimension_ci"]["group_coherence"]["n"] == 12
    assert fig["length_probe"]["up_fraction"] == 1.0
    flat = headline(fig, BLOCK)
    assert {"ref_gt_echo", "ref_gt_echo_ci_low", "ref_gt_redundant_n", "ref_gt_off_topic.fidelity"} <= set(flat)


def test_the_formats_and_modes_a_check_runs():
    from mascot.annotate.judge_check import judge_formats
    from mascot.config import load_params

    params = load_params("params.yaml")
    block = params.judge_check.model_copy(update={"prompt_styles": ["plain", "chat"]})
    auto = params.model_copy(update={"score": params.score.model_copy(update={"prompt_style": "auto"})})
    assert judge_formats(auto, block)[0] == ["plain", "chat"]  # auto: the check measures both
    fixed = params.model_copy(update={"score": params.score.model_copy(update={"prompt_style": "chat"})})
    assert judge_formats(fixed, block)[0] == ["chat"]
    function = auto.model_copy(update={"score": auto.score.model_copy(update={
        "scorer": auto.score.scorer.model_copy(update={"kind": "function", "target": "mascot.annotate.controls:planted_feature",
                                                       "dimensions": []})})})
    styles, modes = judge_formats(function, block.model_copy(update={"modes": ["expected", "json"]}))
    assert (styles, modes) == (["plain"], ["expected"])  # a function judge reads no prompt: one run says it all
