"""The collective judge against the seekers' survey with the block's length held: a run's `judge_check_group` output.

    python benchmarks/survey_at_equal_length.py --workdir /tmp/ev/runs/evidence [--boot 2000]

`judge_check_group` reports the judge's Spearman with each survey key raw (mascot/annotate/survey.py). The judge's
score and the survey may both follow the block's length; this prints, per key, the raw Spearman as the stage
computes it (mascot.stats.cluster_spearman_with_ci), the word count's own Spearman with the survey, and the partial
Spearman with the supporter's words held (each rank regressed on the words' rank), with a bootstrap interval (one
reference block a conversation, so resampling blocks resamples conversations). The stages do not compute it yet
(docs/results.md, 2026-12-07).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import sys

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mascot.annotate.reference_set import SURVEY_KEYS  # noqa: E402
from mascot.stats import DEFAULT_MIN_N, TOO_FEW, cluster_spearman_with_ci, spearman  # noqa: E402


def _residual_ranks(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    ry, rx = stats.rankdata(y), stats.rankdata(x)
    return ry - np.polyval(np.polyfit(rx, ry, 1), rx)


def partial_spearman(score: np.ndarray, survey: np.ndarray, words: np.ndarray) -> float:
    return float(np.corrcoef(_residual_ranks(score, words), _residual_ranks(survey, words))[0, 1])


def scored_blocks(workdir: Path, key: str) -> tuple[np.ndarray, list[str]]:
    """(judge total, supporter words, survey[key]) for every scored human block whose conversation has the key, and
    each block's conversation."""
    scores = {}
    for line in (workdir / "data/judge_check_group/scores.jsonl").read_text().splitlines():
        s = json.loads(line)
        if s["reply_type"] == "reference" and s["status"] == "scored":
            scores[s["query_id"]] = s["total_reward"]
    rows, conversations = [], []
    for line in (workdir / "data/judge_check_group/reference.jsonl").read_text().splitlines():
        item = json.loads(line)
        value = (item.get("survey") or {}).get(key)
        if value is None or item["item_id"] not in scores:
            continue
        words = sum(len(t["content"].split()) for t in item["blocks"]["reference"] if t["role"] == "assistant")
        rows.append((scores[item["item_id"]], words, value))
        conversations.append(item["conversation_id"])
    return np.array(rows, dtype=float), conversations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, help="a pipeline copy after judge_check_group")
    ap.add_argument("--keys", default=",".join(SURVEY_KEYS))
    ap.add_argument("--boot", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for key in args.keys.split(","):
        a, conversations = scored_blocks(Path(args.workdir), key)
        if len(a) < DEFAULT_MIN_N:
            print(f"{key}: {len(a)} surveyed blocks: {TOO_FEW}")
            continue
        judge, words, survey = (list(a[:, k]) for k in range(3))
        raw = cluster_spearman_with_ci(judge, survey, conversations)
        boot = [partial_spearman(*b.T[[0, 2, 1]]) for b in (a[rng.integers(0, len(a), len(a))] for _ in range(args.boot))]
        lo, hi = np.percentile(boot, [2.5, 97.5])
        print(f"{key} (n {len(a)}): judge Spearman {raw['mean']:+.3f} [{raw['ci_low']:+.3f}, {raw['ci_high']:+.3f}]; "
              f"words alone {spearman(words, survey):+.3f}; judge with words {spearman(judge, words):+.3f}; "
              f"words held {partial_spearman(a[:, 0], a[:, 2], a[:, 1]):+.3f} [{lo:+.3f}, {hi:+.3f}]")

if __name__ == "__main__":
    main()
