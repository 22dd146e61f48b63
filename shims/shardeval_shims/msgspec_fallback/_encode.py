"""Python objects → JSON bytes, byte for byte as msgspec writes them.

Compact separators, non-ASCII as raw UTF-8, `\\n`-style escapes for the five short control
characters and `\\u00XX` for the rest, msgspec's float text, Struct fields in definition order
(with `omit_defaults` and renamed keys), and the same handling of dates, bytes, enums and
dataclasses.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import operator
import uuid
from json.encoder import encode_basestring
from typing import Any, Callable, NamedTuple

from ._floats import float_text
from ._sentinels import UNSET
from ._struct import StructMeta, is_default

Hook = Callable[[Any], Any] | None
_ORDERS = (None, "deterministic", "sorted")


def check_order(order: Any) -> Any:
    if order not in _ORDERS:
        raise ValueError(f"`order` must be one of `{{None, 'deterministic', 'sorted'}}`, got {order!r}")
    return order


def unsupported(value: Any) -> TypeError:
    return TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def datetime_text(value: Any) -> str:
    """ISO 8601 as msgspec writes it: UTC as `Z`, other offsets as `+HH:MM` (seconds dropped)."""
    offset = value.utcoffset()
    text = value.replace(tzinfo=None).isoformat()
    if offset is None:
        return text
    seconds = int(offset.total_seconds())
    if seconds == 0:
        return text + "Z"
    sign = "-" if seconds < 0 else "+"
    minutes = abs(seconds) // 60
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def duration_text(value: datetime.timedelta) -> str:
    """ISO 8601 duration (`P1DT5S`, `-PT0.5S`), as msgspec writes timedeltas."""
    total_us = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if total_us < 0 else ""
    total_us = abs(total_us)
    if total_us == 0:
        return "P0D"
    days, rest = divmod(total_us, 86400 * 1_000_000)
    seconds, micros = divmod(rest, 1_000_000)
    out = f"{sign}P"
    if days:
        out += f"{days}D"
    if seconds or micros or not days:
        out += "T" + (f"{seconds}.{micros:06d}".rstrip("0") if micros else str(seconds)) + "S"
    return out


def builtin_scalar(value: Any) -> Any:
    """Non-JSON scalars msgspec writes as strings (or as their value, for enums); _NO if not one."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime) or isinstance(value, datetime.time):
        return datetime_text(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return duration_text(value)
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    return _NO


_NO: Any = object()


def dataclass_items(value: Any) -> list[tuple[str, Any]]:
    return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value) if f.init]


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _null_text(value: None) -> str:
    return "null"


# The JSON text of scalars, by exact type (subclasses go through enc_hook, as in msgspec).
SCALAR_TEXT: dict[type, Callable[[Any], str]] = {
    str: encode_basestring, int: int.__repr__, float: float_text, bool: _bool_text, type(None): _null_text,
}


class StructPlan(NamedTuple):
    """How to write one Struct type: its field values in one call, their `"key":` texts, defaults."""

    values: Callable[[Any], tuple[Any, ...]]
    keys: tuple[str, ...]
    defaults: tuple[Any, ...]  # _NO where a field is never omitted


def struct_plan(cls: Any, order: Any) -> StructPlan:
    """The cached StructPlan of a Struct type for one `order`."""
    info = cls.__struct_info__
    key = ("encode", order)
    plan = info.cache.get(key)
    if plan is None:
        omit = info.config.omit_defaults
        rows = [(name, encode_basestring(enc) + ":", default if omit else _NO)
                for name, enc, default in zip(info.names, info.encode_names, info.defaults)]
        if order == "sorted":
            rows.sort(key=lambda row: row[1])
        names = [row[0] for row in rows]
        if len(names) == 1:
            single = operator.attrgetter(names[0])
            getter: Callable[[Any], tuple[Any, ...]] = lambda obj: (single(obj),)
        else:
            getter = operator.attrgetter(*names) if names else (lambda obj: ())
        plan = info.cache[key] = StructPlan(getter, tuple(r[1] for r in rows), tuple(r[2] for r in rows))
    return plan


