"""The OpenAI-compatible client against a local stand-in server (unit level; the real vLLM server is
exercised by the serving integration tests)."""
import pytest

from mascot.config import LLMEndpoint
from mascot.llm.backend import SampleRequest
from mascot.llm.openai_backend import OpenAIBackend, ServerError
from tests.stand_in import StandIn, server  # noqa: F401  (fixture)


def backend(url, **kw):
    kw.setdefault("backoff_s", 0.01)
    return OpenAIBackend(LLMEndpoint(backend="openai", model="m", base_url=url, **kw))


def test_n_samples_in_one_request_chat_and_text(server):
    out = backend(server).sample([SampleRequest([{"role": "user", "content": "hi"}], n=3, seed=5),
                                  SampleRequest("Person: hi\nThe Anchor:", n=2, stop=("\n",))])
    assert [len(o) for o in out] == [3, 2] and out[0][1].text == "reply 1"
    paths = sorted(p for p, _ in StandIn.bodies)
    assert paths == ["/v1/chat/completions", "/v1/completions"]  # one request per prompt, n inside it
    chat = next(b for p, b in StandIn.bodies if p.endswith("chat/completions"))
    assert chat["n"] == 3 and chat["seed"] == 5


def test_expected_mode_takes_the_distribution_constrained_and_the_mass_free(server):
    """Under vLLM's choice constraint the logprobs come after the mask: they give the distribution, and an
    unconstrained call (top 20) gives the digits' share of the whole distribution."""
    (dist,) = backend(server).choice_distribution(["Score: "], ["1", "2", "3", "4", "5"])
    assert dist.probs["3"] == pytest.approx(0.4) and sum(dist.probs.values()) == pytest.approx(1.0)
    (_, constrained), (_, free) = StandIn.bodies
    assert constrained["structured_outputs"] == {"choice": ["1", "2", "3", "4", "5"]} and constrained["logprobs"] == 20
    assert "structured_outputs" not in free and free["logprobs"] == 20
    assert "guided_choice" not in constrained and "guided_json" not in constrained


def test_json_mode_uses_structured_outputs_json_not_guided_json(server):
    schema = {"type": "object"}
    backend(server).json_complete(["JSON: "], schema, max_tokens=10)
    _, body = StandIn.bodies[0]
    assert body["structured_outputs"] == {"json": schema}
    assert "guided_json" not in body  # vLLM 0.32 ignores guided_json silently: it must never come back


def test_503_is_retried_then_succeeds(server):
    StandIn.fail_first = 2
    b = backend(server, max_retries=3)
    assert b.sample([SampleRequest("x", n=1)])[0][0].text == "text"
    assert b.stats.retries == 2


def test_retries_are_bounded_with_a_clear_error(server):
    StandIn.fail_first = 10
    with pytest.raises(ServerError, match="InternalServerError after 2 attempts"):
        backend(server, max_retries=1).sample([SampleRequest("x", n=1)])


def test_connection_refused_is_a_clear_error():
    with pytest.raises(ServerError, match="127.0.0.1:9/v1: APIConnectionError after 1 attempts"):
        backend("http://127.0.0.1:9/v1", max_retries=0).sample([SampleRequest("x", n=1)])


def test_thinking_switch_is_sent_and_think_blocks_are_cut(server):
    StandIn.chat_prefix = "<think>\nThe user is sad; be kind.\n</think>\n\n"
    b = backend(server, chat_template_kwargs={"enable_thinking": False})
    out = b.sample([SampleRequest([{"role": "user", "content": "hi"}], n=2, seed=1)])
    _, body = StandIn.bodies[0]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert [c.text for c in out[0]] == ["reply 0", "reply 1"] and all(c.thinking_removed for c in out[0])
    # n > 1 and no per-choice token ids from this server: the per-candidate count is unknown, not invented
    assert all(c.completion_tokens is None for c in out[0])


def test_chat_prefill_is_continued_not_answered(server):
    b = backend(server)
    b.json_complete([[{"role": "user", "content": "rate"}, {"role": "assistant", "content": "JSON: "}]],
                    {"type": "object"}, max_tokens=5)
    _, body = StandIn.bodies[0]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


def test_seeds_follow_the_server_build(server, monkeypatch, tmp_path):
    from mascot.llm import servers

    monkeypatch.setattr(servers, "SERVERS_FILE", tmp_path / "servers.json")
    servers.record_server("http://127.0.0.1:1/v1", "cpu")  # this (live) process stands for the server
    assert backend("http://127.0.0.1:1/v1", send_seed="auto").send_seed is False  # started here on the CPU
    b = backend(server, send_seed="auto")
    monkeypatch.setattr(b, "server_version", lambda: "0.32.0+cpu")
    b.sample([SampleRequest([{"role": "user", "content": "hi"}], n=2, seed=5)])
    assert "seed" not in StandIn.bodies[-1][1]  # vLLM's CPU build died on seeded sampling
    gpu = backend(server, send_seed="auto")
    monkeypatch.setattr(gpu, "server_version", lambda: "0.32.0")
    gpu.sample([SampleRequest([{"role": "user", "content": "hi"}], n=2, seed=5)])
    assert StandIn.bodies[-1][1]["seed"] == 5


