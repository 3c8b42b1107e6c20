"""Helpers shared by the figure modules: input checks and exact enumeration of a format's
values in an interval (by bit pattern, so it works for fp32 / fp64 windows too)."""

from __future__ import annotations

import math
from decimal import Decimal
from numbers import Real

import numpy as np

from ..encoding import from_bits, to_bits
from ..formats import Format, get_float_format
from ..rounding import round as fp_round

__all__ = ["float_format", "finite_real", "values_between", "exact_decimal", "MAX_VALUES"]

# Most values one figure enumerates: all of fp16 / bf16 fit, an fp32 window must be narrow.
MAX_VALUES = 1 << 16


def float_format(fmt: Format | str) -> Format:
    """The float Format for a name / Format / dtype; ValueError for an unknown name or an
    integer format (a plot of floating-point values needs a float format)."""
    try:
        return get_float_format(fmt)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def finite_real(x: object, name: str) -> float:
    """``x`` as a finite Python float, else ValueError naming the argument."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (Real, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite real number, got {x!r}")
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return v


def _positive_between(fmt: Format, lo: float, hi: float) -> np.ndarray:
    """Positive values of fmt in [lo, hi] (0 <= lo <= hi), ascending, via consecutive patterns:
    the patterns of positive values order like the values."""
    first = float(fp_round(max(lo, fmt.smallest_subnormal), fmt, "up"))
    last = float(fp_round(min(hi, fmt.max), fmt, "down"))
    if not (math.isfinite(first) and first <= last):
        return np.empty(0)
    b0 = int(to_bits(first, fmt))
    b1 = int(to_bits(last, fmt))
    if b1 - b0 + 1 > MAX_VALUES:
        raise ValueError(
            f"[{lo!r}, {hi!r}] holds {b1 - b0 + 1} values of {fmt.name}; at most {MAX_VALUES} "
            "can be drawn: choose a narrower range"
        )
    return np.asarray(from_bits(np.arange(b0, b1 + 1, dtype=np.uint64), fmt), dtype=np.float64)


def values_between(fmt: Format | str, lo: float, hi: float) -> np.ndarray:
    """Every finite value of ``fmt`` in [lo, hi], ascending, zero once.

    >>> values_between("fp4_e2m1", 1.0, 4.0).tolist()
    [1.0, 1.5, 2.0, 3.0, 4.0]
    >>> values_between("fp4_e2m1", -1.0, 0.5).tolist()
    [-1.0, -0.5, 0.0, 0.5]
    """
    fmt = float_format(fmt)
    lo, hi = finite_real(lo, "lo"), finite_real(hi, "hi")
    if lo > hi:
        raise ValueError(f"need lo <= hi, got lo={lo!r}, hi={hi!r}")
    parts = []
    if lo < 0:
        parts.append(-_positive_between(fmt, max(0.0, -hi), -lo)[::-1])
    if lo <= 0 <= hi:
        parts.append(np.zeros(1))
    if hi > 0:
        parts.append(_positive_between(fmt, max(0.0, lo), hi))
    return np.concatenate(parts) if parts else np.empty(0)


def exact_decimal(v: float, max_digits: int = 22) -> str:
    """A float as its exact decimal expansion when it has at most ``max_digits`` significant
    digits, else ``≈`` and 12 significant digits (every binary fraction has a finite decimal).

    >>> exact_decimal(0.1), exact_decimal(0.1, 60), exact_decimal(1.0009765625)
    ('≈0.1', '0.1000000000000000055511151231257827021181583404541015625', '1.0009765625')
    """
    if v == 0:
        return "0"
    if not math.isfinite(v):
        return repr(v)
    # Decimal(float) is exact; format "f" prints every digit (normalize() would round to 28)
    text = format(Decimal(v), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if len(text.lstrip("-").replace(".", "").strip("0")) <= max_digits:
        return text
    return f"≈{v:.12g}"
