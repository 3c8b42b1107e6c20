"""quantize_tiles' route for finite inputs (blockwise_fp8._quantize_tiles_finite, issue 31's
speed-up of the fp8-blockwise recipe): the tiles as a view, the scales broadcast, and the
saturating E4M3 cast as a clamp and rounding.fast.values32. Its values and scales must be the
general route's bit for bit: every shape (padded or not), axis and block layout; ties and
neighbours of every E4M3 value, values near 448, E4M3 subnormals, float32 subnormals and
tiles whose scale underflows, zeros of both signs, all-zero tiles, random float32 patterns;
and inputs with infinities or NaN, which must take the general route.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim import flag_context
from fpsim.quant import blockwise_fp8 as B

_LAYOUTS = [(1, None), (0, None), (1, 0), (0, 1)]
_SHAPES = [(1024, 64), (1024, 256), (64, 1024), (256, 64), (100, 300), (3, 5), (128, 128),
           (129, 1), (1, 1)]


def _general(a, axis, block_axis, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(B, "_quantize_tiles_finite", lambda *_a: None)
        return B.quantize_tiles(a, axis, block_axis=block_axis)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _arrays(shape: tuple, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    out = [rng.normal(0, 1, shape), rng.normal(0, 1e-3, shape) * rng.lognormal(0, 3, shape)]
    # every e4m3 value and its midpoints with neighbours, times a tile-wide power of two
    e4 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    e4 = np.unique(e4[np.isfinite(e4)])
    mids = ((e4[1:] + e4[:-1]) / 2).astype(np.float32)  # exact
    inf32 = np.float32(np.inf)
    vals = np.concatenate([e4, mids, np.nextafter(mids, inf32), np.nextafter(mids, -inf32),
                           -mids, [447.9, 448.0, 460.0, 464.0, 470.0, 2.0**-10, 2.0**-9]])
    out.append(np.resize(vals, n).reshape(shape) * 2.0**-5)
    t = np.resize(vals, n).reshape(shape)
    t.reshape(-1)[::97] = 448.0  # tiles whose amax is 448: scale 1, values as they are
    out.append(t)
    # float32 subnormals and tiny tiles (scales that underflow to 0 and become 1)
    bits = rng.integers(0, 1 << 23, size=n, dtype=np.uint32)
    bits |= (rng.integers(0, 2, size=n, dtype=np.uint32) << 31)
    out.append(bits.view(np.float32).reshape(shape).astype(np.float64))
    # tiles of amax below 2**-138: the scale amax / 448 is a subnormal of a few bits, so
    # values / scale reach past 464 (saturation)
    out.append((bits >> np.uint32(11) | bits & np.uint32(1 << 31)).view(np.float32)
               .reshape(shape).astype(np.float64))
    # random finite float32 patterns
    b = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    f = b.view(np.float32)
    f[~np.isfinite(f)] = -0.0
    out.append(f.reshape(shape).astype(np.float64))
    z = np.zeros(shape)
    z.reshape(-1)[::3] = -0.0
    out.append(z)
    return out


@pytest.mark.parametrize("axis,block_axis", _LAYOUTS)
@pytest.mark.parametrize("shape", _SHAPES)
def test_finite_route_equals_general(monkeypatch, shape, axis, block_axis):
    for i, a in enumerate(_arrays(shape, sum(shape) + axis)):
        a = a.astype(np.float32)
        q1, s1 = B.quantize_tiles(a, axis, block_axis=block_axis)
        q2, s2 = _general(a, axis, block_axis, monkeypatch)
        assert _same(q1, q2), i
        assert _same(s1, s2), i
        assert not np.shares_memory(q1, a)


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_nonfinite_takes_the_general_route(monkeypatch, special):
    a = np.random.default_rng(1).normal(0, 1, (256, 64)).astype(np.float32)
    a[5, 7] = special
    calls = []
    real = B._quantize_tiles_finite

    def spy(*args):
        r = real(*args)
        calls.append(r)
        return r

    monkeypatch.setattr(B, "_quantize_tiles_finite", spy)
    with np.errstate(all="ignore"):
        q1, s1 = B.quantize_tiles(a, 1)
    assert calls == [None]
    with np.errstate(all="ignore"):
        q2, s2 = _general(a, 1, None, monkeypatch)
    assert _same(q1, q2) and _same(s1, s2)


def test_flag_context_takes_the_general_route(monkeypatch):
    a = np.random.default_rng(2).normal(0, 1, (256, 64)).astype(np.float32)
    seen = []
    monkeypatch.setattr(B, "_quantize_tiles_finite", lambda *_a: seen.append(1))
    with flag_context():
        B.quantize_tiles(a, 1)
    assert not seen
