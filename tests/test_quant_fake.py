"""fake_quantize / quantize / dequantize / LSQ / TensorRT against PyTorch's formulas written
independently here: exact fractions.Fraction arithmetic, rounded to float32 with MPFR (gmpy2)
at exactly the points where PyTorch's C++ kernel rounds, and Python's round() (half to even)
for nearbyint."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from fpsim.quant import (
    dequantize,
    fake_quantize,
    fake_quantize_per_channel,
    fake_quantize_ste_mask,
    lsq_grad,
    lsq_grad_scale,
    lsq_init_step,
    quant_range,
    quantize,
    tensorrt_fake_quantize,
    tensorrt_quantize,
    tensorrt_scale,
)
from tests.intlike import Count


def f32(v) -> Fraction:
    """Round an exact rational to the nearest float32 (ties to even), as a Fraction."""
    q = Fraction(v)
    with gmpy2.ieee(32):
        r = gmpy2.mpfr(gmpy2.mpq(q.numerator, q.denominator))
    if gmpy2.is_infinite(r):
        raise OverflowError
    return Fraction(*(int(t) for t in r.as_integer_ratio()))


def ref_fake_quant(x: float, scale: float, z: int, qmin: int, qmax: int):
    """PyTorch's CPU kernel for float32 input, on exact rationals: returns (out, mask)."""
    s = f32(Fraction(scale))  # `float sc`
    inv = f32(1 / s)  # 1.0f / sc
    t = f32(Fraction(float(x)) * inv)  # float * float
    qf = f32(z + round(t))  # nearbyint (half even), then int64 + float in float
    mask = qmin <= qf <= qmax
    q = min(max(qf, qmin), qmax)
    return f32((q - z) * s), mask


def as_frac32(arr) -> list[Fraction]:
    return [Fraction(float(v)) for v in np.asarray(arr, np.float32).reshape(-1)]


# -- hand-checked cases ----------------------------------------------------------------------

def test_ties_round_half_to_even():
    # scale 0.5: x / s lands exactly on .5; half to even: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2,
    # -3.5 -> -4, 0.5 -> 0, 1.5 -> 2
    x = np.array([1.25, 1.75, -1.25, -1.75, 0.25, 0.75], np.float32)
    out = fake_quantize(x, 0.5, 0, -128, 127)
    assert out.tolist() == [1.0, 2.0, -1.0, -2.0, 0.0, 1.0]
    assert out.dtype == np.float32


def test_clamping_and_mask_at_qmin_qmax():
    s = 0.5
    x = np.array([63.5, 63.75, 63.25, 64.0, 100.0, -64.0, -64.25, -64.5, -100.0], np.float32)
    # x / s = 127, 127.5 (-> 128, clamped), 126.5 (-> 126), 128, 200, -128, -128.5 (-> -128),
    # -129, -200
    out = fake_quantize(x, s, 0, -128, 127)
    assert out.tolist() == [63.5, 63.5, 63.0, 63.5, 63.5, -64.0, -64.0, -64.0, -64.0]
    mask = fake_quantize_ste_mask(x, s, 0, -128, 127)
    assert mask.tolist() == [True, False, True, False, False, True, True, False, False]


def test_zero_point_affine_quint8():
    s, z = 0.5, 3
    x = np.array([-2.0, -1.5, -1.75, 0.0, 126.0, 127.0], np.float32)
    # x / s + z = -1 (clamped to 0), 0, -0.5 -> 0 (even) + 3 = ... computed as z + rint(x/s):
    # rint(-3.5) = -4 -> -1 -> clamp 0; rint(-3) + 3 = 0; 3; 255; 257 -> 255
    out = fake_quantize(x, s, z, 0, 255)
    assert out.tolist() == [-1.5, -1.5, -1.5, 0.0, 126.0, 126.0]
    mask = fake_quantize_ste_mask(x, s, z, 0, 255)
    assert mask.tolist() == [False, True, False, True, True, False]


def test_reciprocal_not_division_fbgemm_example():
    # FBGEMM's comment: x * (1/s) is 127.5 in float32 (-> 128), x / s is 127.49999 (-> 127)
    x, s = np.float32(0.273939937), 0.00214854861
    sf = f32(Fraction(s))
    exact_div = Fraction(float(x)) / sf
    assert round(f32(exact_div)) == 127  # what dividing would give
    out = fake_quantize(np.array([x]), s, 0, 0, 255)
    assert Fraction(float(out[0])) == f32(128 * sf)
    assert int(quantize(x, s, 0, dtype="uint8")) == 128


