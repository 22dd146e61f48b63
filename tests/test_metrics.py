"""Each registered metric on small hand-built ScoreTables, with hand-checked values."""

from __future__ import annotations

import math
import subprocess
import sys
from array import array

import msgspec
import numpy as np
import pytest

from shardeval.results.metrics import ERROR, MISSING, OK, MetricOptions, MetricValue, ScoreTable
from shardeval_metrics import classification as classification_module
from shardeval_metrics.classification import classification
from shardeval_metrics.metrics import accuracy, mean, pass_at_k, perplexity, ratio_of_sums
from shardeval_metrics.stats import bootstrap_over_problems, percentile_interval

NAN = float("nan")
OPTS = MetricOptions()
Z95 = 1.959963984540054


def table(rows, *, clusters=None, cluster_names=None, extra=None, predicted=None, gold=None, labels=(), status=None) -> ScoreTable:
    """A table from a list of per-problem rows (repeats = row length), the way merge builds one."""
    n_problems, repeats = len(rows), len(rows[0])
    cells = [v for row in rows for v in row]
    if status is None:
        status = bytearray(OK if not math.isnan(v) else MISSING for v in cells)
    return ScoreTable(
        benchmark="hand",
        n_problems=n_problems,
        repeats=repeats,
        score=array("d", cells),
        status=bytearray(status),
        cluster=None if clusters is None else array("i", clusters),
        cluster_names=list(cluster_names or []),
        extra={k: array("d", [v for row in rows_ for v in row]) for k, rows_ in (extra or {}).items()},
        predicted=None if predicted is None else array("i", [v for row in predicted for v in row]),
        gold=None if gold is None else array("i", [v for row in gold for v in row]),
        labels=list(labels),
    )


def plain(value: MetricValue) -> None:
    """Plain Python floats (or None), never numpy scalars or NaN."""
    for name in ("value", "stderr", "ci_low", "ci_high"):
        v = getattr(value, name)
        assert v is None or (type(v) is float and math.isfinite(v)), (name, v, type(v))
    assert type(value.n) is int
    msgspec.json.encode(value)  # JSON-able details


# --- accuracy / mean ---------------------------------------------------------------------------


def test_accuracy_per_problem_means_and_nan_excluded() -> None:
    t = table([[1, 0], [1, 1], [0, NAN], [NAN, NAN]])
    v = accuracy(t, OPTS)["accuracy"]
    plain(v)
    # s = [0.5, 1, 0]: mean of problem means, not of cells (3/5)
    assert v.value == 0.5
    assert v.n == 3
    assert v.details["n_problems_with_samples"] == 3
    assert v.details["n_samples"] == 5
    assert v.details["n_flagged_problems"] == 1
    assert v.stderr == pytest.approx(0.5 / math.sqrt(3))  # sd([.5, 1, 0], ddof=1) = 0.5
    # a proportion (issue 24): an interval at the effective size, inside (0, 1) (auto: few counts, exact)
    assert v.ci_method == "clopper-pearson" and 0.0 < v.ci_low < 0.5 < v.ci_high < 1.0
    # --ci-method clt: 0.5 ± 1.96·0.2887 leaves [0, 1]: binary scores clip it
    w = accuracy(t, MetricOptions(ci_method="clt"))["accuracy"]
    assert w.ci_method == "clt" and (w.ci_low, w.ci_high) == (0.0, 1.0)


def test_accuracy_clt_interval_values() -> None:
    rows = [[0.2], [0.4], [0.9], [0.5]] * 10  # not binary: CLT, no clipping
    v = accuracy(table(rows), OPTS)["accuracy"]
    s = np.array([r[0] for r in rows])
    se = s.std(ddof=1) / math.sqrt(40)
    assert v.ci_method == "clt"
    assert v.value == pytest.approx(0.5)
    assert v.stderr == pytest.approx(se, rel=1e-12)
    assert v.ci_low == pytest.approx(0.5 - Z95 * se, rel=1e-12)
    assert v.ci_high == pytest.approx(0.5 + Z95 * se, rel=1e-12)
    assert v.details["binary"] is False


def test_accuracy_nan_is_never_zero() -> None:
    with_nan = accuracy(table([[1, NAN], [1, 1], [NAN, 0]]), OPTS)["accuracy"]
    assert with_nan.value == pytest.approx(2 / 3)  # s = [1, 1, 0]
    as_zero = accuracy(table([[1, 0], [1, 1], [0, 0]]), OPTS)["accuracy"]
    assert as_zero.value == pytest.approx(0.5)


