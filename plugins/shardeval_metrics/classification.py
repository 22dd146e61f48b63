"""Classification metrics from table.predicted / table.gold / table.labels, with bootstrap intervals.

A cell counts when its gold label is known (gold >= 0) and it is either `ok` or was given a score
by merge (errors under --errors-as-wrong); other cells are left out. A prediction of -1 (none,
unparseable, error) is wrong and predicts no class: it adds a false negative to its gold class and a
false positive to none.

Per class l (over the classes present in gold or predicted, as scikit-learn does):
precision_l = TP/(TP+FP), recall_l = TP/(TP+FN), F1_l = 2TP/(2TP+FP+FN), each 0 when its
denominator is 0 (scikit-learn's zero_division=0). macro = unweighted mean over the present
classes; weighted-F1 weights F1_l by the gold support. Every cell weighs the same.

Intervals: bootstrap over problems (a resampled problem brings all its cells), percentile interval,
stderr = sd of the replicates; each replicate is computed exactly like the point estimate (its own
set of present classes). Counts per replicate: the (replicate × problem) draw counts times the
per-problem (tp, support, predicted) count matrix (exact integer arithmetic in float64); when that
matrix would be large (many problems × many labels), np.bincount on (replicate, class) flattened
indices per drawn cell instead. Both give identical counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardeval.api.metric import OK, MetricOptions, MetricValue, ScoreTable
from shardeval_metrics.stats import bootstrap_over_problems, percentile_interval, view

KEYS = ("macro_f1", "weighted_f1", "macro_precision", "macro_recall")


def _scores_from_counts(tp: np.ndarray, support: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, ...]:
    """(b, L) counts -> (macro_f1, weighted_f1, macro_precision, macro_recall, per-class p, r, f1), each (b,)."""

    def ratio(num: np.ndarray, den: np.ndarray, empty: float) -> np.ndarray:
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), empty)

    precision = ratio(tp, predicted, 0.0)
    recall = ratio(tp, support, 0.0)
    f1 = ratio(2.0 * tp, support + predicted, 0.0)
    present = (support > 0) | (predicted > 0)
    m = present.sum(axis=1).astype(np.float64)
    macro_f1, macro_p, macro_r = (ratio((x * present).sum(axis=1), m, np.nan) for x in (f1, precision, recall))
    weighted = ratio((f1 * support).sum(axis=1), support.sum(axis=1), np.nan)
    return macro_f1, weighted, macro_p, macro_r, precision, recall, f1


DENSE_LIMIT = 1 << 24  # per-problem count matrix (problems x 3 labels) held as float64 up to 128 MiB


def _row_counts(x: np.ndarray, width: int) -> np.ndarray:
    """Per row of the integer matrix x (values 0..width-1), how often each value occurs: (rows, width) float64."""
    rows = x.shape[0]
    offset = (np.arange(rows, dtype=np.int64) * width)[:, None]
    flat = (x.reshape(rows, -1) + offset).ravel()
    return np.bincount(flat, minlength=rows * width).reshape(rows, width).astype(np.float64)


def _counts_per_cell(slots: tuple[np.ndarray, ...], idx: np.ndarray, n_labels: int) -> tuple[np.ndarray, ...]:
    """(tp, support, predicted) per replicate, (b, L) each, by np.bincount on (replicate, class).

    The last slot (n_labels) collects the cells that do not count."""
    return tuple(_row_counts(slot[idx], n_labels + 1)[:, :n_labels] for slot in slots)


def classification(table: ScoreTable, options: MetricOptions) -> dict[str, MetricValue]:
    """macro_f1, weighted_f1, macro_precision, macro_recall with bootstrap-over-problems intervals.

    Tables without predicted/gold labels give {}.
    """
    if table.predicted is None or table.gold is None:
        return {}
    shape = (table.n_problems, table.repeats)
    n_labels = len(table.labels)
    pred = view(table.predicted, np.int64, table.n_cells, "predicted").reshape(shape)
    gold = view(table.gold, np.int64, table.n_cells, "gold").reshape(shape)
    score = view(table.score, np.float64, table.n_cells, "score").reshape(shape)
    status = np.frombuffer(bytes(table.status), dtype=np.uint8).reshape(shape)
    if n_labels == 0:
        n_labels = int(max(pred.max(initial=-1), gold.max(initial=-1))) + 1
    counted = (gold >= 0) & (gold < n_labels) & ((status == OK) | np.isfinite(score))
    gold = np.where(counted, gold, -1)
    pred = np.where(pred < n_labels, pred, -1)
    keep = np.flatnonzero(counted.any(axis=1))
    n = int(keep.size)
    details: dict[str, Any] = {
        "n_problems_with_samples": n,
        "n_cells": int(counted.sum()),
        "n_unparsed": int((counted & (pred < 0)).sum()),
        "n_flagged_problems": int(table.n_problems - n),
    }
    if n == 0:
        details["reason"] = "no cell has a gold label and a counted outcome"
        return {key: MetricValue(value=None, details=dict(details)) for key in KEYS}
    # per cell, the class slot each of (tp, support, predicted) counts in; slot n_labels: the cell adds nothing there
    g, p, valid = gold[keep], pred[keep], gold[keep] >= 0
    slots = (np.where(valid & (p == g), g, n_labels), np.where(valid, g, n_labels), np.where(valid & (p >= 0), p, n_labels))
    dense = n * 3 * n_labels <= DENSE_LIMIT
    # dense: replicate counts = (how often each problem was drawn) @ (per-problem counts); integer-valued
    # float64 products and sums are exact, so the result does not depend on BLAS summation order
    per_problem_counts = np.concatenate(_counts_per_cell(slots, np.arange(n), n_labels), axis=1) if dense else None
    tp, support, predicted = _counts_per_cell(slots, np.arange(n)[None, :], n_labels)
    point = _scores_from_counts(tp, support, predicted)
    per_class = {
        table.labels[label] if label < len(table.labels) else str(label): {
            **{key: float(x[0, label]) for key, x in zip(("precision", "recall", "f1"), point[4:])},
            "support": int(support[0, label]),
        }
        for label in range(n_labels)
        if support[0, label] > 0 or predicted[0, label] > 0
    }

    def statistic(idx: np.ndarray) -> np.ndarray:
        if per_problem_counts is None:
            counts = _counts_per_cell(slots, idx, n_labels)
        else:
            counts = tuple(np.split(_row_counts(idx, n) @ per_problem_counts, 3, axis=1))
        return np.stack(_scores_from_counts(*counts)[:4], axis=1)

    per_draw = 2 if dense else table.repeats * 3  # elements held per drawn problem
    reps = bootstrap_over_problems(statistic, n, options, cells_per_problem=per_draw)
    out: dict[str, MetricValue] = {}
    for j, key in enumerate(KEYS):
        low, high, se, dropped = percentile_interval(reps[:, j], options.confidence)
        d = {**details, "bootstrap_samples": int(options.bootstrap_samples), "seed": int(options.seed)}
        if dropped:
            d["bootstrap_dropped"] = dropped
        if key == "macro_f1":
            d["per_class"] = per_class
        if low is None:
            d["reason"] = (
                "every bootstrap replicate is the same value: resampling the problems shows no spread, "
                "and [value, value] would claim certainty; no interval"
                if se is not None
                else "interval needs >= 2 usable bootstrap replicates"
            )
        method = "none" if low is None else "bootstrap"
        out[key] = MetricValue(value=float(point[j][0]), stderr=se, ci_low=low, ci_high=high, ci_method=method, n=n, details=d)
    return out
