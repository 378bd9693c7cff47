"""Run the suites, summarise, and write the JSON result, an HTML report and a quarantine file."""
from __future__ import annotations

import html
import json
import logging

import great_expectations as gx
from great_expectations.data_context.types.base import ProgressBarsConfig
import pandas as pd

from mascot import stats
from mascot.annotate.score import score_metrics
from mascot.config import Params
from mascot.granularity import Granularity, REPLY
from mascot.stats import DEFAULT_MIN_N
from mascot.validate import suites


def run_suite(context, name: str, df: pd.DataFrame, expectations: list) -> list[dict]:
    asset = context.data_sources.add_pandas(f"{name}_source").add_dataframe_asset(name)
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
    suite = context.suites.add(gx.ExpectationSuite(name=f"{name}_suite", expectations=expectations))
    result = batch.validate(suite, result_format={"result_format": "COMPLETE"})
    rows = []
    for r in result.results:
        cfg = r.expectation_config
        res = r.result or {}
        rows.append({
            "table": name, "expectation": cfg.type,
            "column": cfg.kwargs.get("column"), "kwargs": {k: v for k, v in cfg.kwargs.items()
                                                         if k not in ("column", "batch_id")},
            "success": bool(r.success), "unexpected_count": res.get("unexpected_count", 0 if r.success else None),
            "element_count": res.get("element_count", res.get("observed_value")),
            "unexpected_index_list": res.get("unexpected_index_list") or [],
            "exception": (r.exception_info or {}).get("exception_message") if not r.success else None,
            "observed": (None if df.empty or cfg.kwargs.get("column") not in df.columns
                         else _plain(df[cfg.kwargs["column"]].iloc[0])) if name in ("judge", "splits") else None,
        })
    return rows


def _plain(value):
    return None if value != value else round(float(value), 4)  # NaN -> None


def validate_data(candidates: list[dict], scores: list[dict], pairs: list[dict], margin: float,
                  min_pairs: int, judge_check: dict | None = None, judge_limits: dict | None = None,
                  granularity: Granularity = REPLY, judge_bar_on: str = "lower_bound",
                  rubric=None, split_counts: dict | None = None,
                  split_limits: dict | None = None) -> tuple[list[dict], list[dict]]:
    """All expectation results and the quarantined rows (each with the expectations it broke). `candidates`
    are the units of `granularity`: candidate replies (stage 1) or episodes (stage 2); `rubric` the one they
    were scored on (default: the granularity's shipped rubric).

    With `judge_check` (its metrics) and `judge_limits` (min_judge_accuracy, max_constant_group_fraction,
    max_empty_reason_fraction), the judge's own quality is gated too: table `judge`, one column a figure. With
    `split_limits` (min_train_pairs, min_eval_pairs, min_heldout_queries), each split's size: table `splits`
    (`split_counts`: splits.split_counts of the queries, for the held-out split)."""
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    g = granularity
    rubric = rubric or g.rubric()
    units = g.units_table
    frames = {units: suites.units_frame(candidates, g),
              "scores": suites.scores_frame(scores, candidates, g, rubric),
              "pairs": suites.pairs_frame(pairs, scores, g)}
    plans = {units: suites.units_suite(frames[units], g),
             "scores": suites.scores_suite(frames["scores"], g, rubric),
             "pairs": suites.pairs_suite(frames["pairs"], margin, min_pairs)}
    if judge_limits is not None:
        frames["judge"] = suites.judge_frame(judge_check or {}, score_metrics(scores, rubric, g.group_fields),
                                             judge_bar_on, g, human=judge_limits.get("min_human_agreement") is not None)
        plans["judge"] = suites.judge_suite(frames["judge"], **judge_limits, g=g)
    if split_limits is not None:
        frames["splits"] = suites.splits_frame(pairs, split_counts or {})
        plans["splits"] = suites.splits_suite(**split_limits)
    results = [row for name in frames for row in run_suite(context, name, frames[name], plans[name])]
    sources = {units: candidates, "scores": scores, "pairs": pairs, "judge": frames["judge"].to_dict("records") if "judge" in frames else [],
               "splits": frames["splits"].to_dict("records") if "splits" in frames else []}
    broken: dict[tuple[str, int], list[str]] = {}
    for r in results:
        for idx in r["unexpected_index_list"]:
            label = f"{r['expectation']}({r['column']})" if r["column"] else r["expectation"]
            broken.setdefault((r["table"], int(idx)), []).append(label)
    quarantine = [{"table": t, "row": i, "broken": labels, "record": sources[t][i]}
                  for (t, i), labels in sorted(broken.items())]
    return results, quarantine


