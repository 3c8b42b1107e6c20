"""Arithmetic on operands float64 cannot hold (issue 15, item 2's class in arithmetic.py):
long doubles (x87's 64-bit significand, far beyond float64's exponent range both ways), int64
and Python integers beyond 2**53, Fractions and Decimals.

The contract (arithmetic.py's module docstring): each operand is first converted to ``fmt``
with one round-to-nearest-even of its *exact* value (honouring ``overflow``; ``daz`` reads
subnormals as zero), silently; then the operation on the converted operands is rounded once,
with its flags. Two independent references:

- exact Fractions (``as_integer_ratio`` of the long double) rounded by tests/exact.py, then the
  IEEE operation of tests/test_arith_mpfr.py's Fraction reference: values and all flags,
  every deterministic mode, the overflow / subnormal policies;
- MPFR via gmpy2: the operand rounded from the exact rational (``mpq``) in a context of the
  format's precision and exponent range, the operation in the mode: values.

Before the fix the operands went through a float64 pair (hi, lo) whose lo is rounded below
2**-1011: a long double just above a tie of a format reaching below float64's subnormals read
as the tie (``mul(2**-1043 + 2**-1100, 1, Format(11, 20))`` gave 0, not 2**-1042).
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

import fpsim
from fpsim import arithmetic
from tests.exact import MODES, round_exact
from tests.test_arith_mpfr import MPFR_MODES, _same, reference


def _same_arrays(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ok = ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))
    return bool(ok.all())

LD = np.longdouble
needs_ld = pytest.mark.skipif(np.finfo(LD).nmant <= 52, reason="long double is float64 here")
RNG = np.random.default_rng(20150)

OPS = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}
FUNCS = {"add": arithmetic.add, "sub": arithmetic.sub, "mul": arithmetic.mul,
         "div": arithmetic.div, "sqrt": arithmetic.sqrt, "fma": arithmetic.fma}
FORMATS = {
    "fp16": fpsim.FP16,
    "bf16": fpsim.BF16,
    "fp32": fpsim.FP32,
    "e4m3": fpsim.FP8_E4M3,
    "e5m2": fpsim.FP8_E5M2,
    "e4m3fnuz": fpsim.FP8_E4M3FNUZ,
    "e11m20": fpsim.Format(11, 20),  # reaches below float64's subnormals: the false ties
    "e11m10": fpsim.Format(11, 10),
}


def _ld_values(fmt, n: int) -> np.ndarray:
    """Long doubles around fmt's interesting places: far beyond float64 both ways, just off
    the format's ties (by 2**-60 relative), its overflow threshold and smallest subnormal,
    zeros, infinities, NaN, and random 64-bit significands across the format's range."""
    one = LD(1)
    m, emin, emax = fmt.mantissa_bits, fmt.emin, fmt.emax
    tie = one + np.ldexp(one, -m - 1)
    edges = [LD("1e4000"), LD("-1e4000"), LD("1e-4000"), LD("-1e-4000"), LD(0), -LD(0),
             LD(np.inf), -LD(np.inf), LD(np.nan),
             tie, tie + np.ldexp(one, -60), tie - np.ldexp(one, -60), -(tie + np.ldexp(one, -62)),
             LD(fmt.max) + np.ldexp(LD(fmt.max), -m - 1),  # the overflow threshold
             LD(fmt.max) + np.ldexp(LD(fmt.max), -m - 1) - np.ldexp(LD(fmt.max), -62),
             np.ldexp(one, emin - m - 1), np.ldexp(one, emin - m - 1) + np.ldexp(one, emin - 100),
             np.ldexp(one, emin - m - 1) - np.ldexp(one, emin - 100),
             np.ldexp(one, emin) - np.ldexp(one, emin - 70),
             np.ldexp(one, -1043) + np.ldexp(one, -1100), np.ldexp(one, 1030) + 1]
    k = n - len(edges)
    sig = RNG.integers(1 << 62, 1 << 63, k, dtype=np.int64).astype(LD)
    ex = RNG.integers(emin - m - 3, emax + 2, k)
    rnd = np.ldexp(sig, ex - 62) * np.where(RNG.random(k) < 0.5, -1, 1)
    out = np.concatenate([np.array(edges, dtype=LD), rnd])
    return out[RNG.permutation(out.size)]


