"""Stage 1 and stage 2 run the same paradigm (rubric scores -> preference pairs -> gate -> reward model ->
promotion) at two granularities. What differs is data, gathered here: the rubric, the record id and the
fields that make a comparison group (pairs are only ever made within one)."""
from __future__ import annotations

from dataclasses import dataclass

from mascot.annotate.rubric import COLLECTIVE, PERSONA, Rubric


@dataclass(frozen=True)
class Granularity:
    name: str  # what one unit is: "reply" (stage 1) or "block" (stage 2)
    rubric: Rubric
    unit_id: str  # the id field of a unit's records (candidates/episodes, scores)
    group_fields: tuple[str, ...]  # units comparable with each other share these fields


REPLY = Granularity("reply", PERSONA, "candidate_id", ("query_id", "persona"))
BLOCK = Granularity("block", COLLECTIVE, "episode_id", ("prefix_id",))
GRANULARITIES = {g.name: g for g in (REPLY, BLOCK)}
