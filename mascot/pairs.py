"""Chosen/rejected preference pairs from scored units, pure functions (the `pairs` and `pairs_group` stages:
mascot/stages/pairs.py).

One pairing rule for both granularities (`ranked_pairs`): every pair of one group's scored units whose totals
differ by at least the margin, a tie never, identical texts never. Stage 1's group is a query and persona
(the candidates of one prompt); stage 2's is a prefix (the branches of one conversation)."""
from __future__ import annotations

import hashlib
from itertools import combinations
from statistics import fmean

from mascot.config import PairsParams, Params
from mascot.data.human_ratings import human_pairs
from mascot.data.personas import Persona
from mascot.granularity import BLOCK, REPLY
from mascot.splits import conversation_of, is_held_out, role_of, split_counts, split_of
from mascot.transcript import turn_messages

EPS = 1e-9  # totals are means of floats: a gap of exactly the margin must count


def scored_groups(scores: list[dict], unit_id: str, group_fields: tuple[str, ...]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for s in scores:
        if s["status"] != "scored":
            continue
        if not 1.0 <= s["total_reward"] <= 5.0:
            raise ValueError(f"{unit_id} {s[unit_id]}: total_reward {s['total_reward']} is outside [1, 5]")
        groups.setdefault(tuple(s[f] for f in group_fields), []).append(s)
    return groups


def ranked_pairs(group: list[dict], margin: float, text_of) -> list[tuple[dict, dict]]:
    """(higher, lower) score records of every pair in `group` (in its order) at least `margin` apart."""
    out = []
    for a, b in combinations(group, 2):
        gap = abs(a["total_reward"] - b["total_reward"])
        if gap <= EPS or gap + EPS < margin:
            continue  # a tie has no chosen side, whatever the margin
        hi, lo = (a, b) if a["total_reward"] > b["total_reward"] else (b, a)
        if text_of(hi).strip() == text_of(lo).strip():
            continue  # identical texts teach nothing, whatever the judge said
        out.append((hi, lo))
    return out


def build_pairs(candidates: list[dict], scores: list[dict], queries: dict[str, dict],
                personas: dict[str, Persona], params: PairsParams, heldout=None) -> list[dict]:
    """Pairs of every query that is not held out (`heldout`: the params block; mascot/splits.py)."""
    by_id = {c["candidate_id"]: c for c in candidates}
    groups = {k: g for k, g in scored_groups(scores, REPLY.unit_id, REPLY.group_fields).items()
              if heldout is None or not is_held_out(queries[k[0]], heldout)}
    split = split_of([queries[q] for q in {q for q, _ in groups}], params.eval_fraction, params.split_seed)
    pairs = []
    for (query_id, persona_name), group in sorted(groups.items()):
        group.sort(key=lambda s: by_id[s["candidate_id"]]["candidate_index"])
        system = {"role": "system", "content": personas[persona_name].system_prompt()}
        for hi, lo in ranked_pairs(group, params.score_margin, lambda s: by_id[s["candidate_id"]]["text"]):
            chosen, rejected = by_id[hi["candidate_id"]], by_id[lo["candidate_id"]]
            pairs.append({
                "pair_id": f"{chosen['candidate_id']}>{rejected['candidate_id']}",
                "query_id": query_id, "conversation_id": conversation_of(queries[query_id]), "persona": persona_name,
                "split": split[query_id],
                "prompt": [system, *queries[query_id]["context"]],
                "chosen": [{"role": "assistant", "content": chosen["text"]}],
                "rejected": [{"role": "assistant", "content": rejected["text"]}],
                "score_chosen": hi["total_reward"], "score_rejected": lo["total_reward"],
                "margin": round(hi["total_reward"] - lo["total_reward"], 4),
                "chosen_id": chosen["candidate_id"], "rejected_id": rejected["candidate_id"],
            })
    return pairs


def human_pair_rows(items: list[dict], personas: dict[str, Persona], min_gap: int, weight: int = 1) -> list[dict]:
    """Every within-conversation pair of the human set (ratings at least `min_gap` apart) as a training pair marked
    `pair_source: human`, whatever its split; `weight` > 1 marks each to be trained on that many times."""
    out = []
    for hi, lo in human_pairs(items, min_gap):
        system = {"role": "system", "content": personas[hi["persona"]].system_prompt()}
        out.append({"pair_id": f"{hi['item_id']}>{lo['item_id']}", "pair_source": "human", "query_id": hi["item_id"],
                    "conversation_id": hi["conversation_id"], "persona": hi["persona"], "split": "train",
                    # each side replied to its own moment of the conversation: the reward model reads each
                    # after its own context (mascot/reward/train.py tokenize_pairs)
                    "prompt": [system, *hi["context"]], "rejected_prompt": [system, *lo["context"]],
                    "chosen": [{"role": "assistant", "content": hi["reply"]}],
                    "rejected": [{"role": "assistant", "content": lo["reply"]}],
                    "score_chosen": float(hi["rating"]), "score_rejected": float(lo["rating"]),
                    "margin": float(hi["rating"] - lo["rating"]), "chosen_id": hi["item_id"], "rejected_id": lo["item_id"]})
        if weight != 1:  # absent at 1, so that the default's pairs file is as it was
            out[-1]["weight"] = weight
    return out


def build_human_pairs(items: list[dict], personas: dict[str, Persona], min_gap: int, params: PairsParams,
                      heldout) -> list[dict]:
    """The human set's pairs (`human_pair_rows`) of train-split conversations: the seekers' own preferences beside
    the judge's, each weighted `params.human_weight`. Held-out and eval-split conversations give none (the same
    split rule as the judge's pairs, by conversation)."""
    train = [i for i in items if role_of(i, heldout, params.eval_fraction, params.split_seed) == "train"]
    return human_pair_rows(train, personas, min_gap, params.human_weight)


def build_block_pairs(episodes: list[dict], scores: list[dict], queries: dict[str, dict],
                      params: PairsParams) -> list[dict]:
    """Stage 2: pairs of branches of the same prefix; chosen and rejected are their blocks of turns."""
    by_id = {e["episode_id"]: e for e in episodes}
    groups = scored_groups(scores, BLOCK.unit_id, BLOCK.group_fields)
    pairs = []
    for (prefix_id,), group in sorted(groups.items()):
        group.sort(key=lambda s: by_id[s["episode_id"]]["branch"])
        for hi, lo in ranked_pairs(group, params.score_margin, lambda s: BLOCK.unit_text(by_id[s["episode_id"]])):
            chosen, rejected = by_id[hi["episode_id"]], by_id[lo["episode_id"]]
            query_id = chosen["query_id"]
            pairs.append({
                "pair_id": f"{chosen['episode_id']}>{rejected['episode_id']}", "granularity": "block",
                "query_id": query_id, "conversation_id": conversation_of(queries[query_id]), "prefix_id": prefix_id,
                "split": None,
                "prompt": queries[query_id]["context"],
                "chosen": turn_messages(chosen["turns"]), "rejected": turn_messages(rejected["turns"]),
                "score_chosen": hi["total_reward"], "score_rejected": lo["total_reward"],
                "margin": round(hi["total_reward"] - lo["total_reward"], 4),
                "chosen_id": chosen["episode_id"], "rejected_id": rejected["episode_id"],
            })
    split = split_of([queries[q] for q in {p["query_id"] for p in pairs}], params.eval_fraction, params.split_seed)
    return [{**p, "split": split[p["query_id"]]} for p in pairs]


def reply_words(text: str) -> int:
    return len(text.split())


def side_words(messages: list[dict]) -> int:
    return sum(reply_words(m["content"]) for m in messages)


def chosen_longer(pair: dict) -> bool | None:
    """True if the chosen side (a reply, or a block's turns) has more words, False if fewer, None on equal
    length (or no texts)."""
    if not pair.get("chosen") or not pair.get("rejected"):
        return None
    c, r = side_words(pair["chosen"]), side_words(pair["rejected"])
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


def pair_metrics_summary(pairs: list[dict], margin: float, before: float | None, dropped: int) -> dict:
    return {"pairs": len(pairs), "train_pairs": sum(p["split"] == "train" for p in pairs),
            "eval_pairs": sum(p["split"] == "eval" for p in pairs), "score_margin": margin,
            # pairs of one conversation are not independent: the conversations are the real n of each split
            "train_conversations": len({p.get("conversation_id") for p in pairs if p["split"] == "train"}),
            "eval_conversations": len({p.get("conversation_id") for p in pairs if p["split"] == "eval"}),
            "mean_margin": round(fmean(p["margin"] for p in pairs), 4) if pairs else None,
            "chosen_longer_fraction": chosen_longer_fraction(pairs), "chosen_longer_fraction_before_balance": before,
            "equal_length_pairs": sum(chosen_longer(p) is None for p in pairs), "dropped_for_length_balance": dropped,
            "train_pairs_by_source": {src: sum(p["split"] == "train" and p.get("pair_source", "judge") == src for p in pairs)
                                      for src in sorted({p.get("pair_source", "judge") for p in pairs})}}


def stage_pairs(params: Params, queries: dict[str, dict], candidates: list[dict], scores: list[dict], personas: dict,
                human_items: list[dict] | None) -> tuple[list[dict], dict]:
    """The `pairs` stage's pairs before length balancing (the judge's, then the seekers' own with pairs.human),
    and the figures it reports beside them."""
    pairs = [{**p, "pair_source": "judge"} for p in build_pairs(candidates, scores, queries, personas, params.pairs,
                                                                 params.heldout)]
    extra = {**split_counts(list(queries.values()), params.heldout), "queries": len(queries)}
    if params.pairs.human:
        human = build_human_pairs(human_items or [], personas, params.human.min_gap, params.pairs, params.heldout)
        pairs += human
        extra["human_pairs"] = len(human)
    return pairs, extra


