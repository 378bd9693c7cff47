"""Which queries each stage may use: one rule, stated once.

A split is drawn per conversation, never per query: `prepare` cuts several queries from one ESConv conversation
(`queries_per_dialogue`) and several questions from one QMSum meeting, and siblings share most of their turns,
so a model trained on one would be measured on what it has read. Every conversation's role is a pure function of
its id and a seed (a hash), so adding or removing other queries never moves one, and no stage ever measures a
model on a conversation it, or the model it optimised, was trained on:

- held out (`heldout.fraction` of the conversations, by `heldout.seed`, or every conversation of a source marked
  `heldout: true`, e.g. a corpus's own validation split): never paired, never given episodes, never trained on by
  any model. `evaluate` and `evaluate_group` use only these.
- the rest are split by `pairs.eval_fraction` / `group_pairs.eval_fraction` (by `split_seed`): `train` pairs
  train a reward model; `eval` pairs measure it (promote's gate), and their queries are the speaker's GRPO
  prompts (the reward model never trained on them). The Director's GRPO trains on the episodes' prefixes.
"""
from __future__ import annotations

import hashlib

from mascot.io import InputError


def conversation_of(query: dict) -> str:
    """The conversation a query was cut from: `conversation_id` (prepare writes it; a QMSum meeting is one), else
    the dialogue's id (query files written before conversation ids), else the query's own id."""
    return query.get("conversation_id") or query.get("dialogue_id") or query["query_id"]


def _unit(tag: str, seed: int, conversation_id: str) -> float:
    """A conversation's place in [0, 1) for one purpose: the same id and seed give the same place, whatever else
    exists."""
    return int(hashlib.sha256(f"{tag}{seed}:{conversation_id}".encode()).hexdigest()[:12], 16) / 16**12


def is_held_out(query: dict, heldout) -> bool:
    """`query`: a query record (its conversation decides; a record whose source decides its split carries
    `heldout`: prepare.sources[].heldout); `heldout`: the params block (fraction, seed)."""
    if query.get("heldout") is not None:
        return bool(query["heldout"])
    return _unit("heldout:", heldout.seed, conversation_of(query)) < heldout.fraction


def split_of(queries: list[dict], eval_fraction: float, seed: int) -> dict[str, str]:
    """"eval" or "train" for each query id, from its conversation's id and the seed alone (no fallbacks that depend
    on which other ids are present: a stage with too few queries to fill both says so itself)."""
    return {q["query_id"]: "eval" if _unit("", seed, conversation_of(q)) < eval_fraction else "train"
            for q in sorted(queries, key=lambda q: q["query_id"])}


def role_of(record: dict, heldout, eval_fraction: float, seed: int) -> str:
    """"heldout", "eval" or "train": what any record of a conversation (a query, a rated turn) is for, by the two
    rules above."""
    if is_held_out(record, heldout):
        return "heldout"
    return "eval" if _unit("", seed, conversation_of(record)) < eval_fraction else "train"


def held_out(queries: list[dict], heldout, limit: int | None = None) -> list[dict]:
    """The held-out queries, in id order, the first `limit`; an empty set is an error that says what to change."""
    rest = sorted((q for q in queries if is_held_out(q, heldout)), key=lambda q: q["query_id"])
    if not rest:
        raise InputError(f"none of the {len(queries)} queries is held out (heldout.fraction {heldout.fraction}); raise "
                         "heldout.fraction or add queries: evaluation never uses a query a model was trained on")
    return rest[:limit] if limit else rest


def split_counts(queries: list[dict], heldout) -> dict:
    """Queries and conversations held out and not: what `prepare` reports, so that a split too small for later
    stages shows before any of them runs."""
    held = [q for q in queries if is_held_out(q, heldout)]
    rest = [q for q in queries if not is_held_out(q, heldout)]
    return {"heldout_queries": len(held), "heldout_conversations": len({conversation_of(q) for q in held}),
            "trainable_queries": len(rest), "trainable_conversations": len({conversation_of(q) for q in rest})}
