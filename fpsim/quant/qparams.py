"""Quantization parameters: integer ranges and PyTorch's scale / zero-point formulas.

Follows PyTorch 2.x (``torch/ao/quantization/observer.py``, ``_calculate_qparams`` of
``UniformQuantizationObserverBase``, and ``torch/ao/quantization/utils.py``,
``calculate_qmin_qmax``), in float32 as PyTorch computes them:

- symmetric: ``s = max(-min_neg, max_pos) / ((qmax - qmin) / 2)``, ``z = 0`` (``128`` for
  quint8, or the midpoint ``(qmin + qmax) // 2`` of a custom range);
- affine: ``s = (max_pos - min_neg) / (qmax - qmin)``,
  ``z = clamp(qmin - round_half_even(min_neg / s), qmin, qmax)``;

where ``min_neg = min(min, 0)`` and ``max_pos = max(max, 0)`` (the range is widened to contain
0, so that 0 is exact) and ``s`` is raised to at least ``eps`` (float32 eps, 2**-23, by
default). A zero range (min == max == 0) therefore gives ``s = eps`` and ``z = 0`` (or the
symmetric quint8 zero point); only an observer that has seen no data returns PyTorch's
default ``(1.0, 0)``.
"""

from __future__ import annotations

import enum
import numbers
import warnings

import numpy as np

from ..checks import as_int_in
from ..formats import IntFormat

__all__ = [
    "QScheme",
    "QDtype",
    "FLOAT32_EPS",
    "VALID_QUANT_BITS",
    "as_qscheme",
    "as_qdtype",
    "quant_range",
    "calculate_qmin_qmax",
    "calculate_qparams",
]

FLOAT32_EPS = np.float32(np.finfo(np.float32).eps)  # torch.finfo(torch.float32).eps = 2**-23

VALID_QUANT_BITS = (2, 3, 4, 5, 6, 7, 8, 16, 32)


class QScheme(str, enum.Enum):
    """How a tensor is quantized (PyTorch's ``torch.qscheme`` names)."""

    PER_TENSOR_AFFINE = "per_tensor_affine"
    PER_TENSOR_SYMMETRIC = "per_tensor_symmetric"
    PER_CHANNEL_AFFINE = "per_channel_affine"
    PER_CHANNEL_SYMMETRIC = "per_channel_symmetric"

    @property
    def symmetric(self) -> bool:
        """True for the symmetric schemes."""
        return self in (QScheme.PER_TENSOR_SYMMETRIC, QScheme.PER_CHANNEL_SYMMETRIC)

    @property
    def per_channel(self) -> bool:
        """True for the per-channel schemes."""
        return self in (QScheme.PER_CHANNEL_AFFINE, QScheme.PER_CHANNEL_SYMMETRIC)


class QDtype(str, enum.Enum):
    """Quantized integer types (PyTorch's ``torch.qint8``, ``torch.quint8``, ``torch.qint32``)."""

    QINT8 = "qint8"
    QUINT8 = "quint8"
    QINT32 = "qint32"

    @property
    def int_format(self) -> IntFormat:
        """The storage integer format."""
        return {QDtype.QINT8: IntFormat(8, True), QDtype.QUINT8: IntFormat(8, False),
                QDtype.QINT32: IntFormat(32, True)}[self]


_QDTYPE_ALIASES = {"int8": QDtype.QINT8, "uint8": QDtype.QUINT8, "int32": QDtype.QINT32}


def as_qscheme(value: QScheme | str) -> QScheme:
    """The :class:`QScheme` member named by ``value`` (ValueError listing the valid names).

    >>> as_qscheme("per_tensor_symmetric").symmetric
    True
    """
    if isinstance(value, QScheme):
        return value
    if isinstance(value, str):
        key = value.strip().lower().removeprefix("torch.")
        try:
            return QScheme(key)
        except ValueError:
            pass
    valid = ", ".join(repr(q.value) for q in QScheme)
    raise ValueError(f"unknown qscheme {value!r}; valid: {valid}")


