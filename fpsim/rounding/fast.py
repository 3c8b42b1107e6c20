"""The fast paths of the rounding core: shortcuts that give the general kernel's bits for a
domain of formats, modes, policies and input dtypes, at native speed.

Contract: each path equals :func:`fpsim.rounding.kernel.kernel_general` bit for bit on its
domain (values, signed zeros, NaN payloads, overflow values), and is taken only there; outside
its domain the caller uses the kernel. :func:`round_patterns` is the per-chunk dispatch
between the float-domain path and the kernel. Proofs: tests/test_rounding_fast_paths.py
(every REGISTRY row against the kernel on one grid; stochastic rounding at chosen draws),
tests/test_rounding_fast.py, tests/test_native_round.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import BF16, FP4_E2M1, FP16, FP32, TF32, Format, NaNEncoding
from ..modes import Overflow, Rounding
from . import kernel
from .bits import truncate_to_tf32
from .convert import refuse_nan, via_float32, widen
from .fp16 import SMALL, f16_to_wide, f32_to_f16, f64_to_f16, f64_to_f32_to_f16
from .kernel import KernelParams, kernel_general, kernel_params
from .native import (
    BF16_BITS_MIN,
    BF16_DROP,
    FP4_COMPARE_MIN,
    NATIVE_CAST_FORMATS,
    TABLE_MIN,
    bf16_carry,
    fp4_nearest_even,
    narrow_to_byte,
    table_cast_ok,
    widen_bf16,
    widen_byte,
)
from .native import cast as native_cast
from .policy import RoundingPolicy

_U = np.uint64
_BYTE_TABLE_MIN = 4096  # float32 elements from which the one-byte table path pays


def round_patterns(b, p: KernelParams, policy: RoundingPolicy, rng: np.random.Generator | None,
                   want_flags: bool):
    """Round one chunk of float64 patterns ``b`` by ``policy`` (``p``: its format's kernel
    constants, ``rng``: its generator, both resolved once per call by the caller); returns
    (patterns, flags or None). The per-chunk dispatch: the float-domain path (registry row
    :data:`FLOAT64`) where its domain holds, else the general kernel."""
    if p.fast and policy.rounding in _FLOAT64_MODES and not (
            want_flags or policy.flush or policy.daz):  # FLOAT64's domain
        return _kernel_float(b, p, policy), None
    return kernel_general(b, p, policy, rng, want_flags)


# -- the float-domain path --------------------------------------------------------------------
# For the deterministic modes without flags, flushing or DAZ (the common case), rounding is
# done on the values themselves: with the quantum q = 2**(max(E, emin) - m) (E the input's
# binade), x / q is exact and holds the kept digits in its integer part, NumPy's rint / trunc
# / ceil / floor round it to an integer in that mode, and the integer times q is the result,
# exact again. A carry into the next binade (an integer of 2**(m + 1)) and gradual underflow
# (q stays 2**(emin - m) below 2**emin) come out right with no case split, and the sign of
# a zero is kept by every step. What the formula does not decide (results beyond the largest
# finite value, inf and NaN inputs: the elements not below max in magnitude) is redone by
# kernel_general. The quanta must be normal floats of at most 1 (Params.fast, fast32).
# Equal to kernel_general bit for bit: tests/test_rounding_fast.py.


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


FLOAT_MODES = {
    Rounding.NEAREST_EVEN: lambda t: np.rint(t, out=t),
    Rounding.TOWARD_ZERO: lambda t: np.trunc(t, out=t),
    Rounding.UP: lambda t: np.ceil(t, out=t),
    Rounding.DOWN: lambda t: np.floor(t, out=t),
    Rounding.NEAREST_AWAY: _integral_away,
    Rounding.ODD: _integral_odd,
}


def _kernel_float(b, p: KernelParams, policy: RoundingPolicy):
    """kernel_general's patterns for ``b`` (float64 patterns) by ``policy``, a deterministic
    mode without flush or DAZ (no flags), computed in the float domain (see above)."""
    mode, overflow = policy.rounding, policy.overflow
    e = np.bitwise_and(b, _U(0x7FF << 52))  # 2**E, the binade of each element
    np.maximum(e, splat(p.eminb << _U(52), e.size), out=e)  # 2**max(E, emin)
    e -= _U(p.m << 52)
    q = e.view(np.float64)  # the quantum of each element
    with np.errstate(over="ignore", invalid="ignore"):
        t = b.view(np.float64) / q
        FLOAT_MODES[mode](t)
        t *= q
    if p.enc is NaNEncoding.FNUZ:
        t += 0.0  # -0 + 0 = +0: no negative zero
    if _within(t, p.max_val):
        return t.view(np.uint64)
    ok = np.abs(t, out=q) <= p.max_val  # False for overflow, inf and NaN
    idx = _overflow_values(t, b.view(np.float64), ok, p, mode, overflow)
    if idx is not None:
        t.view(np.uint64)[idx] = kernel_general(b[idx], p, policy)[0]
    return t.view(np.uint64)


def _within(t: np.ndarray, limit: float) -> bool:
    """Is every element of ``t`` in [-limit, limit]? Two reductions, no temporary (half the
    time of abs, compare and all); False where ``t`` holds a NaN (max and min propagate it)."""
    return t.size == 0 or bool(_MAX(t) <= limit and _MIN(t) >= -limit)


_MAX, _MIN = np.maximum.reduce, np.minimum.reduce  # (ndarray.max's wrappers cost 0.5 us)


_SPLATS: dict[tuple, np.ndarray] = {}


def splat(value, n: int) -> np.ndarray:
    """A read-only array of ``n`` copies of the NumPy scalar ``value`` (cached): NumPy's
    maximum runs 3-4x slower with a scalar operand than with an array of the same length
    (it has no vectorised loop for a broadcast scalar), the cost of one extra pass."""
    key = (value.dtype.char, value.item())
    arr = _SPLATS.get(key)
    if arr is None or arr.size < n:
        if len(_SPLATS) > 64:  # formats made on the fly: keep the cache bounded
            _SPLATS.clear()
        arr = np.full(max(n, kernel.CHUNK), value)
        arr.flags.writeable = False  # shared by every thread
        _SPLATS[key] = arr
    return arr[:n]


_AWAY_ON_OVERFLOW = {  # does an overflow go to the overflow value (inf / NaN)? by sign
    Rounding.NEAREST_EVEN: (True, True), Rounding.NEAREST_AWAY: (True, True),
    Rounding.UP: (True, False), Rounding.DOWN: (False, True),
    Rounding.TOWARD_ZERO: (False, False), Rounding.ODD: (False, False),
    Rounding.STOCHASTIC: (True, True),
}


def _overflow_values(t, x, ok, p: KernelParams, mode, overflow):
    """Where ``ok`` is False and ``x`` finite (``t``, the rounded value, is beyond the largest
    finite value), write into ``t`` what _overflow gives: the overflow value (inf, or NaN
    where the format has no inf) or +-max by mode and policy, with the input's sign (a NaN's
    sign bit too, as kernel_general's ``r | sign``). Returns the positions of the inf and
    NaN inputs (None when there is none), for kernel_general. A few elements not ok (an
    overflow, a NaN, a quotient by zero in a chunk) are gathered; in wide-range data a third
    of them overflow, and a branch-free blend of the bit patterns over the whole chunk costs
    less than gathering them, or np.copyto / np.where with a mask."""
    n = ok.size
    if 16 * (n - np.count_nonzero(ok)) < n:  # a few: by their positions
        idx = np.flatnonzero(np.logical_not(ok, out=ok))
        xs = x[idx]
        fin = np.isfinite(xs)
        over = idx[fin]
        if over.size:
            t[over] = _overflow_patterns(xs[fin], t.dtype, p, mode, overflow).view(t.dtype)
        return None if fin.all() else idx[~fin]
    fin = np.isfinite(x)
    over = fin & ~ok
    if over.any():
        u = np.dtype(f"u{t.itemsize}").type
        new = _overflow_patterns(x, t.dtype, p, mode, overflow)
        tb = t.view(u)
        mask = over.astype(u)
        np.negative(mask, out=mask)  # all ones where over
        new ^= tb
        new &= mask
        tb ^= new  # tb = new where over, else unchanged
    fin |= ok  # what is left: not ok and not finite
    return None if fin.all() else np.flatnonzero(~fin)


def _overflow_patterns(x, dtype: np.dtype, p: KernelParams, mode, overflow):
    """The patterns (``dtype``'s unsigned view) that an overflow of each ``x`` gives: the
    overflow value or +-max by mode and policy, with x's sign."""
    u = np.dtype(f"u{dtype.itemsize}").type
    sign_bit = u(1) << u(8 * dtype.itemsize - 1)
    typ = dtype.type
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
    return new


def _round32(x, p: KernelParams, policy: RoundingPolicy):
    """float32 values ``x`` rounded by ``policy`` in the float domain, as float32 (every
    value of a Params.fast32 format is one, and so are inf and NaN), and the positions (or
    None) that kernel_general must redo: inf and NaN inputs. The float32 twin of
    _kernel_float, with a multiplication by the reciprocal quantum (a power of two, so x
    times it is x / quantum exactly) built from the same bits: 2**(m - E') has the biased
    exponent 254 + m - (E' + 127), normal for every finite x (fast32: E' from emin >= m - 126
    to 127); an inf or NaN input gives an inf or NaN that is redone below."""
    mode, overflow = policy.rounding, policy.overflow
    floor, recip, shift = _consts32(p)
    qb = np.bitwise_and(x.view(np.uint32), _EXP32)  # 2**E, the binade of each element
    np.maximum(qb, splat(floor, qb.size), out=qb)  # 2**E', E' = max(E, emin)
    rb = np.subtract(recip, qb)  # 2**(m - E')
    qb -= shift  # the quantum 2**(E' - m), a normal float32
    q = qb.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.multiply(x, rb.view(np.float32), out=rb.view(np.float32))
        FLOAT_MODES[mode](t)
        t *= q
    if p.enc is NaNEncoding.FNUZ:
        t += np.float32(0.0)
    if _within(t, p.max_val):
        return t, None
    ok = np.abs(t, out=q) <= p.max_val
    return t, _overflow_values(t, x, ok, p, mode, overflow)


_EXP32 = np.uint32(0x7F800000)
_SHIFT32 = np.uint32(23)
_CONSTS32: dict[int, tuple] = {}


def _consts32(p: KernelParams) -> tuple[np.uint32, np.uint32, np.uint32]:
    """_round32's constants for ``p``: 2**emin's exponent field, the reciprocal's offset and
    m << 23 (cached by identity: kernel_params caches p; NumPy scalars built per call cost
    a microsecond each, chunk after chunk)."""
    hit = _CONSTS32.get(id(p))
    if hit is None or hit[0] is not p:
        hit = (p, (p.eminb32 << _SHIFT32, np.uint32((254 + p.m) << 23), np.uint32(p.m << 23)))
        if len(_CONSTS32) > 256:  # formats made on the fly: keep the cache bounded
            _CONSTS32.clear()
        _CONSTS32[id(p)] = hit
    return hit[1]


def float32_ok(policy: RoundingPolicy) -> bool:
    """Internal API (arithmetic's float32 path): may :func:`round_float32` round by
    ``policy``? (A deterministic mode, no flush or DAZ, a format whose every quantum is a
    normal float32 of at most 1: fp16, fp8, e5m7, fp6, fp4, ...; or bf16's default policy,
    nearest even with overflow to inf: :func:`bf16_values32`.) The domains of the registry's
    rows :data:`FLOAT32` and :data:`BF16_VALUES32`, which round_float32 takes.

    >>> from fpsim.rounding import policy_of
    >>> float32_ok(policy_of("fp16")), float32_ok(policy_of("bf16"))
    (True, True)
    >>> float32_ok(policy_of("bf16", "up"))
    False
    """
    return FLOAT32.serves(policy, _F32) or BF16_VALUES32.serves(policy, _F32)


def round_float32(x: np.ndarray, policy: RoundingPolicy):
    """Internal API (arithmetic's float32 path): flat float32 ``x`` rounded once by a policy
    :func:`float32_ok` accepts, without flags: (float32 values, the positions of inf and NaN
    inputs (bf16: of NaN inputs), whose values are not set, or None). Overflow is resolved as
    :func:`round` does.

    >>> from fpsim.rounding import policy_of
    >>> v, bad = round_float32(np.array([1/3, 7e4], np.float32), policy_of("fp16"))
    >>> v.tolist(), bad
    ([0.333251953125, inf], None)
    """
    if policy.fmt == BF16:
        return bf16_values32(x)
    return _round32(x, kernel_params(policy.fmt), policy)


def values32(y: np.ndarray, policy: RoundingPolicy) -> np.ndarray:
    """Finite float32 ``y`` of any shape rounded by ``policy`` (one :func:`float32_ok`
    accepts) to float32 values, a fresh array: :func:`round_float32` for callers that
    produced the values themselves (mx's and the FP8 recipes' fake quantization, after their
    clamp to the format's largest value); ValueError on an inf or NaN, which they keep away.

    >>> from fpsim.rounding import policy_of
    >>> values32(np.array([[0.3, -448.0], [2.0**-10, 17.0]], np.float32),
    ...          policy_of("fp8_e4m3")).tolist()
    [[0.3125, -448.0], [0.0, 16.0]]
    """
    v, bad = round_float32(np.ascontiguousarray(y, dtype=np.float32).reshape(-1), policy)
    if bad is not None:
        raise ValueError("values32 takes finite values; round() handles inf and NaN")
    return v.reshape(np.shape(y))


def round_rest32(v: np.ndarray, policy: RoundingPolicy) -> np.ndarray:
    """Internal API (arithmetic's float32 path): the float64 values that :func:`round` gives
    for the few float32 values ``v`` :func:`round_float32` leaves (inf and NaN): the general
    kernel on their exact widening, without round's argument handling (a third of its
    cost), by a deterministic policy float32_ok accepts.

    >>> from fpsim.rounding import policy_of
    >>> round_rest32(np.array([np.inf, -np.inf], np.float32), policy_of("fp8_e4m3")).tolist()
    [nan, nan]
    """
    r, _ = kernel_general(widen(v).view(np.uint64), kernel_params(policy.fmt), policy)
    return r.view(np.float64)


def bf16_values32(x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Flat float32 ``x`` rounded to bf16 (nearest even, overflow to inf) as float32 values,
    and the positions of NaN inputs (values not set) or None: :func:`bf16_nearest_even`'s
    rule (the carry of ``bits + 0x7FFF + lsb``) without the widening.

    >>> bf16_values32(np.array([1 + 2.0**-8, 3.4e38, -np.inf], np.float32))[0].tolist()
    [1.0, inf, -inf]
    """
    r = bf16_carry(x.view(np.uint32))
    r &= _BF16_KEEP
    bad = None
    if x.size and np.isnan(x.max()):  # NaN propagates through the max: one cheap pass
        bad = np.flatnonzero(np.isnan(x))  # the carry corrupts a NaN: the caller's
    return r.view(np.float32), bad


# -- stochastic rounding of float32 values ----------------------------------------------------
# kernel_general's stochastic rounding of a chunk, for float32 input to a Params.fast32
# format with 64-bit draws (random_bits None), from the same draws (one rng.integers call per
# chunk, as the kernel makes), without its gathers of the elements below 2**emin:
# - s = max(k - E, c) bits of the float64 pattern go (c = 52 - m; E the biased exponent).
#   Below s = 52 the kernel adds ``rnd & (2**s - 1)`` to the pattern and clears those bits.
#   A float32 value's pattern has 29 zero bits at the bottom, so no carry comes out of the
#   draw's low 29 bits: the same sum on the float32 pattern with the draw's bits 29 and up and
#   s - 29 bits dropped gives the same carry into the kept bits (only the exponent field's
#   offset differs, 896, and the fast32 formats overflow inside both ranges).
# - From s = 52 on (results of at most one or two smallest subnormals qmin, float32
#   subnormal inputs included) the kernel rounds up when ``rnd < floor(f * 2**64)``, f the
#   fractional part of |x| / qmin (exact in float64; f * 2**64 < 2**64 is an integer, as
#   x's last bit is at least 2**-149 and qmin at most 2**-126), to floor(|x| / qmin) + up
#   units of qmin.
# Overflow, the sign, fnuz's zero: as _round32; inf and NaN inputs are returned to the caller
# (the kernel's result for them does not depend on the mode or the draws).
_MAG32 = np.uint32(0x7FFFFFFF)
_ONE32 = np.uint32(1)
_F32_MAX = float(np.finfo(np.float32).max)


def _stochastic32(x: np.ndarray, p: KernelParams, overflow, rnd: np.ndarray):
    """kernel_general's stochastic rounding of float32 ``x`` (one chunk, ``rnd`` its draws,
    one per element) as float32 values, and the positions of inf and NaN inputs (values not
    set) or None: see above."""
    xb = x.view(np.uint32)
    mag = np.bitwise_and(xb, _MAG32)
    s = np.right_shift(mag, _SHIFT32).view(np.int32)  # the biased exponent (0 to 255)
    np.subtract(np.int32(int(p.eminb32) + 23 - p.m), s, out=s)
    np.maximum(s, splat(np.int32(23 - p.m), s.size), out=s)  # bits dropped, s - 29
    deep = s >= np.int32(23)
    mask = np.left_shift(_ONE32, s.view(np.uint32))  # (0 from s = 32 on: deep anyway)
    mask -= _ONE32
    r = np.right_shift(rnd, np.uint64(29)).astype(np.uint32)  # the draw's bits 29 to 60
    r &= mask
    r += mag
    np.invert(mask, out=mask)
    r &= mask
    sign = np.bitwise_xor(xb, mag, out=mag)
    if deep.any():
        idx = np.flatnonzero(deep)
        v = x[idx].astype(np.float64)
        np.abs(v, out=v)
        v *= 2.0 ** (p.m + 127 - int(p.eminb32))  # |x| / qmin, below 2: exact
        kept = np.floor(v)
        v -= kept
        v *= 2.0**64  # an integer: x's last bit is at least 2**-149, qmin at most 2**-126
        kept += rnd[idx] < v.astype(np.uint64)
        kept *= 2.0 ** (int(p.eminb32) - 127 - p.m)  # units of qmin: 0, qmin or 2 qmin
        r[idx] = kept.astype(np.float32).view(np.uint32)
    r |= sign
    t = r.view(np.float32)
    with np.errstate(invalid="ignore"):  # (signalling NaNs, where x is inf or NaN)
        if p.enc is NaNEncoding.FNUZ:
            t += np.float32(0.0)  # -0 + 0 = +0: no negative zero
        # a NaN's payload can carry into anything: its t is not a NaN, so x itself is tested
        if _within(t, p.max_val) and _within(x, _F32_MAX):
            return t, None
        ok = np.abs(t) <= p.max_val
    ok &= np.isfinite(x)  # inf and NaN: the caller's
    return t, _overflow_values(t, x, ok, p, Rounding.STOCHASTIC, overflow)


def run_float32(flat: np.ndarray, out: np.ndarray, p: KernelParams, policy: RoundingPolicy,
                store: np.dtype | None, gen: np.random.Generator | None = None) -> None:
    """:func:`run_chunks` for float32 input by ``policy`` (``p``: its format's kernel
    constants), a Params.fast32 format in a deterministic mode without flags, flush or DAZ,
    or stochastic rounding with 64-bit draws from ``gen`` (FLOAT32's and STOCHASTIC32's
    domain): each chunk
    is rounded as float32 (:func:`_round32`, :func:`_stochastic32`: half the bytes of float64
    and no widening first), the elements it leaves (inf, NaN) by kernel_general on their
    exact float64 widening (in a deterministic mode for stochastic rounding: the result of
    inf and NaN does not depend on it, and the generator is not drawn from twice)."""
    step = kernel.CHUNK  # read per call: tests shrink it
    fmt, mode, ovf = policy.fmt, policy.rounding, policy.overflow
    wide = out.view(np.float64) if store is None else None
    special = None if mode is Rounding.STOCHASTIC else policy  # for inf and NaN inputs
    for lo in range(0, flat.size, step):
        x = flat[lo:lo + step]
        if mode is Rounding.STOCHASTIC:  # the kernel's draws for this chunk
            rnd = gen.integers(0, 1 << 64, size=x.size, dtype=np.uint64, endpoint=False)
            v, bad = _stochastic32(x, p, ovf, rnd)
        else:
            v, bad = _round32(x, p, policy)
        with np.errstate(invalid="ignore"):  # (signalling NaNs where ``bad``: redone next)
            if store is None:
                wide[lo:lo + step] = v  # exact widening
            elif store == v.dtype:  # stored as float32 (e5m7, ...): the values themselves
                out[lo:lo + step] = v
            else:
                out[lo:lo + step] = store_values(v, store, fmt, owned=True)
        if bad is not None:
            if special is None:  # any deterministic mode gives the stochastic result
                special = policy.replace(rounding=Rounding.TOWARD_ZERO, random_bits=None)
            r, _ = kernel_general(widen(x[bad]).view(np.uint64), p, special)
            if store is None:
                out[lo + bad] = r
            else:
                r = r.view(np.float64)
                refuse_nan(r, fmt)
                out[lo + bad] = via_float32(r, store)


def store_values(v: np.ndarray, store: np.dtype, fmt: Format,
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
            return via_float32(v, store).astype(store)
    with np.errstate(invalid="ignore", over="ignore"):
        t = v.astype(np.float32) if v.dtype != np.float32 else (v if owned else v.copy())
    nan = None
    if store != np.float16:
        nan = np.isnan(t)
        nan = np.flatnonzero(nan) if nan.any() else None
        if nan is not None:
            nan_out = t[nan].astype(store)  # ml_dtypes' NaN pattern, as via_float32 gives
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


_BF16_KEEP = np.uint32(0xFFFF0000)  # the bf16 part of a float32 pattern


def bf16_nearest_even(x: np.ndarray, _fmt: Format, store: np.dtype | None) -> np.ndarray:
    """The default path, float32 -> bf16 with nearest even, subnormals kept, overflow to inf,
    no flags, at native speed. It equals the general kernel because bf16 has float32's
    exponent field: rounding is dropping float32's low 16 bits, with the carry of
    ``bits + 0x7FFF + lsb`` going into the exponent exactly as the general kernel's increment
    does (subnormals are float32 subnormals, the largest finite rounds up to inf at
    0x7F7F8000 and above; native.bf16_carry). ``cast`` returns the high halves of those
    patterns (1.2x faster than ml_dtypes' own cast on large arrays, which below
    native.BF16_BITS_MIN elements it uses: the same rule), NaN stored
    by ml_dtypes' cast (its canonical quiet NaN, as the general path stores it); ``round``
    returns float64 values, with a NaN input's payload kept and quieted as the general
    kernel does.
    tests/test_native_round.py checks both against the kernel on every bf16 boundary.
    (``_fmt``: bf16, the array paths' common signature.)"""
    step = kernel.CHUNK  # read per call: tests shrink it
    flat = np.ascontiguousarray(x).reshape(-1)
    if store is not None and flat.size < BF16_BITS_MIN:
        with np.errstate(invalid="ignore"):  # a NaN is stored as NaN: nothing to warn of
            return x.astype(store)  # ml_dtypes' float32 -> bfloat16 cast: exact nearest even
    out = np.empty(flat.size, np.float64 if store is None else store)  # chunk by chunk
    high = out.view(np.uint16) if store is not None else None
    for lo in range(0, flat.size, step):
        c = flat[lo:lo + step]
        b = c.view(np.uint32)
        r = bf16_carry(b)
        nan = np.flatnonzero(np.isnan(c)) if np.isnan(c.max()) else None  # (one reduction)
        if store is not None:  # cast: the high half, NaN as ml_dtypes' cast stores it
            r >>= BF16_DROP
            np.copyto(high[lo:lo + step], r, casting="unsafe")
            if nan is not None:
                with np.errstate(invalid="ignore"):
                    out[lo + nan] = c[nan].astype(store)
            continue
        r &= _BF16_KEEP
        if nan is not None:  # the carry would corrupt a NaN payload: keep it whole
            r[nan] = b[nan]
        with np.errstate(invalid="ignore"):  # quiets signalling NaNs, as the kernel
            out[lo:lo + step] = r.view(np.float32)
    return out.reshape(x.shape)



# -- cast of float32 to fp16 and one-byte formats in one addition -----------------------------
# fpsim.rounding.fp16's method for any format stored by its bits (fp16, e5m2, e4m3fn, ...;
# width w = exponent + mantissa bits <= 15, nearest even): c = 1.5 * 2**(E' + 23 - m) with
# E' = max(E, emin) has the format's quantum at x as its ulp and x + c stays in c's binade,
# so the FPU's addition rounds x to the format's grid, ties to even; c also carries
# (E' - emin) << m plus 2**w where x < 0 in its low bits (both even multiples of the ulp),
# so the low w + 1 bits of x + c are the format's pattern (a carry into the next binade
# included). Overflow: |x| is first clamped to the smallest value whose pattern is the
# overflow value (2**(emax + 1): exponent all ones, inf, for fp16 / e5m2; 480 = 0x7F,
# NaN, for e4m3fn), which the addition then gives; NaN inputs are stored as the kernel
# stores them (fp16: sign, quiet bit and the payload's top bits; one byte: ml_dtypes' cast).


@dataclass(frozen=True)
class _Packing:
    m: int
    offset: np.uint32  # c's exponent 23 - m above 2**E', its 1.5, and E' + 127 -> E' - emin
    clamp_binade: np.uint32  # the exponent field of the clamp's binade
    clamp: np.float32
    exp_min: np.uint32  # 2**emin's exponent field
    signs: np.uint32  # float32's sign bit and the format's
    store: np.dtype


_PACKINGS: dict[Format, _Packing] = {}


def _packing(fmt: Format) -> _Packing:
    """The constants of the one-addition cast to ``fmt`` (cached)."""
    pk = _PACKINGS.get(fmt)
    if pk is not None:
        return pk
    m, width = fmt.mantissa_bits, fmt.exponent_bits + fmt.mantissa_bits
    if fmt.nan_encoding is NaNEncoding.IEEE:
        clamp = np.float32(2.0 ** (fmt.emax + 1))
    else:  # e4m3fn: the pattern above the largest finite value, its NaN
        clamp = np.float32(float(fmt.max) + 2.0 ** (fmt.emax - m))
    pk = _Packing(m, np.uint32(((23 - m) << 23) + (1 << 22) - ((128 - fmt.bias) << m)),
                  clamp.view(np.uint32) & _EXP32, clamp, np.uint32((fmt.emin + 127) << 23),
                  np.uint32(0x80000000) | np.uint32(1 << width), fmt.storage_dtype)
    if len(_PACKINGS) > 256:  # formats made on the fly: keep the cache bounded
        _PACKINGS.clear()
    _PACKINGS[fmt] = pk
    return pk


def _pack32(x: np.ndarray, out: np.ndarray, pk: _Packing) -> None:
    """One chunk: the patterns of float32 ``x`` rounded to nearest even into ``out`` (the
    format's unsigned view), see above."""
    n = x.size
    e = np.bitwise_and(x.view(np.uint32), _EXP32)  # 2**E
    xc, nan = x, None
    if e.max() >= pk.clamp_binade:  # |x| may reach the clamp; inf, NaN (rare: one test)
        xc = np.minimum(x, splat(pk.clamp, n))
        np.maximum(xc, splat(-pk.clamp, n), out=xc)  # (a NaN stays: stored below)
        np.bitwise_and(xc.view(np.uint32), _EXP32, out=e)
        nan = np.flatnonzero(np.isnan(x))
    np.maximum(e, splat(pk.exp_min, n), out=e)  # 2**E'
    c = np.right_shift(e, np.uint32(23 - pk.m))  # (E' + 127) << m
    c += e
    c += pk.offset  # 1.5 * 2**(E' + 23 - m), (E' - emin) << m in the low bits
    np.right_shift(xc.view(np.uint32), np.uint32(31), out=e)
    e *= splat(pk.signs, n)  # x's sign, and the format's, where x < 0
    c += e
    with np.errstate(invalid="ignore"):  # NaN: stored below
        y = np.add(xc, c.view(np.float32), out=c.view(np.float32))  # the rounding
    np.copyto(out, y.view(np.uint32), casting="unsafe")  # the low w + 1 bits: the pattern
    if nan is not None and nan.size:
        b = x.view(np.uint32)[nan] | np.uint32(0x00400000)  # quieted, as the kernel does
        if pk.store == np.float16:
            h = np.right_shift(b, np.uint32(16)) & np.uint32(0x8000)  # the sign
            h |= np.right_shift(b, np.uint32(13)) & np.uint32(0x7FFF)  # inf's field, payload
            out[nan] = h
        else:
            out[nan] = b.view(np.float32).astype(pk.store).view(out.dtype)  # ml_dtypes'


def cast_by_addition(x: np.ndarray, fmt: Format, store: np.dtype) -> np.ndarray:
    """:func:`fpsim.cast` of float32 ``x`` with the default policy (nearest even, the
    format's overflow value, subnormals kept, no flags) to fp16, e5m2 or e4m3fn, chunk by
    chunk, in one addition per element (see above): the kernel's bits, NaN payloads
    included. (``store``: the format's storage dtype.)"""
    step = kernel.CHUNK  # read per call: tests shrink it
    pk = _packing(fmt)
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, store)
    bits = out.view(np.dtype(f"u{store.itemsize}"))
    for lo in range(0, flat.size, step):
        _pack32(flat[lo:lo + step], bits[lo:lo + step], pk)
    return out.reshape(x.shape)


def _adds_to_pattern(fmt: Format) -> bool:
    """The formats :func:`cast_by_addition` serves: stored by their bits (fp16, ml_dtypes'
    float8 types), IEEE's or e4m3fn's NaN encoding (fnuz has no -0; fp6 / fp4 no NaN), and a
    float32 grid 2 bits finer than theirs."""
    width, m = fmt.exponent_bits + fmt.mantissa_bits, fmt.mantissa_bits
    return (_stores_by_bits(fmt) and fmt.nan_encoding in (NaNEncoding.IEEE, NaNEncoding.FN)
            and 8 * fmt.storage_dtype.itemsize == width + 1 and kernel_params(fmt).fast32
            and m <= 21 and fmt.emax + 24 - m <= 127)  # c = 1.5 * 2**(E' + 23 - m) finite


def byte_nearest_even(x: np.ndarray, fmt: Format, _store: np.dtype) -> np.ndarray | None:
    """:func:`fpsim.cast` of float32 ``x`` to a one-byte format by
    :func:`fpsim.rounding.native.narrow_to_byte`'s table (ml_dtypes' own rounding: nearest even,
    the kernel's overflow value, fnuz's one NaN), chunk by chunk, into the format's dtype.
    None when ``x`` holds a NaN (its payload, and fp6 / fp4's missing NaN, are the kernel's).
    Equal to the kernel on every high half of the float32 patterns with probing low halves
    (tests/test_native_round.py). Taken for the default policy (nearest even, subnormals kept,
    the format's overflow value, no flags) of an fp8 / fp6 / fp4 format with its own
    ml_dtypes type and a large float32 array; :func:`fpsim.round` keeps the kernel, which
    writes float64 values as fast or faster (benchmarks/bench_rounding.py). (``_store``: the
    format's dtype, the array paths' common signature.)"""
    step = kernel.CHUNK  # read per call: tests shrink it
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, fmt.dtype)
    for lo in range(0, flat.size, step):
        c = flat[lo:lo + step]
        if np.isnan(c.max()):  # NaN propagates through the max: one cheap pass
            return None
        out[lo:lo + step] = narrow_to_byte(c, fmt.dtype)
    return out.reshape(x.shape)


