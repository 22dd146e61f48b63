"""`msgspec.field()`: a field's default, default factory or encoded name, given in the class body."""

from __future__ import annotations

from typing import Any

from ._sentinels import NODEFAULT


class Field:
    """What `field()` returns; the Struct metaclass reads it and removes it from the class."""

    __slots__ = ("default", "default_factory", "name")

    def __init__(self, *, default: Any = NODEFAULT, default_factory: Any = NODEFAULT, name: str | None = None) -> None:
        if default is not NODEFAULT and default_factory is not NODEFAULT:
            raise TypeError("Cannot set both `default` and `default_factory`")
        if default_factory is not NODEFAULT and not callable(default_factory):
            raise TypeError("default_factory must be callable")
        if name is not None and not isinstance(name, str):
            raise TypeError("name must be a str or None")
        self.default = default
        self.default_factory = default_factory
        self.name = name


def field(*, default: Any = NODEFAULT, default_factory: Any = NODEFAULT, name: str | None = None) -> Any:
    """Configuration for a Struct field: a default, a default factory, or the name it encodes as."""
    return Field(default=default, default_factory=default_factory, name=name)
