"""Statistics of the metrics plugin against known answers: exact references, scipy, and simulation.

scipy is the reference here only; the plugin never imports it.
"""

from __future__ import annotations

import math
from array import array
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from shardeval.results.metrics import OK, MetricOptions, ScoreTable
from shardeval_metrics import dist
from shardeval_metrics.metrics import accuracy, pass_at_k, perplexity
from shardeval_metrics.stats import clustered_se, pass_at_k as pass_at_k_values, per_problem, variance_split

OPTS = MetricOptions()


def table(x: np.ndarray, clusters: np.ndarray | None = None, extra: dict[str, np.ndarray] | None = None) -> ScoreTable:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    p, r = x.shape
    return ScoreTable(
        benchmark="t",
        n_problems=p,
        repeats=r,
        score=array("d", x.ravel().tobytes()),
        status=bytearray([OK]) * (p * r),
        cluster=None if clusters is None else array("i", np.asarray(clusters, dtype=np.int32).tobytes()),
        cluster_names=[] if clusters is None else [f"c{i}" for i in range(int(np.max(clusters)) + 1)],
        extra={k: array("d", np.asarray(v, dtype=np.float64).ravel().tobytes()) for k, v in (extra or {}).items()},
    )


# --- pass@k ------------------------------------------------------------------------------------


def reference_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_exhaustive_small_n() -> None:
    """Every (n, c, k) with n <= 60, in one vectorised call per k, against exact fractions."""
    worst = 0.0
    for k in range(1, 61):
        ns, cs = zip(*[(n, c) for n in range(k, 61) for c in range(n + 1)])
        got = pass_at_k_values(np.array(ns), np.array(cs), k)
        want = np.array([float(reference_pass_at_k(n, c, k)) for n, c in zip(ns, cs)])
        worst = max(worst, float(np.max(np.abs(got - want))))
    assert worst < 1e-12


@pytest.mark.parametrize("n", [100, 200, 500, 1000])
def test_pass_at_k_large_n(n: int) -> None:
    cs = np.arange(n + 1)
    for k in (1, 2, 5, 10, 50, 100, n // 2, n):
        got = pass_at_k_values(np.full(cs.shape, n), cs, k)
        want = np.array([float(reference_pass_at_k(n, int(c), k)) for c in cs])
        assert np.max(np.abs(got - want)) < 1e-12, k


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 300).flatmap(
        lambda k: st.tuples(
            st.just(k),
            st.lists(st.integers(k, 400).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))), min_size=1, max_size=30),
        )
    )
)
def test_pass_at_k_mixed_arrays(case: tuple[int, list[tuple[int, int]]]) -> None:
    """Arbitrary mixes of (n, c) pairs (repeated, unsorted) keep every problem's own value."""
    k, pairs = case
    n = np.array([p[0] for p in pairs])
    c = np.array([p[1] for p in pairs])
    got = pass_at_k_values(n, c, k)
    want = np.array([float(reference_pass_at_k(a, b, k)) for a, b in pairs])
    assert np.max(np.abs(got - want)) < 1e-12


def test_pass_at_k_edges() -> None:
    assert pass_at_k_values(np.array([5]), np.array([0]), 3)[0] == 0.0
    assert pass_at_k_values(np.array([5]), np.array([3]), 3)[0] == 1.0  # n - c < k
    assert pass_at_k_values(np.array([5]), np.array([5]), 5)[0] == 1.0
    with pytest.raises(ValueError):
        pass_at_k_values(np.array([2]), np.array([1]), 3)


# --- distributions -----------------------------------------------------------------------------

PS = [
    1e-6,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.4,
    0.49,
    0.51,
    0.6,
    0.8,
    0.9,
    0.95,
    0.975,
    0.99,
    0.995,
    0.999,
    0.9995,
    1 - 1e-6,
]


def test_t_ppf_matches_scipy() -> None:
    worst = 0.0
    for df in range(1, 201):
        ref = sps.t.ppf(PS, df)
        for p, r in zip(PS, ref):
            got = dist.t_ppf(p, df)
            worst = max(worst, abs(got - r) / max(1.0, abs(r)))
    assert worst < 1e-10
    # unbounded-ish and fractional df, and the exact symmetric points
    for df in (0.5, 1.5, 2.5, 7.25, 300, 1000, 10_000):
        for p in (0.001, 0.025, 0.3, 0.9, 0.975, 0.999):
            r = sps.t.ppf(p, df)
            assert abs(dist.t_ppf(p, df) - r) <= 1e-10 * max(1.0, abs(r)), (df, p)
    assert dist.t_ppf(0.5, 3) == 0.0
    assert dist.t_ppf(0.975, 1) == pytest.approx(12.706204736174707, rel=1e-13)
    assert dist.t_ppf(0.025, 2) == pytest.approx(-dist.t_ppf(0.975, 2), rel=1e-14)


