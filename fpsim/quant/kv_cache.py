"""KV-cache quantization: the keys and values a decoder keeps for every past token, stored in
int8 or fp8 instead of the model's format, and what that does to attention and the loss.

:func:`kv_fake_quantize` quantizes a K or V array (..., T, d) of ``n_heads`` heads laid side by
side (``d = n_heads * head_size``, the GPT's layout) and dequantizes it:

- ``fmt="int8"``: symmetric absmax int8 (:func:`fpsim.quant.int8_fake_quantize`'s scheme,
  ``[-127, 127]``), one ``amax`` per token (``"per_token"``, over all heads), per token and
  head (``"per_head"``, over ``head_size`` values; KIVI / vLLM's per-head scales) or per
  tensor;
- ``fmt="e4m3"`` / ``"e5m2"`` (fp8): Transformer Engine's scaling, :func:`fpsim.quant.fp8_scale`
  (``fmt.max / amax``), the saturating cast :func:`fpsim.quant.fp8_quantize` and
  :func:`fpsim.quant.fp8_dequantize`; per tensor by default (vLLM's fp8 KV cache keeps one
  scale per tensor), per token or per head also.

:func:`quantize_kv_cache` gives a copy of a GPT whose attention layers see their K and V
quantized (c_attn's output, of which K and V are the second and third thirds, passes through
:func:`kv_fake_quantize`; Q stays): every later token attends to the quantized keys and
values, as with a quantized cache. :func:`attention_error` measures, layer by layer, the
relative error of the attention output (before ``c_proj``) when only K and V of that layer
are quantized, all inputs being the unquantized model's.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from ..autograd.tensor import Tensor, no_grad
from ..checks import as_choice
from ..models import GPT
from ..nn import Linear, Module
from .fake_quant import tensorrt_fake_quantize
from .fp8_scaling import as_fp8_format, fp8_dequantize, fp8_quantize, fp8_scale
from .w8a8 import finite_float32

__all__ = ["KV_GRANULARITIES", "kv_fake_quantize", "quantize_kv_cache", "attention_error"]

KV_GRANULARITIES = ("per_tensor", "per_token", "per_head")


def _fmt(fmt):
    if isinstance(fmt, str) and fmt == "int8":
        return "int8"
    try:
        return as_fp8_format(fmt)
    except (TypeError, ValueError, KeyError):
        raise ValueError(f"unknown KV-cache format {fmt!r}; valid: 'int8', or an 8-bit float "
                         f"format ('e4m3', 'e5m2')") from None


def _heads(n_heads, d: int) -> int:
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)):
        raise TypeError(f"n_heads must be a positive int, got {type(n_heads).__name__} "
                        f"{n_heads!r}")
    if n_heads < 1 or d % n_heads:
        raise ValueError(f"n_heads must be a positive divisor of the last axis ({d}), got "
                         f"{n_heads}")
    return int(n_heads)


def kv_fake_quantize(x, fmt: str = "int8", granularity: str = "per_token",
                     n_heads: int = 1) -> np.ndarray:
    """``x`` (..., T, d) quantized to ``fmt`` with scales per ``granularity`` and dequantized
    (float32; see the module docstring).

    >>> k = np.array([[1.0, 0.1, 0.02, -0.01]], np.float32)  # one token, two heads of 2
    >>> kv_fake_quantize(k, "int8", "per_token").astype(float).round(5).tolist()
    [[1.0, 0.10236, 0.02362, -0.00787]]
    >>> kv_fake_quantize(k, "int8", "per_head", n_heads=2).astype(float).round(5).tolist()
    [[1.0, 0.10236, 0.02, -0.01008]]
    >>> kv_fake_quantize(k, "e4m3", "per_tensor").astype(float).round(5).tolist()
    [[1.0, 0.09821, 0.02009, -0.01004]]
    """
    f = _fmt(fmt)
    g = as_choice("granularity", granularity, KV_GRANULARITIES)
    arr = finite_float32(x, "x")
    d = arr.shape[-1]
    nh = _heads(n_heads, d)
    if g == "per_head":
        work = arr.reshape(arr.shape[:-1] + (nh, d // nh))
        amax = np.abs(work).max(axis=-1, keepdims=True)
    else:
        work = arr
        amax = np.abs(arr).max(axis=None if g == "per_tensor" else -1,
                               keepdims=g != "per_tensor")
    if f == "int8":
        out = tensorrt_fake_quantize(work, amax, 8, narrow_range=True)
    else:
        # an all-zero row keeps scale 1 (fp8_scale's previous scale): zeros stay zeros
        scale = fp8_scale(amax, f)
        out = fp8_dequantize(fp8_quantize(work, scale, f), scale)
    return out.reshape(arr.shape).astype(np.float32)


class _KVQuantizedQKV(Module):
    """c_attn with its K and V thirds passed through kv_fake_quantize (inference only)."""

    def __init__(self, inner: Linear, n_heads: int, fmt, granularity: str) -> None:
        super().__init__()
        self.inner = inner
        self.n_heads, self.fmt, self.granularity = n_heads, fmt, granularity
        self.in_features, self.out_features = inner.in_features, inner.out_features

    def forward(self, x: Tensor) -> Tensor:
        y = self.inner(x)
        arr = y.numpy(np.float32).copy()
        d = arr.shape[-1] // 3
        for lo in (d, 2 * d):
            arr[..., lo:lo + d] = kv_fake_quantize(arr[..., lo:lo + d], self.fmt,
                                                   self.granularity, self.n_heads)
        return Tensor(arr, y.fmt)


def _check_gpt(model) -> None:
    if not isinstance(model, GPT):
        raise TypeError(f"takes an fpsim.models.GPT, got {type(model).__name__}")


def quantize_kv_cache(model: GPT, fmt: str = "int8", granularity: str = "per_token") -> GPT:
    """A copy of the GPT ``model`` (not changed) whose attention keys and values are
    quantized to ``fmt`` per ``granularity`` (for inference: no gradient flows through).

    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> q = quantize_kv_cache(gpt, "e4m3", "per_tensor")
    >>> q(np.array([[1, 2, 3]])).shape
    (1, 3, 11)
    """
    _check_gpt(model)
    f = _fmt(fmt)
    g = as_choice("granularity", granularity, KV_GRANULARITIES)
    out = copy.deepcopy(model)
    for block in out.h:
        block.attn.add_module("c_attn", _KVQuantizedQKV(block.attn.c_attn, out.n_heads, f, g))
    return out


def _attention(qkv: np.ndarray, n_heads: int) -> np.ndarray:
    """nanoGPT's causal attention output (B, T, d) from c_attn's output (B, T, 3d), float64."""
    b, t, d3 = qkv.shape
    d = d3 // 3
    hs = d // n_heads
    q, k, v = qkv.reshape(b, t, 3, n_heads, hs).transpose(2, 0, 3, 1, 4)
    att = q @ k.swapaxes(-1, -2) / math.sqrt(hs)
    att = np.where(np.triu(np.ones((t, t), bool), 1), -np.inf, att)
    att = np.exp(att - att.max(axis=-1, keepdims=True))
    att /= att.sum(axis=-1, keepdims=True)
    return (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)


def attention_error(model: GPT, idx, fmt: str = "int8", granularity: str = "per_token"
                    ) -> dict[str, float]:
    """By layer (``"h.0"``, ...), the relative error ``||A_q - A|| / ||A||`` (Frobenius, in
    float64) of the attention output ``A`` when that layer's K and V are quantized, for the
    tokens ``idx`` (B, T): every layer's q, k, v are the model's own (one forward pass).

    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> err = attention_error(gpt, np.array([[1, 2, 3, 4]]), "int8", "per_token")
    >>> list(err), 0 < err["h.0"] < 0.05
    (['h.0'], True)
    """
    _check_gpt(model)
    f = _fmt(fmt)
    g = as_choice("granularity", granularity, KV_GRANULARITIES)
    net = copy.deepcopy(model)
    seen: dict[str, np.ndarray] = {}
    for i, block in enumerate(net.h):
        lin = block.attn.c_attn
        old = lin.forward

        def forward(x, _old=old, _name=f"h.{i}"):
            y = _old(x)
            seen[_name] = y.numpy(np.float64)
            return y

        object.__setattr__(lin, "forward", forward)
    with no_grad():
        net(idx)
    out = {}
    for name, qkv in seen.items():
        d = qkv.shape[-1] // 3
        qq = qkv.copy()
        for lo in (d, 2 * d):
            qq[..., lo:lo + d] = kv_fake_quantize(qkv[..., lo:lo + d], f, g, net.n_heads)
        ref = _attention(qkv, net.n_heads)
        err = _attention(qq, net.n_heads) - ref
        norm = np.linalg.norm(ref)
        out[name] = float(np.linalg.norm(err) / norm) if norm > 0 else 0.0
    return out
