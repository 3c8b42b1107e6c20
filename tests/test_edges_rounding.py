"""Rounding at the edges (issue 15): each defect found there as a class, against independent
references: the exact Fraction rounding of tests/exact.py (every mode and policy, the flags)
and MPFR through gmpy2 (values of the IEEE modes MPFR has).

- formats of 50, 51 and 52 mantissa bits other than float64 itself (the kernel's "drop 0 bits"
  case added one ulp in the nearest modes);
- inputs beyond float64: long doubles far outside its range and just inside its subnormals
  (false ties), 64-bit integers, Python ints, Fractions, Decimals and decimal strings, all
  rounded once (:func:`fpsim.rounding.round_rational`);
- NaN into formats without NaN, ragged and junk input: one rule, clear errors;
- memory: round and cast hold the input, the output and one chunk (tracemalloc).
"""

from __future__ import annotations

import math
import tracemalloc
from decimal import Decimal
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

import fpsim
from fpsim.flags import Flags
from fpsim.rounding import round_rational
from tests.exact import MODES, round_exact, same

RNG = np.random.default_rng(20261203)


def check_exact(xs, got, fl, fmt, mode, **kw):
    """Each got/flag against the exact rounding of the exact input value."""
    for x, g, f in zip(xs, np.ravel(got), np.ravel(fl), strict=True):
        want, want_fl = round_exact(x, fmt, mode, **kw)
        assert same(float(g), want) and int(f) == want_fl, (
            f"{fmt.name} {mode} {kw}: x={x!r} gave {float(g)!r} {Flags(int(f))!r}, exact "
            f"{want!r} {Flags(want_fl)!r}")


# ---------------------------------------------------------------------------------------
# 1. Wide formats: 50, 51 and 52 mantissa bits (not only float64 itself)
# ---------------------------------------------------------------------------------------

WIDE_FORMATS = [
    fpsim.Format(10, 52),
    fpsim.Format(11, 52, subnormals=False),
    fpsim.Format(9, 52, nan_encoding="fn"),
    fpsim.Format(10, 52, nan_encoding="fnuz", bias=512),
    fpsim.Format(10, 52, nan_encoding="none"),
    fpsim.Format(11, 51),
    fpsim.Format(10, 51, nan_encoding="fn"),
    fpsim.Format(11, 50),
    fpsim.Format(10, 52, bias=300),
]


def wide_inputs(fmt) -> np.ndarray:
    """Values of the format with odd and even significands, the midpoints and quarter points
    of the format's own grid (where float64 can hold them), max, tiny, the subnormals, random
    float64 patterns, both signs."""
    tiny, big, eps = fmt.smallest_normal, fmt.max, fmt.eps
    q = fmt.smallest_subnormal if fmt.subnormals else tiny * eps
    base = [1.0, 1 + eps, 1 + 2 * eps, 1 + 3 * eps, 1 - eps / 2, 2 - eps, big, big / 2,
            big * (1 - eps), tiny, tiny * (1 + eps), tiny * (1 + 3 * eps), tiny - q, q, 2 * q,
            3 * q, 5e-324, 2.0**-1022, 2.0**-1022 + 5e-324 * 3, 2.0**1023, 1.5 * 2.0**1023,
            np.finfo(np.float64).max, 0.0]
    if fmt.mantissa_bits < 52:
        base += [1 + eps / 2, 1 + 3 * eps / 2, 1 + eps / 4, 1 + 3 * eps / 4, big * (1 + eps / 4),
                 big * (1 + eps / 2) if fmt.has_infinity else big, tiny * (1 + eps / 2)]
    x = np.array(base, dtype=np.float64)
    with np.errstate(over="ignore"):
        x = np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)])
    pats = RNG.integers(0, 0x7FF0 << 48, 150, dtype=np.uint64).view(np.float64)
    x = np.concatenate([x[np.isfinite(x)], pats])
    return np.concatenate([x, -x, [np.inf, -np.inf, np.nan]])


