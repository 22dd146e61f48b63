"""The gate's stated error rates, measured by simulation (docs/decisions.md, "Error rates").

For each case, 10,000 or more paired data sets are drawn and each is decided by the gate's rule:

- P(GO | true difference = −δ) <= α  (a candidate δ worse passes at most α of the time)
- P(NO-GO | true difference = 0) <= α  (an equally good candidate is blocked at most α of the time)
- at the problems `shardeval plan` asks for (computed by the real plan code from a large pilot
  pair of the same kind), the power reaches the requested power.

Each rate is asserted within 3 Monte Carlo standard errors (sqrt(r(1 − r)/R) at the nominal r) and
printed (`pytest -s`). The data sets are decided by `decision.verdict_arrays`, the function
`decision.decide_summary` calls on one data set, fed with paired numbers computed here for
thousands of data sets at once; `test_the_vectorised_path_equals_the_real_decision` shows those
numbers and verdicts equal `summarize` + `decide_summary` (`paired_difference` underneath) on
real ScoreTables of the same draws, every verdict kind included.

The model of a data set (a superpopulation, so "the true difference" is exact): categories
(MMLU's subjects, of unequal sizes) have a mean accuracy m_g ~ Beta(μτ, (1 − μ)τ); a problem's
baseline accuracy p ~ Beta(κ m_g, κ(1 − m_g)) (repeats of a problem are correlated through p);
the candidate's q is (1 − s)·p on a problem that got worse (chance w_g, itself varying by
category) and p + t(1 − p) on one that got better, t chosen so that E[q − p] = θ exactly. Each
(problem, repeat) cell of both runs is drawn from one uniform with chance `coupling` (the two
models answer alike, as a quantized model does its original), else from two.
"""

from __future__ import annotations

import math
import time
import zlib
from array import array
from dataclasses import dataclass

import numpy as np
import pytest

from shardeval.results.metrics import OK, ScoreTable
from shardeval_metrics.decision import (
    GO,
    INCONCLUSIVE,
    NO_GO,
    decide_summary,
    gate,
    requirements,
    spread_of_pair,
    summarize,
    verdict_arrays,
)

ALPHA, MARGIN, POWER = 0.05, 0.02, 0.8
R = 10_000  # data sets per rate
CHUNK = 2_000


@dataclass(frozen=True)
class Case:
    name: str
    n: int  # problems
    repeats: int
    categories: int  # 1: none
    mu: float  # mean baseline accuracy
    tau: float | None  # category concentration (None: every category at mu)
    kappa: float | None  # problem concentration (None: every problem at its category's mean)
    s: float  # how much a problem that got worse loses (share of p)
    w: float | None  # chance a problem got worse (None: all worse at θ < 0, none changed at θ = 0)
    nu: float | None  # how w varies between categories (None: not at all)
    coupling: float

    def codes(self, n: int | None = None) -> np.ndarray:
        """Category of each problem: unequal sizes (1 to 3 shares), contiguous, fixed per case."""
        n = self.n if n is None else n
        if self.categories == 1:
            return np.zeros(n, dtype=np.int64)
        shares = np.random.default_rng(5).integers(1, 4, self.categories).astype(float)
        cuts = np.floor(np.cumsum(shares) / shares.sum() * n).astype(np.int64)
        return np.searchsorted(cuts, np.arange(n), side="right")

    def at(self, theta: float) -> tuple[float, float]:
        """(s, w) giving a true difference θ: s at least what θ needs, at most what keeps t <= 1."""
        if self.w is None:
            return (-theta / self.mu, 1.0) if theta < 0 else (0.0, 0.0)
        low = max(-theta, 0.0) / (self.w * self.mu)
        high = (-theta + (1 - self.w) * (1 - self.mu)) / (self.w * self.mu)
        return min(max(self.s, low), high, 1.0), self.w


