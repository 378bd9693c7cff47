"""The collective judge against the seekers' survey with the block's length held: a run's `judge_check_group` output.

    python benchmarks/survey_at_equal_length.py --workdir /tmp/ev/runs/evidence [--boot 2000]

`judge_check_group` reports the judge's Spearman with each survey key raw (mascot/annotate/survey.py). The judge's
score and the survey may both follow the block's length; this prints, per key, the raw Spearman, the word count's
own Spearman with the survey, and the partial Spearman with the supporter's words held (each rank regressed on the
words' rank), with a bootstrap interval over conversations (one reference block a conversation). The stages do
not compute it yet (docs/results.md, 2026-12-07).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats


def _residual_ranks(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    ry, rx = stats.rankdata(y), stats.rankdata(x)
    return ry - np.polyval(np.polyfit(rx, ry, 1), rx)


def partial_spearman(score: np.ndarray, survey: np.ndarray, words: np.ndarray) -> float:
    return float(np.corrcoef(_residual_ranks(score, words), _residual_ranks(survey, words))[0, 1])


def survey_rows(workdir: Path, key: str) -> np.ndarray:
    """(judge total, supporter words, survey[key]) for every scored human block whose conversation has the key."""
    scores = {}
    for line in (workdir / "data/judge_check_group/scores.jsonl").read_text().splitlines():
        s = json.loads(line)
        if s["reply_type"] == "reference" and s["status"] == "scored":
            scores[s["query_id"]] = s["total_reward"]
    rows = []
    for line in (workdir / "data/judge_check_group/reference.jsonl").read_text().splitlines():
        item = json.loads(line)
        value = (item.get("survey") or {}).get(key)
        if value is None or item["item_id"] not in scores:
            continue
        words = sum(len(t["content"].split()) for t in item["blocks"]["reference"] if t["role"] == "assistant")
        rows.append((scores[item["item_id"]], words, value))
    return np.array(rows, dtype=float)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, help="a pipeline copy after judge_check_group")
    ap.add_argument("--keys", default="empathy,relevance,emotion_drop")
    ap.add_argument("--boot", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for key in args.keys.split(","):
        a = survey_rows(Path(args.workdir), key)
        if len(a) < 3:
            print(f"{key}: {len(a)} surveyed blocks: too few to tell")
            continue
        boot = [partial_spearman(*b.T[[0, 2, 1]]) for b in (a[rng.integers(0, len(a), len(a))] for _ in range(args.boot))]
        lo, hi = np.percentile(boot, [2.5, 97.5])
        print(f"{key} (n {len(a)}): judge Spearman {stats.spearmanr(a[:, 0], a[:, 2])[0]:+.3f}; words alone "
              f"{stats.spearmanr(a[:, 1], a[:, 2])[0]:+.3f}; judge with words {stats.spearmanr(a[:, 0], a[:, 1])[0]:+.3f}; "
              f"words held {partial_spearman(a[:, 0], a[:, 2], a[:, 1]):+.3f} [{lo:+.3f}, {hi:+.3f}]")


if __name__ == "__main__":
    main()