def test_t_cdf_and_normal_match_scipy() -> None:
    ts = np.linspace(-40, 40, 401)
    for df in (1, 2, 3, 5, 10, 29, 100, 1000):
        ref = sps.t.cdf(ts, df)
        got = np.array([dist.t_cdf(float(t), df) for t in ts])
        assert np.max(np.abs(got - ref)) < 1e-13
        sf = np.array([dist.t_sf(float(t), df) for t in ts[ts > 5]])
        assert np.max(np.abs(sf / sps.t.sf(ts[ts > 5], df) - 1)) < 1e-10  # relative, far tail
    for p in PS:
        assert dist.normal_ppf(p) == pytest.approx(sps.norm.ppf(p), rel=1e-14, abs=1e-15)


def test_betainc_matches_scipy() -> None:
    from scipy.special import betainc

    for a in (0.5, 1, 2.5, 10, 100, 1e4):
        for b in (0.5, 1, 3, 50, 1e4):
            for x in (1e-6, 0.01, 0.3, 0.5, 0.7, 0.99):
                assert dist.betainc(a, b, x) == pytest.approx(betainc(a, b, x), rel=1e-9, abs=1e-300)


def wilson_reference(k: int, n: int, conf: float) -> tuple[float, float]:
    """The textbook form: (p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n)."""
    z = sps.norm.ppf(0.5 + conf / 2)
    p = k / n
    denom = 1 + z * z / n
    center = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (center - half) / denom, (center + half) / denom


@pytest.mark.parametrize("conf", [0.8, 0.9, 0.95, 0.99])
def test_wilson_matches_reference_and_inverts_the_score_test(conf: float) -> None:
    z = sps.norm.ppf(0.5 + conf / 2)
    for n in (1, 2, 5, 10, 29, 30, 100, 1000):
        for k in range(0, n + 1, max(1, n // 25)):
            low, high = dist.wilson_interval(k, n, conf)
            ref_low, ref_high = wilson_reference(k, n, conf)
            assert low == pytest.approx(max(0.0, ref_low), abs=1e-14)
            assert high == pytest.approx(min(1.0, ref_high), abs=1e-14)
            # each end is a p0 where the score statistic |p̂ − p0| / sqrt(p0(1−p0)/n) equals z
            for p0 in ([low] if k > 0 else []) + ([high] if k < n else []):
                if 0 < p0 < 1:
                    assert abs(k / n - p0) / math.sqrt(p0 * (1 - p0) / n) == pytest.approx(z, rel=1e-9)


def test_mcnemar_matches_scipy_binomtest() -> None:
    rng = np.random.default_rng(5)
    cases = [(0, 0), (0, 1), (1, 0), (3, 3), (0, 25), (3, 10), (10, 3), (40, 60)]
    cases += [tuple(int(v) for v in rng.integers(0, 400, 2)) for _ in range(60)]
    cases += [(4000, 4200), (9000, 9500), (12000, 11000), (30_000, 30_700)]  # the last beyond the exact-integer limit
    for b, c in cases:
        got = dist.mcnemar_exact(b, c)
        want = 1.0 if b + c == 0 else sps.binomtest(min(b, c), b + c, 0.5).pvalue
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300), (b, c)


# --- clustered SE, variance split ----------------------------------------------------------------


def clustered_se_loop(values: list[float], clusters: list[int]) -> float:
    n = len(values)
    mean = sum(values) / n
    groups: dict[int, float] = {}
    for v, g in zip(values, clusters):
        groups[g] = groups.get(g, 0.0) + (v - mean)
    big_g = len(groups)
    return math.sqrt(big_g / (big_g - 1) * sum(s * s for s in groups.values()) / (n * n))


def test_clustered_se_matches_loop() -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        n = int(rng.integers(5, 300))
        g = int(rng.integers(2, min(n, 40) + 1))
        clusters = rng.integers(0, g, n)
        _, codes = np.unique(clusters, return_inverse=True)
        values = rng.random(n)
        se, n_groups = clustered_se(values, codes)
        assert n_groups == len(set(clusters.tolist()))
        if n_groups >= 2:
            assert se == pytest.approx(clustered_se_loop(values.tolist(), clusters.tolist()), rel=1e-12)


def test_accuracy_clustered_matches_loop_and_t() -> None:
    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(12), 7)
    x = (rng.random((84, 3)) < 0.6).astype(float)
    x[rng.random(x.shape) < 0.1] = np.nan
    value = accuracy(table(x, clusters), MetricOptions(ci_method="clustered"))["accuracy"]
    s = np.nanmean(x, axis=1)
    se = clustered_se_loop(s.tolist(), clusters.tolist())
    assert value.ci_method == "clustered"
    assert accuracy(table(x, clusters), OPTS)["accuracy"].ci_method == "wilson-clustered"  # auto (issue 24)
    assert value.stderr == pytest.approx(se, rel=1e-12)
    crit = sps.t.ppf(0.975, 11)
    assert value.ci_low == pytest.approx(s.mean() - crit * se, rel=1e-12)
    assert value.ci_high == pytest.approx(s.mean() + crit * se, rel=1e-12)
    assert value.details["df"] == 11


