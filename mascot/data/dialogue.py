"""The common shape every corpus loader produces."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Turn:
    role: str  # "user" (the person seeking support) or "assistant" (the supporter)
    content: str
    speaker: str | None = None  # the original speaker label, when the corpus has one
    # the user's own 1-5 rating of the assistant turn(s) just before this one (ESConv annotation.feedback)
    rating: int | None = None


@dataclass
class Dialogue:
    id: str
    source: str
    turns: list[Turn]
    metadata: dict = field(default_factory=dict)


def merge_consecutive(turns: list[Turn]) -> list[Turn]:
    """Corpora often split one message over several turns by the same role: join them."""
    merged: list[Turn] = []
    for turn in turns:
        text = " ".join(turn.content.split())  # stray newlines and doubled spaces are common
        if not text:
            continue
        if merged and merged[-1].role == turn.role and merged[-1].speaker == turn.speaker:
            # a rating rates what came before the user's run of turns: the run's first rating keeps it
            rating = merged[-1].rating if merged[-1].rating is not None else turn.rating
            merged[-1] = Turn(turn.role, merged[-1].content + " " + text, turn.speaker, rating)
        else:
            merged.append(Turn(turn.role, text, turn.speaker, turn.rating))
    return merged
