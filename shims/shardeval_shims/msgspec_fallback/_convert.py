"""`msgspec.convert`: validate Python objects (YAML output, dicts) into typed values."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from ._errors import Invalid
from ._nodes import Mode, node_for


def convert(
    obj: Any,
    type: Any,
    *,
    strict: bool = True,
    from_attributes: bool = False,
    dec_hook: Callable[[type, Any], Any] | None = None,
    builtin_types: Iterable[type] | None = None,
    str_keys: bool = False,
) -> Any:
    """Convert `obj` to `type` like msgspec; strict=False also reads "5" as 5, "true" as True."""
    if from_attributes or dec_hook is not None:
        raise TypeError("from_attributes and dec_hook are not supported by the stdlib msgspec fallback")
    node = node_for(type, Mode(False, strict))
    try:
        return node.conv(obj)
    except Invalid as exc:
        raise exc.public() from None
