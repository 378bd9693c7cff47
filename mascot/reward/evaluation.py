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
    correct = [c > r for c, r in zip(chosen_scores, rejected_scores)]
    out = {"pairs": len(pairs), "accuracy": round(fmean(correct), 4),
           "mean_margin": round(fmean(c - r for c, r in zip(chosen_scores, rejected_scores)), 4)}
    for lo, hi in GAP_BUCKETS:
        idx = [i for i, p in enumerate(pairs) if lo <= p["margin"] < hi]
        out[f"{bucket_name(lo, hi)}_pairs"] = len(idx)
        out[f"{bucket_name(lo, hi)}_accuracy"] = round(fmean(correct[i] for i in idx), 4) if idx else None
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