def judge_accuracy_failures(results: list[dict], g: Granularity = REPLY) -> list[dict]:
    """The failed judge-accuracy expectations (the ones validate.judge_gate: warn lets through)."""
    return [r for r in results if not r["success"] and r["table"] == "judge" and r["column"] in (*g.gated, suites.HUMAN)]


def human_warning(judge_check: dict, bar: float, bar_on: str, min_n: int = DEFAULT_MIN_N) -> str:
    """In words: how far the judge agrees with people, against its bar and against the length baseline."""
    fig = judge_check.get(suites.HUMAN)
    if fig is None:
        return (f"the judge was measured against no people (no human reference set: add an ESConv source, or JSONL "
                f"messages with a `rating`), so validate.min_human_agreement {bar} cannot be met")
    base, controlled = judge_check.get("human_length_baseline"), judge_check.get("human_pairs_controlled")
    beat = ("beat" if base is not None and fig > base else "did not beat")
    n = judge_check.get("human_pairs_n") or 0
    few = f" ({stats.TOO_FEW}: n < {min_n})" if n < min_n else ""
    where = "its 95% interval's lower bound" if bar_on == "lower_bound" else "the point estimate"
    return (f"against people the judge scored the higher-rated of two supporter turns higher in {fig} "
            f"[{judge_check.get('human_pairs_ci_low')}, {judge_check.get('human_pairs_ci_high')}] of "
            f"{n} pairs from {judge_check.get('human_pairs_conversations')} conversations{few}; "
            f"{where} is below validate.min_human_agreement {bar}. It {beat} \"the longer turn wins\" ({base}) on "
            f"the same pairs; where the preferred turn is not the longer one it scored {controlled} "
            f"(n {judge_check.get('human_pairs_controlled_n')}). A reward model trained on its scores learns what it "
            "prefers, not what the seekers did")


def chance_warning(failed: list[dict], judge_check: dict, bar: float, bar_on: str, g: Granularity = REPLY,
                   human_bar: float | None = None, min_n: int = DEFAULT_MIN_N) -> str:
    """In words: the judge could not be told from chance, on which figures, and what follows; and, when it
    failed the human bar, how far it agrees with people."""
    human = [r for r in failed if r["column"] == suites.HUMAN]
    failed = [r for r in failed if r["column"] != suites.HUMAN]
    people = human_warning(judge_check, human_bar, bar_on, min_n) if human else None
    if not failed:
        return f"{people} (validate.judge_gate: warn)"
    figures = "; ".join(
        f"{g.judge_figure_words.get(r['column'], r['column'])} {judge_check.get(r['column'])} [{judge_check.get(r['column'] + '_ci_low')}, "
        f"{judge_check.get(r['column'] + '_ci_high')}] (n {judge_check.get(r['column'] + '_n')})" for r in failed)
    where = "its 95% interval's lower bound" if bar_on == "lower_bound" else "the point estimate"
    # an interval wholly below 0.5 is not chance: the judge prefers the worse side, and says so
    inverted = [g.judge_figure_words.get(r["column"], r["column"]) for r in failed
                if (judge_check.get(r["column"] + "_ci_high") if judge_check.get(r["column"] + "_ci_high") is not None
                    else 1.0) < 0.5]
    head = "the judge cannot be told from chance" + (
        f", and on {', '.join(inverted)} it is worse than chance (the whole interval below 0.5: it prefers the "
        "worse side)" if inverted else "")
    return (f"{head}: {figures}; {where} is below {g.judge_gate_block}.min_judge_accuracy {bar}. "
            "Its scores, the pairs built from them, the reward model trained on those pairs and every policy "
            "comparison after it may rest on noise: read them as the pipeline working, not as preferences"
            + (f". And {people}" if people else "") + " (validate.judge_gate: warn)")


JUDGE_HINTS = {
    "constant_group_fraction": "share of queries whose candidates all got the same total: the judge is not "
                               "telling replies apart (bar: validate.max_constant_group_fraction)",
    "empty_reason_fraction": "share of json-mode reasons too short to say anything "
                             "(bar: validate.max_empty_reason_fraction)",
}


SPLIT_HINTS = {
    "train_pairs": "pairs in the train split, which the reward model trains on (bar: {gate}.min_train_pairs): "
                   "add queries (prepare.sources' max_queries), lower {pairs}.score_margin or {pairs}.eval_fraction",
    "eval_pairs": "pairs in the eval split, which promote's gate measures (bar: {gate}.min_eval_pairs): raise "
                  "{pairs}.eval_fraction or add queries (prepare.sources' max_queries); a version that cannot be "
                  "measured can never be promoted",
    "heldout_queries": "held-out queries, which the watch, evaluate and evaluate_group use (bar: "
                       "{gate}.min_heldout_queries): raise heldout.fraction or add queries",
}


