"""fpsim.functional.embedding and fpsim.nn.Embedding: PyTorch's semantics, and the weight
gradient's declared order (index order, each add rounded to the gradient format), checked
against a scalar loop of the arithmetic layer's correctly rounded adds (fpsim.add) and, for
fp16 / bf16 / fp32, of NumPy / ml_dtypes scalar adds; PyTorch's own results are compared in
tests/test_torch_gpt.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import functional as F
from fpsim import nn
from fpsim.autograd import Tensor, rounding_context
from fpsim.autograd.functional import embedding_grad

SCALAR = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32,
          "fp64": np.float64}


def _loop_reference(g2: np.ndarray, flat: np.ndarray, num: int, fmt: str, pad=None):
    """acc[k] = round(acc[k] + g[i]) for i in index order, with fpsim.add (the arithmetic
    layer's kernel) on each scalar (Python float adds for fp64, which fpsim.add refuses)."""
    acc = np.zeros((num, g2.shape[1]))
    for i, k in enumerate(flat.tolist()):
        if k == pad:
            continue
        for j in range(g2.shape[1]):
            s = acc[k, j] + float(g2[i, j])
            acc[k, j] = s if fmt == "fp64" else float(fpsim.add(acc[k, j], float(g2[i, j]), fmt))
    return acc


def _cancelling_grads(n: int, dim: int, fmt: str, seed: int) -> np.ndarray:
    """Gradients of mixed magnitudes, so that the order of the adds changes the result."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, dim)) * 2.0 ** rng.integers(-12, 6, (n, dim))
    return np.asarray(fpsim.round(g, fmt), dtype=np.float64)


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32", "fp64", "e4m3", "e5m2"])
@pytest.mark.parametrize("shape", [(40,), (3, 7, 5)])
def test_weight_gradient_is_index_order_rounded_adds(fmt, shape):
    num, dim = 5, 3
    rng = np.random.default_rng(1)
    idx = rng.integers(0, num, shape)
    idx.flat[:4] = 2  # a row hit many times
    g = _cancelling_grads(idx.size, dim, fmt, 2)
    w = Tensor(np.zeros((num, dim)), fmt, requires_grad=True)
    out = F.embedding(idx, w)
    assert out.shape == shape + (dim,)
    out.backward(Tensor(g.reshape(shape + (dim,)), fmt).numpy())
    want = _loop_reference(g, idx.reshape(-1), num, fmt)
    np.testing.assert_array_equal(w.grad.astype(np.float64), want)
    # the order matters for these gradients: a float64 sum rounded once differs somewhere
    if fmt not in ("fp64",):
        once = np.asarray(fpsim.round(np.add.reduceat(
            g[np.argsort(idx.reshape(-1), kind="stable")],
            np.r_[0, np.cumsum(np.bincount(idx.reshape(-1), minlength=num))[:-1]]), fmt))
        assert not np.array_equal(once, want)


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_native_scalar_adds_agree(fmt):
    """The same order with NumPy / ml_dtypes scalar adds (each rounds once to nearest even)."""
    num, dim = 4, 6
    idx = np.random.default_rng(3).integers(0, num, 200)
    g = _cancelling_grads(idx.size, dim, fmt, 4).astype(SCALAR[fmt])
    acc = np.zeros((num, dim), SCALAR[fmt])
    for i, k in enumerate(idx.tolist()):
        for j in range(dim):
            acc[k, j] = SCALAR[fmt](acc[k, j] + g[i, j])
    got = embedding_grad(g, idx, num, fpsim.get_format(fmt))
    np.testing.assert_array_equal(got.astype(np.float64), acc.astype(np.float64))


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_general_path_equals_native_path(fmt):
    """Inside a flag context the native np.add.at path is closed: the level-by-level path
    gives the same bits."""
    num, dim = 6, 5
    idx = np.random.default_rng(5).integers(0, num, (9, 11))
    g = _cancelling_grads(idx.size, dim, fmt, 6).astype(SCALAR[fmt]).reshape(9, 11, dim)
    f = fpsim.get_format(fmt)
    native = embedding_grad(g, idx, num, f)
    with fpsim.flag_context():
        general = embedding_grad(g, idx, num, f)
    assert native.dtype == general.dtype
    np.testing.assert_array_equal(native.view(np.uint8), general.view(np.uint8))


@pytest.mark.parametrize("mode", ["toward_zero", "up", "down"])
def test_directed_rounding_each_add(mode):
    num, dim = 3, 2
    idx = np.array([0, 1, 0, 0, 2, 0, 1])
    g = _cancelling_grads(idx.size, dim, "fp16", 7)
    w = Tensor(np.zeros((num, dim)), "fp16", requires_grad=True)
    with rounding_context(mode):
        F.embedding(idx, w).backward(g.astype(np.float16))
    want = np.zeros((num, dim))
    for i, k in enumerate(idx.tolist()):
        want[k] = np.asarray(fpsim.add(want[k], g[i], "fp16", mode), dtype=np.float64)
    np.testing.assert_array_equal(w.grad.astype(np.float64), want)


def test_padding_idx_gets_no_gradient_and_negative_counts_from_end():
    w = Tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    idx = np.array([[0, 3, 3], [1, 3, 0]])
    out = F.embedding(idx, w, padding_idx=-1)
    np.testing.assert_array_equal(out.numpy(), np.arange(12.0).reshape(4, 3)[idx])
    out.sum().backward()
    np.testing.assert_array_equal(w.grad, [[2] * 3, [1] * 3, [0] * 3, [0] * 3])


def test_forward_is_an_exact_gather_in_the_weight_format():
    w = Tensor(np.random.default_rng(0).standard_normal((7, 4)), "bf16")
    for idx in (3, np.array(3), [1, 2], np.array([[6, 0], [0, 6]], np.uint8)):
        out = F.embedding(idx, w)
        assert out.fmt.name == "bf16"
        np.testing.assert_array_equal(out.numpy(), w.numpy()[np.asarray(idx)])
    assert F.embedding(np.zeros((2, 0), np.int64), w).shape == (2, 0, 4)


def test_weight_used_twice_adds_both_gradients():
    """Tied weights (a GPT's token embedding and output head): both ops' gradients arrive."""
    w = Tensor(np.eye(3), requires_grad=True)
    x = F.embedding(np.array([0, 0, 2]), w)
    (F.linear(x, w)).sum().backward()
    # d/dw of sum(e(idx) @ w^T) = embedding part (row sums of w per index) + linear part
    emb = np.zeros((3, 3))
    np.add.at(emb, [0, 0, 2], np.eye(3).sum(axis=0))
    lin = np.ones((3, 1)) * np.eye(3)[[0, 0, 2]].sum(axis=0)
    np.testing.assert_array_equal(w.grad, emb + lin)


@pytest.mark.parametrize("bad, err, match", [
    (np.array([0.0, 1.0]), TypeError, "integers"),
    ([True, False], TypeError, "integers"),
    (np.array([0, 5]), IndexError, "index 5 is out of range.*valid: 0 .. 4"),
    (np.array([-1, 0]), IndexError, "index -1 is out of range"),
    ([[0, 1], [2]], ValueError, "rectangular"),
    ("abc", TypeError, "integers"),
])
def test_bad_indices(bad, err, match):
    w = Tensor(np.zeros((5, 2)), requires_grad=True)
    with pytest.raises(err, match=match):
        F.embedding(bad, w)


def test_bad_arguments():
    w = Tensor(np.zeros((5, 2)))
    with pytest.raises(TypeError, match="not an fpsim Tensor"):
        F.embedding(Tensor([1.0]), w)
    with pytest.raises(ValueError, match="2-D"):
        F.embedding([0], Tensor(np.zeros(5)))
    with pytest.raises(ValueError, match="max_norm"):
        F.embedding([0], w, max_norm=1.0)
    with pytest.raises(ValueError, match="sparse"):
        F.embedding([0], w, sparse=True)
    with pytest.raises(ValueError, match="padding_idx"):
        F.embedding([0], w, padding_idx=5)
    with pytest.raises(TypeError, match="padding_idx"):
        F.embedding([0], w, padding_idx=1.5)
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(5, 2, padding_idx=-6)
    with pytest.raises(ValueError, match="max_norm"):
        nn.Embedding(5, 2, max_norm=1.0)
    with pytest.raises(ValueError, match="num_embeddings"):
        nn.Embedding(0, 2)


def test_module_init_and_format():
    a = nn.Embedding(6, 4, padding_idx=2, rng=0)
    b = nn.Embedding(6, 4, padding_idx=2, rng=0)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    assert not a.weight.numpy()[2].any()
    assert 0.5 < a.weight.numpy().std() < 1.5  # N(0, 1) as PyTorch
    assert [n for n, _ in a.named_parameters()] == ["weight"]
    a.to("fp16")
    out = a(np.array([[1, 2]]))
    assert out.fmt.name == "fp16" and out.shape == (1, 2, 4)
    out.sum().backward()
    assert a.weight.grad.dtype == np.float16 and not a.weight.grad[2].any()


def test_memory_meter_counts_one_index_per_row():
    from fpsim.autograd.memory_meter import MemoryMeter

    emb = nn.Embedding(50, 64, rng=0)
    idx = np.zeros((4, 8), np.int64)
    with MemoryMeter(emb) as meter:
        out = emb(idx)
        held = meter.report().current["activations"]
        del out
    assert held == idx.size * 8


def test_adds_round_to_the_gradient_format_not_the_weight_format():
    """An fp16 weight with fp32 gradients (master-gradient setups) adds in fp32."""
    idx = np.array([0, 0, 0, 1])
    g = np.array([[1.0], [2.0**-11], [2.0**-11], [3.0]], np.float16)
    w = Tensor(np.zeros((2, 1)), "fp16", requires_grad=True)
    w.grad_fmt = "fp32"
    F.embedding(idx, w).backward(g)
    assert w.grad.dtype == np.float32
    assert w.grad.ravel().tolist() == [1.0 + 2.0**-10, 3.0]  # fp16 adds would give 1.0
