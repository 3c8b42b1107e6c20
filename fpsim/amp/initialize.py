"""NVIDIA Apex's ``amp.initialize`` and ``amp.scale_loss`` on fpsim models and optimizers.

``model, optimizer = initialize(model, optimizer, opt_level="O2")`` prepares both for one of
Apex's opt levels (:data:`fpsim.amp.OPT_LEVELS`; keyword overrides as Apex's):

======  ==========================================================================
level   what initialize does here
======  ==========================================================================
O0      nothing: fp32 model, plain optimizer, loss scale 1.
O1      fp32 weights; the model's forward runs inside :func:`fpsim.amp.autocast`
        (Apex patches torch functions: per-op casts) and returns fp32 outputs;
        dynamic loss scale.
O2      model cast to fp16 except batch norm (kept fp32, returning its input's format);
        forward casts inputs to fp16 and outputs to fp32 (Apex's patched forward);
        fp32 master weights in the optimizer; dynamic loss scale.
O3      the whole model fp16 (forward casts as O2), no master weights, optimizer state
        in fp16 (PyTorch creates it like the fp16 parameters), loss scale 1.
======  ==========================================================================

The returned optimizer is an :class:`AmpOptimizer` wrapping yours; it carries the level's
loss scaler (``optimizer.scaler``: :class:`~fpsim.amp.ApexLossScaler`) and its autocast
context (``optimizer.autocast()``: enabled for O1, a no-op otherwise). The training loop is
Apex's::

    loss = loss_fn(model(x), y)
    with fpsim.amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()          # skipped when a gradient was inf/NaN (dynamic scale)
    optimizer.zero_grad()

``scale_loss`` multiplies the loss by the scale; on exit it copies low-precision gradients
into fp32 (O2: Apex's fp32 master gradients, an exact widening) and unscales them in fp32,
recording inf/NaN. ``optimizer.step()`` then skips or applies the update and adjusts the
scale. As Apex, with no master weights and a static scale of 1 (O0, O3) nothing is scaled or
checked. O0 and O1 optimizers also work with a :class:`~fpsim.amp.GradScaler` loop.

>>> import numpy as np, fpsim
>>> from fpsim import nn, optim
>>> from fpsim.autograd import functional as F
>>> from fpsim.amp import initialize, scale_loss
>>> model = nn.Linear(4, 2, rng=0)
>>> model, opt = initialize(model, optim.SGD(model.parameters(), lr=0.1), opt_level="O2")
>>> model.weight.fmt.name, opt.master_weights, opt.scaler.get_scale()
('fp16', True, 65536.0)
>>> loss = F.cross_entropy(model(np.ones((3, 4), np.float32)), [0, 1, 0])
>>> loss.fmt.name                                       # outputs come back in fp32
'fp32'
>>> with scale_loss(loss, opt) as scaled:
...     scaled.backward()
>>> model.weight.grad.dtype                             # fp32 master gradients, unscaled
dtype('float32')
>>> opt.step(); opt.skipped_steps
0
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..autograd.context import contains, widen
from ..autograd.tensor import Tensor, as_format
from ..formats import FP16, FP32, Format
from .autocast_policy import autocast
from .opt_levels import OptLevel, get_opt_level
from .scaler import ApexLossScaler

__all__ = ["AmpOptimizer", "AmpProperties", "initialize", "scale_loss"]


@dataclasses.dataclass(frozen=True)
class AmpProperties:
    """The properties an :func:`initialize` call resolved (the level's, then the overrides).

    >>> from fpsim.amp import OPT_LEVELS
    >>> AmpProperties.from_level(OPT_LEVELS["O3"]).loss_scale
    1.0
    """

    opt_level: str
    cast_model_type: Format | None
    patch_torch_functions: bool
    keep_batchnorm_fp32: bool | None
    master_weights: bool
    loss_scale: float | str
    autocast_dtype: Format = FP16

    @classmethod
    def from_level(cls, level: OptLevel, **overrides: Any) -> AmpProperties:
        """The level's properties with ``overrides`` (None values are ignored)."""
        base = {"opt_level": level.name, "cast_model_type": level.cast_model_type,
                "patch_torch_functions": level.patch_torch_functions,
                "keep_batchnorm_fp32": level.keep_batchnorm_fp32,
                "master_weights": bool(level.master_weights), "loss_scale": level.loss_scale}
        for k, v in overrides.items():
            if v is not None:
                base[k] = v
        return cls(**base)

    @property
    def low_format(self) -> Format:
        """The format of the low-precision computation: the model's cast type, else the
        autocast format (O1), else fp32 (O0)."""
        if self.cast_model_type is not None:
            return self.cast_model_type
        return self.autocast_dtype if self.patch_torch_functions else FP32


def _is_batchnorm(module: Any) -> bool:
    from ..nn import BatchNorm1d, BatchNorm2d

    return isinstance(module, (BatchNorm1d, BatchNorm2d))


def _cast_in(value: Any, fmt: Format) -> Any:
    """Apex's input caster: floating tensors / arrays to ``fmt``; containers recursively."""
    if isinstance(value, Tensor):
        return value.to(fmt)
    if isinstance(value, np.ndarray) and value.dtype.kind in "fV":
        return Tensor(value, fmt)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_in(v, fmt) for v in value)
    if isinstance(value, dict):
        return {k: _cast_in(v, fmt) for k, v in value.items()}
    return value