def test_nan_and_infinities_follow_the_kernel():
    x = np.array([np.nan, np.inf, -np.inf], np.float32)
    out = fake_quantize(x, 0.25, 2, -8, 7)
    # fmax(NaN, qmin) = qmin: NaN -> (qmin - z) * s; inf clamps to qmax, -inf to qmin
    assert out.tolist() == [(-8 - 2) * 0.25, (7 - 2) * 0.25, (-8 - 2) * 0.25]
    assert fake_quantize_ste_mask(x, 0.25, 2, -8, 7).tolist() == [False, False, False]


# -- random comparison with the exact reference --------------------------------------------

def _random_cases(rng, n):
    for _ in range(n):
        qmin, qmax = [(-128, 127), (0, 255), (-8, 7), (0, 15), (-64, 63)][rng.integers(5)]
        z = int(rng.integers(qmin, qmax + 1))
        scale = float(np.exp(rng.uniform(-12, 3)))
        yield qmin, qmax, z, scale


def test_per_tensor_matches_reference_bitwise():
    rng = np.random.default_rng(1)
    for qmin, qmax, z, scale in _random_cases(rng, 40):
        # values on and around the grid, ties included
        k = rng.integers(qmin - z - 5, qmax - z + 6, 60).astype(np.float64)
        x = np.concatenate([(k + rng.choice([0.0, 0.5, -0.5, 0.499, 0.501], 60)) * scale,
                            rng.standard_normal(30) * scale * (qmax - qmin) / 2])
        x = x.astype(np.float32)
        out = fake_quantize(x, scale, z, qmin, qmax)
        mask = fake_quantize_ste_mask(x, scale, z, qmin, qmax)
        for xi, oi, mi in zip(x, out, mask, strict=True):
            ro, rm = ref_fake_quant(float(xi), scale, z, qmin, qmax)
            assert Fraction(float(oi)) == ro, (xi, scale, z, qmin, qmax)
            assert bool(mi) == rm


def test_qint32_range_rounds_twice_per_tensor_once_per_channel():
    # beyond 2**24 the per-tensor kernel converts (q - z) to float before multiplying (two
    # roundings); the per-channel kernel multiplies in double (one rounding)
    rng = np.random.default_rng(9)
    s, z, qmin, qmax = 0.001, 12345, -(2**31), 2**31 - 1
    x = (rng.standard_normal(300) * 1e5).astype(np.float32)
    out = fake_quantize(x, s, z, qmin, qmax)
    out_c = fake_quantize_per_channel(x[None, :], [s], [z], 0, qmin, qmax)[0]
    sf = f32(Fraction(s))
    inv = f32(1 / sf)
    twice = 0
    for xi, oi, ci in zip(x, out, out_c, strict=True):
        qf = f32(z + round(f32(Fraction(float(xi)) * inv)))
        q = min(max(qf, qmin), qmax)
        assert Fraction(float(oi)) == f32(f32(q - z) * sf)
        assert Fraction(float(ci)) == f32((q - z) * sf)
        twice += f32(f32(q - z) * sf) != f32((q - z) * sf)
    assert twice > 0  # the data does reach the double rounding


def test_float64_input_uses_double_product_and_float_output():
    # the double kernel: x * inv_scale in double, output (q - z) * sc in float
    s, z = 0.1, 0
    x = np.array([0.25, 0.35, 0.15000000000000002, 1 / 3], np.float64)
    out = fake_quantize(x, s, z, -128, 127)
    assert out.dtype == np.float64
    sf = f32(Fraction(s))
    inv = f32(1 / sf)
    for xi, oi in zip(x, out, strict=True):
        t = Fraction(float(Fraction(xi) * inv))  # rounded to double
        q = min(max(round(t) + z, -128), 127)
        assert Fraction(float(oi)) == f32((q - z) * sf)


def test_half_input_computes_in_float32():
    x = np.array([0.3, -1.7, 2.5], np.float16)
    out = fake_quantize(x, 0.5, 0, -128, 127)
    assert out.dtype == np.float16
    expect = [float(ref_fake_quant(float(v), 0.5, 0, -128, 127)[0]) for v in x.astype(np.float32)]
    assert out.astype(np.float64).tolist() == expect
    xb = np.array([0.3, -1.7], ml_dtypes.bfloat16)
    assert fake_quantize(xb, 0.5, 0, -128, 127).dtype == xb.dtype


