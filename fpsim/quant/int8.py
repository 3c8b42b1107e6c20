"""Integer-only inference: int8 x int8 products in an int32 accumulator, requantized to int8.

The default requantization is TensorFlow Lite's (and gemmlowp's) fixed-point one, bit-exact:

- ``QuantizeMultiplier(M)``: ``M = q * 2**shift`` with ``q`` in ``[0.5, 1)`` (frexp), the
  multiplier ``round_half_away(q * 2**31)`` as an int32 (``2**31`` becomes ``2**30`` with
  ``shift + 1``; ``shift < -31`` flushes to ``(0, 0)``);
- ``MultiplyByQuantizedMultiplier(acc, m, shift)`` =
  ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc << left, m), right)`` with
  ``left = max(shift, 0)``, ``right = max(-shift, 0)`` (TFLite's classic "double rounding"
  form, without ``TFLITE_SINGLE_ROUNDING``);
- SaturatingRoundingDoublingHighMul(a, b): ``(a * b + nudge) / 2**31`` in int64 with C++
  truncating division, ``nudge = 2**30`` (``1 - 2**30`` for negative products); only
  ``a == b == -2**31`` saturates, to ``2**31 - 1``;
- RoundingDivideByPOT(x, e): ``(x >> e) + (remainder > threshold)``, the remainder
  ``x & (2**e - 1)`` and the threshold ``(2**e - 1) >> 1`` plus one for negative x: round half
  away from zero.

The fully-connected layer is TFLite's reference ``integer_ops::FullyConnected`` /
per-channel ``PopulateConvolutionQuantizationParams``: ``M_c = double(x_scale) *
double(w_scale_c) / double(out_scale)`` (each scale a float32), ``acc = sum((x - x_zp) *
(w - w_zp)) + bias``, ``out = clamp(MBQM(acc, m_c, shift_c) + out_zp)``.
"""

from __future__ import annotations

import numpy as np

from ..checks import as_stored_scale, broadcast_shape
from .qparams import as_qdtype, real_array

__all__ = [
    "quantize_multiplier",
    "saturating_rounding_doubling_high_mul",
    "rounding_divide_by_pot",
    "multiply_by_quantized_multiplier",
    "int8_linear",
]

_I32_MIN = -(1 << 31)
_I32_MAX = (1 << 31) - 1


def quantize_multiplier(real_multiplier) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's ``QuantizeMultiplier``: ``(quantized_multiplier int32, shift int32)`` with
    ``real_multiplier ~= quantized_multiplier * 2**(shift - 31)``. Vectorised.

    >>> [tuple(int(v) for v in quantize_multiplier(m)) for m in (1.0, 0.75, 2.0**-33)]
    [(1073741824, 1), (1610612736, 0), (0, 0)]
    """
    d = real_array(real_multiplier, "real_multiplier")
    if not np.isfinite(d).all():
        raise ValueError(f"real_multiplier must be finite, got {real_multiplier!r}")
    q, shift = np.frexp(d)  # exact: d = q * 2**shift, 0.5 <= |q| < 1
    shift = shift.astype(np.int64)
    t = q * 2.0**31  # exact scaling by a power of two
    q_fixed = np.trunc(t + np.copysign(0.5, t)).astype(np.int64)  # TfLiteRound: half away
    full = q_fixed == (1 << 31)  # only +2**31 (TFLite); -2**31 fits int32
    q_fixed = np.where(full, q_fixed // 2, q_fixed)
    shift = np.where(full, shift + 1, shift)
    under = shift < -31
    q_fixed = np.where(under, 0, q_fixed)
    shift = np.where(under | (d == 0), 0, shift)
    return q_fixed.astype(np.int32), shift.astype(np.int32)


def _i64(x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"expected integers, got dtype {arr.dtype}")
    a = arr.astype(np.int64)
    if a.size and (a.min() < _I32_MIN or a.max() > _I32_MAX):
        raise ValueError("values must fit int32")
    return a


def _trunc_div_pow2(v: np.ndarray, e: int) -> np.ndarray:
    """C++ integer division by 2**e (truncation toward zero) on int64."""
    return np.where(v >= 0, v >> e, -((-v) >> e))


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    """gemmlowp's ``SaturatingRoundingDoublingHighMul`` on int32 values: the high 32 bits of
    ``2 * a * b``, rounded to nearest (ties away from zero).

    >>> int(saturating_rounding_doubling_high_mul(-2**31, -2**31))  # the one saturation
    2147483647
    >>> int(saturating_rounding_doubling_high_mul(2**30, 3))  # 2 * 2**30 * 3 / 2**32 = 1.5
    2
    """
    a64, b64 = np.broadcast_arrays(_i64(a), _i64(b))
    overflow = (a64 == b64) & (a64 == _I32_MIN)
    ab = a64 * b64  # |ab| <= 2**62: exact in int64
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    with np.errstate(over="ignore"):  # only the saturating case can overflow; masked below
        high = _trunc_div_pow2(ab + nudge, 31)
    return np.where(overflow, _I32_MAX, high).astype(np.int32)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp's ``RoundingDivideByPOT``: ``x / 2**exponent`` rounded to nearest, ties away
    from zero (``exponent`` in [0, 31]).

    >>> rounding_divide_by_pot(np.array([3, -3, 5, -5, -6]), 1).tolist()
    [2, -2, 3, -3, -3]
    """
    x64 = _i64(x)
    e = np.asarray(exponent, dtype=np.int64)
    if e.size and (e.min() < 0 or e.max() > 31):
        raise ValueError(f"exponent must be in [0, 31], got {exponent!r}")
    shape = broadcast_shape("rounding_divide_by_pot", x64.shape, e.shape)
    x64, e = np.broadcast_to(x64, shape), np.broadcast_to(e, shape)
    mask = (np.int64(1) << e) - 1
    remainder = x64 & mask
    threshold = (mask >> 1) + (x64 < 0)
    return ((x64 >> e) + (remainder > threshold)).astype(np.int32)


