"""FP8 scaling against Transformer Engine's formulas evaluated here (exact fractions with a
float32 rounding by MPFR), ml_dtypes' float8 casts, and a plain-list simulation of the delayed
amax history."""

from __future__ import annotations

from fractions import Fraction

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from fpsim.quant import DelayedScaling, fp8_dequantize, fp8_quantize, fp8_scale
from tests.exact import floor_log2

F32_MAX = float(np.finfo(np.float32).max)


def f32(v) -> Fraction:
    q = Fraction(v)
    with gmpy2.ieee(32):
        r = gmpy2.mpfr(gmpy2.mpq(q.numerator, q.denominator))
    return Fraction(*(int(t) for t in r.as_integer_ratio()))


def test_scale_hand_cases():
    assert float(fp8_scale(2.0, "e4m3")) == 224.0  # 448 / 2
    assert float(fp8_scale(2.0, "e5m2")) == 28672.0  # 57344 / 2
    assert float(fp8_scale(2.0, "e5m2", margin=1)) == 14336.0
    assert float(fp8_scale(448.0, "e4m3")) == 1.0
    assert float(fp8_scale(0.0, "e4m3", prev_scale=3.0)) == 3.0  # amax 0: keep
    assert float(fp8_scale(np.inf, "e4m3", prev_scale=3.0)) == 3.0  # not finite: keep
    assert float(fp8_scale(np.nan, "e4m3", prev_scale=3.0)) == 3.0
    assert float(fp8_scale(1e-45, "e4m3")) == F32_MAX  # 448 / 1e-45 overflows float32


def test_scale_random_against_float32_formula():
    rng = np.random.default_rng(0)
    amax = np.exp(rng.uniform(-30, 30, 300)).astype(np.float32)
    for margin in (0, 1, 3):
        got = fp8_scale(amax, "e4m3", margin)
        for a, g in zip(amax, got, strict=True):
            expect = f32(f32(448 / Fraction(float(a))) / 2**margin)
            assert Fraction(float(g)) == expect


def test_power_of_two_scale():
    for a in (3.0, 448.0, 449.0, 0.001, 1e6):
        expect = 2.0 ** (floor_log2(448 / Fraction(a)) - 1)
        assert float(fp8_scale(a, "e4m3", margin=1, power_of_two=True)) == expect


def test_quantize_is_saturating_cast_of_float32_product():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(5000) * 50).astype(np.float32)
    for fmt, dt, mx in (("e4m3", ml_dtypes.float8_e4m3fn, 448.0),
                        ("e5m2", ml_dtypes.float8_e5m2, 57344.0)):
        scale = np.float32(37.3)
        q = fp8_quantize(x, scale, fmt)
        assert q.dtype == dt
        ref = np.clip(x * scale, -mx, mx).astype(dt)  # ml_dtypes: round to nearest even
        assert np.array_equal(q.view(np.uint8), ref.view(np.uint8))
        d = fp8_dequantize(q, scale)
        inv = np.float32(1.0) / scale
        assert np.array_equal(d, q.astype(np.float32) * inv)
    q = fp8_quantize(np.array([np.nan, 1e30], np.float32), 1.0)
    assert np.isnan(q.astype(np.float32)[0]) and float(q[1]) == 448.0


def simulate(amaxes, hist_len, algo, fmax=448.0):
    """Scales used at each step by the delayed recipe, from plain lists."""
    history = []  # most recent last
    scale = Fraction(1)
    used = []
    for a in amaxes:
        used.append(scale)  # the step quantizes with the scale from earlier steps
        history.append(Fraction(float(np.float32(a))))
        window = history[-hist_len:]
        amax = max(window) if algo == "max" else window[-1]
        if amax > 0:
            scale = f32(fmax / amax)
    return used


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("hist_len", [1, 4, 16])
def test_delayed_scaling_history(algo, hist_len):
    rng = np.random.default_rng(2)
    amaxes = np.exp(rng.uniform(-3, 3, 40)).astype(np.float32)
    amaxes[10] = 0.0  # a step without signal keeps the previous amax rules
    ds = DelayedScaling("e4m3", amax_history_len=hist_len, amax_compute_algo=algo)
    got = []
    for a in amaxes:
        x = np.array([a, -a / 2], np.float32)
        got.append(Fraction(float(ds.scale)))
        q = ds.quantize(x)
        assert np.array_equal(q.view(np.uint8), fp8_quantize(x, got[-1], "e4m3").view(np.uint8))
        ds.update()
    assert got == simulate(amaxes, hist_len, algo)


