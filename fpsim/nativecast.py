"""Native casts to NumPy / ml_dtypes float types that round once, in every supported version.

A cast ``x.astype(dtype)`` is fpsim's rounding to nearest even only where the library rounds
the exact value once. NumPy's own casts do (float64 -> float16 included: not via float32), and
so do ml_dtypes' casts from float32 and float16 (their values are exact in float32; each
ml_dtypes type is rounded from float32). ml_dtypes' casts *from float64* did not always: up to
0.5.x (0.5.4 is Pyodide's) a float64 value went to float32 first (nearest even) and was rounded
again, so that a value just above a midpoint of the narrow format became the midpoint and then
rounded to even (issue 32: ``Tensor(x, "bf16")`` differed on 3,736 of 63,786 values between
0.5.4 and 0.7.0). fpsim's results must not depend on a dependency's version, so no float64
value goes through those casts: :func:`cast` rounds float64 to float32 **to odd** first (keep
the float32 value when exact, else the neighbour of the two around x whose last bit is 1),
then uses ml_dtypes' float32 cast. Rounding to odd at precision p' >= p + 2 followed by
rounding to nearest even at precision p is one rounding to nearest even at p (Boldo &
Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
odd", IEEE TC 2008): every midpoint and every value of the narrow grid is a float32 number
(ml_dtypes' float types have p <= 8 and emin >= -126, float32 p' = 24 and subnormals down to
2**-149, so its grid is finer by >= 2 bits everywhere, overflow thresholds included), a
value rounded to odd is never moved onto such a point, and its side of every midpoint is
kept. Beyond float32's range the odd neighbour is float32's largest finite value, which every
narrow format rounds as the original (to infinity, NaN or saturation, by its own rule).
Checked against :func:`fpsim.round` on every midpoint of every ml_dtypes format and its
float64 neighbours (tests/test_nativecast.py), under the lowest declared versions too.

>>> import ml_dtypes
>>> x = np.array([1 + 2.0**-8 + 2.0**-30])  # just above bf16's midpoint between 1 and 1+2**-7
>>> float(cast(x, ml_dtypes.bfloat16)[0])  # one rounding: up (via float32 nearest: 1.0)
1.0078125
"""

from __future__ import annotations

import numpy as np

__all__ = ["cast", "f64_to_f32_odd"]

_NUMPY_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))
_F64 = np.dtype(np.float64)


def f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """float64 array -> float32 array rounded to odd: x itself where float32 holds it, else
    the one of its two float32 neighbours whose last significand bit is 1 (beyond float32's
    range: its largest finite value, with x's sign); NaN stays NaN, infinities stay.

    >>> f64_to_f32_odd(np.array([1 + 2.0**-30, 1.0, 1e300, -1e-300])).tolist()
    [1.0000001192092896, 1.0, 3.4028234663852886e+38, -1.401298464324817e-45]
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32)  # nearest even: one of the two neighbours (or inf)
    back = y.astype(np.float64)
    moved = back != x  # inexact; NaN too, undone next
    moved &= x == x
    bits = y.view(np.int32)  # sign-magnitude: +-1 on the pattern moves the magnitude
    moved &= (bits & 1) == 0  # already odd: nothing to do
    if moved.any():
        # rounded away from zero (above a positive x, below a negative one): step the
        # magnitude down, else up (comparisons and xor: no abs, no masked assignment)
        down = np.greater(back, x)
        down ^= np.signbit(x)
        down &= moved
        step = moved.astype(np.int32)
        step -= down
        step -= down
        bits += step
    return y


def cast(x: np.ndarray, dtype) -> np.ndarray:
    """``x.astype(dtype)`` rounded once to nearest even (a new array): NumPy's own cast for
    NumPy types and for float16 / float32 sources; for a float64 source and an ml_dtypes type,
    via :func:`f64_to_f32_odd` (see the module docstring). Overflow and invalid warnings of the
    cast are silenced (an overflow is the format's own result, as ``astype`` gives it).

    >>> import ml_dtypes
    >>> cast(np.array([0.1, 1e6]), ml_dtypes.float8_e4m3fn).tolist()
    [0.1015625, nan]
    """
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if x.dtype != _F64 or dtype in _NUMPY_FLOATS:
            return x.astype(dtype)
        return f64_to_f32_odd(x).astype(dtype)
