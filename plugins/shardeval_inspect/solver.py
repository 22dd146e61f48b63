"""The `inspect` solver: a shard's share of an Inspect task runs through Inspect's own eval loop.

Inspect's runtime runs the samples in this process (`eval_async`), with the task's solver, tools,
sandbox and scorers unchanged, against the endpoint shardeval resolved for the service, through
Inspect's OpenAI-compatible provider (`openai-api`). The service's settings map onto Inspect's:
the benchmark's max_concurrent is max_connections (and max_samples), the client's retries and
timeout are Inspect's max_retries and timeout. `solver.generation.reasoning` maps onto Inspect's
GenerateConfig (`reasoning_options`). A hook hands each sample to shardeval the moment it ends, so
its record is on disk before the next one ends: a SIGKILL loses only samples in flight.

Resume is by (sample id, epoch): the pairs asked are grouped by how many epochs each sample still
needs, and Inspect runs each group with that many epochs; its k-th epoch of a sample is that
sample's k-th missing repeat (epochs of one sample are exchangeable: the same prompt, scored alone).
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
import tempfile
from collections import defaultdict
from typing import TYPE_CHECKING, Any
from collections.abc import Awaitable, Callable

from shardeval.api.benchmark import Problem
from shardeval.api.plugin import UsageError
from shardeval.api.solver import Attempt, PairsSolver, ServiceHandle, SolverConfig

from shardeval_inspect.benchmark import inspect_params
from shardeval_inspect.params import InspectParams
from shardeval_inspect.provider import inspect_model
from shardeval_inspect.samples import attempt_of
from shardeval_inspect.task import load, quiet_inspect

if TYPE_CHECKING:
    from inspect_ai import Task
    from inspect_ai.log import EvalSample
    from inspect_ai.model import Model

    from shardeval.api.service import ReasoningConfig, ServiceConfig

Settle = Callable[[Problem, int, Attempt], Awaitable[None]]
_SINK: contextvars.ContextVar[Callable[[Any], Awaitable[None]] | None] = contextvars.ContextVar("shardeval_inspect_sink", default=None)


class InspectSolver(PairsSolver):
    def __init__(self, config: SolverConfig, service: ServiceHandle) -> None:
        if service.endpoint.protocol != "chat_completions":
            raise UsageError("benchmark inspect: Inspect's models speak chat completions; set the service's protocol: chat_completions")
        self.config = config
        self.service = service

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        """Never called: the runner hands a PairsSolver every pair at once (solve_pairs)."""
        raise NotImplementedError("the inspect solver answers a shard's pairs together, through solve_pairs")

    async def solve_pairs(self, pairs: list[tuple[Problem, int, int]], settle: Settle) -> None:
        params = inspect_params(pairs[0][0].metadata["inspect"]["params"])
        loaded = load(params)
        missing: dict[str, list[int]] = defaultdict(list)  # sample id -> repeats still to answer
        problems: dict[str, Problem] = {}
        for problem, repeat, _ in pairs:
            missing[problem.id].append(repeat)
            problems[problem.id] = problem
        groups: dict[int, list[str]] = defaultdict(list)  # epochs needed -> sample ids
        for sample_id, repeats in missing.items():
            repeats.sort()
            groups[len(repeats)].append(sample_id)
        for epochs, sample_ids in sorted(groups.items(), reverse=True):
            await self._run(loaded.task, params, epochs, [problems[i] for i in sample_ids], missing, settle)

    async def _run(
        self, task: Task, params: InspectParams, epochs: int, problems: list[Problem], missing: dict[str, list[int]], settle: Settle
    ) -> None:
        """One eval_async over `problems`, `epochs` each; every sample settles as it ends."""
        from inspect_ai import eval_async

        quiet_inspect()
        _install_hook()
        by_id = {p.id: p for p in problems}

        async def ended(sample: EvalSample) -> None:
            problem = by_id.get(str(sample.id))
            if problem is None:
                return
            repeat = missing[problem.id][sample.epoch - 1]
            await settle(problem, repeat, attempt_of(sample, self.service.client.scrub, repeat + 1, self._tags()))

        token = _SINK.set(ended)
        try:
            with tempfile.TemporaryDirectory(prefix="shardeval-inspect-") as logs:
                await eval_async(
                    task,
                    model=self._model(),
                    sample_id=[p.metadata["inspect"]["id"] for p in problems],
                    log_dir=logs,
                    max_samples=self._concurrency(),
                    **eval_options(task, params, epochs),
                    **_generation(self.config, getattr(self.service.client, "config", None)),
                )
        finally:
            _SINK.reset(token)

    def _tags(self) -> tuple[str, ...]:
        """The service's reasoning_tags (none: its model never thinks inline)."""
        return tuple(getattr(getattr(self.service.client, "config", None), "reasoning_tags", None) or ())

    def _concurrency(self) -> int:
        return self.service.max_concurrent or 32

    def _model(self) -> Model:
        """Inspect's model for the service's endpoint: the same URL, model name and key shardeval uses,
        its retries and timeout."""
        from inspect_ai.model import GenerateConfig

        client = self.service.client.config
        endpoint = self.service.endpoint
        key = os.environ.get(endpoint.api_key_env, "") if endpoint.api_key_env else ""
        timeout = client.timeouts.total or client.timeouts.first_token
        config = GenerateConfig(max_connections=self._concurrency(), max_retries=max(0, client.retries.attempts - 1), timeout=int(timeout))
        return inspect_model(endpoint.model, endpoint.base_url, key, config)


