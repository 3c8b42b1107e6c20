"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's
formulas)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..formats import Format
from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's SGD: with g the gradient (negated if ``maximize``),

    - ``g += weight_decay * w``
    - momentum: ``b = g`` at the first step, else ``b = momentum * b + (1 - dampening) * g``;
      ``g = g + momentum * b`` (Nesterov) or ``g = b``
    - ``w -= lr * g``

    ``master_weights`` and ``state_fmt``: see :mod:`fpsim.optim.optimizer`.

    >>> import fpsim
    >>> from fpsim.nn import Parameter
    >>> w = Parameter([1.0]); w.grad = [0.5]
    >>> SGD([w], lr=0.1).step(); w.tolist()
    [0.949999988079071]
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, *,
                 maximize: bool = False, master_weights: bool = False,
                 state_fmt: Format | str | None = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize),
                         master_weights=master_weights, state_fmt=state_fmt)

    def _update(self, w, g, state, group, dtype):
        lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
        wd = group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd != 0:
            g = g + wd * w
        if mom != 0:
            buf = self._state_get(state, "momentum_buffer", dtype)
            if buf is None:
                buf = np.array(g, copy=True)
            else:  # in place, as PyTorch's buf.mul_(momentum).add_(g, alpha=1 - dampening):
                # the buffer is the optimizer's own (state_dict and load_state_dict copy), and
                # the roundings are those of mom * buf + (1 - damp) * g
                np.multiply(buf, mom, out=buf)
                np.add(buf, g if damp == 0 else (1 - damp) * g, out=buf)  # 1 * g is g exactly
            self._state_set(state, "momentum_buffer", buf)
            g = g + mom * buf if group["nesterov"] else buf
        step = lr * g  # a fresh array: w - step lands in it (one allocation less a step)
        if isinstance(step, np.ndarray) and step.dtype == w.dtype:  # (0-d: a NumPy scalar)
            return np.subtract(w, step, out=step)
        return w - step
