"""fpsim's integer conversions against Berkeley TestFloat 3e vectors (results from SoftFloat 3e,
8086-SSE specialisation): f16/f32 -> int32 (``*_to_i32``), roundToIntegral (``*_roundToInt``)
and int32 -> f16/f32 (``i32_to_*``), every rounding mode, results and exception flags.

Notes on the vectors (see tests/data/testfloat/INT_FILES.md):
- ``*_to_i32`` were generated without ``-exact``, so they never signal INEXACT; fpsim's to_int
  signals it (IEEE convertToIntegerExact), so the expected flags add INEXACT wherever the
  vector's own (valid) result differs from the operand's value.
- every invalid conversion (NaN, infinity, out of range) returns 0x80000000, the x86 "integer
  indefinite", which fpsim gives with ``overflow="indefinite"``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim import Flags
from fpsim.integer import round_to_integral, to_int
from tests.testfloat import load

MODES = ["rnear_even", "rnear_maxMag", "rminMag", "rmin", "rmax", "rodd"]
FLOAT_FMT = {"f16": fpsim.FP16, "f32": fpsim.FP32}
NATIVE = {"f16": (np.uint16, np.float16), "f32": (np.uint32, np.float32)}

def test_loader_reads_known_lines():
    a, r, f = load("f16_to_i32__rnear_even")
    assert len(a) == 2448
    # first lines of the file: "87FF 00000000 00", "0000 00000000 00", "E850 FFFFF760 00"
    assert a[:3].tolist() == [0x87FF, 0x0000, 0xE850]
    assert r[:3].tolist() == [0, 0, 0xFFFFF760]
    assert f[:3].tolist() == [0, 0, 0]


def _as_i32(col: np.ndarray) -> np.ndarray:
    return col.astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("src", ["f16", "f32"])
@pytest.mark.parametrize("mode", MODES)
def test_to_i32(src, mode):
    a, res, vflags = load(f"{src}_to_i32__{mode}")
    fmt = FLOAT_FMT[src]
    x = fpsim.from_bits(a, fmt)
    expected = _as_i32(res)
    valid = vflags == 0
    assert set(np.unique(vflags).tolist()) <= {0, int(Flags.INVALID)}
    # inexact: the vector's own result differs from the operand value
    changed = valid & (expected.astype(np.float64) != x)
    exp_flags = np.where(changed, np.uint8(Flags.INEXACT), vflags.astype(np.uint8))
    assert changed.any() and (~valid).any()  # the file exercises both
    uint_t, float_t = NATIVE[src]
    native = a.astype(uint_t).view(float_t)  # float16 / float32 arrays, another input path
    for inp in (x, native):
        v, f = to_int(inp, "int32", mode, overflow="indefinite", flags=True)
        assert v.dtype == np.int32
        np.testing.assert_array_equal(v, expected)
        np.testing.assert_array_equal(f, exp_flags)
    # saturate: same on valid cases; NaN -> 0, otherwise clamp on the operand's sign
    v = to_int(x, "int32", mode, overflow="saturate")
    sat = np.where(np.isnan(x), 0, np.where(np.signbit(x), -(2**31), 2**31 - 1))
    np.testing.assert_array_equal(v, np.where(valid, expected, sat))
    # wrap agrees with the vectors wherever the conversion is valid
    v = to_int(x, "int32", mode, overflow="wrap")
    np.testing.assert_array_equal(v[valid], expected[valid])


@pytest.mark.parametrize("src", ["f16", "f32"])
@pytest.mark.parametrize("mode", MODES)
def test_round_to_int(src, mode):
    a, res, vflags = load(f"{src}_roundToInt__{mode}")
    fmt = FLOAT_FMT[src]
    x = fpsim.from_bits(a, fmt)
    want = fpsim.from_bits(res, fmt)
    nan = np.isnan(want)
    out, f = round_to_integral(x, fmt, mode, flags=True)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(out), nan)
    # bit for bit (signed zeros included) on everything but NaNs
    np.testing.assert_array_equal(out[~nan].view(np.uint64), want[~nan].view(np.uint64))
    np.testing.assert_array_equal(f, vflags)
    # roundToIntegralExact: INEXACT where the vector's result differs from the operand
    _, fx = round_to_integral(x, fmt, mode, exact=True, flags=True)
    changed = ~nan & (want != x)
    assert changed.any()
    inexact = np.where(changed, np.uint8(Flags.INEXACT), np.uint8(0))
    np.testing.assert_array_equal(fx, vflags.astype(np.uint8) | inexact)


@pytest.mark.parametrize("dst", ["f16", "f32"])
@pytest.mark.parametrize("mode", MODES)
def test_i32_to_float(dst, mode):
    a, res, vflags = load(f"i32_to_{dst}__{mode}")
    fmt = FLOAT_FMT[dst]
    ints = _as_i32(a)
    v, f = fpsim.round(ints, fmt, mode, flags=True)
    np.testing.assert_array_equal(fpsim.to_bits(v, fmt), res)
    np.testing.assert_array_equal(f, vflags)
