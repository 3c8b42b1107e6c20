"""Quantization-aware training and post-training quantization on the autograd engine, in the
manner of PyTorch's eager mode (``torch.ao.quantization``): ``prepare`` / ``prepare_qat`` wrap
the Linear and Conv2d layers of a model with observers or fake quantizers, the model is
calibrated or trained, and ``convert`` turns it into integer-only inference layers
(:class:`~fpsim.quant.layers.Int8Linear`, :class:`~fpsim.quant.layers.Int8Conv2d`).

- :func:`fake_quantize_ste`: the differentiable fake quantization of PyTorch's
  ``fake_quantize_per_tensor_affine`` / ``..._per_channel_affine``: the forward pass is
  :func:`fpsim.quant.fake_quantize` (PyTorch's CPU kernel to the bit), the backward pass the
  clipped straight-through estimator: the gradient passes where ``quant_min <= round(x / s +
  z) <= quant_max`` (computed as the kernel does, :func:`fpsim.quant.fake_quantize_ste_mask`)
  and is 0 elsewhere.
- :class:`FakeQuantize`: observer + fake quantization, as ``torch.ao.quantization.FakeQuantize``
  (``enable_observer`` / ``disable_observer`` / ``enable_fake_quant`` / ``disable_fake_quant``;
  the module-level functions of the same names work with ``model.apply``).
- :func:`lsq_fake_quantize` and :class:`LSQFakeQuantize`: LSQ (Esser et al., ICLR 2020), a
  learnable step size ``s`` (a Parameter) initialised to ``2 mean|v| / sqrt(Q_P)`` on the first
  tensor seen; its gradient is :func:`fpsim.quant.lsq_grad` times the incoming gradient,
  summed, times ``1 / sqrt(N * Q_P)`` (N = the tensor's element count, as PyTorch's
  ``_LearnableFakeQuantize``; the paper counts the features of one sample for activations).
- :class:`QConfig`, :func:`get_default_qconfig` (PTQ observers) and
  :func:`get_default_qat_qconfig` (fake quantizers), for ``bits`` in 2..8.

PyTorch's defaults, used here: activations quint8 ``[0, 2**bits - 1]`` per-tensor affine
(QAT: ``MovingAverageMinMaxObserver``; PTQ: ``MinMaxObserver``), weights qint8
``[-2**(bits-1), 2**(bits-1) - 1]`` symmetric, per channel on axis 0 (QAT:
``MovingAveragePerChannelMinMaxObserver``; PTQ: ``PerChannelMinMaxObserver``) or per tensor.
One difference: PyTorch's fbgemm qconfigs set ``reduce_range`` (7-bit activations) because
x86's ``VPMADDUBSW`` saturates 16-bit pair sums; fpsim's int32 accumulation cannot saturate,
so the full range is used (pass your own QConfig to reduce it).

Each wrapped layer fake-quantizes (or observes) its input, its weight and its output (after a
ReLU that directly follows it in a Sequential, which is fused as PyTorch's ``LinearReLU``). In
a Sequential, a layer fed by a wrapped layer (possibly through Identity, Flatten, ReLU or
MaxPool2d, which keep values on the grid) reuses that layer's output quantization instead of
quantizing its input again, as an integer pipeline does.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import nn
from ..autograd import functional as F
from ..autograd.context import round_to, widen
from ..autograd.tensor import Tensor, make_result, no_grad
from ..formats import FP32, FP64
from ..nn.module import Module, Parameter, as_module
from .fake_quant import (
    fake_quantize,
    fake_quantize_per_channel,
    fake_quantize_ste_mask,
    lsq_grad,
    lsq_grad_scale,
    lsq_init_step,
)
from .layers import Int8Conv2d, Int8Linear, QParams, check_bits
from .observers import MinMaxObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver
from .qparams import FLOAT32_EPS, as_qdtype, quant_range

__all__ = [
    "MovingAveragePerChannelMinMaxObserver",
    "fake_quantize_ste",
    "lsq_fake_quantize",
    "FakeQuantize",
    "LSQFakeQuantize",
    "ObserverModule",
    "enable_observer",
    "disable_observer",
    "enable_fake_quant",
    "disable_fake_quant",
    "QConfig",
    "get_default_qconfig",
    "get_default_qat_qconfig",
    "QATLinear",
    "QATConv2d",
    "ObservedLinear",
    "ObservedConv2d",
    "prepare",
    "prepare_qat",
    "quantize_ptq",
    "convert",
]


class MovingAveragePerChannelMinMaxObserver(PerChannelMinMaxObserver):
    """Per-channel moving averages of min and max (PyTorch's
    ``MovingAveragePerChannelMinMaxObserver``, the observer of its default per-channel weight
    fake quantizer): the first tensor sets them, each later one moves them by
    ``averaging_constant`` of the difference, in float32.

    >>> obs = MovingAveragePerChannelMinMaxObserver(dtype="qint8",
    ...                                             qscheme="per_channel_symmetric")
    >>> _ = obs(np.array([[1.0, -1.0]])); _ = obs(np.array([[3.0, -1.0]]))
    >>> obs.max_val.tolist() == [np.float32(1) + np.float32(0.01) * np.float32(2)]
    True
    """

    def __init__(self, averaging_constant: float = 0.01, ch_axis: int = 0,
                 dtype="quint8", qscheme="per_channel_affine", reduce_range: bool = False,
                 quant_min: int | None = None, quant_max: int | None = None,
                 eps: float = FLOAT32_EPS) -> None:
        if not 0 < float(averaging_constant) <= 1:
            raise ValueError(f"averaging_constant must be in (0, 1], got {averaging_constant}")
        self.averaging_constant = float(averaging_constant)
        super().__init__(ch_axis, dtype, qscheme, reduce_range, quant_min, quant_max, eps)

    def forward(self, x):
        """Update the per-channel moving averages with ``x``; returns ``x``."""
        if self.min_val.size == 0:
            return super().forward(x)
        prev_min, prev_max = self.min_val, self.max_val
        self.reset_min_max_vals()
        super().forward(x)  # the current per-channel min / max (and the input checks)
        cur_min, cur_max = self.min_val, self.max_val
        if cur_min.size == 0:  # empty input: nothing seen
            self.min_val, self.max_val = prev_min, prev_max
            return x
        if cur_min.shape != prev_min.shape:
            self.min_val, self.max_val = prev_min, prev_max
            raise ValueError(f"channel count changed from {prev_min.size} to {cur_min.size} "
                             f"along ch_axis {self.ch_axis}")
        c = np.float32(self.averaging_constant)
        self.min_val = (prev_min + c * (cur_min - prev_min)).astype(np.float32)
        self.max_val = (prev_max + c * (cur_max - prev_max)).astype(np.float32)
        return x


# -- differentiable ops -----------------------------------------------------------------------

def _data(x: Tensor) -> np.ndarray:
    if not isinstance(x, Tensor):
        raise TypeError(f"expected a Tensor, got {type(x).__name__}")
    return x.numpy()


def fake_quantize_ste(x: Tensor, scale, zero_point, quant_min: int, quant_max: int,
                      axis: int | None = None) -> Tensor:
    """Fake quantization with the clipped straight-through gradient (module docstring):
    per tensor (scalar ``scale`` / ``zero_point``) or per channel along ``axis``. The output
    has ``x``'s format.

    >>> x = Tensor([-0.3, 0.26, 2.0], requires_grad=True)
    >>> y = fake_quantize_ste(x, 0.1, 0, -2, 10)
    >>> y.tolist() == [float(np.float32(-0.2)), float(np.float32(0.3)), 1.0]
    True
    >>> y.sum().backward(); x.grad.tolist()  # clamped at both ends: no gradient there
    [0.0, 1.0, 0.0]
    """
    arr = _data(x)
    if axis is None:
        out = fake_quantize(arr, scale, zero_point, quant_min, quant_max)
    else:
        out = fake_quantize_per_channel(arr, scale, zero_point, axis, quant_min, quant_max)
    out = np.asarray(out)
    if out.dtype != x.dtype or x.fmt.dtype is None:
        out = round_to(widen(out), x.fmt)
    mask = fake_quantize_ste_mask(arr, scale, zero_point, quant_min, quant_max, axis=axis)
    return make_result(out, x.fmt, (x,), lambda g: (np.where(mask, widen(g), 0.0),),
                       "fake_quantize")


def lsq_fake_quantize(x: Tensor, scale: Tensor, quant_min: int, quant_max: int,
                      grad_factor: float = 1.0) -> Tensor:
    """Fake quantization with a learnable step size ``scale`` (a one-element Tensor) and zero
    point 0: the forward pass is :func:`fpsim.quant.fake_quantize`; the gradients are
    ``dx = g * mask`` and ``ds = grad_factor * sum(g * lsq_grad(x, s)[1])`` (each product in
    float32 as PyTorch's ``_fake_quantize_learnable_per_tensor_affine`` kernel, the sum in
    float64 with one rounding).

    >>> x = Tensor([0.3, 5.0]); s = Tensor([1.0], requires_grad=True)
    >>> y = lsq_fake_quantize(x, s, -4, 3)
    >>> y.tolist()
    [0.0, 3.0]
    >>> y.sum().backward(); s.grad.tolist()  # round(0.3) - 0.3 = -0.3, plus Q_P = 3
    [2.700000047683716]
    """
    arr = _data(x)
    if not isinstance(scale, Tensor) or scale.numel() != 1:
        raise ValueError("scale must be a one-element Tensor")
    s = float(scale.numpy(np.float32).reshape(-1)[0])
    if not np.isfinite(s) or s <= 0:
        raise ValueError(f"the step size must be finite and positive, got {s}")
    out = np.asarray(fake_quantize(arr, s, 0, quant_min, quant_max))
    if out.dtype != x.dtype or x.fmt.dtype is None:
        out = round_to(widen(out), x.fmt)
    gf = np.float32(grad_factor)

    def backward(g):
        mask, ds = lsq_grad(arr, s, quant_min, quant_max)
        g64 = widen(g)
        gx = np.where(mask, g64, 0.0) if x.requires_grad else None
        gs = None
        if scale.requires_grad:
            with np.errstate(over="ignore", invalid="ignore"):
                per = ds * g64.astype(np.float32) * gf  # float32, as the kernel
            gs = np.array(per.astype(np.float64).sum()).reshape(scale.shape)
        return gx, gs

    return make_result(out, x.fmt, (x, scale), backward, "lsq_fake_quantize")


# -- quantizer modules ------------------------------------------------------------------------

def _never_observed(what: str) -> ValueError:
    return ValueError(f"{what} has seen no data: run calibration batches (PTQ) or training "
                      "steps (QAT) through the prepared model before convert")


class FakeQuantize(Module):
    """An observer followed by fake quantization, as ``torch.ao.quantization.FakeQuantize``:
    ``observer`` is an observer class (default :class:`~fpsim.quant.MovingAverageMinMaxObserver`),
    ``quant_min`` / ``quant_max`` a custom integer range (checked against ``dtype``) and
    ``observer_kwargs`` go to the observer (``dtype``, ``qscheme``, ``ch_axis``, ...).

    ``forward(x)``: if the observer is enabled, observe ``x`` and store the new ``scale`` /
    ``zero_point``; if fake quantization is enabled, return :func:`fake_quantize_ste` of ``x``
    with them (per channel along ``ch_axis`` for per-channel schemes). As in PyTorch, the
    observer runs whenever it is enabled, in evaluation mode too: disable it to freeze the
    scales.

    >>> fq = FakeQuantize(quant_min=0, quant_max=15)  # a 4-bit activation grid
    >>> fq(Tensor([-1.0, 2.0, 0.5, 0.3])).tolist()  # s = 3 / 15, z = 5
    [-1.0, 2.0, 0.4000000059604645, 0.4000000059604645]
    >>> fq.scale.tolist(), fq.zero_point.tolist()
    ([0.20000000298023224], [5.0])
    """

    def __init__(self, observer: Callable = MovingAverageMinMaxObserver,
                 quant_min: int | None = None, quant_max: int | None = None,
                 **observer_kwargs) -> None:
        super().__init__()
        if (quant_min is None) != (quant_max is None):
            raise ValueError("give both quant_min and quant_max, or neither")
        if quant_min is not None:
            fmt = as_qdtype(observer_kwargs.get("dtype", "quint8")).int_format
            if not fmt.min <= quant_min < quant_max <= fmt.max:
                raise ValueError(f"quant range [{quant_min}, {quant_max}] must be non-empty "
                                 f"and inside {fmt.name} [{fmt.min}, {fmt.max}]")
            observer_kwargs.update(quant_min=quant_min, quant_max=quant_max)
        self.activation_post_process = observer(**observer_kwargs)
        obs = self.activation_post_process
        self.quant_min, self.quant_max = obs.quant_min, obs.quant_max
        self.dtype, self.qscheme = obs.dtype, obs.qscheme
        self.ch_axis = obs.ch_axis if obs.qscheme.per_channel else None
        self.register_buffer("scale", Tensor([1.0], FP32), cast=False)
        self.register_buffer("zero_point", Tensor([0.0], FP64), cast=False)
        self.fake_quant_enabled = True
        self.observer_enabled = True
        self.observed = False

    def enable_fake_quant(self, enabled: bool = True) -> FakeQuantize:
        """Turn fake quantization on (or off with ``enabled=False``)."""
        self.fake_quant_enabled = bool(enabled)
        return self

    def disable_fake_quant(self) -> FakeQuantize:
        """Pass inputs through unchanged (the observer may still run)."""
        return self.enable_fake_quant(False)

    def enable_observer(self, enabled: bool = True) -> FakeQuantize:
        """Turn the observer on (or off with ``enabled=False``)."""
        self.observer_enabled = bool(enabled)
        return self

    def disable_observer(self) -> FakeQuantize:
        """Freeze the scale and zero point."""
        return self.enable_observer(False)

    def calculate_qparams(self) -> tuple[np.ndarray, np.ndarray]:
        """The observer's (scale, zero_point)."""
        return self.activation_post_process.calculate_qparams()

    def forward(self, x: Tensor) -> Tensor:
        if self.observer_enabled:
            self.activation_post_process(_data(x))
            s, z = self.calculate_qparams()
            self.scale = Tensor(s, FP32)
            self.zero_point = Tensor(z.astype(np.float64), FP64)
            self.observed = True
        if not self.fake_quant_enabled:
            return x
        s = self.scale.numpy(np.float32)
        z = self.zero_point.numpy(np.float64).astype(np.int64)
        if self.ch_axis is None:
            return fake_quantize_ste(x, s[0], z[0], self.quant_min, self.quant_max)
        return fake_quantize_ste(x, s, z, self.quant_min, self.quant_max, axis=self.ch_axis)

    def qparams(self) -> QParams:
        """The current quantization as :class:`~fpsim.quant.layers.QParams`."""
        if not self.observed:
            raise _never_observed(type(self).__name__)
        s = self.scale.numpy(np.float32)
        z = self.zero_point.numpy(np.float64).astype(np.int64)
        return QParams(s, z, self.quant_min, self.quant_max, self.ch_axis)

    def extra_repr(self) -> str:
        return (f"fake_quant_enabled={self.fake_quant_enabled}, "
                f"observer_enabled={self.observer_enabled}, quant_min={self.quant_min}, "
                f"quant_max={self.quant_max}, dtype={self.dtype.value}, "
                f"qscheme={self.qscheme.value}, ch_axis={self.ch_axis}")


