"""The `episodes` stage: branching group episodes, a Director choosing who speaks next."""
from __future__ import annotations

from mascot.annotate.episodes import (LLMDirector, ScriptedDirector, director_sampling, episode_metrics,
                                      episode_queries, free_parse_rate, generate_episodes)
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.io import load_jsonl, write_json, write_jsonl
from mascot.llm.factory import make_backend
from mascot.resume import Journal


def main(params: Params, *, queries_path: str, episodes_path: str, figures_path: str) -> None:
    p = params.episodes
    queries = episode_queries(load_jsonl(queries_path), p.max_queries, p.seed, params.heldout)
    personas = load_personas(params.prepare.personas_file)
    speaker = make_backend(params.llm.speaker, "llm.speaker")
    director_backend = (make_backend(params.llm.director, "llm.director") if params.llm.director else speaker)
    director = (LLMDirector(director_backend, personas, p.director_style, director_sampling(p),
                            constrained=p.constrain_directives) if p.director == "llm"
                else ScriptedDirector(personas, p.director, p.seed))
    journal, stats = Journal("episodes"), {}
    chunk = max(1, params.llm.speaker.batch_size // p.branches)  # one rollout batch holds a chunk's branches
    unconstrained = None
    try:
        episodes = generate_episodes(queries, personas, p, director, speaker, journal, chunk_size=chunk, stats=stats)
        if p.director == "llm" and p.constrain_directives and p.measure_unconstrained:
            # the same branch-point prompts and seeds, sampled freely: what the grammar is doing for this model
            unconstrained = free_parse_rate(director, queries, p.branches, turns=-1)
    finally:
        journal.close()
        speaker.close()
        director_backend.close()
    write_jsonl(episodes_path, episodes)
    m = {**episode_metrics(episodes), "resumed_prefixes": stats["reused"],
         "directives_constrained": p.director == "llm" and p.constrain_directives}
    if unconstrained:
        m.update(directive_parse_rate_unconstrained=unconstrained["parse_rate"],
                 unconstrained_invalid_reasons=unconstrained["invalid_reasons"],
                 unconstrained_directives=unconstrained["directives"])
    write_json(figures_path, m)
    print(f"episodes: {m['episodes']} branches of {m['prefixes']} prefixes ({m['valid_branches']} valid, "
          f"{m['invalid_branches']} invalid: {m['invalid_reasons']}), directive parse rate {m['directive_parse_rate']}"
          + (" under the directive grammar" if m["directives_constrained"] else "")
          + (f"; sampled freely at the branch points: {unconstrained['parse_rate']} of {unconstrained['directives']} "
             f"({unconstrained['invalid_reasons'] or 'all parse'})" if unconstrained else "") + f" -> {episodes_path}")
