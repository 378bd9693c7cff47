"""The watch: the judge looks at the policy while GRPO optimises the reward model, so that reward hacking
(the reward-model score rising while the quality it stood for stalls or falls; Gao et al. 2022) is seen
while it happens, not after.

At step 0, every `every_steps` steps and at the last step the current policy answers a fixed probe set
(held-out queries, never trained on; greedy, or
sampled at a fixed seed with `watch.temperature`), and each answer is scored by the reward model being optimised,
by the judge on its rubric, and by its length and repetition (distinct-2). At the end a verdict compares the
last check with step 0, per probe (a paired bootstrap over the probes):

- `too few to tell`: fewer than `stats.min_n` probes or fewer than `watch.min_checks` checks;
- `not learning`: the reward model's change has an interval reaching 0 or below;
- `over-optimising`: the reward model up and the judge's mean change below `watch.judge_margin`
  (flat or down);
- `improving`: the reward model up and the judge up by at least the margin, its interval above 0;
- `too few to tell` also when the judge rose by at least the margin but its interval reaches 0.

The pure functions here (`probe_row`, `verdict`, `should_stop`) hold the rule; `WatchCallback` runs the
checks inside TRL's trainer.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from mascot.io import write_json
from mascot.stats import DEFAULT_MIN_N, mean_with_ci, spearman

IMPROVING, OVER, NOT_LEARNING, TOO_FEW = "improving", "over-optimising", "not learning", "too few to tell"
FIGURES = ("reward_model", "judge", "length", "distinct_2")


def distinct_2(text: str) -> float:
    """Distinct bigrams over all bigrams of one answer (1.0: no bigram repeats; a looping answer falls to 0)."""
    words = text.split()
    grams = list(zip(words, words[1:]))
    return round(len(set(grams)) / len(grams), 4) if grams else 1.0


def probe_row(step: int, answers: list[str], rm: list[float], judge: list[float | None]) -> dict:
    """One check: the per-probe figures and their means."""
    row = {"step": step, "answers": answers, "reward_model": [None if x is None else round(x, 4) for x in rm],
           "judge": judge, "length": [len(a.split()) for a in answers], "distinct_2": [distinct_2(a) for a in answers]}
    for fig in FIGURES:
        vals = [v for v in row[fig] if v is not None]
        row[f"mean_{fig}"] = round(sum(vals) / len(vals), 4) if vals else None
    return row


def _change(first: dict, last: dict, fig: str, min_n: int) -> dict:
    diffs = [b - a for a, b in zip(first[fig], last[fig]) if a is not None and b is not None]
    return mean_with_ci(diffs, min_n=min_n)


def verdict(checks: list[dict], judge_margin: float, min_checks: int = 2, min_n: int = DEFAULT_MIN_N) -> dict:
    """The change of each figure from the first check to the last (paired over probes, with its interval and
    n), the rank correlation of the reward model's and the judge's means across checks, and the verdict."""
    out: dict = {"checks": len(checks), "steps_checked": [c["step"] for c in checks]}
    if len(checks) < 2:
        return {**out, "verdict": TOO_FEW, "why": f"{len(checks)} check(s); a change needs two"}
    first, last = checks[0], checks[-1]
    out["change"] = {fig: _change(first, last, fig, min_n) for fig in FIGURES}
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
    elif judge["ci_low"] is not None and judge["ci_low"] > 0:
        out.update(verdict=IMPROVING, why=f"reward model {rm['mean']} [{rm['ci_low']}, {rm['ci_high']}] and judge "
                                          f"{judge['mean']} [{judge['ci_low']}, {judge['ci_high']}] both up")
    else:
        out.update(verdict=TOO_FEW, why=f"the judge rose {judge['mean']} but its interval [{judge['ci_low']}, "
                                        f"{judge['ci_high']}] reaches 0")
    out["n"] = n
    return out


def should_stop(checks: list[dict], judge_margin: float, patience: int, min_n: int = DEFAULT_MIN_N) -> bool:
    """True when the verdict over the checks so far has been over-optimising at each of the last `patience`
    checks."""
    if len(checks) < patience + 1:
        return False
    return all(verdict(checks[: k + 1], judge_margin, 2, min_n)["verdict"] == OVER
               for k in range(len(checks) - patience, len(checks)))


def write_csv(checks: list[dict], path: str | Path) -> None:
    """One row per check: step and the mean of each figure (`dvc plots`: reward model, judge, length by step)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["step", *[f"mean_{f}" for f in FIGURES]])
        for c in checks:
            writer.writerow([c["step"], *[c[f"mean_{f}"] for f in FIGURES]])