class LSQFakeQuantize(Module):
    """LSQ fake quantization (module docstring): a ``bits``-bit symmetric grid, signed
    ``[-2**(bits-1), 2**(bits-1) - 1]`` or unsigned ``[0, 2**bits - 1]`` (``signed=None``:
    unsigned when the first tensor seen has no negative value), zero point 0, and the step
    size ``scale`` a :class:`~fpsim.nn.Parameter` initialised on the first forward.

    >>> fq = LSQFakeQuantize(bits=4, signed=True)
    >>> _ = fq(Tensor([-1.0, 0.5, 2.0, 0.5]))   # s = 2 * mean|v| / sqrt(7)
    >>> round(fq.scale.item(), 6), (fq.quant_min, fq.quant_max)
    (0.755929, (-8, 7))
    """

    def __init__(self, bits: int = 8, signed: bool | None = None) -> None:
        super().__init__()
        self.bits = check_bits(bits)
        self.signed = signed
        self.quant_min = self.quant_max = None
        if signed is not None:
            self.quant_min, self.quant_max = quant_range(self.bits, bool(signed))
        self.scale = Parameter([1.0], FP32)
        self.initialized = False
        self.fake_quant_enabled = True

    def enable_fake_quant(self, enabled: bool = True) -> LSQFakeQuantize:
        """Turn fake quantization on (or off with ``enabled=False``)."""
        self.fake_quant_enabled = bool(enabled)
        return self

    def disable_fake_quant(self) -> LSQFakeQuantize:
        """Pass inputs through unchanged."""
        return self.enable_fake_quant(False)

    def initialize(self, v) -> None:
        """Set the range from ``v`` (if not given) and the step to ``2 mean|v| / sqrt(Q_P)``."""
        arr = np.asarray(v.numpy(np.float64) if isinstance(v, Tensor) else v, np.float64)
        if not np.isfinite(arr).all():
            raise ValueError("LSQ initialisation data contains NaN or infinity")
        if arr.size == 0 or not np.abs(arr).max() > 0:
            raise ValueError("cannot initialise the LSQ step size from an all-zero tensor "
                             "(a zero range gives a step of 0)")
        if self.quant_min is None:
            self.signed = bool((arr < 0).any())
            self.quant_min, self.quant_max = quant_range(self.bits, self.signed)
        self.scale.data = [lsq_init_step(arr, self.quant_max)]
        self.initialized = True

    def forward(self, x: Tensor) -> Tensor:
        if not self.initialized:
            self.initialize(x)
        if not self.fake_quant_enabled:
            return x
        s = self.scale.numpy(np.float32)[0]
        if not np.isfinite(s):
            raise ValueError(f"the LSQ step size is {s} (training diverged)")
        if s < FLOAT32_EPS:  # PyTorch's _LearnableFakeQuantize clamps the parameter to eps
            self.scale.data = [FLOAT32_EPS]
        grad_factor = lsq_grad_scale(max(x.numel(), 1), self.quant_max)
        return lsq_fake_quantize(x, self.scale, self.quant_min, self.quant_max, grad_factor)

    def qparams(self) -> QParams:
        """The learned step as per-tensor :class:`~fpsim.quant.layers.QParams`, zero point 0."""
        if not self.initialized:
            raise _never_observed(type(self).__name__)
        return QParams(self.scale.numpy(np.float32).copy(), [0], self.quant_min,
                       self.quant_max)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, signed={self.signed}, initialized={self.initialized}"


