"""The rounding core against independent references: NumPy / ml_dtypes casts (exhaustive for
the 8-bit and smaller formats, millions of float32 inputs for fp16 / bf16), the exact Fraction
reference of tests/exact.py (every mode, overflow and subnormal policy, both tininess rules,
the flags) and statistics for stochastic rounding."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpsim
from fpsim.flags import Flags
from tests.dtypes import DTYPES
from tests.exact import MODES, Spec, round_exact, same, stochastic_neighbours

NATIVE = {n: d for n, d in DTYPES.items()  # preset -> the dtype whose casts are the reference
          if n not in ("fp64", "fp32")}
SMALL = [n for n in NATIVE if n not in ("fp16", "bf16")]
NO_NAN = {"fp6_e2m3", "fp6_e3m2", "fp4_e2m1"}  # ml_dtypes casts NaN to an arbitrary pattern


# ml_dtypes 0.5 rounded float64 inputs through float32 (two roundings; 0.7 rounds once, as
# NumPy's float64 -> float16 always did): its float64 casts are a reference only where it
# rounds them once; its float32 casts are one rounding in every version
ML_DTYPES_ROUNDS_FLOAT64_ONCE = float(
    np.float64(1 + 2.0**-8 + 2.0**-30).astype(ml_dtypes.bfloat16)) != 1.0


def ref_cast(x: np.ndarray, name: str) -> np.ndarray:
    """x rounded by NumPy / ml_dtypes (round to nearest even), back in float64 (the test is
    skipped for float64 inputs to an ml_dtypes type where ml_dtypes rounds those twice)."""
    if x.dtype == np.float64 and NATIVE[name] is not np.float16 \
            and not ML_DTYPES_ROUNDS_FLOAT64_ONCE:
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} rounds float64 through float32 (two "
                    f"roundings): no reference for float64 inputs (the exact Fraction tests "
                    f"check fpsim.round on those)")
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(NATIVE[name]).astype(np.float64)


def assert_same_values(got, want, x=None):
    """Bit-identical float64 (signed zeros included); NaN equals NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    nan = np.isnan(want)
    bad = np.nonzero((np.isnan(got) != nan) | (~nan & (got.view(np.uint64) !=
                                                       want.view(np.uint64))))[0]
    if bad.size:
        i = bad[0]
        where = f" for input {x.ravel()[i]!r}" if x is not None else ""
        raise AssertionError(f"{bad.size} of {got.size} differ; first{where}: got "
                             f"{got.ravel()[i]!r}, want {want.ravel()[i]!r}")


def bits_of(x: np.ndarray) -> np.ndarray:
    return x.view({1: np.uint8, 2: np.uint16}[x.dtype.itemsize])


# ---------------------------------------------------------------------------------------
# Exhaustive small formats against ml_dtypes
# ---------------------------------------------------------------------------------------

def codes_midpoints(name: str, dtype=np.float64) -> np.ndarray:
    """Every value of the format, every midpoint between neighbours (and beyond the largest),
    and each of those moved by one ulp of ``dtype`` both ways, both signs."""
    fmt = fpsim.PRESETS[name]
    with np.errstate(invalid="ignore"):
        v = np.unique(np.arange(1 << fmt.bits, dtype=np.uint8).view(NATIVE[name])
                      .astype(np.float64))
    v = v[np.isfinite(v) & (v >= 0)]
    top = v[-1] + (v[-1] - v[-2])  # the next grid point above the largest value
    grid = np.append(v, [top, 2 * top])
    mids = (grid[:-1] + grid[1:]) / 2
    base = np.concatenate([v, mids, [top, 4 * top, 1e30, np.inf]]).astype(dtype)
    inf = np.array(np.inf, dtype)
    with np.errstate(over="ignore"):
        pts = np.concatenate([base, np.nextafter(base, inf), np.nextafter(base, -inf)])
    return np.concatenate([pts, -pts])


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("src", [np.float64, np.float32])
def test_small_formats_codes_and_midpoints_match_ml_dtypes(name, src):
    x = codes_midpoints(name, src)
    if name not in NO_NAN:
        x = np.append(x, np.array([np.nan, -np.nan], src))
    want = ref_cast(x, name)
    got = fpsim.round(x, name)
    assert_same_values(got, want, x)
    # the bit patterns are the dtype's own
    with np.errstate(over="ignore", invalid="ignore"):
        ref_bits = bits_of(x.astype(NATIVE[name]))
    pats = fpsim.to_bits(x, name)
    nan = np.isnan(want)
    np.testing.assert_array_equal(pats[~nan], ref_bits[~nan])
    cast = fpsim.cast(x, name)
    assert cast.dtype == np.dtype(NATIVE[name])
    np.testing.assert_array_equal(bits_of(cast)[~nan], ref_bits[~nan])


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_fp16_bf16_codes_and_midpoints_match(name):
    fmt = fpsim.PRESETS[name]
    pats = np.arange(1 << 16, dtype=np.uint16)
    with np.errstate(invalid="ignore"):
        v = pats.view(NATIVE[name]).astype(np.float64)
    v = np.unique(v[np.isfinite(v) & (v >= 0)])
    top = v[-1] + (v[-1] - v[-2])
    grid = np.append(v, top)
    mids = (grid[:-1] + grid[1:]) / 2
    base = np.concatenate([v, mids, [top, 2 * top, np.inf]])
    with np.errstate(over="ignore"):
        x = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf)])
    x = np.concatenate([x, -x, [np.nan]])
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)  # midpoints are float32 numbers; +-1 float64 ulp are not
    assert_same_values(fpsim.round(x32, fmt), ref_cast(x32, name), x32)
    assert_same_values(fpsim.round(x, fmt), ref_cast(x, name), x)


# ---------------------------------------------------------------------------------------
# Millions of float32 inputs against NumPy / ml_dtypes
# ---------------------------------------------------------------------------------------

def float32_samples(kind: str, n: int) -> np.ndarray:
    rng = np.random.default_rng({"bits": 11, "normal": 12, "wide": 13}[kind])
    if kind == "bits":  # every pattern equally likely: NaNs, infinities, subnormals
        return rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32).view(
            np.float32)
    if kind == "normal":
        return rng.standard_normal(n).astype(np.float32)
    # log-uniform magnitudes over fp16's and bf16's whole range and beyond, both signs
    e = rng.uniform(-150, 130, size=n)
    with np.errstate(over="ignore"):
        return (np.exp2(e) * rng.choice([-1.0, 1.0], size=n)).astype(np.float32)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
@pytest.mark.parametrize("kind, n", [("bits", 4_000_000), ("normal", 1_000_000),
                                     ("wide", 1_000_000)])
