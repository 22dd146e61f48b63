"""`msgspec.structs`: replace, fields, asdict, astuple, force_setattr and StructConfig."""

from __future__ import annotations

from typing import Any

from ._fields import field
from ._sentinels import NODEFAULT, Factory
from ._struct import Struct, StructConfig, StructMeta

__all__ = ["FieldInfo", "StructConfig", "asdict", "astuple", "fields", "force_setattr", "replace"]


class FieldInfo(Struct):
    """A field of a Struct type: its names, its resolved type, and its default or default factory."""

    name: str
    encode_name: str
    type: Any
    default: Any = field(default_factory=lambda: NODEFAULT)
    default_factory: Any = field(default_factory=lambda: NODEFAULT)

    @property
    def required(self) -> bool:
        return self.default is NODEFAULT and self.default_factory is NODEFAULT


def _struct_type(obj: Any) -> Any:
    if isinstance(obj, StructMeta):
        return obj
    if isinstance(type(obj), StructMeta):
        return type(obj)
    raise TypeError("Must be called with a struct type or instance")


def fields(type_or_instance: Any) -> tuple[FieldInfo, ...]:
    """The fields of a Struct type or instance, in encoding order, with types resolved."""
    info = _struct_type(type_or_instance).__struct_info__
    hints = info.type_hints()
    out = []
    for spec in info.fields:
        default = spec.default
        factory = NODEFAULT
        if default.__class__ is Factory:
            default, factory = NODEFAULT, default.factory
        out.append(FieldInfo(name=spec.name, encode_name=spec.encode_name, type=hints[spec.name], default=default,
                             default_factory=factory))
    return tuple(out)


def replace(struct: Any, /, **changes: Any) -> Any:
    """A copy of `struct` with some fields replaced (no __init__ or __post_init__, as in msgspec)."""
    cls = _struct_type(struct)
    info = cls.__struct_info__
    for name in changes:
        if name not in info.index:
            raise TypeError(f"`{cls.__name__}` has no field '{name}'")
    obj = cls.__new__(cls)
    for name, setter in zip(info.names, info.setters):
        setter(obj, changes[name] if name in changes else getattr(struct, name))
    return obj


def asdict(struct: Any) -> dict[str, Any]:
    info = _struct_type(struct).__struct_info__
    return {name: getattr(struct, name) for name in info.names}


def astuple(struct: Any) -> tuple[Any, ...]:
    info = _struct_type(struct).__struct_info__
    return tuple(getattr(struct, name) for name in info.names)


def force_setattr(struct: Any, name: str, value: Any) -> None:
    """Set a field even on a frozen Struct."""
    info = _struct_type(struct).__struct_info__
    info.setters[info.index[name]](struct, value)
