"""Adam and AdamW (PyTorch's formulas and defaults)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..autograd.context import round_to, widen
from ..formats import Format
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """PyTorch's Adam: with g the gradient (negated if ``maximize``) and t the step count,

    - Adam: ``g += weight_decay * w`` (L2); AdamW: ``w *= 1 - lr * weight_decay`` (decoupled)
    - ``m = m + (1 - beta1) (g - m)``;  ``v = beta2 v + (1 - beta2) g*g``
    - ``denom = sqrt(v) / sqrt(1 - beta2**t) + eps`` (``amsgrad``: v -> the running max of v)
    - ``w -= lr / (1 - beta1**t) * m / denom``

    Defaults lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 (AdamW: 1e-2).
    ``master_weights`` and ``state_fmt``: see :mod:`fpsim.optim.optimizer`.

    With ``state_fmt`` narrower than the compute dtype (e.g. ``"fp16"``), the moments and the
    denominator are tensors of that format, as in PyTorch where they have the parameter's dtype:
    each of their ops (``m``'s update, ``v * beta2``, ``+ (1 - beta2) g*g``, ``sqrt``,
    ``/ sqrt(1 - beta2**t)``, ``+ eps``) rounds to ``state_fmt``, and the step is computed from
    the stored (rounded) moments. With fp16 state, a ``g*g`` below fp16's smallest subnormal
    leaves ``v`` at 0, ``eps = 1e-8`` rounds away in ``+ eps``, and the step is infinite, as
    PyTorch's pure-fp16 Adam gives (tests/test_optim_adam_fp16.py, recorded with PyTorch
    2.13).

    >>> from fpsim.nn import Parameter
    >>> w = Parameter([1.0]); w.grad = [0.5]
    >>> Adam([w], lr=0.1).step(); round(w.item(), 6)  # the first step moves by ~lr
    0.9
    """

    _decoupled = False

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 master_weights: bool = False, state_fmt: Format | str | None = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize),
                         master_weights=master_weights, state_fmt=state_fmt)

    def _update(self, w, g, state, group, dtype):
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        wd = group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd != 0:
            if self._decoupled:
                w = w * (1 - lr * wd)
            else:
                g = g + wd * w
        step = state.get("step", 0) + 1
        state["step"] = step
        m = self._state_get(state, "exp_avg", dtype)
        v = self._state_get(state, "exp_avg_sq", dtype)
        if m is None:
            m = np.zeros_like(w)
            v = np.zeros_like(w)
        fmt = self._step_state_fmt
        if fmt.storage_dtype == dtype and fmt.dtype is not None:
            def stored(key, x):  # the compute dtype is the state's: each op already rounded
                if key:
                    self._state_set(state, key, x)
                return x
        else:
            def stored(key, x):
                """``x`` rounded to the state format, as a state tensor's op rounds to its
                dtype in PyTorch; the step goes on from the rounded (stored) values."""
                r = round_to(np.asarray(x), fmt)
                if key:
                    state[key] = r
                return widen(r, dtype)
        m = stored("exp_avg", m + (g - m) * (1 - beta1))
        v = stored("exp_avg_sq", stored(None, v * beta2) + (1 - beta2) * (g * g))
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bc2_sqrt = math.sqrt(bias_correction2)
        if group["amsgrad"]:
            vmax = self._state_get(state, "max_exp_avg_sq", dtype)
            v = stored("max_exp_avg_sq", v if vmax is None else np.maximum(vmax, v))
        # denom = (sqrt(v) / sqrt(bc2)).add_(eps): a tensor of the state's format in PyTorch,
        # so with fp16 state an eps below fp16's smallest subnormal adds nothing
        denom = stored(None, stored(None, stored(None, np.sqrt(v)) / bc2_sqrt) + eps)
        return w - step_size * (m / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay (default 1e-2): ``w *= 1 - lr * weight_decay`` before
    the Adam step (PyTorch's AdamW).

    >>> from fpsim.nn import Parameter
    >>> w = Parameter([1.0]); w.grad = [0.0]
    >>> AdamW([w], lr=0.1).step(); round(w.item(), 6)  # only the decay: 1 - 0.1 * 0.01
    0.999
    """

    _decoupled = True

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 master_weights: bool = False, state_fmt: Format | str | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         master_weights=master_weights, state_fmt=state_fmt)
