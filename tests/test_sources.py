import json

import pytest

from mascot.data.queries import build_queries
from mascot.data.sources.empathetic import load_empathetic
from mascot.data.sources.esconv import load_esconv
from mascot.data.sources.jsonl import load_jsonl_dialogues
from mascot.data.sources.qmsum import load_qmsum
from mascot.io import BadRows, InputError


def words(text):
    return len(text.split())


def test_esconv_sample_speaker_listener(corpora):
    dialogues = load_esconv(corpora / "esconv-sample.json", BadRows())
    assert len(dialogues) == 20
    d = dialogues[0]
    assert d.turns[0].role == "user" and d.turns[0].content == "hello"  # stray newline gone
    assert {t.role for t in d.turns} == {"user", "assistant"}
    assert d.metadata["emotion_type"] == "depression"
    for dlg in dialogues:  # consecutive same-role turns are merged
        assert all(a.role != b.role for a, b in zip(dlg.turns, dlg.turns[1:]))


def test_esconv_seeker_supporter_naming(tmp_path):
    path = tmp_path / "ESConv.json"
    path.write_text(json.dumps([{"emotion_type": "anxiety", "problem_type": "job crisis", "dialog": [
        {"speaker": "seeker", "annotation": {}, "content": "I lost my job.\n"},
        {"speaker": "supporter", "annotation": {"strategy": "Question"}, "content": "I'm sorry. What happened?"},
        {"speaker": "seeker", "annotation": {}, "content": "Cuts."},
        {"speaker": "seeker", "annotation": {}, "content": "I'm scared."}]}]))
    (d,) = load_esconv(path, BadRows())
    assert [t.role for t in d.turns] == ["user", "assistant", "user"]
    assert d.turns[-1].content == "Cuts. I'm scared."


def test_esconv_bad_speaker_names_row(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"dialog": [{"speaker": "narrator", "content": "x"}]}]))
    with pytest.raises(InputError, match=r"bad.json conversation 0 dialog\[0\]: unknown speaker 'narrator'"):
        load_esconv(path, BadRows())


def test_esconv_as_the_hub_ships_it_json_lines_usr_sys_text(tmp_path):
    """thu-coai/esconv on the hub: one conversation a line, roles usr/sys, a turn's words in `text`, the seeker's
    survey as strings; read by the same `format: esconv`, ids by line."""
    path = tmp_path / "esconv-hub-valid.jsonl"
    conv = {"emotion_type": "anxiety", "problem_type": "job crisis", "situation": "laid off",
            "survey_score": {"seeker": {"initial_emotion_intensity": "4", "empathy": "5", "relevance": "4",
                                        "final_emotion_intensity": "2"}, "supporter": {"relevance": "5"}},
            "dialog": [{"text": "Hi.\n", "speaker": "usr"}, {"text": "Hello, how are you?", "speaker": "sys",
                                                            "strategy": "Question"},
                       {"text": "I lost my job.", "speaker": "usr"}, {"text": "I'm sorry.", "speaker": "sys"}],
            "seeker_question1": "", "supporter_question1": ""}
    path.write_text(json.dumps(conv) + "\n\n" + json.dumps({**conv, "survey_score": None}) + "\n")
    first, second = load_esconv(path, BadRows())
    assert (first.id, second.id) == ("esconv-hub-valid-0", "esconv-hub-valid-2")  # by line, a blank one counted
    assert [t.role for t in first.turns] == ["user", "assistant", "user", "assistant"]
    assert first.turns[0].content == "Hi." and first.metadata["problem_type"] == "job crisis"
    assert first.metadata["survey_score"] == {"empathy": 5.0, "relevance": 4.0, "initial_emotion_intensity": 4.0,
                                              "final_emotion_intensity": 2.0, "emotion_drop": 2.0}
    assert "survey_score" not in second.metadata