class ObserverModule(Module):
    """An observer as a pass-through module (PTQ calibration): ``forward(x)`` records ``x``
    and returns it unchanged.

    >>> om = ObserverModule(MinMaxObserver(quant_min=0, quant_max=15))
    >>> _ = om(Tensor([0.0, 3.0])); om.qparams().scale.tolist()
    [0.20000000298023224]
    """

    def __init__(self, observer) -> None:
        if not all(hasattr(observer, a) for a in ("quant_min", "quant_max", "qscheme")):
            raise TypeError(f"ObserverModule takes an observer (MinMaxObserver, "
                            f"MovingAverageMinMaxObserver, PerChannelMinMaxObserver, ...), got "
                            f"{type(observer).__name__} {observer!r}")
        super().__init__()
        self.observer = observer
        self.quant_min, self.quant_max = observer.quant_min, observer.quant_max
        self.ch_axis = observer.ch_axis if observer.qscheme.per_channel else None
        self.observed = False

    def forward(self, x: Tensor) -> Tensor:
        self.observer(_data(x))
        self.observed = True
        return x

    def qparams(self) -> QParams:
        """The observer's qparams as :class:`~fpsim.quant.layers.QParams`."""
        if not self.observed:
            raise _never_observed(type(self.observer).__name__)
        s, z = self.observer.calculate_qparams()
        return QParams(s, z, self.quant_min, self.quant_max, self.ch_axis)

    def extra_repr(self) -> str:
        return repr(self.observer)


