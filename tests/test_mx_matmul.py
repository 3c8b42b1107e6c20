"""fpsim.mx.matmul against exact Fractions built from the stored scales and elements (exact mode:
one rounding to float64 by Python's Fraction -> float; fp32 mode: each block's exact value
rounded to fp32 by an integer round-half-even written here, then NumPy float32 additions), and
the tensor-core model against fpsim.tensorcore.matmul where every scale is 1."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim.mx as mx
import fpsim.tensorcore as tc

PAIRS = [("mxfp8_e4m3", "mxfp8_e4m3"), ("mxfp8_e5m2", "mxfp8_e5m2"),
         ("mxfp8_e4m3", "mxfp8_e5m2"), ("mxfp6_e2m3", "mxfp6_e3m2"), ("mxfp4", "mxfp4"),
         ("mxint8", "mxint8"), ("mxint8", "mxfp4"), ("nvfp4", "nvfp4")]


def exact_blocks(qa, qb):
    """Per (m, n): list of exact block values (Fractions), from scales and elements."""
    bs = qa.block_size
    sa = qa.scales.astype(np.float64)
    sb = qb.scales.astype(np.float64)
    pa = qa.element_values().astype(np.float64)
    pb = qb.element_values().astype(np.float64)
    out = {}
    for i in range(qa.shape[0]):
        for j in range(qb.shape[1]):
            vals = []
            for b in range(sa.shape[1]):
                s = sum(Fraction(pa[i, k]) * Fraction(pb[k, j])
                        for k in range(b * bs, (b + 1) * bs))
                vals.append(Fraction(sa[i, b]) * Fraction(sb[b, j]) * s)
            out[i, j] = vals
    return out


def rne_fp32(v: Fraction) -> float:
    """v rounded to nearest even float32 (normal or subnormal; no overflow in these tests)."""
    if v == 0:
        return 0.0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = max(e, -126) - 23  # the ulp's exponent
    r = round(a / Fraction(2) ** q) * Fraction(2) ** q  # round() on a Fraction: half to even
    return float(r if v > 0 else -r)


def operands(fa, fb, rng, k=96):
    a = rng.standard_normal((3, k)) * np.ldexp(1.0, rng.integers(-8, 8, (3, 1)))
    b = rng.standard_normal((k, 2)) * np.ldexp(1.0, rng.integers(-8, 8, (1, 2)))
    a[0, :32] *= 1e3  # an outlier block
    kw_a = {"per_tensor_scale": mx.nvfp4_per_tensor_scale(a)} if fa == "nvfp4" else {}
    return mx.quantize(a, fa, axis=1, **kw_a), mx.quantize(b, fb, axis=0)


@pytest.mark.parametrize("fa,fb", PAIRS)
def test_exact_and_fp32_models(fa, fb):
    rng = np.random.default_rng(len(fa) * 7 + len(fb))
    qa, qb = operands(fa, fb, rng)
    ex = mx.matmul(qa, qb, "exact")
    f32 = mx.matmul(qa, qb, "fp32")
    ref = exact_blocks(qa, qb)
    g = 1.0
    for q in (qa, qb):
        if q.per_tensor_scale is not None:
            g *= q.per_tensor_scale
    for (i, j), vals in ref.items():
        assert ex[i, j] == float(sum(vals) * Fraction(g))
        acc = np.float32(0)
        for v in vals:
            acc = acc + np.float32(rne_fp32(v))
        if g != 1.0:
            acc = acc * np.float32(g)
        assert f32[i, j] == float(acc), (i, j)


def test_tensorcore_model_reduces_to_tc_matmul_when_scales_are_one():
    rng = np.random.default_rng(3)
    every = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    grid = np.unique(np.abs(every[np.isfinite(every)]))
    a = rng.choice(grid, (4, 64)) * rng.choice([-1, 1], (4, 64))
    b = rng.choice(grid, (64, 3)) * rng.choice([-1, 1], (64, 3))
    a[:, ::32] = 448.0  # amax 448 in every block: the scale is 1
    b[::32, :] = 448.0
    qa, qb = mx.quantize(a, "mxfp8_e4m3", axis=1), mx.quantize(b, "mxfp8_e4m3", axis=0)
    assert (qa.scales.view(np.uint8) == 127).all() and (qb.scales.view(np.uint8) == 127).all()
    for unit in (tc.BlockFMA(16, extra_bits=0), tc.BlockFMA(32, extra_bits=-2),
                 "B200-fp8-published"):
        got = mx.matmul(qa, qb, unit)
        ref = tc.matmul(a, b, gpu=unit, input_format="fp8_e4m3", output_format="fp32")
        np.testing.assert_array_equal(got, ref)
    # power-of-two scales only shift the result (no under/overflow here)
    q2 = mx.quantize(a * 2.0**-40, "mxfp8_e4m3", axis=1)
    np.testing.assert_array_equal(mx.matmul(q2, qb, tc.BlockFMA(16)) * 2.0**40,
                                  mx.matmul(qa, qb, tc.BlockFMA(16)))


def test_nan_blocks_and_errors():
    a = np.ones((2, 64))
    a[1, 40] = np.nan
    qa = mx.quantize(a, "mxfp8_e4m3", axis=1)
    qb = mx.quantize(np.ones((64, 2)), "mxfp8_e4m3", axis=0)
    for acc in ("exact", "fp32", tc.BlockFMA(32)):
        r = mx.matmul(qa, qb, acc)
        assert (r[0] == 64).all() and np.isnan(r[1]).all()
    with pytest.raises(ValueError, match="axis=1"):
        mx.matmul(mx.quantize(a, "mxfp8_e4m3", axis=0), qb)
    with pytest.raises(ValueError, match="axis=0"):
        mx.matmul(qa, mx.quantize(np.ones((64, 2)), "mxfp8_e4m3", axis=1))
    with pytest.raises(ValueError, match="inner dimensions"):
        mx.matmul(qa, mx.quantize(np.ones((32, 2)), "mxfp8_e4m3", axis=0))
    with pytest.raises(ValueError, match="block sizes differ"):
        mx.matmul(qa, mx.quantize(np.ones((64, 2)), "mxfp8_e4m3", 16, axis=0))
    with pytest.raises(ValueError, match="NVFP4"):
        mx.matmul(mx.quantize(a, "nvfp4", 32, axis=1), qb)
    qn = mx.quantize(np.ones((2, 64)), "nvfp4", axis=1)
    with pytest.raises(ValueError, match="power-of-two"):
        mx.matmul(qn, mx.quantize(np.ones((64, 2)), "nvfp4", axis=0), tc.BlockFMA(16))
    with pytest.raises(ValueError, match="valid: 'exact', 'fp32'"):
        mx.matmul(qa, qb, "fp16")
    with pytest.raises(TypeError, match="MXArray"):
        mx.matmul(np.ones((2, 64)), qb)


@pytest.mark.parametrize("m,k,n", [(0, 32, 2), (2, 32, 0), (2, 0, 3)])
def test_empty_shapes(m, k, n):
    qa = mx.quantize(np.ones((m, k)), "mxfp8_e4m3", axis=1)
    qb = mx.quantize(np.ones((k, n)), "mxfp8_e4m3", axis=0)
    for acc in ("exact", "fp32", tc.BlockFMA(16)):
        r = mx.matmul(qa, qb, acc)
        assert r.shape == (m, n) and (r == 0).all()
