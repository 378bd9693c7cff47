"""The human reference set: supporter turns the seekers themselves rated, and the pairs people preferred.

In ESConv a seeker turn often carries `annotation.feedback`, 1 to 5: the seeker's rating of the supporter's
turn(s) since the seeker last spoke (the loaders keep it as `Turn.rating`; a plain JSONL source as a user
message's `rating`). An item is that reply (the supporter's turns since the seeker last spoke, joined), the
context up to it, the rating, the conversation it came from, and the persona slot the judge reads it under.

The measure is pairwise and within one conversation (same seeker, same mood): every two items of one
conversation whose ratings differ by at least `min_gap` form a pair, the higher-rated turn preferred. A
scorer (a judge, a reward model, a length rule) agrees with people on a pair when it scores the preferred turn
higher; intervals come from a bootstrap over conversations (mascot/stats.py `cluster_mean_with_ci`), since the
pairs of one conversation are not independent. Each figure stands beside "the longer turn wins" on the same
pairs, and again on the pairs where the preferred turn is not the longer one (length-controlled).
"""
from __future__ import annotations

from collections import Counter
from itertools import combinations

from mascot.data.dialogue import Dialogue
from mascot.data.queries import CountTokens, context_window
from mascot.stats import (DEFAULT_MIN_N, TOO_FEW, cluster_mean_with_ci, cluster_spearman_with_ci, describe_equal_length,
                          equal_length_accuracy, equal_length_difference, pairwise_wins)

LENGTH = "length"  # the baseline scorer: a reply's words


def rated_items(dialogue: Dialogue, budget: int, count: CountTokens, persona: str, corpus: str | None = None
                ) -> list[dict]:
    """Every rated supporter reply of one dialogue that follows a seeker turn (a context to reply to)."""
    items = []
    turns = dialogue.turns
    for k in range(2, len(turns)):
        rating = turns[k].rating
        if rating is None or turns[k].role != "user" or turns[k - 1].role != "assistant":
            continue
        if not any(t.role == "user" for t in turns[: k - 1]):
            continue  # the supporter opened the conversation: there is nothing it replied to
        items.append({"item_id": f"human-{dialogue.id}@{k - 1}", "source": dialogue.source,
                      "corpus": corpus or dialogue.source,
                      "dialogue_id": dialogue.id, "conversation_id": dialogue.metadata.get("conversation_id", dialogue.id),
                      "persona": persona, "context": context_window(turns[: k - 1], budget, count),
                      "reply": turns[k - 1].content, "rating": rating, "words": len(turns[k - 1].content.split()),
                      **({"heldout": dialogue.metadata["heldout"]} if "heldout" in dialogue.metadata else {})})
    return items


def build_human_set(dialogues: list[Dialogue], budget: int, count: CountTokens, persona: str,
                    corpus: str | None = None) -> list[dict]:
    """The rated items of `dialogues` (one corpus: `corpus` names it in the counts; default: each one's source)."""
    return [item for d in dialogues if d.source != "qmsum" for item in rated_items(d, budget, count, persona, corpus)]


def human_pairs(items: list[dict], min_gap: int) -> list[tuple[dict, dict]]:
    """(preferred, other) items of one conversation whose ratings differ by at least `min_gap`."""
    by_conv: dict[str, list[dict]] = {}
    for item in items:
        by_conv.setdefault(item["conversation_id"], []).append(item)
    out = []
    for conv in sorted(by_conv):
        for a, b in combinations(by_conv[conv], 2):
            if abs(a["rating"] - b["rating"]) >= min_gap:
                out.append((a, b) if a["rating"] > b["rating"] else (b, a))
    return out


def select_items(items: list[dict], min_gap: int, limit: int | None, first: set[str] = frozenset()) -> list[dict]:
    """At most `limit` items, whole conversations at a time, only from conversations with at least one pair
    (an item of no pair counts for nothing in the main measure); conversations in `first` (e.g. the held-out
    ones, where reward models are measured too) come first, then the others, each in id order."""
    paired = {hi["conversation_id"] for hi, _ in human_pairs(items, min_gap)}
    by_conv: dict[str, list[dict]] = {}
    for item in items:
        if item["conversation_id"] in paired:
            by_conv.setdefault(item["conversation_id"], []).append(item)
    out: list[dict] = []
    for conv in sorted(by_conv, key=lambda c: (c not in first, c)):
        if limit is not None and out and len(out) + len(by_conv[conv]) > limit:
            break
        out.extend(by_conv[conv])
    return out


