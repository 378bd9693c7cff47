"""The judge's fixed reference set, built from the corpus itself.

Dialogue corpora (ESConv and the like): a context ending in the seeker's turn, with three replies: the
human supporter's actual next turn (reference), a supporter turn from another conversation (off_topic) and
a cold or generic reply from a fixed list (cold). QMSum: the framed meeting question with its gold answer
(reference) against another meeting's answer (off_topic). A length probe repeats each dialogue reference
with a neutral sentence appended (reference_padded): a judge that scores it higher rewards length.
"""
from __future__ import annotations

import random

from mascot.data.dialogue import Dialogue
from mascot.data.queries import CountTokens, context_window, meeting_window

COLD_REPLIES = [
    "Ok.",
    "I see.",
    "That's not really my problem.",
    "You'll get over it.",
    "Whatever works for you.",
    "Can we talk about something else?",
    "Just stop worrying about it.",
    "Noted. Anything else?",
]
NEUTRAL_SENTENCE = "This is my reply to your message."
REPLY_TYPES = ("reference", "off_topic", "cold", "reference_padded")


def _dialogue_cut(d: Dialogue, rng: random.Random, min_reply_chars: int) -> int | None:
    """A user turn with history, followed by a real supporter reply."""
    cuts = [i for i in range(1, len(d.turns) - 1)
            if d.turns[i].role == "user" and d.turns[i + 1].role == "assistant"
            and len(d.turns[i + 1].content) >= min_reply_chars]
    return rng.choice(cuts) if cuts else None


def build_reference_set(dialogues: list[Dialogue], persona_names: list[str], budget: int, count: CountTokens,
                        dialogue_items: int, qa_items: int, seed: int = 0, exclude: set[str] = frozenset(),
                        min_reply_chars: int = 20) -> list[dict]:
    """Items `{item_id, source, kind, persona, context, replies: {type: text}}`; dialogues in `exclude`
    (those the queries came from) are used only if too few others remain."""
    rng = random.Random(seed)
    convs = [d for d in dialogues if d.source != "qmsum"]
    convs = sorted(convs, key=lambda d: (d.id in exclude, rng.random()))
    items: list[dict] = []
    for d in convs:
        if len(items) >= dialogue_items:
            break
        cut = _dialogue_cut(d, rng, min_reply_chars)
        if cut is None:
            continue
        items.append({"item_id": f"ref-{d.id}@{cut}", "source": d.source, "kind": "dialogue",
                      "context": context_window(d.turns[: cut + 1], budget, count),
                      "reference": d.turns[cut + 1].content})
    meetings = [d for d in dialogues if d.source == "qmsum" and d.metadata.get("answer")]
    rng.shuffle(meetings)
    qa: list[dict] = []
    for d in meetings:
        if len(qa) >= qa_items:
            break
        text = meeting_window(d.metadata["transcript"], d.metadata["focus_turns"], d.turns[-1].content, budget, count)
        qa.append({"item_id": f"ref-{d.id}", "source": d.source, "kind": "qa", "meeting": d.metadata["meeting_line"],
                   "context": [{"role": "user", "content": text}], "reference": d.metadata["answer"]})
    for group in (items, qa):
        for k, item in enumerate(group):
            # off-topic: the next item's reference, from another conversation (or another meeting for QA)
            others = [o for o in group[k + 1:] + group[:k] if o.get("meeting") is None or o["meeting"] != item.get("meeting")]
            replies = {"reference": item.pop("reference")}
            item["_off"] = others[0] if others else None
            item["replies"] = replies
    for group in (items, qa):
        for k, item in enumerate(group):
            other = item.pop("_off")
            if other is not None:
                item["replies"]["off_topic"] = other["replies"]["reference"]
            if item["kind"] == "dialogue":
                item["replies"]["cold"] = COLD_REPLIES[k % len(COLD_REPLIES)]
                item["replies"]["reference_padded"] = f"{item['replies']['reference']} {NEUTRAL_SENTENCE}"
            item.pop("meeting", None)
    out = items + qa
    for k, item in enumerate(out):
        item["persona"] = persona_names[k % len(persona_names)]
    return out


def as_candidates(items: list[dict]) -> tuple[list[dict], dict[str, dict]]:
    """The items as candidate and query records, so that they are scored by the same code as candidates."""
    candidates, queries = [], {}
    for item in items:
        queries[item["item_id"]] = {"query_id": item["item_id"], "context": item["context"], "source": item["source"]}
        for k, (reply_type, text) in enumerate(item["replies"].items()):
            candidates.append({"candidate_id": f"{item['item_id']}|{reply_type}", "query_id": item["item_id"],
                               "persona": item["persona"], "candidate_index": k, "reply_type": reply_type,
                               "kind": item["kind"], "text": text})
    return candidates, queries
