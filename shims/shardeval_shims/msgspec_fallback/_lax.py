"""strict=False: the text forms `convert` reads as numbers, booleans and null, and what it makes of them."""

from __future__ import annotations

import re
from typing import Any

from ._errors import out_of_range

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_NONFINITE = re.compile(r"-?(?:nan|inf|infinity)", re.IGNORECASE)
INF = float("inf")
MAX_EXACT_INT = 2**53  # the largest float strict=False turns into an int
INT_MIN, UINT_MAX = -(2**63), 2**64 - 1  # JSON integers outside this range are floats to msgspec
NOT_LAX: Any = object()  # a string strict=False does not read as anything


def to_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        raise out_of_range() from None


def parse_number(text: str) -> int | float | None:
    """A JSON number (or nan/inf spelled out) as int or float; None when `text` is not one.

    A finite number too large for a float is msgspec's "Number out of range".
    """
    match = _NUMBER.fullmatch(text)
    if match is not None:
        if match.group(1) is None and match.group(2) is None:
            return int(text)
        value = float(text)
        if value == INF or value == -INF:
            raise out_of_range()
        return value
    if _NONFINITE.fullmatch(text):
        return float(text)
    return None


def parse_bool(text: str) -> bool | None:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


def is_null(text: str) -> bool:
    return text.lower() == "null"




def from_text(node: Any, text: str) -> Any:
    """strict=False: "5", "1e3", "nan", "true", "null" as the number, bool or None `node` takes.

    NOT_LAX when the text is none of those; a number the type cannot take is a type error.
    """
    if node.has_int or node.int_lits is not None or node.has_float or node.boolean:
        number = parse_number(text)
        if number is not None:
            if number.__class__ is int:
                if node.has_int:
                    return node.int_check(number) if node.int_check is not None else number
                if node.int_lits is not None and -(2**63) <= number < 2**64:
                    return node.int_literal(number)
                if node.has_float:
                    value = to_float(number)
                    return node.float_check(value) if node.float_check is not None else value
                if node.boolean and number in (0, 1):
                    return number == 1
            else:
                if node.has_float:
                    return node.float_check(number) if node.float_check is not None else number
                if node.has_int and number.is_integer() and abs(number) <= MAX_EXACT_INT:
                    value = int(number)
                    return node.int_check(value) if node.int_check is not None else value
            raise node.type_error(text)
    if node.boolean:
        flag = parse_bool(text)
        if flag is not None:
            return flag
    if node.none and is_null(text):
        return None
    return NOT_LAX
