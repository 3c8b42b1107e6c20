"""Fast round-to-nearest-even casts to fp16 with integer bit operations.

NumPy's own float32/float64 -> float16 casts are correctly rounded but take ~60 ns per element
for results in fp16's subnormal range (where small gradients live), ~30x their normal speed.
These vectorised versions give bit-identical results (tests/test_autograd_formats.py compares
them, and NumPy's cast used for arrays under 512 elements, with :func:`fpsim.round` on every
fp16 midpoint and its neighbours, subnormals, overflow, infinities and NaN):

- results of magnitude >= 2**-14 (normal): add half an fp16 ulp minus one plus the kept lsb to
  the magnitude pattern (ties to even), shift the dropped bits out and rebias the exponent; a
  carry into the exponent is the next binade, up to infinity;
- smaller results: one floating-point add of 0.5 (float32) / 2**28 (float64), whose ulp is
  2**-24, the fp16 subnormal quantum, lets the FPU round to the subnormal grid; the pattern
  difference is the fp16 pattern (1024 for a result of 2**-14);
- inputs of 65520 and up (the first to round to infinity) are clamped to infinity's pattern,
  checked only when some are present; NaN patterns get the quiet bit.
"""

from __future__ import annotations

import numpy as np

__all__ = ["f32_to_f16", "f64_to_f16", "f64_to_f32_to_f16", "f16_to_wide"]

_U32 = np.uint32
_U64 = np.uint64
_REBIAS32 = _U32((((15 - 127) << 23) + 0xFFF) & 0xFFFFFFFF)
_REBIAS64 = _U64((((15 - 1023) << 52) + (1 << 41) - 1) & 0xFFFFFFFFFFFFFFFF)


_SCRATCH: dict = {}
_SMALL = 512  # below this many elements NumPy's own (equally exact) cast is cheaper
_SCRATCH_MAX = 1 << 20  # largest reused work array, in elements


def _scratch(slot: int, n: int, dtype) -> np.ndarray:
    """A reused work array of ``n`` elements: fresh temporaries of this size cost page faults
    and cache misses that dominate these few-cycle passes. Never returned to callers."""
    if n > _SCRATCH_MAX:  # large arrays: fresh memory (keep no big buffers alive)
        return np.empty(n, dtype=dtype)
    buf = _SCRATCH.get((slot, dtype))
    if buf is None or buf.size < n:
        buf = np.empty(n if n > 4096 else 4096, dtype=dtype)
        _SCRATCH[(slot, dtype)] = buf
    return buf[:n]


def _select(r: np.ndarray, other: np.ndarray, flag: np.ndarray) -> None:
    """``r = other where flag`` in place, by arithmetic (r += (other - r) * flag; ``other`` is
    scratch): a masked copy mispredicts a branch per element on mixed masks, ~10x slower."""
    other -= r
    other *= flag
    r += other


def _finish(r, u, shift, uint, shape) -> np.ndarray:
    """OR the sign bits into the fp16 patterns ``r`` and return them as float16 (the sign goes
    through slot 0, free by now: a smaller working set stays in cache)."""
    sign = np.right_shift(u, uint(shift), out=_scratch(0, u.size, u.dtype.type))
    sign &= uint(0x8000)
    r |= sign
    return r.astype(np.uint16).view(np.float16).reshape(shape)


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """float32 array -> float16 array, round to nearest even.

    >>> f32_to_f16(np.array([2.0**-25 * 3, 65520.0, 0.1], dtype=np.float32)).tolist()
    [1.1920928955078125e-07, inf, 0.0999755859375]
    """
    if np.size(x) < _SMALL:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(x, dtype=np.float32).astype(np.float16)
    u = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(_U32)
    n = u.size
    a = np.bitwise_and(u, _U32(0x7FFFFFFF), out=_scratch(0, n, _U32))
    # in-place steps: fresh temporaries cost page faults and cache misses
    r = np.right_shift(a, _U32(13), out=_scratch(1, n, _U32))
    r &= _U32(1)
    r += a
    r += _REBIAS32
    r >>= _U32(13)
    flag = np.less(a, _U32(0x38800000), out=_scratch(2, n, np.bool_))
    if flag.any():
        with np.errstate(invalid="ignore"):
            sub = np.add(a.view(np.float32), np.float32(0.5),
                         out=_scratch(3, n, np.float32)).view(_U32)
        sub -= _U32(0x3F000000)
        _select(r, sub, flag)
    np.greater_equal(a, _U32(0x477FF000), out=flag)  # rounds to inf (>= 65520), inf or NaN
    if flag.any():
        np.minimum(r, _U32(0x7C00), out=r)
        np.greater(a, _U32(0x7F800000), out=flag)
        r[flag] = _U32(0x7E00)  # a quiet NaN
    return _finish(r, u, 16, _U32, np.shape(x))