def test_per_channel_matches_reference():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 4, 5)) * 2).astype(np.float32)
    for axis in (0, 1, 2, -1):
        n = x.shape[axis]
        scales = np.exp(rng.uniform(-5, 0, n)).astype(np.float32)
        zps = rng.integers(-3, 4, n)
        out = fake_quantize_per_channel(x, scales, zps, axis, -8, 7)
        mask = fake_quantize_ste_mask(x, scales, zps, -8, 7, axis=axis)
        ax = axis % 3
        for idx in np.ndindex(x.shape):
            c = idx[ax]
            ro, rm = ref_fake_quant(float(x[idx]), float(scales[c]), int(zps[c]), -8, 7)
            assert Fraction(float(out[idx])) == ro
            assert bool(mask[idx]) == rm


def test_quantize_dequantize_reference():
    rng = np.random.default_rng(3)
    for qmin, qmax, z, scale in _random_cases(rng, 20):
        dtype = "uint8" if qmin >= 0 else "int8"
        x = (rng.standard_normal(50) * scale * 100).astype(np.float32)
        q = quantize(x, scale, z, qmin, qmax, dtype)
        assert q.dtype == (np.uint8 if dtype == "uint8" else np.int8)
        sf = f32(Fraction(scale))
        inv = f32(1 / sf)
        for xi, qi in zip(x, q, strict=True):
            # per tensor, 8-bit: the zero point added before rounding, one float32 rounding
            # of x * inv + z (FBGEMM's FMA kernel)
            r = round(f32(Fraction(float(xi)) * inv + z))
            assert int(qi) == min(max(r, qmin), qmax)
        d = dequantize(q, scale, z)
        assert d.dtype == np.float32
        for qi, di in zip(q, d, strict=True):
            assert Fraction(float(di)) == f32((int(qi) - z) * sf)


def test_quantize_per_channel_and_int32():
    x = np.array([[1.0, -1.0], [1.0, -1.0]], np.float32)
    q = quantize(x, [0.5, 0.25], [0, 1], axis=0)
    assert q.tolist() == [[2, -2], [5, -3]]
    assert dequantize(q, [0.5, 0.25], [0, 1], axis=0).tolist() == x.tolist()
    # ties: rint(x * inv + z) with two float32 roundings: 1.5 + 1 = 2.5 -> 2, -3.5 + 1 -> -2
    qt = quantize(np.array([[0.375, -0.875]], np.float32), [0.25], [1], axis=0)
    assert qt.tolist() == [[2, -2]]
    big = quantize(np.float32(1e12), 1.0, 0, dtype="int32")
    assert int(big) == 2**31 - 1


# -- LSQ ------------------------------------------------------------------------------------

def test_lsq_grad_exact_for_power_of_two_step():
    s = 0.25
    x = np.array([0.3, 0.1, -0.6, 1.2, -2.2, 1.9, 1.8625], np.float32)
    mask, ds = lsq_grad(x, s, -8, 7)
    for xi, mi, di in zip(x, mask, ds, strict=True):
        v = Fraction(float(xi)) / Fraction(s)
        r = round(v)
        if -8 <= r <= 7:
            assert mi and Fraction(float(di)) == r - v  # -v/s + round(v/s), exact here
        else:
            assert not mi and float(di) == (-8 if r < -8 else 7)


def test_lsq_grad_close_to_formula_for_any_step():
    rng = np.random.default_rng(4)
    for _ in range(20):
        s = float(np.exp(rng.uniform(-6, 2)))
        x = (rng.standard_normal(200) * s * 6).astype(np.float32)
        mask, ds = lsq_grad(x, s, -8, 7)
        sf = f32(Fraction(s))
        inv = f32(1 / sf)
        for xi, mi, di in zip(x, mask, ds, strict=True):
            q = round(f32(Fraction(float(xi)) * inv))
            assert bool(mi) == (-8 <= q <= 7)
            if mi:
                v = Fraction(float(xi)) / sf
                assert abs(float(di) - float(round(v) - v)) <= 8 * 2.0**-24 * max(1, abs(v))
            else:
                assert float(di) == (-8.0 if q < -8 else 7.0)


def test_lsq_scales():
    assert lsq_grad_scale(1000, 127) == 1 / math.sqrt(127000)
    assert lsq_init_step([3.0, -1.0], 4) == 2.0  # 2 * mean(|v|) / sqrt(4) = 2 * 2 / 2
    with pytest.raises(ValueError):
        lsq_grad_scale(0, 127)
    with pytest.raises(ValueError):
        lsq_init_step([np.nan], 127)


