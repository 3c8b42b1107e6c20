"""Fast exact kernels for matrix products (``fpsim.tensorcore.matmul``), bit for bit the
reference kernels of :mod:`fpsim.tensorcore.model` they stand in for (issue 33, "Speed").

Two kernels, each used where a cheap test proves it exact and handing the rest back:

- :func:`chain_plain_f32`, the NVIDIA plain units (c joins the aligned sum) with fp32-range
  output: the per-product work in 4-byte types. A product of two inputs with at most 12-bit
  significands (fp16, bf16, tf32, fp8) is exact in float32 where its exponent fits; times the
  alignment scale ``2**(F - maxE)`` (a power of two) it stays exact, and the float32 -> int32
  cast truncates toward zero, which is the hardware's sign-magnitude truncation. The block's
  integer terms are summed in int32 (the unit's bound keeps them below 2**31) and the sum is
  rounded by masking its float64 bits (toward zero) or by the float32 cast (nearest even).
  maxE comes from uint8 exponent sums. Where a block's exponents leave the ranges these steps
  need (tiny or huge values, subnormal c with no products), the chunk's remaining blocks go to
  the reference kernel, starting from the c reached so far.
- :func:`rounded_sums_blas`, the products' aligned sum of a ``c_addition="rounded_sum"`` unit
  (B200 fp8): where no product of a block loses a bit to the alignment (its exponent spread,
  bounded per row of A and column of B, is at most ``F - 2 m``) the truncated sum is the exact
  sum, and float64 BLAS (dgemm) computes it exactly: every partial sum is a multiple of the
  smallest product's last bit below 2**53 of them. Other elements are summed as the reference
  kernel sums them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..formats import Format
from ..modes import Rounding
from ..rounding.bits import truncation_mask
from .gpus import BlockFMA

__all__ = ["PlainF32", "plain_f32_setup", "biased_exponents", "window", "no_overflow",
           "outer", "chain_plain_f32", "rounded_sums_blas", "sums_in_fp32_range"]

_EXP_MASK32 = np.int32(0x7F800000)  # float32 exponent field: bits of 2**floor(log2|x|)
_INT32_MAX = (1 << 31) - 1
_UNBUFFERED_ROW = 256  # outer: rows this long (4-, 8-byte types) run faster unbuffered
_SMALL_BUFFER = 16  # ... under a ufunc buffer of this many elements (below any such row)


def _bits(e: int) -> int:
    """float32 bit pattern of 2**e (normal range)."""
    return (e + 127) << 23


@dataclass(frozen=True)
class PlainF32:
    """What :func:`chain_plain_f32` needs of a unit, worked out once per matmul."""

    n: int  # block size
    F: int  # fraction bits of the alignment
    c_in_sum: bool  # c's truncated term fits the int32 sum with the products
    keep: np.uint64 | None  # float64 mask rounding toward zero (None: nearest even by cast)
    floor_bits: int  # 2**max(mel, -126, F - 126): maxE of a block with no non-zero product
    tiny_c: float  # |c| below this with no products: maxE under F - 126, not handled here
    hi_bits: int  # maxE small enough that no block sum reaches 2**127 (no overflow)
    floor_min: int  # max(mel, -126): non-zero products must reach it (see window)
    mant_in: int  # fraction bits of the input format


def plain_f32_setup(unit: BlockFMA, fi: Format, rfmt: Format) -> PlainF32 | None:
    """The parameters of :func:`chain_plain_f32` for a plain unit, or None where it does not
    apply: products wider than float32's 24 bits, an output range other than fp32's, a
    rounding other than toward zero (or nearest even at fp32's own precision), or int32 sums
    that could overflow."""
    n, F, m = unit.block_size, unit.fraction_bits, fi.mantissa_bits
    if 2 * (m + 1) > 24 or rfmt.emax != 127 or rfmt.emin != -126 or F + 2 > 31:
        return None
    mode = unit.output_rounding
    if mode is Rounding.TOWARD_ZERO:
        keep = truncation_mask(rfmt)
    elif mode is Rounding.NEAREST_EVEN and rfmt.mantissa_bits == 23:
        keep = None
    else:
        return None
    term = (1 << (F + 2)) - 1  # a product's truncated term is below 2**(F + 2)
    if n * term > _INT32_MAX:
        return None
    c_in = n * term + (1 << (F + 1)) - 1 <= _INT32_MAX  # c's term is below 2**(F + 1)
    floor = -600 if unit.min_exponent is None else unit.min_exponent
    floor_c = max(floor, -126)
    # a block sum is below (n + 1) * 2**(maxE + 2): keep it under 2**127
    hi = min(F + 126, 125 - math.ceil(math.log2(n + 1)))
    return PlainF32(n, F, c_in, keep, _bits(max(floor_c, F - 126)),
                    float(np.ldexp(1.0, F - 126)) if F - 126 > floor_c else 0.0,
                    _bits(hi), floor_c, m)


def biased_exponents(e: np.ndarray, live: np.ndarray | None, bias: int) -> np.ndarray:
    """Exponents ``e`` of the non-zero inputs (``live``; None: all) as uint8 ``e + bias``, zeros
    at 0."""
    out = np.zeros(e.shape, np.uint8)
    np.add(e, bias, out=out, where=True if live is None else live, casting="unsafe")
    return out


def window(p: PlainF32, lo_a: int, hi_a: int, lo_b: int, hi_b: int) -> int | None:
    """The uint8 exponent bias of A (that of B is 127 minus it) for inputs whose non-zero
    exponents lie in [lo_a, hi_a] and [lo_b, hi_b], or None where chain_plain_f32 does not
    apply. With A's exponents at ``e + alpha`` in [sb + 1, sa + sb + 1] (sa, sb: the spreads),
    B's at ``e + 127 - alpha`` and zeros at 0, the uint8 sum of a product's two is its
    exponent's float32 field e_a + e_b + 127 (no wrap: at most 255), and any sum with a zero
    lies below every real product's. Also needed: every product exact in float32 (last bit at
    least 2**-149, magnitude below 2**126), and every non-zero product at or above max(mel,
    -126, F - 126), so that neither the floor nor c's -126 matter where there are products,
    and maxE never falls below F - 126 (blocks without products take ``floor_bits``)."""
    sa, sb, lo = hi_a - lo_a, hi_b - lo_b, lo_a + lo_b
    if (sa + sb > lo + 125 or hi_a + hi_b + 2 > 126 or lo - 2 * p.mant_in < -149
            or lo < max(p.floor_min, p.F - 126)):
        return None
    return sb + 1 - lo_a


def no_overflow(p: PlainF32, c_max: float, K: int, hi_a: int, hi_b: int) -> bool:
    """Whether every block result of a chunk stays below 2**(hi + 1), hi = the largest maxE
    handled: each is at most |c| plus the products' magnitudes so far (truncation and rounding
    toward zero shrink magnitudes; nearest even grows them by at most 2**-24 a block), so
    max|c| + K * 2**(hi_a + hi_b + 2), with room for the roundings, bounds them all."""
    hi = ((p.hi_bits >> 23) - 127)
    bound = (c_max + K * 2.0 ** (hi_a + hi_b + 2)) * (1 + K * 2.0**-20)
    return bound < 2.0 ** hi


def outer(op: np.ufunc, a: np.ndarray, b: np.ndarray, out: np.ndarray, *,
          zero_signs: bool = False) -> None:
    """``op(a[k, i], b[k, j])`` of (w, m) and (w, n) arrays into ``out`` (w, m, n): a block's
    products (``np.multiply``, each one multiplication) or exponent sums (``np.add``). For
    rows of at least ``_UNBUFFERED_ROW`` elements of 4 or 8 bytes, a broadcasting ufunc under a
    small ufunc buffer: with NumPy's default buffer (8192 elements) the iterator copies the
    broadcast operands and the output through its buffers, several rows at a time, which
    costs about as much again as the operation (for 1- and 2-byte types the buffered way is
    as fast or faster); with a buffer no larger than a row it calls the loop on each row in
    place. The buffer size is NumPy's per-thread (context variable) setting, restored at
    once. Shorter rows: einsum's outer-product loop for products (its sums make a -0
    product +0; ``zero_signs=True`` keeps the sign, by broadcasting), else broadcasting."""
    if b.shape[1] >= _UNBUFFERED_ROW and out.itemsize >= 4:
        old = np.setbufsize(_SMALL_BUFFER)
        try:
            op(a[:, :, None], b[:, None, :], out=out)
        finally:
            np.setbufsize(old)
    elif op is np.multiply and not zero_signs:
        np.einsum("ki,kj->kij", a, b, out=out)
    else:
        op(a[:, :, None], b[:, None, :], out=out)


def _buffer(work: dict | None, name: str, shape: tuple, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, or the array kept under ``name`` in ``work`` (one matrix
    product's temporaries, reused from chunk to chunk: each fresh multi-megabyte array costs
    its page faults again) where it has that shape and dtype."""
    if work is None:
        return np.empty(shape, dtype)
    a = work.get(name)
    if a is None or a.shape != shape or a.dtype != dtype:
        a = work[name] = np.empty(shape, dtype)
    return a