def _patch_forward(model: Any, input_fmt: Format | None, output_fmt: Format,
                   region: Callable[[], Any] | None) -> None:
    """Replace ``model.forward`` (on the instance, as Apex) by one that casts inputs to
    ``input_fmt`` (None: not), runs inside ``region()`` (a context) when given, and casts
    floating outputs to ``output_fmt``."""
    old = model.forward

    @functools.wraps(old)
    def new_forward(*args: Any, **kwargs: Any) -> Any:
        if input_fmt is not None:
            args, kwargs = _cast_in(args, input_fmt), _cast_in(kwargs, input_fmt)
        with region() if region is not None else contextlib.nullcontext():
            out = old(*args, **kwargs)
        return _cast_in(out, output_fmt)

    object.__setattr__(model, "forward", new_forward)


def _keep_input_format(bn: Any) -> None:
    """A batch norm kept in fp32 returns its input's format (cuDNN's mixed kernel: fp16 in,
    fp32 statistics and parameters, fp16 out)."""
    old = bn.forward

    @functools.wraps(old)
    def forward(x: Tensor) -> Tensor:
        return old(x).to(x.fmt)

    object.__setattr__(bn, "forward", forward)


def _cast_model(model: Any, fmt: Format, keep_batchnorm_fp32: bool) -> None:
    """Apex's convert_network: parameters and floating buffers to ``fmt``, batch norm kept
    in fp32 when asked."""
    for module in model.modules():
        if keep_batchnorm_fp32 and _is_batchnorm(module):
            _keep_input_format(module)
            continue
        module.to(fmt, recurse=False)  # this module's own, not its children's


