"""Great Expectations suites for candidates, scores and pairs.

Checks that GE has no built-in for on pandas (total = mean of dimensions, chosen - rejected >= margin,
split disjoint by query, ids linked across files) become derived columns with a plain range or set
expectation, so every failure still reports its rows.
"""
from __future__ import annotations

import great_expectations.expectations as gxe
import pandas as pd
from great_expectations.expectations.row_conditions import Column

from mascot.annotate.judge_check import GATED
from mascot.annotate.rubric import DIMENSIONS

TOL = 1e-3  # scores are stored rounded to 4 decimals


def candidates_frame(candidates: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(candidates, columns=["candidate_id", "query_id", "persona", "text"])
    return df


def candidates_suite(df: pd.DataFrame) -> list:
    return [gxe.ExpectColumnValuesToNotBeNull(column="candidate_id"),
            gxe.ExpectColumnValuesToBeUnique(column="candidate_id"),
            gxe.ExpectColumnValuesToNotBeNull(column="text")]


def scores_frame(scores: list[dict], candidates: list[dict]) -> pd.DataFrame:
    text_by_id = {c["candidate_id"]: c["text"] for c in candidates}
    rows = []
    for s in scores:
        row = {"candidate_id": s["candidate_id"], "status": s["status"], "total_reward": s["total_reward"],
               "unscored_reason": s.get("unscored_reason"), "candidate_exists": s["candidate_id"] in text_by_id}
        dims = s.get("scores") or {}
        for d in DIMENSIONS:
            row[d] = dims.get(d)
        if s["status"] == "scored":
            mean = sum(dims.get(d, 0) for d in DIMENSIONS) / len(DIMENSIONS)
            row["total_minus_mean"] = (s["total_reward"] or 0) - mean
            row["scored_text_chars"] = len(text_by_id.get(s["candidate_id"], "").strip())
        rows.append(row)
    return pd.DataFrame(rows, columns=["candidate_id", "status", "total_reward", "unscored_reason",
                                       "candidate_exists", *DIMENSIONS, "total_minus_mean", "scored_text_chars"])


def scores_suite(df: pd.DataFrame) -> list:
    scored = dict(row_condition=Column("status") == "scored")
    unscored = dict(row_condition=Column("status") == "unscored")
    return [
        gxe.ExpectColumnValuesToBeUnique(column="candidate_id"),
        gxe.ExpectColumnValuesToBeInSet(column="candidate_exists", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["scored", "unscored"]),
        *[gxe.ExpectColumnValuesToBeBetween(column=d, min_value=1, max_value=5, **scored) for d in DIMENSIONS],
        *[gxe.ExpectColumnValuesToNotBeNull(column=d, **scored) for d in DIMENSIONS],
        gxe.ExpectColumnValuesToBeBetween(column="total_reward", min_value=1, max_value=5, **scored),
        gxe.ExpectColumnValuesToBeBetween(column="total_minus_mean", min_value=-TOL, max_value=TOL, **scored),
        gxe.ExpectColumnValuesToBeBetween(column="scored_text_chars", min_value=1, **scored),
        gxe.ExpectColumnValuesToNotBeNull(column="unscored_reason", **unscored),
    ]


def pairs_frame(pairs: list[dict], scores: list[dict]) -> pd.DataFrame:
    scored = {s["candidate_id"] for s in scores if s["status"] == "scored"}
    df = pd.DataFrame([{
        "pair_id": p.get("pair_id"), "query_id": p.get("query_id"), "split": p.get("split"),
        "score_chosen": p.get("score_chosen"), "score_rejected": p.get("score_rejected"), "margin": p.get("margin"),
        "chosen_text": (p.get("chosen") or [{}])[-1].get("content", ""),
        "rejected_text": (p.get("rejected") or [{}])[-1].get("content", ""),
        "chosen_id": p.get("chosen_id"), "rejected_id": p.get("rejected_id"),
    } for p in pairs], columns=["pair_id", "query_id", "split", "score_chosen", "score_rejected", "margin",
                                "chosen_text", "rejected_text", "chosen_id", "rejected_id"])
    df["gap"] = df["score_chosen"] - df["score_rejected"]
    df["margin_error"] = df["margin"] - df["gap"]
    df["texts_differ"] = df["chosen_text"].str.strip() != df["rejected_text"].str.strip()
    df["chosen_chars"] = df["chosen_text"].str.strip().str.len()
    df["rejected_chars"] = df["rejected_text"].str.strip().str.len()
    df["ids_linked"] = df["chosen_id"].isin(scored) & df["rejected_id"].isin(scored)
    df["splits_of_query"] = df.groupby("query_id")["split"].transform("nunique") if len(df) else []
    return df


def pairs_suite(df: pd.DataFrame, margin: float, min_pairs: int) -> list:
    return [
        gxe.ExpectTableRowCountToBeBetween(min_value=min_pairs),
        gxe.ExpectColumnValuesToBeUnique(column="pair_id"),
        gxe.ExpectColumnValuesToBeBetween(column="score_chosen", min_value=1, max_value=5),
        gxe.ExpectColumnValuesToBeBetween(column="score_rejected", min_value=1, max_value=5),
        gxe.ExpectColumnValuesToBeBetween(column="gap", min_value=margin - 1e-9),
        gxe.ExpectColumnValuesToBeBetween(column="margin_error", min_value=-TOL, max_value=TOL),
        gxe.ExpectColumnValuesToBeInSet(column="texts_differ", value_set=[True]),
        gxe.ExpectColumnValuesToBeBetween(column="chosen_chars", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="rejected_chars", min_value=1),
        gxe.ExpectColumnValuesToBeInSet(column="ids_linked", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "eval"]),
        gxe.ExpectColumnValuesToBeBetween(column="splits_of_query", min_value=1, max_value=1),
    ]


def judge_frame(judge_check: dict, score_metrics: dict) -> pd.DataFrame:
    """One row of judge-quality figures: judge_check's gated accuracies and the scores' signs of a judge that
    is not judging (constant totals within a query, empty reasons). A missing figure is NaN (not gated)."""
    row = {name: judge_check.get(name) for name in GATED}
    row["constant_group_fraction"] = score_metrics.get("constant_group_fraction")
    row["empty_reason_fraction"] = score_metrics.get("empty_reason_fraction")
    return pd.DataFrame([row], dtype=float)


def judge_suite(df: pd.DataFrame, min_judge_accuracy: float, max_constant_group_fraction: float,
                max_empty_reason_fraction: float) -> list:
    checks = [gxe.ExpectColumnValuesToBeBetween(column=name, min_value=min_judge_accuracy) for name in GATED]
    checks += [gxe.ExpectColumnValuesToBeBetween(column="constant_group_fraction", max_value=max_constant_group_fraction),
               gxe.ExpectColumnValuesToBeBetween(column="empty_reason_fraction", max_value=max_empty_reason_fraction)]
    return checks
