"""Paired differences against a baseline (the sweep's vs_baseline statistics) on tables with known answers."""

from __future__ import annotations

import json
import math
from array import array

import numpy as np
import pytest
from scipy import stats as sps

from shardeval import plugins
from shardeval.results.metrics import OK, MetricOptions, ScoreTable
from shardeval_metrics.dist import mcnemar_exact
from shardeval_metrics.paired import holm, paired_difference, paired_differences

OPTS = MetricOptions()
NAN = math.nan


def table(x, *, ids=None, benchmark="b") -> ScoreTable:
    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    p, r = x.shape
    return ScoreTable(
        benchmark=benchmark,
        n_problems=p,
        repeats=r,
        score=array("d", x.ravel().tobytes()),
        status=bytearray([OK]) * (p * r),
        problem_ids=None if ids is None else list(ids),
    )


def strict_json(result) -> None:
    json.dumps(result, allow_nan=False)


def hand_clustered(a: np.ndarray, b: np.ndarray, confidence: float = 0.95):
    """diff, stderr, interval and t-test p by the clustered formula, problem by problem."""
    groups = []
    for ra, rb in zip(a, b):
        keep = np.isfinite(ra) & np.isfinite(rb)
        if keep.any():
            groups.append(rb[keep] - ra[keep])
    d = np.concatenate(groups)
    n, g = d.size, len(groups)
    sums = np.array([np.sum(x - d.mean()) for x in groups])
    se = math.sqrt(g / (g - 1) * np.sum(sums**2) / n**2)
    crit = sps.t.ppf(0.5 + confidence / 2, g - 1)
    p = 2 * sps.t.sf(abs(d.mean()) / se, g - 1)
    return d.mean(), se, d.mean() - crit * se, d.mean() + crit * se, p, n, g


def test_mcnemar_path_equals_the_exact_test_on_known_discordant_counts() -> None:
    # 10 both right, 12 baseline right / other wrong, 5 baseline wrong / other right, 13 both wrong
    a = np.array([1] * 10 + [1] * 12 + [0] * 5 + [0] * 13, dtype=float)
    b = np.array([1] * 10 + [0] * 12 + [1] * 5 + [0] * 13, dtype=float)
    order = np.random.default_rng(0).permutation(a.size)
    r = paired_difference(table(a[order]), table(b[order]), OPTS)
    strict_json(r)
    assert r["test"] == "mcnemar_exact"
    assert r["discordant"] == {"baseline_right_other_wrong": 12, "baseline_wrong_other_right": 5}
    assert r["p_value"] == mcnemar_exact(12, 5) == pytest.approx(sps.binomtest(5, 17, 0.5).pvalue)
    assert r["diff"] == pytest.approx((5 - 12) / 40)
    assert r["baseline_mean"] == pytest.approx(22 / 40) and r["other_mean"] == pytest.approx(15 / 40)
    assert r["n"] == r["n_problems"] == 40 and r["complete"] is True
    assert r["ci_low"] < r["diff"] < r["ci_high"]


def test_binary_with_one_shared_cell_per_problem_is_mcnemar_even_with_repeats() -> None:
    rng = np.random.default_rng(1)
    a, b = (rng.random((30, 2)) < 0.5).astype(float), (rng.random((30, 2)) < 0.5).astype(float)
    a[:, 1] = NAN  # the baseline answered only repeat 0: one shared cell per problem
    r = paired_difference(table(a), table(b), OPTS)
    assert r["test"] == "mcnemar_exact" and r["n"] == 30 and r["n_only_other"] == 30 and not r["complete"]
    n_b = int(((a[:, 0] == 1) & (b[:, 0] == 0)).sum())
    n_c = int(((a[:, 0] == 0) & (b[:, 0] == 1)).sum())
    assert r["p_value"] == mcnemar_exact(n_b, n_c)
    # with both repeats valid the cells of one problem are not independent: no McNemar
    b2 = (rng.random((30, 2)) < 0.5).astype(float)
    full = paired_difference(table(b), table(b2), OPTS)
    assert full["test"] == "paired_t" and full["discordant"] is None


