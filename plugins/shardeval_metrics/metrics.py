"""The registered metrics: accuracy / mean, pass@k, and ratio-of-sums metrics (perplexity).

Each is a `Metric`: f(table, options) -> {name: MetricValue}. All work from per-problem
statistics of the whole deduplicated table (merge never hands a metric shards). A cell counts when
its score is finite; NaN (missing, error) is left out, never read as 0 (merge turns errors into
0.0 itself under --errors-as-wrong).
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Callable

import numpy as np

from shardeval.api.metric import MetricOptions, MetricValue, ScoreTable
from shardeval_metrics.dist import normal_ppf, t_ppf
from shardeval_metrics.stats import (
    cluster_codes,
    is_binary,
    per_cluster_means,
    per_problem,
    score_matrix,
    summarize_mean,
    variance_split,
)
from shardeval_metrics.stats import pass_at_k as _pass_at_k

PER_CLUSTER_LIMIT = 1000  # accuracy's details list per-cluster means up to this many clusters


def accuracy(table: ScoreTable, options: MetricOptions, *, name: str = "accuracy") -> dict[str, MetricValue]:
    """Mean over problems of each problem's mean valid score, never a mean of shard means.

    value = mean_i s_i over problems with >= 1 valid sample; stderr, interval and ci_method by
    the rules of `stats.summarize_mean` (with binary scores the interval is clipped to [0, 1]).
    details: n_problems_with_samples, n_samples, n_flagged_problems (no valid sample), binary,
    per_cluster (when the table has clusters: each cluster's mean with its own interval), and variance_split: sigma2_within,
    sigma2_between, k_bar and se_if_repeats {"1": …, "32": …} (string keys, JSON-safe).
    """
    x = score_matrix(table)
    stats = per_problem(x)
    binary = is_binary(x)
    details: dict[str, Any] = {
        "n_problems_with_samples": stats.n,
        "n_samples": stats.n_samples,
        "n_flagged_problems": stats.n_flagged,
        "binary": binary,
    }
    if stats.n_flagged:
        details["flagged_note"] = f"{stats.n_flagged} problem(s) have no valid sample and are left out"
    codes = cluster_codes(table, stats.index) if stats.n else None
    trials, bounds = (stats.counts, (0.0, 1.0)) if binary else (None, None)
    if codes is not None:
        n_groups = int(codes.max()) + 1
        if n_groups <= PER_CLUSTER_LIMIT:
            details["per_cluster"] = per_cluster_means(table, stats, stats.means, options, trials=trials, bounds=bounds)
        else:
            details["per_cluster_note"] = f"{n_groups} clusters: per-cluster means are listed up to {PER_CLUSTER_LIMIT}"
    if stats.n:
        details.update(variance_split(x, stats))
    return {name: summarize_mean(stats.means, options, codes=codes, trials=trials, bounds=bounds, details=details)}


def mean(table: ScoreTable, options: MetricOptions) -> dict[str, MetricValue]:
    """`accuracy` under the name "mean" (for scores that are not right/wrong)."""
    return accuracy(table, options, name="mean")


def pass_at_k(table: ScoreTable, options: MetricOptions) -> dict[str, MetricValue]:
    """Unbiased pass@k (Chen et al. 2021) for every k in 1..repeats, as "pass@{k}".

    Scores must be binary (every valid score 0 or 1; no threshold is applied): otherwise one
    entry "pass@k" with value None says why. Per problem with n valid samples and c correct,
    pass@k = 1 − Π_{j=n−c+1}^{n} (1 − k/j) (1.0 when n − c < k). Problems with fewer than k valid
    samples are left out of pass@k and counted in details["n_flagged"]. The mean over eligible
    problems gets its stderr and interval like accuracy: a proportion whose Bernoulli cells are,
    per problem, the n // k disjoint groups of k samples (each one "any of k right" draw; the
    unbiased estimator is at least as precise as their mean): n for pass@1, 1 for pass@n. At 0 or
    1 each problem counts once.
    """
    x = score_matrix(table)
    valid = np.isfinite(x)
    if not is_binary(x):
        reason = "pass@k needs binary scores (each valid score 0 or 1); this table has other values"
        return {"pass@k": MetricValue(value=None, details={"reason": reason})}
    n_valid = valid.sum(axis=1)
    n_correct = np.where(valid, x, 0.0).sum(axis=1).astype(np.int64)
    out: dict[str, MetricValue] = {}
    for k in range(1, table.repeats + 1):
        index = np.flatnonzero(n_valid >= k)
        n_flagged = int(table.n_problems - index.size)
        details: dict[str, Any] = {
            "k": k,
            "n_flagged": n_flagged,
            "estimator": "unbiased, 1 - prod_{j=n-c+1}^{n} (1 - k/j) (Chen et al. 2021)",
        }
        if n_flagged:
            details["flagged_note"] = f"{n_flagged} problem(s) have fewer than {k} valid samples and are left out"
        out[f"pass@{k}"] = summarize_mean(
            _pass_at_k(n_valid[index], n_correct[index], k),
            options,
            codes=cluster_codes(table, index),
            trials=n_valid[index] // k,
            bounds=(0.0, 1.0),
            details=details,
        )
    return out


# --- ratio of sums (perplexity) ----------------------------------------------------------------


def _ratio_core(table: ScoreTable, numerator_key: str, denominator_key: str, options: MetricOptions):
    """(ratio, stderr, critical value, ci_method, n, details) from the global sums; None if not applicable."""
    if numerator_key not in table.extra or denominator_key not in table.extra:
        return None
    num, den = score_matrix(table, numerator_key), score_matrix(table, denominator_key)
    valid = np.isfinite(num) & np.isfinite(den)
    # canonical (problem, repeat) order; math.fsum is exactly rounded, so any sharding gives the same float
    total_num, total_den = (math.fsum(x[valid].tolist()) for x in (num, den))
    has = valid.any(axis=1)
    n = int(has.sum())
    details: dict[str, Any] = {
        "numerator": numerator_key,
        "denominator": denominator_key,
        "n_cells": int(valid.sum()),
        "sum_numerator": total_num,
        "sum_denominator": total_den,
        "n_flagged_problems": int(table.n_problems - n),
    }
    if n == 0 or total_den == 0.0:
        details["reason"] = "no valid cells" if n == 0 else f"sum of {denominator_key!r} is 0"
        return None, None, None, "none", n, details
    ratio = total_num / total_den
    # delta method (linearization of the ratio estimator) over problems:
    # e_i = N_i − R·D_i; SE² = n/(n−1) Σ e_i² / (Σ D)²; clustered: G/(G−1) Σ_g (Σ_{i∈g} e_i)² / (Σ D)²
    n_i = np.where(valid, num, 0.0).sum(axis=1)[has]
    d_i = np.where(valid, den, 0.0).sum(axis=1)[has]
    resid = n_i - ratio * d_i
    alpha = 1.0 - options.confidence
    codes = cluster_codes(table, np.flatnonzero(has))
    if codes is not None:
        details["n_clusters"] = n_groups = int(codes.max()) + 1
    if codes is not None and 2 <= n_groups < n:
        sums = np.bincount(codes, weights=resid, minlength=n_groups)
        se = math.sqrt(n_groups / (n_groups - 1) * float(np.dot(sums, sums))) / abs(total_den)
        crit = t_ppf(1.0 - alpha / 2.0, n_groups - 1)
        details["df"] = n_groups - 1
        method = "delta-clustered"
    elif n >= 2:
        se = math.sqrt(n / (n - 1) * float(np.dot(resid, resid))) / abs(total_den)
        crit = normal_ppf(1.0 - alpha / 2.0)
        method = "delta"
    else:
        details["reason"] = "stderr and interval need >= 2 problems"
        return ratio, None, None, "none", n, details
    details["ci_rule"] = "delta method over problems: SE^2 = n/(n-1) * sum_i (N_i - R*D_i)^2 / (sum D)^2" + (
        " aggregated by cluster, t on G-1 df" if method == "delta-clustered" else ""
    )
    return ratio, se, crit, method, n, details


def _ratio_value(core, transform: Callable[[float], float] | None) -> MetricValue:
    ratio, se, crit, method, n, details = core
    details = dict(details)
    f = transform or (lambda v: v)
    value = None if ratio is None else f(ratio)
    if value is None or se is None:
        return MetricValue(value=value, n=n, details=details)
    if transform is None:
        slope = 1.0
    elif transform is math.exp:
        slope = value
    else:
        h = max(1e-6, abs(ratio) * 1e-6)
        slope = (f(ratio + h) - f(ratio - h)) / (2 * h)
    return MetricValue(
        value=value,
        stderr=abs(slope) * se,
        ci_low=f(ratio - crit * se),
        ci_high=f(ratio + crit * se),
        ci_method=method,
        n=n,
        details=details,
    )


def ratio_of_sums(
    numerator_key: str, denominator_key: str, *, name: str | None = None, transform: Callable[[float], float] | None = None
) -> Callable[[ScoreTable, MetricOptions], dict[str, MetricValue]]:
    """A metric: Σ extra[numerator_key] / Σ extra[denominator_key] over cells where both are finite.

    The sums are global (math.fsum over the whole table in canonical order: exactly the same float
    however the run was sharded). Interval: delta method over problems ("delta", or
    "delta-clustered" with t on G−1 df). `transform` (monotone increasing, e.g. math.exp) maps the
    value and the interval ends; its stderr is then |f'(R)|·SE by the delta method (f' numerical
    unless f is exp). Tables without both keys give {}.
    """
    key = name or f"{numerator_key}/{denominator_key}"

    def metric(table: ScoreTable, options: MetricOptions) -> dict[str, MetricValue]:
        core = _ratio_core(table, numerator_key, denominator_key, options)
        return {} if core is None else {key: _ratio_value(core, transform)}

    metric.__name__ = f"ratio_of_sums_{numerator_key}_{denominator_key}"
    return metric


def perplexity(table: ScoreTable, options: MetricOptions) -> dict[str, MetricValue]:
    """perplexity = exp(Σ nll / Σ tokens) and token_nll = Σ nll / Σ tokens, from extra["nll"], extra["tokens"].

    Interval: delta method on token_nll, mapped through exp for perplexity (stderr = ppl · SE).
    Tables without both keys give {}.
    """
    core = _ratio_core(table, "nll", "tokens", options)
    if core is None:
        return {}
    return {"perplexity": _ratio_value(core, math.exp), "token_nll": _ratio_value(core, None)}
