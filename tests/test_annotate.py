import pytest

from mascot.annotate.generate import generate_candidates, speaker_prompt
from mascot.annotate.rubric import PERSONA, JudgeParseError
from mascot.annotate.score import score_candidates
from mascot.granularity import REPLY
from mascot.config import GenerateParams, ScoreParams
from mascot.llm.backend import Completion
from mascot.resume import Journal


class Counting:
    """Wraps a backend and counts what it is asked to do."""

    def __init__(self, inner):
        self.inner, self.model_name, self.samples, self.prompts = inner, inner.model_name, 0, 0
        self.identity = getattr(inner, "identity", None)

    def sample(self, requests, progress=None):
        self.samples += sum(r.n for r in requests)
        return self.inner.sample(requests, progress)

    def choice_distribution(self, prompts, choices, progress=None):
        self.prompts += len(prompts)
        return self.inner.choice_distribution(prompts, choices, progress)

    def json_complete(self, prompts, schema, max_tokens, seed=0, progress=None, temperature=0.0):
        self.prompts += len(prompts)
        return self.inner.json_complete(prompts, schema, max_tokens, seed, progress)


def test_transcript_prompt_layout(personas):
    p = personas["The Catalyst"]
    prompt, stop = speaker_prompt(p, [{"role": "user", "content": "I lost my keys."}], "transcript")
    assert prompt.endswith("Person: I lost my keys.\nThe Catalyst:") and stop == ("\n",)
    assert f"The Catalyst: {p.example.reply}" in prompt
    chat, _ = speaker_prompt(p, [{"role": "user", "content": "hi"}], "chat")
    assert chat[0]["role"] == "system" and chat[-1] == {"role": "user", "content": "hi"}


def test_judge_prefix_puts_shared_parts_first(personas):
    a = PERSONA.prefix(REPLY.judge_item(personas["The Anchor"], [{"role": "user", "content": "x"}], "reply one"), True)
    b = PERSONA.prefix(REPLY.judge_item(personas["The Anchor"], [{"role": "user", "content": "x"}], "reply two"), True)
    common = len(a) - len("reply one\n")
    assert a[:common] == b[:common]  # only the reply differs, at the end


def test_generate_records_and_resume(tiny_backend, personas, demo_queries, tmp_path):
    params = GenerateParams(num_agents_per_query=2, max_tokens=6)
    backend = Counting(tiny_backend)
    journal = Journal("generate", tmp_path)
    first = generate_candidates(demo_queries, personas, params, backend, journal, chunk_size=1)
    journal.close()
    assert len(first) == 2 * len(demo_queries) == backend.samples
    rec = first[0]
    assert set(rec) >= {"candidate_id", "query_id", "persona", "candidate_index", "model", "sampling", "text",
                        "prompt_tokens", "completion_tokens", "finish_reason"}
    assert rec["sampling"]["seed"] and rec["persona"] in personas
    backend.samples = 0
    again = generate_candidates(demo_queries, personas, params, backend, Journal("generate", tmp_path), chunk_size=1)
    assert backend.samples == 0 and again == first  # all reused, nothing recomputed
    changed = GenerateParams(num_agents_per_query=2, max_tokens=6, temperature=0.5)
    generate_candidates(demo_queries, personas, changed, backend, Journal("generate", tmp_path))
    assert backend.samples == 2 * len(demo_queries)  # a param that shapes records invalidates them


def test_journal_never_replays_another_models_records(personas, demo_queries, tmp_path, capsys):
    """The same path with other weights, or the same weights in another dtype, is another model: a rerun
    recomputes every record instead of handing back the old model's (and says how many it reused)."""
    from mascot.config import LLMEndpoint
    from mascot.llm.base_model import build_tiny_model
    from mascot.llm.local_backend import LocalBackend

    from tests.conftest import REPO

    lines = (REPO / "data/demo/dialogues.jsonl").read_text().splitlines()
    folder = tmp_path / "model"
    params = GenerateParams(num_agents_per_query=2, max_tokens=6)

    def run(seed_of_weights=None, dtype="float32"):
        if seed_of_weights is not None:
            build_tiny_model(folder, lines, seed=seed_of_weights)
        backend = Counting(LocalBackend(LLMEndpoint(model=str(folder), batch_size=8, dtype=dtype)))
        journal = Journal("generate", tmp_path / "resume")
        out = generate_candidates(demo_queries, personas, params, backend, journal, chunk_size=2)
        journal.close()
        return out, backend.samples

    first, computed = run(seed_of_weights=0)
    assert computed == 2 * len(demo_queries)
    again, computed = run()
    assert computed == 0 and again == first  # same weights, same dtype: all reused
    reused_line = capsys.readouterr().out
    swapped, computed = run(seed_of_weights=1)  # other weights at the same path
    assert computed == 2 * len(demo_queries), "records of the old weights were replayed"
    assert [c["text"] for c in swapped] != [c["text"] for c in first]
    _, computed = run(dtype="bfloat16")  # the same weights in another dtype
    assert computed == 2 * len(demo_queries), "records of the float32 model were replayed in bfloat16"
    # the stage says how many records it reused
    assert f"{len(demo_queries)} of {len(demo_queries)} records reused" in reused_line
    assert f"0 of {len(demo_queries)} records reused" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["expected", "json"])
