"""No interval claims certainty because the sample shows no spread (issue 24, items 8 and 9: H8d, H9b).

Item 8 gave proportions intervals that keep their width at 0 and 1; the normal intervals (a judge's
ratings, any non-binary score) and the paired interval of compare and the sweep still came out
[c, c] whenever the sample happened to show no spread:

- compare of two runs that differ on every problem the same way: [1.0, 1.0] (and, with repeats,
  p = 0.0 from the t test: "<0.0001" from a sign that two problems could show);
- two categories whose differences balance: SE 1e-17, [0.1, 0.1], next to McNemar's p = 0.125;
- a judge's ratings that are all 7: [0.7, 0.7]; two categories of ratings with the same mean:
  [0.75, 0.75] (clustered, stderr 0).

Real runs against the simulator through the CLI, and the same cases on constructed tables.
"""

from __future__ import annotations

import json
import math
from array import array
from pathlib import Path

import numpy as np
import pytest

from conftest import running_sim, shardeval_cmd
from shardeval.results.metrics import OK, MetricOptions, ScoreTable
from shardeval_metrics.dist import clopper_pearson_interval
from shardeval_metrics.metrics import accuracy
from shardeval_metrics.paired import paired_difference

OPTS = MetricOptions()


def table(x, clusters=None) -> ScoreTable:
    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    p, r = x.shape
    return ScoreTable(
        benchmark="t",
        n_problems=p,
        repeats=r,
        score=array("d", x.ravel().tobytes()),
        status=bytearray([OK]) * (p * r),
        cluster=None if clusters is None else array("i", np.asarray(clusters, dtype=np.int32).tobytes()),
        cluster_names=[] if clusters is None else [f"g{i}" for i in range(int(np.max(clusters)) + 1)],
    )


