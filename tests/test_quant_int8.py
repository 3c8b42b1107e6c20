"""Integer-only int8 inference against an exact Python-int transcription of TFLite's /
gemmlowp's formulas (scalar, unbounded ints, C++ truncating division spelled out) and against
the expected values published in TensorFlow Lite's own unit tests
(tensorflow/lite/kernels/internal/quantization_util_test.cc, Apache-2.0)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fpsim.quant import (
    int8_linear,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


# -- the reference: Python ints ------------------------------------------------------------------

def c_div(a: int, b: int) -> int:
    """C++ integer division (truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ref_quantize_multiplier(d: float) -> tuple[int, int]:
    if d == 0:
        return 0, 0
    q, shift = math.frexp(d)
    t = Fraction(q) * 2**31
    fl = math.floor(abs(t))
    q_fixed = (fl + 1 if abs(t) - fl >= Fraction(1, 2) else fl) * (1 if t > 0 else -1)
    if q_fixed == 2**31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    return q_fixed, shift


def ref_srdhm(a: int, b: int) -> int:
    if a == b == I32_MIN:
        return I32_MAX
    ab = a * b
    nudge = 2**30 if ab >= 0 else 1 - 2**30
    return c_div(ab + nudge, 2**31)


def ref_rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    remainder = x & mask  # Python's & on negative ints is two's complement, as int32 here
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if remainder > threshold else 0)


