"""Paired comparison of two runs of one benchmark (`shardeval compare RUN_A RUN_B`).

The difference, its interval and its p-value are `paired.paired_difference(A, B)`: the one
function the sweep table uses too, so `compare` and a sweep report the same numbers for the same
pair (cells valid in both, matched by problem id, clustered by problem or by A's categories,
t on G−1 df; McNemar's exact p for binary runs with one shared cell per problem, else the paired
t test). Besides it, for a reader deciding:

- a_mean, b_mean: the means over the shared cells.
- correlation: Pearson correlation of the per-problem means over the shared cells (None when
  fewer than 2 problems or either is constant).
- mcnemar: the discordant counts and McNemar's exact p when it applies, else why not.
- mde: the smallest true difference detected with 80 % power by a two-sided test at level
  1 − confidence: (t_{df, 1−α/2} + t_{df, 0.80}) · stderr.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardeval.api.metric import MetricOptions, ScoreTable
from shardeval.api.records import percent
from shardeval_metrics.dist import t_ppf
from shardeval_metrics.paired import paired_difference
from shardeval_metrics.stats import is_binary, match_problems, score_matrix

POWER = 0.80


def compare_tables(a: ScoreTable, b: ScoreTable, options: MetricOptions) -> dict[str, Any]:
    """Paired difference B − A (rules in the module doc); never raises."""
    alpha = 1.0 - options.confidence
    paired = paired_difference(a, b, options)
    result: dict[str, Any] = {
        "benchmark": a.benchmark,
        "confidence": options.confidence,
        "matched_by": paired["matched_by"],
        "n_shared": paired["n_problems"],
        "n_cells": paired["n"],
        "n_only_a": paired["n_problems_only_baseline"],
        "n_only_b": paired["n_problems_only_other"],
        "n_shared_without_samples": 0,
        "a_mean": paired["baseline_mean"],
        "b_mean": paired["other_mean"],
        **{k: paired[k] for k in ("diff", "stderr", "ci_low", "ci_high", "p_value", "test", "ci_method", "df", "clustered_by")},
        **dict.fromkeys(("correlation", "mcnemar", "mcnemar_reason", "mde")),
        "details": {
            "diff": "mean over the (problem, repeat) cells valid in both runs of B - A (paired.paired_difference, as the sweep table)",
            "a_mean_b_mean": "means over the shared cells only",
            "mde_formula": f"(t_(df,1-alpha/2) + t_(df,{POWER:.2f})) * stderr, alpha = {alpha:.6g}, power {percent(POWER)}",
        },
    }
    details = result["details"]
    xa, xb = score_matrix(a), score_matrix(b)
    ia, ib, _, _, _ = match_problems(a, b)
    repeats = min(a.repeats, b.repeats)
    ca, cb = xa[ia, :repeats], xb[ib, :repeats]
    both = np.isfinite(ca) & np.isfinite(cb)
    has = both.any(axis=1)
    result["n_shared_without_samples"] = int((~has).sum())
    if paired["n"] == 0:
        details["reason"] = paired["reason"]
        result["mcnemar_reason"] = details["reason"]
        return result
    if paired["stderr"] is None:
        details["reason"] = paired.get("reason", "stderr needs >= 2 shared problems")
    else:
        df = paired["df"]
        result["mde"] = (t_ppf(1.0 - alpha / 2.0, df) + t_ppf(POWER, df)) * paired["stderr"]
        details["p_value"] = f"{paired['test']}: two-sided test of diff = 0"
    counts = both[has].sum(axis=1)
    sa = np.where(both, ca, 0.0)[has].sum(axis=1) / counts
    sb = np.where(both, cb, 0.0)[has].sum(axis=1) / counts
    if sa.size >= 2 and float(np.std(sa)) > 0 and float(np.std(sb)) > 0:
        r = float(np.corrcoef(sa, sb)[0, 1])
        result["correlation"] = r if math.isfinite(r) else None
    if paired["test"] == "mcnemar_exact":
        disc = paired["discordant"]
        result["mcnemar"] = {
            "a_right_b_wrong": disc["baseline_right_other_wrong"],
            "a_wrong_b_right": disc["baseline_wrong_other_right"],
            "p_value": paired["p_value"],
            "test": "exact: min(1, 2 * BinomCDF(min(b, c); b + c, 0.5))",
        }
    else:
        binary = is_binary(ca[both]) and is_binary(cb[both])
        result["mcnemar_reason"] = (
            "McNemar needs binary scores (0/1) in both runs"
            if not binary
            else "McNemar needs exactly one shared sample per problem (repeats > 1: see diff and its interval)"
        )
    return result
