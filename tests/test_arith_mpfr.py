"""Arithmetic in bf16, tf32, fp8, fp6/fp4 and custom formats against two independent references:

- exact rational arithmetic (fractions.Fraction) rounded by tests/exact.py (written from the
  IEEE 754 definitions), with the IEEE special cases spelled out here: results and all five
  flags, every deterministic rounding mode, and the overflow / subnormal / tininess policies;
- MPFR through gmpy2 (a context of precision p, the format's exponent range and
  ``subnormalize=True``) for round to nearest even, toward zero, up and down: result values.

Operands are drawn by hypothesis as bit patterns biased towards the interesting places: zeros,
the subnormal / normal boundary, the overflow threshold, infinities and NaNs, mantissas with
few bits (exact products, ties) and exponent pairs a few binades apart (ties and sticky bits in
sums), squares for sqrt and near-cancelling addends for fma.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import gmpy2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpsim
from fpsim import arithmetic
from tests.exact import INEXACT, INVALID, MODES, is_snan, round_exact

DIVBYZERO = 0x08
OPS = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}
FUNCS = {"add": arithmetic.add, "sub": arithmetic.sub, "mul": arithmetic.mul,
         "div": arithmetic.div, "sqrt": arithmetic.sqrt, "fma": arithmetic.fma}

FORMATS = {
    "bf16": fpsim.BF16,
    "tf32": fpsim.TF32,
    "e4m3": fpsim.FP8_E4M3,
    "e5m2": fpsim.FP8_E5M2,
    "e4m3fnuz": fpsim.FP8_E4M3FNUZ,
    "e2m3": fpsim.FP6_E2M3,
    "e2m1": fpsim.FP4_E2M1,
    "e5m6": fpsim.Format(5, 6),
    "e6m3": fpsim.Format(6, 3),
    "e6m3_nosub": fpsim.Format(6, 3, subnormals=False),
    "e3m4_bias1": fpsim.Format(3, 4, bias=1),
}
# float64-wide exponent ranges and long significands take the general (frexp-scaled) path
WIDE = {
    "e11m10": fpsim.Format(11, 10),
    "e11m25": fpsim.Format(11, 25),
    "e11m40": fpsim.Format(11, 40),
    "e11m50": fpsim.Format(11, 50),
    "e10m30": fpsim.Format(10, 30),
    "e9m20_bias400": fpsim.Format(9, 20, bias=400),
    "e10m44_fn": fpsim.Format(10, 44, nan_encoding="fn"),
    "e10m20_bias1000": fpsim.Format(10, 20, bias=1000),  # rounded on a shifted copy
}
N = 16  # operands per example: one vectorised call per mode

# -- the reference ----------------------------------------------------------------------------


def _neg(x: float) -> bool:
    return math.copysign(1.0, x) < 0


def _sqrt_fraction(x: Fraction) -> Fraction:
    """sqrt(x) to 1200 bits below the point, plus a sticky half unit when inexact: rounds like
    the exact root to any format float64 holds (no rounding boundary lies strictly inside)."""
    k = 1200
    t = math.isqrt(x.numerator * (1 << (2 * k)) // x.denominator)
    r = Fraction(t, 1 << k)
    return r if r * r == x else r + Fraction(1, 1 << (k + 1))


def reference(op: str, xs: list[float], fmt, mode: str, opts: dict) -> tuple[float, int]:
    """IEEE result and flags of op on the format values xs (scalar, exact)."""
    sub = opts.get("subnormals", "keep")
    result_sub = "flush" if sub in ("flush", "flush_daz") else "keep"
    rnd = dict(overflow=opts.get("overflow", "inf"), subnormals=result_sub,
               tininess=opts.get("tininess", "after"))
    if sub in ("daz", "flush_daz"):
        tiny = 2.0 ** (1 - fmt.bias)
        xs = [math.copysign(0.0, x) if abs(x) < tiny else x for x in xs]
    nan = float("nan")
    inv = INVALID if any(is_snan(x) for x in xs if isinstance(x, float)) else 0
    if op == "fma":
        a, b, c = xs
        if (a == 0 and math.isinf(b)) or (math.isinf(a) and b == 0):
            inv = INVALID  # SoftFloat: even when c is a quiet NaN
    if any(math.isnan(x) for x in xs):
        return round_exact(nan, fmt, mode, **rnd)[0], inv

    def special(v: float, flags: int = 0) -> tuple[float, int]:
        r, f = round_exact(v, fmt, mode, **rnd)
        return r, f | flags

    if op in ("add", "sub"):
        a, b = xs
        b = -b if op == "sub" else b
        if math.isinf(a) and math.isinf(b) and _neg(a) != _neg(b):
            return special(nan, INVALID)
        if math.isinf(a) or math.isinf(b):
            return special(a if math.isinf(a) else b)
        s = Fraction(a) + Fraction(b)
        if s == 0:
            if a == 0 and b == 0 and _neg(a) == _neg(b):
                return special(a)
            return special(-0.0 if mode == "down" else 0.0)
        return round_exact(s, fmt, mode, **rnd)
    if op == "mul":
        a, b = xs
        sign = _neg(a) != _neg(b)
        if (math.isinf(a) and b == 0) or (a == 0 and math.isinf(b)):
            return special(nan, INVALID)
        if math.isinf(a) or math.isinf(b):
            return special(-math.inf if sign else math.inf)
        if a == 0 or b == 0:
            return special(-0.0 if sign else 0.0)
        return round_exact(Fraction(a) * Fraction(b), fmt, mode, **rnd)
    if op == "div":
        a, b = xs
        sign = _neg(a) != _neg(b)
        if (a == 0 and b == 0) or (math.isinf(a) and math.isinf(b)):
            return special(nan, INVALID)
        if math.isinf(a):
            return special(-math.inf if sign else math.inf)
        if b == 0:
            return special(-math.inf if sign else math.inf, DIVBYZERO)
        if a == 0 or math.isinf(b):
            return special(-0.0 if sign else 0.0)
        return round_exact(Fraction(a) / Fraction(b), fmt, mode, **rnd)
    if op == "sqrt":
        (a,) = xs
        if a == 0 or (math.isinf(a) and a > 0):
            return special(a)
        if a < 0:
            return special(nan, INVALID)
        return round_exact(_sqrt_fraction(Fraction(a)), fmt, mode, **rnd)
    if op == "fma":
        a, b, c = xs
        if inv:
            return special(nan, INVALID)
        psign = _neg(a) != _neg(b)
        if math.isinf(a) or math.isinf(b):
            if math.isinf(c) and _neg(c) != psign:
                return special(nan, INVALID)
            return special(-math.inf if psign else math.inf)
        if math.isinf(c):
            return special(c)
        s = Fraction(a) * Fraction(b) + Fraction(c)
        if s == 0:
            if (a == 0 or b == 0) and c == 0 and psign == _neg(c):
                return special(c)
            return special(-0.0 if mode == "down" else 0.0)
        return round_exact(s, fmt, mode, **rnd)
    raise AssertionError(op)


# -- operand strategies -----------------------------------------------------------------------


def _pattern(fmt, s: int, e: int, m: int) -> int:
    return (s << (fmt.bits - 1)) | (e << fmt.mantissa_bits) | m


def _build_row(fmt, op, drawn) -> tuple[int, ...]:
    """Operand patterns from drawn fields; a later operand with ``near`` set takes an exponent
    a few binades from the first's (for fma's c: from the exponent of a*b)."""
    top = (1 << fmt.exponent_bits) - 1
    s0, e0, m0, *rest = drawn
    row = [_pattern(fmt, s0, e0, m0)]
    for s, near, delta, e, m in rest:
        if near:
            base = e0 if not (op == "fma" and len(row) == 2) else e0 + e - fmt.bias
            e = min(max(base + delta, 0), top)
        row.append(_pattern(fmt, s, e, m))
    return tuple(row)


@functools.cache
def rows_strategy(fmt, op: str, n: int = N):
    """n rows of operand patterns for op, biased towards boundaries, ties and specials."""
    M = fmt.mantissa_bits
    ones = (1 << M) - 1
    top = (1 << fmt.exponent_bits) - 1
    special_m = {0, 1, ones, max(ones - 1, 0), 1 << max(M - 1, 0)}
    special_m |= {1 << k for k in range(M)}  # one bit: exact products, ties
    special_m |= {(ones >> (M - k)) << (M - k) for k in range(min(M, 6) + 1)}  # high bits
    mant = st.one_of(st.sampled_from(sorted(special_m)), st.integers(0, ones))
    expo = st.one_of(
        st.sampled_from(sorted({0, 1, 2, top, top - 1, top - 2, fmt.bias, fmt.bias + 1})),
        st.integers(0, top))
    d = M + 3
    extra = st.tuples(st.integers(0, 1), st.booleans(), st.integers(-d, d), expo, mant)
    row = st.tuples(st.integers(0, 1), expo, mant, *[extra] * (OPS[op] - 1))
    return st.lists(row.map(functools.partial(_build_row, fmt, op)), min_size=n, max_size=n)


def _values(fmt, rows):
    cols = np.array(rows, dtype=np.uint64).T
    return [fpsim.from_bits(c, fmt) for c in cols]


def _squares(fmt, xs):
    """Exact squares x*x of format values where representable (sqrt then is exact)."""
    sq = np.asarray(fpsim.round(xs * xs, fmt, "toward_zero"))
    return np.where(sq == xs * xs, sq, xs)


def _near_product(fmt, a, b, c):
    """Replace some c by -RN(a*b) (massive cancellation) or its neighbours."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.asarray(fpsim.round(a * b, fmt))
    alt = -p
    alt = np.where(np.arange(p.size) % 3 == 1, -np.asarray(fpsim.next_up(p, fmt)), alt)
    alt = np.where(np.isfinite(alt), alt, c)
    return np.where(np.arange(p.size) % 2 == 0, alt, c)


