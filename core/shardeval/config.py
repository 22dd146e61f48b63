"""The evaluation config: YAML → msgspec Structs, with ${VAR} expansion and -O overrides.

Top-level sections are fixed here; `services.<name>` and `cluster` are decoded in a second step
with the Struct their plugin registered (a service's or orchestrator's own keys live in its
plugin), so a third-party plugin brings its own validated config section.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Mapping, Sequence

from shardeval.errors import UsageError
import msgspec

Protocol = Literal["chat_completions", "completions"]

# Declared ranges for numeric limits: every int or float knob of a config section (plugins' too)
# uses one of these or its own msgspec.Meta, so a nonsense value (a timeout of 0, no attempts, a
# negative backoff) is a one-line error naming the key and the value, never a run that does nothing.
Count = Annotated[int, msgspec.Meta(ge=1)]  # how many: at least one
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]  # a timeout or an interval: zero would fail or spin
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]
NonNegativeSeconds = NonNegativeFloat  # a wait that may be none at all
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base for config sections: unknown keys are errors, defaults stay out of hashes and dumps."""


class Generation(_Section):
    """Sampling parameters sent with every request; `extra` passes server-specific ones through."""

    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=-1)] | None = None  # -1 (or 0): no top-k, as vLLM reads it
    max_tokens: Count | None = None
    stop: list[str] | None = None
    extra: dict[str, Any] = {}


class SolverConfig(_Section):
    type: str = "simple"
    service: str = "model"
    system_prompt: str | None = None
    generation: Generation = msgspec.field(default_factory=Generation)


class BenchmarkConfig(_Section):
    name: str
    # The benchmark's name in records and its folder <out>/<id>/ (default: the benchmark's own name,
    # a data file's stem); needed to list one benchmark twice, or two data files of one name.
    id: str | None = None
    solver: SolverConfig = msgspec.field(default_factory=SolverConfig)
    repeats: Count = 1
    max_problems: Count | None = None
    max_concurrent: Count = 32
    params: dict[str, Any] = {}
    metrics: list[str] | None = None  # merge's metrics for it; None: the benchmark's own default


class Timeouts(_Section):
    """Split client timeouts in seconds; `total` is off by default so long reasoning streams survive."""

    connect: Seconds = 30.0
    first_token: Seconds = 600.0
    idle: Seconds = 120.0
    total: Seconds | None = None


class Retries(_Section):
    """Attempts per request (first try included) and full-jitter exponential backoff bounds."""

    attempts: Count = 5
    backoff_base: NonNegativeSeconds = 0.5
    backoff_max: NonNegativeSeconds = 30.0


class ServiceConfig(_Section):
    """Keys every service type shares; a service plugin subclasses this with its own keys."""

    type: str
    protocol: Protocol = "chat_completions"
    stream: bool = True
    api_key_env: str | None = None
    timeouts: Timeouts = msgspec.field(default_factory=Timeouts)
    retries: Retries = msgspec.field(default_factory=Retries)
    # AIMD concurrency (shardeval.adaptive): halve the window on 429 bursts, grow it back on success;
    # false keeps the fixed max_concurrent window. Transport only: not part of the config hash.
    adaptive: bool = False
    # The body bytes one attempt may receive (SSE framing included); past it the request ends as a
    # `too_large` error, not retried. 64 MiB: about 300,000 streamed tokens of a vLLM chat stream
    # (~220 bytes per token chunk), far above any real max_tokens; per-token logprobs in a stream
    # take ~10x more per token, so raise it for those. Transport only: not part of the config hash.
    max_response_bytes: Count = 64 * 1024 * 1024
    # Stop the shard (failed, exit 1) when its first N requests to this service all end as
    # `connection` errors: the endpoint is down, and asking the rest would only burn the allocation.
    # Once any request got an answer from it (any HTTP reply), connection errors are just records.
    # 0: never stop early. Transport only: not part of the config hash.
    unreachable_after: NonNegativeInt = 8

    def identity(self) -> dict[str, Any] | None:
        """The keys of this service that change results: the model, its weights and the engine
        settings that change what it answers. They join the run's identity (the config hash), so
        a resume or merge across a change is refused. Never ports, hosts, keys or timeouts.

        Every service plugin overrides this. The default, None, means "not declared": then every
        key of the plugin's own section counts (a port change refuses a resume too: safe, never
        mixed), and the plugin is named in a warning when plugins load.
        """
        return None

    def gpus(self) -> int:
        """GPUs one instance of this service needs on its node, so orchestrators can size what a
        shard asks for (CPUs and memory per GPU, /dev/shm). 0: it runs no model here."""
        return 0

    def port_override(self) -> dict[str, Any] | None:
        """Keys that make a managed service bind a free node-local port instead of a fixed one,
        for orchestrators that may put two shards on one node; None when it binds no fixed port."""
        return None

    def managed(self) -> bool:
        """Whether a shard starts this service as a process on its own node (a model server), as
        opposed to reaching one that already runs, so orchestrators can say what a shard starts."""
        return False

    def served_model(self) -> str | None:
        """The model name requests carry, known before the service starts: quick mode keeps it
        when `--model-url` turns the service into one that reaches a running server. None: the
        config does not say."""
        return None

    def launch_line(self, command: list[str]) -> str:
        """One line for the comments of the scripts an orchestrator writes: what a shard starts
        for this service (its command line, secrets redacted; `command` is how the script runs
        shardeval on the node), or what it reaches instead. Orchestrators never test the type."""
        return "started by its service plugin on the node" if self.managed() else "nothing to start"


