"""The watch: the judge looks at the policy while GRPO optimises the reward model, so that reward hacking
(the reward-model score rising while the quality it stood for stalls or falls; Gao et al. 2022) is seen
while it happens, not after.

At step 0, every `every_steps` steps and at the last step the current policy answers a fixed probe set
(held-out queries, never trained on; greedy, or
sampled at a fixed seed with `watch.temperature`), and each answer is scored by the reward model being optimised,
by the judge on its rubric, by its length and repetition (distinct-2), and by how far the policy has moved: the
KL of the current policy from the base policy (the adapter off) on the answer's own tokens. With GRPO's default
beta of 0 TRL loads no reference model and logs no KL, so this is the run's only measure of that distance; the
judge and the reward model against it are Gao et al.'s picture of over-optimisation (the proxy rises with KL,
the gold score peaks and falls). At the end a verdict compares the last check with step 0, per probe (a paired
bootstrap over the probes), and says at which step and KL the judge peaked:

- `too few to tell`: fewer than `stats.min_n` probes or fewer than `watch.min_checks` checks;
- `not learning`: the reward model's change has an interval reaching 0 or below;
- `over-optimising`: the reward model up and the judge's mean change below `watch.judge_margin`
  (flat or down);
- `improving`: the reward model up and the judge up by at least the margin, its interval above 0;
- `gain is length`: what would be `improving`, but the judge's change at equal length (regressed on the change in
  words, per probe) has an interval reaching 0, or is read by extrapolation (almost every answer grew);
- `too few to tell` also when the judge rose by at least the margin but its interval reaches 0.

A check whose probes got fewer than `stats.min_n` distinct answers (a collapsed policy) measures that many texts:
the verdict compares step 0 with the last check that still had enough, and says where the answers collapsed.

The pure functions here (`probe_row`, `verdict`, `should_stop`, `flat_metrics`) hold the rule; `callback.py`
runs the checks inside TRL's trainer, `kl.py` measures the distance, `chart.py` draws the checks.
"""
from __future__ import annotations

from typing import NamedTuple

from mascot.stats import DEFAULT_MIN_N, describe_equal_length, equal_length_difference, mean_with_ci, spearman

IMPROVING, OVER, NOT_LEARNING, TOO_FEW = "improving", "over-optimising", "not learning", "too few to tell"
LENGTH = "gain is length"
FIGURES = ("reward_model", "judge", "length", "distinct_2", "kl", "kl_token")


def distinct_2(text: str) -> float:
    """Distinct bigrams over all bigrams of one answer (1.0: no bigram repeats; a looping answer falls to 0)."""
    words = text.split()
    grams = list(zip(words, words[1:]))
    return round(len(set(grams)) / len(grams), 4) if grams else 1.0


PER_PROBE_EXTRAS = ("kl", "kl_token", "judge_dimensions")  # measured where a stage can, else None per probe


def probe_row(step: int, answers: list[str], rm: list[float], judge: list[float | None],
              extra: dict[str, list] | None = None) -> dict:
    """One check: the per-probe figures and their means. `extra` (per probe, where the stage measured them):
    "kl" (nats per completion), "kl_token" (nats per token), "judge_dimensions" (the judge's ratings) and
    "length" (the words of what the judge read, where that is not the answer: a Director's rolled-forward block)."""
    extra = extra or {}
    row = {"step": step, "answers": answers, "reward_model": [None if x is None else round(x, 4) for x in rm],
           "judge": judge, "length": extra.get("length") or [len(a.split()) for a in answers],
           "distinct_2": [distinct_2(a) for a in answers],
           **{k: extra.get(k) or [None] * len(answers) for k in PER_PROBE_EXTRAS}}
    for fig in FIGURES:
        vals = [v for v in row[fig] if v is not None]
        row[f"mean_{fig}"] = round(sum(vals) / len(vals), 4) if vals else None
    return row


def judge_peak(checks: list[dict]) -> dict | None:
    """The check the judge scored best (the first of equals): its step, judge mean and KL from the base policy."""
    scored = [c for c in checks if c.get("mean_judge") is not None]
    if not scored:
        return None
    best = max(scored, key=lambda c: c["mean_judge"])
    return {"step": best["step"], "judge": best["mean_judge"], "kl": best.get("mean_kl"),
            "kl_token": best.get("mean_kl_token")}


