"""Per-problem statistics and the intervals built on them (numpy; the core never imports this).

Everything here works on per-problem values: a metric first reduces the table's (problem, repeat)
cells to one number per problem, then `summarize_mean` turns those into a `MetricValue`:

- CLT: stderr = sd(s_i, ddof=1) / sqrt(n); interval mean ± z_{1-α/2} · stderr ("clt").
- Clustered ("clustered", Miller 2024, arXiv 2411.00640) when the problems carry clusters and at
  least one cluster holds two or more of them: SE² = G/(G−1) · Σ_g (Σ_{i∈g} (s_i − s̄))² / n²,
  interval s̄ ± t_{G−1, 1−α/2} · SE. A problem without a cluster (-1) is its own cluster, so
  with no shared clusters the formula reduces exactly to the CLT one.
- Proportions (binary scores, pass@k), `--ci-method auto`: Wilson's score interval ("wilson", or
  "wilson-clustered") at Korn & Graubard's (1998) effective sample size n* = N / max(1, deff),
  deff the estimated variance (clustered or not) over that of N independent Bernoulli cells, and
  with clusters the degrees-of-freedom adjustment n* · (t_{n−1}/t_df)², df by Satterthwaite
  (`effective_trials`). Where fewer than 5 effective successes or failures remain, Wilson's
  coverage dips (Brown, Cai & DasGupta 2001): Clopper-Pearson ("clopper-pearson") at the same
  n*. At p̂ = 0 or 1 each problem counts once. Never zero width, never outside [0, 1].
- No spread: a normal interval of problems that all have the same value would be [c, c]; there is
  none (details.reason). A clustering whose SE is below the CLT one is not used for a normal
  interval unless `--ci-method clustered` asks for it (clustering widens, never narrows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from shardeval.api.metric import MetricOptions, MetricValue, ScoreTable
from shardeval_metrics.dist import clopper_pearson_interval, normal_ppf, t_ppf

SE_IF_REPEATS = (1, 2, 4, 8, 16, 32)
BATCH_ELEMENTS = 1 << 22  # bootstrap: index draws held at once (32 MiB of int64)


def view(arr: Any, dtype: Any, size: int, what: str) -> np.ndarray:
    """A numpy view of an `array.array` (no copy: numpy reads its buffer) or anything array-like, checked for length."""
    out = np.asarray(arr)
    if out.shape != (size,):
        raise ValueError(f"{what}: expected {size} values, got shape {out.shape}")
    return out.astype(dtype, copy=False)


def score_matrix(table: ScoreTable, key: str | None = None) -> np.ndarray:
    """The primary scores (or the named extra[key]) as a (n_problems, repeats) float64 matrix; NaN = no valid sample."""
    values = table.score if key is None else table.extra[key]
    return view(values, np.float64, table.n_cells, key or "score").reshape(table.n_problems, table.repeats)


def is_binary(x: np.ndarray) -> bool:
    """Whether every finite value (valid sample) of x is 0 or 1."""
    valid = x[np.isfinite(x)]
    return bool(np.all((valid == 0.0) | (valid == 1.0)))


def _first_rows(ids: list[str]) -> dict[str, int]:
    """Each id's first row, in order of first appearance (a repeated id counts once). An empty id
    is merge's placeholder for a problem no record reached: it matches nothing."""
    out: dict[str, int] = {}
    for i, pid in enumerate(ids):
        if pid:
            out.setdefault(pid, i)
    return out


def match_problems(a: ScoreTable, b: ScoreTable) -> tuple[np.ndarray, np.ndarray, int, int, str]:
    """Row indices (ia, ib) of the problems in both tables (A's order), n_only_a, n_only_b, how matched.

    By `problem_ids` when both tables carry them (a repeated id counts once), else by index up to
    the smaller count: a pairing never puts two different ids side by side.
    """
    if a.problem_ids is not None and b.problem_ids is not None:
        pos_a, pos_b = _first_rows(a.problem_ids), _first_rows(b.problem_ids)
        ia = np.asarray([i for pid, i in pos_a.items() if pid in pos_b], dtype=np.int64)
        ib = np.asarray([pos_b[pid] for pid in pos_a if pid in pos_b], dtype=np.int64)
        return ia, ib, len(pos_a) - ia.size, len(pos_b) - ib.size, "problem_ids"
    m = min(a.n_problems, b.n_problems)
    idx = np.arange(m, dtype=np.int64)
    return idx, idx, a.n_problems - m, b.n_problems - m, "index"


