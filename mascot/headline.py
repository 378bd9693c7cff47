"""Each stage's headline figures: what `dvc metrics show`, `dvc metrics diff` and `dvc exp show` list.

A stage writes every figure it measured to `reports/figures/<stage>.json` (a DVC output, read by later stages,
the evidence report and people); the command line then writes the numbers a person compares across runs to
`metrics/<stage>.json`, the file dvc.yaml declares as the stage's metrics: the figure, its interval and n, the
baseline it must beat. Strings, digests and per-item detail stay in the report and in MLflow.
"""
from __future__ import annotations

from pathlib import Path

from mascot.io import read_json, write_json

# stage -> {name shown: dotted path into its figures}; a path missing from a run (a figure that run did not measure) is
# left out. Names are unique across the pipeline: `dvc exp show` then heads a column with the bare name instead of
# "metrics/<stage>.json:<name>", which is what lets `--only-changed` after a sweep fit a 200-column terminal.
HEADLINE: dict[str, dict[str, str]] = {
    "base_model": {"base_model_seconds": "seconds"},
    "small_model": {"small_model_seconds": "seconds"},
    "prepare": {"queries": "queries", "heldout_queries": "heldout_queries"},
    "human_set": {"human_pairs": "pairs", "human_longer_wins": "length_baseline.mean"},
    "generate": {"candidates": "candidates", "reply_words": "mean_reply_words"},
    "judge_check": {"judge_vs_off_topic": "ref_gt_off_topic", "judge_human_acc": "human_pairs",
                    "judge_human_low": "human_pairs_ci_low", "judge_human_n": "human_pairs_n",
                    "judge_human_longer_wins": "human_length_baseline"},
    "score": {"scored": "scored", "unscored": "unscored"},
    "pairs": {"pairs": "pairs", "eval_pairs": "eval_pairs", "chosen_longer": "chosen_longer_fraction"},
    "validate": {"data_valid": "success"},
    # the judge's eval pairs' interval is the gate's (rm_gate_*) wherever the gate reads those pairs alone
    "train_rm": {"rm_acc": "eval_accuracy", "rm_eval_n": "eval_pairs", "rm_longer_wins": "eval_length_baseline_accuracy",
                 "rm_acc_equal_len": "eval_accuracy_equal_length", "rm_human_acc": "human_pairs",
                 "rm_human_n": "human_pairs_n"},
    "promote": {"rm_promoted": "promoted", "rm_gate_acc": "gate_accuracy", "rm_gate_low": "gate_accuracy_ci_low",
                "rm_gate_n": "gate_pairs", "rm_too_few": "too_few_to_tell", "rm_by_hand": "by_hand"},
    "train_grpo": {"watch_judge": "watch_judge_change", "watch_judge_low": "watch_judge_change_ci_low",
                   "watch_judge_equal_len": "watch_judge_equal_length_change", "watch_words": "watch_length_change",
                   "watch_n": "watch_n"},
    "evaluate": {"grpo_gain": "grpo_minus_base.judge_total.diff", "grpo_gain_low": "grpo_minus_base.judge_total.ci_low",
                 "grpo_gain_high": "grpo_minus_base.judge_total.ci_high", "grpo_gain_n": "grpo_minus_base.judge_total.n",
                 "grpo_gain_equal_len": "grpo_minus_base.judge_total.equal_length.mean",
                 "grpo_words": "grpo_minus_base.reply_words.diff"},
    "episodes": {"valid_branches": "valid_branches", "directive_parse_rate": "directive_parse_rate"},
    "judge_check_group": {"group_judge_vs_echo": "ref_gt_echo", "group_judge_n": "ref_gt_echo_n"},
    "score_group": {"group_scored": "scored"},
    "pairs_group": {"group_pairs": "pairs"},
    "validate_group": {"group_data_valid": "success"},
    "train_group_rm": {"group_rm_acc": "eval_accuracy", "group_rm_acc_low": "eval_accuracy_ci_low",
                       "group_rm_eval_n": "eval_pairs", "group_rm_longer_wins": "eval_length_baseline_accuracy"},
    "promote_group": {"group_rm_promoted": "promoted", "group_rm_too_few": "too_few_to_tell",
                      "group_rm_by_hand": "by_hand"},
    "train_director": {"director_watch_judge": "watch_judge_change", "director_format": "directive_format_last_step"},
    "evaluate_group": {"director_vs_random": "minus_random_collective_total.trained.diff",
                       "director_vs_random_low": "minus_random_collective_total.trained.ci_low",
                       "director_vs_random_n": "minus_random_collective_total.trained.n",
                       # a planted speaker (stage 2's positive control): how often each Director gives it the floor
                       "planted_trained": "planted_feature.rate.trained.mean",
                       "planted_vs_base": "planted_feature.trained_minus_base.mean",
                       "planted_vs_base_low": "planted_feature.trained_minus_base.ci_low",
                       "planted_vs_random": "planted_feature.trained_minus_random.mean",
                       "planted_vs_random_low": "planted_feature.trained_minus_random.ci_low",
                       "planted_vs_random_high": "planted_feature.trained_minus_random.ci_high",
                       "planted_n": "planted_feature.trained_minus_random.n"},
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
    """The stage's headline numbers (and yes/no decisions) out of all its figures, under their headline names."""
    out = {}
    for name, path in HEADLINE.get(stage, {}).items():
        value = _get(figures, path)
        if isinstance(value, (bool, int, float)):
            out[name] = value
    return out


def write_headline(stage: str, figures_path: str | Path, metrics_path: str | Path) -> None:
    """The stage's metrics file (dvc.yaml's `metrics:`) from the figures it wrote (its `--figures-path`)."""
    write_json(metrics_path, headline(stage, read_json(figures_path)))