def as_qdtype(value: QDtype | str | IntFormat) -> QDtype:
    """The :class:`QDtype` named by ``value``: "qint8", "quint8", "qint32" (also "int8",
    "uint8", "int32" or the matching :class:`~fpsim.IntFormat`).

    >>> as_qdtype("uint8")
    <QDtype.QUINT8: 'quint8'>
    """
    if isinstance(value, QDtype):
        return value
    if isinstance(value, IntFormat):
        for q in QDtype:
            if q.int_format == value:
                return q
    elif isinstance(value, str):
        key = value.strip().lower().removeprefix("torch.")
        if key in _QDTYPE_ALIASES:
            return _QDTYPE_ALIASES[key]
        try:
            return QDtype(key)
        except ValueError:
            pass
    valid = ", ".join(repr(q.value) for q in QDtype)
    raise ValueError(f"unknown quantized dtype {value!r}; valid: {valid} (or int8, uint8, int32)")


def quant_range(bits: int, signed: bool = True, narrow_range: bool = False) -> tuple[int, int]:
    """The integer range ``(qmin, qmax)`` of a ``bits``-bit quantizer.

    Signed: ``[-2**(bits-1), 2**(bits-1) - 1]`` (``narrow_range`` drops the most negative
    value, making the range symmetric, as TensorRT's ``narrow_range``); unsigned:
    ``[0, 2**bits - 1]``. ``bits`` must be one of :data:`VALID_QUANT_BITS`.

    >>> quant_range(8), quant_range(8, signed=False), quant_range(4, narrow_range=True)
    ((-128, 127), (0, 255), (-7, 7))
    """
    bits = as_int_in("bits", bits, VALID_QUANT_BITS, "unsupported bit width {}")
    if signed:
        hi = (1 << (bits - 1)) - 1
        return (-hi if narrow_range else -hi - 1), hi
    if narrow_range:
        raise ValueError("narrow_range applies to signed ranges only")
    return 0, (1 << bits) - 1


def _check_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {v!r}")
    return int(v)


def real_array(value, name: str) -> np.ndarray:
    """``value`` as a float64 array: real numbers only (ints, floats, Fractions, real
    arrays); TypeError naming ``name`` for None, strings, complex or bool values. The argument
    check shared by the quantizers (fake_quant, int8, fp8_scaling); not exported.

    >>> real_array([1, 0.5], "scale").tolist()
    [1.0, 0.5]
    >>> real_array("1", "scale")
    Traceback (most recent call last):
    ...
    TypeError: scale must be a real number (or an array of them), got str '1'
    """
    a = np.asarray(value)
    if a.dtype.kind == "O" and all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                                   for v in a.reshape(-1)):
        return a.astype(np.float64)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a real number (or an array of them), got "
                        f"{type(value).__name__} {value!r}")
    return a.astype(np.float64)


def as_eps32(eps) -> np.float32:
    """The observer's minimum scale as float32: a real number, positive and finite there
    (shared with :mod:`fpsim.quant.observers`; not exported).

    >>> as_eps32(2.0**-20)
    np.float32(9.536743e-07)
    """
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a positive real number, got {type(eps).__name__} {eps!r}")
    with np.errstate(over="ignore", under="ignore"):
        e = np.float32(eps)
    if not (np.isfinite(e) and e > 0):
        raise ValueError(f"eps must be positive and finite in float32, got {eps!r}")
    return e


def calculate_qmin_qmax(
    quant_min: int | None,
    quant_max: int | None,
    dtype: QDtype | str = "quint8",
    reduce_range: bool = False,
) -> tuple[int, int, bool]:
    """The quantization range an observer uses: ``(qmin, qmax, has_customized_qrange)``.

    Without a custom range: qint8 ``[-128, 127]`` (``[-64, 63]`` with ``reduce_range``), quint8
    ``[0, 255]`` (``[0, 127]``), qint32 ``[-2**31, 2**31 - 1]``. A custom range must contain 0,
    have ``quant_min < quant_max`` and fit the dtype's width (PyTorch checks the width of
    qint8 and qint32 ranges; fpsim checks quint8 too); ``reduce_range`` halves it (``// 2``).

    >>> calculate_qmin_qmax(None, None, "qint8")
    (-128, 127, False)
    >>> calculate_qmin_qmax(-8, 7, "qint8")
    (-8, 7, True)
    """
    qdtype = as_qdtype(dtype)
    if (quant_min is None) != (quant_max is None):
        raise ValueError("give both quant_min and quant_max, or neither")
    if quant_min is not None:
        qmin, qmax = _check_int("quant_min", quant_min), _check_int("quant_max", quant_max)
        if not qmin < qmax:
            raise ValueError(f"quant_min must be strictly less than quant_max, got "
                             f"[{qmin}, {qmax}]")
        if not qmin <= 0 <= qmax:
            raise ValueError(f"a user-specified quantization range must include 0, got "
                             f"[{qmin}, {qmax}]")
        fmt = qdtype.int_format
        if qmax - qmin + 1 > (1 << fmt.bits) or qmin < fmt.min or qmax > fmt.max:
            raise ValueError(f"quantization range [{qmin}, {qmax}] does not fit {qdtype.value} "
                             f"[{fmt.min}, {fmt.max}]")
        if reduce_range:
            qmin, qmax = qmin // 2, qmax // 2
        return qmin, qmax, True
    if qdtype is QDtype.QINT8:
        return (-64, 63, False) if reduce_range else (-128, 127, False)
    if qdtype is QDtype.QUINT8:
        return (0, 127, False) if reduce_range else (0, 255, False)
    return -(1 << 31), (1 << 31) - 1, False