# -- the registry -----------------------------------------------------------------------------
# Every fast path of the rounding rule with its domain, in one table: the dispatch consults it
# (round_patterns, run_chunks, round / cast through array_path; fpsim.autograd.context and
# fpsim.arithmetic through fpsim.rounding.native's table, the domain of NATIVE_CAST), and
# tests/test_rounding_fast_paths.py checks every row against the general kernel on one grid.


@dataclass(frozen=True)
class FastPath:
    """One fast path of the rounding core and its domain: the formats (a predicate), modes,
    overflow policies and input dtypes on which it gives the general kernel's bits. No fast
    path flushes, reads denormals as zero, takes limited random bits or computes flags: each
    serves policies without them, and no flags, only.

    ``function`` is the path as its dispatcher calls it; ``apply(x, policy)`` runs it on a
    whole array ``x`` of an input dtype by a policy it serves, the way its callers do:
    float64 values,
    or the format's storage dtype where ``stores``; None where the path declines (the byte
    table on NaN input). ``min_size``: the dispatcher takes it from this many elements (the
    path itself is exact at any size). ``nan_payload``: a NaN keeps the kernel's payload
    (else it is some NaN). ``declines_nan``: the path returns None for an array holding a
    NaN (the caller then takes the kernel). ``where``: who takes it. ``via``: a format the
    path rounds to first (nearest even, overflow to inf), as its callers mean it to (an fp32
    accumulator stored as fp16: two roundings); its reference is then the kernel's rounding
    to ``via`` followed by the kernel's rounding by the policy (None: one rounding).

    >>> from fpsim.rounding import policy_of
    >>> BF16_ROUND.serves(policy_of("bf16"), np.float32)
    True
    >>> [row.name for row in REGISTRY if row.serves(policy_of("fp16", "up"), np.float64)]
    ['float64_float_domain', 'store_bits']
    """

    name: str
    function: Callable[..., Any]
    formats: Callable[[Format], bool]
    modes: frozenset[Rounding]
    overflows: frozenset[Overflow]
    inputs: frozenset[np.dtype]
    apply: Callable[[np.ndarray, RoundingPolicy], np.ndarray | None]
    where: str
    stores: bool = False
    min_size: int = 0
    nan_payload: bool = True
    declines_nan: bool = False
    via: Format | None = None

    def serves(self, policy: RoundingPolicy, dtype) -> bool:
        """Is rounding ``dtype`` values by ``policy`` (without flags) in this path's domain?
        Its format, mode and overflow, and no flushing, DAZ or limited random bits."""
        return (policy.rounding in self.modes and policy.overflow in self.overflows
                and not (policy.flush or policy.daz) and policy.random_bits is None
                and np.dtype(dtype) in self.inputs and bool(self.formats(policy.fmt)))


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_NEAREST = frozenset({Rounding.NEAREST_EVEN})
_TO_INF = frozenset({Overflow.INF})
_EVERY_MODE = frozenset(Rounding)
_EVERY_OVERFLOW = frozenset(Overflow)