def _set_flag(method: str, mod: Module) -> None:
    fn = getattr(mod, method, None)
    if isinstance(mod, (FakeQuantize, LSQFakeQuantize)) and fn is not None:
        fn()


def enable_observer(mod: Module) -> None:
    """``model.apply(enable_observer)``: turn the observers of FakeQuantize modules on."""
    _set_flag("enable_observer", mod)


def disable_observer(mod: Module) -> None:
    """``model.apply(disable_observer)``: freeze the scales of FakeQuantize modules."""
    _set_flag("disable_observer", mod)


def enable_fake_quant(mod: Module) -> None:
    """``model.apply(enable_fake_quant)``: fake quantization on."""
    _set_flag("enable_fake_quant", mod)


def disable_fake_quant(mod: Module) -> None:
    """``model.apply(disable_fake_quant)``: fake quantization off (float forward)."""
    _set_flag("disable_fake_quant", mod)


# -- qconfigs ------------------------------------------------------------------------------

@dataclass(frozen=True)
class QConfig:
    """Factories of the activation and weight quantizer modules (as ``torch.ao``'s
    ``QConfig``): each call returns a new module."""

    activation: Callable[[], Module]
    weight: Callable[[], Module]


def _observer_module(cls, **kw) -> ObserverModule:
    return ObserverModule(cls(**kw))


