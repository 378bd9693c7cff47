"""An engine for in-process inference, chosen by measurement: transformers in fp32 (the stages' in-process backend
as it was), transformers in bf16, and the vLLM CPU build (`.venv-vllm`, the project's own `mascot serve`), side by
side on the same prompts,
for the speaker's generation (tokens per second) and for the judge's expected mode (judge_check's reference
set: seconds per item and the figures themselves, with their intervals).

The rule (docs/performance.md): adopt an engine only if it is at least 2x faster on both with judge_check's
figures within each other's intervals.

    python benchmarks/engines.py --repo <a tree after `dvc repro judge_check`> [--queries 8] [--replies 4]
        [--engines fp32,bf16,vllm]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(backend, queries, personas, items, params, replies: int) -> dict:
    from mascot.annotate.generate import generate_candidates
    from mascot.annotate.judge_check import run_judge_check

    gen = params.generate.model_copy(update={"num_agents_per_query": replies})
    start = time.perf_counter()
    candidates = generate_candidates(queries, personas, gen, backend)
    gen_s = time.perf_counter() - start
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(params.llm.judge.model)  # where a server reports only a request's total
    tokens = sum(c["completion_tokens"] if c["completion_tokens"] is not None
                 else len(tok(c["text"], add_special_tokens=False)["input_ids"]) for c in candidates)
    start = time.perf_counter()
    report, _, _ = run_judge_check(items, personas, params.score.model_copy(update={"mode": "expected"}), backend,
                                   ["plain"], ["expected"])
    judge_s = time.perf_counter() - start
    fig = report["by_prompt_style"]["plain"]["expected"]
    return {"replies": len(candidates), "tokens": tokens, "gen_s": gen_s, "tokens_per_s": tokens / gen_s,
            "items": len(items), "judge_s": judge_s, "judge_s_per_item": judge_s / len(items),
            "ref_gt_off_topic": fig["ref_gt_off_topic"], "ref_gt_cold": fig["ref_gt_cold"]}


def fmt(f: dict) -> str:
    return f"{f['mean']} [{f['ci_low']}, {f['ci_high']}] n={f['n']}"


def within(a: dict, b: dict) -> bool:
    return (a["ci_low"] is not None and b["ci_low"] is not None and a["ci_low"] <= b["mean"] <= a["ci_high"]
            and b["ci_low"] <= a["mean"] <= b["ci_high"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(ROOT))
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--replies", type=int, default=4)
    parser.add_argument("--engines", default="fp32,bf16,vllm", help="fp32 first: the others are compared with it")
    args = parser.parse_args()
    engines = args.engines.split(",")
    if engines[0] != "fp32" or not set(engines) <= {"fp32", "bf16", "vllm"}:
        sys.exit(f"--engines {args.engines}: fp32 first, then any of bf16, vllm")
    vllm_python = ROOT / ".venv-vllm/bin/python"
    if "vllm" in engines and not vllm_python.exists():  # before the in-process half, not after it
        sys.exit(f"{vllm_python}: no vLLM environment; create it with `make vllm-env`")
    os.chdir(args.repo)

    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.llm.local_backend import LocalBackend

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    queries = load_jsonl("data/queries.jsonl")[: args.queries]
    items = load_jsonl("data/judge_check/reference.jsonl")
    results = {}
    for dtype in [e for e in engines if e != "vllm"]:
        local = LocalBackend(params.llm.judge.model_copy(update={"dtype": DTYPES[dtype]}))
        results[f"transformers {dtype} (in-process)"] = measure(local, queries, personas, items, params, args.replies)
        local.close()
    if "vllm" in engines:
        results["vLLM CPU build (.venv-vllm)"] = measure_vllm(vllm_python, params, queries, personas, items, args.replies)
    report(results, params, args, items)


DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def measure_vllm(vllm_python, params, queries, personas, items, replies: int) -> dict:
    from mascot.config import LLMEndpoint
    from mascot.llm.openai_backend import OpenAIBackend
    from mascot.ops.serve import ServeConfig, VLLMServer

    model_dir = str(Path(params.llm.judge.model).resolve())
    port = free_port()
    server = VLLMServer(ServeConfig(model=model_dir, served_model_name=params.llm.judge.model, port=port,
                                    max_model_len=4096, python=str(vllm_python),
                                    log_path=f"/tmp/engines-vllm-{port}.log", ready_timeout_s=900))
    server.start()
    try:
        remote = OpenAIBackend(LLMEndpoint(backend="openai", model=params.llm.judge.model, base_url=server.base_url,
                                           max_concurrency=64, send_seed=False))
        return measure(remote, queries, personas, items, params, replies)
    finally:
        server.stop()


def report(results: dict, params, args, items) -> None:
    from mascot.precision import native_bf16

    bf16_native = native_bf16()

    print(f"# engines, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, no GPU; model "
          f"{params.llm.judge.model}; generation: {args.queries} queries x {args.replies} replies, max_tokens "
          f"{params.generate.max_tokens}; judge: judge_check's {len(items)} reference items, expected mode, plain; "
          f"native bf16 on this CPU: {bf16_native}")
    print("| engine | generated tokens | tokens/s | judge s/item | human > off-topic | human > cold |\n"
          "| --- | ---: | ---: | ---: | --- | --- |")
    for name, r in results.items():
        print(f"| {name} | {r['tokens']} | {r['tokens_per_s']:.1f} | {r['judge_s_per_item']:.2f} | "
              f"{fmt(r['ref_gt_off_topic'])} | {fmt(r['ref_gt_cold'])} |")
    names = list(results)
    base = results[names[0]]
    for name in names[1:]:
        other = results[name]
        gen_x = other["tokens_per_s"] / base["tokens_per_s"]
        judge_x = base["judge_s_per_item"] / other["judge_s_per_item"]
        same = (within(base["ref_gt_off_topic"], other["ref_gt_off_topic"])
                and within(base["ref_gt_cold"], other["ref_gt_cold"]))
        adopt = gen_x >= 2 and judge_x >= 2 and same
        print(f"\n{name} / {names[0]}: generation {gen_x:.2f}x, judge {judge_x:.2f}x; figures within each other's "
              f"intervals: {same}. {'adopt' if adopt else 'do not adopt'} (the rule: at least 2x on both, "
              f"figures within their intervals)")


if __name__ == "__main__":
    main()
