"""The singletons msgspec exposes: NODEFAULT (no default given) and UNSET (field left unset)."""

from __future__ import annotations

from typing import Any


class _NoDefault:
    __slots__ = ()
    _instance: _NoDefault | None = None

    def __new__(cls) -> _NoDefault:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NODEFAULT"

    def __reduce__(self) -> str:
        return "NODEFAULT"


class UnsetType:
    """The type of UNSET: a field that was not set, omitted when encoding."""

    __slots__ = ()
    _instance: UnsetType | None = None

    def __new__(cls) -> UnsetType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSET"


NODEFAULT: Any = _NoDefault()
UNSET: Any = UnsetType()


class Factory:
    """A field default made fresh for each instance (`default_factory`, or a `[]`/`{}` default)."""

    __slots__ = ("factory",)

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def __repr__(self) -> str:
        return "<factory>"
