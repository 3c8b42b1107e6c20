"""Calibration observers: running min / max statistics turned into scale and zero point.

NumPy ports of PyTorch 2.x's ``MinMaxObserver``, ``MovingAverageMinMaxObserver`` and
``PerChannelMinMaxObserver`` (``torch/ao/quantization/observer.py``), with the same defaults
(quint8, per-tensor affine; per-channel affine on ``ch_axis=0``), the same float32 arithmetic
(the moving average is ``min + c * (cur - min)`` with ``c = float32(0.01)``, each operation
rounded to float32) and the same qparams (:func:`~fpsim.quant.qparams.calculate_qparams`).

PyTorch's usual choices for static quantization: activations
``MinMaxObserver(dtype="quint8")`` (affine ``[0, 255]``), weights
``PerChannelMinMaxObserver(dtype="qint8", qscheme="per_channel_symmetric")``.

Differences, on purpose: calibration data with NaN or infinity raises ValueError (PyTorch
would carry NaN into the scale); a change of the channel count raises ValueError.
"""

from __future__ import annotations

import numpy as np

from .qparams import (
    FLOAT32_EPS,
    QDtype,
    QScheme,
    as_eps32,
    as_qdtype,
    as_qscheme,
    calculate_qmin_qmax,
    calculate_qparams,
)

__all__ = ["MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver"]


def _as_float32_data(x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiubV":
        raise TypeError(f"observer input must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float32)  # PyTorch: x.to(self.min_val.dtype), float32
    if arr.size and not np.isfinite(arr).all():
        bad = "NaN" if np.isnan(arr).any() else "infinity"
        raise ValueError(f"calibration data contains {bad}; an observer needs finite values")
    return arr


class _ObserverBase:
    """Shared state: dtype, qscheme, quantization range and eps."""

    _per_channel = False

    def __init__(self, dtype: QDtype | str = "quint8",
                 qscheme: QScheme | str = "per_tensor_affine", reduce_range: bool = False,
                 quant_min: int | None = None, quant_max: int | None = None,
                 eps: float = FLOAT32_EPS) -> None:
        self.dtype = as_qdtype(dtype)
        self.qscheme = as_qscheme(qscheme)
        if self.qscheme.per_channel != self._per_channel:
            valid = [q.value for q in QScheme if q.per_channel == self._per_channel]
            raise ValueError(f"{type(self).__name__} does not support qscheme "
                             f"{self.qscheme.value!r}; valid: {', '.join(valid)}")
        if self.qscheme.symmetric and reduce_range and self.dtype is QDtype.QUINT8:
            raise ValueError("cannot reduce range for symmetric quantization for quint8")
        self.reduce_range = bool(reduce_range)
        self.quant_min, self.quant_max, self.has_customized_qrange = calculate_qmin_qmax(
            quant_min, quant_max, self.dtype, self.reduce_range)
        self.eps = as_eps32(eps)
        self.reset_min_max_vals()

    def reset_min_max_vals(self) -> None:
        """Forget the statistics (min = +inf, max = -inf)."""
        self.min_val = np.array(np.inf, np.float32)
        self.max_val = np.array(-np.inf, np.float32)

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):  # pragma: no cover - overridden
        raise NotImplementedError

    def calculate_qparams(self) -> tuple[np.ndarray, np.ndarray]:
        """(scale float32, zero_point int64) from the statistics so far."""
        return calculate_qparams(self.min_val, self.max_val, self.quant_min, self.quant_max,
                                 self.qscheme, self.dtype, self.eps, self.has_customized_qrange)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(min_val={self.min_val}, max_val={self.max_val}, "
                f"dtype={self.dtype.value}, qscheme={self.qscheme.value}, "
                f"quant_min={self.quant_min}, quant_max={self.quant_max})")


class MinMaxObserver(_ObserverBase):
    """Running minimum and maximum of everything observed (PyTorch ``MinMaxObserver``).

    >>> obs = MinMaxObserver(dtype="qint8", qscheme="per_tensor_symmetric")
    >>> _ = obs([-0.5, 0.25]); _ = obs([1.0])
    >>> float(obs.min_val), float(obs.max_val)
    (-0.5, 1.0)
    >>> s, z = obs.calculate_qparams()
    >>> float(s[0]) == float(np.float32(1.0) / np.float32(127.5)), int(z[0])
    (True, 0)
    """

    def forward(self, x):
        """Update the statistics with ``x``; returns ``x`` unchanged (an observer is a pass-
        through in the graph)."""
        arr = _as_float32_data(x)
        if arr.size == 0:
            return x
        self.min_val = np.minimum(arr.min(), self.min_val)
        self.max_val = np.maximum(arr.max(), self.max_val)
        return x


class MovingAverageMinMaxObserver(_ObserverBase):
    """Exponential moving averages of the per-batch min and max (PyTorch
    ``MovingAverageMinMaxObserver``): the first batch sets them, each later one moves them by
    ``averaging_constant`` (0.01) of the difference.

    >>> obs = MovingAverageMinMaxObserver()
    >>> _ = obs([0.0, 1.0]); _ = obs([0.0, 2.0])
    >>> float(obs.max_val) == float(np.float32(1) + np.float32(0.01) * np.float32(1))
    True
    """

    def __init__(self, averaging_constant: float = 0.01, dtype: QDtype | str = "quint8",
                 qscheme: QScheme | str = "per_tensor_affine", reduce_range: bool = False,
                 quant_min: int | None = None, quant_max: int | None = None,
                 eps: float = FLOAT32_EPS) -> None:
        if isinstance(averaging_constant, bool) or not isinstance(
                averaging_constant, (int, float, np.integer, np.floating)):
            raise TypeError(f"averaging_constant must be a real number in (0, 1], got "
                            f"{type(averaging_constant).__name__} {averaging_constant!r}")
        if not 0 < float(averaging_constant) <= 1:
            raise ValueError(f"averaging_constant must be in (0, 1], got {averaging_constant}")
        self.averaging_constant = float(averaging_constant)
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps)

    def forward(self, x):
        """Update the moving averages with the min and max of ``x``; returns ``x``."""
        arr = _as_float32_data(x)
        if arr.size == 0:
            return x
        cur_min, cur_max = arr.min(), arr.max()
        if self.min_val == np.inf and self.max_val == -np.inf:
            self.min_val, self.max_val = np.float32(cur_min), np.float32(cur_max)
        else:
            c = np.float32(self.averaging_constant)  # PyTorch casts the Python scalar to float
            self.min_val = self.min_val + c * (cur_min - self.min_val)
            self.max_val = self.max_val + c * (cur_max - self.max_val)
        self.min_val = np.asarray(self.min_val, np.float32)
        self.max_val = np.asarray(self.max_val, np.float32)
        return x


