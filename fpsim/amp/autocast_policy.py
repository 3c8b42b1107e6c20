"""Automatic mixed precision: ``autocast``, PyTorch's per-op cast policy on fpsim's engine.

Inside ``with autocast("fp16"):`` every autocast-aware op of :mod:`fpsim.functional` casts its
tensor inputs before it runs, by the policy of its name in :data:`AUTOCAST_POLICY`:

- ``"lower"`` (matmul, linear, conv2d): inputs go to the autocast format (fp16, bf16 or any
  :class:`~fpsim.Format`), so the product runs on low-precision operands (tensor-core style,
  accumulated by the :func:`fpsim.autograd.matmul_accumulation` model) and returns that format.
- ``"fp32"`` (exp, log, pow, softmax, log_softmax, sum, mean, layer_norm, batch_norm and the
  losses): inputs go to fp32, so range- or precision-hungry ops compute and return fp32.
- ``"promote"`` (add, sub, mul, div): inputs go to the widest of their formats (what fpsim's
  ops do anyway; listed so that an override can change it).

Ops not in the table (relu, tanh, sigmoid, gelu, sqrt, max, dropout, reshaping, ...) run in
their input's format, as under PyTorch's autocast. As in PyTorch, fp64 tensors are never cast
and non-Tensor arguments (numbers, integer targets) pass unchanged. The lists follow
``aten/src/ATen/autocast_mode.cpp`` (CUDA lists; PyTorch uses the same lists for bfloat16);
``mean`` and ``batch_norm`` are fpsim's additions to the fp32 list (PyTorch leaves them off
and cuDNN computes batch norm in fp32 internally). :func:`autocast_policy_table` prints it.

Casts of fp32 weights (leaf tensors requiring grad) to the autocast format are cached for the
region, so a weight used twice is cast once (the same Tensor object) and both uses send their
gradients through that one cast; the cache is dropped when the outermost region exits (as
``torch.clear_autocast_cache``). The backward pass runs in each forward op's formats, which is
the engine's rule anyway. Keep the optimizer step outside the region (cached casts are not
refreshed when weights change).

Layering: the state lives in the autograd layer (:func:`fpsim.autograd.context.
set_autocast_hook`, a context variable holding a cast-policy callable); this module only
installs a policy there.

>>> import fpsim
>>> from fpsim.autograd import Tensor
>>> from fpsim.amp import autocast
>>> w = Tensor([[1.0, 2.0]], requires_grad=True)            # an fp32 weight
>>> x = Tensor([[0.5], [0.25]])
>>> with autocast("fp16"):
...     y = w @ x                                            # matmul runs on fp16 inputs
...     p = y.softmax(dim=0)                                 # softmax computes in fp32
>>> y.fmt.name, p.fmt.name
('fp16', 'fp32')
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

from .. import state as _state
from ..autograd import context as _ctx
from ..autograd.functional import cast_to
from ..autograd.tensor import Tensor, as_format, is_grad_enabled
from ..formats import FP16, FP32, FP64, Format

__all__ = [
    "AUTOCAST_POLICY",
    "POLICIES",
    "autocast",
    "autocast_policy_table",
    "cache_size",
    "get_autocast_dtype",
    "get_autocast_policy",
    "is_autocast_enabled",
    "reset_autocast_policy",
    "set_autocast_policy",
]

POLICIES: dict[str, str] = {
    "lower": "inputs cast to the autocast format (fp16 / bf16 / ...)",
    "fp32": "inputs cast to fp32; computes and returns fp32",
    "promote": "inputs cast to the widest format among them",
}

# op name -> policy: the one table autocast reads (the ops of fpsim.functional that consult it)
AUTOCAST_POLICY: dict[str, str] = {
    "matmul": "lower",
    "linear": "lower",
    "conv2d": "lower",
    "exp": "fp32",
    "log": "fp32",
    "pow": "fp32",
    "softmax": "fp32",
    "log_softmax": "fp32",
    "sum": "fp32",
    "mean": "fp32",
    "layer_norm": "fp32",
    "batch_norm": "fp32",
    "nll_loss": "fp32",
    "cross_entropy": "fp32",
    "mse_loss": "fp32",
    "add": "promote",
    "sub": "promote",
    "mul": "promote",
    "div": "promote",
}

# where PyTorch (aten/src/ATen/autocast_mode.cpp, CUDA) lists each op
_PYTORCH_LIST: dict[str, str] = {
    "matmul": "lower_precision_fp", "linear": "lower_precision_fp",
    "conv2d": "lower_precision_fp", "exp": "fp32", "log": "fp32", "pow": "fp32",
    "softmax": "fp32_set_opt_dtype", "log_softmax": "fp32_set_opt_dtype",
    "sum": "fp32_set_opt_dtype", "mean": "(none: fpsim addition)", "layer_norm": "fp32",
    "batch_norm": "(none: fpsim addition)", "nll_loss": "fp32",
    "cross_entropy": "fp32 (CPU list; CUDA: its parts)",
    "mse_loss": "fp32", "add": "(none: promotes natively)", "sub": "(none: promotes natively)",
    "mul": "(none: promotes natively)", "div": "(none: promotes natively)",
}

# set_autocast_policy's overrides are ambient state, per thread: state.local.autocast_overrides
# (an immutable mapping, replaced on each change)


def _check_entry(op: str, policy: str) -> None:
    if op not in AUTOCAST_POLICY:
        raise ValueError(f"autocast has no op {op!r}; valid: {', '.join(AUTOCAST_POLICY)}")
    if policy not in POLICIES:
        raise ValueError(f"unknown autocast policy {policy!r} for {op!r}; valid: "
                         f"{', '.join(POLICIES)}")


def set_autocast_policy(op: str, policy: str) -> None:
    """Change the policy of ``op`` for every autocast region the calling thread enters
    afterwards (until :func:`reset_autocast_policy`; ambient state is per thread).

    >>> set_autocast_policy("softmax", "lower"); get_autocast_policy()["softmax"]
    'lower'
    >>> reset_autocast_policy(); get_autocast_policy()["softmax"]
    'fp32'
    """
    _check_entry(op, policy)
    _state.local.autocast_overrides = types.MappingProxyType(
        {**_state.local.autocast_overrides, op: policy})


def reset_autocast_policy(op: str | None = None) -> None:
    """Undo :func:`set_autocast_policy` for ``op`` (all ops when None).

    >>> reset_autocast_policy()
    """
    if op is None:
        _state.local.autocast_overrides = types.MappingProxyType({})
        return
    if op not in AUTOCAST_POLICY:
        raise ValueError(f"autocast has no op {op!r}; valid: {', '.join(AUTOCAST_POLICY)}")
    _state.local.autocast_overrides = types.MappingProxyType(
        {k: v for k, v in _state.local.autocast_overrides.items() if k != op})


def get_autocast_policy(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The effective table: :data:`AUTOCAST_POLICY`, then the calling thread's overrides, then
    ``overrides``.

    >>> get_autocast_policy({"exp": "lower"})["exp"]
    'lower'
    """
    if overrides is not None and not isinstance(overrides, Mapping):
        raise TypeError(f"get_autocast_policy: overrides must be a mapping of op names to "
                        f"policies (or None), got {type(overrides).__name__} {overrides!r}")
    table = {**AUTOCAST_POLICY, **_state.local.autocast_overrides}
    for op, policy in (overrides or {}).items():
        _check_entry(op, policy)
        table[op] = policy
    return table