def test_accuracy_wilson_small_binary() -> None:
    # auto takes Clopper-Pearson with fewer than 5 failures (issue 24); --ci-method wilson: Wilson's
    assert accuracy(table([[1]] * 7 + [[0]] * 3), OPTS)["accuracy"].ci_method == "clopper-pearson"
    v = accuracy(table([[1]] * 7 + [[0]] * 3), MetricOptions(ci_method="wilson"))["accuracy"]
    plain(v)
    assert v.ci_method == "wilson"
    p, n = 0.7, 10
    center = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 / (1 + Z95**2 / n) * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n))
    assert v.ci_low == pytest.approx(center - half, rel=1e-12)
    assert v.ci_high == pytest.approx(center + half, rel=1e-12)
    assert v.ci_low == pytest.approx(0.3967781, abs=1e-6)  # published Wilson interval for 7/10
    assert v.ci_high == pytest.approx(0.8922087, abs=1e-6)
    assert v.stderr == pytest.approx(np.std([1] * 7 + [0] * 3, ddof=1) / math.sqrt(10), rel=1e-12)


def test_accuracy_wilson_rule_switch() -> None:
    # binary scores are a proportion: auto gives Wilson's interval (issue 24: it used to be CLT here)
    assert accuracy(table([[1]] * 20 + [[0]] * 20), OPTS)["accuracy"].ci_method == "wilson"
    assert accuracy(table([[1]] * 20 + [[0]] * 20), MetricOptions(ci_method="clt"))["accuracy"].ci_method == "clt"
    # all correct: the CLT interval would be [1, 1]; Wilson is not
    v = accuracy(table([[1]] * 200), OPTS)["accuracy"]
    assert v.ci_method == "wilson" and v.stderr == 0.0 and v.ci_low < 1.0 and v.ci_high == 1.0
    # repeats > 1 per problem: Wilson too, at the effective size (every problem exactly 0.5: stderr 0,
    # the design effect clamped to 1, so the 10 cells count)
    assert accuracy(table([[1, 0]] * 5), OPTS)["accuracy"].ci_method == "wilson"
    # few failures: Clopper-Pearson
    assert accuracy(table([[1, NAN]] * 5 + [[NAN, 0]] * 2), OPTS)["accuracy"].ci_method == "clopper-pearson"


def test_accuracy_one_problem_and_no_problem() -> None:
    v = accuracy(table([[0.3, 0.5]]), OPTS)["accuracy"]
    plain(v)
    assert v.value == pytest.approx(0.4) and v.stderr is None and v.ci_low is None
    assert "reason" in v.details
    w = accuracy(table([[1]]), OPTS)["accuracy"]  # binary: Wilson is defined at n = 1
    assert w.stderr is None and w.ci_method == "wilson" and 0 < w.ci_low < 1 and w.ci_high == 1.0
    none = accuracy(table([[NAN, NAN], [NAN, NAN]]), OPTS)["accuracy"]
    plain(none)
    assert none.value is None and none.n == 0 and none.details["n_flagged_problems"] == 2


def test_accuracy_clusters_details() -> None:
    rows = [[1], [0], [1], [1], [0], [0]]
    v = accuracy(table(rows, clusters=[0, 0, 0, 1, 1, -1], cluster_names=["alg", "geo"]), OPTS)["accuracy"]
    plain(v)
    assert v.ci_method == "clopper-pearson-clustered"  # 6 problems: 3 right, 3 wrong (few counts)
    assert v.details["n_clusters"] == 3  # alg, geo, and the unclustered problem on its own
    per = v.details["per_cluster"]
    assert {k: (e["value"], e["n"]) for k, e in per.items()} == {
        "alg": (pytest.approx(2 / 3), 3),
        "geo": (0.5, 2),
        "(no cluster)": (0.0, 1),
    }
    # each cluster's own interval, by accuracy's rules (few counts: Clopper-Pearson; at 0: Wilson)
    for name, entry in per.items():
        assert entry["ci_method"] in ("clopper-pearson", "wilson") and entry["ci_low"] <= entry["value"] <= entry["ci_high"], (name, entry)
    assert per["geo"]["stderr"] == pytest.approx(math.sqrt(0.5 / 2))  # sd(ddof=1) of [1, 0] / sqrt(2)
    assert "stderr" not in per["(no cluster)"]  # one problem: no stderr
    # SE² = G/(G−1) Σ_g (Σ_{i∈g} (s_i − s̄))² / n²; s̄ = 0.5: sums 0.5, 0, −0.5
    se = math.sqrt(3 / 2 * (0.25 + 0 + 0.25) / 36)
    assert v.stderr == pytest.approx(se)
    assert v.details["df"] == 2