def get_default_qconfig(bits: int = 8, per_channel: bool = True) -> QConfig:
    """PTQ observers: activations ``MinMaxObserver`` quint8 ``[0, 2**bits - 1]`` per-tensor
    affine; weights qint8 ``[-2**(bits-1), 2**(bits-1) - 1]`` symmetric, per channel on axis 0
    (``PerChannelMinMaxObserver``) or per tensor (``MinMaxObserver``).

    >>> qc = get_default_qconfig(4); w = qc.weight()
    >>> (w.quant_min, w.quant_max), w.ch_axis
    ((-8, 7), 0)
    """
    b = check_bits(bits)
    aqmin, aqmax = quant_range(b, signed=False)
    wqmin, wqmax = quant_range(b, signed=True)
    act = functools.partial(_observer_module, MinMaxObserver, dtype="quint8",
                            qscheme="per_tensor_affine", quant_min=aqmin, quant_max=aqmax)
    if per_channel:
        weight = functools.partial(_observer_module, PerChannelMinMaxObserver, ch_axis=0,
                                   dtype="qint8", qscheme="per_channel_symmetric",
                                   quant_min=wqmin, quant_max=wqmax)
    else:
        weight = functools.partial(_observer_module, MinMaxObserver, dtype="qint8",
                                   qscheme="per_tensor_symmetric", quant_min=wqmin,
                                   quant_max=wqmax)
    return QConfig(act, weight)


