"""FP8 per-tensor scaling as NVIDIA Transformer Engine's delayed scaling recipe does it.

Follows Transformer Engine 1.x (``transformer_engine/pytorch/fp8.py``: ``_default_sf_compute``,
``_default_get_amax_and_update_history``, ``_update_amax_history``), in float32:

- scale = ``(fmt.max / amax) / 2**margin``; kept at the previous scale when amax is 0 or not
  finite; ``float32 max`` when the quotient overflows (amax tiny). ``power_of_two=True`` gives
  the older recipe (TE 0.x): ``2**(floor(log2(fmt.max / amax)) - margin)``, the exponent taken
  from the float's bits.
- the amax history holds ``amax_history_len`` values, slot 0 the current step's (the max of
  every amax recorded in the step); an update takes ``max`` over the history (or its
  ``most_recent`` slot 0), rolls it by one and zeroes slot 0, and sets the scale used by the
  NEXT step: the scale always lags by one step.
- quantization is the saturating cast of ``float32(x * scale)`` to the fp8 format (round to
  nearest even; NaN stays NaN); dequantization multiplies by ``scale_inv = float32(1 / scale)``.
"""

from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from ..autograd.context import widen
from ..checks import as_int
from ..flags import flags_active
from ..formats import Format, get_float_format
from ..rounding import cast, policy_of
from ..rounding.fast import values32
from .qparams import real_array

__all__ = ["fp8_scale", "fp8_quantize", "fp8_values", "fp8_dequantize", "DelayedScaling"]

# fp8_values' formats by storage type, rounded to nearest even without the codes (clamped)
_NEAREST = {np.dtype(ml_dtypes.float8_e4m3fn): policy_of("fp8_e4m3"),
            np.dtype(ml_dtypes.float8_e5m2): policy_of("fp8_e5m2")}

_FP32_MAX = np.float32(np.finfo(np.float32).max)


def as_fp8_format(fmt: Format | str, what: str = "fmt") -> Format:
    """The 8-bit float format ``fmt`` names, for the FP8 recipes (the scaling functions here
    and :class:`fpsim.quant.FP8Linear`); ``what`` names the argument in errors. TypeError for
    an integer format; ValueError for a format beyond float32's range (the recipe computes in
    float32) or one that is not 8 bits wide.

    >>> as_fp8_format("e4m3").name, as_fp8_format("e5m2").max
    ('fp8_e4m3', 57344.0)
    >>> as_fp8_format("fp16", "fwd_fmt")
    Traceback (most recent call last):
    ...
    ValueError: fwd_fmt must be an 8-bit float format (e4m3, e5m2, ...), got fp16
    """
    f = get_float_format(fmt)
    if not f.max <= float(_FP32_MAX):
        raise ValueError(f"{what} {f.name} reaches {f.max:.4g}, beyond float32's range: the FP8 "
                         "scaling recipe computes in float32; use a format no wider than fp32 "
                         "(e.g. e4m3, e5m2)")
    if f.bits != 8:
        raise ValueError(f"{what} must be an 8-bit float format (e4m3, e5m2, ...), got {f.name}")
    return f


def _scale_array(scale, name: str = "scale") -> np.ndarray:
    """float32 scale(s), checked finite and positive in float32."""
    s = real_array(scale, name)
    with np.errstate(over="ignore"):
        s32 = s.astype(np.float32)
    if not (np.isfinite(s32).all() and (s32 > 0).all()):
        raise ValueError(f"{name} must be finite and positive (in float32), got {scale!r}")
    return s32


def _margin(margin) -> float:
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real):
        raise TypeError(f"margin must be a real number (binades of headroom), got "
                        f"{type(margin).__name__} {margin!r}")
    if not np.isfinite(float(margin)):
        raise ValueError(f"margin must be finite, got {margin!r}")
    return float(margin)


def fp8_scale(amax, fmt: Format | str = "e4m3", margin: float = 0, prev_scale=1.0,
              power_of_two: bool = False) -> np.ndarray:
    """The scale that maps ``amax`` to the format's largest value (less ``margin`` binades).

    >>> float(fp8_scale(2.0, "e4m3")), float(fp8_scale(2.0, "e5m2", margin=1))
    (224.0, 14336.0)
    >>> float(fp8_scale(0.0, "e4m3", prev_scale=4.0))  # nothing seen: keep the old scale
    4.0
    >>> float(fp8_scale(3.0, "e4m3", power_of_two=True))  # 2**floor(log2(448 / 3))
    128.0
    """
    f = as_fp8_format(fmt)
    a64 = real_array(amax, "amax")
    if (a64 < 0).any():  # NaN / inf / 0 keep the previous scale, as Transformer Engine
        raise ValueError(f"amax must be >= 0 (the largest |x|), got {amax!r}")
    with np.errstate(over="ignore"):
        a = a64.astype(np.float32)
    prev = _scale_array(prev_scale, "prev_scale")
    margin = _margin(margin)
    fmax = np.float32(f.max)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ratio = fmax / a
        if power_of_two:
            _, e = np.frexp(ratio.astype(np.float64))  # ratio = m * 2**e, 0.5 <= m < 1
            exp = (e.astype(np.float64) - 1) - float(margin)
            sf = np.power(np.float32(2.0), exp.astype(np.float32))
        else:
            sf = ratio / np.float32(2.0 ** float(margin))
    ok = (a > 0) & np.isfinite(a)
    sf = np.where(ok, sf, prev)
    sf = np.where(np.isinf(sf), _FP32_MAX, sf)
    return sf.astype(np.float32)


