"""The `validate` and `validate_group` stages: the data gate (Great Expectations) before training."""
from __future__ import annotations

from pathlib import Path
import sys

from mascot.granularity import GRANULARITIES
from mascot.io import load_jsonl, read_json, write_json, write_jsonl
from mascot.splits import split_counts
from mascot.validate.gate import gate, html_report, human_warning, summary
from mascot.validate.suites import HUMAN


class GateFailed(SystemExit):
    """The gate said no: the stage exits non-zero (DVC stops the chain here)."""


def main(params, candidates_path: str | None = None, scores_path: str | None = None, pairs_path: str | None = None,
         report_dir: str | None = None, judge_check_path: str | None = None, granularity: str = "reply",
         metrics_path: str | None = None, queries_path: str = "data/queries.jsonl") -> None:
    """The gate of one granularity: its units, scores and pairs (the files `Granularity.files` names) and its
    judge (the figures in `Granularity.judge_check_metrics`, held to its params block's min_judge_accuracy).
    A path given overrides the granularity's file."""
    g = GRANULARITIES[granularity]
    metrics_path = metrics_path or g.files["validate"]
    stage = Path(g.files["validate"]).stem
    candidates_path, scores_path = candidates_path or g.files["units"], scores_path or g.files["scores"]
    pairs_path = pairs_path or g.files["pairs"]
    candidates, scores = load_jsonl(candidates_path), load_jsonl(scores_path)
    pairs = load_jsonl(pairs_path)
    counts = split_counts(load_jsonl(queries_path), params.heldout)
    v = params.validate_
    bar = g.min_judge_accuracy(params)
    judge_check_path = judge_check_path or g.judge_check_metrics
    if not Path(judge_check_path).exists():
        raise FileNotFoundError(f"{judge_check_path}: no judge_check figures for the {g.rubric(params).name} rubric; run "
                                "its judge_check stage first (the gate never passes a judge it has not measured)")
    judge_check = read_json(judge_check_path)
    results, quarantine, judge_failed, warning, ok = gate(params, g, candidates, scores, pairs, judge_check, counts)
    report = Path(report_dir or g.files["reports"])
    write_json(metrics_path, {"success": ok, "failed": sum(not r["success"] for r in results),
                                     "judge_gate": v.judge_gate, "judge_bar_on": v.judge_bar_on,
                                     "min_judge_accuracy": bar, "judge_figures": judge_check_path,
                                     "min_human_agreement": v.min_human_agreement if g.human_ratings else None,
                                     "judge_human_pairs": judge_check.get("human_pairs"),
                                     "judge_warning": warning})
    write_json(report / "validation.json", {"success": ok, "evaluated": len(results), "judge_warning": warning,
                                            "failed": sum(not r["success"] for r in results),
                                            "results": [{k: v for k, v in r.items() if k != "unexpected_index_list"}
                                                        for r in results]})
    (report / "validation.html").write_text(html_report(results), encoding="utf-8")
    write_jsonl(report / "quarantine.jsonl", quarantine)
    text = summary(results, g)
    if not warning and any(r["column"] == HUMAN for r in judge_failed):
        text += f"\n    {human_warning(judge_check, v.min_human_agreement, v.judge_bar_on, params.stats.min_n)}"
    if not ok:
        print(f"{stage}: data gate FAILED ({candidates_path}, {scores_path}, {pairs_path})\n{text}\n"
              f"offending rows: {report / 'quarantine.jsonl'}; report: {report / 'validation.html'}", file=sys.stderr)
        raise GateFailed(1)
    if warning:  # the judge's figures were let through: say what passed, then why the rest did not stop the run
        text = (f"all {len(results) - len(judge_failed)} other expectations passed; {len(judge_failed)} judge-accuracy "
                f"expectation(s) below the bar, let through by validate.judge_gate: warn")
    print(f"{stage}: {text}" + (f"\n{stage}: WARNING: {warning}" if warning else ""))


def main_group(params) -> None:
    """Stage 2's gate: the same expectations on episodes, block scores and block pairs; its judge is measured
    on the collective rubric's reference set (judge_check_group) and held to validate_group.min_judge_accuracy."""
    main(params, granularity="block")