def _same(got: float, want: float) -> bool:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    return got == want and _neg(got) == _neg(want)


def check_against_reference(op, fmt, rows, modes=MODES, opts=None):
    opts = opts or {}
    xs = _values(fmt, rows)
    if op == "sqrt":
        xs[0] = _squares(fmt, xs[0]) if len(rows) % 2 else xs[0]
    if op == "fma":
        xs[2] = _near_product(fmt, *xs)
    for mode in modes:
        got, fl = FUNCS[op](*xs, fmt, mode, flags=True, **opts)
        for i in range(got.size):
            args = [float(x[i]) for x in xs]
            want, wfl = reference(op, args, fmt, mode, opts)
            assert _same(float(got[i]), want) and int(fl[i]) == wfl, (
                f"{op}{tuple(args)} in {fmt.name} {mode} {opts}: got {float(got[i])!r} flags "
                f"{int(fl[i]):#04x}, reference {want!r} flags {wfl:#04x}")


# -- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fkey", list(FORMATS))
@settings(max_examples=8)
@given(data=st.data())
def test_against_exact_reference(fkey, op, data):
    fmt = FORMATS[fkey]
    check_against_reference(op, fmt, data.draw(rows_strategy(fmt, op)))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fkey", list(WIDE))
@settings(max_examples=8)
@given(data=st.data())
def test_wide_formats_against_exact_reference(fkey, op, data):
    fmt = WIDE[fkey]
    if op == "fma" and fmt.precision_bits > 26:
        with pytest.raises(ValueError, match="precision bits"):
            arithmetic.fma(1.0, 1.0, 1.0, fmt)
        return
    check_against_reference(op, fmt, data.draw(rows_strategy(fmt, op)))


