"""Bit patterns: from_bits / to_bits exhaustively against NumPy and ml_dtypes views, and the
helpers built on them (fields, classify, next_up / next_down, ulp, all_values)."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim.encoding import uint_dtype
from tests.dtypes import DTYPES

SMALL = {n: d for n, d in DTYPES.items()  # formats of at most 16 bits with a native dtype
         if n not in ("fp64", "fp32")}


def all_patterns(fmt):
    return np.arange(1 << fmt.bits, dtype=uint_dtype(fmt))


def native(fmt, pats):
    """The patterns read by NumPy / ml_dtypes, widened to float64."""
    with np.errstate(invalid="ignore"):  # widening signalling NaNs
        return pats.view(SMALL[fmt.name]).astype(np.float64)


def assert_same(got, want):
    """Equal bit for bit (signed zeros included), NaN equal to NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint64), want[~nan].view(np.uint64))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_from_bits_every_pattern_matches_dtype_view(name):
    fmt = fpsim.PRESETS[name]
    pats = all_patterns(fmt)
    assert_same(fpsim.from_bits(pats, fmt), native(fmt, pats))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_to_bits_round_trips_every_pattern(name):
    fmt = fpsim.PRESETS[name]
    pats = all_patterns(fmt)
    values = fpsim.from_bits(pats, fmt)
    back = fpsim.to_bits(values, fmt)
    assert back.dtype == pats.dtype
    nan = np.isnan(values)
    np.testing.assert_array_equal(back[~nan], pats[~nan])
    # NaN patterns come back as NaN patterns (quieted: rounding a signalling NaN quiets it)
    assert np.isnan(fpsim.from_bits(back[nan], fmt)).all()
    # and the values are the ones the dtype itself holds
    np.testing.assert_array_equal(back[~nan].view(SMALL[name]).astype(np.float64),
                                  values[~nan])


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_quiet_nan_payloads_round_trip(name):
    fmt = fpsim.PRESETS[name]
    m = fmt.mantissa_bits
    pats = all_patterns(fmt)
    exp_all_ones = ((pats >> m) & ((1 << fmt.exponent_bits) - 1)) == (1 << fmt.exponent_bits) - 1
    quiet = exp_all_ones & ((pats >> (m - 1)) & 1 == 1)
    np.testing.assert_array_equal(fpsim.to_bits(fpsim.from_bits(pats[quiet], fmt), fmt),
                                  pats[quiet])
    snan = exp_all_ones & ((pats >> (m - 1)) & 1 == 0) & ((pats & ((1 << m) - 1)) != 0)
    # signalling: the quiet bit is set, the rest of the payload kept
    np.testing.assert_array_equal(fpsim.to_bits(fpsim.from_bits(pats[snan], fmt), fmt),
                                  pats[snan] | (1 << (m - 1)))


def test_signalling_nan_stays_signalling_in_float64():
    v = fpsim.from_bits(0x7C01, "fp16")
    bits = int(np.asarray(v).view(np.uint64))
    assert np.isnan(v) and not (bits >> 51) & 1
    _, fl = fpsim.round(v, "fp32", flags=True)
    assert fl == fpsim.Flags.INVALID
    _, fl = fpsim.round(fpsim.from_bits(0x7E01, "fp16"), "fp32", flags=True)
    assert fl == 0


@pytest.mark.parametrize("name", ["fp32", "tf32"])
def test_wide_formats_sampled(name):
    fmt = fpsim.PRESETS[name]
    rng = np.random.default_rng(1)
    pats = rng.integers(0, 1 << fmt.bits, size=200_000, dtype=np.uint64).astype(uint_dtype(fmt))
    v = fpsim.from_bits(pats, fmt)
    if name == "fp32":
        with np.errstate(invalid="ignore"):
            ref = pats.view(np.float32).astype(np.float64)
    else:  # tf32 is the top 19 bits of an fp32 pattern
        with np.errstate(invalid="ignore"):
            ref = (pats.astype(np.uint32) << 13).view(np.float32).astype(np.float64)
    assert_same(v, ref)
    nan = np.isnan(v)
    np.testing.assert_array_equal(fpsim.to_bits(v[~nan], fmt), pats[~nan])