class PerChannelMinMaxObserver(_ObserverBase):
    """Running min and max per channel along ``ch_axis`` (PyTorch
    ``PerChannelMinMaxObserver``); qparams have one entry per channel.

    >>> obs = PerChannelMinMaxObserver(dtype="qint8", qscheme="per_channel_symmetric")
    >>> _ = obs(np.array([[1.0, -2.0], [0.5, 0.25]]))
    >>> obs.min_val.tolist(), obs.max_val.tolist()
    ([-2.0, 0.25], [1.0, 0.5])
    >>> s, z = obs.calculate_qparams()
    >>> s.shape, z.tolist()
    ((2,), [0, 0])
    """

    _per_channel = True

    def __init__(self, ch_axis: int = 0, dtype: QDtype | str = "quint8",
                 qscheme: QScheme | str = "per_channel_affine", reduce_range: bool = False,
                 quant_min: int | None = None, quant_max: int | None = None,
                 eps: float = FLOAT32_EPS) -> None:
        if isinstance(ch_axis, bool) or not isinstance(ch_axis, (int, np.integer)):
            raise TypeError(f"ch_axis must be an int, got {ch_axis!r}")
        self.ch_axis = int(ch_axis)
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps)

    def reset_min_max_vals(self) -> None:
        """Forget the statistics (no channels seen)."""
        self.min_val = np.zeros(0, np.float32)
        self.max_val = np.zeros(0, np.float32)

    def forward(self, x):
        """Update the per-channel statistics with ``x``; returns ``x``."""
        arr = _as_float32_data(x)
        if arr.size == 0:
            return x
        if not -arr.ndim <= self.ch_axis < arr.ndim:
            raise ValueError(f"ch_axis {self.ch_axis} is out of range for a {arr.ndim}-d input")
        y = np.moveaxis(arr, self.ch_axis, 0).reshape(arr.shape[self.ch_axis], -1)
        cur_min, cur_max = y.min(axis=1), y.max(axis=1)
        if self.min_val.size == 0:
            self.min_val, self.max_val = cur_min, cur_max
        else:
            if cur_min.shape != self.min_val.shape:
                raise ValueError(f"channel count changed from {self.min_val.size} to "
                                 f"{cur_min.size} along ch_axis {self.ch_axis}")
            self.min_val = np.minimum(cur_min, self.min_val)
            self.max_val = np.maximum(cur_max, self.max_val)
        return x

    def calculate_qparams(self) -> tuple[np.ndarray, np.ndarray]:
        """(scales float32 (C,), zero_points int64 (C,)); before any data, PyTorch's default
        ``([1.0], [0])`` with a warning."""
        if self.min_val.size == 0:
            return calculate_qparams(np.inf, -np.inf, self.quant_min, self.quant_max,
                                     QScheme.PER_TENSOR_AFFINE, self.dtype, self.eps)
        return super().calculate_qparams()
