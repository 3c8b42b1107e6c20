"""Format presets and lookup, against numpy.finfo / ml_dtypes.finfo / iinfo and the encoding
definitions (tests/exact.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.formats import NaNEncoding
from tests.dtypes import DTYPES
from tests.exact import Spec
from tests.intlike import Count as _Count

FP8 = {"fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz"}


def finfo(dtype):
    # ml_dtypes.finfo answers for NumPy's own floats too (it defers to numpy.finfo); np.finfo
    # refuses ml_dtypes' types, whose dtype kind is "f" in some ml_dtypes versions (0.5.0)
    return ml_dtypes.finfo(dtype)


def test_every_preset_with_a_dtype_is_checked():
    assert set(fpsim.PRESETS) == set(DTYPES) | {"tf32"}


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_preset_matches_finfo(name):
    fmt = fpsim.PRESETS[name]
    fi = finfo(DTYPES[name])
    assert fmt.dtype == np.dtype(DTYPES[name])
    assert fmt.bits == fi.bits
    assert fmt.nmant == fmt.mantissa_bits == fi.nmant
    assert fmt.nexp == fmt.exponent_bits == fi.nexp
    assert fmt.minexp == fmt.emin == fi.minexp
    assert fmt.maxexp == fi.maxexp
    assert fmt.machep == fi.machep
    assert fmt.negep == fi.negep
    for attr in ("eps", "epsneg", "max", "min", "tiny", "smallest_normal", "smallest_subnormal"):
        got, want = getattr(fmt, attr), float(getattr(fi, attr))
        assert got == want, (attr, got, want)
        assert isinstance(got, float)
    if name in FP8:
        # ml_dtypes hard-codes precision 1 for every float8; fpsim uses numpy's definition
        assert fmt.precision == math.floor(-math.log10(fmt.eps)) == 0
        assert fmt.resolution == 1.0
    else:
        assert fmt.precision == fi.precision
        # ml_dtypes stores the resolution rounded to the dtype itself
        assert np.asarray(fmt.resolution).astype(DTYPES[name]) == fi.resolution


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_preset_agrees_with_encoding_definition(name):
    """max / tiny / subnormal / counts from decoding the patterns by the IEEE / OCP rules."""
    fmt = fpsim.PRESETS[name]
    spec = Spec.of(fmt)
    assert Fraction(fmt.max) == spec.max == fmt.exact_max()
    assert Fraction(fmt.smallest_normal) == spec.tiny
    assert fmt.unit_roundoff == fmt.eps / 2
    assert fmt.precision_bits == fmt.mantissa_bits + 1
    assert fmt.has_infinity == (fmt.nan_encoding is NaNEncoding.IEEE)
    assert fmt.has_nan == (fmt.nan_encoding is not NaNEncoding.NONE)
    assert fmt.has_negative_zero == (fmt.nan_encoding is not NaNEncoding.FNUZ)
    if fmt.bits <= 16:
        pats = np.arange(1 << fmt.bits, dtype=np.uint16 if fmt.bits > 8 else np.uint8)
        with np.errstate(invalid="ignore"):  # the signalling NaN patterns
            ref = pats.view(DTYPES[name]).astype(np.float64)  # fp6, fp4: one byte each
        assert fmt.num_finite == int(np.isfinite(ref).sum())
        assert fmt.smallest_subnormal == ref[ref > 0].min()
        assert fmt.max == ref[np.isfinite(ref)].max()


def test_num_finite_small_formats():
    # fp6 / fp4 have no NaN or infinity: every pattern is finite
    assert fpsim.FP6_E2M3.num_finite == 64
    assert fpsim.FP4_E2M1.num_finite == 16
    assert fpsim.FP8_E4M3FNUZ.num_finite == 255
    assert fpsim.FP8_E4M3.num_finite == 254


def test_tf32_against_its_definition():
    # NVIDIA TF32: fp32's 8-bit exponent with fp16's 10-bit mantissa, 19 bits
    f = fpsim.TF32
    spec = Spec.of(f)
    assert (f.bits, f.exponent_bits, f.mantissa_bits, f.bias) == (19, 8, 10, 127)
    assert f.max == float(spec.max) == (2 - 2.0**-10) * 2.0**127
    assert f.smallest_normal == np.finfo(np.float32).tiny
    assert f.smallest_subnormal == 2.0**-136
    assert f.eps == np.finfo(np.float16).eps
    assert f.dtype is None
    assert f.storage_dtype == np.float32


def test_custom_format_defaults():
    f = fpsim.Format(exponent_bits=5, mantissa_bits=6)
    assert f.name == "e5m6"
    assert f.bias == 15
    assert f.nan_encoding is NaNEncoding.IEEE
    assert f.dtype is None
    assert f.storage_dtype == np.float32
    assert fpsim.Format(4, 3, nan_encoding="fn").name == "e4m3fn"
    assert fpsim.Format(4, 3, nan_encoding="fnuz").bias == 7  # bias is only defaulted
    assert fpsim.Format(4, 3, bias=8, nan_encoding="fnuz").name == "e4m3fnuz"
    assert fpsim.Format(8, 7).bias == 127
    assert fpsim.Format(11, 30).storage_dtype == np.float64  # fp32 lacks the range
    assert fpsim.Format(5, 30).storage_dtype == np.float64  # fp32 lacks the precision


def test_custom_format_equality_and_hash():
    # name does not take part in equality: the same layout is the same format
    a = fpsim.Format(5, 10, name="mine")
    assert a == fpsim.FP16
    assert hash(a) == hash(fpsim.FP16)
    assert a.dtype == np.float16
    with pytest.raises(AttributeError):
        a.mantissa_bits = 3  # type: ignore[misc]
    assert fpsim.Format(5, 10, bias=14) != fpsim.FP16


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(exponent_bits=5, mantissa_bits=6, bias=3),
        dict(exponent_bits=3, mantissa_bits=4, nan_encoding="fn"),
        dict(exponent_bits=3, mantissa_bits=2, nan_encoding="fnuz", bias=4),
        dict(exponent_bits=4, mantissa_bits=0, nan_encoding="none"),
        dict(exponent_bits=11, mantissa_bits=20),
        dict(exponent_bits=6, mantissa_bits=5, subnormals=False),
    ],
)
def test_custom_format_derived_properties(kwargs):
    f = fpsim.Format(**kwargs)
    spec = Spec.of(f)
    assert Fraction(f.max) == spec.max
    assert f.min == -f.max
    assert Fraction(f.tiny) == spec.tiny
    values = spec.values() if f.bits <= 12 else None
    if values is not None:
        pos = [v for v in values if v > 0]
        assert Fraction(f.smallest_subnormal) == pos[0]
        assert max(values) == spec.max
        assert Fraction(f.max) == max(values)
        if Fraction(1) in values:
            i = values.index(Fraction(1))
            assert Fraction(f.epsneg) == 1 - values[i - 1]
            assert f.epsneg == 2.0**f.negep


def test_small_format_epsneg():
    """epsneg is 1 minus the value below 1; when 1 is the smallest normal (emin = 0) that value
    is subnormal and the gap is eps (regression: fpsim once said eps / 2, ml_dtypes agrees)."""
    assert fpsim.FP4_E2M1.epsneg == 0.5 and fpsim.FP4_E2M1.negep == -1
    assert fpsim.FP6_E2M3.epsneg == 0.125 and fpsim.FP6_E2M3.negep == -3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(exponent_bits=8, mantissa_bits=53), "52"),
        (dict(exponent_bits=12, mantissa_bits=10), "float64"),
        (dict(exponent_bits=11, mantissa_bits=10, bias=1000), "float64"),
        (dict(exponent_bits=11, mantissa_bits=10, bias=1030), "float64"),
        (dict(exponent_bits=11, mantissa_bits=52, bias=1022), "float64"),
        (dict(exponent_bits=0, mantissa_bits=3), "exponent"),
        (dict(exponent_bits=4, mantissa_bits=-1), "mantissa"),
        (dict(exponent_bits=1, mantissa_bits=3), "IEEE"),
        (dict(exponent_bits=4, mantissa_bits=3, nan_encoding="bogus"), "ieee"),
    ],
)
def test_format_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fpsim.Format(**kwargs)


def test_format_at_float64_limits_accepted():
    assert fpsim.Format(11, 52) == fpsim.FP64
    f = fpsim.Format(11, 10)
    assert f.emin == -1022 and f.emax == 1023


def test_format_field_types():
    with pytest.raises(TypeError, match="int"):
        fpsim.Format(5.0, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int"):
        fpsim.Format(True, 10)  # type: ignore[arg-type]
    assert fpsim.Format(np.int64(5), np.int32(10)) == fpsim.FP16


def test_format_bit_counts_share_the_as_int_rule():
    # exponent_bits, mantissa_bits and IntFormat.bits are checked by fpsim.checks.as_int:
    # what range() takes is a bit count, stored as an int (the format equals, and hashes as,
    # the one made from ints); other types are a TypeError naming the field
    for conv in (np.uint8, np.array, _Count):
        f = fpsim.Format(conv(5), conv(10))
        assert f == fpsim.FP16 and hash(f) == hash(fpsim.FP16) and f.name == "e5m10"
        assert type(f.exponent_bits) is int and type(f.mantissa_bits) is int
        i = fpsim.IntFormat(conv(8))
        assert i == fpsim.INT8 and type(i.bits) is int and i.name == "int8"
    for bad in (True, 5.0, "5", None, np.array([5]), np.array(5.0), np.timedelta64(5)):
        name = type(bad).__name__
        with pytest.raises(TypeError, match=f"Format.exponent_bits must be an int, got {name}"):
            fpsim.Format(bad, 10)
        with pytest.raises(TypeError, match=f"Format.mantissa_bits must be an int, got {name}"):
            fpsim.Format(5, bad)
        with pytest.raises(TypeError, match=f"IntFormat.bits must be an int, got {name}"):
            fpsim.IntFormat(bad)
    with pytest.raises(ValueError, match="Format needs at least 1 exponent bit, got 0"):
        fpsim.Format(np.int64(0), 3)
    with pytest.raises(ValueError, match="Format.mantissa_bits must be >= 0, got -1"):
        fpsim.Format(5, np.array(-1))
    for bits in (1, 0, -8, 65, np.int64(65)):
        with pytest.raises(ValueError, match=rf"IntFormat.bits must lie in \[2, 64\], got {bits}"):
            fpsim.IntFormat(bits)
    # an integer-like object out of range is named by its int, not by its repr
    with pytest.raises(ValueError, match="Format needs at least 1 exponent bit, got 0$"):
        fpsim.Format(_Count(0), 3)
    with pytest.raises(ValueError, match="Format.mantissa_bits must be >= 0, got -2$"):
        fpsim.Format(5, _Count(-2))
    with pytest.raises(ValueError, match=r"IntFormat.bits must lie in \[2, 64\], got 65$"):
        fpsim.IntFormat(_Count(65))


@pytest.mark.parametrize(
    "name, preset",
    [
        ("fp16", "fp16"), ("half", "fp16"), ("float16", "fp16"), ("binary16", "fp16"),
        ("FP16", "fp16"), (" bf16 ", "bf16"), ("bfloat16", "bf16"), ("float32", "fp32"),
        ("single", "fp32"), ("double", "fp64"), ("tf32", "tf32"), ("TensorFloat-32", "tf32"),
        ("e4m3", "fp8_e4m3"), ("float8_e4m3fn", "fp8_e4m3"), ("fp8", "fp8_e4m3"),
        ("E5M2", "fp8_e5m2"), ("e4m3fnuz", "fp8_e4m3fnuz"), ("float8_e5m2fnuz", "fp8_e5m2fnuz"),
        ("e2m3", "fp6_e2m3"), ("float6_e3m2fn", "fp6_e3m2"), ("fp4", "fp4_e2m1"),
    ],
)
def test_get_format_names(name, preset):
    assert fpsim.get_format(name) is fpsim.PRESETS[preset]


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_get_format_dtypes(name):
    dt = DTYPES[name]
    assert fpsim.get_format(dt) is fpsim.PRESETS[name]
    assert fpsim.get_format(np.dtype(dt)) is fpsim.PRESETS[name]
    assert fpsim.get_float_format(np.dtype(dt)).dtype == np.dtype(dt)


def test_get_format_passthrough_and_lists():
    f = fpsim.Format(3, 3)
    assert fpsim.get_format(f) is f
    assert fpsim.get_format(fpsim.INT8) is fpsim.INT8
    assert fpsim.list_formats() == list(fpsim.PRESETS)
    for name, fmt in fpsim.PRESETS.items():
        assert fpsim.get_format(name) is fmt
        assert str(fmt) == name
        assert name in fmt.describe()


def test_get_format_unknown_name_lists_valid():
    with pytest.raises(ValueError) as err:
        fpsim.get_format("fp12")
    msg = str(err.value)
    assert "fp12" in msg
    for valid in ("fp16", "bf16", "fp8_e4m3", "tf32", "int8", "half"):
        assert valid in msg


def test_get_format_bad_types():
    with pytest.raises(ValueError, match="float16"):
        fpsim.get_format(np.complex64)
    with pytest.raises(TypeError):
        fpsim.get_format(3.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="integer format"):
        fpsim.get_float_format("int8")
    with pytest.raises(TypeError, match="floating-point format"):
        fpsim.get_int_format("fp16")


INT_DTYPES = {"int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4, "int8": np.int8,
              "uint8": np.uint8, "int16": np.int16, "int32": np.int32}


@pytest.mark.parametrize("name", sorted(INT_DTYPES))
def test_int_presets_match_iinfo(name):
    fmt = fpsim.INT_PRESETS[name]
    dt = INT_DTYPES[name]
    ii = ml_dtypes.iinfo(dt) if dt in (ml_dtypes.int4, ml_dtypes.uint4) else np.iinfo(dt)
    assert (fmt.min, fmt.max, fmt.bits, fmt.kind) == (ii.min, ii.max, ii.bits, ii.kind)
    assert fmt.dtype == np.dtype(dt)
    assert fpsim.get_format(name) is fmt
    assert fpsim.get_int_format(dt) is fmt


def test_int_format_custom_and_refused():
    f = fpsim.IntFormat(12, signed=False)
    assert (f.name, f.min, f.max, f.dtype) == ("uint12", 0, 4095, np.dtype(np.uint16))
    assert fpsim.IntFormat(64).dtype == np.dtype(np.int64)
    with pytest.raises(ValueError, match="bits"):
        fpsim.IntFormat(1)
    with pytest.raises(ValueError, match="bits"):
        fpsim.IntFormat(65)
    with pytest.raises(TypeError):
        fpsim.IntFormat(8.0)  # type: ignore[arg-type]


# eXmY names (issue 15, item 10) and argument checks

ML_FLOATS = ["float8_e3m4", "float8_e4m3", "float8_e4m3fn", "float8_e4m3fnuz",
             "float8_e4m3b11fnuz", "float8_e5m2", "float8_e5m2fnuz", "float6_e2m3fn",
             "float6_e3m2fn", "float4_e2m1fn"]


@pytest.mark.parametrize("name", [n for n in ML_FLOATS if hasattr(ml_dtypes, n)])
def test_exmy_names_match_ml_dtypes(name):
    """ml_dtypes' type names, and their eXmY part alone where it is not an OCP alias, give
    the format ml_dtypes implements (its finfo is the reference)."""
    fi = ml_dtypes.finfo(getattr(ml_dtypes, name))
    short = name.split("_", 1)[1]
    for n in {name, short if short not in ("e4m3", "e2m3fn", "e3m2fn", "e2m1fn") else name}:
        f = fpsim.get_format(n)
        assert (f.max, f.smallest_normal, f.smallest_subnormal, f.eps, f.mantissa_bits) == (
            float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal),
            float(fi.eps), int(fi.nmant)), n
        assert f.has_infinity == bool(np.isinf(np.array(np.inf).astype(fi.dtype)))


def test_exmy_examples_of_the_issue():
    assert fpsim.get_format("e3m4") == fpsim.Format(3, 4)
    assert fpsim.get_format("E4M3FN") is fpsim.FP8_E4M3
    assert fpsim.get_format("e5m2fnuz") is fpsim.FP8_E5M2FNUZ
    assert fpsim.get_format("e5m10") is fpsim.FP16  # a preset's layout gives the preset
    assert fpsim.get_format("e4m3") is fpsim.FP8_E4M3  # OCP's meaning of the bare name
    assert fpsim.get_format("e4m3_ieee") == fpsim.Format(4, 3)
    assert not hasattr(fpsim.rounding, "get_format")  # one lookup, in one place


def test_every_default_name_round_trips():
    """Format(...).name read back by get_format is the same layout, over a grid of fields."""
    n = 0
    for e in range(1, 9):
        for m in (0, 1, 2, 3, 4, 7, 10):
            for enc in NaNEncoding:
                for bias in (None, (1 << (e - 1)), 3, -2):
                    for sub in (True, False):
                        try:
                            f = fpsim.Format(e, m, bias=bias, nan_encoding=enc, subnormals=sub)
                        except ValueError:
                            continue
                        g = fpsim.get_format(f.name)
                        assert g == f and g.name in (f.name, g.name), (f.name, f, g)
                        n += 1
    assert n > 500


def test_int_names_round_trip():
    for bits in (2, 3, 4, 8, 12, 16, 32, 64):
        for signed in (True, False):
            f = fpsim.IntFormat(bits, signed)
            g = fpsim.get_format(f.name)
            assert g == f and (g.min, g.max) == (f.min, f.max)
    assert fpsim.get_format("int64").max == np.iinfo(np.int64).max
    with pytest.raises(ValueError, match="bits must lie in"):
        fpsim.get_format("int65")


@pytest.mark.parametrize("name, match", [
    ("e0m3", "exponent bit"), ("e3m4fn_nonan", "_nonan"), ("e3m4_b2_b3", "repeats"),
    ("e3m4fnuz_ieee", "_ieee"), ("e12m3", "outside what float64 holds"), ("e5m0", "mantissa"),
])
def test_bad_exmy_names(name, match):
    with pytest.raises(ValueError, match=match):
        fpsim.get_format(name)


def test_format_argument_checks():
    with pytest.raises(TypeError, match="fmt must be a Format.*got None.*fp16"):
        fpsim.get_format(None)
    with pytest.raises(TypeError, match="fmt must be a Format"):
        fpsim.round(0.1, None)
    with pytest.raises(ValueError, match="subnormals must be True .* or False .*'no'"):
        fpsim.Format(4, 3, subnormals="no")
    with pytest.raises(TypeError, match="bias must be an int"):
        fpsim.Format(4, 3, bias=7.5)
    with pytest.raises(ValueError, match="IEEE-style format needs >= 1 mantissa bit.*'fn'"):
        fpsim.Format(5, 0)
    f = fpsim.Format(5, 0, nan_encoding="fn")  # NaN has its own pattern
    assert Fraction(f.max) == Spec.of(f).max == 2**15
    with pytest.raises(TypeError, match="fmt 'int8' is an integer format"):
        fpsim.round(1.0, "int8")
