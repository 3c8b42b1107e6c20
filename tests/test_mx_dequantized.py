"""fpsim.mx.dequantized (fake quantization, issue 31's speed-up of the MXFP8 recipes): equal to
quantize(...).dequantize() bit for bit. MX formats with E4M3 elements rounded to nearest even
take a route without the codes (the scaled elements rounded on E4M3's grid in float32); it
must give the same values for every scale mode, axis, padded and unpadded blocks, ties and
neighbours of every E4M3 value at many scales, float32 subnormals, saturation, E8M0's
extremes, infinities and NaN (the NaN-scale blocks take the general route), signed zeros;
the other formats, modes and inputs take the general route (same draws for stochastic
rounding), and a flag context records the same flags.
"""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

import fpsim.mx as mx
from fpsim import flag_context
from fpsim.rounding import policy_of
from fpsim.rounding.fast import values32
from fpsim.rounding.native import fp4_nearest_even

Q = importlib.import_module("fpsim.mx.quantize")  # the module (fpsim.mx.quantize is the function)
_MODES = ["floor", "ceil", "even", "rceil"]


def _inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    e4 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    e4 = np.unique(e4[np.isfinite(e4)])
    mids = ((e4[1:] + e4[:-1]) / 2).astype(np.float32)
    up, dn = np.float32(np.inf), np.float32(-np.inf)
    grid = np.concatenate([e4, mids, np.nextafter(mids, up), np.nextafter(mids, dn), -mids,
                           np.float32([448, 449, 463.9, 464, 464.1, 480, 500, 2.0**-9,
                                       2.0**-10, 3 * 2.0**-11, 2.0**-6, 2.0**-7])])
    out = [rng.normal(0, 1, (64, 96)),
           rng.normal(0, 1e-3, (64, 96)) * rng.lognormal(0, 4, (64, 96))]
    for k in (-140, -126, -20, 0, 20, 120):
        with np.errstate(over="ignore"):
            g = np.resize(grid, 64 * 96).reshape(64, 96) * np.float32(2.0**k)
        out.append(g)
    bits = rng.integers(0, 1 << 32, size=64 * 96, dtype=np.uint64).astype(np.uint32)
    f = bits.view(np.float32).copy()
    f[~np.isfinite(f)] = 0.0
    out.append(f.reshape(64, 96))
    sub = (bits & np.uint32(0x807FFFFF)).view(np.float32)  # float32 subnormals and zeros
    out.append(sub.reshape(64, 96))
    z = np.zeros((64, 96), np.float32)
    z[::2] = -0.0
    out.append(z)
    big = rng.normal(0, 1, (64, 96)).astype(np.float32)
    big[3, 5], big[7, 40], big[9, 9] = 3e38, np.inf, -np.inf
    big[20, 33] = np.nan
    out.append(big)
    return [np.asarray(a, np.float32) for a in out]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _both(x, fmt, **kw):
    with np.errstate(all="ignore"):
        return mx.dequantized(x, fmt, **kw), mx.quantize(x, fmt, **kw).dequantize()


def _spy_grids(monkeypatch) -> list[str]:
    """The element formats dequantized rounds to without the codes, one entry per call."""
    seen: list[str] = []
    real = Q.values32
    monkeypatch.setattr(Q, "values32", lambda y, pol: seen.append(pol.fmt.name) or real(y, pol))
    return seen


