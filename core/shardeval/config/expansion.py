"""Config entries that stand for more than one benchmark, or take an argument in quick mode.

`--bench NAME:ARGUMENT` gives a registered benchmark the params its `quick_params(ARGUMENT)`
says (`lm_eval:gsm8k,arc_easy` → `tasks: [gsm8k, arc_easy]`). An entry whose benchmark class
`expand`s it (an lm-eval group) becomes one entry per part, each with its own `id` (its folder,
its merge, its report row) and the solver the class names when the config left the default. Both
happen once per config load, before anything is validated or asked, so the ids are checked like
any others and a planning mistake is the user's one line.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shardeval.config.sampling import benchmark_class
from shardeval.config.schema import BenchmarkConfig, Config, SolverConfig
from shardeval.errors import UsageError
from shardeval.explain import Where

DEFAULT_SOLVER = SolverConfig().type


def expand(config: Config, registry: Any, where: Where) -> Config:
    """The config with every `NAME:ARGUMENT` resolved and every expanding entry expanded."""
    benchmarks: list[BenchmarkConfig] = []
    changed = False
    for i, bench in enumerate(config.benchmarks):
        resolved = _with_argument(bench, registry, where, f"benchmarks[{i}]")
        parts = _expanded(resolved, registry, where, f"benchmarks[{i}]")
        changed |= resolved is not bench or parts != [bench]
        benchmarks.extend(parts)
    return msgspec.structs.replace(config, benchmarks=benchmarks) if changed else config


def _with_argument(bench: BenchmarkConfig, registry: Any, where: Where, at: str) -> BenchmarkConfig:
    name, sep, argument = bench.name.partition(":")
    if not sep or bench.name in registry.entries["benchmarks"] or name not in registry.entries["benchmarks"]:
        return bench
    resolved = msgspec.structs.replace(bench, name=name)
    try:
        params = benchmark_class(resolved, registry).quick_params(argument)
    except UsageError as exc:
        raise where.error(str(exc), f"{at}.name") from None
    return msgspec.structs.replace(resolved, params={**params, **bench.params})


def _expanded(bench: BenchmarkConfig, registry: Any, where: Where, at: str) -> list[BenchmarkConfig]:
    cls = benchmark_class(bench, registry)
    try:
        parts = cls.expand(dict(bench.params))
    except UsageError as exc:
        raise where.error(str(exc), f"{at}.params") from None
    solver = bench.solver
    if cls.solver is not None and solver.type == DEFAULT_SOLVER:
        solver = msgspec.structs.replace(solver, type=cls.solver)
    if parts is None:
        return [bench if solver is bench.solver else msgspec.structs.replace(bench, solver=solver)]
    return [
        msgspec.structs.replace(bench, id=_part_id(bench.id, part_id, len(parts)), params=params, solver=solver)
        for part_id, params in parts
    ]


def _part_id(entry_id: str | None, part_id: str, n_parts: int) -> str:
    """A part's id: its own; the entry's when the entry names itself and has one part; else both."""
    if entry_id is None:
        return part_id
    return entry_id if n_parts == 1 else f"{entry_id}.{part_id}"