def get_default_qat_qconfig(bits: int = 8, per_channel: bool = True,
                            learnable: bool = False) -> QConfig:
    """QAT fake quantizers: PyTorch's ``default_fake_quant`` (activations, moving-average
    min / max, quint8 affine) and ``default_per_channel_weight_fake_quant`` (qint8 symmetric,
    axis 0) or ``default_weight_fake_quant`` (per tensor), at ``bits`` bits (full range, see
    the module docstring); ``learnable=True``: :class:`LSQFakeQuantize` for both (weights
    signed, activations signed or unsigned as their first batch).

    >>> qc = get_default_qat_qconfig(8); a = qc.activation()
    >>> type(a).__name__, a.quant_max, a.qscheme.value
    ('FakeQuantize', 255, 'per_tensor_affine')
    >>> get_default_qat_qconfig(16)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unsupported bit width 16 for an integer layer (int8 containers); valid: 2, ...
    """
    b = check_bits(bits)
    if learnable:
        return QConfig(functools.partial(LSQFakeQuantize, bits=b, signed=None),
                       functools.partial(LSQFakeQuantize, bits=b, signed=True))
    aqmin, aqmax = quant_range(b, signed=False)
    wqmin, wqmax = quant_range(b, signed=True)
    act = functools.partial(FakeQuantize, observer=MovingAverageMinMaxObserver,
                            quant_min=aqmin, quant_max=aqmax, dtype="quint8",
                            qscheme="per_tensor_affine")
    if per_channel:
        weight = functools.partial(FakeQuantize, observer=MovingAveragePerChannelMinMaxObserver,
                                   quant_min=wqmin, quant_max=wqmax, dtype="qint8",
                                   qscheme="per_channel_symmetric", ch_axis=0)
    else:
        weight = functools.partial(FakeQuantize, observer=MovingAverageMinMaxObserver,
                                   quant_min=wqmin, quant_max=wqmax, dtype="qint8",
                                   qscheme="per_tensor_symmetric")
    return QConfig(act, weight)


# -- wrapped layers ---------------------------------------------------------------------------

class _Wrapped(Module):
    """A float layer with input / weight / output quantizers (see the module docstring)."""

    _fake_quant_weight = True
    _float_type: type = nn.Linear

    def __init__(self, layer: Module, qconfig: QConfig, *, relu: bool = False,
                 quantize_input: bool = True) -> None:
        super().__init__()
        if not isinstance(layer, self._float_type):
            raise TypeError(f"{type(self).__name__} wraps a {self._float_type.__name__}, got "
                            f"{type(layer).__name__}")
        if not isinstance(qconfig, QConfig):
            raise TypeError(f"qconfig must be a QConfig, got {type(qconfig).__name__}")
        self.weight = layer.weight
        if layer.bias is None:
            self.register_parameter("bias", None)
        else:
            self.bias = layer.bias
        self.relu = bool(relu)
        self.input_quant = qconfig.activation() if quantize_input else None
        self.weight_quant = qconfig.weight()
        self.output_quant = qconfig.activation()

    def _op(self, x: Tensor, w: Tensor) -> Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        if self.input_quant is not None:
            x = self.input_quant(x)
        w = self.weight_quant(self.weight) if self._fake_quant_weight else self.weight
        y = self._op(x, w)
        if self.relu:
            y = F.relu(y)
        return self.output_quant(y)

    def _qparams(self, input_qparams: QParams | None):
        with no_grad():
            self.weight_quant(self.weight)  # PyTorch's from_float observes the final weight
        wqp = self.weight_quant.qparams()
        if self.input_quant is not None:
            iqp = self.input_quant.qparams()
        elif input_qparams is not None:
            iqp = input_qparams
        else:
            raise ValueError(f"{type(self).__name__} takes its input quantization from the "
                             "layer before it, which was not converted with it: convert the "
                             "whole Sequential")
        return iqp, wqp, self.output_quant.qparams()

    def extra_repr(self) -> str:
        return f"relu={self.relu}, quantize_input={self.input_quant is not None}"


class QATLinear(_Wrapped):
    """Linear with fake-quantized input, weight and output (``torch.ao.nn.qat.Linear`` plus
    the activation fake quantizers PyTorch attaches around it); built by :func:`prepare_qat`.

    >>> qat = QATLinear(nn.Linear(2, 1, rng=0), get_default_qat_qconfig())
    >>> qat(Tensor([[0.5, 1.0]])).shape
    (1, 1)
    """

    def _op(self, x, w):
        return F.linear(x, w, self.bias)

    def to_int8(self, input_qparams: QParams | None = None) -> Int8Linear:
        """The :class:`~fpsim.quant.layers.Int8Linear` with this layer's quantization."""
        iqp, wqp, oqp = self._qparams(input_qparams)
        return Int8Linear.from_float(self.weight, self.bias, iqp, wqp, oqp, relu=self.relu)