@pytest.mark.parametrize("line, message", [
    ('{"dialog": [{"speaker": "usr"}]}', r"bad.jsonl:2 dialog\[0\]: no 'content' or 'text' field"),
    ('{"dialog": [{"speaker": "bot", "text": "x"}]}', r"bad.jsonl:2 dialog\[0\]: unknown speaker 'bot'"),
    ('{"dialog": [{"speaker": "usr", "text": 3}]}', r"bad.jsonl:2 dialog\[0\]: field 'text' must be a string"),
    ('{"dialog": "hello"}', r"bad.jsonl:2: field 'dialog'"),
    ('{"dialog": [', r"bad.jsonl:2: not valid JSON"),
])
def test_a_bad_hub_row_names_its_line_and_field_and_can_be_skipped(tmp_path, line, message):
    good = json.dumps({"dialog": [{"speaker": "usr", "text": "hi"}, {"speaker": "sys", "text": "hello"}]})
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + line + "\n" + good + "\n")
    with pytest.raises(InputError, match=message):
        load_esconv(path, BadRows())
    skipped = BadRows(skip=True)
    assert [d.id for d in load_esconv(path, skipped)] == ["bad-0", "bad-2"]  # nothing else lost
    assert len(skipped.messages) == 1


def test_the_shipped_hub_copies_read_whole(corpora):
    """data/corpora holds the hub's train and validation splits as shipped (README: licence, attribution)."""
    train = load_esconv(corpora / "esconv-hub-train.jsonl", BadRows())
    valid = load_esconv(corpora / "esconv-hub-valid.jsonl", BadRows())
    assert (len(train), len(valid)) == (910, 195)
    surveyed = [d for d in train + valid if "empathy" in d.metadata.get("survey_score", {})]
    assert len(surveyed) >= 900
    assert all(a.role != b.role for d in train for a, b in zip(d.turns, d.turns[1:]))


def test_qmsum_sample_window_within_budget(corpora):
    dialogues = load_qmsum(corpora / "qmsum-val.jsonl", BadRows())
    assert dialogues and all(d.source == "qmsum" for d in dialogues)
    assert dialogues[0].metadata["meeting_domain"] == "academic"  # ICSI: Professor/PhD speakers
    queries = build_queries(dialogues, ["The Anchor"], 300, words)
    assert len(queries) == len(dialogues)
    specific = next(q for q, d in zip(sorted(queries, key=lambda q: q["query_id"]),
                                      sorted(dialogues, key=lambda d: d.id)) if d.metadata["focus_turns"])
    text = specific["context"][0]["content"]
    assert words(text) <= 300
    assert text.startswith("I was in this meeting") and "?" in text.splitlines()[-1]


