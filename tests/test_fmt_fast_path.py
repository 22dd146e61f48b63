"""fmt's fast path (the format's own rounding, taken where the shortest decimal form is not a tie)
writes what the Decimal rule writes, for every kind of number the outputs show."""

from __future__ import annotations

import math
import random
from decimal import Decimal

from shardeval.numbers import _rounded, fmt


def by_decimal(x: float, digits: int) -> str:
    """The rule as written before the fast path: the shortest decimal form, half to even."""
    if math.isnan(x):
        return "—"
    return f"{x}" if math.isinf(x) else _rounded(Decimal(repr(float(x))), digits)


def test_the_fast_path_writes_what_the_decimal_rule_writes() -> None:
    rng = random.Random(42)
    values = [k / n for n in range(1, 1500) for k in range(0, n + 1, max(1, n // 40))]  # shares, as accuracies are
    values += [rng.uniform(-1, 1) for _ in range(50_000)] + [rng.uniform(-1e12, 1e12) for _ in range(20_000)]
    values += [round(rng.uniform(-100, 100), rng.randint(0, 7)) for _ in range(50_000)]  # short decimals, ties among them
    values += [443 / 800, 1 / 32, 0.00005, -0.00005, 0.12345, 2.5, 0.5, -0.0, 9.99995, 0.99995, 1e-5, 123456789.12345, 1e15 + 0.5]
    for digits in (0, 1, 2, 4, 6):
        differ = [x for x in values if fmt(x, digits) != by_decimal(x, digits)]
        assert differ == [], (digits, differ[:5])
    assert (fmt(443 / 800), fmt(1 / 32), fmt(-0.0), fmt(3)) == ("0.5538", "0.0312", "-0.0000", "3.0000")