def counts(items: list[dict], min_gap: int, min_n: int = DEFAULT_MIN_N) -> dict:
    """What the set holds, in all and by corpus: items, pairs, conversations, and the length baseline on its pairs."""
    out: dict = {"min_gap": min_gap, "by_source": {}}
    for source in sorted({i.get("corpus", i["source"]) for i in items}) + [None]:
        mine = [i for i in items if source is None or i.get("corpus", i["source"]) == source]
        pairs = human_pairs(mine, min_gap)
        fig = {"items": len(mine), "conversations": len({i["conversation_id"] for i in mine}),
               "pairs": len(pairs), "pair_conversations": len({hi["conversation_id"] for hi, _ in pairs}),
               "ratings": dict(sorted(Counter(i["rating"] for i in mine).items())),
               "length_baseline": agreement(mine, {i["item_id"]: float(i["words"]) for i in mine}, min_gap,
                                            min_n=min_n)["pairs"],
               "length_spearman": cluster_spearman_with_ci([i["words"] for i in mine], [i["rating"] for i in mine],
                                                          [i["conversation_id"] for i in mine], min_n=min_n)}
        if source is None:
            out.update(fig)
        else:
            out["by_source"][source] = fig
    return out


def _wins_figure(wins: list[float], convs: list[str], min_n: int) -> dict:
    fig = cluster_mean_with_ci(wins, convs, null=0.5, min_n=min_n)
    fig["ties"] = sum(w == 0.5 for w in wins)
    return fig


def _score_wins(pairs: list[tuple[dict, dict]], score: dict[str, float]) -> list[float]:
    return pairwise_wins([score[hi["item_id"]] for hi, _ in pairs], [score[lo["item_id"]] for _, lo in pairs])


def _pair_figure(pairs: list[tuple[dict, dict]], score: dict[str, float], min_n: int) -> dict:
    return _wins_figure(_score_wins(pairs, score), [hi["conversation_id"] for hi, _ in pairs], min_n)


def wins_agreement(pairs: list[tuple[dict, dict]], wins: list[float], min_n: int = DEFAULT_MIN_N) -> dict:
    """The agreement of per-pair wins (1: the preferred turn won, 0: lost, 0.5: a tie), however they were judged
    (scores compared, or the two turns side by side): `pairs`, `controlled` (the pairs whose preferred turn is not
    longer) and `equal_length` (each win regressed on the preferred turn's extra words, the intercept with its
    interval over conversations, and the length-matched pairs' agreement)."""
    convs = [hi["conversation_id"] for hi, _ in pairs]
    kept = [k for k, (hi, lo) in enumerate(pairs) if hi["words"] <= lo["words"]]
    return {"pairs": _wins_figure(wins, convs, min_n),
            "controlled": _wins_figure([wins[k] for k in kept], [convs[k] for k in kept], min_n),
            "equal_length": equal_length_accuracy(wins, [hi["words"] - lo["words"] for hi, lo in pairs], convs,
                                                  [(hi["words"], lo["words"]) for hi, lo in pairs], min_n)}


def paired_difference(items: list[dict], score_a: dict[str, float], score_b: dict[str, float], min_gap: int,
                      min_n: int = DEFAULT_MIN_N) -> dict:
    """Two scorers (two rubrics of one judge, say) on the same human pairs: each pair's win under `score_b` minus
    its win under `score_a`, `raw` (mean, interval over conversations, n) and `equal_length` (regressed on the
    preferred turn's extra words). Only items both scored."""
    scored = [i for i in items if score_a.get(i["item_id"]) is not None and score_b.get(i["item_id"]) is not None]
    pairs = human_pairs(scored, min_gap)
    diffs = [b - a for a, b in zip(_score_wins(pairs, score_a), _score_wins(pairs, score_b))]
    convs = [hi["conversation_id"] for hi, _ in pairs]
    return {"raw": cluster_mean_with_ci(diffs, convs, null=0.0, min_n=min_n),
            "equal_length": equal_length_difference(diffs, [hi["words"] - lo["words"] for hi, lo in pairs], convs,
                                                    [(hi["words"], lo["words"]) for hi, lo in pairs], min_n=min_n)}


