"""Loading the evaluation config: YAML → msgspec Structs, with ${VAR} expansion and -O overrides,
then validated against what the loaded plugins register.

reading: YAML, expansion, overrides; quick: the `run` flags; shardeval.explain: errors in our own
words. This module runs them in order; what of the result changes results (the config hash) is
shardeval.identity's.
"""

from __future__ import annotations

import os
import re
from typing import Any
from collections.abc import Mapping, Sequence

import msgspec

from shardeval.benchmark.rubric import check_template, compile_pattern
from shardeval.config import quick as _quick
from shardeval.config.reading import apply_overrides, expand, read_yaml, split_endpoint_url, type_expansions
from shardeval.config.schema import ClusterConfig, Config, ExportConfig, Generation, JudgeConfig, RawConfig, ServiceConfig
from shardeval.errors import UsageError
from shardeval.explain import PathSeg, Where, decode, format_path, kind
from shardeval.plugins import registry
from shardeval.redact import redact_in


def load_config(
    path: str | None,
    overrides: Sequence[str] = (),
    quick: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    sweep_may_be_empty: bool = False,
) -> Config:
    """Read, expand, override and validate a config; every user mistake is a one-line UsageError.
    `sweep_may_be_empty`: a sweep whose checkpoints glob finds nothing yet is no mistake (`watch`).

    Order: YAML file → `${VAR}` / `${VAR:-default}` expansion (string values only, from `env`,
    default os.environ; `$$` is a literal `$`; `:-` also applies when VAR is set but empty; a value
    that is exactly one expansion in an untyped place, such as `params`, takes the YAML type of
    the expanded text: `n: ${N:-500}` is an int) →
    `-O key.path=value` overrides (the value is YAML: `5` is an int, `null` is null, `[a, b]` a
    list, an empty value is null; `benchmarks.0.repeats` and `benchmarks[0].repeats` both index a
    list) → quick-mode flags → msgspec decoding (lax: the string "5" from a variable decodes as an
    int where an int is expected) → plugin sections (`services.<name>` with its service type's
    Struct, `cluster` with its orchestrator's, default `local`) → cross-checks.

    Quick mode (`quick` holds the `run` flags; None means not given, unknown keys are ignored):
    - Without a config file, `--bench X --model-url U --model-id M` builds
      `services: {model: {type: api, url: U, model: M, api_key_env: …}}` and `benchmarks: [{name: X}]`;
      a missing one of those three is an error naming it.
    - With a config file, `--repeats/--max-problems/--max-concurrent` override every benchmark;
      `--bench X` keeps only benchmark X (an error if the file has none by that name);
      `--model-url/--model-id/--api-key-env` override every service the kept benchmarks' solvers
      use. `--model-url` turns such a service into `type: api` when it was another type (a `vllm`
      service then is not launched): only the keys every service shares (protocol, stream,
      timeouts, retries, api_key_env) are kept, and the model name comes from --model-id, else
      from the old `served_model_name` or `model`.
    - `--model-url` (like any service `url`) may be the base URL ending in /v1 or a full
      …/chat/completions or …/completions URL; the latter is split into base URL and protocol.
    - `--output-dir` sets `output.dir`; `run` decides whether that is a shard's own directory
      (inside a shard) or the root that orchestrated shards write under.
    """
    env = os.environ if env is None else env
    flags = _quick.given(quick)
    where = Where(source=path or "command line")
    data: dict[str, Any] = expand(read_yaml(path), env, where, []) if path is not None else _quick.base(flags)
    apply_overrides(data, overrides, where)
    type_expansions(data, where)
    raw = decode(data, RawConfig, where)
    # Not at the top: every plugin's config Struct imports this package when plugins load (`shardeval
    # plugins`, any registry), and a sweep (the store's layout) and the sampling rules load with a config.
    from shardeval.config import expansion, sampling, sweep

    sweep.resolve(raw, where, may_be_empty=sweep_may_be_empty)  # benchmarks' default service; a sweep's generated checkpoint services
    _default_repeats(raw, data, where, sampling.benchmark_class)
    _quick.apply(raw, flags, path)
    services = {name: decode_service(name, section, where) for name, section in raw.services.items()}
    cluster = _decode_cluster(raw.cluster, where)
    exports = decode_exports(raw.export, where)
    config = Config(**msgspec.structs.asdict(raw) | {"services": services, "cluster": cluster, "export": exports})
    config = expansion.expand(config, registry(), where)  # `--bench NAME:ARG`; an lm-eval group's leaf tasks
    _validate(config, where)
    return sampling.complete(config, registry())  # no key left to a server's default (docs/benchmarks.md)