def _exact(v):
    """A long double as tests/exact.py reads it: a float when float64 holds it (zeros keep
    their sign, infinities, NaN), else its exact Fraction."""
    f = float(v)
    if not math.isfinite(f) and np.isfinite(v):
        return Fraction(*LD(v).as_integer_ratio())
    if math.isfinite(f) and Fraction(*LD(v).as_integer_ratio()) != Fraction(f):
        return Fraction(*LD(v).as_integer_ratio())
    return f


def _converted(v, fmt, opts) -> float:
    """The operand rounded once to fmt, nearest even, by the Fraction reference."""
    sub = opts.get("subnormals", "keep")
    return round_exact(_exact(v), fmt, "nearest_even", overflow=opts.get("overflow", "inf"),
                       subnormals="daz" if sub in ("daz", "flush_daz") else "keep")[0]


def _check(op, fmt, cols, modes, opts):
    conv = [[_converted(v, fmt, opts) for v in col] for col in cols]
    for mode in modes:
        got, fl = FUNCS[op](*cols, fmt, mode, flags=True, **opts)
        for i in range(got.size):
            args = [c[i] for c in conv]
            want, wfl = reference(op, args, fmt, mode, opts)
            assert _same(float(got[i]), want) and int(fl[i]) == wfl, (
                f"{op}{tuple(repr(c[i]) for c in cols)} in {fmt.name} {mode} {opts}: got "
                f"{float(got[i])!r} flags {int(fl[i]):#04x}, reference {want!r} {wfl:#04x}")


def _columns(op, fmt, n=48):
    cols = [_ld_values(fmt, n) for _ in range(OPS[op])]
    if op == "sqrt":
        cols[0] = np.abs(cols[0])
    if op == "fma" and fmt.precision_bits > 26:
        pytest.skip("fma: formats of at most 26 precision bits")
    return cols


@needs_ld
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fkey", list(FORMATS))
def test_long_double_operands_against_fractions(fkey, op):
    fmt = FORMATS[fkey]
    _check(op, fmt, _columns(op, fmt), MODES, {})


@needs_ld
@pytest.mark.parametrize("opts", [{"overflow": "saturate"}, {"subnormals": "daz"},
                                  {"subnormals": "flush_daz"}, {"tininess": "before"}],
                         ids=lambda o: "-".join(o.values()))
@pytest.mark.parametrize("fkey", ["fp16", "bf16", "e4m3", "e11m20"])
def test_long_double_operands_with_policies(fkey, opts):
    fmt = FORMATS[fkey]
    for op in OPS:
        if op == "fma" and fmt.precision_bits > 26:
            continue
        _check(op, fmt, _columns(op, fmt, 24), MODES, opts)


def _mpfr(op, xs, fmt, mode):
    base = dict(precision=fmt.precision_bits, emin=fmt.emin - fmt.mantissa_bits + 1,
                emax=fmt.emax + 1, subnormalize=True)
    with gmpy2.context(round=gmpy2.RoundToNearest, **base):
        v = [gmpy2.mpfr(gmpy2.mpq(*LD(x).as_integer_ratio())) if np.isfinite(x) and x != 0
             else gmpy2.mpfr(float(x)) for x in xs]
    with gmpy2.context(round=MPFR_MODES[mode], **base):
        r = {"add": lambda: v[0] + v[1], "sub": lambda: v[0] - v[1],
             "mul": lambda: v[0] * v[1], "div": lambda: v[0] / v[1],
             "sqrt": lambda: gmpy2.sqrt(v[0]), "fma": lambda: gmpy2.fma(*v)}[op]()
    return float(r)


@needs_ld
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fkey", ["fp16", "bf16", "fp32", "e5m2", "e11m20", "e11m10"])
def test_long_double_operands_against_mpfr(fkey, op):
    fmt = FORMATS[fkey]
    cols = _columns(op, fmt, 40)
    for mode in MPFR_MODES:
        got = FUNCS[op](*cols, fmt, mode)
        for i in range(got.size):
            want = _mpfr(op, [c[i] for c in cols], fmt, mode)
            assert _same(float(got[i]), want), (
                f"{op}{tuple(repr(c[i]) for c in cols)} in {fmt.name} {mode}: got "
                f"{float(got[i])!r}, MPFR {want!r}")


