"""THE reward-model input builder: training, evaluation, promotion and GRPO scoring all call this.

One function decides what a reward model sees, so the text distribution at scoring time is exactly the one
it was trained on. It renders one of two units: a persona's reply (stage 1) or a block of group turns
(stage 2, the reply is a list of turn messages). Both share one cutting rule: a text too long loses the
oldest turns of the conversation before it first, never the reply or the block's own turns. Each
template's hash is logged as lineage (a changed template means a new model).
"""
from __future__ import annotations

import hashlib

from mascot.annotate.rubric import COLLECTIVE_DIMENSIONS, DIMENSIONS

TEMPLATE = (
    "Persona: {name}, {role}. {description} Tone: {tone}.\n"
    "Criteria: {criteria}.\n"
    "Dialogue:\n{dialogue}\n"
    "Reply of {name}: {reply}"
)
CRITERIA = "; ".join(f"{d.replace('_', ' ')}: {text}" for d, text in DIMENSIONS.items())
TEMPLATE_HASH = hashlib.sha256((TEMPLATE + CRITERIA).encode()).hexdigest()[:12]

GROUP_TEMPLATE = (
    "Criteria: {criteria}.\n"
    "Conversation so far:\n{dialogue}\n"
    "Next turns of the companions:\n{block}"
)
GROUP_CRITERIA = "; ".join(f"{d.replace('_', ' ')}: {text}" for d, text in COLLECTIVE_DIMENSIONS.items())
GROUP_TEMPLATE_HASH = hashlib.sha256((GROUP_TEMPLATE + GROUP_CRITERIA).encode()).hexdigest()[:12]
CUT_MARK = "[earlier turns cut] "


def _lines(messages: list[dict], assistant: str) -> str:
    return "\n".join(f"{'User' if m['role'] == 'user' else m.get('name') or assistant}: {m['content']}"
                     for m in messages)


def render(persona: dict | None, context: list[dict], reply: str | list[dict]) -> str:
    """A persona and its reply (stage 1), or, with `reply` a list of turn messages and no persona, a block."""
    if isinstance(reply, list):
        return GROUP_TEMPLATE.format(criteria=GROUP_CRITERIA, dialogue=_lines(context, "Companion"),
                                     block=_lines(reply, "Companion"))
    dialogue = _lines(context, persona["name"])
    return TEMPLATE.format(name=persona["name"], role=persona["role"], description=persona["description"],
                           tone=persona["tone"], criteria=CRITERIA, dialogue=dialogue, reply=reply.strip())


def template_hash(granularity: str) -> str:
    return GROUP_TEMPLATE_HASH if granularity == "block" else TEMPLATE_HASH


def reward_input_ids(tokenizer, persona: dict | None, context: list[dict], reply: str | list[dict],
                     max_length: int) -> tuple[list[int], bool]:
    """Token ids of one (persona, context, reply-or-block), ending in EOS, at most `max_length` long.

    Too long: the oldest context turns go first, then the oldest words of the first kept turn; the reply
    (or the block's turns) and the persona stay whole. Returns (ids, was_cut).
    """
    def encode(ctx) -> list[int]:
        return tokenizer(render(persona, ctx, reply))["input_ids"] + [tokenizer.eos_token_id]

    ids = encode(context)
    if len(ids) <= max_length:
        return ids, False
    ctx = [dict(m) for m in context]
    while len(ctx) > 1:
        ctx = ctx[1:]
        ids = encode([{**ctx[0], "content": CUT_MARK + ctx[0]["content"]}] + ctx[1:])
        if len(ids) <= max_length:
            return ids, True
    words = ctx[0]["content"].split() if ctx else []
    lo, hi = 0, len(words)
    while lo < hi:  # the fewest words cut from the left that fit
        mid = (lo + hi) // 2
        if len(encode([{**ctx[0], "content": CUT_MARK + " ".join(words[mid:])}])) <= max_length:
            hi = mid
        else:
            lo = mid + 1
    ids = encode([{**ctx[0], "content": CUT_MARK + " ".join(words[lo:])}] if ctx else [])
    if len(ids) > max_length:
        unit = "block" if isinstance(reply, list) else "persona and reply"
        raise ValueError(f"reward input is {len(ids)} tokens even with no context; raise max_length "
                         f"(train_rm or train_group_rm) above {len(ids)} (the {unit} is never cut)")
    return ids, True


def persona_fields(persona) -> dict:
    return {"name": persona.name, "role": persona.role, "description": persona.description, "tone": persona.tone}


def pair_sides(pair: dict, personas: dict) -> tuple[dict | None, list[dict], str | list[dict], str | list[dict]]:
    """(persona fields or None, dialogue without the system message, chosen side, rejected side) of a pair
    record: a reply pair's sides are texts, a block pair's are lists of turn messages."""
    context = [m for m in pair["prompt"] if m["role"] != "system"]
    if pair.get("granularity") == "block":
        return None, context, pair["chosen"], pair["rejected"]
    return (persona_fields(personas[pair["persona"]]), context, pair["chosen"][-1]["content"],
            pair["rejected"][-1]["content"])
