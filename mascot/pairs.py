"""The `pairs` stage: chosen/rejected preference pairs from scored candidates (a pure function)."""
from __future__ import annotations

import hashlib
from itertools import combinations

from mascot.config import PairsParams
from mascot.data.personas import Persona

EPS = 1e-9  # totals are means of floats: a gap of exactly the margin must count


def split_of(query_ids: list[str], eval_fraction: float, seed: int) -> dict[str, str]:
    """Deterministic split by query: a query's hash decides; at least one eval query when asked for any."""
    def h(qid: str) -> float:
        return int(hashlib.sha256(f"{seed}:{qid}".encode()).hexdigest()[:12], 16) / 16**12
    ids = sorted(set(query_ids))
    split = {qid: "eval" if h(qid) < eval_fraction else "train" for qid in ids}
    if eval_fraction > 0 and len(ids) > 1 and "eval" not in split.values():
        split[min(ids, key=h)] = "eval"
    return split


def build_pairs(candidates: list[dict], scores: list[dict], queries: dict[str, dict],
                personas: dict[str, Persona], params: PairsParams) -> list[dict]:
    by_id = {c["candidate_id"]: c for c in candidates}
    groups: dict[tuple[str, str], list[dict]] = {}
    for s in scores:
        if s["status"] != "scored":
            continue
        if not 1.0 <= s["total_reward"] <= 5.0:
            raise ValueError(f"candidate {s['candidate_id']}: total_reward {s['total_reward']} is outside [1, 5]")
        groups.setdefault((s["query_id"], s["persona"]), []).append(s)
    split = split_of([q for q, _ in groups], params.eval_fraction, params.split_seed)
    pairs = []
    for (query_id, persona_name), group in sorted(groups.items()):
        group.sort(key=lambda s: by_id[s["candidate_id"]]["candidate_index"])
        system = {"role": "system", "content": personas[persona_name].system_prompt()}
        for a, b in combinations(group, 2):
            gap = abs(a["total_reward"] - b["total_reward"])
            if gap <= EPS or gap + EPS < params.score_margin:
                continue  # a tie has no chosen side, whatever the margin
            hi, lo = (a, b) if a["total_reward"] > b["total_reward"] else (b, a)
            chosen, rejected = by_id[hi["candidate_id"]], by_id[lo["candidate_id"]]
            if chosen["text"].strip() == rejected["text"].strip():
                continue  # identical texts teach nothing, whatever the judge said
            pairs.append({
                "pair_id": f"{chosen['candidate_id']}>{rejected['candidate_id']}",
                "query_id": query_id, "persona": persona_name, "split": split[query_id],
                "prompt": [system, *queries[query_id]["context"]],
                "chosen": [{"role": "assistant", "content": chosen["text"]}],
                "rejected": [{"role": "assistant", "content": rejected["text"]}],
                "score_chosen": hi["total_reward"], "score_rejected": lo["total_reward"],
                "margin": round(hi["total_reward"] - lo["total_reward"], 4),
                "chosen_id": chosen["candidate_id"], "rejected_id": rejected["candidate_id"],
            })
    return pairs


def reply_words(text: str) -> int:
    return len(text.split())


def chosen_longer(pair: dict) -> bool | None:
    """True if the chosen reply has more words, False if fewer, None on equal length (or no texts)."""
    if not pair.get("chosen") or not pair.get("rejected"):
        return None
    c, r = reply_words(pair["chosen"][-1]["content"]), reply_words(pair["rejected"][-1]["content"])
    return None if c == r else c > r


def chosen_longer_fraction(pairs: list[dict]) -> float | None:
    """Among pairs whose replies differ in length, the share where the chosen one is longer (0.5: length
    tells nothing; near 1.0: a reward model can score well on length alone)."""
    calls = [x for x in (chosen_longer(p) for p in pairs) if x is not None]
    return round(sum(calls) / len(calls), 4) if calls else None


def balance_length(pairs: list[dict], seed: int = 0) -> tuple[list[dict], int]:
    """Drop pairs of the majority direction (chosen longer, or chosen shorter) until the two are equal,
    within each split, smallest judge margin first (the least certain preferences go first). Returns
    (kept pairs in their original order, number dropped)."""
    drop: set[str] = set()
    for split in ("train", "eval"):
        mine = [p for p in pairs if p["split"] == split]
        longer = [p for p in mine if chosen_longer(p) is True]
        shorter = [p for p in mine if chosen_longer(p) is False]
        major, minor = (longer, shorter) if len(longer) > len(shorter) else (shorter, longer)
        excess = len(major) - len(minor)
        ranked = sorted(major, key=lambda p: (p["margin"], hashlib.sha256(f"{seed}:{p['pair_id']}".encode()).hexdigest()))
        drop |= {p["pair_id"] for p in ranked[:excess]}
    return [p for p in pairs if p["pair_id"] not in drop], len(drop)


def main(params, queries_path: str = "data/queries.jsonl", candidates_path: str = "data/candidates.jsonl",
         scores_path: str = "data/scores.jsonl", out: str = "data/pairs.jsonl",
         metrics: str = "metrics/pairs.json") -> None:
    from statistics import fmean

    from mascot.data.personas import load_personas
    from mascot.io import load_jsonl, write_json, write_jsonl

    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    pairs = build_pairs(load_jsonl(candidates_path), load_jsonl(scores_path), queries,
                        load_personas(params.prepare.personas_file), params.pairs)
    before = chosen_longer_fraction(pairs)
    dropped = 0
    if params.pairs.balance_length:
        pairs, dropped = balance_length(pairs, params.pairs.split_seed)
    write_jsonl(out, pairs)
    m = {"pairs": len(pairs), "train_pairs": sum(p["split"] == "train" for p in pairs),
         "eval_pairs": sum(p["split"] == "eval" for p in pairs), "score_margin": params.pairs.score_margin,
         "mean_margin": round(fmean(p["margin"] for p in pairs), 4) if pairs else None,
         "chosen_longer_fraction": chosen_longer_fraction(pairs), "chosen_longer_fraction_before_balance": before,
         "equal_length_pairs": sum(chosen_longer(p) is None for p in pairs), "dropped_for_length_balance": dropped}
    write_json(metrics, m)
    print(f"pairs: {len(pairs)} pairs at margin {params.pairs.score_margin}, chosen longer in "
          f"{m['chosen_longer_fraction']} (before balancing {before}, {dropped} dropped) -> {out}")