OPTIONS = [
    {"overflow": "saturate"},
    {"subnormals": "flush"},
    {"subnormals": "daz"},
    {"subnormals": "flush_daz"},
    {"tininess": "before"},
]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(o.values()))
@pytest.mark.parametrize("fkey", ["bf16", "e5m2", "e4m3", "e11m10"])
@settings(max_examples=6)
@given(data=st.data())
def test_policies_against_exact_reference(fkey, opts, data):
    fmt = {**FORMATS, **WIDE}[fkey]
    op = data.draw(st.sampled_from(list(OPS)))
    check_against_reference(op, fmt, data.draw(rows_strategy(fmt, op)), opts=opts)


# -- MPFR ---------------------------------------------------------------------------------------

MPFR_MODES = {"nearest_even": gmpy2.RoundToNearest, "toward_zero": gmpy2.RoundToZero,
              "up": gmpy2.RoundUp, "down": gmpy2.RoundDown}


def mpfr_op(op, xs, fmt, mode):
    """The op in MPFR with the format's precision and exponent range (gradual underflow by
    subnormalize); MPFR's exponents are those of 0.1xxx significands."""
    ctx = gmpy2.context(precision=fmt.precision_bits, emin=fmt.emin - fmt.mantissa_bits + 1,
                        emax=fmt.emax + 1, subnormalize=True, round=MPFR_MODES[mode])
    with ctx:
        v = [gmpy2.mpfr(x) for x in xs]
        r = {"add": lambda: v[0] + v[1], "sub": lambda: v[0] - v[1],
             "mul": lambda: v[0] * v[1], "div": lambda: v[0] / v[1],
             "sqrt": lambda: gmpy2.sqrt(v[0]), "fma": lambda: gmpy2.fma(*v)}[op]()
    return float(r)