def test_float32_samples_match_astype(name, kind, n):
    x = float32_samples(kind, n)
    got = fpsim.round(x, name)
    want = ref_cast(x, name)
    assert_same_values(got, want, x)
    sub = x[: n // 4]  # the pattern check on a quarter: to_bits is slower than round
    with np.errstate(over="ignore", invalid="ignore"):
        ref = sub.astype(NATIVE[name])
    nan = np.isnan(ref.astype(np.float32))
    np.testing.assert_array_equal(fpsim.to_bits(sub, name)[~nan], bits_of(ref)[~nan])


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_float64_samples_match_astype(name):
    """float64 inputs: rounded once (NumPy and ml_dtypes convert float64 directly too)."""
    rng = np.random.default_rng(21)
    x = rng.integers(0, 1 << 64, size=1_000_000, dtype=np.uint64, endpoint=False)
    x = x.view(np.float64)
    # keep the exponents near the formats' ranges so most values are not flushed or overflow
    with np.errstate(invalid="ignore"):
        x = np.ldexp(np.frexp(x)[0], rng.integers(-160, 132, size=x.size))
    assert_same_values(fpsim.round(x, name), ref_cast(x, name), x)


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_every_float32_pattern(name):
    """All 2**32 float32 patterns, in chunks (minutes; opt in with -m exhaustive)."""
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        assert_same_values(fpsim.round(x, name), ref_cast(x, name), x)


# ---------------------------------------------------------------------------------------
# The exact reference: every mode and policy, the flags
# ---------------------------------------------------------------------------------------

PRESET_FORMATS = [fpsim.PRESETS[n] for n in ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3",
                                             "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz",
                                             "fp6_e2m3", "fp6_e3m2", "fp4_e2m1")]
OVERFLOWS = ["inf", "saturate"]
SUBNORMALS = ["keep", "flush", "daz", "flush_daz"]
TININESS = ["after", "before"]


def check_against_exact(x, fmt, mode, **kw):
    x = np.asarray(x, dtype=np.float64)
    got, fl = fpsim.round(x, fmt, mode, flags=True, **kw)
    assert got.dtype == np.float64 and fl.dtype == np.uint8
    for xi, gi, fi in zip(x.ravel(), got.ravel(), fl.ravel(), strict=True):
        want, want_fl = round_exact(float(xi), fmt, mode, **kw)
        assert same(float(gi), want) and int(fi) == want_fl, (
            f"{fmt.name} {mode} {kw}: x={float(xi)!r} gave {float(gi)!r} "
            f"{Flags(int(fi))!r}, exact {want!r} {Flags(want_fl)!r}")


def boundary_values(fmt) -> np.ndarray:
    """Zero, the subnormal quanta, tiny, 1, max and the midpoints around them, each moved by
    one and two float64 ulps, both signs, plus the special values."""
    q = Fraction(fmt.smallest_subnormal) if fmt.subnormals else Fraction(fmt.tiny) / \
        (1 << fmt.mantissa_bits)
    tiny, big = Fraction(fmt.tiny), Fraction(fmt.max)
    top_q = Fraction(2) ** (fmt.emax - fmt.mantissa_bits)
    eps = Fraction(fmt.eps)
    pts = [0, q / 4, q / 2, 3 * q / 4, q, 3 * q / 2, 2 * q, 5 * q / 2, tiny - q, tiny - q / 2,
           tiny - q / 4, tiny, tiny + q / 2, 2 * tiny - q / 2, 1, 1 + eps / 2, 1 + 3 * eps / 2,
           1 - eps / 4, big - top_q / 2, big, big + top_q / 4, big + top_q / 2,
           big + 3 * top_q / 4, big + top_q, 2 * big, Fraction(2) ** 1023]
    big64 = Fraction(np.finfo(np.float64).max)
    base = np.array([float(p) if p <= big64 else math.inf for p in pts])
    with np.errstate(over="ignore"):
        out = [base]
        for toward in (np.inf, -np.inf):
            b = base
            for _ in range(2):
                b = np.nextafter(b, toward)
                out.append(b)
    x = np.concatenate(out)
    x = x[np.isfinite(x)]
    return np.concatenate([x, -x, [np.inf, -np.inf, np.nan, 5e-324, 2.0**-1022]])


CUSTOM_FORMATS = [
    fpsim.Format(11, 10),  # float64's exponent range: float64 subnormals are inputs near tiny
    fpsim.Format(11, 51),
    fpsim.Format(4, 3, subnormals=False),
    fpsim.Format(3, 2, nan_encoding="fn"),
    fpsim.Format(5, 2, bias=3),
    fpsim.Format(4, 2, bias=-3),
    fpsim.Format(2, 4, nan_encoding="fnuz", bias=1),
    fpsim.Format(8, 23, nan_encoding="fn"),
]


@pytest.mark.parametrize("fmt", PRESET_FORMATS + CUSTOM_FORMATS, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_boundaries_every_mode_against_exact(fmt, mode):
    check_against_exact(boundary_values(fmt), fmt, mode)


@pytest.mark.parametrize("fmt", [fpsim.FP16, fpsim.BF16, fpsim.FP8_E4M3, fpsim.FP8_E5M2FNUZ,
                                 fpsim.FP4_E2M1, fpsim.Format(11, 10)], ids=str)
@pytest.mark.parametrize("overflow", OVERFLOWS)
@pytest.mark.parametrize("subnormals", SUBNORMALS)
@pytest.mark.parametrize("tininess", TININESS)
def test_boundaries_every_policy_against_exact(fmt, overflow, subnormals, tininess):
    x = boundary_values(fmt)
    for mode in ("nearest_even", "up", "toward_zero", "odd"):
        check_against_exact(x, fmt, mode, overflow=overflow, subnormals=subnormals,
                            tininess=tininess)


@st.composite
def custom_formats(draw):
    e = draw(st.integers(2, 11))
    m = draw(st.integers(1, 51))  # m = 0 leaves "ties to even" undefined (p = 1)
    enc = draw(st.sampled_from(["ieee", "fn", "fnuz", "none"]))
    default = (1 << (e - 1)) - 1
    bias = draw(st.one_of(st.just(default), st.integers(default - 3, default + 3)))
    subnormals = draw(st.sampled_from([True, True, True, False]))
    try:
        return fpsim.Format(e, m, bias=bias, nan_encoding=enc, subnormals=subnormals)
    except ValueError:
        return fpsim.Format(e, m)


formats = st.one_of(st.sampled_from(PRESET_FORMATS), custom_formats())


@st.composite
def values_near_boundaries(draw, fmt):
    """float64 values built as (k + f) * 2**(e - m), biased toward ties, binade edges, the
    subnormal range and the overflow threshold, then moved by a few float64 ulps."""
    m = fmt.mantissa_bits
    e = draw(st.one_of(
        st.sampled_from([fmt.emin - m - 2, fmt.emin - m - 1, fmt.emin - m, fmt.emin - 1,
                         fmt.emin, fmt.emin + 1, fmt.emax - 1, fmt.emax, fmt.emax + 1, 0]),
        st.integers(fmt.emin - m - 4, fmt.emax + 2)))
    top = (1 << (m + 1)) - 1
    k = draw(st.one_of(st.sampled_from([0, 1, 2, 3, (1 << m) - 1, 1 << m, (1 << m) + 1,
                                        top - 2, top - 1, top]),
                       st.integers(0, top)))
    f = draw(st.one_of(st.sampled_from([0.0, 0.5, 0.25, 0.75, 2.0**-30, 1 - 2.0**-30]),
                       st.floats(0, 1, exclude_max=True)))
    try:
        x = math.ldexp(k + f, e - m)
    except OverflowError:
        x = math.inf
    steps = draw(st.integers(-2, 2))
    for _ in range(abs(steps)):
        x = float(np.nextafter(x, math.inf if steps > 0 else -math.inf))
    return -x if draw(st.booleans()) else x


@st.composite
def rounding_cases(draw):
    fmt = draw(formats)
    xs = draw(st.lists(st.one_of(values_near_boundaries(fmt),
                                 st.floats(allow_nan=True, allow_infinity=True),
                                 st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan])),
                       min_size=1, max_size=24))
    mode = draw(st.sampled_from(MODES))
    kw = dict(overflow=draw(st.sampled_from(OVERFLOWS)),
              subnormals=draw(st.sampled_from(SUBNORMALS)),
              tininess=draw(st.sampled_from(TININESS)))
    return fmt, xs, mode, kw


