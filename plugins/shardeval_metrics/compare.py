"""Paired comparison of two runs of one benchmark (`shardeval compare RUN_A RUN_B`).

Problems are matched by `problem_ids` (by index when either table has none) and kept when both
runs have >= 1 valid sample for them. On the per-problem means s_a, s_b of those shared problems,
d_i = s_b,i − s_a,i:

- diff = mean(d); stderr = sd(d, ddof=1)/sqrt(n) with a normal interval ("clt"), or, when A's
  problems carry clusters (>= 2, some shared), the clustered SE with t on G−1 df ("clustered");
  p_value: two-sided test of mean(d) = 0 with the same reference distribution.
- correlation: Pearson correlation of s_a and s_b (None when n < 2 or either is constant).
- McNemar's exact test when both runs are binary with one valid sample per shared problem:
  b = #(A right, B wrong), c = #(A wrong, B right), p = min(1, 2·P(X <= min(b, c))),
  X ~ Binomial(b + c, 1/2).
- mde: the smallest true difference detected with 80 % power by a two-sided test at level
  1 − confidence: (q_{1−α/2} + q_{0.80}) · stderr, q the normal quantile (t on G−1 df if clustered).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardeval.api import MetricOptions, ScoreTable
from shardeval_metrics.dist import mcnemar_exact, normal_cdf, normal_ppf, t_ppf, t_sf
from shardeval_metrics.stats import cluster_codes, clustered_se, is_binary, match_problems, per_problem, score_matrix

POWER = 0.80


def compare_tables(a: ScoreTable, b: ScoreTable, options: MetricOptions) -> dict[str, Any]:
    """Paired difference B − A over the problems both runs answered (rules in the module doc)."""
    xa, xb = score_matrix(a), score_matrix(b)
    ia, ib, only_a, only_b, matched_by = match_problems(a, b)
    both = np.isfinite(xa[ia]).any(axis=1) & np.isfinite(xb[ib]).any(axis=1)
    ia, ib = ia[both], ib[both]
    n = int(ia.size)
    alpha = 1.0 - options.confidence
    result: dict[str, Any] = {
        "benchmark": a.benchmark,
        "confidence": options.confidence,
        "matched_by": matched_by,
        "n_shared": n,
        "n_only_a": int(only_a),
        "n_only_b": int(only_b),
        "n_shared_without_samples": int((~both).sum()),
        **dict.fromkeys(("a_mean", "b_mean", "diff", "stderr", "ci_low", "ci_high", "p_value", "correlation")),
        **dict.fromkeys(("mcnemar", "mcnemar_reason", "mde")),
        "ci_method": "none",
        "details": {
            "diff": "mean over shared problems of s_b - s_a (per-problem means of valid samples)",
            "a_mean_b_mean": "means over the shared problems only",
            "mde_formula": f"(q_(1-alpha/2) + q_{POWER:.2f}) * stderr, alpha = {alpha:.6g}, power {POWER:.0%}",
        },
    }
    details = result["details"]
    if n == 0:
        details["reason"] = "no problem has a valid sample in both runs"
        result["mcnemar_reason"] = details["reason"]
        return result
    sa_stats, sb_stats = per_problem(xa[ia]), per_problem(xb[ib])
    sa, sb = sa_stats.means, sb_stats.means
    d = sb - sa
    diff = float(d.mean())
    result.update(a_mean=float(sa.mean()), b_mean=float(sb.mean()), diff=diff)

    codes = cluster_codes(a, ia)
    n_groups = int(codes.max()) + 1 if codes is not None else n
    if codes is not None and 2 <= n_groups < n:
        se, _ = clustered_se(d, codes)
        df = n_groups - 1
        crit = t_ppf(1.0 - alpha / 2.0, df)
        q_power = t_ppf(POWER, df)
        result["ci_method"] = "clustered"
        details.update(n_clusters=n_groups, df=df, clusters_from="run A")
        p_of = lambda t: min(1.0, 2.0 * t_sf(abs(t), df))  # noqa: E731
    elif n >= 2:
        se = float(np.std(d, ddof=1)) / math.sqrt(n)
        crit = normal_ppf(1.0 - alpha / 2.0)
        q_power = normal_ppf(POWER)
        result["ci_method"] = "clt"
        p_of = lambda t: min(1.0, 2.0 * (1.0 - normal_cdf(abs(t))))  # noqa: E731
    else:
        se = None
        details["reason"] = "stderr needs >= 2 shared problems"
    if se is not None:
        p_value = p_of(diff / se) if se > 0 else 1.0 if diff == 0 else 0.0
        result.update(stderr=se, ci_low=diff - crit * se, ci_high=diff + crit * se, mde=(crit + q_power) * se, p_value=p_value)
        details["p_value"] = "two-sided test of diff = 0 on the interval's reference distribution"

    if n >= 2 and float(np.std(sa)) > 0 and float(np.std(sb)) > 0:
        r = float(np.corrcoef(sa, sb)[0, 1])
        result["correlation"] = r if math.isfinite(r) else None

    binary = is_binary(xa[ia]) and is_binary(xb[ib])
    single = bool(np.all(sa_stats.counts == 1) and np.all(sb_stats.counts == 1))
    if binary and single:
        right_a, right_b = sa == 1.0, sb == 1.0
        n_b, n_c = int((right_a & ~right_b).sum()), int((~right_a & right_b).sum())
        result["mcnemar"] = {
            "a_right_b_wrong": n_b,
            "a_wrong_b_right": n_c,
            "p_value": mcnemar_exact(n_b, n_c),
            "test": "exact: min(1, 2 * BinomCDF(min(b, c); b + c, 0.5))",
        }
    else:
        result["mcnemar_reason"] = (
            "McNemar needs binary scores (0/1) in both runs" if not binary
            else "McNemar needs exactly one valid sample per problem in both runs (repeats > 1: see diff and its interval)"
        )
    return result