def test_lsq_counts_share_the_as_int_rule():
    # num_elements and quant_max are counts (fpsim.checks.as_int): int() took 2.7 as 2 and
    # True as 1; what range() takes is the int's value
    for conv in (np.int16, np.array, Count):
        assert lsq_grad_scale(conv(1000), conv(127)) == lsq_grad_scale(1000, 127)
        assert lsq_init_step([3.0, -1.0], conv(4)) == 2.0
    for bad in (True, 2.7, 127.0, "127", None, np.array([127]), np.timedelta64(127)):
        with pytest.raises(TypeError, match=f"num_elements must be an int, got "
                                            f"{type(bad).__name__}"):
            lsq_grad_scale(bad, 127)
        for call in (lambda q: lsq_grad_scale(1000, q), lambda q: lsq_init_step([1.0], q)):
            with pytest.raises(TypeError, match=f"quant_max must be an int, got "
                                                f"{type(bad).__name__}"):
                call(bad)
    for bad in (0, -3, np.int64(0)):
        with pytest.raises(ValueError, match=f"must be positive, got {bad}, 127"):
            lsq_grad_scale(bad, 127)
        with pytest.raises(ValueError, match=f"quant_max must be positive, got {bad}"):
            lsq_init_step([1.0], bad)


# -- TensorRT --------------------------------------------------------------------------------

def test_tensorrt_hand_cases():
    assert float(tensorrt_scale(127.0)) == 1.0
    q = tensorrt_quantize(np.array([2.5, 3.5, -2.5, 200.0, -200.0, 127.4], np.float32), 127.0)
    assert q.tolist() == [2, 4, -2, 127, -128, 127]
    assert tensorrt_quantize(np.array([1.0, -3.0], np.float32), 0.0).tolist() == [0, 0]
    assert tensorrt_quantize(np.array([-200.0], np.float32), 127.0, narrow_range=True)[0] == -127


def test_tensorrt_matches_facts_formula_away_from_ties():
    # facts: x_q = round_half_even(clip(x / s, -128, 127)), s = amax / 127, exactly
    rng = np.random.default_rng(5)
    for _ in range(10):
        amax = float(np.float32(np.exp(rng.uniform(-4, 4))))
        x = (rng.standard_normal(300) * amax * 0.7).astype(np.float32)
        q = tensorrt_quantize(x, amax)
        fq = tensorrt_fake_quantize(x, amax)
        for xi, qi, fi in zip(x, q, fq, strict=True):
            v = Fraction(float(xi)) * 127 / Fraction(amax)
            if abs(v - math.floor(v) - Fraction(1, 2)) < Fraction(1, 10**4):
                continue  # float32 rounding of the product may move a near-tie
            expect = round(min(max(v, -128), 127))
            assert int(qi) == expect
            assert abs(float(fi) - expect * amax / 127) <= 2.0**-22 * amax


# -- bad input -------------------------------------------------------------------------------

def test_bad_arguments():
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="quant_min"):
        fake_quantize(x, 0.1, 0, 5, 4)
    with pytest.raises(ValueError, match="zero_point"):
        fake_quantize(x, 0.1, 300, 0, 255)
    with pytest.raises(ValueError, match="scale"):
        fake_quantize(x, 0.0, 0, 0, 255)
    with pytest.raises(ValueError, match="scale"):
        fake_quantize(x, -1.0, 0, 0, 255)
    with pytest.raises(ValueError, match="integer"):
        fake_quantize(x, 0.1, 0.5, 0, 255)
    with pytest.raises(ValueError, match="channels"):
        fake_quantize_per_channel(np.ones((2, 3), np.float32), [1.0, 1.0], [0, 0], 1, 0, 255)
    with pytest.raises(ValueError, match="axis"):
        fake_quantize_per_channel(np.ones((2, 3), np.float32), [1.0, 1.0], [0, 0], 2, 0, 255)
    with pytest.raises(ValueError, match="NaN"):
        quantize(np.array([np.nan], np.float32), 0.1, 0)
    with pytest.raises(ValueError, match="does not fit"):
        quantize(x, 0.1, 0, -200, 127, "int8")
    with pytest.raises(TypeError):
        fake_quantize(np.array([1 + 2j]), 0.1, 0, 0, 255)
    with pytest.raises(TypeError):
        dequantize(np.ones(2, np.float32), 0.1, 0)


@pytest.mark.parametrize("bits", [0, 1, 9, 12, 64])
def test_unsupported_bit_widths(bits):
    with pytest.raises(ValueError, match="valid: 2, 3, 4, 5, 6, 7, 8, 16, 32"):
        quant_range(bits)
    with pytest.raises(ValueError, match="valid"):
        tensorrt_quantize(np.ones(2, np.float32), 1.0, num_bits=bits)