def test_score_modes(tiny_backend, personas, demo_queries, mode):
    cands = generate_candidates(demo_queries, personas, GenerateParams(num_agents_per_query=2, max_tokens=6),
                                tiny_backend)
    cands[0] = {**cands[0], "text": "  "}
    queries = {q["query_id"]: q for q in demo_queries}
    scores = score_candidates(cands, queries, personas, ScoreParams(mode=mode, min_choice_mass=0.0, max_tokens=1500),
                              tiny_backend)
    assert scores[0]["status"] == "unscored" and scores[0]["unscored_reason"] == "empty reply"
    assert scores[0]["scores"] is None and scores[0]["total_reward"] is None
    for s in scores[1:]:
        assert s["status"] == "scored", s
        assert set(s["scores"]) == set(PERSONA.dimensions)
        assert all(1 <= v <= 5 for v in s["scores"].values())
        assert s["total_reward"] == pytest.approx(sum(s["scores"].values()) / 5, abs=1e-3)


def test_low_choice_mass_is_unscored_not_invented(tiny_backend, personas, demo_queries):
    cands = generate_candidates(demo_queries[:1], personas, GenerateParams(num_agents_per_query=1, max_tokens=4),
                                tiny_backend)
    (s,) = score_candidates(cands, {q["query_id"]: q for q in demo_queries}, personas,
                            ScoreParams(min_choice_mass=0.99), tiny_backend)
    assert s["status"] == "unscored" and "probability on the digits" in s["unscored_reason"]
    assert s["scores"] is None


class Garbage:
    model_name = "garbage"
    identity = {"backend": "fake", "model": "garbage"}

    def __init__(self):
        self.calls = 0

    def json_complete(self, prompts, schema, max_tokens, seed=0, progress=None, temperature=0.0):
        self.calls += 1
        return [Completion('{"persona_consistency": {"score": 9', 10, 5, "length") for _ in prompts]


def test_unparseable_judge_is_retried_then_unscored(personas, demo_queries):
    q = demo_queries[0]
    cand = {"candidate_id": "c", "query_id": q["query_id"], "persona": q["personas"][0], "candidate_index": 0,
            "text": "hello"}
    judge = Garbage()
    (s,) = score_candidates([cand], {q["query_id"]: q}, personas, ScoreParams(mode="json", max_parse_retries=2), judge)
    assert judge.calls == 3
    assert s["status"] == "unscored" and s["scores"] is None and len(s["raw_replies"]) == 3


def test_parse_json_scores_rejects_out_of_range():
    good = {d: {"reason": "ok", "score": 3} for d in PERSONA.dimensions}
    import json
    assert PERSONA.parse_json(json.dumps(good))[0]["perceived_empathy"] == 3.0
    good["perceived_empathy"]["score"] = 6
    with pytest.raises(JudgeParseError, match="perceived_empathy"):
        PERSONA.parse_json(json.dumps(good))