class Writer:
    """One encode call's settings; `write` appends JSON text pieces to `out`."""

    __slots__ = ("enc_hook", "order", "out")

    def __init__(self, enc_hook: Hook = None, order: Any = None) -> None:
        self.enc_hook = enc_hook
        self.order = check_order(order)
        self.out: list[str] = []

    def encode(self, value: Any) -> bytes:
        self.out = []
        self.write(value)
        return "".join(self.out).encode("utf-8")

    def write(self, value: Any) -> None:
        out = self.out
        cls = value.__class__
        if cls is str:
            out.append(encode_basestring(value))
        elif cls is int:
            out.append(int.__repr__(value))
        elif cls is float:
            out.append(float_text(value))
        elif cls is bool:
            out.append("true" if value else "false")
        elif value is None:
            out.append("null")
        elif cls is dict:
            self.write_dict(value)
        elif cls is list or cls is tuple:
            self.write_array(value)
        elif cls.__class__ is StructMeta:
            self.write_struct(value)
        else:
            self.write_other(value)

    def write_array(self, values: Any) -> None:
        out = self.out
        sep = "["
        text = SCALAR_TEXT.get
        for value in values:
            scalar = text(value.__class__)
            if scalar is not None:
                out.append(sep + scalar(value))
            else:
                out.append(sep)
                self.write(value)
            sep = ","
        out.append("[]" if sep == "[" else "]")

    def write_dict(self, mapping: Any) -> None:
        out = self.out
        if not mapping:
            out.append("{}")
            return
        items: Any = mapping.items()
        if self.order is not None:
            if any(k.__class__ is not str for k in mapping):
                raise TypeError("Only dicts with str keys are supported when `order` is not `None`")
            items = sorted(items, key=lambda kv: kv[0])
        sep = "{"
        text = SCALAR_TEXT.get
        for key, value in items:
            key = encode_basestring(key) if key.__class__ is str else self.key_text(key)
            scalar = text(value.__class__)
            if scalar is not None:
                out.append(sep + key + ":" + scalar(value))
            else:
                out.append(sep + key + ":")
                self.write(value)
            sep = ","
        out.append("}")

    def key_text(self, key: Any) -> str:
        cls = key.__class__
        if cls is str:
            return encode_basestring(key)
        if cls is int:
            return f'"{int.__repr__(key)}"'
        if cls is float:
            return f'"{float_text(key)}"'
        if isinstance(key, enum.Enum) and type(key.value) in (str, int):
            return self.key_text(key.value)
        if self.enc_hook is not None:
            new = self.enc_hook(key)
            if new.__class__ in (str, int, float) or isinstance(new, enum.Enum):
                return self.key_text(new)
        raise TypeError("Only dicts with str-like or number-like keys are supported")

    def write_fields(self, items: list[tuple[str, Any]]) -> None:
        """An object whose keys are attribute names, in the order given (dataclasses)."""
        out = self.out
        out.append("{")
        for i, (name, value) in enumerate(items):
            out.append(("," if i else "") + encode_basestring(name) + ":")
            self.write(value)
        out.append("}")

    def write_struct(self, obj: Any) -> None:
        plan = struct_plan(obj.__class__, self.order)
        out = self.out
        sep = "{"
        text = SCALAR_TEXT.get
        for key, value, default in zip(plan.keys, plan.values(obj), plan.defaults):
            if value is UNSET or (default is not _NO and is_default(value, default)):
                continue
            scalar = text(value.__class__)
            if scalar is not None:
                out.append(sep + key + scalar(value))
            else:
                out.append(sep + key)
                self.write(value)
            sep = ","
        out.append("{}" if sep == "{" else "}")

    def write_other(self, value: Any) -> None:
        if isinstance(value.__class__, StructMeta):
            self.write_struct(value)
        elif isinstance(value, dict):
            self.write_dict(value)
        elif isinstance(value, (list, tuple)):
            self.write_array(value)
        elif isinstance(value, (set, frozenset)):
            self.write_array(sorted(value) if self.order is not None else value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = dataclass_items(value)
            if self.order == "sorted":
                items.sort(key=lambda kv: kv[0])
            self.write_fields(items)
        else:
            scalar = builtin_scalar(value)
            if scalar is not _NO:
                self.write(scalar)
            elif self.enc_hook is not None:
                self.write(self.enc_hook(value))
            else:
                raise unsupported(value)