def _change(first: dict, last: dict, fig: str, min_n: int) -> dict:
    diffs = [b - a for a, b in zip(first.get(fig) or [], last.get(fig) or []) if a is not None and b is not None]
    return mean_with_ci(diffs, min_n=min_n)


def judge_change_at_equal_length(first: dict, last: dict, min_n: int) -> dict:
    """The judge's change from the first check to the last at equal length: each probe's change regressed on its
    change in words (each probe its own cluster: the probes are held-out queries, one a conversation at most)."""
    rows = [(a, b, la, lb) for a, b, la, lb in zip(first.get("judge") or [], last.get("judge") or [],
                                                   first.get("length") or [], last.get("length") or [])
            if a is not None and b is not None]
    return equal_length_difference([b - a for a, b, *_ in rows], [lb - la for *_, la, lb in rows],
                                   lengths=[(la, lb) for *_, la, lb in rows], min_n=min_n)


def verdict(checks: list[dict], judge_margin: float, min_checks: int = 2, min_n: int = DEFAULT_MIN_N) -> dict:
    """The change of each figure from the first check to the last (paired over probes, with its interval and
    n), the judge's change at equal length, the rank correlation of the reward model's and the judge's means
    across checks, and the verdict."""
    out: dict = {"checks": len(checks), "steps_checked": [c["step"] for c in checks]}
    if len(checks) < 2:
        return {**out, "verdict": TOO_FEW, "why": f"{len(checks)} check(s); a change needs two"}
    # a check whose probes got fewer than min_n distinct answers (where step 0's had min_n) measures that many
    # texts, not one per probe (a collapsed policy's one answer is one draw of the judge, however many probes
    # repeat it): the verdict reads the last check that still has min_n distinct answers, and says where the
    # answers collapsed
    kept, first_distinct = len(checks), len(set(checks[0].get("answers") or []))
    while kept > 1 and len(set(checks[kept - 1].get("answers") or [])) < min_n <= first_distinct:
        kept -= 1
    if kept < len(checks):
        out["collapsed_at_step"] = checks[kept]["step"]
        out["distinct_answers_last"] = len(set(checks[-1]["answers"]))
        if kept < 2:
            return {**out, "verdict": TOO_FEW, "n": min(len(checks[0]["answers"]), len(checks[-1]["answers"])),
                    "why": f"the policy's answers collapsed by step {checks[kept]['step']} ({out['distinct_answers_last']} "
                           f"distinct answers to {len(checks[-1]['answers'])} probes at the last check, fewer than "
                           f"stats.min_n {min_n}): a change measured on so few texts"}
        checks = checks[:kept]
    first, last = checks[0], checks[-1]
    out["change"] = {fig: _change(first, last, fig, min_n) for fig in FIGURES}
    out["change"]["judge_equal_length"] = judge_eq = judge_change_at_equal_length(first, last, min_n)
    rm, judge = out["change"]["reward_model"], out["change"]["judge"]
    out["rm_judge_spearman"] = spearman([c["mean_reward_model"] for c in checks], [c["mean_judge"] for c in checks]) \
        if all(c["mean_judge"] is not None for c in checks) and len(checks) >= 3 else None
    n = min(rm["n"], judge["n"])
    if n < min_n or len(checks) < min_checks:
        out.update(verdict=TOO_FEW, why=f"{n} probes (stats.min_n {min_n}), {len(checks)} checks (watch.min_checks "
                                        f"{min_checks})")
    elif rm["ci_low"] is None or rm["ci_low"] <= 0:
        out.update(verdict=NOT_LEARNING, why=f"the reward model's change {rm['mean']} [{rm['ci_low']}, {rm['ci_high']}] "
                                             "reaches 0")
    elif judge["mean"] < judge_margin:
        out.update(verdict=OVER, why=f"the reward model rose {rm['mean']} [{rm['ci_low']}, {rm['ci_high']}] while the "
                                     f"judge changed {judge['mean']} [{judge['ci_low']}, {judge['ci_high']}], below "
                                     f"watch.judge_margin {judge_margin}")
    elif judge["ci_low"] is not None and judge["ci_low"] > 0 and (
            judge_eq["ci_low"] is None or judge_eq["ci_low"] <= 0 or judge_eq["extrapolated"]):
        out.update(verdict=LENGTH, why=f"the reward model rose {rm['mean']} [{rm['ci_low']}, {rm['ci_high']}] and the "
                                       f"judge {judge['mean']} [{judge['ci_low']}, {judge['ci_high']}], but at equal "
                                       f"length the judge changed {describe_equal_length(judge_eq, min_n)}: the gain is "
                                       f"length (answers {out['change']['length']['mean']:+} words)")
    elif judge["ci_low"] is not None and judge["ci_low"] > 0:
        out.update(verdict=IMPROVING, why=f"reward model {rm['mean']} [{rm['ci_low']}, {rm['ci_high']}] and judge "
                                          f"{judge['mean']} [{judge['ci_low']}, {judge['ci_high']}] both up, the judge "
                                          f"at equal length {judge_eq['mean']} [{judge_eq['ci_low']}, {judge_eq['ci_high']}]")
    else:
        out.update(verdict=TOO_FEW, why=f"the judge rose {judge['mean']} but its interval [{judge['ci_low']}, "
                                        f"{judge['ci_high']}] reaches 0")
    out["n"] = n
    if "collapsed_at_step" in out:
        out["why"] += (f"; read at step {last['step']}: the answers collapsed by step {out['collapsed_at_step']} "
                       f"({out['distinct_answers_last']} distinct at the last check)")
    peak = out["judge_peak"] = judge_peak(checks)
    if peak is not None:
        at = f" (KL from the base policy {peak['kl']} nats a completion)" if peak["kl"] is not None else ""
        out["why"] += f"; the judge peaked at step {peak['step']} ({peak['judge']}){at}"
    return out


