"""Float text exactly as msgspec writes it.

msgspec prints the shortest digits that round-trip (the same digits as `repr`), in plain
notation for decimal exponents -5..15 and as `1e16` / `1e-7` (no `+`, no zero padding) outside
that; NaN and infinities have no JSON form and are written as `null`.
"""

from __future__ import annotations

_REPR = float.__repr__


def float_text(value: float) -> str:
    text = _REPR(value)
    if "e" not in text:
        if text[-1] == "n" or text[-1] == "f":  # nan, inf, -inf
            return "null"
        return text
    mantissa, _, exponent = text.partition("e")
    power = int(exponent)
    if power == -5:  # repr switches to exponents one step earlier than msgspec
        sign = "-" if mantissa[0] == "-" else ""
        return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e{power}"
