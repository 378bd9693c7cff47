"""THE reward-model input builder: training, evaluation, promotion and GRPO scoring all call this.

One function decides what the reward model sees, so the text distribution at scoring time is exactly the
one it was trained on. Its template hash is logged as lineage (a changed template means a new model).
"""
from __future__ import annotations

import hashlib

from mascot.annotate.rubric import DIMENSIONS

TEMPLATE = (
    "Persona: {name}, {role}. {description} Tone: {tone}.\n"
    "Criteria: {criteria}.\n"
    "Dialogue:\n{dialogue}\n"
    "Reply of {name}: {reply}"
)
CRITERIA = "; ".join(f"{d.replace('_', ' ')}: {text}" for d, text in DIMENSIONS.items())
TEMPLATE_HASH = hashlib.sha256((TEMPLATE + CRITERIA).encode()).hexdigest()[:12]
CUT_MARK = "[earlier turns cut] "


def render(persona: dict, context: list[dict], reply: str) -> str:
    dialogue = "\n".join(f"{'User' if m['role'] == 'user' else persona['name']}: {m['content']}" for m in context)
    return TEMPLATE.format(name=persona["name"], role=persona["role"], description=persona["description"],
                           tone=persona["tone"], criteria=CRITERIA, dialogue=dialogue, reply=reply.strip())


def reward_input_ids(tokenizer, persona: dict, context: list[dict], reply: str,
                     max_length: int) -> tuple[list[int], bool]:
    """Token ids of one (persona, context, reply), ending in EOS, at most `max_length` long.

    Too long: the oldest turns go first, then the oldest words of the first kept turn; the reply and
    persona stay whole. Returns (ids, was_cut).
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
    words = ctx[0]["content"].split()
    lo, hi = 0, len(words)
    while lo < hi:  # the fewest words cut from the left that fit
        mid = (lo + hi) // 2
        if len(encode([{**ctx[0], "content": CUT_MARK + " ".join(words[mid:])}])) <= max_length:
            hi = mid
        else:
            lo = mid + 1
    ids = encode([{**ctx[0], "content": CUT_MARK + " ".join(words[lo:])}])
    if len(ids) > max_length:
        raise ValueError(f"reward input is {len(ids)} tokens even with no context; raise train_rm.max_length "
                         f"above {len(ids)} (persona and reply are never cut)")
    return ids, True


def persona_fields(persona) -> dict:
    return {"name": persona.name, "role": persona.role, "description": persona.description, "tone": persona.tone}


def pair_sides(pair: dict, personas: dict) -> tuple[dict, list[dict], str, str]:
    """(persona fields, dialogue without the system message, chosen reply, rejected reply) of a pair record."""
    context = [m for m in pair["prompt"] if m["role"] != "system"]
    return (persona_fields(personas[pair["persona"]]), context, pair["chosen"][-1]["content"],
            pair["rejected"][-1]["content"])
