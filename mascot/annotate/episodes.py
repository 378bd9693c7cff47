"""Branching group conversations for stage 2 (the `episodes` stage: mascot/stages/episodes.py).

For each query (its dialogue is the shared prefix), the Director samples K directives at the branch point:
K branches. Each branch then rolls forward N agent turns (a directive, then the named speaker's reply under
it; optionally a simulated user turn between agent turns). A directive that does not parse ends its branch,
which is recorded as invalid with the raw text and the reason.

`roll_forward` is the one rollout engine: the episodes stage, the Director's GRPO reward and the group
evaluation all call it, with different directors. Records are journaled per query and chunks are fixed, as
in `generate`, so a run resumed after a crash writes exactly what a clean run would.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
import hashlib
from pathlib import Path
import random
from statistics import fmean

from mascot.annotate.director import (DirectiveError, GENERIC_ACTION, GENERIC_TONE, clean_turn, directive_pattern,
                                      directive_text, director_prompt, parse_directive, speaker_prompt_under,
                                      user_prompt)
import mascot.annotate.director as director_module
from mascot.annotate.generate import request_seed
from mascot.config import EpisodesParams
from mascot.data.personas import Persona
from mascot.llm.backend import Completion, SampleRequest
from mascot.resume import Journal, fingerprint, run_journaled
from mascot.splits import is_held_out


def _code_hash() -> str:
    """The rollout's prompts and parser are code: a journaled branch made by other code is not reused."""
    return hashlib.sha256(Path(director_module.__file__).read_bytes() + Path(__file__).read_bytes()).hexdigest()[:12]


@dataclass
class Branch:
    query_id: str
    branch: int
    context: list[dict]  # the shared prefix: the corpus dialogue up to the person's message
    turns: list[dict] = field(default_factory=list)
    invalid_reason: str | None = None
    invalid_raw: str | None = None

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None

    @property
    def agent_turns(self) -> int:
        return sum(t["role"] == "agent" for t in self.turns)

    @property
    def last_speaker(self) -> str | None:
        return next((t["speaker"] for t in reversed(self.turns) if t["role"] == "agent"), None)

    def seed(self, base: int, what: str) -> int:
        return request_seed(base, f"{self.query_id}|b{self.branch}", f"t{self.agent_turns}|{what}")


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.9
    top_p: float = 0.95
    max_tokens: int = 48
    seed: int = 0


class LLMDirector:
    """A language model writes each directive (an instruct model in chat style, or a base/GRPO model in
    transcript style). `constrained`: decoded under the directive's grammar, so that it parses and names a
    known agent by construction. `prefill`: a chat prompt ends in "Agent:" (a GRPO-trained chat Director was
    trained without it; a transcript prompt always has it)."""

    def __init__(self, backend, personas: dict[str, Persona], style: str, sampling: Sampling,
                 constrained: bool = False, prefill: bool = True):
        self.backend, self.personas, self.style, self.sampling = backend, personas, style, sampling
        self.constrained, self.prefill = constrained, prefill or style == "transcript"
        self.name, self.identity = backend.model_name, backend.identity

    def settings(self) -> dict:
        return {**self.sampling.__dict__, "style": self.style, "constrained": self.constrained,
                "prefill": self.prefill}

    def propose(self, branches: list[Branch], n: int = 1) -> list[list[str]]:
        regex = directive_pattern(list(self.personas), self.prefill) if self.constrained else None
        reqs = []
        for b in branches:
            prompt, stop = director_prompt(self.personas, b.context, b.turns, self.style, self.prefill)
            s = self.sampling
            reqs.append(SampleRequest(prompt, n, s.temperature, s.top_p, s.max_tokens, stop, b.seed(s.seed, "director"),
                                      regex))
        return [[directive_text(c.text, self.prefill) for c in group] for group in self.backend.sample(reqs)]


def reason_kind(reason: str) -> str:
    """A directive's failure, in the two kinds the metrics count."""
    return "unknown agent" if "unknown agent" in reason else "missing field"


def parse_rate(raws: list[str], names: list[str]) -> dict:
    """How many raw directives parse, and why the others do not."""
    reasons = Counter()
    for raw in raws:
        try:
            parse_directive(raw, names)
        except DirectiveError as exc:
            reasons[reason_kind(str(exc))] += 1
    return {"directives": len(raws), "parse_rate": round(1 - sum(reasons.values()) / len(raws), 4) if raws else None,
            "invalid_reasons": dict(reasons)}


