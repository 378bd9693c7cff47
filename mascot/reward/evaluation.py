"""Reward-model evaluation on preference pairs: accuracy, margins, accuracy per score-gap bucket."""
from __future__ import annotations

from statistics import fmean

GAP_BUCKETS = [(0.0, 0.25), (0.25, 0.5), (0.5, 1.0), (1.0, 5.0)]


def bucket_name(lo: float, hi: float) -> str:
    return f"gap_{lo:g}_{hi:g}"


def pair_metrics(pairs: list[dict], chosen_scores: list[float], rejected_scores: list[float]) -> dict:
    """Strict accuracy (r_chosen > r_rejected), mean margin, and accuracy within each judge-gap bucket."""
    if not pairs:
        return {"pairs": 0, "accuracy": None, "mean_margin": None}
    from mascot.pairs import chosen_longer

    from mascot.stats import mean_with_ci

    correct = [c > r for c, r in zip(chosen_scores, rejected_scores)]
    fig = mean_with_ci([float(x) for x in correct], null=0.5)  # n, interval, sign test, too few to tell
    out = {"pairs": len(pairs), "accuracy": round(fmean(correct), 4), "accuracy_ci_low": fig["ci_low"],
           "accuracy_ci_high": fig["ci_high"], "accuracy_p_sign": fig["p_sign"],
           "accuracy_too_few_to_tell": fig["too_few_to_tell"],
           "conversations": len({p.get("conversation_id") or p.get("query_id") for p in pairs}),
           "mean_margin": round(fmean(c - r for c, r in zip(chosen_scores, rejected_scores)), 4)}
    # The shortcut a reward model may have learned instead of the rubric: "the longer reply wins" (a tie in
    # length is a coin flip). The model's accuracy where the chosen reply is NOT the longer one says
    # whether it learned anything else.
    longer = [chosen_longer(p) for p in pairs]
    out["length_baseline_accuracy"] = round(fmean(0.5 if x is None else float(x) for x in longer), 4)
    not_longer = [ok for ok, x in zip(correct, longer) if x is not True]
    out["not_longer_pairs"] = len(not_longer)
    out["accuracy_not_longer"] = round(fmean(not_longer), 4) if not_longer else None
    for lo, hi in GAP_BUCKETS:
        idx = [i for i, p in enumerate(pairs) if lo <= p["margin"] < hi]
        out[f"{bucket_name(lo, hi)}_pairs"] = len(idx)
        out[f"{bucket_name(lo, hi)}_accuracy"] = round(fmean(correct[i] for i in idx), 4) if idx else None
    return out


def reference_set_metrics(scorer, items: list[dict], personas: dict) -> dict:
    """The reward model on its judge's reference set (judge_check, judge_check_group): does it rank the human
    reply or block above the worse variants, as a judge should? Accuracy with bootstrap 95% intervals and n."""
    from mascot.reward.prompt import reward_input_ids
    from mascot.stats import mean_with_ci, pairwise_wins

    g = scorer.granularity
    rows, too_long = [], 0
    for i in items:
        for variant, (persona, context, side) in g.reference_sides(i, personas):
            if variant == "reference_padded":
                continue
            try:
                rows.append((i, variant, reward_input_ids(scorer.tokenizer, g, persona, context, side, scorer.max_length)[0]))
            except ValueError:  # longer than the model's max_length even without context: not measured, counted
                too_long += 1
    scores = scorer.score_ids([ids for *_, ids in rows])
    by_item: dict[str, dict[str, float]] = {}
    for (i, t, _), s in zip(rows, scores):
        by_item.setdefault(i["item_id"], {"kind": i["kind"]})[t] = s
    out = {"reference_too_long": too_long}
    for name, better, worse, kind in g.judge_comparisons:  # the judge's own comparisons, on the reward model
        both = [r for r in by_item.values() if r["kind"] == kind and better in r and worse in r]
        fig = mean_with_ci(pairwise_wins([r[better] for r in both], [r[worse] for r in both]), null=0.5)
        out.update({f"reference_{name}": fig["mean"], f"reference_{name}_ci_low": fig["ci_low"],
                    f"reference_{name}_ci_high": fig["ci_high"], f"reference_{name}_n": fig["n"]})
    return out


def plot_distributions(chosen: list[float], rejected: list[float], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = 20
    ax.hist(chosen, bins=bins, alpha=0.6, label=f"chosen (n={len(chosen)})")
    ax.hist(rejected, bins=bins, alpha=0.6, label=f"rejected (n={len(rejected)})")
    ax.set_xlabel("reward-model score")
    ax.set_ylabel("pairs")
    ax.set_title("Reward distributions on eval pairs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