def agreement(items: list[dict], score: dict[str, float], min_gap: int, by_dimension: dict[str, dict] | None = None,
              min_n: int = DEFAULT_MIN_N) -> dict:
    """How far a scorer (`score`: item id -> score; items without one are left out) agrees with people:
    `pairs` (the preferred turn scored higher), `length_baseline` on the same pairs, `controlled` and
    `length_baseline_controlled` on the pairs where the preferred turn is not longer, `equal_length` (every pair,
    the win regressed on the word difference: the agreement where the two turns are as long), `spearman` of score and
    rating over the items; `by_dimension` (dimension -> item id -> score) adds each dimension's pairs and
    Spearman."""
    scored = [i for i in items if score.get(i["item_id"]) is not None]
    pairs = human_pairs(scored, min_gap)
    controlled = [(hi, lo) for hi, lo in pairs if hi["words"] <= lo["words"]]
    words = {i["item_id"]: float(i["words"]) for i in scored}
    convs = [i["conversation_id"] for i in scored]
    judged = wins_agreement(pairs, _score_wins(pairs, score), min_n)
    out = {"items": len(scored), "pairs": judged["pairs"],
           "length_baseline": _pair_figure(pairs, words, min_n),
           "controlled": judged["controlled"],
           "length_baseline_controlled": _pair_figure(controlled, words, min_n),
           "equal_length": judged["equal_length"],
           "spearman": cluster_spearman_with_ci([score[i["item_id"]] for i in scored], [i["rating"] for i in scored],
                                               convs, min_n=min_n)}
    if by_dimension:
        out["by_dimension"] = {
            d: {"pairs": _pair_figure(pairs, dim_score, min_n)["mean"],
                "spearman": cluster_spearman_with_ci([dim_score[i["item_id"]] for i in scored],
                                                     [i["rating"] for i in scored], convs, min_n=min_n)["mean"]}
            for d, dim_score in by_dimension.items()}
    return out


def as_candidates(items: list[dict]) -> tuple[list[dict], dict[str, dict]]:
    """The items as candidate and query records, so that a judge scores them with the code that scores candidates."""
    candidates = [{"candidate_id": i["item_id"], "query_id": i["item_id"], "persona": i["persona"], "text": i["reply"],
                   "candidate_index": 0} for i in items]
    return candidates, {i["item_id"]: {"query_id": i["item_id"], "context": i["context"], "source": i["source"]}
                        for i in items}


def scores_by_item(items: list[dict], records: list[dict], dimensions) -> tuple[dict[str, float], dict[str, dict]]:
    """(item id -> total, dimension -> item id -> score) of the scored records (one per item, in order)."""
    total = {i["item_id"]: r["total_reward"] for i, r in zip(items, records) if r["status"] == "scored"}
    dims = {d: {i["item_id"]: r["scores"][d] for i, r in zip(items, records) if r["status"] == "scored"}
            for d in dimensions}
    return total, dims


def describe_agreement(fig: dict, min_n: int = DEFAULT_MIN_N) -> str:
    """One line: the pair accuracy with its n, the length baseline, and the length-controlled figure."""
    p, base, c = fig["pairs"], fig["length_baseline"], fig["controlled"]
    few = f" ({TOO_FEW}: n < {min_n})" if p["too_few_to_tell"] else ""
    return (f"human pairs {p['mean']} [{p['ci_low']}, {p['ci_high']}]{few} on {p['n']} pairs of {p['clusters']} "
            f"conversations (longer turn wins: {base['mean']}); where the preferred turn is not longer "
            f"{c['mean']} [{c['ci_low']}, {c['ci_high']}] on {c['n']} (longer wins: {fig['length_baseline_controlled']['mean']}); "
            f"at equal length {describe_equal_length(fig['equal_length'], min_n)}")


