"""fpsim.quant.fp8_scaling.fp8_values (issue 31's speed-up of the fp8-delayed recipe): the
float64 values of fp8_quantize, bit for bit, e4m3 and e5m2: without the codes for finite
scaled inputs (a clamp and the format's grid in float32), the codes' route otherwise (NaN,
infinities, a flag context). Checked on ties and neighbours of every value of each format at
several scales, saturation, subnormals of the formats and of float32, signed zeros, random
float32 patterns, per-channel scale arrays.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim import flag_context
from fpsim.autograd.context import widen
from fpsim.quant import fp8_scaling as S

_DT = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _inputs(fmt: str) -> list[np.ndarray]:
    rng = np.random.default_rng(len(fmt))
    v = np.arange(256, dtype=np.uint8).view(_DT[fmt]).astype(np.float32)
    v = np.unique(v[np.isfinite(v)])
    mids = ((v[1:] + v[:-1]) / 2).astype(np.float32)
    up, dn = np.float32(np.inf), np.float32(-np.inf)
    mx = np.float32(S.as_fp8_format(fmt).max)
    grid = np.concatenate([v, mids, np.nextafter(mids, up), np.nextafter(mids, dn), -mids,
                           [mx, mx * 1.03, mx * 1.07, mx * 1.0625, mx * 2, 3e38]])
    out = [grid.astype(np.float32)]
    bits = rng.integers(0, 1 << 32, size=1 << 16, dtype=np.uint64).astype(np.uint32)
    f = bits.view(np.float32).copy()
    f[~np.isfinite(f)] = -0.0
    out += [f, (bits & np.uint32(0x807FFFFF)).view(np.float32),
            rng.normal(0, 1, 4096).astype(np.float32)]
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _codes_route(x, scale, fmt):
    with np.errstate(all="ignore"):
        return widen(np.asarray(S.fp8_quantize(x, scale, fmt)))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("scale", [1.0, 2.0**-10, 2.0**12, 0.37, 1e30])
def test_fp8_values_equal_the_codes_route(fmt, scale):
    for x in _inputs(fmt):
        with np.errstate(all="ignore"):
            got = S.fp8_values(x, scale, fmt)
        assert _same(got, _codes_route(x, scale, fmt))


def test_per_channel_scales_and_shapes():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (64, 48)).astype(np.float32)
    s = rng.uniform(0.5, 300, (64, 1)).astype(np.float32)
    for fmt in ("e4m3", "e5m2"):
        assert _same(S.fp8_values(x, s, fmt), _codes_route(x, s, fmt))


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_nonfinite_take_the_codes_route(special):
    x = np.random.default_rng(4).normal(0, 1, 1000).astype(np.float32)
    x[17] = special
    for fmt in ("e4m3", "e5m2"):
        with np.errstate(all="ignore"):
            got = S.fp8_values(x, 3.0, fmt)
        assert _same(got, _codes_route(x, 3.0, fmt))


def test_flag_context_takes_the_codes_route(monkeypatch):
    x = np.random.default_rng(5).normal(0, 1, 1000).astype(np.float32)
    seen = []
    monkeypatch.setattr(S, "values32", lambda *a: seen.append(1))
    with flag_context():
        got = S.fp8_values(x, 3.0, "e4m3")
    assert not seen and _same(got, _codes_route(x, 3.0, "e4m3"))