def test_accuracy_variance_split_in_details() -> None:
    rows = [[1, 1, 0, 1], [0, 0, 1, 0], [1, 1, 1, 1], [0, 1, 0, 1]]
    v = accuracy(table(rows), OPTS)["accuracy"]
    split = v.details["variance_split"]
    s = np.array(rows, dtype=float).mean(axis=1)
    within = np.mean(np.var(np.array(rows, dtype=float), axis=1, ddof=1))
    assert split["sigma2_within"] == pytest.approx(within)
    assert split["sigma2_between"] == pytest.approx(max(0.0, s.var(ddof=1) - within / 4))
    assert set(split["se_if_repeats"]) == {"1", "2", "4", "8", "16", "32"}
    assert split["se_if_repeats"]["4"] == pytest.approx(v.stderr)
    # single samples: within-problem variance is not identifiable
    w = accuracy(table([[1], [0], [1]]), OPTS)["accuracy"]
    assert w.details["variance_split"] is None and "variance_split_reason" in w.details


def test_mean_is_accuracy_under_its_own_name() -> None:
    t = table([[0.25, 0.75], [0.5, NAN], [1.0, 0.0]])
    a = accuracy(t, OPTS)["accuracy"]
    m = mean(t, OPTS)
    assert list(m) == ["mean"]
    assert msgspec.json.encode(m["mean"]) == msgspec.json.encode(a)


def test_metrics_are_deterministic() -> None:
    rng = np.random.default_rng(0)
    rows = (rng.random((300, 3)) < 0.4).astype(float).tolist()
    gold = rng.integers(0, 4, (300, 3)).tolist()
    pred = rng.integers(-1, 4, (300, 3)).tolist()
    t = table(
        rows,
        clusters=list(rng.integers(0, 20, 300)),
        extra={"nll": rng.random((300, 3)).tolist(), "tokens": rng.integers(1, 9, (300, 3)).tolist()},
        predicted=pred,
        gold=gold,
        labels="abcd",
    )
    for f in (accuracy, pass_at_k, perplexity, classification):
        assert msgspec.json.encode(f(t, OPTS)) == msgspec.json.encode(f(t, OPTS))
        for v in f(t, OPTS).values():
            plain(v)


# --- pass@k ------------------------------------------------------------------------------------


def test_pass_at_k_hand_values() -> None:
    t = table([[1, 0, 0], [1, 1, 1], [0, 0, 0]])
    out = pass_at_k(t, OPTS)
    assert list(out) == ["pass@1", "pass@2", "pass@3"]
    for v in out.values():
        plain(v)
    assert out["pass@1"].value == pytest.approx((1 / 3 + 1 + 0) / 3)
    # problem 1: 1 − C(2,2)/C(3,2) = 2/3; problem 2: 1; problem 3: 0
    assert out["pass@2"].value == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert out["pass@3"].value == pytest.approx(2 / 3)
    assert out["pass@3"].ci_method == "clopper-pearson"  # n = k samples: one Bernoulli; 2 of 3 (few counts)
    assert out["pass@2"].ci_method == "clopper-pearson"  # a proportion too (issue 24), one cell per problem
    assert out["pass@2"].stderr == pytest.approx(np.std([2 / 3, 1, 0], ddof=1) / math.sqrt(3))
    assert all(v.details["n_flagged"] == 0 for v in out.values())


def test_pass_at_k_flags_short_problems() -> None:
    t = table([[1, 0, 1], [1, NAN, NAN], [0, 1, NAN], [NAN, NAN, NAN]])
    out = pass_at_k(t, OPTS)
    assert out["pass@1"].n == 3 and out["pass@1"].details["n_flagged"] == 1
    assert out["pass@2"].n == 2 and out["pass@2"].details["n_flagged"] == 2
    assert out["pass@3"].n == 1 and out["pass@3"].details["n_flagged"] == 3
    assert out["pass@1"].value == pytest.approx((2 / 3 + 1 + 0.5) / 3)
    assert out["pass@2"].value == pytest.approx((1.0 + 1.0) / 2)  # (3, 2): n−c = 1 < 2 → 1; (2, 1): 1
    assert "flagged_note" in out["pass@3"].details


