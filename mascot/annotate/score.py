"""The `score` stage: an LLM judge rates each candidate on the five-dimension rubric.

Modes: `expected` reads the judge's next-token distribution over the digits 1-5 for each dimension and
takes its mean (continuous scores, few ties); `json` asks for five integer scores with reasons under a
JSON schema. A candidate the judge could not score is recorded as unscored, with the reason; no score is
ever invented.
"""
from __future__ import annotations

from mascot.annotate.rubric import (DIMENSIONS, JSON_SCHEMA, MIN_REASON_CHARS, SCORE_CHOICES, JudgeParseError,
                                    expected_prompts, expected_score, json_prompt, parse_json_scores, total_reward)
from mascot.config import ScoreParams
from mascot.data.personas import Persona, resolve_persona
from mascot.llm.backend import LLMBackend
from mascot.progress import bar
from mascot.resume import Journal, fingerprint


def _record(cand: dict, judge: str, mode: str, **fields) -> dict:
    base = {"candidate_id": cand["candidate_id"], "query_id": cand["query_id"], "persona": cand["persona"],
            "judge_model": judge, "judge_mode": mode, "status": "scored", "scores": None, "total_reward": None,
            "unscored_reason": None}
    base.update(fields)
    return base


def _unscored(cand, judge, mode, reason, **extra) -> dict:
    return _record(cand, judge, mode, status="unscored", unscored_reason=reason, **extra)


def _score_expected(chunk, prompts_per_cand, params, backend) -> list[dict]:
    prompts = [p for cand_prompts in prompts_per_cand for p in cand_prompts["expected"].values()]
    dists = backend.choice_distribution(prompts, SCORE_CHOICES)
    out = []
    for i, cand in enumerate(chunk):
        mine = dict(zip(DIMENSIONS, dists[i * len(DIMENSIONS): (i + 1) * len(DIMENSIONS)]))
        masses = {d: round(dist.mass, 4) for d, dist in mine.items()}
        weak = [d for d, m in masses.items() if m < params.min_choice_mass]
        if weak:
            out.append(_unscored(cand, backend.model_name, "expected",
                                 f"judge put under {params.min_choice_mass} probability on the digits 1-5 for {', '.join(weak)}",
                                 choice_mass=masses))
            continue
        scores = {d: round(expected_score(dist.probs), 4) for d, dist in mine.items()}
        out.append(_record(cand, backend.model_name, "expected", scores=scores,
                           total_reward=round(total_reward(scores), 4), choice_mass=masses))
    return out


def _score_json(chunk, prompts_per_cand, params, backend) -> list[dict]:
    prompts = [cand_prompts["json"] for cand_prompts in prompts_per_cand]
    results: dict[int, dict] = {}
    raws: dict[int, list[str]] = {i: [] for i in range(len(chunk))}
    pending = list(range(len(chunk)))
    for attempt in range(params.max_parse_retries + 1):
        if not pending:
            break
        replies = backend.json_complete([prompts[i] for i in pending], JSON_SCHEMA, params.max_tokens, seed=attempt)
        still = []
        for i, reply in zip(pending, replies):
            raws[i].append(reply.text)
            try:
                scores, reasons = parse_json_scores(reply.text)
            except JudgeParseError as exc:
                raws[i][-1] = f"{reply.text}  [{exc}]"
                still.append(i)
                continue
            results[i] = _record(chunk[i], backend.model_name, "json", scores=scores,
                                 total_reward=round(total_reward(scores), 4), reasons=reasons, attempts=attempt + 1)
        pending = still
    for i in pending:
        results[i] = _unscored(chunk[i], backend.model_name, "json",
                               f"judge reply unparseable after {params.max_parse_retries + 1} attempts",
                               raw_replies=raws[i])
    return [results[i] for i in range(len(chunk))]


def judge_prompts(persona: Persona, context: list[dict], reply: str, params: ScoreParams, style: str) -> dict:
    if params.mode == "expected":
        return {"expected": expected_prompts(persona, context, reply, params.few_shot, style)}
    return {"json": json_prompt(persona, context, reply, params.few_shot, style)}


