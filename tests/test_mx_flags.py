"""Block-scaled quantization's reports and refusals (issue 32): the IEEE flags of what a value
becomes (``flags=True``, and inside ``fpsim.flag_context``), NVFP4's infinity -> 2688 kept as
torchao computes it (tests/test_mx_torchao.py) but flagged INVALID, and the sizes and scales
that are refused before any work (a block that implies an absurd allocation, a per-tensor
scale that float32 turns into 0 or inf).

The reference for the flags is each value against its own dequantized value, decided from
the definitions (exact: the dequantized values are float32, compared as float64)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import fpsim
import fpsim.mx as mx
from fpsim import Flags

FORMATS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8", "nvfp4"]


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(32)
    x = (rng.standard_normal((6, 64)) * 2.0 ** rng.integers(-20, 20, (6, 64))).astype(np.float32)
    x[0, 0], x[1, 5], x[2, 17] = np.inf, -np.inf, np.nan
    x[3, :16] = [1e30, 1.0, 2.0, 3.0, 0.0, -0.0, 1e-30, 7.0, 0.5, 0.25, 6.0, -6.0, 8.0, 1.5,
                 -3.0, 4.0]
    x[4, :] = 1.0  # exact in every MX format: no flag
    return x


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("pts", [None, 1e-3])
def test_flags_say_what_each_value_became(fmt, pts):
    if pts is not None and fmt != "nvfp4":
        pytest.skip("a per-tensor scale is NVFP4's")
    x = _inputs()
    kw = {} if pts is None else {"per_tensor_scale": pts}
    q, fl = mx.quantize(x, fmt, block_size=16, flags=True, **kw)
    plain = mx.quantize(x, fmt, block_size=16, **kw)
    assert isinstance(plain, mx.MXArray) and fl.shape == x.shape and fl.dtype == np.uint8
    assert plain.dequantize().tobytes() == q.dequantize().tobytes()  # flags change no value
    d, xs = q.dequantize().astype(np.float64), x.astype(np.float64)
    fin = np.isfinite(xs)
    same = (d == xs) | (np.isnan(d) & np.isnan(xs)) | (np.isinf(xs) & (d == xs))
    assert np.all(fl[same] == 0)  # exact values raise nothing (1.0 everywhere in row 4)
    if fmt != "nvfp4":  # NVFP4's scale 1/6 rounds in e4m3: 1.0 comes back 0.984375
        assert np.all(fl[4] == 0)
    inexact = fin & ~same & ~np.isnan(d)  # a NaN block: INVALID alone, below
    assert np.all(fl[inexact] & Flags.INEXACT)
    flushed = fin & (xs != 0) & (d == 0)
    assert np.all(fl[flushed] & Flags.UNDERFLOW)
    assert np.all((fl[fin & ~flushed] & Flags.UNDERFLOW) == 0)
    became_finite = np.isinf(xs) & ~np.isinf(d)
    assert np.all(fl[became_finite] == Flags.INVALID)
    assert np.all(fl[fin & np.isnan(d)] == Flags.INVALID)
    assert np.all((fl[fin & ~np.isnan(d) & (np.abs(d) >= np.abs(xs))] & Flags.OVERFLOW) == 0)
    with fpsim.flag_context() as ctx:
        mx.quantize(x, fmt, block_size=16, **kw)
    assert ctx.flags == Flags(int(np.bitwise_or.reduce(fl.ravel())))


def test_nvfp4_infinity_is_torchaos_2688_and_flagged_invalid():
    x = np.array([np.inf, 1.0, -2.0, 3.0] + [0.5] * 12, np.float32)
    q, fl = mx.quantize(x, "nvfp4", flags=True)
    d = q.dequantize()
    assert d[0] == 2688.0 and np.all(d[1:] == 0)  # the value kept, its neighbours flushed
    assert fl[0] == Flags.INVALID
    assert np.all(fl[1:] == Flags.UNDERFLOW | Flags.INEXACT)
    q, fl = mx.quantize(-x, "nvfp4", flags=True)
    assert q.dequantize()[0] == -2688.0 and fl[0] == Flags.INVALID
    with pytest.raises(fpsim.FloatingPointTrap), fpsim.flag_context(trap="invalid"):
        mx.quantize(x, "nvfp4")


def test_finite_saturation_is_overflow():
    q, fl = mx.quantize(np.array([1000.0, 1.0, 0.001, 3.0]), "mxfp4", block_size=4, flags=True)
    assert q.dequantize()[0] == 768.0  # 1000 / 2**7 > 6: clamped to the element max
    assert fl[0] == Flags.OVERFLOW | Flags.INEXACT


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("block_size", [10**12, 2**40, 10**6])
def test_a_block_beyond_the_axis_and_the_format_is_refused_at_once(fmt, block_size):
    x = np.ones((3, 40), np.float32)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"block_size {block_size} is larger than the blocked "
                                         r"axis \(40 values\)"):
        mx.quantize(x, fmt, block_size=block_size)
    assert time.perf_counter() - t0 < 1.0  # refused, not allocated
    default = mx.get_mx_format(fmt).block_size
    for bs in (40, default, max(40, default)):  # up to the larger of the two: one block
        q = mx.quantize(x[:, :7], fmt, block_size=min(bs, max(7, default)))
        assert q.dequantize().shape == (3, 7)
    with pytest.raises(ValueError, match="valid: 1 .. 40"):
        mx.quantize(x, fmt, block_size=41 if default <= 40 else default + 1)


@pytest.mark.parametrize("pts,becomes", [(1e-50, "0.0"), (1e-46, "0.0"), (1e-39, "inf"),
                                         (1e39, "inf"), (np.float64(2.0**-130), "inf")])
def test_a_per_tensor_scale_float32_cannot_hold_is_refused(pts, becomes):
    with pytest.raises(ValueError, match=rf"becomes {becomes} in float32"):
        mx.quantize(np.ones(16, np.float32), "nvfp4", per_tensor_scale=pts)


def test_the_extreme_usable_per_tensor_scales_dequantize_to_nonzero():
    lo = float(np.float32(1) / np.finfo(np.float32).max)
    for pts in (np.nextafter(np.float32(lo), np.float32(1)), 1e38, 1e-3):
        x = np.full(16, float(pts) * 6 * 448 if float(pts) < 1e30 else 1.0, np.float32)
        q = mx.quantize(x, "nvfp4", per_tensor_scale=float(pts))
        assert q.per_tensor_scale > 0 and np.all(np.isfinite(q.dequantize()))
        if float(pts) < 1e30:
            assert np.all(q.dequantize() != 0)
