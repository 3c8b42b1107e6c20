"""fpsim.arithmetic against NumPy / ml_dtypes arithmetic (fp16, bf16, fp8 and fp32 round to
nearest even), hand-derived IEEE special cases, stochastic rounding statistics against exact
probabilities, flags and the flag context, broadcasting, input types and error messages.

NumPy's float16 and ml_dtypes' bfloat16 / float8 arithmetic compute in float32 and round the
float32 result once more; float32 has at least 2p + 2 bits for all of them, so that double
rounding is innocuous (Figueroa 1995) and their results are correctly rounded references.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import Flags, arithmetic
from fpsim.arithmetic import add, div, fma, mul, sqrt, sub
from fpsim.flags import FloatingPointTrap
from tests.dtypes import dtypes

NATIVE = dtypes("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
UINT = {1: np.uint8, 2: np.uint16}


def assert_same(got, want):
    """Equal bit for bit as float64 (signed zeros included), NaN equal to NaN."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape
    nan = np.isnan(want)
    bad = np.flatnonzero((np.isnan(got) != nan) | (~nan & (got.view(np.uint64)
                                                           != want.view(np.uint64))))
    assert bad.size == 0, (f"{bad.size} differ; first at {bad[0]}: got {got.flat[bad[0]]!r}, "
                           f"want {want.flat[bad[0]]!r}")


