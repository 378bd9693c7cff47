"""Programmatic judges for the pipeline's controls (score.scorer: {kind: function, target: ...}).

A chain that is given a preference must recover it, and a chain given noise must say it found nothing
(docs/controls.md). These are the two judges that make those chains:

- `planted_feature`: every dimension is `high` when the unit's text matches `pattern` (a regular
  expression) and `low` when it does not. A pattern the base policy matches sometimes, not always, gives
  pairs that carry the feature, a reward model that can learn it and a policy that can move towards it.
- `planted_feature_and_length`: the planted feature and length both pay (the length control): every dimension
  is `low` plus `feature` when the text matches `pattern`, plus `per_word` for each word, held in [1, 5]. A chain
  without levers against length learns both and its policy grows; with them, the feature must still rise and
  the length must not.
- `planted_speaker` (stage 2, as score_group.scorer): every dimension is `high` when the unit is given to
  `persona` (a block whose first companion turn is the persona's: the one the Director chose; a reply written
  as the persona) and `low` otherwise. A Director acts on it through its directive's agent, which a base
  Director names sometimes, not always.
- `seeded_noise`: every dimension is a number drawn uniformly from [1, 5], seeded by the unit's text, the
  dimension and `seed`: the same text always gets the same scores (a resumed or repeated judge agrees with
  itself), and nothing about the text predicts them.
"""
from __future__ import annotations

import hashlib
import re
from functools import lru_cache


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def planted_feature(subject: dict, rubric, pattern: str, high: float = 5.0, low: float = 1.0) -> dict[str, float]:
    score = high if _compiled(pattern).search(subject["text"]) else low
    return {d: score for d in rubric.dimensions}


def planted_feature_and_length(subject: dict, rubric, pattern: str, feature: float = 2.0, per_word: float = 0.2,
                               low: float = 1.0) -> dict[str, float]:
    score = low + (feature if _compiled(pattern).search(subject["text"]) else 0.0) + per_word * len(subject["text"].split())
    return {d: round(min(5.0, max(1.0, score)), 4) for d in rubric.dimensions}


def first_speaker(subject: dict) -> str | None:
    """Who the unit is given to: its block's first companion turn's speaker, else (a reply) its persona."""
    return next((m.get("name") for m in subject.get("block") or [] if m["role"] == "assistant"),
                subject.get("persona"))


def planted_speaker(subject: dict, rubric, persona: str, high: float = 5.0, low: float = 1.0) -> dict[str, float]:
    score = high if first_speaker(subject) == persona else low
    return {d: score for d in rubric.dimensions}


def seeded_noise(subject: dict, rubric, seed: int = 0) -> dict[str, float]:
    out = {}
    for d in rubric.dimensions:
        digest = hashlib.sha256(f"{seed}\0{d}\0{subject['text']}".encode()).digest()
        out[d] = round(1.0 + 4.0 * int.from_bytes(digest[:8], "big") / 2**64, 4)
    return out


def planted_pattern(scorer) -> str | None:
    """The planted feature's pattern when `scorer` (score.scorer) is one of the controls' planted judges."""
    if scorer.kind == "function" and scorer.target and scorer.target.startswith("mascot.annotate.controls:planted"):
        return scorer.kwargs.get("pattern")
    return None


def planted_persona(scorer) -> str | None:
    """The persona a stage-2 control's judge plants (`planted_speaker`), when `scorer` is that judge."""
    if scorer is not None and scorer.kind == "function" and scorer.target == "mascot.annotate.controls:planted_speaker":
        return scorer.kwargs.get("persona")
    return None


def feature_rate(texts: list[str], pattern: str) -> float | None:
    """The share of `texts` that carry the planted feature (None for no texts)."""
    return round(sum(bool(_compiled(pattern).search(t)) for t in texts) / len(texts), 4) if texts else None