def _default_repeats(raw: RawConfig, data: dict[str, Any], where: Where, benchmark_class: Any) -> None:
    """A benchmark whose entry leaves `repeats` out takes its own default (Benchmark.default_repeats:
    an Inspect task's `epochs`), as its reference tool runs it; an entry, an -O or --repeats that
    says how many wins. Only the entries written as mappings can leave it out. `benchmark_class`:
    shardeval.config.sampling's (loaded with the config, after the plugins)."""
    listed = data.get("benchmarks")
    entries = listed if isinstance(listed, list) else []
    for i, bench in enumerate(raw.benchmarks):
        if i < len(entries) and isinstance(entries[i], dict) and "repeats" not in entries[i]:
            try:
                repeats = benchmark_class(bench, registry()).default_repeats(dict(bench.params))
            except UsageError as exc:
                raise where.error(str(exc), f"benchmarks[{i}]") from None
            if repeats is not None and repeats != bench.repeats:
                raw.benchmarks[i] = msgspec.structs.replace(bench, repeats=repeats)


def config_from_data(data: dict[str, Any]) -> Config:
    """A Config back from the plain data a manifest records (`config_for_manifest`): decoded as
    `load_config` decodes a file, without expansion, overrides or a sweep (a shard's config has
    none left). For comparing an earlier run with this one (shardeval.identity.identity_changes)."""
    where = Where(source="manifest.json")
    raw = decode(dict(data), RawConfig, where)
    services = {name: decode_service(name, section, where, check=False) for name, section in raw.services.items()}
    cluster = _decode_cluster(raw.cluster, where)
    return Config(**msgspec.structs.asdict(raw) | {"services": services, "cluster": cluster, "export": decode_exports(raw.export, where)})


def config_for_manifest(config: Config) -> dict[str, Any]:
    """The config as plain data for manifest.json; safe to write: keys are only ever env var names,
    and credentials in a URL are replaced by `***` (shardeval.redact). No cache: no `cache` key, so
    manifests of runs without one are what they were."""
    data = msgspec.to_builtins(config)
    if data.get("cache", 0) is None:
        del data["cache"]
    if not data.get("export", 1):  # likewise for `export:`
        del data["export"]
    return redact_in(data)


def decode_exports(entries: list[dict[str, Any]], where: Where, at: str = "export") -> list[ExportConfig]:
    """Each `export:` entry with the Struct its exporter (`to`) registered; the same rules as a
    service's section (unknown keys, types and ranges are one line naming the key)."""
    exports = []
    for i, entry in enumerate(entries):
        path: list[PathSeg] = [at, i] if at == "export" else [at]
        target = entry.get("to") if isinstance(entry, dict) else None
        if not isinstance(target, str):
            known = ", ".join(sorted(registry().entries["exporters"])) or "none"
            what = "missing required key 'to'" if target is None else f"to: expected str, got {kind(target)}"
            raise where.error(f"{what} (registered: {known})", format_path(path))
        found = registry().get("exporters", target, where=f"{where.source}: {format_path([*path, 'to'])}")
        exports.append(decode(entry, found.config or ExportConfig, where, path))
    return exports


