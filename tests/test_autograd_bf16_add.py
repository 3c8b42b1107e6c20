"""add / sub of two bf16 tensors (issue 31's speed-up of the pure-bf16 recipes): from
rounding.native.BF16_BITS_MIN elements, functional._arith adds in float32 and rounds by the
bits; the values must be the float64 route's bit for bit (every bf16 pattern against others,
ties and their neighbours, overflow, infinities; a NaN takes the float64 route), broadcast
shapes too, and other modes / flag contexts must take the general route.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim import flag_context
from fpsim.autograd import Tensor, rounding_context
from fpsim.autograd import context as C
from fpsim.autograd import functional as F

_B = ml_dtypes.bfloat16


def _cases():
    rng = np.random.default_rng(8)
    allb = np.arange(1 << 16, dtype=np.uint16).view(_B)
    out = [(allb, np.roll(allb, k)) for k in (0, 1, 127, 32768, 40000)]
    bits = rng.integers(0, 1 << 16, size=(2, 1 << 17), dtype=np.uint16)
    fin = bits[:, ((bits[0] & 0x7F80) != 0x7F80) & ((bits[1] & 0x7F80) != 0x7F80)]
    out.append((fin[0].view(_B), fin[1].view(_B)))
    a = rng.integers(0x0080, 0x7F00, size=1 << 14, dtype=np.uint16).view(_B)
    a32 = a.astype(np.float32)
    half = (np.nextafter(a32, np.float32(np.inf)) - a32) * np.float32(2.0**-8)
    for off in (1.0, 1.5, 0.75, -1.0):
        out.append((a, (half * np.float32(off)).astype(_B)))
    x = rng.normal(0, 1, (16, 64, 64)).astype(_B)
    out.append((x, rng.normal(0, 1, (64,)).astype(_B)))  # broadcast
    out.append((x, rng.normal(0, 1, (16, 1, 64)).astype(_B)))
    return out


def _run(a, b, op):
    x, y = Tensor(a, "bf16"), Tensor(b, "bf16")
    with np.errstate(all="ignore"):
        return (F.add(x, y) if op == "add" else F.sub(x, y)).data


@pytest.mark.parametrize("op", ["add", "sub"])
def test_bf16_add_equals_float64_route(monkeypatch, op):
    cases = _cases()
    seen = []
    real = C.bf16_by_bits
    monkeypatch.setattr(C, "bf16_by_bits", lambda v: seen.append(1) or real(v))
    fast = [_run(a, b, op) for a, b in cases] + [_run(b, a, op) for a, b in cases]
    assert seen  # the float32 route ran
    monkeypatch.setattr(C, "BF16_BITS_MIN", 1 << 62)
    slow = [_run(a, b, op) for a, b in cases] + [_run(b, a, op) for a, b in cases]
    for f, s in zip(fast, slow, strict=True):
        assert f.dtype == s.dtype and f.shape == s.shape and f.tobytes() == s.tobytes()


@pytest.mark.parametrize("ctx", ["toward_zero", "stochastic", "flags"])
def test_other_modes_take_the_general_route(monkeypatch, ctx):
    rng = np.random.default_rng(9)
    a = rng.normal(0, 1, 20000).astype(_B)
    b = rng.normal(0, 1e-2, 20000).astype(_B)

    def run():
        if ctx == "flags":
            with flag_context():
                return _run(a, b, "add")
        kw = {"rng": np.random.default_rng(1)} if ctx == "stochastic" else {}
        with rounding_context(ctx, **kw):
            return _run(a, b, "add")

    seen = []
    real = C.bf16_by_bits
    monkeypatch.setattr(C, "bf16_by_bits", lambda v: seen.append(1) or real(v))
    got = run()
    assert not seen
    monkeypatch.setattr(C, "BF16_BITS_MIN", 1 << 62)
    assert got.tobytes() == run().tobytes()
