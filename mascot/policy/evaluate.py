"""The base policy and the GRPO policy side by side on held-out queries (the `evaluate` stage:
mascot/stages/evaluate.py).

Each policy answers the same queries; replies get the champion reward model's score and the data half's
rubric judge scores. One MLflow run per policy (comparable in `mlflow ui`), and a DVC metrics file.
"""
from __future__ import annotations

import re
from statistics import fmean

from mascot.annotate.generate import generate_candidates
from mascot.annotate.rubric import load_rubric
from mascot.annotate.score import score_candidates
from mascot.config import GenerateParams, Params
from mascot.granularity import persona_fields
from mascot.io import columns_of
from mascot.stats import DEFAULT_MIN_N, describe, describe_equal_length, equal_length_difference, mean_with_ci


def evaluate_policy(backend, queries, personas, judge, scorer, params: Params, judge_style: str) -> tuple[dict, list[dict]]:
    gen = GenerateParams(num_agents_per_query=1, prompt_style=params.grpo.prompt_style,
                         temperature=params.evaluate.temperature, max_tokens=params.evaluate.max_tokens,
                         seed=params.evaluate.seed)
    candidates = generate_candidates(queries, personas, gen, backend)
    by_q = {q["query_id"]: q for q in queries}
    rm = scorer.score([(persona_fields(personas[c["persona"]]), by_q[c["query_id"]]["context"], c["text"])
                       for c in candidates])
    scores = score_candidates(candidates, by_q, personas, params.score, judge,
                              prompt_style=judge_style)
    scored = [s for s in scores if s["status"] == "scored"]
    metrics = {"replies": len(candidates), "rm_mean_score": round(fmean(rm), 4) if rm else None,
               "mean_reply_words": round(fmean(len(c["text"].split()) for c in candidates), 2) if candidates else None,
               # replies cut at the token budget: a policy that gains only by running to the limit shows here
               "clipped_fraction": round(fmean(c.get("finish_reason") == "length" for c in candidates), 4)
               if candidates else None,
               "judge_scored": len(scored),
               "judge_total_reward": round(fmean(s["total_reward"] for s in scored), 4) if scored else None,
               **{f"judge_{d}": round(fmean(s["scores"][d] for s in scored), 4) if scored else None
                  for d in load_rubric(params.score.rubric).dimensions}}
    replies = [{**c, "rm_score": r, "judge": s} for c, r, s in zip(candidates, rm, scores)]
    return metrics, replies


def completions_table(replies: list[dict], queries: dict[str, dict]) -> dict[str, list]:
    """The evaluated replies as table columns: query, persona, the user's last message, the reply, how it ended,
    the reward model's score, the judge's total and each of its dimensions."""
    rows = []
    for r in replies:
        judge = r.get("judge") or {}
        rows.append({"probe": r["query_id"], "persona": r.get("persona"),
                     "prompt": queries[r["query_id"]]["context"][-1]["content"], "completion": r["text"],
                     "finish_reason": r.get("finish_reason"), "reward_model": r.get("rm_score"),
                     "judge_total": judge.get("total_reward"),
                     **{f"judge_{d}": v for d, v in (judge.get("scores") or {}).items()}})
    return columns_of(rows)


def _judged(name: str | None):
    """A reply's judge total (name None) or one dimension's score; None when the judge left it unscored."""
    def get(r):
        if r["judge"]["status"] != "scored":
            return None
        return r["judge"]["total_reward"] if name is None else r["judge"]["scores"][name]
    return get


def _carries(pattern: str):
    """1.0 when a reply carries a control's planted feature (its pattern), else 0.0."""
    compiled = re.compile(pattern)
    return lambda r: float(bool(compiled.search(r["text"])))


def _words(r) -> int:
    return len(r["text"].split())


