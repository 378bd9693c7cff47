"""The language-model interface the stages use; nothing pipeline-specific lives here.

A prompt is either plain text (sent as a completion) or a list of chat messages (sent through the chat
template). Three operations cover the pipeline: sample replies, read the next-token distribution over a
few given answers, and produce JSON under a schema.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import re
from typing import Protocol, Union

Prompt = Union[str, list[dict]]


@dataclass(frozen=True)
class SampleRequest:
    prompt: Prompt
    n: int = 1
    temperature: float = 0.9
    top_p: float = 0.95
    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int = 0
    regex: str | None = None  # decode under this regular expression (a grammar): the reply matches it


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int | None  # None where the server reports only a whole request's total (n > 1)
    finish_reason: str  # "stop" or "length"
    thinking_removed: bool = False  # a <think>...</think> block was cut out of `text`
    # what the request's seed reproduces: {"scope": "request"} (the server sampled with it), {"scope":
    # "unseeded"} (no seed was sent), or in-process {"scope": "batch", "batch_seed", "batch_members",
    # "batch_index"}: one stream for the batch, so the text comes back from the same members in the same order
    seed_scope: dict | None = None


THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def strip_thinking(text: str) -> tuple[str, bool]:
    """Remove reasoning blocks a thinking model writes before its answer (an unclosed one runs to the end:
    the budget ran out while thinking, so there is no answer)."""
    cleaned, n = THINK_BLOCK.subn("", text)
    return (cleaned.strip(), True) if n else (text, False)


def ends_in_assistant(prompt: Prompt) -> bool:
    """A message list whose last message is the assistant's: the model continues it (a prefill)."""
    return isinstance(prompt, list) and bool(prompt) and prompt[-1]["role"] == "assistant"


@dataclass(frozen=True)
class ChoiceDistribution:
    probs: dict[str, float]  # renormalized over the choices
    mass: float  # the probability the model put on the choices before renormalizing


@dataclass
class BackendStats:
    requests: int = 0
    retries: int = 0
    by_endpoint: dict = field(default_factory=dict)  # API path (or "in-process") -> requests sent there

    def count(self, endpoint: str, n: int = 1) -> None:
        self.by_endpoint[endpoint] = self.by_endpoint.get(endpoint, 0) + n


class LLMBackend(Protocol):
    model_name: str  # for people: a path or a served name
    identity: dict  # for journals: what computes (weights' digest and dtype, or what the server reports)

    def sample(self, requests: list[SampleRequest], progress=None) -> list[list[Completion]]: ...

    def choice_distribution(self, prompts: list[str], choices: list[str], progress=None) -> list[ChoiceDistribution]: ...

    def json_complete(self, prompts: list[str], schema: dict, max_tokens: int, seed: int = 0,
                      progress=None, temperature: float = 0.0) -> list[Completion]: ...

    def close(self) -> None: ...


class ServerError(RuntimeError):
    """An LLM server failed past its retries (or answered what the API does not promise); the stage's journal keeps
    every finished record."""
