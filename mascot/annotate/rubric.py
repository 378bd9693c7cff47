"""Rubrics (data files, data/rubrics/*.yaml), the strict judge prompt built from one (both modes), and the
parsing of judge replies.

A rubric is data: its dimensions, its wording, its strictness text and calibration anchors. The persona
rubric rates one reply (stage 1); the collective rubric rates a block of group turns (stage 2); a third one
is a third file. Everything else (prompt layout, JSON schema, parsing, totals) is the same code for all.

The prompt is laid out shared-part-first (rubric, anchors, item, then the dimension), so that a server
with prefix caching computes the common part once per item.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from statistics import fmean
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mascot import reads
from mascot.io import read_yaml
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
    # how the dimensions become one total: "mean" (MASCOT's), "min" (conjunctive: a reply is as good as its
    # weakest dimension) or "weighted" (a weighted mean with `weights`, one per dimension)
    aggregate: str = "mean"
    weights: tuple[tuple[str, float], ...] = ()

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
        """The one score of an item: its dimensions combined as the rubric file says (`aggregate`)."""
        if self.aggregate == "min":
            return min(scores[d] for d in self.dimensions)
        if self.aggregate == "weighted":
            weights = dict(self.weights)
            return sum(weights[d] * scores[d] for d in self.dimensions) / sum(weights.values())
        return fmean(scores[d] for d in self.dimensions)

    @property
    def aggregation(self) -> str:
        """The aggregation in words, for lineage tags: mean, min, or weighted(dim=w,...)."""
        if self.aggregate == "weighted":
            return "weighted(" + ",".join(f"{d}={w:g}" for d, w in self.weights) + ")"
        return self.aggregate


class RubricFile(BaseModel):
    """The schema of a rubric YAML file (data/rubrics/): every key required, none unknown."""
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    unit: str = Field(min_length=1)  # what one item is, in the judge's words
    intro: str = Field(min_length=1)
    dimensions: dict[str, str] = Field(min_length=1)
    strictness: str = Field(min_length=1)
    anchors: list[Anchor] = []
    # how the dimensions combine into the total (mean: MASCOT's; min: conjunctive; weighted: with `weights`)
    aggregate: Literal["mean", "min", "weighted"] = "mean"
    weights: dict[str, Annotated[float, Field(gt=0)]] | None = None

    @field_validator("dimensions")
    @classmethod
    def _names(cls, dims: dict[str, str]) -> dict[str, str]:
        for name, text in dims.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                raise ValueError(f"dimension '{name}': a name is lower-case letters, digits and _ (it is a JSON key "
                                 "and a metric name)")
            if name == "total_reward":
                raise ValueError("dimension 'total_reward': the name is taken by the total of the dimensions")
            if not str(text).strip():
                raise ValueError(f"dimension '{name}': its wording is empty")
        return dims

    @model_validator(mode="after")
    def _weights(self) -> "RubricFile":
        if self.aggregate == "weighted":
            if not self.weights or set(self.weights) != set(self.dimensions):
                missing = set(self.dimensions) - set(self.weights or {})
                extra = set(self.weights or {}) - set(self.dimensions)
                raise ValueError("weights: aggregate weighted needs one positive weight per dimension"
                                 + (f"; missing {sorted(missing)}" if missing else "")
                                 + (f"; not dimensions {sorted(extra)}" if extra else ""))
        elif self.weights is not None:
            raise ValueError(f"weights: only with aggregate: weighted (this rubric's aggregate is {self.aggregate})")
        return self

    @model_validator(mode="after")
    def _anchor_scores(self) -> "RubricFile":
        for k, anchor in enumerate(self.anchors):
            if set(anchor.scores) != set(self.dimensions):
                missing, extra = set(self.dimensions) - set(anchor.scores), set(anchor.scores) - set(self.dimensions)
                raise ValueError(f"anchors.{k}.scores: must rate exactly the dimensions"
                                 + (f"; missing {sorted(missing)}" if missing else "")
                                 + (f"; not dimensions {sorted(extra)}" if extra else ""))
        return self


class Anchor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item: str = Field(min_length=1)  # the item as the judge reads one
    scores: dict[str, Annotated[int, Field(ge=1, le=5)]]


RubricFile.model_rebuild()


PROJECT = Path(__file__).resolve().parents[2]


class RubricError(ValueError):
    pass


@lru_cache(maxsize=None)
def load_rubric(path: str | Path) -> Rubric:
    """A rubric from its YAML file, checked: an error names the file and the key."""
    path = Path(path)
    if not path.is_absolute() and not path.exists() and (PROJECT / path).exists():
        path = PROJECT / path  # a shipped rubric, from a test's or a tool's own working directory
    raw = read_yaml(path, "rubric file (score.rubric / score_group.rubric name it)", RubricError)
    if not isinstance(raw, dict):
        raise RubricError(f"{path}: a rubric is a mapping (name, unit, intro, dimensions, strictness, anchors)")
    try:
        spec = RubricFile.model_validate(raw)
    except ValidationError as exc:
        lines = "\n".join(f"  - {'.'.join(str(p) for p in e['loc']) or '(top level)'}: "
                          + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"]) for e in exc.errors())
        raise RubricError(f"{path}: invalid rubric:\n{lines}") from None
    header = (spec.intro.strip() + "\n" + "".join(f"- {d}: {text.strip()}.\n" for d, text in spec.dimensions.items())
              + spec.strictness.strip() + "\n")
    return Rubric(name=spec.name, unit=spec.unit, dimensions=dict(spec.dimensions), header=header,
                  anchors=tuple((a.item if a.item.endswith("\n") else a.item + "\n", dict(a.scores))
                                for a in spec.anchors),
                  aggregate=spec.aggregate,
                  weights=tuple((d, float(spec.weights[d])) for d in spec.dimensions) if spec.weights else ())


RUBRICS_DIR = PROJECT / "data" / "rubrics"
# the two shipped rubrics (score.rubric and score_group.rubric default to their files), loaded at import: not a
# stage's read (mascot/reads.py); a stage reads the rubric its params name
with reads.paused():
    PERSONA = load_rubric(RUBRICS_DIR / "persona.yaml")
    COLLECTIVE = load_rubric(RUBRICS_DIR / "collective.yaml")

def expected_score(probs: dict[str, float]) -> float:
    return sum(int(c) * p for c, p in probs.items())
