"""Decide with known error rates: GO / NO-GO / INCONCLUSIVE for a candidate against a baseline
(`shardeval gate`), and the problems a decision needs (`shardeval plan`). docs/decisions.md.

The API another module calls (the sweep page, report, exports, status):

    summarize(base_table, cand_table, alpha) -> PairSummary    the paired numbers, as compare pairs
    decide(base_table, cand_table, margin, alpha, power) -> BenchmarkDecision
    decide_summary(summary, margin, alpha, power) -> BenchmarkDecision
    gate(decisions, ...) -> GateResult                            the overall verdict (gate.json)
    verdict_arrays(...)                                           the rule itself, vectorised

Pairing is compare's (`paired.paired_difference`): the (problem, repeat) cells valid in both
runs, problems matched by id, clustered by problem (or by the baseline's categories when they
show more spread), t on G − 1 degrees of freedom. θ = mean(cand − base); δ the margin.

The rule, per benchmark, at one-sided level α:

- GO when the (1 − α) lower bound of θ is above −δ (non-inferiority shown: the candidate is not
  worse by δ or more). P(GO | θ = −δ) <= α.
- NO-GO otherwise, when the (1 − α) upper bound of θ is below 0 (the candidate is shown worse;
  the issue's "simply worse" form), by Holm's step-down over the gate's benchmarks, so that "these
  benchmarks regressed" is a family-wise claim. P(NO-GO | θ = 0) <= α. Whether the regression is
  beyond the margin itself (upper bound below −δ) is reported too (`beyond_margin`).
- INCONCLUSIVE otherwise, with a plan: the problems (at the run's repeats) and the repeats (at the
  run's problems) that would likely settle it, from the observed difference and variance.

Overall: GO when every benchmark is GO (an intersection-union test: each at level α, the overall
chance of GO when some benchmark is δ worse is at most α, with no correction); NO-GO when some
benchmark is NO-GO (Holm across them); else INCONCLUSIVE.

The bounds. Scores that are all 0 or 1 (accuracy): Tango's (1998) score test for paired
proportions at an effective size. Z(Δ0) = (θ̂ − Δ0) / sqrt(V0(Δ0) · m / N), V0 the variance of one
cell's difference under θ = Δ0 at the constrained maximum-likelihood cell probabilities, N the
shared cells, m = max(1, design effect) with design effect = SE²·(N − 1)/v̂ (SE the clustered
standard error, v̂ the cells' variance: Korn & Graubard's effective size, as merge's intervals);
where no spread gives no design effect, each problem counts once (m = N / problems). The bounds
solve Z(L) = q and Z(U) = −q, q = t_{G−1, 1−α}. Unlike the Wald interval, V0 never vanishes under
a margin (V0(−δ) >= δ(1 − δ)), so the same answers on every problem near accuracy 0 or 1 do not
claim GO. The NO-GO test also takes the exact one-sided McNemar (binomial) test of the effective
discordant counts (b/m right only in the baseline, c/m only in the candidate), so a handful of
discordant answers never shows a regression the exact test does not. Other scores: the paired t
bounds θ̂ ∓ q·SE; with no spread, paired_difference's `no-variation-bound` at level 1 − 2α.
Where paired_difference clusters by category, the SE is CR2's and df = G* − 1, Carter et al.'s
effective clusters (`cr2_stderr`); otherwise df = problems − 1.

`shardeval plan`: `spread_of_pair` (a measured pair) or `spread_of_run` (one run, a correlation
assumed) gives a `Spread`; `requirements(spread, ...)` the problems needed per repeats;
`proportions_requirement` before any run. Powers: shardeval_metrics.power.

The rule as arrays (`verdict_arrays`) is what the error-rate simulation
(tests/test_gate_error_rates.py) runs on 10,000s of data sets; `decide_summary` runs it on one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from shardeval.api.metric import MetricOptions, ScoreTable
from shardeval_metrics.dist import betainc, t_ppf, t_sf
from shardeval_metrics.paired import holm, paired_difference
from shardeval_metrics.power import fixed_df, power, problems_df, solve_diff, solve_nobs
from shardeval_metrics.stats import cluster_codes, is_binary, match_problems, per_problem, score_matrix, variance_split

GO, NO_GO, INCONCLUSIVE = "GO", "NO-GO", "INCONCLUSIVE"
EXIT_CODES = {GO: 0, NO_GO: 4, INCONCLUSIVE: 5}  # beside 1, 2, 3, 129, 130, 143 (README)
MAX_REPEATS = 64  # the most repeats a plan proposes


class PairSummary(msgspec.Struct, kw_only=True):
    """The paired numbers a decision rests on (one benchmark, baseline vs candidate)."""

    benchmark: str
    n_cells: int  # (problem, repeat) cells valid in both
    n_problems: int  # problems with such a cell
    n_clusters: int  # G: problems, or the baseline's categories
    clustered_by: str
    df: float  # G − 1; by category, Carter et al.'s effective clusters G* − 1
    diff: float | None  # θ̂ = mean over the shared cells of cand − base
    stderr: float | None  # clustered SE (CR2); None with no spread (every problem differs alike) or < 2 problems
    binary: bool  # every shared score 0 or 1
    base_right_cand_wrong: int  # b: discordant cells (binary)
    base_wrong_cand_right: int  # c
    base_mean: float | None
    cand_mean: float | None
    no_spread_low: float | None = None  # paired_difference's no-variation bound at level 1 − 2α
    no_spread_high: float | None = None
    sigma2_between: float | None = None  # per-problem true differences (a problem with >= 2 shared cells needed)
    sigma2_within: float | None = None  # a cell's difference around its problem's
    repeats: float = 1.0  # shared cells per problem, on average
    matched_by: str = "problem_ids"
    n_problems_only_base: int = 0
    n_problems_only_cand: int = 0
    n_cells_only_base: int = 0
    n_cells_only_cand: int = 0
    complete: bool = True
    reason: str | None = None


class Plan(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What would likely settle an INCONCLUSIVE verdict, at the observed difference and variance."""

    settles_to: str  # the verdict it would likely reach (GO or NO-GO)
    assumed_diff: float  # θ taken as true: the observed difference
    power: float
    problems: int | None  # problems needed at the run's repeats (None: no number does)
    repeats_now: float
    repeats: int | None = None  # repeats needed at the run's problems (None: unknown or none up to MAX_REPEATS)
    problems_now: int = 0
    go_problems: int | None = None  # the two targets apart (None: out of reach at the observed difference)
    no_go_problems: int | None = None
    formula: str = ""