def test_pass_at_1_single_sample_equals_accuracy() -> None:
    rows = [[1]] * 12 + [[0]] * 5 + [[NAN]]
    p1 = pass_at_k(table(rows), OPTS)["pass@1"]
    acc = accuracy(table(rows), OPTS)["accuracy"]
    assert (p1.value, p1.stderr, p1.ci_low, p1.ci_high, p1.ci_method) == (acc.value, acc.stderr, acc.ci_low, acc.ci_high, acc.ci_method)


def test_pass_at_k_needs_binary_scores() -> None:
    out = pass_at_k(table([[1, 0.5], [0, 1]]), OPTS)
    assert list(out) == ["pass@k"]
    assert out["pass@k"].value is None and "binary" in out["pass@k"].details["reason"]


def test_pass_at_k_clustered() -> None:
    rows = [[1, 0], [1, 1], [0, 0], [1, 0], [0, 1], [1, 1]]
    out = pass_at_k(table(rows, clusters=[0, 0, 1, 1, 2, 2], cluster_names=["a", "b", "c"]), OPTS)
    assert out["pass@2"].ci_method == "clopper-pearson-clustered"
    assert out["pass@2"].details["n_clusters"] == 3
    assert (
        pass_at_k(table(rows, clusters=[0, 0, 1, 1, 2, 2], cluster_names=["a", "b", "c"]), MetricOptions(ci_method="clustered"))[
            "pass@2"
        ].ci_method
        == "clustered"
    )


# --- perplexity / ratio of sums ----------------------------------------------------------------


def test_perplexity_hand_values() -> None:
    nll = [[2.0, 4.0], [NAN, 3.0], [1.0, NAN]]
    tokens = [[1.0, 3.0], [5.0, 2.0], [2.0, 7.0]]
    t = table([[NAN, NAN]] * 3, extra={"nll": nll, "tokens": tokens})
    out = perplexity(t, OPTS)
    assert list(out) == ["perplexity", "token_nll"]
    for v in out.values():
        plain(v)
    # valid cells: (2,1), (4,3), (3,2), (1,2) → 10 / 8
    assert out["token_nll"].value == 10 / 8
    assert out["perplexity"].value == math.exp(10 / 8)
    assert out["token_nll"].n == 3
    # delta method: e_i = N_i − R·D_i with N = [6, 3, 1], D = [4, 2, 2]
    r = 1.25
    e = np.array([6 - r * 4, 3 - r * 2, 1 - r * 2])
    se = math.sqrt(3 / 2 * float(e @ e)) / 8
    assert out["token_nll"].stderr == pytest.approx(se, rel=1e-12)
    assert out["token_nll"].ci_method == "delta"
    assert out["token_nll"].ci_low == pytest.approx(r - Z95 * se, rel=1e-12)
    assert out["perplexity"].stderr == pytest.approx(math.exp(r) * se, rel=1e-12)
    assert out["perplexity"].ci_low == pytest.approx(math.exp(r - Z95 * se), rel=1e-12)
    assert out["perplexity"].ci_high == pytest.approx(math.exp(r + Z95 * se), rel=1e-12)


def test_perplexity_is_exact_global_sum() -> None:
    """The value is fsum(nll)/fsum(tokens) exactly: what every sharding of the run would give."""
    rng = np.random.default_rng(9)
    p, r = 3001, 3
    nll = rng.random((p, r)) * 10.0 ** rng.integers(-8, 8, (p, r))  # wide magnitudes: order matters for naive sums
    tokens = rng.integers(1, 5000, (p, r)).astype(float)
    nll[rng.random((p, r)) < 0.02] = np.nan
    t = table(np.full((p, r), np.nan).tolist(), extra={"nll": nll.tolist(), "tokens": tokens.tolist()})
    out = perplexity(t, OPTS)
    valid = ~np.isnan(nll)
    canonical_nll = [v for v, ok in zip(nll.ravel().tolist(), valid.ravel().tolist()) if ok]
    canonical_tok = [v for v, ok in zip(tokens.ravel().tolist(), valid.ravel().tolist()) if ok]
    reference = math.fsum(canonical_nll) / math.fsum(canonical_tok)
    assert out["token_nll"].value == reference
    assert out["perplexity"].value == math.exp(reference)
    # unequal "shards" (cells in any grouping and order) sum to the very same float
    cuts = [0, 7, 1000, 1001, 5000, len(canonical_nll)]
    shards = [canonical_nll[a:b] for a, b in zip(cuts, cuts[1:])]
    assert math.fsum([v for shard in reversed(shards) for v in shard]) / math.fsum(canonical_tok) == reference


