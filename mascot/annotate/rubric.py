"""The five-dimension rubric, the strict judge prompt (both modes) and the parsing of judge replies.

The prompt is laid out shared-part-first (rubric, anchors, persona, dialogue, reply, then the dimension),
so that a server with prefix caching computes the common part once per candidate.
"""
from __future__ import annotations

import json
from statistics import fmean

from mascot.data.personas import Persona
from mascot.llm.backend import Prompt

DIMENSIONS: dict[str, str] = {
    "persona_consistency": "the reply speaks in the persona's own tone and typical vocabulary",
    "perceived_empathy": "the reply reads the user's emotion accurately",
    "emotional_expressiveness": "the reply's emotional intensity fits the situation",
    "relevance_coherence": "the reply stays on the context and is logically coherent",
    "social_contribution": "the reply adds a new perspective rather than platitudes",
}
SCORE_CHOICES = ["1", "2", "3", "4", "5"]

RUBRIC_HEADER = (
    "You are a strict judge of replies written by companion personas. Rate the reply on five dimensions, "
    "each an integer from 1 to 5:\n"
    + "".join(f"- {name}: {text}.\n" for name, text in DIMENSIONS.items())
    + "Be strict. 3 means adequate but ordinary and is the default. 4 and 5 are rare: only for clearly "
    "excellent replies. 1 and 2 are for replies that fail the dimension (off-topic, cold, generic, "
    "incoherent, or out of the persona's voice).\n"
)

# Two anchors (a poor reply, then an excellent one) calibrate a small judge; see README "Judge calibration".
ANCHORS = [
    {"persona": "The Anchor (emotional validator). Tone: warm, calm and steady.",
     "dialogue": "Person: My dog died this morning and I can't stop crying.",
     "reply": "Dogs die all the time. You should get a new one and move on.",
     "scores": {"persona_consistency": 1, "perceived_empathy": 1, "emotional_expressiveness": 2,
                "relevance_coherence": 2, "social_contribution": 1}},
    {"persona": "The Anchor (emotional validator). Tone: warm, calm and steady.",
     "dialogue": "Person: I failed my exam again and I feel like a complete failure.",
     "reply": "That sounds so painful, especially after all the effort you put in. It makes sense that "
              "you feel crushed right now, and one exam does not decide who you are.",
     "scores": {"persona_consistency": 5, "perceived_empathy": 5, "emotional_expressiveness": 4,
                "relevance_coherence": 5, "social_contribution": 4}},
]


def render_dialogue(context: list[dict], persona_name: str) -> str:
    return "\n".join(f"{'Person' if m['role'] == 'user' else persona_name}: {m['content']}" for m in context)


def _ratings(scores: dict[str, int]) -> str:
    return "".join(f"{d}: {scores[d]}\n" for d in DIMENSIONS)


def _examples() -> str:
    return "".join(f"Example {k}\nPersona: {a['persona']}\nConversation:\n{a['dialogue']}\n"
                   f"Reply: {a['reply']}\nRatings:\n{_ratings(a['scores'])}\n" for k, a in enumerate(ANCHORS, start=1))


def _item(persona: Persona, context: list[dict], reply: str) -> str:
    vocab = ", ".join(persona.vocabulary)
    return (f"Persona: {persona.name} ({persona.role}). Tone: {persona.tone}. "
            f"Typical words: {vocab}.\nConversation:\n{render_dialogue(context, persona.name)}\n"
            f"Reply: {reply}\n")


def judge_prefix(persona: Persona, context: list[dict], reply: str, few_shot: bool) -> str:
    """The plain-text judge prompt up to the ratings: rubric, anchors, then this item (reply last)."""
    return (RUBRIC_HEADER + "\n" + (_examples() if few_shot else "") + "Now rate this reply.\n"
            + _item(persona, context, reply))


def judge_messages(persona: Persona, context: list[dict], reply: str, few_shot: bool) -> list[dict]:
    """The same prompt for an instruct judge's chat template: rubric and anchors as the system message."""
    system = RUBRIC_HEADER + ("\n" + _examples() if few_shot else "")
    return [{"role": "system", "content": system.strip()},
            {"role": "user", "content": "Now rate this reply.\n" + _item(persona, context, reply)}]


JSON_INSTRUCTION = ("Answer with a JSON object: for each dimension, a short reason that cites the reply, and an "
                    "integer score.")


def expected_prompts(persona: Persona, context: list[dict], reply: str, few_shot: bool,
                     style: str = "plain") -> dict[str, Prompt]:
    """One prompt per dimension, each ending where the judge writes that dimension's digit.

    The five prompts differ only in their last line, so a backend with prefix reuse computes the item once.
    In chat style the ratings are an assistant message the model continues.
    """
    if style == "chat":
        messages = judge_messages(persona, context, reply, few_shot)
        return {d: [*messages, {"role": "assistant", "content": f"Ratings:\n{d}: "}] for d in DIMENSIONS}
    prefix = judge_prefix(persona, context, reply, few_shot)
    return {d: f"{prefix}Ratings:\n{d}: " for d in DIMENSIONS}


def json_prompt(persona: Persona, context: list[dict], reply: str, few_shot: bool, style: str = "plain") -> Prompt:
    if style == "chat":
        messages = judge_messages(persona, context, reply, few_shot)
        return [messages[0], {"role": "user", "content": messages[1]["content"] + JSON_INSTRUCTION}]
    return f"{judge_prefix(persona, context, reply, few_shot)}{JSON_INSTRUCTION}\nJSON: "


# A reason shorter than this says nothing about the reply: the schema asks for more, and a reply that
# still has one is counted as empty in the score metrics (and caught by the gate).
MIN_REASON_CHARS = 12

JSON_SCHEMA = {
    "type": "object",
    "properties": {d: {"type": "object",
                       "properties": {"reason": {"type": "string", "minLength": MIN_REASON_CHARS, "maxLength": 160},
                                      "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}},
                       "required": ["reason", "score"], "additionalProperties": False}
                   for d in DIMENSIONS},
    "required": list(DIMENSIONS),
    "additionalProperties": False,
}


class JudgeParseError(ValueError):
    pass


def parse_json_scores(raw: str) -> tuple[dict[str, float], dict[str, str]]:
    """Scores and reasons from a json-mode reply; anything off raises JudgeParseError (never a default)."""
    try:
        # strict=False: xgrammar lets raw control characters into JSON strings (reasons); the structure
        # and the scores are still checked strictly below.
        obj = json.loads(raw, strict=False)
    except json.JSONDecodeError as exc:
        raise JudgeParseError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise JudgeParseError("not a JSON object")
    scores, reasons = {}, {}
    for d in DIMENSIONS:
        entry = obj.get(d)
        if not isinstance(entry, dict):
            raise JudgeParseError(f"dimension '{d}' missing")
        score = entry.get("score")
        if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
            raise JudgeParseError(f"dimension '{d}': score {score!r} is not an integer in 1..5")
        scores[d] = float(score)
        reasons[d] = str(entry.get("reason", ""))
    return scores, reasons


def expected_score(probs: dict[str, float]) -> float:
    return sum(int(c) * p for c, p in probs.items())


def total_reward(scores: dict[str, float]) -> float:
    return fmean(scores[d] for d in DIMENSIONS)