def _general_values(x: np.ndarray, policy: RoundingPolicy):
    """The general kernel's float64 values for ``x`` (exactly widened, NaN payloads kept;
    stochastic rounding draws from a generator seeded 0: STORE_BITS stores any mode's values)."""
    b = widen(x) if x.dtype != _F64 else x
    rng = np.random.default_rng(0) if policy.rounding is Rounding.STOCHASTIC else None
    r, _ = kernel_general(np.ascontiguousarray(b).reshape(-1).view(np.uint64),
                          kernel_params(policy.fmt), policy, rng)
    return r.view(np.float64).reshape(x.shape)


def _apply64(x, policy):
    b = np.ascontiguousarray(x, dtype=np.float64).reshape(-1).view(np.uint64)
    r = _kernel_float(b, kernel_params(policy.fmt), policy)
    return r.view(np.float64).reshape(x.shape)


def _apply32(x, policy):
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(flat.size, np.uint64)
    run_float32(flat, out, kernel_params(policy.fmt), policy, None)
    return out.view(np.float64).reshape(x.shape)


def _apply_bf16_values32(x):
    v, bad = bf16_values32(np.ascontiguousarray(x, dtype=np.float32).reshape(-1))
    return None if bad is not None else v.astype(np.float64).reshape(x.shape)


