"""Bit-exact model of NVIDIA tensor-core GEMM: ``D = A @ B + C`` one block FMA at a time.

One block (``docs/tensorcore-model.md``): products are exact; each product's exponent is
``e_a + e_b`` with ``e = max(floor(log2|x|), emin_in)`` (significands in [0, 4), not
normalised); ``c`` joins with ``max(floor(log2|c|), -126)``; zero terms take no part. With
``maxE = max(largest exponent, mel)`` every term becomes an integer with ``F = 23 + neab``
fraction bits below ``2**maxE``, its magnitude truncated; the integers are added exactly and
the sum is rounded once to the output format (RZ for fp32, RNE for fp16, subnormals kept).
Blocks chain in ascending k, each block's rounded result being the next ``c``.

How it is computed, exactly and vectorised over M, N and the k of a block (one work array
per block: row 0 holds c, rows 1..n the products, so one max, one scaling, one truncation and
one sum handle every term):

- the product ``a*b`` of two inputs (at most 24-bit significands) is exact in float64;
- alignment multiplies by ``2**(F - maxE)``, built from its exponent bits (exact: a power of
  two, far from float64's range limits since every exponent lies in [-600, 300]);
- ``np.trunc`` truncates each aligned term toward zero: the hardware's sign-magnitude
  truncation. Every term is now an integer; terms shifted beyond their ``F + 2`` bits become 0
  (the hardware's "more than 31 places" rule, implied for the GPUs' F <= 25);
- the integer terms are summed exactly. They are integers carried in float64, not int64: the
  float64 -> int64 conversion costs more than the whole rest of a block, and float64 adds
  integers exactly below 2**53. Bound: a term is below ``2**(F + 2)`` (a product's significand
  is below 4, c's below 2), so every partial sum of the ``n + 1`` terms is below
  ``(n + 1) * 2**(F + 2)``: 33 bits for the largest GPU unit (n = 32, F = 25).
  :class:`~fpsim.tensorcore.gpus.BlockFMA` refuses parameters whose sum could reach 2**53,
  so ``sum * 2**(maxE - F)`` is the exact block value, rounded once to the output format
  (bit operations in the normal range, :func:`fpsim.round` otherwise).

Memory stays bounded: the (k, m, n) temporaries are built for chunks of about
``CHUNK_ELEMENTS`` elements (the fast matrix-product kernels of :mod:`.fastpath`: 4-byte
temporaries, or (m, n) ones only, for chunks ``_FAST_CHUNK`` times as large); Python loops run
only over chunks and the K / n blocks.

Matrix products of the plain units (fp32-range output) and of the ``rounded_sum`` units take
the kernels of :mod:`fpsim.tensorcore.fastpath` where those prove themselves exact (issue 33),
with the same results bit for bit (``tests/test_tensorcore_fastpath.py``).

>>> import numpy as np, fpsim.tensorcore as tc
>>> float(tc.dot([1.0, 1.0], [1.0, -2.0**-24], -1 + 2.0**-24, gpu="V100"))  # probe D3
1.1920928955078125e-07
>>> float(tc.dot([1.0, 1.0], [1.0, -2.0**-24], -1 + 2.0**-24, gpu="A100"))
0.0
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from ..arithmetic import add as fp_add
from ..arithmetic import quiet_flags
from ..checks import as_int
from ..formats import FP32, TF32, Format
from ..modes import Overflow, Rounding, Subnormals
from ..rounding import SIGN, as_float64
from ..rounding import round as fp_round
from ..rounding.bits import round_normal, truncate_to_tf32, truncation_mask
from ..rounding.eft import two_sum
from . import fastpath
from .explain import build_explanation
from .gpus import C_MIN_EXPONENT, MAX_INT_BITS, BlockFMA, BlockOverflow, GpuModel, resolve_unit

__all__ = ["matmul", "dot", "convert_input", "CHUNK_ELEMENTS"]

#: Elements of the (k, m, n) temporaries per chunk: small enough to stay in cache.
CHUNK_ELEMENTS = 1 << 17
_ZERO_EXP = -20000  # exponent of a zero term: below every real one, and 2x fits int32
_NO_FLOOR = -600  # "no mel": below every real term exponent (>= -2 * 126 - 2 * 23)
_LIVE_EXP = -5000  # biased exponents below this belong to zero terms (_ZERO_EXP and below)
_U = np.uint64


# -- inputs ------------------------------------------------------------------------------------

def convert_input(x: npt.ArrayLike, input_format: Format | str) -> np.ndarray:
    """Real values -> exact values of a tensor-core input format (float64 array).

    fp16, bf16 and fp8 round to nearest even (:func:`fpsim.round`; an out-of-range e4m3 value
    becomes NaN, as e4m3 has no infinity). tf32 does what the hardware does with an fp32
    operand: the low 13 bits of the fp32 pattern are dropped (truncation); values that are
    not fp32 already (float64 input) are first rounded to fp32 with round to nearest even.

    >>> import fpsim.tensorcore as tc
    >>> float(tc.convert_input(1 - 2.0**-24, "tf32")), float(tc.convert_input(0.1, "fp16"))
    (0.99951171875, 0.0999755859375)
    """
    from ..formats import get_float_format

    fmt = get_float_format(input_format)
    if fmt == TF32:
        x32 = np.asarray(fp_round(x, FP32), dtype=np.float64).astype(np.float32)
        return truncate_to_tf32(x32).astype(np.float64)  # (fp_round's NaNs are quiet)
    return np.asarray(fp_round(x, fmt), dtype=np.float64)


def _split(values: np.ndarray, fmt: Format, bias: int) -> tuple[np.ndarray, np.ndarray]:
    """(finite values with non-finite set to 0, int32 exponents max(floor(log2|x|), emin) +
    bias, with zeros and non-finite at _ZERO_EXP)."""
    fin = np.isfinite(values)
    vals = values if fin.all() else np.where(fin, values, 0.0)
    bits = np.ascontiguousarray(vals).view(_U)
    e = np.empty(vals.shape, np.int32)  # sign and exponent field: int32 from here on
    np.right_shift(bits, _U(52), out=e, casting="unsafe")  # (no uint64 temporary)
    e &= 0x7FF
    np.maximum(e, fmt.emin + 1023, out=e)
    e += bias - 1023
    e[vals == 0] = _ZERO_EXP
    return vals, e


def _c_table(floor: int) -> np.ndarray:
    """Biased float64 exponent field of c -> the biased exponent c joins the alignment with,
    the floor mel folded in: max(field, 1023 - 126, mel + 1023); a zero c (field 0) gives
    only the floor; an infinite c (field 2047, an overflowed block) stays on top."""
    t = np.maximum(np.arange(2048, dtype=np.int32), 1023 + C_MIN_EXPONENT)
    t[0] = 0
    return np.maximum(t, floor + 1023).astype(np.int32)


# -- output rounding -------------------------------------------------------------------------

def _ovf_value(fmt: Format) -> float:
    """2**(emax + 1): an exact sum at or past it is +-inf under ``"always_inf"``."""
    return float(np.ldexp(1.0, fmt.emax + 1))


def _core_overflow(overflow: BlockOverflow) -> Overflow:
    """The core rounding's overflow policy under a unit's (always-inf is IEEE's rule plus a
    fix-up of the values at and past 2**(emax + 1))."""
    return Overflow.SATURATE if overflow is BlockOverflow.SATURATE else Overflow.INF


def _round_out(v: np.ndarray, fmt: Format, mode: Rounding, overflow: BlockOverflow,
               out: np.ndarray) -> np.ndarray:
    """Round exact float64 block values into ``out`` (float64, same shape), overflow per the
    unit's policy; returns uint64 patterns whose exponent fields are the results'. Values in
    the normal range with finite results take the rounding package's bit path
    (:func:`fpsim.rounding.bits.round_normal`), the others :func:`fpsim.round`."""
    mag = round_normal(v, fmt, mode, out)
    if mag is not None:
        return mag
    r = np.asarray(fp_round(v, fmt, mode, overflow=_core_overflow(overflow)), dtype=np.float64)
    if overflow is BlockOverflow.ALWAYS_INF:
        big = np.abs(v) >= _ovf_value(fmt)
        if big.any():
            r = np.where(big, np.copysign(np.inf, v), r)
    out[...] = r
    return out.view(_U) & ~SIGN


# -- the kernel ------------------------------------------------------------------------------

def _products(av: np.ndarray, bv: np.ndarray, out: np.ndarray, *,
              zero_signs: bool = False) -> None:
    """The products av * bv into ``out`` (one multiplication each): see :func:`_outer`.
    ``zero_signs``: a -0 product stays -0 (pairwise units add zeros as IEEE does: -0 + -0 is
    -0); the other kinds give a zero sum +0 whatever its terms' signs."""
    _outer(np.multiply, av, bv, out, zero_signs=zero_signs)