def _patterns(fmt_name: str, n: int, seed: int = 0) -> np.ndarray:
    """n patterns of a 16-bit format: every exponent with edge mantissas, then random."""
    fmt = fpsim.get_format(fmt_name)
    m = fmt.mantissa_bits
    edges = np.array([0, 1, 2, (1 << m) - 1, (1 << m) - 2, 1 << (m - 1)], np.uint64)
    e = np.arange(1 << fmt.exponent_bits, dtype=np.uint64)
    pats = ((e[:, None] << np.uint64(m)) | edges[None, :]).reshape(-1)
    pats = np.concatenate([pats, pats | np.uint64(1 << (fmt.bits - 1))])
    rng = np.random.default_rng(seed)
    pats = rng.permutation(pats)[: n // 2]
    extra = rng.integers(0, 1 << fmt.bits, n - pats.size, dtype=np.uint64)
    return np.concatenate([pats, extra]).astype(np.uint16)


@pytest.mark.parametrize("fmt_name", ["fp16", "bf16"])
def test_grid_equals_native_arithmetic(fmt_name):
    pats = _patterns(fmt_name, 2000)
    x = pats.view(NATIVE[fmt_name])
    a, b = np.meshgrid(x, x, indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    with np.errstate(all="ignore"):
        cases = [(add, a + b), (sub, a - b), (mul, a * b), (div, a / b)]
        for op, want in cases:
            assert_same(op(a, b, fmt_name), want.astype(np.float64))
        assert_same(sqrt(x, fmt_name), np.sqrt(x).astype(np.float64))
        # float64 operands take the conversion path and give the same
        assert_same(add(a.astype(np.float64)[:5000], b.astype(np.float64)[:5000], fmt_name),
                    (a[:5000] + b[:5000]).astype(np.float64))


@pytest.mark.parametrize("fmt_name", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_all_pairs_equal_ml_dtypes(fmt_name):
    x = np.arange(256, dtype=np.uint8).view(NATIVE[fmt_name])
    a, b = np.meshgrid(x, x, indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    with np.errstate(all="ignore"):
        for op, want in [(add, a + b), (sub, a - b), (mul, a * b), (div, a / b)]:
            assert_same(op(a, b, fmt_name), want.astype(np.float64))
        assert_same(sqrt(x, fmt_name), np.sqrt(x).astype(np.float64))


def test_fp32_equals_hardware_float32():
    rng = np.random.default_rng(1)
    n = 200_000
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(n) * np.exp2(rng.integers(-150, 128, n))).astype(np.float32)
        y = (rng.standard_normal(n) * np.exp2(rng.integers(-150, 128, n))).astype(np.float32)
    y[::7] = x[::7] * np.float32(1 + 2.0**-23)  # cancellation
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.4e-45, 3.4e38], np.float32)
    x[:7], y[7:14] = specials, specials
    with np.errstate(all="ignore"):
        for op, want in [(add, x + y), (sub, x - y), (mul, x * y), (div, x / y)]:
            assert_same(op(x, y, "fp32"), want.astype(np.float64))
        assert_same(sqrt(np.abs(x), "fp32"), np.sqrt(np.abs(x)).astype(np.float64))


# -- IEEE special cases, by hand ----------------------------------------------------------------

MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd", "stochastic"]


@pytest.mark.parametrize("mode", MODES)
def test_exact_zero_signs(mode):
    neg = mode == "down"
    for fmt in ["fp16", "bf16", fpsim.Format(11, 10)]:
        z = add(1.5, -1.5, fmt, mode)
        assert z == 0 and bool(np.signbit(z)) == neg
        assert np.signbit(sub(0.0, 0.0, fmt, mode)) == neg
        assert np.signbit(add(-0.0, -0.0, fmt, mode))  # both -0: -0 in every mode
        assert not np.signbit(add(0.0, 0.0, fmt, mode))
        assert np.signbit(mul(-0.0, 3.0, fmt, mode)) and np.signbit(div(0.0, -3.0, fmt, mode))
        assert np.signbit(sqrt(-0.0, fmt, mode))
        assert np.signbit(fma(2.0, -3.0, 6.0, fmt, mode)) == neg
        assert np.signbit(fma(-0.0, 1.0, -0.0, fmt, mode))


def test_invalid_and_divide_by_zero():
    inf, nan = math.inf, math.nan
    cases = [
        (add, (inf, -inf), Flags.INVALID), (sub, (inf, inf), Flags.INVALID),
        (mul, (0.0, inf), Flags.INVALID), (div, (0.0, 0.0), Flags.INVALID),
        (div, (inf, -inf), Flags.INVALID), (sqrt, (-1.0,), Flags.INVALID),
        (sqrt, (-inf,), Flags.INVALID), (fma, (0.0, inf, 1.0), Flags.INVALID),
        (fma, (0.0, inf, nan), Flags.INVALID), (fma, (inf, 2.0, -inf), Flags.INVALID),
        (div, (1.0, 0.0), Flags.DIVBYZERO), (div, (-2.0, -0.0), Flags.DIVBYZERO),
        (div, (inf, 0.0), Flags.NONE), (add, (nan, 1.0), Flags.NONE),
        (mul, (nan, 0.0), Flags.NONE), (sqrt, (inf,), Flags.NONE),
    ]
    for op, args, want in cases:
        v, f = op(*args, "fp16", flags=True)
        assert Flags(int(f)) == want, (op.__name__, args)
        if want == Flags.DIVBYZERO:
            assert np.isinf(v)
        elif want == Flags.INVALID:
            assert np.isnan(v)


def test_signalling_nans_raise_invalid():
    snan32 = np.array([0x7F800001, 0x7FC00000], np.uint32).view(np.float32)  # sNaN, qNaN
    _, f = add(snan32, np.float32(1.0), "fp32", flags=True)
    assert list(f) == [Flags.INVALID, 0]
    snan16 = fpsim.from_bits(np.array([0x7C01, 0x7E00], np.uint16), "fp16")  # kept in float64
    _, f = mul(snan16, 2.0, "fp16", flags=True)
    assert list(f) == [Flags.INVALID, 0]
    _, f = sqrt(np.array([0x7D00, 0x7E00], np.uint16).view(np.float16), "fp16", flags=True)
    assert list(f) == [Flags.INVALID, 0]
    snan_bf = np.array([0x7F81], np.uint16).view(ml_dtypes.bfloat16)
    _, f = fma(snan_bf, 1.0, 1.0, "bf16", flags=True)
    assert list(f) == [Flags.INVALID]


def test_float64_wide_formats_by_hand():
    f = fpsim.Format(11, 10)  # emin -1022, smallest subnormal 2**-1032, max ~ 2**1024
    tiny = 2.0**-1032
    assert mul(2.0**-1000, 2.0**-32, f) == tiny
    v, fl = mul(2.0**-1000, 2.0**-33, f, flags=True)  # half the smallest subnormal: a tie
    assert v == 0 and fl == Flags.UNDERFLOW | Flags.INEXACT
    assert mul(2.0**-1000, 2.0**-33, f, "up") == tiny
    assert mul(2.0**-1000, -(2.0**-70), f, "down") == -tiny  # product below float64's range
    v, fl = mul(2.0**1000, 2.0**100, f, flags=True)  # beyond float64's range
    assert v == math.inf and fl == Flags.OVERFLOW | Flags.INEXACT
    assert mul(2.0**1000, 2.0**100, f, "toward_zero") == f.max
    assert add(f.max, f.max, f, "down") == f.max
    assert div(2.0**-1000, 2.0**600, f) == 0 and div(2.0**-1000, 2.0**600, f, "up") == tiny
    assert div(2.0**1000, 2.0**-600, f) == math.inf
    assert sqrt(tiny, f) == 2.0**-516
    assert fma(2.0**600, 2.0**600, -f.max, f) == math.inf
    assert fma(2.0**512, 2.0**511, -(2.0**1023), f) == 0.0  # the product is exactly 2**1023
    assert fma(2.0**-600, 2.0**-600, 1.0, f, "up") == 1.0 + 2.0**-10


def test_fp64_and_integer_formats_are_refused():
    with pytest.raises(ValueError, match="at most 50 mantissa bits"):
        add(1.0, 2.0, "fp64")
    with pytest.raises(TypeError, match="integer format"):
        add(1, 2, "int8")
    with pytest.raises(ValueError, match="26 precision bits"):
        fma(1.0, 1.0, 1.0, fpsim.Format(8, 30))


# -- stochastic rounding -------------------------------------------------------------------------


def _check_mean(samples, exact: Fraction, lo: float, hi: float):
    """Every sample is lo or hi and the mean equals the exact value within 6 standard errors:
    the share of hi is (exact - lo) / (hi - lo) (computed exactly)."""
    p = float((exact - Fraction(lo)) / (Fraction(hi) - Fraction(lo)))
    assert set(np.unique(samples)) <= {lo, hi}
    share = (samples == hi).mean()
    assert abs(share - p) <= 6 * math.sqrt(p * (1 - p) / samples.size), (share, p)


def test_stochastic_means_equal_exact_results():
    n = 100_000
    a = np.full(n, 1.0)
    # bf16: 1 + 3 * 2**-10 lies 3/8 of the way from 1 to 1 + 2**-7
    _check_mean(add(a, 3 * 2.0**-10, "bf16", "stochastic", rng=1), 1 + Fraction(3, 2**10),
                1.0, 1 + 2.0**-7)
    # fp32 fma: (1 + 2**-23)**2 - 1 = 2**-22 + 2**-46, half way between fp32 neighbours
    x = np.full(n, 1 + 2.0**-23)
    _check_mean(fma(x, x, -1.0, "fp32", "stochastic", rng=2), Fraction(1, 2**22) +
                Fraction(1, 2**46), 2.0**-22, 2.0**-22 + 2.0**-45)
    # fp16 product of 1 + 2**-10 with itself: 1 + 2**-9 + 2**-20, 1/1024 of an ulp up
    y = np.full(n, 1 + 2.0**-10)
    _check_mean(mul(y, y, "fp16", "stochastic", rng=3),
                (1 + Fraction(1, 2**10)) ** 2, 1 + 2.0**-9, 1 + 2.0**-9 + 2.0**-10)
    # division and sqrt: 1/3 and sqrt(2) in bf16
    _check_mean(div(a, 3.0, "bf16", "stochastic", rng=4), Fraction(1, 3),
                0.33203125, 0.333984375)
    s = sqrt(np.full(n, 2.0), "fp16", "stochastic", rng=5)
    assert set(np.unique(s)) == {1.4140625, 1.4150390625}
    assert abs(s.mean() - math.sqrt(2)) < 6 * 2**-10 * 0.5 / math.sqrt(n)


def test_stochastic_probability_comes_from_the_exact_result():
    """In a 51-bit format the product (1 + 2**-27)(1 + 2**-26 + 2**-27) = 1 + 2**-25 + 3*2**-54
    lies 3/16 of an ulp (2**-50) above 1 + 2**-25. Its float64 rounding, 1 + 2**-25 + 2**-52,
    lies 1/4 above: a probability taken from it would be visibly wrong."""
    f = fpsim.Format(8, 50)
    n = 200_000
    a = np.full(n, 1 + 2.0**-27)
    b = np.full(n, 1 + 2.0**-26 + 2.0**-27)
    lo, hi = 1 + 2.0**-25, 1 + 2.0**-25 + 2.0**-50
    exact = (1 + Fraction(1, 2**27)) * (1 + Fraction(1, 2**26) + Fraction(1, 2**27))
    assert (exact - Fraction(lo)) / Fraction(2.0**-50) == Fraction(3, 16)
    r = mul(a, b, f, "stochastic", rng=6)
    _check_mean(r, exact, lo, hi)
    assert abs((r == hi).mean() - 0.25) > 0.05  # what the float64-rounded product would give
    # the same exact sum from add, and 2 random bits: floor(3/16 * 4) = 0, never up (a
    # probability from the float64 value, 1/4, would round up a quarter of the time)
    _check_mean(add(np.full(n, lo), 3 * 2.0**-54, f, "stochastic", rng=7), exact, lo, hi)
    assert (mul(a, b, f, "stochastic", rng=8, random_bits=2) == lo).all()
    # division: 1/3 in the same format, against the exact fraction
    q = div(np.ones(n), 3.0, f, "stochastic", rng=9)
    lo3 = float(fpsim.round(1 / 3, f, "toward_zero"))
    _check_mean(q, Fraction(1, 3), lo3, lo3 + 2.0**-52)


# -- flags, context, shapes, inputs -------------------------------------------------------------


def test_flag_context_records_once_per_operation():
    x = np.array([1.0, 1.0 + 2.0**-10, 3.0, 60000.0])
    with fpsim.flag_context() as ctx:
        mul(x, x, "fp16")
    # 1*1 exact; (1 + 2**-10)**2 and 3*3 ... 9 exact; 60000**2 overflows
    assert ctx.counts[Flags.INEXACT] == 2 and ctx.counts[Flags.OVERFLOW] == 1
    with fpsim.flag_context() as ctx:
        add(0.1, 0.0, "fp16")  # the conversion of 0.1 is silent; 0.1h + 0 is exact
        div(1.0, 0.0, "fp16")
    assert ctx.flags == Flags.DIVBYZERO
    with pytest.raises(FloatingPointTrap, match="mul"):
        with fpsim.flag_context(trap="overflow"):
            mul(300.0, 300.0, "fp16")
    with pytest.raises(FloatingPointTrap, match="sqrt"):
        with fpsim.flag_context(trap=["invalid"]):
            sqrt(-1.0, "bf16")
    with fpsim.flag_context() as outer, fpsim.flag_context() as inner:
        add(1.0, 2.0**-30, "bf16", flags=True)
    assert outer.counts[Flags.INEXACT] == inner.counts[Flags.INEXACT] == 1


def test_underflow_flags_and_tininess():
    x = 1 + 2.0**-10  # x * 2**-16 * x = 2**-16 (1 + 2**-9 + 2**-20): inexact subnormal
    v, f = mul(x, 2.0**-16 * x, "fp16", flags=True)
    assert v < 2.0**-14 and f == Flags.INEXACT | Flags.UNDERFLOW
    # 2**-14 - 2**-34 rounds to 2**-14: tiny before rounding, not after
    v, f = mul(2.0**-7 + 2.0**-17, 2.0**-7 - 2.0**-17, "fp16", flags=True)
    assert v == 2.0**-14 and f == Flags.INEXACT  # after rounding: not tiny
    _, f = mul(2.0**-7 + 2.0**-17, 2.0**-7 - 2.0**-17, "fp16", tininess="before", flags=True)
    assert f == Flags.INEXACT | Flags.UNDERFLOW
    v, f = mul(2.0**-10, 2.0**-10, "fp16", subnormals="flush", flags=True)
    assert v == 0 and f == Flags.INEXACT | Flags.UNDERFLOW
    # daz: subnormal operands read as zero
    assert add(2.0**-20, 1.0, "fp16", "up") == 1 + 2.0**-10
    assert add(2.0**-20, 1.0, "fp16", "up", subnormals="daz") == 1.0
    assert add(np.float16(2.0**-20), np.float16(1.0), "fp16", "up", subnormals="daz") == 1.0


def test_broadcasting_scalars_and_inputs():
    r = add(np.ones((3, 1)), np.arange(4.0), "bf16")
    assert r.shape == (3, 4) and r.dtype == np.float64
    v, f = add(np.ones((2, 1)), [0.1, 0.2], "fp16", flags=True)
    assert v.shape == f.shape == (2, 2) and f.dtype == np.uint8
    s = add(1, 2, "fp16")
    assert isinstance(s, np.float64) and s == 3.0
    v, f = mul(3.0, 3.0, "fp16", flags=True)
    assert np.ndim(v) == 0 and np.ndim(f) == 0 and f == 0
    with pytest.raises(ValueError, match="broadcast"):
        add(np.ones(3), np.ones(4), "fp16")
    # operands are converted to the format first, round to nearest even (and overflow policy)
    assert add(0.1, 0.0, "fp16") == float(fpsim.round(0.1, "fp16"))
    assert add(1e6, -1e6 + 1, "fp16") != 1.0 and np.isnan(add(1e6, -1e6, "fp16"))
    assert add(1e6, -60000.0, "fp16", overflow="saturate") == 65504.0 - 60000.0
    assert add(2**60 + 1, 0, "fp32") == 2.0**60  # int64 beyond 2**53
    assert add(np.float32(1.5), np.array([1], np.int8), "fp16")[0] == 2.5
    bf = np.array([1.5, 2.5], ml_dtypes.bfloat16)
    np.testing.assert_array_equal(add(bf, bf, "bf16"), [3.0, 5.0])
    assert fma(2.0, 3.0, 1.0, "e4m3") == 7.0 and fma(2.0, 3.0, 1.0, "e4m3").shape == ()


def test_bad_input_messages():
    with pytest.raises(ValueError, match="unknown rounding mode"):
        add(1.0, 1.0, "fp16", "nearest_odd")
    with pytest.raises(ValueError, match="unknown format"):
        add(1.0, 1.0, "fp17")
    with pytest.raises(TypeError, match="complex"):
        add(1j, 1.0, "fp16")
    with pytest.raises(ValueError, match="random_bits only applies"):
        add(1.0, 1.0, "fp16", random_bits=8)
    with pytest.raises(ValueError, match="random_bits must be"):
        add(1.0, 1.0, "fp16", "stochastic", random_bits=0)
    with pytest.raises(ValueError, match="unknown overflow policy"):
        mul(1.0, 1.0, "fp16", overflow="clip")
    with pytest.raises(ValueError, match="unknown subnormals policy"):
        mul(1.0, 1.0, "fp16", subnormals="none")
    with pytest.raises(TypeError):
        add("a", 1.0, "fp16")


def test_general_path_matches_fast_path(monkeypatch):
    """The general path on the formats that normally take the fast one (bf16, all modes)."""
    rng = np.random.default_rng(4)
    x = np.asarray(fpsim.round(rng.standard_normal(3000) * np.exp2(rng.integers(-140, 120,
                                                                               3000)), "bf16"))
    y = np.asarray(fpsim.round(rng.standard_normal(3000) * np.exp2(rng.integers(-140, 120,
                                                                               3000)), "bf16"))
    for mode in MODES[:-1]:
        fast = [op(x, y, "bf16", mode, flags=True) for op in (add, mul, div)]
        fast.append(fma(x, y, x, "bf16", mode, flags=True))
        fast.append(sqrt(np.abs(x), "bf16", mode, flags=True))
        monkeypatch.setattr(arithmetic, "_FORCE_GENERAL", True)
        gen = [op(x, y, "bf16", mode, flags=True) for op in (add, mul, div)]
        gen.append(fma(x, y, x, "bf16", mode, flags=True))
        gen.append(sqrt(np.abs(x), "bf16", mode, flags=True))
        monkeypatch.setattr(arithmetic, "_FORCE_GENERAL", False)
        for (fv, ff), (gv, gf) in zip(fast, gen, strict=True):
            assert_same(gv, fv)
            np.testing.assert_array_equal(gf, ff)
