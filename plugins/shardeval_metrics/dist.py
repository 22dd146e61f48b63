"""Distribution functions the metrics need, in the standard library only (no scipy at run time).

- `normal_ppf`: `statistics.NormalDist` (Wichura's AS241, ~1e-16).
- `betainc`: the regularized incomplete beta I_x(a, b) by its continued fraction, evaluated with
  the modified Lentz method (Numerical Recipes 6.4), on the side of the symmetry where it converges.
- `t_sf`, `t_cdf`, `t_ppf`: Student's t from I_x(df/2, 1/2); the quantile by safeguarded Newton
  steps on log P(T > t) inside a bracket (agrees with scipy.stats.t.ppf to ~1e-12 relative).
- `wilson_interval`: the Wilson score interval for a binomial proportion.
- `mcnemar_exact`: the exact two-sided McNemar test (a binomial test at 1/2 on
  the discordant pairs), in exact integer arithmetic up to 20,000 discordant pairs.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

_EPS = 1e-16
_TINY = 1e-300
_STD_NORMAL = NormalDist()


def normal_ppf(p: float) -> float:
    """The standard normal quantile."""
    return _STD_NORMAL.inv_cdf(p)


def normal_cdf(x: float) -> float:
    return _STD_NORMAL.cdf(x)


def _nonzero(v: float) -> float:
    """Lentz's guard: a value that would divide by (nearly) zero becomes _TINY."""
    return _TINY if abs(v) < _TINY else v


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz); converges fast for x < (a+1)/(a+b+2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 / _nonzero(1.0 - qab * x / qap)
    h = d
    max_iter = 300 + int(20 * math.sqrt(max(a, b)))
    for m in range(1, max_iter + 1):
        m2 = 2 * m
        # two Lentz steps per m: the even and the odd coefficient of the fraction
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 / _nonzero(1.0 + aa * d)
            c = _nonzero(1.0 + aa / c)
            delta = d * c
            h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def _stirling_corr(x: float) -> float:
    """lgamma(x) - [(x - 1/2) ln x - x + ln(2 pi)/2] for x >= 10 (error < 1e-17)."""
    x2 = 1.0 / (x * x)
    return (1.0 / 12.0 - x2 * (1.0 / 360.0 - x2 * (1.0 / 1260.0 - x2 * (1.0 / 1680.0 - x2 / 1188.0)))) / x


def log_beta(a: float, b: float) -> float:
    """ln B(a, b), without the cancellation of lgamma(a) + lgamma(b) - lgamma(a + b) at large a."""
    small, large = min(a, b), max(a, b)
    if small >= 10.0:
        s = small + large
        return (
            0.5 * math.log(2.0 * math.pi)
            - (large - 0.5) * math.log1p(small / large)
            - (small - 0.5) * math.log1p(large / small)
            - 0.5 * math.log(s)
            + _stirling_corr(small)
            + _stirling_corr(large)
            - _stirling_corr(s)
        )
    if large >= 10.0:
        # lgamma(large) - lgamma(large + small) from the Stirling form, in well-conditioned pieces
        s = small + large
        ratio = -(large - 0.5) * math.log1p(small / large) - small * math.log(s) + small + _stirling_corr(large) - _stirling_corr(s)
        return math.lgamma(small) + ratio
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def betainc(a: float, b: float, x: float, y: float | None = None) -> float:
    """Regularized incomplete beta I_x(a, b). Pass `y` = 1 - x when the caller has it exactly."""
    if a <= 0 or b <= 0:
        raise ValueError("betainc needs a > 0 and b > 0")
    y = 1.0 - x if y is None else y
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log(y) - log_beta(a, b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, y) / b


def _t_upper(t: float, df: float) -> float:
    """P(T > t) for t >= 0, without cancellation in either tail."""
    t2 = t * t
    return 0.5 * betainc(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    return _t_upper(t, df) if t >= 0 else 1.0 - _t_upper(-t, df)


def t_cdf(t: float, df: float) -> float:
    return t_sf(-t, df)


def _t_log_pdf(t: float, df: float) -> float:
    return -log_beta(df / 2.0, 0.5) - 0.5 * math.log(df) - (df + 1.0) / 2.0 * math.log1p(t * t / df)


def _t_guess(q: float, df: float) -> float:
    """A starting point for the upper quantile at tail probability q < 0.5."""
    if df == 1:
        return 1.0 / math.tan(math.pi * q)
    if df == 2:
        p = 1.0 - q
        return (2.0 * p - 1.0) / math.sqrt(2.0 * p * q)
    z = normal_ppf(1.0 - q)
    z2 = z * z
    # Cornish-Fisher expansion (Abramowitz & Stegun 26.7.5)
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    guess = z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
    return guess if guess > 0 and math.isfinite(guess) else z


@lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Student's t quantile: the t with P(T <= t) = p, for df > 0 (integer or not)."""
    if p in (0.0, 1.0):
        return math.copysign(math.inf, p - 0.5)
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_ppf needs 0 <= p <= 1, got {p}")
    if df <= 0:
        raise ValueError(f"t_ppf needs df > 0, got {df}")
    if p == 0.5:
        return 0.0
    if math.isinf(df):
        return normal_ppf(p)
    upper = p > 0.5
    q = 1.0 - p if upper else p  # the tail probability to hit, < 0.5
    log_q = math.log(q)
    # bracket: tail(lo) >= q >= tail(hi)
    lo, hi = 0.0, max(_t_guess(q, df), 1.0)
    while _t_upper(hi, df) > q:
        lo, hi = hi, hi * 2.0
    t = min(max(_t_guess(q, df), lo), hi)
    for _ in range(200):
        tail = _t_upper(t, df)
        lo, hi = (t, hi) if tail > q else (lo, t)
        if tail <= 0.0:
            t_new = 0.5 * (lo + hi)
        else:
            # Newton on g(t) = log tail(t) - log q; g'(t) = -pdf(t) / tail(t)
            slope = math.exp(_t_log_pdf(t, df)) / tail
            t_new = t + (math.log(tail) - log_q) / slope
            if not lo < t_new < hi:
                t_new = 0.5 * (lo + hi)
        converged = abs(t_new - t) <= 1e-15 * max(1.0, abs(t_new))
        t = t_new
        if converged:
            break
    return t if upper else -t


def wilson_interval(successes: float, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval for a proportion successes/n at the two-sided `confidence`.

    center = (p + z²/2n) / (1 + z²/n);  half = z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²)
    """
    if n <= 0:
        raise ValueError("wilson_interval needs n >= 1")
    z = normal_ppf(0.5 + confidence / 2.0)
    p = successes / n
    z2n = z * z / n
    center = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    return max(0.0, center - half), min(1.0, center + half)


def _ways_at_most(m: int, n: int) -> int:
    """Σ_{i<=m} C(n, i), exactly."""
    term, total = 1, 1
    for i in range(m):
        term = term * (n - i) // (i + 1)
        total += term
    return total


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2).

    P(X <= m) in exact integers (correctly rounded) up to 20,000 discordant pairs, else I_{1/2}(n-m, m+1)."""
    n, m = b + c, min(b, c)
    if n == 0:
        return 1.0
    if n <= 20_000:
        return min(1.0, (2 * _ways_at_most(m, n)) / (1 << n))
    return min(1.0, 2.0 * betainc(n - m, m + 1.0, 0.5, 0.5))


@lru_cache(maxsize=65536)
def beta_ppf(q: float, a: float, b: float) -> float:
    """The q-quantile of Beta(a, b) (a, b > 0, real): Newton steps on `betainc` inside a bisection
    bracket (a step that leaves the bracket bisects), to 1e-15 relative (quantiles below ~1e-60,
    from a shape parameter near 0, to 1e-60 absolute: 200 steps at most).

    Clopper-Pearson's ends are beta quantiles; this needs nothing but the CDF and the density."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"beta_ppf needs 0 <= q <= 1, got {q}")
    if q in (0.0, 1.0):
        return q
    lo, hi = 0.0, 1.0
    x = min(max(a / (a + b), 1e-12), 1.0 - 1e-12)
    log_norm = log_beta(a, b)
    for _ in range(200):
        f = betainc(a, b, x) - q
        if f < 0:
            lo = x
        else:
            hi = x
        log_pdf = (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - log_norm
        step = f / math.exp(log_pdf) if log_pdf > -700 else math.inf
        x_new = x - step
        if not lo < x_new < hi:
            x_new = 0.5 * (lo + hi)
        if abs(x_new - x) <= 1e-15 * max(x_new, 1e-300) or hi - lo <= 1e-300:
            return x_new
        x = x_new
    return x


@lru_cache(maxsize=65536)
def clopper_pearson_interval(successes: float, n: float, confidence: float) -> tuple[float, float]:
    """Clopper-Pearson ("exact", statsmodels' method='beta') interval for successes/n; n and
    successes may be real (an effective sample size): ends Beta(α/2; x, n−x+1), Beta(1−α/2; x+1, n−x)."""
    if n <= 0:
        raise ValueError("clopper_pearson_interval needs n > 0")
    alpha = 1.0 - confidence
    x = min(max(successes, 0.0), n)
    low = 0.0 if x <= 0.0 else beta_ppf(alpha / 2.0, x, n - x + 1.0)
    high = 1.0 if x >= n else beta_ppf(1.0 - alpha / 2.0, x + 1.0, n - x)
    return low, high


def nct_cdf(t: float, df: float, nc: float) -> float:
    """P(T <= t) for the noncentral t with `df` degrees of freedom and noncentrality `nc`: Lenth's
    (1989) algorithm AS 243, a series in the incomplete beta function (the power of a t test needs
    it: statsmodels' TTestPower takes it from scipy; here it is the standard library's).

    The series weights are Poisson(nc²/2) probabilities; past |nc| = 37 they underflow, and the
    definition is integrated instead (`_nct_cdf_integral`)."""
    if df <= 0:
        raise ValueError(f"nct_cdf needs df > 0, got {df}")
    if math.isinf(df):
        return normal_cdf(t - nc)
    if abs(nc) > 37.0:
        return _nct_cdf_integral(t, df, nc)
    negative = t < 0.0
    tt, delta = (-t, -nc) if negative else (t, nc)
    total = 0.0
    x = tt * tt / (tt * tt + df)
    if x > 0.0:
        lam = delta * delta
        p = 0.5 * math.exp(-0.5 * lam)
        q = math.sqrt(2.0 / math.pi) * p * delta
        s = 0.5 - p
        a, b = 0.5, 0.5 * df
        rxb = (df / (tt * tt + df)) ** b  # (1 - x)^b without cancellation
        log_beta_ab = log_beta(a, b)
        xodd = betainc(a, b, x, df / (tt * tt + df))
        godd = 2.0 * rxb * math.exp(a * math.log(x) - log_beta_ab)
        xeven = 1.0 - rxb
        geven = b * x * rxb
        total = p * xodd + q * xeven
        en = 1.0
        while True:
            a += 1.0
            xodd -= godd
            xeven -= geven
            godd *= x * (a + b - 1.0) / a
            geven *= x * (a + b - 0.5) / (a + 0.5)
            p *= lam / (2.0 * en)
            q *= lam / (2.0 * en + 1.0)
            s -= p
            en += 1.0
            total += p * xodd + q * xeven
            if abs(2.0 * s * (xodd - godd)) <= 1e-14 or en > 5000:
                break
    total += normal_cdf(-delta)
    total = min(1.0, max(0.0, total))
    return 1.0 - total if negative else total


def nct_sf(t: float, df: float, nc: float) -> float:
    """P(T > t) for the noncentral t (see `nct_cdf`)."""
    return 1.0 - nct_cdf(t, df, nc)


def _nct_cdf_integral(t: float, df: float, nc: float) -> float:
    """P(T <= t) = E[Φ(t·sqrt(V/df) − nc)], V ~ χ²_df, by the trapezoid rule over y = ln V, where
    the integrand is smooth and decays faster than exponentially both ways (so the rule converges
    geometrically once the step is well below the width of Φ's rise, about 2/|nc| in y); the range
    covers the log-density down to e^-40 of its peak."""
    k = df / 2.0
    log_norm = -k * math.log(2.0) - math.lgamma(k)

    def log_density(y: float) -> float:  # of y = ln V: f_V(e^y)·e^y
        return log_norm + k * y - 0.5 * math.exp(y)

    mode = math.log(df)  # the log-density's peak: d/dy (k·y − e^y/2) = 0
    peak = log_density(mode)
    width = min(1.0, math.sqrt(2.0 / k))  # about the sd of ln V
    lo, hi = mode - width, mode + width
    while log_density(lo) > peak - 40.0:
        lo -= width
    while log_density(hi) > peak - 40.0:
        hi += width
    step = min(width / 40.0, 0.25 / max(1.0, abs(nc)))
    points = int((hi - lo) / step) + 2
    step = (hi - lo) / (points - 1)
    total = 0.0
    for i in range(points):
        y = lo + i * step
        weight = 0.5 if i in (0, points - 1) else 1.0
        total += weight * math.exp(log_density(y)) * normal_cdf(t * math.sqrt(math.exp(y) / df) - nc)
    return min(1.0, max(0.0, total * step))
