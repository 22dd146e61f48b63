"""Paired comparison of two runs (compare_tables) on constructed pairs with known answers."""

from __future__ import annotations

import json
import math
from array import array

import numpy as np
import pytest
from scipy import stats as sps

from shardeval.results.metrics import OK, MetricOptions, ScoreTable
from shardeval_metrics.compare import compare_tables

OPTS = MetricOptions()


def table(x, *, ids=None, clusters=None) -> ScoreTable:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    p, r = x.shape
    return ScoreTable(
        benchmark="cmp",
        n_problems=p,
        repeats=r,
        score=array("d", x.ravel().tobytes()),
        status=bytearray([OK]) * (p * r),
        cluster=None if clusters is None else array("i", np.asarray(clusters, dtype=np.int32).tobytes()),
        cluster_names=[] if clusters is None else [f"g{i}" for i in range(int(np.max(clusters)) + 1)],
        problem_ids=None if ids is None else list(ids),
    )


def strict_json(result: dict) -> None:
    json.dumps(result, allow_nan=False)  # plain, finite, JSON-able


def test_identical_runs() -> None:
    rng = np.random.default_rng(1)
    x = (rng.random(80) < 0.6).astype(float)
    r = compare_tables(table(x), table(x), OPTS)
    strict_json(r)
    assert r["diff"] == 0.0 and r["stderr"] is None  # no spread: no standard error (issue 24, H9b)
    assert r["ci_low"] < 0.0 < r["ci_high"]  # the same answers on 80 problems do not prove the same model
    assert r["ci_method"] == "no-variation-bound"
    assert r["a_mean"] == r["b_mean"] == pytest.approx(x.mean())
    assert r["n_shared"] == 80 and r["n_only_a"] == 0 and r["n_only_b"] == 0
    assert r["correlation"] == pytest.approx(1.0)
    assert r["mcnemar"]["a_right_b_wrong"] == 0 and r["mcnemar"]["a_wrong_b_right"] == 0
    assert r["mcnemar"]["p_value"] == 1.0
    assert r["p_value"] == 1.0


def test_identical_noisy_repeats_interval_contains_zero() -> None:
    rng = np.random.default_rng(2)
    x = rng.random((50, 4))
    r = compare_tables(table(x), table(x[:, ::-1]), OPTS)  # same samples, other order: same means
    assert r["diff"] == pytest.approx(0.0, abs=1e-15)
    assert r["ci_low"] <= 0.0 <= r["ci_high"]
    assert r["mcnemar"] is None and "binary" in r["mcnemar_reason"]


def test_known_shift_detected_with_exact_numbers() -> None:
    rng = np.random.default_rng(3)
    n = 200
    a = rng.random(n)
    b = a + 0.05 + rng.normal(0, 0.1, n)
    r = compare_tables(table(a), table(b), OPTS)
    d = b - a
    se = d.std(ddof=1) / math.sqrt(n)
    z = sps.t.ppf(0.975, n - 1)  # issue 24: the sweep's paired interval, t on n - 1 df (was z)
    assert r["ci_method"] == "paired-t" and r["clustered_by"] == "problem"
    assert r["diff"] == pytest.approx(d.mean(), rel=1e-12)
    assert r["stderr"] == pytest.approx(se, rel=1e-12)
    assert r["ci_low"] == pytest.approx(d.mean() - z * se, rel=1e-12)
    assert r["ci_high"] == pytest.approx(d.mean() + z * se, rel=1e-12)
    assert r["ci_low"] > 0  # the shift is detected
    assert r["p_value"] == pytest.approx(2 * sps.t.sf(abs(d.mean() / se), n - 1), rel=1e-9)
    assert r["p_value"] < 1e-6
    assert r["correlation"] == pytest.approx(np.corrcoef(a, b)[0, 1], rel=1e-12)
    assert r["a_mean"] == pytest.approx(a.mean()) and r["b_mean"] == pytest.approx(b.mean())


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_mde_formula(confidence: float) -> None:
    rng = np.random.default_rng(4)
    a, b = rng.random(120), rng.random(120)
    r = compare_tables(table(a), table(b), MetricOptions(confidence=confidence))
    want = (sps.t.ppf(1 - (1 - confidence) / 2, 119) + sps.t.ppf(0.8, 119)) * r["stderr"]  # t on the paired df
    assert r["mde"] == pytest.approx(want, rel=1e-12)
    assert "mde_formula" in r["details"]


def test_mcnemar_matches_scipy() -> None:
    # 15 discordant A-right/B-wrong, 5 A-wrong/B-right, 30 both right, 10 both wrong
    a = [1] * 15 + [0] * 5 + [1] * 30 + [0] * 10
    b = [0] * 15 + [1] * 5 + [1] * 30 + [0] * 10
    r = compare_tables(table(a), table(b), OPTS)
    assert r["mcnemar"]["a_right_b_wrong"] == 15 and r["mcnemar"]["a_wrong_b_right"] == 5
    assert r["mcnemar"]["p_value"] == pytest.approx(sps.binomtest(5, 20, 0.5).pvalue, rel=1e-12)
    assert r["mcnemar_reason"] is None
    rng = np.random.default_rng(5)
    for _ in range(30):
        n = int(rng.integers(10, 400))
        xa = (rng.random(n) < rng.uniform(0.2, 0.8)).astype(float)
        xb = np.where(rng.random(n) < rng.uniform(0, 0.5), 1 - xa, xa)
        res = compare_tables(table(xa), table(xb), OPTS)["mcnemar"]
        bb, cc = res["a_right_b_wrong"], res["a_wrong_b_right"]
        assert bb == int(((xa == 1) & (xb == 0)).sum()) and cc == int(((xa == 0) & (xb == 1)).sum())
        want = 1.0 if bb + cc == 0 else sps.binomtest(min(bb, cc), bb + cc, 0.5).pvalue
        assert res["p_value"] == pytest.approx(want, rel=1e-10)


