"""`capitals`: name the capital of a country; data shipped in this package as JSONL.

Shows the Benchmark API in full: rows come from the built-in data loader (`pkg://` reads a file
inside an installed package; `params.path/url/hf` would point at another copy), problems are
built by index so a shard reads only its own rows, and scoring is exact match after normalising.
"""

from __future__ import annotations

from typing import Any

from shardeval.benchmark import Problem, Score
from shardeval.errors import UsageError
from shardeval_benchmarks.answers import final_answer, normalize_text
from shardeval_benchmarks.datasets import RowsBenchmark, open_from_params

PARAMS = {"path", "url", "hf", "sha256", "format"}


class CapitalsBenchmark(RowsBenchmark):
    """params: optional path/url/hf (+ sha256) to another copy of the data."""

    metrics = ("accuracy",)

    def __init__(self, params: dict[str, Any]) -> None:
        unknown = sorted(set(params) - PARAMS)
        if unknown:
            raise UsageError(f"benchmark capitals: unknown param {unknown[0]!r}; known: {', '.join(sorted(PARAMS))}")
        self.name = "capitals"
        self.rows = open_from_params(params, benchmark="capitals", default="pkg://shardeval_example/data/capitals.jsonl")
        self.data_origin = self.rows.origin  # shown by `shardeval benchmarks`

    def row_problem(self, idx: int, row: dict[str, Any]) -> Problem:
        return Problem(
            idx=idx,
            id=row["country"].lower().replace(" ", "-"),
            prompt=f"What is the capital of {row['country']}? End with '#### <city>'.",
            reference=row["capital"],
            cluster=row["continent"],
        )

    def score(self, problem: Problem, response: str) -> Score:
        extracted = (final_answer(response) or response).strip()
        right = normalize_text(extracted) == normalize_text(problem.reference or "")
        return Score(score=1.0 if right else 0.0, extracted=extracted)