@settings(max_examples=400)
@given(rounding_cases())
def test_property_round_matches_exact(case):
    fmt, xs, mode, kw = case
    check_against_exact(xs, fmt, mode, **kw)


@settings(max_examples=150)
@given(formats, st.data())
def test_property_default_policies(fmt, data):
    xs = data.draw(st.lists(values_near_boundaries(fmt), min_size=1, max_size=24))
    for mode in MODES:
        check_against_exact(xs, fmt, mode)


def test_round_to_odd_then_nearest_is_one_rounding():
    """Round to odd at p + 2 bits, then to nearest at p bits, equals one rounding: the property
    round_pair relies on (checked with the exact reference on fp16 through e5m12)."""
    mid = fpsim.Format(5, 12)
    rng = np.random.default_rng(5)
    x = np.ldexp(rng.uniform(1, 2, 20_000), rng.integers(-26, 17, 20_000))
    twice = fpsim.round(fpsim.round(x, mid, "odd"), "fp16")
    assert_same_values(twice, fpsim.round(x, "fp16"), x)
    for xi, gi in zip(x[:300], twice[:300], strict=True):
        assert same(float(gi), round_exact(float(xi), fpsim.FP16)[0])


# ---------------------------------------------------------------------------------------
# Named regressions (bugs other emulators had)
# ---------------------------------------------------------------------------------------

def test_fp16_overflow_threshold_is_65520():
    # [65520, 131072) must overflow to inf: emulators that clamp the exponent first return
    # 65504 or 65536 here
    x = np.array([65520.0, 65520.5, 65535.0, 65536.0, 100000.0, np.nextafter(131072.0, 0)])
    np.testing.assert_array_equal(fpsim.round(x, "fp16"), np.inf)
    np.testing.assert_array_equal(fpsim.round(-x, "fp16"), -np.inf)
    assert fpsim.round(65519.0, "fp16") == 65504.0
    assert fpsim.round(np.nextafter(65520.0, 0), "fp16") == 65504.0
    assert fpsim.round(65520.0, "fp16", overflow="saturate") == 65504.0
    assert fpsim.round(65520.0, "fp16", "toward_zero") == 65504.0


def test_fp16_smallest_subnormal_tie():
    assert fpsim.round(2.0**-25, "fp16") == 0.0  # a tie: to even, which is zero
    r = fpsim.round(-(2.0**-25), "fp16")
    assert r == 0.0 and np.signbit(r)
    assert fpsim.round(np.nextafter(2.0**-25, 1), "fp16") == 2.0**-24
    assert fpsim.round(3 * 2.0**-26, "fp16") == 2.0**-24
    assert fpsim.round(3 * 2.0**-25, "fp16") == 2 * 2.0**-24  # tie between 1 and 2: even
    assert fpsim.round(2.0**-25, "fp16", "nearest_away") == 2.0**-24


def test_negative_zero_is_kept():
    for name in ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3",
                 "fp4_e2m1"):
        for mode in MODES + ("stochastic",):
            r = fpsim.round(-0.0, name, mode)
            assert r == 0 and np.signbit(r), (name, mode)
            if mode not in ("down", "odd"):  # those round -1e-300 away from zero
                r = fpsim.round(-1e-300, name, mode)
                assert r == 0 and np.signbit(r), (name, mode)
        assert np.signbit(fpsim.round(-1e-300, name, subnormals="flush"))
        assert np.signbit(fpsim.round(-fpsim.PRESETS[name].tiny / 2, name, subnormals="daz"))


@pytest.mark.parametrize("name", ["fp8_e4m3fnuz", "fp8_e5m2fnuz"])
def test_fnuz_has_no_negative_zero(name):
    fmt = fpsim.PRESETS[name]
    x = np.array([-0.0, -1e-300, -fmt.smallest_subnormal / 4, -fmt.tiny / 2])
    for mode in MODES + ("stochastic",):
        for sub in SUBNORMALS:
            r = fpsim.round(x, name, "toward_zero" if mode == "down" else mode,
                            subnormals=sub)
            zero = r == 0
            assert not np.signbit(r[zero]).any(), (mode, sub)
    pats = fpsim.to_bits(np.array([-0.0, -1e-30]), name)
    np.testing.assert_array_equal(pats, 0)


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2"])
def test_round_to_odd_leaves_exact_values_alone(name):
    v = fpsim.all_values(name)
    r, fl = fpsim.round(v, name, "odd", flags=True)
    assert_same_values(r, v)
    assert not fl.any()


def test_round_to_odd_sets_the_last_bit_only_when_inexact():
    u = 2.0**-10
    r = fpsim.round(np.array([1.0, 1 + u / 1024, 1 + u, 1 + 1.5 * u, 1 + 2.5 * u, -1 - u / 3]),
                    "fp16", "odd")
    np.testing.assert_array_equal(r, [1.0, 1 + u, 1 + u, 1 + u, 1 + 3 * u, -1 - u])