def _apply_stochastic32(x, policy):
    """run_float32's stochastic rounding with the generator seeded 0 (one chunk: the
    draws of _general_values)."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(flat.size, np.uint64)
    run_float32(flat, out, kernel_params(policy.fmt), policy, None, np.random.default_rng(0))
    return out.view(np.float64).reshape(x.shape)


def _apply_fp4(x, _pol):
    """fp4_nearest_even on float32 ``x``, declining NaN (its precondition: fp4 has none)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return None if np.isnan(x).any() else fp4_nearest_even(x)


def _stores_by_bits(fmt: Format) -> bool:
    """The formats :func:`store_values` packs by the bits (fp16, ml_dtypes' float8 types)."""
    store = fmt.storage_dtype
    return store == np.float16 or (store.itemsize == 1 and 1 <= fmt.bias <= 127
                                   and fmt.exponent_bits + fmt.mantissa_bits == 7)


def _byte_table_format(fmt: Format) -> bool:
    return fmt.dtype is not None and table_cast_ok(fmt.dtype)


FLOAT64 = FastPath(
    "float64_float_domain", _kernel_float, lambda f: kernel_params(f).fast,
    frozenset(FLOAT_MODES), _EVERY_OVERFLOW, frozenset({_F64}), _apply64,
    "round_patterns, per chunk: round, cast, round_pair / round_flat (arithmetic, reductions)")
