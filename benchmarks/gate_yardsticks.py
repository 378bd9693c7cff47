"""Which pairs can the promotion gate tell a reward model by? One trained reward model on each candidate yardstick:
the judge's eval pairs, the seekers' pairs of held-out conversations, of every conversation it never trained on
(held out and eval split), and those with the judge's eval pairs. For each: n, conversations, accuracy with its
95% interval over conversations, the interval's width, "the longer reply wins" on the same pairs, and whether
the interval can tell the accuracy from the gate's threshold (0.5) and from that baseline.

    python benchmarks/gate_yardsticks.py --workdir <a finished pipeline copy, e.g. a make repro clone>

It reads the copy's params.yaml, data/pairs.jsonl, data/human/items.jsonl and models/reward (the adapter
train_rm wrote), in this checkout's code. An adapter trained before the model folders' identity rule changed
(mascot/llm/identity.py) is scored anyway, with a note: its base is checked by its meta's path, not its digest.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import sys

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="a pipeline folder that ran train_rm")
    parser.add_argument("--bar", type=float, default=0.5, help="the gate's threshold (promote.min_eval_accuracy)")
    args = parser.parse_args()
    os.chdir(args.workdir)
    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import InputError, load_jsonl
    from mascot.promote import score_pairs
    from mascot.registry import point_verdict
    from mascot.reward import scorer as scorer_module
    from mascot.reward.evaluation import HumanCheck, human_gate_pairs, human_item_scores, pair_metrics, untrained_items
    from mascot.splits import is_held_out

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    try:
        scorer = scorer_module.RewardScorer.from_dir("models/reward")
    except InputError as exc:  # an adapter of an earlier identity rule: same weights, another digest
        print(f"note: {exc}; scored anyway", file=sys.stderr)
        meta = json.loads(Path("models/reward", scorer_module.META_FILE).read_text())
        scorer_module.folder_digest = lambda _path: meta["base_model_digest"]
        scorer = scorer_module.RewardScorer.from_dir("models/reward")
    min_n = params.stats.min_n
    eval_pairs = [p for p in load_jsonl("data/pairs.jsonl") if p["split"] == "eval"]
    items = load_jsonl("data/human/items.jsonl")
    untrained = HumanCheck(untrained_items(items, params.heldout, params.pairs), params.human.min_gap, min_n=min_n)
    held = HumanCheck([i for i in items if is_held_out(i, params.heldout)], params.human.min_gap, min_n=min_n)
    chosen, rejected = score_pairs(scorer, eval_pairs, personas)
    rm = human_item_scores(scorer, untrained, personas)
    sets = {"the judge's eval pairs": (eval_pairs, chosen, rejected),
            "the seekers' pairs, held-out conversations": human_gate_pairs(held, rm),
            "the seekers' pairs, every untrained conversation": human_gate_pairs(untrained, rm)}
    rows, h_chosen, h_rejected = sets["the seekers' pairs, every untrained conversation"]
    sets["the judge's eval pairs and the seekers' untrained pairs"] = (eval_pairs + rows, chosen + h_chosen,
                                                                        rejected + h_rejected)
    print(f"# {Path(args.workdir).resolve()}: {scorer.granularity.name} reward model, stats.min_n {min_n}, "
          f"threshold {args.bar}")
    print("| yardstick | n pairs | conversations | accuracy [95% CI] | width | longer wins | vs threshold | "
          "vs longer wins |\n| --- | ---: | ---: | --- | ---: | ---: | --- | --- |")
    for name, (pairs, c, r) in sets.items():
        m = pair_metrics(pairs, c, r, min_n)
        if not m["pairs"]:
            print(f"| {name} | 0 | | | | | | |")
            continue
        lo, hi = m["accuracy_ci_low"], m["accuracy_ci_high"]
        width = round(hi - lo, 3) if lo is not None and hi is not None else None
        print(f"| {name} | {m['pairs']} | {m['conversations']} | {m['accuracy']} [{lo}, {hi}] | {width} | "
              f"{m['length_baseline_accuracy']} | {point_verdict(m['accuracy'], lo, hi, args.bar, m['pairs'], min_n)} | "
              f"{point_verdict(m['accuracy'], lo, hi, m['length_baseline_accuracy'], m['pairs'], min_n, strict=True)} |")


if __name__ == "__main__":
    main()
