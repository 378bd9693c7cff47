"""In-process generation and judging against this machine's fp32 matmul peak, in one run.

First the peak: torch matmuls of a few sizes (GFLOP/s = 2 n^3 / s, the best size). Then, on the embedded
speaker and judge (params.yaml's `llm.speaker` / `llm.judge`, the default pipeline's own prompts from
`data/queries.jsonl` and `data/candidates.jsonl`):
- batched generation (the generate stage's prompts, n and max_tokens) at several batch sizes, the stage's among
  them;
- the judge's expected mode with the shared-prefix KV reuse (what the score stage runs) and without it;
- the judge's json mode.
Achieved model FLOP/s = 2 x the body's parameters x tokens computed per second, plus 2 x the LM head's for each
generated token (the embedding is a lookup; the head runs where logits are taken); prompt and generated tokens
are counted separately; padding is not counted, and a prefix computed once is counted once. Each figure is also
given as a fraction of the matmul peak. Rounds interleave the measurements; the table shows medians.

    python benchmarks/inprocess_flops.py --repo /path/after/make-repro [--rounds 2]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def matmul_peak(sizes=(512, 1024, 2048, 3072), seconds: float = 2.0) -> dict[int, float]:
    out = {}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)  # warm-up
        k, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            torch.mm(a, b)
            k += 1
        out[n] = 2 * n**3 * k / (time.perf_counter() - start) / 1e9
    return out


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied embeddings counted once


def flop_params(model) -> tuple[int, int]:
    """(body, head): the weights every token multiplies through, and the LM head's. The input embedding is a
    lookup (no FLOPs), and the head runs only where logits are taken: each generated token (and one row per
    prompt, not counted here). Counting 2 x all parameters x every token overstates a prefill-heavy path by the
    untied head and the embedding: for Qwen2.5-0.5B, 630 M parameters, 358 M of them body."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied = head.data_ptr() == embedding.data_ptr()
    return n_params(model) - embedding.numel() - (0 if tied else head.numel()), head.numel()


def model_flops(params: tuple[int, int], prompt_tokens: float, generated_tokens: float) -> float:
    """2 x body x every token computed + 2 x head x generated tokens (attention's own products left out: about
    6% more at these lengths)."""
    body, head = params
    return 2 * body * (prompt_tokens + generated_tokens) + 2 * head * generated_tokens


def generation_workload(params, queries, personas, n_requests: int):
    from mascot.annotate.generate import speaker_prompt
    from mascot.llm.backend import SampleRequest

    g = params.generate
    requests = []
    for q in queries:
        for name in q["personas"]:
            prompt, stop = speaker_prompt(personas[name], q["context"], g.prompt_style)
            requests.append(SampleRequest(prompt, g.num_agents_per_query, g.temperature, g.top_p, g.max_tokens,
                                          stop, g.seed))
            if len(requests) == n_requests:
                return requests
    return requests


def measure_generation(backend, requests, batch_size: int) -> dict:
    backend.batch_size = batch_size
    before, start = backend.token_counts.snapshot(), time.perf_counter()
    backend.sample(requests)
    seconds, ran = time.perf_counter() - start, backend.token_counts.since(before)
    return {"seconds": seconds, "prompt_tokens": ran.prompt_computed, "generated_tokens": ran.generated}


def judge_workload(params, queries, personas, candidates, n_candidates: int, mode: str):
    from mascot.annotate.rubric import PERSONA
    from mascot.annotate.score import candidate_units, resolve_prompt_style, rubric_prompts
    from mascot.stage_args import dvc_cmd_options

    units = [u for u in candidate_units(candidates, queries, personas) if not u.get("skip")][:n_candidates]
    p = params.score.model_copy(update={"mode": mode})
    # as the score stage does: auto takes judge_check's choice, from the file dvc.yaml hands the stage
    style = resolve_prompt_style(params.score, dvc_cmd_options("score")["judge_check_path"])
    prompts = [rubric_prompts(PERSONA, u["item"], p, style) for u in units]
    return [x for pr in prompts for x in (list(pr["expected"].values()) if mode == "expected" else [pr["json"]])]


def measure_expected(backend, prompts, reuse: bool) -> dict:
    from mascot.annotate.rubric import SCORE_CHOICES

    ids = torch.tensor(backend.choice_token_ids(list(SCORE_CHOICES)))
    texts = [backend._text(p) for p in prompts]
    before, start = backend.token_counts.snapshot(), time.perf_counter()
    if reuse:
        backend.choice_distribution(prompts, list(SCORE_CHOICES))
    else:
        backend._choice_distribution_plain(texts, ids, list(SCORE_CHOICES))
    seconds, ran = time.perf_counter() - start, backend.token_counts.since(before)
    return {"seconds": seconds, "prompt_tokens": ran.prompt_computed, "generated_tokens": 0,
            "prompt_tokens_if_no_reuse": ran.prompt_sent}


