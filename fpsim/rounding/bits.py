"""Rounding float64 values to a format by integer operations on their bit patterns, for
values already known to lie in the format's normal range (internal API: the tensor-core
model's output rounding, issue 35).

Where every value of an array is zero or normal in ``fmt`` and its rounded magnitude is at
most ``fmt.max``, rounding toward zero clears the float64 fraction bits below the format's
(:func:`truncation_mask`), and rounding to nearest even adds half an ulp less one, plus the
kept last bit, before clearing them; the exponent field carries into the next binade by
itself. Anything else (subnormal results, overflow, other modes) is the general kernel's:
:func:`round_normal` says so by returning None, and its caller rounds with
:func:`fpsim.round`. ``tests/test_rounding_bits.py`` checks both against
:func:`fpsim.round` at the overflow edge, across subnormals and on random patterns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..formats import FP32, TF32, Format
from ..modes import Rounding
from .kernel import SIGN

__all__ = ["truncation_mask", "round_normal", "truncate_to_tf32"]

_U = np.uint64


def truncation_mask(fmt: Format) -> np.uint64:
    """The float64 bit mask keeping sign, exponent and ``fmt``'s fraction bits: ``x & mask``
    is ``x`` rounded toward zero to ``fmt``'s precision (its range aside).

    >>> import numpy as np
    >>> from fpsim.formats import BF16
    >>> x = np.array([1 + 2.0**-7 + 2.0**-9])
    >>> float((x.view(np.uint64) & truncation_mask(BF16)).view(np.float64)[0])
    1.0078125
    """
    return ~_U((1 << (52 - fmt.mantissa_bits)) - 1)


_TF32_DROP = np.uint32((1 << (FP32.mantissa_bits - TF32.mantissa_bits)) - 1)  # 13 low bits
_QUIET32 = np.uint32(1 << 22)


def truncate_to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded toward zero to tf32 (float32 array, ``x``'s shape), as tensor
    cores read an fp32 operand: the low 13 bits of each pattern dropped. That is the kernel's
    rounding toward zero over the whole range (tf32 has fp32's exponents, its subnormal
    quantum is 2**-136; inf stays inf); a NaN stays a quiet NaN (a signalling one whose
    payload lies in the dropped bits would read as inf), its payload's low bits dropped. The
    registry row ``TF32_TRUNCATE`` (:mod:`fpsim.rounding.fast`) checks it against the kernel.

    >>> import numpy as np
    >>> truncate_to_tf32(np.array([1 - 2.0**-24, -0.1], np.float32)).tolist()
    [0.99951171875, -0.0999755859375]
    """
    x = np.asarray(x, dtype=np.float32)
    b = np.atleast_1d(x).view(np.uint32) & ~_TF32_DROP
    nan = np.isnan(x.reshape(b.shape))
    if nan.any():
        b[nan] |= _QUIET32
    return b.view(np.float32).reshape(x.shape)


@dataclass(frozen=True)
class _Params:
    shift: np.uint64  # float64 fraction bits below the format's
    keep: np.uint64  # truncation_mask
    half_m1: np.uint64  # half an ulp of fmt at 1, less one, in float64 fraction units
    tiny_m1: np.uint64  # bits of 2**emin, minus one
    # bits of fmt.max plus one ulp: the first magnitude (on fmt's grid) that is not finite;
    # 2**(emax + 1) for IEEE formats, lower where the top patterns are NaN (e4m3fn: 480)
    past_max: np.uint64


@functools.cache
def _params(fmt: Format) -> _Params:
    s = 52 - fmt.mantissa_bits
    tiny = np.array(fmt.smallest_normal).view(_U)[()]
    top = np.array(fmt.max).view(_U)[()]
    return _Params(_U(s), truncation_mask(fmt), _U((1 << (s - 1)) - 1), tiny - _U(1),
                   top + (_U(1) << _U(s)))


def round_normal(v: np.ndarray, fmt: Format, rounding: Rounding,
                 out: np.ndarray) -> np.ndarray | None:
    """Round the float64 values ``v`` to ``fmt`` into ``out`` (float64, v's shape) by bit
    operations, when ``rounding`` is toward zero or nearest even and every non-zero value is
    normal in ``fmt`` with a finite result; returns uint64 patterns whose exponent fields are
    the results' (the results' magnitudes; toward zero, which keeps the exponent, those of
    ``v``: one pass fewer). Returns None, leaving ``out`` untouched, where that does not
    hold: the caller rounds with the general kernel.

    >>> import numpy as np
    >>> from fpsim.formats import FP16
    >>> from fpsim.modes import Rounding
    >>> out = np.empty(2)
    >>> _ = round_normal(np.array([1 + 2.0**-11, -3.0]), FP16, Rounding.NEAREST_EVEN, out)
    >>> out.tolist()
    [1.0, -3.0]
    >>> round_normal(np.array([70000.0]), FP16, Rounding.NEAREST_EVEN, out) is None
    True
    """
    if v.size == 0 or rounding not in (Rounding.TOWARD_ZERO, Rounding.NEAREST_EVEN):
        return None
    p = _params(fmt)
    b = v.view(_U)
    a = b & ~SIGN
    # every non-zero magnitude normal (a zero's a - 1 wraps to the top) and below the first
    # non-finite one
    if (a - _U(1)).min() < p.tiny_m1 or a.max() >= p.past_max:
        return None
    ob = out.view(_U)
    if rounding is Rounding.TOWARD_ZERO:
        np.bitwise_and(b, p.keep, out=ob)
        return a  # truncation keeps the exponent field
    r = (a + p.half_m1 + ((a >> p.shift) & _U(1))) & p.keep
    if r.max() >= p.past_max:  # rounded up past the largest finite value
        return None
    np.bitwise_or(r, b & SIGN, out=ob)
    return r
