"""Loss scalers with PyTorch's ``torch.amp.GradScaler`` protocol, on duck-typed optimizers.

An optimizer here is anything with ``param_groups`` (a list of dicts whose ``"params"`` are
parameters with a ``.grad`` NumPy array or None) and ``step()``: fpsim's own optimizers and tiny
test doubles alike. Every scaler offers the same loop::

    scaled = scaler.scale(loss); scaled.backward()
    scaler.unscale_(opt)        # optional: before gradient clipping
    scaler.step(opt)            # skipped when a gradient is inf/NaN (dynamic scalers)
    scaler.update()

- :class:`GradScaler` is PyTorch's algorithm (``torch/amp/grad_scaler.py`` and the
  ``_amp_foreach_non_finite_check_and_unscale_`` / ``_amp_update_scale_`` kernels, PyTorch 2.x):
  the scale is a float32 value, unscaling multiplies by ``float32(1 / float64(scale))`` in the
  kernels' arithmetic, the growth step is rounded to float32 and dropped when it overflows.
- :class:`StaticLossScaler` keeps one scale (Micikevicius et al. 2018's fixed factor).
- :class:`ApexLossScaler` is NVIDIA Apex's ``apex/amp/scaler.py`` ``LossScaler``.
- :class:`~fpsim.amp.deepspeed_scaler.DynamicLossScaler` is DeepSpeed's, with hysteresis.

Every scaler appends one dict per :meth:`~ScalerBase.update` to ``history`` (``step``,
``scale`` used, ``new_scale``, ``found_inf``, ``skipped`` and scaler-specific counters), which
:class:`fpsim.amp.instrument.TrainingMonitor` and the plots read.
"""

from __future__ import annotations

import enum
import numbers
import warnings
from collections.abc import Iterable
from typing import Any, Protocol

import ml_dtypes
import numpy as np

from .. import flags as _flags
from ..checks import as_int
from ..formats import FP32, get_float_format
from ..rounding import round as _round

__all__ = [
    "OptState",
    "OptimizerLike",
    "GradScaler",
    "StaticLossScaler",
    "ApexLossScaler",
    "iter_grads",
]


class OptimizerLike(Protocol):
    """What a scaler needs of an optimizer (PyTorch's shape)."""

    param_groups: list[dict[str, Any]]

    def step(self, *args: Any, **kwargs: Any) -> Any: ...


class OptState(enum.Enum):
    """Where one optimizer is in the scale -> unscale_ -> step -> update cycle (as PyTorch)."""

    READY = "ready"
    UNSCALED = "unscaled"
    STEPPED = "stepped"


def _fresh_state() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf": None, "skipped": False}


def _scale_value(loss: Any, factor: float | np.floating) -> Any:
    """``loss * factor`` for a loss tensor, NumPy value or a list/tuple of them.

    NumPy values follow NumPy's promotion (which for a 0-d loss and a float32 factor gives what
    PyTorch gives for a 0-d loss tensor times the float32 scale tensor); any other object is
    multiplied by the factor as a Python float (fpsim Tensors, ...).
    """
    if isinstance(loss, (list, tuple)):
        return type(loss)(_scale_value(v, factor) for v in loss)
    if isinstance(loss, (np.ndarray, np.generic, numbers.Real)) and not isinstance(loss, bool):
        with np.errstate(over="ignore"):  # an overflowing scaled loss is inf, as on the GPU
            return loss * factor
    return loss * float(factor)


def _grad_params(optimizer: OptimizerLike) -> list[Any]:
    if not hasattr(optimizer, "param_groups"):
        raise TypeError(
            f"expected an optimizer with param_groups (a list of dicts with 'params'), got "
            f"{type(optimizer).__name__}"
        )
    return [p for group in optimizer.param_groups for p in group["params"]
            if getattr(p, "grad", None) is not None]