FLOAT32 = FastPath(
    "float32_float_domain", run_float32, lambda f: kernel_params(f).fast32,
    frozenset(FLOAT_MODES), _EVERY_OVERFLOW, frozenset({_F32}), _apply32,
    "run_chunks on float32 input: round, cast; arithmetic's float32 path (round_float32: "
    "operands and results of + - * / sqrt fma)")
STOCHASTIC32 = FastPath(
    "float32_stochastic", run_float32, lambda f: kernel_params(f).fast32,
    frozenset({Rounding.STOCHASTIC}), _EVERY_OVERFLOW, frozenset({_F32}), _apply_stochastic32,
    "run_chunks on float32 input, stochastic rounding with 64-bit draws: round, cast")
STORE_BITS = FastPath(
    "store_bits", store_values, _stores_by_bits, _EVERY_MODE, _EVERY_OVERFLOW,
    frozenset({_F32, _F64}),
    lambda x, pol: store_values(_general_values(x, pol), pol.fmt.storage_dtype, pol.fmt),
    "run_chunks / run_float32 with a store dtype: cast writes the rounded values' bits",
    stores=True)
BF16_ROUND = FastPath(
    "bf16_round", bf16_nearest_even, lambda f: f == BF16, _NEAREST, _TO_INF,
    frozenset({_F32}), lambda x, pol: bf16_nearest_even(x, pol.fmt, None),
    "round of a float32 array (array_path)")