class QATConv2d(_Wrapped):
    """Conv2d with fake-quantized input, weight (per output channel) and output.

    >>> qat = QATConv2d(nn.Conv2d(1, 2, 3, rng=0), get_default_qat_qconfig())
    >>> qat(Tensor(np.ones((1, 1, 4, 4)))).shape
    (1, 2, 2, 2)
    """

    _float_type = nn.Conv2d

    def __init__(self, layer: Module, qconfig: QConfig, *, relu: bool = False,
                 quantize_input: bool = True) -> None:
        super().__init__(layer, qconfig, relu=relu, quantize_input=quantize_input)
        self.stride, self.padding = layer.stride, layer.padding
        self.dilation = getattr(layer, "dilation", (1, 1))
        self.groups = getattr(layer, "groups", 1)

    def _op(self, x, w):
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def to_int8(self, input_qparams: QParams | None = None) -> Int8Conv2d:
        """The :class:`~fpsim.quant.layers.Int8Conv2d` with this layer's quantization (integer
        padding, no dilation, one group: what the integer kernel implements)."""
        if (isinstance(self.padding, str) or tuple(self.dilation) != (1, 1)
                or self.groups != 1):
            raise ValueError(
                f"Int8Conv2d supports integer padding, dilation 1 and groups 1; this layer has "
                f"padding={self.padding!r}, dilation={self.dilation!r}, groups={self.groups}: "
                "keep it in fake-quantized form (the QAT model) instead of converting it")
        iqp, wqp, oqp = self._qparams(input_qparams)
        return Int8Conv2d.from_float(self.weight, self.bias, iqp, wqp, oqp, relu=self.relu,
                                     stride=self.stride, padding=self.padding)


class ObservedLinear(QATLinear):
    """Linear with observers on its input and output (PTQ calibration; float forward); the
    weight observer runs at :func:`convert`."""

    _fake_quant_weight = False


class ObservedConv2d(QATConv2d):
    """Conv2d with observers on its input and output (PTQ calibration; float forward)."""

    _fake_quant_weight = False


# keep a float value on the quantized grid of the layer before them
_PRESERVING = (nn.Identity, nn.Flatten, nn.ReLU, nn.MaxPool2d)


def _qconfig_for(qconfig, name: str) -> QConfig:
    if isinstance(qconfig, QConfig):
        return qconfig
    qc = qconfig.get(name, qconfig.get(""))
    if not isinstance(qc, QConfig):
        raise TypeError(f"no QConfig for layer {name!r}: give a QConfig, or a dict of layer "
                        "names to QConfigs with a default under ''")
    return qc


def _swap(model: Module, qconfig, linear_cls, conv_cls, fuse_relu: bool) -> list[str]:
    """Wrap every nn.Linear / nn.Conv2d below ``model`` (in place); returns their names."""
    done: list[str] = []

    def visit(mod: Module, prefix: str) -> None:
        kids = list(mod.named_children())  # replaced in place below, order kept
        seq = isinstance(mod, nn.Sequential)
        prev_quantized = False
        i = 0
        while i < len(kids):
            name, child = kids[i]
            full = f"{prefix}.{name}" if prefix else name
            if type(child) in (nn.Linear, nn.Conv2d):
                nxt = kids[i + 1][1] if i + 1 < len(kids) else None
                relu = seq and fuse_relu and isinstance(nxt, nn.ReLU)
                cls = linear_cls if type(child) is nn.Linear else conv_cls
                mod.add_module(name, cls(child, _qconfig_for(qconfig, full), relu=relu,
                                         quantize_input=not (seq and prev_quantized)))
                done.append(full)
                if relu:
                    mod.add_module(kids[i + 1][0], nn.Identity())
                    i += 1
                prev_quantized = seq
            elif seq and isinstance(child, _PRESERVING):
                pass
            else:
                visit(child, full)
                prev_quantized = False
            i += 1

    visit(model, "")
    if not done:
        raise ValueError("the model has no nn.Linear or nn.Conv2d layer to quantize")
    if isinstance(qconfig, dict):
        unknown = sorted(k for k in qconfig if k and k not in done)
        if unknown:
            raise ValueError(f"qconfig names layers that were not found: {unknown}; the "
                             f"quantizable layers are {done}")
    return done


def _root(model: Module, qconfig, linear_cls, conv_cls, fuse_relu: bool) -> Module:
    if type(model) in (nn.Linear, nn.Conv2d):  # a bare layer
        cls = linear_cls if type(model) is nn.Linear else conv_cls
        return cls(model, _qconfig_for(qconfig, ""))
    _swap(model, qconfig, linear_cls, conv_cls, fuse_relu)
    return model