class ClusterConfig(_Section):
    """Keys every orchestrator shares; an orchestrator plugin subclasses this with its own keys."""

    type: str = "local"
    shards: Count | None = None

    def runs_in_process(self) -> bool:
        """Whether `shardeval run` with no shard selected evaluates the whole run right here
        instead of handing it to the orchestrator (`local` with no `shards`: its one shard would
        only be a child of this process)."""
        return False


class OutputConfig(_Section):
    dir: str = "./eval_results"
    trajectories: bool = True
    progress_interval_s: NonNegativeSeconds = 30.0  # 0: no progress lines
    drain_timeout_s: NonNegativeSeconds = 10.0


class RawConfig(_Section):
    """The file as written: plugin-owned sections still undecoded."""

    services: dict[str, dict[str, Any]] = {}
    benchmarks: list[BenchmarkConfig] = []
    cluster: dict[str, Any] = {}
    output: OutputConfig = msgspec.field(default_factory=OutputConfig)
    seed: int = 0
    shuffle_seed: int | None = None


class Config(msgspec.Struct, kw_only=True):
    """The validated config: every section decoded with its plugin's Struct."""

    services: dict[str, ServiceConfig]
    benchmarks: list[BenchmarkConfig]
    cluster: ClusterConfig
    output: OutputConfig
    seed: int = 0
    shuffle_seed: int | None = None

    def used_services(self) -> dict[str, ServiceConfig]:
        """The services a shard starts: those the benchmarks' solvers use, in first-use order."""
        names = dict.fromkeys(b.solver.service for b in self.benchmarks)
        return {name: self.services[name] for name in names if name in self.services}


# --- loading -----------------------------------------------------------------------------------

QUICK_KEYS = ("bench", "model_url", "model_id", "api_key_env", "repeats", "max_problems", "max_concurrent", "output_dir")

PathSeg = str | int  # one step of a key path: a mapping key or a list index