BF16_CAST = FastPath(
    "bf16_cast", bf16_nearest_even, lambda f: f == BF16, _NEAREST, _TO_INF,
    frozenset({_F32}), lambda x, pol: bf16_nearest_even(x, pol.fmt, pol.fmt.storage_dtype),
    "cast of a float32 array (array_path): ml_dtypes' own cast", stores=True)
BF16_VALUES32 = FastPath(
    "bf16_values32", bf16_values32, lambda f: f == BF16, _NEAREST, _TO_INF,
    frozenset({_F32}), lambda x, _pol: _apply_bf16_values32(x),
    "arithmetic's float32 path (round_float32: fma's operands and results in bf16)",
    declines_nan=True)
CAST_BY_ADDITION = FastPath(
    "cast_by_addition", cast_by_addition, _adds_to_pattern, _NEAREST, _TO_INF,
    frozenset({_F32}), lambda x, pol: cast_by_addition(x, pol.fmt, pol.fmt.storage_dtype),
    "cast of a float32 array to fp16, e5m2, e4m3fn (array_path)", stores=True)
BYTE_TABLE = FastPath(
    "byte_table", byte_nearest_even, _byte_table_format, _NEAREST, _TO_INF,
    frozenset({_F32}),
    lambda x, pol: byte_nearest_even(x, pol.fmt, pol.fmt.storage_dtype),
    "cast of a large float32 array (array_path) to an fp8 / fp6 / fp4 type",
    stores=True, min_size=_BYTE_TABLE_MIN, declines_nan=True)
