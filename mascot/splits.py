"""Which queries each stage may use: one rule, stated once.

Every query's role is a pure function of its id and a seed (a hash), so adding or removing other queries never
moves one, and no stage ever measures a model on what it, or the model it optimised, was trained on:

- held out (`heldout.fraction` of the queries, by `heldout.seed`): never paired, never given episodes, never
  trained on by any model. `evaluate` and `evaluate_group` use only these.
- the rest are split by `pairs.eval_fraction` / `group_pairs.eval_fraction` (by `split_seed`): `train` pairs
  train a reward model; `eval` pairs measure it (promote's gate), and their queries are the speaker's GRPO
  prompts (the reward model never trained on them). The Director's GRPO trains on the episodes' prefixes.
"""
from __future__ import annotations

import hashlib


def _unit(tag: str, seed: int, query_id: str) -> float:
    """A query's place in [0, 1) for one purpose: the same id and seed give the same place, whatever else exists."""
    return int(hashlib.sha256(f"{tag}{seed}:{query_id}".encode()).hexdigest()[:12], 16) / 16**12


def is_held_out(query_id: str, heldout) -> bool:
    """`heldout`: the params block (fraction, seed)."""
    return _unit("heldout:", heldout.seed, query_id) < heldout.fraction


def split_of(query_ids, eval_fraction: float, seed: int) -> dict[str, str]:
    """"eval" or "train" for each query, from its id and the seed alone (no fallbacks that depend on which other
    ids are present: a stage with too few queries to fill both says so itself)."""
    return {q: "eval" if _unit("", seed, q) < eval_fraction else "train" for q in sorted(set(query_ids))}


def held_out(queries: list[dict], heldout, limit: int | None = None) -> list[dict]:
    """The held-out queries, in id order, the first `limit`; an empty set is an error that says what to change."""
    rest = sorted((q for q in queries if is_held_out(q["query_id"], heldout)), key=lambda q: q["query_id"])
    if not rest:
        raise ValueError(f"none of the {len(queries)} queries is held out (heldout.fraction {heldout.fraction}); raise "
                         "heldout.fraction or add queries: evaluation never uses a query a model was trained on")
    return rest[:limit] if limit else rest