def test_amax_recorded_twice_in_a_step_takes_the_max():
    ds = DelayedScaling(amax_history_len=2)
    ds.quantize(np.array([1.0], np.float32))
    ds.quantize(np.array([-4.0], np.float32))
    ds.quantize(np.array([2.0], np.float32))
    assert float(ds.amax_history[0]) == 4.0
    ds.update()
    assert float(ds.scale) == 112.0


def test_bad_input():
    with pytest.raises(ValueError, match="valid: 'max', 'most_recent'"):
        DelayedScaling(amax_compute_algo="mean")
    with pytest.raises(ValueError, match="amax_history_len must be >= 1, got 0"):
        DelayedScaling(amax_history_len=0)
    # fpsim.checks.as_int's rule: what range() takes is a length, other types a TypeError
    for n in (np.int16(3), np.array(3)):
        assert DelayedScaling(amax_history_len=n).amax_history.shape == (3,)
    for bad in (True, 3.0, "3", None, np.array([3]), np.timedelta64(3)):
        with pytest.raises(TypeError, match=f"amax_history_len must be an int, got "
                                            f"{type(bad).__name__}"):
            DelayedScaling(amax_history_len=bad)
    with pytest.raises(ValueError, match="unknown format"):
        fp8_scale(1.0, "e4m3x")
    with pytest.raises(ValueError, match="fmt e9m9 .* beyond float32's range"):
        fp8_scale(1.0, "e9m9")  # a valid name since eXmY names are accepted, but too wide
    with pytest.raises(TypeError):
        fp8_scale(1.0, "int8")
    with pytest.raises(ValueError, match="scale"):
        fp8_dequantize(np.zeros(2, ml_dtypes.float8_e4m3fn), 0.0)


@pytest.mark.parametrize("scale, exc", [(0.0, ValueError), (-1.0, ValueError),
                                        (float("nan"), ValueError), (float("inf"), ValueError),
                                        (1e39, ValueError), (None, TypeError),
                                        ("2", TypeError), (1j, TypeError)])
def test_fp8_scale_argument_errors(scale, exc):
    x = np.ones(3, np.float32)
    with pytest.raises(exc, match="scale must be"):
        fp8_quantize(x, scale)
    with pytest.raises(exc, match="scale must be"):
        fp8_dequantize(np.zeros(2, ml_dtypes.float8_e4m3fn), scale)
    with pytest.raises(exc, match="prev_scale must be"):
        fp8_scale(0.0, prev_scale=scale)


def test_fp8_amax_and_margin_errors():
    with pytest.raises(ValueError, match="amax must be >= 0"):
        fp8_scale(-1.0)
    with pytest.raises(TypeError, match="amax must be a real number"):
        fp8_scale(None)
    with pytest.raises(TypeError, match="margin must be a real number"):
        fp8_scale(1.0, margin="1")
    with pytest.raises(ValueError, match="margin must be finite"):
        DelayedScaling(margin=float("nan"))
    with pytest.raises(ValueError, match="beyond float32's range"):
        DelayedScaling("e9m9")
    # NaN / inf / 0 amax keep the previous scale (Transformer Engine), no error
    assert fp8_scale(np.array([np.nan, np.inf, 0.0]), prev_scale=8.0).tolist() == [8.0] * 3