def f64_to_f32_to_f16(x: np.ndarray) -> np.ndarray:
    """float64 array -> float32 (nearest even) -> float16 (nearest even): the two roundings of
    an fp32 accumulator stored as fp16, the float32 step in a reused buffer.

    >>> x = np.array([1 + 2.0**-11 + 2.0**-30])  # to fp32: exactly the fp16 tie, then even
    >>> f64_to_f32_to_f16(x).tolist(), f64_to_f16(x).tolist()
    ([1.0], [1.0009765625])
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size < _SMALL or x.size > _SCRATCH_MAX:
        with np.errstate(over="ignore"):
            return f32_to_f16(x.astype(np.float32))
    f = _scratch(6, x.size, np.float32).reshape(x.shape)
    with np.errstate(over="ignore"):
        np.copyto(f, x, casting="same_kind")
    return f32_to_f16(f)


def f64_to_f16(x: np.ndarray) -> np.ndarray:
    """float64 array -> float16 array, round to nearest even (one rounding, not via float32).

    >>> f64_to_f16(np.array([1 + 2.0**-11 + 2.0**-40])).tolist()  # above the tie: rounds up
    [1.0009765625]
    """
    if np.size(x) < _SMALL:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(x, dtype=np.float64).astype(np.float16)
    u = np.ascontiguousarray(x, dtype=np.float64).reshape(-1).view(_U64)
    n = u.size
    a = np.bitwise_and(u, _U64(0x7FFFFFFFFFFFFFFF), out=_scratch(0, n, _U64))
    r = np.right_shift(a, _U64(42), out=_scratch(1, n, _U64))
    r &= _U64(1)
    r += a
    r += _REBIAS64
    r >>= _U64(42)
    flag = np.less(a, _U64(0x3F10000000000000), out=_scratch(2, n, np.bool_))
    if flag.any():
        with np.errstate(invalid="ignore"):
            sub = np.add(a.view(np.float64), 2.0**28,
                         out=_scratch(3, n, np.float64)).view(_U64)
        sub -= _U64(0x41B0000000000000)
        _select(r, sub, flag)
    np.greater_equal(a, _U64(0x40EFFE0000000000), out=flag)  # rounds to inf, inf or NaN
    if flag.any():
        np.minimum(r, _U64(0x7C00), out=r)
        np.greater(a, _U64(0x7FF0000000000000), out=flag)
        r[flag] = _U64(0x7E00)
    return _finish(r, u, 48, _U64, np.shape(x))


_F16_TO_F64 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
with np.errstate(invalid="ignore"):
    _F16_TO_F32 = _F16_TO_F64.astype(np.float32)


def f16_to_wide(x: np.ndarray, dtype=np.float64) -> np.ndarray:
    """float16 array -> float64 (or float32) array, exactly, by a 65536-entry table: NumPy's
    cast takes ~60 ns per subnormal. The patterns are copied into a reused intp index array
    first: NumPy converts uint16 indices per element, and a fresh index array costs page faults.

    >>> f16_to_wide(np.array([2.0**-24, -65504.0], dtype=np.float16)).tolist()
    [5.960464477539063e-08, -65504.0]
    """
    table = _F16_TO_F64 if dtype == np.float64 else _F16_TO_F32
    x = np.asarray(x)
    if x.size > _SCRATCH_MAX:
        return table[x.view(np.uint16)]
    idx = _scratch(5, x.size, np.intp)
    np.copyto(idx, x.view(np.uint16).reshape(-1))
    return np.take(table, idx).reshape(x.shape)
