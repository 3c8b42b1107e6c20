"""W8A8: int8 weights and int8 activations for every linear layer, simulated by fake
quantization (quantize, then dequantize, then the layer's matmul in its own format), as
SmoothQuant's ``smoothquant/fake_quant.py`` does to measure accuracy.

- Weights: symmetric int8 per output channel, ``amax`` = the row's max |w|.
- Activations: symmetric int8 per tensor (one ``amax`` for the whole input of the layer) or
  per token (one per row of the input), taken from the input at hand (dynamic quantization).

Both use TensorRT's symmetric absmax scheme, :func:`fpsim.quant.tensorrt_fake_quantize` with
``narrow_range=True``: ``clamp(round_half_even(x * (127 / amax)), -127, 127) / (127 /
amax)`` in float32 (an ``amax`` of 0 gives zeros). The reference code divides by ``amax /
127`` instead of multiplying by ``127 / amax``; the two may differ on values within a float32
rounding of a tie.

One outlier channel makes a per-tensor or per-token ``amax`` large and rounds every small
activation of the same token to few levels: what :func:`fpsim.quant.smooth_gpt` addresses.
"""

from __future__ import annotations

import copy

import numpy as np

from ..autograd import functional as F
from ..autograd.tensor import Tensor
from ..nn import Linear, Module
from .fake_quant import tensorrt_fake_quantize

__all__ = ["INT8_GRANULARITIES", "int8_fake_quantize", "W8A8Linear", "quantize_w8a8"]

INT8_GRANULARITIES = ("per_tensor", "per_token", "per_channel")


def _granularity(granularity) -> str:
    if not isinstance(granularity, str) or granularity not in INT8_GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}; valid: "
                         f"{', '.join(map(repr, INT8_GRANULARITIES))}")
    return granularity


def finite_float32(x, what: str) -> np.ndarray:
    """``x`` as a float32 array with at least one axis, checked non-empty and finite (after the
    cast); ``what`` names it in errors (TypeError for non-real values, ValueError otherwise).
    The input check of the int8 / KV-cache quantizers; not exported.

    >>> finite_float32([1.5, 2], "x")
    array([1.5, 2. ], dtype=float32)
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
        raise TypeError(f"{what} must be a real array, got dtype {arr.dtype}")
    if arr.ndim == 0 or arr.size == 0:
        raise ValueError(f"{what} must be a non-empty array with at least one axis, got shape "
                         f"{arr.shape}")
    with np.errstate(over="ignore"):
        arr = arr.astype(np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"{what} contains NaN or infinity (in float32); absmax int8 needs "
                         "finite values")
    return arr


def int8_fake_quantize(x, granularity: str = "per_tensor") -> np.ndarray:
    """Symmetric int8 absmax fake quantization of ``x`` (float32): one ``amax`` for the whole
    array (``"per_tensor"``) or one per row, i.e. per index of every axis but the last
    (``"per_token"`` for activations (..., features), ``"per_channel"`` for a weight (out,
    in): the same reduction).

    >>> x = np.array([[1.0, 0.01, -0.02], [0.5, 0.25, 0.0]], np.float32)
    >>> int8_fake_quantize(x, "per_tensor").astype(float).round(5).tolist()
    [[1.0, 0.00787, -0.02362], [0.50394, 0.25197, 0.0]]
    >>> int8_fake_quantize(x, "per_token").astype(float).round(5).tolist()
    [[1.0, 0.00787, -0.02362], [0.5, 0.25197, 0.0]]
    """
    g = _granularity(granularity)
    arr = finite_float32(x, "x")
    if g == "per_tensor":
        amax = np.abs(arr).max()
    else:
        amax = np.abs(arr).max(axis=-1, keepdims=True)
    return tensorrt_fake_quantize(arr, amax, 8, narrow_range=True)


class W8A8Linear(Module):
    """A frozen linear layer computing ``int8(x) @ int8(W).T + b`` (fake-quantized: the int8
    values dequantized, then the matmul in ``fmt``): weights per output channel, the input
    per tensor or per token (``act_granularity``).

    >>> lin = W8A8Linear(np.array([[1.0, 0.5]]), act_granularity="per_token")
    >>> lin(Tensor(np.array([[2.0, 1.0]]))).numpy(np.float64).round(4)  # 2 + 1.00787 * 0.50394
    array([[2.5079]])
    """

    def __init__(self, weight, bias=None, *, act_granularity: str = "per_tensor",
                 fmt: str = "fp32") -> None:
        super().__init__()
        g = _granularity(act_granularity)
        if g == "per_channel":
            raise ValueError("act_granularity must be 'per_tensor' or 'per_token' (an "
                             "activation's rows are tokens)")
        w = finite_float32(weight, "weight")
        if w.ndim != 2:
            raise ValueError(f"weight must be (out_features, in_features), got shape {w.shape}")
        self.act_granularity = g
        self.out_features, self.in_features = w.shape
        self.register_buffer("weight", Tensor(int8_fake_quantize(w, "per_channel"), fmt))
        if bias is None:
            self.register_buffer("bias", None)
        else:
            b = finite_float32(bias, "bias").reshape(-1)
            if b.shape != (self.out_features,):
                raise ValueError(f"bias has shape {b.shape}, expected ({self.out_features},)")
            self.register_buffer("bias", Tensor(b, fmt))

    @classmethod
    def from_linear(cls, linear: Linear, act_granularity: str = "per_tensor") -> W8A8Linear:
        """A W8A8Linear of ``linear``'s weight and bias, in its format."""
        bias = linear.bias
        return cls(linear.weight.numpy(np.float32), None if bias is None else
                   bias.numpy(np.float32), act_granularity=act_granularity,
                   fmt=linear.weight.fmt)

    def forward(self, x: Tensor) -> Tensor:
        arr = x.numpy(np.float32) if isinstance(x, Tensor) else np.asarray(x, np.float32)
        xq = Tensor(int8_fake_quantize(arr, self.act_granularity), self.weight.fmt)
        return F.linear(xq, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"act_granularity={self.act_granularity}")


def quantize_w8a8(model: Module, act_granularity: str = "per_tensor") -> Module:
    """A copy of ``model`` (not changed) with every :class:`fpsim.nn.Linear` replaced by a
    :class:`W8A8Linear` (for inference: no gradients flow through it).

    >>> from fpsim.models import GPT
    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> type(quantize_w8a8(gpt, "per_token").h[0].mlp.c_fc).__name__
    'W8A8Linear'
    """
    if not isinstance(model, Module):
        raise TypeError(f"model must be an fpsim Module, got {type(model).__name__}")
    g = _granularity(act_granularity)
    if g == "per_channel":
        raise ValueError("act_granularity must be 'per_tensor' or 'per_token'")
    out = copy.deepcopy(model)
    if type(out) is Linear:
        return W8A8Linear.from_linear(out, g)
    n = 0
    for mod in list(out.modules()):
        for name, child in list(mod.named_children()):
            if type(child) is Linear:
                mod.add_module(name, W8A8Linear.from_linear(child, g))
                n += 1
    if n == 0:
        raise ValueError("the model has no nn.Linear layer to quantize")
    return out
