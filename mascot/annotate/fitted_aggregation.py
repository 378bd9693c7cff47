"""The judge's dimensions combined as people weigh them: weights learned from the seekers' pairs on half the
conversations and measured on the other half (never on the same), then the halves swapped, so that every pair
is scored by weights fitted without its conversation.

The fit is a logistic regression without intercept on each pair's dimension differences (preferred minus other,
and the mirror image as the other class): P(preferred) = sigmoid(w . (d_hi - d_lo)), scikit-learn's
LogisticRegression with its default L2 penalty, which keeps five correlated dimensions' weights finite.
"""
from __future__ import annotations

import random

from mascot.data.human_ratings import human_pairs


def conversation_halves(items: list[dict], seed: int = 0) -> tuple[set[str], set[str]]:
    convs = sorted({i["conversation_id"] for i in items})
    random.Random(seed).shuffle(convs)
    return set(convs[: len(convs) // 2]), set(convs[len(convs) // 2:])


def fit_weights(items: list[dict], by_dimension: dict[str, dict[str, float]], min_gap: int) -> dict[str, float]:
    """Each dimension's weight, fitted on the human pairs of `items` (every dimension scored on both sides)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    dims = sorted(by_dimension)
    pairs = [(hi, lo) for hi, lo in human_pairs(items, min_gap)
             if all(by_dimension[d].get(x["item_id"]) is not None for d in dims for x in (hi, lo))]
    if len(pairs) < 2:
        raise ValueError(f"{len(pairs)} scored human pairs: too few to fit the dimensions' weights")
    diffs = np.array([[by_dimension[d][hi["item_id"]] - by_dimension[d][lo["item_id"]] for d in dims]
                      for hi, lo in pairs])
    x, y = np.vstack([diffs, -diffs]), np.array([1] * len(pairs) + [0] * len(pairs))
    model = LogisticRegression(fit_intercept=False).fit(x, y)
    return {d: round(float(w), 4) for d, w in zip(dims, model.coef_[0])}


def cross_fitted_scores(items: list[dict], by_dimension: dict[str, dict[str, float]], min_gap: int,
                        seed: int = 0) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Each item's weighted total under the weights fitted on the other half of the conversations, and the two
    halves' weights (fitted on the first half, then on the second)."""
    halves = conversation_halves(items, seed)
    scores, weights = {}, []
    for fit_on, score_on in (halves, halves[::-1]):
        w = fit_weights([i for i in items if i["conversation_id"] in fit_on], by_dimension, min_gap)
        weights.append(w)
        for i in items:
            if i["conversation_id"] in score_on and all(by_dimension[d].get(i["item_id"]) is not None for d in w):
                scores[i["item_id"]] = sum(w[d] * by_dimension[d][i["item_id"]] for d in w)
    return scores, weights
