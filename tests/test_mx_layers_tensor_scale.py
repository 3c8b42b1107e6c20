"""MXLinear's tensor_scale=False (NVFP4 with e4m3 block scales only): on the digits MLP at
initialisation every hidden-layer gradient lies below 2**-8, so with round to nearest the first
layer's weight gradient is exactly zero; NVFP4's per-tensor scale or stochastic rounding bring
it back; storage loses the 4-byte scale; MXFP8 refuses the option."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim import nn
from fpsim.autograd import functional as F
from fpsim.autograd.tensor import Tensor
from fpsim.datasets import load_digits
from fpsim.quant.mx_layers import MXLinear


def _first_layer_grad(**kw):
    s = load_digits()
    first = MXLinear(64, 64, recipe="nvfp4", hadamard=False, weight_2d=False, rng=0, **kw)
    net = nn.Sequential(first, nn.ReLU(), nn.Linear(64, 10, rng=1000))
    loss = F.cross_entropy(net(Tensor(s.x_train[:64])), s.y_train[:64])
    loss.backward()
    return np.asarray(first.weight.grad, np.float64)


def test_block_scales_alone_flush_the_gradient():
    g = _first_layer_grad(tensor_scale=False, stochastic_gradients=False)
    assert not g.any()
    ref = _first_layer_grad(tensor_scale=True, stochastic_gradients=False)
    assert np.count_nonzero(ref) > ref.size // 4
    sr = _first_layer_grad(tensor_scale=False, stochastic_gradients=True)
    assert np.count_nonzero(sr) > 0
    # stochastic rounding keeps the flushed gradient in expectation: it points the same way
    cos = float((sr * ref).sum() / np.linalg.norm(sr) / np.linalg.norm(ref))
    assert cos > 0.3


def test_storage_and_errors():
    a = MXLinear(32, 16, recipe="nvfp4", weight_2d=False, rng=0)
    b = MXLinear(32, 16, recipe="nvfp4", weight_2d=False, tensor_scale=False, rng=0)
    assert a.inference_nbytes() - b.inference_nbytes() == 4
    c = MXLinear(32, 16, recipe="nvfp4", tensor_scale=False, rng=0)  # 16x16 tiles
    assert MXLinear(32, 16, recipe="nvfp4", rng=0).inference_nbytes() - c.inference_nbytes() == 4
    assert "tensor_scale=False" in repr(b) and "tensor_scale" not in repr(a)
    with pytest.raises(ValueError, match="tensor_scale=False"):
        MXLinear(32, 16, recipe="mxfp8", tensor_scale=False)