def test_paired_t_with_repeats_is_the_clustered_formula() -> None:
    rng = np.random.default_rng(2)
    gain = 0.3 + rng.normal(size=(60, 1))  # b's gain varies by problem: one problem's cell differences are correlated
    a = rng.normal(size=(60, 4))
    b = a + gain + rng.normal(size=(60, 4))
    a[rng.random(a.shape) < 0.1] = NAN
    b[rng.random(b.shape) < 0.1] = NAN
    a[5], b[7, :] = NAN, NAN  # problems with no shared cell are not clusters
    r = paired_difference(table(a), table(b), OPTS)
    strict_json(r)
    diff, se, low, high, p, n, g = hand_clustered(a, b)
    assert r["test"] == "paired_t" and r["n"] == n and r["n_problems"] == g == 58 and r["df"] == g - 1
    assert r["diff"] == pytest.approx(diff, rel=1e-12)
    assert r["stderr"] == pytest.approx(se, rel=1e-12)
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))
    assert r["p_value"] == pytest.approx(p, rel=1e-7)
    assert r["n_only_baseline"] == int(np.isfinite(a).sum()) - n and r["n_only_other"] == int(np.isfinite(b).sum()) - n
    # the clustered SE is wider than treating the correlated cells as independent
    d = (b - a)[np.isfinite(a) & np.isfinite(b)]
    assert r["stderr"] > np.std(d, ddof=1) / math.sqrt(d.size)


def test_one_cell_per_problem_reduces_to_the_ordinary_paired_t_test() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(25), rng.random(25) + 0.1
    r = paired_difference(table(a), table(b), OPTS)
    assert r["test"] == "paired_t"
    assert r["stderr"] == pytest.approx(np.std(b - a, ddof=1) / 5.0, rel=1e-12)
    assert r["p_value"] == pytest.approx(sps.ttest_rel(b, a).pvalue, rel=1e-7)


def test_matching_by_ids_never_pairs_different_problems() -> None:
    rng = np.random.default_rng(4)
    value = {f"p{i}": rng.random(3) for i in range(15)}  # a's scores per id; b = a + i/100 on the same id
    ids_a = [f"p{i}" for i in rng.permutation(10)]  # p0..p9
    ids_b = [f"p{i}" for i in rng.permutation(np.arange(3, 15))]  # p3..p14
    a = np.array([value[i] for i in ids_a])
    b = np.array([value[i] + int(i[1:]) / 100 for i in ids_b])
    r = paired_difference(table(a, ids=ids_a), table(b, ids=ids_b), OPTS)
    shared = range(3, 10)
    assert r["matched_by"] == "problem_ids"
    assert r["diff"] == pytest.approx(np.mean([i / 100 for i in shared]), rel=1e-12)  # a wrong pair would add noise
    assert r["n"] == 21 and r["n_problems"] == 7 and r["n_problems_unmatched"] == 3 + 5
    assert r["n_only_baseline"] == 9 and r["n_only_other"] == 15
    assert r["n_cells_baseline"] == 30 and r["n_cells_other"] == 36 and r["complete"] is False
    # the same ids, shuffled: complete
    again = paired_difference(table(a, ids=ids_a), table(a[::-1], ids=ids_a[::-1]), OPTS)
    assert again["complete"] is True and again["diff"] == 0.0 and again["p_value"] == 1.0


def test_matching_by_index_and_unequal_repeats() -> None:
    x = np.arange(15, dtype=float).reshape(5, 3) / 20
    r = paired_difference(table(x, ids=list("abcde")), table(np.vstack([x[:, :2], [[0, 0], [1, 1]]])), OPTS)
    assert r["matched_by"] == "index"  # only one table has ids
    assert r["n"] == 10 and r["n_problems"] == 5 and r["n_problems_unmatched"] == 2
    assert r["n_only_baseline"] == 5 and r["n_only_other"] == 4 and not r["complete"]
    assert r["diff"] == 0.0


def test_errors_in_one_table_are_left_out_and_counted() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.random((20, 2)), rng.random((20, 2))
    b[[1, 4, 9], [0, 1, 1]] = NAN
    r = paired_difference(table(a), table(b), OPTS)
    keep = np.isfinite(b)
    assert r["n"] == 37 and r["n_only_baseline"] == 3 and r["n_only_other"] == 0 and r["complete"] is False
    assert r["diff"] == pytest.approx(float(np.mean(b[keep] - a[keep])), rel=1e-12)
    assert r["baseline_mean"] == pytest.approx(float(a[keep].mean()), rel=1e-12)


