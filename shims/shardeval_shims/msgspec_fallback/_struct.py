"""`Struct`: typed records with slots, defaults, inheritance and msgspec's field ordering.

Field order decides JSON output, so it follows msgspec exactly: inherited fields keep their
position when overridden, and keyword-only fields (the defining class's `kw_only`) move after
the positional ones. Type hints are only resolved when a converter first needs them, so forward
references and `from __future__ import annotations` work as in msgspec.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Callable, ClassVar

from ._fields import Field
from ._rename import renamer
from ._sentinels import NODEFAULT, Factory

_CLASSVAR = re.compile(r"^\s*(?:typing\.|t\.)?ClassVar\b")
_MUTABLE = (list, dict, set, bytearray)
# Options accepted for compatibility although they change nothing here.
_IGNORED = {"gc": True, "cache_hash": False, "weakref": False, "dict": False}
_UNSUPPORTED = {"array_like": False, "tag": None, "tag_field": None}


class StructConfig:
    """The configuration of a Struct type, as `Type.__struct_config__` shows it."""

    __slots__ = (
        "frozen", "eq", "order", "array_like", "gc", "repr_omit_defaults", "omit_defaults",
        "forbid_unknown_fields", "weakref", "dict", "cache_hash", "tag", "tag_field", "rename",
    )

    def __init__(self, **options: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, options.get(name))

    def copy(self) -> StructConfig:
        return StructConfig(**{name: getattr(self, name) for name in self.__slots__})

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__ if n != "rename")
        return f"msgspec.structs.StructConfig({shown})"


_DEFAULT_CONFIG = StructConfig(
    frozen=False, eq=True, order=False, array_like=False, gc=True, repr_omit_defaults=False, omit_defaults=False,
    forbid_unknown_fields=False, weakref=False, dict=False, cache_hash=False, tag=None, tag_field=None, rename=None,
)


class FieldSpec:
    """One field as the metaclass settled it: name, encoded name, default and keyword-only flag."""

    __slots__ = ("name", "encode_name", "default", "kw_only")

    def __init__(self, name: str, encode_name: str, default: Any, kw_only: bool) -> None:
        self.name, self.encode_name, self.default, self.kw_only = name, encode_name, default, kw_only


class StructInfo:
    """Everything the converters and encoders need about one Struct type, computed once."""

    def __init__(self, cls: type, fields: list[FieldSpec], config: StructConfig) -> None:
        self.cls = cls
        self.fields = fields
        self.config = config
        self.names = tuple(f.name for f in fields)
        self.encode_names = tuple(f.encode_name for f in fields)
        self.defaults = tuple(f.default for f in fields)
        self.n_positional = sum(1 for f in fields if not f.kw_only)
        self.index = {f.name: i for i, f in enumerate(fields)}
        self.setters: tuple[Callable[[Any, Any], None], ...] = ()
        self.post_init: Callable[[Any], None] | None = None
        self.hints: dict[str, Any] | None = None
        self.cache: dict[Any, Any] = {}  # converters and encoders per mode, built lazily

    def type_hints(self) -> dict[str, Any]:
        """The resolved annotation of every field (Annotated kept), on first use."""
        if self.hints is None:
            hints = typing.get_type_hints(self.cls, include_extras=True)
            self.hints = {name: hints[name] for name in self.names}
        return self.hints


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return bool(_CLASSVAR.match(annotation))
    return annotation is ClassVar or typing.get_origin(annotation) is ClassVar


def _field_default(name: str, value: Any) -> tuple[Any, str | None]:
    """The stored default (a Factory for fresh-per-instance ones) and any `field(name=...)`."""
    encode_name = None
    if isinstance(value, Field):
        encode_name = value.name
        value = Factory(value.default_factory) if value.default_factory is not NODEFAULT else value.default
    if type(value) in _MUTABLE:
        if value:
            raise TypeError(
                f"Using a non-empty mutable collection ({value!r}) as a default value is unsafe. "
                "Instead configure a `default_factory` for this field."
            )
        value = Factory(type(value))
    elif isinstance(type(value), StructMeta) and not type(value).__struct_config__.frozen:
        raise TypeError(
            f"Using a mutable struct object ({value!r}) as a default value is unsafe. Either configure a "
            f"`default_factory` for this field, or set `frozen=True` on `{type(value).__name__}`"
        )
    return value, encode_name


def _collect_config(bases: tuple[type, ...], options: dict[str, Any]) -> StructConfig:
    config = _DEFAULT_CONFIG.copy()
    for base in reversed(bases):
        if isinstance(base, StructMeta):
            config = base.__struct_config__.copy()
    for name, value in options.items():
        if name in _UNSUPPORTED:
            if value != _UNSUPPORTED[name]:
                raise TypeError(f"Struct option {name}={value!r} is not supported by the stdlib msgspec fallback")
        elif name not in _IGNORED and name not in ("frozen", "eq", "order", "repr_omit_defaults", "omit_defaults",
                                                   "forbid_unknown_fields", "rename"):
            raise TypeError(f"__init_subclass__() got an unexpected keyword argument '{name}'")
        setattr(config, name, value)
    return config


def _collect_fields(bases: tuple[type, ...], namespace: dict[str, Any], kw_only: bool, rename: Any) -> list[FieldSpec]:
    merged: dict[str, FieldSpec] = {}
    for base in reversed(bases):
        if isinstance(base, StructMeta):
            for spec in base.__struct_info__.fields:
                merged[spec.name] = spec  # an existing name keeps its position
    encode = renamer(rename)
    for name, annotation in namespace.get("__annotations__", {}).items():
        if _is_classvar(annotation):
            continue
        default, encode_name = _field_default(name, namespace.pop(name, NODEFAULT))
        merged[name] = FieldSpec(name, encode_name if encode_name is not None else encode(name), default, kw_only)
    positional = [f for f in merged.values() if not f.kw_only]
    seen_default = False
    for spec in positional:
        if spec.default is not NODEFAULT:
            seen_default = True
        elif seen_default:
            raise TypeError(
                f"Required field '{spec.name}' cannot follow optional fields. Either reorder the struct fields, "
                "or set `kw_only=True` in the struct definition."
            )
    return positional + [f for f in merged.values() if f.kw_only]


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get(name)
        if isinstance(descriptor, types.MemberDescriptorType):
            return descriptor.__set__
    raise TypeError(f"field {name!r} of {cls.__name__} has no slot")  # a non-Struct base without slots


class StructMeta(type):
    """The metaclass of Struct types: settles fields, slots and options at class creation."""

    __struct_info__: StructInfo
    __struct_config__: StructConfig

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **options: Any) -> StructMeta:
        kw_only = bool(options.pop("kw_only", False))
        config = _collect_config(bases, options)
        fields = _collect_fields(bases, namespace, kw_only, config.rename)
        inherited = {f.name for b in bases if isinstance(b, StructMeta) for f in b.__struct_info__.fields}
        namespace["__slots__"] = tuple(f.name for f in fields if f.name not in inherited)
        if config.frozen:
            namespace.setdefault("__setattr__", _frozen_setattr)
            namespace.setdefault("__delattr__", _frozen_delattr)
        if "__hash__" not in namespace and config.eq:
            namespace["__hash__"] = _struct_hash if config.frozen else None
        if config.order:
            for op in ("__lt__", "__le__", "__gt__", "__ge__"):
                namespace.setdefault(op, _ORDER[op])
        if not config.eq:
            namespace.setdefault("__eq__", object.__eq__)
        cls = super().__new__(mcls, name, bases, namespace)
        info = StructInfo(cls, fields, config)
        info.setters = tuple(_slot_setter(cls, f.name) for f in fields)
        info.post_init = getattr(cls, "__post_init__", None)
        cls.__struct_info__ = info
        cls.__struct_config__ = config
        cls.__struct_fields__ = info.names
        cls.__struct_encode_fields__ = info.encode_names
        first = next((i for i, d in enumerate(info.defaults) if d is not NODEFAULT), len(fields))
        cls.__struct_defaults__ = tuple(info.defaults[first:])
        cls.__match_args__ = info.names[: info.n_positional]
        return cls

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **options: Any) -> None:
        super().__init__(name, bases, namespace)


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise AttributeError(f"immutable type: '{type(self).__name__}'")


def _frozen_delattr(self: Any, name: str) -> None:
    raise AttributeError(f"immutable type: '{type(self).__name__}'")


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in type(self).__struct_info__.names)


def _struct_hash(self: Any) -> int:
    return hash(_values(self))


def _compare(op: str) -> Callable[[Any, Any], Any]:
    def compare(self: Any, other: Any) -> Any:
        if type(other) is not type(self):
            return NotImplemented
        return getattr(_values(self), op)(_values(other))
    compare.__name__ = op
    return compare


_ORDER = {op: _compare(op) for op in ("__lt__", "__le__", "__gt__", "__ge__")}


def _rebuild(cls: type, values: tuple[Any, ...]) -> Any:
    """Unpickle or copy: set the fields straight into the slots, as msgspec does."""
    obj = cls.__new__(cls)
    for setter, value in zip(cls.__struct_info__.setters, values):
        setter(obj, value)
    return obj


class Struct(metaclass=StructMeta):
    """A typed record: define fields with annotations; encode, decode and convert it with this module."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        info = type(self).__struct_info__
        n_args = len(args)
        if n_args > info.n_positional:
            raise TypeError("Extra positional arguments provided")
        used = 0
        for i, (name, default, setter) in enumerate(zip(info.names, info.defaults, info.setters)):
            if i < n_args:
                value = args[i]
                if kwargs and name in kwargs:
                    raise TypeError(f"Argument '{name}' given by name and position")
            elif kwargs and name in kwargs:
                value = kwargs[name]
                used += 1
            elif default is NODEFAULT:
                raise TypeError(f"Missing required argument '{name}'")
            elif default.__class__ is Factory:
                value = default.factory()
            else:
                value = default
            setter(self, value)
        if used != len(kwargs):
            unexpected = next(k for k in kwargs if k not in info.index)
            raise TypeError(f"Unexpected keyword argument '{unexpected}'")
        if info.post_init is not None:
            info.post_init(self)

    def __eq__(self, other: Any) -> Any:
        if type(other) is not type(self):
            return NotImplemented
        return self is other or _values(self) == _values(other)

    def __repr__(self) -> str:
        info = type(self).__struct_info__
        omit = info.config.repr_omit_defaults
        parts = []
        for name, default in zip(info.names, info.defaults):
            value = getattr(self, name)
            if omit and (value is default or _is_empty_factory_value(value, default)):
                continue
            parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __copy__(self) -> Any:
        return _rebuild(type(self), _values(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), _values(self)))

    def __rich_repr__(self) -> Any:
        for name in type(self).__struct_info__.names:
            yield name, getattr(self, name)


def _is_empty_factory_value(value: Any, default: Any) -> bool:
    """msgspec's "is this the default" for fresh-per-instance defaults: an empty list/dict/set/bytearray."""
    return default.__class__ is Factory and default.factory in _MUTABLE and type(value) is default.factory and not value


def is_default(value: Any, default: Any) -> bool:
    """Whether omit_defaults leaves a field out: the very default object, or an empty fresh collection."""
    return value is default or _is_empty_factory_value(value, default)
