"""cross_entropy's one-node path (losses._cross_entropy_classes: (N, C) logits, valid class
indices, no weights, no smoothing) against the two ops it stands for, nll_loss(log_softmax(x,
1), t), bit for bit: the loss, the logits' gradient, and the IEEE flags and stochastic draws of
the backward. Those two ops are each checked against exact references in
tests/test_autograd.py and tests/test_cross_entropy.py. A spy proves the one-node path ran; it
stays shut under an autocast policy and while a graph observer (the memory meter) watches.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

import fpsim
import fpsim.autograd.functional as F
import fpsim.autograd.losses as L
from fpsim.autograd import Tensor, rounding_context
from tests.spy import count_calls


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit patterns (NaN payloads and signed zeros included)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        a.view(np.uint8), b.view(np.uint8))


@pytest.fixture
def node_calls(monkeypatch):
    return count_calls(monkeypatch, L, "_cross_entropy_classes")


def _logits(rng: np.random.Generator, n: int, c: int, kind: str) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal((n, c)) * 4
    if kind == "wide":  # far apart logits: exp underflows, log-probabilities near the range end
        return rng.standard_normal((n, c)) * 3e4
    x = rng.standard_normal((n, c))
    x[rng.random((n, c)) < 0.2] = np.inf
    x[rng.random((n, c)) < 0.1] = -np.inf
    x[rng.random((n, c)) < 0.05] = np.nan
    return x


def _both(x64, t, fmt, reduction, ctx_factory, seed=0):
    """(loss, grad, context) by cross_entropy and by the two ops, each backward in a fresh
    ``ctx_factory(seed)``."""
    out = []
    for compose in (False, True):
        x = Tensor(x64, fmt, requires_grad=True)
        if compose:
            loss = F.nll_loss(F.log_softmax(x, 1), t, reduction=reduction)
        else:
            loss = F.cross_entropy(x, t, reduction=reduction)
        with ctx_factory(seed) as ctx:
            loss.backward()
        out.append((loss.numpy(), x.grad, ctx))
    return out


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32", "fp64", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("kind", ["normal", "wide", "specials"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shape", [(128, 10), (1, 1), (7, 3), (33, 1000)])
def test_one_node_equals_the_two_ops(node_calls, fmt, kind, reduction, shape):
    n, c = shape
    rng = np.random.default_rng(n * 1009 + c)
    x64 = _logits(rng, n, c, kind)
    for dtype in (np.int64, np.uint8 if c <= 255 else np.int32, np.int16):
        t = rng.integers(0, c, n).astype(dtype)
        with np.errstate(all="ignore"):
            (la, ga, _), (lb, gb, _) = _both(x64, t, fmt, reduction, lambda s: nullcontext())
        assert node_calls, "the one-node path did not run"
        node_calls.clear()
        assert _same(la, lb)
        assert _same(ga, gb)


@pytest.mark.parametrize("setting", ["up", "toward_zero", "stochastic", "saturate", "flush"])
def test_backward_under_another_rounding(node_calls, setting):
    def ctx(seed):
        if setting == "stochastic":
            return rounding_context("stochastic", rng=seed)
        if setting == "saturate":
            return rounding_context(overflow="saturate")
        if setting == "flush":
            return rounding_context(subnormals="flush")
        return rounding_context(setting)

    rng = np.random.default_rng(3)
    x64, t = rng.standard_normal((64, 10)) * 8, rng.integers(0, 10, 64)
    (la, ga, _), (lb, gb, _) = _both(x64, t, "fp16", "mean", ctx, seed=11)
    assert node_calls
    assert _same(la, lb) and _same(ga, gb)


def test_backward_in_a_flag_context_records_the_same_flags(node_calls):
    rng = np.random.default_rng(5)
    x64, t = rng.standard_normal((256, 10)) * 20, rng.integers(0, 10, 256)
    (la, ga, fa), (lb, gb, fb) = _both(x64, t, "fp16", "mean",
                                       lambda s: fpsim.flag_context())
    assert node_calls
    assert _same(ga, gb)
    assert fa.flags == fb.flags
    assert fa.flags & fpsim.Flags.INEXACT  # the backward does round: the check can fail


def test_shut_under_autocast_and_observers(node_calls):
    from fpsim.amp import autocast
    from fpsim.autograd.memory_meter import MemoryMeter

    x = Tensor(np.ones((4, 3)), "fp32", requires_grad=True)
    t = np.array([0, 1, 2, 0])
    with autocast("fp16"):
        F.cross_entropy(x, t)
    assert not node_calls
    with MemoryMeter() as meter:  # the meter sees PyTorch's two ops
        F.cross_entropy(x, t).backward()
    assert not node_calls
    assert meter.report().ops == 2
    F.cross_entropy(x, t)
    assert node_calls  # the same call outside both takes the one-node path


@pytest.mark.parametrize("case", ["weight", "smoothing", "ignored", "out of range", "none",
                                  "list target", "3-D"])
def test_other_options_take_the_two_ops(node_calls, case):
    x = Tensor(np.zeros((4, 3)), "fp32", requires_grad=True)
    t = np.array([0, 1, 2, 0])
    kw = {}
    if case == "weight":
        kw["weight"] = np.ones(3)
    elif case == "smoothing":
        kw["label_smoothing"] = 0.1
    elif case == "ignored":
        kw["ignore_index"] = 0
    elif case == "out of range":
        t = np.array([0, 1, 2, 3])
    elif case == "none":
        kw["reduction"] = "none"
    elif case == "list target":
        t = [0, 1, 2, 0]
    else:
        x, t = Tensor(np.zeros((4, 3, 2)), "fp32", requires_grad=True), np.zeros((4, 2), int)
    try:
        F.cross_entropy(x, t, **kw)
    except (ValueError, IndexError):  # out of range: the two ops' error
        pass
    assert not node_calls


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "fp64", "fp8_e4m3"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("mode", ["plain", "stochastic"])
def test_nll_grad_rounded_equals_the_whole_array_rounding(fmt, reduction, mode):
    """The backward's shortcut (plain rounding: +0 and the coefficient rounded once each, then
    placed) gives the whole array's rounding and widening, bit for bit: coefficients that
    round, overflow, fall to subnormals or to zero, a negative zero; under stochastic rounding
    it takes the whole array (the same draws)."""
    from fpsim.formats import get_format

    f = get_format(fmt)
    n, c = 37, 11
    rng = np.random.default_rng(1)
    rows, t = np.arange(n), rng.integers(0, c, n)
    for gv in (1.0, 3.0, 0.1, 1e30, 1e-6, 2.0 ** -30, -0.0, 7e-46):
        g = np.asarray(gv)
        ctx = (lambda: rounding_context("stochastic", np.random.default_rng(2))) \
            if mode == "stochastic" else nullcontext
        with ctx(), np.errstate(all="ignore"):
            got = L._nll_grad_rounded(g, n, c, rows, t, reduction, f)
        with ctx(), np.errstate(all="ignore"):
            want = F.widen(F.round_to(L._nll_grad(g, n, c, rows, t, reduction), f))
        assert _same(got, want), (fmt, reduction, gv)
