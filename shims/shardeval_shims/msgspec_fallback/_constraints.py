"""Checks for `Annotated[..., Meta(...)]` constraints, with msgspec's error wording."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from ._errors import Invalid
from ._meta import Meta

Check = Callable[[Any], Any]


def merged(metas: Sequence[Meta]) -> dict[str, Any]:
    """Every constraint set by any of the Metas (a later Meta wins)."""
    out: dict[str, Any] = {}
    for meta in metas:
        for name in ("gt", "ge", "lt", "le", "multiple_of", "pattern", "min_length", "max_length"):
            value = getattr(meta, name)
            if value is not None:
                out[name] = value
        if meta.regex is not None:
            out["regex"] = meta.regex
    return out


def number_check(kind: str, metas: Sequence[Meta]) -> Check | None:
    """Bounds and multiple_of for `int` or `float`; None when there are none."""
    c = merged(metas)
    cast = float if kind == "float" else int
    if kind == "int":  # msgspec keeps integer bounds inclusive: gt=0 is ge=1, lt=5 is le=4
        if "gt" in c:
            c["ge"] = int(c.pop("gt")) + 1
        if "lt" in c:
            c["le"] = int(c.pop("lt")) - 1
    bounds = [(op, cast(c[name])) for op, name in ((">=", "ge"), (">", "gt"), ("<=", "le"), ("<", "lt")) if name in c]
    multiple = c.get("multiple_of")
    if not bounds and multiple is None:
        return None
    tests = {">=": lambda v, b: v >= b, ">": lambda v, b: v > b, "<=": lambda v, b: v <= b, "<": lambda v, b: v < b}
    checks = [(tests[op], bound, f"Expected `{kind}` {op} {bound!r}") for op, bound in bounds]
    if multiple is not None:
        multiple = cast(multiple)
        remainder = (lambda v: math.fmod(v, multiple)) if kind == "float" else (lambda v: v % multiple)
        multiple_text = f"Expected `{kind}` that's a multiple of {multiple!r}"

    def check(value: Any) -> Any:
        for test, bound, text in checks:
            if not test(value, bound):
                raise Invalid(text)
        if multiple is not None and remainder(value) != 0:
            raise Invalid(multiple_text)
        return value

    return check


def length_check(kind: str, metas: Sequence[Meta], pattern: bool = False) -> Check | None:
    """min_length/max_length for `str`, `array` or `object` (and pattern for `str`)."""
    c = merged(metas)
    low, high, regex = c.get("min_length"), c.get("max_length"), c.get("regex") if pattern else None
    if low is None and high is None and regex is None:
        return None

    def check(value: Any) -> Any:
        n = len(value)
        if low is not None and n < low:
            raise Invalid(f"Expected `{kind}` of length >= {low}")
        if high is not None and n > high:
            raise Invalid(f"Expected `{kind}` of length <= {high}")
        if regex is not None and regex.search(value) is None:
            raise Invalid(f"Expected `{kind}` matching regex {regex.pattern!r}")
        return value

    return check
