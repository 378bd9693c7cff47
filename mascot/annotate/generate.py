"""Persona prompts -> N candidate replies per query and persona (the `generate` stage: mascot/stages/generate.py)."""
from __future__ import annotations

import hashlib

from mascot import transcript
from mascot.config import GenerateParams
from mascot.data.personas import Persona, resolve_persona
from mascot.llm.backend import LLMBackend, Prompt, SampleRequest
from mascot.resume import Journal, fingerprint, run_journaled
from mascot.splits import is_held_out


def speaker_prompt(persona: Persona, context: list[dict], style: str) -> tuple[Prompt, tuple[str, ...]]:
    """The prompt and stop strings for one persona reply.

    `transcript` is for small base models (Gemma-270m): a plain transcript with one example exchange,
    stopped at the end of the line. `chat` is for instruction-tuned models (the embedded Qwen2.5 instruct
    model, Qwen3 behind vLLM): the persona is the system message, the dialogue the turns.
    """
    if style == "chat":
        return [{"role": "system", "content": persona.system_prompt()}, *context], ()
    lines = [persona.system_prompt(), "", f"Person: {persona.example.user}", f"{persona.name}: {persona.example.reply}", ""]
    lines.append(transcript.render(context, persona.name))
    lines.append(f"{persona.name}:")
    return "\n".join(lines), ("\n",)


def candidate_id(query_id: str, persona: str, index: int) -> str:
    return f"{query_id}|{persona}|{index}"


def request_seed(base: int, query_id: str, persona: str) -> int:
    return (base + int(hashlib.sha1(f"{query_id}|{persona}".encode()).hexdigest(), 16)) % (2**31)


def generate_candidates(queries: list[dict], personas: dict[str, Persona], params: GenerateParams,
                        backend: LLMBackend, journal: Journal | None = None, chunk_size: int = 8,
                        stats: dict | None = None) -> list[dict]:
    """Sample `num_agents_per_query` replies per (query, persona); records already in `journal` are reused."""
    jobs = []
    for q in queries:
        for name in q["personas"]:
            persona = resolve_persona(personas, name, f"query {q['query_id']}")
            prompt, stop = speaker_prompt(persona, q["context"], params.prompt_style)
            seed = request_seed(params.seed, q["query_id"], name)
            key = fingerprint(backend.identity, prompt, stop, params.temperature, params.top_p,
                              params.max_tokens, seed, params.num_agents_per_query)
            jobs.append((q, name, SampleRequest(prompt, params.num_agents_per_query, params.temperature,
                                                params.top_p, params.max_tokens, stop, seed), key))
    def compute(start: int, end: int) -> list[dict]:
        chunk = jobs[start:end]
        outputs = backend.sample([req for _, _, req, _ in chunk])
        return [{"candidates": [{
            "candidate_id": candidate_id(q["query_id"], name, k), "query_id": q["query_id"], "persona": name,
            "candidate_index": k, "model": backend.model_name,
            "sampling": {"temperature": req.temperature, "top_p": req.top_p, "max_tokens": req.max_tokens,
                         "seed": req.seed, "seed_scope": c.seed_scope, "prompt_style": params.prompt_style,
                         "stop": list(req.stop)},
            "text": c.text, "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "finish_reason": c.finish_reason, "thinking_removed": c.thinking_removed}
            for k, c in enumerate(completions)]} for (q, name, req, _), completions in zip(chunk, outputs)]

    done = run_journaled([key for *_, key in jobs], compute, journal, chunk_size, "generate",
                         params.num_agents_per_query, stats)
    return [c for *_, key in jobs for c in done[key]["candidates"]]


def generation_queries(queries: list[dict], generate, heldout) -> tuple[list[dict], int]:
    """The queries that get candidates, and how many were skipped: all of them, or with `generate.skip_heldout`
    those whose conversation is not held out (no stage pairs a held-out query; judging its candidates is waste)."""
    if not generate.skip_heldout:
        return queries, 0

    kept = [q for q in queries if not is_held_out(q, heldout)]
    return kept, len(queries) - len(kept)


