"""The containers a type node can hold: a Struct, a dict, or an array (list, set, tuple).

Each part converts an already type-checked container value item by item, adding its path step
(`.field`, `[...]`, `[0]`) to an error as it passes, and exposes `finish` so the byte-level
reader in `_scan` can build the same result from items it parsed itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ._constraints import length_check
from ._describe import got_name
from ._errors import Invalid
from ._lax import INT_MIN, UINT_MAX, parse_number
from ._meta import Meta
from ._sentinels import NODEFAULT, Factory
from ._struct import StructInfo

if TYPE_CHECKING:
    from ._nodes import Mode, TypeNode

Conv = Callable[[Any], Any]
MISSING: Any = object()  # a field no key supplied


def node_for(tp: Any, mode: Mode) -> TypeNode:
    """The compiled node of an item or field type (a node may contain parts, so resolved late)."""
    from ._nodes import node_for as compiled

    return compiled(tp, mode)


def identity(value: Any) -> Any:
    return value


def key_error(key: Any, desc: str = "str") -> Invalid:
    error = Invalid(f"Expected `{desc}`, got `{got_name(key)}`")
    error.in_key = True
    return error


class StructPart:
    """A Struct as the object-like member of a node: converters per field, by encoded name."""

    def __init__(self, info: StructInfo, mode: Mode) -> None:
        self.info = info
        self.cls = info.cls
        self.mode = mode
        self.forbid = bool(info.config.forbid_unknown_fields)
        self.lookup = {name: i for i, name in enumerate(info.encode_names)}
        self.segs = tuple("." + name for name in info.encode_names)
        self.nodes: list[TypeNode] = []
        self.convs: list[Conv] = []  # filled by prepare(), after registration (recursive types)
        self.finish = self._make_finish()
        self.conv = self._make_conv()

    def prepare(self) -> None:
        hints = self.info.type_hints()
        for name in self.info.names:
            node = node_for(hints[name], self.mode)
            self.nodes.append(node)
            self.convs.append(node.conv)

    def unknown(self, key: Any) -> None:
        """A key that names no field: an error when forbidden (or not a string), else ignored."""
        if key.__class__ is not str:
            raise key_error(key)
        if self.forbid:
            raise Invalid(f"Object contains unknown field `{key}`")

    def _make_conv(self) -> Conv:
        lookup = self.lookup.get
        convs, segs, finish, unknown = self.convs, self.segs, self.finish, self.unknown
        n = len(self.segs)

        def conv(obj: dict[Any, Any]) -> Any:
            values = [MISSING] * n
            for key, value in obj.items():
                i = lookup(key)
                if i is None:
                    unknown(key)
                    continue
                try:
                    values[i] = convs[i](value)
                except Invalid as exc:
                    exc.path.append(segs[i])
                    raise
            return finish(values)

        return conv

    def _make_finish(self) -> Callable[[list[Any]], Any]:
        info = self.info
        cls, new = info.cls, object.__new__
        defaults, names, setters = info.defaults, info.encode_names, info.setters

        def finish(values: list[Any]) -> Any:
            obj = new(cls)
            for value, default, name, setter in zip(values, defaults, names, setters):
                if value is MISSING:
                    if default is NODEFAULT:
                        raise Invalid(f"Object missing required field `{name}`")
                    value = default.factory() if default.__class__ is Factory else default
                setter(obj, value)
            post_init = info.post_init
            if post_init is not None:
                try:
                    post_init(obj)
                except (ValueError, TypeError) as exc:
                    raise Invalid(str(exc)) from None
            return obj

        return finish


class DictPart:
    """A dict as the object-like member of a node: key and value converters, length limits."""

    def __init__(self, key_type: Any, value_type: Any, metas: tuple[Meta, ...], mode: Mode) -> None:
        self.mode = mode
        self.key_node = node_for(key_type, mode)
        self.value_node = node_for(value_type, mode)
        self.check = length_check("object", metas)
        self.key = self._make_key()
        self.conv = self._make_conv()

    def finish(self, out: dict[Any, Any]) -> dict[Any, Any]:
        return self.check(out) if self.check is not None else out

    def _make_key(self) -> Conv:
        node = self.key_node
        if node.is_any:
            return identity
        plain_str = node.accepts == {str} and node.str_check is None
        if self.mode.json and not (node.has_str or node.str_lits is not None):
            if not (node.has_int or node.int_lits is not None or node.has_float):
                raise TypeError(f"JSON object keys of type {node.desc!r} are not supported by the stdlib msgspec fallback")

            def number_key(key: str) -> Any:
                """JSON keys are strings: a numeric key type reads the number written in one."""
                number = parse_number(key)
                if number is None or (number.__class__ is float and not node.has_float):
                    raise key_error(key, node.desc)
                if number.__class__ is int and not node.has_int and not node.has_float and not INT_MIN <= number <= UINT_MAX:
                    raise key_error(key, node.desc)
                return node.conv(number)

            return self._flag_key(number_key)
        if plain_str:
            if self.mode.json:
                return identity

            def str_key(key: Any) -> Any:
                if key.__class__ is not str:
                    raise key_error(key)
                return key

            return str_key
        return self._flag_key(node.conv)

    @staticmethod
    def _flag_key(conv: Conv) -> Conv:
        def key(value: Any) -> Any:
            try:
                return conv(value)
            except Invalid as exc:
                exc.in_key = True
                raise

        return key

    def _make_conv(self) -> Conv:
        key, check = self.key, self.check
        value_node = self.value_node
        if key is identity and value_node.is_any and check is None:
            return identity  # a fresh dict straight from the JSON parser
        value_conv = value_node.conv

        early = check if not self.mode.json else None  # convert knows the size up front

        def conv(obj: dict[Any, Any]) -> dict[Any, Any]:
            if early is not None:
                early(obj)
            out = {}
            for k, v in obj.items():
                k = key(k)
                try:
                    out[k] = value_conv(v)
                except Invalid as exc:
                    exc.path.append("[...]")
                    raise
            return check(out) if check is not None else out

        return conv


class ArrayPart:
    """A list, set, frozenset or tuple as the array-like member of a node."""

    def __init__(self, kind: str, item_types: tuple[Any, ...], metas: tuple[Meta, ...], mode: Mode) -> None:
        self.kind = kind  # list | set | frozenset | tuple (variadic) | fixed
        self.mode = mode
        self.items = tuple(node_for(t, mode) for t in item_types)
        self.check = length_check("array", metas)
        self.build: Callable[[list[Any]], Any] = {
            "list": identity, "set": set, "frozenset": frozenset, "tuple": tuple, "fixed": tuple
        }[kind]
        self.conv = self._make_fixed() if kind == "fixed" else self._make_var()

    def finish(self, out: list[Any]) -> Any:
        """After all items: the container type and its length limits."""
        if self.kind == "fixed" and len(out) != len(self.items):
            raise Invalid(f"Expected `array` of length {len(self.items)}")
        result = self.build(out)
        return self.check(result) if self.check is not None else result

    def _make_var(self) -> Conv:
        item = self.items[0]
        item_conv, finish = item.conv, self.finish
        if item.is_any and self.kind == "list" and self.check is None:
            return list

        early = self.check if not self.mode.json else None  # convert knows the size up front

        def conv(values: Any) -> Any:
            if early is not None:
                early(values)
            out: list[Any] = []
            append = out.append
            try:
                for value in values:
                    append(item_conv(value))
            except Invalid as exc:
                exc.path.append(f"[{len(out)}]")
                raise
            return finish(out)

        return conv

    def _make_fixed(self) -> Conv:
        convs = tuple(node.conv for node in self.items)
        n, json_mode, check = len(convs), self.mode.json, self.check

        def conv(values: Any) -> Any:
            if not json_mode and len(values) != n:
                raise Invalid(f"Expected `array` of length {n}, got {len(values)}")
            out: list[Any] = []
            try:
                for value, item_conv in zip(values, convs):
                    out.append(item_conv(value))
            except Invalid as exc:
                exc.path.append(f"[{len(out)}]")
                raise
            if len(values) != n:
                raise Invalid(f"Expected `array` of length {n}")
            result = tuple(out)
            return check(result) if check is not None else result

        return conv


# --- one type, possibly a union ----------------------------------------------------------------
