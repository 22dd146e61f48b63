"""Types → converters: one node per (type, mode) that validates a value and builds the result.

`decode` parses with the stdlib `json` module and walks the result with these nodes; `convert`
walks Python objects with them. A node is one annotation with its unions flattened (which
scalars it takes, at most one object-like and one array-like part from `_containers`), compiled
once into closures keyed by the value's exact type, so the per-value work is a dict lookup and
a call. Errors carry msgspec's wording.
"""

from __future__ import annotations

import base64
import binascii
import collections.abc as cabc
import enum
import types
import typing
from typing import Any, Callable, NamedTuple

from ._constraints import length_check, number_check
from ._containers import MISSING, ArrayPart, DictPart, StructPart, identity
from ._describe import got_name, union_desc
from ._errors import Invalid
from ._lax import INT_MIN, MAX_EXACT_INT, NOT_LAX, UINT_MAX, from_text, is_null, to_float
from ._meta import Meta
from ._struct import StructInfo, StructMeta

Conv = Callable[[Any], Any]
NoneType = type(None)

_ARRAY_ORIGINS = {
    list: "list", cabc.Sequence: "list", cabc.MutableSequence: "list", cabc.Collection: "list",
    set: "set", cabc.MutableSet: "set", frozenset: "frozenset", cabc.Set: "frozenset",
}
_DICT_ORIGINS = (dict, cabc.Mapping, cabc.MutableMapping)


class Mode(NamedTuple):
    """`json`: values come from JSON text (decode) rather than Python objects (convert)."""

    json: bool
    strict: bool


