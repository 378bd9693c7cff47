"""The levers against length, measured on a finished pipeline (the CPU default after `make repro`, or the evidence
run's copy): what each does to the reward model's taste for length and to GRPO's.

    python benchmarks/length_levers.py --workdir . --rm            # reward models (in-process, nothing logged)
    python benchmarks/length_levers.py --workdir . --grpo          # GRPO settings, each in its own copy

`--rm` trains a reward model on the workdir's judge ratings for each of: the pairs as the stage made them, the
same without length balancing, and each of those with ODIN's length head (train_rm.length_head), with the
workdir's train_rm block otherwise. For each: the Pearson correlation of its score with length on its eval
replies, its accuracy on the eval pairs (raw, at equal length, the length-matched pairs, where the chosen reply is
not longer) and on the held-out human pairs (raw, at equal length, not longer). Adapters are kept under
reports/length-levers-models/ keyed on their pairs and block: run it again to resume.

`--grpo` copies the workdir once per setting (cp -a: its DVC cache, registry and models) and runs `dvc repro
evaluate` there with the setting's params (`--settings` picks some): the workdir's own (`default`), every lever off,
and each alone: `grpo.length_calibration` fitted on the base policy or within each group, a KL term to the base
policy (`beta`), TRL's `mask_truncated_completions`. For each: GRPO - base on the held-out probes in words, the
judge's total raw and at equal length, the reward model's, and the watch's verdict. Results land in
reports/length_levers.json (relative to the workdir) as each is measured.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import time

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# each lever alone against "off" (the default's other settings kept); "default" is the workdir's params as they are
OFF = {"length_calibration": {"enabled": False}}
GRPO_SETTINGS = {
    "default": {},
    "off": {"grpo": OFF},
    "base_policy_fit": {"grpo": {"length_calibration": {"enabled": True, "method": "base_policy_fit"}}},
    "within_group": {"grpo": {"length_calibration": {"enabled": True, "method": "within_group"}}},
    "beta_0.04": {"grpo": {**OFF, "beta": 0.04}},
    "mask_truncated": {"grpo": {**OFF, "trainer_args": {"mask_truncated_completions": True}}},
}
RM_FIGURES = ("eval_pairs", "eval_score_length_pearson", "eval_accuracy", "eval_accuracy_ci_low",
              "eval_accuracy_ci_high", "eval_accuracy_equal_length", "eval_accuracy_equal_length_ci_low",
              "eval_accuracy_equal_length_ci_high", "eval_accuracy_equal_length_extrapolated",
              "eval_accuracy_equal_length_matched", "eval_accuracy_equal_length_matched_n", "eval_accuracy_not_longer",
              "eval_not_longer_pairs", "eval_length_baseline_accuracy")
HUMAN_FIGURES = ("human_pairs", "human_pairs_ci_low", "human_pairs_ci_high", "human_pairs_n", "human_length_baseline",
                 "human_pairs_equal_length", "human_pairs_equal_length_ci_low", "human_pairs_equal_length_ci_high",
                 "human_pairs_equal_length_extrapolated", "human_pairs_controlled", "human_pairs_controlled_n")


def reward_model_sets(params, personas) -> dict[str, list[dict]]:
    """The pair sets the reward models train on: as the stage made them (data/pairs.jsonl), and the same ratings'
    pairs without length balancing (the pairs stage's own rule, mascot/pairs.py)."""
    from mascot.io import load_jsonl
    from mascot.pairs import stage_pairs

    queries = {q["query_id"]: q for q in load_jsonl("data/queries.jsonl")}
    human = load_jsonl("data/human/items.jsonl") if params.pairs.human else None
    unbalanced, _ = stage_pairs(params, queries, load_jsonl("data/candidates.jsonl"), load_jsonl("data/scores.jsonl"),
                                personas, human)
    return {"stage pairs": load_jsonl("data/pairs.jsonl"), "unbalanced": unbalanced}


def train_reward_models(params, personas, work: Path, report: dict, report_path: str) -> None:
    from mascot.checkpoints import checkpoint_dir
    from mascot.io import write_json
    from mascot.reward.evaluation import untrained_human
    from mascot.stage_args import dvc_cmd_options
    from mascot.reward.train import train_reward_model

    files = dvc_cmd_options("train_rm")  # the human set and the judge's scores of it, as the stage reads them
    human = untrained_human(params, files["human_items_path"], files.get("human_scores_path"))
    report.setdefault("reward_models", {})
    for set_name, pairs in reward_model_sets(params, personas).items():
        for odin in (False, True):
            name = f"{set_name}{', ODIN' if odin else ''}"
            if name in report["reward_models"]:  # measured by an earlier run: resume past it
                continue
            block = params.train_rm.model_copy(update={"length_head": params.train_rm.length_head.model_copy(
                update={"enabled": odin})})
            if odin and 2 * block.batch_size < block.length_head.min_batch_replies:
                block = block.model_copy(update={"batch_size": (block.length_head.min_batch_replies + 1) // 2})
            run = checkpoint_dir("length-levers", pairs, block.model_dump(), root=work)
            start = time.perf_counter()
            print(f"length_levers: training '{name}' on {len(pairs)} pairs -> {run / 'model'}", flush=True)
            result = train_reward_model(pairs, personas, block, run / "model", run / "checkpoints", report_to=(),
                                        human=human, min_n=params.stats.min_n)
            m = result["metrics"]
            figures = {k: m.get(k) for k in RM_FIGURES} | {k: m.get(k) for k in HUMAN_FIGURES}
            figures.update(batch_size=block.batch_size, seconds=round(time.perf_counter() - start, 1))
            report["reward_models"][name] = figures
            write_json(report_path, report)
            print(json.dumps({name: figures}, indent=1), flush=True)


def already_set(blocks: dict, params: dict) -> bool:
    """Whether `params` (a params.yaml's dict) already holds every key of `blocks` at its value."""
    return all(already_set(v, params.get(k) or {}) if isinstance(v, dict) else params.get(k, object()) == v
               for k, v in blocks.items())


def run_grpo_settings(workdir: Path, report: dict, report_path: str, only: list[str] | None = None) -> None:
    import yaml

    from benchmarks.pipeline_copy import pipeline_env
    from mascot.io import write_json
    from mascot.profiles import merge_params

    report.setdefault("grpo", {})
    own = yaml.safe_load((workdir / "params.yaml").read_text())
    for name, blocks in GRPO_SETTINGS.items():
        if name in report["grpo"] or (only and name not in only):
            continue
        if blocks and already_set(blocks, own):  # the workdir's own params (base_policy_fit on the CPU default)
            report["grpo"][name] = {"same_as": "default"}
            print(f"length_levers: {name} is the workdir's own setting: see `default`", flush=True)
            continue
        copy = workdir.parent / f"{workdir.name}-levers-{name}"
        if not copy.exists():
            subprocess.run(["cp", "-a", str(workdir), str(copy)], check=True)
        env = pipeline_env(copy)
        if blocks:
            merge_params(copy / "params.yaml", blocks, f"length_levers {name}")
        start = time.perf_counter()
        proc = subprocess.run("dvc repro evaluate", cwd=copy, env=env, shell=True, capture_output=True, text=True)
        if proc.returncode != 0:
            report["grpo"][name] = {"failed": proc.stdout[-1500:] + proc.stderr[-1500:]}
            write_json(report_path, report)
            continue
        ev = json.loads((copy / "reports/figures/evaluate.json").read_text())
        grpo = json.loads((copy / "reports/figures/train_grpo.json").read_text())
        d = ev["grpo_minus_base"]
        report["grpo"][name] = {"seconds": round(time.perf_counter() - start, 1), "words": d["reply_words"],
                                "judge_total": {k: v for k, v in d["judge_total"].items() if k != "equal_length"},
                                "judge_total_equal_length": d["judge_total"]["equal_length"],
                                "rm_score": {k: v for k, v in d["rm_score"].items() if k != "equal_length"},
                                "judge_gain_is": ev.get("judge_gain_is"), "watch_verdict": grpo.get("watch_verdict"),
                                **{k: grpo.get(k) for k in ("length_calibration_slope_per_word",
                                                            "length_calibration_active", "length_calibration_trend_p",
                                                            "mean_clipped_ratio", "watch_n", "watch_length_change",
                                                            "watch_judge_change", "watch_judge_equal_length_change")}}
        write_json(report_path, report)
        print(json.dumps({name: report["grpo"][name]}, indent=1), flush=True)
        shutil.rmtree(copy, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="a pipeline whose evaluate stage has run")
    parser.add_argument("--rm", action="store_true", help="train and measure the reward-model variants")
    parser.add_argument("--grpo", action="store_true", help="run each GRPO setting in a copy of the workdir")
    parser.add_argument("--settings", nargs="*", choices=sorted(GRPO_SETTINGS), help="only these GRPO settings")
    parser.add_argument("--report", default="reports/length_levers.json", help="relative to the workdir")
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()
    os.chdir(workdir)
    from mascot.config import load_params
    from mascot.data.personas import load_personas

    params = load_params("params.yaml")
    report = json.loads(Path(args.report).read_text()) if Path(args.report).exists() else {}
    report["workdir"] = str(workdir)
    if args.rm:
        train_reward_models(params, load_personas(params.prepare.personas_file), Path("reports/length-levers-models"),
                            report, args.report)
    if args.grpo:
        run_grpo_settings(workdir, report, str(workdir / args.report), args.settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