def eval_options(task: Task, params: InspectParams, epochs: int) -> dict[str, Any]:
    """What every Inspect eval of the task is given, a shard's or the merge's header: the epochs with
    the task's own reducers (they shape Inspect's metrics in the merged log), the params' sandbox,
    limits and fail_on_error, and no console of its own."""
    from inspect_ai import Epochs

    reducer = getattr(task, "epochs_reducer", None)
    return {
        "epochs": Epochs(epochs, reducer) if reducer else epochs,
        "sandbox": params.sandbox,
        "fail_on_error": params.fail_on_error,
        "log_level": "warning",
        "score_display": False,
        **params.limits(),
    }


def _generation(config: SolverConfig, service: ServiceConfig | None = None) -> dict[str, Any]:
    """The config's generation keys that are set, as Inspect's GenerateConfig names them (unset: the
    task's); `service` (its ServiceConfig) says how its server is asked for `reasoning`."""
    gen = config.generation
    out: dict[str, Any] = {}
    for key in ("temperature", "top_p", "top_k", "max_tokens"):
        if getattr(gen, key) is not None:
            out[key] = getattr(gen, key)
    if gen.stop:
        out["stop_seqs"] = list(gen.stop)
    extra = dict(gen.extra)
    if gen.reasoning is not None:
        options, fields = reasoning_options(gen.reasoning, service)
        out.update(options)
        kwargs = extra.get("chat_template_kwargs")
        if isinstance(fields.get("chat_template_kwargs"), dict) and isinstance(kwargs, dict):  # one dict, extra's keys win
            extra["chat_template_kwargs"] = {**fields["chat_template_kwargs"], **kwargs}
        extra = {**fields, **extra}
    if extra:
        out["extra_body"] = extra
    return out


def reasoning_options(reasoning: ReasoningConfig, service: ServiceConfig | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """`generation.reasoning` as Inspect takes it: (GenerateConfig fields, request fields for its
    extra_body). `effort` is Inspect's `reasoning_effort`, which its OpenAI-compatible provider
    sends as the request's `reasoning_effort`; `budget_tokens` is Inspect's `reasoning_tokens`, which
    that provider does not send (Anthropic's alone reads it), so the server also gets it as the
    service asks for it (`thinking_token_budget` for vLLM), in extra_body; `enable` has no
    GenerateConfig field and goes the same way (`chat_template_kwargs.enable_thinking`). The request
    fields are the service's `reasoning_request`, what shardeval's own requests carry."""
    fields = dict(service.reasoning_request(reasoning)) if service is not None and hasattr(service, "reasoning_request") else {}
    options: dict[str, Any] = {}
    if reasoning.effort is not None:
        options["reasoning_effort"] = reasoning.effort
        if fields.get("reasoning_effort") == reasoning.effort:  # Inspect sends it itself, once
            del fields["reasoning_effort"]
    if reasoning.budget_tokens is not None:
        options["reasoning_tokens"] = reasoning.budget_tokens
    return options, fields


_HOOK_INSTALLED = False


def _install_hook() -> None:
    """Inspect's hooks are registered once per process; ours forwards a sample's end to the eval
    that asked for it (a context variable, so any other Inspect run in the process is left alone)."""
    global _HOOK_INSTALLED
    if _HOOK_INSTALLED:
        return
    from inspect_ai.hooks import Hooks, hooks, SampleEnd

    @hooks(name="shardeval", description="shardeval: writes each sample's record as it ends")
    class _SampleSink(Hooks):
        async def on_sample_end(self, data: SampleEnd) -> None:
            sink = _SINK.get()
            if sink is not None:
                await sink(data.sample)

    from inspect_ai.hooks._startup import init_hooks

    with contextlib.redirect_stdout(io.StringIO()):  # Inspect announces the hooks it loads, once per process
        init_hooks()
    _HOOK_INSTALLED = True
