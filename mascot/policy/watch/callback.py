"""The watch inside TRL's trainer: the checks of one run (`Watch`), their state beside a training checkpoint,
the early stop, the best check's adapter, and what goes to MLflow (step metrics, the completions table, the
verdict as a tag). The rule of the verdict is in verdict.py."""
from __future__ import annotations

import json
from pathlib import Path

from mascot.io import columns_of, write_json
from mascot.policy.watch.chart import plot_png, write_csv
from mascot.policy.watch.verdict import PER_PROBE_EXTRAS, flat_metrics, probe_row, should_stop, verdict
from mascot.stats import DEFAULT_MIN_N


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

    def callback(self, first_check: bool = True):
        """The watch inside TRL's trainer; `first_check` False for a run resumed with its history (`load_from`):
        no second step-0 check."""
        from transformers import TrainerCallback

        watch = self

        class WatchCallback(TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, processing_class=None, **kw):
                if first_check:
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