def free_parse_rate(director: LLMDirector, queries: list[dict], n: int, turns: int,
                    temperature: float | None = None) -> dict:
    """The Director's prompt at each query's `turns`, sampled `n` times without the directive grammar (at
    `temperature`, else its own): how often it keeps the format on its own, why not, and the rate per query
    ("by_query", for a paired comparison). Each directive is parsed once."""
    sampling = director.sampling if temperature is None else replace(director.sampling, temperature=temperature)
    free = LLMDirector(director.backend, director.personas, director.style, sampling, prefill=director.prefill)
    raws = free.propose([Branch(q["query_id"], turns, q["context"]) for q in queries], n=n)
    per_query = [parse_rate(group, list(director.personas)) for group in raws]
    reasons, total = Counter(), sum(r["directives"] for r in per_query)
    for r in per_query:  # in the order the flat count meets them
        reasons.update(r["invalid_reasons"])
    return {"directives": total, "parse_rate": round(1 - sum(reasons.values()) / total, 4) if total else None,
            "invalid_reasons": dict(reasons),
            "by_query": {q["query_id"]: r["parse_rate"] for q, r in zip(queries, per_query)}}


class ScriptedDirector:
    """The ablations: a random speaking order, or a fixed round-robin, with a generic directive."""

    def __init__(self, personas: dict[str, Persona], order: str, seed: int = 0):
        if order not in ("random", "round_robin"):
            raise ValueError(f"unknown speaking order '{order}' (random or round_robin)")
        self.names, self.order, self.seed = list(personas), order, seed
        self.name = self.identity = order

    def settings(self) -> dict:
        return {"order": self.order, "seed": self.seed, "action": GENERIC_ACTION, "tone": GENERIC_TONE}

    def propose(self, branches: list[Branch], n: int = 1) -> list[list[str]]:
        out = []
        for b in branches:
            picks = []
            for k in range(n):
                if self.order == "round_robin":
                    start = int(hashlib.sha1(b.query_id.encode()).hexdigest(), 16) % len(self.names)
                    name = self.names[(start + b.agent_turns + k) % len(self.names)]
                else:
                    name = random.Random(b.seed(self.seed, f"random{k}")).choice(self.names)
                picks.append(f"Agent: {name}\nAction: {GENERIC_ACTION}\nTone: {GENERIC_TONE}")
            out.append(picks)
        return out


class DirectorPerBranch:
    """Several directors in one rollout, each proposing for its own branches: the speakers' turns of every
    director's branches then decode in one batch (evaluate_group rolls its conditions forward together)."""

    def __init__(self, director_of: dict[int, object]):  # id(branch) -> its director
        self.director_of = director_of

    def propose(self, branches: list[Branch], n: int = 1) -> list[list[str]]:
        out: list[list[str] | None] = [None] * len(branches)
        groups: dict[int, tuple[object, list[int]]] = {}
        for i, b in enumerate(branches):
            director = self.director_of[id(b)]
            groups.setdefault(id(director), (director, []))[1].append(i)
        for director, rows in groups.values():
            for i, group in zip(rows, director.propose([branches[i] for i in rows], n)):
                out[i] = group
        return out


