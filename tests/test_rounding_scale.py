"""The E8M0 shared exponent (``fpsim.rounding.scale.e8m0_exponent``, moved in from fpsim.mx)
against exact Fractions, every rule and MX element format, float32 and float64 amax: random
magnitudes across both dtypes' ranges (subnormals too), powers of two and their neighbours,
the EVEN rule's threshold and its neighbours, zero, inf and NaN."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import fpsim
import fpsim.mx as mx
from fpsim.rounding.scale import SCALE_MODES, e8m0_exponent
from tests.exact import floor_log2, round_exact

ELEMENTS = [f for f in mx.MX_FORMATS.values() if f.scale == "e8m0"]


def _ceil_log2(a: Fraction) -> int:
    e = floor_log2(a)
    return e if Fraction(2) ** e == a else e + 1


def reference(a: float, emax: int, mbits: int, elem_max: float, mode: str, fmt) -> int:
    if math.isnan(a):
        return 128
    if mode == "rceil":
        if math.isinf(a):
            return 127
        d, _ = round_exact(Fraction(a) / Fraction(elem_max), fmt)  # the dtype's division
        if d == 0:
            return -127
        if math.isinf(d):
            return 127
        return max(-127, min(127, _ceil_log2(Fraction(d))))
    if math.isinf(a):  # read as its exponent field: 2**128
        return max(-127, min(128, 128 - emax))
    if a == 0:
        return -127
    x = Fraction(a)
    if mode == "floor":
        e = floor_log2(x)
    elif mode == "ceil":
        e = _ceil_log2(x)
    else:  # even: x rounded half away to mbits fraction bits, then the floor
        q = Fraction(2) ** (floor_log2(x) - mbits)
        e = floor_log2(math.floor(x / q + Fraction(1, 2)) * q)
    return max(-127, min(128, e - emax))


def _amax(dt, mbits: int) -> np.ndarray:
    rng = np.random.default_rng(mbits)
    lo, hi = (-149, 127) if dt == np.float32 else (-1074, 1023)
    v = [float(rng.random() + 0.5) * 2.0 ** int(k) for k in rng.integers(lo, hi, 300)]
    for k in (-149, -127, -126, -20, -1, 0, 1, 8, 15, 100, 126, 127):
        if lo <= k <= hi:
            p = 2.0**k
            t = (2 - 2.0 ** -(mbits + 1)) * 2.0 ** (k - 1)  # the EVEN threshold below 2**k
            v += [p, t]
    x = np.array(v, dt)
    with np.errstate(over="ignore"):
        x = np.concatenate([x, np.nextafter(x, dt(0)), np.nextafter(x, dt(np.inf)),
                            np.array([0.0, np.inf, np.nan], dt)])
    return x[(x >= 0) | np.isnan(x)]  # (| binds tighter than >=)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("mode", SCALE_MODES)
def test_e8m0_exponent_against_fractions(mode: str, dt) -> None:
    fmt = fpsim.FP32 if dt == np.float32 else fpsim.FP64
    for f in ELEMENTS:
        amax = _amax(dt, f.elem_mbits)
        got = e8m0_exponent(amax, f.elem_emax, f.elem_mbits, f.elem_max, mode)
        assert got.dtype == np.int32
        want = [reference(float(a), f.elem_emax, f.elem_mbits, f.elem_max, mode, fmt)
                for a in amax]
        bad = np.flatnonzero(got != np.array(want))
        assert bad.size == 0, (f.name, mode, [(float(amax[i]), int(got[i]), want[i])
                                              for i in bad[:4]])
        # the public function of fpsim.mx names the format and mode: the same exponents
        assert np.array_equal(mx.e8m0_exponent(amax, f, mode), got)
        assert int(e8m0_exponent(amax[0], f.elem_emax, f.elem_mbits, f.elem_max,
                                 mode)) == want[0]  # a 0-d amax


@pytest.mark.parametrize("mode", ["CEIL", "nearest", "", None])
def test_an_unknown_mode_is_refused_by_name(mode) -> None:
    with pytest.raises(ValueError, match="unknown scale mode .*valid: floor, ceil, even, rceil"):
        e8m0_exponent(np.array([1.0]), 8, 3, 448.0, mode)
