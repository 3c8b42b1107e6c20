"""The general bit kernel: float64 patterns (or exact wide values) rounded to any
:class:`~fpsim.formats.Format`, in any mode and policy, with IEEE flags.

Contract: :func:`kernel_general` and :func:`round_scaled` are the reference every fast path
(:mod:`fpsim.rounding.fast`) must equal bit for bit; nothing here takes a shortcut by format
or mode. Internal API of the package (the public functions are in :mod:`fpsim.rounding`).

Method (CPFloat style, on the float64 bit pattern, vectorised and chunked):

1. unpack: take the float64 pattern, split off the sign; the magnitude pattern ``a`` orders
   like the value.
2. align: the number of low bits to drop is ``s = 52 - m`` for results in the format's normal
   range and grows by one per binade below ``2**emin`` (gradual underflow).
3. round: add a mode-dependent increment below bit ``s`` (half minus one plus the kept lsb for
   ties-to-even, a uniform random integer for stochastic rounding, ...) and clear the low ``s``
   bits. A carry out of the mantissa moves into the exponent field, which is exactly the value
   one binade up, so no renormalisation is needed.
4. pack: overflow, flush-to-zero, special values and the sign are applied; the result is a
   float64 that the format represents exactly.

Values smaller than half the smallest subnormal (``s > 52``) take a short integer path. The
float64 result holds every value of every supported format exactly; NumPy/ml_dtypes arrays of
the real width come from :func:`fpsim.cast`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..flags import Flags
from ..formats import Format, NaNEncoding
from ..modes import Overflow, Rounding, Tininess
from .policy import RoundingPolicy

_U = np.uint64
SIGN = _U(1 << 63)
EXP_MASK = _U(0x7FF << 52)  # pattern of +inf; larger magnitude patterns are NaN
FRAC = _U((1 << 52) - 1)
HIDDEN = _U(1 << 52)
QUIET = _U(1 << 51)
ONE = _U(1)
ZERO = _U(0)
CHUNK = 1 << 16  # elements per block: keeps the temporaries in cache, memory bounded


@dataclass(frozen=True)
class KernelParams:
    """Per-format constants of the kernel, all as float64 magnitude patterns or shifts."""

    c: int  # bits dropped for a normal-range result: 52 - m
    k: int  # s = max(k - biased_exponent, c)
    max_bits: np.uint64
    tiny_bits: np.uint64  # 2**emin
    qmin_bits: np.uint64  # 2**(emin - m), the smallest subnormal
    ovf_bits: np.uint64  # what an overflow "to infinity" becomes
    enc: NaNEncoding
    low_emin: bool  # float64 subnormals can land above the deep-underflow threshold
    identity: bool  # the format is float64 itself: nothing to round
    subnormals: bool
    # the float-domain path (fast._kernel_float): quanta are normal floats of the input's type
    m: int = 0
    max_val: float = 0.0
    fast: bool = False  # from float64 patterns
    eminb: np.uint64 = ZERO  # emin + 1023, the biased exponent of 2**emin in float64
    fast32: bool = False  # from float32 values (fast._round32)
    eminb32: np.uint32 = np.uint32(0)  # emin + 127


def _bits_of(v: float) -> np.uint64:
    return np.array(v, dtype=np.float64).view(np.uint64)[()]


@functools.cache
def kernel_params(fmt: Format) -> KernelParams:
    """The rounding kernel's constants for ``fmt`` (cached; internal API: the fast paths and
    the reductions' Python-float paths use them too).

    >>> from fpsim.formats import FP16
    >>> int(kernel_params(FP16).c)  # fraction bits float64 has beyond fp16's
    42
    """
    m = fmt.mantissa_bits
    enc = fmt.nan_encoding
    max_bits = _bits_of(fmt.max)
    if enc is NaNEncoding.IEEE:
        ovf = EXP_MASK
    elif enc is NaNEncoding.NONE:
        ovf = max_bits
    else:
        ovf = EXP_MASK | QUIET
    k = (52 - m) + fmt.emin + 1023
    return KernelParams(
        c=52 - m,
        k=k,
        max_bits=max_bits,
        tiny_bits=_bits_of(fmt.smallest_normal),
        qmin_bits=_bits_of(np.ldexp(1.0, fmt.emin - m)),
        ovf_bits=ovf,
        enc=enc,
        low_emin=k < 60,
        identity=(m == 52 and fmt.emin == -1022 and fmt.emax == 1023 and fmt.subnormals
                  and enc is NaNEncoding.IEEE),
        subnormals=fmt.subnormals,
        m=m,
        max_val=float(fmt.max),
        # every quantum 2**(E - m), E from emin up to the exponent of inf / NaN, is a normal
        # float64 (float32) and at most 1 at the bottom: x / quantum is then exact
        fast=1 <= m <= 50 and -1022 <= fmt.emin - m <= 0 and fmt.emax <= 1023,
        eminb=_U(fmt.emin + 1023),
        fast32=1 <= m <= 22 and -126 <= fmt.emin - m <= 0 and fmt.emax <= 127,
        eminb32=np.uint32(max(fmt.emin + 127, 0)),
    )


def _increment_round(a, s, mode: Rounding, neg, rnd, random_bits):
    """Round magnitude patterns ``a`` by dropping ``s`` low bits (0 <= s <= 52, a uint64
    scalar or array). Dropping no bit (s = 0: a 52-bit format's normal range) is the
    identity: the increments below are 0 there."""
    mask = (ONE << s) - ONE
    if mode is Rounding.NEAREST_EVEN:
        # half - 1, plus 1 when the kept lsb is odd; "& mask": both 0 where s = 0
        lsb = (a >> s) & ONE
        inc = (mask >> ONE) + (lsb & mask if isinstance(s, np.ndarray) or s == ZERO else lsb)
    elif mode is Rounding.NEAREST_AWAY:
        inc = (mask + ONE) >> ONE  # exactly half: ties carry (0 where s = 0)
    elif mode is Rounding.TOWARD_ZERO:
        return a & ~mask
    elif mode is Rounding.UP:
        inc = mask & (neg - ONE)  # all ones below s for positive values, 0 for negative
    elif mode is Rounding.DOWN:
        inc = mask & (ZERO - neg)
    elif mode is Rounding.ODD:
        return (a & ~mask) | (((a & mask) != ZERO).astype(_U) << s)  # sticky into the lsb
    else:  # stochastic: carry with probability (dropped bits) / 2**s
        if random_bits is None:
            inc = rnd & mask
        else:
            r = _U(random_bits)
            spread = np.maximum(np.asarray(s, dtype=np.int64) - int(random_bits), 0).astype(_U)
            inc = ((rnd >> (_U(64) - r)) << spread) & mask
    return (a + inc) & ~mask


def _significand_round(sig, s, mode: Rounding, neg, rnd, random_bits):
    """Round integer significands ``sig`` (uint64, below 2**62) by dropping ``s >= 1`` low
    bits (scalar or array, any size: beyond 63 every deterministic decision is unchanged).
    Returns (kept, up, inexact): the result is ``kept + up`` units of 2**s."""
    s_true = np.asarray(s, dtype=np.int64)
    s = np.minimum(s_true, 63).astype(_U)
    mask = (ONE << s) - ONE
    kept = sig >> s
    rem = sig & mask
    half = ONE << (s - ONE)
    if mode is Rounding.NEAREST_EVEN:
        up = (rem > half) | ((rem == half) & ((kept & ONE) == ONE))
    elif mode is Rounding.NEAREST_AWAY:
        up = rem >= half
    elif mode is Rounding.TOWARD_ZERO:
        up = np.zeros(sig.shape, bool)
    elif mode is Rounding.UP:
        up = (rem != ZERO) & (neg == ZERO)
    elif mode is Rounding.DOWN:
        up = (rem != ZERO) & (neg == ONE)
    elif mode is Rounding.ODD:
        up = (rem != ZERO) & ((kept & ONE) == ZERO)
    else:
        # up with probability rem / 2**s_true: the cap at 63 must not apply here (it made
        # deep underflow round up far too often). Of the 2**r values u of the random bits,
        # floor(rem * 2**r / 2**s_true) round up.
        r = 64 if random_bits is None else int(random_bits)
        u = rnd if random_bits is None else rnd >> _U(64 - r)
        sh = s_true - r
        count = np.where(sh >= 0, rem >> np.clip(sh, 0, 63).astype(_U),
                         rem << np.clip(-sh, 0, 63).astype(_U))
        up = u < count
    return kept, up, rem != ZERO


def _deep_round(a, s, mode: Rounding, neg, rnd, random_bits, qmin_bits):
    """Magnitudes whose quantum is the smallest subnormal and whose kept part is at most the
    lowest bit (s >= 52): decide with the integer significand M against 2**s. The result is
    0, 1 or 2 times the smallest subnormal; the kept parity is that of M >> s, not of an
    exponent bit."""
    hidden = np.where((a >> _U(52)) != ZERO, HIDDEN, ZERO)
    kept, up, _ = _significand_round((a & FRAC) | hidden, s, mode, neg, rnd, random_bits)
    units = (kept + up.astype(_U)).astype(np.float64)  # 0, 1 or 2 smallest subnormals
    return (units * qmin_bits.view(np.float64)).view(np.uint64)


def _round_low(a, p: KernelParams, mode, neg, rnd, random_bits):
    """Round magnitudes below 2**emin (subnormal results, deep underflow, zeros): the number
    of dropped bits grows by one per binade below emin."""
    ebits = (a >> _U(52)).view(np.int64)
    if p.low_emin:
        ebits = np.maximum(ebits, 1)  # float64 subnormals share the exponent of 2**-1022
    s = np.maximum(p.k - ebits, p.c)
    r = _increment_round(a, np.minimum(s, 52).astype(_U), mode, neg, rnd, random_bits)
    # At s >= 52 the kept part is the hidden bit or nothing: its parity is not a pattern bit.
    deep = (s >= max(52, p.c + 1)) & (a != ZERO)
    if deep.any():
        idx = np.nonzero(deep)
        r[idx] = _deep_round(a[idx], s[idx], mode, neg[idx],
                             None if rnd is None else rnd[idx], random_bits, p.qmin_bits)
    return r


def _overflow(r, ovf, neg, p: KernelParams, mode: Rounding, overflow: Overflow):
    """Patterns ``r`` with the overflowing elements (mask ``ovf``) replaced by what the mode
    and policy give: the largest finite value or the overflow value (inf / NaN). A
    branch-free blend (np.where with a scattered mask is several times slower: in
    wide-range data a third of the elements overflow)."""
    val = np.full(r.shape, p.max_bits, np.uint64)
    if overflow is not Overflow.SATURATE:
        if mode in (Rounding.NEAREST_EVEN, Rounding.NEAREST_AWAY, Rounding.STOCHASTIC):
            val[...] = p.ovf_bits
        elif mode is Rounding.UP:  # positive ones go to the overflow value
            val += (neg ^ ONE) * (p.ovf_bits - p.max_bits)
        elif mode is Rounding.DOWN:
            val += neg * (p.ovf_bits - p.max_bits)
        # toward zero and round-to-odd never round a finite value to infinity
    mask = ovf.astype(np.uint64)
    np.negative(mask, out=mask)  # all ones where ovf
    val ^= r
    val &= mask
    return r ^ val  # val where ovf, else r


# Mirrored in fpsim/rounding/scalar.py: the Python-float adds of the reductions' few-output
# paths (scalar_adder, and StochasticAdder for the kernel, _increment_round, _round_low,
# _overflow and pair.py's stochastic branch, draws included) redo this rounding per element.
# A change to the rounding here must be made there too, and the other way round;
# tests/test_rounding_scalar.py, test_reductions_steps.py and test_reductions_stochastic_fast.py
# compare the two. (fast.round_patterns picks this
# kernel or a fast path per chunk.)


def kernel_general(b, p: KernelParams, policy: RoundingPolicy,
                   rng: np.random.Generator | None = None, want_flags: bool = False):
    """Round one chunk of float64 patterns ``b`` by ``policy``, any mode and policy, on the
    patterns (``p``: the kernel constants of ``policy.fmt``; ``rng``: the policy's generator,
    resolved once per call by the caller: stochastic rounding only). Returns (patterns, flags
    or None).

    >>> from fpsim.rounding import policy_of
    >>> pol = policy_of("fp16", "up")
    >>> r, _ = kernel_general(np.array([1/3]).view(np.uint64), kernel_params(pol.fmt), pol)
    >>> r.view(np.float64).tolist()
    [0.33349609375]
    """
    mode, overflow, tininess = policy.rounding, policy.overflow, policy.tininess
    flush, daz, random_bits = policy.flush, policy.daz, policy.random_bits
    sign = b & SIGN
    a = b ^ sign
    neg = sign >> _U(63)
    amax = a.max() if a.size else ZERO
    rnd = None
    if mode is Rounding.STOCHASTIC:
        rnd = rng.integers(0, 1 << 64, size=a.shape, dtype=np.uint64, endpoint=False)
    # Every element is first rounded as if its result were normal (one scalar shift); the
    # few below 2**emin are redone with their own shift.
    r = _increment_round(a, _U(p.c), mode, neg, rnd, random_bits)
    low = a < p.tiny_bits
    idx = np.nonzero(low) if low.any() else None
    if idx is not None:
        if daz:
            a = a.copy()
            a[idx] = ZERO  # denormals-are-zero: the input reads as a signed zero
        r[idx] = _round_low(a[idx], p, mode, neg[idx], None if rnd is None else rnd[idx],
                            random_bits)
    fl = None
    if want_flags:
        fl = np.where(r != a, np.uint8(Flags.INEXACT), np.uint8(0))
    if idx is not None and (want_flags or flush):
        # Tininess: the exact value is below 2**emin ("before"); "after": so is the value
        # rounded to full precision with an unbounded exponent (the scalar-shift result).
        tiny = a[idx] != ZERO
        if tininess is Tininess.AFTER:
            al, lim = a[idx], p.tiny_bits
            if p.low_emin and (al < HIDDEN).any():
                # float64 subnormals lack the precision of the unbounded-exponent result:
                # compare them scaled by 2**64 (exact; rounding commutes with the scaling)
                sub64 = al < HIDDEN
                al = np.where(sub64, (al.view(np.float64) * 2.0**64).view(_U), al)
                lim = np.where(sub64, p.tiny_bits + _U(64 << 52), p.tiny_bits)
            r_unb = _increment_round(al, _U(p.c), mode, neg[idx],
                                     None if rnd is None else rnd[idx], random_bits)
            tiny &= r_unb < lim
        tidx = tuple(i[tiny] for i in idx)
        if flush:
            r[tidx] = ZERO
            if want_flags:
                fl[tidx] |= np.uint8(Flags.UNDERFLOW | Flags.INEXACT)
        elif want_flags:
            fl[tidx] |= np.where(fl[tidx] != 0, np.uint8(Flags.UNDERFLOW), np.uint8(0))
    if amax > p.max_bits:  # overflow or special values are present
        special = a >= EXP_MASK
        ovf = (r > p.max_bits) & ~special
        if ovf.any():
            r = _overflow(r, ovf, neg, p, mode, overflow)
            if want_flags:
                fl[ovf] |= np.uint8(Flags.OVERFLOW | Flags.INEXACT)
        if special.any():
            nan = a > EXP_MASK
            inf = a == EXP_MASK
            if p.enc is NaNEncoding.IEEE:
                inf_out = EXP_MASK
            elif p.enc is NaNEncoding.NONE or overflow is Overflow.SATURATE:
                inf_out = p.max_bits
            else:
                inf_out = EXP_MASK | QUIET
            r = np.where(nan, a | QUIET, np.where(inf, inf_out, r))
            if want_flags:
                fl[special] = 0
                snan = nan & ((a & QUIET) == ZERO)
                fl[snan] = np.uint8(Flags.INVALID)
                if p.enc is NaNEncoding.NONE:
                    fl[nan] = np.uint8(Flags.INVALID)  # no NaN to deliver
                if inf_out != EXP_MASK:
                    fl[inf] = np.uint8(Flags.INEXACT if inf_out == p.max_bits else Flags.INVALID)
    if p.enc is NaNEncoding.FNUZ:
        sign = np.where(r == ZERO, ZERO, sign)  # no negative zero: -0 is the NaN pattern
    return r | sign, fl


TOP = 61  # wide values are held as a 62-bit significand (leading bit 61) with a sticky lsb


def round_scaled(neg, sig, e_top, policy: RoundingPolicy, rng: np.random.Generator | None,
                 want_flags: bool):
    """Round values beyond float64 (long double, wide integers, fractions) given exactly as
    ``(-1)**neg * sig * 2**(e_top - 61)`` by ``policy``: ``sig`` uint64 with its leading bit
    at 61 (or 0), its lowest bit a sticky bit (round-to-odd at 62 bits, exact for any later
    rounding to at most 60 bits), ``e_top`` int64, the exponent of the leading bit. Any
    exponent works (far beyond float64's). ``rng``: the policy's generator, resolved once per
    call by the caller (stochastic rounding; None otherwise). Returns (float64 patterns, flags
    or None), as :func:`round_patterns`."""
    fmt, mode, overflow = policy.fmt, policy.rounding, policy.overflow
    flush, daz, tininess, random_bits = policy.flush, policy.daz, policy.tininess, \
        policy.random_bits
    p = kernel_params(fmt)
    m, emin = fmt.mantissa_bits, fmt.emin
    zero = sig == ZERO
    if daz:
        zero |= e_top < emin  # denormals-are-zero: the input reads as a signed zero
    rnd = None
    if mode is Rounding.STOCHASTIC:
        rnd = rng.integers(0, 1 << 64, size=sig.shape, dtype=np.uint64, endpoint=False)
    q = np.maximum(e_top - m, emin - m)  # exponent of the quantum: gradual underflow below emin
    kept, up, inexact = _significand_round(sig, q - (e_top - TOP), mode, neg, rnd, random_bits)
    big = e_top > fmt.emax  # at least 2**(emax + 1): beyond the largest finite value
    with np.errstate(over="ignore"):
        val = np.ldexp((kept + up.astype(_U)).astype(np.float64),
                       np.where(big, 0, q).astype(np.int32))  # |q| <= 1074 where not big
    r = np.where(zero, ZERO, val.view(np.uint64))
    inexact &= ~zero
    fl = np.where(inexact, np.uint8(Flags.INEXACT), np.uint8(0)) if want_flags else None
    if want_flags or flush:
        tiny = (e_top < emin) & ~zero
        if tininess is Tininess.AFTER:
            # tiny unless the value rounded with an unbounded exponent reaches 2**emin
            k2, u2, _ = _significand_round(sig, TOP - m, mode, neg, rnd, random_bits)
            carried = ((k2 + u2.astype(_U)) >> _U(m + 1)) != ZERO
            tiny &= ~((e_top == emin - 1) & carried)
        if flush:
            r = np.where(tiny, ZERO, r)
            if want_flags:
                fl[tiny] |= np.uint8(Flags.UNDERFLOW | Flags.INEXACT)
        elif want_flags:
            fl[tiny & inexact] |= np.uint8(Flags.UNDERFLOW)
    ovf = (big | (r > p.max_bits)) & ~zero
    if ovf.any():
        r = _overflow(r, ovf, neg, p, mode, overflow)
        if want_flags:
            fl[ovf] |= np.uint8(Flags.OVERFLOW | Flags.INEXACT)
    sign = neg << _U(63)
    if p.enc is NaNEncoding.FNUZ:
        sign = np.where(r == ZERO, ZERO, sign)  # no negative zero: -0 is the NaN pattern
    return r | sign, fl


def split_uint(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint64 magnitudes to (sig, e_top) of :func:`round_scaled`, exactly."""
    with np.errstate(over="ignore"):
        _, e = np.frexp(a.astype(np.float64))  # the float may round up to the next binade
    e = np.clip(e, 1, 64).astype(np.int64)
    e -= (((a >> (e - 1).astype(_U)) == ZERO) & (e > 1)).astype(np.int64)  # 2**(e-1) <= a < 2**e
    drop = np.clip(e - (TOP + 1), 0, 63).astype(_U)
    lift = np.clip((TOP + 1) - e, 0, 63).astype(_U)
    sticky = (a & ((ONE << drop) - ONE)) != ZERO
    sig = np.where(e > TOP + 1, (a >> drop) | sticky.astype(_U), a << lift)
    return sig, e - 1


def split_longdouble(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite long doubles to (neg, sig, e_top) of :func:`round_scaled`, exactly (x87's
    64-bit and quad's 113-bit significands alike: the bits below 62 go into the sticky bit)."""
    neg = np.signbit(x).astype(_U)
    frac, e = np.frexp(np.abs(x))  # frac in [1/2, 1), exact in long double
    t = np.ldexp(frac, TOP + 1)
    top = np.floor(t)
    sig = top.astype(np.uint64) | (t != top).astype(_U)
    return neg, sig, e.astype(np.int64) - 1


_PAIR_SCREEN = 0.5 + 2.0**-53  # hi + lo * this == hi  iff  |lo| < about the spacing at hi


def check_pair(hi: np.ndarray, lo: np.ndarray, offset: int = 0) -> None:
    """The precondition of :func:`fpsim.round_pair`: where hi is finite, hi is the float64 nearest
    to hi + lo and lo is finite with its sign exact (TwoSum, exact products, remainders).
    Screened by one float addition: it fails where |lo| reaches the spacing at hi on lo's
    side (the algorithm's real need), or lo is inf / NaN; hi = +-max with lo of its sign
    stands for a value beyond float64 (as :func:`fpsim.rounding.as_float64` gives for huge ints)."""
    with np.errstate(invalid="ignore", over="ignore"):
        ok = hi + lo * _PAIR_SCREEN == hi
    if ok.all():
        return
    i = np.flatnonzero(~ok)
    h, low = hi[i], lo[i]
    fine = ~np.isfinite(h) | (np.isfinite(low) & (np.abs(h) == np.finfo(np.float64).max)
                              & (np.signbit(h) == np.signbit(low)))
    if not fine.all():
        j = int(np.flatnonzero(~fine)[0])
        raise ValueError(
            f"round_pair needs (hi, lo) with hi the float64 nearest to hi + lo and lo finite "
            f"(|lo| at most half the float64 spacing at hi); element {offset + int(i[j])} has "
            f"hi={float(h[j])!r}, lo={float(low[j])!r}")


def odd_from_pair(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """hi + lo rounded to 53 bits with round-to-odd (exact for any later rounding to <= 51
    bits). Requires hi + lo in [hi, hi's neighbour toward lo) (:func:`check_pair`)."""
    hb = hi.view(np.uint64)
    inexact = ((lo != 0) & (np.abs(hi) < np.inf)).view(np.uint8).astype(_U)
    # toward zero (lo's sign opposite to hi's): the magnitude pattern minus one, then odd
    toward_zero = ((hb ^ lo.view(np.uint64)) >> _U(63)) & inexact
    return ((hb - toward_zero) | inexact).view(np.float64)