# 16-bit gradient dtypes whose cast from float32 NumPy / ml_dtypes round to nearest even
_WIDENED_BY_NUMPY = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _unscaled(grad: np.ndarray, inv_scale: np.float32) -> np.ndarray:
    """grad * inv_scale as the CUDA/CPU unscale kernel computes it: in the grad's "opmath" type
    (float64 for float64 grads, float32 otherwise), then rounded to the grad's dtype."""
    if inv_scale == np.float32(1.0):  # the kernel returns the value itself (NaN payloads kept)
        return grad
    dtype = grad.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == np.float64:
            return grad * np.float64(inv_scale)  # one IEEE float64 multiplication
        if (dtype == np.float32 or dtype in _WIDENED_BY_NUMPY) and not _flags.flags_active():
            # one IEEE float32 multiplication (correctly rounded, subnormals kept), then
            # NumPy's / ml_dtypes' round-to-nearest-even cast: what the fp8 path below does
            # with fpsim's rounding, bit for bit (tests/test_amp_scaler.py checks it against
            # exact Fractions); in a flag_context the path below records the IEEE flags
            prod = np.multiply(grad.astype(np.float32, copy=False), inv_scale,
                               dtype=np.float32)
            return prod if dtype == np.float32 else prod.astype(dtype)
        # float32 * float32 has at most 48 significant bits: exact in float64, rounded once
        exact = grad.astype(np.float64) * np.float64(inv_scale)
    prod32 = _round(exact, FP32)
    fmt = get_float_format(dtype)  # fp16, bf16, fp8: rounded a second time (fp32: exact)
    return np.asarray(_round(prod32, fmt)).astype(dtype)


def _check_and_unscale(
    optimizer: OptimizerLike, inv_scale: np.float32, allow_fp16: bool
) -> bool | None:
    """Unscale every gradient of ``optimizer`` in place; True when any was inf/NaN *before*
    unscaling (the kernel tests its input), None when no parameter has a gradient."""
    params = _grad_params(optimizer)
    arrays = []
    for p in params:  # validate everything first: an error leaves all gradients untouched
        g = p.grad
        if not isinstance(g, np.ndarray):
            g = np.asarray(g)
        if not allow_fp16 and g.dtype == np.float16:
            raise ValueError("Attempting to unscale FP16 gradients.")
        if g.dtype.kind not in "fV":
            raise TypeError(f"gradients must be floating-point arrays, got dtype {g.dtype}")
        arrays.append(g)
    if not params:
        return None
    found_inf = False
    for p, g in zip(params, arrays, strict=True):
        found_inf |= not bool(np.isfinite(g).all())
        new = _unscaled(g, inv_scale)
        if new is g:
            continue
        if g is p.grad and g.flags.writeable:
            np.copyto(g, new)  # in place, as PyTorch: references to the grad see the change
        else:
            p.grad = new
    return found_inf