def test_a_resumed_run_writes_what_a_clean_run_would_when_the_chunks_change(tmp_path):
    """In-process sampling depends on the batch (one RNG stream per batch): a record journaled in another chunk
    (another max_queries or batch size) must be recomputed, not reused."""
    from mascot.resume import run_journaled

    def batch_dependent(keys):
        calls = []

        def compute(start, end):
            calls.append(keys[start:end])
            return [{"key": k, "batch": "+".join(keys[start:end])} for k in keys[start:end]]
        return compute, calls

    compute, _ = batch_dependent(["a", "b", "c"])
    run_journaled(["a", "b", "c"], compute, Journal("j", tmp_path), 4, "x")  # journal: a, b made in a+b+c
    compute, calls = batch_dependent(["a", "b"])
    stats = {}
    resumed = run_journaled(["a", "b"], compute, Journal("j", tmp_path), 4, "x", stats=stats)
    clean = run_journaled(["a", "b"], batch_dependent(["a", "b"])[0], None, 4, "x")
    assert resumed == clean and stats["reused"] == 0 and calls == [["a", "b"]]
    compute, calls = batch_dependent(["a", "b"])
    stats = {}
    again = run_journaled(["a", "b"], compute, Journal("j", tmp_path), 4, "x", stats=stats)
    assert again == clean and stats["reused"] == 2 and calls == []  # the same chunks: all reused


def test_journal_ignores_a_torn_last_line_and_retains_current_keys(tmp_path):
    j = Journal("x", tmp_path)
    j.add("a", {"v": 1})
    j.add("b", {"v": 2})
    j.flush()
    j.close()
    with open(tmp_path / "x.jsonl", "a") as fh:
        fh.write('{"key": "c", "record": {"v"')  # a write cut off by kill -9
    j = Journal("x", tmp_path)
    assert j.resumed == 2 and j.get("c") is None
    j.retain({"b"})
    j.close()
    assert Journal("x", tmp_path).records == {"b": {"v": 2}}


def test_parse_json_scores_tolerates_raw_control_characters_in_reasons():
    import json
    text = json.dumps({d: {"reason": "ok", "score": 2} for d in PERSONA.dimensions}).replace('"ok"', '"o\x02k"', 1)
    assert PERSONA.parse_json(text)[0]["persona_consistency"] == 2.0


def test_score_metrics_flag_constant_judges_and_empty_reasons():
    from mascot.annotate.score import score_metrics

    def rec(q, total, reason="the reply names the feeling and stays on topic"):
        return {"query_id": q, "persona": "The Anchor", "status": "scored", "total_reward": total,
                "scores": {d: total for d in PERSONA.dimensions}, "reasons": {d: reason for d in PERSONA.dimensions}}
    m = score_metrics([rec("a", 3.0), rec("a", 3.0), rec("b", 2.0), rec("b", 4.0)])
    assert m["groups"] == 2 and m["constant_group_fraction"] == 0.5 and m["empty_reason_fraction"] == 0.0
    m = score_metrics([rec("a", 1.0, ""), rec("a", 1.0, "ok")])
    assert m["constant_group_fraction"] == 1.0 and m["empty_reason_fraction"] == 1.0


def test_chat_judge_prompts_continue_the_ratings(personas):
    ctx = [{"role": "user", "content": "I lost my job."}]
    item = REPLY.judge_item(personas["The Anchor"], ctx, "That sounds hard.")
    chat = PERSONA.expected_prompts(item, True, "chat")
    for dim, messages in chat.items():
        assert messages[0]["role"] == "system" and "strict judge" in messages[0]["content"]
        assert messages[-1] == {"role": "assistant", "content": f"Ratings:\n{dim}: "}
    plain = PERSONA.expected_prompts(item, True, "plain")
    assert all(p.endswith(f"Ratings:\n{d}: ") for d, p in plain.items())
    assert PERSONA.json_prompt(REPLY.judge_item(personas["The Anchor"], ctx, "x"), False, "chat")[-1]["role"] == "user"


def test_held_out_queries_can_skip_generation():
    from mascot.annotate.generate import generation_queries
    from mascot.config import GenerateParams, HeldOutParams
    from mascot.splits import is_held_out

    queries = [{"query_id": f"d{k}@{t}", "conversation_id": f"d{k}"} for k in range(20) for t in (1, 2)]
    heldout = HeldOutParams(fraction=0.4, seed=0)
    assert generation_queries(queries, GenerateParams(), heldout) == (queries, 0)
    kept, skipped = generation_queries(queries, GenerateParams(skip_heldout=True), heldout)
    assert skipped > 0 and len(kept) + skipped == len(queries)
    assert not any(is_held_out(q, heldout) for q in kept)
    # a conversation is held out whole: none of its queries is generated for
    assert {q["conversation_id"] for q in kept}.isdisjoint({q["conversation_id"] for q in queries if q not in kept})
