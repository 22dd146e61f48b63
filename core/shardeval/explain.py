"""Errors in our own words for data decoded into Structs (the config, a benchmark's params): which
key does not fit its declared type, and why.

msgspec tells only that a value does not decode. The place is found here by decoding the parts, in
the order msgspec reads them, down to the first one that does not fit; why it does not fit comes from
its declared type (msgspec.inspect: the type, its range, its choices), never from msgspec's wording.
"""

from __future__ import annotations

import difflib
import operator
import types
import typing
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import msgspec
import msgspec.inspect as mi

from shardeval.errors import UsageError

PathSeg = str | int  # one step of a key path: a mapping key or a list index


@dataclass
class Where:
    """Where a config came from, so every error starts with the file and ends with the -O that caused it."""

    source: str
    origins: dict[str, str] = field(default_factory=dict)  # formatted key path -> "-O" text
    # Values that were exactly one ${...} expansion: key path -> the expanded text (see type_expansions).
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


def format_path(path: Sequence[PathSeg]) -> str:
    """['benchmarks', 0, 'repeats'] -> 'benchmarks[0].repeats' (the form every message uses)."""
    text = ""
    for seg in path:
        text += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if text else str(seg))
    return text


def kind(value: Any) -> str:
    return (
        "null"
        if value is None
        else "a mapping"
        if isinstance(value, dict)
        else "a list"
        if isinstance(value, list)
        else type(value).__name__
    )


def unwrap(type_: Any, want: str) -> Any:
    """Strip Annotated/Optional down to the struct, list item or dict value a path steps into."""
    origin = typing.get_origin(type_)
    if origin is typing.Annotated:
        return unwrap(typing.get_args(type_)[0], want)
    if origin in (typing.Union, types.UnionType):
        return next((t for t in (unwrap(a, want) for a in typing.get_args(type_)) if t is not None), None)
    if want == "struct":
        return type_ if isinstance(type_, type) and issubclass(type_, msgspec.Struct) else None
    if want == "list" and origin in (list, tuple, set, frozenset):
        return (typing.get_args(type_) or (Any,))[0]
    if want == "dict" and origin is dict:
        return (typing.get_args(type_) or (Any, Any))[1]
    return type_ if want == "literal" and origin is typing.Literal else None


def decode(data: Any, type_: Any, where: Where, prefix: Sequence[PathSeg] = ()) -> Any:
    """msgspec's lax decoding (the string "5" from a variable is an int where an int is declared);
    a value that does not fit is one UsageError naming the key path, what fits there and the value."""
    try:
        return msgspec.convert(data, type_, strict=False)
    except msgspec.ValidationError as exc:
        path, message, unknown = _first_misfit(data, type_, [*prefix])
        raise where.error(message or str(exc), format_path(path), key=unknown) from None


def _fits(value: Any, type_: Any) -> bool:
    try:
        msgspec.convert(value, type_, strict=False)
        return True
    except msgspec.ValidationError:
        return False


def _first_misfit(value: Any, type_: Any, path: list[PathSeg]) -> tuple[list[PathSeg], str | None, str | None]:
    """(key path, our sentence or None, the unknown key's full path) of the first part that does not fit."""
    struct, items, values = unwrap(type_, "struct"), unwrap(type_, "list"), unwrap(type_, "dict")
    if isinstance(value, dict) and (struct is not None or values is not None):
        return _first_misfit_in_mapping(value, struct, values, path)
    if items is not None and isinstance(value, list):
        bad = next((i for i, item in enumerate(value) if not _fits(item, items)), None)
        if bad is not None:
            return _first_misfit(value[bad], items, [*path, bad])
        whole = _misfit(value, type_)  # every item fits: its length does not
        return path, (None if whole.startswith("expected list, got") else whole), None
    return path, _misfit(value, type_), None


def _first_misfit_in_mapping(
    value: dict[Any, Any], struct: Any, values: Any, path: list[PathSeg]
) -> tuple[list[PathSeg], str | None, str | None]:
    """_first_misfit of a mapping, read as the `struct` it declares (else a dict of `values`): a
    key that is no string or not known, the first value that does not fit, a missing required key."""
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)} if struct is not None else {}
    for key, item in value.items():
        if not isinstance(key, str):
            return path, f"key {key!r} must be a string", None
        if struct is not None and key not in fields:
            if not struct.__struct_config__.forbid_unknown_fields:
                continue
            full = format_path([*path, key])
            return [], f"unknown key {full!r}; {_key_hint(key, fields)}", full
        item_type = fields[key].type if struct is not None else values
        if not _fits(item, item_type):
            return _first_misfit(item, item_type, [*path, key])
    missing = next((name for name, f in fields.items() if f.required and name not in value), None)
    return path, (f"missing required key {missing!r}" if missing else None), None


