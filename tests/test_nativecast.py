"""fpsim.rounding.native (issue 32 item 5): float64 values reach an ml_dtypes type with one rounding
in every supported ml_dtypes version (0.5 rounded float64 casts twice, via float32), and the
autograd's tensors and the arithmetic's native path with them. The references are
fpsim.round's kernel (checked against MPFR and exact Fractions) and exact Fractions; these
tests fail on the code before the fix under ml_dtypes 0.5 (the README's lowest-versions run)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import fpsim
from fpsim.autograd import Tensor
from fpsim.modes import Rounding
from fpsim.rounding.native import (
    cast,
    f64_to_f32_odd,
    fits_float32,
    fma32_odd,
    narrow_to_byte,
    table_cast_ok,
    widen_byte,
)
from tests.exact import round_exact

ML_FORMATS = sorted((f for f in fpsim.PRESETS.values()
                     if f.dtype is not None and f.dtype.type.__module__.startswith("ml_dtypes")),
                    key=lambda f: f.name)


def _same(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def near_ties(fmt) -> np.ndarray:
    """Every finite value of ``fmt`` and every midpoint between neighbours (and beyond the
    largest), each moved by one and by 2**-30 relative float64 steps both ways (float32
    rounds those onto the midpoint), both signs, and values beyond float32's range."""
    n = 1 << (8 * fmt.dtype.itemsize)
    codes = np.arange(n, dtype=np.uint64).astype(f"u{fmt.dtype.itemsize}").view(fmt.dtype)
    with np.errstate(invalid="ignore"):
        v = codes.astype(np.float64)
    v = np.unique(v[np.isfinite(v) & (v >= 0)])
    top = v[-1] + (v[-1] - v[-2])
    grid = np.append(v, top)
    mids = (grid[:-1] + grid[1:]) / 2
    base = np.concatenate([v, mids, [top, 1e39, 1e300, 1e-300, 2.0**-150, 0.0]])
    x = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf),
                        base * (1 + 2.0**-30), base * (1 - 2.0**-30)])
    return np.concatenate([x, -x, [np.inf, -np.inf, np.nan]])


@pytest.mark.parametrize("fmt", ML_FORMATS, ids=lambda f: f.name)
def test_cast_rounds_float64_once(fmt):
    x = near_ties(fmt)
    got = cast(x, fmt.dtype)
    assert got.dtype == fmt.dtype
    with np.errstate(invalid="ignore"):
        got64 = got.astype(np.float64)
    ref = fpsim.round(x, fmt)
    if not fmt.has_nan:  # ml_dtypes' NaN in a format without one: whatever it casts to
        keep = ~np.isnan(x)
        got64, ref = got64[keep], ref[keep]
        x = x[keep]
    bad = ~_same(got64, ref)
    assert not bad.any(), (x[bad][:4], got64[bad][:4], ref[bad][:4])