def test_quant_range_values():
    assert quant_range(8) == (-128, 127)
    assert quant_range(8, signed=False) == (0, 255)
    assert quant_range(4) == (-8, 7)
    assert quant_range(8, narrow_range=True) == (-127, 127)
    assert quant_range(2) == (-2, 1)


# -- recorded PyTorch 2.13 results at the rounding ties ------------------------------------------
# tests/data/torch/quant_ties.npz, written by tools/record_torch_quant_ties.py with torch 2.13.0
# (CPU, x86-64 AVX2): every half-integer x * (1 / scale) of each range and its float32
# neighbours, several scales (non-powers of two included) and zero points, per tensor and per
# channel, quint8 / qint8 / qint32.

TIES = Path(__file__).parent / "data" / "torch" / "quant_ties.npz"
QDTYPES = {"quint8": "uint8", "qint8": "int8", "qint32": "int32"}


@pytest.fixture(scope="module")
def ties():
    with np.load(TIES) as d:
        data = {k: d[k] for k in d.files}
    data["meta"] = json.loads(str(data["meta"]))
    return data


def _bits_equal(a, b) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.int32) == np.asarray(b, np.float32).view(np.int32)


def _rounding_first(x, scale, z, qmin, qmax):
    """The textbook order, rounding before adding the zero point (what PyTorch does NOT do
    in quantize_per_tensor / quantize_per_channel)."""
    inv = np.float32(1) / np.float32(scale)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.clip(z + np.rint(x * inv).astype(np.float64), qmin, qmax)


def test_recorded_file_is_torch_2_13(ties):
    assert ties["meta"]["torch"].startswith("2.13.")
    assert len(ties["meta"]["per_tensor"]) == 30 and len(ties["meta"]["per_channel"]) == 5


def test_quantize_per_tensor_matches_torch_at_ties(ties):
    n = differs_rounding_first = differs_unfused = 0
    for i, m in enumerate(ties["meta"]["per_tensor"]):
        x, want = ties[f"pt{i}/x"], ties[f"pt{i}/q"]
        dt, s, z = QDTYPES[m["dtype"]], m["scale"], m["zero_point"]
        got = quantize(x, s, z, dtype=dt)
        assert got.dtype == np.dtype(dt)
        bad = np.nonzero(got.astype(np.int64) != want)[0]
        assert bad.size == 0, (m, x[bad[:5]], got[bad[:5]], want[bad[:5]])
        n += x.size
        qmin, qmax = np.iinfo(dt).min, np.iinfo(dt).max
        differs_rounding_first += int((_rounding_first(x, s, z, qmin, qmax) != want).sum())
        if dt != "int32":  # the 8-bit kernel rounds x * inv + z once (FMA), not twice
            inv = np.float32(1) / np.float32(s)
            with np.errstate(over="ignore", invalid="ignore"):
                twice = np.clip(np.rint(x * inv + np.float32(z)), qmin, qmax)
            differs_unfused += int((twice != want).sum())
    assert n > 60000
    # the data reaches both distinctions, so this test can tell the kernels apart
    assert differs_rounding_first > 1000 and differs_unfused > 100


def test_quantize_per_channel_matches_torch_at_ties(ties):
    differs = 0
    for i, m in enumerate(ties["meta"]["per_channel"]):
        x, want = ties[f"pc{i}/x"], ties[f"pc{i}/q"]
        s, z = ties[f"pc{i}/scales"], ties[f"pc{i}/zero_points"]
        dt, axis = QDTYPES[m["dtype"]], m["axis"]
        got = quantize(x, s, z, dtype=dt, axis=axis)
        np.testing.assert_array_equal(got.astype(np.int64), want, err_msg=str(m))
        # one scale per channel: each channel alone, per tensor, is NOT the same kernel for
        # 8-bit (FMA there); count the difference to be sure the data shows it
        if dt != "int32":
            xm, wm = np.moveaxis(x, axis, 0), np.moveaxis(want, axis, 0)
            for c in range(s.size):
                differs += int((quantize(xm[c], s[c], z[c], dtype=dt) != wm[c]).sum())
    assert differs > 0