def test_e4m3fn_overflow():
    assert np.isnan(fpsim.round(1e4, "fp8_e4m3"))
    assert np.isnan(fpsim.round(-1e4, "fp8_e4m3"))
    assert np.isnan(fpsim.round(np.inf, "fp8_e4m3"))
    assert fpsim.round(1e4, "fp8_e4m3", overflow="saturate") == 448.0
    assert fpsim.round(-1e4, "fp8_e4m3", overflow="saturate") == -448.0
    assert fpsim.round(np.inf, "fp8_e4m3", overflow="saturate") == 448.0
    assert fpsim.round(464.0, "fp8_e4m3") == 448.0  # tie: 448 has the even significand
    assert np.isnan(fpsim.round(np.nextafter(464.0, 1e9), "fp8_e4m3"))
    assert fpsim.round(500.0, "fp8_e4m3", "toward_zero") == 448.0
    _, fl = fpsim.round(1e4, "fp8_e4m3", flags=True)
    assert fl == Flags.OVERFLOW | Flags.INEXACT
    _, fl = fpsim.round(np.inf, "fp8_e4m3", flags=True)
    assert fl == Flags.INVALID


def test_no_double_rounding_through_float32():
    # above a midpoint of fp16 by 2**-40: through float32 it lands on the midpoint, then ties
    # to even (1.0); rounded once it goes up
    assert fpsim.round(1 + 2.0**-11 + 2.0**-40, "fp16") == 1 + 2.0**-10
    assert fpsim.round(1 + 2.0**-8 + 2.0**-40, "bf16") == 1 + 2.0**-7
    assert fpsim.round(1 + 2.0**-8 + 2.0**-40, "bf16", "toward_zero") == 1.0


def test_bf16_rounds_rather_than_truncates():
    assert fpsim.round(1 + 2.0**-8 + 2.0**-20, "bf16") == 1 + 2.0**-7
    assert fpsim.to_bits(np.float32(1 + 2.0**-8 + 2.0**-20), "bf16") == 0x3F81


def test_deep_underflow_in_every_format():
    # far below half the smallest subnormal: zero, or the smallest subnormal when rounding away
    for name in ("fp16", "bf16", "tf32", "fp8_e5m2", "fp4_e2m1"):
        q = fpsim.PRESETS[name].smallest_subnormal
        assert fpsim.round(5e-324, name) == 0.0
        assert fpsim.round(5e-324, name, "up") == q
        assert fpsim.round(-5e-324, name, "down") == -q
        assert fpsim.round(5e-324, name, "odd") == q
        assert fpsim.round(1e-300, name, "toward_zero") == 0.0


def test_tininess_after_vs_before():
    # just below 2**-14 in fp16, rounding up to 2**-14: tiny before rounding, not after
    x = 2.0**-14 - 2.0**-26
    v, fl = fpsim.round(x, "fp16", flags=True)
    assert v == 2.0**-14 and fl == Flags.INEXACT
    v, fl = fpsim.round(x, "fp16", flags=True, tininess="before")
    assert v == 2.0**-14 and fl == Flags.INEXACT | Flags.UNDERFLOW
    # exact subnormal results raise no underflow (IEEE: underflow needs inexact)
    v, fl = fpsim.round(2.0**-20, "fp16", flags=True)
    assert v == 2.0**-20 and fl == 0
    # flushing: the tiny value becomes zero, underflow and inexact
    v, fl = fpsim.round(2.0**-20, "fp16", flags=True, subnormals="flush")
    assert v == 0.0 and fl == Flags.UNDERFLOW | Flags.INEXACT
    v, fl = fpsim.round(x, "fp16", flags=True, subnormals="flush")
    assert v == 2.0**-14 and fl == Flags.INEXACT
    v, fl = fpsim.round(x, "fp16", flags=True, subnormals="flush", tininess="before")
    assert v == 0.0 and fl == Flags.UNDERFLOW | Flags.INEXACT
    # denormals-are-zero reads the input as zero: no flags
    v, fl = fpsim.round(2.0**-20, "fp16", flags=True, subnormals="daz")
    assert v == 0.0 and fl == 0


def test_float64_subnormal_inputs_tininess_regression():
    """Regression: for formats with float64's exponent range, tininess after rounding was
    judged on the float64 subnormal grid, so values just below 2**-1022 that round to it
    with an unbounded exponent at full precision were not flagged (or flushed)."""
    f = fpsim.Format(11, 10)
    # up to 2**-1022 on the subnormal grid (spacing 2**-1032), down at p = 11 with an
    # unbounded exponent (spacing 2**-1033 below 2**-1022): tiny after rounding
    x = 2.0**-1022 - 3 * 2.0**-1035
    v, fl = fpsim.round(x, f, flags=True)
    assert v == 2.0**-1022 and fl == Flags.INEXACT | Flags.UNDERFLOW
    assert fpsim.round(x, f, subnormals="flush") == 0.0
    x = 2.0**-1022 - 2.0**-1074  # rounds up at p = 11 too: not tiny after rounding
    v, fl = fpsim.round(x, f, flags=True)
    assert v == 2.0**-1022 and fl == Flags.INEXACT


# ---------------------------------------------------------------------------------------
# Stochastic rounding
# ---------------------------------------------------------------------------------------

N_SR = 200_000


def count_up(x: float, fmt, **kw) -> tuple[int, Fraction, float, float]:
    lo, hi, p = stochastic_neighbours(x, fmt)
    r = fpsim.round(np.full(N_SR, x), fmt, "stochastic", **kw)
    at_lo, at_hi = r == lo, r == hi
    assert (at_lo | at_hi).all(), "a result that is neither neighbour"
    return int(at_hi.sum()), p, lo, hi