def test_fp64_patterns():
    rng = np.random.default_rng(2)
    pats = rng.integers(0, 2**64 - 1, size=100_000, dtype=np.uint64, endpoint=True)
    v = fpsim.from_bits(pats, "fp64")
    np.testing.assert_array_equal(np.asarray(v).view(np.uint64), pats)  # NaNs too, bit for bit
    fin = np.isfinite(v)
    np.testing.assert_array_equal(fpsim.to_bits(v[fin], "fp64"), pats[fin])


def test_to_bits_examples_and_scalars():
    assert fpsim.to_bits(1.0, "fp16") == 0x3C00
    assert isinstance(fpsim.to_bits(1.0, "fp16"), np.uint16)
    assert fpsim.to_bits(-0.0, "fp16") == 0x8000
    assert fpsim.to_bits(-0.0, "fp8_e4m3fnuz") == 0x00  # no negative zero
    assert fpsim.to_bits(np.nan, "fp8_e4m3fnuz") == 0x80
    assert fpsim.to_bits(np.nan, "fp8_e4m3") == 0x7F
    assert fpsim.to_bits(np.inf, "bf16") == 0x7F80
    assert fpsim.to_bits(1e10, "fp16") == 0x7C00
    assert fpsim.to_bits(1e10, "fp16", overflow="saturate") == 0x7BFF
    assert fpsim.to_bits(1 / 3, "bf16", "toward_zero") == 0x3EAA
    assert fpsim.to_bits(1 / 3, "bf16", "up") == 0x3EAB
    assert fpsim.to_bits(np.array([[1.0, 2.0]]), "fp4_e2m1").shape == (1, 2)
    assert fpsim.from_bits(np.uint8(0x7E), "fp8_e4m3") == 448.0
    assert uint_dtype("fp4_e2m1") == np.uint8 and uint_dtype("tf32") == np.uint32
    assert uint_dtype("fp64") == np.uint64


def test_bad_patterns_and_values():
    with pytest.raises(TypeError, match="integer"):
        fpsim.from_bits(np.array([1.0]), "fp16")
    with pytest.raises(ValueError, match="range"):
        fpsim.from_bits(np.array([1 << 16]), "fp16")
    with pytest.raises(ValueError, match="range"):
        fpsim.from_bits(np.array([64]), "fp6_e2m3")
    with pytest.raises(ValueError, match="range"):
        fpsim.from_bits(-1, "fp8_e5m2")
    with pytest.raises(ValueError, match="NaN"):
        fpsim.to_bits(np.nan, "fp6_e2m3")
    with pytest.raises(ValueError, match="unknown format"):
        fpsim.to_bits(1.0, "fp7")


def test_no_subnormal_format_decodes_zero_exponent_as_zero():
    f = fpsim.Format(4, 3, subnormals=False)
    assert fpsim.from_bits(0x01, f) == 0.0
    assert fpsim.from_bits(0x08, f) == 2.0**-6
    assert f.smallest_subnormal == 2.0**-6


def test_fields_and_bit_string():
    f = fpsim.fields(np.array([-1.5, 2.0**-24, 65504.0]), "fp16")
    np.testing.assert_array_equal(f.sign, [1, 0, 0])
    np.testing.assert_array_equal(f.exponent, [15, 0, 30])
    np.testing.assert_array_equal(f.mantissa, [512, 1, 1023])
    np.testing.assert_array_equal(f.unbiased_exponent, [0, -14, 15])
    np.testing.assert_array_equal(f.bits, np.array([-1.5, 2.0**-24, 65504.0],
                                                   np.float16).view(np.uint16))
    assert fpsim.bit_string(-2.0, "fp8_e5m2") == "1 | 10000 | 00"
    assert fpsim.bit_string(1.0, "fp16", sep="") == "0011110000000000"
    assert fpsim.bit_string([1.0, 0.5], "fp4_e2m1") == ["0 | 01 | 0", "0 | 00 | 1"]


