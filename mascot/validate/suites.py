"""Great Expectations suites for units (candidates or episodes), scores and pairs, at either granularity.

Checks that GE has no built-in for on pandas (total = mean of dimensions, chosen - rejected >= margin,
split disjoint by conversation, ids linked across files, no self-pairs, both sides from the pair's own group)
become derived columns with a plain range or set expectation, so every failure still reports its rows.
"""
from __future__ import annotations

import great_expectations.expectations as gxe
import pandas as pd
from great_expectations.expectations.row_conditions import Column

from mascot.granularity import REPLY, Granularity

TOL = 1e-3  # scores are stored rounded to 4 decimals


def units_frame(units: list[dict], g: Granularity = REPLY) -> pd.DataFrame:
    return pd.DataFrame([{g.unit_id: u.get(g.unit_id), "text": g.unit_text(u)} for u in units],
                        columns=[g.unit_id, "text"])


def units_suite(df: pd.DataFrame, g: Granularity = REPLY) -> list:
    return [gxe.ExpectColumnValuesToNotBeNull(column=g.unit_id),
            gxe.ExpectColumnValuesToBeUnique(column=g.unit_id),
            gxe.ExpectColumnValuesToNotBeNull(column="text")]


def scores_frame(scores: list[dict], units: list[dict], g: Granularity = REPLY, rubric=None) -> pd.DataFrame:
    text_by_id = {u[g.unit_id]: g.unit_text(u) for u in units}
    dimensions = list((rubric or g.rubric()).dimensions)
    rows = []
    for s in scores:
        row = {g.unit_id: s[g.unit_id], "status": s["status"], "total_reward": s["total_reward"],
               "unscored_reason": s.get("unscored_reason"), "unit_exists": s[g.unit_id] in text_by_id}
        dims = s.get("scores") or {}
        for d in dimensions:
            row[d] = dims.get(d)
        if s["status"] == "scored":  # the total is the rubric's aggregation of its dimensions (mean, min, weighted)
            row["total_minus_aggregate"] = (s["total_reward"] or 0) - (rubric or g.rubric()).total(
                {d: dims.get(d, 0) for d in dimensions})
            row["scored_text_chars"] = len(text_by_id.get(s[g.unit_id], "").strip())
        rows.append(row)
    return pd.DataFrame(rows, columns=[g.unit_id, "status", "total_reward", "unscored_reason",
                                       "unit_exists", *dimensions, "total_minus_aggregate", "scored_text_chars"])


def scores_suite(df: pd.DataFrame, g: Granularity = REPLY, rubric=None) -> list:
    dimensions = list((rubric or g.rubric()).dimensions)
    scored = dict(row_condition=Column("status") == "scored")
    unscored = dict(row_condition=Column("status") == "unscored")
    return [
        gxe.ExpectColumnValuesToBeUnique(column=g.unit_id),
        gxe.ExpectColumnValuesToBeInSet(column="unit_exists", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["scored", "unscored"]),
        *[gxe.ExpectColumnValuesToBeBetween(column=d, min_value=1, max_value=5, **scored) for d in dimensions],
        *[gxe.ExpectColumnValuesToNotBeNull(column=d, **scored) for d in dimensions],
        gxe.ExpectColumnValuesToBeBetween(column="total_reward", min_value=1, max_value=5, **scored),
        gxe.ExpectColumnValuesToBeBetween(column="total_minus_aggregate", min_value=-TOL, max_value=TOL, **scored),
        gxe.ExpectColumnValuesToBeBetween(column="scored_text_chars", min_value=1, **scored),
        gxe.ExpectColumnValuesToNotBeNull(column="unscored_reason", **unscored),
    ]


def _side_text(messages) -> str:
    return "\n".join(m.get("content", "") for m in messages or [])


