"""fpsim.quant.MXLinear: the wiring of each GEMM (which operand is blocked along which axis),
the 16x16 weight tiles, the Hadamard transform cancelling in the weight gradient, stochastic
rounding on gradients only, and a few training steps."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim.mx as mx
from fpsim import nn
from fpsim.autograd import functional as F
from fpsim.autograd.tensor import Tensor
from fpsim.quant import mx_layers
from fpsim.quant.mx_layers import MXLinear


def _grads(layer, x, g):
    xt = Tensor(x, requires_grad=True)
    out = layer(xt)
    (out * Tensor(g)).sum().backward()
    return (out.numpy(np.float64), np.asarray(xt.grad, np.float64),
            np.asarray(layer.weight.grad, np.float64), np.asarray(layer.bias.grad, np.float64))


def test_representable_operands_pass_unchanged_through_every_gemm():
    # small integers times powers of two, with 448 * 2**k in every block of 32 along both axes
    # of each operand: MXFP8 (rceil) represents them exactly, so the layer is a plain linear
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 9, (32, 64)).astype(np.float64)
    w = rng.integers(-8, 9, (32, 64)).astype(np.float64) / 16
    g = rng.integers(-8, 9, (32, 32)).astype(np.float64) / 4
    for a, top in ((x, 448.0), (w, 28.0), (g, 112.0)):
        a[0, :] = top
        a[:, 0] = top
    lin = MXLinear(64, 32, recipe="mxfp8", rng=1)
    lin.weight.data = w
    lin.bias.data = np.zeros(32)
    out, gx, gw, gb = _grads(lin, x, g)
    np.testing.assert_array_equal(out, x @ w.T)
    np.testing.assert_array_equal(gx, g @ w)
    np.testing.assert_array_equal(gw, g.T @ x)
    np.testing.assert_array_equal(gb, g.sum(0))


def test_weight_tiles_are_16x16_nvfp4_blocks():
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((40, 24)) * np.exp(rng.standard_normal((40, 24)))).astype(
        np.float32)
    got = mx_layers._quantize_weight_2d(w, "nearest_even", None)
    pts = mx.nvfp4_per_tensor_scale(w)
    ref = np.zeros_like(w)
    for i in range(0, 40, 16):
        for j in range(0, 24, 16):
            tile = w[i:i + 16, j:j + 16]
            q = mx.quantize(tile.reshape(-1), "nvfp4", block_size=tile.size, per_tensor_scale=pts)
            ref[i:i + 16, j:j + 16] = q.dequantize().reshape(tile.shape)
    np.testing.assert_array_equal(got, ref)


def test_hadamard_cancels_in_the_weight_gradient(monkeypatch):
    # with the quantizer replaced by the identity, (H g)^T (H x) = g^T x up to float64 rounding
    monkeypatch.setattr(mx_layers, "fake_quantize_mx", lambda a, *args, **kw: np.float32(a))
    monkeypatch.setattr(mx_layers, "_quantize_weight_2d", lambda w, *a: w)
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((37, 16)), rng.standard_normal((37, 8))
    lin = MXLinear(16, 8, recipe="nvfp4", rng=4)
    _, _, gw, _ = _grads(lin, x, g)
    ref = g.astype(np.float32).astype(np.float64).T @ x.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(gw, ref, rtol=1e-5, atol=1e-5)
    h = lin._h
    np.testing.assert_allclose(h @ h.T, np.eye(16), atol=1e-12)
    assert set(np.unique(np.abs(h * 4))) == {1.0}


def test_stochastic_rounding_only_on_gradients():
    rng = np.random.default_rng(5)
    x, g = rng.standard_normal((16, 32)), rng.standard_normal((16, 16))
    runs = []
    for seed in (0, 1):
        lin = MXLinear(32, 16, recipe="nvfp4", rng=7)
        lin._rng = np.random.default_rng(seed)
        runs.append(_grads(lin, x, g))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])  # forward: nearest even
    assert not np.array_equal(runs[0][1], runs[1][1])  # dgrad: stochastic
    det = []
    for seed in (0, 1):
        lin = MXLinear(32, 16, recipe="nvfp4", stochastic_gradients=False, hadamard=False,
                       rng=7)
        lin._rng = np.random.default_rng(seed)
        det.append(_grads(lin, x, g))
    for a, b in zip(det[0], det[1], strict=True):
        np.testing.assert_array_equal(a, b)


def test_training_steps_reduce_the_loss_and_errors():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 32))
    y = (x[:, 0] > 0).astype(np.int64)
    for recipe in ("mxfp8", "nvfp4"):
        model = nn.Sequential(MXLinear(32, 16, recipe=recipe, rng=0), nn.ReLU(),
                              nn.Linear(16, 2, rng=1))
        from fpsim import optim
        opt = optim.Adam(list(model.parameters()), lr=1e-2)
        losses = []
        for _ in range(30):
            loss = F.cross_entropy(model(Tensor(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.numpy(np.float64)))
        assert losses[-1] < 0.5 * losses[0]
    with pytest.raises(ValueError, match="valid: 'mxfp8', 'nvfp4'"):
        MXLinear(4, 4, recipe="fp4")
    with pytest.raises(ValueError, match="NVFP4"):
        MXLinear(4, 4, recipe="mxfp8", weight_2d=True)
    with pytest.raises(ValueError, match="expected"):
        MXLinear(4, 4)(Tensor(np.ones((2, 5))))


def test_inference_bytes():
    lin = MXLinear(64, 10, recipe="nvfp4", rng=0)  # 16x16 tiles: 4 x 1 of them, padded
    assert lin.inference_nbytes() == 64 * 10 // 2 + 4 * 1 + 4 + 4 * 10
    lin = MXLinear(64, 10, recipe="nvfp4", weight_2d=False, rng=0)
    assert lin.inference_nbytes() == 64 * 10 // 2 + 10 * 4 + 4 + 4 * 10
    lin = MXLinear(64, 10, recipe="mxfp8", rng=0)
    assert lin.inference_nbytes() == 64 * 10 + 10 * 2 + 4 * 10
