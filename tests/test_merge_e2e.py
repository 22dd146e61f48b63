"""Merge against real runs: shards of a real simulator evaluation, merged by the real CLI."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

from conftest import running_sim, shardeval_cmd
from shardeval.results.merge import merge_run
from shardeval.results.metrics import MetricOptions, ScoreTable
from shardeval import plugins


def write_config(tmp: Path, url: str, n: int, repeats: int) -> Path:
    path = tmp / f"config-{n}-{repeats}.yaml"
    path.write_text(
        f"""
services:
  model: {{type: api, url: "{url}", model: sim}}
benchmarks:
  - name: arith
    params: {{n: {n}}}
    repeats: {repeats}
    max_concurrent: 64
output: {{progress_interval_s: 0}}
"""
    )
    return path


def test_sharded_and_unsharded_runs_give_identical_scores(tmp_path, sim):
    cfg = write_config(tmp_path, sim, n=90, repeats=3)
    assert shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "whole" / "shard_0")).returncode == 0
    for i in range(4):
        r = shardeval_cmd("run", str(cfg), "--shard", f"{i}/4", "-o", str(tmp_path / "split" / f"shard_{i}"))
        assert r.returncode == 0, r.stderr
    for run in ("whole", "split"):
        merged = shardeval_cmd("merge", str(tmp_path / run))
        assert merged.returncode == 0, merged.stderr
        assert "COMPLETE" in merged.stdout and "| accuracy |" in merged.stdout
    whole = (tmp_path / "whole" / "merged" / "scores.json").read_bytes()
    split = (tmp_path / "split" / "merged" / "scores.json").read_bytes()
    assert whole == split
    metrics = json.loads(whole)["arith"]["metrics"]
    assert {"accuracy", "pass@1", "pass@2", "pass@3"} <= set(metrics)
    assert metrics["accuracy"]["n"] == 90


def test_intervals_contain_the_simulators_true_accuracy_at_the_nominal_rate(tmp_path):
    """400 independent 'runs' of 40 problems: each repeat column is one run (its own seeds), so the
    simulator's Bernoulli(p) draws are independent across columns. Coverage of the 95 % interval
    must be near 0.95; with 400 runs its standard error is about 0.011, so 0.80 would fail."""
    p, n, runs = 0.7, 40, 400
    with running_sim("--bench", "arith", "--accuracy", str(p), "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "8") as url:
        cfg = write_config(tmp_path, url, n=n, repeats=runs)
        result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "run" / "shard_0"), timeout=300)
        assert result.returncode == 0, result.stderr
    merged = merge_run(str(tmp_path / "run"))
    table = merged.benchmarks[0].table
    accuracy = plugins.registry().get("metrics", "accuracy", "test").factory
    covered = 0
    for r in range(runs):
        column = array("d", (table.score[i * runs + r] for i in range(n)))
        one = ScoreTable(benchmark="arith", n_problems=n, repeats=1, score=column, status=bytearray(b"\x01" * n))
        m = accuracy(one, MetricOptions())["accuracy"]
        covered += m.ci_low <= p <= m.ci_high
    coverage = covered / runs
    print(f"\ncoverage of the 95% interval over {runs} simulator runs of {n} problems at p={p}: {coverage:.3f}")
    assert 0.91 <= coverage <= 0.99
    # and the pooled estimate over all 16,000 answers is close to the truth
    pooled = merged.benchmarks[0].metrics["accuracy"]
    assert pooled.ci_low <= p <= pooled.ci_high


def test_compare_detects_a_better_model_and_not_a_twin(tmp_path):
    runs = {}
    for name, accuracy in (("a", "0.55"), ("b", "0.85"), ("a_again", "0.55")):
        with running_sim(
            "--bench", "arith", "--accuracy", accuracy, "--seed", "1" if name != "b" else "2", "--ttft-ms", "0", "--itl-ms", "0"
        ) as url:
            cfg = write_config(tmp_path, url, n=300, repeats=1)
            for i in range(2):
                r = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(tmp_path / name / f"shard_{i}"))
                assert r.returncode == 0, r.stderr
        runs[name] = str(tmp_path / name)
    better = shardeval_cmd("compare", runs["a"], runs["b"], "--json")
    assert better.returncode == 0, better.stderr
    (result,) = json.loads(better.stdout)
    assert result["n_shared"] == 300
    assert result["ci_low"] > 0 and abs(result["diff"] - 0.30) < 0.12
    assert result["mcnemar"]["p_value"] < 1e-6 and result["mde"] < 0.3
    twin = json.loads(shardeval_cmd("compare", runs["a"], runs["a_again"], "--json").stdout)[0]
    assert twin["diff"] == 0.0 and twin["mcnemar"]["p_value"] == 1.0  # same server seed: the same answers
    text = shardeval_cmd("compare", runs["a"], runs["b"])
    assert "difference B − A" in text.stdout and "McNemar exact test" in text.stdout
