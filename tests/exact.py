"""A slow, exact, scalar reference for rounding to a binary format, on fractions.Fraction.

Written from the IEEE 754 definitions, independently of fpsim's bit manipulation: a format's
values are decoded from its fields, the two neighbours of ``x`` in the format are found by exact
rational arithmetic (floor of ``x / quantum``), and the rounding mode chooses between them.
Overflow and tininess follow IEEE 754-2019 sections 7.4 and 7.5 (the result "computed as though
the exponent range were unbounded"). Only a format's defining fields (exponent_bits,
mantissa_bits, bias, nan_encoding, subnormals) are read, never its derived properties.

fpsim conventions that IEEE leaves open, encoded here as specified in fpsim's docs:

- a format without infinity ('fn', 'fnuz') turns an overflow that IEEE would send to infinity
  into NaN (``overflow="inf"``) or the largest finite value (``overflow="saturate"``); a format
  without NaN ('none') always saturates;
- converting an infinity to a format without one gives NaN and INVALID, or with saturation (or
  when the format has no NaN either) the largest finite value and INEXACT;
- ``subnormals="flush"``: a tiny result (tininess as chosen) becomes a signed zero with
  UNDERFLOW | INEXACT; ``"daz"``: an input below 2**emin of the target format reads as a signed
  zero (no flags); a format with ``subnormals=False`` always flushes.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from fractions import Fraction

INEXACT = 0x01
UNDERFLOW = 0x02
OVERFLOW = 0x04
INVALID = 0x10

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd")


def pow2(k: int) -> Fraction:
    """2**k exactly, for any integer k."""
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def floor_log2(a: Fraction) -> int:
    """floor(log2(a)) for a > 0, by integer comparison only."""
    n = a.numerator.bit_length() - a.denominator.bit_length()
    # 2**n <= a < 2**(n+2) holds here; adjust by exact comparison
    while pow2(n) > a:
        n -= 1
    while pow2(n + 1) <= a:
        n += 1
    return n


@dataclass(frozen=True)
class Spec:
    """A format's facts derived from its fields by the definitions of the encodings."""

    E: int
    M: int
    bias: int
    enc: str
    subnormals: bool

    @classmethod
    def of(cls, fmt) -> Spec:
        enc = getattr(fmt.nan_encoding, "value", fmt.nan_encoding)
        return cls(fmt.exponent_bits, fmt.mantissa_bits, fmt.bias, str(enc), fmt.subnormals)

    @property
    def emin(self) -> int:
        return 1 - self.bias

    def decode(self, s: int, e: int, m: int) -> Fraction | None:
        """Value of the pattern (sign s, exponent field e, mantissa field m); None for
        infinity / NaN patterns."""
        top = (1 << self.E) - 1
        ones = (1 << self.M) - 1
        if self.enc == "ieee" and e == top:
            return None
        if self.enc == "fn" and e == top and m == ones:
            return None
        if self.enc == "fnuz" and s == 1 and e == 0 and m == 0:
            return None
        if e == 0:
            mag = Fraction(m, 1 << self.M) * pow2(self.emin) if self.subnormals else Fraction(0)
        else:
            mag = (1 + Fraction(m, 1 << self.M)) * pow2(e - self.bias)
        return -mag if s else mag

    @property
    def max(self) -> Fraction:
        """The largest finite value: the largest-magnitude pattern that decodes to a number."""
        top = (1 << self.E) - 1
        ones = (1 << self.M) - 1
        for e in range(top, -1, -1):
            for m in range(ones, max(ones - 2, -1), -1):
                v = self.decode(0, e, m)
                if v is not None:
                    return v
        raise AssertionError("format without finite values")

    @property
    def tiny(self) -> Fraction:
        return pow2(self.emin)

    def values(self) -> list[Fraction]:
        """All finite non-negative values (small formats only)."""
        out = set()
        for e in range(1 << self.E):
            for m in range(1 << self.M):
                v = self.decode(0, e, m)
                if v is not None:
                    out.add(v)
        return sorted(out)


def neighbours(a: Fraction, q: Fraction) -> tuple[Fraction, Fraction, int]:
    """For a >= 0 on the grid of spacing q: (lo, hi, k) with lo = k*q <= a < hi = lo + q."""
    k = math.floor(a / q)
    return k * q, (k + 1) * q, k