def plot_png(checks: list[dict], result: dict, path: str | Path, title: str) -> None:
    """The watch as one picture: reward model, judge and length by step, the verdict in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in checks]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
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
    n = result.get("n")
    fig.suptitle(f"{title}: {result['verdict']} (n={n} probes, {len(checks)} checks)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def flat_metrics(result: dict) -> dict:
    """The verdict (and an early stop) as flat figures for metrics files, MLflow and version tags."""
    out = {"watch_verdict": result["verdict"], "watch_why": result.get("why"), "watch_checks": result["checks"],
           "watch_n": result.get("n"), "watch_rm_judge_spearman": result.get("rm_judge_spearman"),
           "watch_stopped_early": result.get("stopped_early", False), "watch_stopped_at_step": result.get("stopped_at_step"),
           "watch_kept_step": result.get("kept_step")}
    for fig, ch in (result.get("change") or {}).items():
        out.update({f"watch_{fig}_change": ch["mean"], f"watch_{fig}_change_ci_low": ch["ci_low"],
                    f"watch_{fig}_change_ci_high": ch["ci_high"]})
    return out


def log_check(row: dict) -> None:
    """A check as MLflow step metrics of the active run (watch/reward_model, watch/judge, ...) and one line."""
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.log_metrics({f"watch/{k[5:]}": v for k, v in row.items() if k.startswith("mean_") and v is not None},
                           step=row["step"])
    print(f"watch: step {row['step']}: reward model {row['mean_reward_model']}, judge {row['mean_judge']}, "
          f"words {row['mean_length']}, distinct-2 {row['mean_distinct_2']} ({len(row['answers'])} probes)", flush=True)


class JudgeMemo:
    """The watch's judge, each distinct unit once: an answer unchanged since the last check keeps its score (the
    judge is deterministic in expected mode). A unit with nothing to judge (its `skip`: an empty reply, a directive
    that left no block) is at the rubric's floor, so a policy that learned to say nothing is not let off; a judge
    that failed gives None (left out of the paired change)."""

    def __init__(self, score_units, floor: float):
        self.score_units, self.floor, self.totals = score_units, floor, {}

    def __call__(self, units: list[dict]) -> list[float | None]:
        new = [u for item, u in {u["item"]: u for u in units if not u.get("skip")}.items() if item not in self.totals]
        for unit, record in zip(new, self.score_units(new) if new else []):
            self.totals[unit["item"]] = record["total_reward"] if record["status"] == "scored" else None
        return [self.floor if u.get("skip") else self.totals[u["item"]] for u in units]


class Watch:
    """The checks of one run. `answer(model, tokenizer) -> (answers, rm_scores, judge_scores)` is the stage's
    own probe (a speaker's replies, or a Director's directives rolled forward)."""

    def __init__(self, answer, every_steps: int, judge_margin: float, stop_when_over_optimising: bool = False,
                 patience: int = 2, min_n: int = DEFAULT_MIN_N, log=log_check):
        self.answer, self.every_steps, self.judge_margin = answer, every_steps, judge_margin
        self.stop, self.patience, self.min_n, self.log = stop_when_over_optimising, patience, min_n, log
        self.checks: list[dict] = []
        self.best: tuple[float, int, dict] | None = None  # (judge mean, step, adapter weights)
        self.stopped_at: int | None = None

    def check(self, model, tokenizer, step: int) -> dict:
        import torch

        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                answers, rm, judge = self.answer(model, tokenizer)
        finally:
            model.train(was_training)
        row = probe_row(step, answers, rm, judge)
        self.checks.append(row)
        if row["mean_judge"] is not None and (self.best is None or row["mean_judge"] > self.best[0]):
            from peft import get_peft_model_state_dict

            self.best = (row["mean_judge"], step, {k: v.detach().clone() for k, v in
                                                   get_peft_model_state_dict(model).items()})
        if self.log:
            self.log(row)
        return row

    STATE_FILE, BEST_FILE = "watch_state.json", "watch_best.safetensors"

    def save_to(self, folder: Path) -> None:
        """The checks so far (and the best check's adapter) beside a training checkpoint, so that a resumed run
        goes on with its history (mascot/checkpoints.py)."""
        from safetensors.torch import save_file

        write_json(Path(folder) / self.STATE_FILE, {"checks": self.checks, "stopped_at": self.stopped_at,
                                                    "best": self.best[:2] if self.best else None})
        if self.best:
            save_file({k: v.contiguous() for k, v in self.best[2].items()}, str(Path(folder) / self.BEST_FILE))

    def load_from(self, folder: Path) -> bool:
        """The history saved with a checkpoint; False when there is none (a checkpoint saved without a watch)."""
        state_file = Path(folder) / self.STATE_FILE
        if not state_file.exists():
            return False
        state = json.loads(state_file.read_text())
        self.checks, self.stopped_at = state["checks"], state["stopped_at"]
        if state["best"]:
            from safetensors.torch import load_file

            self.best = (*state["best"], load_file(str(Path(folder) / self.BEST_FILE)))
        return True

    def callback(self, resumed_from: Path | None = None):
        """The watch inside TRL's trainer; `resumed_from`: the checkpoint a resumed run starts at, whose history the
        watch goes on with (no second step-0 check)."""
        from transformers import TrainerCallback

        watch = self

        class WatchCallback(TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, processing_class=None, **kw):
                if resumed_from is not None and watch.load_from(resumed_from):
                    print(f"watch: resumed with {len(watch.checks)} checks (steps "
                          f"{[c['step'] for c in watch.checks]}) from {resumed_from}", flush=True)
                    return
                watch.check(model, processing_class, 0)

            def on_step_end(self, args, state, control, model=None, processing_class=None, **kw):
                last = state.global_step >= state.max_steps
                if state.global_step % watch.every_steps and not last:
                    return
                watch.check(model, processing_class, state.global_step)
                if watch.stop and not last and should_stop(watch.checks, watch.judge_margin, watch.patience, watch.min_n):
                    watch.stopped_at = state.global_step
                    control.should_training_stop = True

            def on_train_end(self, args, state, control, model=None, processing_class=None, **kw):
                if watch.checks and watch.checks[-1]["step"] != state.global_step:
                    watch.check(model, processing_class, state.global_step)

        return WatchCallback()

    def restore_best(self, model) -> int | None:
        """After an early stop: the adapter weights of the check the judge scored best; returns its step."""
        if self.stopped_at is None or self.best is None:
            return None
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, self.best[2])
        return self.best[1]

    def result(self) -> dict:
        out = verdict(self.checks, self.judge_margin, 2, self.min_n)
        out["stopped_early"] = self.stopped_at is not None
        out["stopped_at_step"] = self.stopped_at
        out["kept_step"] = self.best[1] if self.stopped_at is not None and self.best else None
        return out

    def report(self, stage: str, csv_path: str | Path) -> tuple[dict, dict]:
        """(the verdict, its flat metrics), after writing the checks (CSV for `dvc plots`, every probe answer as
        JSON, a PNG) and logging them to the active MLflow run with the verdict as a tag."""
        import mlflow

        result, csv_path = self.result(), Path(csv_path)
        write_csv(self.checks, csv_path)
        write_json(csv_path.with_name("watch_checks.json"), {"verdict": result, "checks": self.checks})
        plot_png(self.checks, result, csv_path.with_suffix(".png"), f"{stage} watch")
        mlflow.log_artifact(str(csv_path.with_name("watch_checks.json")))
        mlflow.log_artifact(str(csv_path.with_suffix(".png")))
        mlflow.set_tags({"watch_verdict": result["verdict"]})
        return result, flat_metrics(result)


def greedy_answers(model, tokenizer, prompts: list, max_new_tokens: int, temperature: float = 0.0) -> list[str]:
    """The policy's greedy continuation of each prompt (text, or messages through the chat template); with a
    temperature above 0, a sample at a fixed seed (the same draws at every check: only the policy changes)."""
    import torch

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) if isinstance(p, list) else p
             for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(texts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
    enc = {k: v.to(model.device) for k, v in enc.items()}
    from mascot.precision import native_bf16

    torch.manual_seed(0)
    # bf16 autocast where native, as the trainer computes the policy (mascot/precision.py)
    with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=native_bf16()):
        sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 else \
            {"do_sample": False}
        out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
