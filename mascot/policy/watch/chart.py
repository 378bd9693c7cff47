"""The watch's checks drawn: a CSV of each check's means for `dvc plots`, and one PNG of the run."""
from __future__ import annotations

import csv
from pathlib import Path

from mascot.policy.watch.verdict import FIGURES


def write_csv(checks: list[dict], path: str | Path) -> None:
    """One row per check: step and the mean of each figure (`dvc plots`: reward model, judge, length and KL by
    step; judge and reward model against KL)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["step", *[f"mean_{f}" for f in FIGURES]])
        for c in checks:
            writer.writerow([c["step"], *[c.get(f"mean_{f}") for f in FIGURES]])


def plot_png(checks: list[dict], result: dict, path: str | Path, title: str) -> None:
    """The watch as one picture: reward model, judge and length by step, then judge and reward model against
    the KL from the base policy (where it was measured), the verdict in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in checks]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.4))
    # a minimum span per axis, so that a change of a thousandth of a judge point does not fill the panel
    panels = (("reward_model", "reward model (mean over probes)", 0.5), ("judge", "judge total (1-5)", 0.5),
              ("length", "words per answer", 4.0))
    for ax, (fig_name, label, span) in zip(axes, panels):
        values = [c[f"mean_{fig_name}"] for c in checks]
        ax.plot(steps, values, marker="o")
        known = [v for v in values if v is not None]
        if known and max(known) - min(known) < span:
            mid = (max(known) + min(known)) / 2
            ax.set_ylim(mid - span / 2, mid + span / 2)
        ax.set_xlabel("step")
        ax.set_title(label, fontsize=9)
    kl = [c.get("mean_kl") for c in checks]
    ax = axes[3]
    if all(v is not None for v in kl):
        ax.plot(kl, [c["mean_judge"] for c in checks], marker="o", color="tab:blue", label="judge")
        ax.set_ylabel("judge total", color="tab:blue", fontsize=8)
        twin = ax.twinx()
        twin.plot(kl, [c["mean_reward_model"] for c in checks], marker="s", color="tab:orange", label="reward model")
        twin.set_ylabel("reward model", color="tab:orange", fontsize=8)
        ax.set_xlabel("KL from the base policy (nats per completion)")
    else:
        ax.text(0.5, 0.5, "KL not measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("judge and reward model against KL", fontsize=9)
    n = result.get("n")
    fig.suptitle(f"{title}: {result['verdict']} (n={n} probes, {len(checks)} checks)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
