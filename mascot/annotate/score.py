"""The judge (the `score` stages run it: mascot/stages/score.py): an LLM rates each candidate on its rubric.

Modes: `expected` reads the judge's next-token distribution over the digits 1-5 for each dimension and
takes its mean (continuous scores, few ties); `json` asks for five integer scores with reasons under a
JSON schema. A candidate the judge could not score is recorded as unscored, with the reason; no score is
ever invented.
"""
from __future__ import annotations

from pathlib import Path
from statistics import fmean, pstdev

from mascot.annotate.function_judge import FunctionJudge
from mascot.annotate.rubric import (JudgeParseError, MIN_REASON_CHARS, PERSONA, Rubric, SCORE_CHOICES, expected_score,
                                    load_rubric)
from mascot.config import ScoreParams
from mascot.data.personas import Persona
from mascot.granularity import REPLY
from mascot.io import read_json
from mascot.llm.backend import LLMBackend
from mascot.resume import Journal, fingerprint, run_journaled


def _record(unit: dict, judge: str, mode: str, **fields) -> dict:
    base = {**unit["fields"], "judge_model": judge, "judge_mode": mode, "status": "scored", "scores": None,
            "total_reward": None, "unscored_reason": None}
    base.update(fields)
    return base


def _unscored(unit, judge, mode, reason, **extra) -> dict:
    return _record(unit, judge, mode, status="unscored", unscored_reason=reason, **extra)


def _score_expected(chunk, prompts_per_unit, rubric, params: ScoreParams, backend) -> list[dict]:
    dims = list(rubric.dimensions)
    prompts = [p for unit_prompts in prompts_per_unit for p in unit_prompts["expected"].values()]
    dists = backend.choice_distribution(prompts, SCORE_CHOICES)
    out = []
    for i, unit in enumerate(chunk):
        mine = dict(zip(dims, dists[i * len(dims): (i + 1) * len(dims)]))
        masses = {d: round(dist.mass, 4) for d, dist in mine.items()}
        weak = [d for d, m in masses.items() if m < params.min_choice_mass]
        if weak:
            out.append(_unscored(unit, backend.model_name, "expected",
                                 f"judge put under {params.min_choice_mass} probability on the digits 1-5 for {', '.join(weak)}",
                                 choice_mass=masses))
            continue
        scores = {d: round(expected_score(dist.probs), 4) for d, dist in mine.items()}
        out.append(_record(unit, backend.model_name, "expected", scores=scores,
                           total_reward=round(rubric.total(scores), 4), choice_mass=masses))
    return out


def _score_json(chunk, prompts_per_unit, rubric, params: ScoreParams, backend) -> list[dict]:
    """JSON ratings under the rubric's schema. A reply that does not parse is asked again in a way that can
    differ: one cut at its token budget gets twice the budget (up to 4x max_tokens), any other gets sampled
    at score.retry_temperature instead of greedy. Each record keeps its attempts."""
    prompts = [unit_prompts["json"] for unit_prompts in prompts_per_unit]
    results: dict[int, dict] = {}
    raws: dict[int, list[str]] = {i: [] for i in range(len(chunk))}
    tried: dict[int, list[dict]] = {i: [] for i in range(len(chunk))}
    settings = {i: (params.max_tokens, 0.0) for i in range(len(chunk))}  # (token budget, temperature)
    pending = list(range(len(chunk)))
    for attempt in range(params.max_parse_retries + 1):
        if not pending:
            break
        groups: dict[tuple, list[int]] = {}
        for i in pending:
            groups.setdefault(settings[i], []).append(i)
        still = []
        for (budget, temperature), members in groups.items():
            replies = backend.json_complete([prompts[i] for i in members], rubric.json_schema, budget, seed=attempt,
                                            temperature=temperature)
            for i, reply in zip(members, replies):
                raws[i].append(reply.text)
                tried[i].append({"max_tokens": budget, "temperature": temperature, "finish_reason": reply.finish_reason})
                try:
                    scores, reasons = rubric.parse_json(reply.text)
                except JudgeParseError as exc:
                    raws[i][-1] = f"{reply.text}  [{exc}]"
                    still.append(i)
                    settings[i] = ((min(budget * 2, params.max_tokens * 4), temperature) if reply.finish_reason == "length"
                                   else (budget, params.retry_temperature))
                    continue
                results[i] = _record(chunk[i], backend.model_name, "json", scores=scores,
                                     total_reward=round(rubric.total(scores), 4), reasons=reasons,
                                     attempts=attempt + 1, attempt_settings=tried[i])
        pending = still
    for i in pending:
        results[i] = _unscored(chunk[i], backend.model_name, "json",
                               f"judge reply unparseable after {params.max_parse_retries + 1} attempts",
                               raw_replies=raws[i], attempts=len(tried[i]), attempt_settings=tried[i])
    return [results[i] for i in range(len(chunk))]


