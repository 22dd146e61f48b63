"""Fingerprints of how a benchmark asks and scores, so runs that differ there are never mixed.

The dataset fingerprint says the rows are the same; these say the rest is too:

- the *prompt* fingerprint hashes the problems as the benchmark renders them (prompt or turns,
  reference, metadata) at a fixed set of probe indices spread over the dataset. Every shard
  computes the same probes, so two shards agree exactly when their rendering agrees, whatever
  range each one owns. A changed prompt template changes it, even where the data file did not.
- the *scorer* fingerprint hashes the scorer's declared version (`Benchmark.scorer_version`, else
  the version of the plugin that provides it) and, for scorers cheap enough to call at start-up
  (not `score_in_thread`), the scores it gives the probe problems' own reference and an empty
  answer: a changed extraction rule changes it even when nobody bumped a version.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from shardeval.benchmark import Benchmark

N_PROBES = 8


def probe_indices(n_problems: int, k: int = N_PROBES) -> list[int]:
    """Up to k indices spread evenly over [0, n_problems), first and last included."""
    if n_problems <= k:
        return list(range(n_problems))  # empty for no problems
    return sorted({round(i * (n_problems - 1) / (k - 1)) for i in range(k)})


def _digest(payload: Any) -> str:
    return "sha256:" + hashlib.sha256(msgspec.json.encode(payload, order="sorted")).hexdigest()[:16]


def prompt_fingerprint(benchmark: Benchmark, n_problems: int) -> str:
    """How the benchmark renders its probe problems: the same on every shard of one run."""
    return _digest([msgspec.to_builtins(p) for p in benchmark.problems(probe_indices(n_problems))])


def scorer_fingerprint(benchmark: Benchmark, n_problems: int, provider_version: str | None, scorer: Any = None) -> str:
    """The scorer's declared version and, where cheap, its behaviour on fixed probe answers.

    `scorer` (default: the benchmark itself) is whatever scores the benchmark's problems: another
    benchmark's `score` when `shardeval rescore` is given one."""
    scorer = benchmark if scorer is None else scorer
    version = scorer.scorer_version or provider_version
    payload: dict[str, Any] = {"scorer": f"{type(scorer).__module__}.{type(scorer).__qualname__}", "version": version}
    if not scorer.score_in_thread:
        payload["probes"] = [
            [_probe_score(scorer, p, text) for text in (p.reference or "", "")]
            for p in benchmark.problems(probe_indices(n_problems))
        ]
    return _digest(payload)


def judged_fingerprint(scorer: str, rubric: dict[str, Any], judge: dict[str, Any]) -> str:
    """The scorer fingerprint of a benchmark a judge scores: its own scorer's, the rubric in
    effect (shardeval.run.judging.Rubric.identity) and who judges (config.judge_identity), so answers
    judged differently never mix, in a run (whose config hash has the judge too) or a rescore
    (which keeps its source's config hash)."""
    return _digest({"benchmark": scorer, "judge": rubric, "judged_by": judge})


def _probe_score(benchmark: Benchmark, problem: Any, text: str) -> Any:
    try:
        score = benchmark.score(problem, text)
    except Exception as exc:  # a scorer that rejects a probe answer: how it fails is behaviour too
        return f"raises {type(exc).__name__}"
    return msgspec.to_builtins(score)


# What a fingerprint attests, as a refusal names it.
COMPARED = (("dataset_fingerprint", "data"), ("prompt_fingerprint", "prompts"), ("scorer_fingerprint", "scorer"))


def incomparable(a: Any, b: Any, label_a: str = "A", label_b: str = "B") -> str | None:
    """Why two runs of one benchmark (their BenchmarkManifests) are not the same questions asked
    and scored the same way, so a paired difference between them would mean nothing; None when
    every fingerprint both record agrees. A fingerprint one of them lacks (a shard written before
    it existed) cannot be compared and is passed over. Runs of different numbers of problems
    (another `max_problems`) are not compared either, and said so: their prompt and scorer
    fingerprints, taken at probes spread over each run's own problems, differ whatever the
    rendering, so naming them as the reason would be wrong."""
    n_a, n_b = getattr(a, "n_problems", None), getattr(b, "n_problems", None)
    sized = n_a is not None and n_b is not None and n_a != n_b
    parts = [f"the {label} differ{'s' if label == 'scorer' else ''} ({label_a} {x}, {label_b} {y})"
             for attr, label in COMPARED
             if (x := getattr(a, attr, None)) is not None and (y := getattr(b, attr, None)) is not None and x != y
             and not (sized and attr != "dataset_fingerprint")]
    if sized:
        parts.append(f"they ask different numbers of problems ({label_a} {n_a}, {label_b} {n_b}: another max_problems), "
                     "so their prompts and scorer cannot be checked against each other")
    return "; ".join(parts) or None
