"""A scorer plugin loaded through SHARDEVAL_PLUGINS for tests/test_rescore.py: a registered
"benchmark" that only scores (its problems come from the run's own benchmark)."""

from __future__ import annotations

import time
from typing import Any

from shardeval.api.benchmark import Benchmark, Problem, Score
from shardeval.api.plugin import hookimpl


class LengthMultiple(Benchmark):
    """An answer scores 1 when its length is a multiple of `modulus` (default 2); `chars` is its
    length. `delay_s` slows each score (to interrupt a rescore mid-way); `in_thread` scores in a pool."""

    name = "length_multiple"
    scorer_version = "length-multiple-1"

    def __init__(self, params: dict[str, Any]) -> None:
        self.modulus = int(params.get("modulus", 2))
        self.delay_s = float(params.get("delay_s", 0))
        self.score_in_thread = bool(params.get("in_thread", False))

    def score(self, problem: Problem, response: str) -> Score:
        if self.delay_s:
            time.sleep(self.delay_s)
        n = len(response)
        return Score(score=float(n % self.modulus == 0), extracted=str(n), scores={"chars": float(n)})


@hookimpl
def register_benchmarks(register):
    register("length_multiple", LengthMultiple)
