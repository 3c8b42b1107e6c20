"""Bit patterns: encode values of a format (to_bits), decode them (from_bits), take them apart
(fields), classify them, and step to their neighbours.

Decoding keeps a NaN's payload and quiet bit in the float64 pattern (no floating-point operation
touches it), so a signalling NaN read with :func:`from_bits` still signals INVALID when rounded.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import as_array
from .formats import Format, NaNEncoding, get_float_format
from .modes import Rounding
from .rounding import EXP_MASK, FRAC, HIDDEN, QUIET, SIGN, as_float64
from .rounding import round as _round

__all__ = [
    "to_bits",
    "from_bits",
    "fields",
    "Fields",
    "bit_string",
    "classify",
    "next_up",
    "next_down",
    "ulp",
    "all_values",
    "uint_dtype",
]

_U = np.uint64


def uint_dtype(fmt: Format | str) -> np.dtype:
    """The unsigned integer dtype that holds a pattern of ``fmt`` (uint8/16/32/64 by width).

    >>> uint_dtype("bf16")
    dtype('uint16')
    """
    bits = get_float_format(fmt).bits
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if bits <= np.dtype(dt).itemsize * 8:
            return np.dtype(dt)
    raise AssertionError("formats are at most 64 bits wide")


def to_bits(
    x, fmt: Format | str, rounding: Rounding | str = "nearest_even", **kwargs
) -> np.ndarray:
    """Round ``x`` to ``fmt`` and return its bit patterns (uint8/16/32/64 by width).

    For fp16 / bf16 / fp8 ``to_bits(x, fmt).view(dtype)`` is the NumPy / ml_dtypes array.
    Keyword arguments go to :func:`fpsim.round`.

    >>> import fpsim
    >>> hex(int(fpsim.to_bits(1.0, "fp16")))
    '0x3c00'
    >>> hex(int(fpsim.to_bits(-448.0, "e4m3")))
    '0xfe'
    """
    fmt = get_float_format(fmt)
    v = np.asarray(_round(x, fmt, rounding, **kwargs), dtype=np.float64)
    scalar = v.ndim == 0
    b = v.view(np.uint64)
    sign = b >> _U(63)
    a = b & ~SIGN
    m = fmt.mantissa_bits
    ebits = (a >> _U(52)).astype(np.int64)
    e = np.maximum(ebits, 1) - 1023
    sig = (a & FRAC) | np.where(ebits > 0, HIDDEN, _U(0))
    # a float64 subnormal (ebits == 0) is a subnormal of a format whose emin is -1022 too
    normal = (ebits > 0) & (e >= fmt.emin) & (a < EXP_MASK)
    with np.errstate(over="ignore"):
        shift = np.clip((52 - m) + (fmt.emin - e), 0, 63).astype(_U)
    exp_field = np.where(normal, e + fmt.bias, 0).astype(_U)
    mant = np.where(normal, (a & FRAC) >> _U(52 - m), sig >> shift)
    nan = a > EXP_MASK
    inf = a == EXP_MASK
    top = _U((1 << fmt.exponent_bits) - 1)
    mmask = _U((1 << m) - 1)
    if fmt.nan_encoding is NaNEncoding.IEEE:
        exp_field = np.where(nan | inf, top, exp_field)
        quiet = _U(1 << (m - 1)) if m else _U(0)
        payload = ((a & FRAC) >> _U(52 - m)) | quiet
        mant = np.where(inf, _U(0), np.where(nan, payload, mant))
    elif nan.any() or inf.any():
        if fmt.nan_encoding is NaNEncoding.NONE:  # only NaN gets here: inf rounds to max
            raise ValueError(
                f"x holds NaN, which {fmt.name} cannot encode: it has no NaN pattern. "
                "fpsim.round returns NaN with the INVALID flag for it; fpsim.cast refuses it "
                "too")
        if fmt.nan_encoding is NaNEncoding.FN:
            exp_field = np.where(nan, top, exp_field)
            mant = np.where(nan, mmask, mant)
        else:  # FNUZ: the NaN is the pattern of -0
            exp_field = np.where(nan, _U(0), exp_field)
            mant = np.where(nan, _U(0), mant)
            sign = np.where(nan, _U(1), sign)
    out = (sign << _U(fmt.bits - 1)) | (exp_field << _U(m)) | (mant & mmask)
    out = out.astype(uint_dtype(fmt))
    return out[()] if scalar else out


def from_bits(bits, fmt: Format | str) -> np.ndarray:
    """Decode bit patterns of ``fmt`` to exact float64 values (NaN payloads kept).

    >>> import fpsim
    >>> float(fpsim.from_bits(0x7BFF, "fp16")), float(fpsim.from_bits(0x0001, "fp16"))
    (65504.0, 5.960464477539063e-08)
    """
    fmt = get_float_format(fmt)
    arr = as_array(bits, "bits")
    scalar = arr.ndim == 0
    if arr.dtype.kind not in "iu":
        raise TypeError(f"bit patterns must be integers, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or int(arr.max()) >= (1 << fmt.bits)):
        raise ValueError(f"bit patterns of {fmt.name} lie in [0, 2**{fmt.bits}); got out of range")
    b = arr.astype(np.uint64)
    m = fmt.mantissa_bits
    sign = (b >> _U(fmt.bits - 1)) & _U(1)
    exp_field = ((b >> _U(m)) & _U((1 << fmt.exponent_bits) - 1)).astype(np.int64)
    mant = b & _U((1 << m) - 1)
    top = (1 << fmt.exponent_bits) - 1
    normal_pat = ((exp_field - fmt.bias + 1023).astype(_U) << _U(52)) | (mant << _U(52 - m))
    if fmt.subnormals:
        sub_val = np.ldexp(mant.astype(np.float64), fmt.emin - m)
    else:
        sub_val = np.zeros(mant.shape)
    a = np.where(exp_field == 0, sub_val.view(np.uint64), normal_pat)
    if fmt.nan_encoding is NaNEncoding.IEEE:
        special = exp_field == top
        a = np.where(special, EXP_MASK | (mant << _U(52 - m)), a)
    elif fmt.nan_encoding is NaNEncoding.FN:
        nan = (exp_field == top) & (mant == _U((1 << m) - 1))
        a = np.where(nan, EXP_MASK | QUIET, a)
    elif fmt.nan_encoding is NaNEncoding.FNUZ:
        nan = (sign == 1) & (exp_field == 0) & (mant == 0)
        a = np.where(nan, EXP_MASK | QUIET, a)
        sign = np.where(nan, _U(0), sign)
    out = (a | (sign << _U(63))).view(np.float64)
    return out[()] if scalar else out


class Fields(NamedTuple):
    """The parts of a pattern: sign bit, biased exponent field, mantissa field, the unbiased
    exponent of the value (emin for subnormals) and the pattern itself."""

    sign: np.ndarray
    exponent: np.ndarray
    mantissa: np.ndarray
    unbiased_exponent: np.ndarray
    bits: np.ndarray


def fields(x, fmt: Format | str, rounding: Rounding | str = "nearest_even", **kwargs) -> Fields:
    """Sign, exponent and mantissa fields of ``x`` rounded to ``fmt`` (for teaching).

    >>> import fpsim
    >>> f = fpsim.fields(-1.5, "fp16")
    >>> int(f.sign), int(f.exponent), int(f.mantissa), int(f.unbiased_exponent)
    (1, 15, 512, 0)
    """
    fmt = get_float_format(fmt)
    bits = np.asarray(to_bits(x, fmt, rounding, **kwargs)).astype(np.uint64)
    m = fmt.mantissa_bits
    sign = (bits >> _U(fmt.bits - 1)) & _U(1)
    exp_field = (bits >> _U(m)) & _U((1 << fmt.exponent_bits) - 1)
    mant = bits & _U((1 << m) - 1)
    unb = np.maximum(exp_field.astype(np.int64), 1) - fmt.bias
    return Fields(sign.astype(np.uint8), exp_field.astype(np.int64), mant.astype(np.int64), unb,
                  bits.astype(uint_dtype(fmt)))


def bit_string(x, fmt: Format | str, rounding: Rounding | str = "nearest_even", sep: str = " | ",
               **kwargs) -> str | list:
    """The pattern as ``sign | exponent | mantissa`` text (a list for array input).

    >>> import fpsim
    >>> fpsim.bit_string(1.0, "bf16")
    '0 | 01111111 | 0000000'
    """
    if not isinstance(sep, str):
        raise TypeError(f"bit_string: sep must be a str, got {type(sep).__name__} {sep!r}")
    fmt = get_float_format(fmt)
    f = fields(x, fmt, rounding, **kwargs)
    e, m = fmt.exponent_bits, fmt.mantissa_bits

    def one(s, ex, ma) -> str:
        parts = [str(int(s)), format(int(ex), f"0{e}b")]
        if m:
            parts.append(format(int(ma), f"0{m}b"))
        return sep.join(parts)

    if np.ndim(f.sign) == 0:
        return one(f.sign, f.exponent, f.mantissa)
    return [one(s, ex, ma) for s, ex, ma in zip(f.sign.ravel(), f.exponent.ravel(),
                                                 f.mantissa.ravel(), strict=False)]


def classify(x, fmt: Format | str, rounding: Rounding | str = "nearest_even", **kwargs):
    """Class of each value after rounding to ``fmt``: 'zero', 'subnormal', 'normal',
    'infinity' or 'nan' (a string for scalar input, an array of strings otherwise).

    >>> import fpsim
    >>> fpsim.classify(1e-6, "fp16"), fpsim.classify(1e-6, "bf16")
    ('subnormal', 'normal')
    """
    fmt = get_float_format(fmt)
    v = np.asarray(_round(x, fmt, rounding, **kwargs))
    a = np.abs(v)
    out = np.select(
        [np.isnan(v), np.isinf(v), a == 0, a < fmt.smallest_normal],
        ["nan", "infinity", "zero", "subnormal"],
        "normal",
    )
    return str(out[()]) if out.ndim == 0 else out


def next_up(x, fmt: Format | str) -> np.ndarray:
    """The next value of ``fmt`` above ``x`` (``x`` rounded to fmt first); past the largest
    finite value: inf, or NaN for formats without infinity.

    >>> import fpsim
    >>> float(fpsim.next_up(1.0, "fp16")) - 1
    0.0009765625
    """
    fmt = get_float_format(fmt)
    v = np.asarray(_round(x, fmt), dtype=np.float64)
    with np.errstate(over="ignore"):  # past float64's max: inf, which rounds as it should
        return _round(np.nextafter(v, np.inf), fmt, "up")


def next_down(x, fmt: Format | str) -> np.ndarray:
    """The next value of ``fmt`` below ``x`` (``x`` rounded to fmt first).

    >>> import fpsim
    >>> float(fpsim.next_down(0.0, "fp16"))
    -5.960464477539063e-08
    """
    fmt = get_float_format(fmt)
    v = np.asarray(_round(x, fmt), dtype=np.float64)
    with np.errstate(over="ignore"):
        return _round(np.nextafter(v, -np.inf), fmt, "down")


def ulp(x, fmt: Format | str) -> np.ndarray:
    """Unit in the last place of ``x`` in ``fmt``: the spacing 2**(max(e, emin) - m) of the
    binade holding ``x``.

    >>> import fpsim
    >>> float(fpsim.ulp(1000.0, "fp16")), float(fpsim.ulp(0.0, "fp16"))
    (0.5, 5.960464477539063e-08)
    """
    fmt = get_float_format(fmt)
    hi, _, scalar = as_float64(x)
    a = np.abs(hi).view(np.uint64)
    e = np.maximum((a >> _U(52)).astype(np.int64) - 1023, fmt.emin)
    out = np.ldexp(1.0, e - fmt.mantissa_bits)
    out = np.where(np.isfinite(hi), out, np.nan)
    return out[()] if scalar else out


def all_values(fmt: Format | str, finite: bool = True) -> np.ndarray:
    """Every value of a format of at most 16 bits, in pattern order (for plots and tests).

    >>> import fpsim
    >>> len(fpsim.all_values("e4m3"))
    254
    """
    fmt = get_float_format(fmt)
    if fmt.bits > 16:
        raise ValueError(f"{fmt.name} has 2**{fmt.bits} patterns; all_values takes <= 16 bits")
    v = from_bits(np.arange(1 << fmt.bits, dtype=np.uint64), fmt)
    return v[np.isfinite(v)] if finite else v