@dataclass
class ProblemStats:
    """One row per problem with at least one valid sample (in problem order)."""

    index: np.ndarray  # problem indices into the table
    means: np.ndarray  # s_i: mean of the valid samples
    counts: np.ndarray  # K_i: number of valid samples (>= 1)
    n_flagged: int  # problems with no valid sample
    n_samples: int  # valid cells in all
    n: int  # problems with a valid sample (index.size)


def per_problem(x: np.ndarray) -> ProblemStats:
    """Per-problem means over the finite cells of a (problems, repeats) matrix."""
    valid = np.isfinite(x)
    counts = valid.sum(axis=1)
    sums = np.where(valid, x, 0.0).sum(axis=1)
    keep = counts > 0
    index = np.flatnonzero(keep)
    return ProblemStats(
        index=index,
        means=sums[keep] / counts[keep],
        counts=counts[keep],
        n_flagged=int(x.shape[0] - index.size),
        n_samples=int(counts.sum()),
        n=int(index.size),
    )


def cluster_codes(table: ScoreTable, index: np.ndarray) -> np.ndarray | None:
    """Dense cluster codes 0..G-1 for the problems in `index`; None when there are no clusters.

    A problem whose cluster is unknown (-1) forms a cluster of its own.
    """
    if table.cluster is None:
        return None
    raw = view(table.cluster, np.int64, table.n_problems, "cluster")[index]
    unknown = raw < 0
    raw[unknown] = raw.max(initial=-1) + 1 + np.arange(int(unknown.sum()))
    return np.unique(raw, return_inverse=True)[1].reshape(-1)


def clustered_se(values: np.ndarray, codes: np.ndarray) -> tuple[float | None, int]:
    """Cluster-robust SE of the mean: sqrt(G/(G−1) · Σ_g (Σ_{i∈g}(s_i − s̄))² / n²), and G."""
    n = values.size
    n_groups = int(codes.max()) + 1 if n else 0
    if n_groups < 2:
        return None, n_groups
    resid = values - values.mean()
    sums = np.bincount(codes, weights=resid, minlength=n_groups)
    var = n_groups / (n_groups - 1) * float(np.dot(sums, sums)) / (n * n)
    return math.sqrt(var), n_groups