def test_unknown_clusters_are_singletons_and_no_sharing_equals_clt() -> None:
    rng = np.random.default_rng(4)
    x = rng.random(50)
    a = accuracy(table(x, np.full(50, -1)), OPTS)["accuracy"]
    b = accuracy(table(x), OPTS)["accuracy"]
    assert a.ci_method == b.ci_method == "clt"
    assert a.stderr == pytest.approx(b.stderr, rel=1e-14)
    # a single shared cluster cannot give a clustered SE
    c = accuracy(table(x, np.zeros(50, dtype=int)), OPTS)["accuracy"]
    assert c.ci_method == "clt" and "cluster_note" in c.details


def test_variance_split_recovers_known_components_gaussian() -> None:
    rng = np.random.default_rng(7)
    n, k = 20_000, 4
    sigma_b, sigma_w = 0.3, 0.5
    x = 1.0 + rng.normal(0, sigma_b, (n, 1)) + rng.normal(0, sigma_w, (n, k))
    split = variance_split(x, per_problem(x))["variance_split"]
    # sampling SDs: within ≈ σ_w²·sqrt(2/(n(K−1))); between ≈ sqrt(2/n)·(σ_b² + σ_w²/K)
    tol_w = 5 * sigma_w**2 * math.sqrt(2 / (n * (k - 1)))
    tol_b = 5 * math.sqrt(2 / n) * (sigma_b**2 + sigma_w**2 / k)
    assert abs(split["sigma2_within"] - sigma_w**2) < tol_w
    assert abs(split["sigma2_between"] - sigma_b**2) < tol_b
    # se_if_repeats at the table's own K is the CLT stderr exactly
    value = accuracy(table(x), OPTS)["accuracy"]
    assert split["se_if_repeats"]["4"] == pytest.approx(value.stderr, rel=1e-12)
    assert value.details["variance_split"] == split


def test_variance_split_recovers_known_components_bernoulli() -> None:
    """p_i ~ Beta(2, 3): σ²_b = Var p = ab/((a+b)²(a+b+1)) = 0.04, σ²_w = E[p(1−p)] = 0.24 − 0.04 = 0.2."""
    rng = np.random.default_rng(8)
    n, k = 40_000, 8
    p = rng.beta(2, 3, (n, 1))
    x = (rng.random((n, k)) < p).astype(float)
    split = variance_split(x, per_problem(x))["variance_split"]
    assert abs(split["sigma2_within"] - 0.2) < 5 * math.sqrt(0.2 * 0.8 / (n * k)) + 0.002
    assert abs(split["sigma2_between"] - 0.04) < 0.004
    se = split["se_if_repeats"]
    assert se["1"] == pytest.approx(math.sqrt((0.04 + 0.2) / n), rel=0.05)
    assert se["32"] == pytest.approx(math.sqrt((0.04 + 0.2 / 32) / n), rel=0.05)


