"""Quick mode: the `run` flags (--bench, --model-url, --repeats, ...) with or without a config file."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

import msgspec

from shardeval.config.schema import BenchmarkConfig, CacheConfig, RawConfig, ReasoningConfig, ServiceConfig
from shardeval.errors import UsageError
from shardeval.plugins import registry

# The built-in service type that reaches a server already running at a URL: what --model-url makes
# of a service. A default the core names, never a type it tests: a service's own config says
# whether it starts a server (`managed()`) and which model it serves (`served_model()`).
URL_SERVICE = "api"
QUICK_KEYS = (
    "bench",
    "model_url",
    "model_id",
    "api_key_env",
    "repeats",
    "max_problems",
    "max_concurrent",
    "output_dir",
    "cache_dir",
    "reasoning_effort",
    "no_thinking",
)
MODEL_FLAGS = ("model_url", "model_id", "api_key_env")  # the quick flags that set the model a service reaches


def given(quick: Mapping[str, Any] | None) -> dict[str, Any]:
    """The flags given (None: not given; unknown keys are ignored), their numbers checked."""
    flags = {k: v for k, v in (quick or {}).items() if k in QUICK_KEYS and v is not None and v is not False}
    for key in ("repeats", "max_problems", "max_concurrent"):
        value = flags.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise UsageError(f"--{key.replace('_', '-')} {value}: must be an integer >= 1")
    return flags


def base(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The config quick mode stands for when no file is given."""
    missing = [f"--{k.replace('_', '-')}" for k in ("bench", "model_url", "model_id") if not flags.get(k)]
    if missing:
        raise UsageError(
            "no config file given: pass CONFIG.yaml, or run quick mode with --bench NAME --model-url URL "
            f"--model-id MODEL (missing: {', '.join(missing)})"
        )
    return {"services": {"model": {"type": URL_SERVICE}}, "benchmarks": [{"name": flags["bench"]}]}


def apply(raw: RawConfig, flags: Mapping[str, Any], source: str | None) -> None:
    """Quick flags beat the file `source` (None: there is none): --bench keeps one benchmark,
    numbers go on every benchmark, the model on the services they use."""
    if source is not None and "bench" in flags:
        raw.benchmarks = _kept_benchmark(raw, flags["bench"], source)
    numbers = {k: flags[k] for k in ("repeats", "max_problems", "max_concurrent") if k in flags}
    if numbers:
        raw.benchmarks = [msgspec.structs.replace(b, **numbers) for b in raw.benchmarks]
    thinking = {
        k: v
        for k, v in (("effort", flags.get("reasoning_effort")), ("enable", False if flags.get("no_thinking") else None))
        if v is not None
    }
    if thinking:  # --reasoning-effort / --no-thinking beat each benchmark's generation.reasoning key by key
        raw.benchmarks = [_with_reasoning(b, thinking) for b in raw.benchmarks]
    if any(k in flags for k in MODEL_FLAGS):
        _apply_model(raw, flags, source)
    if "output_dir" in flags:
        raw.output = msgspec.structs.replace(raw.output, dir=str(flags["output_dir"]))
    if flags.get("cache_dir"):  # --cache-dir beats the file's `cache.dir`
        raw.cache = CacheConfig(dir=str(flags["cache_dir"]))


def _kept_benchmark(raw: RawConfig, name: str, source: str) -> list[BenchmarkConfig]:
    """--bench NAME with a file: the file's benchmarks of that name or id, or why there are none."""
    kept = [b for b in raw.benchmarks if name in (b.name, b.id)]
    if not kept:
        defined = ", ".join(b.name for b in raw.benchmarks) or "none"
        raise UsageError(f"--bench {name}: {source} has no benchmark {name!r}; defined: {defined}")
    return kept


def _apply_model(raw: RawConfig, flags: Mapping[str, Any], source: str | None) -> None:
    """--model-url, --model-id, --api-key-env on each service the benchmarks use (a sweep of
    several models refuses them: which model would they be?)."""
    if raw.sweep is not None:
        flag = next(f"--{k.replace('_', '-')}" for k in MODEL_FLAGS if k in flags)
        raise UsageError(
            f"{flag}: {source} is a sweep of several models; set each model in its `services` "
            "section, or run one model with --sweep-services NAME"
        )
    # not a sweep, so sweep.resolve named every benchmark's service
    for name in dict.fromkeys(b.solver.service for b in raw.benchmarks if b.solver.service is not None):
        if name in raw.services or "model_url" in flags:
            raw.services[name] = _quick_service(name, raw.services.get(name), flags)


def _with_reasoning(bench: BenchmarkConfig, keys: dict[str, Any]) -> BenchmarkConfig:
    generation = bench.solver.generation
    reasoning = msgspec.structs.replace(generation.reasoning or ReasoningConfig(), **keys)
    solver = msgspec.structs.replace(bench.solver, generation=msgspec.structs.replace(generation, reasoning=reasoning))
    return msgspec.structs.replace(bench, solver=solver)


def _quick_service(name: str, section: dict[str, Any] | None, flags: Mapping[str, Any]) -> dict[str, Any]:
    section = dict(section or {})
    if "model_url" in flags:
        # The section as its plugin's Struct, to ask it what it is; None when it does not decode
        # (its own errors are reported when the config is decoded for real).
        service_type = section.get("type")
        entry = registry().entries["services"].get(service_type) if isinstance(service_type, str) else None
        try:
            current = msgspec.convert(section, entry.config or ServiceConfig, strict=False) if entry else None
        except msgspec.ValidationError:
            current = None
        if current is None or current.managed():  # it would start its own server: reach the URL instead
            shared = {f.encode_name for f in msgspec.structs.fields(ServiceConfig)} - {"type"}
            model = current.served_model() if current is not None else None
            section = {k: v for k, v in section.items() if k in shared}
            section.update({"type": URL_SERVICE}, **({"model": model} if model else {}))
        section["url"] = flags["model_url"]
    for flag, key in (("model_id", "model"), ("api_key_env", "api_key_env")):
        if flag in flags:
            section[key] = flags[flag]
    if "model_url" in flags and not section.get("model"):
        raise UsageError(f"--model-url: service {name!r} now reaches that URL and needs the served model: pass --model-id")
    return section