class AmpOptimizer:
    """An optimizer prepared by :func:`initialize`: delegates to the wrapped one
    (``param_groups``, ``state``, ``zero_grad``, ``state_dict``, ...) and adds the level's
    loss scaler and autocast context.

    - ``scaler``: the level's :class:`~fpsim.amp.ApexLossScaler` (dynamic or static).
    - ``autocast()``: an autocast context of the level (enabled only for O1).
    - ``promote_grads()``: copy low-precision gradients into fp32 (O2's master gradients).
    - ``step()``: after :func:`scale_loss`, skip the update if a gradient was inf/NaN and
      update the scale; otherwise a plain step.
    - ``skipped_steps``, ``properties`` (:class:`AmpProperties`), ``optimizer`` (wrapped).
    """

    def __init__(self, optimizer: Any, properties: AmpProperties,
                 scaler: ApexLossScaler) -> None:
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "properties", properties)
        object.__setattr__(self, "scaler", scaler)
        object.__setattr__(self, "skipped_steps", 0)
        object.__setattr__(self, "_unscaled", False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            setattr(self.optimizer, name, value)

    @property
    def param_groups(self) -> list[dict]:
        """The wrapped optimizer's parameter groups."""
        return self.optimizer.param_groups

    def autocast(self) -> autocast:
        """The level's autocast context (O1: enabled in the level's format; else disabled)."""
        p = self.properties
        return autocast(p.autocast_dtype, enabled=bool(p.patch_torch_functions))

    def promote_grads(self) -> None:
        """Replace every gradient narrower than fp32 by its exact fp32 copy (Apex O2 copies
        the fp16 model gradients into fp32 master gradients before unscaling, so unscaling
        does not underflow again)."""
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is not None and g.dtype.itemsize < 4 and contains(FP32, p.grad_fmt):
                    # fp16 / bf16 -> fp32 is exact: widen's table / shift give astype's
                    # bits without its slow fp16 subnormals; fp16's float32 table quiets
                    # signalling NaNs, which astype keeps (a NaN: astype)
                    w = widen(g, np.float32)
                    if g.dtype == np.float16 and g.size and np.isnan(w.max()):
                        w = g.astype(np.float32)
                    p.set_grad_(w)

    def _unscale(self) -> None:
        """scale_loss's exit: master gradients, then unscale and check (once per iteration)."""
        if self.properties.master_weights:
            self.promote_grads()
        self.scaler.unscale_(self.optimizer)
        object.__setattr__(self, "_unscaled", True)

    def step(self, closure: Callable | None = None) -> Any:
        """Apply the update (skipped after an inf/NaN gradient under a dynamic scale)."""
        if not self._unscaled:
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        object.__setattr__(self, "_unscaled", False)
        if closure is not None:
            raise RuntimeError("closures are not supported with amp loss scaling")
        out = self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scaler.history[-1]["skipped"]:
            object.__setattr__(self, "skipped_steps", self.skipped_steps + 1)
        return out

    @property
    def last_step_skipped(self) -> bool:
        """Whether the last scaled step was skipped."""
        h = self.scaler.history
        return bool(h and h[-1]["skipped"])

    def __repr__(self) -> str:
        return f"AmpOptimizer(opt_level={self.properties.opt_level!r}, {self.optimizer!r})"


def initialize(model: Any, optimizer: Any = None, opt_level: str | OptLevel = "O1", *,
               cast_model_type: Format | str | None = None,
               patch_torch_functions: bool | None = None,
               keep_batchnorm_fp32: bool | None = None, master_weights: bool | None = None,
               loss_scale: float | str | None = None, dtype: Format | str = FP16,
               init_scale: float = 2.0**16, scale_window: int = 2000,
               min_loss_scale: float | None = None, max_loss_scale: float = 2.0**24
               ) -> tuple[Any, Any]:
    """Prepare ``model`` (an :class:`fpsim.nn.Module`, changed in place as Apex does) and
    ``optimizer`` (an :class:`fpsim.optim.Optimizer` over the model's parameters) for
    ``opt_level``; returns ``(model, optimizer)``, the optimizer an :class:`AmpOptimizer`
    (``optimizer=None`` returns ``(model, None)``).

    Overrides as Apex: ``cast_model_type``, ``patch_torch_functions``,
    ``keep_batchnorm_fp32``, ``master_weights``, ``loss_scale`` ("dynamic" or a number);
    the dynamic scaler's ``init_scale``, ``scale_window``, ``min_loss_scale``,
    ``max_loss_scale``. fpsim's addition: ``dtype``, the low-precision format of the level
    (fp16 by default; "bf16" gives the same levels in bfloat16).

    >>> from fpsim import nn, optim
    >>> m = nn.Linear(2, 2, rng=0)
    >>> m, opt = initialize(m, optim.SGD(m.parameters(), lr=0.1), "O3")
    >>> m.weight.fmt.name, opt.master_weights, opt.state_fmt.name, opt.scaler.get_scale()
    ('fp16', False, 'fp16', 1.0)
    """
    level = get_opt_level(opt_level)
    low = as_format(dtype)
    if cast_model_type is not None:
        cast_model_type = as_format(cast_model_type)
    elif level.cast_model_type is not None and level.cast_model_type != FP32:
        cast_model_type = low  # O2 / O3 cast to the level's low-precision format
    props = AmpProperties.from_level(
        level, cast_model_type=cast_model_type, patch_torch_functions=patch_torch_functions,
        keep_batchnorm_fp32=keep_batchnorm_fp32, master_weights=master_weights,
        loss_scale=loss_scale, autocast_dtype=low)
    if props.master_weights and props.cast_model_type in (None, FP32):
        raise ValueError(f"master_weights=True needs a low-precision model (opt_level "
                         f"{props.opt_level} keeps the weights in fp32); use O2 or set "
                         "cast_model_type")
    if not hasattr(model, "modules") or not hasattr(model, "parameters"):
        raise TypeError(f"initialize expects an fpsim.nn.Module, got {type(model).__name__}")
    if any(p.fmt != FP32 for p in model.parameters()):
        raise ValueError("initialize expects a model with fp32 parameters (as Apex: build the "
                         "model in fp32 and let the opt level cast it)")

    cast_type = props.cast_model_type
    if cast_type is not None and cast_type != FP32:
        _cast_model(model, cast_type, bool(props.keep_batchnorm_fp32))
        _patch_forward(model, cast_type, FP32, None)
    elif props.patch_torch_functions:
        _patch_forward(model, None, FP32, lambda: autocast(props.autocast_dtype))

    if optimizer is None:
        return model, None
    if isinstance(optimizer, AmpOptimizer):
        raise ValueError("this optimizer was already initialized by fpsim.amp.initialize")
    if not hasattr(optimizer, "param_groups"):
        raise TypeError(f"initialize expects an fpsim.optim optimizer, got "
                        f"{type(optimizer).__name__}")
    if hasattr(optimizer, "master_weights"):
        optimizer.master_weights = bool(props.master_weights)
    if cast_type is not None and cast_type != FP32 and not props.master_weights \
            and hasattr(optimizer, "state_fmt"):
        optimizer.state_fmt = cast_type  # O3: state created like the low-precision params
    scaler = ApexLossScaler(loss_scale=props.loss_scale, init_scale=init_scale,
                            scale_window=scale_window, min_loss_scale=min_loss_scale,
                            max_loss_scale=max_loss_scale)
    return model, AmpOptimizer(optimizer, props, scaler)


def _amp_optimizer(optimizer: Any) -> AmpOptimizer:
    if not isinstance(optimizer, AmpOptimizer):
        raise TypeError("scale_loss needs an optimizer returned by fpsim.amp.initialize, got "
                        f"{type(optimizer).__name__}")
    return optimizer


@contextlib.contextmanager
def scale_loss(loss: Any, optimizer: AmpOptimizer) -> Iterator[Any]:
    """Apex's ``with amp.scale_loss(loss, optimizer) as scaled_loss: scaled_loss.backward()``.

    Yields ``loss * scale``; on exit prepares the gradients for ``optimizer.step()``: fp32
    master gradients (O2), unscaled, checked for inf/NaN. With no master weights and a static
    scale of 1 it yields the loss unchanged and does nothing on exit (Apex's shortcut).

    >>> from fpsim import nn, optim
    >>> from fpsim.autograd import Tensor
    >>> m = nn.Linear(2, 1, rng=0)
    >>> m, opt = initialize(m, optim.SGD(m.parameters(), lr=0.1), "O2", loss_scale=1024.0)
    >>> with scale_loss(m(Tensor([[1.0, 2.0]])).sum(), opt) as scaled:
    ...     float(scaled.item() / m(Tensor([[1.0, 2.0]])).sum().item())
    ...     scaled.backward()
    1024.0
    >>> m.weight.grad.tolist()  # unscaled again: d(sum)/dw = x
    [[1.0, 2.0]]
    """
    opt = _amp_optimizer(optimizer)
    scaler = opt.scaler
    if not opt.properties.master_weights and not scaler.dynamic and scaler.get_scale() == 1.0:
        yield loss
        return
    yield scaler.scale(loss)
    opt._unscale()