class StopReason(NamedTuple):
    kind: str  # "kl": stops whenever watch.max_kl is set; "over_optimising": only with stop_when_over_optimising
    words: str


def should_stop(checks: list[dict], judge_margin: float, patience: int, min_n: int = DEFAULT_MIN_N,
                max_kl: float | None = None) -> StopReason | None:
    """Why to stop now, or None: (with `max_kl`) the policy's mean KL from the base policy has passed `max_kl`, or
    the verdict over the checks so far has been over-optimising at each of the last `patience` checks."""
    last = checks[-1] if checks else {}
    if max_kl is not None and last.get("mean_kl") is not None and last["mean_kl"] > max_kl:
        return StopReason("kl", f"the KL from the base policy {last['mean_kl']} passed watch.max_kl {max_kl}")
    if len(checks) < patience + 1:
        return None
    if all(verdict(checks[: k + 1], judge_margin, 2, min_n)["verdict"] == OVER
           for k in range(len(checks) - patience, len(checks))):
        return StopReason("over_optimising", f"over-optimising for {patience} checks")
    return None


def flat_metrics(result: dict) -> dict:
    """The verdict (and an early stop) as flat figures for metrics files, MLflow and version tags."""
    out = {"watch_verdict": result["verdict"], "watch_why": result.get("why"), "watch_checks": result["checks"],
           "watch_n": result.get("n"), "watch_rm_judge_spearman": result.get("rm_judge_spearman"),
           "watch_stopped_early": result.get("stopped_early", False), "watch_stopped_at_step": result.get("stopped_at_step"),
           "watch_kept_step": result.get("kept_step"), "watch_stop_reason": result.get("stop_reason"),
           "watch_collapsed_at_step": result.get("collapsed_at_step")}
    peak = result.get("judge_peak") or {}
    out.update(watch_judge_peak_step=peak.get("step"), watch_judge_peak=peak.get("judge"),
               watch_judge_peak_kl=peak.get("kl"))
    for fig, ch in (result.get("change") or {}).items():
        out.update({f"watch_{fig}_change": ch["mean"], f"watch_{fig}_change_ci_low": ch["ci_low"],
                    f"watch_{fig}_change_ci_high": ch["ci_high"]})
    return out