def within(count: int, p: float, n: int = N_SR, sigmas: float = 6.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1


FRACTIONS = [0.125, 0.3, 0.5, 0.9, 1 / 1024]


def sr_values():
    cases = []
    for name, base, q in [("fp16", 1.0, 2.0**-10), ("fp16", 5 * 2.0**-24, 2.0**-24),
                          ("bf16", 3.0, 2.0**-6), ("bf16", 7 * 2.0**-133, 2.0**-133),
                          ("fp8_e4m3", 96.0, 16.0), ("fp8_e5m2", 2.0**-16, 2.0**-16),
                          ("fp4_e2m1", 2.0, 1.0), ("tf32", -1.5, 2.0**-10)]:
        for f in FRACTIONS:
            cases.append((name, base + math.copysign(f * q, base)))
    # deep underflow: far below the smallest subnormal, probability x / smallest subnormal
    for name, x in [("fp16", 0.3 * 2.0**-24), ("fp16", 2.0**-30), ("fp16", -(2.0**-33)),
                    ("bf16", 2.0**-140), ("fp8_e4m3", 2.0**-15), ("fp16", 2.0**-40)]:
        cases.append((name, x))
    return cases


@pytest.mark.parametrize("name, x", sr_values())
def test_stochastic_unbiased(name, x):
    fmt = fpsim.PRESETS[name]
    count, p, lo, hi = count_up(x, fmt, rng=np.random.default_rng(2024))
    assert within(count, float(p)), (count, float(p) * N_SR)
    # what rounding to nearest would count: the bound tells it apart unless p is tiny
    nearest = N_SR if p > Fraction(1, 2) else 0
    assert not within(nearest, float(p)) or p < Fraction(1, 20_000)


def test_stochastic_deep_underflow_regression():
    """Regression: below 2**-63 of the smallest subnormal the probability was computed with
    the shift capped at 63, so 2**-40 rounded to 2**-24 in fp16 with probability 2**-11
    instead of 2**-16 (32 times too often; mean 32 times too large)."""
    n = 1 << 22
    r = fpsim.round(np.full(n, 2.0**-40), "fp16", "stochastic", rng=7)
    count = int((r > 0).sum())
    assert within(count, 2.0**-16, n)  # about 64
    assert count < 500  # the bug gave about 2048
    r = fpsim.round(np.full(n, 2.0**-60), "fp16", "stochastic", rng=8)
    assert not r.any()  # probability 2**-36
    r = fpsim.round(np.full(n, 2.0**-40), "fp16", "stochastic", rng=7, random_bits=20)
    assert within(int((r > 0).sum()), 16 / 2.0**20, n)  # floor(2**-16 * 2**20) / 2**20
    r = fpsim.round(np.full(n, 2.0**-40), "fp16", "stochastic", rng=7, random_bits=8)
    assert not r.any()  # floor(2**-16 * 2**8) = 0


def test_stochastic_mean_is_the_value():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(2000) * 3
    reps = 400
    r = fpsim.round(np.tile(x, reps), "bf16", "stochastic", rng=rng).reshape(reps, -1)
    q = fpsim.ulp(x, "bf16")
    err = (r.mean(axis=0) - x) / q  # each term has sd <= 1/2 ulp / sqrt(reps)
    assert np.abs(err).max() < 6 * 0.5 / math.sqrt(reps)
    # rounding to nearest (biased) would not pass the same bound on the average error
    assert abs(err.mean()) < 6 * 0.5 / math.sqrt(reps * x.size)


def test_stochastic_biased_implementations_would_fail():
    """The bound of test_stochastic_unbiased separates the right probability from the wrong
    ones (nearest: 0 or 1; a fair coin: 1/2) at every tested fraction except 1/2 itself."""
    for f in FRACTIONS:
        for wrong in (0.0, 1.0, 0.5):
            if wrong != f and abs(wrong - f) > 1e-9:
                assert not within(round(N_SR * wrong), f)


@pytest.mark.parametrize("bits, k", [(1, 0), (1, 1), (3, 2), (4, 4), (8, 77)])
def test_stochastic_random_bits_resolution(bits, k):
    """With random_bits=N the probability is floor(frac * 2**N) / 2**N: frac = (k + 63/64) /
    2**N rounds up with probability k / 2**N, not frac."""
    frac = (k + 63 / 64) / 2**bits
    for name, base, q in [("fp16", 1.0, 2.0**-10), ("fp16", 3 * 2.0**-24, 2.0**-24),
                          ("bf16", 2.0**-130, 2.0**-133)]:
        x = base + frac * q
        count, p, _, _ = count_up(x, fpsim.PRESETS[name], rng=11, random_bits=bits)
        assert p == Fraction(frac)
        want = k / 2**bits
        assert within(count, want), (name, count, want * N_SR)
        if bits <= 4:  # the gap frac - want is below 2**-bits: visible here at 4 bits or less
            assert not within(count, frac)


def test_stochastic_random_bits_deep_underflow():
    # frac = x / smallest subnormal = 0.75 -> with 2 random bits probability 3/4 exactly;
    # with 1 bit 1/2
    x = 0.75 * 2.0**-24
    c2, _, _, _ = count_up(x, fpsim.FP16, rng=4, random_bits=2)
    assert within(c2, 0.75)
    c1, _, _, _ = count_up(x, fpsim.FP16, rng=4, random_bits=1)
    assert within(c1, 0.5)
    c, _, _, _ = count_up(2.0**-26, fpsim.FP16, rng=4, random_bits=2)  # frac 1/4
    assert within(c, 0.25)


def test_stochastic_results_are_neighbours_and_exact_values_stay():
    rng = np.random.default_rng(9)
    for name in ("fp16", "bf16", "fp8_e5m2", "fp8_e4m3", "fp6_e2m3"):
        fmt = fpsim.PRESETS[name]
        x = rng.uniform(-fmt.max, fmt.max, 3000) * np.exp2(rng.integers(-20, 1, 3000))
        r = fpsim.round(x, fmt, "stochastic", rng=rng)
        down = fpsim.round(x, fmt, "toward_zero")
        away = np.where(down == x, x, down + np.copysign(fpsim.ulp(down, fmt), x))
        assert ((r == down) | (r == away)).all()
        assert (r != down).any() and (r != away).any()
        v = fpsim.all_values(fmt)
        np.testing.assert_array_equal(fpsim.round(v, fmt, "stochastic", rng=rng), v)


def test_stochastic_overflow_and_flags():
    x = np.full(10_000, 65504.0 + 16.0)  # half way to the next grid point 65536
    r, fl = fpsim.round(x, "fp16", "stochastic", rng=1, flags=True)
    assert set(np.unique(r)) <= {65504.0, np.inf}
    assert within(int(np.isinf(r).sum()), 0.5, 10_000)
    np.testing.assert_array_equal(fl[np.isinf(r)], Flags.OVERFLOW | Flags.INEXACT)
    np.testing.assert_array_equal(fl[~np.isinf(r)], Flags.INEXACT)
    r = fpsim.round(x, "fp16", "stochastic", rng=1, overflow="saturate")
    np.testing.assert_array_equal(r, 65504.0)


def test_stochastic_reproducible():
    x = np.linspace(-3, 3, 10_001)
    a = fpsim.round(x, "bf16", "stochastic", rng=123)
    b = fpsim.round(x, "bf16", "stochastic", rng=np.random.default_rng(123))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, fpsim.round(x, "bf16", "stochastic", rng=124))
    fpsim.seed(5)
    c = fpsim.round(x, "bf16", "stochastic")
    fpsim.seed(5)
    np.testing.assert_array_equal(c, fpsim.round(x, "bf16", "stochastic"))
    # chunked kernels consume the generator in order: one long call equals the same stream
    big = np.tile(x, 20)
    d = fpsim.round(big, "fp16", "stochastic", rng=77)
    np.testing.assert_array_equal(d, fpsim.round(big, "fp16", "stochastic", rng=77))


def test_stochastic_bad_arguments():
    with pytest.raises(ValueError, match="random_bits"):
        fpsim.round(1.0, "fp16", "nearest_even", random_bits=8)
    for bad in (0, 64):
        with pytest.raises(ValueError, match=r"random_bits must be an int in \[1, 63\]"):
            fpsim.round(1.0, "fp16", "stochastic", random_bits=bad)
    for bad in (2.5, True):  # fpsim.checks.as_int's rule: other types are a TypeError
        with pytest.raises(TypeError, match="random_bits must be an int, got"):
            fpsim.round(1.0, "fp16", "stochastic", random_bits=bad)
    with pytest.raises(TypeError, match="rng"):
        fpsim.round(1.0, "fp16", "stochastic", rng="seed")