def load_config(
    path: str | None,
    overrides: Sequence[str] = (),
    quick: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Read, expand, override and validate a config; every user mistake is a one-line UsageError.

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
    flags = {k: v for k, v in (quick or {}).items() if k in QUICK_KEYS and v is not None}
    _check_quick_numbers(flags)
    where = _Where(source=path or "command line")
    data: dict[str, Any] = _expand(_read_yaml(path), env, where, []) if path is not None else _quick_base(flags)
    _apply_overrides(data, overrides, where)
    _type_expansions(data, where)
    raw = _decode(data, RawConfig, where, [])
    if path is not None and "bench" in flags:
        raw.benchmarks = _keep_benchmark(raw.benchmarks, flags["bench"], path)
    _apply_quick(raw, flags)
    config = Config(
        services={name: _decode_service(name, section, where) for name, section in raw.services.items()},
        benchmarks=raw.benchmarks,
        cluster=_decode_cluster(raw.cluster, where),
        output=raw.output,
        seed=raw.seed,
        shuffle_seed=raw.shuffle_seed,
    )
    _validate(config, where)
    return config


def config_hash(config: Config) -> str:
    """A fingerprint of everything that changes results, and nothing else.

    Shards and resumed runs compare it: URLs, ports, API key names, timeouts, retries, concurrency,
    output settings and the cluster (shard count included) may differ between them; seeds,
    prompts, generation parameters, repeats and the model may not.
    """
    from shardeval.service import describe

    benchmarks = []
    for bench in config.benchmarks:
        service = config.services.get(bench.solver.service)
        solver = bench.solver
        entry: dict[str, Any] = {} if bench.id is None else {"id": bench.id}  # absent: older hashes stay valid
        benchmarks.append(
            {
                **entry,
                "name": bench.name,
                "params": bench.params,
                "repeats": bench.repeats,
                "max_problems": bench.max_problems,
                "solver": {
                    "type": solver.type,
                    "system_prompt": solver.system_prompt,
                    "generation": msgspec.to_builtins(solver.generation),
                    "service": describe(service) if service is not None else None,
                },
            }
        )
    payload = {"seed": config.seed, "shuffle_seed": config.shuffle_seed, "benchmarks": benchmarks}
    digest = hashlib.sha256(msgspec.json.encode(payload, order="sorted")).hexdigest()
    return f"sha256:{digest[:16]}"


def config_for_manifest(config: Config) -> dict[str, Any]:
    """The config as plain data for manifest.json; safe to write: keys are only ever env var names."""
    return msgspec.to_builtins(config)


# --- reading and expanding ---------------------------------------------------------------------


@dataclass
class _Where:
    """Where a config came from, so every error starts with the file and ends with the -O that caused it."""

    source: str
    origins: dict[str, str] = field(default_factory=dict)  # formatted key path -> "-O" text
    # Values that were exactly one ${...} expansion: key path -> the expanded text (see _type_expansions).
    whole: dict[tuple[PathSeg, ...], str] = field(default_factory=dict)

    def error(self, message: str, path: str = "", key: str | None = None) -> UsageError:
        """`source: path: message`; `key` is the full path an -O may have set, when not `path`."""
        blamed = key if key is not None else path
        origin = next((text for p, text in self.origins.items() if blamed and _related(blamed, p)), None)
        suffix = f" (from -O {origin})" if origin else ""
        return UsageError(f"{self.source}: {path + ': ' if path else ''}{message}{suffix}")


def _related(a: str, b: str) -> bool:
    """One key path is the other or lies inside it (an -O that set or created either explains both)."""
    return a == b or a.startswith((b + ".", b + "[")) or b.startswith((a + ".", a + "["))


def _format_path(path: Sequence[PathSeg]) -> str:
    """['benchmarks', 0, 'repeats'] -> 'benchmarks[0].repeats' (the form every message uses)."""
    text = ""
    for seg in path:
        text += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if text else str(seg))
    return text


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