def rubric_prompts(rubric: Rubric, item: str, params: ScoreParams, style: str) -> dict:
    if params.mode == "expected":
        return {"expected": rubric.expected_prompts(item, params.few_shot, style)}
    return {"json": rubric.json_prompt(item, params.few_shot, style)}


def judge_prompts(persona: Persona, context: list[dict], reply: str, params: ScoreParams, style: str) -> dict:
    return rubric_prompts(load_rubric(params.rubric), REPLY.judge_item(persona, context, reply), params, style)


def check_style(params: ScoreParams, prompt_style: str | None) -> str:
    style = prompt_style or params.prompt_style
    if style not in ("plain", "chat"):
        raise ValueError(f"score.prompt_style '{style}' must be resolved to plain or chat before scoring")
    return style


def _overlay_function(chunk, records, rubric, judge) -> list[dict]:
    """The function judge's scores on the dimensions it owns, over the LLM judge's record where one ran (kept
    as llm_scores). A unit the LLM judge could not score stays unscored: no score is half invented."""
    owned, out = judge.owned(rubric), []
    for unit, record in zip(chunk, records):
        if record is not None and record["status"] != "scored":
            out.append({**record, "judge_model": judge.model_name})
            continue
        scores = {**(record["scores"] if record else {}), **judge.rate(unit, rubric)}
        extra = {"llm_scores": record["scores"], "llm_mode": record["judge_mode"]} if record else {}
        base = {k: v for k, v in (record or {}).items() if k not in ("scores", "total_reward", "judge_model", "judge_mode")}
        out.append(_record(unit, judge.model_name, "function" if record is None else f"{record['judge_mode']}+function",
                           **base, scores=scores, total_reward=round(rubric.total(scores), 4),
                           function_dimensions=list(owned), **extra))
    return out


def score_units(units: list[dict], rubric: Rubric, params: ScoreParams, backend: LLMBackend | FunctionJudge,
                journal: Journal | None = None, chunk_size: int = 8, stats: dict | None = None,
                prompt_style: str | None = None) -> list[dict]:
    """Score each unit on `rubric`. A unit is {"id", "fields" (copied into its record), "item" (the rendered
    item the judge reads), "subject" (what a function judge reads), "skip" (a reason not to judge it, e.g. an
    empty reply, or None)}. One record per unit, in order; records already in `journal` are reused. `backend`
    is an LLM judge or a FunctionJudge (mascot/annotate/function_judge.py, with its own LLM judge or none)."""
    style = check_style(params, prompt_style)
    function = backend if isinstance(backend, FunctionJudge) else None
    llm = function.llm if function else backend
    if function:
        function.owned(rubric)  # a dimension the rubric lacks stops here, before any work
    identity = backend.identity  # once: a function judge's identity hashes its source file
    jobs = []
    for unit in units:
        todo = not unit.get("skip")
        prompts = rubric_prompts(rubric, unit["item"], params, style) if todo and llm is not None else None
        key = fingerprint(unit["id"], identity, params.mode, prompts, params.max_tokens,
                          params.max_parse_retries, params.min_choice_mass, unit.get("skip"),
                          unit.get("subject") if function else None)
        jobs.append((unit, prompts, key, todo))
    score_chunk = _score_expected if params.mode == "expected" else _score_json

    def compute(start: int, end: int) -> list[dict]:
        chunk = jobs[start:end]
        todo = [(unit, prompts) for unit, prompts, _, needed in chunk if needed]
        if not todo:
            scored = []
        else:
            scored = (score_chunk([u for u, _ in todo], [p for _, p in todo], rubric, params, llm)
                      if llm is not None else [None] * len(todo))
            if function:
                scored = _overlay_function([u for u, _ in todo], scored, rubric, function)
        scored_iter = iter(scored)
        mode = "function" if function and llm is None else params.mode
        return [{**(next(scored_iter) if needed else _unscored(unit, backend.model_name, mode, unit.get("skip"))),
                 "judge_prompt_style": style} for unit, _, _, needed in chunk]

    done = run_journaled([key for _, _, key, _ in jobs], compute, journal, chunk_size,
                         f"score {rubric.name} ({'function' if function and llm is None else params.mode})", 1, stats)
    # the total follows the rubric's aggregation, also for a journaled record judged under another: the judge's
    # ratings are the record, the total a function of them (changing `aggregate` asks the judge nothing again)
    return [with_total(done[key], rubric) for _, _, key, _ in jobs]


