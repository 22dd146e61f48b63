"""A solver that runs a shard's whole share itself (shardeval.api.PairsSolver), loaded through
SHARDEVAL_PLUGINS, to test the runner's side of the contract with every way such a solver can end:
it asks the simulator for each pair through the shard's client, settles them in order, and then,
as `benchmarks[].params.end` says, returns, raises, returns early, or settles a pair twice."""

from __future__ import annotations

from typing import Any
from collections.abc import Awaitable, Callable

from shardeval.api.benchmark import Benchmark, Problem, Score
from shardeval.api.plugin import hookimpl
from shardeval.api.solver import Attempt, ServiceHandle, SolverConfig


class PairsSums(Benchmark):
    name = "pairs_sums"
    solver = "pairs_all"

    def __init__(self, params: dict[str, Any]) -> None:
        self.n = int(params.get("n", 6))
        self.end = str(params.get("end", "return"))  # return | raise | early | twice
        self.after = int(params.get("after", 3))  # pairs settled before it raises, returns early or settles again

    def size(self) -> int:
        return self.n

    def problem(self, idx: int) -> Problem:
        return Problem(
            idx=idx, id=f"p{idx}", prompt=f"What is {idx} + 1?", reference=str(idx + 1), metadata={"end": self.end, "after": self.after}
        )

    def score(self, problem: Problem, response: str) -> Score:
        return Score(score=float(response.strip().endswith(problem.reference or "")))


class PairsAll:
    def __init__(self, config: SolverConfig, service: ServiceHandle) -> None:
        self.service = service

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        raise AssertionError("the runner hands a PairsSolver its pairs through solve_pairs")

    async def solve_pairs(self, pairs: list[tuple[Problem, int, int]], settle: Callable[[Problem, int, Attempt], Awaitable[None]]) -> None:
        end, after = pairs[0][0].metadata["end"], pairs[0][0].metadata["after"]
        for n, (problem, repeat, seed) in enumerate(pairs):
            if n == after and end == "raise":
                raise RuntimeError(f"the solver broke after {after} pairs")
            if n == after and end == "early":
                return
            body = {"model": self.service.endpoint.model, "messages": [{"role": "user", "content": problem.prompt}], "seed": seed}
            completion = await self.service.client.request(body, self.service.slots, stream=False, protocol="chat_completions")
            await settle(problem, repeat, Attempt(completion=completion, messages=body["messages"], request={"seed": seed}))
            if n + 1 == after and end == "twice":
                await settle(problem, repeat, Attempt(completion=completion, messages=[], request={}))


@hookimpl
def register_benchmarks(register):
    register("pairs_sums", PairsSums)


@hookimpl
def register_solvers(register):
    register("pairs_all", PairsAll)
