"""linear's fp16 fast path (functional._linear_fp16) against the general path, bit for bit.

The fast path runs for a 2-D fp16 input, fp16 weight and bias, the "fp32" accumulation model and
plain rounding (nearest even, IEEE overflow and subnormals, no flag context). The reference is
the general path of the same op, reached by closing the fast path's gate
(``functional._fp16_plain``); the general path itself is checked against exact references in
tests/test_autograd.py. A spy checks that each case really went through the fast path, so no
case compares the general path with itself.
"""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
import fpsim.autograd.functional as F
from fpsim.autograd import Tensor, matmul_accumulation, rounding_context
from tests.spy import count_calls

FP16 = fpsim.FP16


def _patterns(rng: np.random.Generator, shape: tuple, kind: str) -> np.ndarray:
    """fp16 arrays of ``kind``: normal values, every bit pattern (NaN, inf, subnormals, the
    largest values), or values whose sums overflow fp16 and round at its edges."""
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float16)
    if kind == "bits":
        return rng.integers(0, 1 << 16, size=shape, dtype=np.uint16).view(np.float16)
    if kind == "subnormal":
        return (rng.integers(-1023, 1024, size=shape) * 2.0**-24).astype(np.float16)
    big = rng.choice(np.array([65504.0, -65504.0, 60000.0, 32768.0, 1.0, -2.0**-14]), shape)
    return big.astype(np.float16)


def _run(x16, w16, b16, grad_x: bool, grad_w: bool, grad_b: bool, seed: int):
    """Forward and backward of linear; the output, loss gradient and every .grad as arrays."""
    x = Tensor(x16, FP16, requires_grad=grad_x)
    w = Tensor(w16, FP16, requires_grad=grad_w)
    b = None if b16 is None else Tensor(b16, FP16, requires_grad=grad_b)
    out = F.linear(x, w, b)
    g = np.random.default_rng(seed).standard_normal(out.shape).astype(np.float16)
    if out.requires_grad:
        out.backward(g)
    grads = [t.grad for t in (x, w, b) if t is not None]
    return out.numpy(), grads


def _same(a, b) -> bool:
    """Equal bit patterns (NaN payloads and signed zeros included), or both None."""
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


@pytest.fixture
def fast_calls(monkeypatch):
    """Count calls of the fast path (the spy proves the gate opened)."""
    return count_calls(monkeypatch, F, "_linear_fp16")


def _general(monkeypatch, fn):
    """``fn()`` with the fast path's gate closed: linear takes its general path."""
    with monkeypatch.context() as m:
        m.setattr(F, "_fp16_plain", lambda: False)
        return fn()


@pytest.mark.parametrize("kind", ["normal", "bits", "subnormal", "edges"])
@pytest.mark.parametrize("shape", [(7, 5, 3), (1, 1, 1), (128, 64, 256), (0, 4, 3), (3, 0, 2)])
@pytest.mark.parametrize("bias", [True, False])
def test_fast_path_equals_general_path(monkeypatch, fast_calls, kind, shape, bias):
    n, k, m = shape
    rng = np.random.default_rng(hash((kind, shape, bias)) % 2**32)
    x16, w16 = _patterns(rng, (n, k), kind), _patterns(rng, (m, k), kind)
    b16 = _patterns(rng, (m,), kind) if bias else None
    for grad_x, grad_w in ((True, True), (False, True), (True, False)):
        args = (x16, w16, b16, grad_x, grad_w, bias, n * k + m)
        with np.errstate(all="ignore"):
            fast = _run(*args)
            assert fast_calls, "the fast path did not run"
            fast_calls.clear()
            ref = _general(monkeypatch, lambda a=args: _run(*a))
        assert not fast_calls, "the reference went through the fast path"
        assert _same(fast[0], ref[0])
        assert len(fast[1]) == len(ref[1])
        for a, b in zip(fast[1], ref[1], strict=True):
            assert _same(a, b)


def _forward_fast_backward(monkeypatch, fast_calls, ctx_factory, grad_fmt=None):
    """Forward on the fast path, backward inside ``ctx_factory()`` (or with ``grad_fmt`` on the
    weight), against the general path doing both the same way."""
    rng = np.random.default_rng(7)
    x16 = _patterns(rng, (9, 6), "normal")
    w16 = _patterns(rng, (4, 6), "normal") * np.float16(1000)
    b16 = _patterns(rng, (4,), "normal")
    g = (rng.standard_normal((9, 4)) * 1.5e4).astype(np.float16)  # products that overflow fp16

    def run(record):
        x = Tensor(x16, FP16, requires_grad=True)
        w = Tensor(w16, FP16, requires_grad=True, grad_fmt=grad_fmt)
        b = Tensor(b16, FP16, requires_grad=True)
        out = F.linear(x, w, b)
        with ctx_factory() as ctx:
            out.backward(g)
        record.append(ctx)
        return out.numpy(), x.grad, w.grad, b.grad

    fast_ctx, ref_ctx = [], []
    with np.errstate(all="ignore"):
        fast = run(fast_ctx)
        assert fast_calls
        fast_calls.clear()
        ref = _general(monkeypatch, lambda: run(ref_ctx))
    assert not fast_calls
    for a, b in zip(fast, ref, strict=True):
        assert _same(a, b)
    return fast_ctx[0], ref_ctx[0]


@pytest.mark.parametrize("model", ["exact", "sgemm", ("sequential", "fp16"),
                                   ("tensorcore", "h100")])
def test_backward_under_another_accumulation_model(monkeypatch, fast_calls, model):
    _forward_fast_backward(monkeypatch, fast_calls, lambda: matmul_accumulation(model))


@pytest.mark.parametrize("mode", ["up", "down", "toward_zero"])
def test_backward_under_another_rounding(monkeypatch, fast_calls, mode):
    _forward_fast_backward(monkeypatch, fast_calls,
                           lambda: rounding_context(mode, overflow="saturate"))


def test_backward_in_a_flag_context_records_the_general_paths_flags(monkeypatch, fast_calls):
    fast, ref = _forward_fast_backward(monkeypatch, fast_calls, fpsim.flag_context)
    assert fast.flags == ref.flags
    assert fast.flags & fpsim.Flags.OVERFLOW  # the case does overflow: the check can fail


@pytest.mark.parametrize("grad_fmt", ["fp32", "bf16"])
def test_backward_to_a_wider_or_other_gradient_format(monkeypatch, fast_calls, grad_fmt):
    from contextlib import nullcontext
    _forward_fast_backward(monkeypatch, fast_calls, nullcontext, grad_fmt=grad_fmt)


@pytest.mark.parametrize("setup", ["3-D input", "fp32 bias", "stochastic", "flags", "sgemm"])
def test_the_gate_stays_shut_outside_its_conditions(fast_calls, setup):
    x = Tensor(np.ones((2, 3, 4)) if setup == "3-D input" else np.ones((3, 4)), FP16)
    w = Tensor(np.ones((2, 4)), FP16)
    b = Tensor(np.ones(2), "fp32" if setup == "fp32 bias" else FP16)
    if setup == "stochastic":
        ctx = rounding_context("stochastic", rng=0)
    elif setup == "flags":
        ctx = fpsim.flag_context()
    elif setup == "sgemm":
        ctx = matmul_accumulation("sgemm")
    else:
        from contextlib import nullcontext
        ctx = nullcontext()
    with ctx:
        if setup == "fp32 bias":
            with pytest.raises(TypeError):
                F.linear(x, w, b)
        else:
            F.linear(x, w, b)
    assert not fast_calls