@functools.lru_cache(maxsize=1)
def _yaml_loader() -> type:
    """PyYAML's safe loader (C-accelerated when available) that refuses duplicate keys."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        loader.flatten_mapping(node)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue  # unhashable keys get PyYAML's own error below
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (the second would silently replace the first)", key_node.start_mark
                )
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    loader = type("_ShardevalLoader", (base,), {})
    loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return loader


def _read_yaml(path: str) -> dict[str, Any]:
    """The file's top-level mapping; an empty file is an empty mapping."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a config file; give the YAML file's path") from None
    except PermissionError:
        raise UsageError(f"{path}: cannot read the config file: permission denied") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a UTF-8 text file (bad byte at offset {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a safe loader
    except yaml.MarkedYAMLError as exc:
        raise UsageError(_yaml_error(path, exc)) from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: invalid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(
            f"{path}: the top level must be a mapping of sections (services, benchmarks, cluster, output), "
            f"not {_kind(data)}"
        )
    return data


def _yaml_error(path: str, exc: Any) -> str:
    """`file:line:col: invalid YAML: problem (context at line L, column C)`; the context often is the cause."""
    mark, context = exc.problem_mark or exc.context_mark, exc.context_mark
    at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    message = f"{path}{at}: invalid YAML: {exc.problem or exc.context or 'cannot parse'}"
    if exc.problem and exc.context and context is not None and (context.line, context.column) != (mark.line, mark.column):
        message += f" ({exc.context} at line {context.line + 1}, column {context.column + 1})"
    return message


_REFERENCE = re.compile(r"\$\$|\$\{([^}]*)\}|\$\{")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHOLE = re.compile(r"\$\{[^}]*\}")  # a value that is one expansion and nothing else


def _expand(node: Any, env: Mapping[str, str], where: _Where, path: list[PathSeg]) -> Any:
    """Expand ${VAR} in every string value (keys are left alone)."""
    if isinstance(node, str):
        if "$" not in node:
            return node
        value = _expand_string(node, env, where, _format_path(path))
        if _WHOLE.fullmatch(node):
            where.whole[tuple(path)] = value
        return value
    if isinstance(node, dict):
        return {key: _expand(value, env, where, [*path, key]) for key, value in node.items()}
    if isinstance(node, list):
        return [_expand(value, env, where, [*path, i]) for i, value in enumerate(node)]
    return node


def _expand_string(text: str, env: Mapping[str, str], where: _Where, at: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        body = match.group(1)
        if body is None:
            raise where.error(f"unterminated '${{' in {text!r}; write $$ for a literal $", at)
        name, has_default, default = body.partition(":-")
        if not _VAR_NAME.fullmatch(name):
            raise where.error(f"'${{{body}}}' is not ${{VAR}} or ${{VAR:-default}}; write $$ for a literal $", at)
        value = env.get(name)
        if value is None and not has_default:
            raise where.error(
                f"environment variable {name} is not set; export it, or write ${{{name}:-default}} for a default", at
            )
        return default if has_default and not value else value  # type: ignore[return-value]

    return _REFERENCE.sub(substitute, text)


def _type_expansions(data: dict[str, Any], where: _Where) -> None:
    """A value that was exactly one `${...}` and sits where the schema has no type (benchmark
    `params`, `generation.extra`, a plugin's free-form mapping) takes the YAML type of the text it
    expanded to: `n: ${N:-500}` is the int 500, as `n: 500` would be. Typed keys are left to
    msgspec's lax conversion (a `str` key keeps `"123"`), and text around an expansion keeps the
    value a string."""
    import yaml

    for path, text in where.whole.items():
        parent = _node_at(data, path[:-1])
        last = path[-1]
        try:
            if parent is None or parent[last] != text:  # replaced by an -O override since
                continue
        except (KeyError, IndexError, TypeError):
            continue
        if _schema_at(data, path) is not Any:
            continue
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if isinstance(value, (bool, int, float)):
            parent[last] = value


def _node_at(data: Any, path: Sequence[PathSeg]) -> Any:
    for seg in path:
        try:
            data = data[seg]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _schema_at(data: dict[str, Any], path: Sequence[PathSeg]) -> Any:
    """The declared type at a key path of the raw config (None: unknown, e.g. an unknown key or
    service type); `services.<name>` and `cluster` use their plugin's Struct."""
    from shardeval.plugins import registry

    type_: Any = RawConfig
    rest = list(path)
    if len(rest) >= 2 and rest[0] == "services":
        section = _node_at(data, rest[:2])
        kind = section.get("type") if isinstance(section, dict) else None
        entry = registry().entries["services"].get(kind) if isinstance(kind, str) else None  # a bad type: _decode says so
        if entry is None:
            return None
        type_, rest = entry.config or ServiceConfig, rest[2:]
    elif rest and rest[0] == "cluster":
        section = data.get("cluster")
        name = section.get("type", "local") if isinstance(section, dict) else "local"
        entry = registry().entries["orchestrators"].get(name) if isinstance(name, str) else None
        if entry is None:
            return None
        type_, rest = entry.config or ClusterConfig, rest[1:]
    for seg in rest:
        if type_ is Any:
            return Any
        if isinstance(seg, int):
            type_ = _unwrap(type_, "list")
        elif (struct := _unwrap(type_, "struct")) is not None:
            type_ = next((f.type for f in msgspec.structs.fields(struct) if f.encode_name == seg), None)
        else:
            type_ = _unwrap(type_, "dict")
        if type_ is None:
            return None
    return Any if type_ is Any or type_ is object else type_


# --- overrides and quick mode ------------------------------------------------------------------


def _override_value(raw: str) -> Any:
    """A YAML value, except that `a: b` stays a string (only `{…}` makes a mapping)."""
    import yaml

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, dict) and not raw.lstrip().startswith("{"):
        return raw
    return value


def _apply_overrides(data: dict[str, Any], overrides: Sequence[str], where: _Where) -> None:
    for text in overrides:
        key, sep, raw = text.partition("=")
        parts = re.sub(r"\[(\d+)\]", r".\1", key.strip()).split(".")
        if not sep or not all(parts):
            raise UsageError(f"-O {text!r} is not KEY.PATH=VALUE, e.g. -O benchmarks.0.repeats=5")
        path = _set_path(data, parts, _override_value(raw), text)
        where.origins[_format_path(path)] = text


def _set_path(data: dict[str, Any], parts: list[str], value: Any, text: str) -> list[PathSeg]:
    """Set data[a][b]… = value, creating missing mappings; list items are addressed by index."""
    node: Any = data
    path: list[PathSeg] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise UsageError(
                    f"-O {text}: {_format_path(path)} is a list of {len(node)}; index it with 0..{len(node) - 1}"
                    if node
                    else f"-O {text}: {_format_path(path)} is an empty list"
                )
            step: PathSeg = int(part)
        elif isinstance(node, dict):
            step = part
            if not last and node.get(part) is None:
                node[part] = {}
        else:
            raise UsageError(f"-O {text}: {_format_path(path)} is {_kind(node)}, not a mapping or list")
        path.append(step)
        if last:
            node[step] = value
        else:
            node = node[step]
    return path


def _check_quick_numbers(flags: Mapping[str, Any]) -> None:
    for key in ("repeats", "max_problems", "max_concurrent"):
        value = flags.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise UsageError(f"--{key.replace('_', '-')} {value}: must be an integer >= 1")


def _quick_base(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The config quick mode stands for when no file is given."""
    missing = [f"--{k.replace('_', '-')}" for k in ("bench", "model_url", "model_id") if not flags.get(k)]
    if missing:
        raise UsageError(
            "no config file given: pass CONFIG.yaml, or run quick mode with --bench NAME --model-url URL "
            f"--model-id MODEL (missing: {', '.join(missing)})"
        )
    return {"services": {"model": {"type": "api"}}, "benchmarks": [{"name": flags["bench"]}]}


def _keep_benchmark(benchmarks: list[BenchmarkConfig], name: str, source: str) -> list[BenchmarkConfig]:
    kept = [b for b in benchmarks if name in (b.name, b.id)]
    if not kept:
        defined = ", ".join(b.name for b in benchmarks) or "none"
        raise UsageError(f"--bench {name}: {source} has no benchmark {name!r}; defined: {defined}")
    return kept


def _apply_quick(raw: RawConfig, flags: Mapping[str, Any]) -> None:
    """Quick flags beat the file: numbers on every benchmark, the model on the services they use."""
    numbers = {k: flags[k] for k in ("repeats", "max_problems", "max_concurrent") if k in flags}
    if numbers:
        raw.benchmarks = [msgspec.structs.replace(b, **numbers) for b in raw.benchmarks]
    if any(k in flags for k in ("model_url", "model_id", "api_key_env")):
        for name in dict.fromkeys(b.solver.service for b in raw.benchmarks):
            if name in raw.services or "model_url" in flags:
                raw.services[name] = _quick_service(name, raw.services.get(name), flags)
    if "output_dir" in flags:
        raw.output = msgspec.structs.replace(raw.output, dir=str(flags["output_dir"]))


def _quick_service(name: str, section: dict[str, Any] | None, flags: Mapping[str, Any]) -> dict[str, Any]:
    section = dict(section or {})
    if "model_url" in flags:
        if section.get("type") != "api":
            shared = {f.encode_name for f in msgspec.structs.fields(ServiceConfig)} - {"type"}
            model = section.get("served_model_name") or section.get("model")
            section = {k: v for k, v in section.items() if k in shared}
            section.update({"type": "api"}, **({"model": model} if model else {}))
        section["url"] = flags["model_url"]
    if "model_id" in flags:
        section["model"] = flags["model_id"]
    if "api_key_env" in flags:
        section["api_key_env"] = flags["api_key_env"]
    if section.get("type") == "api" and not section.get("model"):
        raise UsageError(f"--model-url: service {name!r} is now an api service and needs the served model: pass --model-id")
    return section


# --- decoding and explaining validation errors -------------------------------------------------


def _decode(data: Any, type_: Any, where: _Where, prefix: list[PathSeg]) -> Any:
    try:
        return msgspec.convert(data, type_, strict=False)
    except msgspec.ValidationError as exc:
        raise _explain(str(exc), data, type_, where, prefix) from None


def _decode_service(name: str, section: dict[str, Any], where: _Where) -> ServiceConfig:
    from shardeval.plugins import registry

    at = _format_path(["services", name])
    service_type = section.get("type")
    services = registry().entries["services"]
    if not isinstance(service_type, str):
        known = ", ".join(sorted(services)) or "none"
        message = f"missing required key 'type' (registered: {known})" if service_type is None else (
            f"type: expected str, got {_kind(service_type)} (registered: {known})"
        )
        raise where.error(message, at)
    entry = registry().get("services", service_type, where=f"{where.source}: {at}.type")
    service = _decode(section, entry.config or ServiceConfig, where, ["services", name])
    return _split_url(service)


def _split_url(service: ServiceConfig) -> ServiceConfig:
    """A full …/chat/completions or …/completions `url` sets the protocol: keep the base URL."""
    url = getattr(service, "url", None)
    if not isinstance(url, str):
        return service
    from shardeval.service import split_endpoint_url

    base, protocol = split_endpoint_url(url)
    return msgspec.structs.replace(service, url=base, protocol=protocol) if protocol else service


def _decode_cluster(section: dict[str, Any], where: _Where) -> ClusterConfig:
    from shardeval.plugins import registry

    cluster_type = section.get("type", "local")
    if not isinstance(cluster_type, str):
        raise where.error(f"expected str, got {_kind(cluster_type)}", "cluster.type")
    entry = registry().get("orchestrators", cluster_type, where=f"{where.source}: cluster.type")
    return _decode(section, entry.config or ClusterConfig, where, ["cluster"])


_AT = re.compile(r"(?P<text>.*?)(?: - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`)?", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")


def _unwrap(type_: Any, want: str) -> Any:
    """Strip Annotated/Optional down to the struct, list item or dict value a path steps into."""
    origin = typing.get_origin(type_)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(type_)[0], want)
    if origin in (typing.Union, types.UnionType):
        return next((t for t in (_unwrap(a, want) for a in typing.get_args(type_)) if t is not None), None)
    if want == "struct":
        return type_ if isinstance(type_, type) and issubclass(type_, msgspec.Struct) else None
    if want == "list" and origin in (list, tuple, set, frozenset):
        return (typing.get_args(type_) or (Any,))[0]
    if want == "dict" and origin is dict:
        return (typing.get_args(type_) or (Any, Any))[1]
    if want == "literal" and origin is Literal:
        return type_
    return None


def _field_type(struct: Any, name: str) -> Any:
    struct = _unwrap(struct, "struct")
    if struct is None:
        return Any
    return next((f.type for f in msgspec.structs.fields(struct) if f.encode_name == name), Any)


def _locate(message: str, data: Any, type_: Any) -> tuple[str, list[PathSeg], Any, Any]:
    """Follow msgspec's `- at $.a[0].b` through data and types: (text, path, value, type).

    msgspec writes a mapping key as `[...]`; the key is found by decoding each value again.
    """
    match = _AT.fullmatch(message)
    assert match is not None  # the pattern matches any string
    text, path = match["text"], []
    for step in _STEP.finditer(match["path"] or ""):
        name, index = step.group(1), step.group(2)
        if name is not None:
            path.append(name)
            data, type_ = (data.get(name) if isinstance(data, dict) else None), _field_type(type_, name)
        elif index is not None:
            path.append(int(index))
            data = data[int(index)] if isinstance(data, list) and int(index) < len(data) else None
            type_ = _unwrap(type_, "list") or Any
        else:
            value_type = _unwrap(type_, "dict") or Any
            for key, value in (data or {}).items():
                try:
                    msgspec.convert(value, value_type, strict=False)
                except msgspec.ValidationError as exc:
                    text, subpath, data, type_ = _locate(str(exc), value, value_type)
                    return text, [*path, key, *subpath], data, type_
            break
    if match["key"] and isinstance(data, dict):  # a non-string key directly at this level
        bad = next((k for k in data if not isinstance(k, str)), None)
        if bad is not None:
            return "key must be a string", path, bad, str
    return text, path, data, type_


def _readable(type_text: str) -> str:
    """msgspec's JSON words for a YAML user: object -> mapping, array -> list, a | b -> a or b."""
    words = {"object": "mapping", "array": "list"}
    return " or ".join(words.get(t.strip(), t.strip()) for t in type_text.split("|"))


def _got(value: Any) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return f"{type(value).__name__} ({shown})"
    return _kind(value) if not isinstance(value, bool) else f"bool ({value})"


def _explain(message: str, data: Any, type_: Any, where: _Where, prefix: list[PathSeg]) -> UsageError:
    text, path, value, at_type = _locate(message, data, type_)
    full = [*prefix, *path]
    at = _format_path(full)
    if m := re.fullmatch(r"Object contains unknown field `(.+)`", text):
        key = _format_path([*full, m[1]])
        struct = _unwrap(at_type, "struct")
        names = [f.encode_name for f in msgspec.structs.fields(struct)] if struct is not None else []
        close = difflib.get_close_matches(m[1], names, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys here: {', '.join(names) or 'none'}"
        return where.error(f"unknown key {key!r}; {hint}", key=key)
    if m := re.fullmatch(r"Object missing required field `(.+)`", text):
        return where.error(f"missing required key {m[1]!r}", at)
    if text == "key must be a string":
        return where.error(f"key {value!r} must be a string", at)
    if m := re.fullmatch(r"Expected `(int|float)` ([<>]=? .+)", text):  # a declared range (msgspec.Meta)
        what = "an integer" if m[1] == "int" else "a number"
        return where.error(f"must be {what} {m[2]}, got {value!r}", at)
    if m := re.fullmatch(r"Expected `(.+?)`(.*?)(?:, got `.+`)?", text, re.S):
        hint = "; quote the value in YAML" if m[1] == "str" and isinstance(value, (int, float, bool)) else ""
        return where.error(f"expected {_readable(m[1])}{m[2]}, got {_got(value)}{hint}", at)
    if m := re.fullmatch(r"Invalid enum value (.+)", text):
        literal = _unwrap(at_type, "literal")
        choices = ", ".join(map(str, typing.get_args(literal))) if literal is not None else "see the docs"
        return where.error(f"invalid value {m[1]}; expected one of: {choices}", at)
    return where.error(text[:1].lower() + text[1:], at)


# --- cross-checks ------------------------------------------------------------------------------


def _validate(config: Config, where: _Where) -> None:
    """What the types cannot say (their ranges are declared on the Structs): one entry per
    benchmark, usable ids, solvers' services exist."""
    from shardeval.plugins import registry

    if not config.benchmarks:
        raise where.error("no benchmarks: add a `benchmarks:` list (each entry with a name), or pass --bench NAME")
    seen: dict[str, int] = {}
    for i, bench in enumerate(config.benchmarks):
        at = f"benchmarks[{i}]"
        key = bench.id if bench.id is not None else bench.name
        if key in seen:
            raise where.error(
                f"{key!r} is already benchmarks[{seen[key]}]; each benchmark writes <out>/{key}/, "
                f"so list it once (use repeats or params), or give each a distinct `id` (e.g. id: {_safe_id(key)}_2)",
                f"{at}.id" if bench.id is not None else f"{at}.name",
            )
        if bench.id is not None and not _ID.fullmatch(bench.id):
            raise where.error(f"{bench.id!r} is not a usable folder name; use letters, digits, '.', '_' or '-'", f"{at}.id")
        seen[key] = i
        if bench.solver.service not in config.services:
            defined = ", ".join(config.services) or "none"
            raise where.error(f"no service {bench.solver.service!r}; defined: {defined}", f"{at}.solver.service")
        registry().get("solvers", bench.solver.type, where=f"{where.source}: {at}.solver.type")


_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _safe_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name.rsplit("/", 1)[-1].split(".")[0]) or "bench"


def decode_section(data: Any, type_: Any, *, source: str, prefix: str = "") -> Any:
    """Decode a plugin's own YAML section with the config's error wording (path, closest key).

    For plugins whose params or mapping files are config-like: one line naming `source`, the key
    path under `prefix`, and the fix.
    """
    return _decode(data, type_, _Where(source=source), [prefix] if prefix else [])


def read_yaml(path: str) -> dict[str, Any]:
    """A YAML file's top-level mapping, with the config's one-line errors (duplicate keys refused)."""
    return _read_yaml(path)


def parse_key_values(pairs: tuple[str, ...] | list[str], flag: str, example: str) -> dict[str, Any]:
    """`KEY=VALUE` command-line pairs with YAML values (`n=500` an int, `name=foo` a string);
    a malformed pair is one line naming `flag`, the pair and an `example`."""
    import yaml

    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} {example}")
        try:
            params[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise UsageError(f"{flag} {pair!r}: the value is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return params
