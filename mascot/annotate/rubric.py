"""The rubrics (data), the strict judge prompt built from one (both modes), and the parsing of judge replies.

A rubric is data: its dimensions, its wording and two calibration anchors. The persona rubric rates one
reply (stage 1); the collective rubric rates a block of group turns (stage 2). Everything else (prompt
layout, JSON schema, parsing, totals) is the same code for both.

The prompt is laid out shared-part-first (rubric, anchors, item, then the dimension), so that a server
with prefix caching computes the common part once per item.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from statistics import fmean

from mascot.data.personas import Persona
from mascot.llm.backend import Prompt

SCORE_CHOICES = ["1", "2", "3", "4", "5"]
# A reason shorter than this says nothing about the item: the schema asks for more, and a reply that still
# has one is counted as empty in the score metrics (and caught by the gate).
MIN_REASON_CHARS = 12


class JudgeParseError(ValueError):
    pass


@dataclass(frozen=True)
class Rubric:
    name: str
    unit: str  # what one item is, in the judge's words: "reply" or "block"
    dimensions: dict[str, str]
    header: str
    anchors: tuple[tuple[str, dict[str, int]], ...]  # (rendered item, its scores): poor first, then excellent

    def _ratings(self, scores: dict[str, int]) -> str:
        return "".join(f"{d}: {scores[d]}\n" for d in self.dimensions)

    def examples(self) -> str:
        return "".join(f"Example {k}\n{item}Ratings:\n{self._ratings(scores)}\n"
                       for k, (item, scores) in enumerate(self.anchors, start=1))

    def prefix(self, item: str, few_shot: bool) -> str:
        """The plain-text judge prompt up to the ratings: rubric, anchors, then this item."""
        return self.header + "\n" + (self.examples() if few_shot else "") + f"Now rate this {self.unit}.\n" + item

    def messages(self, item: str, few_shot: bool) -> list[dict]:
        """The same prompt for an instruct judge's chat template: rubric and anchors as the system message."""
        system = self.header + ("\n" + self.examples() if few_shot else "")
        return [{"role": "system", "content": system.strip()},
                {"role": "user", "content": f"Now rate this {self.unit}.\n" + item}]

    def expected_prompts(self, item: str, few_shot: bool, style: str = "plain") -> dict[str, Prompt]:
        """One prompt per dimension, each ending where the judge writes that dimension's digit.

        The prompts differ only in their last line, so a backend with prefix reuse computes the item once.
        In chat style the ratings are an assistant message the model continues.
        """
        if style == "chat":
            messages = self.messages(item, few_shot)
            return {d: [*messages, {"role": "assistant", "content": f"Ratings:\n{d}: "}] for d in self.dimensions}
        prefix = self.prefix(item, few_shot)
        return {d: f"{prefix}Ratings:\n{d}: " for d in self.dimensions}

    @property
    def json_instruction(self) -> str:
        return (f"Answer with a JSON object: for each dimension, a short reason that cites the {self.unit}, and an "
                "integer score.")

    def json_prompt(self, item: str, few_shot: bool, style: str = "plain") -> Prompt:
        if style == "chat":
            messages = self.messages(item, few_shot)
            return [messages[0], {"role": "user", "content": messages[1]["content"] + self.json_instruction}]
        return f"{self.prefix(item, few_shot)}{self.json_instruction}\nJSON: "

    @cached_property
    def json_schema(self) -> dict:
        return {
            "type": "object",
            "properties": {d: {"type": "object",
                               "properties": {"reason": {"type": "string", "minLength": MIN_REASON_CHARS,
                                                         "maxLength": 160},
                                              "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}},
                               "required": ["reason", "score"], "additionalProperties": False}
                           for d in self.dimensions},
            "required": list(self.dimensions),
            "additionalProperties": False,
        }

    def parse_json(self, raw: str) -> tuple[dict[str, float], dict[str, str]]:
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
        for d in self.dimensions:
            entry = obj.get(d)
            if not isinstance(entry, dict):
                raise JudgeParseError(f"dimension '{d}' missing")
            score = entry.get("score")
            if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
                raise JudgeParseError(f"dimension '{d}': score {score!r} is not an integer in 1..5")
            scores[d] = float(score)
            reasons[d] = str(entry.get("reason", ""))
        return scores, reasons

    def total(self, scores: dict[str, float]) -> float:
        return fmean(scores[d] for d in self.dimensions)


def _header(intro: str, dimensions: dict[str, str], fail_examples: str) -> str:
    return (intro + "".join(f"- {name}: {text}.\n" for name, text in dimensions.items())
            + "Be strict. 3 means adequate but ordinary and is the default. 4 and 5 are rare: only for clearly "
            f"excellent {'replies' if 'replies' in intro else 'blocks'}. 1 and 2 are for "
            f"{'replies' if 'replies' in intro else 'blocks'} that fail the dimension ({fail_examples}).\n")


# ---- stage 1: one persona reply -------------------------------------------------------------------------
def render_dialogue(context: list[dict], persona_name: str) -> str:
    """A message carrying its own speaker `name` (a group turn) keeps it; others are the persona's."""
    return "\n".join(f"{'Person' if m['role'] == 'user' else m.get('name') or persona_name}: {m['content']}"
                     for m in context)


def reply_item(persona: Persona, context: list[dict], reply: str) -> str:
    vocab = ", ".join(persona.vocabulary)
    return (f"Persona: {persona.name} ({persona.role}). Tone: {persona.tone}. "
            f"Typical words: {vocab}.\nConversation:\n{render_dialogue(context, persona.name)}\n"
            f"Reply: {reply}\n")


_ANCHOR_PERSONA = "The Anchor (emotional validator). Tone: warm, calm and steady."
PERSONA_DIMENSIONS = {
    "persona_consistency": "the reply speaks in the persona's own tone and typical vocabulary",
    "perceived_empathy": "the reply reads the user's emotion accurately",
    "emotional_expressiveness": "the reply's emotional intensity fits the situation",
    "relevance_coherence": "the reply stays on the context and is logically coherent",
    "social_contribution": "the reply adds a new perspective rather than platitudes",
}
PERSONA = Rubric(
    name="persona", unit="reply", dimensions=PERSONA_DIMENSIONS,
    header=_header("You are a strict judge of replies written by companion personas. Rate the reply on five "
                   "dimensions, each an integer from 1 to 5:\n", PERSONA_DIMENSIONS,
                   "off-topic, cold, generic, incoherent, or out of the persona's voice"),
    # Two anchors (a poor reply, then an excellent one) calibrate a small judge; README "Judge calibration".
    anchors=(
        (f"Persona: {_ANCHOR_PERSONA}\nConversation:\nPerson: My dog died this morning and I can't stop crying.\n"
         "Reply: Dogs die all the time. You should get a new one and move on.\n",
         {"persona_consistency": 1, "perceived_empathy": 1, "emotional_expressiveness": 2,
          "relevance_coherence": 2, "social_contribution": 1}),
        (f"Persona: {_ANCHOR_PERSONA}\nConversation:\nPerson: I failed my exam again and I feel like a complete "
         "failure.\nReply: That sounds so painful, especially after all the effort you put in. It makes sense "
         "that you feel crushed right now, and one exam does not decide who you are.\n",
         {"persona_consistency": 5, "perceived_empathy": 5, "emotional_expressiveness": 4,
          "relevance_coherence": 5, "social_contribution": 4}),
    ))

# ---- stage 2: a block of group turns ----------------------------------------------------------------------
def block_item(roster: str, context: list[dict], block: list[dict]) -> str:
    """The companions (name and role), the conversation before the block, then the block's turns."""
    return (f"Companions: {roster}.\nConversation so far:\n{render_dialogue(context, 'Companion')}\n"
            f"Block:\n{render_dialogue(block, 'Companion')}\n")


_ROSTER = ("The Anchor (emotional validator), The Catalyst (critical thinker), The Beacon (growth advocate), "
           "Action Guide (practical advisor)")
COLLECTIVE_DIMENSIONS = {
    "fidelity": "each companion stays in its own role and voice across the block",
    "engagement_contribution": "each turn adds something and draws the person in; no yes-man agreement with "
                               "another companion",
    "originality_specificity": "the perspectives are concrete and not redundant; no restating what another "
                               "companion said",
    "group_coherence": "the block follows one arc tied to the person's situation and stays consistent with what "
                       "was settled",
}
COLLECTIVE = Rubric(
    name="collective", unit="block", dimensions=COLLECTIVE_DIMENSIONS,
    header=_header("You are a strict judge of a group of companion personas talking with one person. Rate the "
                   "block of turns as a whole on four dimensions, each an integer from 1 to 5:\n",
                   COLLECTIVE_DIMENSIONS, "echoing one another, agreeing for its own sake, generic, off-topic, "
                   "re-opening settled points, or out of role"),
    anchors=(
        (f"Companions: {_ROSTER}.\nConversation so far:\nPerson: I keep putting off calling my sister after our "
         "fight.\nBlock:\nThe Anchor: That sounds hard. I hear you.\nThe Beacon: Yes, like The Anchor said, that "
         "sounds hard.\n",
         {"fidelity": 2, "engagement_contribution": 1, "originality_specificity": 1, "group_coherence": 2}),
        (f"Companions: {_ROSTER}.\nConversation so far:\nPerson: I keep putting off calling my sister after our "
         "fight.\nBlock:\nThe Anchor: It makes sense to hesitate when the last talk hurt; wanting to fix it shows "
         "how much she matters.\nAction Guide: One small step: send her a two-line text tonight saying you miss "
         "her, and leave the fight for a call later.\n",
         {"fidelity": 5, "engagement_contribution": 4, "originality_specificity": 5, "group_coherence": 5}),
    ))
RUBRICS = {r.name: r for r in (PERSONA, COLLECTIVE)}

# ---- stage 1's names, kept for the modules and tests that use them -------------------------------------------
DIMENSIONS = PERSONA.dimensions
RUBRIC_HEADER = PERSONA.header
JSON_SCHEMA = PERSONA.json_schema
JSON_INSTRUCTION = PERSONA.json_instruction
parse_json_scores = PERSONA.parse_json
total_reward = PERSONA.total


def judge_prefix(persona: Persona, context: list[dict], reply: str, few_shot: bool) -> str:
    return PERSONA.prefix(reply_item(persona, context, reply), few_shot)


def expected_prompts(persona: Persona, context: list[dict], reply: str, few_shot: bool,
                     style: str = "plain") -> dict[str, Prompt]:
    return PERSONA.expected_prompts(reply_item(persona, context, reply), few_shot, style)


def json_prompt(persona: Persona, context: list[dict], reply: str, few_shot: bool, style: str = "plain") -> Prompt:
    return PERSONA.json_prompt(reply_item(persona, context, reply), few_shot, style)


def expected_score(probs: dict[str, float]) -> float:
    return sum(int(c) * p for c, p in probs.items())