NATIVE_CAST = FastPath(
    "native_cast", native_cast, NATIVE_CAST_FORMATS.__contains__, _NEAREST, _TO_INF,
    frozenset({_F32, _F64}), lambda x, pol: native_cast(x, pol.fmt.storage_dtype),
    "fpsim.autograd.context.round_to (plain settings); fpsim.arithmetic's native operands",
    stores=True, nan_payload=False)
FP16_FROM_F32 = FastPath(
    "fp16_from_float32", f32_to_f16, lambda f: f == FP16, _NEAREST, _TO_INF,
    frozenset({_F32}), lambda x, _pol: f32_to_f16(x),
    "fpsim.autograd.context.round_to (fp16, plain settings)", stores=True, nan_payload=False)
FP16_FROM_F64 = FastPath(
    "fp16_from_float64", f64_to_f16, lambda f: f == FP16, _NEAREST, _TO_INF,
    frozenset({_F64}), lambda x, _pol: f64_to_f16(x),
    "fpsim.autograd.context.round_to (fp16, plain settings)", stores=True, nan_payload=False)
FP4_COMPARE = FastPath(
    "fp4_compare", fp4_nearest_even, lambda f: f == FP4_E2M1, _NEAREST, _EVERY_OVERFLOW,
    frozenset({_F32}), _apply_fp4,
    "fpsim.mx.quantize's fp4 e2m1 elements (nearest even; NaN-free, as saturated there)",
    stores=True, min_size=FP4_COMPARE_MIN, declines_nan=True)
FP16_VIA_F32 = FastPath(
    "fp16_via_float32", f64_to_f32_to_f16, lambda f: f == FP16, _NEAREST, _TO_INF,
    frozenset({_F64}), lambda x, _pol: f64_to_f32_to_f16(x),
    "fpsim.autograd's fp32 accumulator stored as fp16 (accumulate's fp32 matmul result, "
    "functional's fp16 linear)", stores=True, nan_payload=False, via=FP32)
TF32_TRUNCATE = FastPath(
    "tf32_truncate", truncate_to_tf32, lambda f: f == TF32, frozenset({Rounding.TOWARD_ZERO}),
    _EVERY_OVERFLOW, frozenset({_F32}),
    lambda x, _pol: truncate_to_tf32(x).astype(np.float64),
    "fpsim.tensorcore.convert_input (tf32 operands: the hardware drops 13 bits of fp32)",
    nan_payload=False)

REGISTRY: tuple[FastPath, ...] = (FLOAT64, FLOAT32, STOCHASTIC32, STORE_BITS, BF16_ROUND,
                                  BF16_CAST, BF16_VALUES32, CAST_BY_ADDITION, BYTE_TABLE,
                                  NATIVE_CAST, FP16_FROM_F32, FP16_FROM_F64, FP4_COMPARE,
                                  FP16_VIA_F32, TF32_TRUNCATE)