def test_mcnemar_needs_single_binary_samples() -> None:
    r = compare_tables(table([[1, 0], [1, 1], [0, 0]]), table([[1, 1], [0, 1], [0, 0]]), OPTS)
    assert r["mcnemar"] is None and "one shared sample" in r["mcnemar_reason"]
    r = compare_tables(table([0.5, 1.0, 0.0]), table([1.0, 1.0, 0.0]), OPTS)
    assert r["mcnemar"] is None and "binary" in r["mcnemar_reason"]
    # repeats > 1 but a single valid sample each is still one Bernoulli per problem
    nan = float("nan")
    r = compare_tables(table([[1, nan], [nan, 0], [1, nan]]), table([[0, nan], [nan, 0], [1, nan]]), OPTS)
    assert r["mcnemar"]["a_right_b_wrong"] == 1


def test_matching_by_problem_ids() -> None:
    nan = float("nan")
    a = table([1.0, 0.0, 1.0, nan, 0.5], ids=["p1", "p2", "p3", "p4", "p5"])
    b = table([0.0, 1.0, 1.0, 1.0, 0.0, 0.25], ids=["p3", "p9", "p1", "p4", "p2", "p8"])
    r = compare_tables(a, b, OPTS)
    strict_json(r)
    assert r["matched_by"] == "problem_ids"
    # shared ids p1, p2, p3, p4; p4 has no valid sample in A
    assert r["n_shared"] == 3 and r["n_shared_without_samples"] == 1
    assert r["n_only_a"] == 1 and r["n_only_b"] == 2
    # pairs (A, B): p1 (1, 1), p2 (0, 0), p3 (1, 0)
    assert r["a_mean"] == pytest.approx(2 / 3) and r["b_mean"] == pytest.approx(1 / 3)
    assert r["diff"] == pytest.approx(-1 / 3)
    assert r["mcnemar"]["a_right_b_wrong"] == 1 and r["mcnemar"]["a_wrong_b_right"] == 0


def test_matching_by_index_without_ids() -> None:
    r = compare_tables(table([1.0, 0.0, 1.0, 1.0]), table([1.0, 1.0]), OPTS)
    assert r["matched_by"] == "index"
    assert r["n_shared"] == 2 and r["n_only_a"] == 2 and r["n_only_b"] == 0
    assert r["diff"] == pytest.approx(0.5)


def test_clustered_difference_uses_a_clusters_and_t() -> None:
    rng = np.random.default_rng(6)
    g, m = 8, 5
    clusters = np.repeat(np.arange(g), m)
    a = rng.random(g * m)
    b = a + rng.normal(0.02, 0.1, g)[clusters] + rng.normal(0, 0.05, g * m)
    r = compare_tables(table(a, clusters=clusters), table(b), OPTS)
    d = b - a
    resid = d - d.mean()
    sums = np.array([resid[clusters == k].sum() for k in range(g)])
    se = math.sqrt(g / (g - 1) * float(sums @ sums)) / (g * m)
    t = sps.t.ppf(0.975, g - 1)
    assert r["ci_method"] == "paired-t" and r["clustered_by"] == "category" and r["df"] == g - 1
    assert r["stderr"] == pytest.approx(se, rel=1e-12)
    assert r["ci_low"] == pytest.approx(d.mean() - t * se, rel=1e-10)
    assert r["mde"] == pytest.approx((t + sps.t.ppf(0.8, g - 1)) * se, rel=1e-10)
    assert r["p_value"] == pytest.approx(2 * sps.t.sf(abs(d.mean() / se), g - 1), rel=1e-9)


def test_degenerate_inputs() -> None:
    nan = float("nan")
    r = compare_tables(table([nan, nan]), table([1.0, 0.0]), OPTS)
    strict_json(r)
    assert r["n_shared"] == 0 and r["diff"] is None and "reason" in r["details"]
    r = compare_tables(table([1.0]), table([0.0]), OPTS)
    assert r["diff"] == -1.0 and r["stderr"] is None and r["correlation"] is None


def test_deterministic() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.random((60, 3)), rng.random((60, 3))
    ids = [f"q{i}" for i in range(60)]
    one = json.dumps(compare_tables(table(a, ids=ids), table(b, ids=ids[::-1]), OPTS))
    two = json.dumps(compare_tables(table(a, ids=ids), table(b, ids=ids[::-1]), OPTS))
    assert one == two


def test_power_at_the_mde_and_coverage_by_simulation() -> None:
    """With the true difference set to the MDE, a 5 % two-sided test rejects ~80 % of the time,
    and the interval covers the true difference ~95 % of the time."""
    rng = np.random.default_rng(8)
    runs, n, sigma = 1500, 300, 0.2
    delta = (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) * sigma / math.sqrt(n)
    base = rng.random((runs, n))
    other = base + delta + rng.normal(0, sigma, (runs, n))
    results = [compare_tables(table(a), table(b), OPTS) for a, b in zip(base, other)]
    power = np.mean([r["ci_low"] > 0 or r["ci_high"] < 0 for r in results])
    cover = np.mean([r["ci_low"] <= delta <= r["ci_high"] for r in results])
    assert abs(power - 0.8) < 0.04
    assert abs(cover - 0.95) < 0.02
    assert np.mean([r["mde"] for r in results]) == pytest.approx(delta, rel=0.02)
