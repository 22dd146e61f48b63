"""LLM-as-judge: the judge step of a shard (and of a rescore), and the rubric a benchmark is judged with.

A benchmark with `judge: {service: NAME, mode: single|pairwise}` is scored by asking a second
service (the judge) about each answer; how it is asked and how its reply is read (the default
rubrics, MT-Bench's parsers) is shardeval.benchmark.rubric.

A judge that cannot be asked (a transport error after its retries) or whose reply holds no
verdict makes the record an error of kind `judge` (never a score); the record keeps the model's
answer, and a rerun asks the judge again for it, not the model (docs/judges.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardeval import plugins
from shardeval.benchmark.reasoning import DEFAULT_TAGS, ReplySplit, reply_outcome, split_reply
from shardeval.benchmark.rubric import Rubric
from shardeval.errors import UsageError
from shardeval.run.adaptive import make_slots
from shardeval.run.client import Client
from shardeval.run.provenance import read_served
from shardeval.run.solver import ServiceHandle
from shardeval.store.records import JudgeRecord

if TYPE_CHECKING:
    from shardeval.benchmark import Benchmark


def metrics_when_judged(benchmark: Benchmark) -> tuple[str, ...]:
    """A judged benchmark's metrics when the config names none: its own when it says how it is
    judged (a `judge_rubric`), else `mean` (a judge's graded scores are not right/wrong)."""
    return tuple(benchmark.metrics) if benchmark.judge_rubric is not None else ("mean",)


def rubric_for(config: Any, benchmark: Any) -> Rubric:
    """The rubric of a judged benchmark: the config's `judge` keys win over the benchmark's own
    (`judge_rubric`: a Rubric a BYO benchmark declares), which win over the defaults."""
    own: Rubric | None = benchmark.judge_rubric
    where = "the benchmark's judge section"
    mode = config.mode or (own.mode if own else "single")
    template = config.rubric if config.rubric is not None else (own.template if own else None)
    pattern = config.verdict if config.verdict is not None else (own.pattern if own else None)
    if own is not None and mode != own.mode:
        inherited = (("rubric", config.rubric, own.template), ("verdict pattern", config.verdict, own.pattern))
        kept = [what for what, mine, theirs in inherited if mine is None and theirs is not None]
        if kept:  # written for the other mode: every verdict would be a judge error
            raise UsageError(
                f"{where}: {mode} judging with the benchmark's own {' and '.join(kept)}, written for {own.mode} judging, "
                f"would make every verdict a judge error; judge it {own.mode}, or give a {mode} "
                f"{' and '.join(kept)} (judge.{'rubric' if 'rubric' in kept else 'verdict'})"
            )
    try:
        return Rubric(mode=mode, template=template, pattern=pattern)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Verdict:
    """The judge step's outcome for one answer: the record's `judge` and either a score or why not."""

    record: Any  # shardeval.store.records.JudgeRecord
    score: float | None = None
    scores: dict[str, float] | None = None
    error: str | None = None  # set: the record is an error of kind `judge`


def apply_verdict(record: Any, verdict: Verdict, extra: dict[str, float] | None = None) -> None:
    """Make `record` (a ResultRecord whose answer the judge saw) what the verdict says: scored by
    it, or an error of kind `judge` that keeps the answer. The one rule of a run and a rescore."""
    record.judge = verdict.record
    if verdict.error is not None:  # never a score: a rerun asks the judge again, not the model
        record.status, record.error_kind, record.error = "error", "judge", verdict.error
        record.score, record.extracted, record.scores = None, None, {}
        return
    record.status, record.error_kind, record.error = "ok", None, None
    record.score, record.extracted, record.scores = verdict.score, verdict.record.verdict, {**(verdict.scores or {}), **(extra or {})}


@dataclass(frozen=True)
class Judge:
    """A benchmark's judge as a shard uses it: its service (its own client and window) and rubric."""

    service: str
    rubric: Rubric
    handle: Any  # shardeval.run.solver.ServiceHandle: the judge's endpoint, client and slots
    params: dict[str, Any]  # generation parameters of the judge's requests

    async def grade(self, problem: Any, answer: str, seed: int) -> Verdict:
        """Ask the judge about `answer`; a transport error or a reply with no verdict is an error."""
        endpoint = self.handle.endpoint
        served = getattr(self.handle.served, "model", None) or endpoint.model
        record = JudgeRecord(service=self.service, model=served, mode=self.rubric.mode)
        try:
            prompt = self.rubric.prompt(problem.user_text(), answer, problem.reference)
        except (ValueError, KeyError, IndexError) as exc:
            return Verdict(record, error=f"cannot write the judge's prompt: {exc}")
        turns = {"messages": [{"role": "user", "content": prompt}]} if endpoint.protocol == "chat_completions" else {"prompt": prompt}
        body = {"model": endpoint.model, **turns, "seed": seed, "temperature": 0.0, **self.params}
        c = await self.handle.client.request(body, self.handle.slots, cache_if=self._parses)
        record.reply, record.attempts, record.latency_s, record.cached = c.text, c.attempts, c.latency_s, c.cached
        record.prompt_tokens, record.completion_tokens = c.prompt_tokens, c.completion_tokens
        if c.status != "ok":
            record.error_kind = c.error_kind
            return Verdict(record, error=f"judge {self.service!r} could not be asked: {c.error_kind}: {c.error}")
        split = self._split(c)
        if split.reasoning is not None:  # a reasoning judge: its verdict is read from its answer, its thinking kept
            record.reasoning = split.reasoning
        try:
            record.verdict, score, scores = self.rubric.verdict(split.answer)
        except ValueError as exc:
            cut = " (cut off while it thought: raise the judge's max_tokens)" if reply_outcome(split, c.finish_reason) else ""
            return Verdict(record, error=f"judge {self.service!r}: {exc}{cut}")
        return Verdict(record, score=score, scores=scores)

    def _split(self, c: Any) -> ReplySplit:
        """The judge's reply split by the one rule (docs/reasoning.md), with its service's tags."""
        return split_reply(c.text, c.reasoning, getattr(self.handle.client.config, "reasoning_tags", DEFAULT_TAGS))

    def _parses(self, c: Any) -> bool:
        try:
            self.rubric.verdict(self._split(c).answer)
        except ValueError:
            return False
        return True


class JudgeServices:
    """The judge services one `shardeval rescore` asks, each started (or reached) once for all the
    shards and benchmarks it judges: a managed vLLM judge loads its model once, not once per
    benchmark of every shard. They live on one event loop, which `run` enters for each judged
    benchmark; leaving the `with` stops them. A shard run starts its judges as any service."""

    def __init__(self) -> None:
        self._loop: Any = None
        self._stack: Any = None
        self._endpoints: dict[tuple[str, bytes], Any] = {}  # (name, its config) -> Endpoint
        self._served: dict[tuple[str, bytes], Any] = {}  # what the endpoint said it serves
        self._clients: dict[tuple[str, bytes, int], Any] = {}  # one per window size asked for

    def __enter__(self) -> JudgeServices:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is None:
            return
        try:
            self._loop.run_until_complete(self._close())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        finally:
            self._loop.close()
            self._loop = None

    async def _close(self) -> None:
        """Cancel what an interrupted benchmark left pending (as asyncio.run does), then stop the judges."""
        import asyncio

        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self._stack.aclose()

    def run(self, coro: Any) -> Any:
        """Run `coro` to its end on the judges' loop."""
        import asyncio
        from contextlib import AsyncExitStack

        if self._loop is None:
            self._loop, self._stack = asyncio.new_event_loop(), AsyncExitStack()
        return self._loop.run_until_complete(coro)

    async def judge(self, name: str, config: Any, rubric: Rubric, params: dict[str, Any], max_concurrent: int, ctx: Any) -> Judge:
        """A judge for one benchmark: its own rubric and window of `max_concurrent` requests, on the
        service `name` as `config` declares it, started with `ctx` (where its log goes) the first time."""
        import msgspec

        key = (name, msgspec.json.encode(config))
        if key not in self._endpoints:
            factory = plugins.registry().get("services", config.type, f"services.{name}.type").factory
            self._endpoints[key] = await self._stack.enter_async_context(factory(name, config, ctx))
        endpoint = self._endpoints[key]
        if (client := self._clients.get((*key, max_concurrent))) is None:
            client = self._clients[(*key, max_concurrent)] = await self._stack.enter_async_context(Client(endpoint, config, max_concurrent))
        if key not in self._served:
            self._served[key] = await read_served(client, endpoint.base_url, endpoint.model, name)
        served = self._served[key]
        return Judge(name, rubric, ServiceHandle(endpoint, client, make_slots(max_concurrent, config.adaptive), served), params)