class ScalerBase:
    """The optimizer bookkeeping shared by every scaler; subclasses supply the scale rule."""

    _allow_fp16 = False  # PyTorch refuses to unscale FP16 gradients (master weights expected)

    def __init__(self, enabled: bool = True) -> None:
        self._enabled = check_flag("enabled", enabled)
        self._per_optimizer_states: dict[int, dict[str, Any]] = {}
        self._iteration = 0
        self.history: list[dict[str, Any]] = []

    # -- hooks ------------------------------------------------------------------------------
    def _scale_factor(self) -> float | np.floating:
        raise NotImplementedError

    def _check_ready(self, funcname: str) -> None:
        """Raise when ``funcname`` cannot run yet (GradScaler's lazy scale)."""

    def _should_skip(self, found_inf: bool) -> bool:
        return found_inf

    def _apply_update(self, found_inf: bool) -> dict[str, Any]:
        raise NotImplementedError

    def _set_scale(self, value: float) -> None:
        raise NotImplementedError

    # -- the public protocol ----------------------------------------------------------------
    def is_enabled(self) -> bool:
        """Whether the scaler does anything (False: every call passes through)."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        raise NotImplementedError

    def scale(self, outputs: Any) -> Any:
        """``outputs * scale`` (a loss tensor, a NumPy value, or a list/tuple of them)."""
        if not self._enabled:
            return outputs
        return _scale_value(outputs, self._scale_factor())

    def _state(self, optimizer: OptimizerLike) -> dict[str, Any]:
        return self._per_optimizer_states.setdefault(id(optimizer), _fresh_state())

    def _inv_scale(self) -> np.float32:
        # PyTorch: self._scale.double().reciprocal().float()
        return np.float32(1.0 / np.float64(self.get_scale()))

    def unscale_(self, optimizer: OptimizerLike) -> None:
        """Divide ``optimizer``'s gradients by the scale (multiply by float32(1/scale)) in place
        and record whether any was inf/NaN. At most once per optimizer between updates."""
        if not self._enabled:
            return
        self._check_ready("unscale_")
        state = self._state(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        state["found_inf"] = self._unscale_grads(optimizer)
        state["stage"] = OptState.UNSCALED

    def _unscale_grads(self, optimizer: OptimizerLike) -> bool | None:
        return _check_and_unscale(optimizer, self._inv_scale(), self._allow_fp16)

    def step(self, optimizer: OptimizerLike, *args: Any, **kwargs: Any) -> Any:
        """Unscale (if not done yet) and call ``optimizer.step(*args, **kwargs)`` unless a
        gradient was inf/NaN; returns what ``optimizer.step`` returned, or None when skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_ready("step")
        state = self._state(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if state["found_inf"] is None:
            # PyTorch asserts this: no parameter of the optimizer had a gradient
            raise RuntimeError("No inf checks were recorded for this optimizer.")
        retval = None
        if self._should_skip(state["found_inf"]):
            state["skipped"] = True
        else:
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale: float | np.ndarray | None = None) -> None:
        """End the iteration: adjust the scale by the scaler's rule from the inf/NaN checks of
        all optimizers (or set ``new_scale``), append a ``history`` record, reset the states."""
        if not self._enabled:
            return
        self._check_ready("update")
        checks = [s["found_inf"] for s in self._per_optimizer_states.values()
                  if s["found_inf"] is not None]
        found_inf = any(checks)
        old = self.get_scale()
        if new_scale is not None:
            self._set_scale(_as_new_scale(new_scale))
            extra: dict[str, Any] = {}
        else:
            if not checks:
                raise RuntimeError("No inf checks were recorded prior to update.")
            extra = self._apply_update(found_inf)
        self.history.append({
            "step": self._iteration,
            "scale": old,
            "new_scale": self.get_scale(),
            "found_inf": found_inf,
            "skipped": any(s["skipped"] for s in self._per_optimizer_states.values()),
            **extra,
        })
        self._iteration += 1
        self._per_optimizer_states = {}


def _as_new_scale(new_scale: Any) -> float:
    reason = "new_scale should be a float or a 1-element array"
    if isinstance(new_scale, bool):
        raise TypeError(f"{reason}, got bool")
    if isinstance(new_scale, numbers.Real):
        return float(new_scale)
    arr = np.asarray(new_scale)
    if arr.size != 1 or arr.dtype.kind not in "fiuV":
        raise TypeError(f"{reason}, got {type(new_scale).__name__} of shape {arr.shape}")
    return float(arr.reshape(()).astype(np.float64))


def check_positive(name: str, value: Any) -> float:
    """``value`` as a float, checked to be a real, finite, positive number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number (int or float), got "
                        f"{type(value).__name__} {value!r}")
    v = float(value)
    if not (v > 0 and np.isfinite(v)):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return v


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool; a string such as "no" is refused (``bool("no")`` is True)."""
    if not isinstance(value, (bool, np.bool_, int, np.integer)):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} "
                        f"{value!r}")
    return bool(value)