def test_ratio_of_sums_generic_and_missing_keys() -> None:
    t = table([[1.0], [0.0]], extra={"hits": [[3.0], [1.0]], "tries": [[4.0], [4.0]]})
    out = ratio_of_sums("hits", "tries")(t, OPTS)
    assert list(out) == ["hits/tries"] and out["hits/tries"].value == 0.5
    named = ratio_of_sums("hits", "tries", name="hit_rate")(t, OPTS)
    assert list(named) == ["hit_rate"]
    assert perplexity(t, OPTS) == {}  # no nll/tokens: not applicable
    one = perplexity(table([[NAN]], extra={"nll": [[2.0]], "tokens": [[4.0]]}), OPTS)
    assert one["token_nll"].value == 0.5 and one["token_nll"].stderr is None


def test_perplexity_clustered() -> None:
    nll = [[2.0], [3.0], [1.0], [4.0], [2.5], [0.5]]
    tokens = [[1.0], [2.0], [1.0], [3.0], [2.0], [1.0]]
    t = table([[NAN]] * 6, clusters=[0, 0, 1, 1, 2, 2], cluster_names=["x", "y", "z"], extra={"nll": nll, "tokens": tokens})
    out = perplexity(t, OPTS)
    r = 13.0 / 10.0
    e = np.array([n[0] - r * d[0] for n, d in zip(nll, tokens)])
    sums = np.array([e[0] + e[1], e[2] + e[3], e[4] + e[5]])
    se = math.sqrt(3 / 2 * float(sums @ sums)) / 10.0
    assert out["token_nll"].ci_method == "delta-clustered"
    assert out["token_nll"].stderr == pytest.approx(se, rel=1e-12)


# --- classification ----------------------------------------------------------------------------


def reference_classification(gold: list[int], pred: list[int], n_labels: int) -> dict[str, float]:
    """scikit-learn's semantics (labels = classes in gold ∪ predicted, zero_division = 0), by loops."""
    classes = sorted({g for g in gold} | {p for p in pred if p >= 0})
    per = {}
    for c in classes:
        tp = sum(1 for g, p in zip(gold, pred) if g == c and p == c)
        fp = sum(1 for g, p in zip(gold, pred) if g != c and p == c)
        fn = sum(1 for g, p in zip(gold, pred) if g == c and p != c)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per[c] = (prec, rec, f1, tp + fn)
    total = sum(v[3] for v in per.values())
    return {
        "macro_f1": sum(v[2] for v in per.values()) / len(per),
        "weighted_f1": sum(v[2] * v[3] for v in per.values()) / total,
        "macro_precision": sum(v[0] for v in per.values()) / len(per),
        "macro_recall": sum(v[1] for v in per.values()) / len(per),
    }


def test_classification_hand_example() -> None:
    # gold a a b b c c; predicted a b b (none) c a
    gold = [[0], [0], [1], [1], [2], [2]]
    pred = [[0], [1], [1], [-1], [2], [0]]
    t = table([[1], [0], [1], [0], [1], [0]], predicted=pred, gold=gold, labels=["a", "b", "c"])
    out = classification(t, OPTS)
    assert list(out) == ["macro_f1", "weighted_f1", "macro_precision", "macro_recall"]
    for v in out.values():
        plain(v)
        assert v.ci_method == "bootstrap" and v.n == 6 and v.ci_low <= v.value <= v.ci_high
    # a: P 1/2 R 1/2 F1 1/2; b: P 1/2 R 1/2 F1 1/2; c: P 1 R 1/2 F1 2/3
    assert out["macro_f1"].value == pytest.approx((0.5 + 0.5 + 2 / 3) / 3)
    assert out["weighted_f1"].value == pytest.approx((0.5 + 0.5 + 2 / 3) / 3)
    assert out["macro_precision"].value == pytest.approx(2 / 3)
    assert out["macro_recall"].value == pytest.approx(0.5)
    assert out["macro_f1"].details["per_class"]["c"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}
    assert out["macro_f1"].details["n_unparsed"] == 1