def pairs_frame(pairs: list[dict], scores: list[dict], g: Granularity = REPLY) -> pd.DataFrame:
    scored = {s[g.unit_id] for s in scores if s["status"] == "scored"}
    group_of = {s[g.unit_id]: tuple(s.get(f) for f in g.group_fields) for s in scores}
    df = pd.DataFrame([{
        "pair_id": p.get("pair_id"), "query_id": p.get("query_id"), "split": p.get("split"),
        # pairs written before conversation ids: the query stands in (the check is then only per query)
        "conversation_id": p.get("conversation_id") or p.get("query_id"),
        "score_chosen": p.get("score_chosen"), "score_rejected": p.get("score_rejected"), "margin": p.get("margin"),
        "chosen_text": _side_text(p.get("chosen")), "rejected_text": _side_text(p.get("rejected")),
        "chosen_id": p.get("chosen_id"), "rejected_id": p.get("rejected_id"),
        "self_pair": p.get("chosen_id") == p.get("rejected_id"),
        # both sides come from the pair's own group (stage 1: query and persona; stage 2: the same prefix)
        "same_group": (group_of.get(p.get("chosen_id"), 0) == group_of.get(p.get("rejected_id"), 1)
                       == tuple(p.get(f) for f in g.group_fields)),
    } for p in pairs], columns=["pair_id", "query_id", "conversation_id", "split", "score_chosen", "score_rejected", "margin",
                                "chosen_text", "rejected_text", "chosen_id", "rejected_id", "self_pair",
                                "same_group"])
    # a human pair (pairs.human) is checked against its ratings, not the judge's scores: no link to a scored
    # unit, no query group, no judge margin
    human = pd.Series([p.get("pair_source") == "human" for p in pairs], dtype=bool, index=df.index)
    df["gap"] = (df["score_chosen"] - df["score_rejected"]).where(~human)
    df["margin_error"] = df["margin"] - (df["score_chosen"] - df["score_rejected"])
    df["texts_differ"] = df["chosen_text"].str.strip() != df["rejected_text"].str.strip()
    df["chosen_chars"] = df["chosen_text"].str.strip().str.len()
    df["rejected_chars"] = df["rejected_text"].str.strip().str.len()
    df["ids_linked"] = (df["chosen_id"].isin(scored) & df["rejected_id"].isin(scored)) | human
    df["same_group"] = df["same_group"] | human
    df["splits_of_query"] = df.groupby("query_id")["split"].transform("nunique") if len(df) else []
    df["splits_of_conversation"] = df.groupby("conversation_id")["split"].transform("nunique") if len(df) else []
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
        gxe.ExpectColumnValuesToBeInSet(column="self_pair", value_set=[False]),
        gxe.ExpectColumnValuesToBeInSet(column="same_group", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "eval"]),
        gxe.ExpectColumnValuesToBeBetween(column="splits_of_query", min_value=1, max_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="splits_of_conversation", min_value=1, max_value=1),
    ]


SPLIT_FIGURES = ("train_pairs", "eval_pairs", "heldout_queries")


def splits_frame(pairs: list[dict], counts: dict) -> pd.DataFrame:
    """One row: each split's size (pairs and conversations; held-out queries from `counts`, splits.split_counts):
    a split too small for what later stages do with it stops the gate, not a training run hours later."""
    row = {f"{split}_{what}": n for split in ("train", "eval") for what, n in (
        ("pairs", sum(p.get("split") == split for p in pairs)),
        ("conversations", len({p.get("conversation_id") or p.get("query_id") for p in pairs if p.get("split") == split})))}
    row.update(heldout_queries=counts.get("heldout_queries", 0), heldout_conversations=counts.get("heldout_conversations", 0))
    return pd.DataFrame([row], dtype=float)


def splits_suite(min_train_pairs: int, min_eval_pairs: int, min_heldout_queries: int) -> list:
    return [gxe.ExpectColumnValuesToBeBetween(column=name, min_value=bar) for name, bar in
            zip(SPLIT_FIGURES, (min_train_pairs, min_eval_pairs, min_heldout_queries))]


HUMAN = "human_pairs"  # judge_check's agreement with people: the higher-rated turn of a pair scored higher


def judge_frame(judge_check: dict, score_metrics: dict, bar_on: str = "lower_bound", g: Granularity = REPLY,
                human: bool = False) -> pd.DataFrame:
    """One row of judge-quality figures: judge_check's gated accuracies (their interval's lower bound, or the
    point estimate) and the scores' signs of a judge that is not judging (constant totals within a query, empty
    reasons). A missing figure is NaN (not gated); a missing lower bound (too few items for an interval) is 0.
    `human`: the agreement with people too (gated when a bar is set; never measured counts as 0)."""
    names = [*g.gated, HUMAN] if human else list(g.gated)
    if bar_on == "lower_bound":
        row = {name: (judge_check.get(f"{name}_ci_low") or 0.0) if judge_check.get(name) is not None else None
               for name in names}
    else:
        row = {name: judge_check.get(name) for name in names}
    if human and row[HUMAN] is None:
        row[HUMAN] = 0.0
    row["constant_group_fraction"] = score_metrics.get("constant_group_fraction")
    row["empty_reason_fraction"] = score_metrics.get("empty_reason_fraction")
    return pd.DataFrame([row], dtype=float)


def judge_suite(df: pd.DataFrame, min_judge_accuracy: float, max_constant_group_fraction: float,
                max_empty_reason_fraction: float, g: Granularity = REPLY,
                min_human_agreement: float | None = None) -> list:
    checks = [gxe.ExpectColumnValuesToBeBetween(column=name, min_value=min_judge_accuracy) for name in g.gated]
    if min_human_agreement is not None and HUMAN in df.columns:
        checks.append(gxe.ExpectColumnValuesToBeBetween(column=HUMAN, min_value=min_human_agreement))
    checks += [gxe.ExpectColumnValuesToBeBetween(column="constant_group_fraction", max_value=max_constant_group_fraction),
               gxe.ExpectColumnValuesToBeBetween(column="empty_reason_fraction", max_value=max_empty_reason_fraction)]
    return checks