def run_at(url: str, out: Path, repeats: int) -> None:
    done = shardeval_cmd(
        "run",
        "--bench",
        "arith",
        "--model-url",
        url,
        "--model-id",
        "sim",
        "-o",
        str(out),
        "--max-problems",
        "30",
        "-n",
        str(repeats),
        "--no-cache",
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("repeats", [1, 3], ids=["one_sample_mcnemar", "three_repeats_t"])
def test_compare_of_runs_that_differ_on_every_problem_claims_no_certainty(tmp_path: Path, repeats: int) -> None:
    """A model always right against one always wrong, and a run against itself: the interval keeps a
    width that 30 problems justify, and the p-value is what 30 problems can show."""
    with (
        running_sim("--bench", "arith", "--accuracy", "1.0", "--ttft-ms", "0", "--itl-ms", "0") as right,
        running_sim("--bench", "arith", "--accuracy", "0.0", "--ttft-ms", "0", "--itl-ms", "0") as wrong,
    ):
        run_at(right, tmp_path / "right", repeats)
        run_at(wrong, tmp_path / "wrong", repeats)
    low = clopper_pearson_interval(30, 30, 0.95)[0]  # 0.884: at least this share of problems differ by 1
    done = shardeval_cmd("compare", str(tmp_path / "wrong"), str(tmp_path / "right"), "--json")
    assert done.returncode == 0, done.stderr
    (r,) = json.loads(done.stdout)
    assert r["diff"] == 1.0 and r["ci_high"] == 1.0
    assert r["ci_low"] == pytest.approx(2 * low - 1, rel=1e-12) and r["ci_low"] < 0.8  # was [1.0, 1.0]
    assert r["ci_method"] == "no-variation-bound" and r["stderr"] is None and "no spread" in r["details"]["reason"]
    assert r["p_value"] == pytest.approx(2 * 0.5**30, rel=1e-9)  # each problem once (was 0.0 with repeats)
    same = shardeval_cmd("compare", str(tmp_path / "right"), str(tmp_path / "right"), "--json")
    (s,) = json.loads(same.stdout)
    assert s["diff"] == 0.0 and s["p_value"] == 1.0
    assert s["ci_low"] == pytest.approx(-(1 - low), rel=1e-12) and s["ci_high"] == pytest.approx(1 - low, rel=1e-12)
    text = shardeval_cmd("compare", str(tmp_path / "wrong"), str(tmp_path / "right")).stdout
    assert "[1.0000, 1.0000]" not in text and "no-variation-bound" in text


def test_two_categories_that_balance_do_not_make_a_paired_interval_zero_width() -> None:
    """40 problems in two categories, B right on two more in each: the category SE is 1e-17; the
    problems' spread is used instead (clustering widens an interval, never narrows it)."""
    a = np.zeros(40)
    a[:10] = a[20:30] = 1
    b = a.copy()
    b[10:12] = b[30:32] = 1
    cats = [0] * 20 + [1] * 20
    r = paired_difference(table(a, cats), table(b, cats), OPTS)
    se = float(np.std(b - a, ddof=1)) / math.sqrt(40)
    assert r["diff"] == pytest.approx(0.1) and r["stderr"] == pytest.approx(se, rel=1e-12)
    assert r["ci_high"] - r["ci_low"] > 0.15 and r["clustered_by"] == "problem" and "less spread" in r["cluster_note"]
    assert r["p_value"] == 0.125  # McNemar's, unchanged
    # variant: a real category effect is still clustered by category (t on G − 1 df)
    rng = np.random.default_rng(7)
    cats8 = np.repeat(np.arange(8), 5)
    x = rng.random(40)
    y = x + rng.normal(0.02, 0.2, 8)[cats8] + rng.normal(0, 0.02, 40)
    real = paired_difference(table(x, cats8), table(y, cats8), OPTS)
    assert real["clustered_by"] == "category" and real["df"] == 7


def test_a_mean_with_no_spread_has_no_interval_and_balanced_categories_use_the_problems() -> None:
    """A judge that rates every answer 7: no interval (was [0.7, 0.7]); two categories of ratings
    with the same mean: the CLT interval (was [0.75, 0.75], clustered, stderr 0)."""
    sevens = accuracy(table(np.full(40, 0.7)), OPTS)["accuracy"]
    assert sevens.value == pytest.approx(0.7) and sevens.ci_low is None and sevens.ci_high is None
    assert sevens.stderr is None and "no spread" in sevens.details["reason"]
    ratings = np.array([0.7, 0.9, 0.8, 0.6] * 10)
    m = accuracy(table(ratings, [0] * 20 + [1] * 20), OPTS)["accuracy"]
    assert m.ci_method == "clt" and m.stderr == pytest.approx(float(np.std(ratings, ddof=1)) / math.sqrt(40), rel=1e-12)
    assert m.ci_high - m.ci_low > 0.05 and "less spread" in m.details["cluster_note"]
    # variant: a forced normal interval on a proportion at 1.0 is no interval either, and says what to use
    forced = accuracy(table(np.ones(40)), MetricOptions(ci_method="clt"))["accuracy"]
    assert forced.ci_low is None and "--ci-method auto" in forced.details["reason"]
    assert accuracy(table(np.ones(40)), OPTS)["accuracy"].ci_low < 1.0  # auto: Wilson, as before


def test_a_judged_run_rated_the_same_everywhere_reports_no_certain_interval(tmp_path: Path) -> None:
    """The simulated judge on every answer ties the pairwise verdict (0.5 each): report.md showed
    [0.5000, 0.5000]; now the row has no interval and scores.json says why."""
    cfg = tmp_path / "judge.yaml"
    text = Path(__file__).resolve().parents[1].joinpath("examples", "judge_sim.yaml").read_text()
    cfg.write_text(
        text.replace("accuracy: 0.7", "accuracy: 1.0")
        .replace("judge_quality: 0.9", "judge_quality: 1.0")
        .replace("n: 200", "n: 20")
        .replace("./eval_results/judge_sim", str(tmp_path / "out"))
    )
    done = shardeval_cmd("run", str(cfg))
    assert done.returncode == 0, done.stderr
    scores = json.loads((tmp_path / "out" / "merged" / "scores.json").read_text())
    pair = scores["arith_pairwise"]["metrics"]["mean"]
    assert pair["value"] == 0.5 and pair.get("ci_low") is None and "no spread" in pair["details"]["reason"]
    assert "[0.5000, 0.5000]" not in (tmp_path / "out" / "merged" / "report.md").read_text()


def test_a_perfect_classifier_has_no_bootstrap_interval_of_zero_width() -> None:
    """Every prediction right: every bootstrap replicate of macro F1 is 1.0, and the percentile
    interval read [1.0, 1.0]. Now no interval, and the reason says why. Variant: one mistake in 40
    gives a bootstrap interval with width, as before."""
    from shardeval_metrics.classification import classification

    gold = [i % 3 for i in range(40)]

    def cls_table(pred: list[int]) -> ScoreTable:
        t = table([float(p == g) for p, g in zip(pred, gold)])
        t.predicted, t.gold, t.labels = array("i", pred), array("i", gold), ["a", "b", "c"]
        return t

    perfect = classification(cls_table(list(gold)), OPTS)
    for key, v in perfect.items():
        assert v.value == 1.0 and v.ci_low is None and v.ci_high is None, key
        assert v.ci_method == "none" and "no spread" in v.details["reason"]
    one_off = list(gold)
    one_off[0] = 1
    f1 = classification(cls_table(one_off), OPTS)["macro_f1"]
    assert f1.ci_method == "bootstrap" and f1.ci_low < f1.value <= f1.ci_high
