"""The `validate` stage: the data gate before any training."""
from __future__ import annotations

import sys
from pathlib import Path

from mascot.io import load_jsonl, write_json, write_jsonl
from mascot.validate.gate import chance_warning, html_report, judge_accuracy_failures, summary, validate_data


class GateFailed(SystemExit):
    pass


def main(params, candidates_path: str = "data/candidates.jsonl", scores_path: str = "data/scores.jsonl",
         pairs_path: str = "data/pairs.jsonl", report_dir: str = "reports",
         judge_check_path: str = "metrics/judge_check.json", granularity: str = "reply",
         metrics_path: str = "metrics/validate.json") -> None:
    import json

    from mascot.granularity import GRANULARITIES

    candidates, scores = load_jsonl(candidates_path), load_jsonl(scores_path)
    pairs = load_jsonl(pairs_path)
    v = params.validate_
    if not Path(judge_check_path).exists():
        raise FileNotFoundError(f"{judge_check_path}: no judge_check figures; run the judge_check stage first "
                                "(the gate never passes a judge it has not measured)")
    judge_check = json.loads(Path(judge_check_path).read_text())
    g = GRANULARITIES[granularity]
    margin = (params.pairs if g.name == "reply" else params.group_pairs).score_margin
    results, quarantine = validate_data(candidates, scores, pairs, margin, v.min_pairs, granularity=g,
                                        judge_check=judge_check, judge_bar_on=v.judge_bar_on,
                                        judge_limits={"min_judge_accuracy": v.min_judge_accuracy,
                                                      "max_constant_group_fraction": v.max_constant_group_fraction,
                                                      "max_empty_reason_fraction": v.max_empty_reason_fraction})
    scored = sum(s["status"] == "scored" for s in scores)
    if scores and scored / len(scores) < params.validate_.min_scored_fraction:
        results.append({"table": "scores", "expectation": "min_scored_fraction", "column": None,
                        "kwargs": {"min": params.validate_.min_scored_fraction}, "success": False,
                        "unexpected_count": None, "element_count": round(scored / len(scores), 4),
                        "unexpected_index_list": [], "exception": None})
    judge_failed = judge_accuracy_failures(results)
    warning = (chance_warning(judge_failed, judge_check, v.min_judge_accuracy, v.judge_bar_on)
               if judge_failed and v.judge_gate == "warn" else None)
    # judge_gate warn: a judge below the bar does not stop the run, and everything after says so
    ok = all(r["success"] for r in results if not (warning and r in judge_failed))
    report = Path(report_dir)
    write_json(metrics_path, {"success": ok, "failed": sum(not r["success"] for r in results),
                              "judge_gate": v.judge_gate, "judge_bar_on": v.judge_bar_on,
                              "min_judge_accuracy": v.min_judge_accuracy, "judge_warning": warning})
    write_json(report / "validation.json", {"success": ok, "evaluated": len(results), "judge_warning": warning,
                                            "failed": sum(not r["success"] for r in results),
                                            "results": [{k: v for k, v in r.items() if k != "unexpected_index_list"}
                                                        for r in results]})
    (report / "validation.html").write_text(html_report(results), encoding="utf-8")
    write_jsonl(report / "quarantine.jsonl", quarantine)
    text = summary(results)
    if not ok:
        print(f"validate: data gate FAILED ({candidates_path}, {scores_path}, {pairs_path})\n{text}\n"
              f"offending rows: {report / 'quarantine.jsonl'}; report: {report / 'validation.html'}", file=sys.stderr)
        raise GateFailed(1)
    if warning:  # the judge's figures were let through: say what passed, then why the rest did not stop the run
        text = (f"all {len(results) - len(judge_failed)} other expectations passed; {len(judge_failed)} judge-accuracy "
                f"expectation(s) below the bar, let through by validate.judge_gate: warn")
    print(f"validate: {text}" + (f"\nvalidate: WARNING: {warning}" if warning else ""))



def main_group(params) -> None:
    """Stage 2's gate: the same expectations on episodes, block scores and block pairs, and the same judge
    (its judge_check figures and its block scores' signs of not judging)."""
    main(params, "data/group/episodes.jsonl", "data/group/scores.jsonl", "data/group/pairs.jsonl", "reports/group",
         granularity="block", metrics_path="metrics/validate_group.json")