def score_candidates(candidates: list[dict], queries: dict[str, dict], personas: dict[str, Persona],
                     params: ScoreParams, backend: LLMBackend, journal: Journal | None = None,
                     chunk_size: int = 8, stats: dict | None = None, prompt_style: str | None = None) -> list[dict]:
    """Score each candidate; `prompt_style` (plain | chat) overrides `params.prompt_style` (e.g. once `auto`
    has been resolved by judge_check)."""
    style = prompt_style or params.prompt_style
    if style not in ("plain", "chat"):
        raise ValueError(f"score.prompt_style '{style}' must be resolved to plain or chat before scoring")
    jobs = []
    for cand in candidates:
        q = queries.get(cand["query_id"])
        if q is None:
            raise ValueError(f"candidate {cand['candidate_id']}: query {cand['query_id']} is not in the queries file")
        persona = resolve_persona(personas, cand["persona"], f"candidate {cand['candidate_id']}")
        prompts = judge_prompts(persona, q["context"], cand["text"], params, style)
        key = fingerprint(cand["candidate_id"], backend.model_name, params.mode, prompts, params.max_tokens,
                          params.max_parse_retries, params.min_choice_mass)
        jobs.append((cand, prompts, key))
    done = {key: journal.get(key) for _, _, key in jobs if journal and journal.get(key)}
    if stats is not None:
        stats.update(reused=len(done), total=len(jobs))
    progress = bar(len(jobs), f"score ({params.mode})", initial=len(done))
    score_chunk = _score_expected if params.mode == "expected" else _score_json
    # Fixed chunks over all jobs (as in generate): a chunk redone after a crash is batched as in a clean run.
    for start in range(0, len(jobs), chunk_size):
        chunk = jobs[start: start + chunk_size]
        if all(key in done for _, _, key in chunk):
            continue
        texts = [(cand, prefix, key) for cand, prefix, key in chunk if cand["text"].strip()]
        records = dict(zip([key for _, _, key in texts],
                           score_chunk([c for c, _, _ in texts], [p for _, p, _ in texts], params, backend)
                           if texts else []))
        for cand, _, key in chunk:
            record = {**(records.get(key) or _unscored(cand, backend.model_name, params.mode, "empty reply")),
                      "judge_prompt_style": style}
            if key not in done:
                done[key] = record
                if journal:
                    journal.add(key, record)
        if journal:
            journal.flush()
        progress.update(len(chunk))
    progress.close()
    if journal:
        journal.retain({key for *_, key in jobs})
    return [done[key] for _, _, key in jobs]


def score_metrics(scores: list[dict]) -> dict:
    """Counts, mean and spread per dimension, and the signs of a judge that is not judging: candidates of one
    query and persona that all get the same total (`constant_group_fraction`), and json reasons too short to
    say anything (`empty_reason_fraction`)."""
    from statistics import fmean, pstdev

    scored = [s for s in scores if s["status"] == "scored"]
    out = {"scored": len(scored), "unscored": len(scores) - len(scored)}
    for name in [*DIMENSIONS, "total_reward"]:
        values = [s["scores"][name] if name in DIMENSIONS else s["total_reward"] for s in scored]
        out[f"mean_{name}"] = round(fmean(values), 4) if values else None
        out[f"std_{name}"] = round(pstdev(values), 4) if values else None
    groups: dict[tuple, list[float]] = {}
    for s in scored:
        groups.setdefault((s["query_id"], s["persona"]), []).append(s["total_reward"])
    multi = [g for g in groups.values() if len(g) > 1]
    out["groups"] = len(multi)
    out["constant_group_fraction"] = round(sum(max(g) - min(g) < 1e-9 for g in multi) / len(multi), 4) if multi else None
    reasons = [r for s in scored for r in (s.get("reasons") or {}).values()]
    out["empty_reason_fraction"] = (round(sum(len(r.strip()) < MIN_REASON_CHARS for r in reasons) / len(reasons), 4)
                                    if reasons else None)
    return out


def mean_total_by_source(scores: list[dict], queries: dict[str, dict]) -> dict[str, float]:
    """Mean judge total per corpus: does the companion framing of each source give the judge something to
    judge (a source scored far below the others is read as off-task)?"""
    from statistics import fmean

    by: dict[str, list[float]] = {}
    for s in scores:
        if s["status"] == "scored":
            by.setdefault(queries.get(s["query_id"], {}).get("source", "unknown"), []).append(s["total_reward"])
    return {src: round(fmean(v), 4) for src, v in sorted(by.items())}


def resolve_prompt_style(params: ScoreParams, judge_check_metrics: str = "metrics/judge_check.json") -> str:
    """`auto` takes the prompt format judge_check measured as best for this judge."""
    if params.prompt_style != "auto":
        return params.prompt_style
    import json
    from pathlib import Path

    path = Path(judge_check_metrics)
    if not path.exists():
        raise FileNotFoundError(f"score.prompt_style is 'auto' but {path} does not exist; run the judge_check stage")
    return json.loads(path.read_text())["chosen_prompt_style"]


def main(params, queries_path: str = "data/queries.jsonl", candidates_path: str = "data/candidates.jsonl",
         out: str = "data/scores.jsonl", metrics: str = "metrics/score.json") -> None:
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl, write_json, write_jsonl
    from mascot.llm.backend import make_backend

    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    candidates = load_jsonl(candidates_path)
    personas = load_personas(params.prepare.personas_file)
    backend = make_backend(params.llm.judge, "llm.judge")
    journal, stats = Journal("score"), {}
    style = resolve_prompt_style(params.score)
    try:
        scores = score_candidates(candidates, queries, personas, params.score, backend, journal, stats=stats,
                                  prompt_style=style)
    finally:
        journal.close()
        backend.close()
    write_jsonl(out, scores)
    m = {**score_metrics(scores), "prompt_style": style, "resumed": stats["reused"],
         "mean_total_reward_by_source": mean_total_by_source(scores, queries)}
    write_json(metrics, m)
    print(f"score: {m['scored']} scored, {m['unscored']} unscored -> {out}")
