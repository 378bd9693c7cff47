"""Does the LLM judge add anything over the human signal already in the corpus? Reward models trained on the
judge's pairs only, on the seekers' own pairs only (pairs.human), and on both, each measured on the held-out
conversations' human pairs (no model trained on them) and on the judge's eval pairs. The table of docs/judge.md
"Reward models against people".

Same sizes where possible: `judge` takes every judge train pair of a run (n), `human` n human train pairs
(seeded sample), `both` n/2 of each; `human_all` and `both_all` every pair there is. Each trains with
`train_rm`'s own core (`train_reward_model`: params.yaml's train_rm block, no tracking) in a fresh checkpoint
folder.

    dvc repro pairs human_set judge_check     # a run's data/pairs.jsonl (pairs.human off), the human set
    python benchmarks/human_vs_judge_pairs.py [--repo DIR] [--conditions judge,human,both]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def training_sets(judge_train: list[dict], human_train: list[dict], seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    n = len(judge_train)
    human_n = rng.sample(human_train, min(n, len(human_train)))
    half_j, half_h = rng.sample(judge_train, n // 2), rng.sample(human_train, min(n - n // 2, len(human_train)))
    return {"judge": judge_train, "human": human_n, "both": half_j + half_h, "human_all": human_train,
            "both_all": judge_train + human_train}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=".", help="the working tree of a run (params.yaml, data/, models/)")
    parser.add_argument("--conditions", default="judge,human,both,human_all,both_all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="reports/bench/human_vs_judge_pairs.jsonl")
    args = parser.parse_args()

    import os

    os.chdir(args.repo)
    import torch

    torch.set_num_threads(1)
    from mascot.config import load_params
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.pairs import build_human_pairs
    from mascot.reward.evaluation import untrained_human
    from mascot.stage_args import dvc_cmd_options
    from mascot.reward.train import train_reward_model

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    pairs = [p for p in load_jsonl("data/pairs.jsonl") if p.get("pair_source", "judge") == "judge"]
    judge_train, judge_eval = [p for p in pairs if p["split"] == "train"], [p for p in pairs if p["split"] == "eval"]
    human_train = build_human_pairs(load_jsonl("data/human/items.jsonl"), personas, params.human.min_gap,
                                    params.pairs, params.heldout)
    files = dvc_cmd_options("train_rm")  # the human set and the judge's scores of it, as the stage reads them
    human = untrained_human(params, files["human_items_path"], files.get("human_scores_path"))
    sets = training_sets(judge_train, human_train, args.seed)
    print(f"judge train pairs {len(judge_train)}, judge eval pairs {len(judge_eval)}, human train pairs "
          f"{len(human_train)}; held-out human items {len(human.items)} (judge scores on {len(human.judge_scores)})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for name in args.conditions.split(","):
        train = sets[name]
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            result = train_reward_model(train + judge_eval, personas, params.train_rm, Path(tmp) / "adapter",
                                        Path(tmp) / "ckpt", None, "reply", report_to=(), human=human)
            seconds = time.perf_counter() - start
        m = result["metrics"]
        row = {"condition": name, "train_pairs": len(train),
               "human_train_pairs": sum(p.get("pair_source") == "human" for p in train),
               "seconds": round(seconds, 1), **{k: v for k, v in m.items() if k.startswith(("human_", "eval_accuracy",
                                                                                              "eval_pairs", "eval_length"))}}
        with open(args.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{name}: {len(train)} train pairs ({row['human_train_pairs']} human) -> held-out human pairs "
              f"{m.get('human_pairs')} [{m.get('human_pairs_ci_low')}, {m.get('human_pairs_ci_high')}] n "
              f"{m.get('human_pairs_n')} / {m.get('human_pairs_conversations')} conversations (longer wins "
              f"{m.get('human_length_baseline')}; not longer {m.get('human_pairs_controlled')} on "
              f"{m.get('human_pairs_controlled_n')}); judge on the same: {m.get('human_judge_pairs')} "
              f"(rm {m.get('human_pairs_judged')}, n {m.get('human_judge_pairs_n')}); judge eval pairs "
              f"{m.get('eval_accuracy')} on {m.get('eval_pairs')}; {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
