"""Pairwise judging with both orders (MT-Bench's protocol, Zheng et al. 2023): the judge reads two replies and
says which is better, once with each first; where the two orders disagree the pair is a tie. A judge that prefers
whichever reply comes first (or second) then scores 0.5, not a coin's luck.

For the human set the two replies are two supporter turns of one conversation, each at its own moment: the judge
reads each after its own context and is asked which the person found more helpful, which is the question the
seeker's two ratings answer. Only that comparison is built: candidates of one query would need the question
reworded (one moment, two replies) before this is used on them.
"""
from __future__ import annotations

from mascot.transcript import render

CHOICES = ("A", "B")
QUESTION = ("Two moments of one conversation between a person seeking support and a supporter follow. At each, "
            "the supporter replied. Which reply did the person find more helpful at its moment?")
LENGTH_NEUTRAL = ("Length is not quality: a short reply can be excellent and a long one poor. Judge what each "
                  "reply does for the person, not how much it says.")


def _excerpt(label: str, side: dict) -> str:
    return f"Excerpt {label}\n{render(side['context'])}\nReply {label}: {side['reply']}\n"


def pairwise_prompt(first: dict, second: dict, style: str = "chat", length_neutral: bool = False):
    """The prompt that asks whether reply A (`first`) or B (`second`) is better, each `{context, reply}`, ending
    where the judge writes its letter."""
    instruction = QUESTION + (" " + LENGTH_NEUTRAL if length_neutral else "")
    body = _excerpt("A", first) + "\n" + _excerpt("B", second)
    if style == "chat":
        return [{"role": "system", "content": instruction + " Answer with one letter, A or B."},
                {"role": "user", "content": body},
                {"role": "assistant", "content": "The more helpful reply: "}]
    return f"{instruction}\n\n{body}\nAnswer with one letter, A or B.\nThe more helpful reply: "


def both_orders(pairs: list[tuple[dict, dict]], style: str = "chat", length_neutral: bool = False) -> list:
    """Each pair's two prompts, (hi first) then (hi second), in that order, for one batched call."""
    return [pairwise_prompt(*order, style, length_neutral) for hi, lo in pairs for order in ((hi, lo), (lo, hi))]


def order_verdict(p_a_first: float, p_a_second: float) -> float:
    """The first reply's win (1), loss (0) or tie (0.5) from the judge's probability of "A" in the order where it
    is A (`p_a_first`) and in the order where it is B (`p_a_second`): it wins only when both orders prefer it."""
    first_wins_as_a, first_wins_as_b = p_a_first > 0.5, p_a_second < 0.5
    if first_wins_as_a and first_wins_as_b:
        return 1.0
    if not first_wins_as_a and not first_wins_as_b:
        return 0.0
    return 0.5


def verdicts(probs_of_a: list[float]) -> tuple[list[float], dict]:
    """`both_orders`' probabilities of "A", two per pair, as wins of each pair's first (preferred) reply, and how
    often the judge picked the reply in front: its position bias (0.5 none)."""
    if len(probs_of_a) % 2:
        raise ValueError(f"{len(probs_of_a)} probabilities: both_orders gives two per pair")
    pairs = list(zip(probs_of_a[0::2], probs_of_a[1::2]))
    wins = [order_verdict(a, b) for a, b in pairs]
    picked_a = sum((a > 0.5) + (b > 0.5) for a, b in pairs)
    first = round(picked_a / max(2 * len(pairs), 1), 4)
    return wins, {"ties": sum(w == 0.5 for w in wins), "picked_first_position": first}