def test_dequantize_matches_torch(ties):
    for i, m in enumerate(ties["meta"]["per_tensor"]):
        q, want = ties[f"pt{i}/q"], ties[f"pt{i}/dq"]
        dt, s, z = QDTYPES[m["dtype"]], m["scale"], m["zero_point"]
        got = dequantize(q.astype(dt), s, z)
        assert got.dtype == np.float32
        # PyTorch computes q - z in int32 and wraps on overflow; fpsim does not
        fits = np.abs(q - z) <= 2**31 - 1 if dt == "int32" else np.ones(q.shape, bool)
        assert _bits_equal(got, want)[fits].all(), m
        assert fits.mean() > 0.5
    for i, m in enumerate(ties["meta"]["per_channel"]):
        q, want = ties[f"pc{i}/q"], ties[f"pc{i}/dq"]
        dt = QDTYPES[m["dtype"]]
        got = dequantize(q.astype(dt), ties[f"pc{i}/scales"], ties[f"pc{i}/zero_points"],
                         axis=m["axis"])
        assert _bits_equal(got, want).all(), m


def test_fake_quantize_matches_torch_at_ties(ties):
    # fake quantization rounds first, then adds the zero point (the other order)
    differs_add_first = 0
    for i, m in enumerate(ties["meta"]["fake"]):
        x = ties[f"fq{i}/x"]
        args = (m["scale"], m["zero_point"], m["quant_min"], m["quant_max"])
        assert _bits_equal(fake_quantize(x, *args), ties[f"fq{i}/out"]).all(), m
        np.testing.assert_array_equal(fake_quantize_ste_mask(x, *args), ties[f"fq{i}/mask"])
        if m["quant_max"] - m["quant_min"] < 2**16:
            finite = np.isfinite(x)
            q = quantize(x[finite], m["scale"], m["zero_point"], m["quant_min"],
                         m["quant_max"], "int8" if m["quant_min"] < 0 else "uint8")
            fq_q = np.rint(ties[f"fq{i}/out"][finite] / np.float32(m["scale"])) + m["zero_point"]
            differs_add_first += int((q != fq_q).sum())
    assert differs_add_first > 1000


def test_fake_quantize_per_channel_matches_torch(ties):
    for i, m in enumerate(ties["meta"]["fake_per_channel"]):
        x, s, z = ties[f"fqc{i}/x"], ties[f"fqc{i}/scales"], ties[f"fqc{i}/zero_points"]
        out = fake_quantize_per_channel(x, s, z, 0, m["quant_min"], m["quant_max"])
        assert _bits_equal(out, ties[f"fqc{i}/out"]).all(), m
        mask = fake_quantize_ste_mask(x, s, z, m["quant_min"], m["quant_max"], axis=0)
        np.testing.assert_array_equal(mask, ties[f"fqc{i}/mask"])
    # x86-64: +inf (and 1e30 * 10, beyond int64) becomes qmin per channel
    assert fake_quantize_per_channel(np.float32([[np.inf, 1e30, -np.inf]]), [0.1], [3], 0,
                                     -8, 7).tolist() == [[np.float32(-1.1)] * 3]
    assert fake_quantize(np.float32([np.inf, -np.inf]), 0.1, 3, -8, 7).tolist() == [
        np.float32(0.4), np.float32(-1.1)]


def test_notebook_06_example():
    # notebook 06's cell: MinMaxObserver on [-0.7, 0.2, 2.3] (scale 0.0117647061124444,
    # zero point 59), values recorded there from torch.quantize_per_tensor
    xs = np.array([-0.7, -0.35, 0.0, 0.2, 0.5, 1.0, 1.5, 2.0, 2.3], np.float32)
    q = quantize(xs, 0.0117647061124444, 59, dtype="uint8")
    assert q.tolist() == [0, 29, 59, 76, 102, 144, 186, 229, 254]


# -- argument errors name the argument and the valid choices ------------------------------------

@pytest.mark.parametrize("amax, exc, msg", [
    (None, TypeError, "amax must be a real number"),
    ("1.0", TypeError, "amax must be a real number"),
    (1 + 2j, TypeError, "amax must be a real number"),
    (-1.0, ValueError, "amax must be finite in float32 and >= 0"),
    (float("nan"), ValueError, "amax must be finite"),
    (float("inf"), ValueError, "amax must be finite"),
    (1e39, ValueError, "amax must be finite in float32"),
])
def test_tensorrt_amax_errors(amax, exc, msg):
    x = np.ones(2, np.float32)
    for fn in (lambda: tensorrt_scale(amax), lambda: tensorrt_quantize(x, amax),
               lambda: tensorrt_fake_quantize(x, amax)):
        with pytest.raises(exc, match=msg):
            fn()


@pytest.mark.parametrize("scale, exc", [(None, TypeError), ("0.1", TypeError),
                                        (0.0, ValueError), (-0.1, ValueError),
                                        (float("nan"), ValueError), (float("inf"), ValueError),
                                        (1e-50, ValueError)])