def _turn(role: str, speaker: str | None, c: Completion, names: list[str], **extra) -> dict:
    return {"role": role, "speaker": speaker, **extra, "text": clean_turn(c.text, names),
            "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "finish_reason": c.finish_reason}


def roll_forward(branches: list[Branch], turns: int, director, speaker_backend, personas: dict[str, Persona],
                 sampling: Sampling, user_turns: bool = False, first: list[str] | None = None,
                 progress=None) -> list[Branch]:
    """Add `turns` agent turns to every valid branch, batched across branches turn by turn. `first`: the
    directives of the first of these turns, already written (one per branch). Mutates and returns `branches`."""
    names = list(personas)
    for t in range(turns):
        live = [b for b in branches if b.valid]
        if not live:
            break
        raws = ([first[branches.index(b)] for b in live] if t == 0 and first is not None
                else [group[0] for group in director.propose(live)])
        speaking = []
        for b, raw in zip(live, raws):
            try:
                speaking.append((b, parse_directive(raw, names), raw))
            except DirectiveError as exc:
                b.invalid_reason, b.invalid_raw = f"directive of agent turn {b.agent_turns + 1}: {exc}", raw
        reqs = [SampleRequest(speaker_prompt_under(personas[d.agent], d, b.context, b.turns), 1, sampling.temperature,
                              sampling.top_p, sampling.max_tokens, (), b.seed(sampling.seed, "speaker"))
                for b, d, _ in speaking]
        for (b, d, raw), (c,) in zip(speaking, speaker_backend.sample(reqs) if reqs else []):
            b.turns.append(_turn("agent", d.agent, c, names, directive={**d.as_dict(), "raw": raw}))
        if user_turns and t < turns - 1:
            talking = [b for b, _, _ in speaking]
            reqs = [SampleRequest(user_prompt(b.context, b.turns), 1, sampling.temperature, sampling.top_p,
                                  sampling.max_tokens, (), b.seed(sampling.seed, "user")) for b in talking]
            for b, (c,) in zip(talking, speaker_backend.sample(reqs) if reqs else []):
                b.turns.append(_turn("user", None, c, names))
        if progress:
            progress(len(live))
    return branches


def episode_record(b: Branch, source: str | None, models: dict, sampling: dict) -> dict:
    return {"episode_id": f"{b.query_id}|b{b.branch}", "query_id": b.query_id, "prefix_id": b.query_id,
            "branch": b.branch, "source": source, "valid": b.valid, "invalid_reason": b.invalid_reason,
            "invalid_raw": b.invalid_raw, "turns": b.turns, "models": models, "sampling": sampling}


def episode_queries(queries: list[dict], max_queries: int | None, seed: int, heldout=None) -> list[dict]:
    """The queries that get episodes: those not held out (mascot/splits.py), in a seeded order (sources mixed),
    the first `max_queries`."""
    queries = [q for q in queries if heldout is None or not is_held_out(q, heldout)]
    ranked = sorted(queries, key=lambda q: hashlib.sha256(f"{seed}:{q['query_id']}".encode()).hexdigest())
    return ranked[:max_queries] if max_queries else ranked


def speaker_sampling(p) -> Sampling:
    return Sampling(p.temperature, p.top_p, p.max_tokens, p.seed)


def director_sampling(p) -> Sampling:
    return Sampling(p.director_temperature, p.top_p, p.director_max_tokens, p.seed)


def generate_episodes(queries: list[dict], personas: dict[str, Persona], params: EpisodesParams, director: LLMDirector,
                      speaker_backend, journal: Journal | None = None, chunk_size: int = 4,
                      stats: dict | None = None) -> list[dict]:
    """K branches of N agent turns per query; queries already in `journal` are reused. `params`: EpisodesParams."""
    sampling = speaker_sampling(params)
    models = {"director": director.name, "speaker": speaker_backend.model_name}
    record_sampling = {"speaker": sampling.__dict__, "director": director.settings(),
                       "branches": params.branches, "agent_turns": params.agent_turns, "user_turns": params.user_turns}
    computed_by = {"director": director.identity, "speaker": speaker_backend.identity}
    jobs = [(q, fingerprint(computed_by, record_sampling, q["query_id"], q["context"], sorted(personas), _code_hash()))
            for q in queries]

    def compute(start: int, end: int) -> list[dict]:
        chunk = [q for q, _ in jobs[start:end]]
        prefixes = [Branch(q["query_id"], -1, q["context"]) for q in chunk]
        proposals = director.propose(prefixes, n=params.branches)
        branches = [Branch(q["query_id"], k, q["context"]) for q in chunk for k in range(params.branches)]
        first = [raw for group in proposals for raw in group]
        roll_forward(branches, params.agent_turns, director, speaker_backend, personas, sampling,
                     params.user_turns, first)
        return [{"episodes": [episode_record(b, q.get("source"), models, record_sampling)
                              for b in branches[i * params.branches: (i + 1) * params.branches]]}
                for i, q in enumerate(chunk)]

    done = run_journaled([key for _, key in jobs], compute, journal, chunk_size, "episodes", params.branches, stats)
    return [e for _, key in jobs for e in done[key]["episodes"]]


def episode_metrics(episodes: list[dict]) -> dict:
    valid = [e for e in episodes if e["valid"]]
    agent = [t for e in episodes for t in e["turns"] if t["role"] == "agent"]
    directives = len(agent) + sum(not e["valid"] for e in episodes)
    by_prefix: dict[str, set] = {}
    for e in valid:
        by_prefix.setdefault(e["prefix_id"], set()).update(t["speaker"] for t in e["turns"] if t["role"] == "agent")
    return {"episodes": len(episodes), "prefixes": len({e["prefix_id"] for e in episodes}),
            "valid_branches": len(valid), "invalid_branches": len(episodes) - len(valid),
            "directive_parse_rate": round(len(agent) / directives, 4) if directives else None,
            "invalid_reasons": dict(Counter(reason_kind(e["invalid_reason"])
                                            for e in episodes if not e["valid"])),
            "speaker_usage": dict(Counter(t["speaker"] for t in agent)),
            "mean_speakers_per_prefix": round(fmean(len(s) for s in by_prefix.values()), 3) if by_prefix else None,
            "mean_turn_words": round(fmean(len(t["text"].split()) for t in agent), 2) if agent else None,
            "empty_turns": sum(not t["text"].strip() for e in episodes for t in e["turns"]),
            "finish_reasons": dict(Counter(t["finish_reason"] for e in episodes for t in e["turns"]))}