class GradScaler(ScalerBase):
    """PyTorch's dynamic loss scaler (``torch.amp.GradScaler``), step for step.

    - ``scale(loss)`` returns ``loss * scale``; the scale is a float32 value, created on the
      first ``scale()`` call (as PyTorch's lazily created tensor).
    - ``unscale_(opt)`` multiplies every gradient by ``float32(1 / float64(scale))``, the
      product rounded to the gradient's format (float32 grads stay float32), and records
      ``found_inf`` if a gradient held inf/NaN before unscaling. FP16 gradients are refused
      (keep FP32 master weights). Twice before ``update()`` is an error.
    - ``step(opt)`` unscales if needed and calls ``opt.step()`` unless ``found_inf``.
    - ``update()``: after an inf/NaN (in any optimizer) ``scale = float32(scale * backoff)``
      and the growth tracker restarts; otherwise after ``growth_interval`` consecutive good
      steps ``scale = float32(scale * growth_factor)`` unless that overflows float32 (the
      scale is then kept, the tracker still restarts).

    Error types differ from PyTorch where it uses ``assert`` (RuntimeError / ValueError here).

    >>> import numpy as np
    >>> from fpsim.amp import GradScaler
    >>> class P:  # a parameter: .grad is a NumPy array
    ...     grad = np.array([2.0**20, 3.0], np.float32)
    >>> class Opt:
    ...     param_groups = [{"params": [P()]}]
    ...     def step(self):
    ...         return "stepped"
    >>> s, opt = GradScaler(init_scale=2.0**16, growth_interval=2), Opt()
    >>> float(s.scale(np.float32(0.5)))
    32768.0
    >>> s.step(opt), opt.param_groups[0]["params"][0].grad.tolist()
    ('stepped', [16.0, 4.57763671875e-05])
    >>> s.update(); s.get_scale()
    65536.0
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(enabled)
        # the types are checked even when disabled (PyTorch checks nothing then); the ranges
        # only when enabled, as PyTorch, with PyTorch's messages
        growth = check_positive("growth_factor", growth_factor)
        backoff = check_positive("backoff_factor", backoff_factor)
        if self._enabled:
            if not growth > 1.0:
                raise ValueError(f"The growth factor must be > 1.0, got growth_factor="
                                 f"{growth_factor!r}")
            if not backoff < 1.0:
                raise ValueError(f"The backoff factor must be < 1.0, got backoff_factor="
                                 f"{backoff_factor!r} (valid: 0 < backoff_factor < 1)")
        self._init_scale = check_positive("init_scale", init_scale)
        self._growth_factor = growth
        self._backoff_factor = backoff
        self._growth_interval = as_int("growth_interval", growth_interval, 1)
        self._init_growth_tracker = 0
        self._scale: np.float32 | None = None
        self._growth_tracker: int | None = None

    def _lazy_init_scale_growth_tracker(self) -> None:
        self._scale = np.float32(self._init_scale)
        self._growth_tracker = self._init_growth_tracker

    def _check_ready(self, funcname: str) -> None:
        if self._scale is None:
            raise RuntimeError(
                f"Attempted {funcname} but _scale is None.  This may indicate your script did "
                "not use scaler.scale(loss or outputs) earlier in the iteration."
            )

    def _scale_factor(self) -> np.float32:
        if self._scale is None:
            self._lazy_init_scale_growth_tracker()
        return self._scale  # type: ignore[return-value]

    def get_scale(self) -> float:
        """The scale as a Python float: the init_scale before the first ``scale()``, 1.0 when
        disabled (as PyTorch)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def _set_scale(self, value: float) -> None:
        self._scale = np.float32(value)  # PyTorch: self._scale.fill_(new_scale)

    def _apply_update(self, found_inf: bool) -> dict[str, Any]:
        # _amp_update_scale_: float * double products, assigned to float (RNE)
        scale64 = np.float64(self._scale)
        with np.errstate(over="ignore"):
            if found_inf:
                self._scale = np.float32(scale64 * self._backoff_factor)
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1  # type: ignore[operator]
                if successful == self._growth_interval:
                    new = np.float32(scale64 * self._growth_factor)
                    if np.isfinite(new):
                        self._scale = new
                    self._growth_tracker = 0
                else:
                    self._growth_tracker = successful
        return {"growth_tracker": self._growth_tracker}

    def get_growth_factor(self) -> float:
        """The factor the scale is multiplied by after ``growth_interval`` good steps."""
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Set the growth factor."""
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        """The factor the scale is multiplied by after a step with inf/NaN gradients."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Set the backoff factor."""
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        """How many consecutive good steps grow the scale."""
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Set the growth interval."""
        self._growth_interval = as_int("growth_interval", new_interval, 1)

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker

    @property
    def growth_tracker(self) -> int:
        """Consecutive good steps since the last growth or backoff."""
        return self._get_growth_tracker()

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval,
        _growth_tracker ({} when disabled)."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._get_growth_tracker(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled "
                "instance of GradScaler."
            )
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale = np.float32(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker = int(state_dict["_growth_tracker"])


class StaticLossScaler(ScalerBase):
    """A fixed loss scale (Micikevicius et al. 2018 used 8 to 32K) behind the GradScaler
    interface; ``update()`` never changes it (``update(new_scale)`` sets it explicitly).

    ``skip_on_overflow=True`` (default) skips ``opt.step()`` when a gradient is inf/NaN, as the
    paper recommends. ``skip_on_overflow=False`` is NVIDIA Apex's static loss scale, which
    does not check for overflow and applies the step anyway (inf/NaN reach the weights). The
    scale is kept as the Python float given; unscaling uses float32(1/scale) as GradScaler.

    >>> import numpy as np
    >>> from fpsim.amp import StaticLossScaler
    >>> s = StaticLossScaler(1024.0)
    >>> float(s.scale(np.float32(0.25))), s.get_scale()
    (256.0, 1024.0)
    """

    def __init__(self, scale: float, skip_on_overflow: bool = True, enabled: bool = True) -> None:
        super().__init__(enabled)
        self._static = check_positive("scale", scale)
        self.skip_on_overflow = check_flag("skip_on_overflow", skip_on_overflow)

    def _scale_factor(self) -> float:
        return self._static

    def get_scale(self) -> float:
        """The fixed scale (1.0 when disabled)."""
        return self._static if self._enabled else 1.0

    def _set_scale(self, value: float) -> None:
        self._static = check_positive("new_scale", value)

    def _should_skip(self, found_inf: bool) -> bool:
        return found_inf and self.skip_on_overflow

    def _apply_update(self, _found_inf: bool) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        """{'scale', 'skip_on_overflow'}."""
        return {"scale": self._static, "skip_on_overflow": self.skip_on_overflow}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self._static = check_positive("scale", state_dict["scale"])
        self.skip_on_overflow = bool(state_dict["skip_on_overflow"])


class ApexLossScaler(ScalerBase):
    """NVIDIA Apex's ``apex.amp.scaler.LossScaler`` (the multi-tensor-apply version with
    ``min_loss_scale`` / ``max_loss_scale``), behind the GradScaler interface.

    ``loss_scale="dynamic"``: the scale starts at ``min(max_loss_scale, init_scale)`` (a Python
    float); an overflow halves it (not below ``min_loss_scale`` when one is set), skips the step
    and restarts the count; ``scale_window`` consecutive good steps double it, capped at
    ``max_loss_scale`` (Apex hard-codes the factor 2). A number gives Apex's static scale: no
    step is ever skipped and the scale never changes. Like Apex (O3), FP16 gradients are
    unscaled in place (float32 product rounded to fp16) with a warning, not refused.

    >>> from fpsim.amp import ApexLossScaler
    >>> s = ApexLossScaler(init_scale=2.0**23, scale_window=1)
    >>> [s.update_scale(False) or s.get_scale() for _ in range(3)]
    [16777216.0, 16777216.0, 16777216.0]
    """

    _allow_fp16 = True

    def __init__(
        self,
        loss_scale: float | str = "dynamic",
        init_scale: float = 2.0**16,
        scale_window: int = 2000,
        min_loss_scale: float | None = None,
        max_loss_scale: float = 2.0**24,
        enabled: bool = True,
    ) -> None:
        super().__init__(enabled)
        if isinstance(loss_scale, str) and loss_scale != "dynamic":
            try:
                loss_scale = float(loss_scale)  # Apex accepts "128.0"
            except ValueError:
                raise ValueError(
                    f"loss_scale must be 'dynamic' or a positive number, got {loss_scale!r}"
                ) from None
        self.dynamic = loss_scale == "dynamic"
        self._max_loss_scale = check_positive("max_loss_scale", max_loss_scale)
        self._min_loss_scale = (None if min_loss_scale is None
                                else check_positive("min_loss_scale", min_loss_scale))
        if self.dynamic:
            self._loss_scale = min(self._max_loss_scale, check_positive("init_scale", init_scale))
        else:
            self._loss_scale = check_positive("loss_scale", loss_scale)
        self._scale_seq_len = as_int("scale_window", scale_window, 1)
        self._unskipped = 0
        self._warned_fp16 = False

    def loss_scale(self) -> float:
        """The current scale (Apex's method name)."""
        return self._loss_scale

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._loss_scale if self._enabled else 1.0

    def _scale_factor(self) -> float:
        return self._loss_scale

    def _set_scale(self, value: float) -> None:
        self._loss_scale = check_positive("new_scale", value)

    def _unscale_grads(self, optimizer: OptimizerLike) -> bool | None:
        if not self._warned_fp16 and any(
            np.asarray(p.grad).dtype != np.float32 for p in _grad_params(optimizer)
        ):
            warnings.warn(
                "Attempting to unscale a grad that is not fp32: unscaling non-fp32 grads may "
                "indicate an error (Apex keeps fp32 master gradients).", stacklevel=3,
            )
            self._warned_fp16 = True
        return super()._unscale_grads(optimizer)

    def _should_skip(self, found_inf: bool) -> bool:
        return found_inf and self.dynamic

    def update_scale(self, overflow: bool) -> bool:
        """Apex's rule for one iteration; returns should_skip."""
        if overflow and self.dynamic:
            should_skip = True
            if self._min_loss_scale:  # Apex tests truthiness: 0 means no floor
                self._loss_scale = max(self._min_loss_scale, self._loss_scale / 2.0)
            else:
                self._loss_scale = self._loss_scale / 2.0
            self._unskipped = 0
        else:
            should_skip = False
            self._unskipped += 1
        if self._unskipped == self._scale_seq_len and self.dynamic:
            self._loss_scale = min(self._max_loss_scale, self._loss_scale * 2.0)
            self._unskipped = 0
        return should_skip

    def _apply_update(self, found_inf: bool) -> dict[str, Any]:
        self.update_scale(found_inf)
        return {"unskipped": self._unskipped}

    def state_dict(self) -> dict[str, Any]:
        """Apex's per-scaler keys: loss_scale, unskipped."""
        return {"loss_scale": self._loss_scale, "unskipped": self._unskipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self._loss_scale = float(state_dict["loss_scale"])
        self._unskipped = int(state_dict["unskipped"])


def iter_grads(optimizer: OptimizerLike) -> Iterable[np.ndarray]:
    """The non-None gradients of an optimizer's parameters, in param_groups order.

    >>> import numpy as np
    >>> class P:
    ...     def __init__(self, g): self.grad = g
    >>> class Opt:
    ...     param_groups = [{"params": [P(np.zeros(2)), P(None)]}]
    >>> [g.shape for g in iter_grads(Opt())]
    [(2,)]
    """
    return [p.grad for p in _grad_params(optimizer)]
