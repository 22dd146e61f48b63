"""`capitals`: name the capital of a country; data shipped in this package as JSONL.

Shows the Benchmark API in full, all from `shardeval.api`: params are a Struct (unknown keys and
wrong types become one-line errors), rows come from the data loader (`pkg://` reads a file inside
an installed package; `path/url/hf` would point at another copy), problems are built by index so
a shard reads only its own rows, and scoring is exact match after normalising.
"""

from __future__ import annotations

from typing import Any

from shardeval.api.benchmark import DataParams, Problem, RowsBenchmark, Score, decode_params, final_answer, normalize_text, open_from_params


class CapitalsParams(DataParams):
    """params: optional path/url/hf (+ sha256, format) to another copy of the data (DataParams);
    a benchmark with its own params adds fields here, e.g. `shots: int = 0`."""


class CapitalsBenchmark(RowsBenchmark):
    metrics = ("accuracy",)

    def __init__(self, params: dict[str, Any]) -> None:
        self.name = "capitals"
        p = decode_params(params, CapitalsParams, source="benchmark capitals")
        self.rows = open_from_params(p, benchmark="capitals", default="pkg://shardeval_example/data/capitals.jsonl")
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
