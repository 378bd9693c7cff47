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


# ---- stage 2: blocks of group turns ----------------------------------------------------------------------
ECHO_LEADS = ("Like {name} said, ", "I agree with {name}: ", "Yes, exactly what {name} said: ")
BLOCK_VARIANTS = ("reference", "echo", "off_topic", "redundant", "reference_padded")


def _block_cut(d: Dialogue, rng: random.Random, turns: int, min_chars: int) -> int | None:
    """A user turn with history, followed by `turns` turns that open with a supporter turn and hold at least
    two of them (one to echo another)."""
    cuts = [i for i in range(1, len(d.turns) - turns)
            if d.turns[i].role == "user" and d.turns[i + 1].role == "assistant"
            and sum(t.role == "assistant" and len(t.content) >= min_chars for t in d.turns[i + 1: i + 1 + turns]) >= 2]
    return rng.choice(cuts) if cuts else None


def _as_block(turns, names: list[str], offset: int) -> list[dict]:
    """Corpus turns as a group block: the supporter's turns spoken by the companions in turn."""
    out, k = [], offset
    for t in turns:
        if t.role == "user":
            out.append({"role": "user", "content": t.content})
        else:
            out.append({"role": "assistant", "name": names[k % len(names)], "content": t.content})
            k += 1
    return out


def echo_block(block: list[dict]) -> list[dict]:
    """The same speakers, each companion after the first restating the first companion's turn: an echo chamber."""
    agents = [m for m in block if m["role"] == "assistant"]
    first, out, k = agents[0], [], 0
    for m in block:
        if m["role"] == "assistant" and m is not first:
            lead = ECHO_LEADS[k % len(ECHO_LEADS)].format(name=first["name"])
            out.append({**m, "content": lead + first["content"][0].lower() + first["content"][1:]})
            k += 1
        else:
            out.append(dict(m))
    return out


def redundant_block(block: list[dict]) -> list[dict]:
    """The block, then its companions' turns said again: points settled and re-opened."""
    return [dict(m) for m in block] + [dict(m) for m in block if m["role"] == "assistant"]


def relabel(block: list[dict], like: list[dict]) -> list[dict]:
    """`block`'s turns under the speakers of `like` (so that an off-topic block differs in content only)."""
    names = [m["name"] for m in like if m["role"] == "assistant"]
    out, k = [], 0
    for m in block:
        if m["role"] == "assistant":
            out.append({**m, "name": names[k % len(names)]})
            k += 1
        else:
            out.append(dict(m))
    return out


SURVEY_KEYS = ("empathy", "relevance", "emotion_drop")  # what the seeker said of the whole conversation


def build_block_reference_set(dialogues: list[Dialogue], persona_names: list[str], budget: int, count: CountTokens,
                              items: int, turns: int = 3, seed: int = 0, exclude: set[str] = frozenset(),
                              min_chars: int = 20, survey_items: int = 0) -> list[dict]:
    """The collective judge's reference set: items `{item_id, source, kind, context, blocks: {variant: turns}}`.
    REFERENCE is the human supporter's actual next `turns` turns of an ESConv-like conversation, as a block of
    the companions; ECHO the same turns, each companion restating the first; OFF_TOPIC the next item's turns,
    from another conversation; REDUNDANT the reference with its companion turns said twice; REFERENCE_PADDED
    the length probe (a neutral sentence after each companion turn). Dialogues in `exclude` (the queries')
    are used only if too few others remain."""
    rng = random.Random(seed)
    convs = sorted((d for d in dialogues if d.source != "qmsum"), key=lambda d: (d.id in exclude, rng.random()))
    out: list[dict] = []
    for d in convs:
        if len(out) >= items:
            break
        cut = _block_cut(d, rng, turns, min_chars)
        if cut is None:
            continue
        block = _as_block(d.turns[cut + 1: cut + 1 + turns], persona_names, len(out))
        out.append({"item_id": f"block-{d.id}@{cut}", "source": d.source, "kind": "dialogue",
                    "conversation_id": d.metadata.get("conversation_id", d.id), "survey": d.metadata.get("survey_score"),
                    "context": context_window(d.turns[: cut + 1], budget, count), "blocks": {"reference": block}})
    for k, item in enumerate(out):
        ref = item["blocks"]["reference"]
        item["blocks"]["echo"] = echo_block(ref)
        if len(out) > 1:
            item["blocks"]["off_topic"] = relabel(out[(k + 1) % len(out)]["blocks"]["reference"], ref)
        item["blocks"]["redundant"] = redundant_block(ref)
        item["blocks"]["reference_padded"] = [{**m, "content": f"{m['content']} {NEUTRAL_SENTENCE}"}
                                              if m["role"] == "assistant" else dict(m) for m in ref]
    return out + survey_set(convs, {i["conversation_id"] for i in out}, persona_names, budget, count, survey_items,
                            turns, rng, min_chars, exclude)


def survey_set(convs: list[Dialogue], taken: set[str], persona_names: list[str], budget: int, count: CountTokens,
               limit: int, turns: int, rng: random.Random, min_chars: int, exclude: set[str]) -> list[dict]:
    """`limit` more items (kind `survey`) from conversations that carry the seeker's survey and are neither
    reference items nor the queries' (`exclude`): each its human block alone, what the judge and the group reward
    model are held to the survey on. The queries' conversations are never taken: a group reward model trains on
    their episodes."""
    out: list[dict] = []
    for d in convs:
        if len(out) >= limit:
            break
        conv = d.metadata.get("conversation_id", d.id)
        survey = d.metadata.get("survey_score") or {}
        if conv in taken or d.id in exclude or not any(k in survey for k in SURVEY_KEYS):
            continue
        cut = _block_cut(d, rng, turns, min_chars)
        if cut is None:
            continue
        out.append({"item_id": f"survey-{d.id}@{cut}", "source": d.source, "kind": "survey",
                    "conversation_id": conv, "survey": survey,
                    "context": context_window(d.turns[: cut + 1], budget, count),
                    "blocks": {"reference": _as_block(d.turns[cut + 1: cut + 1 + turns], persona_names, 0)}})
    return out
