"""The `human_set` stage: the seekers' own ratings of supporter turns (ESConv) -> the human reference set."""
from __future__ import annotations

from pathlib import Path

from mascot.config import Params
from mascot.data.human_ratings import build_human_set, counts
from mascot.data.personas import load_personas
from mascot.data.prepare import load_source, token_counter
from mascot.io import BadRows, InputError, write_json, write_jsonl


def main(params: Params, *, items_path: str, figures_path: str) -> None:
    """The `human_set` stage: the rated supporter turns of every source in prepare.sources, with their counts."""
    p, h = params.prepare, params.human
    personas = load_personas(p.personas_file)
    if h.persona not in personas:
        raise InputError(f"human.persona: '{h.persona}' is not a persona of {p.personas_file} ({', '.join(personas)})")
    bad = BadRows(skip=p.skip_bad_rows)
    count = token_counter(p.tokenizer)
    items = [item for spec in p.sources
             for item in build_human_set(load_source(spec, bad), p.max_context_tokens, count, h.persona,
                                         Path(spec.path).stem if spec.path else spec.format)]
    write_jsonl(items_path, items)
    figures = counts(items, h.min_gap, params.stats.min_n)
    write_json(figures_path, figures)
    base = figures["length_baseline"]
    print(f"human_set: {figures['items']} rated supporter turns of {figures['conversations']} conversations, "
          f"{figures['pairs']} pairs (ratings {h.min_gap}+ apart) in {figures['pair_conversations']} -> {items_path}; "
          f"longer turn wins {base['mean']} [{base['ci_low']}, {base['ci_high']}]"
          + ("" if items else "; no source has ratings (ESConv annotation.feedback, a JSONL message's rating): "
             "the judge and the reward models are measured against no people"))
