"""mul by a scalar 2**k, -16 <= k <= 0 (functional._mul_pow2; the GPT's attention scale): bf16
products computed in float32 and the backward's ``g * s`` in float32 where that is exact (or
float32's own rounding into an fp32 gradient), issue 31's speed-up. Values and gradients must
be the general route's (float64 products, one rounding) bit for bit, on every fp16 and bf16
pattern (zeros of both signs, subnormals, infinities, NaN payloads and signs) and on float32
specials, for either operand order, gradient formats other than the input's, and non-plain
rounding (which must take the general route).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim import flag_context
from fpsim.autograd import Tensor, rounding_context
from fpsim.autograd import functional as F

_ALL16 = np.arange(1 << 16, dtype=np.uint16)
_SCALES = [0.25, 1.0, 0.5, 2.0**-16, 2.0**-10]  # the halvings (others: test_halving)


def _values(fmt: str) -> np.ndarray:
    if fmt == "fp16":
        return _ALL16.view(np.float16)
    if fmt == "bf16":
        return _ALL16.view(ml_dtypes.bfloat16)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 32, size=1 << 16, dtype=np.uint64).astype(np.uint32)
    special = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x00800001,
                        0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
                        0x7FA00000, 0xFF812345, 0x3E800000, 0x01000003], np.uint32)
    bits[:special.size] = special
    bits[special.size:special.size + 4096] &= np.uint32(0x81FFFFFF)  # tiny: underflow
    out = bits.view(np.float32)
    # values whose product by 2**-16 or 2**-2 lies just above a bf16 midpoint of float32's
    # subnormal range, closer than float32's quantum: float32 rounds the product onto the
    # midpoint (a double rounding into bf16 would then tie to even)
    mid = ((2 * np.arange(64) + 1) * 2.0**-134).astype(np.float32)  # exact
    up = np.float32(np.inf)
    near = np.concatenate([np.nextafter(mid * np.float32(2.0**16), up),
                           np.nextafter(mid * np.float32(4), up)])
    near = np.concatenate([near, -near])
    out[20000:20000 + near.size] = near
    return out


def _run(x0: np.ndarray, fmt: str, s: float, g0: np.ndarray, first: bool,
         grad_fmt: str | None):
    x = Tensor(x0, fmt, requires_grad=True, grad_fmt=grad_fmt)
    with np.errstate(all="ignore"):
        y = F.mul(x, s) if first else F.mul(s, x)
        y.backward(g0)
    return y.data, x.grad


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("fmt,grad_fmt", [("fp16", None), ("bf16", None), ("fp32", None),
                                          ("fp16", "fp32"), ("bf16", "fp32"),
                                          ("bf16", "fp16"), ("fp32", "bf16"),
                                          ("fp32", "fp16"), ("fp16", "fp64")])
@pytest.mark.parametrize("s", _SCALES)
@pytest.mark.parametrize("first", [True, False])
def test_equals_general_route(monkeypatch, fmt, grad_fmt, s, first):
    v = _values(fmt)
    g = np.roll(v, 12345)  # every pattern as a gradient too, against other values
    cases = [(v, g), (v[:300], g[:300]), (v.reshape(256, 256), g.reshape(256, 256))]
    seen = []
    real = F._mul_pow2
    monkeypatch.setattr(F, "_mul_pow2", lambda *a: seen.append(1) or real(*a))
    fast = [_run(a, fmt, s, b, first, grad_fmt) for a, b in cases]
    assert len(seen) == len(cases)  # the float32 route ran
    monkeypatch.setattr(F, "_halving", lambda _s: False)  # the general route
    slow = [_run(a, fmt, s, b, first, grad_fmt) for a, b in cases]
    for (y1, g1), (y2, g2) in zip(fast, slow, strict=True):
        assert _same(y1, y2)
        assert _same(g1, g2)


@pytest.mark.parametrize("mode", ["toward_zero", "stochastic", "flags"])
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_other_modes_take_the_general_route(monkeypatch, mode, fmt):
    v = _values(fmt)[40000:44000]
    g = _values(fmt)[:4000]

    def run():
        if mode == "flags":  # IEEE flags recorded: the general route, which records them
            with flag_context():
                return _run(v, fmt, 0.25, g, True, None)
        kw = {"rng": np.random.default_rng(3)} if mode == "stochastic" else {}
        with rounding_context(mode, **kw):
            return _run(v, fmt, 0.25, g, True, None)

    fast = run()
    monkeypatch.setattr(F, "_halving", lambda _s: False)
    slow = run()
    assert all(_same(a, b) for a, b in zip(fast, slow, strict=True))


def test_halving():
    assert F._halving(0.25) and F._halving(1.0) and F._halving(2.0**-16)
    assert not any(F._halving(s) for s in (2.0, 2.0**-17, 0.3, -0.25, 0.0, 3.0))


def test_gradient_is_fresh():
    x = Tensor(np.ones(4096), "bf16", requires_grad=True)
    y = F.mul(x, 0.25)
    g = np.ones(4096, ml_dtypes.bfloat16)
    y.backward(g)
    assert x.grad.base is None and not np.shares_memory(x.grad, g)
