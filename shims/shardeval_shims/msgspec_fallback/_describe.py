"""The words msgspec's errors use for types: `int | null` expected, `array` or `date` got."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

# The order msgspec lists the members of a union in, whatever order the annotation used.
KIND_ORDER = ("bool", "int", "float", "str", "bytes", "object", "array", "null")

_GOT = {
    type(None): "null",
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    list: "array",
    tuple: "array",
    set: "set",
    frozenset: "set",
    dict: "object",
    bytes: "bytes",
    bytearray: "bytes",
    memoryview: "bytes",
    datetime.datetime: "datetime",
    datetime.date: "date",
    datetime.time: "time",
    datetime.timedelta: "duration",
    decimal.Decimal: "decimal",
    uuid.UUID: "uuid",
}


# msgspec names subclasses of these builtins by the builtin (a float subclass keeps its own name).
_BASES = ((int, "int"), (str, "str"), (list, "array"), (tuple, "array"), (dict, "object"))


def got_name(value: Any) -> str:
    """What a value is called in `Expected X, got Y`."""
    name = _GOT.get(type(value))
    if name is not None:
        return name
    return next((kind for base, kind in _BASES if isinstance(value, base)), type(value).__name__)


def union_desc(kinds: set[str]) -> str:
    return " | ".join(k for k in KIND_ORDER if k in kinds)