def _key_hint(key: str, fields: dict[str, Any]) -> str:
    """For an unknown key: the known one it is closest to, else every known key."""
    close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"valid keys here: {', '.join(fields) or 'none'}"


_NAMES: dict[type, str] = {
    mi.IntType: "int",
    mi.FloatType: "float",
    mi.StrType: "str",
    mi.BoolType: "bool",
    mi.NoneType: "null",
    mi.StructType: "mapping",
    mi.DictType: "mapping",
    mi.ListType: "list",
    mi.VarTupleType: "list",
    mi.SetType: "list",
}
_ORDER = ("bool", "int", "float", "str", "mapping", "list", "null")  # one order for "expected a or b", as msgspec lists them
_BOUNDS = (("ge", ">=", operator.ge), ("gt", ">", operator.gt), ("le", "<=", operator.le), ("lt", "<", operator.lt))


def _misfit(value: Any, type_: Any) -> str:
    """Why one value does not fit its declared type: out of range, not a choice, or the wrong type.
    Each option of a union is asked in turn; the first that can say why wins."""
    info = mi.type_info(type_)
    options = info.types if isinstance(info, mi.UnionType) else (info,)
    for option in options:
        check = _OPTION_CHECKS.get(type(option))
        why = check(option, value, type_) if check is not None else None
        if why is not None:
            return why
    return _wrong_type(value, options)


def _number_misfit(option: Any, value: Any, type_: Any) -> str | None:
    """A number out of the declared bounds (ge, gt, le, lt)."""
    number_type = int if isinstance(option, mi.IntType) else float
    if not _fits(value, number_type):
        return None
    number = msgspec.convert(value, number_type, strict=False)
    for attr, op, holds in _BOUNDS:
        bound = getattr(option, attr)
        if bound is not None and not holds(number, bound):
            what = "an integer" if number_type is int else "a number"
            return f"must be {what} {op} {number_type(bound)}, got {value!r}"
    return None


def _str_misfit(option: Any, value: Any, type_: Any) -> str | None:
    """A string shorter or longer than declared."""
    if not isinstance(value, str):
        return None
    if option.min_length is not None and len(value) < option.min_length:
        return "must not be empty" if option.min_length == 1 else f"must be at least {option.min_length} characters, got {value!r}"
    if option.max_length is not None and len(value) > option.max_length:
        return f"must be at most {option.max_length} characters, got {_got(value)}"
    return None


def _list_misfit(option: Any, value: Any, type_: Any) -> str | None:
    """A list with fewer or more items than declared."""
    if not isinstance(value, list):
        return None
    if option.min_length is not None and len(value) < option.min_length:
        return f"expected a list of at least {option.min_length} items, got {len(value)}"
    if option.max_length is not None and len(value) > option.max_length:
        return f"expected a list of at most {option.max_length} items, got {len(value)}"
    return None


def _tuple_misfit(option: Any, value: Any, type_: Any) -> str | None:
    """A list for a fixed-length tuple, of another length."""
    if isinstance(value, list) and len(value) != len(option.item_types):
        return f"expected a list of {len(option.item_types)} items, got {len(value)}"
    return None


def _literal_misfit(option: Any, value: Any, type_: Any) -> str | None:
    """A value of a choice's type that is not one of the choices (listed as declared, not sorted)."""
    if type(value) is not type(option.values[0]):
        return None
    choices = typing.get_args(unwrap(type_, "literal")) or option.values
    return f"invalid value {value!r}; expected one of: {', '.join(map(str, choices))}"


_OPTION_CHECKS: dict[type, Callable[[Any, Any, Any], str | None]] = {
    mi.IntType: _number_misfit,
    mi.FloatType: _number_misfit,
    mi.StrType: _str_misfit,
    mi.ListType: _list_misfit,
    mi.VarTupleType: _list_misfit,
    mi.TupleType: _tuple_misfit,
    mi.LiteralType: _literal_misfit,
}


def _wrong_type(value: Any, options: Sequence[Any]) -> str:
    """None of the options' types: name them all, in one order (as msgspec lists them)."""
    names = {_NAMES.get(type(o), type(o.values[0]).__name__ if isinstance(o, mi.LiteralType) else "valid") for o in options}
    ordered = sorted(names, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER))
    hint = "; quote the value in YAML" if ordered == ["str"] and isinstance(value, (int, float, bool)) else ""
    return f"expected {' or '.join(ordered)}, got {_got(value)}{hint}"


def _got(value: Any) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return f"{type(value).__name__} ({shown})"
    return kind(value) if not isinstance(value, bool) else f"bool ({value})"
