import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-format samples not found at {SHARED_DATA} (the ../shared/data folder is absent)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def personas():
    from mascot.data.personas import load_personas

    return load_personas(REPO / "data" / "personas.yaml")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Qwen3 with a tokenizer trained on the demo corpus (seconds, offline)."""
    from mascot.llm.base_model import build_tiny_model

    out = tmp_path_factory.mktemp("tiny") / "model"
    lines = (REPO / "data/demo/dialogues.jsonl").read_text().splitlines()
    lines += (REPO / "data/personas.yaml").read_text().splitlines()
    build_tiny_model(out, lines)
    return out


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from mascot.config import LLMEndpoint
    from mascot.llm.local_backend import LocalBackend

    return LocalBackend(LLMEndpoint(model=str(tiny_model_dir), batch_size=8))


@pytest.fixture
def demo_queries(personas):
    from mascot.data.queries import build_queries
    from mascot.data.sources.jsonl import load_jsonl_dialogues
    from mascot.io import BadRows

    dialogues = load_jsonl_dialogues(REPO / "data/demo/dialogues.jsonl", BadRows())
    return build_queries(dialogues, list(personas), 64, lambda t: len(t.split()), max_queries=3)