def _flatten(tp: Any, metas: tuple[Meta, ...], out: list[tuple[Any, tuple[Meta, ...]]]) -> None:
    """Annotated, Union, Optional, Literal, NewType and TypeVar down to plain members."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        extra = tuple(m for m in tp.__metadata__ if isinstance(m, Meta))
        _flatten(tp.__origin__, metas + extra, out)
    elif origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(tp):
            _flatten(arg, metas, out)
    elif origin is typing.Literal:
        for value in typing.get_args(tp):
            out.append((_Literal(value), metas))
    elif hasattr(tp, "__supertype__"):  # NewType
        _flatten(tp.__supertype__, metas, out)
    elif isinstance(tp, typing.TypeVar):
        if tp.__bound__ is not None:
            _flatten(tp.__bound__, metas, out)
        elif tp.__constraints__:
            for arg in tp.__constraints__:
                _flatten(arg, metas, out)
        else:
            out.append((Any, metas))
    else:
        out.append((tp, metas))


class _Literal:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class TypeNode:
    """A compiled type: which kinds of value it takes, and `conv` to validate and build one."""

    def __init__(self, tp: Any, mode: Mode) -> None:
        self.tp = tp
        self.mode = mode
        self.is_any = False
        self.none = self.boolean = self.has_int = self.has_float = self.has_str = False
        self.int_check = self.float_check = self.str_check = None
        self.int_lits: dict[Any, Any] | None = None
        self.str_lits: dict[Any, Any] | None = None
        self.bytes_type: type | None = None
        self.enums: list[type] = []  # convert passes their members through as they are
        self.obj: StructPart | DictPart | None = None
        self.arr: ArrayPart | None = None
        members: list[tuple[Any, tuple[Meta, ...]]] = []
        _flatten(tp, (), members)
        for member, metas in members:
            self._add(member, metas)
        if self.has_int:
            self.int_lits = None
        if self.has_str:
            self.str_lits = None
        kinds = set()
        for flag, kind in (
            (self.boolean, "bool"), (self.has_int or self.int_lits is not None, "int"), (self.has_float, "float"),
            (self.has_str or self.str_lits is not None, "str"), (self.bytes_type is not None, "bytes"),
            (self.obj is not None, "object"), (self.arr is not None, "array"), (self.none, "null"),
        ):
            if flag:
                kinds.add(kind)
        self.desc = union_desc(kinds)
        lax = not mode.strict
        self.takes_str = self.is_any or self.has_str or self.str_lits is not None or self.bytes_type is not None or (
            lax and (self.has_int or self.int_lits is not None or self.has_float or self.boolean or self.none)
        )
        self.accepts: set[type] = set()
        self.conv: Conv = identity if self.is_any else self._make_conv()

    # building

    def _add(self, tp: Any, metas: tuple[Meta, ...]) -> None:
        if isinstance(tp, _Literal):
            self._add_literal(tp.value)
        elif tp is Any or tp is object:
            self.is_any = True
        elif tp is None or tp is NoneType:
            self.none = True
        elif tp is bool:
            self.boolean = True
        elif tp is int:
            self.has_int, self.int_check = True, number_check("int", metas)
        elif tp is float:
            self.has_float, self.float_check = True, number_check("float", metas)
        elif tp is str:
            self.has_str, self.str_check = True, length_check("str", metas, pattern=True)
        elif tp is bytes or tp is bytearray:
            self.bytes_type = tp
        elif isinstance(tp, StructMeta):
            self._set_obj(struct_part(tp.__struct_info__, self.mode))
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            for member in tp:
                self._add_literal(member.value, member)
            self.enums.append(tp)
        else:
            self._add_generic(tp, metas)

    def _add_generic(self, tp: Any, metas: tuple[Meta, ...]) -> None:
        origin = typing.get_origin(tp) or tp
        args = typing.get_args(tp)
        if origin in _ARRAY_ORIGINS:
            self._set_arr(ArrayPart(_ARRAY_ORIGINS[origin], (args[0] if args else Any,), metas, self.mode))
        elif origin is tuple:
            if tp is tuple or tp is typing.Tuple or (len(args) == 2 and args[1] is Ellipsis):
                self._set_arr(ArrayPart("tuple", (args[0] if args else Any,), metas, self.mode))
            else:
                items = () if args in ((), ((),)) else args
                self._set_arr(ArrayPart("fixed", items, metas, self.mode))
        elif origin in _DICT_ORIGINS:
            key, value = args if args else (Any, Any)
            self._set_obj(DictPart(key, value, metas, self.mode))
        else:
            raise TypeError(f"Type '{tp!r}' is not supported by the stdlib msgspec fallback")

    def _add_literal(self, value: Any, result: Any = MISSING) -> None:
        result = value if result is MISSING else result
        if value is None:
            self.none = True
        elif type(value) is str:
            self.str_lits = {**(self.str_lits or {}), value: result}
        elif type(value) is int:
            self.int_lits = {**(self.int_lits or {}), value: result}
        else:
            raise TypeError(f"Literal value {value!r} is not supported by the stdlib msgspec fallback")

    def _set_obj(self, part: StructPart | DictPart) -> None:
        if self.obj is not None:
            raise TypeError(f"Type unions may not contain more than one dict-like type - type `{self.tp!r}` is not supported")
        self.obj = part

    def _set_arr(self, part: ArrayPart) -> None:
        if self.arr is not None:
            raise TypeError(f"Type unions may not contain more than one array-like type - type `{self.tp!r}` is not supported")
        self.arr = part

    # converting

    def type_error(self, value: Any) -> Invalid:
        if self.mode.json and value.__class__ is int and not INT_MIN <= value <= UINT_MAX:
            return Invalid(f"Expected `{self.desc}`, got `float`")  # msgspec reads such JSON numbers as floats
        return Invalid(f"Expected `{self.desc}`, got `{got_name(value)}`")

    def int_literal(self, value: int) -> Any:
        try:
            return self.int_lits[value]  # type: ignore[index]
        except KeyError:
            if self.mode.json and not INT_MIN <= value <= UINT_MAX:
                raise self.type_error(value) from None
            raise Invalid(f"Invalid enum value {value!r}") from None

    def _handlers(self) -> dict[type, Conv]:
        lax, handlers = not self.mode.strict, {}
        if self.none:
            handlers[NoneType] = identity
        if self.boolean:
            handlers[bool] = identity
        int_h = self._int_handler(lax)
        if int_h is not None:
            handlers[int] = int_h
        float_h = self._float_handler(lax)
        if float_h is not None:
            handlers[float] = float_h
        str_h = self._str_handler(lax)
        if str_h is not None:
            handlers[str] = str_h
        if self.obj is not None:
            handlers[dict] = self.obj.conv
            if not self.mode.json and isinstance(self.obj, StructPart):
                handlers[self.obj.cls] = identity
        if self.arr is not None:
            handlers[list] = self.arr.conv
            if not self.mode.json:
                handlers[tuple] = self.arr.conv
                if self.arr.kind != "fixed":  # a set has no order to fill a fixed-length tuple from
                    handlers[set] = handlers[frozenset] = self.arr.conv
        if not self.mode.json:
            for kind in self.enums:
                handlers[kind] = identity
        if self.bytes_type is not None and not self.mode.json:
            target = self.bytes_type
            for kind in (bytes, bytearray, memoryview):
                handlers[kind] = (lambda v: v) if kind is target else target
        return handlers

    def _int_handler(self, lax: bool) -> Conv | None:
        if self.has_int:
            return self.int_check or identity
        if self.int_lits is not None:
            return self.int_literal
        if self.has_float:
            check = self.float_check
            return (lambda v: check(to_float(v))) if check is not None else to_float
        if lax and self.boolean:
            def int_as_bool(value: int) -> Any:
                if value in (0, 1):
                    return value == 1
                raise self.type_error(value)
            return int_as_bool
        return None

    def _float_handler(self, lax: bool) -> Conv | None:
        if self.has_float:
            return self.float_check or identity
        if lax and self.has_int:
            check = self.int_check

            def float_as_int(value: float) -> Any:
                if value.is_integer() and abs(value) <= MAX_EXACT_INT:
                    return check(int(value)) if check is not None else int(value)
                raise self.type_error(value)

            return float_as_int
        return None

    def _str_handler(self, lax: bool) -> Conv | None:
        if self.has_str:
            return self.str_check or identity
        if self.str_lits is not None:
            lits = self.str_lits

            def literal(value: str) -> Any:
                try:
                    return lits[value]
                except KeyError:
                    pass
                if lax:
                    result = from_text(self, value)
                    if result is not NOT_LAX:
                        return result
                raise Invalid(f"Invalid enum value {str.__repr__(value)}")

            return literal
        if self.bytes_type is not None:
            target = self.bytes_type

            def from_base64(value: str) -> Any:
                if lax and self.none and is_null(value):
                    return None
                try:
                    return target(base64.b64decode(value, validate=True))
                except (binascii.Error, ValueError):
                    raise Invalid("Invalid base64 encoded string") from None

            return from_base64
        if lax and (self.has_int or self.int_lits is not None or self.has_float or self.boolean or self.none):
            def lax_text(value: str) -> Any:
                result = from_text(self, value)
                if result is NOT_LAX:
                    raise self.type_error(value)
                return result
            return lax_text
        return None

    def _make_conv(self) -> Conv:
        handlers = self._handlers()
        self.accepts = set(handlers)
        json_mode, obj, arr = self.mode.json, self.obj, self.arr

        def other(value: Any) -> Any:
            """convert: int and str subclasses (enum members) and dict/list subclasses as their builtin."""
            if not json_mode:
                if isinstance(value, int) and not isinstance(value, bool) and int in handlers:
                    return handlers[int](int(value))
                if isinstance(value, str) and str in handlers:
                    return handlers[str](value)
                if obj is not None and isinstance(value, dict):
                    return obj.conv(value)
                if arr is not None and isinstance(value, (list, tuple)):
                    return arr.conv(value)
            raise self.type_error(value)

        if all(h is identity for h in handlers.values()):
            accepted = frozenset(handlers)

            def conv_same(value: Any) -> Any:
                if value.__class__ in accepted:
                    return value
                return other(value)

            return conv_same
        if len(handlers) == 1:
            ((only, handler),) = handlers.items()

            def conv_one(value: Any) -> Any:
                if value.__class__ is only:
                    return handler(value)
                return other(value)

            return conv_one
        get = handlers.get

        def conv(value: Any) -> Any:
            handler = get(value.__class__)
            if handler is None:
                return other(value)
            return handler(value)

        return conv


# --- caches ------------------------------------------------------------------------------------

_NODES: dict[tuple[Any, Mode], TypeNode] = {}


def node_for(tp: Any, mode: Mode) -> TypeNode:
    """The compiled node of `tp` for `mode`, built once (unhashable annotations are rebuilt)."""
    key = (tp, mode)
    try:
        return _NODES[key]
    except KeyError:
        node = _NODES[key] = TypeNode(tp, mode)
        return node
    except TypeError:
        return TypeNode(tp, mode)


def struct_part(info: StructInfo, mode: Mode) -> StructPart:
    """A Struct's part for `mode`; registered before its fields compile, so recursion terminates."""
    part = info.cache.get(mode)
    if part is None:
        part = info.cache[mode] = StructPart(info, mode)
        try:
            part.prepare()
        except BaseException:
            del info.cache[mode]
            raise
    return part
