"""Small statistics the pipeline reports with its figures: pairwise accuracy, bootstrap intervals, rank
correlation. Percentile bootstrap over items (numpy), Spearman from scipy."""
from __future__ import annotations

import numpy as np

# below this many items an interval only says whether every item went the same way: a comparison then reports
# the exact sign test's p-value and the words "too few to tell". The default of params' stats.min_n: stage code
# passes its params' value as `min_n` (nothing here is set at start-up)
DEFAULT_MIN_N = 10
TOO_FEW = "too few to tell"


def pairwise_wins(better: list[float], worse: list[float]) -> list[float]:
    """Per item: 1 if the first score is higher, 0 if lower, 0.5 on a tie (a tie is no preference)."""
    return [1.0 if b > w else 0.0 if b < w else 0.5 for b, w in zip(better, worse)]


def bootstrap_ci(values: list[float], level: float = 0.95, rounds: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of `values` (resampling items)."""
    if len(values) < 2:
        return None
    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, len(arr), size=(rounds, len(arr)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return round(float(lo), 4), round(float(hi), 4)


def sign_test_p(values: list[float], null: float = 0.0) -> float | None:
    """Exact two-sided sign test of `values` against `null` (values equal to it are dropped): the chance of
    signs at least this lopsided if each item were a coin toss."""
    from scipy.stats import binomtest

    above, below = sum(v > null for v in values), sum(v < null for v in values)
    if above + below == 0:
        return None
    return round(float(binomtest(above, above + below, 0.5).pvalue), 4)


def mean_with_ci(values: list[float], seed: int = 0, null: float | None = 0.0, min_n: int = DEFAULT_MIN_N) -> dict:
    """{mean, ci_low, ci_high, n, p_sign, too_few_to_tell}: the figure, its 95% bootstrap interval, how many items
    it rests on, and the exact sign test against `null` (0 for differences, 0.5 for win rates; None: no test)."""
    ci = bootstrap_ci(values, seed=seed)
    return {"mean": round(float(np.mean(values)), 4) if values else None,
            "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None, "n": len(values),
            "p_sign": sign_test_p(values, null) if null is not None else None,
            "too_few_to_tell": len(values) < min_n}


def describe(fig: dict, min_n: int = DEFAULT_MIN_N) -> str:
    """A comparison as one reads it: `mean [low, high] n=N`, and below stats.min_n the sign test's p-value and
    "too few to tell" instead of a verdict."""
    text = f"{fig['mean']} [{fig['ci_low']}, {fig['ci_high']}] n={fig['n']}"
    if fig.get("too_few_to_tell"):
        text += f" (sign test p={fig.get('p_sign')}; {TOO_FEW}: n < {min_n})"
    elif fig.get("ci_low") is not None and fig.get("p_sign") is not None:
        text += f" (sign test p={fig['p_sign']})"
    return text


def spearman(x: list[float], y: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return round(float(spearmanr(x, y).statistic), 4)


def correlation_matrix(columns: dict[str, list[float]]) -> dict[str, dict[str, float | None]]:
    names = list(columns)
    arr = np.asarray([columns[n] for n in names], dtype=float)
    out: dict[str, dict[str, float | None]] = {}
    for i, a in enumerate(names):
        out[a] = {}
        for j, b in enumerate(names):
            if arr.shape[1] < 3 or arr[i].std() == 0 or arr[j].std() == 0:
                out[a][b] = None
            else:
                out[a][b] = round(float(np.corrcoef(arr[i], arr[j])[0, 1]), 4)
    return out


def first_component_share(columns: dict[str, list[float]]) -> float | None:
    """Share of the variance the first principal component of the standardized columns explains: near 1.0
    means the columns are one signal under several names."""
    arr = np.asarray(list(columns.values()), dtype=float)
    if arr.shape[1] < 3:
        return None
    std = arr.std(axis=1, keepdims=True)
    keep = std[:, 0] > 0
    if keep.sum() < 2:
        return None
    z = (arr[keep] - arr[keep].mean(axis=1, keepdims=True)) / std[keep]
    eig = np.linalg.eigvalsh(np.corrcoef(z))
    return round(float(eig[-1] / eig.sum()), 4)


def cluster_mean_with_ci(values: list[float], clusters: list[str], seed: int = 0, null: float | None = 0.0,
                         rounds: int = 2000, min_n: int = DEFAULT_MIN_N) -> dict:
    """`mean_with_ci` for items that come in clusters (the pairs of one conversation share a person and a mood):
    the percentile bootstrap resamples clusters, not items; `clusters` says how many there are."""
    out = mean_with_ci(values, seed, null, min_n)
    names = sorted(set(clusters))
    out["clusters"] = len(names)
    if len(names) < 2:
        out["ci_low"] = out["ci_high"] = None
        return out
    index = {c: k for k, c in enumerate(names)}
    sums, sizes = np.zeros(len(names)), np.zeros(len(names))
    for v, c in zip(values, clusters):
        sums[index[c]] += v
        sizes[index[c]] += 1
    draw = np.random.default_rng(seed).integers(0, len(names), size=(rounds, len(names)))
    means = sums[draw].sum(axis=1) / sizes[draw].sum(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    out["ci_low"], out["ci_high"] = round(float(lo), 4), round(float(hi), 4)
    return out


def cluster_spearman_with_ci(x: list[float], y: list[float], clusters: list[str], seed: int = 0,
                             rounds: int = 1000, min_n: int = DEFAULT_MIN_N) -> dict:
    """{mean, ci_low, ci_high, n, clusters}: Spearman's rho of x and y, its interval from a bootstrap over
    clusters (replicates where a side is constant are skipped)."""
    from scipy.stats import spearmanr

    names = sorted(set(clusters))
    out = {"mean": spearman(x, y), "ci_low": None, "ci_high": None, "n": len(x), "clusters": len(names),
           "too_few_to_tell": len(x) < min_n}
    if out["mean"] is None or len(names) < 2:
        return out
    members: dict[str, list[int]] = {}
    for k, c in enumerate(clusters):
        members.setdefault(c, []).append(k)
    groups = [np.asarray(members[c]) for c in names]
    xa, ya, rng, rhos = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.random.default_rng(seed), []
    for _ in range(rounds):
        idx = np.concatenate([groups[k] for k in rng.integers(0, len(groups), size=len(groups))])
        if np.ptp(xa[idx]) > 0 and np.ptp(ya[idx]) > 0:
            rhos.append(spearmanr(xa[idx], ya[idx]).statistic)
    if rhos:
        lo, hi = np.quantile(rhos, [0.025, 0.975])
        out["ci_low"], out["ci_high"] = round(float(lo), 4), round(float(hi), 4)
    return out


def conversation_pairs_agreement(scores: list[float], ratings: list[float], clusters: list[str], min_gap: float,
                                 seed: int = 0, rounds: int = 1000, min_n: int = DEFAULT_MIN_N) -> dict:
    """Of two items (one per conversation) whose ratings differ by at least `min_gap`, how often the better-rated
    one is scored higher (a tie 0.5): {mean, ci_low, ci_high, n pairs, clusters}. The interval resamples
    conversations and takes every pair among the drawn ones (a conversation drawn twice pairs with itself never):
    each conversation sits in many pairs, so pairs are not the unit of resampling."""
    s, r = np.asarray(scores, dtype=float), np.asarray(ratings, dtype=float)
    n = len(s)
    gap = r[:, None] - r[None, :]
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    paired = upper & (np.abs(gap) >= min_gap)
    win = np.where(np.sign(s[:, None] - s[None, :]) == np.sign(gap), 1.0,
                   np.where(s[:, None] == s[None, :], 0.5, 0.0))
    count = int(paired.sum())
    out = {"mean": round(float(win[paired].mean()), 4) if count else None, "ci_low": None, "ci_high": None,
           "n": count, "clusters": len(set(clusters)), "too_few_to_tell": count < min_n}
    if count < 2:
        return out
    rng, means = np.random.default_rng(seed), []
    for _ in range(rounds):
        draw = rng.integers(0, n, size=n)
        sub = paired[np.ix_(draw, draw)] & (draw[:, None] != draw[None, :])
        if sub.any():
            means.append(float(win[np.ix_(draw, draw)][sub].mean()))
    if means:
        lo, hi = np.quantile(means, [0.025, 0.975])
        out["ci_low"], out["ci_high"] = round(float(lo), 4), round(float(hi), 4)
    return out


# A paired difference at equal length (AlpacaEval 2's length control, Dubois et al. 2024, made paired for small n):
# regress each item's difference on its length difference and read the intercept. Below this share of items on
# the far side of equal length (or at it) the intercept is a line drawn past the data: said, not hidden.
MIN_LENGTH_OVERLAP = 0.1
# the length-matched subset: items whose two sides differ by at most this share of the longer one
LENGTH_MATCH_WITHIN = 0.2


def _ols_intercepts(sums: np.ndarray) -> np.ndarray:
    """Intercepts of y on x from summed (n, Sx, Sy, Sxx, Sxy) rows; nan where x does not vary."""
    n, sx, sy, sxx, sxy = sums.T
    det = n * sxx - sx * sx
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(det > 1e-9 * np.maximum(n * sxx, 1.0), (sy * sxx - sx * sxy) / det, np.nan)


def equal_length_difference(diffs: list[float], length_diffs: list[float], clusters: list[str] | None = None,
                            lengths: list[tuple[float, float]] | None = None, unit: str = "words",
                            null: float = 0.0, seed: int = 0, rounds: int = 2000, min_n: int = DEFAULT_MIN_N,
                            min_overlap: float = MIN_LENGTH_OVERLAP, match_within: float = LENGTH_MATCH_WITHIN,
                            bounds: tuple[float, float] | None = None) -> dict:
    """A paired difference (or a win, 1/0/0.5) at equal length: the intercept of the per-item difference regressed
    on the per-item length difference (`unit`), its 95% percentile bootstrap interval over `clusters` (items
    resampled whole with their cluster: a conversation's items share a person and a mood), the slope (what one
    more `unit` is worth), n, and `overlap`, the share of items on the minority side of equal length (at it
    included): under `min_overlap` the intercept is `extrapolated`. Where the lengths do not vary it is the plain
    mean if they are all equal, else None. With `lengths` (each item's two lengths) also the length-matched
    subset: items whose lengths differ by at most `match_within` of the longer, its mean, interval and n.
    `bounds`: the range the figure lives in (an accuracy's [0, 1]); a straight line's intercept and its bootstrap
    replicates can leave it on a few pairs, so they are held to it and `held_to_bounds` says so."""
    y, x = np.asarray(diffs, dtype=float), np.asarray(length_diffs, dtype=float)
    clusters = list(clusters) if clusters is not None else [str(k) for k in range(len(y))]
    n = len(y)
    out: dict = {"mean": None, "ci_low": None, "ci_high": None, "n": n, "clusters": len(set(clusters)),
                 "slope": None, "overlap": None, "extrapolated": None, "unit": unit, "too_few_to_tell": n < min_n}
    if n:
        out["overlap"] = round(float(min(np.mean(x <= 0), np.mean(x >= 0))), 4)
        out["extrapolated"] = bool(out["overlap"] < min_overlap)
        rows = np.stack([np.ones(n), x, y, x * x, x * y], axis=1)
        if np.ptp(x) == 0:
            if x[0] == 0:  # every item already at equal length: the plain mean is the figure
                fig = cluster_mean_with_ci(list(y), clusters, seed, None, rounds, min_n)
                out.update({k: fig[k] for k in ("mean", "ci_low", "ci_high")}, extrapolated=False)
        else:
            point = _ols_intercepts(rows.sum(axis=0, keepdims=True))[0]
            out["mean"] = round(float(point), 4)
            sxx = float(((x - x.mean()) ** 2).sum())
            out["slope"] = round(float(((x - x.mean()) * (y - y.mean())).sum() / sxx), 6)
            names = sorted(set(clusters))
            if len(names) >= 2:
                index = {c: k for k, c in enumerate(names)}
                per = np.zeros((len(names), 5))
                np.add.at(per, [index[c] for c in clusters], rows)
                draws = np.random.default_rng(seed).integers(0, len(names), size=(rounds, len(names)))
                boot = _ols_intercepts(per[draws].sum(axis=1))
                boot = boot[~np.isnan(boot)]
                if len(boot) >= rounds // 2:  # most replicates had lengths that vary
                    lo, hi = np.quantile(boot, [0.025, 0.975])
                    out["ci_low"], out["ci_high"] = round(float(lo), 4), round(float(hi), 4)
        if bounds is not None:
            held = {k: min(max(out[k], bounds[0]), bounds[1]) for k in ("mean", "ci_low", "ci_high")
                    if out[k] is not None}
            out["held_to_bounds"] = any(held[k] != out[k] for k in held)
            out.update(held)
    if lengths is not None:
        keep = [k for k, (a, b) in enumerate(lengths) if abs(a - b) <= match_within * max(a, b, 1)]
        fig = cluster_mean_with_ci([float(y[k]) for k in keep], [clusters[k] for k in keep], null=null, min_n=min_n) \
            if keep else {"mean": None, "ci_low": None, "ci_high": None, "n": 0, "clusters": 0, "too_few_to_tell": True}
        out["matched"] = {**{k: fig[k] for k in ("mean", "ci_low", "ci_high", "n", "too_few_to_tell")},
                          "within": match_within}
    return out


def equal_length_accuracy(wins: list[float], length_diffs: list[float], clusters: list[str],
                          lengths: list[tuple[float, float]], min_n: int = DEFAULT_MIN_N) -> dict:
    """An accuracy (each pair's win 1/0/0.5) at equal length: equal_length_difference against chance 0.5, held to
    [0, 1] (a line's intercept on a few pairs can leave the range an accuracy lives in)."""
    return equal_length_difference(wins, length_diffs, clusters, lengths=lengths, null=0.5, min_n=min_n,
                                   bounds=(0.0, 1.0))


def equal_length_figures(fig: dict, name: str) -> dict:
    """An equal-length figure as flat keys for metrics files, MLflow and version tags: `name` (the intercept), its
    interval, n and extrapolation flag, the length-matched subset's mean and n, and (for a bounded figure) whether
    it was held to its bounds."""
    matched = fig.get("matched") or {}
    held = {f"{name}_held_to_bounds": fig["held_to_bounds"]} if "held_to_bounds" in fig else {}
    return {name: fig["mean"], f"{name}_ci_low": fig["ci_low"], f"{name}_ci_high": fig["ci_high"], f"{name}_n": fig["n"],
            f"{name}_extrapolated": fig["extrapolated"], f"{name}_matched": matched.get("mean"),
            f"{name}_matched_n": matched.get("n"), **held}


def describe_equal_length(fig: dict, min_n: int = DEFAULT_MIN_N) -> str:
    """An equal-length figure as one reads it: the intercept with interval and n, what a unit of length is worth,
    whether it is an extrapolation, and the length-matched subset."""
    if fig.get("mean") is None:
        text = f"none (every item differs in {fig.get('unit', 'words')} by the same amount: no line to read) n={fig['n']}"
    else:
        text = f"{fig['mean']} [{fig['ci_low']}, {fig['ci_high']}] n={fig['n']}"
    if fig.get("too_few_to_tell"):
        text += f" ({TOO_FEW}: n < {min_n})"
    if fig.get("slope") is not None:
        text += f", {fig['slope']:+.4g} a {fig['unit'].rstrip('s')}"
    if fig.get("held_to_bounds"):
        text += " (the line's intercept left the figure's range and is held to it: read it as its bound)"
    if fig.get("extrapolated"):
        text += (f"; EXTRAPOLATED: only {fig['overlap']:.0%} of items at or past equal length, "
                 "the line is drawn beyond the data")
    if "matched" in fig:
        m = fig["matched"]
        text += (f"; length-matched (within {m['within']:.0%}) {m['mean']} [{m['ci_low']}, {m['ci_high']}] n={m['n']}"
                 + (f" ({TOO_FEW})" if m["too_few_to_tell"] else ""))
    return text