CASES = [
    Case("gsm8k: 1,319 problems, 1 repeat", 1319, 1, 1, 0.75, None, 2.0, 0.10, 0.5, None, 0.6),
    Case("mmlu-like: 1,000 problems, 57 subjects, 3 repeats", 1000, 3, 57, 0.65, 8.0, 1.5, 0.15, 0.5, 4.0, 0.3),
    Case("near 1: accuracy 0.98, 300 problems, all discordance one way", 300, 1, 1, 0.98, None, None, 0.0, None, None, 1.0),
    Case("near 1: accuracy 0.98, 200 problems, partly coupled", 200, 1, 1, 0.98, None, None, 0.0, None, None, 0.7),
    Case("near 0: accuracy 0.04, 300 problems", 300, 1, 1, 0.04, None, None, 0.7, 0.8, None, 0.5),
    Case("near 1 with noise: accuracy 0.98, 400 problems", 400, 1, 1, 0.98, None, None, 0.01, 0.5, None, 0.5),
    Case("few clusters: 4 categories, 200 problems, 2 repeats", 200, 2, 4, 0.6, 10.0, 1.5, 0.2, 0.5, 3.0, 0.3),
    Case("few clusters: 8 categories, 400 problems, 1 repeat", 400, 1, 8, 0.6, 10.0, 1.5, 0.3, 0.5, 3.0, 0.3),
    Case("small: 100 problems, 1 repeat", 100, 1, 1, 0.7, None, 2.0, 0.1, 0.5, None, 0.5),
]


