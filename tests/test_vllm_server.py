"""The OpenAI path against the real vLLM server (CPU build) on a tiny model the test builds.

Needs the serving environment (`make vllm-env`, which `make test` and CI run first); skipped with a message
where it is absent.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
import yaml

from mascot.annotate.generate import generate_candidates
from mascot.annotate.rubric import PERSONA
from mascot.annotate.score import score_candidates
from mascot.config import GenerateParams, LLMEndpoint, ScoreParams
from mascot.llm.openai_backend import OpenAIBackend

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def vllm(vllm_server):
    """The session's server (tests/conftest.py), shared with the rehearsal."""
    return vllm_server


def endpoint(server, **kw):
    return LLMEndpoint(backend="openai", model="tiny", base_url=server.base_url, max_concurrency=16, **kw)


def test_generate_through_vllm_n_per_request(vllm, demo_queries, personas):
    for style in ("transcript", "chat"):
        params = GenerateParams(num_agents_per_query=3, prompt_style=style, max_tokens=8)
        cands = generate_candidates(demo_queries, personas, params, OpenAIBackend(endpoint(vllm)))
        assert len(cands) == 3 * len(demo_queries)
        # each candidate's own token count (vLLM returns the choice's token ids), never a request total / n
        assert all(c["model"] == "tiny" and isinstance(c["completion_tokens"], int) for c in cands)
        assert all(0 < c["completion_tokens"] <= 8 for c in cands)
        assert all(c["finish_reason"] in ("stop", "length") for c in cands)