def autocast_policy_table(dtype: Format | str = FP16,
                          overrides: Mapping[str, str] | None = None) -> str:
    """The policy table as text: op, policy, the format its tensor inputs are cast to under
    ``autocast(dtype)``, and where PyTorch lists the op.

    >>> print(autocast_policy_table().splitlines()[2])
    matmul         lower    fp16                  lower_precision_fp
    """
    fmt = as_format(dtype)
    table = get_autocast_policy(overrides)
    target = {"lower": str(fmt.name), "fp32": "fp32", "promote": "widest input"}
    lines = [f"{'op':<14} {'policy':<8} {'inputs cast to':<21} PyTorch list",
             f"{'-' * 14} {'-' * 8} {'-' * 21} {'-' * 26}"]
    for op, policy in table.items():
        mark = " (overridden)" if policy != AUTOCAST_POLICY[op] else ""
        lines.append(f"{op:<14} {policy:<8} {target[policy]:<21} {_PYTORCH_LIST[op]}{mark}")
    lines.append("other ops: run in their input's format (fp64 inputs are never cast)")
    return "\n".join(lines)


# The cast cache of the outermost autocast region (shared by nested regions, also across a
# nested autocast(enabled=False)), dropped when that region exits: ambient state (a ContextVar,
# so per thread), fpsim.state.autocast_cache.
_CACHE = _state.autocast_cache


