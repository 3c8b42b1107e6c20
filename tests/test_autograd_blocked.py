"""The blocked elementwise kernels of fpsim.autograd.functional (issue 31's speed-up of the GPT
step): softmax, the tanh GELU and layer_norm's forward process large C-contiguous arrays
block by block (``functional._tiles``); their values and gradients must be those of the
whole-array computation, bit for bit, in every format and on special values, and under
non-plain rounding (stochastic) they must not split at all. Also the sgemm bias add and
masked_fill's copy path against their formulas.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from fpsim.autograd import Tensor, rounding_context
from fpsim.autograd import functional as F

_SHAPES = [(16, 4, 64, 64), (3, 20001), (40000,), (333, 65), (5, 9, 1001), (7, 3)]
_FORMATS = ["fp32", "fp64", "fp16", "bf16"]
_OPS = ["softmax", "gelu", "layer_norm", "layer_norm_plain"]


def _run(op: str, x0: np.ndarray, fmt: str, g0: np.ndarray, dim: int = -1):
    x = Tensor(x0, fmt, requires_grad=True)
    n = x0.shape[-1]
    rng = np.random.default_rng(n)
    w = Tensor(rng.normal(1.0, 0.5, n), fmt, requires_grad=True)
    b = Tensor(rng.normal(0.0, 0.5, n), fmt, requires_grad=True)
    if op == "softmax":
        y = F.softmax(x, dim=dim)
    elif op == "gelu":
        y = F.gelu(x, approximate="tanh")
    elif op == "layer_norm":
        y = F.layer_norm(x, n, w, b)
    else:  # layer_norm without the affine part
        y = F.layer_norm(x, n)
    y.backward(g0, retain_graph=True)
    first = [t.grad.copy() for t in (x, w, b) if t.grad is not None]
    y.backward(g0)  # a second backward reads what the forward kept, unchanged
    return [y.data.copy(), *first, *(t.grad.copy() for t in (x, w, b) if t.grad is not None)]


def _data(shape: tuple, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x0 = rng.normal(0.0, 3.0, shape)
    flat = x0.reshape(-1)
    flat[:5] = [np.inf, -np.inf, np.nan, 1e-30, -40.0]
    return x0, rng.normal(0.0, 1.0, shape)


@pytest.mark.parametrize("op", _OPS)
@pytest.mark.parametrize("fmt", _FORMATS)
@pytest.mark.parametrize("shape", _SHAPES)
def test_blocks_equal_whole_array(monkeypatch, op, fmt, shape):
    x0, g0 = _data(shape, len(shape) + shape[-1])
    blocked = _run(op, x0, fmt, g0)
    monkeypatch.setattr(F, "_BLOCK", 1 << 40)  # one block: the whole-array computation
    whole = _run(op, x0, fmt, g0)
    for a, b in zip(blocked, whole, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.flags.c_contiguous
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("op", _OPS)
def test_blocks_with_small_block_size(monkeypatch, op):
    """Many blocks, a partial last one, rows longer than a block (two rows a block)."""
    x0, g0 = _data((37, 130), 3)
    monkeypatch.setattr(F, "_BLOCK", 1 << 40)
    whole = _run(op, x0, "fp32", g0)
    for block in (64, 100, 129, 1000):
        monkeypatch.setattr(F, "_BLOCK", block)
        for a, b in zip(_run(op, x0, "fp32", g0), whole, strict=True):
            assert a.tobytes() == b.tobytes()


def test_tiles_whole_array_cases(monkeypatch):
    monkeypatch.setattr(F, "_BLOCK", 16)
    a = np.zeros((8, 10), np.float32)
    rows, blocks = F._tiles(a, 10, True)
    assert rows.shape == (8, 10) and blocks == [slice(0, 2), slice(2, 4), slice(4, 6),
                                                slice(6, 8)]
    rows, blocks = F._tiles(np.zeros((7, 10)), 10, True)  # no one-row tail
    assert blocks == [slice(0, 2), slice(2, 4), slice(4, 7)]
    assert F._tiles(a, 10, False)[1] == [...]  # not asked to split
    assert F._tiles(a.T, 8, True)[1] == [...]  # not C-contiguous
    assert F._tiles(np.zeros((2, 100)), 100, True)[1] == [...]  # two rows: one block
    assert F._tiles(np.zeros((3, 100)), 100, True)[1] == [...]  # 2 + a row: one block
    assert F._tiles(np.zeros((4, 100)), 100, True)[1] == [slice(0, 2), slice(2, 4)]
    for n in range(1, 40):  # every row once, in order, two rows a block at least
        a = np.zeros((n, 3))
        rows, blocks = F._tiles(a, 3, True)
        if blocks != [...]:
            got = [i for b in blocks for i in range(n)[b]]
            assert got == list(range(n)) and min(b.stop - b.start for b in blocks) >= 2
    assert F._tiles(np.zeros(()), 1, True)[1] == [...]


@pytest.mark.parametrize("op", _OPS)
def test_non_contiguous_and_other_dims_equal_whole_array(monkeypatch, op):
    """A transposed (non-contiguous) input takes the whole-array path, its layout kept; so
    does a softmax along another dim than the last."""
    x0, g0 = _data((300, 64), 5)

    def run():
        x = Tensor(x0, "fp32", requires_grad=True)
        assert not F.transpose(x, 0, 1).data.flags.c_contiguous  # (64, 300), a view
        outs = []
        for dim in ((-1, 0) if op == "softmax" else (-1,)):
            xt = F.transpose(x, 0, 1)
            if op == "softmax":
                y = F.softmax(xt, dim=dim)
            elif op == "gelu":
                y = F.gelu(xt, approximate="tanh")
            else:
                y = F.layer_norm(xt, 300)
            y.backward(g0.T)
            outs += [y.data.copy(order="K"), x.grad.copy()]
            x.grad = None
        return outs

    got = run()
    monkeypatch.setattr(F, "_BLOCK", 1 << 40)
    want = run()
    for a, b in zip(got, want, strict=True):
        assert a.strides == b.strides and a.tobytes(order="A") == b.tobytes(order="A")


def test_stochastic_rounding_does_not_split(monkeypatch):
    """Stochastic rounding draws random bits per call: one rounding of the whole array, so the
    draws are those of the whole-array computation."""
    x0, _ = _data((64, 1000), 7)
    calls = []
    tiles = F._tiles

    def spy(a, width, split):
        calls.append(split)
        return tiles(a, width, split)

    monkeypatch.setattr(F, "_tiles", spy)
    with rounding_context("stochastic", 0):
        F.softmax(Tensor(x0, "bf16"), dim=-1)
        F.gelu(Tensor(x0, "bf16"), approximate="tanh")
        F.layer_norm(Tensor(x0, "bf16"), 1000)
    assert calls == [False, False, False]


def _sgemm_bias_cases():
    rng = np.random.default_rng(11)
    f32 = np.finfo(np.float32)
    acc = (rng.normal(0, 1, (50, 8)) * 2.0 ** rng.integers(-140, 128, (50, 8))).astype(
        np.float32)
    acc[0, :4] = [f32.max, -f32.max, np.inf, np.nan]
    acc[1, :3] = [f32.smallest_subnormal, -f32.smallest_subnormal, 0.0]
    bias = (rng.normal(0, 1, 8) * 2.0 ** rng.integers(-149, 127, 8)).astype(np.float32)
    bias[:3] = [f32.max, -np.inf, -f32.smallest_subnormal]
    return acc, bias.astype(np.float64)


@pytest.mark.parametrize("shape", [(50, 8), (2, 25, 8)])
def test_sgemm_bias_float32_add_equals_float64_sum_rounded(shape):
    """The sgemm model's bias: float32's own add (the fast path) gives the float64 sum rounded
    once to fp32 (the formula), on overflow, subnormals, infinities and NaN."""
    from fpsim.autograd import accumulate
    from fpsim.autograd.context import as_accumulation, round_to
    from fpsim.formats import FP32

    acc, bias = _sgemm_bias_cases()
    acc = acc.reshape(shape)
    with np.errstate(all="ignore"):
        want = round_to(acc + bias, FP32)
        got = accumulate.add_bias(acc.copy(), bias, as_accumulation("sgemm"))
    assert got.dtype == np.float32
    assert got.tobytes() == want.tobytes()
    with np.errstate(all="ignore"):  # a bias that is no fp32 value: the float64 sum
        odd = bias + 2.0 ** -40
        assert accumulate.add_bias(acc.copy(), odd, as_accumulation("sgemm")).tobytes() == \
            round_to(acc + odd, FP32).tobytes()


@pytest.mark.parametrize("fmt", _FORMATS)
@pytest.mark.parametrize("transpose", [False, True])
def test_masked_fill_copy_equals_where(fmt, transpose):
    """masked_fill's copy-and-fill path gives np.where's array (values, dtype, layout), forward
    and backward, for a broadcast mask."""
    rng = np.random.default_rng(2)
    x0 = rng.normal(0.0, 2.0, (3, 2, 9, 9))
    x0 = x0.transpose(0, 1, 3, 2) if transpose else x0
    mask = np.triu(np.ones((9, 9), bool), 1)
    x = Tensor(x0, fmt, requires_grad=True)
    y = F.masked_fill(x, mask, -np.inf)
    fill = np.asarray(-np.inf, x.data.dtype)
    want = np.where(np.broadcast_to(mask, x.shape), fill, x.data)
    assert y.data.dtype == want.dtype and y.data.tobytes(order="A") == want.tobytes(order="A")
    assert y.data.strides == want.strides
    g = rng.normal(0.0, 1.0, x.shape)
    y.backward(g)
    gw = np.where(np.broadcast_to(mask, x.shape), np.zeros((), x.grad.dtype),
                  Tensor(g, fmt).data)
    assert x.grad.tobytes() == gw.tobytes()


@pytest.mark.parametrize("op", ["softmax", "gelu"])
@pytest.mark.parametrize("grad_fmt", ["fp32", "bf16", "fp16", "fp64"])
@pytest.mark.parametrize("mode", ["nearest_even", "stochastic"])
def test_blocked_backward_rounds_like_delivery(monkeypatch, op, grad_fmt, mode):
    """A blocked backward rounds each block of the input's gradient to its gradient format
    (the rounding the engine's delivery gives the whole float64 gradient) when rounding is
    plain at backward time, and hands the float64 gradient whole otherwise: the same bits as
    the whole-array computation, for a gradient format other than the input's and for a
    backward under stochastic rounding after a plain forward."""
    x0, g0 = _data((16, 4, 64, 64), 9)

    def run():
        x = Tensor(x0, "fp32", requires_grad=True)
        x.grad_fmt = grad_fmt
        y = F.softmax(x, dim=-1) if op == "softmax" else F.gelu(x, approximate="tanh")
        ctx = rounding_context("stochastic", np.random.default_rng(5)) \
            if mode == "stochastic" else contextlib.nullcontext()
        with ctx:
            with np.errstate(all="ignore"):  # as the engine runs a backward
                (direct,) = y._backward(g0)  # what the op hands the engine
            y.backward(g0)
        return x.grad, direct

    (got, direct), blocked = run(), F._tiles(x0, x0.shape[-1] if op == "softmax" else 1,
                                             True)[1] != [...]
    # blocked and plain: rounded to the gradient format here; else float64, rounded whole
    assert blocked and direct.dtype == (got.dtype if mode == "nearest_even" else np.float64)

    monkeypatch.setattr(F, "_BLOCK", 1 << 40)
    want = run()[0]
    assert got.dtype == want.dtype == Tensor(0.0, grad_fmt).data.dtype
    assert got.tobytes() == want.tobytes()


def _layer_norm_grads_fresh(x64, g64, w64, eps, need):
    """layer_norm's backward as the engine computed it with a fresh array for every product
    (the reference of the buffer-reusing backward): float64 values of (dx, dw, db)."""
    mu = x64.mean(axis=-1, keepdims=True)
    xhat = x64 - mu
    rstd = 1.0 / np.sqrt(np.square(xhat).mean(axis=-1, keepdims=True) + eps)
    xhat = xhat * rstd
    n, lead = x64.shape[-1], tuple(range(x64.ndim - 1))
    gxhat = g64 if w64 is None else g64 * w64
    r = gxhat * xhat
    s2 = r.sum(axis=-1, keepdims=True)
    r = n * gxhat - gxhat.sum(axis=-1, keepdims=True) - xhat * s2
    dx = rstd / n * r
    return (dx if need[0] else None, (g64 * xhat).sum(axis=lead) if need[1] else None,
            g64.sum(axis=lead) if need[2] else None)


@pytest.mark.parametrize("fmt", ["fp32", "fp64", "bf16"])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("need", [(True, True, True), (True, False, True), (False, True, True),
                                  (True, True, False)])
@pytest.mark.parametrize("layout", ["C", "transposed"])
def test_layer_norm_backward_reusing_buffers_equals_fresh_arrays(monkeypatch, fmt, affine,
                                                                 need, layout):
    """layer_norm's backward computes the weight's and bias's sums first and then the input's
    gradient in the buffers of the widened gradient and of g * xhat: the same bits as the
    same ops on fresh arrays, for every combination of affine parts and of inputs wanting a
    gradient, a float64 gradient (which is the caller's array: never written) and a
    transposed input; the gradient array handed in is left as it was."""
    monkeypatch.setattr(F, "_BLOCK", 1 << 40)  # the forward in one piece, as the reference
    rng = np.random.default_rng(3)
    x0 = rng.normal(0.0, 2.0, (6, 5, 64))
    x0 = x0.transpose(1, 0, 2).copy().transpose(1, 0, 2) if layout == "transposed" else x0
    x = Tensor(x0, fmt, requires_grad=need[0])
    w = Tensor(rng.normal(1.0, 0.5, 64), fmt, requires_grad=need[1]) \
        if affine != "none" else None
    b = Tensor(rng.normal(0.0, 0.5, 64), fmt, requires_grad=need[2]) \
        if affine == "both" else None
    y = F.layer_norm(x, 64, w, b)
    if y._backward is None:
        return  # nothing wants a gradient: no backward recorded
    for g in (rng.normal(0.0, 1.0, x.shape).astype(np.float32), rng.normal(0.0, 1.0, x.shape)):
        kept = g.copy()
        got = y._backward(g)
        want = _layer_norm_grads_fresh(np.asarray(x.data, np.float64), g.astype(np.float64),
                                       None if w is None else np.asarray(w.data, np.float64),
                                       1e-5, (need[0], w is not None and need[1],
                                              b is not None and need[2]))
        want = want[:1 + (w is not None) + (b is not None)]
        assert len(got) == len(want) and g.tobytes() == kept.tobytes()
        for a, c in zip(got, want, strict=True):
            assert (a is None) == (c is None)
            if a is not None:
                assert a.dtype == np.float64 and a.tobytes() == c.tobytes()
