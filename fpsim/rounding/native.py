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

One-byte types (fp8, fp6, fp4: ml_dtypes' element-by-element casts, the slowest step of the
MX and FP8 recipes) go through tables built from ml_dtypes' own casts, with the same bits:

- to float32 / float64 (:func:`widen_byte`): the 256 values of the type, indexed by the byte;
- from float32 (:func:`narrow_to_byte`): rounding a float32 value to p <= 7 significant bits
  (every such type but e8m0) is decided by its sign, exponent and first 7 fraction bits (the
  high 16 bits of its pattern: the rounding bit is among them, also for subnormal results,
  whose rounding bit is higher still) and one sticky bit, whether its low 16 bits are
  nonzero. So a table of 2 * 65536 bytes, ml_dtypes' cast of ``hi16 << 16`` and of
  ``(hi16 << 16) | 1``, holds every result (checked against the cast itself for every hi16
  and a spread of low halves in tests/test_nativecast.py, every pattern in the exhaustive
  run).

>>> import ml_dtypes
>>> x = np.array([1 + 2.0**-8 + 2.0**-30])  # just above bf16's midpoint between 1 and 1+2**-7
>>> float(cast(x, ml_dtypes.bfloat16)[0])  # one rounding: up (via float32 nearest: 1.0)
1.0078125
"""

from __future__ import annotations

import functools

import numpy as np

from ..formats import (
    BF16,
    FP4_E2M1,
    FP8_E4M3,
    FP8_E4M3FNUZ,
    FP8_E5M2,
    FP8_E5M2FNUZ,
    FP16,
    FP32,
    Format,
)
from ..modes import Overflow, Rounding, Subnormals
from .policy import RoundingPolicy

__all__ = ["cast", "f64_to_f32_odd", "fma32_odd", "fits_float32", "narrow_to_byte",
           "widen_byte", "table_cast_ok",
           "native_ok", "native_rounding", "fp4_nearest_even", "FP4_COMPARE_MIN",
           "widen_bf16", "TABLE_MIN", "bf16_by_bits", "BF16_BITS_MIN", "bf16_carry",
           "NATIVE_CAST_FORMATS",
           "NATIVE_ARITHMETIC_FORMATS"]

# The one format table of "may this run natively?" (issue 35 item 2), consulted by
# fpsim.autograd.context.round_to and fpsim.arithmetic's native path through native_ok:
# - casts: formats whose native cast from float64 and float32 (:func:`cast`: NumPy's, or
#   ml_dtypes' from float32, float64 rounded to odd in float32 first) is fpsim.round's
#   nearest even (overflow to inf / NaN, gradual underflow); proved by
#   tests/test_autograd_formats.py::test_native_cast_equals_fpsim_round and the registry
#   test tests/test_rounding_fast_paths.py;
# - arithmetic: formats whose NumPy / ml_dtypes + - * / sqrt are correctly rounded (fp32 is
#   IEEE; fp16's and bf16's loops compute in float32, p' = 24 >= 2p + 2: Figueroa), see
#   fpsim/arithmetic.py's native path.
NATIVE_CAST_FORMATS: frozenset[Format] = frozenset(
    {FP32, FP16, BF16, FP8_E4M3, FP8_E5M2, FP8_E4M3FNUZ, FP8_E5M2FNUZ})
NATIVE_ARITHMETIC_FORMATS: frozenset[Format] = frozenset({FP16, BF16, FP32})


def native_rounding(policy: RoundingPolicy) -> bool:
    """The policy part of :func:`native_ok`, for any format: nearest even, overflow to the
    format's overflow value, subnormals kept (tininess only decides flags and flushing:
    neither happens then). ``policy.fmt`` is not looked at (fpsim.autograd's settings hold
    a stand-in format).

    >>> from fpsim.rounding import policy_of
    >>> native_rounding(policy_of("fp8_e4m3")), native_rounding(policy_of("fp16", "up"))
    (True, False)
    """
    return (policy.rounding is Rounding.NEAREST_EVEN and policy.overflow is Overflow.INF
            and policy.subnormals is Subnormals.KEEP)


def native_ok(policy: RoundingPolicy, flags: bool = False, *, arithmetic: bool = False) -> bool:
    """May rounding by ``policy`` (a cast, or with ``arithmetic=True`` a + - * / sqrt result)
    run as NumPy's / ml_dtypes' own? Only without flags, by a :func:`native_rounding` policy,
    to a format of the table above.

    >>> from fpsim.rounding import policy_of
    >>> native_ok(policy_of("fp16"))
    True
    >>> native_ok(policy_of("fp8_e4m3"), arithmetic=True)  # casts only: no native arithmetic
    False
    >>> native_ok(policy_of("bf16"), flags=True)
    False
    """
    return (not flags and native_rounding(policy)
            and policy.fmt in (NATIVE_ARITHMETIC_FORMATS if arithmetic else NATIVE_CAST_FORMATS))


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


_F32 = np.dtype(np.float32)
TABLE_MIN = 2048  # below this many elements ml_dtypes' own cast has less overhead


def table_cast_ok(dtype) -> bool:
    """Whether ``dtype`` (an ml_dtypes type) is a one-byte float with at most 6 fraction bits:
    the types :func:`narrow_to_byte` and :func:`widen_byte` take (not e8m0, a scale type).

    >>> import ml_dtypes
    >>> table_cast_ok(ml_dtypes.float8_e4m3fn), table_cast_ok(np.float16)
    (True, False)
    """
    return _table_ok(np.dtype(dtype))


@functools.cache
def _table_ok(dtype: np.dtype) -> bool:
    if dtype.itemsize != 1 or dtype in _NUMPY_FLOATS or dtype.kind not in "fV":
        return False
    import ml_dtypes

    try:
        info = ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        return False
    return 1 <= info.nmant + 1 <= 7 and info.nexp <= 5


@functools.cache
def _widen_table(dtype: np.dtype, wide: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        t = np.arange(256, dtype=np.uint8).view(dtype).astype(wide)
    t.flags.writeable = False  # shared by every thread: read only
    return t


@functools.cache
def _narrow_table(dtype: np.dtype) -> np.ndarray:
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    reps = np.stack([hi, hi | np.uint32(1)], axis=1).reshape(-1).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = reps.astype(dtype).view(np.uint8)
    t.flags.writeable = False
    return t


def widen_byte(x: np.ndarray, wide=np.float32) -> np.ndarray:
    """``x.astype(wide)`` (float32 or float64) for an array of a :func:`table_cast_ok` type,
    by a 256-entry table of ml_dtypes' own cast (the same bits, about 4x faster).

    >>> import ml_dtypes
    >>> widen_byte(np.array([0.5, -448.0], ml_dtypes.float8_e4m3fn)).tolist()
    [0.5, -448.0]
    """
    wide = np.dtype(wide)
    if x.size < TABLE_MIN:
        with np.errstate(invalid="ignore"):
            return x.astype(wide)
    return np.take(_widen_table(x.dtype, wide), x.view(np.uint8).astype(np.intp))


def widen_bf16(x: np.ndarray, wide=np.float32) -> np.ndarray:
    """``x.astype(wide)`` for a bfloat16 array ``x``: bf16 is float32's top half, so from
    :data:`TABLE_MIN` elements a 16-bit shift is the exact widening to float32 (ml_dtypes'
    own rule, NaN payloads included; about 2x faster than its astype), then NumPy's cast to
    ``wide``; below that, ml_dtypes' astype (less overhead).

    >>> import ml_dtypes
    >>> widen_bf16(np.array([1.5, -2.0**-133], ml_dtypes.bfloat16), np.float64).tolist()
    [1.5, -9.183549615799121e-41]
    """
    if x.size < TABLE_MIN:
        with np.errstate(invalid="ignore"):  # a signalling NaN: exact, nothing to warn of
            return x.astype(wide)
    u = x.view(np.uint16).astype(np.uint32)
    u <<= np.uint32(16)
    with np.errstate(invalid="ignore"):
        return u.view(np.float32).astype(wide, copy=False)


def narrow_to_byte(x: np.ndarray, dtype) -> np.ndarray:
    """``x.astype(dtype)`` for a float32 array ``x`` and a :func:`table_cast_ok` type: ml_dtypes'
    rounding (nearest even, the type's own overflow rule), read from a table indexed by the
    high 16 bits of each pattern and a sticky bit (module docstring; the same bits, about 2x
    faster).

    >>> import ml_dtypes
    >>> narrow_to_byte(np.array([0.3, 1e9, -2.0**-12], np.float32),
    ...                ml_dtypes.float8_e4m3fn).tolist()
    [0.3125, nan, -0.0]
    """
    dtype = np.dtype(dtype)
    if x.size < TABLE_MIN:
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(dtype)
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    idx = np.right_shift(u, np.uint32(15)).astype(np.intp)  # hi16 * 2 (+ the bit 15 below)
    idx &= 0x1FFFE
    low = np.bitwise_and(u, np.uint32(0xFFFF))
    low += np.uint32(0xFFFF)  # carries into bit 16 exactly when the low half is nonzero
    low >>= np.uint32(16)
    idx |= low
    return np.take(_narrow_table(dtype), idx).view(dtype)


# From this many elements rounding to bf16 by the bits (bf16_by_bits, fast.bf16_nearest_even)
# beats ml_dtypes' cast. One threshold for both sources: the crossover is ~10,000 elements
# from float32 and ~3,000 from float64 (measured, best of 9); 8192 is within 1.3x of the
# faster route for float32 and within 1.8x for float64 at every size.
BF16_BITS_MIN = 8192
_U32 = np.uint32
BF16_DROP = _U32(16)  # float32 and bfloat16 share sign and exponent: 16 bits go
_BF16_HALF_MINUS_ONE = _U32(0x7FFF)


def bf16_carry(b: np.ndarray) -> np.ndarray:
    """The one bf16 nearest-even rule (bf16_by_bits, fast.bf16_nearest_even and
    fast.bf16_values32 use it): float32 patterns ``b`` (uint32) plus 0x7FFF plus their
    bit 16, a new uint32 array whose high 16 bits are the bf16 pattern of ``b`` rounded to
    nearest even. bf16 has float32's exponent field, so the carry goes into the exponent as
    rounding does (subnormals included; 0x7F7F8000 and up rounds to inf). A NaN's carry
    may corrupt it: the caller's.

    >>> b = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.4e38], np.float32).view(np.uint32)
    >>> [hex(v >> 16) for v in bf16_carry(b).tolist()]  # ties to even; overflow to inf
    ['0x3f80', '0x3f82', '0x7f80']
    """
    r = np.right_shift(b, BF16_DROP)
    r &= _U32(1)
    r += _BF16_HALF_MINUS_ONE
    r += b
    return r


def bf16_by_bits(x: np.ndarray) -> np.ndarray | None:
    """``cast(x, bfloat16)`` for a float32 or float64 array by integer rounding of float32
    patterns (nearest even: ``bits + 0x7FFF + lsb``, the low 16 bits dropped; about 2x the
    speed of ml_dtypes' cast and of the rounding to odd), or None where ``x`` holds a NaN
    (ml_dtypes stores its canonical NaN: the caller's cast does). bf16 has float32's exponent
    field, so the carry of the addition goes into the exponent as rounding does (subnormals
    included; 0x7F7F8000 and up rounds to inf). A float64 ``x`` is rounded to float32 first
    (nearest even); that second rounding differs from one rounding only where the float32
    value is a bf16 midpoint (low half 0x8000) that x is not: those few are rounded by the
    side of the midpoint x lies on. tests/test_nativecast.py checks it against ml_dtypes'
    cast from float32 and fpsim.round from float64.

    >>> bf16_by_bits(np.array([1 + 2.0**-8 + 2.0**-30, -3.4e38, 0.0])).tolist()
    [1.0078125, -inf, 0.0]
    """
    import ml_dtypes

    flat = np.ascontiguousarray(x).reshape(-1)
    if flat.dtype not in (_F64, _F32):
        raise TypeError(f"bf16_by_bits takes float32 or float64, got {flat.dtype}")
    out = np.empty(flat.size, np.uint16)
    # float64 in chunks: the float32 copy and the work arrays stay small (a fresh megabyte
    # temporary costs more in page faults than its passes)
    step = _BF16_CHUNK if flat.dtype == _F64 else max(flat.size, 1)
    for lo in range(0, flat.size, step):
        c = flat[lo:lo + step]
        if c.dtype == _F64:
            with np.errstate(over="ignore", invalid="ignore"):
                y = c.astype(np.float32)
        else:
            y = c
        if np.isnan(y.max()):  # max propagates NaN: one reduction
            return None
        _bf16_round(c, y, out[lo:lo + step])
    return out.view(ml_dtypes.bfloat16).reshape(x.shape)


_BF16_CHUNK = 1 << 16


def _bf16_round(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """bf16_by_bits' rounding of float32 ``y`` (``x`` itself, or float64 ``x`` rounded to
    float32) into the uint16 patterns ``out``."""
    b = y.view(_U32)
    # float32 on a bf16 midpoint (low half 0x8000) that float64 x may not be
    tie = np.bitwise_and(b, _U32(0xFFFF)) == _U32(0x8000) if y is not x else None
    r = bf16_carry(b)
    r >>= BF16_DROP
    if tie is not None and tie.any():
        i = np.flatnonzero(tie)
        yi = y[i].astype(np.float64)
        keep = x[i] != yi  # x itself on the midpoint: rounded once already
        i, yi = i[keep], yi[keep]
        # x above the midpoint in magnitude: the upper neighbour, else the lower one
        r[i] = (b[i] >> BF16_DROP) + (np.abs(x[i]) > np.abs(yi))
    np.copyto(out, r, casting="unsafe")


@functools.cache
def _is_bf16(dtype: np.dtype) -> bool:
    import ml_dtypes

    return dtype == np.dtype(ml_dtypes.bfloat16)


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
    if x.size >= BF16_BITS_MIN and x.dtype in (_F64, _F32) and _is_bf16(dtype):
        r = bf16_by_bits(x)
        if r is not None:
            return r
    if x.dtype in (_F64, _F32) and x.size >= TABLE_MIN and table_cast_ok(dtype):
        return narrow_to_byte(f64_to_f32_odd(x) if x.dtype == _F64 else x, dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if x.dtype != _F64 or dtype in _NUMPY_FLOATS:
            return x.astype(dtype)
        return f64_to_f32_odd(x).astype(dtype)


# fp4 e2m1's decision points between neighbouring codes (0, 0.5, 1, 1.5, 2, 3, 4, 6): a tie
# goes to the even code, so the comparison is ">=" where the upper neighbour's code is even
FP4_COMPARE_MIN = 1 << 14  # smaller arrays: ml_dtypes' cast is faster (fewer passes)
_FP4_STEPS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False),
              (3.5, True), (5.0, False))


def fp4_nearest_even(y: np.ndarray) -> np.ndarray:
    """NaN-free float32 ``y`` rounded to nearest even fp4 e2m1 (its ml_dtypes dtype): the
    code magnitude is the number of decision points passed (seven comparisons into uint8,
    about twice as fast as ml_dtypes' cast on large arrays, slower below
    :data:`FP4_COMPARE_MIN` values; the same results), the sign bit is bit 3. Beyond the
    last point every value (inf included) gives 6, the format's largest, as the kernel's
    overflow does for a format without inf or NaN in either overflow policy; a NaN would give
    a zero (the caller's: fp4 has no NaN). The registry row :data:`fpsim.rounding.fast.FP4_COMPARE`.

    >>> fp4_nearest_even(np.array([0.25, 0.75, -2.6, 7.0], np.float32)).tolist()
    [0.0, 1.0, -3.0, 6.0]
    """
    a = np.abs(y)
    code = np.zeros(y.shape, np.uint8)
    for t, ties_up in _FP4_STEPS:
        code += (a >= np.float32(t)) if ties_up else (a > np.float32(t))
    code |= np.signbit(y).view(np.uint8) << np.uint8(3)
    return code.view(FP4_E2M1.storage_dtype)


# -- fma of float32 values rounded to odd (fpsim.arithmetic's float32 path) -------------------
_F32_MAX = float(np.finfo(np.float32).max)
_MAGNITUDE = np.uint32(0x7FFFFFFF)


def fits_float32(a: np.ndarray, b: np.ndarray) -> bool:
    """Are all products ``a * b`` of these float32 arrays (values of at most 12 significant
    bits) exact in float32: zero, or at least 2**-126 in magnitude? Decided from the smallest
    nonzero magnitudes (the patterns order as magnitudes, and zeros wrap to the top when one
    is subtracted). A product or a sum beyond float32 is inf: :func:`fma32_odd`'s finite
    test declines its chunk.

    >>> fits_float32(np.float32([1.0, 0.0]), np.float32([2.0**-100, 3.0]))
    True
    >>> fits_float32(np.float32([2.0**-20]), np.float32([2.0**-110]))
    False
    """
    least = 1.0
    for x in (a, b):
        u = np.bitwise_and(x.view(np.uint32), _MAGNITUDE)
        u -= np.uint32(1)
        m = int(u.min()) + 1
        if m > 0x7F800000:  # all zero (or NaN): no product to lose
            return True
        least *= float(np.uint32(m).view(np.float32))
    return least >= 2.0**-126


def fma32_odd(a: np.ndarray, b: np.ndarray, d: np.ndarray, rounding: Rounding,
              guard: bool = False) -> np.ndarray | None:
    """``a * b + d`` for float32 arrays of values whose products are exact in float32 (with
    ``guard``: where :func:`fits_float32` finds them so), rounded to odd at float32's
    precision (exact where float32 holds it; float32 result), or None when these arrays are
    not for it (a sum not finite: an inf or NaN operand or product; or the guard fails).
    Rounding the result once more to a format of at most 22 bits (p + 2 <= 24) in any
    deterministic mode is one rounding of the exact value (Boldo & Melquiond), which is what
    :mod:`fpsim.arithmetic`'s float32 fma does; ``rounding``: that mode, for the sign of an
    exact zero sum (-0 rounding down). tests/test_native_round.py checks it against the
    kernel's rounding to odd of the exact (Fraction) value.

    >>> a = np.float32([1 + 2.0**-8])  # a * a = 1 + 2**-7 + 2**-16, exact in float32
    >>> r = fma32_odd(a, a, np.float32([2.0**-30]), Rounding.NEAREST_EVEN)
    >>> float(r[0]) == 1 + 2.0**-7 + 2.0**-16 + 2.0**-23  # 2**-30 dropped: last bit set
    True
    """
    if guard and a.size and not fits_float32(a, b):
        return None
    p = a * b  # exact
    s = p + d
    if s.size and not (s.max() <= _F32_MAX and s.min() >= -_F32_MAX):  # NaN fails too
        return None
    bb = s - p  # TwoSum: e = (p - (s - bb)) + (d - bb) exactly
    e = s - bb
    np.subtract(p, e, out=e)
    np.subtract(d, bb, out=bb)
    e += bb
    # to odd: truncate toward zero (one step down in magnitude where e's sign is opposite to
    # s's; s is nonzero where e is), then set the last bit where inexact
    inexact = e != 0
    sb = s.view(np.uint32)
    opp = np.bitwise_xor(sb, e.view(np.uint32), out=bb.view(np.uint32))
    opp >>= np.uint32(31)
    opp &= inexact
    sb -= opp
    sb |= inexact
    if rounding is Rounding.DOWN:  # an exact zero sum is -0 here (float32 gave +0)
        zero = s == 0
        if zero.any():
            s[zero] = np.where(np.signbit(p[zero]) | np.signbit(d[zero]), -0.0, 0.0)
    return s