def _outer(op: np.ufunc, x: np.ndarray, y: np.ndarray, out: np.ndarray, *,
           zero_signs: bool = False) -> None:
    """``op(x, y)`` into ``out``: for a matrix product's operands (x (k, m, 1), y (k, 1, n))
    by :func:`fastpath.outer` (einsum's outer-product loop or an unbuffered ufunc, each
    faster than the default buffered broadcast where it is used; ``zero_signs`` as there),
    else broadcasting."""
    if x.ndim == 3 and x.shape[2] == 1 and y.shape[1] == 1:
        fastpath.outer(op, x[:, :, 0], y[:, 0, :], out, zero_signs=zero_signs)
    else:
        op(x, y, out=out)


def _specials(araw, braw, c, step: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Special values over the whole dot product: (mask, value) or None if there are none.

    Any NaN (0 * inf included) gives NaN; +inf with -inf gives NaN; else an inf gives it."""
    nan = np.isnan(c)
    pos = c == np.inf
    neg = c == -np.inf
    K = araw.shape[0]
    with np.errstate(invalid="ignore", over="ignore"):
        for k0 in range(0, K, step):
            p = araw[k0:k0 + step] * braw[k0:k0 + step]
            nan = nan | np.isnan(p).any(axis=0)
            pos = pos | (p == np.inf).any(axis=0)
            neg = neg | (p == -np.inf).any(axis=0)
    nan = nan | (pos & neg)
    mask = nan | pos | neg
    if not mask.any():
        return None
    val = np.where(nan, np.nan, np.where(pos, np.inf, -np.inf))
    return mask, val


def _chain(av, ae, bv, be, c, unit: BlockFMA, rfmt: Format, out_shape: tuple,
           trace: list | None = None) -> np.ndarray:
    """Chained block FMAs over the first axis of av/bv (broadcast to (K, *out_shape)).

    ``ae`` holds exponents biased by 1023, ``be`` unbiased ones, so that a product's
    ``ae + be`` compares directly with the biased exponent field of c's float64 pattern.
    Row 0 of the work arrays is c (the previous block's result), rows 1..w the products:
    one max, one scaling, one truncation and one sum handle every term of a block."""
    K = av.shape[0]
    n = unit.block_size
    F = unit.fraction_bits
    floor = _NO_FLOOR if unit.min_exponent is None else unit.min_exponent
    table = _c_table(floor)
    mode, overflow = unit.output_rounding, unit.overflow
    w0 = max(0, min(n, K))
    P = np.empty((w0 + 1, *out_shape))
    E = np.empty((w0 + 1, *out_shape), dtype=np.int32)
    P[0] = c
    np.take(table, (P[0].view(_U) >> _U(52)) & _U(0x7FF), out=E[0])
    scale_base = np.int64(F + 2 * 1023)  # biased exponent of 2**(F - maxE) is this - maxE'
    for k0 in range(0, max(K, 1), n):
        k1 = min(K, k0 + n)
        w = k1 - k0
        if w > 0:
            _products(av[k0:k1], bv[k0:k1], P[1:w + 1])
            _outer(np.add, ae[k0:k1], be[k0:k1], E[1:w + 1])
        p = P[:w + 1]
        cin = P[0].copy() if trace is not None else None
        mx = E[:w + 1].max(axis=0)  # maxE + 1023, the floor included through c's row
        scale = ((scale_base - mx) << 52).view(np.float64)  # 2**(F - maxE), exactly
        np.multiply(p, scale, out=p)
        np.trunc(p, out=p)  # each term's magnitude truncated: integers below 2**(F + 2)
        s = p.sum(axis=0)  # exact: every partial sum is an integer below 2**53
        s += 0.0  # an exactly zero sum is +0 (-0 + -0 would stay -0)
        v = s / scale  # the block's exact value
        mag = _round_out(v, rfmt, mode, overflow, P[0])
        np.take(table, mag >> _U(52), out=E[0])
        if trace is not None:
            trace.append({"k0": k0, "k1": k1, "c": cin, "max_exponent": mx - 1023,
                          "sum": s.copy(), "value": v.copy(), "result": P[0].copy()})
    return P[0].copy()


# -- the generic block FMA (the published models' other parameters) -------------------------

_ALIGN_ROUND = {Rounding.TOWARD_ZERO: np.trunc, Rounding.DOWN: np.floor, Rounding.UP: np.ceil,
                Rounding.NEAREST_EVEN: np.rint}


def _pow2(e: np.ndarray) -> np.ndarray:
    """2.0**e for int64 arrays e in float64's normal range, from the exponent bits."""
    return ((np.asarray(e, dtype=np.int64) + 1023) << 52).view(np.float64)


def _aligned_sum(P, E, floor: int, F: int, sticky: bool):
    """Multi-operand alignment of the terms P (exact, biased exponents E) over axis 0:
    (exact integer sum, its biased exponent maxE, fraction bits, any non-zero term)."""
    # A zero term's exponent is far below every real one (_ZERO_EXP from _split, or set so
    # by the caller), so the maximum needs no mask; P is a temporary and is scaled in place.
    if P.shape[0] == 0:  # an empty group (odd positions of a one-product block)
        shape = P.shape[1:]
        return (np.zeros(shape), np.full(shape, floor + 1023, dtype=np.int32),
                F + int(sticky), np.zeros(shape, dtype=bool))
    mx = E.max(axis=0)
    live = mx > _LIVE_EXP
    mx = np.maximum(mx, floor + 1023)
    scale = _pow2(F - (mx - 1023))
    t = np.multiply(P, scale, out=P)
    if sticky:  # one bit below each term's last, set when bits were shifted out
        tt = np.trunc(t)
        tt = 2 * tt + np.sign(t) * (t != tt)
    else:
        tt = np.trunc(t, out=t)
    return tt.sum(axis=0) + 0.0, mx, F + int(sticky), live


def _two_operand(x, ex, y, ey, extra: int, mode: Rounding, far: int | None):
    """x * 2**-fx... : add two signed integer sums x (at exponent ex) and y (at ey), both with
    the same fraction bits: the one with the smaller exponent is shifted to the larger one's and
    rounded by ``mode``; when x is the smaller it first gains ``extra`` bits (y too). Returns
    (integer sum, exponent, extra bits gained)."""
    rnd = _ALIGN_ROUND[mode]
    d = np.clip(ey - ex, -600, 600)  # > 0: x is the smaller; 600 places clear every bit
    gain = np.where(d > 0, extra, 0)
    xg = x * _pow2(gain)
    yg = y * _pow2(gain)
    xs = rnd(xg * _pow2(-np.maximum(d, 0)))
    ys = yg * _pow2(-np.maximum(-d, 0))
    yr = rnd(ys)
    if far is not None:
        yr = np.where(-d > far, np.trunc(ys), yr)
    return xs + yr, np.maximum(ex, ey), gain


def _c_late(c: np.ndarray, F: int):
    """c as a signed integer with F fraction bits below 2**Ec, Ec = max(floor(log2|c|), -126)
    (-126 for a zero c), and Ec biased."""
    bits = np.ascontiguousarray(c).view(_U)
    ec = ((bits >> _U(52)) & _U(0x7FF)).astype(np.int64)
    ec = np.maximum(ec, 1023 + C_MIN_EXPONENT)
    return c * _pow2(F - (ec - 1023)), ec


def _flush(x: np.ndarray, fmt: Format, signed: bool = False) -> np.ndarray:
    tiny = np.abs(x) < fmt.smallest_normal
    return np.where(tiny, np.copysign(0.0, x) if signed else 0.0, x)


def _add_c(c: np.ndarray, s: np.ndarray, rfmt: Format, mode: Rounding,
           overflow: BlockOverflow) -> np.ndarray:
    """c + s for c and s already rfmt values, one correctly rounded addition in rfmt (IEEE
    754's, signed zeros included; c_addition="rounded_sum"). fp32 to nearest even is float32
    arithmetic; otherwise the core's :func:`fpsim.add` (exact whatever the exponent gap: no
    double rounding through float64), its flags kept out of the caller's flag context. An
    exact sum at or past 2**(emax + 1) is +-inf under ``"always_inf"`` in every mode (the
    float64 sum of two rfmt values reaches 2**(emax + 1) exactly when the exact one does)."""
    if rfmt == FP32 and mode is Rounding.NEAREST_EVEN and overflow is not BlockOverflow.SATURATE:
        with np.errstate(over="ignore", invalid="ignore"):
            return (c.astype(np.float32) + s.astype(np.float32)).astype(np.float64)
    with quiet_flags(), np.errstate(over="ignore", invalid="ignore"):
        r = np.asarray(fp_add(c, s, rfmt, mode, overflow=_core_overflow(overflow)),
                       dtype=np.float64)
        if overflow is BlockOverflow.ALWAYS_INF:
            v = c + s
            big = np.abs(v) >= _ovf_value(rfmt)
            if big.any():
                r = np.where(big, np.copysign(np.inf, v), r)
    return np.array(r, dtype=np.float64).reshape(np.shape(s))


def _exact_round(terms: np.ndarray, rfmt: Format, mode: Rounding,
                 overflow: BlockOverflow = BlockOverflow.ALWAYS_INF) -> np.ndarray:
    """Round the exact sum of the float64 terms over axis 0 once to rfmt: an error-free
    expansion (two-sum), a faithful float64 approximation, then round to odd at 53 bits
    (safe before rounding to rfmt's at most 24 bits)."""
    def grow(comps, x):
        out = []
        q = x
        for h in comps:
            q, e = two_sum(q, h)
            out.append(e)
        out.append(q)
        return out

    comps: list = []
    for x in terms:
        comps = grow(comps, x)
    s = np.zeros_like(terms[0])
    for h in comps:
        s = s + h
    for _ in range(8):  # refine until s is a faithful rounding of the exact sum
        res = grow(comps, -s)
        r = np.zeros_like(s)
        for h in res:
            r = r + h
        if not (np.abs(r) >= 0.5 * np.spacing(np.abs(s))).any():
            break
        s = s + r
    sign = np.zeros_like(s)
    for h in res:  # increasing, non-overlapping: the last non-zero component's sign
        sign = np.where(h != 0, np.sign(h), sign)
    odd = (s.view(_U) & _U(1)) == 1
    s_odd = np.where((sign == 0) | odd, s, np.nextafter(s, np.where(sign > 0, np.inf, -np.inf)))
    r = np.asarray(fp_round(s_odd + 0.0, rfmt, mode, overflow=_core_overflow(overflow)),
                   dtype=np.float64)
    if overflow is BlockOverflow.ALWAYS_INF:  # an exact sum past the range is +-inf
        big = np.abs(s_odd) >= _ovf_value(rfmt)
        r = np.where(big, np.copysign(np.inf, s_odd), r)
    return r


def _exact_sum(T: np.ndarray, rfmt: Format, mode: Rounding, overflow: BlockOverflow,
               prod_bits: int) -> np.ndarray:
    """The exact sum of the terms T over axis 0, rounded once. Where every term is a multiple
    of 2**q and below 2**top with top - q + log2(terms) <= 53, the float64 sum is exact (any
    order) and is rounded directly; only the other elements take the expansion path."""
    # A term t has at most w significant bits (c: the result format's, a product: twice an
    # input's), so its lowest bit is at least |t| 2**-w; the float64 sum is exact when every
    # partial sum, below n * 2 max|t|, fits 53 bits above the smallest such bit (margin 2).
    absT = np.abs(T)
    hi = absT.max(axis=0)
    q = np.min(absT[1:], axis=0, where=absT[1:] > 0, initial=np.inf) * 2.0**-prod_bits
    q = np.minimum(q, np.where(absT[0] > 0, absT[0], np.inf) * 2.0**-(rfmt.mantissa_bits + 1))
    fast = 4.0 * T.shape[0] * hi <= 2.0**53 * q
    out = np.empty(T.shape[1:])
    if fast.any():
        _round_out(T.sum(axis=0) + 0.0, rfmt, mode, overflow, out)
    if not fast.all():
        slow = ~fast
        out[slow] = _exact_round(T[:, slow], rfmt, mode, overflow)
    return out


def _pairwise(P: np.ndarray, c: np.ndarray, rfmt: Format, flush: bool) -> np.ndarray:
    """Products rounded to rfmt, added in a binary tree, every addition rounded to nearest
    even in rfmt (and flushed), then c."""
    if rfmt == FP32:  # float32 arithmetic is this: each addition rounded to nearest even
        def rnd(x):
            return x

        with np.errstate(over="ignore"):
            p = P.astype(np.float32)
            c = c.astype(np.float32)
    else:
        def rnd(x):
            return np.asarray(fp_round(x, rfmt, Rounding.NEAREST_EVEN), dtype=np.float64)

        p = rnd(P)
    if flush:
        p = _flush(p, rfmt)

    def tree(x):
        if x.shape[0] == 1:
            return x[0]
        h = x.shape[0] // 2
        with np.errstate(invalid="ignore", over="ignore"):
            v = rnd(tree(x[:h]) + tree(x[h:]))
        return _flush(v, rfmt, signed=True) if flush else v

    with np.errstate(invalid="ignore", over="ignore"):
        d = rnd(c + tree(p))
    d = _flush(d, rfmt, signed=True) if flush else d
    return np.asarray(d, dtype=np.float64)


def _block_general(P, E, c, unit: BlockFMA, rfmt: Format, n: int, prod_bits: int = 48,
                   check_limit: bool = True):
    """One generic block FMA over axis 0 of P (exact products, biased exponents E):
    (result, trace fields). c is finite or an infinity carried from an overflowed block.
    ``check_limit=False`` skips the product-limit test (no product can reach it)."""
    F = unit.fraction_bits
    floor = _NO_FLOOR if unit.min_exponent is None else unit.min_exponent
    mode, overflow = unit.output_rounding, unit.overflow
    flush_out = unit.output_subnormals is Subnormals.FLUSH
    c_inf = ~np.isfinite(c)
    cf = np.where(c_inf, 0.0, c)
    if flush_out:
        cf = _flush(cf, rfmt)
    if unit.products == "normalised":
        pe = ((np.abs(P).view(_U) >> _U(52)) & _U(0x7FF)).astype(np.int32)
        E = np.where((P != 0) & (pe > E), E + 1, E)
    lim = None
    if unit.product_limit and check_limit:
        big = np.ldexp(1.0, rfmt.emax + 1)
        pos = (P >= big).any(axis=0)
        neg = (P <= -big).any(axis=0)
        if (pos | neg).any():
            lim = (pos | neg, np.where(pos & neg, np.nan, np.where(pos, np.inf, -np.inf)))
    info: dict = {}
    if unit.c_addition == "rounded_sum":  # the products' sum rounded, then c added to it
        if unit.summation == "exact":  # (row 0 of the exact sum's terms is a zero c)
            v = None
            ps = _exact_sum(np.concatenate([np.zeros_like(cf)[None], P]), rfmt, mode, overflow,
                            prod_bits)
        else:
            s, mx, Fe, _ = _aligned_sum(P, E, floor, F, unit.sticky_bit)
            v = s * _pow2(mx - 1023 - Fe)
            ps = np.empty_like(v)
            _round_out(v, rfmt, mode, overflow, ps)
            info = {"max_exponent": mx - 1023, "sum": s, "value": v}
        if flush_out:
            ps = _flush(ps, rfmt)
        info["product_sum"] = ps
        d = _add_c(cf, ps, rfmt, unit.c_rounding, overflow)
    elif unit.summation == "exact":
        d = _exact_sum(np.concatenate([cf[None], P]), rfmt, mode, overflow, prod_bits)
    elif unit.summation == "pairwise":
        if P.shape[0] < n:  # the last block is padded with zero products, as the unit does
            P = np.concatenate([P, np.zeros((n - P.shape[0], *P.shape[1:]))])
        d = _pairwise(P, cf, rfmt, flush_out)
    elif unit.c_addition == "joined":
        cb = np.ascontiguousarray(cf).view(_U)
        ce = np.maximum(((cb >> _U(52)) & _U(0x7FF)).astype(np.int32), 1023 + C_MIN_EXPONENT)
        ce = np.where(cf == 0, _ZERO_EXP, ce)  # a zero c takes no part
        s, mx, Fe, _ = _aligned_sum(np.concatenate([cf[None], P]),
                                    np.concatenate([ce[None], E]), floor, F, unit.sticky_bit)
        v = s * _pow2(mx - 1023 - Fe)
        info = {"max_exponent": mx - 1023, "sum": s, "value": v}
        d = np.empty_like(v)
        _round_out(v, rfmt, mode, overflow, d)
    else:  # c added late
        if unit.grouping == "odd_even":
            se, me, Fe, le = _aligned_sum(P[0::2], E[0::2], floor, F, unit.sticky_bit)
            so, mo, _, lo = _aligned_sum(P[1::2], E[1::2], floor, F, unit.sticky_bit)
            me = np.where(le, me, -(1 << 20))
            mo = np.where(lo, mo, -(1 << 20))
            sp, mp, _ = _two_operand(se, me, so, mo, 0, unit.alignment_rounding, None)
            live = le | lo
            mp = np.where(live, mp, 0)
        else:
            sp, mp, Fe, live = _aligned_sum(P, E, floor, F, unit.sticky_bit)
        ic, ec = _c_late(cf, Fe)
        # no non-zero product: the block passes c on unchanged
        mp = np.where(live, mp, ec)
        s, mx, gain = _two_operand(sp, mp.astype(np.int64), ic, ec, unit.late_extra_bits,
                                   unit.alignment_rounding, unit.c_far_truncation)
        s = s + 0.0
        v = s * _pow2(mx - 1023 - Fe - gain)
        info = {"max_exponent": mx - 1023, "sum": s, "value": v}
        d = np.empty_like(v)
        _round_out(v, rfmt, mode, overflow, d)
    if flush_out and unit.summation != "pairwise":
        d = _flush(d, rfmt)
    if c_inf.any():
        d = np.where(c_inf, c, d)
    if lim is not None:
        with np.errstate(invalid="ignore"):
            d = np.where(lim[0], np.where(c_inf, c + lim[1], lim[1]), d)
    return d, info


def _chain_general(av, ae, bv, be, c, unit: BlockFMA, rfmt: Format, out_shape: tuple,
                   trace: list | None = None, *, fi: Format = FP32,
                   check_limit: bool = True) -> np.ndarray:
    """Chained generic block FMAs (see :func:`_block_general`), blocks in ascending k.
    ``check_limit=False``: no product can reach the product limit (known beforehand)."""
    K = av.shape[0]
    n = unit.block_size
    d = np.array(np.broadcast_to(c, out_shape), dtype=np.float64)
    # exact and pairwise sums take no exponents (unless products are normalised)
    need_e = unit.summation == "aligned" or unit.products == "normalised"
    for k0 in range(0, max(K, 1), n):
        k1 = min(K, k0 + n)
        P = np.empty((k1 - k0, *out_shape))  # writable temporaries: scaled in place
        E = np.empty((k1 - k0, *out_shape), dtype=np.int32)
        _products(av[k0:k1], bv[k0:k1], P, zero_signs=unit.summation == "pairwise")
        if need_e:
            _outer(np.add, ae[k0:k1], be[k0:k1], E)
        cin = d
        d, info = _block_general(P, E, d, unit, rfmt, n, 2 * (fi.mantissa_bits + 1),
                                 check_limit)
        if trace is not None:
            trace.append({"k0": k0, "k1": k1, "c": cin.copy(), "result": d.copy(), **info})
    return d


# -- fast generic kernels: the same results as _chain_general, fewer passes -----------------
#
# _chain_general / _block_general follow the published models stage by stage (integer sums,
# two-operand alignments) and feed the explain record. The AMD units' speed comes from three
# specialised kernels (exact, late c / odd-even, pairwise), used when no trace is asked for
# and checked against _chain_general (tests/test_tensorcore_fast.py): they compute the same
# values with fewer array passes. The late-c kernel rests on one fact: a value times or
# divided by a power of two is exact in float64 (all exponents stay far inside its range), so
# "round x to a multiple of 2**g" is rnd(x / 2**g) * 2**g whatever x's own scaling, and
# integer sums can be carried as values.

_LIVE16 = -10000  # zero-term exponent in the int16 exponent arrays of the late-c kernel
_EXP_BITS = np.int64(0x7FF << 52)  # a float64's exponent field: x & _EXP_BITS = 2**floor(log2|x|)
_C_FLOOR = float(np.ldexp(1.0, C_MIN_EXPONENT))  # c joins with at least exponent -126


def _fast_kind(unit: BlockFMA) -> str | None:
    """'exact', 'late', 'rounded_sum' or 'pairwise' when a specialised kernel computes this
    unit (None: the stage-by-stage kernel)."""
    if unit.summation == "pairwise":
        return "pairwise"
    if (unit.sticky_bit or unit.products != "unnormalised"
            or unit.input_subnormals is not Subnormals.KEEP
            or unit.output_subnormals is not Subnormals.KEEP):
        return None
    if unit.c_addition == "rounded_sum":
        return "rounded_sum" if unit.summation == "aligned" else None
    if unit.summation == "exact":
        return "exact"
    if unit.summation == "aligned" and unit.c_addition == "late":
        return "late"
    return None


def _rounder(rfmt: Format, mode: Rounding, overflow: BlockOverflow):
    """The output rounding of a block as a function (v, out): float64 -> float32 -> float64
    casts where that is the unit's rounding (fp32, nearest even, overflow to inf: IEEE's
    conversion, subnormals included; to nearest, the always-inf rule is IEEE's),
    :func:`_round_out` otherwise."""
    if (rfmt == FP32 and mode is Rounding.NEAREST_EVEN
            and overflow is not BlockOverflow.SATURATE):
        def cast(v, out):
            with np.errstate(over="ignore"):
                out[...] = v.astype(np.float32)
        return cast
    return lambda v, out: _round_out(v, rfmt, mode, overflow, out)


def _chain_exact(av, ae, bv, be, c, unit: BlockFMA, rfmt: Format, out_shape: tuple, *,
                 fi: Format = FP32, c_bits: int = 23) -> np.ndarray:
    """Chained exact (Kulisch) block sums. Where every term of a block is a multiple of 2**lo
    below 2**top with ``(n + 1) * 2**top <= 2**(53 + lo)``, the float64 sum is exact in any
    order and is rounded once; the bounds come from the exponents of each row of A and
    column of B over the block (a product's lowest bit is at least 2**(e_a + e_b - 2 m_in),
    its magnitude below 2**(e_a + e_b + 2)) and of c (c_bits fraction bits), so they cost a
    few operations per output. Other elements take :func:`_exact_round`.

    For a matrix product (av (K, m, 1), bv (K, 1, n)) the block sums come from float64 BLAS
    (dgemm), which adds the same terms in another order: where the bound above holds every
    partial sum of them, in any order, is a multiple of 2**lo below 2**(53 + lo), so every
    addition (and fused multiply-add) is exact and the sum is the same exact value; only the
    products of the other elements are formed, to be summed by :func:`_exact_round`."""
    K = av.shape[0]
    n = unit.block_size
    blas = av.ndim == 3 and av.shape[2] == 1 and bv.shape[1] == 1
    a2, b2 = (av[:, :, 0], bv[:, 0, :]) if blas else (None, None)
    rnd = _rounder(rfmt, unit.output_rounding, unit.overflow)
    span = MAX_INT_BITS - int(np.ceil(np.log2(n + 1)))
    f = np.arange(2048, dtype=np.int32)
    tops = f + 1  # |c| < 2**(e + 1); a zero c (field 0) takes no part
    tops[0] = _ZERO_EXP
    lows = f - c_bits
    lows[0] = -_ZERO_EXP
    ae_lo = np.where(ae > _LIVE_EXP, ae, -_ZERO_EXP)  # zero inputs: no lowest bit
    be_lo = np.where(be > _LIVE_EXP, be, -_ZERO_EXP)
    P = None if blas else np.empty((max(0, min(n, K)), *out_shape))
    d = np.array(np.broadcast_to(c, out_shape), dtype=np.float64)
    s = np.empty(out_shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for k0 in range(0, K, n):
            k1 = min(K, k0 + n)
            if blas:  # exact where the bound holds (the others are recomputed below)
                np.matmul(a2[k0:k1].T, b2[k0:k1], out=s)
            else:
                p = P[:k1 - k0]
                np.multiply(av[k0:k1], bv[k0:k1], out=p)
                p.sum(axis=0, out=s)
            ta = ae[k0:k1].max(axis=0) + 2  # per row of A / column of B over the block
            tb = be[k0:k1].max(axis=0)
            la = ae_lo[k0:k1].min(axis=0) - 2 * fi.mantissa_bits
            lb = be_lo[k0:k1].min(axis=0)
            # First the whole block at once: the largest top and smallest lowest bit of the
            # products, and c's magnitudes (a nonzero c with biased exponent e lies in
            # [2**(e - 1023), 2**(e - 1022)), its lowest bit at least 2**(e - 1023 - c_bits)).
            tpm = int(ta.max()) + int(tb.max())
            lpm = int(la.min()) + int(lb.min())
            ad = np.abs(d)
            exact = tpm - lpm <= span and ad.max() < np.ldexp(1.0, lpm + span - 1023)
            if exact:  # the smallest nonzero |c| (inf when every c is zero)
                cmin = np.min(ad, where=ad > 0, initial=np.inf)
                exact = cmin >= np.ldexp(1.0, tpm + c_bits - span - 1023)
            slow = None
            if not exact:  # element by element
                field = (d.view(_U) >> _U(52)) & _U(0x7FF)
                top = np.maximum(ta + tb, np.take(tops, field))
                top -= np.minimum(la + lb, np.take(lows, field))
                slow = top > span
            s += d
            s += 0.0  # an exactly zero sum is +0
            if slow is not None and slow.any():
                if blas:  # the products of the other elements, a bounded number at a time
                    ii, jj = np.nonzero(slow)
                    dd = d[ii, jj]
                    rnd(s, d)
                    step = max(1, CHUNK_ELEMENTS // n)
                    for s0 in range(0, ii.size, step):
                        i, j = ii[s0:s0 + step], jj[s0:s0 + step]
                        t = np.concatenate([dd[s0:s0 + step][None], a2[k0:k1, i] * b2[k0:k1, j]])
                        d[i, j] = _exact_round(t, rfmt, unit.output_rounding, unit.overflow)
                    continue
                t = np.concatenate([d[slow][None], p[:, slow]])
                rnd(s, d)
                d[slow] = _exact_round(t, rfmt, unit.output_rounding, unit.overflow)
            else:
                rnd(s, d)
    return d


def _chain_late(av, ae, bv, be, c, unit: BlockFMA, rfmt: Format,
                out_shape: tuple) -> np.ndarray:
    """Chained aligned block sums with c added late (and odd/even groups): the stages of
    :func:`_block_general` on values. ``ae`` / ``be`` are int16 exponents (zero terms at
    _LIVE16). Each group: maxE, truncation to F bits below it, exact sum, value; the
    odd/even merge and the late c round each operand to the grid 2**g of the larger one:
    rnd(x / 2**g) * 2**g."""
    K = av.shape[0]
    n = unit.block_size
    F = unit.fraction_bits
    G = 2 if unit.grouping == "odd_even" else 1
    floor = (_NO_FLOOR if unit.min_exponent is None else unit.min_exponent) + 1023
    extra, far = unit.late_extra_bits, unit.c_far_truncation
    rnd = _ALIGN_ROUND[unit.alignment_rounding]
    out_rnd = _rounder(rfmt, unit.output_rounding, unit.overflow)
    # exponent differences stay below 1000 (every exponent lies in [-600, 300])
    far_scale = None if far is None or far > 1000 else np.ldexp(1.0, far)
    wmax = max(0, min(n, K))
    wmax += wmax % G
    P = np.empty((wmax, *out_shape))
    E = np.empty((wmax, *out_shape), dtype=np.int16)
    d = np.array(np.broadcast_to(c, out_shape), dtype=np.float64)
    scale_base = np.int16(F + 2 * 1023)  # minus maxE (>= 423, biased): 2**(F - maxE)'s field
    for k0 in range(0, K, n):
        k1 = min(K, k0 + n)
        w = k1 - k0
        wp = w + w % G
        _products(av[k0:k1], bv[k0:k1], P[:w])
        np.add(ae[k0:k1], be[k0:k1], out=E[:w])
        if wp > w:  # an odd last block: an empty product closes the odd group
            P[w:wp] = 0.0
            E[w:wp] = 2 * _LIVE16
        p = P[:wp].reshape(wp // G, G, *out_shape)
        mx = E[:wp].reshape(wp // G, G, *out_shape).max(axis=0)  # (G, ...) per group
        live = mx > _LIVE_EXP
        np.maximum(mx, floor, out=mx)
        scale = np.left_shift(scale_base - mx, 52, dtype=np.int64).view(np.float64)
        np.multiply(p, scale, out=p)  # times 2**(F - maxE)
        np.trunc(p, out=p)
        gv = p.sum(axis=0)
        gv /= scale  # each group's exact value
        if G == 2:  # the merge: the smaller group rounded to the larger one's grid
            mp = np.maximum(mx[0], mx[1])
            live = live[0] | live[1]
            g1 = np.left_shift(mp - np.int16(F), 52, dtype=np.int64).view(np.float64)
            gv /= g1
            rnd(gv, out=gv)
            pv = gv[0] + gv[1]
            pv *= g1
        else:
            mp, live, pv = mx[0], live[0], gv[0]
        # the exponents of the late addition as powers of two: 2**Ep of the product sum, 2**Ec
        # of c (its float64 exponent bits; at least 2**-126, also for a zero c)
        pp = np.left_shift(mp, 52, dtype=np.int64).view(np.float64)
        pc = (d.view(np.int64) & _EXP_BITS).view(np.float64)
        np.maximum(pc, _C_FLOOR, out=pc)
        if not live.all():
            pp = np.where(live, pp, pc)  # no non-zero product: the block passes c on
        pos = pc > pp  # c's exponent is the larger: the product sum gains `extra` bits
        grid = np.maximum(pp, pc)
        grid *= np.where(pos, 2.0 ** (-F - extra), 2.0**-F)
        pv /= grid
        rnd(pv, out=pv)
        y = d / grid
        farm = None if far_scale is None else pp > pc * far_scale  # Ep - Ec > far
        if farm is not None and farm.any():
            y = np.where(farm, np.trunc(y), rnd(y))
        else:
            rnd(y, out=y)
        pv += y
        pv *= grid
        pv += 0.0  # an exactly zero sum is +0
        out_rnd(pv, d)
    return d


def _chain_rounded(av, ae, bv, be, c, unit: BlockFMA, rfmt: Format,
                   out_shape: tuple, *, fi: Format | None = None) -> np.ndarray:
    """Chained aligned block sums with c added to the rounded product sum
    (c_addition="rounded_sum"): :func:`_chain`'s one pass per block over the products alone
    (maxE from them and the floor; a block of zero products sums to +0), the sum rounded to
    rfmt by the output rounding, then c added by :func:`_add_c`. For a matrix product (av
    (K, m, 1), bv (K, 1, n)) and the input format ``fi``, the sums come from float64 BLAS
    where they are provably exact (:func:`fastpath.rounded_sums_blas`)."""
    K = av.shape[0]
    n = unit.block_size
    floor = (_NO_FLOOR if unit.min_exponent is None else unit.min_exponent) + 1023
    rnd = _rounder(rfmt, unit.output_rounding, unit.overflow)
    d = np.array(np.broadcast_to(c, out_shape), dtype=np.float64)
    ps = np.empty(out_shape)
    scale_base = np.int64(unit.fraction_bits + 2 * 1023)  # minus maxE': 2**(F - maxE)'s field

    def aligned(p, e):  # the reference's truncated sum of the products p (exponents e)
        mx = np.maximum(e.max(axis=0), floor)
        scale = ((scale_base - mx) << 52).view(np.float64)
        np.multiply(p, scale, out=p)
        np.trunc(p, out=p)
        s = p.sum(axis=0)  # exact: integers below 2**53
        s += 0.0
        s /= scale
        return s

    if fi is not None and av.ndim == 3 and av.shape[2] == 1 and bv.shape[1] == 1 and K:
        a2, b2 = av[:, :, 0], bv[:, 0, :]
        ae2, be2 = ae[:, :, 0], be[:, 0, :]
        a_hi, a_lo = _block_exponent_range(ae2, n, 1023)
        b_hi, b_lo = _block_exponent_range(be2, n, 0)
        step = max(1, CHUNK_ELEMENTS // n)
        # B200's case: a sum rounded toward zero to fp32, c added in float32 to nearest even:
        # where the block's sums cannot leave fp32's normal range the rounding is a mask, and
        # c (an fp32 value) stays in float32; a -0 c is made +0 once (the reference's zero
        # sums are +0, so its c is never -0 after the first block, and neither is this one)
        f32 = (rfmt == FP32 and unit.output_rounding is Rounding.TOWARD_ZERO
               and unit.c_rounding is Rounding.NEAREST_EVEN
               and unit.overflow is not BlockOverflow.SATURATE)
        if f32:
            d32 = (d + 0.0).astype(np.float32)
            ps32 = np.empty(out_shape, np.float32)
            keep = truncation_mask(FP32)
        for j, k0 in enumerate(range(0, K, n)):
            k1 = min(K, k0 + n)
            stats = (a_hi[j], a_lo[j], b_hi[j], b_lo[j])
            bad = fastpath.rounded_sums_blas(a2, b2, k0, k1, unit, fi, stats, ps)
            if bad is not None:  # elements whose products may lose bits: as the reference
                for s0 in range(0, bad[0].size, step):
                    ii, jj = bad[0][s0:s0 + step], bad[1][s0:s0 + step]
                    ps[ii, jj] = aligned(a2[k0:k1, ii] * b2[k0:k1, jj],
                                         ae2[k0:k1, ii] + be2[k0:k1, jj])
            if f32 and fastpath.sums_in_fp32_range(unit, fi, stats):
                psv = ps.view(np.uint64)
                psv &= keep  # toward zero
                np.copyto(ps32, ps, casting="unsafe")  # exact
                d32 += ps32  # float32 addition: rounded to nearest even, overflow to inf
                continue
            ps += 0.0  # an exactly zero sum is +0, as the reference's
            rnd(ps, ps)
            if f32:
                d32 = _add_c(d32.astype(np.float64), ps, rfmt, unit.c_rounding,
                             unit.overflow).astype(np.float32)
            else:
                d = _add_c(d, ps, rfmt, unit.c_rounding, unit.overflow)
        return d32.astype(np.float64) if f32 else d
    P = np.empty((max(0, min(n, K)), *out_shape))
    E = np.empty((max(0, min(n, K)), *out_shape), dtype=np.int32)
    for k0 in range(0, K, n):
        k1 = min(K, k0 + n)
        p, e = P[:k1 - k0], E[:k1 - k0]
        _products(av[k0:k1], bv[k0:k1], p)
        _outer(np.add, ae[k0:k1], be[k0:k1], e)
        rnd(aligned(p, e), ps)
        d = _add_c(d, ps, rfmt, unit.c_rounding, unit.overflow)
    return d


def _block_exponent_range(e: np.ndarray, n: int, bias: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block of n rows of the exponents e (K, X) (biased by ``bias``, zeros at
    _ZERO_EXP): the largest and smallest unbiased exponent of the non-zero inputs of each
    column, (blocks, X) each; -20000 / 20000 where a block's column is all zeros."""
    K, X = e.shape
    nb = -(-K // n)
    live = e > _LIVE_EXP
    hi = np.full((nb * n, X), -20000, dtype=np.int32)
    lo = np.full((nb * n, X), 20000, dtype=np.int32)
    np.subtract(e, bias, out=hi[:K], where=live)
    np.subtract(e, bias, out=lo[:K], where=live)
    return hi.reshape(nb, n, X).max(axis=1), lo.reshape(nb, n, X).min(axis=1)


def _chain_pairwise(av, _ae, bv, _be, c, unit: BlockFMA, rfmt: Format, out_shape: tuple, *,
                    fi: Format = FP32) -> np.ndarray:
    """Chained pairwise block sums with fp32 results: :func:`_pairwise` in float32 throughout.
    A float32 product of two inputs (exact in float32: at most 24-bit significands within
    fp32's exponent range) is the exact product rounded once to nearest even, as the cast of
    the float64 product is; the tree adds neighbours level by level, which is the recursive
    halving order for a power-of-two block. Flushing: as :func:`_block_general` does, unless
    the input format makes it void (every product and partial sum a multiple of 2**g with
    g - 24 >= emin: none can be subnormal; c, flushed once, is never -0, so no zero result
    is -0 either, as with the flushed (+0) zero products)."""
    K = av.shape[0]
    n = unit.block_size
    flush_out = unit.output_subnormals is Subnormals.FLUSH
    grid = 2 * (fi.emin - fi.mantissa_bits)
    flush = flush_out and grid - 24 < FP32.emin
    a32 = av.astype(np.float32)
    b32 = bv.astype(np.float32)
    P = np.zeros((n, *out_shape), dtype=np.float32)
    d = np.array(np.broadcast_to(c, out_shape), dtype=np.float32)
    if flush_out:  # a subnormal c becomes +0 (later results are flushed or never subnormal)
        d = _flush(d, rfmt)
    with np.errstate(over="ignore", invalid="ignore"):
        for k0 in range(0, K, n):
            k1 = min(K, k0 + n)
            w = k1 - k0
            _outer(np.multiply, a32[k0:k1], b32[k0:k1], P[:w], zero_signs=True)  # -0 kept
            if w < n:
                P[w:] = 0.0  # the last block is padded with zero products
            if flush:
                d = _flush(d, rfmt)
            x = _flush(P, rfmt) if flush else P
            while x.shape[0] > 1:
                x = x[0::2] + x[1::2]
                if flush:
                    x = _flush(x, rfmt, signed=True)
            d = d + x[0]
            if flush:
                d = _flush(d, rfmt, signed=True)
    return d.astype(np.float64)


def _limit_reachable(av: np.ndarray, bv: np.ndarray, rfmt: Format) -> bool:
    """Whether any product of the finite inputs can reach the product limit 2**(emax + 1)."""
    if av.size == 0 or bv.size == 0:
        return False
    with np.errstate(over="ignore"):
        return bool(np.abs(av).max() * np.abs(bv).max() >= np.ldexp(1.0, rfmt.emax + 1))


#: The fast kernels' chunks hold this many times CHUNK_ELEMENTS elements (4-byte types, or
#: (m, n) arrays only).
_FAST_CHUNK = 4


class _PlainFast:
    """The plain units' float32 kernel (:func:`fastpath.chain_plain_f32`) over the chunks of
    one matrix product: the float32 inputs, the exponent range of every column of A and row
    of B, and uint8 exponents (biased for the whole matrix where one bias suits it, else per
    chunk); a chunk whose exponent ranges it cannot handle, and the blocks it hands back,
    run :func:`_chain`."""

    def __init__(self, p: fastpath.PlainF32, av, ae, bv, be, unit: BlockFMA, rfmt: Format):
        self.p, self.av, self.ae, self.bv, self.be = p, av, ae, bv, be
        self.unit, self.rfmt = unit, rfmt
        self.work: dict = {}  # the kernel's temporaries, kept from chunk to chunk
        with np.errstate(over="ignore"):  # out-of-range values: their chunks are refused
            self.a32, self.b32 = av.astype(np.float32), bv.astype(np.float32)
        self.a_live, self.b_live = ae > _LIVE_EXP, be > _LIVE_EXP
        # per column of A / row of B: any zero input, the exponent range of the others
        self.a_zero, self.b_zero = ~self.a_live.all(axis=0), ~self.b_live.all(axis=0)
        self.a_rng = self._ranges(ae, self.a_live, self.a_zero, 1023)
        self.b_rng = self._ranges(be, self.b_live, self.b_zero, 0)
        lo_a, hi_a = self._span(self.a_rng, 0, av.shape[1])
        lo_b, hi_b = self._span(self.b_rng, 0, bv.shape[1])
        self.bias = fastpath.window(p, lo_a, hi_a, lo_b, hi_b)  # one bias for all chunks
        if self.bias is not None:
            self.span = (lo_a, hi_a, lo_b, hi_b)
            self.a8 = self._biased(ae, self.a_live, self.a_zero, self.bias - 1023)
            self.b8 = self._biased(be, self.b_live, self.b_zero, 127 - self.bias)

    @staticmethod
    def _ranges(e, live, zero, bias: int) -> tuple[np.ndarray, np.ndarray]:
        """(largest, smallest) unbiased exponent of the non-zero inputs of each column of e
        (biased by ``bias``; zeros lie far below every real exponent)."""
        lo = np.min(e, axis=0, where=live, initial=1 << 20) if zero.any() else e.min(axis=0)
        return e.max(axis=0) - bias, lo - bias

    @staticmethod
    def _biased(e, live, zero, bias: int) -> np.ndarray:
        return fastpath.biased_exponents(e, live if zero.any() else None, bias)

    @classmethod
    def make(cls, av, ae, bv, be, unit: BlockFMA, fi: Format, rfmt: Format,
             c_fmt: Format) -> _PlainFast | None:
        p = fastpath.plain_f32_setup(unit, fi, rfmt)
        if p is None or c_fmt.mantissa_bits > 23 or c_fmt.emax > 127:  # c must be float32
            return None
        return cls(p, av, ae, bv, be, unit, rfmt)

    @staticmethod
    def _span(rng, i0: int, i1: int) -> tuple[int, int]:
        hi, lo = int(rng[0][i0:i1].max()), int(rng[1][i0:i1].min())
        return (lo, hi) if hi >= lo else (0, 0)  # all zeros: any window will do

    def __call__(self, m0: int, m1: int, n0: int, n1: int, cc: np.ndarray) -> np.ndarray:
        shape = (m1 - m0, n1 - n0)

        def finish(k0: int, d: np.ndarray) -> np.ndarray:  # blocks k0.. by the plain kernel
            return _chain(self.av[k0:, m0:m1, None], self.ae[k0:, m0:m1, None],
                          self.bv[k0:, None, n0:n1], self.be[k0:, None, n0:n1],
                          np.asarray(d, dtype=np.float64), self.unit, self.rfmt, shape)

        if self.bias is not None:
            lo_a, hi_a, lo_b, hi_b = self.span
            a8, b8 = self.a8[:, m0:m1], self.b8[:, n0:n1]
        else:  # this chunk's own ranges and bias
            lo_a, hi_a = self._span(self.a_rng, m0, m1)
            lo_b, hi_b = self._span(self.b_rng, n0, n1)
            bias = fastpath.window(self.p, lo_a, hi_a, lo_b, hi_b)
            if bias is None:
                return finish(0, cc)
            a8 = self._biased(self.ae[:, m0:m1], self.a_live[:, m0:m1], self.a_zero[m0:m1],
                              bias - 1023)
            b8 = self._biased(self.be[:, n0:n1], self.b_live[:, n0:n1], self.b_zero[n0:n1],
                              127 - bias)
        zeros = bool(self.a_zero[m0:m1].any() or self.b_zero[n0:n1].any())
        check_hi = not fastpath.no_overflow(self.p, float(np.abs(cc).max(initial=0.0)),
                                            self.a32.shape[0], hi_a, hi_b)
        return fastpath.chain_plain_f32(self.a32[:, m0:m1], a8, self.b32[:, n0:n1], b8,
                                        lo_a + lo_b + 127, cc, self.p, finish, zeros=zeros,
                                        check_hi=check_hi, work=self.work)


def _run(aT_raw, b_raw, c_raw, unit: BlockFMA, fi: Format, rfmt: Format,
         outer: bool, trace: list | None = None, fo: Format | None = None) -> np.ndarray:
    """Evaluate chained block FMAs for k-first operands.

    outer=True: aT_raw (K, M), b_raw (K, N), c (M, N) -> (M, N) (a matrix product).
    outer=False: aT_raw (K, R), b_raw (K, R), c (R,) -> (R,) (independent dot products).
    ``fo`` is the format c is given in (default ``rfmt``)."""
    K = aT_raw.shape[0]
    n = unit.block_size
    if unit.input_subnormals is Subnormals.DAZ:  # subnormal inputs read as +0 (specials kept)
        aT_raw = np.where(np.abs(aT_raw) < fi.smallest_normal, 0.0, aT_raw)
        b_raw = np.where(np.abs(b_raw) < fi.smallest_normal, 0.0, b_raw)
    av, ae = _split(aT_raw, fi, 1023)
    bv, be = _split(b_raw, fi, 0)
    limit = unit.product_limit and _limit_reachable(av, bv, rfmt)
    # every chain is called as chain(av, ae, bv, be, c, unit, rfmt, shape): the kernels that
    # can record a trace get it bound here; the specialised ones run only without a trace
    general = functools.partial(_chain_general, trace=trace, fi=fi, check_limit=limit)
    kind = None if (trace is not None or limit or K == 0 or unit.is_plain) else \
        _fast_kind(unit)
    if unit.is_plain:
        chain = functools.partial(_chain, trace=trace)
    elif kind == "exact":
        chain = functools.partial(_chain_exact, fi=fi, c_bits=(fo or rfmt).mantissa_bits)
    elif kind == "pairwise" and rfmt == FP32:
        chain = functools.partial(_chain_pairwise, fi=fi)
    elif kind == "rounded_sum":
        chain = functools.partial(_chain_rounded, fi=fi)
    elif kind == "late":
        chain = _chain_late
        ae16 = np.maximum(ae, _LIVE16).astype(np.int16)  # exponents stay within int16
        be16 = np.maximum(be, _LIVE16).astype(np.int16)
    else:
        kind = None
        chain = general
    a_bad = ~np.isfinite(aT_raw).all(axis=0)
    b_bad = ~np.isfinite(b_raw).all(axis=0)
    c_ok = np.isfinite(c_raw)
    c_fin = c_raw if c_ok.all() else np.where(c_ok, c_raw, 0.0)  # (no kernel writes to c)
    c_bad = ~c_ok
    per_k = max(1, min(n, K))
    if outer:
        M, N = aT_raw.shape[1], b_raw.shape[1]
        out = np.empty((M, N))
        plain = None
        if unit.is_plain and trace is None and K:
            plain = _PlainFast.make(av, ae, bv, be, unit, fi, rfmt, fo or rfmt)

        def sizes(per: int, budget: int) -> tuple[int, int]:  # chunk rows, columns
            nc = N if per * N <= budget else max(1, budget // per)
            return max(1, budget // (per * nc)), nc

        if plain is not None:  # 4-byte (k, m, n) temporaries: more elements, same memory
            mc, nc = sizes(per_k, _FAST_CHUNK * CHUNK_ELEMENTS)
        elif kind == "rounded_sum":  # BLAS block sums: (m, n) temporaries only
            mc, nc = sizes(1, _FAST_CHUNK * CHUNK_ELEMENTS)
        else:
            mc, nc = sizes(per_k, CHUNK_ELEMENTS)
        for m0 in range(0, M, mc):
            m1 = min(M, m0 + mc)
            for n0 in range(0, N, nc):
                n1 = min(N, n0 + nc)
                shape = (m1 - m0, n1 - n0)
                cc = c_fin[m0:m1, n0:n1]
                args = (av[:, m0:m1, None], ae[:, m0:m1, None], bv[:, None, n0:n1],
                        be[:, None, n0:n1], cc, unit, rfmt, shape)
                if plain is not None:
                    res = plain(m0, m1, n0, n1, cc)
                elif kind == "late":
                    res = chain(av[:, m0:m1, None], ae16[:, m0:m1, None], bv[:, None, n0:n1],
                                be16[:, None, n0:n1], cc, unit, rfmt, shape)
                else:
                    res = chain(*args)
                if kind is not None and not np.isfinite(res).all():
                    # an overflowed block: the stage-by-stage kernel, in chunks of the usual
                    # size (the fast kernels' chunks can be larger)
                    rows = max(1, CHUNK_ELEMENTS // (per_k * shape[1]))
                    for r0 in range(0, shape[0], rows):
                        r1 = min(shape[0], r0 + rows)
                        res[r0:r1] = general(av[:, m0 + r0:m0 + r1, None],
                                             ae[:, m0 + r0:m0 + r1, None], bv[:, None, n0:n1],
                                             be[:, None, n0:n1], cc[r0:r1], unit, rfmt,
                                             (r1 - r0, shape[1]))
                if a_bad[m0:m1].any() or b_bad[n0:n1].any() or c_bad[m0:m1, n0:n1].any():
                    step = max(1, min(per_k, CHUNK_ELEMENTS // (shape[0] * shape[1])))
                    sp = _specials(aT_raw[:, m0:m1, None], b_raw[:, None, n0:n1],
                                   c_raw[m0:m1, n0:n1], step)
                    if sp is not None:
                        res = np.where(sp[0], sp[1], res)
                out[m0:m1, n0:n1] = res
        return out
    R = aT_raw.shape[1]
    out = np.empty(R)
    rc = max(1, CHUNK_ELEMENTS // per_k)
    for r0 in range(0, R, rc):
        r1 = min(R, r0 + rc)
        args = (av[:, r0:r1], ae[:, r0:r1], bv[:, r0:r1], be[:, r0:r1], c_fin[r0:r1],
                unit, rfmt, (r1 - r0,))
        if kind == "late":
            res = chain(av[:, r0:r1], ae16[:, r0:r1], bv[:, r0:r1], be16[:, r0:r1],
                        c_fin[r0:r1], unit, rfmt, (r1 - r0,))
        else:
            res = chain(*args)
        if kind is not None and not np.isfinite(res).all():
            res = general(*args)  # an overflowed block: the stage-by-stage kernel
        if a_bad[r0:r1].any() or b_bad[r0:r1].any() or c_bad[r0:r1].any():
            sp = _specials(aT_raw[:, r0:r1], b_raw[:, r0:r1], c_raw[r0:r1], per_k)
            if sp is not None:
                res = np.where(sp[0], sp[1], res)
        out[r0:r1] = res
    return out


def _record_invalid(aT_raw, b_raw, c_raw, outer: bool, where: str) -> None:
    """Inside a flag context: INVALID for each result with 0 * inf among its products or
    +inf meeting -inf (IEEE's invalid operations; a NaN input is quiet and raises nothing)."""
    from .. import flags as _flags

    if not _flags.flags_active():
        return
    shape = c_raw.shape
    inv = np.zeros(shape, dtype=bool)
    pos = c_raw == np.inf
    neg = c_raw == -np.inf
    with np.errstate(invalid="ignore"):
        for k in range(aT_raw.shape[0]):
            x = aT_raw[k][:, None] if outer else aT_raw[k]
            y = b_raw[k][None, :] if outer else b_raw[k]
            p = x * y
            inv |= np.isnan(p) & ~np.isnan(x) & ~np.isnan(y)
            pos = pos | (p == np.inf)
            neg = neg | (p == -np.inf)
    inv |= pos & neg
    _flags.record(np.where(inv, np.uint8(_flags.Flags.INVALID), np.uint8(0)), where)


def _as_real(x, what: str) -> np.ndarray:
    try:
        as_float64(x)
    except TypeError as exc:
        raise TypeError(f"{what}: {exc}") from None
    return x


# -- public API ------------------------------------------------------------------------------

def matmul(A: npt.ArrayLike, B: npt.ArrayLike, C: npt.ArrayLike | None = None, *,
           gpu: str | GpuModel | BlockFMA = "A100",
           input_format: Format | str = "fp16",
           output_format: Format | str = "fp32",
           promote_every: int | None = None) -> np.ndarray:
    """``D = A @ B + C`` as the tensor cores of ``gpu`` compute it, bit for bit.

    ``A`` (M x K) and ``B`` (K x N) hold real values (floats, NumPy or ml_dtypes arrays); they
    are first converted to ``input_format`` (see :func:`convert_input`: round to nearest even,
    tf32 by truncating the fp32 pattern). ``C`` (broadcastable to M x N, None for zeros) is
    rounded to ``output_format`` (nearest even). ``gpu`` is a name ("V100", "A100", "H100",
    "RTX 4090", ... see :func:`~fpsim.tensorcore.list_gpus`) or a
    :class:`~fpsim.tensorcore.BlockFMA` for a custom unit. Returns an M x N float64 array of
    exact ``output_format`` values.

    >>> import numpy as np, fpsim.tensorcore as tc
    >>> A = np.full((1, 4), 1.0); B = np.full((4, 1), 2.0**-24)
    >>> tc.matmul(A, B, [[1 - 2.0**-24]], gpu="V100")  # probe D5: 1 + 2**-23, not 1
    array([[1.00000012]])
    >>> tc.matmul(A, B, [[1 - 2.0**-24]], gpu=tc.BlockFMA(4, extra_bits=-1))
    array([[0.99999988]])

    ``promote_every=N_C`` (a multiple of the unit's block size; fp32 output) is DeepSeek-V3's
    promotion (section 3.5.2): the tensor cores accumulate N_C products at a time from zero,
    and each such partial result is added to an fp32 accumulator that starts at C, one fp32
    addition rounded to nearest even (the CUDA cores' FP32 registers).

    >>> A = np.full((1, 64), 1.0); B = np.full((64, 1), 2.0**-9)
    >>> float(tc.matmul(A, B, [[256.0]], gpu="H100", input_format="fp8_e4m3")[0, 0])
    256.0
    >>> float(tc.matmul(A, B, [[256.0]], gpu="H100", input_format="fp8_e4m3",
    ...                 promote_every=32)[0, 0])
    256.125
    """
    unit, fi, fo, _ = resolve_unit(gpu, input_format, output_format)
    if promote_every is not None:
        promote_every = _check_promotion(promote_every, unit, fo)
    _as_real(A, "A")
    _as_real(B, "B")
    Ar = convert_input(A, fi)
    Br = convert_input(B, fi)
    if Ar.ndim != 2 or Br.ndim != 2:
        raise ValueError(f"matmul needs a 2-D A (M x K) and a 2-D B (K x N), got shapes "
                         f"{Ar.shape} and {Br.shape}; use dot() for vectors")
    M, K = Ar.shape
    if Br.shape[0] != K:
        raise ValueError(f"inner dimensions differ: A is {M} x {K}, B is "
                         f"{Br.shape[0]} x {Br.shape[1]}")
    N = Br.shape[1]
    if C is None:
        Cr = np.zeros((M, N))
    else:
        _as_real(C, "C")
        Cr = np.asarray(fp_round(C, fo), dtype=np.float64)
        try:
            Cr = np.array(np.broadcast_to(Cr, (M, N)))
        except ValueError:
            raise ValueError(f"C of shape {Cr.shape} does not broadcast to the {M} x {N} "
                             f"result") from None
    if M == 0 or N == 0:
        return np.zeros((M, N))
    aT = np.ascontiguousarray(Ar.T)
    del Ar  # (its memory serves the later temporaries: fewer fresh pages)
    _record_invalid(aT, Br, Cr, True, "tensorcore.matmul")
    if promote_every is not None:
        D = Cr.astype(np.float32)
        zero = np.zeros((M, N))
        with np.errstate(over="ignore", invalid="ignore"):
            for k0 in range(0, K, promote_every):
                part = _run(np.ascontiguousarray(aT[k0:k0 + promote_every]),
                            np.ascontiguousarray(Br[k0:k0 + promote_every]), zero, unit, fi,
                            unit.result_format(fo), outer=True, fo=fo)
                D = D + part.astype(np.float32)  # float32 addition: rounded to nearest even
        return D.astype(np.float64)
    return _run(aT, np.ascontiguousarray(Br), Cr, unit, fi, unit.result_format(fo), outer=True,
                fo=fo)


def _check_promotion(promote_every: object, unit: BlockFMA, fo: Format) -> int:
    """``promote_every``: a positive multiple of the unit's block size, fp32 output only."""
    n = as_int("promote_every", promote_every, 1)
    if n % unit.block_size:
        raise ValueError(f"promote_every must be a multiple of the unit's block size "
                         f"{unit.block_size} (the partial sums leave the tensor cores between "
                         f"blocks), got {n}")
    if fo != FP32:
        raise ValueError(f"promote_every adds the partial sums in fp32: it needs "
                         f"output_format='fp32', got {fo.name}")
    return n


def dot_rows(a_raw: np.ndarray, b_raw: np.ndarray, c_raw: np.ndarray, unit: BlockFMA,
             fi: Format, fo: Format, trace: list | None = None) -> np.ndarray:
    """Independent dot products of rows already in the input format (internal API of the
    tensorcore package: hardware checks, the accuracy experiment, the explain record).

    ``a_raw``, ``b_raw`` (R x K) hold exact ``fi`` values (see :func:`convert_input`),
    ``c_raw`` (R,) exact ``fo`` values; returns the R results (float64) of ``unit``, with no
    conversion, broadcasting or argument checks. ``trace``, a list, receives one record per
    block (for :mod:`fpsim.tensorcore.explain`).

    >>> import numpy as np
    >>> from fpsim.formats import FP16, FP32
    >>> from fpsim.tensorcore import get_gpu
    >>> unit = get_gpu("V100").unit_for(FP16, FP32)
    >>> dot_rows(np.array([[1.0, 1.0]]), np.array([[1.0, -2.0**-24]]),
    ...          np.array([-1 + 2.0**-24]), unit, FP16, FP32)
    array([1.1920929e-07])
    """
    return _run(np.ascontiguousarray(a_raw.T), np.ascontiguousarray(b_raw.T),
                np.ascontiguousarray(c_raw, dtype=np.float64), unit, fi,
                unit.result_format(fo), outer=False, trace=trace, fo=fo)


def dot(a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike = 0.0, *,
        gpu: str | GpuModel | BlockFMA = "A100",
        input_format: Format | str = "fp16", output_format: Format | str = "fp32",
        explain: bool = False) -> np.floating | np.ndarray | tuple:
    """One tensor-core dot product ``d = c + sum_k a_k b_k`` (a row of A, a column of B).

    ``a`` and ``b`` have length K (or shapes (..., K) that broadcast, giving a batch of
    independent dot products, ``c`` broadcasting to the batch); conversions and ``gpu`` as
    :func:`matmul`. With ``explain=True`` (1-D input only) returns ``(d, record)``: a
    :class:`~fpsim.tensorcore.explain.DotExplanation` whose ``str()`` is a step-by-step table.

    >>> import fpsim.tensorcore as tc
    >>> float(tc.dot([1, 1, 1, 1], [1, 1, 1, 1], 1 + 2**-22 + 2**-23, gpu="A100"))  # D4c
    5.0
    >>> d, rec = tc.dot([1.0], [1.0], -(1 - 2.0**-24), gpu="A100", explain=True)
    >>> float(d), rec.blocks[0].exact_sum
    (5.960464477539063e-08, 1)
    """
    unit, fi, fo, label = resolve_unit(gpu, input_format, output_format)
    _as_real(a, "a")
    _as_real(b, "b")
    _as_real(c, "c")
    ar = convert_input(a, fi)
    br = convert_input(b, fi)
    if ar.ndim == 0 or br.ndim == 0:
        raise ValueError(f"dot needs vectors of length K, got shapes {ar.shape} and {br.shape}")
    if ar.shape[-1] != br.shape[-1]:
        raise ValueError(f"a and b must have the same length K: a has {ar.shape[-1]}, b has "
                         f"{br.shape[-1]}")
    if ar.shape[-1] == 0:
        raise ValueError("dot needs at least one product: a and b are empty (K = 0)")
    try:
        ar, br = np.broadcast_arrays(ar, br)
    except ValueError:
        raise ValueError(f"a and b shapes {np.shape(ar)} and {np.shape(br)} do not "
                         f"broadcast") from None
    batch = ar.shape[:-1]
    cr = np.asarray(fp_round(c, fo), dtype=np.float64)
    try:
        cr = np.broadcast_to(cr, batch)
    except ValueError:
        raise ValueError(f"c of shape {cr.shape} does not broadcast to the batch shape "
                         f"{batch}") from None
    K = ar.shape[-1]
    a2 = ar.reshape(-1, K)
    b2 = br.reshape(-1, K)
    if explain and batch:
        raise ValueError("explain=True needs one dot product (1-D a and b)")
    trace: list | None = [] if explain else None
    _record_invalid(a2.T, b2.T, cr.reshape(-1), False, "tensorcore.dot")
    d = dot_rows(a2, b2, cr.reshape(-1), unit, fi, fo, trace)
    d = d.reshape(batch)
    if not batch:
        d = d[()]
    if explain:
        return d, build_explanation(ar, br, float(cr), float(d), unit, fi, fo, label, trace)
    return d