def test_classify_fp16_every_pattern():
    pats = all_patterns(fpsim.FP16)
    v = native(fpsim.FP16, pats)
    got = fpsim.classify(v, "fp16")
    a = np.abs(v)
    want = np.select([np.isnan(v), np.isinf(v), a == 0, a < np.finfo(np.float16).tiny],
                     ["nan", "infinity", "zero", "subnormal"], "normal")
    np.testing.assert_array_equal(got, want)
    assert fpsim.classify(1e-6, "fp16") == "subnormal"
    assert fpsim.classify(1e-6, "bf16") == "normal"


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e5m2", "fp8_e4m3"])
def test_next_up_down_match_nextafter(name):
    dt = SMALL[name]
    fmt = fpsim.PRESETS[name]
    v = fpsim.all_values(fmt)
    x = v.astype(dt)
    with np.errstate(over="ignore"):
        up = np.nextafter(x, np.array(np.inf, dt)).astype(np.float64) if dt is np.float16 \
            else None
        down = np.nextafter(x, np.array(-np.inf, dt)).astype(np.float64) if up is not None \
            else None
    got_up = fpsim.next_up(v, fmt)
    got_down = fpsim.next_down(v, fmt)
    if up is not None:
        assert_same(got_up, up)
        assert_same(got_down, down)
    # independent check: the sorted list of values (zeros collapse to one value)
    finite = np.unique(v)  # sorted, -0 and +0 merged
    i = np.searchsorted(finite, v)
    inner = (v != 0) & (v < fmt.max) & (v > -fmt.max)
    np.testing.assert_array_equal(got_up[inner], finite[i[inner] + 1])
    np.testing.assert_array_equal(got_down[inner], finite[i[inner] - 1])
    assert fpsim.next_up(0.0, fmt) == fmt.smallest_subnormal
    assert fpsim.next_down(0.0, fmt) == -fmt.smallest_subnormal
    assert fpsim.next_down(fmt.max, fmt) < fmt.max
    beyond = fpsim.next_up(fmt.max, fmt)
    assert np.isinf(beyond) if fmt.has_infinity else np.isnan(beyond)


def test_ulp_matches_spacing():
    v = fpsim.all_values("fp16")
    v = v[(v > 0) & (v < 65504)]  # numpy's spacing of the largest value is inf
    np.testing.assert_array_equal(fpsim.ulp(v, "fp16"),
                                  np.spacing(v.astype(np.float16)).astype(np.float64))
    assert fpsim.ulp(0.0, "fp16") == 2.0**-24
    assert fpsim.ulp(-3.0, "bf16") == 2.0**-6
    assert np.isnan(fpsim.ulp(np.inf, "fp16"))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_all_values(name):
    fmt = fpsim.PRESETS[name]
    ref = native(fmt, all_patterns(fmt))
    np.testing.assert_array_equal(fpsim.all_values(fmt), ref[np.isfinite(ref)])
    assert len(fpsim.all_values(fmt)) == fmt.num_finite
    assert_same(fpsim.all_values(fmt, finite=False), ref)


def test_all_values_refuses_wide_formats():
    with pytest.raises(ValueError, match="16"):
        fpsim.all_values("fp32")


def test_float64_subnormals_encode_with_zero_exponent():
    """Regression: to_bits gave float64 subnormals the exponent field 1 (for fp64 and for any
    format with emin = -1022), so the pattern decoded to a value 2**-1022 too large."""
    x = np.array([5e-324, -2.0**-1030, 2.0**-1022 - 2.0**-1074])
    np.testing.assert_array_equal(fpsim.to_bits(x, "fp64"), x.view(np.uint64))
    f = fpsim.Format(11, 10)
    v = np.array([2.0**-1032, -3 * 2.0**-1031])
    np.testing.assert_array_equal(fpsim.from_bits(fpsim.to_bits(v, f), f), v)
    assert fpsim.to_bits(2.0**-1032, f) == 1
