"""The :class:`Optimizer` base: parameter groups, state, state dicts and master weights.

Precision of a step (per parameter):

- The update is computed in float32 arithmetic (NumPy float32 ops, each rounding to fp32, in
  PyTorch's order of operations) from the gradient upcast exactly to float32; float64 when the
  parameter, its gradient or ``state_fmt`` is wider than fp32. PyTorch's CPU kernels fuse some
  of these ops (measured on PyTorch 2.13: ``add_`` with ``alpha`` is one fused multiply-add,
  Adam's first moment ``lerp_`` is fma(w, end - start, start)), so fp32 results can differ from
  PyTorch's in the last bit; in fp64 they agree to 1e-13 (tests/test_torch_reference.py checks
  SGD, Adam and AdamW under every option).
- Optimizer state (momentum, Adam moments) is stored in ``state_fmt``; by default fp32, or the
  parameter's own format where that is wider (fp64 parameters keep fp64 state, as PyTorch).
- fp32 (and wider) parameters are updated in place of their own values.
- ``master_weights=True``: a parameter narrower than fp32 gets an fp32 master copy (created
  from its values at its first step); the update is applied to the master and the parameter is
  refreshed by rounding the master to its format after every step (with the mode of
  :func:`fpsim.autograd.rounding_context`).
- Without master weights such a parameter is updated in its own format: the new value is
  computed in float32 from the parameter's value and rounded once to its format, so an update
  smaller than half its ulp is lost (as in pure fp16 training).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable

import numpy as np

from ..autograd.context import contains, round_to, widen
from ..autograd.tensor import Tensor, as_format, enable_grad
from ..formats import FP32, Format

__all__ = ["Optimizer", "UpdateHookHandle"]

_F32 = np.dtype(np.float32)


class Optimizer:
    """Base class: holds ``param_groups`` (a list of dicts with ``"params"`` and the
    hyper-parameters, as PyTorch, so a GradScaler or scheduler can iterate and edit them) and
    ``state`` (per parameter). Subclasses implement :meth:`_update`.
    """

    def __init__(self, params: Iterable, defaults: dict, *, master_weights: bool = False,
                 state_fmt: Format | str | None = None) -> None:
        self.defaults = dict(defaults)
        self.master_weights = bool(master_weights)
        self.state_fmt = None if state_fmt is None else as_format(state_fmt)
        self._step_state_fmt = FP32  # the state format of the parameter being updated
        self._plans: dict[Tensor, tuple] = {}  # per parameter: see _plan
        self.state: dict[Tensor, dict] = {}
        self.param_groups: list[dict] = []
        self._update_hooks: list[Callable[..., np.ndarray]] = []
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters (a dict with ``"params"``; missing hyper-parameters take
        the defaults).

        >>> from fpsim.nn import Parameter
        >>> from fpsim.optim import SGD
        >>> opt = SGD([Parameter([1.0])], lr=0.1)
        >>> opt.add_param_group({"params": [Parameter([2.0])], "lr": 0.01})
        >>> [g["lr"] for g in opt.param_groups]
        [0.1, 0.01]
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        ps = group.get("params")
        ps = [ps] if isinstance(ps, Tensor) else list(ps or [])
        for p in ps:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in ps) or len({id(p) for p in ps}) != len(ps):
            raise ValueError("some parameters appear in more than one parameter group")
        group["params"] = ps
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient to None (or to zeros).

        >>> from fpsim.nn import Parameter
        >>> from fpsim.optim import SGD
        >>> p = Parameter([1.0]); p.grad = [1.0]; SGD([p]).zero_grad(); p.grad is None
        True
        """
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p._grad = None  # what the grad setter does with None, without the call
                elif p.grad is not None:
                    p.grad = np.zeros_like(p.grad)

    # ------------------------------------------------------------------------ step
    def state_format(self, p: Tensor) -> Format:
        """The format ``p``'s optimizer state is stored in: ``state_fmt`` if given, else fp32,
        or ``p``'s format where that is wider.

        >>> from fpsim.nn import Parameter
        >>> from fpsim.optim import SGD
        >>> opt = SGD([Parameter([1.0], "fp64")], lr=0.1)
        >>> opt.state_format(opt.param_groups[0]["params"][0]).name
        'fp64'
        """
        if self.state_fmt is not None:
            return self.state_fmt
        return FP32 if contains(FP32, p.fmt) else p.fmt

    @staticmethod
    def _dtype(p: Tensor, state_fmt: Format):
        narrow = all(contains(FP32, f) for f in (p.fmt, p.grad_fmt, state_fmt))
        return np.float32 if narrow else np.float64

    def _state_get(self, st: dict, key: str, dtype):
        v = st.get(key)
        return v if v is None or v.dtype == dtype else widen(v, dtype)

    def _state_set(self, st: dict, key: str, value: np.ndarray) -> None:
        fmt = self._step_state_fmt
        if isinstance(value, np.generic):  # NumPy ops on 0-d arrays give scalars
            value = np.asarray(value)
        # round_to's own first test, without the call (fp32 state of a float32 update)
        if value.dtype != fmt.storage_dtype or fmt.dtype is None:
            value = round_to(value, fmt)
        st[key] = value

    def step(self, closure: Callable | None = None):
        """One update of every parameter that has a gradient; returns ``closure()`` when
        given (evaluated with gradients enabled).

        >>> from fpsim.nn import Parameter
        >>> from fpsim.optim import SGD
        >>> p = Parameter([1.0]); p.grad = [1.0]; SGD([p], lr=0.5).step(); p.tolist()
        [0.5]
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        update = self._hooked_update() if self._update_hooks else self._update
        with np.errstate(all="ignore"):
            for group in self.param_groups:
                for p in group["params"]:
                    if p._grad is not None:
                        self._step_param(p, group, update)
        return loss

    def _plan_of(self, p: Tensor) -> tuple:
        """``p``'s plan (see :meth:`_plan`), remade when a key changed."""
        plan = self._plans.get(p)
        if plan is None or plan[0] is not p.fmt or plan[1] is not p._grad_fmt \
                or plan[2] is not self.state_fmt or plan[3] is not self.master_weights:
            plan = self._plans[p] = self._plan(p)
        return plan

    def _step_param(self, p: Tensor, group: dict, update: Callable[..., np.ndarray]) -> None:
        """One update of ``p`` (which has a gradient) by ``update`` (the rule, or its hooks)."""
        grad, fmt = p._grad, p.fmt
        self._step_state_fmt, dtype, use_master = self._plan_of(p)[4:]
        st = self.state.get(p)
        if st is None:
            st = self.state[p] = {}
        if use_master:
            w = st.get("master")
            if w is None:
                w = st["master"] = widen(p._data, np.float32).copy()
        else:
            w = widen(p._data, dtype)
        w_new = update(w, grad if grad.dtype == dtype else widen(grad, dtype), st, group, dtype)
        if isinstance(w_new, np.generic):  # NumPy ops on 0-d arrays give scalars
            w_new = np.asarray(w_new)
        if use_master:
            st["master"] = w_new if w_new.dtype == _F32 else w_new.astype(_F32)
        p._data = round_to(w_new, fmt)

    def _plan(self, p: Tensor) -> tuple:
        """What a step of ``p`` needs that depends only on the formats of ``p``, its gradient and
        the state, and on ``master_weights``: (the four keys the plan was made for, the state
        format, the compute dtype, whether ``p`` steps through an fp32 master). Optimizer.step
        keeps one per parameter and remakes it when a key changes (e.g. ``Module.to``)."""
        state_fmt = self.state_format(p)
        use_master = self.master_weights and p.fmt != FP32 and contains(FP32, p.fmt)
        return (p.fmt, p._grad_fmt, self.state_fmt, self.master_weights, state_fmt,
                self._dtype(p, state_fmt), use_master)

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict, group: dict,
                dtype) -> np.ndarray:
        """The new value of a parameter (``w``, compute dtype) from its gradient ``g``."""
        raise NotImplementedError

    def register_update_hook(self, hook: Callable[..., np.ndarray]) -> UpdateHookHandle:
        """Wrap every parameter update of :meth:`step`: ``hook(update, w, g, state, group,
        dtype)`` is called instead of ``update(w, g, state, group, dtype)`` (the optimizer's
        rule, or the wrapper of the hook registered before) and returns the new value of ``w``
        (compute dtype; ``update`` may change ``w`` in place, so copy it first to keep the old
        value). Returns a handle whose ``remove()`` unregisters the hook. fpsim's trainer
        records weight updates this way.

        >>> from fpsim.nn import Parameter
        >>> from fpsim.optim import SGD
        >>> p = Parameter([1.0]); p.grad = [1.0]; opt = SGD([p], lr=0.5); seen = []
        >>> def hook(update, w, g, *rest):
        ...     seen.append(float(g[0]))
        ...     return update(w, g, *rest)
        >>> handle = opt.register_update_hook(hook)
        >>> opt.step(); handle.remove(); opt.step(); p.tolist(), seen
        ([0.0], [1.0])
        """
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        self._update_hooks.append(hook)
        return UpdateHookHandle(self._update_hooks, hook)

    def _hooked_update(self) -> Callable[..., np.ndarray]:
        update = self._update
        for hook in self._update_hooks:
            update = functools.partial(hook, update)
        return update

    # ------------------------------------------------------------------ state dict
    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}`` with
        parameters numbered in group order, as PyTorch; arrays are copies.

        >>> from fpsim.nn import Parameter
        >>> from fpsim.optim import SGD
        >>> SGD([Parameter([1.0])], lr=0.1).state_dict()["param_groups"][0]["params"]
        [0]
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            g = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            g["params"] = ids
            groups.append(g)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state:
                    state[index[id(p)]] = copy.deepcopy(self.state[p])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyper-parameters and state saved by :meth:`state_dict` (the same parameter
        structure is required).

        >>> from fpsim.nn import Parameter
        >>> from fpsim.optim import SGD
        >>> opt = SGD([Parameter([1.0])], lr=0.1)
        >>> opt.load_state_dict(SGD([Parameter([1.0])], lr=0.7).state_dict())
        >>> opt.param_groups[0]["lr"]
        0.7
        """
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(groups)} parameter groups, the "
                             f"optimizer has {len(self.param_groups)}")
        for saved, own in zip(groups, self.param_groups, strict=True):
            if len(saved["params"]) != len(own["params"]):
                raise ValueError(f"loaded state dict has a group of {len(saved['params'])} "
                                 f"parameters where the optimizer has {len(own['params'])}")
        params = {i: p for saved, own in zip(groups, self.param_groups, strict=True)
                  for i, p in zip(saved["params"], own["params"], strict=True)}
        self.state = {params[int(i)]: copy.deepcopy(s)
                      for i, s in state_dict["state"].items()}
        for saved, own in zip(groups, self.param_groups, strict=True):
            for k, v in saved.items():
                if k != "params":
                    own[k] = v

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        lines.append(")")
        return "\n".join(lines)


class UpdateHookHandle:
    """What :meth:`Optimizer.register_update_hook` returns: ``remove()`` unregisters the hook
    (once; later calls do nothing)."""

    def __init__(self, hooks: list, hook: Callable[..., np.ndarray]) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        for i, h in enumerate(self._hooks):
            if h is self._hook:
                del self._hooks[i]
                return
