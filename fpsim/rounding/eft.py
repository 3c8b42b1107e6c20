"""Error-free transformations of float64 values: a rounded result and its exact error, so that
``hi + lo`` equals the exact sum or product (what :func:`fpsim.round_pair` then rounds once).

- :func:`two_sum` (Knuth's TwoSum): ``s = fl(a + b)`` and ``e`` with ``s + e == a + b``
  exactly, for any magnitudes and order, as long as ``s`` does not overflow;
  :func:`two_sum_err` gives the error of an ``s`` the caller computed already.
- :func:`split` (Veltkamp): ``x == hi + lo`` with each half of at most 26 significant bits, so
  that the products of halves are exact in float64 (``|x|`` below about 2**995).
- :func:`two_prod` (Dekker's TwoProduct): ``p = fl(a * b)`` and ``e`` with ``p + e == a * b``
  exactly, when no product or partial product overflows or underflows (NumPy has no fused
  multiply-add to get ``e`` in one step).

All work elementwise on arrays (and on Python or NumPy scalars) with no rounding but the FPU's
nearest even; callers screen overflow and underflow. The scalar loops of
:mod:`fpsim.reductions` write TwoSum inline on Python floats: a function call there costs more
than the four operations.

>>> two_sum(1.0, 2.0**-60)
(1.0, 8.673617379884035e-19)
"""

from __future__ import annotations

__all__ = ["VELTKAMP", "split", "two_prod", "two_sum", "two_sum_err"]

#: 2**27 + 1: Veltkamp's constant, splitting a float64 into two halves of 26 bits
VELTKAMP = 134217729.0


def two_sum_err(a, b, s):
    """The exact error of ``s = fl(a + b)``: ``(a + b) - s`` (Knuth's TwoSum, any
    magnitudes).

    >>> two_sum_err(2.0**53, 1.0, 2.0**53 + 1.0)
    1.0
    """
    bb = s - a
    return (a - (s - bb)) + (b - bb)


def two_sum(a, b):
    """``(s, e)``: ``s = fl(a + b)`` and its exact error ``e``, so ``s + e == a + b``.

    >>> import numpy as np
    >>> s, e = two_sum(np.array([1e16]), np.array([1.0]))
    >>> s.tolist(), e.tolist()
    ([1e+16], [1.0])
    """
    s = a + b
    return s, two_sum_err(a, b, s)


def split(x):
    """Veltkamp's split: ``(hi, lo)`` with ``hi + lo == x`` exactly and each of at most 26
    significant bits.

    >>> hi, lo = split(1.0 + 2.0**-52)
    >>> hi, lo, hi + lo == 1.0 + 2.0**-52
    (1.0, 2.220446049250313e-16, True)
    """
    t = VELTKAMP * x
    hi = t - (t - x)
    return hi, x - hi


def two_prod(a, b):
    """``(p, e)``: ``p = fl(a * b)`` and its exact error ``e`` (Dekker), so ``p + e == a * b``
    when nothing overflows or underflows.

    >>> p, e = two_prod(1.0 + 2.0**-30, 1.0 + 2.0**-30)
    >>> p, e  # (1 + 2**-30)**2 = 1 + 2**-29 + 2**-60
    (1.0000000018626451, 8.673617379884035e-19)
    """
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl
