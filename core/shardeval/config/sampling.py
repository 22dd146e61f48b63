"""The sampling every request carries: the config's, completed by each benchmark's declared default.

A key the config leaves unset would otherwise be left to the server (vLLM: temperature 1.0 unless
the model's generation_config says otherwise), so an unconfigured "greedy" run was really sampled,
at a temperature nobody wrote down. `complete` fills each `Generation` key the benchmark declares
(`Benchmark.default_sampling(repeats)`) and the config leaves unset, into the config itself: the
request bodies, the config hash (the run's identity) and manifest.json's `config` all hold what
is sent. What the user set, as a key or in `generation.extra`, always wins.

A run started before this, with a key left unset, has another identity now: its records were
sampled at the server's default and are not continued with, or merged into, explicit ones
(resume refuses, naming the change; `--fresh` or another `-o` starts it over). A config that set
every declared key keeps its identity.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from shardeval.benchmark import Benchmark
from shardeval.config.schema import BenchmarkConfig, Config, Generation, ServiceConfig

log = logging.getLogger("shardeval")

DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".json", ".json.gz", ".csv", ".csv.gz", ".parquet")
MAPPING_SUFFIXES = (".yaml", ".yml")
# What a benchmark may declare: the Generation keys a server would otherwise choose.
SAMPLING_KEYS = ("temperature", "top_p", "top_k")


def registered_name(name: str, params: dict[str, Any], registry: Any) -> tuple[str, dict[str, Any]]:
    """A benchmark's registered name and params: a data file path is read by the built-in `jsonl`
    benchmark, a YAML mapping path by `custom` (a bring-your-own benchmark)."""
    if name not in registry.entries["benchmarks"]:
        if name.lower().endswith(DATA_SUFFIXES):
            return "jsonl", {"path": name, **params}
        if name.lower().endswith(MAPPING_SUFFIXES):
            return "custom", {"spec": name, **params}
    return name, params


def benchmark_class(bench: BenchmarkConfig, registry: Any) -> type[Benchmark]:
    """The class a benchmark's registration builds, imported but not built (no data is read).
    A factory that is not a Benchmark class declares nothing: the base class's default applies."""
    name, _ = registered_name(bench.name, dict(bench.params), registry)
    entry = registry.entries["benchmarks"].get(name)
    factory: object = getattr(entry, "factory", None)
    target = factory.load() if hasattr(factory, "load") else factory  # a Lazy "module:Class"
    return target if isinstance(target, type) and issubclass(target, Benchmark) else Benchmark


def scored_by_likelihood(bench: BenchmarkConfig, registry: Any) -> bool:
    """Whether its requests score text rather than sample it (the `loglikelihood` solver, named
    or chosen by the benchmark's problems): they carry temperature 0 and generate nothing."""
    if bench.solver.type == "loglikelihood":
        return True
    _, params = registered_name(bench.name, dict(bench.params), registry)
    return benchmark_class(bench, registry).scored_by_likelihood(params)


def declared(bench: BenchmarkConfig, registry: Any) -> dict[str, Any]:
    """The benchmark's declared default sampling for its repeats, checked to be Generation keys;
    none for one scored by log-likelihood (nothing is sampled: a filled temperature would be
    recorded as sent, and is not)."""
    if scored_by_likelihood(bench, registry):
        return {}
    cls = benchmark_class(bench, registry)
    defaults = dict(cls.default_sampling(bench.repeats))
    unknown = sorted(set(defaults) - set(SAMPLING_KEYS))
    if unknown:
        raise TypeError(f"{cls.__qualname__}.default_sampling returned {unknown}; only {', '.join(SAMPLING_KEYS)} can be declared")
    return defaults


def completed(gen: Generation, defaults: dict[str, Any]) -> Generation:
    """`gen` with each default filled where the user set neither the key nor `extra[key]`."""
    fill = {k: v for k, v in defaults.items() if getattr(gen, k) is None and k not in gen.extra}
    return msgspec.structs.replace(gen, **fill) if fill else gen


def complete(config: Config, registry: Any) -> Config:
    """The config with every benchmark's unset sampling keys set to its declared defaults."""
    benchmarks = []
    for bench in config.benchmarks:
        gen = completed(bench.solver.generation, declared(bench, registry))
        if gen is not bench.solver.generation:
            bench = msgspec.structs.replace(bench, solver=msgspec.structs.replace(bench.solver, generation=gen))
        benchmarks.append(bench)
    return msgspec.structs.replace(config, benchmarks=benchmarks)


def effective(gen: Generation) -> dict[str, Any]:
    """The sampling keys a request carries (`extra` wins a clash, as in the request body)."""
    values = {k: getattr(gen, k) for k in SAMPLING_KEYS if getattr(gen, k) is not None}
    return {**values, **{k: gen.extra[k] for k in SAMPLING_KEYS if k in gen.extra}}


def greedy_repeats(config: Config, registry: Any) -> list[str]:
    """One warning per benchmark that asks each problem several times greedily: pass@k then
    equals pass@1 and majority votes are one answer counted k times. The user's explicit setting
    wins (it measures a server's nondeterminism, say), so it is a warning, not a refusal. A
    benchmark scored by log-likelihood samples nothing: its temperature is no question of this."""
    return [
        f"benchmarks[{i}] ({b.id or b.name}): repeats {b.repeats} with temperature 0 asks the same greedy question "
        f"{b.repeats} times, so pass@k is pass@1; drop solver.generation.temperature for the benchmark's sampled default"
        for i, b in enumerate(config.benchmarks)
        if b.repeats > 1 and effective(b.solver.generation).get("temperature") == 0 and not scored_by_likelihood(b, registry)
    ]


def describe(config: Config, registry: Any) -> list[str]:
    """--dry-run: per benchmark, the sampling every request carries and where each value comes from."""
    lines = []
    for i, bench in enumerate(config.benchmarks):
        if scored_by_likelihood(bench, registry):  # shardeval.run.solver.LoglikelihoodSolver.params
            lines.append(
                f"benchmarks[{i}] ({bench.id or bench.name}), repeats {bench.repeats}: scored by log-likelihood: "
                "requests carry temperature=0.0, max_tokens=0 (1 where a server refuses 0) and generate nothing, "
                "whatever solver.generation says"
            )
            continue
        cls = benchmark_class(bench, registry)
        if cls.solver is not None and bench.solver.type == cls.solver:
            how = cls.requests_note or f"the {cls.solver} solver sends what it planned; solver.generation does not apply"
            lines.append(f"benchmarks[{i}] ({bench.id or bench.name}), repeats {bench.repeats}: requests are the benchmark's own ({how})")
            continue
        gen, defaults = bench.solver.generation, declared(bench, registry)
        values = effective(gen)
        parts = [f"{k}={v!r}" + (" (the benchmark's default)" if defaults.get(k) == v else " (the config's)") for k, v in values.items()]
        if gen.max_tokens is None and "max_tokens" not in gen.extra:
            parts.append("max_tokens unset (the server's limit)")
        parts.append(describe_reasoning(gen, config.service_of(bench.solver)))
        lines.append(f"benchmarks[{i}] ({bench.id or bench.name}), repeats {bench.repeats}: requests carry " + ", ".join(parts))
        if bench.judge is not None:
            judge = {"temperature": 0.0, **effective(bench.judge.generation)}
            lines.append(
                f"benchmarks[{i}] judge {bench.judge.service}: requests carry " + ", ".join(f"{k}={v!r}" for k, v in judge.items())
            )
    return lines


def describe_reasoning(gen: Generation, service: ServiceConfig | None) -> str:
    """How much the model is asked to think, and the request fields that ask it (docs/reasoning.md)."""
    reasoning = service.reasoning_for(gen.reasoning) if service is not None else gen.reasoning
    if reasoning is None:
        return "reasoning unset (the server's default)"
    keys = msgspec.to_builtins(reasoning)
    said = ", ".join(f"{k}={msgspec.json.encode(v).decode()}" for k, v in keys.items()) or "nothing set"
    if service is None:
        return f"reasoning {said}"
    fields = service.reasoning_request(reasoning)
    return f"reasoning {said} (as {msgspec.json.encode(fields).decode()})"
