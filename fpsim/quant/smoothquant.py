"""SmoothQuant (Xiao et al. 2023): migrate the difficulty of quantizing activations into the
weights, so that both quantize well to int8 (W8A8, :mod:`fpsim.quant.w8a8`).

A language model's activations carry a few outlier *channels* (input features of a linear
layer that are large on every token), while its weights are smooth. Per-tensor or per-token
int8 of the activations then spends its 255 levels on the outliers and rounds the rest
coarsely. For each input channel ``j`` of a linear layer ``Y = X W^T``, SmoothQuant divides
the activation by ``s_j`` and multiplies the weight's column by it, which leaves the product
unchanged::

    (X / s) (W * s)^T = X W^T,    s_j = max|X_j|**alpha / max|W_j|**(1 - alpha)

with ``max|X_j|`` the channel's largest activation over calibration samples
(:func:`calibrate_activation_max`), ``max|W_j|`` the column's largest weight, and ``alpha``
(0.5 by default) how much of the difficulty moves to the weights. As the reference code
(``smoothquant/smooth.py``, ``smooth_ln_fcs``), the weight maxima are clamped to at least
1e-5, and so is ``s``. Where the linear layer follows a LayerNorm, ``1 / s`` is folded into
the LayerNorm's weight and bias, so the smoothed model costs nothing at run time:
:func:`smooth_gpt` does that for the GPT's ``ln_1 -> attn.c_attn`` and ``ln_2 -> mlp.c_fc``
(the two layers the paper smooths in OPT / BLOOM blocks; the c_proj layers, which follow no
LayerNorm, are left as they are).
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Iterable

import numpy as np

from ..autograd.tensor import Tensor, no_grad
from ..models import GPT
from ..nn import Linear, Module

__all__ = ["smoothing_factors", "calibrate_activation_max", "smooth_gpt"]

_CLAMP = 1e-5  # smoothquant/smooth.py: weight maxima and scales clamped to at least 1e-5


def _alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number in [0, 1], got {type(alpha).__name__} "
                        f"{alpha!r}")
    a = float(alpha)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (the share of the difficulty moved to the "
                         f"weights), got {alpha!r}")
    return a


def _real(x, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
        raise TypeError(f"{name} must be a real array, got dtype {arr.dtype}")
    if arr.ndim != ndim or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty {ndim}-d array, got shape {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity")
    return arr


def smoothing_factors(act_max, weight, alpha: float = 0.5) -> np.ndarray:
    """SmoothQuant's per-input-channel factors ``s = max|X_j|**alpha / max|W_j|**(1-alpha)``
    (float64), from the activations' channel maxima ``act_max`` (in_features,) and the weight
    (out_features, in_features) of the layer they feed.

    >>> smoothing_factors([16.0, 1.0], [[1.0, 4.0], [-0.25, 1.0]], alpha=0.5)
    array([4. , 0.5])
    """
    a = _alpha(alpha)
    am = _real(act_max, "act_max", 1)
    if (am < 0).any():
        raise ValueError("act_max must be >= 0 (the largest |x| of each channel)")
    w = _real(weight, "weight", 2)
    if w.shape[1] != am.size:
        raise ValueError(f"act_max has {am.size} channels but the weight has {w.shape[1]} "
                         f"input features")
    wmax = np.maximum(np.abs(w).max(axis=0), _CLAMP)
    return np.maximum(am**a / wmax ** (1.0 - a), _CLAMP)


def calibrate_activation_max(model: Module, batches: Iterable) -> dict[str, np.ndarray]:
    """The largest |input| of every input channel of every :class:`fpsim.nn.Linear` of
    ``model`` (by layer name, float64 (in_features,)), over the forward passes of the token
    batches ``batches`` (each an int array (B, T)). ``model`` is not changed: a copy runs.

    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> amax = calibrate_activation_max(gpt, [np.array([[1, 2, 3]])])
    >>> amax["h.0.attn.c_attn"].shape, bool((amax["h.0.mlp.c_proj"] > 0).all())
    ((16,), True)
    """
    if not isinstance(model, Module):
        raise TypeError(f"model must be an fpsim Module, got {type(model).__name__}")
    if isinstance(batches, (str, bytes, np.ndarray)) or not isinstance(batches, Iterable):
        raise TypeError(f"batches must be an iterable of token arrays (B, T), got "
                        f"{type(batches).__name__}")
    net = copy.deepcopy(model)
    seen: dict[str, np.ndarray] = {}

    def wrap(name: str, mod: Linear) -> None:
        old = mod.forward

        def forward(x, *args, **kwargs):
            a = np.abs(x.numpy(np.float64) if isinstance(x, Tensor) else np.asarray(x, float))
            m = a.reshape(-1, a.shape[-1]).max(axis=0)
            seen[name] = m if name not in seen else np.maximum(seen[name], m)
            return old(x, *args, **kwargs)

        object.__setattr__(mod, "forward", forward)

    for name, mod in net.named_modules():
        if type(mod) is Linear:
            wrap(name, mod)
    n = 0
    with no_grad():
        for batch in batches:
            net(batch)
            n += 1
    if n == 0:
        raise ValueError("batches is empty: calibration needs at least one batch")
    return seen


def smooth_gpt(model: GPT, act_max: dict, alpha: float = 0.5
               ) -> tuple[GPT, dict[str, np.ndarray]]:
    """A smoothed copy of the GPT ``model`` (not changed) and the factors ``s`` by layer: in
    every block, ``ln_1``'s weight and bias divided by the ``s`` of ``attn.c_attn`` and its
    weight's columns multiplied by it; the same for ``ln_2`` and ``mlp.c_fc``. ``act_max``
    is :func:`calibrate_activation_max`'s result. In exact arithmetic the copy computes the
    same function.

    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> amax = calibrate_activation_max(gpt, [np.array([[1, 2, 3]])])
    >>> smoothed, s = smooth_gpt(gpt, amax, alpha=0.5)
    >>> sorted(s), s["h.0.mlp.c_fc"].shape
    (['h.0.attn.c_attn', 'h.0.mlp.c_fc'], (16,))
    """
    if not isinstance(model, GPT):
        raise TypeError(f"smooth_gpt takes an fpsim.models.GPT, got {type(model).__name__}")
    if not isinstance(act_max, dict):
        raise TypeError(f"act_max must be calibrate_activation_max's dict of channel maxima, "
                        f"got {type(act_max).__name__}")
    a = _alpha(alpha)
    out = copy.deepcopy(model)
    factors: dict[str, np.ndarray] = {}
    for i, block in enumerate(out.h):
        for ln, lin, name in ((block.ln_1, block.attn.c_attn, f"h.{i}.attn.c_attn"),
                              (block.ln_2, block.mlp.c_fc, f"h.{i}.mlp.c_fc")):
            if name not in act_max:
                raise ValueError(f"act_max has no channel maxima for layer {name!r}")
            w = lin.weight.numpy(np.float64)
            s = smoothing_factors(act_max[name], w, a)
            ln.weight.data = ln.weight.numpy(np.float64) / s
            ln.bias.data = ln.bias.numpy(np.float64) / s
            lin.weight.data = w * s
            factors[name] = s
    return out, factors
