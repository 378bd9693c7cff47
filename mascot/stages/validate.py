"""The `validate` and `validate_group` stages: the data gate (Great Expectations) before training."""
from __future__ import annotations

from pathlib import Path
import sys

from mascot.config import Params
from mascot.granularity import GRANULARITIES
from mascot.io import load_jsonl, read_json, write_json, write_jsonl
from mascot.splits import split_counts
from mascot.validate.gate import gate, html_report, human_warning, summary
from mascot.validate.suites import HUMAN


class GateFailed(SystemExit):
    """The gate said no: the stage exits non-zero (DVC stops the chain here)."""


def main(params: Params, *, queries_path: str, units_path: str, scores_path: str, pairs_path: str, judge_check_path: str,
         report_dir: str, figures_path: str, granularity: str = "reply") -> None:
    """The gate of one granularity: its units (candidates or episodes), scores and pairs, and its judge (the
    figures its judge_check stage wrote, held to its params block's min_judge_accuracy)."""
    g = GRANULARITIES[granularity]
    stage = g.judge_gate_block  # validate | validate_group
    candidates, scores = load_jsonl(units_path), load_jsonl(scores_path)
    pairs = load_jsonl(pairs_path)
    counts = split_counts(load_jsonl(queries_path), params.heldout)
    v = params.validate_
    bar = g.min_judge_accuracy(params)
    if not Path(judge_check_path).exists():
        raise FileNotFoundError(f"{judge_check_path}: no judge_check figures for the {g.rubric(params).name} rubric; run "
                                "its judge_check stage first (the gate never passes a judge it has not measured)")
    judge_check = read_json(judge_check_path)
    results, quarantine, judge_failed, warning, ok = gate(params, g, candidates, scores, pairs, judge_check, counts)
    report = Path(report_dir)
    write_json(figures_path, {"success": ok, "failed": sum(not r["success"] for r in results),
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
        print(f"{stage}: data gate FAILED ({units_path}, {scores_path}, {pairs_path})\n{text}\n"
              f"offending rows: {report / 'quarantine.jsonl'}; report: {report / 'validation.html'}", file=sys.stderr)
        raise GateFailed(1)
    if warning:  # the judge's figures were let through: say what passed, then why the rest did not stop the run
        text = (f"all {len(results) - len(judge_failed)} other expectations passed; {len(judge_failed)} judge-accuracy "
                f"expectation(s) below the bar, let through by validate.judge_gate: warn")
    print(f"{stage}: {text}" + (f"\n{stage}: WARNING: {warning}" if warning else ""))


def main_group(params: Params, *, queries_path: str, units_path: str, scores_path: str, pairs_path: str,
               judge_check_path: str, report_dir: str, figures_path: str) -> None:
    """Stage 2's gate: the same expectations on episodes, block scores and block pairs; its judge is measured
    on the collective rubric's reference set (judge_check_group) and held to validate_group.min_judge_accuracy."""
    main(params, queries_path=queries_path, units_path=units_path, scores_path=scores_path, pairs_path=pairs_path,
         judge_check_path=judge_check_path, report_dir=report_dir, figures_path=figures_path, granularity="block")