def test_strip_thinking():
    from mascot.llm.backend import strip_thinking

    assert strip_thinking("<think>a\nb</think>\n\nHello") == ("Hello", True)
    assert strip_thinking("no thoughts here") == ("no thoughts here", False)
    assert strip_thinking("<think>ran out of budget while thin") == ("", True)


def test_each_reply_says_what_its_seed_reproduces(server):
    """A seed sent to the server reproduces the request; with send_seed off (vLLM's CPU build) nothing was
    seeded, and the record says so instead of keeping a seed that means nothing."""
    req = SampleRequest([{"role": "user", "content": "hi"}], n=2, seed=5)
    (sent,) = backend(server, send_seed=True).sample([req])
    (unsent,) = backend(server, send_seed=False).sample([req])
    assert StandIn.bodies[-2][1]["seed"] == 5 and "seed" not in StandIn.bodies[-1][1]
    assert [c.seed_scope for c in sent] == [{"scope": "request"}] * 2
    assert [c.seed_scope for c in unsent] == [{"scope": "unseeded"}] * 2


def _candidates_for_json(personas):
    queries = {"q1": {"query_id": "q1", "context": [{"role": "user", "content": "I can't sleep."}]}}
    cands = [{"candidate_id": "q1|The Anchor|0", "query_id": "q1", "persona": "The Anchor", "text": "That sounds hard."}]
    return cands, queries


def test_a_json_reply_cut_at_max_tokens_is_retried_with_a_larger_budget(server, personas):
    import json

    from mascot.annotate.rubric import PERSONA
    from mascot.annotate.score import score_candidates
    from mascot.config import ScoreParams

    reply = json.dumps({d: {"score": 4, "reason": "warm and specific to what the person said " * 2}
                        for d in PERSONA.dimensions})
    StandIn.json_reply, StandIn.chars_per_token = reply, 2  # 200 tokens hold 400 characters: the reply is cut
    assert 400 < len(reply) <= 800
    cands, queries = _candidates_for_json(personas)
    (record,) = score_candidates(cands, queries, personas, ScoreParams(mode="json", max_tokens=200),
                                 backend(server, send_seed=False), prompt_style="chat")
    print("\nJSON RETRY:", json.dumps({k: record[k] for k in ("status", "attempts", "attempt_settings", "total_reward")}))
    assert record["status"] == "scored" and record["attempts"] == 2 and record["total_reward"] == 4.0
    assert [a["max_tokens"] for a in record["attempt_settings"]] == [200, 400]
    assert [a["finish_reason"] for a in record["attempt_settings"]] == ["length", "stop"]
    assert [b["max_tokens"] for _, b in StandIn.bodies] == [200, 400]


def test_an_unparseable_json_reply_is_retried_sampled_not_greedy(server, personas):
    from mascot.annotate.score import score_candidates
    from mascot.config import ScoreParams

    StandIn.json_reply = '{"persona_consistency": "high"}'  # parses as JSON, not under the rubric
    cands, queries = _candidates_for_json(personas)
    (record,) = score_candidates(cands, queries, personas, ScoreParams(mode="json", max_parse_retries=2),
                                 backend(server, send_seed=False), prompt_style="chat")
    assert record["status"] == "unscored" and record["attempts"] == 3 and len(record["raw_replies"]) == 3
    assert [b["temperature"] for _, b in StandIn.bodies] == [0.0, 0.7, 0.7]


def test_a_server_serving_other_weights_under_the_same_name_gets_every_request_again(server, personas, tmp_path):
    """The served name stays `m`; what the server reports it stands for (vLLM's /v1/models `root`) changed: the
    journal's records of the old model are not handed back."""
    from mascot.annotate.generate import generate_candidates
    from mascot.config import GenerateParams
    from mascot.resume import Journal

    queries = [{"query_id": f"q{i}", "personas": ["The Anchor"], "context": [{"role": "user", "content": f"hi {i}"}]}
               for i in range(3)]
    params = GenerateParams(num_agents_per_query=1)
    generate_candidates(queries, personas, params, backend(server), Journal("g", tmp_path))
    assert len(StandIn.bodies) == 3
    generate_candidates(queries, personas, params, backend(server), Journal("g", tmp_path))
    assert len(StandIn.bodies) == 3  # the same server, the same model: all reused
    StandIn.served_root = "/weights/another-model"
    swapped = backend(server)
    assert swapped.identity["served"] == "/weights/another-model"
    generate_candidates(queries, personas, params, swapped, Journal("g", tmp_path))
    assert len(StandIn.bodies) == 6, "the old model's replies were replayed"
