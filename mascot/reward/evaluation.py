"""Reward-model evaluation on preference pairs: accuracy, margins, accuracy per score-gap bucket."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

import numpy as np

from mascot.config import Params
from mascot.annotate.survey import flat_survey_figures, survey_figures
from mascot.data.human_ratings import agreement, human_pairs
from mascot.granularity import persona_fields
from mascot.io import load_jsonl
from mascot.pairs import chosen_longer, side_words
from mascot.reward.prompt import reward_input_ids
from mascot.splits import role_of
from mascot.stats import (DEFAULT_MIN_N, TOO_FEW, cluster_mean_with_ci, equal_length_accuracy, equal_length_figures,
                          mean_with_ci, pairwise_wins)

GAP_BUCKETS = [(0.0, 0.25), (0.25, 0.5), (0.5, 1.0), (1.0, 5.0)]


def bucket_name(lo: float, hi: float) -> str:
    return f"gap_{lo:g}_{hi:g}"


def pair_metrics(pairs: list[dict], chosen_scores: list[float], rejected_scores: list[float],
                 min_n: int = DEFAULT_MIN_N) -> dict:
    """Strict accuracy (r_chosen > r_rejected), mean margin, and accuracy within each judge-gap bucket."""
    if not pairs:
        return {"pairs": 0, "accuracy": None, "mean_margin": None}

    correct = [c > r for c, r in zip(chosen_scores, rejected_scores)]
    # The pairs of one query share candidates (all pairs of its replies), and a conversation's queries share its
    # context: they are not independent draws. The interval resamples conversations; one over pairs was about
    # half as wide as the spread of a random scorer's accuracy on the same pairs (docs/controls.md).
    clusters = [str(p.get("conversation_id") or p.get("query_id") or f"pair {i}") for i, p in enumerate(pairs)]
    # (a sign test over pairs would assume them independent too: the chance figure below replaces it)
    fig = cluster_mean_with_ci([float(x) for x in correct], clusters, null=None, min_n=min_n)
    out = {"pairs": len(pairs), "accuracy": round(fmean(correct), 4), "accuracy_ci_low": fig["ci_low"],
           "accuracy_ci_high": fig["ci_high"],
           "accuracy_too_few_to_tell": fig["too_few_to_tell"],
           "accuracy_null_p": random_scorer_p(pairs, fmean(correct)),
           "conversations": len(set(clusters)),
           "mean_margin": round(fmean(c - r for c, r in zip(chosen_scores, rejected_scores)), 4)}
    # The shortcut a reward model may have learned instead of the rubric: "the longer reply wins" (a tie in
    # length is a coin flip). The model's accuracy where the chosen reply is NOT the longer one says
    # whether it learned anything else.
    longer = [chosen_longer(p) for p in pairs]
    out["length_baseline_accuracy"] = round(fmean(0.5 if x is None else float(x) for x in longer), 4)
    not_longer = [ok for ok, x in zip(correct, longer) if x is not True]
    out["not_longer_pairs"] = len(not_longer)
    out["accuracy_not_longer"] = round(fmean(not_longer), 4) if not_longer else None
    # every pair at equal length: the win regressed on the chosen side's extra words (intercept, over conversations)
    if all(p.get("chosen") and p.get("rejected") for p in pairs):
        words = [(side_words(p["chosen"]), side_words(p["rejected"])) for p in pairs]
        out.update(equal_length_figures(equal_length_accuracy(
            pairwise_wins(chosen_scores, rejected_scores), [c - r for c, r in words], clusters, words, min_n),
            "accuracy_equal_length"))
        # the model's taste for length: Pearson of its score with words over the eval replies (each once)
        by_reply = {}
        for i, (p, w, c, r) in enumerate(zip(pairs, words, chosen_scores, rejected_scores)):
            by_reply[p.get("chosen_id", f"pair {i} chosen")] = (c, w[0])
            by_reply[p.get("rejected_id", f"pair {i} rejected")] = (r, w[1])
        scores, lengths = np.array(list(by_reply.values()), dtype=float).T
        out["score_length_pearson"] = (round(float(np.corrcoef(scores, lengths)[0, 1]), 4)
                                       if len(by_reply) >= 3 and scores.std() > 0 and lengths.std() > 0 else None)
    for lo, hi in GAP_BUCKETS:
        idx = [i for i, p in enumerate(pairs) if lo <= p["margin"] < hi]
        out[f"{bucket_name(lo, hi)}_pairs"] = len(idx)
        out[f"{bucket_name(lo, hi)}_accuracy"] = round(fmean(correct[i] for i in idx), 4) if idx else None
    return out


def random_scorer_p(pairs: list[dict], accuracy: float, draws: int = 2000, seed: int = 0) -> float | None:
    """How often a scorer that learned nothing (a random score per reply, the same reply the same score) is at
    least as far from 0.5 on these very pairs: the chance level of this pair set, shared replies and all."""
    ids = [(str(p.get("chosen_id", f"pair {i} chosen")), str(p.get("rejected_id", f"pair {i} rejected")))
           for i, p in enumerate(pairs)]
    if not ids:
        return None
    index = {x: k for k, x in enumerate(sorted({x for pair in ids for x in pair}))}
    chosen, rejected = (np.array([index[pair[k]] for pair in ids]) for k in (0, 1))
    scores = np.random.default_rng(seed).random((draws, len(index)))
    acc = (scores[:, chosen] > scores[:, rejected]).mean(axis=1)
    return round(float(np.mean(np.abs(acc - 0.5) >= abs(accuracy - 0.5) - 1e-12)), 4)


def reference_set_metrics(scorer, items: list[dict], personas: dict, min_n: int = DEFAULT_MIN_N,
                          survey_min_gap: float = 2) -> dict:
    """The reward model on its judge's reference set (judge_check, judge_check_group): does it rank the human
    reply or block above the worse variants, as a judge should? Accuracy with bootstrap 95% intervals and n. For
    blocks, also against the seekers' survey of each conversation (`reference_survey_*`: mascot/annotate/survey.py),
    as the collective judge is held to it."""
    g = scorer.granularity
    rows, too_long = [], 0
    for i in items:
        for variant, (persona, context, side) in g.reference_sides(i, personas):
            if variant == "reference_padded":
                continue
            try:
                rows.append((i, variant, reward_input_ids(scorer.tokenizer, g, persona, context, side, scorer.max_length)[0]))
            except ValueError:  # longer than the model's max_length even without context: not measured, counted
                too_long += 1
    scores = scorer.score_ids([ids for *_, ids in rows])
    by_item: dict[str, dict[str, float]] = {}
    for (i, t, _), s in zip(rows, scores):
        by_item.setdefault(i["item_id"], {"kind": i["kind"]})[t] = s
    out = {"reference_too_long": too_long}
    for name, better, worse, kind in g.judge_comparisons:  # the judge's own comparisons, on the reward model
        both = [r for r in by_item.values() if r["kind"] == kind and better in r and worse in r]
        fig = mean_with_ci(pairwise_wins([r[better] for r in both], [r[worse] for r in both]), null=0.5, min_n=min_n)
        out.update({f"reference_{name}": fig["mean"], f"reference_{name}_ci_low": fig["ci_low"],
                    f"reference_{name}_ci_high": fig["ci_high"], f"reference_{name}_n": fig["n"]})
    if g.survey_ratings:
        human = [(i.get("survey") or {}, i.get("conversation_id", i["item_id"]), s)
                 for (i, variant, _), s in zip(rows, scores) if variant == "reference"]
        out.update(flat_survey_figures(survey_figures(human, survey_min_gap, min_n), "reference_survey"))
    return out


@dataclass(frozen=True)
class HumanCheck:
    """The rated supporter turns of conversations no reward model trained on (`untrained_human`), the rating gap a
    pair needs, and the judge's totals on those items (judge_check's chosen format) to set beside the model's;
    below `min_n` pairs a figure is "too few to tell"."""
    items: list[dict]
    min_gap: int = 2
    judge_scores: dict[str, float] = field(default_factory=dict)
    min_n: int = DEFAULT_MIN_N


def untrained_items(items: list[dict], heldout, pairs_block) -> list[dict]:
    """The rated turns of conversations no reward model trains on: the held-out ones, and the pairs' eval split
    (`pairs.eval_fraction`, by conversation: its judge pairs measure the model, and `pairs.human` trains on the
    train split's seekers' pairs only; mascot/splits.py)."""
    return [i for i in items
            if role_of(i, heldout, pairs_block.eval_fraction, pairs_block.split_seed) in ("heldout", "eval")]


def untrained_human(params: Params, items_path: str, judge_path: str | None) -> HumanCheck | None:
    """The rated supporter turns of conversations no reward model trained on (`untrained_items`), with the judge's
    totals on them in judge_check's chosen format; None without a human set."""
    if not Path(items_path).exists():
        return None
    items = untrained_items(load_jsonl(items_path), params.heldout, params.pairs)
    judge = ({r["candidate_id"]: r["total_reward"] for r in load_jsonl(judge_path)
              if r.get("chosen") and r["status"] == "scored"} if judge_path and Path(judge_path).exists() else {})
    return HumanCheck(items, params.human.min_gap, judge, params.stats.min_n)