@pytest.mark.parametrize("fmt", WIDE_FORMATS, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_wide_formats_every_mode_against_exact(fmt, mode):
    x = wide_inputs(fmt)
    got, fl = fpsim.round(x, fmt, mode, flags=True)
    check_exact([float(v) for v in x], got, fl, fmt, mode)
    if mode in ("nearest_even", "nearest_away"):
        assert float(fpsim.round(fmt.max, fmt, mode)) == fmt.max  # stays in the format


@pytest.mark.parametrize("subnormals", ["keep", "flush", "daz", "flush_daz"])
@pytest.mark.parametrize("overflow", ["inf", "saturate"])
@pytest.mark.parametrize("mode", MODES)
def test_fp64_every_policy_against_exact(subnormals, overflow, mode):
    x = wide_inputs(fpsim.FP64)
    kw = dict(subnormals=subnormals, overflow=overflow)
    got, fl = fpsim.round(x, fpsim.FP64, mode, flags=True, **kw)
    check_exact([float(v) for v in x], got, fl, fpsim.FP64, mode, **kw)


def test_wide_format_examples_of_the_issue():
    assert fpsim.round(1 + 2**-52, "fp64", subnormals="daz") == 1 + 2**-52
    assert fpsim.round(1.0, fpsim.Format(10, 52), "nearest_away") == 1.0


# ---------------------------------------------------------------------------------------
# 2. Inputs beyond float64: long double, 64-bit and Python integers, rationals
# ---------------------------------------------------------------------------------------

LD = np.longdouble
HAS_LONG_DOUBLE = np.finfo(LD).nmant > 52
needs_ld = pytest.mark.skipif(not HAS_LONG_DOUBLE, reason="long double is float64 here")

EDGE_FORMATS = [fpsim.FP16, fpsim.BF16, fpsim.FP32, fpsim.FP8_E4M3, fpsim.FP8_E5M2FNUZ,
                fpsim.FP4_E2M1, fpsim.FP64, fpsim.Format(11, 51), fpsim.Format(10, 52),
                fpsim.Format(11, 52, subnormals=False)]


def long_doubles() -> np.ndarray:
    """Far beyond float64 both ways, float64's subnormal range with extra bits (the false
    ties), values just off float64 midpoints, and ordinary values with 64-bit significands."""
    one = LD(1)
    vals = [LD("1e4000"), LD("-1e4000"), LD("1e-4000"), LD("-1e-4000"), LD("3e-330"),
            np.ldexp(one, -1021) + np.ldexp(one, -1074) + np.ldexp(one, -1084),
            np.ldexp(one, -1021) + np.ldexp(one, -1074) - np.ldexp(one, -1084),
            np.ldexp(one, -1021) + np.ldexp(one, -1074),
            np.ldexp(one, -1075), np.ldexp(one, -1075) + np.ldexp(one, -1090),
            np.ldexp(one, -1076), np.ldexp(one, 1024), np.ldexp(one, 1024) - np.ldexp(one, 960),
            LD(np.finfo(np.float64).max) + np.ldexp(one, 969),
            LD(np.finfo(np.float64).max) + np.ldexp(one, 970),
            one + np.ldexp(one, -53) + np.ldexp(one, -63), one + np.ldexp(one, -53),
            one + np.ldexp(one, -11) - np.ldexp(one, -63), LD(65520) - np.ldexp(one, -50),
            np.ldexp(one, -25) + np.ldexp(one, -80), np.ldexp(one, -16400), LD(0), -LD(0)]
    sig = RNG.integers(1 << 62, 1 << 63, 300, dtype=np.int64).astype(LD)
    ex = RNG.integers(-1200, 1100, 300)
    rnd = np.ldexp(sig, ex - 62) * np.where(RNG.random(300) < 0.5, -1, 1)
    return np.concatenate([np.array(vals, dtype=LD), rnd])


def ld_fraction(v) -> Fraction:
    return Fraction(*LD(v).as_integer_ratio())


@needs_ld
@pytest.mark.parametrize("fmt", EDGE_FORMATS, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_long_double_every_mode_against_exact(fmt, mode):
    x = long_doubles()
    got, fl = fpsim.round(x, fmt, mode, flags=True)
    xs = [ld_fraction(v) for v in x]
    for v, xf, g, f in zip(x, xs, got, fl, strict=True):
        want, want_fl = round_exact(xf, fmt, mode, negative_zero=bool(np.signbit(v)))
        assert same(float(g), want) and int(f) == want_fl, (fmt.name, mode, repr(v), g, f)


@needs_ld
@pytest.mark.parametrize("subnormals", ["flush", "daz"])
@pytest.mark.parametrize("tininess", ["after", "before"])
def test_long_double_policies_against_exact(subnormals, tininess):
    x = long_doubles()
    for fmt in (fpsim.FP16, fpsim.FP64, fpsim.FP8_E4M3):
        for mode in ("nearest_even", "up", "toward_zero"):
            kw = dict(subnormals=subnormals, tininess=tininess, overflow="saturate")
            got, fl = fpsim.round(x, fmt, mode, flags=True, **kw)
            for v, g, f in zip(x, got, fl, strict=True):
                want, want_fl = round_exact(ld_fraction(v), fmt, mode,
                                            negative_zero=bool(np.signbit(v)), **kw)
                assert same(float(g), want) and int(f) == want_fl, (fmt.name, mode, kw, v)


@needs_ld
def test_long_double_examples_of_the_issue():
    assert float(fpsim.round(LD("1e4000"), "fp16", "toward_zero")) == 65504.0
    v, f = fpsim.round(LD("1e-4000"), "fp16", "up", flags=True)
    assert float(v) == 2.0**-24 and Flags(int(f)) == Flags.INEXACT | Flags.UNDERFLOW
    x = np.ldexp(LD(1), -1021) + np.ldexp(LD(1), -1074) + np.ldexp(LD(1), -1084)
    assert float(fpsim.round(x, "fp64")) == 2.0**-1021 + 2.0**-1073  # above the midpoint
    specials = np.array([np.inf, -np.inf, np.nan], dtype=LD)
    assert np.array_equal(fpsim.round(specials, "fp16"), [np.inf, -np.inf, np.nan],
                          equal_nan=True)


def test_int64_and_python_ints_every_mode_against_exact():
    ints = [2**63 - 1, -2**63, 2**53 + 1, -(2**53 + 3), 2**62 + 2**10 + 1, 3, 0, -7,
            *RNG.integers(-2**63, 2**63 - 1, 100, dtype=np.int64).tolist()]
    arr = np.array(ints, dtype=np.int64)
    uarr = np.array([2**64 - 1, 2**63 + 2**11 + 1, 2**60 - 1], dtype=np.uint64)
    big = [2**1024 - 2**970, 2**1024, -(2**2000 + 1), 2**70 + 1, 65520 * 2**0, 2**53 + 1]
    for fmt in (fpsim.FP16, fpsim.BF16, fpsim.FP32, fpsim.FP64, fpsim.Format(10, 52),
                fpsim.Format(11, 51), fpsim.FP8_E4M3):
        for mode in MODES:
            got, fl = fpsim.round(arr, fmt, mode, flags=True)
            check_exact(ints, got, fl, fmt, mode)
            got, fl = fpsim.round(uarr, fmt, mode, flags=True)
            check_exact([int(v) for v in uarr], got, fl, fmt, mode)
            for b in big:
                g, f = fpsim.round(b, fmt, mode, flags=True)
                check_exact([b], [g], [f], fmt, mode)


# ---------------------------------------------------------------------------------------
# 3. round_rational: one exact rounding of any rational, against MPFR and exact Fractions
# ---------------------------------------------------------------------------------------

MPFR_MODES = {"nearest_even": gmpy2.RoundToNearest, "toward_zero": gmpy2.RoundToZero,
              "up": gmpy2.RoundUp, "down": gmpy2.RoundDown}
IEEE_FORMATS = [fpsim.FP16, fpsim.BF16, fpsim.FP32, fpsim.TF32, fpsim.FP8_E5M2, fpsim.FP64,
                fpsim.Format(11, 51), fpsim.Format(3, 4), fpsim.Format(10, 52)]


def mpfr_round(x: Fraction, fmt, mode: str) -> float:
    """MPFR's rounding of x (precision p, the format's exponent range, subnormalized); IEEE
    formats only, overflow to inf or max as the mode says."""
    ctx = gmpy2.context(precision=fmt.precision_bits, emin=fmt.emin - fmt.mantissa_bits + 1,
                        emax=fmt.emax + 1, subnormalize=True, round=MPFR_MODES[mode])
    with ctx:
        v = gmpy2.mpfr(gmpy2.mpq(x.numerator, x.denominator))
    return float(v) if v != 0 or x >= 0 else -0.0


def random_rationals(n: int) -> list[Fraction]:
    """Decimal strings with up to 40 digits and exponents far beyond float64 both ways, and
    ratios of big integers."""
    out = []
    for _ in range(n):
        digits = "".join(str(d) for d in RNG.integers(0, 10, int(RNG.integers(1, 41))))
        e = int(RNG.integers(-420, 420))
        s = "-" if RNG.random() < 0.5 else ""
        out.append(Fraction(f"{s}{digits}e{e}"))
        num = int(RNG.integers(1, 2**62)) * 2**int(RNG.integers(0, 200)) + 1
        out.append(Fraction(num, int(RNG.integers(1, 2**62)) * 2**int(RNG.integers(0, 1200))))
    return out + [Fraction(65519), Fraction(65520), Fraction(2**100 - 1), Fraction(1, 3),
                  Fraction(1, 2**1075), Fraction(3, 2**1076), Fraction(10)**999]


@pytest.mark.parametrize("fmt", IEEE_FORMATS, ids=str)
def test_round_rational_against_mpfr(fmt):
    xs = random_rationals(150)
    for mode in MPFR_MODES:
        for x in xs:
            got = float(round_rational(x, fmt, mode))
            want = mpfr_round(x, fmt, mode)
            assert same(got, want), (fmt.name, mode, x, got, want)


@pytest.mark.parametrize("fmt", EDGE_FORMATS + [
    fpsim.FP8_E4M3FNUZ, fpsim.FP6_E3M2, fpsim.Format(5, 2, bias=3),
    fpsim.Format(2, 4, nan_encoding="fnuz", bias=1), fpsim.Format(4, 3, subnormals=False),
    fpsim.Format(11, 10), fpsim.Format(3, 0, nan_encoding="fn")], ids=str)
def test_round_rational_every_mode_and_policy_against_exact(fmt):
    xs = random_rationals(20)
    for mode in MODES:
        for kw in ({}, {"overflow": "saturate", "tininess": "before"}, {"subnormals": "flush"},
                   {"subnormals": "daz"}):
            for x in xs:
                got, fl = round_rational(x, fmt, mode, flags=True, **kw)
                check_exact([x], [got], [fl], fmt, mode, **kw)


def test_round_rational_inputs():
    """Strings, Decimals, floats and ints read exactly; round() takes Fractions and Decimals;
    signed zeros, infinities and NaNs keep their meaning; junk is refused by name."""
    assert float(round_rational("1267650600228229401496703205375", "fp32", "toward_zero")) \
        == float(Fraction(2**100 - 2**76))
    assert float(round_rational("0.1", "fp64")) == 0.1
    assert float(round_rational(Decimal("0.1"), "fp16")) == float(fpsim.round(0.1, "fp16"))
    assert math.copysign(1, round_rational("-0", "fp16")) == -1
    assert math.copysign(1, round_rational("-1e-999", "fp16")) == -1
    assert float(round_rational("-inf", "fp16")) == -math.inf
    assert math.isnan(round_rational("nan", "bf16"))
    assert float(round_rational(1 / 3, "fp16")) == float(fpsim.round(1 / 3, "fp16"))
    assert float(fpsim.round(Fraction(1, 3), "fp16")) == float(fpsim.round(1 / 3, "fp16"))
    assert float(fpsim.round(Decimal("1e999"), "fp16", "down")) == 65504.0
    with pytest.raises(ValueError, match="decimal number"):
        round_rational("0.1.2", "fp16")
    with pytest.raises(TypeError, match="Fraction"):
        round_rational([0.1], "fp16")
    a = fpsim.round([0.1] * 8, "bf16", "stochastic", rng=1)
    b = [float(round_rational(Fraction(0.1), "bf16", "stochastic", rng=np.random.default_rng(1)))
         for _ in range(1)]
    assert set(b) <= set(a.tolist())


# ---------------------------------------------------------------------------------------
# 5. One rule for NaN into formats without NaN; clear errors for bad input
# ---------------------------------------------------------------------------------------

NO_NAN_FORMATS = [fpsim.FP6_E2M3, fpsim.FP6_E3M2, fpsim.FP4_E2M1,
                  fpsim.Format(3, 3, nan_encoding="none"), fpsim.Format(4, 0, nan_encoding="none")]


@pytest.mark.parametrize("fmt", NO_NAN_FORMATS, ids=str)
def test_nan_into_a_format_without_nan(fmt):
    """round: NaN with INVALID (the exact reference's rule); cast and to_bits, which need a
    pattern, refuse it by name; infinities saturate to max with INEXACT everywhere."""
    x = np.array([1.0, np.nan, -np.nan])
    v, fl = fpsim.round(x, fmt, flags=True)
    for xi, vi, fi in zip(x, v, fl, strict=True):
        want, want_fl = round_exact(float(xi), fmt)
        assert same(float(vi), want) and int(fi) == want_fl
    for fn in (fpsim.cast, fpsim.to_bits):
        for bad in (x, np.nan, np.float32(np.nan), [[0.5, np.nan]]):
            with pytest.raises(ValueError, match=f"NaN, which {fmt.name} cannot encode"):
                fn(bad, fmt)
    inf = np.array([np.inf, -np.inf])
    assert np.array_equal(fpsim.cast(inf, fmt).astype(np.float64), [fmt.max, -fmt.max])
    assert np.array_equal(fpsim.from_bits(fpsim.to_bits(inf, fmt), fmt), [fmt.max, -fmt.max])
    v, fl = fpsim.round(inf, fmt, flags=True)
    assert np.array_equal(v, [fmt.max, -fmt.max]) and set(fl) == {Flags.INEXACT}


@pytest.mark.parametrize("fmt", [fpsim.FP16, fpsim.BF16, fpsim.FP8_E4M3, fpsim.FP8_E5M2FNUZ],
                         ids=str)
def test_nan_into_formats_with_nan_is_kept(fmt):
    assert np.isnan(fpsim.cast([np.nan], fmt).astype(np.float64)).all()
    assert np.isnan(fpsim.from_bits(fpsim.to_bits(np.nan, fmt), fmt))


def test_ragged_and_junk_input_is_refused_by_name():
    ragged = [[1.0, 2.0], [3.0]]
    for fn in (lambda x: fpsim.round(x, "fp16"), lambda x: fpsim.cast(x, "bf16"),
               lambda x: fpsim.to_bits(x, "fp16"), lambda x: fpsim.round(x, "fp16", flags=True)):
        with pytest.raises(ValueError, match="x must be a number or a rectangular array"):
            fn(ragged)
        with pytest.raises(TypeError, match="x must hold real numbers"):
            fn([1.0, None])
    with pytest.raises(TypeError, match="cast.. got unexpected keyword arguments"):
        fpsim.cast(1.0, "fp16", rouding="up")


# ---------------------------------------------------------------------------------------
# 6. Memory: round and cast hold the input, the output and one chunk
# ---------------------------------------------------------------------------------------


def peak_bytes(fn) -> tuple[int, object]:
    fn()  # warm caches (format parameters, generators)
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("src", [np.float64, np.float32])
def test_round_and_cast_memory_is_output_plus_one_chunk(src):
    n = 10**6
    x = np.random.default_rng(0).standard_normal(n).astype(src)
    chunk = 16 * fpsim.rounding.CHUNK * 8  # generous: a few dozen chunk-sized temporaries
    for fn, out_bytes in [(lambda: fpsim.round(x, "bf16"), 8 * n),
                          (lambda: fpsim.round(x, "fp16", "stochastic", rng=0), 8 * n),
                          (lambda: fpsim.round(x, "fp8_e4m3", flags=True), 9 * n),
                          (lambda: fpsim.cast(x, "bf16"), 2 * n),
                          (lambda: fpsim.cast(x, "fp8_e5m2"), n)]:
        peak, out = peak_bytes(fn)
        assert peak <= out_bytes + chunk, (peak, out_bytes)
    # before: cast held a float64 copy of the whole result beside its output
    peak, _ = peak_bytes(lambda: fpsim.cast(x, "fp16"))
    assert peak < 8 * n


def test_stochastic_rounding_of_wide_inputs_has_the_exact_probability():
    """Long doubles, int64 beyond 2**53 and Fractions round up with probability (distance to
    the value below) / spacing, the exact Fraction; with random_bits, floor(p * 2**r) / 2**r."""
    def near(count, p, n):
        return abs(count - p * n) <= 5 * math.sqrt(n * p * (1 - p)) + 1

    n = 40_000
    gen = np.random.default_rng(5)
    cases = [(fpsim.FP16, Fraction(1) + Fraction(1, 3) * 2**-10, Fraction(1), 2.0**-10)]
    if HAS_LONG_DOUBLE:
        x = LD(1) + LD(1) / LD(3) * np.ldexp(LD(1), -10)
        cases.append((fpsim.FP16, x, Fraction(1), 2.0**-10))
        y = np.ldexp(LD(5), -1080) / LD(3)  # below float64's smallest subnormal
        cases.append((fpsim.FP64, y, Fraction(0), 2.0**-1074))
    cases.append((fpsim.BF16, np.int64(2**62 + 2**53 + 12345), Fraction(2**62), 2.0**55))
    for fmt, x, below, q in cases:
        exact = ld_fraction(x) if isinstance(x, LD) else Fraction(int(x)) if isinstance(
            x, np.integer) else x
        p = (exact - below) / Fraction(q)
        arr = np.full(n, x) if not isinstance(x, Fraction) else None
        for bits in (None, 4):
            if arr is None:
                got = np.array([float(round_rational(x, fmt, "stochastic", rng=gen,
                                                     random_bits=bits)) for _ in range(2000)])
            else:
                got = fpsim.round(arr, fmt, "stochastic", rng=gen, random_bits=bits)
            assert set(np.unique(got)) <= {float(below), float(below) + q}
            want = p if bits is None else Fraction(math.floor(p * 16), 16)
            assert near(int((got > float(below)).sum()), float(want), got.size), (fmt, x, bits)


def test_ragged_input_is_refused_by_name_in_every_layer():
    """The same rule (checks.as_array) where the integer and encoding layers take arrays: a
    ragged list is a ValueError naming the argument, not NumPy's from deep inside."""
    ragged = [1.0, [2.0]]
    for fn, name in ((lambda v: fpsim.from_bits(v, "fp16"), "bits"),
                     (lambda v: fpsim.to_int(v, "int8"), "x"),
                     (lambda v: fpsim.integer.add(v, 1, "int8"), "operands of integer.add"),
                     (lambda v: fpsim.integer.mul(1, v, "int8"), "operands of integer.mul"),
                     (lambda v: fpsim.integer.dp4a(v, [1, 2, 3, 4], 0), "")):
        with pytest.raises(ValueError, match=f"{name}.*must be a number or a rectangular"):
            fn(ragged)


@pytest.mark.parametrize("call, op", [
    (lambda a, b: fpsim.add(a, b, "fp16"), "add"),  # the native float16 path
    (lambda a, b: fpsim.sub(a.astype(np.float32), b, "fp32"), "sub"),
    (lambda a, b: fpsim.mul(a, b, "fp8_e4m3"), "mul"),  # the emulated path
    (lambda a, b: fpsim.add(a, np.zeros(70000), "fp8_e4m3"), "add"),  # the chunked path
    (lambda a, b: fpsim.fma(a, b, 1.0, "bf16"), "fma"),
    (lambda a, b: fpsim.dot(a, b, "bf16"), "dot"),
    (lambda a, b: fpsim.round_pair(a, b, "fp16"), "round_pair"),
])
def test_shapes_that_do_not_broadcast_name_the_operation(call, op):
    a, b = np.zeros(3), np.zeros(4)
    with pytest.raises(ValueError, match=rf"^{op}: operands could not be broadcast together "
                                         r"with shapes \(3,\)"):
        call(a, b)


def test_axis_beyond_any_array_and_bad_separator():
    for fn in (lambda: fpsim.sum(np.ones(3), "fp16", axis=10**30),
               lambda: fpsim.dot(np.ones(3), np.ones(3), "fp16", axis=-(10**30))):
        with pytest.raises(np.exceptions.AxisError, match="out of bounds for any array"):
            fn()
    with pytest.raises(TypeError, match="bit_string: sep must be a str, got NoneType"):
        fpsim.bit_string(1.0, "fp16", sep=None)
