"""THE reward-model input builder: training, evaluation, promotion and GRPO scoring all call this.

One function decides what a reward model sees, so the text distribution at scoring time is exactly the one
it was trained on. The text of one unit (a persona's reply, or a block of group turns) is its granularity's
(`Granularity.reward_text`, mascot/granularity.py); the cutting rule is one for all: a text too long loses the
oldest turns of the conversation before it first, never the reply or the block's own turns. Each
template's hash is logged as lineage (a changed template means a new model).
"""
from __future__ import annotations

from typing import Callable

from mascot.granularity import CUT_MARK, Granularity
from mascot.io import InputError

def reward_input_ids(tokenizer, granularity: Granularity, persona: dict | None, context: list[dict], side,
                     max_length: int) -> tuple[list[int], bool]:
    """Token ids of one (persona, context, reply-or-block) as `granularity` renders it, ending in EOS, at most
    `max_length` long (see cut_to_fit)."""
    return cut_to_fit(tokenizer, lambda ctx: granularity.reward_text(persona, ctx, side), context, max_length,
                      granularity.name)


def cut_to_fit(tokenizer, text_of: Callable[[list[dict]], str], context: list[dict], max_length: int,
               unit: str = "reply") -> tuple[list[int], bool]:
    """Token ids of `text_of(context)`, ending in EOS, at most `max_length` long.

    Too long: the oldest context turns go first, then the oldest words of the first kept turn; what
    `text_of` adds around the context (the persona, the reply, the block's turns) stays whole. Returns
    (ids, was_cut).
    """
    def encode(ctx) -> list[int]:
        return tokenizer(text_of(ctx))["input_ids"] + [tokenizer.eos_token_id]

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
        raise InputError(f"reward input is {len(ids)} tokens even with no context; raise max_length "
                         f"(train_rm or train_group_rm) above {len(ids)} (the {unit} is never cut)")
    return ids, True

