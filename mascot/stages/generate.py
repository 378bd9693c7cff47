"""The `generate` stage: queries x personas -> candidate replies."""
from __future__ import annotations

from collections import Counter
from statistics import fmean

from mascot.annotate.generate import generate_candidates, generation_queries
from mascot.config import Params
from mascot.data.personas import load_personas, resolve_persona
from mascot.io import load_jsonl, write_json, write_jsonl
from mascot.llm.factory import make_backend
from mascot.resume import Journal


def main(params: Params, *, queries_path: str, candidates_path: str, figures_path: str) -> None:
    queries, skipped = generation_queries(load_jsonl(queries_path), params.generate, params.heldout)
    personas = load_personas(params.prepare.personas_file)
    for i, q in enumerate(queries, start=1):  # before any model loads: bad input fails fast
        for name in q.get("personas", []):
            resolve_persona(personas, name, f"{queries_path}:{i}")
    backend = make_backend(params.llm.speaker, "llm.speaker")
    journal, stats = Journal("generate"), {}
    # a chunk fills one in-process batch (n samples of a request are in the same chunk); at least 8 requests
    chunk = max(8, params.llm.speaker.batch_size // params.generate.num_agents_per_query)
    try:
        candidates = generate_candidates(queries, personas, params.generate, backend, journal, chunk_size=chunk,
                                         stats=stats)
    finally:
        journal.close()
        backend.close()
    write_jsonl(candidates_path, candidates)
    counted = [c["completion_tokens"] for c in candidates if c["completion_tokens"] is not None]
    write_json(figures_path, {
        "candidates": len(candidates), "resumed_groups": stats["reused"], "heldout_queries_skipped": skipped,
        "empty_texts": sum(not c["text"].strip() for c in candidates),
        "mean_completion_tokens": round(fmean(counted), 2) if counted else None,
        "mean_reply_words": round(fmean(len(c["text"].split()) for c in candidates), 2) if candidates else None,
        "thinking_removed": sum(bool(c.get("thinking_removed")) for c in candidates),
        "finish_reasons": dict(Counter(c["finish_reason"] for c in candidates))})
    print(f"generate: {len(candidates)} candidates -> {candidates_path}")