def effective_trials(
    p_hat: Any, se: Any, trials: Any, n: int, groups: int | None, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Korn & Graubard's (1998) effective sample size of a proportion, vectorised: (n*, deff).

    deff = se² / (p̂(1−p̂)/(N−1)), the estimated variance over that of N independent Bernoulli
    cells (N = `trials`; same ddof=1 convention, so single-sample unclustered data give exactly 1),
    clamped to >= 1: n* = N / max(1, deff). With clusters (`groups` = G; None when unclustered)
    Korn & Graubard's degrees-of-freedom adjustment n* · (t_{n−1} / t_df)², with df by
    Satterthwaite: the binomial part v = p̂(1−p̂)/(N−1) counts n−1 df, only the excess
    e = max(0, se² − v) that clustering adds comes from the G cluster sums (G−1 df):
    df = (v + e)² / (v²/(n−1) + e²/(G−1)), between G−1 and n−1. So two categories that do not
    differ cost nothing, and a real cluster effect widens the interval as far as it shows.
    At p̂ = 0 or 1 the variance is 0 and says nothing: deff is taken as 1 for the clusters (Korn &
    Graubard) and each problem counts once whatever its repeats (n* = n problems; deff NaN).
    """
    p, s, big_n = (np.asarray(v, dtype=np.float64) for v in (p_hat, se, trials))
    interior = (p > 0.0) & (p < 1.0)
    srs = p * (1.0 - p) / np.maximum(big_n - 1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        deff = np.where(interior & np.isfinite(s), s * s / srs, np.nan)
    n_eff = np.where(interior, big_n / np.where(np.isfinite(deff), np.maximum(deff, 1.0), 1.0), float(n))
    if groups is not None and n >= 2:
        # Satterthwaite: the binomial part of the variance has n−1 df, its excess over it G−1
        excess = np.maximum(0.0, s * s - srs)
        with np.errstate(divide="ignore", invalid="ignore"):
            df = (srs + excess) ** 2 / (srs * srs / (n - 1) + excess * excess / (groups - 1))
        df = np.where(interior & np.isfinite(df), np.clip(df, groups - 1, n - 1), n - 1)
        q = 0.5 + confidence / 2.0
        t_df = np.vectorize(lambda d: t_ppf(q, float(d)), otypes=[float])(df)
        n_eff = n_eff * (t_ppf(q, n - 1) / t_df) ** 2
    return n_eff, deff


def proportion_interval(p_hat: Any, n_eff: Any, confidence: float, method: str = "wilson") -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval (vectorised) or Clopper-Pearson's for p̂ at an effective size n*
    (real, from `effective_trials`): never zero-width, never outside [0, 1]."""
    p, m = np.asarray(p_hat, dtype=np.float64), np.asarray(n_eff, dtype=np.float64)
    if method == "clopper-pearson":
        if p.size == 1:  # one mean (a benchmark's): np.unique's sort costs more than the inversion
            low, high = clopper_pearson_interval(float(p.reshape(-1)[0]) * float(m.reshape(-1)[0]), float(m.reshape(-1)[0]), confidence)
            return np.full(p.shape, low), np.full(p.shape, high)
        # each distinct (p̂, n*) once: inverting the incomplete beta is the slow part
        pairs, inverse = np.unique(np.stack([p.reshape(-1), m.reshape(-1)], axis=1), axis=0, return_inverse=True)
        ends = np.array([clopper_pearson_interval(x * k, k, confidence) for x, k in pairs]).reshape(-1, 2)
        picked = ends[inverse.reshape(-1)]
        return picked[:, 0].reshape(p.shape), picked[:, 1].reshape(p.shape)
    z = normal_ppf(0.5 + confidence / 2.0)
    z2n = z * z / m
    center = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * np.sqrt(p * (1.0 - p) / m + z2n / (4.0 * m))
    # at p̂ = 0 (1) the low (high) end is exactly 0 (1), not the rounding of center − half
    return np.where(p <= 0.0, 0.0, np.maximum(0.0, center - half)), np.where(p >= 1.0, 1.0, np.minimum(1.0, center + half))


SAME = 1e-9  # values that spread less than this are all the same value: a normal interval has no width to give
FEW = 5.0  # auto: Clopper-Pearson below this many effective successes (or failures), p̂ strictly inside


def few_counts(n_eff: Any, p_hat: Any) -> Any:
    """Where Wilson's coverage dips (Brown, Cai & DasGupta 2001: a handful of successes or failures
    near p = 0 or 1): 0 < n*·p̂ < FEW or 0 < n*·(1 − p̂) < FEW. There `auto` takes Clopper-Pearson."""
    lo = np.minimum(n_eff * p_hat, n_eff * (1.0 - p_hat))
    return (lo > 0.0) & (lo < FEW)


@dataclass
class Intervals:
    """`mean_intervals`' answer, one entry per mean (arrays; 0-d for one mean)."""

    low: np.ndarray
    high: np.ndarray
    proportion: np.ndarray  # True where the proportion interval (Wilson / Clopper-Pearson) was taken
    exact: np.ndarray  # True where that was Clopper-Pearson's
    n_eff: np.ndarray  # Korn & Graubard's n* (NaN where not a proportion)
    deff: np.ndarray  # the design effect before clamping (NaN where undefined)


def mean_intervals(
    mean: Any, se: Any, trials: Any, n: int, groups: int | None, confidence: float, choice: str, bounds: tuple[float, float] | None
) -> Intervals:
    """The interval of each mean (vectorised: the coverage simulation calls exactly this).

    `se`: the standard error (clustered where `groups`), NaN where there is none (one problem).
    `trials`: the Bernoulli cells behind each mean when the means are proportions, else None.
    `choice`: for proportions, auto / wilson / clopper-pearson take the proportion interval at n*
    (auto: Wilson, Clopper-Pearson where `few_counts`); clt / clustered, and every mean that is
    not a proportion, the normal one: mean ± q·se, q = t_{G−1} with clusters else z, clipped to
    `bounds`.
    """
    m, s = np.asarray(mean, dtype=np.float64), np.asarray(se, dtype=np.float64)
    nan = np.full(m.shape, np.nan)
    alpha = 1.0 - confidence
    q = t_ppf(1.0 - alpha / 2.0, groups - 1) if groups is not None else normal_ppf(1.0 - alpha / 2.0)
    low, high = m - q * s, m + q * s
    if bounds is not None:
        low, high = np.maximum(bounds[0], low), np.minimum(bounds[1], high)
    if trials is None or choice not in ("auto", "wilson", "clopper-pearson"):
        return Intervals(low, high, np.zeros(m.shape, dtype=bool), np.zeros(m.shape, dtype=bool), nan, nan)
    n_eff, deff = effective_trials(m, s, trials, n, groups, confidence)
    exact = np.full(m.shape, choice == "clopper-pearson") | ((choice == "auto") & few_counts(n_eff, m))
    low, high = np.array(low, copy=True), np.array(high, copy=True)
    for which, method in ((~exact, "wilson"), (exact, "clopper-pearson")):
        if which.any():
            low[which], high[which] = proportion_interval(m[which], n_eff[which], confidence, method)
    return Intervals(low, high, np.ones(m.shape, dtype=bool), exact, n_eff, deff)


def summarize_mean(
    values: np.ndarray,
    options: MetricOptions,
    *,
    codes: np.ndarray | None = None,
    trials: np.ndarray | None = None,
    bounds: tuple[float, float] | None = None,
    details: dict[str, Any] | None = None,
) -> MetricValue:
    """Mean of per-problem values with its standard error and interval (rules in the module doc).

    `codes`: dense cluster codes per value (from `cluster_codes`) or None. `trials`: when the values
    are proportions (binary scores, pass@k), the Bernoulli cells behind each value (its valid
    samples; 1 where a value is not a mean of cells): the proportion intervals need them. `bounds`:
    the range the mean cannot leave (e.g. (0, 1) for binary scores); normal intervals are clipped.
    `options.ci_method` chooses the interval (`CI_METHODS`).
    """
    details = dict(details or {})
    n = int(values.size)
    if n == 0:
        details["reason"] = "no problem has a valid sample"
        return MetricValue(value=None, n=0, details=details)
    mean = float(values.mean())
    choice = options.ci_method
    groups: int | None = None
    if codes is not None:
        n_groups = int(codes.max()) + 1
        details["n_clusters"] = n_groups
        if 2 <= n_groups < n:
            groups = n_groups
        else:
            details["cluster_note"] = (
                "all problems share one cluster: a clustered SE needs >= 2 clusters; CLT used"
                if n_groups < 2
                else "every problem is its own cluster: the clustered SE equals the CLT one"
            )
    if groups is not None and choice == "clt":
        details["cluster_note"] = "--ci-method clt: clusters ignored (the interval assumes independent problems)"
        groups = None
    se = float(np.std(values, ddof=1)) / math.sqrt(n) if n >= 2 else None
    if groups is not None and codes is not None:  # groups is set only from codes
        se_clustered = clustered_se(values, codes)[0]
        if trials is None and choice != "clustered" and se_clustered is not None and se is not None and se_clustered < se:
            # two categories with the same mean gave SE 0 and [0.75, 0.75]: a clustering that shows
            # less spread than the problems alone is not used (it may widen an interval, never narrow it)
            details["cluster_note"] = "the clusters show less spread than the problems alone: CLT used (--ci-method clustered keeps them)"
            groups = None
        else:
            se = se_clustered
            details["df"] = groups - 1
    if choice in ("wilson", "clopper-pearson") and trials is None:
        details["ci_method_note"] = f"--ci-method {choice}: not a proportion; the normal interval is used"
    if se is None and trials is None:
        details["reason"] = "stderr and interval need >= 2 problems"
        return MetricValue(value=mean, n=n, details=details)
    if (trials is None or choice in ("clt", "clustered")) and float(np.ptp(values)) <= SAME:
        # mean ± q·0 is [c, c]: certainty no sample gives
        details["reason"] = f"every problem scored {mean:.6g}: no spread, so no standard error and no normal interval" + (
            " (for a proportion, --ci-method auto gives Wilson's)" if trials is not None else ""
        )
        return MetricValue(value=mean, n=n, details=details)
    got = mean_intervals(
        mean, math.nan if se is None else se, None if trials is None else float(trials.sum()), n, groups, options.confidence, choice, bounds
    )
    low, high = float(got.low), float(got.high)
    if bool(got.proportion):
        method = "clopper-pearson" if bool(got.exact) else "wilson"
        deff = float(got.deff)
        details.update(n_effective=float(got.n_eff), design_effect=None if math.isnan(deff) else deff)
        details["ci_rule"] = (
            f"{'Clopper-Pearson' if method == 'clopper-pearson' else 'Wilson'} at the effective size n* = "
            "N / max(1, design effect)"
            + (", t-adjusted for the clustered variance's Satterthwaite df (Korn & Graubard 1998)" if groups else "")
            + ("; at 0 or 1 each problem counts once" if not 0.0 < mean < 1.0 else "")
            + (" (auto: Clopper-Pearson where 0 < n*p < 5 or 0 < n*(1-p) < 5)" if choice == "auto" else "")
        )
        if se is None:
            details["stderr_note"] = "stderr needs >= 2 problems"
        method = f"{method}-clustered" if groups else method
    elif groups is not None:
        details["ci_rule"] = "clustered SE (Miller 2024) with t quantile on G-1 degrees of freedom"
        method = "clustered"
    else:
        details["ci_rule"] = "CLT: mean ± z * sd(ddof=1)/sqrt(n)"
        method = "clt"
    return MetricValue(value=mean, stderr=se, ci_low=low, ci_high=high, ci_method=method, n=n, details=details)


def per_cluster_means(
    table: ScoreTable,
    stats: ProblemStats,
    values: np.ndarray,
    options: MetricOptions,
    *,
    trials: np.ndarray | None = None,
    bounds: tuple[float, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """{cluster name: {"value", "n", "stderr", "ci_low", "ci_high", "ci_method"}}, in cluster order.

    Each cluster's interval treats its problems as a sample of their own, by summarize_mean's
    rules (`trials`: each value's Bernoulli cells, for proportions); keys without a value (one
    problem: no stderr) are left out."""
    assert table.cluster is not None
    raw = view(table.cluster, np.int64, table.n_problems, "cluster")[stats.index]

    def entry(selected: np.ndarray, cells: np.ndarray | None) -> dict[str, Any]:
        m = summarize_mean(selected, options, trials=cells, bounds=bounds)
        return {
            "value": m.value,
            "n": m.n,
            **{k: v for k in ("stderr", "ci_low", "ci_high", "ci_method") if (v := getattr(m, k)) is not None},
        }

    out: dict[str, dict[str, Any]] = {}
    known = raw >= 0
    if known.any():
        order = np.argsort(raw[known], kind="stable")  # one sort, then each cluster is a slice
        cuts = np.cumsum(np.bincount(raw[known]))[:-1]
        groups = np.split(values[known][order], cuts)
        cells = np.split(trials[known][order], cuts) if trials is not None else [None] * len(groups)
        for code, (group, n_cells) in enumerate(zip(groups, cells)):
            if group.size:
                out[table.cluster_names[code] if code < len(table.cluster_names) else f"cluster {code}"] = entry(group, n_cells)
    if not known.all():
        out["(no cluster)"] = entry(values[~known], trials[~known] if trials is not None else None)
    return out


def variance_split(x: np.ndarray, stats: ProblemStats) -> dict[str, Any]:
    """Within- and between-problem variance and the stderr other repeat counts would give.

    σ²_w = mean_i var_j(x_ij) (ddof=1) over problems with >= 2 valid samples;
    σ²_b = max(0, var_i(s_i) − σ²_w / K̄) with K̄ the harmonic mean of the valid-sample counts
    (E[var(s_i)] = σ²_b + σ²_w · mean(1/K_i); equals the plain mean when every K_i is the same);
    se_if_repeats[K'] = sqrt((σ²_b + σ²_w / K') / n).
    """
    n, counts = stats.n, stats.counts
    multi = counts >= 2
    if n < 2 or not multi.any():
        return {"variance_split": None, "variance_split_reason": "needs >= 2 problems and some problem with >= 2 valid samples"}
    rows = x[stats.index[multi]]
    valid = np.isfinite(rows)
    dev = np.where(valid, rows - stats.means[multi, None], 0.0)
    within = (dev * dev).sum(axis=1) / (counts[multi] - 1)
    sigma2_w = float(within.mean())
    k_bar = float(n / np.sum(1.0 / counts))
    var_s = float(np.var(stats.means, ddof=1))
    sigma2_b = max(0.0, var_s - sigma2_w / k_bar)
    return {
        "variance_split": {
            "sigma2_within": sigma2_w,
            "sigma2_between": sigma2_b,
            "k_bar": k_bar,
            "n_problems_within": int(multi.sum()),
            "se_if_repeats": {str(k): math.sqrt((sigma2_b + sigma2_w / k) / n) for k in SE_IF_REPEATS},
            "formula": "se(K) = sqrt((sigma2_between + sigma2_within / K) / n)",
        }
    }


# --- bootstrap over problems -------------------------------------------------------------------

Statistic = Callable[[np.ndarray], np.ndarray]
"""statistic(idx) for idx of shape (b, n) (problem indices, one row per replicate) -> (b,) or (b, m)."""


def bootstrap_over_problems(statistic: Statistic, n: int, options: MetricOptions, *, cells_per_problem: int = 1) -> np.ndarray:
    """Resample problems with replacement, `options.bootstrap_samples` times, seeded by `options.seed`.

    Indices come from np.random.default_rng(seed).integers(0, n, size=(b, n)) in batches of b
    replicates sized so b · n · cells_per_problem stays near 4M elements (the batch size depends
    only on n, so the result is deterministic). Returns the (B,) or (B, m) replicate values.
    """
    if n < 1:
        raise ValueError("bootstrap needs >= 1 problem")
    rng = np.random.default_rng(options.seed)
    total = int(options.bootstrap_samples)
    batch = max(1, min(total, BATCH_ELEMENTS // max(1, n * cells_per_problem)))
    return np.concatenate(
        [
            np.asarray(statistic(rng.integers(0, n, size=(min(batch, total - done), n))), dtype=np.float64)
            for done in range(0, total, batch)
        ],
        axis=0,
    )


def percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float | None, float | None, float | None, int]:
    """Percentile interval and bootstrap stderr (sd, ddof=1) of 1-D replicates; NaN replicates dropped.

    Returns (low, high, stderr, n_dropped); no interval (None, None) where every replicate is the
    same value: resampling the problems cannot show the uncertainty then, and [c, c] would claim
    certainty.
    """
    finite = replicates[np.isfinite(replicates)]
    dropped = int(replicates.size - finite.size)
    if finite.size < 2:
        return None, None, None, dropped
    if float(np.ptp(finite)) <= SAME:  # every replicate the same (a perfect classifier): [c, c] is no interval
        return None, None, float(np.std(finite, ddof=1)), dropped
    alpha = 1.0 - confidence
    low, high = np.quantile(finite, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high), float(np.std(finite, ddof=1)), dropped


# --- pass@k ------------------------------------------------------------------------------------


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per problem (Chen et al. 2021), product form: 1 − Π_{j=n−c+1}^{n} (1 − k/j).

    n: valid samples, c: correct ones (arrays of the same shape, every n >= k). 1.0 where n − c < k,
    0.0 where c = 0. Each distinct (n, c) pair is computed once; the products use
    np.multiply.reduceat over the concatenated ranges j = n−c+1 … n.
    """
    n, c = np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64)
    if n.size == 0:
        return np.zeros(0)
    if (n < k).any() or (c < 0).any() or (c > n).any():
        raise ValueError("pass_at_k needs 0 <= c <= n and n >= k")
    width = int(n.max()) + 1
    pairs, inverse = np.unique(n * width + c, return_inverse=True)
    un, uc = pairs // width, pairs % width
    out = np.zeros(pairs.size)
    out[un - uc < k] = 1.0
    prod = (un - uc >= k) & (uc > 0)
    if prod.any():
        pn, pc = un[prod], uc[prod]
        starts = np.concatenate(([0], np.cumsum(pc)[:-1]))
        j = np.repeat(pn - pc + 1 - starts, pc) + np.arange(int(pc.sum()))
        factors = 1.0 - k / j.astype(np.float64)
        out[prod] = 1.0 - np.multiply.reduceat(factors, starts)
    return out[inverse.reshape(-1)].reshape(n.shape)