# ---------------------------------------------------------------------------------------
# Input types and argument checking
# ---------------------------------------------------------------------------------------

def test_scalar_in_scalar_out_shapes_kept():
    r = fpsim.round(0.1, "fp16")
    assert isinstance(r, np.float64) and np.ndim(r) == 0
    assert isinstance(fpsim.round(3, "fp16"), np.float64)
    v, fl = fpsim.round(0.1, "fp16", flags=True)
    assert np.ndim(v) == 0 and np.ndim(fl) == 0 and fl == Flags.INEXACT
    assert np.ndim(fpsim.round(np.float32(0.1), "bf16")) == 0
    assert np.ndim(fpsim.round(np.array(0.1), "bf16")) == 0
    for shape in [(0,), (3, 0), (2, 3, 4), (1,)]:
        x = np.ones(shape)
        assert fpsim.round(x, "fp16").shape == shape
        v, fl = fpsim.round(x, "fp16", flags=True)
        assert v.shape == fl.shape == shape
    r = fpsim.round([[0.1, 0.2], [1e5, -1e-9]], "fp16")
    assert r.shape == (2, 2) and r.dtype == np.float64
    x = np.arange(24, dtype=np.float64).reshape(4, 6).T  # not contiguous
    np.testing.assert_array_equal(fpsim.round(x, "fp16"), x)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                   ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                   np.int8, np.int32, np.uint16, np.int64, np.uint64])
def test_array_dtypes_are_read_exactly(dtype):
    rng = np.random.default_rng(4)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=500, dtype=dtype, endpoint=True)
        exact = [Fraction(int(v)) for v in x]
    else:
        x = (rng.standard_normal(500) * 50).astype(dtype)
        exact = [Fraction(float(v)) for v in x.astype(np.float64)]
    for fmt in (fpsim.BF16, fpsim.FP8_E5M2):
        for mode in ("nearest_even", "down"):
            got = fpsim.round(x, fmt, mode)
            want = [round_exact(e, fmt, mode)[0] for e in exact]
            assert_same_values(got, np.array(want), x)


@pytest.mark.parametrize("value", [2**53 + 1, 2**62 + 2**9, -(2**62) - 2**9 - 1, 2**63 - 1,
                                   -(2**63), 2**64 - 1, 2**64 + 1, -(2**70) - 3,
                                   2**200 + 2**147 + 1, 2**1024 - 2**970 - 1,
                                   2**1024 - 2**970, 10**400, -(10**400)],
                         ids=lambda v: f"{'-' if v < 0 else ''}{abs(v).bit_length()}bits"
                                       f"-mod1e6={abs(v) % 10**6}")
@pytest.mark.parametrize("fmt", [fpsim.FP64, fpsim.FP32, fpsim.FP16, fpsim.FP8_E4M3],
                         ids=str)
def test_big_integers_rounded_once(value, fmt):
    """Integers float64 cannot hold are rounded once, exactly (regressions: 2**53 + 1 was read
    as 2**53; int64 / uint64 near 2**63 / 2**64 went through an overflowing cast; Python
    integers beyond float64 raised OverflowError; every such value to fp64 raised
    ValueError)."""
    inputs = [value]
    if -(2**63) <= value < 2**63:
        inputs.append(np.array([value], dtype=np.int64))
    if 0 <= value < 2**64:
        inputs.append(np.array([value], dtype=np.uint64))
    for x in inputs:
        for mode in MODES:
            got, fl = fpsim.round(x, fmt, mode, flags=True)
            want, want_fl = round_exact(Fraction(value), fmt, mode)
            assert same(float(np.ravel(got)[0]), want), (x, mode, got, want)
            assert int(np.ravel(fl)[0]) == want_fl, (x, mode)
        if fmt is not fpsim.FP64:
            got = fpsim.round(x, fmt, "nearest_even", overflow="saturate")
            assert same(float(np.ravel(got)[0]),
                        round_exact(Fraction(value), fmt, overflow="saturate")[0])


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="long double is float64 here")
def test_long_double_rounded_once():
    one = np.longdouble(1)
    vals = np.array([one + np.longdouble(2.0) ** -60, one / 3, -(one + np.longdouble(2.0) ** -11
                     + np.longdouble(2.0) ** -62), np.longdouble(2.0) ** 70 + 1,
                     np.longdouble(65519.5) + np.longdouble(2.0) ** -40], dtype=np.longdouble)
    for fmt in (fpsim.FP64, fpsim.FP32, fpsim.FP16, fpsim.BF16):
        for mode in MODES:
            got = fpsim.round(vals, fmt, mode)
            want = [round_exact(Fraction(*v.as_integer_ratio()), fmt, mode)[0] for v in vals]
            assert_same_values(got, np.array(want))


def test_signalling_nan_in_float32_arrays():
    """Regression: widening float32 quietened signalling NaNs (and warned), losing INVALID."""
    x = np.array([0x7F800001, 0xFFA00000, 0x7FC00000], np.uint32).view(np.float32)
    for arr in (x, x[0]):
        _, fl = fpsim.round(arr, "fp16", flags=True)
        assert np.ravel(fl)[0] == Flags.INVALID
    _, fl = fpsim.round(x, "bf16", flags=True)
    np.testing.assert_array_equal(fl, [Flags.INVALID, Flags.INVALID, 0])
    b = np.array([0x7F81, 0x7FC1], np.uint16).view(ml_dtypes.bfloat16)
    _, fl = fpsim.round(b, "fp16", flags=True)
    np.testing.assert_array_equal(fl, [Flags.INVALID, 0])


@pytest.mark.parametrize("bad", [1 + 2j, np.complex64(1), np.array([1j]), "1.0",
                                 np.array(["a"]), None, [1, "a"], {"a": 1}, object()])
def test_non_real_input_raises_type_error(bad):
    with pytest.raises(TypeError):
        fpsim.round(bad, "fp16")


@pytest.mark.parametrize("kw, word", [
    (dict(rounding="nearest"), None),  # an alias: accepted
    (dict(rounding="round_half_up"), "nearest_even"),
    (dict(overflow="clip"), "saturate"),
    (dict(subnormals="ftz"), "flush_daz"),
    (dict(tininess="during"), "before"),
])
def test_unknown_policy_names_list_valid_ones(kw, word):
    if word is None:
        fpsim.round(1.0, "fp16", **kw)
        return
    with pytest.raises(ValueError) as err:
        fpsim.round(1.0, "fp16", **kw)
    assert word in str(err.value)
    assert str(next(iter(kw.values()))) in str(err.value)


