"""A benchmark loaded through SHARDEVAL_PLUGINS for tests/test_scores_read_back.py whose scorer
gives what is not a finite number (issue 40, point 4): `bad` names it (nan, inf, -inf, a bool, a
string), `where` puts it in `score` or in `scores`, and `every` makes only every n-th problem bad."""

from __future__ import annotations

from typing import Any

from shardeval.api.benchmark import Benchmark, Problem, Score
from shardeval.api.plugin import hookimpl

BAD: dict[str, Any] = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "bool": True, "str": "high"}


class BadScores(Benchmark):
    name = "bad_scores"
    scorer_version = "bad-1"

    def __init__(self, params: dict[str, Any]) -> None:
        self.n = int(params.get("n", 6))
        self.bad = BAD[params.get("bad", "nan")]
        self.where = params.get("where", "score")
        self.every = int(params.get("every", 1))

    def size(self) -> int:
        return self.n

    def problem(self, idx: int) -> Problem:
        return Problem(idx=idx, id=f"p{idx}", prompt=f"What is {idx} + {idx}?", reference=str(2 * idx))

    def score(self, problem: Problem, response: str) -> Score:
        if problem.idx % self.every:
            return Score(score=1.0, extracted=response[:8], scores={"len": float(len(response))})
        if self.where == "score":
            return Score(score=self.bad, extracted=response[:8])
        return Score(score=1.0, extracted=response[:8], scores={"len": float(len(response)), "odd": self.bad})


@hookimpl
def register_benchmarks(register):
    register("bad_scores", BadScores)