def test_qmsum_window_contains_focus_span(corpora):
    from mascot.data.queries import meeting_window

    (d, *_) = [d for d in load_qmsum(corpora / "qmsum-val.jsonl", BadRows()) if d.metadata["focus_turns"]]
    transcript, focus = d.metadata["transcript"], d.metadata["focus_turns"]
    text = meeting_window(transcript, focus, "What?", 200, words)
    middle = transcript[sorted(focus)[len(focus) // 2]]
    assert middle.content in text


def test_empathetic_csv(repo_root):
    dialogues = load_empathetic(repo_root / "data/demo/empathetic.csv", BadRows())
    assert len(dialogues) == 4
    d = dialogues[0]
    assert "," in d.turns[0].content and "_comma_" not in d.turns[0].content
    assert [t.role for t in d.turns] == ["user", "assistant", "user"]
    assert d.metadata["emotion_type"] == "nostalgic"


def test_jsonl_bad_rows_named_and_skippable(tmp_path):
    path = tmp_path / "dialogues.jsonl"
    good = {"id": "a", "context": [{"role": "user", "content": "hi there"}]}
    path.write_text("\n".join([json.dumps(good), "{not json", json.dumps({"id": "b", "context": []}),
                               json.dumps({"id": "c", "context": [{"role": "robot", "content": "x"}]})]) + "\n")
    with pytest.raises(InputError, match=r"dialogues.jsonl:2: not valid JSON"):
        load_jsonl_dialogues(path, BadRows())
    bad = BadRows(skip=True)
    dialogues = load_jsonl_dialogues(path, bad)
    assert [d.id for d in dialogues] == ["a"]
    assert len(bad.messages) == 3
    assert any(":3: field 'context' is empty" in m for m in bad.messages)
    assert any(":4 context[0]: role 'robot'" in m for m in bad.messages)


def test_queries_end_in_user_within_budget(repo_root, personas):
    dialogues = load_jsonl_dialogues(repo_root / "data/demo/dialogues.jsonl", BadRows())
    queries = build_queries(dialogues, list(personas), 20, words, personas_per_query=2)
    for q in queries:
        assert q["context"][-1]["role"] == "user" and q["context"][0]["role"] == "user"
        assert sum(words(m["content"]) for m in q["context"]) <= 20 + 1  # +1: the "…" marker of a cut
        assert len(q["personas"]) == 2 and set(q["personas"]) <= set(personas)
    assert len({q["query_id"] for q in queries}) == len(queries)


def test_a_source_can_decide_its_conversations_split(corpora):
    """prepare.sources[].heldout: the hub's validation split held out whole, its train split never; a source
    without the key goes by the hash rule. Queries and rated turns carry the mark, and every stage's rule reads it."""
    from mascot.config import HeldOutParams, SourceSpec
    from mascot.data.human_ratings import build_human_set
    from mascot.data.prepare import load_source
    from mascot.splits import is_held_out

    heldout = HeldOutParams(fraction=0.25, seed=0)
    count = words
    valid = load_source(SourceSpec(format="esconv", path=str(corpora / "esconv-hub-valid.jsonl"), heldout=True), BadRows())
    train = load_source(SourceSpec(format="esconv", path=str(corpora / "esconv-hub-train.jsonl"), heldout=False,
                                   limit=50), BadRows())
    hashed = load_source(SourceSpec(format="esconv", path=str(corpora / "esconv-sample.json")), BadRows())
    for dialogues, expected in ((valid, {True}), (train, {False}), (hashed, {True, False})):
        queries = build_queries(dialogues, ["The Anchor"], 64, count, max_queries=None)
        assert {is_held_out(q, heldout) for q in queries} == expected
    items = build_human_set(hashed, 64, count, "The Anchor")
    assert "heldout" not in items[0]
    marked = build_human_set(load_source(SourceSpec(format="esconv", path=str(corpora / "esconv-sample.json"),
                                                    heldout=True), BadRows()), 64, count, "The Anchor")
    assert marked and all(is_held_out(i, heldout) for i in marked)


def test_the_evidence_profile_evaluates_150_held_out_probes_and_surveys_300_conversations(repo_root, tmp_path,
                                                                                         monkeypatch):
    """The evidence profile's sources, split and sizes as its stages take them: `evaluate` reaches at least 150
    held-out probes, every one from a conversation no model trains on, and judge_check_group's survey set holds
    at least 300 surveyed conversations, none a query's (a group reward model trains on those episodes)."""
    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.data.prepare import load_source
    from mascot.data.queries import sample_queries
    from mascot.granularity import GRANULARITIES
    from mascot.profiles import apply_profile
    from mascot.splits import conversation_of, held_out, is_held_out

    target = tmp_path / "params.yaml"
    target.write_text((repo_root / "params.yaml").read_text())
    apply_profile("evidence", target, repo_root / "profiles")
    params = load_params(target)
    p = params.prepare
    monkeypatch.chdir(repo_root)  # the profile's paths are the repository's
    personas = load_personas(p.personas_file)
    per_source = [(spec, load_source(spec, BadRows())) for spec in p.sources]
    pool = [q for spec, ds in per_source for q in build_queries(
        ds, list(personas), p.max_context_tokens, words, per_dialogue=p.queries_per_dialogue,
        max_queries=spec.max_queries, min_user_chars=p.min_user_chars, seed=p.seed)]
    queries = sample_queries(pool, list(personas), p.personas_per_query, p.max_queries, p.seed)
    probes = held_out(queries, params.heldout, params.evaluate.max_queries)
    trained = {conversation_of(q) for q in queries if not is_held_out(q, params.heldout)}
    assert len(probes) >= 150
    assert not {conversation_of(q) for q in probes} & trained
    assert any(q["source"] == "esconv" and q.get("heldout") is True for q in probes)  # the hub's validation split

    dialogues = [d for _, ds in per_source for d in ds]
    items = GRANULARITIES["block"].reference_set(dialogues, personas, p.max_context_tokens, words,
                                                 params.judge_check_group, {q["dialogue_id"] for q in queries})
    surveyed = {i["conversation_id"] for i in items if i.get("survey")}
    assert len(surveyed) >= 300
    assert not surveyed & {conversation_of(q) for q in queries}