def prepare(model: Module, qconfig: QConfig | dict | None = None, *, inplace: bool = False,
            fuse_relu: bool = True) -> Module:
    """PTQ: wrap the Linear / Conv2d layers with observers (``qconfig`` default
    :func:`get_default_qconfig`; or a dict of layer names, as in ``named_modules``, to
    QConfigs, with the default under ``""``); run calibration batches through the result,
    then :func:`convert`.

    >>> net = nn.Sequential(nn.Linear(4, 3, rng=0), nn.ReLU(), nn.Linear(3, 2, rng=1))
    >>> p = prepare(net, {"": get_default_qconfig(4), "2": get_default_qconfig(8)})
    >>> [type(m).__name__ for m in p], p[2].weight_quant.quant_max
    (['ObservedLinear', 'Identity', 'ObservedLinear'], 127)
    """
    as_module(model, "prepare: model")
    qconfig = get_default_qconfig() if qconfig is None else qconfig
    model = model if inplace else copy.deepcopy(model)
    return _root(model, qconfig, ObservedLinear, ObservedConv2d, fuse_relu)


def prepare_qat(model: Module, qconfig: QConfig | dict | None = None, *,
                inplace: bool = False, fuse_relu: bool = True) -> Module:
    """QAT: wrap the Linear / Conv2d layers with fake quantizers (``qconfig`` default
    :func:`get_default_qat_qconfig`, or a dict as in :func:`prepare`); the parameters are the
    model's own (a copy unless ``inplace``). Train the result, then :func:`convert`.

    >>> net = nn.Sequential(nn.Linear(4, 3, rng=0), nn.ReLU(), nn.Linear(3, 2, rng=1))
    >>> q = prepare_qat(net)
    >>> [type(m).__name__ for m in q], q[2].input_quant is None
    (['QATLinear', 'Identity', 'QATLinear'], True)
    """
    as_module(model, "prepare_qat: model")
    qconfig = get_default_qat_qconfig() if qconfig is None else qconfig
    model = model if inplace else copy.deepcopy(model)
    return _root(model, qconfig, QATLinear, QATConv2d, fuse_relu)


def quantize_ptq(model: Module, calibration_data, qconfig: QConfig | dict | None = None, *,
                 batch_size: int = 64, fuse_relu: bool = True) -> Module:
    """Post-training static quantization in one call: :func:`prepare`, run the calibration
    data (an array, split into batches of ``batch_size``, or an iterable of batches) without a
    graph, :func:`convert`. ``model`` itself is not changed.

    >>> lin = nn.Linear(4, 2, rng=0)
    >>> q = quantize_ptq(lin, np.random.default_rng(0).random((32, 4)))
    >>> type(q).__name__, q.input_qparams.quant_max
    ('Int8Linear', 255)
    """
    as_module(model, "quantize_ptq: model")
    prepared = prepare(model, qconfig, fuse_relu=fuse_relu)
    if isinstance(calibration_data, (np.ndarray, Tensor)):
        data = calibration_data.numpy() if isinstance(calibration_data, Tensor) else \
            calibration_data
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        batches = [data[i:i + int(batch_size)] for i in range(0, len(data), int(batch_size))]
    else:
        batches = calibration_data
    with no_grad():
        for b in batches:
            prepared(b if isinstance(b, Tensor) else Tensor(b))
    return convert(prepared, inplace=True)


def convert(model: Module, *, inplace: bool = False) -> Module:
    """Replace every wrapped layer of a prepared (calibrated or trained) model by its
    integer-only layer (:class:`~fpsim.quant.layers.Int8Linear` / ``Int8Conv2d``), in
    evaluation mode. A layer that has seen no data is an error.

    >>> net = prepare(nn.Sequential(nn.Linear(4, 3, rng=0), nn.ReLU(), nn.Linear(3, 2, rng=1)))
    >>> _ = net(Tensor(np.random.default_rng(0).random((8, 4))))
    >>> [type(m).__name__ for m in convert(net)]
    ['Int8Linear', 'Identity', 'Int8Linear']
    """
    as_module(model, "convert: model")
    model = model if inplace else copy.deepcopy(model)
    if isinstance(model, _Wrapped):
        return model.to_int8().eval()

    def visit(mod: Module) -> None:
        seq = isinstance(mod, nn.Sequential)
        prev = None
        for name, child in list(mod.named_children()):
            if isinstance(child, _Wrapped):
                new = child.to_int8(prev if seq else None)
                mod.add_module(name, new)
                prev = new.output_qparams if seq else None
            elif seq and isinstance(child, _PRESERVING):
                pass
            else:
                visit(child)
                prev = None

    visit(model)
    return model.eval()