def test_scale_errors_name_the_scale(scale, exc):
    x = np.ones(2, np.float32)
    with pytest.raises(exc, match="scale"):
        quantize(x, scale, 0)
    with pytest.raises(exc, match="scale"):
        fake_quantize(x, scale, 0, 0, 255)
    with pytest.raises(exc, match="scale"):
        dequantize(np.ones(2, np.int8), scale, 0)


def test_quantize_dtype_and_range_errors():
    x = np.ones(2, np.float32)
    with pytest.raises(ValueError, match="unknown quantized dtype 'int4'; valid: 'qint8', "
                                         "'quint8', 'qint32'"):
        quantize(x, 0.1, 0, dtype="int4")
    with pytest.raises(TypeError, match="zero_point must be an integer, got None"):
        quantize(x, 0.1, None)
    with pytest.raises(ValueError, match="zero_point must be between quant_min and quant_max"):
        quantize(x, 0.1, 300, dtype="uint8")
    with pytest.raises(ValueError, match="quant_min should be less than or equal to quant_max"):
        quantize(x, 0.1, 0, 5, 0, "uint8")
    with pytest.raises(ValueError, match="scale must be one value per tensor without axis"):
        dequantize(np.ones(2, np.int8), [0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="zero_point must be one value per tensor without axis"):
        quantize(x, 0.1, [0, 0])


def test_lsq_grad_matches_torch_learnable_kernel_at_ties(ties):
    # PyTorch's learnable kernel adds the zero point before rounding (its zero point is a
    # float parameter): nearbyint(z + x * inv_scale), fused; fpsim's lsq_grad does the same.
    # The backward pass turns the float zero point into int64(z + 0.5) (truncation: -1 -> 0)
    assert len(ties["meta"]["lsq"]) == 5
    for i, m in enumerate(ties["meta"]["lsq"]):
        x = ties[f"lsq{i}/x"]
        z_kernel = int(np.float32(m["zero_point"]) + np.float32(0.5))  # C++ truncation
        mask, ds = lsq_grad(x, m["scale"], m["quant_min"], m["quant_max"], z_kernel)
        np.testing.assert_array_equal(mask, ties[f"lsq{i}/dx_mask"], err_msg=str(m))
        assert _bits_equal(ds, ties[f"lsq{i}/dscale"]).all(), m


def test_fake_quantize_float64_and_half_inputs_match_torch(ties):
    import ml_dtypes as mld
    dtypes = {"float64": np.float64, "float16": np.float16, "bfloat16": mld.bfloat16}
    assert len(ties["meta"]["fake_dtypes"]) == 7
    for i, m in enumerate(ties["meta"]["fake_dtypes"]):
        x = ties[f"fqd{i}/x"].astype(dtypes[m["dtype"]])  # exact: recorded as stored
        args = (m["scale"], m["zero_point"], m["quant_min"], m["quant_max"])
        out = fake_quantize(x, *args)
        assert out.dtype == x.dtype
        want = ties[f"fqd{i}/out"]
        o64 = out.astype(np.float64)
        same = (o64.view(np.int64) == want.view(np.int64)) | (np.isnan(want) & np.isnan(o64))
        assert same.all(), (m, x[~same][:5], out[~same][:5], want[~same][:5])
        np.testing.assert_array_equal(fake_quantize_ste_mask(x, *args), ties[f"fqd{i}/mask"])


def test_observer_qparams_match_torch_at_zero_point_ties(ties):
    from fpsim.quant import MinMaxObserver, PerChannelMinMaxObserver, calculate_qparams
    lo_hi = ties["obs/min_max"]
    assert len(ties["meta"]["observers"]) == 7
    for i, m in enumerate(ties["meta"]["observers"]):
        def observer(m=m):
            return MinMaxObserver(dtype=m["dtype"], qscheme=m["qscheme"],
                                  reduce_range=m["reduce_range"], quant_min=m["quant_min"],
                                  quant_max=m["quant_max"])
        # the observer itself on a sample of the ranges, its formula on all of them at once
        for j in range(0, len(lo_hi), 37):
            ob = observer()
            ob(lo_hi[j])
            s, z = ob.calculate_qparams()
            assert _bits_equal(s, ties[f"obs{i}/scale"][j]).all(), m
            assert z[0] == ties[f"obs{i}/zero_point"][j], m
        ob = observer()
        s, z = calculate_qparams(lo_hi[:, 0], lo_hi[:, 1], ob.quant_min, ob.quant_max,
                                 ob.qscheme, ob.dtype, ob.eps, ob.has_customized_qrange)
        assert _bits_equal(s, ties[f"obs{i}/scale"]).all(), m
        np.testing.assert_array_equal(z, ties[f"obs{i}/zero_point"], err_msg=str(m))
    ob = PerChannelMinMaxObserver(ch_axis=0, dtype="quint8", qscheme="per_channel_affine")
    ob(lo_hi)
    s, z = ob.calculate_qparams()
    assert _bits_equal(s, ties["obs_pc/scale"]).all()
    np.testing.assert_array_equal(z, ties["obs_pc/zero_point"])
    # the ranges do reach the ties of min / scale, where rounding half away would differ
    mn = np.minimum(lo_hi[:, 0], 0)
    r = mn / ((np.maximum(lo_hi[:, 1], 0) - mn) / np.float32(255))
    ties_at = (r % 1) == 0.5
    assert ties_at.sum() > 300
    away = -np.trunc(r - np.float32(0.5))  # 0 - round_half_away(r)
    assert (away[ties_at] != ties["obs0/zero_point"][ties_at]).sum() > 100


def test_fused_multiply_add_model_against_mpfr():
    # the float32 fma that models FBGEMM's _mm256_fmadd_ps (quantize per tensor, 8-bit) and
    # the contracted LSQ kernel: a * b + c rounded once, checked against exact fractions
    # rounded by MPFR, on sums built to land on and next to float32 halfway points
    from fpsim.quant.fake_quant import _fma_to_float32
    rng = np.random.default_rng(15)
    a = rng.standard_normal((30, 100)).astype(np.float32).T  # non-contiguous
    b = rng.standard_normal((100, 1)).astype(np.float32)
    near = np.asarray(a, np.float64) * b
    c = (-near + rng.integers(-300, 300, near.shape) + 0.5 * rng.integers(0, 2, near.shape))
    c = c.astype(np.float32)
    # and sums a hair below a float32 halfway point above an odd float32 c: (1 + 2**-23) *
    # (1 - 2**-23) = 1 - 2**-46, scaled to half an ulp of c; float64 rounds the sum onto the
    # halfway point, float32 then rounds it up to even, the exact sum rounds down to c
    e = rng.integers(6, 40, 100)
    k = rng.integers(2**22, 2**23, 100) * 2 + 1  # odd significands
    sign = rng.choice([-1.0, 1.0], 100)
    c[:, 0] = (sign * k * 2.0 ** (e - 23.0)).astype(np.float32)  # exact: 24 bits
    a[:, 0] = (sign * (1 + 2.0**-23) * 2.0 ** (e - 24.0)).astype(np.float32)
    b[:, 0] = np.float32(1 - 2.0**-23)
    near = np.asarray(a, np.float64) * b
    got = _fma_to_float32(a, b, c)
    assert got.shape == a.shape and got.dtype == np.float32
    double = (near + c).astype(np.float32)  # float64 sum then float32: rounds twice
    for ai, bi, ci, gi in zip(a.ravel(), np.broadcast_to(b, a.shape).ravel(), c.ravel(),
                              got.ravel(), strict=True):
        assert Fraction(float(gi)) == f32(Fraction(float(ai)) * Fraction(float(bi))
                                          + Fraction(float(ci)))
    assert (double != got).sum() >= 100  # the cases reach the double rounding
    assert float(_fma_to_float32(np.float32(0.5), np.float32(3), np.asarray(0.25))) == 1.75


def test_bit_widths_share_the_as_int_rule():
    # quant_range's and the integer layers' bits are checked by fpsim.checks.as_int, then
    # against the valid widths: what range() takes is a width, other types a TypeError
    from fpsim.quant.layers import check_bits

    for b in (np.int8(4), np.array(4), Count(4)):
        assert quant_range(b) == quant_range(4) and quant_range(b, False) == quant_range(4, False)
        assert check_bits(b) == 4 and type(check_bits(b)) is int
    for bad in (True, 4.0, "4", None, np.array([4]), np.timedelta64(4)):
        with pytest.raises(TypeError, match=f"bits must be an int, got {type(bad).__name__}"):
            quant_range(bad)
        with pytest.raises(TypeError, match=f"bits must be an int, got {type(bad).__name__}"):
            check_bits(bad)
    for bad in (0, -8, 1, np.int64(64)):
        with pytest.raises(ValueError, match=f"unsupported bit width {bad}"):
            quant_range(bad)
        msg = f"unsupported bit width {bad!r} for an integer"
        with pytest.raises(ValueError, match=re.escape(msg)):
            check_bits(bad)
