"""`Meta`: constraints attached with `Annotated[int, Meta(ge=0)]`, checked on decode and convert."""

from __future__ import annotations

import re
from typing import Any

_CONSTRAINTS = ("gt", "ge", "lt", "le", "multiple_of", "pattern", "min_length", "max_length", "tz")
_DOCS = ("title", "description", "examples", "extra_json_schema", "extra")


class Meta:
    """Extra constraints and documentation for a type; only the constraints change behaviour."""

    __slots__ = _CONSTRAINTS + _DOCS + ("regex",)

    def __init__(
        self,
        *,
        gt: int | float | None = None,
        ge: int | float | None = None,
        lt: int | float | None = None,
        le: int | float | None = None,
        multiple_of: int | float | None = None,
        pattern: str | None = None,
        min_length: int | None = None,
        max_length: int | None = None,
        tz: bool | None = None,
        title: str | None = None,
        description: str | None = None,
        examples: list[Any] | None = None,
        extra_json_schema: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if gt is not None and ge is not None:
            raise ValueError("Cannot specify both `gt` and `ge`")
        if lt is not None and le is not None:
            raise ValueError("Cannot specify both `lt` and `le`")
        for name, value in (("gt", gt), ("ge", ge), ("lt", lt), ("le", le), ("multiple_of", multiple_of)):
            if value is not None and (type(value) not in (int, float)):
                raise TypeError(f"{name} must be an int or float, got {type(value).__name__}")
        for name, value in (("min_length", min_length), ("max_length", max_length)):
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"{name} must be a non-negative int") if type(value) is int else TypeError(
                    f"{name} must be an int, got {type(value).__name__}"
                )
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str, got {type(pattern).__name__}")
        self.gt, self.ge, self.lt, self.le, self.multiple_of = gt, ge, lt, le, multiple_of
        self.pattern, self.min_length, self.max_length, self.tz = pattern, min_length, max_length, tz
        self.title, self.description, self.examples = title, description, examples
        self.extra_json_schema, self.extra = extra_json_schema, extra
        self.regex = re.compile(pattern) if pattern is not None else None

    def _items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in _CONSTRAINTS + _DOCS if getattr(self, k) is not None]

    def __repr__(self) -> str:
        return "msgspec.Meta(" + ", ".join(f"{k}={v!r}" for k, v in self._items()) + ")"

    def __eq__(self, other: object) -> bool:
        return type(other) is Meta and self._items() == other._items()

    def __hash__(self) -> int:
        return hash(tuple((k, v) for k, v in self._items() if k in _CONSTRAINTS))
