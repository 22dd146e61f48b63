"""How a number is written as text: one rule for every output (issue 40, point 11).

443/800 read 0.5538 on sweep.html and the live page and 0.5537 in sweep.md and the terminal: the
pages rounded the decimal half to even, the Markdown formatted the binary float. Every text a
command writes takes its numbers from `fmt` (the pages' script applies the same rule, see there).
Stdlib only, at the base of the core, so a shard's summary line and the merge's files share it.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal


def fmt(x: float | None, digits: int = 4) -> str:
    """A number as every output shows it (the terminal, report.md, sweep.md, the pages' cells and
    the status page): `digits` decimals, rounded from the number's shortest decimal form (what
    repr and the JSON files say, 443/800 -> 0.55375) half to even (0.5538; 1/32 -> 0.0312). The
    pages' script rounds the same way (Intl.NumberFormat, roundingMode halfEven, which reads that
    same shortest form); f"{x:.4f}" rounded the binary value instead (0.5537), so the pages and
    the Markdown disagreed at ties. "—" for nothing or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return f"{x}"
    shortest = repr(float(x))
    if abs(x) < 10.0 ** (13 - digits) and "e" not in shortest:  # the fast path (below); else Decimal's
        decimals = len(shortest) - shortest.index(".") - 1
        if decimals != digits + 1 or shortest[-1] != "5":
            return f"{x:.{digits}f}"
    return _rounded(Decimal(shortest), digits)


# fmt's fast path (a sweep.md of many checkpoints formats thousands of numbers, at each update of a
# watched sweep): the format rounds the binary value itself, which reads as the shortest decimal
# form rounded except where that form is a tie (`digits` + 1 decimals, the last a 5): a tie point
# strictly between the two, or equal to the binary value, would be a second decimal within the
# value's spacing of the shortest form, and below 10**(13 - digits) the spacing (< 2.2e-16 · x) is
# finer than any two decimals of `digits` + 2 places can be apart. A tie goes through Decimal.


def _rounded(exact: Decimal, digits: int) -> str:
    """`exact` at `digits` decimals, half to even: the one rule (fmt, percent)."""
    return f"{exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_EVEN):.{digits}f}"


def percent(x: float | None, digits: int = 0, sep: str = "") -> str:
    """A share as a percentage, by the same rule as `fmt` (the shortest decimal form, moved two places,
    rounded half to even): 0.575 -> "58%" (f"{0.575:.0%}" says 57%: the binary value is below the
    tie), 0.00125 -> "0.12%" at 2 digits; `sep` goes before the sign ("14.3 %")."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return fmt(x, digits)
    return f"{_rounded(Decimal(repr(float(x))).scaleb(2), digits)}{sep}%"


def finite_number(x: object) -> bool:
    """An int or float that is finite, and not a bool: what a score, a log-probability or a
    table's number must be to be written as one (JSON has no NaN; a bool is not a measure)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
