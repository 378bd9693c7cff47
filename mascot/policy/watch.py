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

The pure functions here (`probe_row`, `verdict`, `should_stop`) hold the rule; `WatchCallback` runs the
checks inside TRL's trainer.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
import csv
import json
from pathlib import Path
from typing import NamedTuple

from mascot.io import columns_of, write_json
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


def log_check(row: dict) -> None:
    """A check as MLflow step metrics of the active run (watch/reward_model, watch/judge, ...) and one line."""
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.log_metrics({f"watch/{k[5:]}": v for k, v in row.items() if k.startswith("mean_") and v is not None},
                           step=row["step"])
    print(f"watch: step {row['step']}: reward model {row['mean_reward_model']}, judge {row['mean_judge']}, "
          f"words {row['mean_length']}, distinct-2 {row['mean_distinct_2']}, KL {row.get('mean_kl')} "
          f"({len(row['answers'])} probes)", flush=True)


class JudgeMemo:
    """The watch's judge, each distinct unit once: an answer unchanged since the last check keeps its score (the
    judge is deterministic in expected mode). A unit with nothing to judge (its `skip`: an empty reply, a directive
    that left no block) is at the rubric's floor, so a policy that learned to say nothing is not let off; a judge
    that failed gives None (left out of the paired change)."""

    def __init__(self, score_units, floor: float):
        self.score_units, self.floor, self.totals, self.ratings = score_units, floor, {}, {}

    def __call__(self, units: list[dict]) -> list[float | None]:
        new = [u for item, u in {u["item"]: u for u in units if not u.get("skip")}.items() if item not in self.totals]
        for unit, record in zip(new, self.score_units(new) if new else []):
            self.totals[unit["item"]] = record["total_reward"] if record["status"] == "scored" else None
            self.ratings[unit["item"]] = record.get("scores") if record["status"] == "scored" else None
        return [self.floor if u.get("skip") else self.totals[u["item"]] for u in units]

    def dimensions(self, units: list[dict]) -> list[dict | None]:
        """The judge's ratings of each unit (None where it was not judged), after a call with the same units."""
        return [None if u.get("skip") else self.ratings.get(u["item"]) for u in units]


class Watch:
    """The checks of one run. `answer(model, tokenizer) -> (answers, rm_scores, judge_scores[, extra])` is the
    stage's own probe (a speaker's replies, or a Director's directives rolled forward); `extra` holds per-probe
    lists (probe_row). `probes` describe each probe for the completions table (probe, persona, prompt);
    `max_kl` stops training once the policy's mean KL from the base policy passes it (None: never)."""

    def __init__(self, answer, every_steps: int, judge_margin: float, stop_when_over_optimising: bool = False,
                 patience: int = 2, min_n: int = DEFAULT_MIN_N, log=log_check, probes: list[dict] | None = None,
                 max_kl: float | None = None):
        self.answer, self.every_steps, self.judge_margin = answer, every_steps, judge_margin
        self.stop, self.patience, self.min_n, self.log = stop_when_over_optimising, patience, min_n, log
        self.probes, self.max_kl, self.stop_reason = probes or [], max_kl, None
        self.checks: list[dict] = []
        self.best: tuple[float, int, dict] | None = None  # (judge mean, step, adapter weights)
        self.stopped_at: int | None = None

    def check(self, model, tokenizer, step: int) -> dict:
        import torch

        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                answers, rm, judge, *extra = self.answer(model, tokenizer)
        finally:
            model.train(was_training)
        row = probe_row(step, answers, rm, judge, extra[0] if extra else None)
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
                                                    "stop_reason": self.stop_reason,
                                                    "best": self.best[:2] if self.best else None})
        if self.best:
            save_file({k: v.contiguous() for k, v in self.best[2].items()}, str(Path(folder) / self.BEST_FILE))

    def load_from(self, folder: Path) -> bool:
        """The history saved with a checkpoint; False when there is none (a checkpoint saved without a watch)."""
        state_file = Path(folder) / self.STATE_FILE
        if not state_file.exists():
            return False
        state = json.loads(state_file.read_text())
        # a check saved before the watch measured KL and dimensions has none: padded here, as probe_row pads
        self.checks = [{**c, **{k: c.get(k) or [None] * len(c["answers"]) for k in PER_PROBE_EXTRAS}}
                       for c in state["checks"]]
        self.stopped_at = state["stopped_at"]
        self.stop_reason = state.get("stop_reason")
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
                if last:
                    return
                why = should_stop(watch.checks, watch.judge_margin, watch.patience, watch.min_n, watch.max_kl)
                if why and (watch.stop or why.kind == "kl"):
                    watch.stopped_at, watch.stop_reason = state.global_step, why.words
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
        out["stop_reason"] = self.stop_reason
        return out

    def completions(self) -> dict[str, list]:
        """Every probe answer of every check with its figures: the MLflow table of the run (columns)."""
        rows = []
        for c in self.checks:
            for k, answer in enumerate(c["answers"]):
                probe = self.probes[k] if k < len(self.probes) else {}
                rows.append({"step": c["step"], "probe": probe.get("probe", k), "persona": probe.get("persona"),
                             "prompt": probe.get("prompt"), "completion": answer,
                             "reward_model": c["reward_model"][k], "judge_total": c["judge"][k],
                             **{f"judge_{d}": v for d, v in (c["judge_dimensions"][k] or {}).items()},
                             "kl": c["kl"][k], "kl_token": c["kl_token"][k]})
        return columns_of(rows)

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
        if self.checks:  # every probe answer where `mlflow ui` shows tables, comparable across runs
            mlflow.log_table(data=self.completions(), artifact_file="watch_completions.json")
        mlflow.set_tags({"watch_verdict": result["verdict"]})
        return result, flat_metrics(result)


