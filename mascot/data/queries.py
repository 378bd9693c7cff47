"""Dialogue -> queries: the last turns within a token budget, ending in the user's message."""
from __future__ import annotations

import hashlib
import random
from typing import Callable

from mascot.data.dialogue import Dialogue, Turn

CountTokens = Callable[[str], int]


def _trim_left(text: str, budget: int, count: CountTokens) -> str:
    """Keep the end of a too-long message (its last words matter most for a reply)."""
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:  # smallest cut that fits
        mid = (lo + hi) // 2
        if count(" ".join(words[mid:])) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return ("… " if lo else "") + " ".join(words[lo:])


def context_window(turns: list[Turn], budget: int, count: CountTokens) -> list[dict]:
    """The longest suffix of `turns` that fits in `budget` tokens; the last turn is always kept (cut if needed)."""
    last = turns[-1]
    kept = [{"role": last.role, "content": _trim_left(last.content, budget, count)}]
    used = count(kept[0]["content"])
    for turn in reversed(turns[:-1]):
        cost = count(turn.content)
        if used + cost > budget:
            break
        kept.append({"role": turn.role, "content": turn.content})
        used += cost
    kept.reverse()
    while kept and kept[0]["role"] != "user":  # a context starts with the user, as chat templates expect
        kept.pop(0)
    return kept


def meeting_window(transcript: list[Turn], focus: list[int], question: str, budget: int,
                   count: CountTokens) -> str:
    """Transcript turns around the query's relevant span, grown outward while they fit the budget."""
    remaining = budget - count(QMSUM_FRAME.format(excerpt="", question=question))
    center = sorted(focus)[len(focus) // 2] if focus else 0
    lines: dict[int, str] = {}
    lo, hi = center, center - 1
    while remaining > 0 and (lo > 0 or hi < len(transcript) - 1):
        # alternate: after, before (a span's own turns come first)
        for idx in ((hi + 1,) if hi < len(transcript) - 1 else ()) + ((lo - 1,) if lo > 0 and lines else ()):
            line = f"{transcript[idx].speaker}: {transcript[idx].content}"
            cost = count(line)
            if cost > remaining:
                remaining = 0
                break
            lines[idx] = line
            remaining -= cost
            hi, lo = max(hi, idx), min(lo, idx)
    excerpt = "\n".join(lines[i] for i in sorted(lines))
    return QMSUM_FRAME.format(excerpt=excerpt, question=question)


# A meeting question framed as a person asking a companion for help with a meeting they were in: the
# speaker has a situation to respond to (and feelings to read), not only a summarisation task.
QMSUM_FRAME = ("I was in this meeting and I'm trying to get my head around it before I talk to my team. "
               "Here is the part that matters:\n{excerpt}\n\n{question} I'd appreciate your help with this.")


def cut_points(dialogue: Dialogue, per_dialogue: int, min_user_chars: int) -> list[int]:
    """Indices of user turns to end queries at: spread over the dialogue, later ones first."""
    users = [i for i, t in enumerate(dialogue.turns) if t.role == "user" and len(t.content) >= min_user_chars]
    with_history = [i for i in users if i > 0] or users
    if len(with_history) <= per_dialogue:
        return with_history
    step = len(with_history) / per_dialogue
    return sorted({with_history[len(with_history) - 1 - int(k * step)] for k in range(per_dialogue)})


def _split_mark(d: Dialogue) -> dict:
    """`heldout` where the dialogue's source decides its split (prepare.sources[].heldout), else nothing."""
    return {"heldout": d.metadata["heldout"]} if "heldout" in d.metadata else {}


def build_queries(dialogues: list[Dialogue], persona_names: list[str], budget: int, count: CountTokens,
                  per_dialogue: int = 1, personas_per_query: int = 1, max_queries: int | None = None,
                  min_user_chars: int = 2, seed: int = 0) -> list[dict]:
    queries = []
    for d in dialogues:
        if d.source == "qmsum":
            meta = {k: v for k, v in d.metadata.items() if k not in ("transcript", "focus_turns", "answer", "conversation_id")}
            text = meeting_window(d.metadata["transcript"], d.metadata["focus_turns"], d.turns[-1].content,
                                  budget, count)
            queries.append({"query_id": d.id, "source": d.source, "dialogue_id": d.id,
                            "conversation_id": d.metadata.get("conversation_id", d.id), **_split_mark(d),
                            "context": [{"role": "user", "content": text}], "metadata": meta})
            continue
        for end in cut_points(d, per_dialogue, min_user_chars):
            context = context_window(d.turns[: end + 1], budget, count)
            queries.append({"query_id": f"{d.id}@{end}", "source": d.source, "dialogue_id": d.id,
                            "conversation_id": d.metadata.get("conversation_id", d.id), **_split_mark(d),
                            "context": context, "metadata": {**d.metadata, "turn_index": end}})
    return sample_queries(queries, persona_names, personas_per_query, max_queries, seed)


def sample_queries(queries: list[dict], persona_names: list[str], personas_per_query: int = 1,
                   max_queries: int | None = None, seed: int = 0) -> list[dict]:
    """A seeded sample of at most `max_queries`, sorted by id, each given its personas."""
    queries = list(queries)
    rng = random.Random(seed)
    rng.shuffle(queries)
    if max_queries is not None:
        queries = queries[:max_queries]
    queries.sort(key=lambda q: q["query_id"])
    # Personas rotate from a per-query offset, so that each persona sees every kind of query.
    k = min(personas_per_query, len(persona_names))
    for i, q in enumerate(queries):
        offset = (i + int(hashlib.sha1(f"{seed}".encode()).hexdigest(), 16)) % len(persona_names)
        q["personas"] = [persona_names[(offset + j) % len(persona_names)] for j in range(k)]
    return queries
