"""Intervals a reader can trust (issue 24, item 8): never zero-width at 0 or 1, not useless from a
handful of clusters, the method named beside every interval, `merge --ci-method` choosing it, and a
coverage simulation whose table every run prints.

The simulation calls the very function merge uses (`stats.mean_intervals`, vectorised over the
replicates); a sample of replicates is checked against `accuracy()` on a real ScoreTable, so the
vectorised path is the metric's path. Interval formulas are checked against scipy (binomtest's Wilson and exact intervals).
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest

from conftest import shardeval_cmd
from shard_factory import make_shard, record
from shardeval.results.metrics import OK, MetricOptions, ScoreTable
from shardeval.store.records import run_id
from shardeval_metrics.dist import clopper_pearson_interval
from shardeval_metrics.metrics import accuracy, pass_at_k
from shardeval_metrics.stats import mean_intervals, proportion_interval

OPTS = MetricOptions()


def proportion_confint(k: int, n: int, alpha: float = 0.05, method: str = "wilson") -> tuple[float, float]:
    """statsmodels' names (`wilson`, `beta` = Clopper-Pearson) on scipy's binomtest (statsmodels is
    not installed; scipy's intervals are the same formulas)."""
    ci = binomtest(k, n).proportion_ci(1 - alpha, method={"wilson": "wilson", "beta": "exact"}[method])
    return ci.low, ci.high


def table(rows, clusters=None) -> ScoreTable:
    x = np.asarray(rows, dtype=float)
    n, r = x.shape
    names = [f"c{i}" for i in range(max(clusters) + 1)] if clusters is not None else []
    return ScoreTable(
        "t",
        n,
        r,
        array("d", x.ravel()),
        bytearray([OK]) * (n * r),
        cluster=None if clusters is None else array("i", clusters),
        cluster_names=names,
    )


# --- the cases of the issue, and their class -----------------------------------------------------


def test_zero_of_23_in_two_categories_is_not_zero_width() -> None:
    """Today: clustered, stderr 0, [0, 0]. Now Wilson at n = 23: [0, 3.84/(23+3.84)]."""
    v = accuracy(table([[0]] * 23, [0] * 11 + [1] * 12), OPTS)["accuracy"]
    assert v.value == 0.0 and v.ci_low == 0.0
    assert v.ci_high == pytest.approx(proportion_confint(0, 23, method="wilson")[1], rel=1e-12)
    assert v.ci_method == "wilson-clustered"
    for entry in v.details["per_cluster"].values():  # each category's own interval, too
        assert entry["ci_low"] == 0.0 < 0.15 < entry["ci_high"] < 0.4 and entry["ci_method"] == "wilson"


def test_all_perfect_pass_at_1_with_repeats_is_not_zero_width() -> None:
    """Today: 30 problems x 3 repeats all right gave pass@1 [1, 1] (CLT, stderr 0). At 100 % the
    data cannot say how alike a problem's repeats are: each problem counts once (n = 30)."""
    out = pass_at_k(table([[1, 1, 1]] * 30), OPTS)
    for name in ("pass@1", "pass@2", "pass@3"):
        v = out[name]
        assert v.value == 1.0 and v.ci_high == 1.0, name
        assert v.ci_low == pytest.approx(proportion_confint(30, 30, method="wilson")[0], rel=1e-12), name
        assert v.ci_method == "wilson"
    # variant: accuracy with repeats at 0 %, and a run whose problems all score exactly 0.5
    zero = accuracy(table([[0, 0]] * 12), OPTS)["accuracy"]
    assert zero.ci_low == 0.0 and zero.ci_high == pytest.approx(proportion_confint(0, 12, method="wilson")[1])
    half = accuracy(table([[1, 0]] * 12), OPTS)["accuracy"]  # stderr 0: design effect 0, clamped to 1
    assert half.ci_low < 0.5 < half.ci_high and half.ci_method == "wilson"
    assert (half.ci_low, half.ci_high) == pytest.approx(proportion_confint(12, 24, method="wilson"), rel=1e-12)


def test_forty_items_in_two_categories_is_not_zero_to_one() -> None:
    """Today: 40 items in 2 categories gave a clustered t on 1 df, clipped to [0, 1]."""
    rows = [[1]] * 13 + [[0]] * 7 + [[1]] * 13 + [[0]] * 7  # both categories at 65 %
    v = accuracy(table(rows, [0] * 20 + [1] * 20), OPTS)["accuracy"]
    assert v.ci_method == "wilson-clustered"
    assert (v.ci_low, v.ci_high) == pytest.approx(proportion_confint(26, 40, method="wilson"), rel=1e-9)
    # variant: 55 % and 75 %, as chance alone could make them: wider (design effect 1.7), not [0, 1]
    rows = [[1]] * 11 + [[0]] * 9 + [[1]] * 15 + [[0]] * 5
    w = accuracy(table(rows, [0] * 20 + [1] * 20), OPTS)["accuracy"]
    assert w.details["design_effect"] > 1.5 and w.ci_method == "wilson-clustered"
    assert 0.3 < w.ci_low < v.ci_low and v.ci_high < w.ci_high < 0.9
    # 40 % and 90 %: a real difference between two categories says little about a third (honest:
    # wide); the interval stays inside [0, 1] and says why
    rows = [[1]] * 8 + [[0]] * 12 + [[1]] * 18 + [[0]] * 2
    far = accuracy(table(rows, [0] * 20 + [1] * 20), OPTS)["accuracy"]
    assert far.details["design_effect"] > 10 and far.details["n_effective"] < 1
    assert far.ci_method == "clopper-pearson-clustered" and 0 < far.ci_low < far.value < far.ci_high < 1
    # --ci-method clustered keeps the old normal interval for those who ask for it
    old = accuracy(table(rows, [0] * 20 + [1] * 20), MetricOptions(ci_method="clustered"))["accuracy"]
    assert (old.ci_low, old.ci_high, old.ci_method) == (0.0, 1.0, "clustered")


def test_formulas_match_scipy() -> None:
    for n in (1, 7, 23, 100, 1000):
        for k in sorted({0, 1, n // 3, n - 1, n}):
            for conf in (0.9, 0.95, 0.99):
                w = proportion_interval(k / n, float(n), conf, "wilson")
                assert np.allclose(w, proportion_confint(k, n, alpha=1 - conf, method="wilson"), rtol=1e-12, atol=1e-15)
                cp = clopper_pearson_interval(k, n, conf)
                assert np.allclose(cp, proportion_confint(k, n, alpha=1 - conf, method="beta"), rtol=1e-9, atol=1e-12), (k, n)


def test_ci_method_choices_on_one_table() -> None:
    rows = [[1]] * 3 + [[0]] * 37
    got = {
        m: accuracy(table(rows), MetricOptions(ci_method=m))["accuracy"] for m in ("auto", "wilson", "clopper-pearson", "clt", "clustered")
    }
    assert got["auto"].ci_method == "clopper-pearson"  # 3 successes: Wilson's coverage dips there
    assert (got["auto"].ci_low, got["auto"].ci_high) == pytest.approx(proportion_confint(3, 40, method="beta"), rel=1e-9)
    assert got["wilson"].ci_method == "wilson"
    assert (got["wilson"].ci_low, got["wilson"].ci_high) == pytest.approx(proportion_confint(3, 40, method="wilson"), rel=1e-12)
    assert got["clt"].ci_method == got["clustered"].ci_method == "clt"  # no clusters: the same normal interval
    # not a proportion: wilson falls back to the normal interval and says so
    v = accuracy(table([[0.2], [0.4], [0.9]] * 5), MetricOptions(ci_method="wilson"))["accuracy"]
    assert v.ci_method == "clt" and "not a proportion" in v.details["ci_method_note"]


# --- coverage simulation ------------------------------------------------------------------------

PS = (0.0, 0.01, 0.5, 0.99, 1.0)
NS = (10, 23, 100, 1000)
GS = (2, 3, 5, 10, 20, 50)
RUNS = 1500


def simulate(p: float, n: int, g: int, rho: float, rng: np.random.Generator):
    """RUNS replicates of n binary single-sample problems in g near-equal clusters whose rates are
    Beta with mean p and intra-cluster correlation rho (rho 0: the same rate everywhere).
    Returns (coverage, mean width, share of [0, 1] intervals, sample replicates for the check)."""
    sizes = np.array([len(a) for a in np.array_split(np.arange(n), g)])
    if rho > 0 and 0 < p < 1:
        k = 1 / rho - 1
        rates = rng.beta(p * k, (1 - p) * k, (RUNS, g))
    else:
        rates = np.full((RUNS, g), p)
    x = rng.binomial(sizes, rates)  # successes per cluster
    p_hat = x.sum(axis=1) / n
    if g < n:  # clustered SE of stats.clustered_se, from the cluster sums
        s = x - sizes * p_hat[:, None]
        se, groups = np.sqrt(g / (g - 1) * (s * s).sum(axis=1)) / n, g
    else:  # every problem its own cluster: the plain SE
        se, groups = np.sqrt(p_hat * (1 - p_hat) / (n - 1)), None
    got = mean_intervals(p_hat, se, np.full(RUNS, float(n)), n, groups, 0.95, "auto", (0.0, 1.0))
    covered = (got.low <= p) & (p <= got.high)
    return float(covered.mean()), float((got.high - got.low).mean()), float((got.high - got.low >= 0.999).mean()), x, sizes, got


def check_against_metric(x: np.ndarray, sizes: np.ndarray, got, g: int, n: int) -> None:
    """Two replicates through accuracy() on a real table: the same interval to 1e-12."""
    clusters = np.repeat(np.arange(g), sizes)
    for i in (0, len(x) // 2):
        rows = np.concatenate([np.r_[np.ones(k), np.zeros(m - k)] for k, m in zip(x[i], sizes)])[:, None]
        v = accuracy(table(rows, clusters.tolist()), OPTS)["accuracy"]
        assert (v.ci_low, v.ci_high) == pytest.approx((float(got.low[i]), float(got.high[i])), rel=1e-12, abs=1e-15)


def test_coverage_simulation_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Nominal 95 %: every cell of the grid (p x n x clusters) covers >= 93 %, and no cell's
    intervals are all [0, 1]. Rates that differ between clusters (rho 0.05) are printed too: with
    a handful of clusters and a rare outcome, no interval holds its level (docs/merge.md)."""
    rng = np.random.default_rng(24)
    lines, worst = [], 1.0
    for rho in (0.0, 0.05):
        lines += [
            "",
            f"coverage / mean width of 95 % intervals (auto), {RUNS} runs per cell, "
            f"cluster rates {'equal' if rho == 0 else f'Beta, ICC {rho}'}",
            f"{'n':>5} {'G':>3}  " + "  ".join(f"{f'p={p:g}':>13}" for p in PS),
        ]
        for n in NS:
            for g in GS:
                if g > n or (rho > 0 and g < 10):
                    continue
                cells = []
                for p in PS:
                    cov, width, full, x, sizes, got = simulate(p, n, g, rho, rng)
                    if rho == 0:
                        worst = min(worst, cov)
                        assert cov >= 0.93, (p, n, g, cov)
                        assert full < 0.5, (p, n, g, full)  # [0, 1] is no answer
                        if p in (0.01, 0.5):
                            check_against_metric(x, sizes, got, g, n)
                    elif g == 50 or p == 0.5 and n < 1000:
                        assert cov >= 0.93, (rho, p, n, g, cov)
                    cells.append(f"{cov:.3f}/{width:.3f}")
                lines.append(f"{n:>5} {g:>3}  " + "  ".join(f"{c:>13}" for c in cells))
    with capsys.disabled():  # the table is part of the test's output in every run (CI's log included)
        print("\n".join(lines) + f"\nworst coverage with equal rates: {worst:.3f}")


# --- merge --ci-method, and the method beside every interval --------------------------------------


def categorised_run(root: Path, n: int = 23) -> None:
    """One shard, n problems in two categories, every answer wrong (0/23)."""
    recs = [record("arith", p, 0, 0, 0.0, run=run_id("sha256:test"), cluster="ab"[p % 2]) for p in range(n)]
    make_shard(str(root), 0, 1, n_problems=n, records=recs, metrics=["accuracy", "pass@k"])


def test_merge_ci_method_flag_and_the_method_beside_every_interval(tmp_path: Path) -> None:
    run = tmp_path / "run"
    categorised_run(run)
    bad = shardeval_cmd("merge", str(run), "--ci-method", "bayes")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "--ci-method" in bad.stderr and "wilson" in bad.stderr
    assert not (run / "merged").exists()
    # forced normal intervals at 0/23 have no spread to measure: no interval, not [0, 0] (H8d)
    for method, expected in (("clustered", "none"), ("auto", "wilson-clustered"), ("clopper-pearson", "clopper-pearson-clustered")):
        done = shardeval_cmd("merge", str(run), "--ci-method", method)
        assert done.returncode == 0, done.stderr
        scores = json.loads((run / "merged" / "scores.json").read_text())["arith"]["metrics"]
        acc = scores["accuracy"]
        assert acc["ci_method"] == expected
        if method != "clustered":
            assert acc["ci_high"] > 0.1  # never [0, 0]
        else:
            assert acc.get("ci_low") is None and "no spread" in acc["details"]["reason"] and "auto" in acc["details"]["reason"]
        report = (run / "merged" / "report.md").read_text()
        assert f"| {expected} |" in report  # the metrics table
        per = [line for line in report.splitlines() if line.startswith("| a |") or line.startswith("| b |")]  # noqa: PIE810
        assert len(per) == 2 and all(line.rstrip(" |").split("|")[-2].strip() for line in per)
        assert all(acc["details"]["per_cluster"][c]["ci_method"] in line for c, line in zip("ab", per))
    html = run / "merged" / "report.html"
    if html.exists():  # the plotting extra is installed: the page names the method too
        assert "clustered" in html.read_text()


def test_beta_quantile_matches_scipy_on_real_parameters() -> None:
    """Clopper-Pearson at an effective (real) size needs Beta quantiles at real shapes."""
    from scipy.stats import beta

    from shardeval_metrics.dist import beta_ppf

    rng = np.random.default_rng(9)
    for _ in range(300):
        q = float(rng.choice([0.005, 0.025, 0.05, 0.5, 0.95, 0.975, 0.995]))
        a, b = (float(10 ** rng.uniform(-2, 4)) for _ in range(2))
        want = float(beta.ppf(q, a, b))
        assert beta_ppf(q, a, b) == pytest.approx(want, rel=1e-8, abs=1e-60), (q, a, b)