def choose(a: Fraction, q: Fraction, mode: str, negative: bool) -> Fraction:
    """Round the magnitude a >= 0 to the grid of spacing q (no range limits)."""
    lo, hi, k = neighbours(a, q)
    if lo == a:
        return a
    d = a - lo
    half = q / 2
    if mode == "nearest_even":
        if d != half:
            return lo if d < half else hi
        return lo if k % 2 == 0 else hi
    if mode == "nearest_away":
        return lo if d < half else hi
    if mode == "toward_zero":
        return lo
    if mode == "up":
        return lo if negative else hi
    if mode == "down":
        return hi if negative else lo
    if mode == "odd":
        return lo if k % 2 == 1 else hi
    raise ValueError(f"reference has no mode {mode!r}")


def quantum(a: Fraction, spec: Spec, unbounded: bool) -> Fraction:
    """Spacing of the format at magnitude a (> 0): 2**(e - M) in the binade of a, with e
    clamped at emin unless the exponent range is unbounded."""
    e = floor_log2(a)
    if not unbounded:
        e = max(e, spec.emin)
    return pow2(e - spec.M)


def is_snan(x: float) -> bool:
    """True for a float64 NaN whose quiet bit (bit 51) is clear."""
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    return math.isnan(x) and not (bits >> 51) & 1


def round_exact(x, fmt, mode: str = "nearest_even", *, overflow: str = "inf",
                subnormals: str = "keep", tininess: str = "after",
                negative_zero: bool = False) -> tuple[float, int]:
    """Round ``x`` (a float, int or Fraction; ``negative_zero`` gives the sign of an exact zero
    Fraction) to ``fmt``; returns (float64 value, IEEE flags)."""
    spec = Spec.of(fmt)
    vmax = spec.max
    has_inf = spec.enc == "ieee"
    has_nan = spec.enc != "none"
    nan = float("nan")
    if isinstance(x, float):
        if math.isnan(x):
            return nan, INVALID if (is_snan(x) or not has_nan) else 0
        negative = math.copysign(1.0, x) < 0
        if math.isinf(x):
            if has_inf:
                return x, 0
            if has_nan and overflow == "inf":
                return nan, INVALID
            return _signed(vmax, negative), INEXACT
        a = abs(Fraction(x))
    else:
        a = Fraction(x)
        negative = a < 0 or (a == 0 and negative_zero)
        a = abs(a)
    flush = subnormals in ("flush", "flush_daz") or not spec.subnormals
    daz = subnormals in ("daz", "flush_daz")
    if daz and a < spec.tiny:
        a = Fraction(0)
    if a == 0:
        return _zero(negative, spec), 0
    r_unb = choose(a, quantum(a, spec, unbounded=True), mode, negative)
    r = choose(a, quantum(a, spec, unbounded=False), mode, negative)
    if r_unb > vmax:
        # IEEE overflow: the unbounded-exponent result exceeds the largest finite value
        flags = OVERFLOW | INEXACT
        if overflow == "saturate" or not has_nan:
            return _signed(vmax, negative), flags
        to_inf = {"nearest_even": True, "nearest_away": True, "toward_zero": False,
                  "odd": False, "up": not negative, "down": negative}[mode]
        if not to_inf:
            return _signed(vmax, negative), flags
        return (_signed(math.inf, negative) if has_inf else nan), flags
    tiny = a < spec.tiny if tininess == "before" else r_unb < spec.tiny
    if flush and tiny:
        return _zero(negative, spec), UNDERFLOW | INEXACT
    flags = 0
    if r != a:
        flags |= INEXACT
        if tiny:
            flags |= UNDERFLOW
    if r == 0:
        return _zero(negative, spec), flags
    return _signed(r, negative), flags


def stochastic_neighbours(x: float, fmt) -> tuple[float, float, Fraction]:
    """For finite x inside the range: (value toward zero, value away from zero, probability of
    rounding away = distance to the first over the spacing), exact."""
    spec = Spec.of(fmt)
    negative = math.copysign(1.0, x) < 0
    a = abs(Fraction(x))
    if a == 0:
        return x, x, Fraction(0)
    q = quantum(a, spec, unbounded=False)
    lo, hi, _ = neighbours(a, q)
    return (_signed(lo, negative) if lo else _zero(negative, spec), _signed(hi, negative),
            (a - lo) / q)


def _signed(v, negative: bool) -> float:
    f = float(v)
    return -f if negative else f


def _zero(negative: bool, spec: Spec) -> float:
    return -0.0 if negative and spec.enc != "fnuz" else 0.0


def same(a: float, b: float) -> bool:
    """Equal as values including the sign of zero; NaN equals NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