def paired_differences(base: list[dict], grpo: list[dict], dimensions: tuple[str, ...] = (),
                       min_n: int = DEFAULT_MIN_N, conversation: dict[str, str] | None = None,
                       feature: str | None = None) -> dict:
    """GRPO minus base on the same queries: mean difference, paired bootstrap 95% interval, n, for the
    reward-model score, the judge total, each rubric dimension in `dimensions` and the reply length (words);
    the judge total again on the probes where the GRPO reply is not longer than the base reply; and each score's
    difference at equal length (`equal_length`: the intercept of the difference regressed on the word difference,
    its interval over conversations (`conversation`: query id -> conversation), the length-matched subset), so
    that a gain that is all length shows as such; with a control's `feature` (its pattern), the rate of replies
    that carry it (`planted_feature`). An interval that holds 0 is no evidence of a difference."""
    b_by = {r["candidate_id"].rsplit("|", 1)[0]: r for r in base}
    pairs = [(b_by[k], r) for r in grpo if (k := r["candidate_id"].rsplit("|", 1)[0]) in b_by]
    not_longer = [(b, g) for b, g in pairs if _words(g) <= _words(b)]
    conversation = conversation or {}
    out = {}
    for name, get, subset in (("rm_score", lambda r: r["rm_score"], pairs),
                              ("judge_total", _judged(None), pairs),
                              *((f"judge_{d}", _judged(d), pairs) for d in dimensions),
                              *((("planted_feature", _carries(feature), pairs),) if feature else ()),
                              ("judge_total_not_longer", _judged(None), not_longer),
                              ("reply_words", _words, pairs)):
        vals = [(b, g, get(b), get(g)) for b, g in subset]
        vals = [v for v in vals if v[2] is not None and v[3] is not None]
        fig = mean_with_ci([y - x for *_, x, y in vals], min_n=min_n)
        out[name] = {"base": round(fmean(x for *_, x, _ in vals), 4) if vals else None,
                     "grpo": round(fmean(y for *_, y in vals), 4) if vals else None,
                     "diff": fig["mean"], **{k: v for k, v in fig.items() if k != "mean"}}
        if subset is pairs and name != "reply_words":
            out[name]["equal_length"] = equal_length_difference(
                [y - x for *_, x, y in vals], [_words(g) - _words(b) for b, g, *_ in vals],
                [conversation.get(b.get("query_id"), b.get("query_id") or b["candidate_id"]) for b, *_ in vals],
                lengths=[(_words(b), _words(g)) for b, g, *_ in vals], min_n=min_n)
    return out


def describe_differences(diffs: dict, min_n: int = DEFAULT_MIN_N) -> list[str]:
    """evaluate's printout: each figure raw, and each score again at equal length."""
    lines = ["evaluate: GRPO - base on the same held-out queries (paired bootstrap 95% interval, n):"]
    for name, d in diffs.items():
        lines.append(f"  {name}: base {d['base']} grpo {d['grpo']} diff {describe({**d, 'mean': d['diff']}, min_n)}")
        if "equal_length" in d:
            lines.append(f"    at equal length (regressed on the word difference, interval over conversations): "
                         f"{describe_equal_length(d['equal_length'], min_n)}")
    return lines


def length_verdict(diff: dict) -> str:
    """Whether a score's gain is length: 'gain' (above 0 at equal length too), 'length' (above 0 raw, not at
    equal length, or only by extrapolation), 'none' (no raw gain)."""
    eq = diff.get("equal_length") or {}
    if diff.get("ci_low") is None or diff["ci_low"] <= 0:
        return "none"
    if eq.get("ci_low") is not None and eq["ci_low"] > 0 and not eq.get("extrapolated"):
        return "gain"
    return "length"


def flat_differences(diffs: dict) -> dict[str, float]:
    """The differences as MLflow metrics: `grpo_minus_base.<figure>.<diff|ci_low|...>` and the equal-length ones."""
    out = {}
    for name, d in diffs.items():
        for key in ("diff", "ci_low", "ci_high", "n"):
            out[f"grpo_minus_base.{name}.{key}"] = d.get(key)
        for key in ("mean", "ci_low", "ci_high", "n", "slope", "overlap"):
            out[f"grpo_minus_base.{name}.equal_length.{key}"] = (d.get("equal_length") or {}).get(key)
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def load_policy(base_model: str, adapter_dir: str | None):
    from transformers import AutoTokenizer

    from mascot.precision import load_causal_lm

    return load_causal_lm(base_model, adapter_dir=adapter_dir), AutoTokenizer.from_pretrained(base_model)