# -- the widenings ----------------------------------------------------------------------------
# The other direction: stored values to float32 / float64, exactly. Each row equals NumPy's /
# ml_dtypes' astype on every value (a NaN stays a NaN; ``widen`` keeps a signalling NaN
# signalling, which astype quiets); tests/test_rounding_fast_paths.py checks every row on
# every pattern of its source types (float32: a spread of patterns), across its size switch.


@dataclass(frozen=True)
class Widening:
    """One exact widening and its domain: source dtypes (a predicate), output dtypes.
    ``apply(x, out_dtype)`` runs it on a whole array; ``min_size``: from this many elements
    it takes its own method (below, the library's astype: the same values); ``where``: who
    takes it.

    >>> import ml_dtypes
    >>> [w.name for w in WIDENINGS if w.serves(np.dtype(ml_dtypes.bfloat16), np.float32)]
    ['bf16_shift']
    """

    name: str
    function: Callable[..., Any]
    sources: Callable[[np.dtype], bool]
    outputs: frozenset[np.dtype]
    apply: Callable[[np.ndarray, np.dtype], np.ndarray]
    where: str
    min_size: int = 0

    def serves(self, source, out) -> bool:
        """Does this row widen ``source`` arrays to ``out``?"""
        return np.dtype(out) in self.outputs and bool(self.sources(np.dtype(source)))


_F16 = np.dtype(np.float16)
WIDEN_EXACT = Widening(
    "exact_float64", widen, lambda d: d.kind in "fV" and d.itemsize <= 4, frozenset({_F64}),
    lambda x, _out: widen(x),
    "the kernel's input (run_chunks, round_rest32, run_float32's inf and NaN): every float "
    "type to float64, a signalling NaN kept signalling")
WIDEN_F16 = Widening(
    "fp16_table", f16_to_wide, lambda d: d == _F16, frozenset({_F32, _F64}), f16_to_wide,
    "fpsim.autograd.context.widen (fp16 tensors): a 65536-entry table", min_size=SMALL)
WIDEN_BF16 = Widening(
    "bf16_shift", widen_bf16, lambda d: d == BF16.storage_dtype, frozenset({_F32, _F64}),
    widen_bf16, "fpsim.autograd.context.widen (bf16 tensors): a 16-bit shift",
    min_size=TABLE_MIN)
WIDEN_BYTE = Widening(
    "byte_table", widen_byte, table_cast_ok, frozenset({_F32, _F64}), widen_byte,
    "fpsim.autograd.context.widen (fp8 / fp6 / fp4 tensors), fpsim.mx's element values: a "
    "256-entry table", min_size=TABLE_MIN)

WIDENINGS: tuple[Widening, ...] = (WIDEN_EXACT, WIDEN_F16, WIDEN_BF16, WIDEN_BYTE)

_FLOAT64_MODES = FLOAT64.modes  # round_patterns' per-chunk test, without attribute lookups

# round / cast of a whole array: the rows array_path picks from, in order, and its cache
_ARRAY_ROWS = (BF16_ROUND, BF16_CAST, CAST_BY_ADDITION, BYTE_TABLE)
_ARRAY_INPUTS = frozenset().union(*(row.inputs for row in _ARRAY_ROWS))
_ARRAY_PATHS: dict[tuple, tuple[Format, FastPath | None]] = {}


def array_path(pol: RoundingPolicy, dtype: np.dtype, cast: bool) -> FastPath | None:
    """The registry's row that :func:`fpsim.round` (``cast=False``) or :func:`fpsim.cast`
    takes for a whole array of ``dtype`` by ``pol`` without flags, or None: one dict lookup
    per call (keyed by the format object: hashing a Format costs more than the lookup).

    >>> from fpsim.rounding import policy_of
    >>> array_path(policy_of("bf16"), np.dtype(np.float32), cast=False).name
    'bf16_round'
    >>> array_path(policy_of("bf16", "up"), np.dtype(np.float32), cast=False) is None
    True
    """
    if dtype not in _ARRAY_INPUTS:
        return None
    return _cached_row(_ARRAY_PATHS, pol, (dtype, cast), lambda: next(
        (r for r in _ARRAY_ROWS if r.stores == cast and r.serves(pol, dtype)), None))


def _cached_row(cache: dict, pol: RoundingPolicy, extra: tuple, pick) -> FastPath | None:
    """``pick()``'s row, memoised in ``cache`` under the policy's fields and ``extra``, keyed
    by the format object's id (hashing a Format costs more than the lookup; the entry keeps
    the format, so its id is not reused while cached). The answers are pure functions of the
    key, so threads sharing the cache get the same rows."""
    fmt = pol.fmt
    # every policy field a row's serves() reads (FastPath.serves), so no row answers for another
    key = (id(fmt), pol.rounding, pol.overflow, pol.flush or pol.daz, pol.random_bits, *extra)
    hit = cache.get(key)
    if hit is not None and hit[0] is fmt:
        return hit[1]
    row = pick()
    if len(cache) > 4096:  # formats made on the fly: keep the cache bounded
        cache.clear()
    cache[key] = (fmt, row)
    return row


# run_chunks on a float32 array: the float32 rows it asks, and their answers per policy
_FLOAT32_ROWS = (FLOAT32, STOCHASTIC32)
_FLOAT32_PATHS: dict[tuple, tuple[Format, FastPath | None]] = {}


def float32_path(pol: RoundingPolicy) -> FastPath | None:
    """The registry's row that :func:`fpsim.rounding.chunks.run_chunks` takes for a float32
    array by ``pol`` without flags (``FLOAT32`` or ``STOCHASTIC32``, by their ``serves``), or
    None: one dict lookup per call, keyed as :func:`array_path`'s.

    >>> from fpsim.rounding import policy_of
    >>> float32_path(policy_of("fp8_e4m3", "up")).name
    'float32_float_domain'
    >>> float32_path(policy_of("bf16", "stochastic", random_bits=8)) is None
    True
    """
    return _cached_row(_FLOAT32_PATHS, pol, (),
                       lambda: next((r for r in _FLOAT32_ROWS if r.serves(pol, _F32)), None))
