"""The bit-exact rounding core: any real value to any :class:`~fpsim.formats.Format`.

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
the real width come from :func:`cast`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import ml_dtypes
import numpy as np

from . import flags as _flags
from . import state as _state
from .checks import as_int, broadcast_shape, ragged_error
from .flags import Flags
from .formats import (
    BF16,
    Format,
    NaNEncoding,
    get_float_format,
    get_format,  # noqa: F401 - the one lookup, re-exported as before
)
from .modes import (
    Overflow,
    Rounding,
    Subnormals,
    Tininess,
    as_overflow,
    as_rounding,
    as_subnormals,
    as_tininess,
)
from .nativecast import narrow_to_byte, table_cast_ok

__all__ = ["round", "round_rational", "as_rational", "round_pair", "cast", "seed", "default_rng",
           "as_float64", "RoundingPolicy"]

_U = np.uint64
SIGN = _U(1 << 63)
EXP_MASK = _U(0x7FF << 52)  # pattern of +inf; larger magnitude patterns are NaN
FRAC = _U((1 << 52) - 1)
HIDDEN = _U(1 << 52)
QUIET = _U(1 << 51)
ONE = _U(1)
ZERO = _U(0)
CHUNK = 1 << 16  # elements per block: keeps the temporaries in cache, memory bounded
_BYTE_TABLE_MIN = 4096  # float32 elements from which the one-byte table path pays


def seed(value: int | None) -> None:
    """Reseed the generator stochastic rounding uses when no ``rng`` is given.

    >>> import fpsim
    >>> fpsim.seed(0); a = fpsim.round([0.1] * 4, "bf16", "stochastic")
    >>> fpsim.seed(0); b = fpsim.round([0.1] * 4, "bf16", "stochastic")
    >>> bool((a == b).all())
    True
    """
    _state.rounding_rng = np.random.default_rng(  # ambient state lives in fpsim.state
        None if value is None else _state.as_seed(value, "fpsim.seed: value"))


def default_rng(rng: np.random.Generator | int | None = None, *,
                name: str = "rng") -> np.random.Generator:
    """The generator to use: ``rng`` itself, a new one seeded by a non-negative int, or fpsim's
    default; a bad ``rng`` is an error naming the argument ``name``
    (:func:`fpsim.state.as_generator`).

    >>> bool(default_rng(3).integers(10) == default_rng(3).integers(10))
    True
    """
    return _state.as_generator(rng, _state.rounding_rng, name=name)


@dataclass(frozen=True)
class _Params:
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
    # the float-domain path (_kernel_float): quanta are normal floats of the input's type
    m: int = 0
    max_val: float = 0.0
    fast: bool = False  # from float64 patterns
    eminb: np.uint64 = ZERO  # emin + 1023, the biased exponent of 2**emin in float64
    fast32: bool = False  # from float32 values (_round32)
    eminb32: np.uint32 = np.uint32(0)  # emin + 127


def _bits_of(v: float) -> np.uint64:
    return np.array(v, dtype=np.float64).view(np.uint64)[()]


@functools.cache
def _params(fmt: Format) -> _Params:
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
    return _Params(
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


def kernel_params(fmt: Format) -> _Params:
    """The rounding kernel's constants for ``fmt`` (cached; internal API: the reductions'
    Python-float paths mirror the kernel with them).

    >>> int(kernel_params(get_format("fp16")).c)  # fraction bits float64 has beyond fp16's
    42
    """
    return _params(fmt)


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


def _round_low(a, p: _Params, mode, neg, rnd, random_bits):
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


def _overflow(r, ovf, neg, p: _Params, mode: Rounding, overflow: Overflow):
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


# Mirrored in fpsim/reductions.py: its few-output Python-float paths (_scalar_adder, and
# _StochasticAdder for _kernel, _increment_round, _round_low, _overflow and _round_pair_core's
# stochastic branch, draws included) redo this rounding per element. A change to the rounding
# here must be made there too, and the other way round; tests/test_reductions_steps.py and
# tests/test_reductions_stochastic_fast.py compare the two.
def _kernel(b, p: _Params, mode, overflow, flush, daz, tininess, rng, random_bits, want_flags):
    """Round one chunk of float64 patterns ``b``; returns (patterns, flags or None)."""
    if p.fast and mode in _FLOAT_MODES and not (want_flags or flush or daz):
        return _kernel_float(b, p, mode, overflow, tininess), None
    return _kernel_general(b, p, mode, overflow, flush, daz, tininess, rng, random_bits,
                           want_flags)


# -- the float-domain path --------------------------------------------------------------------
# For the deterministic modes without flags, flushing or DAZ (the common case), rounding is
# done on the values themselves: with the quantum q = 2**(max(E, emin) - m) (E the input's
# binade), x / q is exact and holds the kept digits in its integer part, NumPy's rint / trunc
# / ceil / floor round it to an integer in that mode, and the integer times q is the result,
# exact again. A carry into the next binade (an integer of 2**(m + 1)) and gradual underflow
# (q stays 2**(emin - m) below 2**emin) come out right with no case split, and the sign of
# a zero is kept by every step. What the formula does not decide (results beyond the largest
# finite value, inf and NaN inputs: the elements not below max in magnitude) is redone by
# _kernel_general. The quanta must be normal floats of at most 1 (Params.fast, fast32).
# Equal to _kernel_general bit for bit: tests/test_rounding_fast.py.


def _integral_away(t):
    """t rounded to an integer, ties away from zero, in place."""
    r = np.trunc(t)
    up = np.abs(t - r) >= 0.5  # exact: t - trunc(t) drops only the integer bits
    np.add(r, np.copysign(1.0, t), out=t, where=up)
    np.copyto(t, r, where=~up)
    return t


def _integral_odd(t):
    """t rounded to an integer toward zero, then to the odd neighbour when inexact (the
    sticky bit of round-to-odd), in place."""
    r = np.trunc(t)
    up = (t != r) & (np.fmod(r, 2) == 0)
    np.add(r, np.copysign(1.0, t), out=t, where=up)
    np.copyto(t, r, where=~up)
    return t


_FLOAT_MODES = {
    Rounding.NEAREST_EVEN: lambda t: np.rint(t, out=t),
    Rounding.TOWARD_ZERO: lambda t: np.trunc(t, out=t),
    Rounding.UP: lambda t: np.ceil(t, out=t),
    Rounding.DOWN: lambda t: np.floor(t, out=t),
    Rounding.NEAREST_AWAY: _integral_away,
    Rounding.ODD: _integral_odd,
}


def _kernel_float(b, p: _Params, mode, overflow, tininess):
    """_kernel_general's patterns for ``b`` (float64 patterns) in a deterministic mode
    without flags, flush or DAZ, computed in the float domain (see above)."""
    e = b >> _U(52)
    e &= _U(0x7FF)
    np.maximum(e, p.eminb, out=e)
    e -= _U(p.m)
    e <<= _U(52)
    q = e.view(np.float64)  # the quantum of each element
    with np.errstate(over="ignore", invalid="ignore"):
        t = b.view(np.float64) / q
        _FLOAT_MODES[mode](t)
        t *= q
    if p.enc is NaNEncoding.FNUZ:
        t += 0.0  # -0 + 0 = +0: no negative zero
    ok = np.abs(t, out=q) <= p.max_val  # False for overflow, inf and NaN
    if not ok.all():
        idx = _overflow_values(t, b.view(np.float64), ok, p, mode, overflow)
        if idx is not None:
            t.view(np.uint64)[idx] = _kernel_general(b[idx], p, mode, overflow, False, False,
                                                     tininess, None, None, False)[0]
    return t.view(np.uint64)


_AWAY_ON_OVERFLOW = {  # does an overflow go to the overflow value (inf / NaN)? by sign
    Rounding.NEAREST_EVEN: (True, True), Rounding.NEAREST_AWAY: (True, True),
    Rounding.UP: (True, False), Rounding.DOWN: (False, True),
    Rounding.TOWARD_ZERO: (False, False), Rounding.ODD: (False, False),
}


def _overflow_values(t, x, ok, p: _Params, mode, overflow):
    """Where ``ok`` is False and ``x`` finite (``t``, the rounded value, is beyond the largest
    finite value), write into ``t`` what _overflow gives: the overflow value (inf, or NaN
    where the format has no inf) or +-max by mode and policy, with the input's sign (a NaN's
    sign bit too, as _kernel_general's ``r | sign``). In wide-range data a third of the
    elements overflow: a branch-free blend of the bit patterns over the whole chunk costs
    less than gathering them, or np.copyto / np.where with a mask. Returns the positions of
    the inf and NaN inputs (None when there is none), for _kernel_general."""
    fin = np.isfinite(x)
    over = fin & ~ok
    if over.any():
        u = np.dtype(f"u{t.itemsize}").type
        sign_bit = u(1) << u(8 * t.itemsize - 1)
        typ = t.dtype.type
        ovf_bits = typ(p.ovf_bits.view(np.float64)).view(u)
        max_bits = typ(p.max_val).view(u)
        pos_away, neg_away = _AWAY_ON_OVERFLOW[mode]
        new = x.view(u) & sign_bit
        if overflow is Overflow.SATURATE or not (pos_away or neg_away):
            new |= max_bits
        elif pos_away and neg_away:
            new |= ovf_bits
        else:  # the overflow value for one sign, max for the other
            away = (new != 0) if neg_away else (new == 0)
            new |= max_bits
            new += away.astype(u) * u(ovf_bits - max_bits)
        tb = t.view(u)
        mask = over.astype(u)
        np.negative(mask, out=mask)  # all ones where over
        new ^= tb
        new &= mask
        tb ^= new  # tb = new where over, else unchanged
    fin |= ok  # what is left: not ok and not finite
    return None if fin.all() else np.flatnonzero(~fin)


def _round32(x, p: _Params, mode, overflow):
    """float32 values ``x`` rounded to the format in the float domain, as float32 (every
    value of a Params.fast32 format is one, and so are inf and NaN), and the positions (or
    None) that _kernel_general must redo: inf and NaN inputs. The float32 twin of
    _kernel_float."""
    e = x.view(np.uint32) >> np.uint32(23)
    e &= np.uint32(0xFF)
    np.maximum(e, p.eminb32, out=e)
    e -= np.uint32(p.m)
    e <<= np.uint32(23)
    q = e.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = x / q
        _FLOAT_MODES[mode](t)
        t *= q
    if p.enc is NaNEncoding.FNUZ:
        t += np.float32(0.0)
    ok = np.abs(t, out=q) <= p.max_val
    if ok.all():
        return t, None
    return t, _overflow_values(t, x, ok, p, mode, overflow)


def float32_ok(policy: RoundingPolicy) -> bool:
    """Internal API (arithmetic's float32 path): may :func:`round_float32` round by
    ``policy``? (A deterministic mode, no flush or DAZ, a format whose every quantum is a
    normal float32 of at most 1: fp16, fp8, e5m7, fp6, fp4, ...)

    >>> float32_ok(policy_of("fp16")), float32_ok(policy_of("bf16"))
    (True, False)
    """
    return (_params(policy.fmt).fast32 and policy.rounding in _FLOAT_MODES
            and not (policy.flush or policy.daz))


def round_float32(x: np.ndarray, policy: RoundingPolicy):
    """Internal API (arithmetic's float32 path): flat float32 ``x`` rounded once by a policy
    :func:`float32_ok` accepts, without flags: (float32 values, the positions of inf and NaN
    inputs, whose values are not set, or None). Overflow is resolved as :func:`round` does.

    >>> v, bad = round_float32(np.array([1/3, 7e4], np.float32), policy_of("fp16"))
    >>> v.tolist(), bad
    ([0.333251953125, inf], None)
    """
    return _round32(x, _params(policy.fmt), policy.rounding, policy.overflow)


def _kernel_general(b, p: _Params, mode, overflow, flush, daz, tininess, rng, random_bits,
                    want_flags):
    """Round one chunk of float64 patterns ``b``, any mode and policy, on the patterns."""
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


_TOP = 61  # wide values are held as a 62-bit significand (leading bit 61) with a sticky lsb


def _round_scaled(neg, sig, e_top, fmt: Format, mode, overflow, flush, daz, tininess, rng,
                  random_bits, want_flags):
    """Round values beyond float64 (long double, wide integers, fractions) given exactly as
    ``(-1)**neg * sig * 2**(e_top - 61)``: ``sig`` uint64 with its leading bit at 61 (or 0),
    its lowest bit a sticky bit (round-to-odd at 62 bits, exact for any later rounding to at
    most 60 bits), ``e_top`` int64, the exponent of the leading bit. Any exponent works (far
    beyond float64's). Returns (float64 patterns, flags or None), as :func:`_kernel`."""
    p = _params(fmt)
    m, emin = fmt.mantissa_bits, fmt.emin
    zero = sig == ZERO
    if daz:
        zero |= e_top < emin  # denormals-are-zero: the input reads as a signed zero
    rnd = None
    if mode is Rounding.STOCHASTIC:
        rnd = rng.integers(0, 1 << 64, size=sig.shape, dtype=np.uint64, endpoint=False)
    q = np.maximum(e_top - m, emin - m)  # exponent of the quantum: gradual underflow below emin
    kept, up, inexact = _significand_round(sig, q - (e_top - _TOP), mode, neg, rnd, random_bits)
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
            k2, u2, _ = _significand_round(sig, _TOP - m, mode, neg, rnd, random_bits)
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


def _split_uint(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint64 magnitudes to (sig, e_top) of :func:`_round_scaled`, exactly."""
    with np.errstate(over="ignore"):
        _, e = np.frexp(a.astype(np.float64))  # the float may round up to the next binade
    e = np.clip(e, 1, 64).astype(np.int64)
    e -= (((a >> (e - 1).astype(_U)) == ZERO) & (e > 1)).astype(np.int64)  # 2**(e-1) <= a < 2**e
    drop = np.clip(e - (_TOP + 1), 0, 63).astype(_U)
    lift = np.clip((_TOP + 1) - e, 0, 63).astype(_U)
    sticky = (a & ((ONE << drop) - ONE)) != ZERO
    sig = np.where(e > _TOP + 1, (a >> drop) | sticky.astype(_U), a << lift)
    return sig, e - 1


def _split_longdouble(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite long doubles to (neg, sig, e_top) of :func:`_round_scaled`, exactly (x87's
    64-bit and quad's 113-bit significands alike: the bits below 62 go into the sticky bit)."""
    neg = np.signbit(x).astype(_U)
    frac, e = np.frexp(np.abs(x))  # frac in [1/2, 1), exact in long double
    t = np.ldexp(frac, _TOP + 1)
    top = np.floor(t)
    sig = top.astype(np.uint64) | (t != top).astype(_U)
    return neg, sig, e.astype(np.int64) - 1


def _split_rational(x: Fraction) -> tuple[int, int, int]:
    """A Fraction (or int) to (neg, sig, e_top) of :func:`_round_scaled`, exactly."""
    return _split_ratio(x.numerator, x.denominator)


def _split_ratio(n: int, d: int) -> tuple[int, int, int]:
    """n / d (Python ints, d > 0) to (neg, sig, e_top) of :func:`_round_scaled`, exactly.
    Object arrays call this per element: int operations only, no Fraction arithmetic."""
    neg = int(n < 0)
    n = -n if neg else n
    if n == 0:
        return neg, 0, 0
    e = n.bit_length() - d.bit_length()  # 2**(e-1) < n/d < 2**(e+1)
    if (n < (d << e)) if e >= 0 else ((n << -e) < d):
        e -= 1  # now 2**e <= n/d < 2**(e+1)
    sh = _TOP - e
    q, rem = divmod(n << sh, d) if sh >= 0 else divmod(n, d << -sh)
    return neg, q | (rem != 0), e


# A Decimal's exponent beyond this (|d| > 10**1000 > 2**3321 or |d| < 10**-1000): past every
# format's range (all lie within float64's), so it rounds as any value that far out does.
_DECIMAL_FAR = 1000
_FAR_E_TOP = 4000  # the exponent of the power of two that stands in for such a Decimal


def far_decimal(value) -> int:
    """Internal API (``fpsim show``): -1 for a decimal string or Decimal nonzero and below
    10**-1000 in magnitude, +1 for one above 10**1000 (finite), else 0: such values round as
    any value that far out does (see :func:`_split_decimal`), not by their exact digits.

    >>> far_decimal("1e-1001"), far_decimal("-1e1001"), far_decimal("0.1")
    (-1, 1, 0)
    """
    if isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except ArithmeticError:  # decimal.InvalidOperation: as_rational says what is wrong
            return 0
    if not isinstance(value, Decimal) or not value.is_finite() or value.is_zero():
        return 0
    e = value.adjusted()
    return -1 if e < -_DECIMAL_FAR else (1 if e > _DECIMAL_FAR else 0)


def _split_decimal(d: Decimal) -> tuple[int, int, int]:
    """A finite Decimal to (neg, sig, e_top) of :func:`_round_scaled`: exact, except that
    beyond 10**+-1000 a power of two on the same side stands in, which rounds the same in
    every mode (values, flags, stochastic draws): Decimal('1e-999999999') must not build a
    billion-digit integer."""
    neg = int(d.is_signed())  # keeps the sign of -0
    if d and abs(d.adjusted()) > _DECIMAL_FAR:
        return neg, 1 << _TOP, _FAR_E_TOP if d.adjusted() > 0 else -_FAR_E_TOP
    return (neg,) + _split_ratio(*d.as_integer_ratio())[1:]


def random_bits_of(random_bits, mode: Rounding) -> int | None:
    """Internal API of every function that takes ``random_bits`` (:class:`RoundingPolicy`,
    fpsim.integer): None stays None; else ``mode`` must be stochastic and ``random_bits`` an
    int in [1, 63] by fpsim.checks.as_int's rule (what range() takes; a TypeError for other
    types), returned as an int.

    >>> random_bits_of(np.int8(8), Rounding.STOCHASTIC)
    8
    >>> random_bits_of(64, Rounding.STOCHASTIC)
    Traceback (most recent call last):
    ...
    ValueError: random_bits must be an int in [1, 63], got 64
    """
    if random_bits is None:
        return None
    if mode is not Rounding.STOCHASTIC:
        raise ValueError("random_bits only applies to rounding='stochastic'")
    n = as_int("random_bits", random_bits, None)  # what range() takes; TypeError else
    if not 1 <= n <= 63:
        raise ValueError(f"random_bits must be an int in [1, 63], got {random_bits!r}")
    return n


@dataclass(frozen=True)
class RoundingPolicy:
    """How values are rounded to a format: the one value object behind the ``fmt``,
    ``rounding``, ``overflow``, ``subnormals``, ``tininess``, ``rng`` and ``random_bits``
    arguments of fpsim's rounding and arithmetic, parsed and validated once.

    The fields take what those arguments take and hold the parsed values (a
    :class:`~fpsim.formats.Format`, enum members, an int ``random_bits``); ``rng`` is kept as
    given (None: fpsim's default generator at the time of use). ``flush`` and ``daz`` are
    derived (``flush`` also for a format without subnormals). Functions that take the
    separate options also take ``policy=`` instead (then ``fmt`` and the options stay unset).
    ``flags=`` is not part of the policy: it says what to return, not how to round.

    >>> p = RoundingPolicy("bf16", "up")
    >>> p.fmt.name, p.rounding.value, p.flush
    ('bf16', 'up', False)
    >>> import fpsim
    >>> float(fpsim.round(1/3, policy=p)) == float(fpsim.round(1/3, "bf16", "up"))
    True
    """

    fmt: Format
    rounding: Rounding = Rounding.NEAREST_EVEN
    overflow: Overflow = Overflow.INF
    subnormals: Subnormals = Subnormals.KEEP
    tininess: Tininess = Tininess.AFTER
    rng: np.random.Generator | int | None = None
    random_bits: int | None = None
    flush: bool = field(init=False, repr=False, compare=False)
    daz: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = functools.partial(object.__setattr__, self)  # frozen: set the parsed values once
        fmt = get_float_format(self.fmt)
        mode = as_rounding(self.rounding)
        sub = as_subnormals(self.subnormals)
        random_bits = random_bits_of(self.random_bits, mode)
        put("fmt", fmt)
        put("rounding", mode)
        put("overflow", as_overflow(self.overflow))
        put("subnormals", sub)
        put("tininess", as_tininess(self.tininess))
        put("random_bits", random_bits)
        put("flush", sub in (Subnormals.FLUSH, Subnormals.FLUSH_DAZ) or not fmt.subnormals)
        put("daz", sub in (Subnormals.DAZ, Subnormals.FLUSH_DAZ))

    def generator(self) -> np.random.Generator | None:
        """The generator stochastic rounding draws from (None in the other modes)."""
        return default_rng(self.rng) if self.rounding is Rounding.STOCHASTIC else None


_OPTIONS = {"rounding": "nearest_even", "overflow": "inf", "subnormals": "keep",
            "tininess": "after", "rng": None, "random_bits": None}


@functools.lru_cache(maxsize=512, typed=True)
def _parsed(fmt, rounding, overflow, subnormals, tininess, random_bits) -> RoundingPolicy:
    return RoundingPolicy(fmt, rounding, overflow, subnormals, tininess, None, random_bits)


def policy_of(fmt, rounding="nearest_even", overflow="inf", subnormals="keep",
              tininess="after", rng=None, random_bits=None,
              policy: RoundingPolicy | None = None, *, what: str = "round") -> RoundingPolicy:
    """The :class:`RoundingPolicy` of a call's arguments, parsed once (cached: the same
    arguments give the same object); a ``policy`` given instead is returned as it is. Giving
    both (``fmt`` or a non-default option besides ``policy``) is a TypeError.

    >>> policy_of("fp16", "up") is policy_of("fp16", "up")
    True
    """
    if policy is not None:
        if not isinstance(policy, RoundingPolicy):
            raise TypeError(f"{what}: policy must be a fpsim.RoundingPolicy, got "
                            f"{type(policy).__name__}")
        given = [k for k, v in zip(_OPTIONS, (rounding, overflow, subnormals, tininess, rng,
                                              random_bits), strict=True)
                 if v is not _OPTIONS[k] and not (isinstance(v, str) and v == _OPTIONS[k])]
        if fmt is not None:
            given.insert(0, "fmt")
        if given:
            raise TypeError(f"{what}: give either policy= or fmt and the rounding options, not "
                            f"both (got policy= with {', '.join(given)})")
        return policy
    try:
        pol = _parsed(fmt, rounding, overflow, subnormals, tininess, random_bits)
    except (TypeError, ValueError):  # hashing a generic np.timedelta64 is a ValueError
        if _hashable(fmt, rounding, overflow, subnormals, tininess, random_bits):
            raise  # the argument's own clear error
        pol = RoundingPolicy(fmt, rounding, overflow, subnormals, tininess, None, random_bits)
    if rng is not None:
        pol = RoundingPolicy(pol.fmt, pol.rounding, pol.overflow, pol.subnormals, pol.tininess,
                             rng, pol.random_bits)
    return pol


def _hashable(*args) -> bool:
    try:
        hash(args)
    except (TypeError, ValueError):
        return False
    return True


def _widen(arr: np.ndarray) -> np.ndarray:
    """float16 / float32 / ml_dtypes floats to float64, exactly, NaN payloads included.

    The hardware widening quiets a signalling NaN (and warns); IEEE conversions must signal
    INVALID for it later, so such NaNs are rebuilt from their patterns, still signalling."""
    with np.errstate(invalid="ignore"):
        out = arr.astype(np.float64)
    if arr.dtype == np.float16 or not arr.size:  # NumPy widens float16 NaNs bit-exactly
        return out
    nan = np.isnan(out)
    if nan.any():
        # ml_dtypes.finfo for every type: float8_e5m2 is of kind "f", and ml_dtypes 0.5 gives
        # np.finfo no entry for it (a ValueError)
        info = ml_dtypes.finfo(arr.dtype)
        m = int(info.nmant)
        src = arr[nan].view(f"u{arr.dtype.itemsize}").astype(np.uint64)
        payload = src & _U((1 << m) - 1)
        snan = (payload != ZERO) & ((payload >> _U(m - 1)) & ONE == ZERO)
        pat = ((src >> _U(info.bits - 1)) << _U(63)) | EXP_MASK | (payload << _U(52 - m))
        ob = out.view(np.uint64)
        ob[nan] = np.where(snan, pat, ob[nan])
    return out


_ML_FLOAT_KINDS = "V"  # ml_dtypes' bfloat16 / float8 report kind 'V'


def as_float64(x, name: str = "x") -> tuple[np.ndarray, np.ndarray | None, bool]:
    """Convert a real array-like to float64 exactly: returns (hi, lo or None, was_scalar).
    ``name`` is what the errors for ragged or non-numeric input call the argument.

    ``lo`` is the exact remainder for inputs float64 cannot hold (int64 beyond 2**53, long
    double), so that they are rounded once, not twice.

    >>> hi, lo, scalar = as_float64(2**60 + 1)
    >>> float(hi), float(lo), scalar
    (1.152921504606847e+18, 1.0, True)
    """
    try:
        scalar = np.ndim(x) == 0
    except ValueError as exc:  # ragged nested lists
        raise ragged_error(name, exc) from None
    if isinstance(x, (complex, np.complexfloating)):
        raise TypeError("complex input is not supported: round the real and imaginary parts")
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 1 << 63:
        try:
            hi = float(x)
        except OverflowError:  # x rounds to inf in float64: pair it with the largest float64
            hi = float(np.finfo(np.float64).max) * (1.0 if x > 0 else -1.0)
        rem = x - int(hi)
        rem = max(-(1 << 1000), min(rem, 1 << 1000))  # beyond 2**1024: any lo >= a spacing
        lo = float(rem)  # truncated toward zero: keeps how rem compares with half a spacing
        if abs(int(lo)) > abs(rem):
            lo = float(np.nextafter(lo, 0.0))
        return np.array(hi), np.array(lo), True
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if kind == "c":
        raise TypeError("complex input is not supported: round the real and imaginary parts")
    if kind == "f":
        if arr.dtype.itemsize > 8:  # long double: split into a pair (round() is exact)
            with np.errstate(invalid="ignore", over="ignore"):
                hi = arr.astype(np.float64)
                lo = np.where(np.isfinite(hi), (arr - hi).astype(np.float64), 0.0)
                # beyond float64: the largest float64 and a remainder above any spacing, as
                # for huge ints. (Below 2**-1011 lo may be rounded: round() does not use it.)
                big = np.isinf(hi) & np.isfinite(arr)
                if big.any():
                    sgn = np.where(np.signbit(arr), -1.0, 1.0)
                    hi = np.where(big, sgn * np.finfo(np.float64).max, hi)
                    lo = np.where(big, sgn * 2.0**1000, lo)
            return hi, lo, scalar
        if arr.dtype.itemsize == 8:
            return arr.astype(np.float64, copy=False), None, scalar
        return _widen(arr), None, scalar
    if kind in "iu":
        hi = arr.astype(np.float64)
        if arr.dtype.itemsize >= 8 and arr.size and (np.abs(hi) >= 2.0**53).any():
            # split exactly into a multiple of 2**11 (<= 53 significant bits) and the low 11
            # bits, then TwoSum: hi = the nearest float64, lo the exact remainder. (Casting
            # hi back to the integer type overflows at 2**63 / 2**64.)
            top = ((arr >> 11).astype(np.float64)) * 2048.0
            low = (arr & 2047).astype(np.float64)
            hi = top + low
            b = hi - top
            lo = (top - (hi - b)) + (low - b)
            if (lo != 0).any():
                return hi, lo, scalar
        return hi, None, scalar
    if kind == "b":
        return arr.astype(np.float64), None, scalar
    if kind in _ML_FLOAT_KINDS:
        try:
            return _widen(arr), None, scalar
        except (TypeError, ValueError):
            pass
    raise TypeError(
        f"{name} must hold real numbers (Python or NumPy floats/ints, ml_dtypes arrays; round, "
        f"cast and arithmetic also Fractions / Decimals, alone or in object arrays), got dtype "
        f"{arr.dtype} ({type(x).__name__})"
    )


def _finish(out_bits: np.ndarray, fl, shape, scalar, want_flags: bool, where: str | None):
    """Shape the result; record the flags in the active flag contexts as ``where`` (None:
    the caller records them)."""
    out = (out_bits.view(np.float64) if out_bits.dtype == np.uint64 else out_bits).reshape(shape)
    if fl is not None:
        fl = fl.reshape(shape)
        if where is not None and _flags.flags_active():
            _flags.record(fl, where)
    if scalar:
        out = out[()]
        if fl is not None:
            fl = fl[()]
    return (out, fl) if want_flags else out


def _refuse_nan(values: np.ndarray, fmt: Format) -> None:
    """Storing needs a pattern: a NaN has none in a format without NaN (fp6, fp4)."""
    if fmt.nan_encoding is NaNEncoding.NONE and np.isnan(values).any():
        raise ValueError(
            f"x holds NaN, which {fmt.name} cannot encode: it has no NaN pattern. "
            "fpsim.round returns NaN with the INVALID flag for it; clean the input or store "
            "in a format with NaN")


def _via_float32(v: np.ndarray, store: np.dtype) -> np.ndarray:
    """float64 values of a format stored in an ml_dtypes type, as float32 first: exact (every
    such format's values are float32 values) and several times faster than ml_dtypes'
    float64 conversion."""
    return v.astype(np.float32) if store.kind == _ML_FLOAT_KINDS else v


def run_chunks(x64: np.ndarray, fmt, mode, ovf, flush, daz, tin, rng, random_bits, want,
               store: np.dtype | None = None, pair_lo: np.ndarray | None = None):
    """Round float16/32/64 ``x64`` chunk by chunk (internal API, for :mod:`fpsim.integer`:
    the parsed options one by one, as a :class:`RoundingPolicy` holds them): returns
    (float64 patterns, or values in the ``store`` dtype when given, so no full-size float64
    temporary exists; flags). With
    ``pair_lo`` (float64, flat) the values are the checked pairs ``x64 + pair_lo``, taken to
    53 bits with round-to-odd chunk by chunk (:func:`round_pair`)."""
    p = _params(fmt)
    flat = np.ascontiguousarray(x64).reshape(-1)
    n = flat.size
    out = np.empty(n, dtype=np.uint64 if store is None else store)
    fl = np.empty(n, dtype=np.uint8) if want else None
    narrow = flat.dtype != np.float64  # float16/32 input: widen chunk by chunk (exact)
    bits = flat if narrow else flat.view(np.uint64)
    gen = default_rng(rng) if mode is Rounding.STOCHASTIC else None
    if (flat.dtype == np.float32 and p.fast32 and mode in _FLOAT_MODES and pair_lo is None
            and not (want or flush or daz)):
        _run_float32(flat, out, p, fmt, mode, ovf, tin, store)
        return out, fl
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        if narrow:
            chunk = _widen(bits[lo:hi]).view(np.uint64)
        elif pair_lo is not None:
            h, low = flat[lo:hi], pair_lo[lo:hi]
            _check_pair(h, low, lo)
            chunk = _odd_from_pair(h, low).view(np.uint64)
        else:
            chunk = bits[lo:hi]
        r, f = _kernel(chunk, p, mode, ovf, flush, daz, tin, gen, random_bits, want)
        if store is None:
            out[lo:hi] = r
        else:  # exact: the format's values are values of its storage dtype
            v = r.view(np.float64)
            _refuse_nan(v, fmt)
            out[lo:hi] = _store_values(v, store, fmt)
        if want:
            fl[lo:hi] = f
    return out, fl


def _run_float32(flat: np.ndarray, out: np.ndarray, p: _Params, fmt: Format, mode, ovf, tin,
                 store: np.dtype | None) -> None:
    """:func:`run_chunks` for float32 input to a Params.fast32 format in a deterministic mode
    without flags, flush or DAZ: each chunk is rounded as float32 (:func:`_round32`, half
    the bytes of float64 and no widening first), the elements it leaves (overflow, inf,
    NaN) by _kernel_general on their exact float64 widening."""
    wide = out.view(np.float64) if store is None else None
    for lo in range(0, flat.size, CHUNK):
        x = flat[lo:lo + CHUNK]
        v, bad = _round32(x, p, mode, ovf)
        if store is None:
            wide[lo:lo + CHUNK] = v  # exact widening
        else:
            out[lo:lo + CHUNK] = _store_values(v, store, fmt, owned=True)
        if bad is not None:
            r, _ = _kernel_general(_widen(x[bad]).view(np.uint64), p, mode, ovf, False, False,
                                   tin, None, None, False)
            if store is None:
                out[lo + bad] = r
            else:
                r = r.view(np.float64)
                _refuse_nan(r, fmt)
                out[lo + bad] = _via_float32(r, store)


def _store_values(v: np.ndarray, store: np.dtype, fmt: Format,
                  owned: bool = False) -> np.ndarray:
    """Values of ``fmt`` (float32 or float64, each exactly a value of ``store``, or inf /
    NaN) in its storage dtype, exactly, by the bits: NumPy's float -> float16 and ml_dtypes'
    float32 -> float8 casts are several times slower. A value scaled by 2**(bias - 127)
    (exact: the format's smallest subnormal becomes float32's 2**(23 - m) times its smallest)
    holds the format's exponent field and fraction in float32's bits 23 - m and up, with the
    sign at 31. fp16's inf and NaN (the top 10 bits of the payload, as NumPy keeps them) land
    on its codes once masked to 15 bits; an 8-bit format's NaNs are stored by ml_dtypes' own
    cast, as before. ``owned``: ``v`` is a temporary the caller hands over (overwritten)."""
    width = fmt.exponent_bits + fmt.mantissa_bits  # the bits below the sign
    if not (store == np.float16 or (store.itemsize == 1 and width == 7
                                    and 1 <= fmt.bias <= 127)):  # ml_dtypes' float8 types
        with np.errstate(invalid="ignore", over="ignore"):
            return _via_float32(v, store).astype(store)
    with np.errstate(invalid="ignore", over="ignore"):
        t = v.astype(np.float32) if v.dtype != np.float32 else (v if owned else v.copy())
    nan = None
    if store != np.float16:
        nan = np.isnan(t)
        nan = np.flatnonzero(nan) if nan.any() else None
        if nan is not None:
            nan_out = t[nan].astype(store)  # ml_dtypes' NaN pattern, as _via_float32 gives
    t *= np.float32(2.0 ** (fmt.bias - 127))
    b = t.view(np.uint32)
    h = b >> np.uint32(23 - fmt.mantissa_bits)
    h &= np.uint32((1 << width) - 1)
    b >>= np.uint32(31 - width)
    b &= np.uint32(1 << width)  # the sign
    h |= b
    out = h.astype(np.uint16 if store == np.float16 else np.uint8).view(store)
    if nan is not None:
        out[nan] = nan_out
    return out


def _run_wide(x: np.ndarray, hi: np.ndarray, fmt, mode, ovf, flush, daz, tin, rng,
              random_bits, want):
    """:func:`run_chunks` for long double and 64-bit integer arrays (``hi`` their nearest float64):
    each value is split exactly into a significand and an exponent and rounded once."""
    p = _params(fmt)
    flat = np.ascontiguousarray(x).reshape(-1)
    hflat = np.ascontiguousarray(hi, dtype=np.float64).reshape(-1)
    n = flat.size
    out = np.empty(n, dtype=np.uint64)
    fl = np.empty(n, dtype=np.uint8) if want else None
    gen = default_rng(rng) if mode is Rounding.STOCHASTIC else None
    for lo in range(0, n, CHUNK):
        c = flat[lo:lo + CHUNK]
        if c.dtype.kind == "f":
            fin = np.isfinite(c)
            neg, sig, e_top = _split_longdouble(np.where(fin, c, 0))
            neg = np.signbit(c).astype(_U)
        else:
            fin = None
            neg = (c < 0).astype(_U)
            u = c.astype(np.uint64)  # two's complement: -u is the magnitude of a negative
            sig, e_top = _split_uint(np.where(neg == ONE, ZERO - u, u))
        r, f = _round_scaled(neg, sig, e_top, fmt, mode, ovf, flush, daz, tin, gen,
                             random_bits, want)
        if fin is not None and not fin.all():  # inf and NaN (payload kept): the float64 path
            bad = np.nonzero(~fin)
            rb, fb = _kernel(hflat[lo:lo + CHUNK][bad].view(np.uint64), p, mode, ovf, flush,
                             daz, tin, gen, random_bits, want)
            r[bad] = rb
            if want:
                f[bad] = fb
        out[lo:lo + CHUNK] = r
        if want:
            fl[lo:lo + CHUNK] = f
    return out, fl


_SNAN_BITS = EXP_MASK | (QUIET >> ONE)  # a signalling NaN: quiet bit clear, payload nonzero


def _decimal_of(x: str) -> Decimal:
    try:
        return Decimal(x.strip())
    except ArithmeticError:  # decimal.InvalidOperation
        raise ValueError(
            f"x must be a decimal number such as '0.1', '-1e999', 'inf' or 'nan', got {x!r}"
        ) from None


def as_rational(x) -> tuple[Fraction | float, bool]:
    """The exact value of ``x`` as :func:`round_rational` reads it: (a Fraction, or a float
    for inf / NaN; whether it is negative, which also holds the sign of a zero).

    >>> as_rational("-0.1")
    (Fraction(-1, 10), True)
    """
    x = _decimal_of(x) if isinstance(x, str) else x
    if isinstance(x, Decimal):
        if x.is_snan():  # float() refuses it: a float64 signalling NaN of its sign
            return float(np.uint64(_SNAN_BITS | (SIGN if x.is_signed() else ZERO))
                         .view(np.float64)), x.is_signed()
        if not x.is_finite():
            return float(x), x.is_signed()
        return Fraction(x), x.is_signed()
    if isinstance(x, (float, np.floating)):
        xf = float(x)
        if not np.isfinite(xf):
            return xf, bool(np.signbit(xf))
        return Fraction(xf), bool(np.signbit(xf))
    if isinstance(x, (Fraction, int, np.integer)) and not isinstance(x, bool):
        f = Fraction(int(x)) if isinstance(x, np.integer) else Fraction(x)
        return f, f < 0
    raise TypeError(
        "x must be an int, fractions.Fraction, decimal.Decimal, float or a decimal string, "
        f"got {type(x).__name__}"
    )


def _round_rational(x, pol: RoundingPolicy, want: bool):
    """One exact number rounded once: (patterns of shape (1,), flags or None)."""
    x = _decimal_of(x) if isinstance(x, str) else x
    gen = pol.generator()
    if isinstance(x, Decimal) and x.is_finite():  # split without a Fraction (far exponents)
        neg, sig, e_top = _split_decimal(x)
    else:
        v, neg = as_rational(x)  # neg holds the sign of a zero
        if isinstance(v, float):  # inf, NaN: the float64 kernel
            return _kernel(np.array([v]).view(np.uint64), _params(pol.fmt), pol.rounding,
                           pol.overflow, pol.flush, pol.daz, pol.tininess, gen,
                           pol.random_bits, want)
        _, sig, e_top = _split_rational(v)
    return _round_scaled(np.array([neg], _U), np.array([sig], _U),
                         np.array([e_top], np.int64), pol.fmt, pol.rounding, pol.overflow,
                         pol.flush, pol.daz, pol.tininess, gen, pol.random_bits, want)


# -- object arrays: exact numbers element by element ------------------------------------------

_OBJECT_ELEMENTS = ("int, float, fractions.Fraction, decimal.Decimal or NumPy real scalars "
                    "(None, strings and complex numbers are not real numbers)")


def _object_element(v):
    """An object-array element other than a Fraction or Python int, read exactly: (neg, sig,
    e_top) of :func:`_round_scaled`, or a float64 for the float kernel (floats keep their
    zero sign and NaN payload; inf, NaN), or None when it is not a real number."""
    if isinstance(v, float):  # Python float, np.float64
        return np.float64(v)
    if isinstance(v, Decimal):
        if not v.is_finite():
            return np.float64(as_rational(v)[0])  # inf, NaN (an sNaN still signalling)
        return _split_decimal(v)
    if not isinstance(v, np.generic):
        return None
    kind = v.dtype.kind
    if kind in "iub":
        return _split_rational(int(v))
    if kind == "f" and v.dtype.itemsize > 8:  # long double: its exact ratio
        if not np.isfinite(v):
            return np.float64(v)
        return (int(np.signbit(v)),) + _split_ratio(*v.as_integer_ratio())[1:]
    if kind in "f" + _ML_FLOAT_KINDS:
        try:
            return _widen(np.asarray(v).reshape(1))[0]  # exact, sNaN kept
        except (TypeError, ValueError):
            return None
    return None


def _object_error(v, i: int, shape: tuple, name: str) -> TypeError:
    where = f"element [{', '.join(str(int(j)) for j in np.unravel_index(i, shape))}]" \
        if shape else "it"
    text = repr(v)
    text = text if len(text) <= 40 else text[:37] + "..."
    extra = " (round the real and imaginary parts)" if isinstance(
        v, (complex, np.complexfloating)) else ""
    return TypeError(f"{name} must hold real numbers: {where} is a {type(v).__name__} "
                     f"({text}){extra}; an object array (or a list NumPy makes one of) may "
                     f"hold {_OBJECT_ELEMENTS}")


def _round_objects(flat: np.ndarray, shape: tuple, pol: RoundingPolicy, want: bool, name: str):
    """A flat object array rounded once per element, exactly as its elements are as scalars
    (Fractions, Decimals and ints of any size through :func:`_round_scaled`, floats through the
    float64 kernel), chunk by chunk. Returns (float64 patterns, flags or None, the mask of
    signalling-NaN elements or None)."""
    p = _params(pol.fmt)
    n = flat.size
    out = np.empty(n, dtype=np.uint64)
    fl = np.empty(n, dtype=np.uint8) if want else None
    snan = None
    gen = pol.generator()
    opts = (pol.rounding, pol.overflow, pol.flush, pol.daz, pol.tininess, gen,
            pol.random_bits, want)
    for lo in range(0, n, CHUNK):
        exact_at, parts, float_at, floats = [], [], [], []
        for i, v in enumerate(flat[lo:lo + CHUNK], lo):  # per element: Python numbers
            if isinstance(v, (Fraction, int)):  # the common elements first (bool is an int)
                t = _split_rational(v)
            else:
                t = _object_element(v)
                if t is None:
                    raise _object_error(v, i, shape, name)
            if isinstance(t, tuple):
                exact_at.append(i)
                parts.append(t)
            else:
                float_at.append(i)
                floats.append(t)
        if parts:  # one vectorised rounding of all exact numbers of the chunk
            neg, sig, e_top = zip(*parts, strict=True)
            neg, sig, e_top = np.array(neg, _U), np.array(sig, _U), np.array(e_top, np.int64)
            r, f = _round_scaled(neg, sig, e_top, pol.fmt, *opts)
            out[exact_at] = r
            if want:
                fl[exact_at] = f
        if floats:
            b = np.array(floats, dtype=np.float64).view(np.uint64)  # copies the patterns
            r, f = _kernel(b, p, *opts)
            out[float_at] = r
            if want:
                fl[float_at] = f
            s = ((b & ~SIGN) > EXP_MASK) & ((b & QUIET) == ZERO)
            if s.any():
                if snan is None:
                    snan = np.zeros(n, dtype=bool)
                snan[np.asarray(float_at)[s]] = True
    return out, fl, snan


def round_objects_with(arr: np.ndarray, policy: RoundingPolicy, want: bool = False,
                       name: str = "x"):
    """Internal API of arithmetic: an object array (any shape) rounded once per element by a
    parsed policy, each element exactly as :func:`round` rounds it alone. Returns ``(values,
    flags or None, signalling-NaN mask or None)`` in the array's shape, nothing recorded.
    An element that is not a real number is a TypeError naming ``name`` and its index.

    >>> a = np.array([Fraction(1, 3), 10**400], dtype=object)
    >>> v, f, snan = round_objects_with(a, policy_of("fp16", "up"))
    >>> v.tolist() == [1366 / 4096, np.inf], f, snan  # 1/3 = 1365.33.. / 4096
    (True, None, None)
    """
    out, fl, snan = _round_objects(arr.reshape(-1), arr.shape, policy, want, name)
    out = out.view(np.float64).reshape(arr.shape)
    return (out, None if fl is None else fl.reshape(arr.shape),
            None if snan is None else snan.reshape(arr.shape))


def listed(x):
    """Internal API: a list or tuple as the array NumPy makes of it (a ragged one stays:
    as_float64 says why); anything else as it is. Where NumPy would make floats of integers
    it cannot hold exactly (``[2**53 + 1, 0.5]``, ``[2**63 + 1, -1]``: float64), an object
    array instead, so each element is still rounded once, as alone."""
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError:
            return x
        if arr.dtype.kind == "f" and arr.size and ml_dtypes.finfo(arr.dtype).nmant < 63:
            with np.errstate(invalid="ignore"):  # (ml_dtypes.finfo: float8_e5m2 is "f" too)
                big = np.flatnonzero(np.abs(arr) >= 2.0 ** (ml_dtypes.finfo(arr.dtype).nmant + 1))
            if big.size:  # rare: look at those elements only
                obj = np.asarray(x, dtype=object)
                held = arr.reshape(-1)[big]
                if obj.shape == arr.shape and any(
                        isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                        and (not np.isfinite(h) or int(h) != int(v))
                        for v, h in zip(obj.reshape(-1)[big], held, strict=True)):
                    return obj  # (an exact list keeps NumPy's array: same stochastic draws)
        return arr
    return x


def round_rational(
    x,
    fmt: Format | str | None = None,
    rounding: Rounding | str = "nearest_even",
    *,
    overflow: Overflow | str = "inf",
    subnormals: Subnormals | str = "keep",
    tininess: Tininess | str = "after",
    rng: np.random.Generator | int | None = None,
    random_bits: int | None = None,
    flags: bool = False,
    policy: RoundingPolicy | None = None,
):
    """Round one exact number once to ``fmt``, whatever its size: an int, a
    :class:`~fractions.Fraction`, a :class:`~decimal.Decimal`, a float, or a decimal string
    (``"0.1"``, ``"1e999"``, ``"-0"``, ``"inf"``, ``"nan"``) read exactly, never through a
    float64 first. Options and result as :func:`round` (a scalar; ``(value, flags)`` with
    ``flags=True``). :func:`round` itself takes Fractions, Decimals and large ints this way.

    >>> import fpsim
    >>> from fpsim.rounding import round_rational
    >>> v, f = round_rational("1e999", "fp16", "toward_zero", flags=True)
    >>> float(v), fpsim.Flags(int(f))
    (65504.0, <Flags.INEXACT|OVERFLOW: 5>)
    >>> float(round_rational(2**100 - 1, "fp32", "toward_zero")) < 2.0**100  # not via float64
    True
    """
    pol = policy_of(fmt, rounding, overflow, subnormals, tininess, rng, random_bits, policy,
                    what="round_rational")
    out, fl = _round_rational(x, pol, bool(flags) or _flags.flags_active())
    return _finish(out, fl, (), True, bool(flags), "round")


def round(  # noqa: A001 - the natural name, as numpy.round
    x,
    fmt: Format | str | None = None,
    rounding: Rounding | str = "nearest_even",
    *,
    overflow: Overflow | str = "inf",
    subnormals: Subnormals | str = "keep",
    tininess: Tininess | str = "after",
    rng: np.random.Generator | int | None = None,
    random_bits: int | None = None,
    flags: bool = False,
    policy: RoundingPolicy | None = None,
):
    """Round real values to the nearest representable values of ``fmt`` (one correct rounding).

    Returns float64 values that ``fmt`` represents exactly (float64 holds every value of every
    supported format, so nothing is rounded twice); a scalar for scalar input. With
    ``flags=True`` returns ``(values, flags)``, ``flags`` a uint8 array of :class:`Flags` bits
    per element (tininess detected ``after`` rounding by default, as x86 and Arm do).

    - ``rounding``: ``nearest_even``, ``nearest_away``, ``toward_zero``, ``up``, ``down``,
      ``odd``, ``stochastic`` (a :class:`Rounding` member works too). Stochastic rounding draws
      the exact probability from 64-bit random integers of ``rng`` (a Generator or seed), or
      only ``random_bits`` of them, as hardware does.
    - ``overflow``: ``inf`` (IEEE: toward_zero / odd / the directed mode away from the overflow
      give the largest finite value; formats without infinity give NaN) or ``saturate``.
    - ``subnormals``: ``keep``, ``flush`` (tiny results become signed zero), ``daz`` (inputs
      below 2**emin read as zero), ``flush_daz``.

    Inputs float64 cannot hold (long doubles, 64-bit and Python integers beyond 2**53, a
    :class:`~fractions.Fraction` or :class:`~decimal.Decimal`) are rounded once, exactly, at
    any size (:func:`round_rational`); so are the elements of an object array of them (or of
    a list NumPy makes one of), each as it is alone. A NaN into a format without NaN (fp6,
    fp4) gives NaN with INVALID here; :func:`cast` and :func:`fpsim.to_bits`, which need its
    pattern, raise.

    >>> import fpsim
    >>> float(fpsim.round(65519.0, "fp16")), float(fpsim.round(65520.0, "fp16"))
    (65504.0, inf)
    >>> float(fpsim.round(1/3, fpsim.BF16, "toward_zero"))
    0.33203125
    >>> v, f = fpsim.round(1e-8, "fp16", flags=True)
    >>> float(v), fpsim.Flags(int(f))
    (0.0, <Flags.INEXACT|UNDERFLOW: 3>)
    >>> from fractions import Fraction
    >>> v = fpsim.round([Fraction(1, 3), 2**64 + 1, Fraction(1, 2**1100)], "fp32", "up")
    >>> v.tolist() == [float(fpsim.round(1/3, "fp32", "up")), 2.0**64 + 2.0**41, 2.0**-149]
    True
    """
    pol = policy_of(fmt, rounding, overflow, subnormals, tininess, rng, random_bits, policy,
                    what="round")
    want = bool(flags) or _flags.flags_active()
    return _finish(*_round_core(x, pol, want, None), bool(flags), "round")


def round_with(x, policy: RoundingPolicy, want: bool = False):
    """Internal API of the layers above (arithmetic, reductions): :func:`round` by a parsed
    policy. Returns ``(values, flags)``, the flags computed when ``want`` (else None) and not
    recorded in the flag contexts: the caller records what its operation raised.

    >>> v, f = round_with(1/3, policy_of("bf16", "up"))
    >>> float(v), f
    (0.333984375, None)
    """
    return _finish(*_round_core(x, policy, want, None), True, None)


_BF16_DROP = np.uint32(16)  # float32 and bfloat16 share sign and exponent: 16 bits go
_BF16_HALF_MINUS_ONE = np.uint32(0x7FFF)
_BF16_KEEP = np.uint32(0xFFFF0000)


def _bf16_nearest_even(x: np.ndarray, store: np.dtype | None) -> np.ndarray:
    """The default path, float32 -> bf16 with nearest even, subnormals kept, overflow to inf,
    no flags, at native speed. It equals the general kernel because bf16 has float32's
    exponent field: rounding is dropping float32's low 16 bits, with the carry of
    ``bits + 0x7FFF + lsb`` going into the exponent exactly as the general kernel's increment
    does (subnormals are float32 subnormals, the largest finite rounds up to inf at
    0x7F7F8000 and above). ``cast`` returns ml_dtypes' own cast, which is that same rule (NaN
    becomes its canonical quiet NaN, as the general path stores it); ``round`` returns
    float64 values, with a NaN input's payload kept and quieted as the general kernel does.
    tests/test_native_round.py checks both against the kernel on every bf16 boundary."""
    if store is not None:
        with np.errstate(invalid="ignore"):  # a NaN is stored as NaN: nothing to warn of
            return x.astype(store)  # ml_dtypes' float32 -> bfloat16 cast: exact nearest even
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, np.float64)  # chunk by chunk: no full-size temporary
    for lo in range(0, flat.size, CHUNK):
        b = flat[lo:lo + CHUNK].view(np.uint32)
        r = (b >> _BF16_DROP) & np.uint32(1)
        r += _BF16_HALF_MINUS_ONE
        r += b
        r &= _BF16_KEEP
        nan = np.isnan(b.view(np.float32))
        if nan.any():  # the carry would corrupt a NaN payload: keep it whole
            r[nan] = b[nan]
        with np.errstate(invalid="ignore"):  # quiets signalling NaNs, as the kernel
            out[lo:lo + CHUNK] = r.view(np.float32)
    return out.reshape(x.shape)


def _byte_nearest_even_ok(x, pol: RoundingPolicy, want: bool, store) -> bool:
    """May :func:`cast` take :func:`_byte_nearest_even`? The default policy (nearest even,
    subnormals kept, the format's overflow value, no flags) of an fp8 / fp6 / fp4 format with
    its own ml_dtypes type, a large float32 array. (:func:`round` keeps the kernel, which
    writes float64 values as fast or faster; measured in benchmarks/bench_rounding.py.)"""
    if not (store is not None and isinstance(x, np.ndarray) and x.dtype == np.float32
            and x.size >= _BYTE_TABLE_MIN and pol.rounding is Rounding.NEAREST_EVEN
            and pol.overflow is Overflow.INF and not pol.flush and not pol.daz and not want):
        return False
    dtype = pol.fmt.dtype
    return dtype is not None and table_cast_ok(dtype)


def _byte_nearest_even(x: np.ndarray, fmt: Format) -> np.ndarray | None:
    """:func:`cast` of float32 ``x`` to a one-byte format by
    :func:`fpsim.nativecast.narrow_to_byte`'s table (ml_dtypes' own rounding: nearest even,
    the kernel's overflow value, fnuz's one NaN), chunk by chunk, into the format's dtype.
    None when ``x`` holds a NaN (its payload, and fp6 / fp4's missing NaN, are the kernel's).
    Equal to the kernel on every high half of the float32 patterns with probing low halves
    (tests/test_native_round.py)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, fmt.dtype)
    for lo in range(0, flat.size, CHUNK):
        c = flat[lo:lo + CHUNK]
        if np.isnan(c.max()):  # NaN propagates through the max: one cheap pass
            return None
        out[lo:lo + CHUNK] = narrow_to_byte(c, fmt.dtype)
    return out.reshape(x.shape)


def _round_core(x, pol: RoundingPolicy, want: bool, store):
    """:func:`round` by a parsed policy: (patterns, flags or None, shape, scalar) for
    :func:`_finish`; with a ``store`` dtype, the common path writes its values straight into
    an array of that dtype (:func:`cast`), others return float64 patterns."""
    fmt, mode = pol.fmt, pol.rounding
    if (isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim > 0 and fmt == BF16
            and mode is Rounding.NEAREST_EVEN and pol.overflow is Overflow.INF
            and not pol.flush and not pol.daz and not want):
        return _bf16_nearest_even(x, store), None, x.shape, False
    if x.__class__ is np.ndarray and x.ndim > 0 and _byte_nearest_even_ok(x, pol, want, store):
        out = _byte_nearest_even(x, fmt)
        if out is not None:
            return out, None, x.shape, False
    if isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float16):
        hi, lo, scalar = x, None, x.ndim == 0  # widened to float64 chunk by chunk in run_chunks
    elif isinstance(x, (Fraction, Decimal)) or (
            isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 1 << 53):
        out, fl = _round_rational(x, pol, want)
        return out, fl, (), True
    else:
        x = listed(x)
        if isinstance(x, np.ndarray) and x.dtype == object:
            out, fl, _ = _round_objects(x.reshape(-1), x.shape, pol, want, "x")
            return out, fl, x.shape, x.ndim == 0
        hi, lo, scalar = as_float64(x)
    opts = (fmt, mode, pol.overflow, pol.flush, pol.daz, pol.tininess, pol.rng,
            pol.random_bits, want)
    if lo is not None:  # long double, or 64-bit integers beyond 2**53: exact, chunked
        out, fl = _run_wide(np.asarray(x), hi, *opts)
        return out, fl, np.shape(hi), scalar
    p = _params(fmt)
    if p.identity and not pol.daz and not pol.flush:
        out = np.array(hi, dtype=np.float64, copy=True)  # exact widening
        fl = np.zeros(out.shape, np.uint8) if want else None
        if want:
            snan = np.isnan(out) & ((out.view(np.uint64) & QUIET) == ZERO)
            fl[snan] = np.uint8(Flags.INVALID)
        return out.view(np.uint64), fl, out.shape, scalar
    out, fl = run_chunks(hi, *opts, store)
    return out, fl, np.shape(hi), scalar


_PAIR_SCREEN = 0.5 + 2.0**-53  # hi + lo * this == hi  iff  |lo| < about the spacing at hi


def _check_pair(hi: np.ndarray, lo: np.ndarray, offset: int = 0) -> None:
    """The precondition of :func:`round_pair`: where hi is finite, hi is the float64 nearest
    to hi + lo and lo is finite with its sign exact (TwoSum, exact products, remainders).
    Screened by one float addition: it fails where |lo| reaches the spacing at hi on lo's
    side (the algorithm's real need), or lo is inf / NaN; hi = +-max with lo of its sign
    stands for a value beyond float64 (as :func:`as_float64` gives for huge ints)."""
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


def _odd_from_pair(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """hi + lo rounded to 53 bits with round-to-odd (exact for any later rounding to <= 51
    bits). Requires hi + lo in [hi, hi's neighbour toward lo) (:func:`_check_pair`)."""
    hb = hi.view(np.uint64)
    inexact = ((lo != 0) & (np.abs(hi) < np.inf)).view(np.uint8).astype(_U)
    # toward zero (lo's sign opposite to hi's): the magnitude pattern minus one, then odd
    toward_zero = ((hb ^ lo.view(np.uint64)) >> _U(63)) & inexact
    return ((hb - toward_zero) | inexact).view(np.float64)


def _pair_to_float64(hi, lo, mode: Rounding, overflow: Overflow, flush: bool, rng,
                     random_bits):
    """Round hi + lo to float64 itself (hi the nearest float64, or the largest finite one for
    a value beyond it; lo's sign exact): the result is hi or nb, hi's neighbour on lo's side."""
    finite = np.isfinite(hi)
    inexact = (lo != 0) & finite
    with np.errstate(invalid="ignore", over="ignore"):
        nb = np.nextafter(hi, np.where(lo > 0, np.inf, -np.inf))
        gap = np.where(np.isinf(nb) & finite, 2.0**971, np.abs(nb - hi))  # spacing toward nb
        twice = 2.0 * np.abs(lo)
    odd = (hi.view(np.uint64) & ONE) == ONE
    away = np.abs(nb) > np.abs(hi)
    if mode is Rounding.NEAREST_EVEN:
        take = (twice > gap) | ((twice == gap) & odd)
    elif mode is Rounding.NEAREST_AWAY:
        take = (twice > gap) | ((twice == gap) & away)
    elif mode is Rounding.TOWARD_ZERO:
        take = ~away
    elif mode is Rounding.UP:
        take = lo > 0
    elif mode is Rounding.DOWN:
        take = lo < 0
    elif mode is Rounding.ODD:
        take = ~odd
    else:  # stochastic: nb with probability |lo| / gap (float64 accuracy)
        gen = default_rng(rng)
        with np.errstate(invalid="ignore"):
            prob = np.abs(lo) / gap
        if random_bits is None:
            take = gen.random(hi.shape) < prob
        else:
            take = gen.integers(0, 1 << random_bits, size=hi.shape) < np.floor(
                prob * float(1 << random_bits))
    out = np.where(take & inexact, nb, hi)
    fl = np.where(inexact, np.uint8(Flags.INEXACT), np.uint8(0))
    ovf = (np.isinf(out) | (np.isinf(nb) & (np.abs(lo) >= gap))) & finite  # beyond 2**1024
    fl[ovf] |= np.uint8(Flags.OVERFLOW)
    if overflow is Overflow.SATURATE:
        out = np.where(ovf, np.copysign(np.finfo(np.float64).max, out), out)
    if flush:
        tiny = (np.abs(out) < 2.0**-1022) & (out != 0)
        fl[tiny] |= np.uint8(Flags.UNDERFLOW | Flags.INEXACT)
        out = np.where(tiny, np.copysign(0.0, out), out)
    snan = np.isnan(hi) & ((hi.view(np.uint64) & QUIET) == ZERO)
    fl[snan] = np.uint8(Flags.INVALID)
    out = np.where(np.isnan(hi), (hi.view(np.uint64) | QUIET).view(np.float64), out)
    return out.view(np.uint64), fl


def round_pair(
    hi,
    lo,
    fmt: Format | str | None = None,
    rounding: Rounding | str = "nearest_even",
    *,
    overflow: Overflow | str = "inf",
    subnormals: Subnormals | str = "keep",
    tininess: Tininess | str = "after",
    rng: np.random.Generator | int | None = None,
    random_bits: int | None = None,
    flags: bool = False,
    policy: RoundingPolicy | None = None,
    _scalar: bool | None = None,
):
    """Round the exact value ``hi + lo`` (a float64 pair, ``hi`` the nearest float64 to the
    sum, ``lo`` the remainder whose sign must be exact) once to ``fmt``. A pair that is not
    one (|lo| as large as the float64 spacing at ``hi``, ``lo`` NaN or infinite where ``hi``
    is finite) is a ValueError.

    This is how arithmetic is correctly rounded: an error-free transformation (TwoSum, exact
    products, exact remainders) gives the pair; deterministic modes go through round-to-odd at
    53 bits, which is exact for targets of at most 50 mantissa bits; stochastic rounding takes
    its probability from ``hi + lo`` itself (float64 accuracy, 2**-53).

    >>> import fpsim
    >>> float(round_pair(1.0, 2.0**-60, "fp32", "up"))  # 1 + tiny rounds up in fp32
    1.0000001192092896
    """
    pol = policy_of(fmt, rounding, overflow, subnormals, tininess, rng, random_bits, policy,
                    what="round_pair")
    _pair_format_check(pol.fmt)
    hi_a, _, scalar = as_float64(hi)
    lo_a, _, _ = as_float64(lo)
    shape = broadcast_shape("round_pair", hi_a.shape, lo_a.shape)
    hi_a, lo_a = np.broadcast_to(hi_a, shape), np.broadcast_to(lo_a, shape)
    if _scalar is not None:
        scalar = _scalar
    want = bool(flags) or _flags.flags_active()
    shape = hi_a.shape
    hi_a = np.ascontiguousarray(hi_a, dtype=np.float64).reshape(-1)
    lo_a = np.ascontiguousarray(lo_a, dtype=np.float64).reshape(-1)
    out, fl = _round_pair_core(hi_a, lo_a, pol, want)
    return _finish(out, fl, shape, scalar, bool(flags), "round_pair")


def round_pair_with(hi: np.ndarray, lo: np.ndarray, policy: RoundingPolicy,
                    want: bool = False):
    """Internal API of the layers above (arithmetic, reductions): :func:`round_pair` of flat
    float64 arrays by a parsed policy. Returns flat ``(values, flags)``, the flags computed
    when ``want`` (else None) and not recorded in the flag contexts.

    >>> v, f = round_pair_with(np.array([1.0]), np.array([2.0**-60]), policy_of("fp32", "up"))
    >>> v.tolist(), f
    ([1.0000001192092896], None)
    """
    _pair_format_check(policy.fmt)
    hi = np.ascontiguousarray(hi, dtype=np.float64).reshape(-1)
    lo = np.ascontiguousarray(lo, dtype=np.float64).reshape(-1)
    out, fl = _round_pair_core(hi, lo, policy, want)
    return out.view(np.float64), fl


def round_flat(hi: np.ndarray, lo: np.ndarray | None, policy: RoundingPolicy,
               want: bool = False, *, checked: bool = False):
    """Internal API, the per-operation hot path of arithmetic and reductions: round ``hi``
    (+ ``lo``, a pair as :func:`round_pair` needs it; None: ``hi`` alone) once by a parsed
    policy, for flat contiguous float64 arrays. The same kernel calls as
    :func:`round_with` / :func:`round_pair_with` (which it falls back to for stochastic
    rounding, float64 itself and arrays beyond one chunk), without their conversions and
    reshaping. ``checked=True``: the caller guarantees the pair (TwoSum's), so its check
    is skipped. Returns flat ``(values, flags or None)``, nothing recorded.

    >>> v, f = round_flat(np.array([1.0]), np.array([2.0**-60]), policy_of("fp32", "up"))
    >>> v.tolist(), f
    ([1.0000001192092896], None)
    """
    p = _params(policy.fmt)
    if (policy.rounding is Rounding.STOCHASTIC or hi.size > CHUNK or p.identity
            or hi.dtype != np.float64):
        if lo is None:
            return round_with(hi, policy, want)
        return round_pair_with(hi, lo, policy, want)
    if lo is None:
        daz, bits = policy.daz, hi.view(np.uint64)
    else:
        _pair_format_check(policy.fmt)
        if not checked:
            _check_pair(hi, lo)
        daz, bits = False, _odd_from_pair(hi, lo).view(np.uint64)  # as run_chunks' pair path
    r, fl = _kernel(bits, p, policy.rounding, policy.overflow, policy.flush, daz,
                    policy.tininess, None, policy.random_bits, want)
    return r.view(np.float64), fl


def _pair_format_check(fmt: Format) -> None:
    if fmt.mantissa_bits > 50 and not _params(fmt).identity:
        # round-to-odd at 53 bits is exact before a second rounding to p <= 51 bits (m <= 50)
        raise ValueError(f"round_pair needs a format of at most 50 mantissa bits, got {fmt.name}")


def _round_pair_core(hi_a: np.ndarray, lo_a: np.ndarray, pol: RoundingPolicy, want: bool):
    """:func:`round_pair` on flat float64 arrays: (float64 patterns, flags or None)."""
    fmt, mode, ovf, flush, tin = pol.fmt, pol.rounding, pol.overflow, pol.flush, pol.tininess
    rng, random_bits = pol.rng, pol.random_bits
    if _params(fmt).identity:  # fp64 itself (int64 / long double input): hi or its neighbour
        _check_pair(hi_a, lo_a)
        out, fl = _pair_to_float64(hi_a, lo_a, mode, ovf, flush, rng, random_bits)
        return out, fl if want else None
    # daz: denormal operands were handled by the caller; here only the value matters
    if mode is not Rounding.STOCHASTIC:
        return run_chunks(hi_a, fmt, mode, ovf, flush, False, tin, rng, random_bits, want,
                          pair_lo=lo_a)
    # Stochastic: t0 = the value toward zero, ulp the quantum there; p = |exact - t0| / ulp.
    _check_pair(hi_a, lo_a)
    v = _odd_from_pair(hi_a, lo_a)
    t0, _ = run_chunks(v, fmt, Rounding.TOWARD_ZERO, Overflow.SATURATE, False, False, tin,
                       None, None, False)
    t0 = t0.view(np.float64)
    t0b = np.abs(t0).view(np.uint64)
    e = np.maximum((t0b >> _U(52)).view(np.int64) - 1023, fmt.emin)
    ulp = np.ldexp(1.0, e - fmt.mantissa_bits)
    with np.errstate(invalid="ignore", over="ignore"):
        prob = np.abs((hi_a - t0) + lo_a) / ulp
    gen = default_rng(rng)
    if random_bits is None:
        up = gen.random(prob.shape) < prob
    else:
        scale = float(1 << random_bits)
        up = gen.integers(0, 1 << random_bits, size=prob.shape) < np.floor(prob * scale)
    res = np.where(up, t0 + np.copysign(ulp, hi_a), t0)
    res = np.where(np.isfinite(hi_a), res, hi_a)
    out, fl = run_chunks(res, fmt, Rounding.NEAREST_EVEN, ovf, flush, False, tin, None, None,
                         want)
    if want:
        inexact = ((hi_a != t0) | (lo_a != 0)) & np.isfinite(hi_a)
        fl[inexact] |= np.uint8(Flags.INEXACT)
        tiny = inexact & (np.abs(res) < fmt.smallest_normal)
        fl[tiny] |= np.uint8(Flags.UNDERFLOW)
    return out, fl


def cast(
    x,
    fmt: Format | str | None = None,
    rounding: Rounding | str = "nearest_even",
    **kwargs,
) -> np.ndarray:
    """Round to ``fmt`` and return the values in the format's storage dtype (np.float16,
    ml_dtypes.bfloat16 / float8, float32, ...): the real width, exact. Options as
    :func:`round` (keywords, or ``policy=``).

    Chunked as :func:`round`: the peak memory is the input, the output at its real width and
    one chunk. A NaN, which formats without NaN (fp6, fp4) cannot store, is a ValueError
    (:func:`round` returns NaN with INVALID for it; :func:`fpsim.to_bits` refuses it too).

    >>> import fpsim
    >>> fpsim.cast([1.0, 1/3], "bf16").dtype.name
    'bfloat16'
    """
    allowed = {"overflow", "subnormals", "tininess", "rng", "random_bits", "flags", "policy"}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"cast() got unexpected keyword arguments {unknown}; valid: "
                        f"{', '.join(sorted(allowed))}")
    flags = bool(kwargs.pop("flags", False))
    kw = {"overflow": "inf", "subnormals": "keep", "tininess": "after", "rng": None,
          "random_bits": None, "policy": None} | kwargs
    pol = policy_of(fmt, rounding, kw["overflow"], kw["subnormals"], kw["tininess"], kw["rng"],
                    kw["random_bits"], kw["policy"], what="cast")
    fmt = pol.fmt
    store = fmt.storage_dtype
    want = flags or _flags.flags_active()
    out = _finish(*_round_core(x, pol, want, store), flags, "round")
    values = np.asarray(out[0] if flags else out)
    if values.dtype != store:  # the other paths (scalars, long double, wide ints, fp64)
        _refuse_nan(values, fmt)
        values = _via_float32(values, store).astype(store)
    return (values, out[1]) if flags else values