def test_variance_split_unequal_counts_uses_harmonic_mean() -> None:
    x = np.array([[1, 0, np.nan, np.nan], [1, 1, 1, 0], [0, np.nan, np.nan, np.nan]], dtype=float)
    split = variance_split(x, per_problem(x))["variance_split"]
    s = np.array([0.5, 0.75, 0.0])
    within = np.mean([np.var([1, 0], ddof=1), np.var([1, 1, 1, 0], ddof=1)])
    k_bar = 3 / (1 / 2 + 1 / 4 + 1)
    assert split["sigma2_within"] == pytest.approx(within)
    assert split["k_bar"] == pytest.approx(k_bar)
    assert split["sigma2_between"] == pytest.approx(max(0.0, np.var(s, ddof=1) - within / k_bar))


# --- coverage by simulation ---------------------------------------------------------------------

RUNS = 2000


def coverage(intervals: list[tuple[float, float]], truth: float) -> float:
    lo = np.array([i[0] for i in intervals])
    hi = np.array([i[1] for i in intervals])
    return float(np.mean((lo <= truth) & (truth <= hi)))


def interval(value) -> tuple[float, float]:
    return value.ci_low, value.ci_high


def test_coverage_bernoulli_clt() -> None:
    rng = np.random.default_rng(100)
    n, p = 200, 0.7
    runs = (rng.random((RUNS, n)) < p).astype(float)
    values = [accuracy(table(run), OPTS)["accuracy"] for run in runs]
    assert {v.ci_method for v in values} == {"wilson"}  # binary: a proportion's interval (issue 24; was CLT)
    assert abs(coverage([interval(v) for v in values], p) - 0.95) < 0.02


def test_coverage_bernoulli_extreme_uses_wilson_and_beats_wald() -> None:
    """n = 50, p = 0.04. (Exact coverage of any binomial interval oscillates with (n, p); Wilson's
    stays near nominal, 0.951 here, while Wald's is 0.867.)"""
    rng = np.random.default_rng(101)
    n, p = 50, 0.04
    runs = (rng.random((RUNS, n)) < p).astype(float)
    wilson_only = MetricOptions(ci_method="wilson")
    values = [accuracy(table(run), wilson_only)["accuracy"] for run in runs]
    assert {v.ci_method for v in values} == {"wilson"}
    assert abs(coverage([interval(v) for v in values], p) - 0.95) < 0.02
    # exact coverage over all outcomes k ~ Binomial(n, p): Wilson near nominal, Wald far below
    z = sps.norm.ppf(0.975)
    pmf = sps.binom.pmf(np.arange(n + 1), n, p)
    wilson = [accuracy(table(np.r_[np.ones(k), np.zeros(n - k)]), wilson_only)["accuracy"] for k in range(n + 1)]
    exact = sum(w for w, v in zip(pmf, wilson) if v.ci_low <= p <= v.ci_high)
    # auto (issue 24): Clopper-Pearson below 5 successes, where Wilson dips; at least nominal - 2 points
    auto = [accuracy(table(np.r_[np.ones(k), np.zeros(n - k)]), OPTS)["accuracy"] for k in range(n + 1)]
    assert {v.ci_method for v in auto[1:5]} == {"clopper-pearson"}
    assert sum(w for w, v in zip(pmf, auto) if v.ci_low <= p <= v.ci_high) >= 0.93
    wald = sum(w for k, w in enumerate(pmf) if abs(k / n - p) <= z * math.sqrt(k / n * (1 - k / n) / n))
    assert abs(exact - 0.95) < 0.02
    assert wald < 0.88


def test_coverage_repeats_with_problem_difficulty() -> None:
    """K = 4 samples of p_i ~ Beta(3, 2) per problem: the estimand is E[p] = 0.6."""
    rng = np.random.default_rng(102)
    n, k = 300, 4
    p = rng.beta(3, 2, (RUNS, n, 1))
    runs = (rng.random((RUNS, n, k)) < p).astype(float)
    runs[rng.random(runs.shape) < 0.05] = np.nan  # a few missing samples
    values = [accuracy(table(run), OPTS)["accuracy"] for run in runs]
    assert {v.ci_method for v in values} == {"wilson"}  # at the effective size (issue 24; was CLT)
    assert abs(coverage([interval(v) for v in values], 0.6) - 0.95) < 0.02
    # pass@2 on the same runs: E[1 − (1−p)²] = 1 − B(3, 4)/B(3, 2) = 1 − 0.2 = 0.8
    truth = 1 - math.exp(math.lgamma(3) + math.lgamma(4) - math.lgamma(7) - (math.lgamma(3) + math.lgamma(2) - math.lgamma(5)))
    assert truth == pytest.approx(0.8)
    values = [pass_at_k(table(run), OPTS)["pass@2"] for run in runs]
    assert abs(coverage([interval(v) for v in values], truth) - 0.95) < 0.02


