"""`to_builtins`: Structs, dataclasses, enums, dates and bytes → dicts, lists and JSON scalars."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

from ._encode import _NO, builtin_scalar, check_order, dataclass_items, unsupported
from ._floats import float_text
from ._sentinels import UNSET
from ._struct import StructMeta, is_default


class Builtins:
    """One to_builtins call's settings; `convert` returns the plain-data copy of a value."""

    def __init__(
        self,
        builtin_types: Iterable[type] | None = None,
        str_keys: bool = False,
        enc_hook: Callable[[Any], Any] | None = None,
        order: Any = None,
    ) -> None:
        self.passthrough = tuple(builtin_types or ())
        self.str_keys = str_keys
        self.enc_hook = enc_hook
        self.order = check_order(order)

    def convert(self, value: Any) -> Any:
        cls = value.__class__
        if cls is str or cls is int or cls is float or cls is bool or value is None:
            return value
        if cls is list:
            return [self.convert(v) for v in value]
        if cls is dict:
            return self.mapping(value)
        if cls.__class__ is StructMeta:
            return self.struct(value)
        if cls is tuple:
            return tuple(self.convert(v) for v in value)
        if self.passthrough and isinstance(value, self.passthrough):
            return value
        if isinstance(cls, StructMeta):
            return self.struct(value)
        if isinstance(value, dict):
            return self.mapping(value)
        if isinstance(value, list):
            return [self.convert(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.convert(v) for v in value)
        if isinstance(value, (set, frozenset)):
            items = [self.convert(v) for v in value]
            return sorted(items) if self.order is not None else items
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = dataclass_items(value)
            if self.order == "sorted":
                items.sort(key=lambda kv: kv[0])
            return {name: self.convert(v) for name, v in items}
        scalar = builtin_scalar(value)
        if scalar is not _NO:
            return scalar
        if self.enc_hook is not None:
            return self.convert(self.enc_hook(value))
        raise unsupported(value)

    def key(self, key: Any) -> Any:
        key = self.convert(key)
        if self.str_keys:
            if key.__class__ is int:
                return int.__repr__(key)
            if key.__class__ is float:
                return float_text(key)
            if key.__class__ is not str:
                raise TypeError("Only dicts with str-like or number-like keys are supported")
        return key

    def mapping(self, value: Any) -> dict[Any, Any]:
        items = [(self.key(k), self.convert(v)) for k, v in value.items()]
        if self.order is not None:
            items.sort(key=lambda kv: kv[0])
        return dict(items)

    def struct(self, obj: Any) -> dict[str, Any]:
        info = obj.__struct_info__
        omit = info.config.omit_defaults
        out = {}
        for name, encode_name, default in zip(info.names, info.encode_names, info.defaults):
            value = getattr(obj, name)
            if value is UNSET or (omit and is_default(value, default)):
                continue
            out[encode_name] = self.convert(value)
        if self.order == "sorted":
            out = dict(sorted(out.items()))
        return out


def to_builtins(
    obj: Any,
    *,
    builtin_types: Iterable[type] | None = None,
    str_keys: bool = False,
    enc_hook: Callable[[Any], Any] | None = None,
    order: Any = None,
) -> Any:
    """Convert a value to the plain Python types JSON can hold (tuples stay tuples, as in msgspec)."""
    return Builtins(builtin_types, str_keys, enc_hook, order).convert(obj)
