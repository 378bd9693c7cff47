"""A judge that is a Python function: rule-checked criteria beside, or instead of, the LLM judge.

`score.scorer: {kind: function, target: "module:function", dimensions, kwargs}` names it. The function is
called as `function(subject, rubric, **kwargs)` and returns {dimension: score} on the rubric's 1-5 scale for
the dimensions it owns (all of the rubric's when `dimensions` is null; then no LLM runs at all). A subject is
what a unit is made of, not its rendered prompt:

    {"granularity": "reply" | "block", "text": the reply or the block rendered as a transcript,
     "context": the conversation before it (messages), "persona": the persona's name (replies; None for
     blocks), "block": the block's messages (blocks only)}

Where the function owns only some dimensions, the LLM judge scores the unit as before and the function's
scores replace its own on those; the record keeps both (`llm_scores`). The judge's identity carries the
target, its kwargs and a digest of the function's source file, so a changed function re-scores instead of
replaying journaled records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import hashlib
import importlib
import inspect
import math
from pathlib import Path
from typing import Callable

from mascot.config import Params
from mascot.llm.backend import BackendStats, LLMBackend
from mascot.llm.factory import make_backend


class JudgeFunctionError(ValueError):
    """The function named by score.scorer.target cannot be loaded, or returned what the rubric cannot hold."""


def load_function(target: str, key: str = "score.scorer") -> Callable:
    """The function `target` ("module:function") names; `key` is the params key that named it, for errors."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise JudgeFunctionError(f"{key}.target '{target}': cannot import module '{module_name}' ({exc}); "
                                 "the module must be importable from the working directory or installed") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise JudgeFunctionError(f"{key}.target '{target}': module '{module_name}' has no function '{attr}'")
    return function


def _source_digest(function: Callable) -> str:
    try:
        return hashlib.sha256(Path(inspect.getsourcefile(function)).read_bytes()).hexdigest()[:12]
    except (TypeError, OSError):
        return "unknown"


@dataclass
class FunctionJudge:
    """Plays the judge backend's part in score_units; `llm` is the LLM judge for the dimensions the function
    does not own (None: the function owns them all)."""
    target: str
    function: Callable
    dimensions: tuple[str, ...] | None
    kwargs: dict
    llm: LLMBackend | None = None
    key: str = "score.scorer"  # the params key that named it (score.scorer, score_group.scorer), for errors
    stats: BackendStats = field(default_factory=BackendStats)

    @property
    def model_name(self) -> str:
        return f"function:{self.target}" + (f"+{self.llm.model_name}" if self.llm else "")

    @property
    def identity(self) -> dict:
        return {"function": self.target, "kwargs": self.kwargs, "dimensions": self.dimensions,
                "source_sha256": _source_digest(self.function), "llm": self.llm.identity if self.llm else None}

    def owned(self, rubric) -> tuple[str, ...]:
        dims = self.dimensions or tuple(rubric.dimensions)
        unknown = [d for d in dims if d not in rubric.dimensions]
        if unknown:
            raise JudgeFunctionError(f"{self.key}.dimensions {unknown} are not dimensions of the rubric "
                                     f"'{rubric.name}' ({', '.join(rubric.dimensions)})")
        return tuple(dims)

    def rate(self, unit: dict, rubric) -> dict[str, float]:
        """The function's scores for the dimensions it owns, checked: numbers in the rubric's 1-5 range."""
        dims = self.owned(rubric)
        self.stats.requests += 1
        self.stats.count("function")
        got = self.function(unit["subject"], rubric, **self.kwargs)
        where = f"{self.key}.target '{self.target}' on unit {unit['id']}"
        if not isinstance(got, dict):
            raise JudgeFunctionError(f"{where}: returned {type(got).__name__}, not a {{dimension: score}} dict")
        missing = [d for d in dims if d not in got]
        if missing:
            raise JudgeFunctionError(f"{where}: no score for {missing}")
        out = {}
        for d in dims:
            value = got[d]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not 1 <= value <= 5:
                raise JudgeFunctionError(f"{where}: {d} = {value!r} is not a number in [1, 5]")
            out[d] = round(float(value), 4)
        return out

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()


def scorer_for(params: Params, score_block: str = "score"):
    """What judges the units whose rubric the params block `score_block` names (a granularity's score_block:
    score, score_group): that block's own scorer where it has one set, else score.scorer."""
    own = getattr(getattr(params, score_block), "scorer", None)
    return own if own is not None else params.score.scorer


def make_judge(params: Params, score_block: str = "score"):
    """The judge of the units `score_block` rubrics (`scorer_for`): the LLM judge backend, or a FunctionJudge
    (with the LLM judge inside it where the function owns only some dimensions)."""
    scorer = scorer_for(params, score_block)
    if scorer.kind == "llm":
        return make_backend(params.llm.judge, "llm.judge")
    key = "score.scorer" if scorer is params.score.scorer else f"{score_block}.scorer"
    llm = make_backend(params.llm.judge, "llm.judge") if scorer.dimensions else None
    return FunctionJudge(scorer.target, load_function(scorer.target, key),
                         tuple(scorer.dimensions) if scorer.dimensions else None, dict(scorer.kwargs), llm, key)
