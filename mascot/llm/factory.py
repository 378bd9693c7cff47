"""Build the backend a params block names, and say what each built backend sent: the one place that knows
both backends (mascot/llm/backend.py holds only the types, so the package has no import circle)."""
from __future__ import annotations

from mascot.io import require_model_dir
from mascot.llm.backend import LLMBackend

BUILT: list[tuple[str, LLMBackend]] = []  # (params key, backend) of every backend make_backend built here


def make_backend(endpoint, key: str = "llm") -> LLMBackend:
    """Build the backend an `llm.speaker`/`llm.judge` block of params.yaml names."""
    if endpoint.backend == "openai":
        from mascot.llm.openai_backend import OpenAIBackend

        backend = OpenAIBackend(endpoint)
    else:
        from mascot.llm.local_backend import LocalBackend

        require_model_dir(endpoint.model, f"{key}.model")
        backend = LocalBackend(endpoint)
    BUILT.append((key, backend))
    return backend


def request_summary() -> list[dict]:
    """What every backend built in this process sent, by endpoint: the stage's LLM traffic, in one place."""
    return [{"key": key, "backend": "openai" if hasattr(b, "replicas") else "local", "model": b.model_name,
             "urls": list(getattr(getattr(b, "replicas", None), "urls", [])), "requests": dict(b.stats.by_endpoint)}
            for key, b in BUILT]
