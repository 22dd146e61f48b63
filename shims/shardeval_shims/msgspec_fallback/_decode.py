"""Typed JSON decoding: the stdlib parser for speed, the byte-level reader for msgspec's errors.

The stdlib `json` C scanner reads well-formed input much faster than any pure-Python parser,
but it accepts a few things msgspec rejects (NaN, numbers beyond float range, lone surrogate
escapes), keeps only the last of repeated keys where msgspec validates each, and reports syntax
errors in its own words. Those inputs, and every input it rejects, go through `_scan` instead,
which gives msgspec's result or msgspec's error.
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import _scan
from ._errors import Invalid
from ._nodes import TypeNode

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
INF = float("inf")


class _Reread(Exception):
    """The stdlib parser met something msgspec treats differently: decode with `_scan`."""


def _float(text: str) -> float:
    value = float(text)
    if value == INF or value == -INF:
        raise _Reread
    return value


def _constant(text: str) -> Any:
    raise _Reread


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """msgspec validates every value of a repeated key, so duplicates take the exact path."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Reread
    return out


_loads = json.JSONDecoder(parse_float=_float, parse_constant=_constant, object_pairs_hook=_object).decode


def _lone_surrogate(value: Any) -> bool:
    """Whether a `\\udXXX` escape decoded to half a surrogate pair (msgspec rejects those)."""
    if value.__class__ is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if value.__class__ is list:
        return any(_lone_surrogate(v) for v in value)
    if value.__class__ is dict:
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    return False


def as_bytes(buf: Any) -> bytes:
    if isinstance(buf, bytes):
        return buf
    if isinstance(buf, str):
        return buf.encode("utf-8")
    if isinstance(buf, (bytearray, memoryview)):
        return bytes(buf)
    raise TypeError(f"a bytes-like object is required, not '{type(buf).__name__}'")


def decode(buf: Any, node: TypeNode) -> Any:
    try:
        if isinstance(buf, str):
            text = buf
        elif isinstance(buf, (bytes, bytearray, memoryview)):
            text = str(buf, "utf-8")
        else:
            raise TypeError(f"a bytes-like object is required, not '{type(buf).__name__}'")
        value = _loads(text)
        if "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None and _lone_surrogate(value):
            raise _Reread
    except (ValueError, _Reread, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return _scan.decode(as_bytes(buf), node)
    if node.is_any:
        return value
    try:
        return node.conv(value)
    except Invalid as exc:
        raise exc.public() from None


def decode_lines(buf: Any, node: TypeNode) -> list[Any]:
    """One value per non-blank line (msgspec's `decode_lines`)."""
    return [decode(line, node) for line in as_bytes(buf).splitlines() if line.strip()]