def measure_json(backend, prompts, max_tokens: int) -> dict:
    from mascot.annotate.rubric import PERSONA

    before, start = backend.token_counts.snapshot(), time.perf_counter()
    backend.json_complete(prompts, PERSONA.json_schema, max_tokens)
    seconds, ran = time.perf_counter() - start, backend.token_counts.since(before)
    return {"seconds": seconds, "prompt_tokens": ran.prompt_computed, "generated_tokens": ran.generated}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(ROOT), help="a working tree after `make repro` (default: this one)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=8, help="generate requests (each n samples)")
    parser.add_argument("--candidates", type=int, default=8, help="candidates judged in expected mode")
    parser.add_argument("--json-candidates", type=int, default=4)
    parser.add_argument("--batch-sizes", default="1,8,16,32")
    args = parser.parse_args()
    os.chdir(args.repo)

    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.llm.local_backend import LocalBackend

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    queries_list = load_jsonl("data/queries.jsonl")
    queries = {q["query_id"]: q for q in queries_list}
    candidates = load_jsonl("data/candidates.jsonl")
    speaker = LocalBackend(params.llm.speaker)
    judge = speaker if params.llm.judge.model == params.llm.speaker.model else LocalBackend(params.llm.judge)
    stage_batch = params.llm.speaker.batch_size
    sizes = sorted({*(int(x) for x in args.batch_sizes.split(",")), stage_batch})
    gen_requests = generation_workload(params, queries_list, personas, args.requests)
    expected_prompts = judge_workload(params, queries, personas, candidates, args.candidates, "expected")
    json_prompts = judge_workload(params, queries, personas, candidates, args.json_candidates, "json")

    peaks, results = [], {}
    for r in range(args.rounds):
        peaks.append(max(matmul_peak().values()))
        cases = [(f"generate, batch {b}{' (the stage)' if b == stage_batch else ''}", speaker,
                  lambda b=b: measure_generation(speaker, gen_requests, b)) for b in sizes]
        cases += [("judge expected, KV reuse (the stage)", judge, lambda: measure_expected(judge, expected_prompts, True)),
                  ("judge expected, no reuse", judge, lambda: measure_expected(judge, expected_prompts, False)),
                  ("judge json", judge, lambda: measure_json(judge, json_prompts, params.score.max_tokens))]
        judge.batch_size = params.llm.judge.batch_size
        for label, backend, fn in (cases if r % 2 == 0 else cases[::-1]):
            if backend is judge:
                judge.batch_size = params.llm.judge.batch_size
            results.setdefault(label, []).append((flop_params(backend.model), fn()))
            print(f"round {r + 1}: {label}: {results[label][-1][1]['seconds']:.1f} s", file=sys.stderr)
    peak = statistics.median(peaks)
    print(f"# in-process generation and judging, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, "
          f"{'GPU' if torch.cuda.is_available() else 'no GPU'}, torch {torch.__version__}, {torch.get_num_threads()} "
          f"threads; median of {args.rounds} interleaved rounds")
    print(f"fp32 matmul peak: {peak:.1f} GFLOP/s (best of sizes 512-3072)\n")
    print("| path | seconds | prompt tok/s | generated tok/s | model GFLOP/s | of peak |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, runs in results.items():
        sec = statistics.median(x["seconds"] for _, x in runs)
        prompt = runs[0][1]["prompt_tokens"]
        gen = statistics.median(x["generated_tokens"] for _, x in runs)
        flops = model_flops(runs[0][0], prompt, gen) / sec / 1e9
        print(f"| {label} | {sec:.1f} | {prompt / sec:.0f} | {gen / sec:.1f} | {flops:.1f} | {flops / peak:.0%} |")
    reuse = results.get("judge expected, KV reuse (the stage)")
    if reuse:
        x = reuse[0][1]
        print(f"\nexpected mode: {x['prompt_tokens_if_no_reuse']} prompt tokens without reuse, {x['prompt_tokens']} "
              f"computed with it ({x['prompt_tokens'] / x['prompt_tokens_if_no_reuse']:.0%})")
    body, head = flop_params(speaker.model)
    print(f"models: speaker {params.llm.speaker.model} ({n_params(speaker.model) / 1e6:.0f} M parameters: body "
          f"{body / 1e6:.0f} M, head {head / 1e6:.0f} M), judge "
          f"{params.llm.judge.model}; {len(gen_requests)} generate requests x n={params.generate.num_agents_per_query}, "
          f"max_tokens {params.generate.max_tokens}; {args.candidates} candidates x 5 expected prompts; "
          f"{args.json_candidates} json candidates")


if __name__ == "__main__":
    main()
