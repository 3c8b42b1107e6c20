"""Fast round-to-nearest-even casts to fp16: the FPU does the rounding, integer bit operations
pack the result.

NumPy's own float32/float64 -> float16 casts are correctly rounded but take ~150 ns per element
for results in fp16's subnormal range (where small gradients live), ~20x their normal speed.
These vectorised versions give bit-identical results (tests/test_autograd_formats.py compares
them with NumPy's casts and with :func:`fpsim.round` on every fp16 midpoint and its neighbours,
subnormals, overflow, infinities and NaN; arrays under 512 elements take NumPy's cast):

- unpack: ``2**E`` with E = max(exponent of x, -14), so fp16's quantum at x is 2**(E-10) for
  normal and subnormal results alike;
- round: ``c = 1.5 * 2**(E+13)`` (float32; 2**(E+42) for float64) with x's sign has that
  quantum as its ulp and x + c stays in c's binade, so the FPU's own add rounds x to the fp16
  grid, ties to even; c is built from E's bits by integer adds (no float multiply: a subnormal
  product would cost ~35x);
- pack: c also carries ``(E + 14) << 10`` quanta, plus 0x8000 where x < 0, in its low bits
  (both even, so ties still go to the even k), so the low 16 bits of x + c are fp16's sign and
  exponent fields plus k = |x| / quantum rounded: the fp16 pattern (k = 2048, a carry, is the
  next binade, up to infinity);
- inputs of 65536 and up, infinities and NaN (rare: one max-reduction checks) are patched to
  infinity's pattern or the quiet NaN 0x7E00.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["f32_to_f16", "f64_to_f16", "f64_to_f32_to_f16", "f16_to_wide", "SMALL"]

_U32 = np.uint32
_U64 = np.uint64


# The work arrays, per thread: two threads casting at once must not share one (issue 32).
_SCRATCH = threading.local()
SMALL = 512  # below this many elements NumPy's own (equally exact) cast is cheaper
_SCRATCH_MAX = 1 << 20  # largest reused work array, in elements


def _scratch(slot: int, n: int, dtype) -> np.ndarray:
    """A reused work array of ``n`` elements: fresh temporaries of this size cost page faults
    and cache misses that dominate these few-cycle passes. Slots are shared by dtypes of one
    item size (float32 / uint32 views of the same memory: a smaller working set stays in
    cache). Each thread has its own. Never returned to callers."""
    dtype = np.dtype(dtype)
    if n > _SCRATCH_MAX:  # large arrays: fresh memory (keep no big buffers alive)
        return np.empty(n, dtype=dtype)
    try:
        bufs = _SCRATCH.bufs
    except AttributeError:  # this thread's first call
        bufs = _SCRATCH.bufs = {}
    key = (slot, dtype.itemsize)
    buf = bufs.get(key)
    if buf is None or buf.size < n:
        buf = np.empty(n if n > 4096 else 4096, dtype=dtype)
        bufs[key] = buf
    return buf[:n].view(dtype)


def _pack(x: np.ndarray, uint, frac_bits: int, shape) -> np.ndarray:
    """The steps of the module docstring for float32 (``uint`` uint32, 23 fraction bits) or
    float64 (uint64, 52) values ``x`` (1-D, contiguous); returns float16 of ``shape``."""
    if x[0] != x[0] and np.isnan(x).all():
        # a diverged run's arrays are all NaN: every pattern is the quiet NaN the patch below
        # writes, without the rounding passes and the patch's (one test when x[0] is a number)
        return np.full(shape, np.nan, dtype=np.float16)  # NumPy's NaN is 0x7E00
    n = x.size
    width = x.itemsize * 8
    shift = frac_bits - 10  # fp16 keeps 10 fraction bits
    bias = (1 << (width - 2 - frac_bits)) - 1  # 127 / 1023
    u = x.view(uint)
    e = np.bitwise_and(u, uint(((1 << (width - 1 - frac_bits)) - 1) << frac_bits),
                       out=_scratch(0, n, uint))
    ef = e.view(x.dtype)  # 2**exponent (0 for zero and subnormals; inf for inf / NaN)
    np.maximum(ef, ef.dtype.type(2.0**-14), out=ef)  # 2**E (the float max is the faster)
    big = e.max() >= uint((bias + 16) << frac_bits)  # 65536 and up, infinities, NaN
    c = np.right_shift(e, uint(shift), out=_scratch(1, n, uint))  # (E + bias) << 10
    c += e
    c += uint((shift << frac_bits) + (1 << (frac_bits - 1)) - ((bias - 14) << 10))
    neg = np.right_shift(u, uint(width - 1), out=_scratch(2, n, uint))  # 1 where x < 0
    neg *= uint((1 << (width - 1)) | 0x8000)  # x's sign, and 0x8000 (fp16's) in the low bits
    c += neg
    with np.errstate(over="ignore", invalid="ignore"):  # huge / inf / NaN: patched below
        y = np.add(x, c.view(x.dtype), out=c.view(x.dtype))  # the rounding
    res = np.empty(shape, dtype=np.float16)  # the result owns its memory (not a view)
    out = res.reshape(-1).view(np.uint16)
    np.copyto(out, y.view(uint), casting="unsafe")  # the low 16 bits: the fp16 pattern
    if big:  # out of fp16's range, infinities, NaN
        a = np.bitwise_and(u, ~uint(1 << (width - 1)), out=_scratch(0, n, uint))  # |x|'s bits
        over = a >= np.asarray(65536.0, dtype=x.dtype).view(uint)
        nan = a > np.asarray(np.inf, dtype=x.dtype).view(uint)
        if np.count_nonzero(over) * 16 < n:  # a few (an overflow): patch them by index
            hi = np.right_shift(u[over], uint(width - 16))  # sign and exponent bits
            out[over] = (hi & uint(0x8000)) | uint(0x7C00)
            out[nan] = 0x7E00  # a quiet NaN
        else:  # many (a diverged run's NaN): masked indexing costs ~10 ns each, so blend
            _patch_many(out, u, over, nan, uint, width)
    return res


def _patch_many(out: np.ndarray, u: np.ndarray, over: np.ndarray, nan: np.ndarray, uint,
                width: int) -> None:
    """_pack's patch of ``out`` (fp16 patterns) where ``over``: +-inf (x's sign), or the quiet
    NaN 0x7E00 where ``nan``; branch-free (and / or with all-ones masks), for dense masks."""
    u16 = np.uint16
    pat = np.right_shift(u, uint(width - 16)).astype(u16)  # x's sign: bit 15
    pat &= u16(0x8000)
    pat |= u16(0x7C00)  # +-inf
    isnan = nan.view(np.uint8).astype(u16)  # 1 where NaN
    pat &= ~(isnan * u16(0x8000))  # NaN: sign cleared and bit 9 set, 0x7E00
    pat |= isnan * u16(0x0200)
    keep = over.view(np.uint8).astype(u16)
    keep *= u16(0xFFFF)  # all ones where patched
    pat &= keep
    np.bitwise_and(out, ~keep, out=out)
    out |= pat


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """float32 array -> float16 array, round to nearest even.

    >>> f32_to_f16(np.array([2.0**-25 * 3, 65520.0, 0.1], dtype=np.float32)).tolist()
    [1.1920928955078125e-07, inf, 0.0999755859375]
    """
    if np.size(x) < SMALL:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(x, dtype=np.float32).astype(np.float16)
    return _pack(np.ascontiguousarray(x, dtype=np.float32).reshape(-1), _U32, 23, np.shape(x))


def f64_to_f32_to_f16(x: np.ndarray) -> np.ndarray:
    """float64 array -> float32 (nearest even) -> float16 (nearest even): the two roundings of
    an fp32 accumulator stored as fp16, the float32 step in a reused buffer.

    >>> x = np.array([1 + 2.0**-11 + 2.0**-30])  # to fp32: exactly the fp16 tie, then even
    >>> f64_to_f32_to_f16(x).tolist(), f64_to_f16(x).tolist()
    ([1.0], [1.0009765625])
    """
    x = np.asarray(x, dtype=np.float64)
    # (a signalling NaN sets the FPU's invalid flag on the way: it stays a NaN, as in
    # f32_to_f16 and f64_to_f16, which silence it too)
    if x.size < SMALL or x.size > _SCRATCH_MAX:
        with np.errstate(over="ignore", invalid="ignore"):
            return f32_to_f16(x.astype(np.float32))
    f = _scratch(3, x.size, np.float32).reshape(x.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        np.copyto(f, x, casting="same_kind")
    return f32_to_f16(f)


def f64_to_f16(x: np.ndarray) -> np.ndarray:
    """float64 array -> float16 array, round to nearest even (one rounding, not via float32).

    >>> f64_to_f16(np.array([1 + 2.0**-11 + 2.0**-40])).tolist()  # above the tie: rounds up
    [1.0009765625]
    """
    if np.size(x) < SMALL:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(x, dtype=np.float64).astype(np.float16)
    return _pack(np.ascontiguousarray(x, dtype=np.float64).reshape(-1), _U64, 52, np.shape(x))


_F16_TO_F64 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
with np.errstate(invalid="ignore"):
    _F16_TO_F32 = _F16_TO_F64.astype(np.float32)
for _table in (_F16_TO_F64, _F16_TO_F32):
    _table.flags.writeable = False  # shared by every thread: read only
del _table


def f16_to_wide(x: np.ndarray, dtype=np.float64) -> np.ndarray:
    """float16 array -> float64 (or float32) array, exactly, by a 65536-entry table: NumPy's
    cast takes ~20 ns per subnormal (7x its normal speed). Arrays of 512 elements and more
    copy their patterns into a reused intp index array first: NumPy converts uint16 indices per
    element, and a fresh index array costs page faults; smaller ones index the table directly
    (the least overhead).

    >>> f16_to_wide(np.array([2.0**-24, -65504.0], dtype=np.float16)).tolist()
    [5.960464477539063e-08, -65504.0]
    """
    table = _F16_TO_F64 if dtype == np.float64 else _F16_TO_F32
    n = x.size
    if n < SMALL or n > _SCRATCH_MAX:  # small: plain indexing has the least overhead
        return table[x.view(np.uint16)]
    idx = _scratch(5, n, np.intp)
    np.copyto(idx, x.view(np.uint16).reshape(-1))
    return table.take(idx).reshape(x.shape)
