"""The solver API: how one problem becomes requests to a model, and the `simple` solver.

A solver receives the problem and its seed and returns an `Attempt`: the final completion (with
its status and timings) plus the conversation it had. Scoring stays with the benchmark.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from shardeval.benchmark import Problem
from shardeval.config import Generation, SolverConfig
from shardeval.service import Endpoint


@dataclass
class Attempt:
    completion: Any  # shardeval.client.Completion
    messages: list[dict[str, str]]
    request: dict[str, Any]


@dataclass(frozen=True)
class ServiceHandle:
    """A running service as a solver sees it: its endpoint, the shard's shared client, and the
    benchmark's concurrency slots (held only while a request is on the wire, not during backoff)."""

    endpoint: Endpoint
    client: Any  # shardeval.client.Client
    slots: asyncio.Semaphore | None = None


class Solver(Protocol):
    async def solve(self, problem: Problem, seed: int) -> Attempt: ...


SolverFactory = Callable[[SolverConfig, ServiceHandle], Solver]


def generation_params(gen: Generation) -> dict[str, Any]:
    """The request fields a Generation section sets (unset ones are left to the server)."""
    params: dict[str, Any] = {}
    for key in ("temperature", "top_p", "top_k", "max_tokens", "stop"):
        value = getattr(gen, key)
        if value is not None:
            params[key] = value
    params.update(gen.extra)
    return params


class SimpleSolver:
    """One request per (problem, repeat): optional system prompt, then the problem's turns."""

    def __init__(self, config: SolverConfig, service: ServiceHandle) -> None:
        self.config = config
        self.service = service
        self.params = generation_params(config.generation)

    def conversation(self, problem: Problem) -> list[dict[str, str]]:
        messages: list[dict[str, str]] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        if problem.messages is not None:
            messages.extend(problem.messages)
        else:
            messages.append({"role": "user", "content": problem.prompt or ""})
        return messages

    def payload(self, problem: Problem, seed: int) -> tuple[dict[str, Any], list[dict[str, str]]]:
        endpoint = self.service.endpoint
        messages = self.conversation(problem)
        body: dict[str, Any] = {"model": endpoint.model}
        if endpoint.protocol == "chat_completions":
            body["messages"] = messages
        else:
            body["prompt"] = "\n\n".join(m["content"] for m in messages)
        body["seed"] = seed
        body.update(self.params)
        return body, messages

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        body, messages = self.payload(problem, seed)
        completion = await self.service.client.request(body, self.service.slots)
        turns = messages + [{"role": "assistant", "content": completion.text}]
        request = {k: v for k, v in body.items() if k not in ("messages", "prompt")}
        return Attempt(completion=completion, messages=turns, request=request)