def with_total(record: dict, rubric: Rubric) -> dict:
    if record.get("status") != "scored" or not record.get("scores"):
        return record
    return {**record, "total_reward": round(rubric.total(record["scores"]), 4)}


def candidate_units(candidates: list[dict], queries: dict[str, dict], personas: dict[str, Persona]) -> list[dict]:
    return REPLY.judge_units(candidates, queries, personas)


def score_candidates(candidates: list[dict], queries: dict[str, dict], personas: dict[str, Persona],
                     params: ScoreParams, backend: LLMBackend, journal: Journal | None = None,
                     chunk_size: int = 8, stats: dict | None = None, prompt_style: str | None = None) -> list[dict]:
    """Stage 1: each candidate reply on the rubric `params.rubric` names; `prompt_style` (plain | chat)
    overrides `params.prompt_style` (e.g. once `auto` has been resolved by judge_check)."""
    return score_units(REPLY.judge_units(candidates, queries, personas), load_rubric(params.rubric), params, backend,
                       journal, chunk_size, stats, prompt_style)


def score_metrics(scores: list[dict], rubric: Rubric = PERSONA, group_fields: tuple[str, ...] = ("query_id", "persona")
                  ) -> dict:
    """Counts, mean and spread per dimension, and the signs of a judge that is not judging: items of one
    group (stage 1: a query and persona; stage 2: a prefix's branches) that all get the same total
    (`constant_group_fraction`), and json reasons too short to say anything (`empty_reason_fraction`)."""
    scored = [s for s in scores if s["status"] == "scored"]
    out = {"scored": len(scored), "unscored": len(scores) - len(scored)}
    for name in [*rubric.dimensions, "total_reward"]:
        values = [s["scores"][name] if name in rubric.dimensions else s["total_reward"] for s in scored]
        out[f"mean_{name}"] = round(fmean(values), 4) if values else None
        out[f"std_{name}"] = round(pstdev(values), 4) if values else None
    groups: dict[tuple, list[float]] = {}
    for s in scored:
        groups.setdefault(tuple(s[f] for f in group_fields), []).append(s["total_reward"])
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
    by: dict[str, list[float]] = {}
    for s in scores:
        if s["status"] == "scored":
            by.setdefault(queries.get(s["query_id"], {}).get("source", "unknown"), []).append(s["total_reward"])
    return {src: round(fmean(v), 4) for src, v in sorted(by.items())}


def resolve_prompt_style(params: ScoreParams, judge_check_metrics: str) -> str:
    """`auto` takes the prompt format judge_check measured as best for this judge (its figures: `judge_check_metrics`)."""
    if params.prompt_style != "auto":
        return params.prompt_style

    path = Path(judge_check_metrics)
    if not path.exists():
        raise FileNotFoundError(f"score.prompt_style is 'auto' but {path} does not exist; run the judge_check stage")
    return read_json(path)["chosen_prompt_style"]