def draw(rng: np.random.Generator, case: Case, r: int, theta: float, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """r data sets: (base, cand) bool arrays of shape (r, n, repeats), true difference θ."""
    n = case.n if n is None else n
    codes = case.codes(n)
    groups = int(codes.max()) + 1
    m = np.full((r, groups), case.mu) if case.tau is None else rng.beta(case.mu * case.tau, (1 - case.mu) * case.tau, size=(r, groups))
    m = m[:, codes]
    p = m if case.kappa is None else rng.beta(np.maximum(case.kappa * m, 1e-9), np.maximum(case.kappa * (1 - m), 1e-9))
    s, w_bar = case.at(theta)
    w = (
        np.full((r, groups), w_bar)
        if case.nu is None or w_bar in (0.0, 1.0)
        else rng.beta(w_bar * case.nu, (1 - w_bar) * case.nu, size=(r, groups))
    )
    t = 0.0 if w_bar >= 1.0 else (theta + w_bar * s * case.mu) / ((1 - w_bar) * (1 - case.mu))
    assert -1e-12 <= t <= 1.0 + 1e-12, (case.name, theta, t)
    worse = rng.random((r, n)) < w[:, codes]
    q = np.where(worse, (1 - s) * p, p + t * (1 - p))
    u = rng.random((r, n, case.repeats))
    uc = np.where(rng.random(u.shape) < case.coupling, u, rng.random(u.shape))
    return u < p[..., None], uc < q[..., None]


def paired_numbers(a: np.ndarray, b: np.ndarray, codes: np.ndarray) -> dict[str, np.ndarray]:
    """`decision.summarize`'s numbers for every data set at once (every cell valid in both): the
    clustered SE by problem, by category where CR1 shows the categories at least as spread
    (paired_difference's choice; then CR2 and Carter's effective clusters), none where every
    problem differs alike; the discordant counts."""
    r, n, k = a.shape
    cells = n * k
    d = b.astype(np.int8) - a.astype(np.int8)
    sums = d.sum(axis=2, dtype=np.int64).astype(np.float64)
    diff = sums.sum(axis=1) / cells
    resid = sums - k * diff[:, None]
    se = np.sqrt(n / (n - 1) * (resid**2).sum(axis=1) / cells**2)
    df = np.full(r, n - 1.0)
    groups = int(codes.max()) + 1
    if 2 <= groups < n:
        onehot = np.zeros((n, groups))
        onehot[np.arange(n), codes] = 1.0
        by_group = resid @ onehot
        use = np.sqrt(groups / (groups - 1) * (by_group**2).sum(axis=1) / cells**2) >= se
        share = np.bincount(codes, minlength=groups) / n
        se_cr2 = np.sqrt((by_group**2 / (1.0 - share)).sum(axis=1) / cells**2)
        effective = math.floor(groups / (1.0 + np.mean((share - share.mean()) ** 2) / share.mean() ** 2))
        se, df = np.where(use, se_cr2, se), np.where(use, max(effective - 1.0, 1.0), n - 1.0)
    spread = np.ptp(sums / k, axis=1) > 1e-9
    return {
        "diff": diff,
        "stderr": np.where(spread, se, np.nan),
        "df": df,
        "n_cells": np.full(r, cells),
        "n_problems": np.full(r, n),
        "b": (a & ~b).sum(axis=(1, 2)),
        "c": (~a & b).sum(axis=(1, 2)),
    }


def verdicts(a: np.ndarray, b: np.ndarray, codes: np.ndarray, margin: float = MARGIN) -> np.ndarray:
    """One benchmark alone: GO, NO-GO or INCONCLUSIVE per data set."""
    v = verdict_arrays(**paired_numbers(a, b, codes), margin=margin, alpha=ALPHA)
    return np.where(v.go, GO, np.where(v.p_worse <= ALPHA, NO_GO, INCONCLUSIVE))


def rate(rng: np.random.Generator, case: Case, theta: float, verdict: str, *, n: int | None = None, data_sets: int = R) -> float:
    codes = case.codes(n)
    hits = 0
    for start in range(0, data_sets, CHUNK):
        a, b = draw(rng, case, min(CHUNK, data_sets - start), theta, n)
        hits += int((verdicts(a, b, codes) == verdict).sum())
    return hits / data_sets


def mc_se(p: float, data_sets: int = R) -> float:
    return math.sqrt(p * (1 - p) / data_sets)


def table(x: np.ndarray, codes: np.ndarray | None, name: str = "sim") -> ScoreTable:
    """A merged benchmark's table of one data set's cells (problems × repeats)."""
    x = np.asarray(x, dtype=np.float64)
    p, k = x.shape
    return ScoreTable(
        benchmark=name,
        n_problems=p,
        repeats=k,
        score=array("d", x.ravel().tobytes()),
        status=bytearray([OK]) * (p * k),
        cluster=None if codes is None or int(codes.max()) == 0 else array("i", codes.astype(np.int32).tobytes()),
        cluster_names=[] if codes is None else [f"subject{i}" for i in range(int(codes.max()) + 1)],
        problem_ids=[f"q{i}" for i in range(p)],
    )


FIGURES: list[str] = []


def report(line: str) -> None:
    FIGURES.append(line)
    print(line)


def test_the_vectorised_path_equals_the_real_decision():
    """The numbers and verdicts the simulation computes for thousands of data sets at once equal
    `summarize` + `decide_summary` (paired_difference underneath) on real tables of the same draws."""
    rng = np.random.default_rng(44)
    kinds: set[str] = set()
    for case in CASES:
        codes = case.codes()
        for theta in (-MARGIN, 0.0, -1.5 * MARGIN):
            a, b = draw(rng, case, 12, theta)
            fast = paired_numbers(a, b, codes)
            got = verdicts(a, b, codes)
            for i in range(12):
                s = summarize(table(a[i], codes), table(b[i], codes), ALPHA)
                assert s.diff == pytest.approx(fast["diff"][i], abs=1e-12)
                assert (s.stderr is None) == bool(np.isnan(fast["stderr"][i]))
                if s.stderr is not None:
                    assert s.stderr == pytest.approx(fast["stderr"][i], rel=1e-9)
                assert s.df == pytest.approx(fast["df"][i], rel=1e-12)
                assert (s.base_right_cand_wrong, s.base_wrong_cand_right) == (fast["b"][i], fast["c"][i])
                d = decide_summary(s, MARGIN, ALPHA)
                assert d.verdict == got[i], (case.name, theta, i)
                kinds.add(d.verdict)
                # the verdict and its bounds say the same
                assert (d.verdict == GO) == (d.lower is not None and d.lower > -MARGIN)
                if d.verdict == NO_GO:
                    assert d.upper is not None and d.upper < 0
    assert kinds == {GO, NO_GO, INCONCLUSIVE}


@pytest.mark.parametrize("case", CASES, ids=[c.name.split(":")[0] + str(i) for i, c in enumerate(CASES)])
def test_type_i_error_rates_hold(case):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    started = time.perf_counter()
    go_at_margin = rate(rng, case, -MARGIN, GO)
    no_go_at_zero = rate(rng, case, 0.0, NO_GO)
    limit = ALPHA + 3 * mc_se(ALPHA)
    report(
        f"{case.name}: P(GO | diff = -{MARGIN}) = {go_at_margin:.4f} ± {mc_se(go_at_margin):.4f}, "
        f"P(NO-GO | diff = 0) = {no_go_at_zero:.4f} ± {mc_se(no_go_at_zero):.4f} "
        f"({R:,} data sets each, limit {limit:.4f}; {time.perf_counter() - started:.1f} s)"
    )
    assert go_at_margin <= limit
    assert no_go_at_zero <= limit


PILOT_PROBLEMS = 20_000


def planned_problems(case: Case, theta: float, rng: np.random.Generator, *, margin: float | None, detect: float | None) -> int:
    """`shardeval plan BASE --against PILOT` on a large pilot pair of the case at θ: the real plan code."""
    a, b = draw(rng, case, 1, theta, PILOT_PROBLEMS)
    codes = case.codes(PILOT_PROBLEMS)
    spread = spread_of_pair(summarize(table(a[0], codes), table(b[0], codes), ALPHA), margin or 0.0)
    (req,) = requirements(spread, alpha=ALPHA, target_power=POWER, margin=margin, detect=detect)
    needed = req.problems[str(case.repeats)]
    assert needed is not None
    return needed


REPEATS = Case("repeats: 300 problems, 4 repeats, clustered by problem", 300, 4, 1, 0.6, None, 1.5, 0.15, 0.5, None, 0.3)
POWER_CASES = [
    (CASES[0], "GO", 0.0),
    (CASES[0], "NO-GO", -0.03),
    (REPEATS, "GO", 0.0),
    (REPEATS, "NO-GO", -0.05),
    (CASES[5], "GO", 0.0),
    (CASES[3], "NO-GO", -0.02),
]


@pytest.mark.parametrize("case,verdict,theta", POWER_CASES, ids=[f"{c.name.split(':')[0]}-{v}" for c, v, _ in POWER_CASES])
def test_power_at_the_planned_size(case, verdict, theta):
    """At the problems plan asks for, the verdict the effect calls for comes with the power asked."""
    rng = np.random.default_rng(7 + int(1000 * abs(theta)))
    n = planned_problems(case, theta, rng, margin=MARGIN if verdict == GO else None, detect=-theta if verdict == NO_GO else None)
    data_sets = R
    started = time.perf_counter()
    got = rate(rng, case, theta, verdict, n=n, data_sets=data_sets)
    report(
        f"{case.name}, diff {theta}: plan asks {n:,} problems x {case.repeats} for {verdict} at power {POWER}; "
        f"P({verdict}) = {got:.4f} ± {mc_se(got, data_sets):.4f} ({data_sets:,} data sets; {time.perf_counter() - started:.1f} s)"
    )
    assert got >= POWER - 3 * mc_se(POWER, data_sets)


def test_several_benchmarks_overall_error_rates():
    """Three benchmarks: an equally good candidate is NO-GO overall at most α of the time (Holm);
    one δ worse on one benchmark and far better on the others is GO overall at most α (the
    intersection-union test needs no correction)."""
    rng = np.random.default_rng(3)
    case = CASES[8]
    codes = case.codes()
    no_go = go = 0
    for start in range(0, R, CHUNK):
        r = min(CHUNK, R - start)
        same = [verdict_arrays(**paired_numbers(*draw(rng, case, r, 0.0), codes), margin=MARGIN, alpha=ALPHA) for _ in range(3)]
        mixed = [
            verdict_arrays(**paired_numbers(*draw(rng, case, r, theta), codes), margin=MARGIN, alpha=ALPHA)
            for theta in (-MARGIN, 0.05, 0.05)
        ]
        for i in range(r):
            overall = _overall(same, i)
            no_go += overall == NO_GO
            go += _overall(mixed, i) == GO
    limit = ALPHA + 3 * mc_se(ALPHA)
    report(
        f"3 benchmarks ({case.name}): P(overall NO-GO | all diff 0) = {no_go / R:.4f} ± {mc_se(no_go / R):.4f}; "
        f"P(overall GO | one at -{MARGIN}, two at +0.05) = {go / R:.4f} ± {mc_se(go / R):.4f} ({R:,} data sets each, limit {limit:.4f})"
    )
    assert no_go / R <= limit and go / R <= limit


def _overall(per_bench: list, i: int) -> str:
    """gate()'s overall verdict over the i-th data set of each benchmark (the real function)."""
    from shardeval_metrics.decision import BenchmarkDecision

    decisions = [
        BenchmarkDecision(
            benchmark=f"b{j}",
            verdict=GO if bool(v.go[i]) else (NO_GO if float(v.p_worse[i]) <= ALPHA else INCONCLUSIVE),
            reason="",
            margin=MARGIN,
            alpha=ALPHA,
            diff=0.0,
            lower=0.0,
            upper=0.0,
            method="tango-score",
            p_worse=float(v.p_worse[i]),
        )
        for j, v in enumerate(per_bench)
    ]
    return gate(decisions, base="a", candidate="b", margin=MARGIN, alpha=ALPHA, target_power=POWER, metric="accuracy").verdict