def decode_service(name: str, section: dict[str, Any], where: Where, check: bool = True) -> ServiceConfig:
    """With its type's Struct; a full …/chat/completions or …/completions `url` sets the protocol.
    `check`: ServiceConfig.check() too (False for a config as a manifest recorded it: what it was,
    read back to compare, not a setting about to be used on this node)."""
    at = format_path(["services", name])
    service_type = section.get("type")
    if not isinstance(service_type, str):
        known = ", ".join(sorted(registry().entries["services"])) or "none"
        what = "missing required key 'type'" if service_type is None else f"type: expected str, got {kind(service_type)}"
        raise where.error(f"{what} (registered: {known})", at)
    entry = registry().get("services", service_type, where=f"{where.source}: {at}.type")
    service = decode(section, entry.config or ServiceConfig, where, ["services", name])
    try:
        if check:
            service.check()
    except UsageError as exc:
        raise where.error(str(exc), at) from None
    url = getattr(service, "url", None)
    base, protocol = split_endpoint_url(url) if isinstance(url, str) else (url, None)
    return msgspec.structs.replace(service, url=base, protocol=protocol) if protocol else service


def _decode_cluster(section: dict[str, Any], where: Where) -> ClusterConfig:
    cluster_type = section.get("type", "local")
    if not isinstance(cluster_type, str):
        raise where.error(f"expected str, got {kind(cluster_type)}", "cluster.type")
    entry = registry().get("orchestrators", cluster_type, where=f"{where.source}: cluster.type")
    return decode(section, entry.config or ClusterConfig, where, ["cluster"])


def _validate(config: Config, where: Where) -> None:
    """What the types cannot say (their ranges are declared on the Structs): one entry per
    benchmark, usable ids, solvers' services exist."""
    if not config.benchmarks:
        raise where.error("no benchmarks: add a `benchmarks:` list (each entry with a name), or pass --bench NAME")
    seen: dict[str, int] = {}
    for i, bench in enumerate(config.benchmarks):
        at = f"benchmarks[{i}]"
        key = bench.id if bench.id is not None else bench.name
        if key in seen:
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key.rsplit("/", 1)[-1].split(".")[0]) or "bench"
            raise where.error(
                f"{key!r} is already benchmarks[{seen[key]}]; each benchmark writes <out>/{key}/, "
                f"so list it once (use repeats or params), or give each a distinct `id` (e.g. id: {safe}_2)",
                f"{at}.id" if bench.id is not None else f"{at}.name",
            )
        if bench.id is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", bench.id):
            raise where.error(f"{bench.id!r} is not a usable folder name; use letters, digits, '.', '_' or '-'", f"{at}.id")
        seen[key] = i
        if bench.solver.service is not None and bench.solver.service not in config.services:  # None: a sweep's models
            defined = ", ".join(config.services) or "none"
            raise where.error(f"no service {bench.solver.service!r}; defined: {defined}", f"{at}.solver.service")
        registry().get("solvers", bench.solver.type, where=f"{where.source}: {at}.solver.type")
        models = [bench.solver.service] if bench.solver.service is not None else (config.sweep.services if config.sweep else [])
        _validate_reasoning(bench.solver.generation, models, config, where, f"{at}.solver.generation")
        if bench.judge is not None:
            _validate_judge(bench.judge, config, where, f"{at}.judge")
            _validate_reasoning(bench.judge.generation, [bench.judge.service], config, where, f"{at}.judge.generation")


def _validate_reasoning(generation: Generation, services: list[str], config: Config, where: Where, at: str) -> None:
    """Every service asked with `generation.reasoning` can pass it (ServiceConfig.reasoning_request):
    a setting one cannot pass is one line here, before anything is started or asked."""
    for name in services:
        service = config.services.get(name)
        reasoning = service.reasoning_for(generation.reasoning) if service is not None else None
        if service is None or reasoning is None:
            continue
        try:
            service.reasoning_request(reasoning)
        except UsageError as exc:
            raise where.error(f"{exc} (service {name!r}, type {service.type})", at) from None


def _validate_judge(judge: JudgeConfig, config: Config, where: Where, at: str) -> None:
    """The judge's service exists; its rubric and pattern are usable (one line each)."""
    if judge.service not in config.services:
        defined = ", ".join(config.services) or "none"
        raise where.error(f"no service {judge.service!r} to judge with; defined: {defined} (add it under services:)", f"{at}.service")
    try:
        if judge.rubric is not None:
            check_template(judge.rubric, "rubric")
        if judge.verdict is not None:
            compile_pattern(judge.verdict, "verdict")
    except UsageError as exc:
        raise where.error(str(exc), at) from None
