"""The blocked elementwise kernels of fpsim.autograd.functional (issue 31's speed-up of the GPT
step): softmax and the tanh GELU process large C-contiguous arrays block by block
(``functional._tiles``); their values and gradients must be those of the whole-array
computation, bit for bit, in every format and on special values, and under non-plain
rounding (stochastic) they must not split at all.
"""

from __future__ import annotations

import numpy as np
import pytest

from fpsim.autograd import Tensor, rounding_context
from fpsim.autograd import functional as F

_SHAPES = [(16, 4, 64, 64), (3, 20001), (40000,), (333, 65), (5, 9, 1001), (7, 3)]
_FORMATS = ["fp32", "fp64", "fp16", "bf16"]


def _run(op: str, x0: np.ndarray, fmt: str, g0: np.ndarray, dim: int = -1):
    x = Tensor(x0, fmt, requires_grad=True)
    y = F.softmax(x, dim=dim) if op == "softmax" else F.gelu(x, approximate="tanh")
    y.backward(g0, retain_graph=True)
    first = x.grad.copy()
    y.backward(g0)  # a second backward reads what the forward kept, unchanged
    return y.data.copy(), first, x.grad.copy()


def _data(shape: tuple, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x0 = rng.normal(0.0, 3.0, shape)
    flat = x0.reshape(-1)
    flat[:5] = [np.inf, -np.inf, np.nan, 1e-30, -40.0]
    return x0, rng.normal(0.0, 1.0, shape)


@pytest.mark.parametrize("op", ["softmax", "gelu"])
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


@pytest.mark.parametrize("op", ["softmax", "gelu"])
def test_blocks_with_small_block_size(monkeypatch, op):
    """Many blocks, a partial last one, rows longer than a block (one row per block)."""
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
    assert rows.shape == (8, 10) and len(blocks) == 8
    assert F._tiles(a, 10, False)[1] == [...]  # not asked to split
    assert F._tiles(a.T, 8, True)[1] == [...]  # not C-contiguous
    assert F._tiles(np.zeros((1, 100)), 100, True)[1] == [...]  # one row: one block
    assert F._tiles(np.zeros(()), 1, True)[1] == [...]


@pytest.mark.parametrize("op", ["softmax", "gelu"])
def test_non_contiguous_and_other_dims_equal_whole_array(monkeypatch, op):
    x0, g0 = _data((64, 300), 5)
    xt = x0.T  # a transposed input: the whole-array path, its layout kept
    for dim in (-1, 0):
        got = _run(op, xt, "fp32", g0.T, dim)
        monkeypatch.setattr(F, "_BLOCK", 1 << 40)
        want = _run(op, xt, "fp32", g0.T, dim)
        monkeypatch.undo()
        for a, b in zip(got, want, strict=True):
            assert a.tobytes() == b.tobytes()


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
    assert calls == [False, False]