@pytest.mark.parametrize("mode", _MODES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_mxfp8_e4m3_equals_quantize_route(monkeypatch, mode, axis):
    seen = _spy_grids(monkeypatch)
    for i, x in enumerate(_inputs(len(mode) + axis)):
        for xs in (x, x[:, :70], x[:50]):  # padded blocks along either axis
            a, b = _both(xs, "mxfp8_e4m3", axis=axis, scale_mode=mode)
            assert _same(a, b), (i, xs.shape)
            assert a.flags.c_contiguous
    assert "fp8_e4m3" in seen  # the grid route ran (on the finite inputs at least)


@pytest.mark.parametrize("fmt", ["mxfp8_e5m2", "mxfp6_e2m3", "mxfp4", "mxint8", "nvfp4"])
def test_other_formats(monkeypatch, fmt):
    """dequantized == quantize().dequantize() for every other format: NVFP4 by its grid
    route, the rest by the codes (no grid of their elements is taken)."""
    seen = _spy_grids(monkeypatch)
    kw = {} if fmt == "nvfp4" else {"scale_mode": "rceil"}
    for x in _inputs(3)[:4]:
        a, b = _both(x, fmt, axis=1, **kw)
        assert _same(a, b)
    assert set(seen) == ({"fp4_e2m1"} if fmt == "nvfp4" else set())


def test_three_d_block_sizes_and_dtypes():
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, (4, 40, 33)).astype(np.float32)
    for axis in (0, 1, 2):
        for bs in (None, 8, 16):
            assert _same(*_both(x, "mxfp8_e4m3", block_size=bs, axis=axis, scale_mode="even"))
    for x2 in (x.astype(np.float16), x.astype(np.float64), x.astype(ml_dtypes.bfloat16)):
        assert _same(*_both(x2, "mxfp8_e4m3", axis=2, scale_mode="floor"))


def test_stochastic_takes_the_same_draws(monkeypatch):
    seen = _spy_grids(monkeypatch)  # stochastic rounding: the codes' route, not the grid
    x = np.random.default_rng(6).normal(0, 1, (64, 64)).astype(np.float32)
    a = mx.dequantized(x, "mxfp8_e4m3", axis=1, rounding="stochastic",
                       rng=np.random.default_rng(1))
    b = mx.quantize(x, "mxfp8_e4m3", axis=1, rounding="stochastic",
                    rng=np.random.default_rng(1)).dequantize()
    assert _same(a, b) and not seen


def test_flag_context_records_the_same_flags():
    x = _inputs(7)[1]
    with flag_context() as fa:
        a = mx.dequantized(x, "mxfp8_e4m3", axis=1)
    with flag_context() as fb:
        b = mx.quantize(x, "mxfp8_e4m3", axis=1).dequantize()
    assert _same(a, b) and fa.flags == fb.flags


def test_e4m3_values_every_float32_exponent():
    """values32 (the route's rounding) against ml_dtypes' cast, every float32 exponent."""
    rng = np.random.default_rng(8)
    mant = rng.integers(0, 1 << 23, size=1 << 16, dtype=np.uint32)
    for ex in range(0, 136):  # every exponent up to 2**8 (448's binade)
        y = ((np.uint32(ex) << np.uint32(23)) | mant).view(np.float32)
        y = np.concatenate([y, -y]).clip(-448, 448)
        want = y.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
        assert _same(values32(y, policy_of("fp8_e4m3")), want), ex


@pytest.mark.parametrize("pts", [None, 1.0, 2.0**-20, 0.37, 3e3])
@pytest.mark.parametrize("axis", [0, 1])
def test_nvfp4_equals_quantize_route(pts, axis):
    for i, x in enumerate(_inputs(11 + axis)):
        for xs in (x, x[:, :70], x[:50]):
            a, b = _both(xs, "nvfp4", axis=axis, per_tensor_scale=pts)
            assert _same(a, b), (i, xs.shape)


def test_e2m1_values_every_float32_exponent():
    """values32 against fp4_nearest_even, every float32 exponent up to 6's binade."""
    rng = np.random.default_rng(12)
    mant = rng.integers(0, 1 << 23, size=1 << 14, dtype=np.uint32)
    grid = np.float32([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6])
    for ex in range(0, 130):  # every exponent up to 2**2 (6's binade)
        y = ((np.uint32(ex) << np.uint32(23)) | mant).view(np.float32)
        y = np.concatenate([y, -y, grid, -grid, np.nextafter(grid, np.float32(9))]).clip(-6, 6)
        want = fp4_nearest_even(y).astype(np.float32)
        assert _same(values32(y, policy_of("fp4_e2m1")), want), ex
