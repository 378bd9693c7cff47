"""The judge's cost per candidate: prompt tokens computed, generated tokens and seconds, for both judge modes,
in-process and on the vLLM CPU server with prefix caching on and off, on the same candidates.

In-process, "computed" counts a shared prefix once (the expected mode's KV reuse) and nothing twice; on vLLM it
is the server's own count: prompt tokens minus prefix-cache hits (`/metrics`). Runs the score stage's own
function (`score_units`) on the first N candidates of `data/candidates.jsonl`.

    python benchmarks/judge_cost.py --repo /path/after/make-repro [--candidates 32]
    python benchmarks/judge_cost.py --repo ... --inprocess-json-candidates 4   # the slow row on fewer
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import socket
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def vllm_counters(base_url: str) -> dict[str, float]:
    root = base_url.removesuffix("/v1")
    text = urllib.request.urlopen(f"{root}/metrics", timeout=10).read().decode()
    out = {}
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_hits_total",
                 "vllm:prefix_cache_queries_total"):
        values = [float(m) for m in re.findall(rf"^{re.escape(name)}{{[^}}]*}} ([0-9.e+]+)$", text, re.M)]
        out[name.split(":")[1]] = sum(values)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def score(units, params, backend, mode: str):
    from mascot.annotate.rubric import PERSONA
    from mascot.annotate.score import resolve_prompt_style, score_units
    from mascot.stage_args import dvc_cmd_options

    p = params.score.model_copy(update={"mode": mode})
    # as the score stage does: auto takes judge_check's choice, from the file dvc.yaml hands the stage
    style = resolve_prompt_style(params.score, dvc_cmd_options("score")["judge_check_path"])
    start = time.perf_counter()
    records = score_units(units, PERSONA, p, backend, None, prompt_style=style)
    return records, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(ROOT))
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--modes", default="expected,json")
    parser.add_argument("--inprocess-json-candidates", type=int, default=None,
                        help="judge only the first N of them in-process in json mode (default: all; it decodes "
                             "token by token at about 40 s a candidate on 2 cores)")
    args = parser.parse_args()
    vllm_python = ROOT / ".venv-vllm/bin/python"  # not resolved: the link is what makes it the venv
    os.chdir(args.repo)

    from mascot.annotate.score import candidate_units
    from mascot.config import LLMEndpoint, load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.llm.local_backend import LocalBackend
    from mascot.llm.openai_backend import OpenAIBackend
    from mascot.ops.serve import ServeConfig, VLLMServer

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    queries = {q["query_id"]: q for q in load_jsonl("data/queries.jsonl")}
    units = [u for u in candidate_units(load_jsonl("data/candidates.jsonl"), queries, personas)
             if not u.get("skip")][: args.candidates]
    modes = args.modes.split(",")
    rows = []

    local = LocalBackend(params.llm.judge)
    for mode in modes:
        mine = units[: args.inprocess_json_candidates] if mode == "json" else units
        before = local.token_counts.snapshot()
        records, seconds = score(mine, params, local, mode)
        ran = local.token_counts.since(before)
        rows.append(("in-process", mode, len(mine), ran.prompt_computed, ran.prompt_sent, ran.generated, seconds,
                     sum(r["status"] == "scored" for r in records)))
        print(f"in-process {mode}: {seconds:.1f} s", file=sys.stderr)

    model_dir = str(Path(params.llm.judge.model).resolve())
    for caching in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        port = free_port()
        server = VLLMServer(ServeConfig(model=model_dir, served_model_name="judge", port=port, max_model_len=4096,
                                        python=str(vllm_python), log_path=f"/tmp/judge-cost-vllm-{port}.log",
                                        extra_args=[caching], ready_timeout_s=900))
        server.start()
        try:
            backend = OpenAIBackend(LLMEndpoint(backend="openai", model="judge", base_url=server.base_url,
                                                max_concurrency=64, send_seed=False))
            for mode in modes:
                before = vllm_counters(server.base_url)
                records, seconds = score(units, params, backend, mode)
                after = vllm_counters(server.base_url)
                delta = {k: after[k] - before[k] for k in after}
                rows.append((f"vLLM {caching.removeprefix('--')}", mode, len(units),
                             int(delta["prompt_tokens_total"] - delta["prefix_cache_hits_total"]),
                             int(delta["prompt_tokens_total"]), int(delta["generation_tokens_total"]), seconds,
                             sum(r["status"] == "scored" for r in records)))
                print(f"vLLM {caching} {mode}: {seconds:.1f} s", file=sys.stderr)
        finally:
            server.stop()

    print(f"# judge cost per candidate, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, no GPU; "
          f"judge {params.llm.judge.model}, the first {len(units)} candidates, prompt style "
          f"{params.score.prompt_style}, few_shot {params.score.few_shot}")
    print("| judge | mode | candidates | prompt tokens computed / cand. | prompt tokens sent / cand. "
          "| generated / cand. | seconds / cand. | scored |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for where, mode, n, computed, sent, generated, seconds, scored in rows:
        print(f"| {where} | {mode} | {n} | {computed / n:.0f} | {sent / n:.0f} | {generated / n:.1f} | {seconds / n:.2f} "
              f"| {scored}/{n} |")


if __name__ == "__main__":
    main()