def summary(results: list[dict], g: Granularity = REPLY) -> str:
    failed = [r for r in results if not r["success"]]
    if not failed:
        return f"all {len(results)} expectations passed"
    lines = [f"{len(failed)} of {len(results)} expectations failed:"]
    for r in failed:
        where = f"{r['table']}.{r['column']}" if r["column"] else r["table"]
        if r["table"] == "judge" and r["column"] == suites.HUMAN:
            lines.append(f"  - judge quality: {r['column']} = {r.get('observed')}, below "
                         f"{r['kwargs'].get('min_value')} (the judge's agreement with people, {g.judge_check_stage}'s "
                         "human_pairs; bar: validate.min_human_agreement)")
            continue
        if r["table"] == "judge":
            lines.append(f"  - judge quality: {r['column']} = {r.get('observed')} is outside "
                         f"{json.dumps({k: v for k, v in r['kwargs'].items() if k in ('min_value', 'max_value')})}"
                         f" ({JUDGE_HINTS.get(r['column']) or g.judge_figure_hint(r['column'])})")
            continue
        if r["table"] == "splits":
            lines.append(f"  - split too small: {r['column']} = {r.get('observed')}, below {r['kwargs'].get('min_value')} "
                         f"({SPLIT_HINTS[r['column']].format(pairs=g.pairs_block, gate=g.judge_gate_block)})")
            continue
        what = (f"{r['unexpected_count']} of {r['element_count']} rows unexpected"
                if r["column"] else f"observed {r['element_count']}")
        lines.append(f"  - {where}: {r['expectation']} {json.dumps(r['kwargs'], default=str)}: {what}"
                     + (f" ({r['exception']})" if r["exception"] else ""))
    return "\n".join(lines)


def html_report(results: list[dict]) -> str:
    rows = "".join(
        f"<tr class={'ok' if r['success'] else 'fail'}><td>{html.escape(r['table'])}</td>"
        f"<td>{html.escape(str(r['column'] or ''))}</td><td>{html.escape(r['expectation'])}</td>"
        f"<td>{html.escape(json.dumps(r['kwargs'], default=str))}</td>"
        f"<td>{'pass' if r['success'] else 'FAIL'}</td><td>{r['unexpected_count']}</td></tr>" for r in results)
    failed = sum(not r["success"] for r in results)
    return ("<!doctype html><meta charset=utf-8><title>mascot data gate</title><style>"
            "body{font-family:sans-serif}td,th{padding:4px 8px;border-bottom:1px solid #ddd}"
            ".fail{background:#fdd}.ok{background:#efe}</style>"
            f"<h1>Data gate: {'PASSED' if not failed else f'FAILED ({failed})'}</h1>"
            "<table><tr><th>table</th><th>column</th><th>expectation</th><th>arguments</th><th>result</th>"
            f"<th>unexpected rows</th></tr>{rows}</table>")


def gate(params: Params, g, candidates: list[dict], scores: list[dict], pairs: list[dict], judge_check: dict,
         counts: dict) -> tuple[list[dict], list[dict], list[dict], str | None, bool]:
    """The gate on data already loaded: (expectation results, quarantined rows, the judge figures that failed,
    the judge warning if validate.judge_gate lets them through, whether the gate passes)."""
    v, bar = params.validate_, g.min_judge_accuracy(params)
    results, quarantine = validate_data(candidates, scores, pairs, g.pairs_params(params).score_margin, v.min_pairs,
                                        granularity=g, rubric=g.rubric(params),
                                        judge_check=judge_check, judge_bar_on=v.judge_bar_on,
                                        judge_limits={"min_judge_accuracy": bar,
                                                      "max_constant_group_fraction": v.max_constant_group_fraction,
                                                      "max_empty_reason_fraction": v.max_empty_reason_fraction,
                                                      "min_human_agreement": v.min_human_agreement
                                                      if g.human_ratings else None},
                                        split_counts=counts,
                                        split_limits=g.split_limits(params))
    scored = sum(s["status"] == "scored" for s in scores)
    if scores and scored / len(scores) < v.min_scored_fraction:
        results.append({"table": "scores", "expectation": "min_scored_fraction", "column": None,
                        "kwargs": {"min": v.min_scored_fraction}, "success": False,
                        "unexpected_count": None, "element_count": round(scored / len(scores), 4),
                        "unexpected_index_list": [], "exception": None})
    judge_failed = judge_accuracy_failures(results, g)
    warning = (chance_warning(judge_failed, judge_check, bar, v.judge_bar_on, g, v.min_human_agreement,
                              params.stats.min_n)
               if judge_failed and v.judge_gate == "warn" else None)
    # judge_gate warn: a judge below the bar does not stop the run, and everything after says so
    ok = all(r["success"] for r in results if not (warning and r in judge_failed))
    return results, quarantine, judge_failed, warning, ok