class BenchmarkDecision(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One benchmark's verdict and the numbers it rests on (a row of gate.json)."""

    benchmark: str
    verdict: str
    reason: str
    margin: float
    alpha: float
    diff: float | None
    lower: float | None  # one-sided (1 − α) bounds of cand − base
    upper: float | None
    method: str  # tango-score | paired-t | no-variation-bound | none
    p_go: float | None = None  # one-sided p of "θ <= −δ" (GO when <= α)
    p_worse: float | None = None  # one-sided p of "θ >= 0" (max of the score and exact tests for binary scores)
    p_worse_holm: float | None = None  # Holm across the gate's benchmarks (NO-GO when <= α)
    shown_worse: bool = False  # upper < 0, alone
    beyond_margin: bool = False  # upper < −δ: a regression beyond the margin itself is shown
    n_problems: int = 0
    n_cells: int = 0
    n_clusters: int = 0
    clustered_by: str = "problem"
    df: float | None = None
    design_effect: float | None = None
    discordant: dict[str, int] | None = None
    base_mean: float | None = None
    cand_mean: float | None = None
    n_problems_only_base: int = 0
    n_problems_only_cand: int = 0
    complete: bool = True
    plan: Plan | None = None


class NotCompared(msgspec.Struct):
    benchmark: str
    why: str


class GateResult(msgspec.Struct, kw_only=True):
    """gate.json for two runs: the overall verdict, its exit code and every benchmark's."""

    verdict: str
    exit_code: int
    base: str
    candidate: str
    margin: float
    alpha: float
    power: float
    metric: str
    rule: str
    benchmarks: list[BenchmarkDecision]
    regressed: list[str] = []  # NO-GO benchmarks (Holm: a family-wise claim at level α)
    not_compared: list[NotCompared] = []
    candidate_scores: str = ""  # the candidate's answers decided on (scores_digest): its report shows the verdict while they stand
    kind: str = "shardeval-gate"
    version: str = ""


class SweepGate(msgspec.Struct, kw_only=True):
    """gate.json for a sweep: every model against the baseline (each its own gate and family)."""

    verdict: str  # the worst: NO-GO if any model is, else INCONCLUSIVE if any is, else GO
    exit_code: int
    baseline: str
    margin: float
    alpha: float
    power: float
    metric: str
    models: list[GateResult]
    missing: list[str] = []  # models without a run yet
    kind: str = "shardeval-gate-sweep"
    version: str = ""


RULE = (
    "per benchmark at one-sided level alpha: GO when the lower bound of cand - base > -margin; else NO-GO when "
    "its upper bound < 0 (Holm across benchmarks); else INCONCLUSIVE. Overall: GO when every benchmark is GO "
    "(intersection-union test, no correction needed), NO-GO when any is, else INCONCLUSIVE"
)


# --- the paired numbers ------------------------------------------------------------------------


def summarize(a: ScoreTable, b: ScoreTable, alpha: float) -> PairSummary:
    """The paired summary of baseline `a` and candidate `b` (compare's pairing); never raises."""
    paired = paired_difference(a, b, MetricOptions(confidence=1.0 - 2.0 * alpha))
    xa, xb = score_matrix(a), score_matrix(b)
    ia, ib, _, _, _ = match_problems(a, b)
    repeats = min(a.repeats, b.repeats)
    ca, cb = xa[ia, :repeats], xb[ib, :repeats]
    both = np.isfinite(ca) & np.isfinite(cb)
    da, db = ca[both], cb[both]
    binary = bool(da.size) and is_binary(da) and is_binary(db)
    n_b = int(((da == 1.0) & (db == 0.0)).sum()) if binary else 0
    n_c = int(((da == 0.0) & (db == 1.0)).sum()) if binary else 0
    d = np.where(both, cb - ca, np.nan)
    split = variance_split(d, per_problem(d)).get("variance_split") if paired["n"] else None
    n_problems = int(paired["n_problems"])
    stderr, df = paired["stderr"], float(max(int(paired.get("n_clusters") or n_problems) - 1, 1))
    if paired["clustered_by"] == "category" and stderr is not None:
        rows = np.nonzero(both)[0]
        problems, inverse = np.unique(rows, return_inverse=True)
        codes = cluster_codes(a, ia[problems])
        assert codes is not None  # paired_difference clustered by them
        stderr, df = cr2_stderr(cb[both] - ca[both], codes[inverse.reshape(-1)])
    return PairSummary(
        benchmark=b.benchmark,
        n_cells=int(paired["n"]),
        n_problems=n_problems,
        n_clusters=int(paired.get("n_clusters") or n_problems),
        clustered_by=str(paired["clustered_by"]),
        df=df,
        diff=paired["diff"],
        stderr=stderr,
        binary=binary,
        base_right_cand_wrong=n_b,
        base_wrong_cand_right=n_c,
        base_mean=paired["baseline_mean"],
        cand_mean=paired["other_mean"],
        no_spread_low=paired["ci_low"] if paired["ci_method"] == "no-variation-bound" else None,
        no_spread_high=paired["ci_high"] if paired["ci_method"] == "no-variation-bound" else None,
        sigma2_between=split["sigma2_between"] if split else None,
        sigma2_within=split["sigma2_within"] if split else None,
        repeats=paired["n"] / n_problems if n_problems else 1.0,
        matched_by=str(paired["matched_by"]),
        n_problems_only_base=int(paired["n_problems_only_baseline"]),
        n_problems_only_cand=int(paired["n_problems_only_other"]),
        n_cells_only_base=int(paired["n_only_baseline"]),
        n_cells_only_cand=int(paired["n_only_other"]),
        complete=bool(paired["complete"]),
        reason=paired.get("reason"),
    )


def cr2_stderr(d: np.ndarray, codes: np.ndarray) -> tuple[float, float]:
    """The gate's clustered SE by category and its df: Bell & McCaffrey's (2002) CR2 for a mean,
    SE² = Σ_g E_g² / (1 − N_g/N) / N² (E_g the cluster's sum of residuals), which is CR1's
    G/(G − 1) · Σ E_g² / N² when the clusters are equal; df = G* − 1 with Carter, Schnepel &
    Steigerwald's (2017) effective number of clusters G* = G / (1 + Γ), rounded down, Γ the squared
    coefficient of variation of the cluster sizes. Unequal categories (MMLU's subjects) with few clusters made
    CR1's t interval too narrow (tests/test_gate_error_rates.py, the few-cluster cases)."""
    n = d.size
    resid = d - d.mean()
    groups = int(codes.max()) + 1
    sums = np.bincount(codes, weights=resid, minlength=groups)
    share = np.bincount(codes, minlength=groups) / n
    se = math.sqrt(float(np.sum(sums * sums / (1.0 - share))) / (n * n))
    gamma = float(np.mean((share - share.mean()) ** 2) / share.mean() ** 2)
    return se, max(math.floor(groups / (1.0 + gamma)) - 1.0, 1.0)


# --- the rule, vectorised ------------------------------------------------------------------------


def null_variance(beta: Any, gamma: Any, delta0: Any) -> np.ndarray:
    """Tango's variance of one cell's difference under θ = Δ0 (vectorised): 2p̃ + Δ0 − Δ0², p̃ the
    constrained MLE of P(base right, cand wrong): the root of 2p² − B·p − βΔ0(1 − Δ0) = 0 with
    B = β + γ − Δ0(2 + β − γ); β, γ the shares of cells right only in the baseline / candidate."""
    beta, gamma, delta0 = (np.asarray(v, dtype=np.float64) for v in (beta, gamma, delta0))
    big_b = beta + gamma - delta0 * (2.0 + beta - gamma)
    root = np.sqrt(np.maximum(big_b * big_b + 8.0 * beta * delta0 * (1.0 - delta0), 0.0))
    p_tilde = (big_b + root) / 4.0
    return np.maximum(2.0 * p_tilde + delta0 - delta0 * delta0, 0.0)


def effective_factor(n_cells: Any, n_problems: Any, beta: Any, gamma: Any, stderr: Any) -> np.ndarray:
    """m = max(1, design effect), design effect = SE²·(N − 1)/v̂ (exactly 1 for one unclustered cell
    per problem); N / problems (each problem counts once) where there is no SE or no spread."""
    n, g = np.asarray(n_cells, dtype=np.float64), np.asarray(n_problems, dtype=np.float64)
    beta, gamma, se = (np.asarray(v, dtype=np.float64) for v in (beta, gamma, stderr))
    v_hat = beta + gamma - (gamma - beta) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        deff = se * se * (n - 1.0) / v_hat
    known = np.isfinite(deff) & (v_hat > 0.0)
    return np.where(known, np.maximum(deff, 1.0), n / np.maximum(g, 1.0))


def score_z(diff: Any, beta: Any, gamma: Any, delta0: Any, n_eff: Any) -> np.ndarray:
    """Z(Δ0) = (θ̂ − Δ0) / sqrt(V0(Δ0) / N*) (vectorised); 0 where V0 = 0 and θ̂ = Δ0."""
    diff, n_eff = np.asarray(diff, dtype=np.float64), np.asarray(n_eff, dtype=np.float64)
    se0 = np.sqrt(null_variance(beta, gamma, delta0) / n_eff)
    gap = diff - np.asarray(delta0, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = gap / se0
        return np.where(se0 > 0.0, z, np.where(gap == 0.0, 0.0, np.sign(gap) * np.inf))


def exact_worse_p(b_eff: float, c_eff: float) -> float:
    """The exact one-sided McNemar p of "the candidate is not worse": P(X <= c | b + c, 1/2) =
    I_{1/2}(b, c + 1), for real (effective) counts; 1 with no discordant cell right only in the base."""
    if b_eff <= 0.0:
        return 1.0
    return betainc(b_eff, c_eff + 1.0, 0.5, 0.5)


class Verdicts(msgspec.Struct):
    """`verdict_arrays`' answer, one entry per data set."""

    go: np.ndarray  # bool
    p_go: np.ndarray  # one-sided p of θ <= −δ (NaN where not a score/t test)
    p_worse: np.ndarray  # one-sided p of θ >= 0: the NO-GO test before Holm
    p_beyond: np.ndarray  # one-sided p of θ >= −δ
    n_eff: np.ndarray  # N / m (binary), NaN otherwise
    q: np.ndarray  # t_{df, 1−α}


def verdict_arrays(
    diff: Any,
    stderr: Any,
    df: Any,
    n_cells: Any,
    n_problems: Any,
    b: Any,
    c: Any,
    margin: float,
    alpha: float,
    binary: bool = True,
) -> Verdicts:
    """The rule of the module doc over arrays of data sets of one kind (binary or not), each given
    by its paired numbers (stderr NaN where paired_difference gives none). NO-GO is then
    `~go & (p_worse <= α)` for one benchmark, Holm's adjustment of p_worse for several."""
    diff, se = np.asarray(diff, dtype=np.float64), np.asarray(stderr, dtype=np.float64)
    n, g = np.asarray(n_cells, dtype=np.float64), np.asarray(n_problems, dtype=np.float64)
    df = np.maximum(np.asarray(df, dtype=np.float64), 1.0)
    q = np.vectorize(lambda d: t_ppf(1.0 - alpha, float(d)), otypes=[float])(df) if df.size else df
    t_sf_v = np.vectorize(lambda z, d: t_sf(float(z), float(d)) if math.isfinite(z) else (0.0 if z > 0 else 1.0), otypes=[float])
    if binary:
        beta, gamma = np.asarray(b, dtype=np.float64) / n, np.asarray(c, dtype=np.float64) / n
        m = effective_factor(n, g, beta, gamma, se)
        n_eff = n / m
        z_go = score_z(diff, beta, gamma, -margin, n_eff)
        z_zero = score_z(diff, beta, gamma, 0.0, n_eff)
        p_go, p_beyond = t_sf_v(z_go, df), t_sf_v(-z_go, df)
        p_worse = t_sf_v(-z_zero, df)
        b_eff, c_eff = np.asarray(b, dtype=np.float64) / m, np.asarray(c, dtype=np.float64) / m
        exact = np.array([exact_worse_p(x, y) if p <= alpha else 1.0 for x, y, p in zip(b_eff.ravel(), c_eff.ravel(), p_worse.ravel())])
        p_worse = np.maximum(p_worse, exact.reshape(p_worse.shape))
        return Verdicts(go=z_go > q, p_go=p_go, p_beyond=p_beyond, p_worse=p_worse, n_eff=n_eff, q=q)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_go = np.where(se > 0, t_sf_v((diff + margin) / se, df), np.nan)
        p_worse = np.where(se > 0, t_sf_v(-diff / se, df), np.nan)
        p_beyond = np.where(se > 0, t_sf_v(-(diff + margin) / se, df), np.nan)
    go = (se > 0) & (diff - q * se > -margin)
    return Verdicts(go=go, p_go=p_go, p_beyond=p_beyond, p_worse=p_worse, n_eff=np.full(diff.shape, np.nan), q=q)


# --- one benchmark -------------------------------------------------------------------------------


def _score_bound(diff: float, beta: float, gamma: float, n_eff: float, target: float, upper: bool) -> float:
    """The Δ0 where Z(Δ0) = target, on θ̂'s upper side (U) or lower side (L): Z falls in Δ0 from
    +∞ at −1 to −∞ at 1; bisection to 1e-12."""
    lo, hi = (diff, 1.0) if upper else (-1.0, diff)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        z = float(score_z(diff, beta, gamma, mid, n_eff))
        lo, hi = (mid, hi) if z > target else (lo, mid)
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def decide(a: ScoreTable, b: ScoreTable, margin: float, alpha: float = 0.05, target_power: float = 0.8) -> BenchmarkDecision:
    """The verdict of candidate `b` against baseline `a` on one benchmark, alone (no Holm family)."""
    return decide_summary(summarize(a, b, alpha), margin, alpha, target_power)


def decide_summary(s: PairSummary, margin: float, alpha: float = 0.05, target_power: float = 0.8) -> BenchmarkDecision:
    """The verdict on one benchmark's paired numbers, alone; `gate` adjusts NO-GO across benchmarks."""
    common: dict[str, Any] = {
        "benchmark": s.benchmark,
        "margin": margin,
        "alpha": alpha,
        "diff": s.diff,
        "n_problems": s.n_problems,
        "n_cells": s.n_cells,
        "n_clusters": s.n_clusters,
        "clustered_by": s.clustered_by,
        "base_mean": s.base_mean,
        "cand_mean": s.cand_mean,
        "n_problems_only_base": s.n_problems_only_base,
        "n_problems_only_cand": s.n_problems_only_cand,
        "complete": s.complete,
    }
    if s.diff is None or s.n_problems < 2:
        why = s.reason or "fewer than 2 problems with a cell valid in both runs"
        return BenchmarkDecision(verdict=INCONCLUSIVE, reason=f"no decision: {why}", lower=None, upper=None, method="none", **common)
    common["df"] = s.df
    if s.binary:
        return _decide_binary(s, margin, alpha, target_power, common)
    if s.stderr is None:
        return _decide_no_spread(s, margin, alpha, target_power, common)
    v = verdict_arrays(s.diff, s.stderr, s.df, s.n_cells, s.n_problems, 0, 0, margin, alpha, binary=False)
    q = float(v.q)
    lower, upper = s.diff - q * s.stderr, s.diff + q * s.stderr
    return _finish(s, bool(v.go), float(v.p_go), float(v.p_worse), lower, upper, "paired-t", margin, alpha, target_power, common)


def _decide_binary(s: PairSummary, margin: float, alpha: float, target_power: float, common: dict[str, Any]) -> BenchmarkDecision:
    assert s.diff is not None
    se = math.nan if s.stderr is None else s.stderr
    v = verdict_arrays(s.diff, se, s.df, s.n_cells, s.n_problems, s.base_right_cand_wrong, s.base_wrong_cand_right, margin, alpha)
    beta, gamma = s.base_right_cand_wrong / s.n_cells, s.base_wrong_cand_right / s.n_cells
    n_eff, q = float(v.n_eff), float(v.q)
    lower = _score_bound(s.diff, beta, gamma, n_eff, q, upper=False)
    upper = _score_bound(s.diff, beta, gamma, n_eff, -q, upper=True)
    common["design_effect"] = s.n_cells / n_eff
    common["discordant"] = {"base_right_cand_wrong": s.base_right_cand_wrong, "base_wrong_cand_right": s.base_wrong_cand_right}
    return _finish(s, bool(v.go), float(v.p_go), float(v.p_worse), lower, upper, "tango-score", margin, alpha, target_power, common)


def _decide_no_spread(s: PairSummary, margin: float, alpha: float, target_power: float, common: dict[str, Any]) -> BenchmarkDecision:
    """Scores other than 0/1 where every problem differs by the same c: paired_difference's
    no-variation bound (level 1 − 2α: its ends are one-sided 1 − α bounds); the sign test's p."""
    assert s.diff is not None
    if s.no_spread_low is None or s.no_spread_high is None:
        return BenchmarkDecision(
            verdict=INCONCLUSIVE,
            reason=f"no decision: {s.reason or 'no spread and no interval'}",
            lower=None,
            upper=None,
            method="none",
            **common,
        )
    p_worse = 0.5**s.n_problems if s.diff < 0 else 1.0
    lower, upper = s.no_spread_low, s.no_spread_high
    return _finish(
        s, lower > -margin, None, p_worse if upper < 0 else 1.0, lower, upper, "no-variation-bound", margin, alpha, target_power, common
    )


def _finish(
    s: PairSummary,
    go: bool,
    p_go: float | None,
    p_worse: float,
    lower: float,
    upper: float,
    method: str,
    margin: float,
    alpha: float,
    target_power: float,
    common: dict[str, Any],
) -> BenchmarkDecision:
    d = BenchmarkDecision(
        verdict=GO if go else (NO_GO if p_worse <= alpha else INCONCLUSIVE),
        reason="",
        lower=lower,
        upper=upper,
        method=method,
        p_go=p_go,
        p_worse=p_worse,
        p_worse_holm=p_worse,
        shown_worse=upper < 0.0,
        beyond_margin=upper < -margin,
        **common,
    )
    d.reason = _reason(d)
    if d.verdict != GO:  # a NO-GO that Holm's family demotes needs it too; `gate` drops it from a NO-GO
        d.plan = settle_plan(s, margin, alpha, target_power)
    return d


def _reason(d: BenchmarkDecision) -> str:
    level = f"{1 - d.alpha:.4g}"
    if d.verdict == GO:
        extra = " (it is shown worse, but within the margin)" if d.shown_worse else ""
        return f"lower bound {d.lower:.4g} > -{d.margin:.4g}: not worse by the margin or more, at one-sided level {level}{extra}"
    if d.verdict == NO_GO:
        beyond = f"; beyond the margin too (upper < -{d.margin:.4g})" if d.beyond_margin else ""
        return f"upper bound {d.upper:.4g} < 0: the candidate is worse (p = {d.p_worse_holm:.3g} after Holm){beyond}"
    if d.shown_worse:
        return (
            f"upper bound {d.upper:.4g} < 0 but the exact test of so few discordant answers or Holm across benchmarks "
            f"does not show it (p = {d.p_worse_holm:.3g}); lower bound {d.lower:.4g} <= -{d.margin:.4g}"
        )
    return f"bounds [{d.lower:.4g}, {d.upper:.4g}] hold both -{d.margin:.4g} and 0: too few problems to tell"


# --- the plan of an INCONCLUSIVE verdict ---------------------------------------------------------


def _sds(s: PairSummary, margin: float) -> tuple[float, float, float]:
    """(sd of the alternative, sd under the GO test's null, sd under the NO-GO test's null), each per
    problem at the run's repeats (SE · sqrt(problems)), as the decision computed them."""
    assert s.diff is not None
    n = s.n_problems
    se = s.stderr if s.stderr is not None else 0.0
    sd_alt = se * math.sqrt(n)
    if not s.binary:
        return sd_alt, sd_alt, sd_alt
    beta, gamma = s.base_right_cand_wrong / s.n_cells, s.base_wrong_cand_right / s.n_cells
    m = float(effective_factor(s.n_cells, n, beta, gamma, math.nan if s.stderr is None else s.stderr))
    per_problem_cells = s.n_cells / n

    def sd0(delta0: float) -> float:
        return math.sqrt(float(null_variance(beta, gamma, delta0)) * m / per_problem_cells)

    return sd_alt, sd0(-margin), sd0(0.0)


def beta_of(s: PairSummary) -> float:
    return s.base_right_cand_wrong / max(s.n_cells, 1)


def gamma_of(s: PairSummary) -> float:
    return s.base_wrong_cand_right / max(s.n_cells, 1)


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def settle_plan(s: PairSummary, margin: float, alpha: float, target_power: float) -> Plan:
    """The problems (at the run's repeats) that give the verdict the observed difference points to
    power `target_power`, if θ = θ̂ and the spread per problem stays as observed; and the repeats at
    the run's problems where the split between and within problems is known. A plug-in estimate:
    θ̂ itself is uncertain, so "likely" is all it can say."""
    assert s.diff is not None
    sd_alt, sd_go, sd_no_go = _sds(s, margin)
    df_of = problems_df if s.clustered_by == "problem" else fixed_df(s.df)
    n_go = solve_nobs(s.diff + margin, target_power, alpha, sd_go, sd_alt, df_of)
    cc = float(effective_factor(s.n_cells, s.n_problems, beta_of(s), gamma_of(s), _nan(s.stderr))) / s.repeats if s.binary else 0.0
    n_no_go = solve_nobs(-s.diff, target_power, alpha, sd_no_go, sd_alt, df_of, continuity=cc)
    settles, needed = (GO, n_go) if n_go <= n_no_go else (NO_GO, n_no_go)
    plan = Plan(
        settles_to=settles,
        assumed_diff=s.diff,
        power=target_power,
        problems=None if math.isinf(needed) else math.ceil(needed),
        repeats_now=s.repeats,
        problems_now=s.n_problems,
        go_problems=None if math.isinf(n_go) else math.ceil(n_go),
        no_go_problems=None if math.isinf(n_no_go) else math.ceil(n_no_go),
        formula=(
            "power(n) = P(T'_df(nc) > q * sd_null / sd_alt), nc = |diff - null| * sqrt(n) / sd_alt, q = t_(df, 1-alpha), "
            "the sds per problem as observed (shardeval_metrics.power)"
        ),
    )
    between, within = s.sigma2_between, s.sigma2_within
    if between is not None and within is not None and not math.isinf(needed) and sd_alt > 0:
        now = between + within / s.repeats
        shift = s.diff + margin if settles == GO else -s.diff
        sd_null = sd_go if settles == GO else sd_no_go
        for k in range(1, MAX_REPEATS + 1):
            scale = math.sqrt((between + within / k) / now) if now > 0 else 1.0
            cc_k = cc * s.repeats / k if settles == NO_GO else 0.0
            if power(shift, s.n_problems, alpha, sd_null * scale, sd_alt * scale, df_of(float(s.n_problems)), cc_k) >= target_power:
                plan.repeats = k
                break
    return plan


# --- several benchmarks: the overall verdict ---------------------------------------------------


def gate(
    decisions: list[BenchmarkDecision],
    *,
    base: str,
    candidate: str,
    margin: float,
    alpha: float,
    target_power: float,
    metric: str,
    not_compared: list[NotCompared] | None = None,
    version: str = "",
) -> GateResult:
    """The overall verdict over one candidate's benchmarks (one Holm family): GO when every one is
    GO; NO-GO when some benchmark's Holm-adjusted p_worse <= α (and it is not GO); else INCONCLUSIVE.
    Benchmarks that could not be compared leave the overall verdict INCONCLUSIVE at best."""
    adjusted = holm([None if d.verdict == GO else d.p_worse for d in decisions])
    for d, p in zip(decisions, adjusted):
        if d.verdict == GO or p is None:
            continue
        d.p_worse_holm = p
        verdict = NO_GO if p <= alpha else INCONCLUSIVE
        if verdict != d.verdict:
            d.verdict = verdict
            d.reason = _reason(d)
        if verdict == NO_GO:
            d.plan = None
    regressed = [d.benchmark for d in decisions if d.verdict == NO_GO]
    if regressed:
        overall = NO_GO
    elif decisions and not not_compared and all(d.verdict == GO for d in decisions):
        overall = GO
    else:
        overall = INCONCLUSIVE
    return GateResult(
        verdict=overall,
        exit_code=EXIT_CODES[overall],
        base=base,
        candidate=candidate,
        margin=margin,
        alpha=alpha,
        power=target_power,
        metric=metric,
        rule=RULE,
        benchmarks=decisions,
        regressed=regressed,
        not_compared=not_compared or [],
        version=version,
    )


def worst(verdicts: list[str]) -> str:
    """A sweep's verdict: NO-GO if any model's is, else INCONCLUSIVE if any is, else GO."""
    return NO_GO if NO_GO in verdicts else (INCONCLUSIVE if INCONCLUSIVE in verdicts or not verdicts else GO)


# --- `shardeval plan`: problems and repeats a decision needs -----------------------------------

PLAN_REPEATS = (1, 2, 4, 8, 16)


class Requirement(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one decision needs on one benchmark: problems at each number of repeats, for the power
    asked, at an assumed true difference; and what the run's own size can detect."""

    benchmark: str
    target: str  # "GO at margin 0.02 when the candidate is as good" | "NO-GO when it is 0.05 worse"
    test: str  # the null it rejects: "diff <= -margin" (GO) or "diff >= 0" (NO-GO)
    assumed_diff: float
    alpha: float
    power: float
    sd_per_problem: float  # of the per-problem difference at the run's repeats (alternative)
    sd_null: float  # the same under the test's null (binary scores: Tango's variance)
    source: str  # where the spread comes from
    problems_now: int
    repeats_now: float
    problems: dict[str, int | None]  # repeats -> problems needed (None: out of reach)
    detectable_now: float | None = None  # the smallest regression detected at the run's size (NO-GO only)
    power_now: float | None = None  # the power at the run's size
    formula: str = ""
    note: str | None = None


class Spread(msgspec.Struct, kw_only=True):
    """The spread of the per-problem difference a plan assumes: between problems (σ²_B), within a
    problem across repeats (σ²_W, None when unknown), at `repeats`; for binary scores measured on a
    pair, the share of discordant cells, the design effect m and the cells per problem, from which
    the score tests' variances follow at any assumed difference; a fixed df when clustered by
    category."""

    benchmark: str
    sigma2_between: float
    sigma2_within: float | None
    repeats: float
    problems: int
    discordance: float | None = None  # β + γ (binary pair)
    design_effect: float = 1.0
    clustered_df: float | None = None
    source: str = ""
    note: str | None = None

    def sd(self, repeats: float) -> float:
        within = self.sigma2_within or 0.0
        return math.sqrt(max(self.sigma2_between + within / repeats, 0.0))

    def sds(self, kind: str, assumed: float, margin: float, repeats: float) -> tuple[float, float]:
        """(sd under the test's null, sd under the alternative θ = `assumed`), per problem at `repeats`.
        Binary: the discordant share stays as observed unless θ needs more (β' + γ' >= |θ|), the
        cells' variance disc − θ² and Tango's null variance at it, times m per problem's cells; other
        repeats scale both as the variance split says. Otherwise the t test: both the split's sd."""
        if self.discordance is None:
            return self.sd(repeats), self.sd(repeats)
        disc = max(self.discordance, abs(assumed))
        beta, gamma = (disc - assumed) / 2.0, (disc + assumed) / 2.0
        scale = self.design_effect / self.repeats
        v0 = float(null_variance(beta, gamma, -margin if kind == GO else 0.0))
        sd_alt, sd_null = math.sqrt((disc - assumed * assumed) * scale), math.sqrt(v0 * scale)
        now = self.sd(self.repeats)
        ratio = self.sd(repeats) / now if now > 0 else 1.0
        return sd_null * ratio, sd_alt * ratio

    def continuity(self, kind: str, repeats: float) -> float:
        """Binary NO-GO: the exact test of the effective discordant counts costs one of them (m
        cells: m / cells-per-problem problems' worth, `power.power`'s continuity)."""
        return self.design_effect / repeats if kind == NO_GO and self.discordance is not None else 0.0


def spread_of_pair(s: PairSummary, margin: float) -> Spread:
    """The spread measured by a pair of runs (baseline and a candidate or pilot): per problem as
    the decision's SE shows it (design effect of categories included), split between and within
    problems where repeats show it; for binary scores the discordance and design effect."""
    sd_alt = (s.stderr or 0.0) * math.sqrt(s.n_problems)
    var = sd_alt * sd_alt
    between, within = s.sigma2_between, s.sigma2_within
    if between is not None and within is not None and between + within / s.repeats > 0:
        scale = var / (between + within / s.repeats)  # the categories' design effect, kept
        between, within = between * scale, within * scale
    else:
        between, within = var, None
    beta, gamma = s.base_right_cand_wrong / max(s.n_cells, 1), s.base_wrong_cand_right / max(s.n_cells, 1)
    m = float(effective_factor(s.n_cells, s.n_problems, beta, gamma, math.nan if s.stderr is None else s.stderr))
    return Spread(
        benchmark=s.benchmark,
        sigma2_between=between,
        sigma2_within=within,
        repeats=s.repeats,
        problems=s.n_problems,
        discordance=beta + gamma if s.binary else None,
        design_effect=m,
        clustered_df=None if s.clustered_by == "problem" else s.df,
        source="measured on the pair: the spread of the per-problem difference"
        + (f", clustered by {s.clustered_by}" if s.clustered_by != "problem" else ""),
        note=None
        if sd_alt > 0
        else "no spread in the pair (the same answers wherever both answered): the power is a step at the null's spread",
    )


def spread_of_run(table: ScoreTable, correlation: float) -> Spread:
    """The spread of a difference guessed from one run: a candidate like the baseline, its
    per-problem means correlated `correlation` with the baseline's, its repeats sampled apart:
    σ²_B = 2(1 − ρ)σ²_b, σ²_W = 2σ²_w (merge's variance split); with one repeat, 2(1 − ρ) times the
    cells' variance. The paired t (sd_null = sd_alt) then plans it: statsmodels' TTestPower."""
    x = score_matrix(table)
    stats = per_problem(x)
    split = variance_split(x, stats).get("variance_split")
    factor = 2.0 * (1.0 - correlation)
    if split:
        between, within = factor * split["sigma2_between"], 2.0 * split["sigma2_within"]
        repeats = float(split["k_bar"])
    else:
        between = factor * (float(np.var(stats.means, ddof=1)) if stats.n >= 2 else 0.0)
        within, repeats = None, float(stats.n_samples / stats.n) if stats.n else 1.0
    return Spread(
        benchmark=table.benchmark,
        sigma2_between=between,
        sigma2_within=within,
        repeats=repeats,
        problems=stats.n,
        source=f"guessed from the baseline alone: a candidate like it, per-problem correlation {correlation:g} "
        "(give --against CAND to measure it)",
    )


def _regression_sds(spread: Spread, repeats: float) -> Callable[[float], tuple[float, float]]:
    """The NO-GO test's sds at a regression of d (they move with d for binary scores)."""
    return lambda d: spread.sds(NO_GO, -d, 0.0, repeats)


FORMULA = "power(n) = P(T'_df(nc) > q * sd_null / sd_alt), nc = shift * sqrt(n) / sd_alt, q = t_(df, 1-alpha) (shardeval_metrics.power)"


def requirements(
    spread: Spread,
    *,
    alpha: float,
    target_power: float,
    margin: float | None = None,
    detect: float | None = None,
    assumed_diff: float = 0.0,
) -> list[Requirement]:
    """The plan of one benchmark: for GO at `margin` (when the candidate's true difference is
    `assumed_diff`, 0: as good) and for NO-GO at a regression of `detect`, the problems needed at
    each number of repeats, the power at the run's own size and (NO-GO) the smallest regression it
    detects."""
    df_of = problems_df if spread.clustered_df is None else fixed_df(spread.clustered_df)
    asks = []
    if margin is not None:
        asks.append(
            (
                GO,
                f"GO at margin {margin:g} when the candidate's true difference is {assumed_diff:g}",
                "diff <= -margin",
                assumed_diff + margin,
                assumed_diff,
            )
        )
    if detect is not None:
        asks.append((NO_GO, f"NO-GO when the candidate is {detect:g} worse", "diff >= 0", detect, -detect))
    run_k = spread.repeats
    out = []
    for kind, target, test, shift, assumed in asks:
        problems: dict[str, int | None] = {}
        repeats = sorted({*PLAN_REPEATS, round(run_k)}) if spread.sigma2_within is not None else [round(run_k)]
        for k in repeats:
            k_used = run_k if k == round(run_k) else float(k)
            sd_null, sd_alt = spread.sds(kind, assumed, margin or 0.0, k_used)
            n = solve_nobs(shift, target_power, alpha, sd_null, sd_alt, df_of, continuity=spread.continuity(kind, k_used))
            problems[str(k)] = None if math.isinf(n) else math.ceil(n)
        null_now, sd_now = spread.sds(kind, assumed, margin or 0.0, run_k)
        req = Requirement(
            benchmark=spread.benchmark,
            target=target,
            test=test,
            assumed_diff=assumed,
            alpha=alpha,
            power=target_power,
            sd_per_problem=sd_now,
            sd_null=null_now,
            source=spread.source,
            problems_now=spread.problems,
            repeats_now=run_k,
            problems=problems,
            formula=FORMULA,
            note=spread.note,
        )
        if spread.problems > 1:
            df_now = df_of(float(spread.problems))
            cc = spread.continuity(kind, run_k)
            req.power_now = power(shift, spread.problems, alpha, null_now, sd_now, df_now, cc)
            if kind == NO_GO:
                req.detectable_now = solve_diff(spread.problems, target_power, alpha, _regression_sds(spread, run_k), df_now, cc)
        out.append(req)
    return out


def proportions_requirement(
    benchmark: str, size: int, accuracy: float, *, alpha: float, target_power: float, detect: float | None, margin: float | None
) -> list[Requirement]:
    """Before any run: two independent proportions (statsmodels' power_proportions_2indep, pooled
    null variance), one answer per problem, baseline accuracy `accuracy`; the benchmark's size."""
    from shardeval_metrics.power import proportions_2indep_nobs, proportions_2indep_power

    out = []
    if detect is not None:
        p2 = accuracy - detect  # the candidate, worse by `detect`; the test: baseline − candidate > 0
        n = proportions_2indep_nobs(detect, p2, target_power, alpha) if 0.0 <= p2 <= 1.0 else math.inf

        def sds(d: float) -> tuple[float, float]:
            q2 = min(max(accuracy - d, 0.0), 1.0)
            pooled = (accuracy + q2) / 2.0
            return math.sqrt(2.0 * pooled * (1.0 - pooled)), math.sqrt(accuracy * (1 - accuracy) + q2 * (1 - q2))

        out.append(
            Requirement(
                benchmark=benchmark,
                target=f"NO-GO when the candidate is {detect:g} worse",
                test="diff >= 0",
                assumed_diff=-detect,
                alpha=alpha,
                power=target_power,
                sd_per_problem=sds(detect)[1],
                sd_null=sds(detect)[0],
                source=f"stated accuracy {accuracy:g}, answers of the two runs taken as independent (no pairing known yet)",
                problems_now=size,
                repeats_now=1.0,
                problems={"1": None if math.isinf(n) else math.ceil(n)},
                power_now=proportions_2indep_power(detect, p2, size, alpha) if 0.0 <= p2 <= 1.0 else None,
                detectable_now=solve_diff(size, target_power, alpha, sds, None),
                formula="statsmodels.stats.proportion.power_proportions_2indep (z test, pooled null variance), one-sided",
            )
        )
    if margin is not None:
        sd = math.sqrt(2.0 * accuracy * (1.0 - accuracy))
        n = solve_nobs(margin, target_power, alpha, sd, sd, fixed_df(None))
        out.append(
            Requirement(
                benchmark=benchmark,
                target=f"GO at margin {margin:g} when the candidate is as good",
                test="diff <= -margin",
                assumed_diff=0.0,
                alpha=alpha,
                power=target_power,
                sd_per_problem=sd,
                sd_null=sd,
                source=f"stated accuracy {accuracy:g}, answers of the two runs taken as independent (no pairing known yet)",
                problems_now=size,
                repeats_now=1.0,
                problems={"1": None if math.isinf(n) else math.ceil(n)},
                power_now=power(margin, size, alpha, sd, sd, None),
                formula="normal test of two independent proportions as good as each other: n = ((z_(1-alpha) + z_power) * sd / margin)^2",
            )
        )
    return out