def calculate_qparams(
    min_val,
    max_val,
    quant_min: int,
    quant_max: int,
    qscheme: QScheme | str = "per_tensor_affine",
    dtype: QDtype | str = "quint8",
    eps: float = FLOAT32_EPS,
    has_customized_qrange: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Scale (float32) and zero point (int64) from observed min / max values, as PyTorch's
    ``_calculate_qparams``; per-tensor results have shape ``(1,)``, per-channel ``(C,)``.

    ``min_val = +inf, max_val = -inf`` (nothing observed) gives PyTorch's default ``(1.0, 0)``
    with a warning; ``min_val > max_val`` and NaN raise ValueError.

    >>> s, z = calculate_qparams(-1.0, 2.0, 0, 255)          # affine quint8
    >>> float(s[0]), int(z[0])
    (0.0117647061124444, 85)
    >>> s, z = calculate_qparams(-1.0, 0.5, -128, 127, "per_tensor_symmetric", "qint8")
    >>> float(s[0]) == float(np.float32(1.0) / np.float32(127.5)), int(z[0])
    (True, 0)
    """
    scheme = as_qscheme(qscheme)
    qdtype = as_qdtype(dtype)
    mn = np.atleast_1d(np.asarray(min_val, dtype=np.float32))
    mx = np.atleast_1d(np.asarray(max_val, dtype=np.float32))
    if mn.shape != mx.shape:
        raise ValueError(f"min_val and max_val shapes differ: {mn.shape} vs {mx.shape}")
    if np.isnan(mn).any() or np.isnan(mx).any():
        raise ValueError("min_val / max_val contain NaN: the calibration data had NaN")
    eps32 = as_eps32(eps)
    qmin, qmax = _check_int("quant_min", quant_min), _check_int("quant_max", quant_max)
    if not qmin < qmax:
        raise ValueError(f"quant_min must be strictly less than quant_max, got "
                         f"[{qmin}, {qmax}]")
    fmt = qdtype.int_format
    if qmin < fmt.min or qmax > fmt.max:
        raise ValueError(f"quantization range [{qmin}, {qmax}] does not fit {qdtype.value} "
                         f"[{fmt.min}, {fmt.max}]")
    if mn.size == 0 or (mn.size == 1 and mn[0] == np.inf and mx[0] == -np.inf):
        warnings.warn("must run observer before calling calculate_qparams; returning the "
                      "default scale 1.0 and zero point 0", UserWarning, stacklevel=2)
        return np.array([1.0], np.float32), np.array([0], np.int64)
    if (mn > mx).any():
        raise ValueError(f"min_val must be <= max_val, got min {mn} and max {mx}")
    zero32 = np.float32(0.0)
    min_neg = np.minimum(mn, zero32)
    max_pos = np.maximum(mx, zero32)
    zero_point = np.zeros(mn.shape, np.int64)
    with np.errstate(over="ignore"):  # an infinite range gives an infinite scale, as PyTorch
        if scheme.symmetric:
            max_pos = np.maximum(-min_neg, max_pos)
            scale = max_pos / np.float32((qmax - qmin) / 2)
            scale = np.maximum(scale, eps32)
            if qdtype is QDtype.QUINT8:
                zero_point[:] = (qmin + qmax) // 2 if has_customized_qrange else 128
        else:
            scale = (max_pos - min_neg) / np.float32(qmax - qmin)
            scale = np.maximum(scale, eps32)
            # torch.round is round-half-to-even, as np.rint; the quotient is float32
            zero_point = qmin - np.rint(min_neg / scale).astype(np.int64)
            zero_point = np.clip(zero_point, qmin, qmax)
    return scale.astype(np.float32), zero_point.astype(np.int64)