MPFR_FORMATS = {k: f for k, f in {**FORMATS, **WIDE}.items()
                if f.nan_encoding.value == "ieee" and f.subnormals}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fkey", list(MPFR_FORMATS))
@settings(max_examples=6)
@given(data=st.data())
def test_against_mpfr(fkey, op, data):
    fmt = MPFR_FORMATS[fkey]
    if op == "fma" and fmt.precision_bits > 26:
        return
    rows = data.draw(rows_strategy(fmt, op))
    xs = _values(fmt, rows)
    if op == "fma":
        xs[2] = _near_product(fmt, *xs)
    for mode in MPFR_MODES:
        got = FUNCS[op](*xs, fmt, mode)
        for i in range(got.size):
            args = [float(x[i]) for x in xs]
            want = mpfr_op(op, args, fmt, mode)
            assert _same(float(got[i]), want), \
                f"{op}{tuple(args)} in {fmt.name} {mode}: got {float(got[i])!r}, MPFR {want!r}"


def test_reference_knows_the_special_cases():
    """The reference itself on hand-derived IEEE cases (so its special cases are not merely
    mirrored from the implementation)."""
    f = fpsim.FP16
    assert reference("add", [1.0, -1.0], f, "down", {}) == (-0.0, 0)
    assert math.copysign(1, reference("add", [1.0, -1.0], f, "up", {})[0]) == 1
    assert reference("sub", [-0.0, 0.0], f, "nearest_even", {}) == (-0.0, 0)
    assert reference("div", [1.0, -0.0], f, "nearest_even", {}) == (-math.inf, DIVBYZERO)
    assert reference("mul", [65504.0, 2.0], f, "toward_zero", {}) == (65504.0, 0x05)
    assert reference("sqrt", [2.0], f, "nearest_even", {}) == (1.4140625, INEXACT)
    r, fl = reference("fma", [0.0, math.inf, float("nan")], f, "nearest_even", {})
    assert math.isnan(r) and fl == INVALID
    assert reference("add", [2.0**-14, -(2.0**-15)], f, "nearest_even",
                     {"subnormals": "flush"}) == (0.0, 0x03)