class _Policy:
    """The callable installed in the autograd layer: ``policy(op, args) -> args``."""

    __slots__ = ("fmt", "table", "cache", "cache_enabled")

    def __init__(self, fmt: Format, table: dict[str, str], cache: dict,
                 cache_enabled: bool) -> None:
        self.fmt = fmt
        self.table = table
        self.cache = cache
        self.cache_enabled = cache_enabled

    def _cast(self, t: Tensor, fmt: Format) -> Tensor:
        if t.fmt == fmt:
            return t
        # PyTorch caches casts of fp32 leaf tensors requiring grad to the low format only
        cacheable = (self.cache_enabled and fmt == self.fmt and t.fmt == FP32
                     and t.requires_grad and t.is_leaf and is_grad_enabled())
        if cacheable:
            hit = self.cache.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
        out = cast_to(t, fmt)
        if cacheable:
            self.cache[id(t)] = (t, out)  # keeps t alive, so its id is not reused meanwhile
        return out

    def __call__(self, op: str, args: tuple) -> tuple:
        policy = self.table.get(op)
        if policy is None:
            return args
        eligible = [a for a in args if isinstance(a, Tensor) and a.fmt != FP64]
        if not eligible:
            return args
        if policy == "lower":
            fmt = self.fmt
        elif policy == "fp32":
            fmt = FP32
        else:
            fmt = _ctx.promote_formats(*[a.fmt for a in eligible])
        return tuple(self._cast(a, fmt) if isinstance(a, Tensor) and a.fmt != FP64 else a
                     for a in args)


class autocast:  # noqa: N801 - PyTorch's name
    """Context manager (or decorator): run the autocast-aware ops of the region with
    PyTorch's cast policy (see the module docstring).

    - ``dtype`` (PyTorch's name; ``fmt`` is fpsim's, give either): the low-precision format of
      "lower" ops (``"fp16"``, the default, ``"bf16"`` or any :class:`~fpsim.Format`).
    - ``enabled=False``: a region where ops run as written (also inside another region).
    - ``overrides``: ``{op: policy}`` for this region, e.g. ``{"softmax": "lower"}``
      (for every region of the thread: :func:`set_autocast_policy`).
    - ``cache_enabled``: cache casts of fp32 weights for the region (default True).

    >>> import fpsim
    >>> from fpsim.autograd import Tensor
    >>> x = Tensor([[1.0, 2.0]])
    >>> with autocast("bf16", overrides={"softmax": "lower"}):
    ...     x.softmax(dim=1).fmt.name
    'bf16'
    >>> autocast(fmt="bf16").fmt is autocast(dtype="bf16").fmt
    True
    """

    def __init__(self, dtype: Format | str | None = None, enabled: bool = True, *,
                 overrides: Mapping[str, str] | None = None, cache_enabled: bool = True,
                 fmt: Format | str | None = None) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        if dtype is not None and fmt is not None:
            raise TypeError("autocast takes fmt or dtype (its PyTorch name), not both")
        self.fmt = as_format(FP16 if dtype is None and fmt is None else
                             (fmt if dtype is None else dtype))
        self.enabled = enabled
        self.overrides = dict(overrides or {})
        get_autocast_policy(self.overrides)  # validate now, not on entry
        self.cache_enabled = bool(cache_enabled)
        # the active entries' tokens per thread (one object may be entered by several threads
        # at once, or again inside its own block): thread id -> list, innermost last
        self._tokens: dict[int, list[tuple]] = {}

    def __enter__(self) -> autocast:
        cache = _CACHE.get()
        cache_token = None
        if cache is None:
            cache = {}
            cache_token = _CACHE.set(cache)
        policy = (_Policy(self.fmt, get_autocast_policy(self.overrides), cache,
                          self.cache_enabled) if self.enabled else None)
        self._tokens.setdefault(threading.get_ident(), []).append(
            (_ctx.set_autocast_hook(policy), cache_token, cache))
        return self

    def __exit__(self, *exc: Any) -> None:
        ident = threading.get_ident()
        tokens = self._tokens[ident]
        hook_token, cache_token, cache = tokens.pop()
        if not tokens:
            del self._tokens[ident]
        _ctx.reset_autocast_hook(hook_token)
        if cache_token is not None:  # the outermost region: drop the cached casts
            cache.clear()
            _CACHE.reset(cache_token)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.fmt, self.enabled, overrides=self.overrides,
                          cache_enabled=self.cache_enabled):
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"autocast(dtype={self.fmt.name!r}, enabled={self.enabled})"


def is_autocast_enabled() -> bool:
    """Whether an (enabled) autocast region is active.

    >>> is_autocast_enabled()
    False
    """
    return isinstance(_ctx.get_autocast_hook(), _Policy)


def get_autocast_dtype() -> Format | None:
    """The low-precision format of the active autocast region (None outside one).

    >>> with autocast("bf16"):
    ...     get_autocast_dtype().name
    'bf16'
    """
    hook = _ctx.get_autocast_hook()
    return hook.fmt if isinstance(hook, _Policy) else None


def cache_size() -> int:
    """How many weight casts the active region has cached (0 outside a region)."""
    cache = _CACHE.get()
    return 0 if cache is None else len(cache)