def greedy_answers(model, tokenizer, prompts: list, max_new_tokens: int, temperature: float = 0.0) -> list[str]:
    """The policy's greedy continuation of each prompt (text, or messages through the chat template); with a
    temperature above 0, a sample at a fixed seed (the same draws at every check: only the policy changes)."""
    return answers_and_kl(model, tokenizer, prompts, max_new_tokens, temperature, kl=False)[0]


# probes a forward pass: the fp32 log-probs over Gemma's 262k vocabulary at 8 x 64 answer positions are 0.5 GB a
# pass (two kept, with one pass's logits over the whole rows while it runs)
KL_BATCH = 8


@contextmanager
def float32_weights(model):
    """The model's bf16/fp16 parameters and buffers held in fp32 for the block, then put back in their own
    dtype, bit for bit (a bf16 value is exact in fp32); the Parameter objects stay the same (optimizer state)."""
    import torch

    low = [t for t in (*model.parameters(), *model.buffers()) if t.dtype in (torch.bfloat16, torch.float16)]
    dtypes = [t.dtype for t in low]
    for t in low:
        t.data = t.data.float()
    try:
        yield
    finally:
        for t, dtype in zip(low, dtypes):
            t.data = t.data.to(dtype)


def _kl_from_base(model, sequences, prompt_mask, width: int, lengths: list[int], dtype: str = "float32"
                  ) -> tuple[list, list]:
    """(per answer: the summed KL over its tokens, the mean) for left-padded prompts followed by their answers,
    in one forward pass with the adapter and one without, in fp32 (`dtype` float32) or the policy's own precision
    (auto). Each row is moved to the left edge (its prompt, its answer, then filler on the right) and run without
    an attention mask: causal attention never reads to the right, so a row is computed as it is alone. In fp32 a
    batch gives each probe its KL alone; in bf16 rounding put the CPU default's figure off by 4% to 75%
    (tests/test_watch.py, docs/results.md)."""
    import torch

    from mascot.precision import native_bf16

    longest = max(lengths)
    if longest == 0:
        return [0.0] * len(lengths), [0.0] * len(lengths)
    prompt_lengths = prompt_mask.sum(-1).tolist()
    real = [sequences[r, width - n_prompt: width + n_answer]
            for r, (n_prompt, n_answer) in enumerate(zip(prompt_lengths, lengths))]
    span = max(len(ids) for ids in real)
    filler = real[0][0]  # any token: nothing to its left reads it
    ids = torch.stack([torch.cat([row, row.new_full((span - len(row),), filler)]) for row in real])
    # the logits that predict each answer token: from the last prompt position on, clamped inside the row
    at = torch.tensor(prompt_lengths, device=ids.device)[:, None] - 1 + torch.arange(longest, device=ids.device)[None]
    at = at.clamp(max=span - 1)
    answer_mask = (torch.arange(longest, device=ids.device)[None, :]
                   < torch.tensor(lengths, device=ids.device)[:, None]).float()

    full = dtype == "float32"
    # under the trainer, accelerate's mixed precision wraps the model's forward in bf16 autocast, which would
    # override ours: fp32 calls the forward beneath it
    forward = getattr(model, "_original_forward", model) if full else model

    def log_probs():
        logits = forward(input_ids=ids).logits
        return logits.gather(1, at[:, :, None].expand(-1, -1, logits.shape[-1])).float().log_softmax(-1)

    with float32_weights(model) if full else nullcontext(), \
            torch.autocast(sequences.device.type, dtype=torch.bfloat16, enabled=not full and native_bf16()):
        policy = log_probs()
        with model.disable_adapter():
            base = log_probs()
    kl_positions = (policy.exp() * (policy - base)).sum(-1).clamp(min=0) * answer_mask
    sums = kl_positions.sum(-1)
    return ([round(float(x), 5) for x in sums],
            [round(float(x) / n, 6) if n else 0.0 for x, n in zip(sums, lengths)])


def answers_and_kl(model, tokenizer, prompts: list, max_new_tokens: int, temperature: float = 0.0,
                   kl: bool = True, kl_dtype: str = "float32") -> tuple[list[str], dict[str, list]]:
    """`greedy_answers`, and (with `kl`) how far each answer's policy is from the base policy: per probe, the KL
    of the current policy from the adapter-free model (PEFT's disable_adapter: no second copy in memory), exact
    over the vocabulary at each position of the answer's own tokens, summed over the answer ("kl", nats per
    completion) and averaged ("kl_token"). A model without an adapter to switch off gives None."""
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
    width = enc["input_ids"].shape[1]
    answers = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    if not kl or not hasattr(model, "disable_adapter"):
        return answers, {}
    stops = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    # each answer's own tokens: up to and with the first stop token (what follows is padding)
    lengths = [next((k + 1 for k, tok in enumerate(row[width:].tolist()) if tok in stops), out.shape[1] - width)
               for row in out]
    per_completion, per_token = [], []
    # lifted once for all the batches (each batch's own lift then finds nothing to lift)
    with float32_weights(model) if kl_dtype == "float32" else nullcontext():
        for first in range(0, len(out), KL_BATCH):
            rows = slice(first, first + KL_BATCH)
            kl_sum, kl_mean = _kl_from_base(model, out[rows], enc["attention_mask"][rows], width, lengths[rows],
                                            kl_dtype)
            per_completion += kl_sum
            per_token += kl_mean
    return answers, {"kl": per_completion, "kl_token": per_token}