def test_f64_to_f32_odd_is_round_to_odd():
    """Exact values kept; otherwise the odd one of x's two float32 neighbours (float64
    comparisons are exact); beyond float32: its largest."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(200_000) * 2.0 ** rng.integers(-160, 140, 200_000)
    with np.errstate(over="ignore"):
        x = np.concatenate([x, x.astype(np.float32).astype(np.float64),  # exact ones
                            [0.0, -0.0, np.inf, -np.inf, 1e300, -1e300, 1e-300, -1e-300]])
    y = f64_to_f32_odd(x)
    assert y.dtype == np.float32
    y64 = y.astype(np.float64)
    exact = y64 == x
    odd = (y.view(np.uint32) & 1) == 1
    assert (exact | odd).all()
    finite = np.isfinite(y64)
    below = np.nextafter(y, np.float32(0)).astype(np.float64)  # one step toward zero
    with np.errstate(over="ignore"):  # from float32's largest: infinity
        above = np.nextafter(y, np.copysign(np.float32(np.inf), y)).astype(np.float64)
    inside = (np.abs(below) < np.abs(x)) & (np.abs(x) < np.abs(above))
    assert (exact | (finite & inside) | (np.abs(x) > np.finfo(np.float32).max)).all()
    assert (np.signbit(y) == np.signbit(x)).all()
    assert np.isnan(f64_to_f32_odd(np.array([np.nan]))).all()
    for v in x[:50]:  # 0-d arrays (a Tensor of one value): the same, in place of scalars
        assert f64_to_f32_odd(np.array(v)).view(np.uint32) == f64_to_f32_odd(
            np.array([v])).view(np.uint32)[0]


def test_fma32_odd_is_the_exact_value_rounded_to_odd():
    """arithmetic's float32 fma (moved into rounding.native): a * b + d of bf16 and e4m3
    values against exact Fractions rounded to odd at float32 (tests/exact.py, independent of
    the kernel), chunk by chunk as the caller goes (guarded chunks declined where a product
    leaves float32's normal range; sums beyond float32 and NaN declined); an exact zero sum
    is +0 but rounding down (-0), or -0 + -0."""
    rng = np.random.default_rng(11)
    n, chunk = 4096, 64
    for name, span in (("bf16", 40), ("fp8_e4m3", 5)):
        a, b, d = (np.asarray(fpsim.round(rng.standard_normal(n) * 2.0 ** rng.integers(
            -span, span, n), name)).astype(np.float32) for _ in range(3))
        d[:256] = -(a[:256] * b[:256])  # exact zero sums
        d[256:300] = -0.0
        a[256:300] = -0.0
        a[300:310] = [np.inf, np.nan, *[3.0e38] * 8]
        b[300:310] = 1e30
        used = 0
        for lo in range(0, n, chunk):
            args = [v[lo:lo + chunk] for v in (a, b, d)]
            guard = name == "bf16"
            for mode in (Rounding.NEAREST_EVEN, Rounding.DOWN):
                with np.errstate(over="ignore", invalid="ignore"):
                    r = fma32_odd(*[v.copy() for v in args], mode, guard=guard)
                if r is None:
                    assert (guard and not fits_float32(*args[:2])) or not np.isfinite(
                        args[0].astype(np.float64) * args[1] + args[2]).all()
                    continue
                used += 1
                for x, y, z, got in zip(*args, r, strict=True):
                    exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
                    want, _ = round_exact(exact, fpsim.FP32, "odd")
                    assert float(got) == want, (name, float(x), float(y), float(z))
                    if exact == 0:
                        neg = mode is Rounding.DOWN and (np.signbit(x * y) or np.signbit(z))
                        neg = neg or (np.signbit(x * y) and np.signbit(z))
                        assert np.signbit(got) == neg, (name, mode, float(x), float(z))
        assert used >= n // chunk  # most chunks take the path (two modes each)


@pytest.mark.parametrize("name", ["bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz",
                                  "fp8_e5m2fnuz"])
def test_tensors_of_float64_values_round_once(name):
    """Tensor(x, fmt) of float64 values, and products and sums of such tensors, equal one
    rounding of the exact values (issue 32: Tensor(x, "bf16") differed on 3,736 of 63,786
    float64 values between ml_dtypes 0.5.4 and 0.7.0)."""
    fmt = fpsim.get_format(name)
    x = near_ties(fmt)
    x = x[np.isfinite(x) & (np.abs(x) <= fmt.max)]
    t = Tensor(x, fmt)
    assert _same(t.numpy(np.float64), fpsim.round(x, fmt)).all()
    a = Tensor(x[: x.size // 2], fmt)
    b = Tensor(np.float64(1 + 2.0**-30) * np.ones(x.size // 2), "fp32")  # promotes to fp32
    c = Tensor(fpsim.round(x[x.size // 2: 2 * (x.size // 2)] * 0.75, fmt), fmt)
    av, cv = a.numpy(np.float64), c.numpy(np.float64)
    assert _same((a * c).numpy(np.float64), fpsim.round(av * cv, fmt)).all()  # exact product
    with np.errstate(over="ignore"):
        s = av + cv  # exact: both are values of fmt within a few binades of each other
    ok = np.isfinite(s) & (np.abs(s) < 2.0**60) & ((s == 0) | (np.abs(s) > 2.0**-60))
    assert _same((a + c).numpy(np.float64)[ok], fpsim.round(s, fmt)[ok]).all()
    assert (a * b).fmt.name == "fp32"


def test_arithmetic_native_path_takes_float64_operands_once():
    """fpsim.add / mul with float64 operands in bf16 (its native path converts the operands
    first): each operand rounded once, as the exact model (Fractions) does."""
    x = near_ties(fpsim.BF16)
    x = x[np.isfinite(x) & (np.abs(x) < 2.0**100) & (np.abs(x) > 2.0**-100)]
    xr = fpsim.round(x, "bf16")
    assert _same(fpsim.mul(x, np.ones_like(x), "bf16"), xr).all()
    assert _same(fpsim.add(x, np.zeros_like(x), "bf16"), xr).all()
    for v in x[:: max(1, x.size // 200)]:  # the exact model (Fractions)
        assert float(fpsim.add(np.array([v]), np.zeros(1), "bf16")[0]) == \
            round_exact(float(v), fpsim.BF16)[0], v



@pytest.mark.parametrize("fmt", ML_FORMATS, ids=lambda f: f.name)
def test_arrays_and_lists_of_ml_dtypes_values_in_every_version(fmt):
    """Arrays of every ml_dtypes type, NaN included, and lists of its scalars go through
    fpsim.round (float8_e5m2 is of NumPy kind "f", and NumPy's finfo knows it only from
    ml_dtypes 0.7: fpsim asks ml_dtypes.finfo)."""
    n = 1 << (8 * fmt.dtype.itemsize)
    codes = np.arange(n, dtype=np.uint64).astype(f"u{fmt.dtype.itemsize}").view(fmt.dtype)
    with np.errstate(invalid="ignore"):
        wide = codes.astype(np.float64)
    for target in ("fp32", "bf16", "fp8_e4m3"):
        assert _same(fpsim.round(codes, target), fpsim.round(wide, target)).all()
    some = list(codes[:: max(1, n // 50)])
    with np.errstate(invalid="ignore"):
        assert _same(fpsim.round(some, "fp16"), fpsim.round(np.array(some).astype(np.float64),
                                                           "fp16")).all()


# -- the table casts of one-byte types --------------------------------------------------------

def _byte_types() -> list:
    import ml_dtypes

    names = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
             "float8_e4m3", "float8_e3m4", "float8_e4m3b11fnuz", "float6_e2m3fn",
             "float6_e3m2fn", "float4_e2m1fn"]
    return [np.dtype(getattr(ml_dtypes, n)) for n in names if hasattr(ml_dtypes, n)]


def test_table_cast_takes_the_one_byte_floats_only():
    import ml_dtypes

    assert all(table_cast_ok(t) for t in _byte_types())
    for t in (ml_dtypes.float8_e8m0fnu, ml_dtypes.bfloat16, np.float16, np.float32, np.int8,
              np.uint8, np.bool_):
        assert not table_cast_ok(t), t


@pytest.mark.parametrize("dtype", _byte_types(), ids=str)
def test_widen_byte_is_ml_dtypes_cast_bit_for_bit(dtype):
    b = np.tile(np.arange(256, dtype=np.uint8), 16).view(dtype)  # above the table threshold
    for wide, u in ((np.float32, np.uint32), (np.float64, np.uint64)):
        with np.errstate(invalid="ignore"):
            want = b.astype(wide)
        got = widen_byte(b, wide)
        assert got.dtype == wide
        np.testing.assert_array_equal(got.view(u), want.view(u))  # NaN payloads too


@pytest.mark.parametrize("dtype", _byte_types(), ids=str)
def test_narrow_to_byte_is_ml_dtypes_cast_bit_for_bit(dtype):
    """Every high half (sign, exponent, 7 fraction bits) with low halves that probe the
    sticky bit and every rounding decision below it: 0, 1, the midpoint of the low half and
    its neighbours, all ones, and random ones."""
    rng = np.random.default_rng(3)
    lows = np.concatenate([[0, 1, 2, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF],
                           rng.integers(0, 1 << 16, 6)]).astype(np.uint32)
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    x = (hi[:, None] | lows[None, :]).reshape(-1).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(dtype)
    got = narrow_to_byte(x, dtype)
    assert got.dtype == dtype
    bad = np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))
    assert bad.size == 0, [hex(v) for v in x.view(np.uint32)[bad[:5]]]
    # and through cast(), from float32 and (to odd first) from float64
    np.testing.assert_array_equal(cast(x, dtype).view(np.uint8), want.view(np.uint8))
    with np.errstate(invalid="ignore"):  # signalling NaNs quieted, as cast() does
        x64 = x.astype(np.float64)
    np.testing.assert_array_equal(cast(x64, dtype).view(np.uint8),
                                  f64_to_f32_odd(x64).astype(dtype).view(np.uint8))


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", _byte_types(), ids=str)
def test_narrow_to_byte_every_float32_pattern(dtype):
    step = 1 << 26
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(dtype).view(np.uint8)
        assert np.array_equal(narrow_to_byte(x, dtype).view(np.uint8), want), hex(start)


def _bits16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


@pytest.mark.parametrize("shape", [(-1,), (2, -1), (-1, 4)])
def test_bf16_by_bits_equals_one_rounding(shape):
    """bf16_by_bits (cast's bf16 path from BF16_BITS_MIN elements) against fpsim.round and the
    route it replaces (float64 rounded to odd in float32, then ml_dtypes' cast; ml_dtypes'
    cast from float32): every bf16 value and midpoint and their neighbours (float32 rounds
    the 2**-30 ones onto the midpoints: the double-rounding fix-up), both signs, zeros,
    subnormals, infinities, overflow; it declines on NaN, where cast falls back to that
    route."""
    from fpsim.rounding.native import BF16_BITS_MIN, bf16_by_bits

    fmt = fpsim.BF16
    x = near_ties(fmt)
    x = x[~np.isnan(x)]
    x = x[: x.size // 8 * 8].reshape(shape)
    got = bf16_by_bits(x)
    assert got is not None and got.dtype == fmt.dtype and got.shape == x.shape
    assert _same(got.astype(np.float64), fpsim.round(x, fmt)).all()
    assert (_bits16(got) == _bits16(f64_to_f32_odd(x).astype(fmt.dtype))).all()
    assert bf16_by_bits(np.append(x.ravel(), np.nan)) is None
    # float32: every value (subnormals, overflow to inf included) but NaN, against ml_dtypes
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    assert (_bits16(bf16_by_bits(x32)) == _bits16(x32.astype(fmt.dtype))).all()
    assert bf16_by_bits(np.append(x32.ravel(), np.float32(np.nan))) is None
    assert bf16_by_bits(np.zeros((0, 3))).shape == (0, 3)
    # float64 runs in chunks: several, the last one partial, a NaN in the last declines
    big = np.resize(x.ravel(), 3 * (1 << 16) + 5)
    assert _same(bf16_by_bits(big).astype(np.float64), fpsim.round(big, fmt)).all()
    big[-1] = np.nan
    assert bf16_by_bits(big) is None
    # non-contiguous input and cast's dispatch (NaN falls back), both sources
    wide = np.resize(x.ravel(), max(x.size, 2 * BF16_BITS_MIN))
    wide[::97] = np.nan
    with np.errstate(over="ignore"):
        wide32 = wide.astype(np.float32)
    for src in (wide, wide32):
        for arr in (src[::2], src[~np.isnan(src)]):
            assert _same(cast(arr, fmt.dtype).astype(np.float64),
                         fpsim.round(arr.astype(np.float64), fmt)).all()


@pytest.mark.parametrize("rel", [0.0, 2.0**-30, -2.0**-30, 2.0**-45, -2.0**-52])
def test_bf16_by_bits_on_float32_patterns(rel):
    """Every 4099th float32 pattern (NaN ones removed) through bf16_by_bits, from float32
    against ml_dtypes' cast, and from float64 (the exact value, or moved by ``rel``: onto
    the float32 midpoints' neighbours) against fpsim.round."""
    from fpsim.rounding.native import bf16_by_bits

    pats = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    pats = pats[~np.isnan(pats)]
    assert (_bits16(bf16_by_bits(pats)) == _bits16(pats.astype(fpsim.BF16.dtype))).all()
    wide = pats.astype(np.float64) * (1 + rel)
    got = bf16_by_bits(wide)
    assert _same(got.astype(np.float64), fpsim.round(wide, fpsim.BF16)).all()


def test_bf16_carry_users_equal_ml_dtypes():
    """The one bf16 nearest-even rule (native.bf16_carry) through each of its users, against
    ml_dtypes' bfloat16 cast from float32 and fpsim.round from float64: every bf16
    value and midpoint, their neighbours and the float64 values float32 rounds onto the
    midpoints, subnormals, overflow edges, zeros, inf and NaN; float64 and float32 inputs."""
    from fpsim.rounding.fast import bf16_nearest_even, bf16_values32
    from fpsim.rounding.native import bf16_by_bits

    bf = fpsim.BF16.dtype
    x64 = near_ties(fpsim.BF16)
    with np.errstate(over="ignore"):
        x32 = x64.astype(np.float32)
    for x in (x64, x32):
        nan = np.isnan(x)
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(bf)
        if x.dtype == np.float64:
            # ml_dtypes' float64 cast rounds twice (via float32) in its lowest declared
            # version: from float64 the reference is fpsim.round, one rounding (its values
            # are bf16's, so the cast of them is exact); NaN compared as NaN
            with np.errstate(over="ignore", invalid="ignore"):
                want = np.asarray(fpsim.round(x, fpsim.BF16), np.float64).astype(bf)
        fin = x[~nan]
        assert (_bits16(bf16_by_bits(fin)) == _bits16(want[~nan])).all(), x.dtype
        got = cast(x, bf)
        assert (_bits16(got[~nan]) == _bits16(want[~nan])).all(), x.dtype
        assert np.isnan(got[nan].astype(np.float32)).all(), x.dtype
        if x.dtype == np.float32:
            assert (_bits16(got) == _bits16(want)).all()  # NaN: ml_dtypes'
    with np.errstate(invalid="ignore"):
        want32 = x32.astype(bf)
    nan = np.isnan(x32)
    assert (_bits16(bf16_nearest_even(x32, fpsim.BF16, bf)) == _bits16(want32)).all()
    vals = bf16_nearest_even(x32, fpsim.BF16, None)
    assert np.array_equal(vals, want32.astype(np.float64), equal_nan=True)
    v, bad = bf16_values32(x32)
    assert np.array_equal(bad, np.flatnonzero(nan))
    assert np.array_equal(v[~nan], want32[~nan].astype(np.float32))