def test_aliases_and_enums():
    for alias, mode in [("rne", "nearest_even"), ("rz", "toward_zero"), ("ru", "up"),
                        ("rd", "down"), ("rna", "nearest_away"), ("ro", "odd"),
                        ("RNE", "nearest_even"), ("sr", "stochastic")]:
        assert fpsim.modes.as_rounding(alias) is fpsim.Rounding(mode)
    assert fpsim.round(1 / 3, "bf16", fpsim.Rounding.UP) == fpsim.round(1 / 3, "bf16", "up")
    with pytest.raises(TypeError, match="integer format"):
        fpsim.round(1.0, "int8")


def test_cast_returns_storage_dtype():
    x = np.array([0.1, 1e5, -3.5])
    for name, dt in [("fp16", np.float16), ("bf16", ml_dtypes.bfloat16),
                     ("tf32", np.float32), ("fp8_e4m3", ml_dtypes.float8_e4m3fn)]:
        c = fpsim.cast(x, name)
        assert c.dtype == np.dtype(dt)
        assert_same_values(c.astype(np.float64), fpsim.round(x, name))
    c, fl = fpsim.cast(x, "fp16", flags=True)
    np.testing.assert_array_equal(fl, [Flags.INEXACT, Flags.OVERFLOW | Flags.INEXACT, 0])
    assert fpsim.cast(np.float64(1 / 3), "tf32", "toward_zero") == np.float32(
        fpsim.round(1 / 3, "tf32", "toward_zero"))


# ---------------------------------------------------------------------------------------
# flag_context
# ---------------------------------------------------------------------------------------

def test_flag_context_sticky_or_and_counts():
    assert not fpsim.flags.flags_active()
    with fpsim.flag_context() as ctx:
        assert fpsim.flags.flags_active()
        r = fpsim.round([1e5, 2e5, 0.1], "fp16")  # flags=False: still recorded
        assert isinstance(r, np.ndarray)
        assert ctx.flags == Flags.OVERFLOW | Flags.INEXACT
        fpsim.round(1e-8, "fp16")
        fpsim.round(1.0, "fp16")  # exact: adds nothing
    assert not fpsim.flags.flags_active()
    assert ctx.flags == Flags.OVERFLOW | Flags.INEXACT | Flags.UNDERFLOW
    assert Flags.UNDERFLOW in ctx and Flags.INVALID not in ctx
    assert ctx.counts[Flags.OVERFLOW] == 2
    assert ctx.counts[Flags.INEXACT] == 4
    assert ctx.counts[Flags.UNDERFLOW] == 1
    assert ctx.counts[Flags.INVALID] == 0
    ctx.clear()
    assert ctx.flags == Flags.NONE and ctx.counts[Flags.INEXACT] == 0


def test_flag_context_nesting():
    with fpsim.flag_context() as outer:
        fpsim.round(1e5, "fp16")
        with fpsim.flag_context() as inner:
            fpsim.round(1e-8, "fp16")
        fpsim.round(np.float64(fpsim.from_bits(0x7C01, "fp16")), "fp32")
    assert inner.flags == Flags.UNDERFLOW | Flags.INEXACT
    assert outer.flags == Flags.OVERFLOW | Flags.INEXACT | Flags.UNDERFLOW | Flags.INVALID
    assert outer.counts[Flags.INEXACT] == 2


def test_flag_context_traps():
    with pytest.raises(fpsim.FloatingPointTrap) as err:
        with fpsim.flag_context(trap="overflow"):
            fpsim.round(np.array([1.0, 1e6]), "fp16")
    assert err.value.flags == Flags.OVERFLOW
    assert isinstance(err.value, FloatingPointError)
    with fpsim.flag_context(trap=["underflow", "invalid"]) as ctx:
        fpsim.round(1e5, "fp16")  # overflow is not trapped
    assert Flags.OVERFLOW in ctx
    with pytest.raises(fpsim.FloatingPointTrap):
        with fpsim.flag_context(trap=Flags.INVALID):
            fpsim.round(fpsim.from_bits(0x7F800001, "fp32"), "bf16")
    with pytest.raises(fpsim.FloatingPointTrap):
        with fpsim.flag_context(trap=["inexact"]):
            fpsim.round(0.1, "bf16", "stochastic", rng=1)
    with pytest.raises(fpsim.FloatingPointTrap):  # the inner context does not hide it
        with fpsim.flag_context(trap="underflow"):
            with fpsim.flag_context():
                fpsim.round(1e-9, "fp16")
    with pytest.raises(ValueError, match="overflow"):
        with fpsim.flag_context(trap="overfloww"):
            pass


def test_flag_context_records_pair_cast_and_record():
    with fpsim.flag_context() as ctx:
        fpsim.round_pair(1.0, 2.0**-60, "fp32")
        assert ctx.flags == Flags.INEXACT
        fpsim.cast(1e6, "fp16")
        assert Flags.OVERFLOW in ctx
        fpsim.flags.record(np.array([Flags.DIVBYZERO, 0], np.uint8), "test")
        assert Flags.DIVBYZERO in ctx
    fpsim.flags.record(np.array([Flags.INVALID], np.uint8), "outside")  # no context: ignored


# ---------------------------------------------------------------------------------------
# round_pair
# ---------------------------------------------------------------------------------------

def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


PAIR_FORMATS = [fpsim.FP16, fpsim.BF16, fpsim.FP32, fpsim.TF32, fpsim.FP8_E4M3]


