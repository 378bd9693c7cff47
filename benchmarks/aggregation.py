"""How a rubric's aggregation changes the preference pairs and the reward model: `mean` (MASCOT's total) against
`min` (a reply is as good as its weakest dimension), on a finished pipeline copy's own judge ratings.

    python benchmarks/aggregation.py --workdir runs/evidence [--train] [--report reports/aggregation.json]

The judge's ratings are the record (data/scores.jsonl); each aggregation only recombines them (no judge is
asked again), then the `pairs` stage's own rule forms the pairs (mascot/pairs.py: stage_pairs, then length
balancing). It says how many pairs each gives, how many are the same, flipped (the same two replies, the other
one chosen), or found under one aggregation only, with examples; the `mean` set is checked against the copy's
data/pairs.jsonl. With `--train`, a reward model is trained on each set (the copy's train_rm block, nothing
logged) and measured on its own eval pairs, on the other set's, and on the held-out human pairs (the yardstick
neither trained on). Each model's figures are written to the report as soon as they are measured, and its adapter
is kept under reports/aggregation-models/ (keyed on its pairs and train_rm block): run it again to resume
where it stopped.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
import sys

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def pair_key(p: dict) -> tuple:
    return p["query_id"], p["persona"], frozenset((p["chosen_id"], p["rejected_id"]))


def compare(a: list[dict], b: list[dict]) -> dict:
    """Judge pairs of two sets: the same (same replies, same one chosen), flipped, or in one set only."""
    by_a = {pair_key(p): p for p in a if p.get("pair_source", "judge") == "judge"}
    by_b = {pair_key(p): p for p in b if p.get("pair_source", "judge") == "judge"}
    both = set(by_a) & set(by_b)
    flipped = [k for k in both if by_a[k]["chosen_id"] != by_b[k]["chosen_id"]]
    return {"same": len(both) - len(flipped), "flipped": len(flipped), "only_first": len(set(by_a) - set(by_b)),
            "only_second": len(set(by_b) - set(by_a)),
            "examples_only_second": [by_b[k]["pair_id"] for k in sorted(set(by_b) - set(by_a), key=str)[:5]],
            "examples_flipped": [by_b[k]["pair_id"] for k in sorted(flipped, key=str)[:5]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="a pipeline copy whose pairs stage has run")
    parser.add_argument("--train", action="store_true", help="train and measure a reward model on each pair set")
    parser.add_argument("--report", default="reports/aggregation.json", help="relative to the workdir")
    args = parser.parse_args()
    os.chdir(args.workdir)
    from mascot.annotate.rubric import load_rubric
    from mascot.annotate.score import with_total
    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl, write_json
    from mascot.pairs import balance_length, chosen_longer_fraction, stage_pairs

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    queries = {q["query_id"]: q for q in load_jsonl("data/queries.jsonl")}
    candidates, scores = load_jsonl("data/candidates.jsonl"), load_jsonl("data/scores.jsonl")
    human = load_jsonl("data/human/items.jsonl") if params.pairs.human else None
    rubric = load_rubric(params.score.rubric)
    sets, report = {}, {"workdir": str(Path.cwd()), "rubric": rubric.name, "margin": params.pairs.score_margin}
    for aggregate in ("mean", "min"):
        recombined = [with_total(s, dataclasses.replace(rubric, aggregate=aggregate)) for s in scores]
        pairs, _ = stage_pairs(params, queries, candidates, recombined, personas, human)
        if params.pairs.balance_length:
            pairs, _ = balance_length(pairs, params.pairs.split_seed)
        sets[aggregate] = pairs
        judge = [p for p in pairs if p.get("pair_source", "judge") == "judge"]
        report[aggregate] = {"pairs": len(pairs), "judge_pairs": len(judge),
                             "train": sum(p["split"] == "train" for p in pairs),
                             "eval": sum(p["split"] == "eval" for p in pairs),
                             "chosen_longer_fraction": chosen_longer_fraction(pairs),
                             "distinct_totals": len({s["total_reward"] for s in recombined if s["status"] == "scored"})}
    shipped = {pair_key(p) for p in load_jsonl("data/pairs.jsonl")}
    report["mean_matches_the_stage"] = shipped == {pair_key(p) for p in sets["mean"]}
    report["mean_vs_min"] = compare(sets["mean"], sets["min"])
    print(json.dumps({k: v for k, v in report.items()}, indent=1))
    write_json(args.report, report)
    if args.train:
        report["reward_models"], work = {}, Path(args.report).parent / "aggregation-models"
        for aggregate, figures in train_and_measure(params, sets, personas, work):
            report["reward_models"][aggregate] = figures
            write_json(args.report, report)  # a run stopped later keeps what it measured
            print(json.dumps({aggregate: figures}, indent=1))
    return 0


def train_and_measure(params, sets: dict[str, list[dict]], personas: dict, work: Path):
    """A reward model on each set (the copy's train_rm block; nothing logged), measured on its own eval pairs,
    the other set's eval pairs and the held-out human pairs: yields (aggregate, figures) as each is measured. An
    adapter already trained under `work` is reused (resume)."""
    from mascot.checkpoints import checkpoint_dir
    from mascot.promote import measure
    from mascot.reward.evaluation import untrained_human, human_set_metrics
    from mascot.stage_args import dvc_cmd_options
    from mascot.reward.scorer import RewardScorer
    from mascot.reward.train import train_reward_model

    files = dvc_cmd_options("train_rm")  # the human set and the judge's scores of it, as the stage reads them
    human = untrained_human(params, files["human_items_path"], files.get("human_scores_path"))
    for aggregate, pairs in sets.items():
        # keyed on the pairs and the training block, as a stage's checkpoints are: other inputs train afresh
        run = checkpoint_dir(aggregate, pairs, params.train_rm.model_dump(), root=work)
        model_dir, done = run / "model", run / "trained"
        if not done.exists():
            print(f"aggregation: training the {aggregate} reward model on {len(pairs)} pairs -> {model_dir}")
            train_reward_model(pairs, personas, params.train_rm, model_dir, run / "checkpoints",
                               report_to=(), min_n=params.stats.min_n)
            done.write_text("trained\n")
        scorer, figures = RewardScorer.from_dir(model_dir), {}
        for on, on_pairs in sets.items():
            m = measure(scorer, [p for p in on_pairs if p["split"] == "eval"], personas, params.stats.min_n)
            figures[f"on_{on}_eval"] = {k: m.get(k) for k in ("pairs", "accuracy", "accuracy_ci_low",
                                                              "accuracy_ci_high", "length_baseline_accuracy",
                                                              "accuracy_null_p")}
        if human is not None:
            h = human_set_metrics(scorer, human, personas)
            figures["human"] = {k: h.get(k) for k in ("human_pairs", "human_pairs_ci_low", "human_pairs_ci_high",
                                                      "human_pairs_n", "human_length_baseline",
                                                      "human_pairs_controlled", "human_pairs_controlled_n")}
        yield aggregate, figures


if __name__ == "__main__":
    sys.exit(main())