def test_classification_matches_reference_with_repeats_errors_and_absent_classes() -> None:
    rng = np.random.default_rng(21)
    p, r, n_labels = 120, 3, 5
    gold = np.repeat(rng.integers(0, 4, (p, 1)), r, axis=1)  # class 4 never gold, sometimes predicted
    pred = np.where(rng.random((p, r)) < 0.6, gold, rng.integers(-1, 5, (p, r)))
    status = np.full((p, r), OK)
    status[rng.random((p, r)) < 0.1] = ERROR
    pred[status == ERROR] = -1
    score = np.where(status == OK, (pred == gold).astype(float), np.nan)
    score[5, :] = np.nan
    status[5, :] = MISSING  # a problem with nothing: left out
    t = table(score.tolist(), predicted=pred.tolist(), gold=gold.tolist(), labels="abcde", status=status.ravel().tolist())
    out = classification(t, OPTS)
    keep = status.ravel() == OK
    ref = reference_classification(gold.ravel()[keep].tolist(), pred.ravel()[keep].tolist(), n_labels)
    for key, want in ref.items():
        assert out[key].value == pytest.approx(want, rel=1e-12), key
    assert out["macro_f1"].n == p - 1
    assert out["macro_f1"].details["n_flagged_problems"] == 1
    # --errors-as-wrong: merge gives error cells score 0; they then count as predictions of nothing
    score_ew = np.where(status == ERROR, 0.0, score)
    t_ew = table(score_ew.tolist(), predicted=pred.tolist(), gold=gold.tolist(), labels="abcde", status=status.ravel().tolist())
    keep_ew = status.ravel() != MISSING
    ref_ew = reference_classification(gold.ravel()[keep_ew].tolist(), pred.ravel()[keep_ew].tolist(), n_labels)
    out_ew = classification(t_ew, OPTS)
    for key, want in ref_ew.items():
        assert out_ew[key].value == pytest.approx(want, rel=1e-12), key


def test_classification_bootstrap_paths_agree_and_are_seeded(monkeypatch) -> None:
    rng = np.random.default_rng(22)
    p, r = 200, 2
    gold = rng.integers(0, 3, (p, r))
    pred = np.where(rng.random((p, r)) < 0.7, gold, rng.integers(-1, 3, (p, r)))
    t = table((pred == gold).astype(float).tolist(), predicted=pred.tolist(), gold=gold.tolist(), labels="xyz")
    dense = classification(t, OPTS)
    monkeypatch.setattr(classification_module, "DENSE_LIMIT", 0)
    per_cell = classification(t, OPTS)
    assert msgspec.json.encode(dense) == msgspec.json.encode(per_cell)
    other_seed = classification(t, MetricOptions(seed=1))
    assert other_seed["macro_f1"].value == dense["macro_f1"].value
    assert other_seed["macro_f1"].ci_low != dense["macro_f1"].ci_low
    # the bootstrap stderr of macro-F1 is in the range a CLT argument gives: ~sqrt(F(1−F)/cells)
    f = dense["macro_f1"].value
    assert 0.5 < dense["macro_f1"].stderr / math.sqrt(f * (1 - f) / (p * r)) < 2.5


def test_classification_not_applicable() -> None:
    assert classification(table([[1.0]]), OPTS) == {}
    t = table([[NAN]], predicted=[[0]], gold=[[-1]], labels=["a"])
    out = classification(t, OPTS)
    assert out["macro_f1"].value is None and "reason" in out["macro_f1"].details


def test_bootstrap_helper_mean_matches_clt() -> None:
    rng = np.random.default_rng(23)
    values = rng.random(400)
    opts = MetricOptions(bootstrap_samples=2000, seed=5)
    reps = bootstrap_over_problems(lambda idx: values[idx].mean(axis=1), values.size, opts)
    assert reps.shape == (2000,)
    again = bootstrap_over_problems(lambda idx: values[idx].mean(axis=1), values.size, opts)
    assert np.array_equal(reps, again)
    low, high, se, dropped = percentile_interval(reps, 0.95)
    clt = values.std(ddof=1) / math.sqrt(values.size)
    assert se == pytest.approx(clt, rel=0.06)
    assert low == pytest.approx(values.mean() - Z95 * clt, abs=0.3 * clt)
    assert high == pytest.approx(values.mean() + Z95 * clt, abs=0.3 * clt)
    assert dropped == 0


