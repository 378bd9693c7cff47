"""Which training pairs make a reward model agree with people? k folds over the human set's conversations: for
each fold, a reward model is trained (train_rm's own core and block, no tracking) on the pairs of every other
conversation (neither its human pairs nor a judge pair of its queries) under each condition, and scores the
fold's rated turns. Pooled over the folds, every human pair is scored by a model that never saw its
conversation, so the n is every pair of the set: the agreement, "the longer turn wins", the agreement at equal
length and where the preferred turn is not longer, each with its interval over conversations and its n.

    dvc repro pairs human_set        # a run's data/pairs.jsonl (its judge pairs) and data/human/items.jsonl
    python benchmarks/human_kfold.py --repo DIR [--k 5] [--conditions judge,human,both:1,both:2,worst]

Conditions: `judge` (the judge's pairs only), `human` (the seekers' pairs only), `both:W` (both, each human pair
trained on W times: pairs.human_weight), `worst` (the lower of the judge-trained and the human-trained models'
scores, each standardised within its fold: Coste et al. 2023's worst-case ensemble, as GRPO's reward would read it).

Resumable: each (fold, condition)'s scores land in --workdir as they are made; a rerun skips those done.
"""
from __future__ import annotations

import argparse
import json
import os
import random
from statistics import fmean, pstdev
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRAINED = ("judge", "human")  # conditions that `worst` is made of


def parse_condition(text: str) -> tuple[str, int]:
    """`judge`, `human`, `worst` or `both:W` (W a whole number of repetitions, at least 1) -> (kind, weight)."""
    kind, _, weight = text.partition(":")
    if kind in ("judge", "human", "worst") and not weight:
        return kind, 1
    if kind == "both":
        if not weight.isdigit() or int(weight) < 1:
            raise ValueError(f"condition {text!r}: both:W needs W a whole number >= 1 (the human pairs' repetitions)")
        return kind, int(weight)
    raise ValueError(f"condition {text!r}: one of judge, human, both:W (W >= 1), worst")


def conversation_folds(conversation_ids, k: int, seed: int = 0) -> dict[str, int]:
    """Each conversation's fold, 0..k-1: the conversations shuffled (seeded) and dealt out in turn, so that the
    folds hold as many conversations as can be (their pairs may differ)."""
    convs = sorted(set(conversation_ids))
    if k < 2 or k > len(convs):
        raise ValueError(f"k {k}: need 2 <= k <= the {len(convs)} conversations with a pair")
    random.Random(seed).shuffle(convs)
    return {c: i % k for i, c in enumerate(convs)}


def fold_training_pairs(condition: str, judge_pairs: list[dict], human_pairs: list[dict],
                        held: set[str]) -> list[dict]:
    """The train pairs of one fold under `condition` (not `worst`, which trains nothing of its own): every pair
    whose conversation is not `held`, all in the train split; `both:W` weights each human pair W."""
    kind, weight = parse_condition(condition)
    if kind == "worst":
        raise ValueError("condition 'worst' combines the judge and human models' scores: train those two")
    keep = lambda pairs: [{**p, "split": "train"} for p in pairs if p["conversation_id"] not in held]  # noqa: E731
    if kind == "judge":
        return keep(judge_pairs)
    if kind == "human":
        return keep(human_pairs)
    human = [{**p, "weight": weight} if weight != 1 else p for p in keep(human_pairs)]
    return keep(judge_pairs) + human


def standardised(scores: dict[str, float]) -> dict[str, float]:
    """Scores as z-scores over the items they cover (no rating is read): two reward models' scales differ, and
    the lower of two raw scores would be the lower model's, not the less convinced one."""
    if not scores:
        return {}
    mean, sd = fmean(scores.values()), pstdev(scores.values())
    return {k: (v - mean) / sd if sd > 0 else 0.0 for k, v in scores.items()}