def ref_mbqm(x: int, m: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    return ref_rdbpot(ref_srdhm(x * (1 << left), m), right)


def ref_int8_linear(x, w, bias, xs, xz, ws, wz, os_, oz, lo=-128, hi=127):
    n, k = w.shape
    out = np.zeros((x.shape[0], n), np.int64)
    for b in range(x.shape[0]):
        for c in range(n):
            acc = sum((int(x[b, i]) - xz) * (int(w[c, i]) - int(wz[c])) for i in range(k))
            acc += int(bias[c])
            real = float(np.float32(xs)) * float(np.float32(ws[c])) / float(np.float32(os_))
            m, sh = ref_quantize_multiplier(real)
            out[b, c] = min(max(ref_mbqm(acc, m, sh) + oz, lo), hi)
    return out


# -- TFLite's published expectations -------------------------------------------------------------

@pytest.mark.parametrize("d, expect", [
    (0.0, (0, 0)), (1.0, (1073741824, 1)), (2.0, (1073741824, 2)), (4.0, (1073741824, 3)),
    (0.25, (1073741824, -1)), (0.50 - 5e-9, (2147483627, -1)), (0.50 - 1e-10, (1073741824, 0)),
    (0.50, (1073741824, 0)), (0.75, (1610612736, 0)), (1 - 1e-9, (2147483646, 0)),
    (1 + 1e-11, (1073741824, 1)), (1.25, (1342177280, 1)), (1.50, (1610612736, 1)),
    (1.75, (1879048192, 1)), (2 - 1e-9, (2147483647, 1)), (2 - 1e-11, (1073741824, 2)),
    (math.ldexp(1.0, -31), (1073741824, -30)), (math.ldexp(1.0, -32), (1073741824, -31)),
    (math.ldexp(float(np.float32(0.99)), -32), (0, 0)), (math.ldexp(1.0, -33), (0, 0)),
    (-4.0, (-1073741824, 3)), (-0.125, (-1073741824, -2)),
])
def test_quantize_multiplier_tflite_vectors(d, expect):
    m, s = quantize_multiplier(d)
    assert (int(m), int(s)) == expect
    assert ref_quantize_multiplier(d) == expect


@pytest.mark.parametrize("x, mult, expect", [
    (0, 0.1, 0), (1, 0.0, 0), (10000, 0.00097656, 10), (-10000, 0.00097656, -10),
    (I32_MIN, 0.00001, -21475), (I32_MAX, 0.00001, 21475),
    (10000, -0.00097656, -10), (-10000, -0.00097656, 10),
    (I32_MIN, -0.00001, 21475), (I32_MAX, -0.00001, -21475),
])
def test_multiply_by_quantized_multiplier_tflite_vectors(x, mult, expect):
    m, s = quantize_multiplier(mult)
    assert int(multiply_by_quantized_multiplier(x, m, s)) == expect


def test_mbqm_max_inputs_tflite_vector():
    x, m, shift = I32_MAX, I32_MAX, -3
    expect = round(Fraction(x * m, 2 ** (31 - shift)))  # TfLiteRound of the exact quotient
    assert int(multiply_by_quantized_multiplier(x, m, shift)) == expect
    assert int(multiply_by_quantized_multiplier(-x, m, shift)) == -expect


# -- the vectorised kernels against the Python-int reference ---------------------------------

def _edge_int32(rng, n):
    edges = np.array([I32_MIN, I32_MIN + 1, -(2**30), -3, -2, -1, 0, 1, 2, 3, 2**30, I32_MAX - 1,
                      I32_MAX], np.int64)
    return np.concatenate([edges, rng.integers(I32_MIN, I32_MAX, n, endpoint=True)])


def test_srdhm_against_reference():
    rng = np.random.default_rng(0)
    a = _edge_int32(rng, 3000)
    b = np.concatenate([a[:13], rng.integers(I32_MIN, I32_MAX, a.size - 13, endpoint=True)])
    rng.shuffle(b)
    a_all = np.concatenate([np.repeat(a[:13], 13), a])
    b_all = np.concatenate([np.tile(a[:13], 13), b])
    got = saturating_rounding_doubling_high_mul(a_all, b_all)
    assert got.dtype == np.int32
    for ai, bi, gi in zip(a_all.tolist(), b_all.tolist(), got.tolist(), strict=True):
        assert gi == ref_srdhm(ai, bi)


def test_rdbpot_against_reference():
    rng = np.random.default_rng(1)
    x = _edge_int32(rng, 400)
    for e in range(32):
        got = rounding_divide_by_pot(x, e).tolist()
        assert got == [ref_rdbpot(int(v), e) for v in x.tolist()]
        # the meaning: x / 2**e rounded half away from zero
        for v, g in zip(x.tolist()[:13], got[:13], strict=True):
            exact = Fraction(v, 2**e)
            away = math.floor(abs(exact) + Fraction(1, 2)) * (1 if v >= 0 else -1)
            assert g == away


def test_mbqm_against_reference_random_multipliers():
    rng = np.random.default_rng(2)
    x = rng.integers(-(2**24), 2**24, 200)
    for _ in range(40):
        mult = float(np.exp(rng.uniform(-20, -0.1)))
        m, s = quantize_multiplier(mult)
        assert (int(m), int(s)) == ref_quantize_multiplier(mult)
        got = multiply_by_quantized_multiplier(x, m, s).tolist()
        assert got == [ref_mbqm(int(v), int(m), int(s)) for v in x.tolist()]
        # and it is the rounded product to within one unit
        for v, g in zip(x.tolist()[:20], got[:20], strict=True):
            assert abs(g - Fraction(v) * Fraction(mult)) <= 1


def test_quantize_multiplier_vectorised_random():
    rng = np.random.default_rng(3)
    d = np.exp(rng.uniform(-30, 10, 500)) * rng.choice([-1, 1], 500)
    m, s = quantize_multiplier(d)
    for di, mi, si in zip(d.tolist(), m.tolist(), s.tolist(), strict=True):
        assert (mi, si) == ref_quantize_multiplier(di)


# -- the layer ------------------------------------------------------------------------------------

@pytest.mark.parametrize("per_channel", [False, True])
def test_int8_linear_against_reference(per_channel):
    rng = np.random.default_rng(4 + per_channel)
    for _ in range(5):
        b, k, n = 3, 37, 6
        x = rng.integers(-128, 128, (b, k)).astype(np.int8)
        w = rng.integers(-127, 128, (n, k)).astype(np.int8)
        bias = rng.integers(-5000, 5000, n).astype(np.int32)
        xs, os_ = float(np.float32(rng.uniform(0.01, 0.1))), float(np.float32(rng.uniform(0.1, 1)))
        xz, oz = int(rng.integers(-20, 20)), int(rng.integers(-10, 10))
        if per_channel:
            ws = rng.uniform(0.001, 0.02, n).astype(np.float32)
            wz = np.zeros(n, np.int64)
        else:
            ws = np.full(n, np.float32(rng.uniform(0.001, 0.02)))
            wz = np.full(n, int(rng.integers(-3, 4)))
        got = int8_linear(x, w, bias, xs, xz, ws if per_channel else ws[0], 0 if per_channel
                          else int(wz[0]), os_, oz)
        assert got.dtype == np.int8
        assert got.tolist() == ref_int8_linear(x, w, bias, xs, xz, ws, wz, os_, oz).tolist()


def test_int8_linear_close_to_real_arithmetic_and_uint8():
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (4, 64)).astype(np.uint8)
    w = rng.integers(-127, 128, (8, 64)).astype(np.int8)
    xs, xz, ws, os_, oz = 0.02, 128, 0.005, 0.05, 100
    got = int8_linear(x, w, None, xs, xz, ws, 0, os_, oz, out_dtype="uint8")
    assert got.dtype == np.uint8
    for bi in range(4):
        for c in range(8):
            acc = sum((int(x[bi, i]) - xz) * int(w[c, i]) for i in range(64))
            m = Fraction(float(np.float32(xs))) * Fraction(float(np.float32(ws))) / Fraction(
                float(np.float32(os_)))
            ideal = min(max(acc * m + oz, 0), 255)
            assert abs(int(got[bi, c]) - ideal) <= 1


