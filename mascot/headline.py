"""Each stage's headline figures: what `dvc metrics show`, `dvc metrics diff` and `dvc exp show` list.

A stage writes every figure it measured to `reports/figures/<stage>.json` (a DVC output, read by later stages,
the evidence report and people); the command line then writes the numbers a person compares across runs to
`metrics/<stage>.json`, the file dvc.yaml declares as the stage's metrics: the figure, its interval and n, the
baseline it must beat. Strings, digests and per-item detail stay in the report and in MLflow.
"""
from __future__ import annotations

from pathlib import Path

from mascot.io import read_json, write_json

# stage -> dotted paths into its figures; a path missing from a run (a figure that run did not measure) is left out
HEADLINE: dict[str, tuple[str, ...]] = {
    "base_model": ("seconds",),
    "small_model": ("seconds",),
    "prepare": ("queries", "heldout_queries"),
    "human_set": ("pairs", "length_baseline.mean"),
    "generate": ("candidates", "mean_reply_words"),
    "judge_check": ("ref_gt_off_topic", "human_pairs", "human_pairs_ci_low", "human_pairs_n", "human_length_baseline"),
    "score": ("scored", "unscored"),
    "pairs": ("pairs", "eval_pairs", "chosen_longer_fraction"),
    "validate": ("success",),
    "train_rm": ("eval_accuracy", "eval_accuracy_ci_low", "eval_accuracy_ci_high", "eval_pairs",
                 "eval_length_baseline_accuracy", "eval_accuracy_equal_length", "human_pairs", "human_pairs_n"),
    "promote": ("promoted",),
    "train_grpo": ("watch_judge_change", "watch_judge_change_ci_low", "watch_judge_equal_length_change",
                   "watch_length_change", "watch_n"),
    "evaluate": ("grpo_minus_base.judge_total.diff", "grpo_minus_base.judge_total.ci_low",
                 "grpo_minus_base.judge_total.ci_high", "grpo_minus_base.judge_total.n",
                 "grpo_minus_base.judge_total.equal_length.mean", "grpo_minus_base.reply_words.diff"),
    "episodes": ("valid_branches", "directive_parse_rate"),
    "judge_check_group": ("ref_gt_echo", "ref_gt_echo_n"),
    "score_group": ("scored",),
    "pairs_group": ("pairs",),
    "validate_group": ("success",),
    "train_group_rm": ("eval_accuracy", "eval_accuracy_ci_low", "eval_pairs", "eval_length_baseline_accuracy"),
    "promote_group": ("promoted",),
    "train_director": ("watch_judge_change", "directive_format_last_step"),
    "evaluate_group": ("minus_random_collective_total.trained.diff", "minus_random_collective_total.trained.ci_low",
                       "minus_random_collective_total.trained.n"),
}


def _get(figures, path: str):
    """The value at a dotted path; a key may itself hold dots (`ref_gt_off_topic.perceived_empathy`)."""
    if not isinstance(figures, dict):
        return None
    if path in figures:
        return figures[path]
    head, _, rest = path.partition(".")
    return _get(figures.get(head), rest) if rest else None


def headline(stage: str, figures: dict) -> dict:
    """The stage's headline numbers (and yes/no decisions) out of all its figures, keyed by their dotted paths."""
    out = {}
    for path in HEADLINE.get(stage, ()):
        value = _get(figures, path)
        if isinstance(value, (bool, int, float)):
            out[path] = value
    return out


def write_headline(stage: str, reports: str | Path = "reports/figures", metrics: str | Path = "metrics") -> None:
    """metrics/<stage>.json from reports/figures/<stage>.json (after the stage wrote it)."""
    write_json(Path(metrics) / f"{stage}.json", headline(stage, read_json(Path(reports) / f"{stage}.json")))