def test_degenerate_pairs_never_raise() -> None:
    empty = paired_difference(table(np.full(4, NAN)), table(np.ones(4)), OPTS)
    strict_json(empty)
    assert empty["n"] == 0 and empty["diff"] is None and empty["p_value"] is None and empty["test"] == "none"
    assert empty["n_only_other"] == 4 and not empty["complete"]
    one = paired_difference(table([[0.2, 0.4]]), table([[0.5, 0.9]]), OPTS)  # one problem: no interval
    assert one["diff"] == pytest.approx(0.4) and one["stderr"] is None and one["p_value"] is None
    shift = paired_difference(table([[0.25, 0.5], [0.125, 0.375]]), table([[0.75, 1.0], [0.625, 0.875]]), OPTS)
    # every problem +0.5: no spread is no certainty (was stderr 0, p 0.0 from two problems, [0.5, 0.5])
    assert shift["stderr"] is None and shift["p_value"] == 0.5 and shift["test"] == "sign_exact"
    assert shift["ci_low"] < 0.5 < shift["ci_high"] and shift["ci_method"] == "no-variation-bound"
    same = paired_difference(table(np.full((3, 2), 0.5)), table(np.full((3, 2), 0.5)), OPTS)
    assert same["p_value"] == 1.0 and same["diff"] == 0.0


def test_holm_worked_example_and_none() -> None:
    assert holm([0.01, None, 0.04, 0.03, 0.005]) == pytest.approx([0.03, None, 0.06, 0.06, 0.02])
    assert holm([]) == [] and holm([None, None]) == [None, None]
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    p = np.random.default_rng(6).random(40) ** 3
    adj = np.array(holm(p.tolist()))
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= 0) and np.all(adj >= p) and np.all(adj <= 1.0)
    assert adj[order[0]] == pytest.approx(40 * p[order[0]])


def test_interval_coverage_and_sign_in_simulation() -> None:
    """True difference 0.1 with a gain that varies by problem (-0.3 or +0.5): the repeats of one
    problem move together, so an interval that treated cells as independent would cover ~87 %."""
    rng = np.random.default_rng(7)
    trials, problems, repeats, delta = 200, 300, 4, 0.1
    covered = positive = 0
    for _ in range(trials):
        p = rng.uniform(0.3, 0.5, size=(problems, 1))
        gain = np.where(rng.random((problems, 1)) < 0.5, -0.3, 0.5)
        a = (rng.random((problems, repeats)) < p).astype(float)
        b = (rng.random((problems, repeats)) < p + gain).astype(float)
        r = paired_difference(table(a), table(b), OPTS)
        assert r["test"] == "paired_t"
        covered += r["ci_low"] <= delta <= r["ci_high"]
        positive += r["diff"] > 0
    assert 0.91 <= covered / trials <= 0.99, covered  # nominal 0.95; binomial sd over 200 trials ~0.015
    assert positive >= 0.99 * trials, positive


def test_hook_gives_one_family_with_holm_across_benchmarks() -> None:
    rng = np.random.default_rng(8)
    base = {name: (rng.random(200) < 0.6).astype(float) for name in ("gsm8k", "mmlu")}
    pairs = [
        (table(base[name], benchmark=name), table(np.where(rng.random(200) < shift, 1.0, base[name]), benchmark=name))
        for name in ("gsm8k", "mmlu")
        for shift in (0.0, 0.05, 0.3)
    ]
    out = plugins.hooks().paired_differences(pairs=pairs, options=MetricOptions(confidence=0.9))
    strict_json(out)
    assert [r["benchmark"] for r in out] == [b.benchmark for _, b in pairs]
    assert [r["p_holm"] for r in out] == holm([r["p_value"] for r in out])
    assert out == paired_differences(pairs, MetricOptions(confidence=0.9))
    assert all(r["p_holm"] >= r["p_value"] for r in out) and out[2]["p_holm"] < 0.01 and out[0]["p_holm"] == 1.0
    assert out[0]["confidence"] == 0.9