# --- the plugin --------------------------------------------------------------------------------


def test_plugin_registers_metrics_without_importing_numpy() -> None:
    code = (
        "import sys\n"
        "from shardeval import plugins\n"
        "reg = plugins.registry()\n"
        "mine = {n: e.plugin for n, e in reg.entries['metrics'].items()}\n"
        "assert {n: mine.get(n) for n in ('accuracy', 'mean', 'pass@k', 'perplexity', 'classification')} == "
        "dict.fromkeys(('accuracy', 'mean', 'pass@k', 'perplexity', 'classification'), 'metrics'), mine\n"
        "assert 'numpy' not in sys.modules, 'registering metrics imported numpy'\n"
        "from array import array\n"
        "from shardeval.results.metrics import ScoreTable, MetricOptions\n"
        "t = ScoreTable('b', 2, 1, array('d', [1.0, 0.0]), bytearray(b'\\x01\\x01'))\n"
        "print(reg.entries['metrics']['accuracy'].factory(t, MetricOptions())['accuracy'].value)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0.5"


# --- the headline metric -------------------------------------------------------------------------


HEADLINE_CASES = [  # (a benchmark's metric names, its headline, the live status page's)
    (["accuracy"], "accuracy", "accuracy"),  # accuracy only
    (["accuracy", "pass@k"], "accuracy", "accuracy"),  # the default set
    (["pass@k"], None, "accuracy"),  # pass@k alone: right/wrong scores, so the status page computes accuracy
    (["mean"], "mean", "mean"),  # a judged benchmark's graded scores
    (["mean", "accuracy"], "accuracy", "accuracy"),  # accuracy first, whatever the list's order
    (["perplexity"], None, None),  # no mean of scores to speak of
    (["classification", "perplexity"], None, None),
    ([], None, None),
]


@pytest.mark.parametrize(("names", "headline", "live"), HEADLINE_CASES)
def test_headline_metric_of_metric_names(names, headline, live) -> None:
    from shardeval.api.metric import headline_metric

    assert headline_metric(names) == headline
    assert headline_metric(iter(names)) == headline  # any iterable, read once
    assert headline_metric(names, accuracy_from_pass_at_k=True) == live


def test_headline_metric_gives_what_the_three_rules_before_it_gave() -> None:
    """Sweeps, the live status page and compare's page each had their own rule; the one function
    gives each of them, on every set of metric names, exactly what its own rule gave."""
    import itertools

    from shardeval.results.metrics import PAIRED_METRICS, headline_metric

    pool = ["accuracy", "mean", "pass@k", "pass@1", "perplexity", "classification", "score"]
    for k in range(len(pool) + 1):
        for names in itertools.permutations(pool, k) if k <= 3 else itertools.combinations(pool, k):
            sweep = next((n for n in PAIRED_METRICS if n in names), "score")
            status = next((n for n in PAIRED_METRICS if n in names), "accuracy" if "pass@k" in names else None)
            assert (headline_metric(names) or "score", headline_metric(names, accuracy_from_pass_at_k=True)) == (sweep, status), names


def test_headline_metric_of_computed_values_on_compare_page() -> None:
    """compare's page shows a run's own mean: the headline among the values merge computed that are
    finite; values from the real metrics, a run with no valid cell has none."""
    from shardeval_pages.compare_page import own_mean

    answered = table([[1, 0], [1, 1], [0, 1]])
    computed = {**accuracy(answered, OPTS), **pass_at_k(answered, OPTS), **perplexity(answered, OPTS)}
    assert own_mean(computed) == ("accuracy", computed["accuracy"])
    graded = mean(table([[0.5, 0.25], [1.0, 0.75]]), OPTS)
    assert own_mean(graded) == ("mean", graded["mean"])
    assert own_mean(pass_at_k(answered, OPTS)) is None  # pass@1 … pass@R are no run's own mean
    nothing = table([[NAN, NAN]], status=[ERROR, ERROR])
    assert own_mean({**accuracy(nothing, OPTS), **mean(nothing, OPTS)}) is None  # no finite value
    assert own_mean({}) is None