def human_item_scores(scorer, human: HumanCheck, personas: dict) -> dict[str, float]:
    """The reward model's score of each rated turn, read after its own context (item id -> score)."""
    scores = scorer.score([(persona_fields(personas[i["persona"]]), i["context"], i["reply"]) for i in human.items])
    return dict(zip((i["item_id"] for i in human.items), scores))


def human_gate_pairs(human: HumanCheck, rm: dict[str, float]) -> tuple[list[dict], list[float], list[float]]:
    """The seekers' pairs as eval pairs of the promotion gate (`pair_metrics`' fields: conversation, ids, the two
    replies, the rating gap as margin) with the reward model's scores of each side."""
    rows, chosen, rejected = [], [], []
    for hi, lo in human_pairs(human.items, human.min_gap):
        rows.append({"pair_id": f"{hi['item_id']}>{lo['item_id']}", "pair_source": "human",
                     "conversation_id": hi["conversation_id"], "chosen_id": hi["item_id"], "rejected_id": lo["item_id"],
                     "chosen": [{"role": "assistant", "content": hi["reply"]}],
                     "rejected": [{"role": "assistant", "content": lo["reply"]}],
                     "margin": float(hi["rating"] - lo["rating"])})
        chosen.append(rm[hi["item_id"]])
        rejected.append(rm[lo["item_id"]])
    return rows, chosen, rejected


