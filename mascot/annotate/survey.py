"""Stage 2 against people: a scorer of blocks (the collective judge, the group reward model) held to the seekers'
survey of each whole conversation (ESConv's `survey_score.seeker`: empathy and relevance 1-5, and how much better
the seeker felt, the emotion intensity before less after).

Each surveyed conversation gives one item, the human supporter's block (judge_check_group's reference and survey
items), so a conversation is one draw. Two figures per survey key: Spearman of the score and the survey with its
interval over conversations, and a pair figure: of two conversations whose survey differs by at least `min_gap`,
how often the better-rated one is scored higher (interval over conversations too).
"""
from __future__ import annotations

from mascot.annotate.reference_set import SURVEY_KEYS
from mascot.stats import DEFAULT_MIN_N, TOO_FEW, cluster_spearman_with_ci, conversation_pairs_agreement


def survey_figures(scored: list[tuple[dict, str, float]], min_gap: float = 2, min_n: int = DEFAULT_MIN_N) -> dict:
    """`scored`: (survey, conversation, score) of each conversation's human block -> {key: {spearman, pairs}}."""
    out = {}
    for key in SURVEY_KEYS:
        have = [(survey[key], conv, score) for survey, conv, score in scored if survey.get(key) is not None]
        ratings, convs, scores = ([h[k] for h in have] for k in range(3))
        out[key] = {"spearman": cluster_spearman_with_ci(scores, ratings, convs, min_n=min_n),
                    "pairs": conversation_pairs_agreement(scores, ratings, convs, min_gap, min_n=min_n)}
    return out


def flat_survey_figures(fig: dict, prefix: str = "survey") -> dict:
    """`survey_figures` as flat keys (metrics files, MLflow, version tags)."""
    out = {}
    for key, f in fig.items():
        rho, pairs = f["spearman"], f["pairs"]
        out.update({f"{prefix}_{key}_spearman": rho["mean"], f"{prefix}_{key}_spearman_ci_low": rho["ci_low"],
                    f"{prefix}_{key}_spearman_ci_high": rho["ci_high"], f"{prefix}_{key}_n": rho["n"],
                    f"{prefix}_{key}_pairs": pairs["mean"], f"{prefix}_{key}_pairs_ci_low": pairs["ci_low"],
                    f"{prefix}_{key}_pairs_ci_high": pairs["ci_high"], f"{prefix}_{key}_pairs_n": pairs["n"],
                    # below stats.min_n the interval is printed but decides nothing: the file says so too
                    f"{prefix}_{key}_too_few_to_tell": bool(rho.get("too_few_to_tell"))})
    return out


def survey_rows(flat: dict, prefix: str = "survey") -> list[dict]:
    """Each measured survey key's figures from `flat_survey_figures`, read once for every report that shows them:
    key, n, spearman (with ci_low, ci_high), pairs (with pairs_ci_low, pairs_ci_high, pairs_n)."""
    rows = []
    for key in SURVEY_KEYS:
        n = flat.get(f"{prefix}_{key}_n")
        if n:
            rows.append({"key": key, "n": n, **{name: flat.get(f"{prefix}_{key}_{name}") for name in (
                "spearman", "spearman_ci_low", "spearman_ci_high", "pairs", "pairs_ci_low", "pairs_ci_high",
                "pairs_n")}})
    return rows


def describe_survey(flat: dict, prefix: str = "survey", min_n: int = DEFAULT_MIN_N) -> str:
    """One line from `flat_survey_figures`: each key's Spearman and pair figure with its interval and n."""
    parts = []
    for r in survey_rows(flat, prefix):
        few = f"; {TOO_FEW}" if r["n"] < min_n else ""
        parts.append(f"{r['key']} Spearman {r['spearman']} [{r['spearman_ci_low']}, {r['spearman_ci_high']}] "
                     f"(n {r['n']}{few}), better-rated conversation scored higher {r['pairs']} "
                     f"[{r['pairs_ci_low']}, {r['pairs_ci_high']}] (n {r['pairs_n']} pairs)")
    return "; ".join(parts) if parts else "no surveyed conversation"
