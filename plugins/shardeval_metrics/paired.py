"""Paired differences against a baseline for the sweep table (hook `paired_differences`).

Each (baseline a, other b) pair of one benchmark's tables is compared on the (problem, repeat)
cells valid in both: problems matched by `stats.match_problems` (ids when both tables have them,
else index), repeats 0..min(repeats)−1, a cell counting when both scores are finite. So two
different problems are never compared; what the pairing leaves out is counted instead.

- diff = mean over the n shared cells of d = b − a.
- stderr: the cells of one problem are not independent (same question, same difficulty), so the
  cell differences are clustered by problem: SE² = G/(G−1) · Σ_g (Σ_{c∈g} (d_c − d̄))² / n² over
  the G problems (`stats.clustered_se`; exactly sd(d, ddof=1)/sqrt(n) when each problem has one
  cell). When the baseline's problems carry categories (>= 2, some shared), the clusters are the
  categories instead (a problem without one is its own), as merge clusters accuracy.
  Interval diff ± t_{G−1, 1−α/2} · SE; paired t test t = diff/SE on G−1 df ("paired-t").
  Categories whose SE is below the problems' are not used (clustering widens, never narrows).
- No spread (every problem differs by the same c): no SE; `_no_variation` bounds the interval
  ("no-variation-bound") and takes the sign test's p ("sign_exact"), never [c, c] or p = 0.
- This is the one paired interval: the sweep table (hook `paired_differences`) and
  `shardeval compare` (`compare.compare_tables`) both take it from `paired_difference`.
- p-value: McNemar's exact test on the discordant cells when both tables are binary and every
  shared problem has exactly one shared cell; the paired t test otherwise. McNemar treats each
  discordant pair as an independent coin flip. Two repeats of one problem are not independent
  draws, so with several cells per problem McNemar would count one problem's repeats as separate
  evidence and its p-value would be too small. The clustered t test accounts for that.
- p_holm: Holm's step-down adjustment across every pair of one call (one call = one family). The
  sweep merge calls this once per model and adjusts the whole table with the `family_adjusted`
  hook (`holm` again), so a watched sweep pairs only the new checkpoint.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardeval.api.metric import MetricOptions, ScoreTable
from shardeval_metrics.dist import clopper_pearson_interval, mcnemar_exact, t_ppf, t_sf
from shardeval_metrics.stats import cluster_codes, clustered_se, is_binary, match_problems, score_matrix

SAME = 1e-9  # problems whose mean differences spread less than this all differ by the same amount


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the input order; None stays None (not counted in m).

    Sorted ascending, p_holm_(i) = max_{j<=i} min(1, (m − j) · p_(j)), j 0-based.
    Written here because nothing in the zipapp provides it (statsmodels would pull in scipy).
    """
    order = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    running, m = 0.0, len(order)
    for j, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out


