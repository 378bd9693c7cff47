"""The `pairs` and `pairs_group` stages: scored candidates -> chosen/rejected preference pairs."""
from __future__ import annotations

from pathlib import Path

from mascot.config import PairsParams, Params
from mascot.data.personas import load_personas
from mascot.io import InputError, load_jsonl, write_json, write_jsonl
from mascot.pairs import balance_length, build_block_pairs, chosen_longer_fraction, pair_metrics_summary, stage_pairs


def _finish(name: str, pairs: list[dict], params: PairsParams, out: str, metrics: str, extra: dict | None = None) -> None:
    before, dropped = chosen_longer_fraction(pairs), 0
    if params.balance_length:
        pairs, dropped = balance_length(pairs, params.split_seed)
    write_jsonl(out, pairs)
    m = {**pair_metrics_summary(pairs, params.score_margin, before, dropped), **(extra or {})}
    write_json(metrics, m)
    print(f"{name}: {len(pairs)} pairs at margin {params.score_margin}: train {m['train_pairs']} pairs of "
          f"{m['train_conversations']} conversations, eval {m['eval_pairs']} of {m['eval_conversations']}; chosen longer in "
          f"{m['chosen_longer_fraction']} (before balancing {before}, {dropped} dropped) -> {out}")


def main(params: Params, *, queries_path: str, candidates_path: str, scores_path: str, pairs_path: str, figures_path: str,
         human_items_path: str) -> None:
    if params.pairs.human and not Path(human_items_path).exists():
        raise InputError(f"pairs.human is on but {human_items_path} does not exist: run the human_set stage")
    pairs, extra = stage_pairs(params, {q["query_id"]: q for q in load_jsonl(queries_path)}, load_jsonl(candidates_path),
                               load_jsonl(scores_path), load_personas(params.prepare.personas_file),
                               load_jsonl(human_items_path) if params.pairs.human else None)
    _finish("pairs", pairs, params.pairs, pairs_path, figures_path, extra)


def main_group(params: Params, *, queries_path: str, episodes_path: str, scores_path: str, pairs_path: str,
               figures_path: str) -> None:
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    pairs = build_block_pairs(load_jsonl(episodes_path), load_jsonl(scores_path), queries, params.group_pairs)
    _finish("pairs_group", pairs, params.group_pairs, pairs_path, figures_path)
