"""Power and sample size of the one-sided tests `shardeval gate` makes (standard library only).

Every test of the gate rejects when a statistic Z = (θ̂ − Δ0) / SE0 exceeds q = t_{df, 1−α}
(z_{1−α} when df is None), where SE0 is the standard error the test uses under its null
(sd_null / sqrt(n) per problem) and θ̂ ~ N(θ, sd_alt² / n). So, with diff = θ − Δ0 > 0 in the
direction of rejection,

    power(n) = P(T'_{df}(nc) > q · sd_null / sd_alt),   nc = diff · sqrt(n) / sd_alt

T' the noncentral t (`dist.nct_sf`). Two cases are statsmodels' own, to 1e-6 (tests/test_gate_power.py):

- sd_null = sd_alt, df = n − 1: the paired t test, `statsmodels.stats.power.TTestPower`
  (`ttest_power` here, every alternative).
- df = None (normal): `statsmodels.stats.power.normal_power_het`, and with statsmodels' pooled
  null variance `power_proportions_2indep` / `samplesize_proportions_2indep_onetail` for two
  independent proportions (`proportions_2indep_power`, `proportions_2indep_nobs`).

With sd_alt = 0 (a pilot that showed no spread) the power is a step: 1 once diff · sqrt(n) > q ·
sd_null. `solve_nobs` finds the real n where the power reaches a target; callers round up.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from shardeval_metrics.dist import nct_cdf, nct_sf, normal_cdf, normal_ppf, t_ppf

DfOf = Callable[[float], "float | None"]  # the degrees of freedom at n problems; None: normal


def problems_df(n: float) -> float | None:
    """Clustered by problem: G − 1 = n − 1 degrees of freedom."""
    return max(n - 1.0, 1e-9)


def fixed_df(df: float | None) -> DfOf:
    """Clustered by category (or normal): the same df at any number of problems."""
    return lambda n: df


def power(diff: float, n: float, alpha: float, sd_null: float, sd_alt: float, df: float | None, continuity: float = 0.0) -> float:
    """The chance that the one-sided test at level α rejects (module doc); diff > 0 favours rejection.
    `continuity`: the shift is diff − continuity/n (an exact test of counts, as a continuity-corrected
    z test: one effective discordant cell is continuity/n problems' worth of difference)."""
    if n <= 0:
        return 0.0
    diff -= continuity / n
    q = normal_ppf(1.0 - alpha) if df is None else t_ppf(1.0 - alpha, df)
    if sd_alt <= 0.0:
        return 1.0 if diff * math.sqrt(n) > q * sd_null else 0.0
    nc = diff * math.sqrt(n) / sd_alt
    if df is None:
        return normal_cdf(nc - q * sd_null / sd_alt)
    return nct_sf(q * sd_null / sd_alt, df, nc)


def solve_nobs(
    diff: float,
    target: float,
    alpha: float,
    sd_null: float,
    sd_alt: float,
    df_of: DfOf = problems_df,
    n_max: float = 1e12,
    continuity: float = 0.0,
) -> float:
    """The real n >= 2 at which `power` reaches `target` (math.inf when it never does: diff <= 0,
    or beyond n_max). Normal case in closed form (statsmodels' normal_sample_size_one_tail),
    else bisection on ln n to 1e-12 relative."""
    if diff <= 0.0 or not 0.0 < target < 1.0:
        return math.inf
    if all(df_of(x) is None for x in (2.0, 1e6)) and sd_alt > 0.0 and continuity == 0.0:
        root = ((normal_ppf(1.0 - alpha) * sd_null + normal_ppf(target) * sd_alt) / diff) ** 2
        return max(root, 0.0)

    def short(n: float) -> bool:
        if sd_alt <= 0.0:  # the step: reached once diff·sqrt(n) > q·sd_null
            df = df_of(n)
            q = normal_ppf(1.0 - alpha) if df is None else t_ppf(1.0 - alpha, df)
            return (diff - continuity / n) * math.sqrt(n) <= q * sd_null
        return power(diff, n, alpha, sd_null, sd_alt, df_of(n), continuity) < target

    lo, hi = 2.0, 4.0
    if not short(lo):
        return lo
    while short(hi):
        lo, hi = hi, hi * 2.0
        if hi > n_max:
            return math.inf
    while hi - lo > 1e-12 * hi:
        mid = math.sqrt(lo * hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if short(mid) else (lo, mid)
    return hi


def solve_diff(
    n: float, target: float, alpha: float, sd_of: Callable[[float], tuple[float, float]], df: float | None, continuity: float = 0.0
) -> float:
    """The smallest diff > 0 detected with power `target` at n problems, where the standard
    deviations may depend on the diff itself (`sd_of(diff) -> (sd_null, sd_alt)`: a proportion's
    variance moves with it); bisection to 1e-12, math.inf when even diff = 1 is not detected."""
    if power(1.0, n, alpha, *sd_of(1.0), df, continuity) < target:
        return math.inf
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if power(mid, n, alpha, *sd_of(mid), df, continuity) < target else (lo, mid)
    return hi


def ttest_power(effect: float, nobs: float, alpha: float, df: float | None = None, alternative: str = "larger") -> float:
    """statsmodels.stats.power.ttest_power: the power of a one-sample (paired) t test of the
    standardized effect `effect` with `nobs` observations, df = nobs − 1 unless given."""
    df = nobs - 1.0 if df is None else df
    one = alpha / 2.0 if alternative == "two-sided" else alpha
    nc = effect * math.sqrt(nobs)
    out = 0.0
    if alternative in ("two-sided", "larger"):
        out += nct_sf(t_ppf(1.0 - one, df), df, nc)
    if alternative in ("two-sided", "smaller"):
        out += nct_cdf(t_ppf(one, df), df, nc)
    return min(out, 1.0)


def _sd_2indep(p1: float, p2: float) -> tuple[float, float]:
    """statsmodels' _std_2prop_power at ratio 1: (pooled sd under the null, sd under the alternative)."""
    pooled = (p1 + p2) / 2.0
    return math.sqrt(2.0 * pooled * (1.0 - pooled)), math.sqrt(p1 * (1.0 - p1) + p2 * (1.0 - p2))


def proportions_2indep_power(diff: float, prop2: float, nobs1: float, alpha: float) -> float:
    """statsmodels.stats.proportion.power_proportions_2indep(diff, prop2, nobs1, alpha=alpha,
    alternative="larger"): the z test of two independent proportions p1 = prop2 + diff and prop2,
    nobs1 each, pooled variance under the null."""
    sd_null, sd_alt = _sd_2indep(prop2 + diff, prop2)
    return power(diff, nobs1, alpha, sd_null, sd_alt, None)


def proportions_2indep_nobs(diff: float, prop2: float, target: float, alpha: float) -> float:
    """statsmodels.stats.proportion.samplesize_proportions_2indep_onetail(diff, prop2, power,
    alpha=alpha, alternative="larger"): the nobs1 reaching `target` (real)."""
    sd_null, sd_alt = _sd_2indep(prop2 + diff, prop2)
    return max(normal_ppf(1.0 - alpha) * sd_null + normal_ppf(target) * sd_alt, 0.0) ** 2 / diff**2
