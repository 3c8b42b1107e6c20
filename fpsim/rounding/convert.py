"""Inputs and outputs of the rounding entry points: any real array-like to float64 exactly
(:func:`as_float64`, :func:`widen`, :func:`listed`), and results back into the caller's shape
with the flags recorded (:func:`finish`), or into a storage dtype (:func:`refuse_nan`,
:func:`via_float32`).

Contract: every conversion here is exact (a value float64 cannot hold comes back as a
``(hi, lo)`` pair or an object array, never rounded); nothing here rounds. Internal API of the
package; :func:`as_float64` and :func:`listed` are used by the layers above too.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import flags as _flags
from ..checks import ragged_error
from ..formats import Format, NaNEncoding
from .eft import two_sum
from .kernel import EXP_MASK, ONE, ZERO

_U = np.uint64


def widen(arr: np.ndarray) -> np.ndarray:
    """float16 / float32 / ml_dtypes floats to float64, exactly, NaN payloads included.

    The hardware widening quiets a signalling NaN (and warns); IEEE conversions must signal
    INVALID for it later, so such NaNs are rebuilt from their patterns, still signalling."""
    with np.errstate(invalid="ignore"):
        out = arr.astype(np.float64)
    if arr.dtype == np.float16 or not arr.size:  # NumPy widens float16 NaNs bit-exactly
        return out
    nan = np.isnan(out)
    if nan.any():
        # ml_dtypes.finfo for every type: float8_e5m2 is of kind "f", and ml_dtypes 0.5 gives
        # np.finfo no entry for it (a ValueError)
        info = ml_dtypes.finfo(arr.dtype)
        m = int(info.nmant)
        src = arr[nan].view(f"u{arr.dtype.itemsize}").astype(np.uint64)
        payload = src & _U((1 << m) - 1)
        snan = (payload != ZERO) & ((payload >> _U(m - 1)) & ONE == ZERO)
        pat = ((src >> _U(info.bits - 1)) << _U(63)) | EXP_MASK | (payload << _U(52 - m))
        ob = out.view(np.uint64)
        ob[nan] = np.where(snan, pat, ob[nan])
    return out


ML_FLOAT_KINDS = "V"  # ml_dtypes' bfloat16 / float8 report kind 'V'


def as_float64(x, name: str = "x") -> tuple[np.ndarray, np.ndarray | None, bool]:
    """Convert a real array-like to float64 exactly: returns (hi, lo or None, was_scalar).
    ``name`` is what the errors for ragged or non-numeric input call the argument.

    ``lo`` is the exact remainder for inputs float64 cannot hold (int64 beyond 2**53, long
    double), so that they are rounded once, not twice.

    >>> hi, lo, scalar = as_float64(2**60 + 1)
    >>> float(hi), float(lo), scalar
    (1.152921504606847e+18, 1.0, True)
    """
    try:
        scalar = np.ndim(x) == 0
    except ValueError as exc:  # ragged nested lists
        raise ragged_error(name, exc) from None
    if isinstance(x, (complex, np.complexfloating)):
        raise TypeError("complex input is not supported: round the real and imaginary parts")
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 1 << 63:
        try:
            hi = float(x)
        except OverflowError:  # x rounds to inf in float64: pair it with the largest float64
            hi = float(np.finfo(np.float64).max) * (1.0 if x > 0 else -1.0)
        rem = x - int(hi)
        rem = max(-(1 << 1000), min(rem, 1 << 1000))  # beyond 2**1024: any lo >= a spacing
        lo = float(rem)  # truncated toward zero: keeps how rem compares with half a spacing
        if abs(int(lo)) > abs(rem):
            lo = float(np.nextafter(lo, 0.0))
        return np.array(hi), np.array(lo), True
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if kind == "c":
        raise TypeError("complex input is not supported: round the real and imaginary parts")
    if kind == "f":
        if arr.dtype.itemsize > 8:  # long double: split into a pair (round() is exact)
            with np.errstate(invalid="ignore", over="ignore"):
                hi = arr.astype(np.float64)
                lo = np.where(np.isfinite(hi), (arr - hi).astype(np.float64), 0.0)
                # beyond float64: the largest float64 and a remainder above any spacing, as
                # for huge ints. (Below 2**-1011 lo may be rounded: round() does not use it.)
                big = np.isinf(hi) & np.isfinite(arr)
                if big.any():
                    sgn = np.where(np.signbit(arr), -1.0, 1.0)
                    hi = np.where(big, sgn * np.finfo(np.float64).max, hi)
                    lo = np.where(big, sgn * 2.0**1000, lo)
            return hi, lo, scalar
        if arr.dtype.itemsize == 8:
            return arr.astype(np.float64, copy=False), None, scalar
        return widen(arr), None, scalar
    if kind in "iu":
        hi = arr.astype(np.float64)
        if arr.dtype.itemsize >= 8 and arr.size and (np.abs(hi) >= 2.0**53).any():
            # split exactly into a multiple of 2**11 (<= 53 significant bits) and the low 11
            # bits, then TwoSum: hi = the nearest float64, lo the exact remainder. (Casting
            # hi back to the integer type overflows at 2**63 / 2**64.)
            top = ((arr >> 11).astype(np.float64)) * 2048.0
            low = (arr & 2047).astype(np.float64)
            hi, lo = two_sum(top, low)
            if (lo != 0).any():
                return hi, lo, scalar
        return hi, None, scalar
    if kind == "b":
        return arr.astype(np.float64), None, scalar
    if kind in ML_FLOAT_KINDS:
        try:
            return widen(arr), None, scalar
        except (TypeError, ValueError):
            pass
    raise TypeError(
        f"{name} must hold real numbers (Python or NumPy floats/ints, ml_dtypes arrays; round, "
        f"cast and arithmetic also Fractions / Decimals, alone or in object arrays), got dtype "
        f"{arr.dtype} ({type(x).__name__})"
    )


def finish(out_bits: np.ndarray, fl, shape, scalar, want_flags: bool, where: str | None):
    """Shape the result; record the flags in the active flag contexts as ``where`` (None:
    the caller records them)."""
    out = (out_bits.view(np.float64) if out_bits.dtype == np.uint64 else out_bits).reshape(shape)
    if fl is not None:
        fl = fl.reshape(shape)
        if where is not None and _flags.flags_active():
            _flags.record(fl, where)
    if scalar:
        out = out[()]
        if fl is not None:
            fl = fl[()]
    return (out, fl) if want_flags else out


def refuse_nan(values: np.ndarray, fmt: Format) -> None:
    """Storing needs a pattern: a NaN has none in a format without NaN (fp6, fp4)."""
    if fmt.nan_encoding is NaNEncoding.NONE and np.isnan(values).any():
        raise ValueError(
            f"x holds NaN, which {fmt.name} cannot encode: it has no NaN pattern. "
            "fpsim.round returns NaN with the INVALID flag for it; clean the input or store "
            "in a format with NaN")


def via_float32(v: np.ndarray, store: np.dtype) -> np.ndarray:
    """float64 values of a format stored in an ml_dtypes type, as float32 first: exact (every
    such format's values are float32 values) and several times faster than ml_dtypes'
    float64 conversion."""
    return v.astype(np.float32) if store.kind == ML_FLOAT_KINDS else v

def listed(x):
    """Internal API: a list or tuple as the array NumPy makes of it (a ragged one stays:
    as_float64 says why); anything else as it is. Where NumPy would make floats of integers
    it cannot hold exactly (``[2**53 + 1, 0.5]``, ``[2**63 + 1, -1]``: float64), an object
    array instead, so each element is still rounded once, as alone."""
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError:
            return x
        if arr.dtype.kind == "f" and arr.size and ml_dtypes.finfo(arr.dtype).nmant < 63:
            with np.errstate(invalid="ignore"):  # (ml_dtypes.finfo: float8_e5m2 is "f" too)
                big = np.flatnonzero(np.abs(arr) >= 2.0 ** (ml_dtypes.finfo(arr.dtype).nmant + 1))
            if big.size:  # rare: look at those elements only
                obj = np.asarray(x, dtype=object)
                held = arr.reshape(-1)[big]
                if obj.shape == arr.shape and any(
                        isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                        and (not np.isfinite(h) or int(h) != int(v))
                        for v, h in zip(obj.reshape(-1)[big], held, strict=True)):
                    return obj  # (an exact list keeps NumPy's array: same stochastic draws)
        return arr
    return x