def test_int8_linear_float_requantization():
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (2, 50)).astype(np.int8)
    w = rng.integers(-127, 128, (3, 50)).astype(np.int8)
    xs, ws, os_ = 0.03, 0.007, 0.4
    got = int8_linear(x, w, None, xs, 0, ws, 0, os_, 5, requantize="float")
    f = np.float32
    mult = f(f(f(xs) * f(ws)) / f(os_))
    for bi in range(2):
        for c in range(3):
            acc = sum(int(x[bi, i]) * int(w[c, i]) for i in range(50))
            prod = Fraction(float(f(acc))) * Fraction(float(mult))
            prod32 = float(f(float(prod)))  # prod is exact in double; one rounding to float32
            expect = min(max(round(Fraction(prod32)) + 5, -128), 127)
            assert int(got[bi, c]) == expect


def test_accumulator_overflow():
    k = 2**17 + 8  # (-128) * (-128) * k > 2**31
    x = np.full((1, k), -128, np.int8)
    w = np.full((1, k), -128, np.int8)
    with pytest.raises(ValueError, match="overflows"):
        int8_linear(x, w, None, 1.0, 0, 1.0, 0, 1.0, 0)
    got = int8_linear(x, w, None, 1.0, 0, 2.0**-20, 0, 1.0, 0, accumulator_overflow="wrap")
    acc = (16384 * k + 2**31) % 2**32 - 2**31
    m, s = ref_quantize_multiplier(2.0**-20)
    assert int(got[0, 0]) == min(max(ref_mbqm(acc, m, s), -128), 127)


def test_bad_input():
    x = np.zeros((2, 4), np.int8)
    w = np.zeros((3, 4), np.int8)
    with pytest.raises(TypeError):
        int8_linear(x.astype(np.float32), w, None, 1.0, 0, 1.0, 0, 1.0, 0)
    with pytest.raises(ValueError, match="shapes"):
        int8_linear(x, np.zeros((3, 5), np.int8), None, 1.0, 0, 1.0, 0, 1.0, 0)
    with pytest.raises(ValueError, match="positive"):
        int8_linear(x, w, None, 0.0, 0, 1.0, 0, 1.0, 0)
    with pytest.raises(ValueError, match="requantize"):
        int8_linear(x, w, None, 1.0, 0, 1.0, 0, 1.0, 0, requantize="magic")
    with pytest.raises(ValueError, match="bias"):
        int8_linear(x, w, np.zeros(2, np.int32), 1.0, 0, 1.0, 0, 1.0, 0)
    with pytest.raises(ValueError, match="exponent"):
        rounding_divide_by_pot(5, 32)
    with pytest.raises(ValueError, match="int32"):
        saturating_rounding_doubling_high_mul(2**31, 1)
    with pytest.raises(ValueError, match="overflows int32"):
        multiply_by_quantized_multiplier(2**30, 2**30, 2)
    with pytest.raises(ValueError, match="finite"):
        quantize_multiplier(float("inf"))


def test_int8_linear_zero_point_errors():
    x = np.ones((1, 2), np.int8)
    w = np.ones((2, 2), np.int8)
    args = dict(bias_int32=None, x_scale=0.1, w_scale=0.1, out_scale=0.1)
    with pytest.raises(TypeError, match="x_zp must be an integer"):
        int8_linear(x, w, x_zp=0.5, w_zp=0, out_zp=0, **args)
    with pytest.raises(ValueError, match=r"x_zp 200 outside int8 \[-128, 127\]"):
        int8_linear(x, w, x_zp=200, w_zp=0, out_zp=0, **args)
    with pytest.raises(TypeError, match="w_zp must be an integer"):
        int8_linear(x, w, x_zp=0, w_zp=None, out_zp=0, **args)
    with pytest.raises(ValueError, match=r"w_zp must be a scalar or one per output channel"):
        int8_linear(x, w, x_zp=0, w_zp=[0, 0, 0], out_zp=0, **args)
    with pytest.raises(ValueError, match=r"out_zp 300 outside int8"):
        int8_linear(x, w, x_zp=0, w_zp=0, out_zp=300, **args)
    with pytest.raises(ValueError, match="out_scale must be finite and positive"):
        int8_linear(x, w, x_zp=0, w_zp=0, out_zp=0, bias_int32=None, x_scale=0.1, w_scale=0.1,
                    out_scale=0.0)
    # integral floats are integers
    assert int8_linear(x, w, x_zp=1.0, w_zp=0, out_zp=0, **args).tolist() == [[0, 0]]


def test_quantize_multiplier_argument_errors():
    with pytest.raises(ValueError, match="real_multiplier must be finite"):
        quantize_multiplier(float("nan"))
    with pytest.raises(ValueError, match="real_multiplier must be finite"):
        quantize_multiplier([1.0, float("inf")])
    with pytest.raises(TypeError, match="real_multiplier must be a real number"):
        quantize_multiplier(None)
    assert [int(v) for v in quantize_multiplier(0.0)] == [0, 0]
