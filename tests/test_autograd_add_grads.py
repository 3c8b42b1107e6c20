"""The engine's sum of two gradients of one tensor (fpsim.autograd.tensor.add_grads): fp16 +
fp16 into an fp16 gradient runs in float32 with one cast, bf16 + bf16 in float32 rounded by
the bits (issue 31's speed-up of the fp16 / bf16 recipes); it must give the float64 route's
result (widen both exactly, add, round once to the format) bit for bit, on every fp16
pattern: zeros of both signs, subnormals, ties, overflow, infinities and NaNs (payloads and
signs), in arrays under and over the cast kernel's small-array threshold. Outside plain
rounding it must take the general route.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim.autograd import rounding_context
from fpsim.autograd import tensor as T
from fpsim.autograd.context import round_to
from fpsim.formats import BF16, FP16, FP32
from fpsim.rounding.fp16 import SMALL

_ALL = np.arange(1 << 16, dtype=np.uint16).view(np.float16)


def _reference(a: np.ndarray, b: np.ndarray, fmt=FP16) -> np.ndarray:
    """The float64 route: exact widenings (NumPy's own cast), one add, one rounding."""
    with np.errstate(all="ignore"):
        return np.asarray(round_to(np.asarray(a.astype(np.float64) + b.astype(np.float64)),
                                   fmt))


def _pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(31)
    out = [(_ALL, np.roll(_ALL, k)) for k in (0, 1, 1023, 1024, 31744, 32768, 40000)]
    out.append((_ALL, _ALL[::-1].copy()))
    out.append((_ALL, -_ALL))  # x + (-x): +0 (and NaN, inf - inf)
    bits = rng.integers(0, 1 << 16, size=(2, 1 << 18), dtype=np.uint16)
    out.append((bits[0].view(np.float16), bits[1].view(np.float16)))
    # near each other (ties and cancellations): b = -a or a's neighbours
    a = bits[0].view(np.float16)
    near = (bits[0] ^ rng.integers(0, 8, size=bits[0].size).astype(np.uint16)).view(np.float16)
    out.append((a, near))
    return out


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("size", [None, SMALL - 1, SMALL, 4097])
def test_fp16_sum_equals_float64_route(size):
    for a, b in _pairs():
        if size is None:  # whole arrays (the cast kernel's large path)
            parts = [(a, b)]
        else:  # pieces of this size (the small path below SMALL elements)
            parts = [(a[i:i + size], b[i:i + size]) for i in range(0, a.size, size)][:64]
        for x, y in parts:
            with np.errstate(all="ignore"):
                got = T.add_grads(x, y, FP16)
            assert _same(got, _reference(x, y)), (x[:4], y[:4])


def test_fp16_sum_shapes_and_zero_d():
    rng = np.random.default_rng(5)
    for shape in [(), (1,), (3, 5), (16, 4, 64, 16)]:
        a = rng.normal(0, 1e-5, shape).astype(np.float16)
        b = rng.normal(0, 1e-5, shape).astype(np.float16)
        got = T.add_grads(a, b, FP16)
        assert isinstance(got, np.ndarray) and got.shape == a.shape
        assert _same(got, _reference(a, b))


def test_fp16_sum_owns_its_memory():
    a = np.ones(4096, np.float16)
    got = T.add_grads(a, a, FP16)
    assert got.base is None and not np.shares_memory(got, a)


# (format, its storage dtype, elements: above the fast route's threshold, generator seed)
@pytest.mark.parametrize("fmt, dtype, n, seed", [(FP16, np.float16, 2000, 0),
                                                 (BF16, ml_dtypes.bfloat16, 10000, 4)],
                         ids=["fp16", "bf16"])
def test_other_modes_take_the_general_route(fmt, dtype, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 1, n).astype(dtype)
    b = rng.normal(0, 1e-3, n).astype(dtype)
    for mode in ("toward_zero", "stochastic"):
        kw = {"rng": np.random.default_rng(1)} if mode == "stochastic" else {}
        with rounding_context(mode, **kw):
            got = T.add_grads(a, b, fmt)
        kw = {"rng": np.random.default_rng(1)} if mode == "stochastic" else {}
        with rounding_context(mode, **kw):
            want = _reference(a, b, fmt)
        assert _same(got, want)


@pytest.mark.parametrize("fmt", [FP32, BF16])
def test_mixed_and_other_formats(fmt):
    rng = np.random.default_rng(2)
    a = rng.normal(0, 1e-6, 3000).astype(np.float16)
    b = rng.normal(0, 1e-6, 3000).astype(np.float32)
    assert _same(T.add_grads(a, b, fmt), _reference(a, b, fmt))
    assert _same(T.add_grads(a, a, fmt), _reference(a, a, fmt))


def _bf16_pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(16)
    allb = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    out = [(allb, np.roll(allb, k)) for k in (0, 1, 127, 128, 32512, 32768, 40000)]
    out.append((allb, -allb))
    bits = rng.integers(0, 1 << 16, size=(2, 1 << 18), dtype=np.uint16)
    out.append((bits[0].view(ml_dtypes.bfloat16), bits[1].view(ml_dtypes.bfloat16)))
    near = (bits[0] ^ rng.integers(0, 8, size=bits[0].size).astype(np.uint16))
    out.append((bits[0].view(ml_dtypes.bfloat16), near.view(ml_dtypes.bfloat16)))
    # no NaN anywhere (the float32 route itself, not its NaN fallback): finite and inf
    fin = bits[:, (bits[0] & 0x7F80) != 0x7F80]
    fin = fin[:, (fin[1] & 0x7F80) != 0x7F80]
    out.append((fin[0].view(ml_dtypes.bfloat16), fin[1].view(ml_dtypes.bfloat16)))
    # sums at bf16 midpoints: a + b with b half an ulp of a (ties) and just off them
    a = rng.integers(0x0080, 0x7F00, size=1 << 15, dtype=np.uint16).view(ml_dtypes.bfloat16)
    a32 = a.astype(np.float32)
    half = (np.nextafter(a32, np.float32(np.inf)) - a32) * np.float32(2.0**-8)
    for off in (1.0, 1.5, 0.75, -1.0):
        b = (half * np.float32(off)).astype(ml_dtypes.bfloat16)
        out.append((a, b))
    return out


@pytest.mark.parametrize("size", [None, 8191, 8192, 30000])
def test_bf16_sum_equals_float64_route(size):
    for a, b in _bf16_pairs():
        if size is None:
            parts = [(a, b)]
        else:
            parts = [(a[i:i + size], b[i:i + size]) for i in range(0, a.size, size)][:8]
        for x, y in parts:
            with np.errstate(all="ignore"):
                got = T.add_grads(x, y, BF16)
            assert _same(got, _reference(x, y, BF16)), (x[:4], y[:4])
