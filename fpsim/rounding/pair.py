"""Rounding an exact pair ``hi + lo`` (an error-free transformation's result: TwoSum, exact
products, remainders) once: :func:`round_pair`, and the internal :func:`round_pair_with`,
:func:`round_flat` (the per-operation hot path of arithmetic and reductions).

Contract: the pair is checked (|lo| below the float64 spacing at hi) unless the caller
guarantees it; deterministic modes round the pair to odd at 53 bits first (exact before a
second rounding to at most 51 bits: formats of at most 50 mantissa bits), stochastic rounding
takes its probability from ``hi + lo`` itself.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import flags as _flags
from ..checks import broadcast_shape
from ..flags import Flags
from ..formats import Format
from ..modes import Overflow, Rounding, Subnormals, Tininess
from . import kernel
from .api import round_with
from .chunks import run_chunks
from .convert import as_float64, finish
from .fast import round_patterns
from .kernel import ONE, QUIET, ZERO, check_pair, kernel_params, odd_from_pair
from .policy import RoundingPolicy, policy_of, without_daz

_U = np.uint64


def _pair_to_float64(hi, lo, policy: RoundingPolicy):
    """Round hi + lo to float64 itself by ``policy`` (hi the nearest float64, or the largest
    finite one for a value beyond it; lo's sign exact): the result is hi or nb, hi's
    neighbour on lo's side."""
    mode, random_bits = policy.rounding, policy.random_bits
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
        gen = policy.generator()
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
    if policy.overflow is Overflow.SATURATE:
        out = np.where(ovf, np.copysign(np.finfo(np.float64).max, out), out)
    if policy.flush:
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
    want = bool(flags) or _flags.flags_active()
    shape = hi_a.shape
    hi_a = np.ascontiguousarray(hi_a, dtype=np.float64).reshape(-1)
    lo_a = np.ascontiguousarray(lo_a, dtype=np.float64).reshape(-1)
    out, fl = _round_pair_core(hi_a, lo_a, pol, want)
    return finish(out, fl, shape, scalar, bool(flags), "round_pair")


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
    p = kernel_params(policy.fmt)
    if (policy.rounding is Rounding.STOCHASTIC or hi.size > kernel.CHUNK or p.identity
            or hi.dtype != np.float64):
        if lo is None:
            return round_with(hi, policy, want)
        return round_pair_with(hi, lo, policy, want)
    if lo is None:
        bits = hi.view(np.uint64)
    else:
        _pair_format_check(policy.fmt)
        if not checked:
            check_pair(hi, lo)
        bits = odd_from_pair(hi, lo).view(np.uint64)
        policy = without_daz(policy)  # an exact value, as run_chunks' pair path
    r, fl = round_patterns(bits, p, policy, None, want)
    return r.view(np.float64), fl


def _pair_format_check(fmt: Format) -> None:
    if fmt.mantissa_bits > 50 and not kernel_params(fmt).identity:
        # round-to-odd at 53 bits is exact before a second rounding to p <= 51 bits (m <= 50)
        raise ValueError(f"round_pair needs a format of at most 50 mantissa bits, got {fmt.name}")


@functools.lru_cache(maxsize=64)
def _truncation(fmt: Format) -> RoundingPolicy:
    """Toward zero, saturating, with gradual underflow also where ``fmt`` has no subnormals
    (its twin with subnormals: the same grid of normal values): the lower neighbour t0 of a
    stochastic rounding, whose probability is taken against the quantum there."""
    grid = fmt if fmt.subnormals else dataclasses.replace(fmt, subnormals=True, name=None)
    return RoundingPolicy(grid, Rounding.TOWARD_ZERO, Overflow.SATURATE)


def _round_pair_core(hi_a: np.ndarray, lo_a: np.ndarray, pol: RoundingPolicy, want: bool):
    """:func:`round_pair` on flat float64 arrays: (float64 patterns, flags or None)."""
    fmt = pol.fmt
    pol = without_daz(pol)  # denormal operands were handled by the caller: only the value matters
    if kernel_params(fmt).identity:  # fp64 itself (int64 / long double input): hi or its neighbour
        check_pair(hi_a, lo_a)
        out, fl = _pair_to_float64(hi_a, lo_a, pol)
        return out, fl if want else None
    if pol.rounding is not Rounding.STOCHASTIC:
        return run_chunks(hi_a, pol, want, pair_lo=lo_a)
    # Stochastic: t0 = the value toward zero, ulp the quantum there; p = |exact - t0| / ulp.
    check_pair(hi_a, lo_a)
    v = odd_from_pair(hi_a, lo_a)
    t0, _ = run_chunks(v, _truncation(fmt))
    t0 = t0.view(np.float64)
    t0b = np.abs(t0).view(np.uint64)
    e = np.maximum((t0b >> _U(52)).view(np.int64) - 1023, fmt.emin)
    ulp = np.ldexp(1.0, e - fmt.mantissa_bits)
    with np.errstate(invalid="ignore", over="ignore"):
        prob = np.abs((hi_a - t0) + lo_a) / ulp
    gen = pol.generator()
    random_bits = pol.random_bits
    if random_bits is None:
        up = gen.random(prob.shape) < prob
    else:
        scale = float(1 << random_bits)
        up = gen.integers(0, 1 << random_bits, size=prob.shape) < np.floor(prob * scale)
    res = np.where(up, t0 + np.copysign(ulp, hi_a), t0)
    res = np.where(np.isfinite(hi_a), res, hi_a)
    # the chosen neighbour (a value of the format, or its overflow) rounded to nearest even
    # for the overflow, flush and special values: no draw, no generator
    out, fl = run_chunks(res, policy_of(fmt, Rounding.NEAREST_EVEN, pol.overflow,
                                        pol.subnormals, pol.tininess), want)
    if want:
        inexact = ((hi_a != t0) | (lo_a != 0)) & np.isfinite(hi_a)
        fl[inexact] |= np.uint8(Flags.INEXACT)
        tiny = inexact & (np.abs(res) < fmt.smallest_normal)
        fl[tiny] |= np.uint8(Flags.UNDERFLOW)
    return out, fl