def test_replica_list_with_real_vllm_and_a_dead_replica(vllm, demo_queries, personas, capsys):
    """The list form end to end: one real vLLM server and one replica that refuses connections (a port where
    nothing listens). Every request ends on the real server; the dead one is dropped, the stage goes on."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    backend = OpenAIBackend(LLMEndpoint(backend="openai", model="tiny", base_url=[dead, vllm.base_url],
                                        max_concurrency=4, send_seed=False))
    cands = generate_candidates(demo_queries, personas, GenerateParams(num_agents_per_query=2, max_tokens=6), backend)
    ids = [c["candidate_id"] for c in cands]
    assert len(ids) == 2 * len(demo_queries) == len(set(ids))
    assert list(backend.replicas.lost) == [dead] and backend.replicas.sent[vllm.base_url] >= len(demo_queries)
    backend.close()
    assert "requests per replica" in capsys.readouterr().out


@pytest.mark.parametrize("style", ["plain", "chat"])
@pytest.mark.parametrize("mode", ["expected", "json"])
def test_score_through_vllm(vllm, demo_queries, personas, mode, style):
    backend = OpenAIBackend(endpoint(vllm))
    cands = generate_candidates(demo_queries, personas, GenerateParams(num_agents_per_query=2, max_tokens=8), backend)
    cands = [c for c in cands if c["text"].strip()]
    scores = score_candidates(cands, {q["query_id"]: q for q in demo_queries}, personas,
                              ScoreParams(mode=mode, max_tokens=1500, min_choice_mass=0.0), backend, prompt_style=style)
    # A random tiny model writes valid, in-range scores only because the server constrains it.
    unscored = [(s["unscored_reason"], s.get("raw_replies")) for s in scores if s["status"] != "scored"]
    assert not unscored, unscored
    for s in scores:
        assert all(1 <= s["scores"][d] <= 5 for d in PERSONA.dimensions)


def test_guided_json_is_ignored_by_this_server(vllm):
    """Why the client must use `structured_outputs`: the old field is accepted and silently ignored."""
    import openai

    client = openai.OpenAI(base_url=vllm.base_url, api_key="x")
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": False}
    old = client.completions.create(model="tiny", prompt="JSON: ", max_tokens=12, temperature=0,
                                    extra_body={"guided_json": schema})
    new = client.completions.create(model="tiny", prompt="JSON: ", max_tokens=30, temperature=0,
                                    extra_body={"structured_outputs": {"json": schema}})
    assert isinstance(json.loads(new.choices[0].text)["a"], bool)
    with pytest.raises(json.JSONDecodeError):
        json.loads(old.choices[0].text)


def test_generate_and_score_stages_end_to_end(vllm, tiny_model_dir, repo_root, tmp_path):
    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    raw["prepare"].update(personas_file=str(repo_root / "data/personas.yaml"), tokenizer=str(tiny_model_dir),
                          max_queries=3)
    raw["prepare"]["sources"] = [{"format": "jsonl", "path": str(repo_root / "data/demo/dialogues.jsonl")}]
    raw["llm"] = {"speaker": {"backend": "openai", "model": "tiny", "base_url": vllm.base_url},
                  "judge": {"backend": "openai", "model": "tiny", "base_url": vllm.base_url}}
    raw["generate"].update(num_agents_per_query=2, max_tokens=8)
    raw["score"].update(min_choice_mass=0.0, max_tokens=1500, prompt_style="plain")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "MASCOT_RESUME_DIR": str(tmp_path / "resume")}
    shutil.copy2(repo_root / "dvc.yaml", tmp_path)  # the stages' files, as dvc.yaml hands them
    for mode in ("expected", "json"):
        raw["score"]["mode"] = mode
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
        for stage in ("prepare", "generate", "score"):
            proc = subprocess.run(f"mascot {stage}", shell=True, cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr[-3000:]
        metrics = json.loads((tmp_path / "reports/figures/score.json").read_text())
        assert metrics["scored"] + metrics["unscored"] == 6 and metrics["scored"] >= 5, (mode, metrics)


def test_thinking_switch_reaches_the_chat_template(vllm, capsys):
    """The tiny model's template has Qwen3's switch: off, the prompt holds an empty <think></think> block
    (more prompt tokens), and no <think> block ever reaches a recorded reply."""
    from mascot.llm.backend import SampleRequest

    messages = [{"role": "system", "content": "You are The Anchor."}, {"role": "user", "content": "I feel low today."}]
    bodies = []
    off = OpenAIBackend(endpoint(vllm, chat_template_kwargs={"enable_thinking": False}))
    off.on_request = bodies.append
    on = OpenAIBackend(endpoint(vllm, chat_template_kwargs={"enable_thinking": True}))
    (replies_off,) = off.sample([SampleRequest(messages, n=2, max_tokens=8, seed=3)])
    (replies_on,) = on.sample([SampleRequest(messages, n=2, max_tokens=8, seed=3)])
    body = bodies[0]
    with capsys.disabled():
        print("\nTHINKING request body:", json.dumps(body))
        print("THINKING recorded texts:", [c.text for c in replies_off], "prompt tokens off/on:",
              replies_off[0].prompt_tokens, replies_on[0].prompt_tokens)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert replies_off[0].prompt_tokens > replies_on[0].prompt_tokens  # the empty think block is in the prompt
    assert all("<think>" not in c.text and "</think>" not in c.text for c in replies_off + replies_on)


def test_seeds_are_off_for_the_cpu_build(vllm):
    from mascot.llm.servers import server_device

    backend = OpenAIBackend(endpoint(vllm, send_seed="auto"))
    assert server_device(vllm.base_url) == "cpu" and backend.send_seed is False


@pytest.mark.parametrize("style", ["plain", "chat"])
def test_choice_distributions_agree_between_vllm_and_in_process(vllm, tiny_model_dir, style):
    """The same judge prompt, the same tiny model: the digit distribution and its mass from vLLM's logprobs
    (top 20) and from the in-process softmax agree, so a figure does not change meaning with the backend."""
    from mascot.annotate.rubric import SCORE_CHOICES
    from mascot.llm.local_backend import LocalBackend

    prompts = [f"Reply: I hear you, that sounds hard {i}.\nScore (1-5): " for i in range(3)]
    if style == "chat":
        prompts = [[{"role": "system", "content": "Rate the reply from 1 to 5."}, {"role": "user", "content": p}]
                   for p in prompts]
    served = OpenAIBackend(endpoint(vllm)).choice_distribution(prompts, SCORE_CHOICES)
    local = LocalBackend(LLMEndpoint(model=str(tiny_model_dir))).choice_distribution(prompts, SCORE_CHOICES)
    print("\nCHOICE", style, [(round(a.mass, 4), round(b.mass, 4)) for a, b in zip(served, local)])
    for a, b in zip(served, local):
        assert max(abs(a.probs[c] - b.probs[c]) for c in SCORE_CHOICES) < 0.02, (a, b)
        # a random model puts under 1% on the digits: read from the constrained logprobs alone it would be 1.0;
        # the free top 20 give the share (here 0: no digit is among them, a lower bound of the in-process figure)
        assert a.mass <= b.mass + 1e-3 and b.mass < 0.05