def human_set_metrics(scorer, human: HumanCheck, personas: dict, rm: dict[str, float] | None = None) -> dict:
    """The reward model against people: on the seekers' pairs of conversations it never trained on, how often it
    scores the higher-rated turn higher [interval over conversations], beside "the longer turn wins",
    length-controlled, and beside the judge on the pairs the judge also scored. Flat `human_*` figures. `rm`: its
    scores of the items where already computed (`human_item_scores`)."""
    if not human.items:
        return {"human_pairs_n": 0}
    rm = rm if rm is not None else human_item_scores(scorer, human, personas)
    fig = agreement(human.items, rm, human.min_gap, min_n=human.min_n)
    out = {"human_items": fig["items"], "human_pairs_conversations": fig["pairs"]["clusters"]}
    for key, name in (("pairs", "human_pairs"), ("length_baseline", "human_length_baseline"),
                      ("controlled", "human_pairs_controlled"), ("spearman", "human_spearman")):
        f = fig[key]
        out.update({name: f["mean"], f"{name}_ci_low": f["ci_low"], f"{name}_ci_high": f["ci_high"], f"{name}_n": f["n"]})
    out.update(equal_length_figures(fig["equal_length"], "human_pairs_equal_length"))
    judged = [i for i in human.items if human.judge_scores.get(i["item_id"]) is not None]
    if judged:
        same_rm = agreement(judged, rm, human.min_gap, min_n=human.min_n)
        same_judge = agreement(judged, human.judge_scores, human.min_gap, min_n=human.min_n)
        out.update(human_pairs_judged=same_rm["pairs"]["mean"], human_judge_pairs=same_judge["pairs"]["mean"],
                   human_judge_pairs_ci_low=same_judge["pairs"]["ci_low"],
                   human_judge_pairs_ci_high=same_judge["pairs"]["ci_high"], human_judge_pairs_n=same_judge["pairs"]["n"])
    return out


def describe_human(m: dict, prefix: str = "", min_n: int = DEFAULT_MIN_N) -> str:
    """The reward model's agreement with people in words, from `human_set_metrics`' figures."""
    if not m.get(f"{prefix}human_pairs_n"):
        return "human pairs: none untrained (no rated conversation held out or in the eval split)"
    few = f" ({TOO_FEW}: n < {min_n})" if m[f"{prefix}human_pairs_n"] < min_n else ""
    text = (f"human pairs {m[prefix + 'human_pairs']} [{m[prefix + 'human_pairs_ci_low']}, {m[prefix + 'human_pairs_ci_high']}]"
            f"{few} on {m[prefix + 'human_pairs_n']} untrained pairs of {m[prefix + 'human_pairs_conversations']} conversations "
            f"(longer turn wins {m[prefix + 'human_length_baseline']}; not longer {m[prefix + 'human_pairs_controlled']} "
            f"on {m[prefix + 'human_pairs_controlled_n']}; at equal length {m.get(prefix + 'human_pairs_equal_length')} "
            f"[{m.get(prefix + 'human_pairs_equal_length_ci_low')}, {m.get(prefix + 'human_pairs_equal_length_ci_high')}]"
            f"{', extrapolated' if m.get(prefix + 'human_pairs_equal_length_extrapolated') else ''}; length-matched "
            f"{m.get(prefix + 'human_pairs_equal_length_matched')} on {m.get(prefix + 'human_pairs_equal_length_matched_n')})")
    if m.get(prefix + "human_judge_pairs_n"):
        text += (f"; the judge on the {m[prefix + 'human_judge_pairs_n']} of them it scored: {m[prefix + 'human_judge_pairs']}"
                 f", the reward model {m[prefix + 'human_pairs_judged']}")
    return text


def plot_distributions(chosen: list[float], rejected: list[float], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = 20
    ax.hist(chosen, bins=bins, alpha=0.6, label=f"chosen (n={len(chosen)})")
    ax.hist(rejected, bins=bins, alpha=0.6, label=f"rejected (n={len(rejected)})")
    ax.set_xlabel("reward-model score")
    ax.set_ylabel("pairs")
    ax.set_title("Reward distributions on eval pairs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
