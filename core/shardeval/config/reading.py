"""Reading a config: the YAML file, ${VAR} expansion, -O overrides, `KEY=VALUE` flags and service URLs."""

from __future__ import annotations

import functools
import re
from typing import Any, cast
from collections.abc import Mapping, Sequence

import msgspec

from shardeval.explain import PathSeg, Where, format_path, kind, unwrap
from shardeval.config.schema import ClusterConfig, Protocol, RawConfig, ServiceConfig
from shardeval.errors import UsageError
from shardeval.plugins import registry


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

    # a subclass of `base` made at run time (C-accelerated or not), which mypy cannot follow: a SafeConstructor either way
    loader = cast("type[yaml.constructor.SafeConstructor]", type("_ShardevalLoader", (base,), {}))
    loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return loader


def read_yaml(path: str) -> dict[str, Any]:
    """A YAML file's top-level mapping (an empty file: empty), duplicate keys refused; every error one line."""
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
        data = yaml.load(text, Loader=_yaml_loader())
    except yaml.MarkedYAMLError as exc:  # `file:line:col: invalid YAML: problem (context at line L, column C)`
        mark, context = exc.problem_mark or exc.context_mark, exc.context_mark
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        message = f"{path}{at}: invalid YAML: {exc.problem or exc.context or 'cannot parse'}"
        if (
            exc.problem
            and exc.context
            and context is not None
            and mark is not None
            and (context.line, context.column) != (mark.line, mark.column)
        ):
            message += f" ({exc.context} at line {context.line + 1}, column {context.column + 1})"  # often the cause
        raise UsageError(message) from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: invalid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the top level must be a mapping of sections (services, benchmarks, cluster, output), not {kind(data)}")
    return data


_REFERENCE = re.compile(r"\$\$|\$\{([^}]*)\}|\$\{")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHOLE = re.compile(r"\$\{[^}]*\}")  # a value that is one expansion and nothing else


def expand(node: Any, env: Mapping[str, str], where: Where, path: list[PathSeg]) -> Any:
    """Expand ${VAR} in every string value (keys are left alone)."""
    if isinstance(node, dict):
        return {key: expand(value, env, where, [*path, key]) for key, value in node.items()}
    if isinstance(node, list):
        return [expand(value, env, where, [*path, i]) for i, value in enumerate(node)]
    if not isinstance(node, str) or "$" not in node:
        return node
    at = format_path(path)

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        body = match.group(1)
        if body is None:
            raise where.error(f"unterminated '${{' in {node!r}; write $$ for a literal $", at)
        name, has_default, default = body.partition(":-")
        if not _VAR_NAME.fullmatch(name):
            raise where.error(f"'${{{body}}}' is not ${{VAR}} or ${{VAR:-default}}; write $$ for a literal $", at)
        value = env.get(name)
        if value is None and not has_default:
            raise where.error(f"environment variable {name} is not set; export it, or write ${{{name}:-default}} for a default", at)
        return default if has_default and not value else value  # type: ignore[return-value]

    expanded = _REFERENCE.sub(substitute, node)
    if _WHOLE.fullmatch(node):
        where.whole[tuple(path)] = expanded
    return expanded


def type_expansions(data: dict[str, Any], where: Where) -> None:
    """A value that was exactly one `${...}` and sits where the schema has no type (benchmark
    `params`, `generation.extra`, a plugin's free-form mapping) takes the YAML type of the text it
    expanded to: `n: ${N:-500}` is the int 500, as `n: 500` would be. Typed keys are left to
    msgspec's lax conversion (a `str` key keeps `"123"`), and text around an expansion keeps the
    value a string."""
    import yaml

    for path, text in where.whole.items():
        if _node_at(data, path) != text or _schema_at(data, path) is not Any:  # != text: an -O replaced it
            continue
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if isinstance(value, (bool, int, float)):
            _node_at(data, path[:-1])[path[-1]] = value


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
    type_: Any = RawConfig
    rest = list(path)
    if (rest[:1] == ["services"] and len(rest) >= 2) or rest[:1] == ["cluster"]:  # a plugin's section
        group, depth, default = ("services", 2, None) if rest[0] == "services" else ("orchestrators", 1, "local")
        section = _node_at(data, rest[:depth])
        name = section.get("type", default) if isinstance(section, dict) else default
        entry = registry().entries[group].get(name) if isinstance(name, str) else None  # a bad type: decoding says so
        if entry is None:
            return None
        type_, rest = entry.config or (ServiceConfig if depth == 2 else ClusterConfig), rest[depth:]
    for seg in rest:
        if type_ is Any:
            return Any
        if isinstance(seg, int):
            type_ = unwrap(type_, "list")
        elif (struct := unwrap(type_, "struct")) is not None:
            type_ = next((f.type for f in msgspec.structs.fields(struct) if f.encode_name == seg), None)
        else:
            type_ = unwrap(type_, "dict")
        if type_ is None:
            return None
    return Any if type_ is Any or type_ is object else type_


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


def apply_overrides(data: dict[str, Any], overrides: Sequence[str], where: Where) -> None:
    """Set data[a][b]… = value for each `-O a.b=value`, creating missing mappings; list items are
    addressed by index."""
    for text in overrides:
        key, sep, raw = text.partition("=")
        parts = re.sub(r"\[(\d+)\]", r".\1", key.strip()).split(".")
        if not sep or not all(parts):
            raise UsageError(f"-O {text!r} is not KEY.PATH=VALUE, e.g. -O benchmarks.0.repeats=5")
        node: Any = data
        path: list[PathSeg] = []
        for i, part in enumerate(parts):
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise UsageError(
                        f"-O {text}: {format_path(path)} is a list of {len(node)}; index it with 0..{len(node) - 1}"
                        if node
                        else f"-O {text}: {format_path(path)} is an empty list"
                    )
                step: PathSeg = int(part)
            elif isinstance(node, dict):
                step = part
            else:
                raise UsageError(f"-O {text}: {format_path(path)} is {kind(node)}, not a mapping or list")
            path.append(step)
            if i == len(parts) - 1:
                node[step] = _override_value(raw)
            else:
                if isinstance(node, dict) and node.get(step) is None:
                    node[step] = {}
                node = node[step]
        where.origins[format_path(path)] = text


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


def split_endpoint_url(url: str) -> tuple[str, Protocol | None]:
    """Accept a base URL ending in /v1 or a full endpoint URL; return (base_url, protocol or None)."""
    stripped = url.rstrip("/")
    for suffix, protocol in (("/chat/completions", "chat_completions"), ("/completions", "completions")):
        if stripped.endswith(suffix):
            return stripped[: -len(suffix)], protocol  # type: ignore[return-value]
    return stripped, None