def fp8_quantize(x, scale, fmt: Format | str = "e4m3") -> np.ndarray:
    """The saturating cast of ``float32(x * scale)`` to ``fmt`` (an ml_dtypes float8 array for
    the fp8 presets).

    >>> fp8_quantize(np.array([1.0, 3.0, -1000.0], np.float32), 100.0).astype(np.float32)
    array([  96.,  288., -448.], dtype=float32)

    (100 is halfway between e4m3's 96 and 104 and rounds to the even 96.)
    """
    f = as_fp8_format(fmt)
    xs = np.asarray(x, dtype=np.float32) * _scale_array(scale)
    return cast(xs, f, overflow="saturate")


def fp8_values(x, scale, fmt: Format | str = "e4m3") -> np.ndarray:
    """The values of :func:`fp8_quantize` as float64 (what a GEMM of the FP8 recipe reads).
    For e4m3 and e5m2 and a finite ``float32(x * scale)`` (and no flag context), without the
    codes: clamped to +-max and rounded on the format's grid in float32
    (:func:`fpsim.rounding.fast.values32`): a value beyond max rounds to max or overflows,
    which saturation makes max, and the clamp gives max too. tests/test_fp8_values.py checks
    it against fp8_quantize's values bit for bit.

    >>> fp8_values(np.array([1.0, 3.0, -1000.0], np.float32), 100.0).tolist()
    [96.0, 288.0, -448.0]
    """
    f = as_fp8_format(fmt)
    xs = np.asarray(x, dtype=np.float32) * _scale_array(scale)
    pol = _NEAREST.get(np.dtype(f.storage_dtype))
    if xs.size and pol is not None and not flags_active():
        lo, hi = xs.min(), xs.max()
        if np.isfinite(lo) and np.isfinite(hi):  # no NaN or inf: the clamp is saturation
            np.clip(xs, -f.max, f.max, out=xs)
            return values32(xs, pol).astype(np.float64)
    return widen(np.asarray(cast(xs, f, overflow="saturate")))


def fp8_dequantize(q, scale) -> np.ndarray:
    """float32 ``q * float32(1 / scale)`` (Transformer Engine's ``scale_inv``).

    >>> fp8_dequantize(fp8_quantize(np.array([1.0, 3.0], np.float32), 100.0), 100.0)
    array([0.96     , 2.8799999], dtype=float32)
    """
    s = _scale_array(scale)
    scale_inv = np.float32(1.0) / s
    q = np.asarray(q)
    if q.dtype.kind not in "iufV":  # a complex q would lose its imaginary part silently
        raise TypeError(f"fp8_dequantize: q must hold real numbers, got dtype {q.dtype}")
    return (q.astype(np.float32) * scale_inv).astype(np.float32)


class DelayedScaling:
    """Per-tensor delayed scaling: quantize with the current scale, record amax, update.

    >>> ds = DelayedScaling("e4m3", amax_history_len=4)
    >>> q = ds.quantize(np.array([0.5, -2.0], np.float32))  # step 1 uses scale 1.0
    >>> float(ds.scale), ds.amax_history.tolist()
    (1.0, [2.0, 0.0, 0.0, 0.0])
    >>> ds.update(); float(ds.scale), ds.amax_history.tolist()
    (224.0, [0.0, 0.0, 0.0, 2.0])
    """

    def __init__(self, fmt: Format | str = "e4m3", margin: float = 0,
                 amax_history_len: int = 1024, amax_compute_algo: str = "max",
                 power_of_two: bool = False) -> None:
        self.fmt = as_fp8_format(fmt)
        amax_history_len = as_int("amax_history_len", amax_history_len, 1)
        if amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"unknown amax_compute_algo {amax_compute_algo!r}; valid: 'max', "
                             "'most_recent'")
        self.margin = _margin(margin)
        self.amax_compute_algo = amax_compute_algo
        self.power_of_two = bool(power_of_two)
        self.amax_history = np.zeros(amax_history_len, np.float32)
        self.scale = np.float32(1.0)

    @property
    def scale_inv(self) -> np.float32:
        """float32(1 / scale)."""
        return np.float32(1.0) / self.scale

    def record_amax(self, amax) -> None:
        """Fold an amax into the current step's slot (the max of all recorded this step)."""
        a = np.float32(amax)
        if np.isnan(a):
            self.amax_history[0] = np.float32(np.nan)
        else:
            self.amax_history[0] = max(self.amax_history[0], a)

    def quantize(self, x) -> np.ndarray:
        """Record ``max|x|`` and return ``x`` cast to fp8 with the current scale."""
        arr = np.asarray(x, dtype=np.float32)
        if arr.size:
            self.record_amax(np.max(np.abs(arr)))
        return fp8_quantize(arr, self.scale, self.fmt)

    def dequantize(self, q) -> np.ndarray:
        """float32 values of ``q`` cast with the current scale."""
        return fp8_dequantize(q, self.scale)

    def update(self) -> None:
        """End of step: amax from the history, roll it, compute the next step's scale."""
        if self.amax_compute_algo == "max":
            amax = np.max(self.amax_history)
        else:
            amax = self.amax_history[0]
        if self.amax_history.size > 1:
            self.amax_history = np.roll(self.amax_history, -1)
        self.amax_history[0] = 0.0
        self.scale = np.float32(fp8_scale(amax, self.fmt, self.margin, self.scale,
                                          self.power_of_two))
