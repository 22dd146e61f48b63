"""The power functions of `shardeval plan` and `gate` equal statsmodels' where statsmodels has
them (paired t: TTestPower; two independent proportions: power_proportions_2indep and
samplesize_proportions_2indep_onetail; the normal test with a null and an alternative variance:
normal_power_het), to 1e-6; and the noncentral t they rest on equals scipy's. Also the gate's
paired t path for graded scores."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy import stats as sps
from statsmodels.stats.power import TTestPower, normal_power_het
from statsmodels.stats.proportion import power_proportions_2indep, samplesize_proportions_2indep_onetail

from shardeval_metrics.dist import nct_cdf
from shardeval_metrics.power import (
    fixed_df,
    power,
    proportions_2indep_nobs,
    proportions_2indep_power,
    solve_diff,
    solve_nobs,
    ttest_power,
)


def test_noncentral_t_equals_scipy_in_the_series_and_in_the_integral():
    worst = 0.0
    for t, df, nc in itertools.product(
        [-5, -2, 0, 0.3, 1.7, 2.5, 6, 30, 100], [1, 2, 4.5, 9, 30, 200, 5000, 1e6], [-60, -40, -10, -0.5, 1, 2.9, 12, 36, 38, 45, 80]
    ):
        worst = max(worst, abs(nct_cdf(t, df, nc) - float(sps.nct.cdf(t, df, nc))))
    assert worst < 1e-9


@pytest.mark.parametrize("alternative", ["larger", "smaller", "two-sided"])
def test_paired_t_power_equals_ttestpower(alternative):
    sign = -1.0 if alternative == "smaller" else 1.0
    compared = 0
    for effect, nobs, alpha in itertools.product([0.05, 0.2, 0.5, 1.3], [3, 10, 57.5, 400, 5000], [0.01, 0.05, 0.1]):
        ours = ttest_power(sign * effect, nobs, alpha, alternative=alternative)
        theirs = TTestPower().power(sign * effect, nobs, alpha, alternative=alternative)
        assert 0.0 <= ours <= 1.0
        if math.isfinite(theirs):  # scipy's noncentral t gives NaN far in a tail (two-sided, nc > ~38)
            assert ours == pytest.approx(theirs, abs=1e-6)
            compared += 1
    assert compared >= 50  # of 60
    # the gate's own form of it: sd_null = sd_alt, df = n − 1
    assert power(0.02, 300, 0.05, 0.1, 0.1, 299) == pytest.approx(TTestPower().power(0.2, 300, 0.05, alternative="larger"), abs=1e-9)


def test_problems_needed_equal_ttestpower_solve_power():
    for effect, target, alpha in itertools.product([0.05, 0.2, 0.5], [0.8, 0.9], [0.05, 0.1]):
        ours = solve_nobs(effect, target, alpha, 1.0, 1.0)
        theirs = TTestPower().solve_power(effect, None, alpha, target, alternative="larger")
        assert ours == pytest.approx(theirs, rel=1e-6)
        assert power(effect, math.ceil(ours), alpha, 1.0, 1.0, math.ceil(ours) - 1) >= target


def test_independent_proportions_equal_statsmodels():
    for diff, prop2, nobs, alpha in itertools.product([0.01, 0.05, 0.2], [0.05, 0.5, 0.8], [50, 1319], [0.05, 0.025]):
        theirs = power_proportions_2indep(diff, prop2, nobs, alpha=alpha, alternative="larger", return_results=False)
        assert proportions_2indep_power(diff, prop2, nobs, alpha) == pytest.approx(theirs, abs=1e-6)
        n = samplesize_proportions_2indep_onetail(diff, prop2, 0.8, alpha=alpha, alternative="larger")
        assert proportions_2indep_nobs(diff, prop2, 0.8, alpha) == pytest.approx(n, rel=1e-6)


def test_two_variances_normal_equals_normal_power_het_and_t_tends_to_it():
    for diff, n, s0, s1 in itertools.product([0.01, 0.03], [100, 2000], [0.2, 0.5], [0.1, 0.5]):
        theirs = normal_power_het(diff, n, 0.05, std_null=s0, std_alternative=s1, alternative="larger")
        assert power(diff, n, 0.05, s0, s1, None) == pytest.approx(theirs, abs=1e-9)
        assert power(diff, n, 0.05, s0, s1, 1e7) == pytest.approx(theirs, abs=1e-5)
    # the smallest detectable difference inverts the power
    d = solve_diff(400, 0.8, 0.05, lambda _: (0.4, 0.4), 399)
    assert power(d, 400, 0.05, 0.4, 0.4, 399) == pytest.approx(0.8, abs=1e-9)
    assert solve_nobs(0.0, 0.8, 0.05, 1, 1) == math.inf
    # no spread in a pilot: the power is a step at diff·sqrt(n) = q·sd_null
    n = solve_nobs(0.02, 0.8, 0.05, 0.14, 0.0, fixed_df(None))
    assert n == pytest.approx((sps.norm.ppf(0.95) * 0.14 / 0.02) ** 2, rel=1e-9)


def test_graded_scores_take_the_paired_t_and_no_spread_its_bound():
    """Scores other than 0/1 (a judge's ratings): the paired t bounds; every problem alike: compare's
    no-variation bound at level 1 − 2α, never a zero-width GO."""
    import numpy as np
    from test_compare_stats import table

    from shardeval_metrics.decision import GO, INCONCLUSIVE, NO_GO, decide

    rng = np.random.default_rng(4)
    base = rng.uniform(0.3, 0.9, size=(400, 2))
    cand = np.clip(base + rng.normal(0, 0.02, base.shape), 0, 1)
    close = decide(table(base), table(cand), 0.02)
    assert close.method == "paired-t" and close.verdict == GO and close.lower > -0.02
    per_problem = (cand - base).mean(axis=1)  # clustered by problem: the paired t on per-problem means
    half = sps.t.ppf(0.95, 399) * per_problem.std(ddof=1) / np.sqrt(400)
    assert (close.lower, close.upper) == pytest.approx((per_problem.mean() - half, per_problem.mean() + half), abs=1e-12)
    worse = decide(table(base), table(np.clip(base - 0.05 + rng.normal(0, 0.02, base.shape), 0, 1)), 0.02)
    assert worse.verdict == NO_GO and worse.beyond_margin
    same = decide(table(base[:30]), table(base[:30].copy()), 0.02)
    assert same.method == "no-variation-bound" and same.verdict == INCONCLUSIVE and same.lower < -0.02 < 0 < same.upper
