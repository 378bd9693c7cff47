"""The `base_model` and `small_model` stages: a model folder from its source (tiny, a shipped GGUF, a hub pin,
a local path)."""
from __future__ import annotations

from pathlib import Path
import time

from mascot.config import Params
from mascot.io import InputError, write_json
from mascot.llm.base_model import HubError, run_base_model


def main(params: Params, *, figures_path: str, block: str = "base_model") -> None:
    spec = getattr(params, block)
    # only the tiny tokenizer is trained on text; the other sources need none
    corpus = _demo_corpus_lines(params) if spec.source == "tiny" else []
    start = time.time()
    try:
        record = run_base_model(spec, corpus, block)
    except HubError as exc:
        raise InputError(str(exc)) from None
    seconds = round(time.time() - start, 1)
    write_json(figures_path, {**record, "out_dir": spec.out_dir, "seconds": seconds})
    pinned = f" at commit {record['commit']}" if record.get("commit") else ""
    print(f"{block}: {spec.source}{pinned} -> {spec.out_dir} in {seconds:.0f}s")


def main_small(params: Params, *, figures_path: str) -> None:
    main(params, figures_path=figures_path, block="small_model")


def _demo_corpus_lines(params: Params) -> list[str]:
    """Text for the tiny tokenizer: the personas and the corpora the pipeline will read."""
    lines = [Path(params.prepare.personas_file).read_text(encoding="utf-8")]
    for spec in params.prepare.sources:
        if Path(spec.path).exists():
            lines.extend(Path(spec.path).read_text(encoding="utf-8").splitlines()[:2000])
    return lines