def worst_case(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """Per item, the lower of the two models' standardised scores (items both scored)."""
    za, zb = standardised(a), standardised(b)
    return {k: min(za[k], zb[k]) for k in za.keys() & zb.keys()}


FIGURES = (("pairs", "agreement"), ("length_baseline", "longer wins"), ("controlled", "not longer"))


def pooled_row(condition: str, items: list[dict], scores: dict[str, float], min_gap: int, min_n: int) -> dict:
    from mascot.data.human_ratings import agreement
    from mascot.stats import equal_length_figures

    fig = agreement(items, scores, min_gap, min_n=min_n)
    eq = fig["equal_length"]
    row = {"condition": condition, "items": fig["items"], "conversations": fig["pairs"]["clusters"]}
    for key, _ in FIGURES:
        f = fig[key]
        row[key] = {"mean": f["mean"], "ci": [f["ci_low"], f["ci_high"]], "n": f["n"]}
    flat = equal_length_figures(eq, "eq")
    row["equal_length"] = {"mean": flat.pop("eq"), **{k.removeprefix("eq_"): v for k, v in flat.items()}}
    return row


def describe(row: dict) -> str:
    p, eq, nl, lb = row["pairs"], row["equal_length"], row["controlled"], row["length_baseline"]
    return (f"{row['condition']:>8}: {p['mean']} [{p['ci'][0]}, {p['ci'][1]}] n {p['n']} of {row['conversations']} "
            f"conversations; at equal length {eq['mean']} [{eq['ci_low']}, {eq['ci_high']}]; not longer {nl['mean']} "
            f"[{nl['ci'][0]}, {nl['ci'][1]}] n {nl['n']}; longer wins {lb['mean']}")


def train_and_score(pairs: list[dict], test_items: list[dict], personas: dict, train_params, folder: Path) -> dict:
    """A reward model trained on `pairs` in `folder` (resuming its checkpoints), its scores of `test_items`."""
    from mascot.granularity import persona_fields
    from mascot.reward.scorer import RewardScorer
    from mascot.reward.train import train_reward_model

    train_reward_model(pairs, personas, train_params, folder / "adapter", folder / "ckpt", None, "reply",
                       report_to=())
    scorer = RewardScorer.from_dir(folder / "adapter", batch_size=train_params.batch_size)
    scores = scorer.score([(persona_fields(personas[i["persona"]]), i["context"], i["reply"]) for i in test_items])
    return dict(zip((i["item_id"] for i in test_items), scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=".", help="a run's working tree (params.yaml, data/pairs.jsonl, data/human)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--conditions", default="judge,human,both:1,both:2,worst")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="reports/bench/human_kfold", help="per-fold scores and models (resume)")
    parser.add_argument("--paired", action="append", default=[], metavar="A-B",
                        help="also each pair's win under condition A minus under B, on the same pairs (e.g. "
                             "both:1-judge), raw and at equal length, interval over conversations")
    parser.add_argument("--against", metavar="WORKDIR",
                        help="also each condition's win here minus under the same condition in WORKDIR (another "
                             "--workdir of the same human set, --k and --seed, e.g. another training), on the same pairs")
    args = parser.parse_args()
    conditions = args.conditions.split(",")
    for c in conditions:
        parse_condition(c)  # a bad condition stops here, before any training
    trained = sorted({c for c in conditions if c != "worst"} | (set(TRAINED) if "worst" in conditions else set()))

    start_dir = os.getcwd()  # --against is read from where the call was made
    os.chdir(args.repo)
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from mascot.config import load_params
    from mascot.data.human_ratings import human_pairs, paired_difference
    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl
    from mascot.pairs import human_pair_rows

    params = load_params("params.yaml")
    personas = load_personas(params.prepare.personas_file)
    items = load_jsonl("data/human/items.jsonl")
    min_gap = params.human.min_gap
    judge = [p for p in load_jsonl("data/pairs.jsonl") if p.get("pair_source", "judge") == "judge"]
    human = human_pair_rows(items, personas, min_gap)
    paired = {hi["conversation_id"] for hi, _ in human_pairs(items, min_gap)}
    folds = conversation_folds(paired, args.k, args.seed)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    judge_convs = len({p["conversation_id"] for p in judge})
    print(f"human_kfold: {len(human)} human pairs of {len(paired)} conversations in {args.k} folds; {len(judge)} judge "
          f"pairs of {judge_convs} conversations; train_rm on {params.train_rm.base_model}", flush=True)

    scores: dict[str, dict[str, float]] = {c: {} for c in trained}
    for fold in range(args.k):
        held = {c for c, f in folds.items() if f == fold}
        test = [i for i in items if i["conversation_id"] in held]
        for cond in trained:
            done = fold_file(work, fold, cond)
            if not done.exists():
                pairs = fold_training_pairs(cond, judge, human, held)
                start = time.perf_counter()
                fold_scores = train_and_score(pairs, test, personas, params.train_rm, work / done.stem)
                done.write_text(json.dumps({"train_pairs": len(pairs), "seconds": round(time.perf_counter() - start, 1),
                                            "scores": fold_scores}))
            record = json.loads(done.read_text())
            scores[cond].update(record["scores"])
            print(f"fold {fold + 1}/{args.k} {cond}: {record['train_pairs']} train pairs, {len(test)} rated turns "
                  f"of {len(held)} conversations scored, {record['seconds']} s", flush=True)
    if "worst" in conditions:
        scores["worst"] = {}
        for fold in range(args.k):  # standardised within each fold: each fold's two models have their own scales
            ids = {i["item_id"] for i in items if folds.get(i["conversation_id"]) == fold}
            scores["worst"].update(worst_case({k: v for k, v in scores["judge"].items() if k in ids},
                                              {k: v for k, v in scores["human"].items() if k in ids}))
    rows = [pooled_row(c, items, scores[c], min_gap, params.stats.min_n) for c in conditions]
    (work / "table.json").write_text(json.dumps(rows, indent=2))
    for row in rows:
        print(describe(row), flush=True)
    differences = [(f"{a} - {b}", scores[a], scores[b])
                   for a, _, b in (pair.partition("-") for pair in args.paired)]
    if args.against:
        other = Path(start_dir, args.against)
        for cond in trained:
            theirs = fold_scores_in(other, cond, args.k)
            if theirs is None:
                print(f"{cond}: not every fold of it is in {other}; no difference against it", flush=True)
                continue
            differences.append((f"{cond} here - {cond} in {other}", scores[cond], theirs))
    for name, a_scores, b_scores in differences:
        diff = paired_difference(items, b_scores, a_scores, min_gap, params.stats.min_n)
        raw, eq = diff["raw"], diff["equal_length"]
        print(f"{name}, paired on the same pairs: {raw['mean']} [{raw['ci_low']}, {raw['ci_high']}] n {raw['n']}; "
              f"at equal length {eq.get('mean')} [{eq.get('ci_low')}, {eq.get('ci_high')}]", flush=True)


def fold_file(workdir: Path, fold: int, condition: str) -> Path:
    """Where a (fold, condition)'s train count, time and scores are kept (resume, and --against)."""
    return workdir / f"fold{fold}-{condition.replace(':', '_')}.json"


def fold_scores_in(workdir: Path, condition: str, k: int) -> dict[str, float] | None:
    """A condition's pooled scores from another run's per-fold files (None unless all k folds are there)."""
    files = [fold_file(workdir, fold, condition) for fold in range(k)]
    if not all(f.exists() for f in files):
        return None
    return {item: s for f in files for item, s in json.loads(f.read_text())["scores"].items()}


if __name__ == "__main__":
    main()