def test_coverage_clustered_design() -> None:
    """40 clusters of 10 problems; cluster rates p_g ~ U(0.3, 0.9) (mean 0.6, ICC 0.125, design effect 2.1).

    The clustered interval is near nominal; the naive one (same data, clusters dropped) under-covers.
    """
    rng = np.random.default_rng(103)
    g, m = 40, 10
    clusters = np.repeat(np.arange(g), m)
    p = rng.uniform(0.3, 0.9, (RUNS, g))[:, clusters]
    runs = (rng.random((RUNS, g * m)) < p).astype(float)
    clustered = [accuracy(table(run, clusters), OPTS)["accuracy"] for run in runs]
    naive = [accuracy(table(run), OPTS)["accuracy"] for run in runs]
    assert {v.ci_method for v in clustered} == {"wilson-clustered"}  # issue 24: was the normal "clustered"
    assert {v.ci_method for v in naive} == {"wilson"}
    cov_clustered = coverage([interval(v) for v in clustered], 0.6)
    cov_naive = coverage([interval(v) for v in naive], 0.6)
    assert abs(cov_clustered - 0.95) < 0.02
    assert cov_naive < 0.88
    assert np.mean([c.stderr / v.stderr for c, v in zip(clustered, naive)]) > 1.3  # ~sqrt(2.1)


def test_coverage_perplexity_delta_method() -> None:
    """Documents of 20..200 tokens with per-token NLL rate r_i ~ U(1, 3): Σnll/Σtokens → E[r] = 2."""
    rng = np.random.default_rng(104)
    n = 200
    tokens = rng.integers(20, 201, (RUNS, n)).astype(float)
    nll = tokens * rng.uniform(1, 3, (RUNS, n))
    values = [perplexity(table(np.zeros(n), extra={"nll": a, "tokens": t}), OPTS) for a, t in zip(nll, tokens)]
    assert {v["token_nll"].ci_method for v in values} == {"delta"}
    assert abs(coverage([interval(v["token_nll"]) for v in values], 2.0) - 0.95) < 0.02
    assert abs(coverage([interval(v["perplexity"]) for v in values], math.exp(2.0)) - 0.95) < 0.02


def test_coverage_classification_bootstrap() -> None:
    """Gold classes with probabilities (.5, .3, .2); the prediction is right with probability .7, else
    uniform over {none, a, b, c}. The population metrics come from the expected confusion matrix."""
    from shardeval_metrics.classification import classification

    pg, right = np.array([0.5, 0.3, 0.2]), 0.7
    conf = np.zeros((3, 4))  # gold x (a, b, c, none)
    for g in range(3):
        conf[g, g] += pg[g] * right
        conf[g, [3, 0, 1, 2]] += pg[g] * (1 - right) / 4
    tp = np.diag(conf[:, :3])
    support, predicted = conf.sum(axis=1), conf[:, :3].sum(axis=0)
    precision, recall = tp / predicted, tp / support
    f1 = 2 * tp / (support + predicted)
    truth = {
        "macro_f1": f1.mean(),
        "weighted_f1": float(f1 @ support),
        "macro_precision": precision.mean(),
        "macro_recall": recall.mean(),
    }
    rng = np.random.default_rng(105)
    runs, n = 300, 200
    opts = MetricOptions(bootstrap_samples=400)
    hits = dict.fromkeys(truth, 0)
    for _ in range(runs):
        gold = rng.choice(3, size=n, p=pg)
        pred = np.where(rng.random(n) < right, gold, rng.integers(-1, 3, n))
        t = table((pred == gold).astype(float))
        t.gold, t.predicted, t.labels = array("i", gold.tolist()), array("i", pred.tolist()), ["a", "b", "c"]
        out = classification(t, opts)
        for key, value in truth.items():
            hits[key] += out[key].ci_low <= value <= out[key].ci_high
    for key in truth:
        assert abs(hits[key] / runs - 0.95) < 0.04, (key, hits[key] / runs)