def pair_inputs(fmt, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs a + b: a on or near the format's midpoints and boundaries, b tiny of either sign
    (so a + b sits just off a midpoint: the double-rounding trap) or random."""
    rng = np.random.default_rng(seed)
    m = fmt.mantissa_bits
    e = rng.integers(fmt.emin - m - 2, fmt.emax + 1, n)
    k = rng.integers(0, 1 << (m + 1), n)
    a = np.ldexp(k + 0.5 * rng.integers(0, 2, n), e - m)  # grid points and midpoints
    scale = np.ldexp(1.0, e - m - rng.integers(1, 70, n))
    a = a * rng.choice([-1.0, 1.0], n)
    b = rng.choice([-1.0, 1.0], n) * scale * rng.uniform(0.5, 1, n)
    b = np.where(rng.random(n) < 0.1, -a + b, b)  # cancellation
    b = np.where(rng.random(n) < 0.1, rng.standard_normal(n) * a, b)
    return two_sum(a, b) + (a, b)


@pytest.mark.parametrize("fmt", PAIR_FORMATS, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_round_pair_against_fraction(fmt, mode):
    hi, lo, a, b = pair_inputs(fmt, 600, seed=10 * PAIR_FORMATS.index(fmt) +
                               MODES.index(mode))
    got, fl = fpsim.round_pair(hi, lo, fmt, mode, flags=True)
    for i in range(hi.size):
        exact = Fraction(float(a[i])) + Fraction(float(b[i]))
        assert exact == Fraction(float(hi[i])) + Fraction(float(lo[i]))  # TwoSum is exact
        want, want_fl = round_exact(exact, fmt, mode, negative_zero=bool(np.signbit(hi[i])))
        assert same(float(got[i]), want) and int(fl[i]) == want_fl, (
            f"{fmt} {mode}: {a[i]!r} + {b[i]!r} gave {got[i]!r} {Flags(int(fl[i]))!r}, "
            f"exact {want!r} {Flags(want_fl)!r}")


def test_round_pair_double_rounding_case():
    # 1 + 2**-11 (an fp16 midpoint) + 2**-60: rounding hi alone would tie to even (1.0)
    assert fpsim.round_pair(1 + 2.0**-11, 2.0**-60, "fp16") == 1 + 2.0**-10
    assert fpsim.round_pair(1 + 2.0**-11, -(2.0**-60), "fp16") == 1.0
    assert fpsim.round_pair(1 + 2.0**-11, -(2.0**-60), "fp16", "nearest_away") == 1.0
    assert fpsim.round_pair(1.0, -(2.0**-60), "fp16", "toward_zero") == 1 - 2.0**-11
    assert fpsim.round_pair(1.0, -(2.0**-60), "fp16", "odd") == 1 - 2.0**-11
    assert fpsim.round_pair(1.0, 2.0**-60, "bf16", "up") == 1 + 2.0**-7
    assert fpsim.round_pair(1.0, 0.0, "bf16", "up") == 1.0
    hi, lo = np.array([1.0, 3.0]), np.array([2.0**-60, -(2.0**-70)])
    assert fpsim.round_pair(hi, lo, "fp16").shape == (2,)
    assert np.ndim(fpsim.round_pair(1.0, 2.0**-60, "fp16")) == 0


def test_round_pair_fp64_target():
    """fp64 itself (the target of int64 / long double input): hi or its neighbour."""
    ulp = 2.0**-52
    hi = np.array([1.0, 1.0, 1.0 + ulp, 1.0, -1.0, np.finfo(np.float64).max])
    lo = np.array([ulp / 4, ulp / 2, ulp / 2, -(ulp / 8), ulp / 8, 2.0**970])
    for mode in MODES:
        got, fl = fpsim.round_pair(hi, lo, "fp64", mode, flags=True)
        for i in range(hi.size):
            exact = Fraction(float(hi[i])) + Fraction(float(lo[i]))
            want, want_fl = round_exact(exact, fpsim.FP64, mode)
            assert same(float(got[i]), want) and int(fl[i]) == want_fl, (mode, i)


def test_round_pair_stochastic_uses_the_pair():
    n = 100_000
    # exactly a midpoint + 2**-60: probability 1/2 + 2**-50 of rounding up
    r = fpsim.round_pair(np.full(n, 1 + 2.0**-11), np.full(n, 2.0**-60), "fp16", "stochastic",
                         rng=3)
    assert set(np.unique(r)) <= {1.0, 1 + 2.0**-10}
    assert within(int((r > 1).sum()), 0.5, n)
    # 1 + 0.3 ulp in hi
    r = fpsim.round_pair(np.full(n, 1 + 0.3 * 2.0**-10), np.zeros(n), "fp16", "stochastic",
                         rng=3)
    assert within(int((r > 1).sum()), 0.3, n)
    r = fpsim.round_pair(np.full(n, 1 + (4 + 63 / 64) / 16 * 2.0**-10), np.zeros(n), "fp16",
                         "stochastic", rng=3, random_bits=4)
    assert within(int((r > 1).sum()), 0.25, n)
    # lo decides: just below the midpoint, 4 random bits give 7/16 (8/16 if lo were lost)
    r = fpsim.round_pair(np.full(n, 1 + 2.0**-11), np.full(n, -(2.0**-60)), "fp16",
                         "stochastic", rng=3, random_bits=4)
    assert within(int((r > 1).sum()), 7 / 16, n)


@pytest.mark.parametrize("mode", ["nearest_even", "up", "stochastic"])
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp64"])
def test_round_pair_checks_its_precondition(mode, fmt):
    """(hi, lo) must be a pair: hi the float64 nearest to hi + lo, lo finite (issue 15)."""
    for hi, lo in [(1.0, 1.0), (1.0, math.nan), (1.0, math.inf), (1.0, 2.0**-52),
                   (1.0, -(2.0**-53)), (0.0, 5e-324), (2.0**-1022, -(2.0**-1074)),
                   ([1.0, 2.0], [0.0, 1.0])]:
        with pytest.raises(ValueError, match="round_pair needs"):
            fpsim.round_pair(hi, lo, fmt, mode, rng=0)
    # pairs are accepted: ties (hi even), the largest float64 with a value beyond it,
    # specials with any lo, the exact error of a sum
    for hi, lo in [(1.0, 2.0**-53), (3.0, 2.0**-52), (1.0, -(2.0**-54)), (math.inf, 5.0),
                   (math.nan, 1.0), (np.finfo(np.float64).max, 2.0**1000), (1.0, 0.0)]:
        fpsim.round_pair(hi, lo, fmt, mode, rng=0)
    a, b = RNG_PAIR.standard_normal(1000), RNG_PAIR.standard_normal(1000) * 1e-9
    s = a + b
    bb = s - a
    fpsim.round_pair(s, (a - (s - bb)) + (b - bb), fmt, mode, rng=0)


RNG_PAIR = np.random.default_rng(15)


def test_round_pair_refuses_wide_formats():
    with pytest.raises(ValueError, match="50"):
        fpsim.round_pair(1.0, 2.0**-60, fpsim.Format(10, 52))
    # 51 mantissa bits: round-to-odd at 53 bits would not be exact (1 + 2**-52 + tiny must
    # round up to 1 + 2**-51), so it is refused too
    with pytest.raises(ValueError, match="50"):
        fpsim.round_pair(1.0 + 2.0**-52, 2.0**-80, fpsim.Format(11, 51), "up")


def test_exact_reference_sanity():
    """The reference itself against values NumPy knows (so it is not only compared with
    fpsim): fp16's grid, max and subnormals."""
    spec = Spec.of(fpsim.FP16)
    assert spec.max == 65504 and spec.tiny == Fraction(1, 2**14)
    assert round_exact(65519.0, fpsim.FP16) == (65504.0, 1)
    assert round_exact(65520.0, fpsim.FP16) == (math.inf, 5)
    assert round_exact(2.0**-25, fpsim.FP16) == (0.0, 3)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(300) * np.exp2(rng.integers(-30, 17, 300))
    want = ref_cast(x, "fp16")
    for xi, wi in zip(x, want, strict=True):
        assert same(round_exact(float(xi), fpsim.FP16)[0], float(wi))