def paired_difference(a: ScoreTable, b: ScoreTable, options: MetricOptions) -> dict[str, Any]:
    """The paired difference b − a (the baseline is a) by the rules of the module doc; never raises."""
    xa, xb = score_matrix(a), score_matrix(b)
    ia, ib, only_a, only_b, matched_by = match_problems(a, b)
    repeats = min(a.repeats, b.repeats)
    ca, cb = xa[ia, :repeats], xb[ib, :repeats]
    both = np.isfinite(ca) & np.isfinite(cb)
    rows = np.nonzero(both)[0]  # the matched problem of each shared cell, in (problem, repeat) order
    problems, codes = np.unique(rows, return_inverse=True)
    codes = codes.reshape(-1)  # dense 0..G−1: the clusters of clustered_se
    da, db = ca[both], cb[both]
    d = db - da
    n, n_problems = int(d.size), int(problems.size)
    valid_a, valid_b = int(np.isfinite(xa).sum()), int(np.isfinite(xb).sum())
    result: dict[str, Any] = {
        "benchmark": b.benchmark,
        "confidence": options.confidence,
        "matched_by": matched_by,
        "n": n,
        "n_problems": n_problems,
        "n_cells_baseline": a.n_cells,
        "n_cells_other": b.n_cells,
        "n_only_baseline": valid_a - n,
        "n_only_other": valid_b - n,
        "n_problems_unmatched": int(only_a + only_b),
        "n_problems_only_baseline": int(only_a),
        "n_problems_only_other": int(only_b),
        "clustered_by": "problem",
        "complete": n > 0 and n == a.n_cells == b.n_cells,
        **dict.fromkeys(("diff", "baseline_mean", "other_mean", "stderr", "ci_low", "ci_high", "df", "p_value", "p_holm", "discordant")),
        "test": "none",
        "ci_method": "none",
    }
    if n == 0:
        result["reason"] = "no (problem, repeat) cell is valid in both tables"
        return result
    diff = float(d.mean())
    result.update(diff=diff, baseline_mean=float(da.mean()), other_mean=float(db.mean()))
    by_problem = codes
    se, n_groups = clustered_se(d, codes)
    by_category = cluster_codes(a, ia[problems]) if n_problems else None  # per shared problem; None: no categories
    if by_category is not None:  # a problem without a category is its own
        if 2 <= int(by_category.max()) + 1 < n_problems:
            se_category, n_categories = clustered_se(d, by_category[codes])
            # categories whose differences happen to balance gave SE 0 and [0.1, 0.1] where McNemar's
            # p was 0.125: clustering that shows less spread than the problems alone is not used
            if se is None or (se_category is not None and se_category >= se):
                codes, se, n_groups, result["clustered_by"] = by_category[codes], se_category, n_categories, "category"
            else:
                result["cluster_note"] = (
                    "the categories show less spread than the problems alone; clustered by "
                    "problem (clustering may widen an interval, never narrow it)"
                )
    df = n_groups - 1
    per_problem = np.bincount(by_problem, weights=d) / np.bincount(by_problem)
    if se is not None and float(np.ptp(per_problem)) > SAME:
        half = t_ppf(0.5 + options.confidence / 2.0, df) * se
        p = min(1.0, 2.0 * t_sf(abs(diff) / se, df))
        result.update(
            stderr=se, ci_low=diff - half, ci_high=diff + half, df=df, p_value=p, test="paired_t", ci_method="paired-t", n_clusters=n_groups
        )
    elif se is not None:  # every problem differs by the same amount: t has nothing to measure
        result.update(n_clusters=n_groups, **_no_variation(diff, da, db, n_problems, options.confidence))
    else:
        result["reason"] = "stderr and interval need >= 2 problems with a shared cell"
    if is_binary(da) and is_binary(db) and n == n_problems:
        right_a, right_b = da == 1.0, db == 1.0
        n_b, n_c = int((right_a & ~right_b).sum()), int((~right_a & right_b).sum())
        result.update(
            p_value=mcnemar_exact(n_b, n_c),
            test="mcnemar_exact",
            discordant={"baseline_right_other_wrong": n_b, "baseline_wrong_other_right": n_c},
        )
    return result


def _no_variation(diff: float, da: np.ndarray, db: np.ndarray, n_problems: int, confidence: float) -> dict[str, Any]:
    """The interval and p where every problem's cells differ by the same c on average (identical
    runs: c = 0; A always wrong where B is right: c = 1). The t interval there is [c, c],
    certainty no sample gives. With scores in [0, 1] every difference lies in [−1, 1]; the exact
    (Clopper-Pearson) lower bound l on the share of problems (each counts once) that differ by c
    leaves at most 1 − l differing by anything else: [max(−1, c·l − (1 − l)), min(1, c·l + (1 − l))].
    p: the exact sign test over the problems (McNemar's with every problem discordant one way), 1
    when c = 0."""
    out: dict[str, Any] = {
        "test": "sign_exact",
        "p_value": 1.0 if diff == 0.0 else mcnemar_exact(0, n_problems),
        "reason": f"every problem differs by {diff:.6g}: no spread, so no standard error",
    }
    scores = np.concatenate([da, db])
    if float(scores.min()) < 0.0 or float(scores.max()) > 1.0:
        out["reason"] = "every problem differs by the same amount and the scores are not within [0, 1]: no interval can be built from them"
        return out
    low_share = clopper_pearson_interval(n_problems, n_problems, confidence)[0]
    out.update(
        ci_low=max(-1.0, diff * low_share - (1.0 - low_share)),
        ci_high=min(1.0, diff * low_share + (1.0 - low_share)),
        ci_method="no-variation-bound",
    )
    out["reason"] += f"; the interval bounds the share of problems that could differ otherwise (Clopper-Pearson, {n_problems} problems)"
    return out


def paired_differences(pairs: list[tuple[ScoreTable, ScoreTable]], options: MetricOptions) -> list[dict[str, Any]]:
    """`paired_difference` of every (baseline, other) pair, with p_holm across all of them (one family)."""
    results = [paired_difference(a, b, options) for a, b in pairs]
    for result, p in zip(results, holm([r["p_value"] for r in results])):
        result["p_holm"] = p
    return results
