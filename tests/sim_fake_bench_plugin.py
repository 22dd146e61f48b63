"""A tiny benchmark plugin loaded through SHARDEVAL_PLUGINS, so simulator tests do not depend on
the built-in benchmarks. It has no `answer_key` of its own: the simulator's default indexes its
prompts (shardeval_sim.benchmark_hooks)."""

from __future__ import annotations

import re
from typing import Any

from shardeval.api.benchmark import Benchmark, Problem, Score
from shardeval.api.plugin import hookimpl


class FakeSums(Benchmark):
    """params: n (default 300). Problem i asks for a sum that depends only on i."""

    name = "fake_sums"

    def __init__(self, params: dict[str, Any]) -> None:
        self.n = int(params.get("n", 300))

    def size(self) -> int:
        return self.n

    def problem(self, idx: int) -> Problem:
        a, b = 17 + (idx * 7919) % 500, 3 + (idx * 104729) % 97
        return Problem(idx=idx, id=f"sum-{idx}", prompt=f"Ana has {a} shells and finds {b} more. How many now?", reference=str(a + b))

    def score(self, problem: Problem, response: str) -> Score:
        match = re.search(r"####\s*(-?[\d.,]+)\s*$", response)
        extracted = match.group(1) if match else None
        return Score(score=float(extracted == problem.reference), extracted=extracted)


@hookimpl
def register_benchmarks(register):
    register("fake_sums", FakeSums)
