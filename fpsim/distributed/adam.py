"""Adam on flat float32 arrays: the step ZeRO runs on each rank's partition.

PyTorch's formulas (``torch.optim.Adam``, single-tensor path, no amsgrad), in float32
arithmetic in PyTorch's order of operations, exactly as :class:`fpsim.optim.Adam` computes
them for a parameter with an fp32 master copy (tests/test_zero_sim.py checks the two bitwise):

- ``g += weight_decay * w`` (L2; AdamW's decoupled form: ``w *= 1 - lr * weight_decay``)
- ``m = m + (g - m) * (1 - beta1)``;  ``v = v * beta2 + (1 - beta2) * g * g``
- ``w -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)``

Python floats (lr, betas, the bias corrections) enter each float32 operation as float32, as
NumPy's scalar promotion and PyTorch's do.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..checks import as_int

__all__ = ["adam_step_flat"]


def adam_step_flat(w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, step: int,
                   lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                   eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False
                   ) -> None:
    """One Adam step IN PLACE on float32 arrays ``w`` (master weights), ``m``, ``v``, with the
    float32 gradient ``g``; ``step`` is the step number t (1 for the first step).

    >>> w = np.ones(2, np.float32); m = np.zeros(2, np.float32); v = np.zeros(2, np.float32)
    >>> adam_step_flat(w, np.array([0.5, -0.5], np.float32), m, v, 1, lr=0.1)
    >>> [round(float(a), 6) for a in w]  # the first step moves each weight by ~lr
    [0.9, 1.1]
    """
    for name, a in (("w", w), ("g", g), ("m", m), ("v", v)):
        if not isinstance(a, np.ndarray) or a.dtype != np.float32:
            raise TypeError(f"adam_step_flat: {name} must be a float32 ndarray, got "
                            f"{getattr(a, 'dtype', type(a).__name__)}")
        if a.shape != w.shape:
            raise ValueError(f"adam_step_flat: {name} has shape {a.shape}, w has {w.shape}")
    step = as_int("adam_step_flat: step", step, 1)
    beta1, beta2 = betas
    for name, value in (("lr", lr), ("betas[0]", beta1), ("betas[1]", beta2), ("eps", eps),
                        ("weight_decay", weight_decay)):  # (v is the second-moment array)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):  # a complex: cut
            raise TypeError(f"adam_step_flat: {name} must be a real number, got "
                            f"{type(value).__name__} {value!r}")
    with np.errstate(all="ignore"):
        wc = w
        if weight_decay != 0:
            if decoupled:
                wc = w * (1 - lr * weight_decay)
            else:
                g = g + weight_decay * w
        m_new = m + (g - m) * (1 - beta1)
        v_new = v * beta2 + (1 - beta2) * (g * g)
        step_size = lr / (1 - beta1 ** step)
        bc2_sqrt = math.sqrt(1 - beta2 ** step)
        denom = np.sqrt(v_new) / bc2_sqrt + eps
        w_new = wc - step_size * (m_new / denom)
    m[...] = m_new
    v[...] = v_new
    w[...] = w_new