@needs_ld
@pytest.mark.parametrize("fkey", ["fp16", "bf16", "e11m20"])
def test_long_double_stochastic_rounds_the_converted_operands(fkey):
    """Stochastic rounding of an op on long doubles: the same draws as on the operands
    converted by the Fraction reference (float64 values of the format)."""
    fmt = FORMATS[fkey]
    for op in OPS:
        if op == "fma" and fmt.precision_bits > 26:
            continue
        cols = _columns(op, fmt, 32)
        conv = [np.array([_converted(v, fmt, {}) for v in c]) for c in cols]
        got = FUNCS[op](*cols, fmt, "stochastic", rng=7)
        want = FUNCS[op](*conv, fmt, "stochastic", rng=7)
        assert _same_arrays(got, want), op


def test_scalars_mixed_with_arrays_and_the_issue_examples():
    big = LD("1e4000")
    # The operands convert first (nearest even, silently): 1e4000 is inf in fp16, as 1e300
    # is, and inf + inf is exact. With overflow="saturate" they convert to 65504 and the
    # sum overflows.
    for x in (big, 1e300):
        assert arithmetic.add(x, x, "fp16", flags=True) == (np.inf, 0)
        v, f = arithmetic.add(x, x, "fp16", overflow="saturate", flags=True)
        assert (float(v), int(f)) == (65504.0, int(fpsim.Flags.OVERFLOW | fpsim.Flags.INEXACT))
    one = LD(1)
    x = np.ldexp(one, -1043) + np.ldexp(one, -1100)  # just above a tie of e11m20's subnormals
    f = FORMATS["e11m20"]
    assert float(arithmetic.mul(x, 1.0, f)) == 2.0**-1042 == float(fpsim.round(x, f))
    a = np.array([one + np.ldexp(one, -11) + np.ldexp(one, -63)] * 3)  # just above a tie
    assert arithmetic.add(a, 0.0, "fp16").tolist() == [1.0 + 2**-10] * 3
    assert float(arithmetic.mul(a[0], 1.0, "fp16")) == 1.0 + 2**-10


def _wide_ints():
    base = [2**53 + 1, 2**60 + 2**49 + 1, -(2**62) - 2**38, 2**63 - 1, -(2**63),
            2**100 + 1, -(2**100) - 2**76 - 1, 2**1030 + 1, 3**700]
    return base


@pytest.mark.parametrize("fkey", ["fp16", "bf16", "fp32", "e4m3", "e11m20"])
def test_wide_integers_fractions_and_decimals(fkey):
    """Python ints, int64 arrays beyond 2**53, Fractions and Decimals: converted exactly."""
    fmt = FORMATS[fkey]
    cases = _wide_ints() + [Fraction(1, 3), Fraction(-(2**70) + 1, 2**71), Decimal("0.1"),
                            Decimal("-1e999"), Decimal("1e-999")]
    for x in cases:
        want_x = round_exact(Fraction(x), fmt, "nearest_even", negative_zero=Fraction(x) < 0)[0]
        for mode in MODES:
            got, fl = arithmetic.add(x, 0.5, fmt, mode, flags=True)
            want, wfl = reference("add", [want_x, _converted(0.5, fmt, {})], fmt, mode, {})
            assert _same(float(got), want) and int(fl) == wfl, (x, mode, got, want)
    ints = np.array([v for v in _wide_ints() if -(2**63) <= v < 2**63], dtype=np.int64)
    for mode in MODES:
        got = arithmetic.mul(ints, 1.0, fmt, mode)
        want = [reference("mul", [round_exact(Fraction(int(v)), fmt)[0], 1.0], fmt, mode, {})[0]
                for v in ints]
        assert _same_arrays(got, want), mode


def test_reductions_take_long_doubles_exactly():
    """sum and dot convert their operands the same way (one shared conversion)."""
    one = LD(1)
    x = np.array([np.ldexp(one, -1043) + np.ldexp(one, -1100)] * 4)
    f = FORMATS["e11m20"]
    assert float(fpsim.sum(x, f)) == 4 * 2.0**-1042
    assert float(fpsim.dot(x, np.ones(4), f)) == 4 * 2.0**-1042


@pytest.mark.parametrize("fkey", ["fp16", "bf16", "fp32", "e11m20"])
def test_uint64_operands_beyond_2_63(fkey):
    fmt = FORMATS[fkey]
    u = np.array([2**64 - 1, 2**63 + 2**39 + 1, 2**53 + 1, 2**63], dtype=np.uint64)
    for mode in MODES:
        got = arithmetic.add(u, 0.0, fmt, mode)
        want = [reference("add", [round_exact(Fraction(int(v)), fmt)[0], 0.0], fmt, mode,
                          {})[0] for v in u]
        assert _same_arrays(got, want), mode