def chain_plain_f32(a32: np.ndarray, a8: np.ndarray, b32: np.ndarray, b8: np.ndarray,
                    live: int, c: np.ndarray, p: PlainF32,
                    finish: Callable[[int, np.ndarray], np.ndarray], *,
                    zeros: bool = True, check_hi: bool = True,
                    work: dict | None = None) -> np.ndarray:
    """Chained plain block FMAs of one (mc, nc) chunk: a32 / a8 (K, mc) float32 values and
    uint8 exponents of A's columns, b32 / b8 (K, nc) of B's rows (:func:`biased_exponents`,
    biases from :func:`window`), c (mc, nc) fp32 values; an exponent sum below ``live`` has
    a zero factor. ``zeros=False``: no input is zero (every block has non-zero products);
    ``check_hi=False``: :func:`no_overflow` holds. Where a block's maxE leaves the range
    handled here, ``finish(k0, c)`` computes the blocks from k0 on. ``work``: a dict that
    keeps the temporaries for the next chunk of the same product (see :func:`_buffer`); the
    result is a new array.

    Rows of A in pairs (mc even, rows of at least ``_UNBUFFERED_ROW``): the outer products,
    whose cost is mostly per row of the (k, m, n) array, take half as many rows as complex
    products: columns 2h and 2h + 1 of a32 viewed as one complex64 x + iy, times b + 0i, give
    (x b - y 0) + i (x 0 + y b), that is x b and y b exactly (the inputs are finite: chunks
    with values out of float32's range are refused), into the float32 pairs (h, j, 0) and
    (h, j, 1). Every other step works element by element, so the whole chunk is carried in
    that (mc / 2, nc, 2) order (the exponent sums likewise: the uint16 sum of two uint8 of A
    and a B exponent in both bytes, no carry as no sum passes 255) and put back in row order
    at the end."""
    K, mc = a32.shape
    nc = b32.shape[1]
    n = p.n
    pairs = (mc % 2 == 0 and nc >= _UNBUFFERED_ROW and a32.strides[1] == a32.itemsize
             and a8.strides[1] == 1)  # (columns of A in memory order: viewable in pairs)
    sh = (mc // 2, nc, 2) if pairs else (mc, nc)  # the chunk's element order
    o = 1 if p.c_in_sum else 0  # row 0 of P: c itself, scaled with the products into its term
    P = _buffer(work, "P", (n + o, *sh), np.float32)
    E = _buffer(work, "E", (n, *sh), np.uint8)
    if pairs:
        av, bv = a32.view(np.complex64), _buffer(work, "bv", (K, nc), np.complex64)
        bv[...] = b32  # b + 0i
        Pv = P.reshape(n + o, mc // 2, 2 * nc).view(np.complex64)
        ae, be = a8.view(np.uint16), _buffer(work, "be", (K, nc), np.uint16)
        np.multiply(b8, np.uint16(0x0101), out=be)  # B's exponent in both bytes
        Ev = E.reshape(n, mc // 2, 2 * nc).view(np.uint16)

        def order(x: np.ndarray) -> np.ndarray:  # (mc, nc) in row order -> the chunk's
            return x.reshape(mc // 2, 2, nc).transpose(0, 2, 1)

        def rows(x: np.ndarray) -> np.ndarray:  # the chunk's order -> (mc, nc) float64
            out = np.empty((mc, nc))
            order(out)[...] = x
            return out
    else:
        av, bv, Pv, ae, be, Ev = a32, b32, P, a8, b8, E

        def order(x: np.ndarray) -> np.ndarray:
            return x

        def rows(x: np.ndarray) -> np.ndarray:
            return x.astype(np.float64)
    mp = _buffer(work, "mp", sh, np.uint8)
    pb = _buffer(work, "pb", sh, np.int32)
    me = _buffer(work, "me", sh, np.int32)
    sc = _buffer(work, "sc", sh, np.int32)
    scale = sc.view(np.float32)
    isum = _buffer(work, "isum", sh, np.int32)
    S = _buffer(work, "S", sh, np.float64)
    Sv = S.view(np.uint64)
    if o:  # the running value lives in row 0: one multiply scales c and the products
        d = P[0]
        ct = None
    else:
        d = _buffer(work, "d", sh, np.float32)
        ct = _buffer(work, "ct", sh, np.float32)
    d[...] = order(c)
    dbits = d.view(np.int32)
    shift = np.int32(23)
    # 2**(F - maxE) has the bits (254 + F) * 2**23 - bits(2**maxE): past int32's range, so
    # the subtraction wraps in int32 and is read back as the right bit pattern
    sbase = np.int32(((254 + p.F) << 23) - (1 << 32))
    for k0 in range(0, K, n):
        k1 = min(K, k0 + n)
        w = k1 - k0
        # maxE of the products: the largest exponent sum, the float32 field of 2**maxE
        outer(np.add, ae[k0:k1], be[k0:k1], Ev[:w])
        np.maximum.reduce(E[:w], axis=0, out=mp)
        np.copyto(pb, mp)  # a plain widening cast, then the shift: cheaper than one
        np.left_shift(pb, shift, out=pb)  # shift with a uint8 -> int32 buffered cast
        if zeros and mp.min() < live:  # elements without a non-zero product
            none = mp < live
            pb[none] = p.floor_bits  # maxE from c and the floor
            if p.tiny_c and (none & (d != 0) & (np.abs(d) < p.tiny_c)).any():
                return finish(k0, rows(d))
        np.bitwise_and(dbits, _EXP_MASK32, out=me)  # c's 2**floor(log2|c|)
        np.maximum(me, pb, out=me)  # 2**maxE (bit patterns of positive floats compare alike)
        if check_hi and me.max() > p.hi_bits:
            return finish(k0, rows(d))
        np.subtract(sbase, me, out=sc)
        outer(np.multiply, av[k0:k1], bv[k0:k1], Pv[o:o + w])  # exact products
        # times 2**(F - maxE): exact (c's term too, in row 0); the int32 sum casts each
        # term, truncating toward zero
        if not o:
            np.multiply(d, scale, out=ct)
            np.trunc(ct, out=ct)
        np.multiply(P[:o + w], scale, out=P[:o + w])
        np.add.reduce(P[:o + w], axis=0, dtype=np.int32, out=isum)
        if o:
            S[...] = isum
        else:
            np.add(isum, ct, out=S)  # exact in float64
        if p.keep is not None:  # toward zero: drop the bits below the output's precision
            Sv &= p.keep
        # the sum to float32: exact (toward zero), or the cast rounds it to nearest even;
        # then divided by 2**(F - maxE) in float32, exact: a non-zero integer sum times a
        # grid of at least 2**-126 is normal (a zero sum is +0). Cheaper than a float64
        # division.
        np.copyto(d, S, casting="unsafe")
        np.divide(d, scale, out=d)
    return rows(d)


def rounded_sums_blas(av: np.ndarray, bv: np.ndarray, k0: int, k1: int, unit: BlockFMA,
                      fi: Format, stats: tuple, out: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """One block's aligned, truncated product sums into ``out`` (M, N) by float64 BLAS: av
    (K, M), bv (K, N) finite input values; ``stats`` = (a_hi, a_lo, b_hi, b_lo), the largest
    and smallest exponents of this block's non-zero inputs per column of A / row of B (hi
    below -10000 and lo above 10000 where all are zero). Returns None where the bound on the
    exponent spread proves every product whole on the alignment grid (so BLAS's exact sum is
    the truncated one) for every element, else the indices (ii, jj) of the elements that the
    caller must sum as the reference kernel does."""
    F, m, n = unit.fraction_bits, fi.mantissa_bits, unit.block_size
    floor = -600 if unit.min_exponent is None else unit.min_exponent
    # the spread from the largest exponent bound (or the floor) to the smallest last bit that
    # loses no bit: to the grid 2**(maxE - F), and within 53 bits for the n-term float64 sum
    lim = min(F - 2 * m, 51 - 2 * m - math.ceil(math.log2(n)))
    a_hi, a_lo, b_hi, b_lo = stats
    np.matmul(av[k0:k1].T, bv[k0:k1], out=out)  # (a zero sum may be -0: the caller's)
    a_live, b_live = a_hi > -10000, b_hi > -10000
    if not (a_live.any() and b_live.any()):
        return None
    big = 1 << 20  # a column / row of zeros: never a bad element
    sa = np.where(a_live, a_hi - a_lo, -big)
    sb = np.where(b_live, b_hi - b_lo, -big)
    la = np.where(a_live, a_lo, big)
    lb = np.where(b_live, b_lo, big)
    if int(sa.max()) + int(sb.max()) <= lim and int(la.min()) + int(lb.min()) >= floor - lim:
        return None
    bad = np.add.outer(sa, sb) > lim
    bad |= np.add.outer(la, lb) < floor - lim
    ii, jj = np.nonzero(bad)
    return (ii, jj) if ii.size else None


def sums_in_fp32_range(unit: BlockFMA, fi: Format, stats: tuple) -> bool:
    """Whether every product sum of a block (``stats`` as for :func:`rounded_sums_blas`), exact
    or truncated, is zero or in fp32's normal range below 2**127, so that rounding it toward
    zero to fp32 is clearing its low float64 bits: a non-zero sum is a multiple of the smaller
    of the smallest product's last bit and the alignment grid 2**(maxE - F) (maxE at least
    the smallest product exponent and the floor), and below n * 2**(largest exponent + 2)."""
    a_hi, a_lo, b_hi, b_lo = stats
    a_live, b_live = a_hi > -10000, b_hi > -10000
    if not (a_live.any() and b_live.any()):
        return True
    lo = int(a_lo.min()) + int(b_lo.min())
    floor = -600 if unit.min_exponent is None else unit.min_exponent
    last = min(lo - 2 * fi.mantissa_bits, max(lo, floor) - unit.fraction_bits)
    top = int(a_hi.max()) + int(b_hi.max()) + 2 + math.ceil(math.log2(unit.block_size))
    return last >= -126 and top <= 127
