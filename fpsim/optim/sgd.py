"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's
formulas)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..autograd.context import round_to, widen
from ..formats import FP32, Format
from .optimizer import Optimizer

_F32 = np.dtype(np.float32)
# a plan's last three entries (see Optimizer._plan) for an fp32 master: fp32 state, float32
# compute, the master used
_MASTER_PLAN = (FP32, np.float32, True)

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

    def step(self, closure=None):
        """One update of every parameter that has a gradient (see :meth:`Optimizer.step`).

        Parameters trained the usual mixed-precision way (an fp32 master of a narrower
        parameter, fp32 state, plain momentum: no dampening, Nesterov, weight decay or
        maximize, no update hook) past their first step take a straight loop: the same
        operations as :meth:`_update` on the master (float32, in place), without the general
        path's per-parameter dispatch. tests/test_optim_sgd_fast.py proves it equal to the
        general path.

        >>> from fpsim.nn import Parameter
        >>> p = Parameter([1.0], "fp16"); p.grad = [1.0]
        >>> opt = SGD([p], lr=0.25, momentum=0.5, master_weights=True)
        >>> opt.step(); opt.step(); p.tolist()  # 1 - 0.25 * 1 - 0.25 * (0.5 + 1)
        [0.375]
        """
        if closure is not None or self._update_hooks:
            return super().step(closure)
        states = self.state
        with np.errstate(all="ignore"):
            for group in self.param_groups:
                lr, mom = group["lr"], group["momentum"]
                plain = mom != 0 and group["dampening"] == 0 and not group["nesterov"] \
                    and group["weight_decay"] == 0 and not group["maximize"]
                for p in group["params"]:
                    grad = p._grad
                    if grad is None:
                        continue
                    st = states.get(p)
                    if plain and st is not None and self._plan_of(p)[4:] == _MASTER_PLAN:
                        buf, w = st.get("momentum_buffer"), st.get("master")
                        if buf is not None and w is not None and buf.dtype == _F32 \
                                and w.dtype == _F32 and w.ndim:  # (0-d: lr * buf is a scalar)
                            g = grad if grad.dtype == _F32 else widen(grad, _F32)
                            np.multiply(buf, mom, out=buf)  # as _update: buf = mom * buf + g
                            np.add(buf, g, out=buf)
                            step = lr * buf  # w -= lr * buf, landing in the step's array
                            w = st["master"] = np.subtract(w, step, out=step)
                            p._data = round_to(w, p.fmt)
                            continue
                    self._step_param(p, group, self._update)
        return None

    def _update(self, w, g, state, group, dtype):
        lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
        wd = group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd != 0:
            g = g + wd * w
        if mom != 0:
            buf = self._state_get(state, "momentum_buffer", dtype)
            fmt = self._step_state_fmt
            if fmt.storage_dtype == dtype and fmt.dtype is not None:  # each op rounds to it
                if buf is None:
                    buf = np.array(g, copy=True)
                else:  # in place, as PyTorch's buf.mul_(momentum).add_(g, alpha=1 - dampening):
                    # the buffer is the optimizer's own (state_dict and load_state_dict copy),
                    # and the roundings are those of mom * buf + (1 - damp) * g
                    np.multiply(buf, mom, out=buf)
                    np.add(buf, g if damp == 0 else (1 - damp) * g, out=buf)  # 1 * g is g
                self._state_set(state, "momentum_buffer", buf)
            else:
                # a state format narrower than the compute dtype (e.g. fp16): each op of the
                # buffer rounds to it, as PyTorch's fp16 buffer does, and the step uses the
                # stored (rounded) buffer (tests/test_optim_adam_fp16.py)
                if buf is not None:
                    buf = widen(round_to(buf * mom, fmt), dtype)
                    buf = buf + (g if damp == 0 else (1 - damp) * g)
                buf = round_to(np.asarray(g if buf is None else buf), fmt)
                state["momentum_buffer"] = buf
                buf = widen(buf, dtype)
            g = g + mom * buf if group["nesterov"] else buf
        step = lr * g  # a fresh array: w - step lands in it (one allocation less a step)
        if isinstance(step, np.ndarray) and step.dtype == w.dtype:  # (0-d: a NumPy scalar)
            return np.subtract(w, step, out=step)
        return w - step