def multiply_by_quantized_multiplier(x, quantized_multiplier, shift) -> np.ndarray:
    """TFLite's ``MultiplyByQuantizedMultiplier(int32 x, int32 m, int shift)`` (double
    rounding). A left shift that would overflow int32 raises ValueError (C++ leaves it
    undefined).

    >>> m, s = quantize_multiplier(0.00097656)
    >>> int(multiply_by_quantized_multiplier(10000, m, s))
    10
    """
    x64 = _i64(x)
    s = np.asarray(shift, dtype=np.int64)
    left = np.maximum(s, 0)
    right = np.maximum(-s, 0)
    shifted = x64 << left
    if shifted.size and (shifted.min() < _I32_MIN or shifted.max() > _I32_MAX):
        raise ValueError("x * 2**shift overflows int32 (a multiplier >= 1 with a large input)")
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted,
                                                                         quantized_multiplier),
                                  right)


def _scale32(v, name):
    return as_stored_scale(name, np.asarray(v, dtype=np.float64), np.float32)


def _zero_points(v, name: str, dtype) -> np.ndarray:
    """Integer zero point(s) as a 1-d int64 array, checked to fit ``dtype``'s range."""
    a = np.asarray(v)
    if a.dtype.kind == "f" and np.isfinite(a).all() and (a == np.round(a)).all():
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer (or integers), got {v!r}")
    a = a.astype(np.int64).reshape(-1)
    info = np.iinfo(dtype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise ValueError(f"{name} {v!r} outside {np.dtype(dtype).name} [{info.min}, "
                         f"{info.max}]")
    return a


def int8_linear(x_q, w_q, bias_int32, x_scale, x_zp, w_scale, w_zp, out_scale, out_zp, *,
                out_dtype: str = "int8", requantize: str = "tflite",
                accumulator_overflow: str = "error") -> np.ndarray:
    """A quantized fully-connected layer ``y = x @ w.T + b`` on integers.

    - ``x_q`` (..., K) int8 or uint8, ``w_q`` (N, K) int8 or uint8, ``bias_int32`` (N,) int32
      (scale ``x_scale * w_scale``, zero point 0) or None;
    - ``w_scale`` / ``w_zp``: a scalar or one per output channel (N,);
    - ``acc = sum_k (x - x_zp)(w - w_zp) + bias``: computed exactly (float64 sums of integers
      below 2**53 are exact) and required to fit int32; ``accumulator_overflow="wrap"`` wraps
      it modulo 2**32 instead, as two's-complement hardware would;
    - ``requantize="tflite"``: TFLite's fixed-point multiplier (module docstring), bit-exact;
      ``"float"``: ``nearbyint(float32(acc) * M) + out_zp`` with the float32 multiplier
      ``M = float32(float32(x_scale * w_scale) / out_scale)`` (round half to even);
    - the result is clamped to ``out_dtype`` ("int8" or "uint8").

    >>> x = np.array([[10, -20, 30]], np.int8); w = np.array([[1, 2, 3], [-4, 5, -6]], np.int8)
    >>> int8_linear(x, w, np.array([100, -100], np.int32), 0.5, 0, 0.25, 0, 1.0, 0)
    array([[ 20, -53]], dtype=int8)

    (row 2: -420 * 0.125 = -52.5, rounded half away from zero by RoundingDivideByPOT)
    """
    xq = np.asarray(x_q)
    wq = np.asarray(w_q)
    for name, a in (("x_q", xq), ("w_q", wq)):
        if a.dtype not in (np.int8, np.uint8):
            raise TypeError(f"{name} must be int8 or uint8, got dtype {a.dtype}")
    if wq.ndim != 2 or xq.ndim < 1 or xq.shape[-1] != wq.shape[1]:
        raise ValueError(f"shapes do not match: x {xq.shape}, w {wq.shape} (want (..., K), "
                         "(N, K))")
    n = wq.shape[0]
    if requantize not in ("tflite", "float"):
        raise ValueError(f"unknown requantize {requantize!r}; valid: 'tflite', 'float'")
    if accumulator_overflow not in ("error", "wrap"):
        raise ValueError(f"unknown accumulator_overflow {accumulator_overflow!r}; valid: "
                         "'error', 'wrap'")
    ofmt = as_qdtype(out_dtype).int_format
    if ofmt.bits != 8:
        raise ValueError(f"out_dtype must be int8 or uint8, got {out_dtype!r}")
    xs = _scale32(x_scale, "x_scale").reshape(())
    os_ = _scale32(out_scale, "out_scale").reshape(())
    ws = _scale32(w_scale, "w_scale").reshape(-1)
    if ws.size not in (1, n):
        raise ValueError(f"w_scale must be a scalar or one per output channel ({n}), got "
                         f"{ws.size} values")
    ws = np.broadcast_to(ws, (n,))
    wz = _zero_points(w_zp, "w_zp", wq.dtype)
    if wz.size not in (1, n):
        raise ValueError(f"w_zp must be a scalar or one per output channel ({n}), got "
                         f"{wz.size} values")
    wz = np.broadcast_to(wz, (n,))
    xz = _zero_points(x_zp, "x_zp", xq.dtype)
    if xz.size != 1:
        raise ValueError(f"x_zp must be one zero point, got {xz.size} values")
    xz = int(xz[0])
    oz = _zero_points(out_zp, "out_zp", ofmt.dtype)
    if oz.size != 1:
        raise ValueError(f"out_zp must be one zero point, got {oz.size} values")
    oz = int(oz[0])
    if not ofmt.min <= oz <= ofmt.max:
        raise ValueError(f"out_zp {oz} outside {ofmt.name} [{ofmt.min}, {ofmt.max}]")
    xc = xq.astype(np.float64) - xz
    wc = wq.astype(np.float64) - wz[:, None]
    # every partial sum is an integer of magnitude < 2**53 for K < 1.3e11: float64 is exact
    acc = np.matmul(xc, wc.T).astype(np.int64)
    if bias_int32 is not None:
        b = np.asarray(bias_int32)
        if b.dtype.kind not in "iu" or b.shape != (n,):
            raise ValueError(f"bias_int32 must be an integer array of shape ({n},)")
        acc = acc + _i64(b)
    if accumulator_overflow == "wrap":
        acc = acc.astype(np.uint64).astype(np.uint32).view(np.int32).astype(np.int64)
    elif acc.size and (acc.min() < _I32_MIN or acc.max() > _I32_MAX):
        raise ValueError("the int32 accumulator overflows (use accumulator_overflow='wrap' to "
                         "see the wrapped result)")
    if requantize == "tflite":
        real = np.float64(xs) * ws.astype(np.float64) / np.float64(os_)
        m, sh = quantize_multiplier(real)
        out = multiply_by_quantized_multiplier(acc, m, sh).astype(np.int64) + oz
    else:
        mult = ((xs * ws) / os_).astype(np.float32)
        with np.errstate(over="ignore"):
            out = np.rint(acc.astype(np.float32) * mult).astype(np.float64) + oz
    return np.clip(out, ofmt.min, ofmt.max).astype(ofmt.dtype)
