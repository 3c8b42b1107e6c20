"""Correctly rounded arithmetic in any floating-point :class:`~fpsim.formats.Format`.

``add``, ``sub``, ``mul``, ``div``, ``sqrt`` and the fused ``fma`` round the *exact* result once
to the format, in every rounding mode (stochastic rounding draws its probability from the exact
result), with the five IEEE exception flags. They are elementwise with NumPy broadcasting.

How (error-free transformations in float64, then one call of the rounding core):

- the exact result is written as a float64 pair ``hi + lo`` (``hi`` the float64 nearest to it,
  ``lo`` the remainder, its sign exact) and rounded once by :func:`fpsim.round_pair`:
  ``add``/``sub``: TwoSum; ``mul``: the product of two values of at most 26 bits is exact in
  float64 (Dekker's TwoProduct above that); ``div``: ``q = a / b`` and the exact remainder
  ``r = a - q*b`` (TwoProduct with Veltkamp splitting; NumPy has no fused multiply-add) give
  ``lo = r / b``; ``sqrt``: ``s = sqrt(a)``, ``r = a - s*s`` exactly, ``lo = r / (2s)``;
  ``fma``: TwoSum of the exact product and ``c``.
- for the common formats (fp32, tf32, fp16, bf16, fp8, ...) every intermediate value is exact
  in float64. For formats with a float64-sized exponent range the operands are first split
  into significand and exponent (``frexp``), the pair is formed on significands, and the
  rounding runs on a copy of the format shifted by a power of two, so that nothing overflows
  or underflows on the way.

The same kernel (:func:`compute`) rounds the Tensor ops of :mod:`fpsim.autograd`. Round to
nearest even with IEEE policies and no flags in fp16, bf16 or fp32 runs as NumPy float16 /
ml_dtypes bfloat16 / float32 arithmetic, which gives the same results (see ``_native``). Large
arrays go chunk by chunk: the peak memory is the inputs, the float64 output and one chunk.

Conventions:

- operands not exactly representable in ``fmt`` are first converted to it with
  round-to-nearest-even, like :func:`fpsim.cast` (honouring ``overflow``; ``subnormals="daz"``
  or ``"flush_daz"`` also reads subnormal operands as zero). That conversion is silent: the
  flags describe the operation on the converted operands. It is one rounding of the operand's
  exact value, also beyond float64 (long doubles, integers past 2**53, Fractions, Decimals):
  ``add(np.longdouble("1e4000"), 0, "fp16")`` is inf as ``add(1e300, 0, "fp16")`` is. An
  object array of such numbers (or a list NumPy makes one of, e.g. with a Fraction or an int
  past 2**64 in it) converts element by element exactly as each element alone, and broadcasts
  like any array; an element that is not a real number (None, a string, a complex number) is
  a TypeError naming the operand (``a``, ``b``, ``c``) and the element.
- results are float64 arrays (np.float64 for scalar operands) holding values of ``fmt``
  exactly, as :func:`fpsim.round` returns. A NaN result of a NaN operand or of an invalid
  operation is the canonical quiet NaN, positive with payload 0 (``np.nan``) on every path,
  CPU and NumPy version (float64 NaN propagation differs between them); an overflow to NaN
  (a format without inf) keeps the sign of the result, as :func:`fpsim.round` does.
- IEEE 754 special cases: ``x + (-x)`` is +0 in every mode but ``down`` (-0); products and
  quotients take the XOR of the signs; ``sqrt(-0) = -0``. INVALID: a signalling NaN operand,
  inf - inf, 0 * inf, 0 / 0, inf / inf, sqrt of a negative number, fma(0, inf, c) (even for a
  quiet NaN ``c``, as Berkeley SoftFloat does). DIVBYZERO: a finite nonzero number divided by
  zero. Underflow is detected after rounding unless ``tininess="before"``.
- formats of up to 50 mantissa bits are supported (``fma``: up to 25, products must be exact
  in float64); float64 arithmetic itself is NumPy's.

>>> import fpsim
>>> from fpsim.arithmetic import add, div
>>> float(add(1.0, 2.0**-11, "fp16"))  # a tie: rounds to even
1.0
>>> float(add(1.0, 2.0**-11, "fp16", "up"))
1.0009765625
>>> v, f = div(1.0, 0.0, "bf16", flags=True)
>>> float(v), fpsim.Flags(int(f))
(inf, <Flags.DIVBYZERO: 8>)
>>> from fractions import Fraction
>>> # each operand first rounds to fp16 (nearest even): 2**-1100 reads as 0
>>> add([Fraction(1, 3), -10**400, Fraction(1, 2**1100)], 1.0, "fp16", "up").tolist()
[1.333984375, -inf, 1.0]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np

from . import flags as _flags
from .checks import broadcast_shape
from .flags import Flags
from .formats import Format, NaNEncoding, get_float_format
from .modes import (
    Overflow,
    Rounding,
    Subnormals,
    Tininess,
)
from .rounding import (
    RoundingPolicy,
    as_float64,
    default_rng,
    float32_ok,
    listed,
    policy_of,
    round_flat,
    round_float32,
    round_objects_with,
    round_rest32,
    round_with,
    without_daz,
)
from .rounding.eft import two_prod, two_sum_err
from .rounding.native import cast as native_cast
from .rounding.native import fma32_odd
from .rounding.native import native_ok as rounds_natively
from .rounding.scalar import nans_of

__all__ = ["add", "sub", "mul", "div", "sqrt", "fma"]

_U = np.uint64
_STICKY = 2.0**-200  # stands for an operand far below the other's last bit (sign kept)
_LO_FLOOR = 2.0**-114  # smallest |lo| kept relative to hi in [1/2, 1): below every decision
MAX_MANTISSA = 50  # round_pair rounds to odd at 53 bits: exact for targets of <= 51 bits
_MAX_FMA_PRECISION = 26  # fma needs the product exact in float64

# Tests set this to run the general (frexp-scaled) path on every format.
_FORCE_GENERAL = False


@contextmanager
def quiet_flags() -> Iterator[None]:
    """Hide the active flag contexts from the rounding core: an operation computes its flags
    itself (conversions, several roundings) and records them once."""
    with _flags.suspended():
        yield


@dataclass(frozen=True)
class OpContext:
    """An operation's validated options (internal API: :func:`context` builds it; the
    kernels, :func:`compute` and :mod:`fpsim.reductions` take it): two policies and whether
    to compute flags.

    >>> c = context("bf16", "up", subnormals="flush_daz")
    >>> c.result.rounding.value, c.result.subnormals.value, c.conversion.daz
    ('up', 'flush', True)
    """

    # how results are rounded: the operation's policy without DAZ, its stochastic generator
    # resolved once (every rounding of the operation draws from it)
    result: RoundingPolicy
    conversion: RoundingPolicy  # how operands are converted: nearest even, overflow, DAZ
    want: bool  # compute flags (flags=True or a flag context is active)


@functools.lru_cache(maxsize=256)
def _policies(pol: RoundingPolicy) -> tuple[RoundingPolicy, RoundingPolicy]:
    """The result and operand-conversion policies of a parsed policy without a generator."""
    conversion = RoundingPolicy(pol.fmt, Rounding.NEAREST_EVEN, pol.overflow,
                                Subnormals.DAZ if pol.daz else Subnormals.KEEP)
    return without_daz(pol), conversion


def context_of(policy: RoundingPolicy, flags: bool = False, *,
               what: str = "arithmetic") -> OpContext:
    """The :class:`OpContext` of a parsed policy (internal API; the format is checked here:
    at most 50 mantissa bits)."""
    fmt = policy.fmt
    if fmt.mantissa_bits > MAX_MANTISSA:
        raise ValueError(
            f"{what} supports formats of at most {MAX_MANTISSA} mantissa bits, got {fmt.name} "
            f"with {fmt.mantissa_bits}; for fp64 use NumPy's float64 arithmetic"
        )
    result, conversion = _policies(policy if policy.rng is None else
                                   policy_of(fmt, policy.rounding, policy.overflow,
                                             policy.subnormals, policy.tininess, None,
                                             policy.random_bits))
    if policy.rounding is Rounding.STOCHASTIC:
        # resolved once: every rounding of the op draws from it
        result = result.replace(rng=default_rng(policy.rng))
    return OpContext(result=result, conversion=conversion,
                     want=bool(flags) or _flags.flags_active())


def _context(fmt, rounding, overflow, subnormals, tininess, rng, random_bits, flags,
             *, what: str, policy: RoundingPolicy | None = None) -> OpContext:
    pol = policy_of(fmt, rounding, overflow, subnormals, tininess, rng, random_bits, policy,
                    what=what)
    return context_of(pol, flags, what=what)


# -- which formats keep every intermediate exact in float64 ----------------------------------

@dataclass(frozen=True)
class _Window:
    """Normalised result exponents [lo, hi] rounded to ``fmt`` = the format scaled by 2**-shift."""

    lo: int
    hi: int
    shift: int
    fmt: Format


@dataclass(frozen=True)
class _Plan:
    add_exact: bool  # a + b itself is exact in float64
    fma_exact: bool  # a * b + c itself is exact in float64 (e4m3 and narrower ranges)
    add_fast: bool  # TwoSum on the operands cannot overflow
    mul_fast: bool  # a * b is exact in float64
    div_fast: bool  # q, the remainder and r / b neither overflow nor underflow
    sqrt_fast: bool
    fma_fast: bool
    e_lo: int  # the general path's clamps of the normalised exponent
    e_hi: int
    windows: tuple[_Window, ...]


def _shifted(fmt: Format, exponent_bits: int, emin: int | None, emax: int | None) -> Format:
    """A format with fmt's mantissa, NaN encoding and subnormal policy whose emin (or emax)
    is the given one."""
    if emin is not None:
        bias = 1 - emin
    else:
        top = Format(exponent_bits, fmt.mantissa_bits, 0, fmt.nan_encoding, fmt.subnormals).emax
        bias = top - emax
    return Format(exponent_bits, fmt.mantissa_bits, bias, fmt.nan_encoding, fmt.subnormals,
                  name=f"{fmt.name}>>{bias - fmt.bias}")


@functools.cache
def plan_for(fmt: Format) -> _Plan:
    m, p = fmt.mantissa_bits, fmt.precision_bits
    emax = fmt.emax
    elo = fmt.emin - m  # exponent of the smallest subnormal
    e_lo, e_hi = elo - 60, emax + 3
    # Normalised values h in [1/2, 1), |lo| >= 2**-114: exact after ldexp by k in [-908, 1020].
    if e_lo >= -908 and e_hi <= 1020:
        windows = (_Window(e_lo, e_hi, 0, fmt),)
    elif e_hi - e_lo <= 1900:
        s = e_hi - 1020 if e_hi > 1020 else e_lo + 908
        windows = (_Window(e_lo, e_hi, s, Format(fmt.exponent_bits, m, fmt.bias + s,
                                                   fmt.nan_encoding, fmt.subnormals)),)
    else:  # float64-wide exponent range: unscaled middle, shifted bottom and top
        wins = [_Window(max(e_lo, -908), min(e_hi, 1020), 0, fmt)]
        if e_lo < -908:
            wins.append(_Window(e_lo, -909, -600, _shifted(fmt, 10, fmt.emin + 600, None)))
        if e_hi > 1020:
            wins.append(_Window(1021, e_hi, 600, _shifted(fmt, 10, None, emax - 600)))
        windows = tuple(wins)
    return _Plan(
        add_exact=(emax + 2) - elo <= 53,
        # |a*b + c| < 2**(2 emax + 3), a multiple of 2**(2 elo) (elo <= 0: c's too)
        fma_exact=elo <= 0 and (2 * emax + 3) - 2 * elo <= 53,
        add_fast=emax <= 1021,
        mul_fast=p <= _MAX_FMA_PRECISION and 2 * (emax + 1) <= 1022 and 2 * elo >= -1074,
        div_fast=(emax + 1 - elo <= 990 and 2 * elo - emax - 53 >= -1074
                  and 2 * elo - 2 * emax - 56 >= -1074),
        sqrt_fast=elo >= -960 and emax <= 1000,
        fma_fast=p <= _MAX_FMA_PRECISION and 2 * (emax + 1) <= 1020 and 2 * elo >= -1074,
        e_lo=e_lo,
        e_hi=e_hi,
        windows=windows,
    )


def _finite_or_zero(x):
    return np.where(np.isfinite(x), x, 0.0)


_NEAREST = (Rounding.NEAREST_EVEN, Rounding.NEAREST_AWAY)
_INNOCUOUS_PRECISION = 25  # 53 >= 2p + 2


def _float64_result_enough(c: OpContext) -> bool:
    """May the float64 result of + - / sqrt (round to nearest even) be rounded to the format
    without its error term? Yes for round to nearest (either tie rule) at p <= 25 without
    flags: double rounding through 53 >= 2p + 2 bits is innocuous (Figueroa, 1995): the exact
    result of an operation on p-bit numbers that is not itself a midpoint of the format lies
    farther from one than float64's rounding error, so the float64 result is on the same side
    of every midpoint (also at subnormal results, where the format's grid is coarser). The
    directed modes and the flags need the error's sign (is the result exact?), and stochastic
    rounding its size."""
    return (not c.want and c.result.rounding in _NEAREST
            and c.result.fmt.precision_bits <= _INNOCUOUS_PRECISION)


# -- operands ---------------------------------------------------------------------------------

_OPERAND_NAMES = ("a", "b", "c")  # the parameter names of add, sub, mul, div, sqrt and fma
_NARROW_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))

@functools.cache
def _snan_spec(dtype: np.dtype) -> tuple | None:
    """(unsigned view, exponent mask, quiet bit) of a float dtype whose format has IEEE NaNs
    (float16/32/64 and ml_dtypes' bfloat16, float8_e5m2), else None: no signalling NaNs."""
    try:
        fmt = get_float_format(dtype)
    except (TypeError, ValueError):
        return None
    m = fmt.mantissa_bits
    if fmt.nan_encoding is not NaNEncoding.IEEE or m == 0:
        return None
    view = np.dtype(f"u{dtype.itemsize}").type
    return view, ((1 << fmt.exponent_bits) - 1) << m, 1 << (m - 1)


def snan_mask(arr: np.ndarray) -> np.ndarray | None:
    """Signalling NaNs of an IEEE-style input array (None when it holds none)."""
    spec = _snan_spec(arr.dtype)
    if spec is None:
        return None
    view, exp, quiet = spec
    bits = np.ascontiguousarray(arr).view(view)
    mag = bits & view((1 << (8 * arr.dtype.itemsize - 1)) - 1)
    snan = (mag > view(exp)) & ((bits & view(quiet)) == 0)
    return snan.reshape(arr.shape) if snan.any() else None  # (ascontiguousarray makes 0-d 1-d)


def convert_operand(x, c: OpContext, name: str = "x") -> tuple[np.ndarray, np.ndarray | None]:
    """x converted (RNE, silently) to fmt as float64, and its signalling-NaN mask; ``name``
    (the operand's) is what a TypeError for an element that is not a number calls it."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN
        return _convert(x, c, name)


def _convert(x, c: OpContext, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    x = listed(x)  # a list as NumPy's array of it: object arrays of exact numbers below
    arr = np.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else None
    if arr is not None and arr.dtype == object:
        # Fractions, Decimals, ints of any size (and floats): each element rounded once from
        # its exact value, as it is alone
        v, _, snan = round_objects_with(arr, c.conversion, False, name)
        return v, snan
    if arr is not None and c.result.fmt.dtype is not None and arr.dtype == c.result.fmt.dtype:
        v = arr.astype(np.float64)  # already values of fmt
        snan = snan_mask(arr) if np.isnan(v).any() else None
        if c.conversion.daz:
            v = np.where(np.abs(v) < c.result.fmt.smallest_normal, np.copysign(0.0, v), v)
        return v, snan
    if isinstance(x, (Fraction, Decimal)):  # one exact number: rounded once, at any size
        snan = np.array(True) if isinstance(x, Decimal) and x.is_snan() else None
        return np.asarray(round_with(x, c.conversion)[0], dtype=np.float64), snan
    if arr is not None and arr.dtype in _NARROW_FLOATS and arr.ndim:
        # rounded as it is (float32 in float32, no float64 copy first): the same values
        snan = snan_mask(arr) if np.isnan(arr).any() else None
        return round_with(arr, c.conversion)[0], snan
    hi, lo, _ = as_float64(x if arr is None else arr, name)
    snan = None
    if hi.dtype.kind == "f" and np.isnan(hi).any():  # the sNaN bit as the input holds it
        snan = snan_mask(arr if arr is not None else hi)
    if lo is not None:
        # Beyond float64 (long double, 64-bit or Python integers past 2**53): the rounding
        # core splits the value itself exactly and rounds it once. A (hi, lo) float64 pair is
        # not enough: below 2**-1011 lo is rounded, or lost (a false tie where the format
        # reaches below float64's subnormals), and beyond 2**1024 hi is only a stand-in.
        v, _ = round_with(x if arr is None else arr, c.conversion)
    else:
        v, _ = round_with(hi, c.conversion)
    return np.asarray(v, dtype=np.float64), snan


def _operands(args, c: OpContext, name: str):
    """Convert and broadcast the operands: flat float64 arrays, the OR of their sNaN masks,
    the broadcast shape and whether every operand was a scalar."""
    # converted first: a ragged or non-numeric operand is refused by name, not by np.shape
    conv = [convert_operand(a, c, f"operand {label}")  # at most 3 operands
            for label, a in zip(_OPERAND_NAMES[:len(args)], args, strict=True)]
    shape = broadcast_shape(name, *(v.shape for v, _ in conv))
    scalar = all(v.ndim == 0 for v, _ in conv)
    vals, snan = [], None
    for v, s in conv:
        if v.shape != shape:
            v = np.broadcast_to(v, shape)
        vals.append(np.ascontiguousarray(v).reshape(-1))
        if s is not None:
            s = np.broadcast_to(s, shape).reshape(-1)
            snan = s if snan is None else (snan | s)
    return vals, snan, shape, scalar


# -- rounding the exact pair ------------------------------------------------------------------

def round_result(hi, lo, c: OpContext, fmt: Format | None = None, *, two_sum: bool = False):
    """Round hi (+ lo, a pair round_pair accepts; None: hi alone) once to fmt (c's format by
    default) by c's result policy; returns (values, flags or None). ``two_sum``: the pair is
    valid by construction (TwoSum's: hi = fl(x + y), lo its exact error; or div's and sqrt's:
    the float64 result and its rounded correction, whose sign is exact), so not screened
    again. Internal API."""
    pol = c.result
    if fmt is not None and fmt != pol.fmt:
        pol = RoundingPolicy(fmt, pol.rounding, pol.overflow, pol.subnormals, pol.tininess,
                             pol.rng, pol.random_bits)
    return round_flat(hi, lo, pol, c.want, checked=two_sum)


def _round_general(h, l, E, c: OpContext):
    """Round (h + l) * 2**E once to fmt, for any integer exponents E: h, l float64 with h the
    nearest float64 to h + l (or 0 for an exact zero, then l = 0), sign of l exact."""
    plan = plan_for(c.result.fmt)
    mh, eh = np.frexp(h)
    l = np.ldexp(l, -eh)
    E = E + eh
    # |l| only decides the direction (and, far below 2**-53, nothing of the probability)
    l = np.where((l != 0) & (np.abs(l) < _LO_FLOOR), np.copysign(_LO_FLOOR, l), l)
    low = (E < plan.e_lo) & (mh != 0)  # far below half the smallest subnormal: only the sign
    if low.any():
        mh = np.where(low, np.copysign(0.5, mh), mh)
        l = np.where(low, 0.0, l)
    E = np.clip(E, plan.e_lo, plan.e_hi)  # above: an overflow in every mode anyway
    out = np.empty(h.shape)
    fl = np.zeros(h.shape, np.uint8) if c.want else None
    for w in plan.windows:
        sel = (E >= w.lo) & (E <= w.hi) if len(plan.windows) > 1 else slice(None)
        k = E[sel] - w.shift
        r, f = round_result(np.ldexp(mh[sel], k), np.ldexp(l[sel], k), c, w.fmt)
        out[sel] = np.ldexp(r, w.shift) if w.shift else r
        if c.want:
            fl[sel] = f
    return out, fl


def _scaled(m, d):
    """m * 2**d for d <= 0; an operand more than 200 binades below the other only counts
    through its sign (a sticky bit)."""
    return np.where(d < -200, np.copysign(_STICKY, m), np.ldexp(m, np.maximum(d, -200)))


def _zero_sign(s, x, y, mode: Rounding):
    """IEEE sign of an exact zero sum s = x + y: -0 in mode down unless both are +0; float64
    (round to nearest) already gives the other modes."""
    if mode is not Rounding.DOWN:
        return s
    return np.where(s == 0, np.where(np.signbit(x) | np.signbit(y), -0.0, 0.0), s)


def _merge(sp, out_sp, fl_sp, reg, out_reg, fl_reg, n, want):
    out = np.empty(n)
    out[sp] = out_sp
    out[reg] = out_reg
    fl = None
    if want:
        fl = np.empty(n, np.uint8)
        fl[sp] = fl_sp
        fl[reg] = fl_reg
    return out, fl


# -- the operations on flat float64 arrays of fmt values --------------------------------------

def add_flat(a, b, c: OpContext, exact_operands: bool = True):
    """(rounded a + b, flags or None, INVALID mask or None) for flat arrays of fmt values (any
    float64 values with ``exact_operands=False``)."""
    plan = plan_for(c.result.fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        s = nans_of(a + b, a, b)  # NaN results by fpsim's rule, not NumPy's loop or the CPU's
        inv = (np.isnan(s) & ~np.isnan(a) & ~np.isnan(b)) if c.want else None
        if plan.add_fast and exact_operands and not _FORCE_GENERAL:
            lo = (None if plan.add_exact or _float64_result_enough(c)
                  else two_sum_err(a, b, s))
            if lo is not None and not lo.any():
                lo = None
            out, fl = round_result(_zero_sign(s, a, b, c.result.rounding), lo, c, two_sum=True)
            return out, fl, inv
        reg = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
        sp = ~reg
        o_sp, f_sp = round_result(_zero_sign(s[sp], a[sp], b[sp], c.result.rounding), None, c)
        ma, ea = np.frexp(a[reg])
        mb, eb = np.frexp(b[reg])
        E = np.maximum(ea, eb)
        x, y = _scaled(ma, ea - E), _scaled(mb, eb - E)
        h = x + y
        lo = two_sum_err(x, y, h)
        h = _zero_sign(h, x, y, c.result.rounding)
        o_r, f_r = _round_general(h, lo, E, c)
    out, fl = _merge(sp, o_sp, f_sp, reg, o_r, f_r, a.size, c.want)
    return out, fl, inv


def mul_flat(a, b, c: OpContext, exact_operands: bool = True):
    plan = plan_for(c.result.fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        prod = nans_of(a * b, a, b)  # (as add_flat's sum)
        inv = (np.isnan(prod) & ~np.isnan(a) & ~np.isnan(b)) if c.want else None
        if plan.mul_fast and exact_operands and not _FORCE_GENERAL:
            out, fl = round_result(prod, None, c)
            return out, fl, inv
        reg = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
        sp = ~reg
        o_sp, f_sp = round_result(prod[sp], None, c)  # zeros, infinities, NaN: exact
        ma, ea = np.frexp(a[reg])
        mb, eb = np.frexp(b[reg])
        if c.result.fmt.precision_bits <= _MAX_FMA_PRECISION and exact_operands:
            h, lo = ma * mb, np.zeros(ma.shape)
        else:
            h, lo = two_prod(ma, mb)
        o_r, f_r = _round_general(h, lo, ea + eb, c)
    out, fl = _merge(sp, o_sp, f_sp, reg, o_r, f_r, a.size, c.want)
    return out, fl, inv


def _div_pair(a, b):
    """q = fl(a / b) and lo = r / b with the exact remainder r = a - q*b."""
    q = a / b
    ph, pl = two_prod(q, b)
    r = (a - ph) - pl
    return q, r / b


def _div_flat(a, b, c: OpContext, exact_operands: bool = True):
    plan = plan_for(c.result.fmt)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if plan.div_fast and exact_operands and not _FORCE_GENERAL:
            if _float64_result_enough(c):
                out, fl = round_result(a / b, None, c)
                return out, fl, None
            q, lo = _div_pair(a, b)
            inv = (np.isnan(q) & ~np.isnan(a) & ~np.isnan(b)) if c.want else None
            # (q, lo) is a pair by construction (q the float64 nearest to a / b, lo the
            # rounded quotient of the exact remainder, its sign exact): not screened again
            out, fl = round_result(q, _finite_or_zero(lo), c, two_sum=True)
            return out, fl, inv
        q = a / b
        inv = (np.isnan(q) & ~np.isnan(a) & ~np.isnan(b)) if c.want else None
        reg = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
        sp = ~reg
        o_sp, f_sp = round_result(q[sp], None, c)  # x/0, 0/x, x/inf, inf/x, NaN: exact
        ma, ea = np.frexp(a[reg])
        mb, eb = np.frexp(b[reg])
        h, lo = _div_pair(ma, mb)
        o_r, f_r = _round_general(h, lo, ea - eb, c)
    out, fl = _merge(sp, o_sp, f_sp, reg, o_r, f_r, a.size, c.want)
    return out, fl, inv


def _sqrt_pair(a):
    s = np.sqrt(a)
    ph, pl = two_prod(s, s)
    r = (a - ph) - pl
    return s, r / (2.0 * s)


def _sqrt_flat(a, c: OpContext, exact_operands: bool = True):  # noqa: ARG001 - kernels' signature
    plan = plan_for(c.result.fmt)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if plan.sqrt_fast and not _FORCE_GENERAL:
            if _float64_result_enough(c):
                out, fl = round_result(np.sqrt(a), None, c)
                return out, fl, None
            s, lo = _sqrt_pair(a)
            inv = (np.isnan(s) & ~np.isnan(a)) if c.want else None
            out, fl = round_result(s, _finite_or_zero(lo), c, two_sum=True)  # a pair, as div's
            return out, fl, inv
        s = np.sqrt(a)
        inv = (np.isnan(s) & ~np.isnan(a)) if c.want else None
        reg = np.isfinite(a) & (a > 0)
        sp = ~reg
        o_sp, f_sp = round_result(s[sp], None, c)  # +-0, +inf, negative, NaN
        ma, ea = np.frexp(a[reg])
        odd = (ea & 1) == 1
        ma = np.where(odd, 2.0 * ma, ma)  # an even exponent halves exactly
        ea = ea - odd
        h, lo = _sqrt_pair(ma)
        o_r, f_r = _round_general(h, lo, ea // 2, c)
    out, fl = _merge(sp, o_sp, f_sp, reg, o_r, f_r, a.size, c.want)
    return out, fl, inv


def _fma_flat(a, b, d, c: OpContext, exact_operands: bool = True):  # noqa: ARG001 - as above
    plan = plan_for(c.result.fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        prod = a * b
        nan_in = (np.isnan(a) | np.isnan(b) | np.isnan(d)) if c.want else None
        inv = None
        if c.want:  # 0 * inf is invalid whatever c is (SoftFloat: even a quiet NaN c)
            inv = ((a == 0) & np.isinf(b)) | (np.isinf(a) & (b == 0))
        if plan.fma_fast and not _FORCE_GENERAL:
            s = prod + d
            if c.want:
                inv |= np.isnan(s) & ~nan_in
            lo = None if plan.fma_exact else two_sum_err(prod, d, s)
            if lo is not None and not lo.any():
                lo = None
            # (s, lo) is TwoSum's pair (prod is exact here), as in add: not screened again
            out, fl = round_result(_zero_sign(s, prod, d, c.result.rounding), lo, c, two_sum=True)
            return out, fl, inv
        reg = np.isfinite(a) & np.isfinite(b) & np.isfinite(d) & (a != 0) & (b != 0)
        sp = ~reg
        # here a*b is exact (a zero) or irrelevant (c or the product infinite / NaN)
        p_sp = prod[sp]
        p_sp = np.where(np.isinf(p_sp) & np.isfinite(a[sp]) & np.isfinite(b[sp]),
                        np.copysign(1.0, p_sp), p_sp)
        s_sp = p_sp + d[sp]
        if c.want:
            inv[sp] |= np.isnan(s_sp) & ~nan_in[sp]
        o_sp, f_sp = round_result(_zero_sign(s_sp, p_sp, d[sp], c.result.rounding), None, c)
        ma, ea = np.frexp(a[reg])
        mb, eb = np.frexp(b[reg])
        pm, ep = ma * mb, ea + eb  # exact: two significands of <= 26 bits
        mc, ec = np.frexp(d[reg])
        zero_c = mc == 0
        E = np.where(zero_c, ep, np.maximum(ep, ec))
        x = _scaled(pm, ep - E)
        y = np.where(zero_c, 0.0, _scaled(mc, ec - E))
        h = x + y
        lo = two_sum_err(x, y, h)
        h = _zero_sign(h, x, y, c.result.rounding)
        o_r, f_r = _round_general(h, lo, E, c)
    out, fl = _merge(sp, o_sp, f_sp, reg, o_r, f_r, a.size, c.want)
    return out, fl, inv


# -- the shared kernel ------------------------------------------------------------------------

def context(fmt: Format | str | None = None, rounding: Rounding | str = "nearest_even", *,
            overflow: Overflow | str = "inf", subnormals: Subnormals | str = "keep",
            tininess: Tininess | str = "after", rng=None, random_bits: int | None = None,
            flags: bool = False, what: str = "arithmetic",
            policy: RoundingPolicy | None = None) -> OpContext:
    """The validated options of an operation (what :func:`compute` takes); for the layers
    above (``fpsim.autograd``, :mod:`fpsim.reductions`), which hold their options in their
    own settings. The options, or ``policy=``, as :func:`fpsim.round` takes them."""
    return _context(fmt, rounding, overflow, subnormals, tininess, rng, random_bits, flags,
                    what=what, policy=policy)


def daz_operand(v: np.ndarray, c: OpContext) -> np.ndarray:
    """Subnormal operand values read as (signed) zero when ``c`` asks for DAZ."""
    if not c.conversion.daz:
        return v
    return np.where(np.abs(v) < c.result.fmt.smallest_normal, np.copysign(0.0, v), v)


def _canonical_nans(name: str, out: np.ndarray, vals) -> None:
    """Make each NaN of ``out`` that a NaN operand or an invalid operation gave the canonical
    quiet NaN (+, payload 0: ``np.nan``), in place. Which operand's sign and payload a float64
    NaN carries differs between NumPy's loops, its versions and CPUs (x86's default NaN is
    negative, ARM's positive), so a result must not take it from there. A NaN that stands
    for an overflow (a format without inf, finite operands) keeps the sign of its result."""
    nan = np.isnan(out)
    if not nan.any():
        return
    valid = np.ones(out.shape, bool)
    for v in vals:
        valid &= np.isfinite(v)
    if name == "div":
        valid &= (vals[0] != 0) | (vals[1] != 0)  # 0 / 0
    elif name == "sqrt":
        valid &= ~(vals[0] < 0)
    out[nan & ~valid] = np.nan


def compute(name: str, vals, c: OpContext, snan: np.ndarray | None = None, *,
            exact_operands: bool = True):
    """The one rounded-arithmetic kernel of fpsim, shared by the array functions below and by
    the Tensor ops of :mod:`fpsim.autograd`: ``name`` (add, sub, mul, div, sqrt, fma) on flat
    float64 arrays ``vals`` of equal length, rounded once per ``c``. Returns ``(values, flags)``
    (flags None unless ``c.want``), INVALID and DIVBYZERO included (``snan``: the elements
    with a signalling-NaN operand).

    ``exact_operands=False`` admits any float64 operands (not only values of the format, e.g.
    a Python scalar kept at its exact value): the frexp-scaled general path with an exact
    error term then runs for add, sub, mul and div (sqrt and fma need values of the format).
    Callers hide the flag contexts (:func:`quiet_flags`) and record the flags themselves."""
    kernel = _KERNELS[name]
    if exact_operands:
        out, fl, inv = kernel(*vals, c)
    else:
        if name not in ("add", "sub", "mul", "div"):
            raise ValueError(f"{name} needs operands that are values of the format")
        out, fl, inv = kernel(*vals, c, exact_operands=False)
    _canonical_nans(name, out, vals)
    if c.want:
        if inv is not None and inv.any():
            fl[inv] = np.uint8(Flags.INVALID)
        if snan is not None:
            fl[snan] = np.uint8(Flags.INVALID)
        if name == "div":
            a, b = vals
            dz = (b == 0) & np.isfinite(a) & (a != 0)
            if dz.any():
                fl[dz] |= np.uint8(Flags.DIVBYZERO)
    return out, fl


# -- the native path --------------------------------------------------------------------------

# Round to nearest even with IEEE policies and no flags, in fp16, bf16 or fp32: NumPy's
# float16 and float32 and ml_dtypes' bfloat16 arithmetic give exactly fpsim's result, so it
# runs natively. Why it is the same rounding, for + - * / sqrt:
# - float32 operations are IEEE 754 correctly rounded (nearest even, gradual underflow,
#   overflow to inf): fp32 itself.
# - NumPy's float16 and ml_dtypes' bfloat16 loops widen both operands exactly to float32, run
#   the float32 operation and round the float32 result once more to the 16-bit type (nearest
#   even). float32 has p' = 24 >= 2p + 2 bits (p = 11 for fp16, 8 for bf16), so by
#   Figueroa's theorem the double rounding equals one rounding of the exact result; also
#   where the 16-bit result is subnormal (its grid there is coarser still) or overflows
#   (unbounded-exponent rounding decides, float32 reaches beyond both formats' largest
#   finite values: fp16 overflows inside float32's range, bf16's threshold (2 - 2**-8) *
#   2**127 is a float32 number and float32 overflow rounds to inf as bf16 does).
# - operands are first converted to the format, as fpsim does (nearest even, silently): a
#   float16 / float32 / float64 array's native cast, fpsim.rounding.native.cast (NumPy's float64 ->
#   float16 cast is one rounding, not via float32; ml_dtypes' float64 -> bfloat16 cast was
#   two roundings in ml_dtypes 0.5 (not in 0.7), so float64 goes to float32 rounded to odd
#   first: checked against fpsim.round on midpoints in tests/test_edges_arith.py); other
#   inputs (ints, lists, long double) take the general path.
# - not native: any other mode or format, overflow="saturate", flush / DAZ, flags=True or an
#   active flag context (the flags come from the general kernel), the stochastic generator.
# Results are float64 (the API's contract); NaN results are the canonical quiet NaN.
_NATIVE_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
               "sqrt": np.sqrt}
_NATIVE_INPUTS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def fast_paths_on() -> bool:
    """False while the tests run the general kernel everywhere (``_FORCE_GENERAL``), so that
    every shortcut (native types, :mod:`fpsim.reductions`' Python-float steps) can be
    compared with it. Internal API."""
    return not _FORCE_GENERAL


def native_ok(c: OpContext) -> bool:
    """May c's correctly rounded + - * / sqrt run as the native type's operations (fp16,
    bf16 or fp32, nearest even, IEEE policies, no flags: see above, and the rule and format
    table of :func:`fpsim.rounding.native.native_ok`)? Internal API, for
    :mod:`fpsim.reductions` too."""
    return not (c.conversion.daz or _FORCE_GENERAL) and rounds_natively(
        c.result, c.want, arithmetic=True)


def _native(name: str, args, c: OpContext):
    """The native result (float64) of the operation, or None when it may not run natively."""
    if name not in _NATIVE_OPS or not native_ok(c):
        return None
    dt = c.result.fmt.dtype
    ops = []
    for a in args:
        if isinstance(a, float):
            a = np.float64(a)
        if not isinstance(a, (np.ndarray, np.generic)):
            return None
        if a.dtype != dt and a.dtype not in _NATIVE_INPUTS:
            return None
        ops.append(a)
    shape = broadcast_shape(name, *(a.shape for a in ops))  # the error every path gives
    views = [np.broadcast_to(a, shape) for a in ops]
    out = np.empty(shape)
    op = _NATIVE_OPS[name]
    with np.errstate(all="ignore"):
        for idx in _chunk_slices(shape):  # the peak memory: inputs, output and one chunk
            # a conversion is one rounding to nearest even (see above)
            out[idx] = op(*(v[idx] if v.dtype == dt else native_cast(v[idx], dt)
                            for v in views))
            o = out[idx] if idx else out  # a view (out[()] of a 0-d array is a scalar)
            np.copyto(o, np.nan, where=np.isnan(o))  # the canonical NaN (_canonical_nans)
    return out


# -- the float32 path -------------------------------------------------------------------------

# float32 / float16 operand arrays in a format whose values are float32 numbers with room to
# spare (fp16, fp8, e5m7, ...): each chunk's operands are rounded to the format as float32,
# the operation runs in float32 and its result is rounded as float32 (half the bytes of the
# float64 path, no error terms). Exact where float32 holds the exact result: a product of
# two p <= 12 bit values whose range float32 covers (any deterministic mode). Otherwise round
# to nearest (either tie rule) at p <= 11: float32's 24 >= 2p + 2 bits make the double
# rounding innocuous (Figueroa; the native fp16 path's argument), the results staying normal
# float32 numbers or exact. An inf or NaN result of finite operands (x / 0, 0 / 0, sqrt(-x))
# is rounded as the general path rounds its float64 twin; a chunk with an inf or NaN operand
# takes the general path. Equal to it and to MPFR: tests/test_arithmetic_fast.py.
# fma: the product is exact in float32 (as for mul), the sum's error comes from TwoSum in
# float32 and the pair is rounded to odd at float32's 24 bits (rounding.native.fma32_odd):
# one rounding to odd at p' >= p + 2 bits, then the format's rounding, is one rounding of the
# exact value in every deterministic mode (Boldo & Melquiond; p <= 12, and the format's quanta
# are at least 4x float32's, subnormals included), so any deterministic mode runs here. bf16
# (nearest even) too, chunk by chunk where its wider range allows: every product zero or at
# least 2**-126 (normal, so exact: rounding.native.fits_float32) and every sum finite; other
# chunks take the general path.
_F32_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
            "sqrt": np.sqrt, "fma": fma32_odd}


@functools.cache
def _float32_exact_enough(name: str, fmt: Format, mode: Rounding) -> bool:
    p, lo, hi = fmt.precision_bits, fmt.emin - fmt.mantissa_bits, fmt.emax + 1
    # values of fmt: multiples of 2**lo below 2**hi
    if name in ("mul", "fma") and 2 * p <= 24 and 2 * lo >= -149 and 2 * hi <= 127:
        return True  # the product is exact in float32, subnormal or not (fma: see above)
    if name == "fma":  # bf16: products exact where fits_float32 says so, chunk by chunk
        return _fma32_guarded(fmt)
    if mode not in _NEAREST or p > 11:
        return False
    if name in ("add", "sub", "sqrt", "mul"):
        return hi + 1 <= 127 and 2 * lo >= -149  # below 2**-126: exact (multiples of 2**lo)
    return lo - hi >= -126 and hi - lo <= 127  # div: every nonzero quotient normal


def _fma32_guarded(fmt: Format) -> bool:
    """Does the float32 fma of ``fmt`` need fits_float32 per chunk? (p <= 12 and quanta at
    least 4x float32's, as above, but products that may fall below 2**-126 or sums beyond
    float32: bf16.)"""
    p, lo, hi = fmt.precision_bits, fmt.emin - fmt.mantissa_bits, fmt.emax + 1
    return 2 * p <= 24 and lo >= -147 and hi <= 128 and not (2 * lo >= -149 and 2 * hi <= 127)


def _float32_path(name: str, args, c: OpContext):
    """The operation by the float32 path (see above), or None where it does not apply."""
    if c.want or name not in _F32_OPS:
        return None
    if not all(isinstance(a, np.ndarray) and a.dtype in _NARROW_FLOATS
               and a.flags.c_contiguous for a in args):
        return None
    shape = args[0].shape
    if any(a.shape != shape for a in args) or not (
            float32_ok(c.result) and float32_ok(c.conversion)
            and _float32_exact_enough(name, c.result.fmt, c.result.rounding)):
        return None
    flat = [a.reshape(-1) for a in args]
    n = flat[0].size
    out = np.empty(n)
    op = _F32_OPS[name]
    if name == "fma":
        op = functools.partial(fma32_odd, rounding=c.result.rounding,
                               guard=_fma32_guarded(c.result.fmt))
    with np.errstate(all="ignore"), quiet_flags():
        step = 2 * _CHUNK  # float32 work arrays: the bytes of a float64 chunk, half the calls
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            ops = []
            for a in flat:
                v, bad = round_float32(a[lo:hi].astype(np.float32, copy=False), c.conversion)
                if bad is not None:
                    break
                ops.append(v)
            else:
                r = op(*ops)
                if r is not None:
                    v, bad = round_float32(r, c.result)
                    out[lo:hi] = v
                    if bad is not None:  # x / 0, 0 / 0, sqrt(-x): inf or NaN, rounded alone
                        w = round_rest32(r[bad], c.result)
                        out[lo + bad] = np.where(np.isnan(r[bad]), np.nan, w)  # _canonical_nans
                    continue
            # an inf or NaN operand (fma: or sum): this chunk by the general path, in pieces
            # of _CHUNK (its float64 work arrays)
            for j in range(lo, hi, _CHUNK):
                k = min(hi, j + _CHUNK)
                vals, snan, _, _ = _operands([a[j:k] for a in flat], c, name)
                out[j:k] = compute(name, vals, c, snan)[0]
    return out.reshape(shape)


# -- chunks -----------------------------------------------------------------------------------

_CHUNK = 1 << 15  # elements per chunk: the float64 work arrays of one chunk stay small


def _chunk_slices(shape: tuple[int, ...]):
    """Index tuples covering ``shape`` in C order, each of about _CHUNK elements or fewer:
    whole trailing dims, blocks of one dim, single indices of the dims before it."""
    d, inner = len(shape), 1
    while d > 0 and inner * shape[d - 1] <= _CHUNK:
        d -= 1
        inner *= shape[d]
    if d == 0:
        yield ()
        return
    d -= 1  # dim d is cut into blocks of b entries
    b = max(1, _CHUNK // inner)
    for outer in np.ndindex(*shape[:d]):
        for j in range(0, shape[d], b):
            yield outer + (slice(j, j + b),)


def _chunked(name: str, args, c: OpContext):
    """The operation chunk by chunk for large arrays (None for small ones or other inputs):
    the peak memory is the inputs, the float64 output (and flags) and one chunk's work
    arrays, not ~10 float64 temporaries per element."""
    if not all(isinstance(a, (np.ndarray, np.generic, float, int)) for a in args):
        return None
    if math.prod(math.prod(np.shape(a)) for a in args) <= _CHUNK:
        return None  # small: the broadcast size is at most the product of the sizes
    arrs = [np.asarray(a) for a in args]
    if any(a.dtype.kind not in "fiuV" or a.dtype.itemsize > 8 for a in arrs):
        return None  # long double, objects: the one-piece path (exact conversions)
    shape = broadcast_shape(name, *(a.shape for a in arrs))
    if int(np.prod(shape, dtype=np.int64)) <= _CHUNK:
        return None
    views = [np.broadcast_to(a, shape) for a in arrs]
    out = np.empty(shape)
    fl = np.empty(shape, np.uint8) if c.want else None
    with quiet_flags():
        for idx in _chunk_slices(shape):
            vals, snan, sub_shape, _ = _operands([v[idx] for v in views], c, name)
            o, f = compute(name, vals, c, snan)
            out[idx] = o.reshape(sub_shape)
            if fl is not None:
                fl[idx] = f.reshape(sub_shape)
    return out, fl


# -- public functions -------------------------------------------------------------------------

def _apply(name: str, args, fmt, rounding, overflow, subnormals, tininess, rng,
           random_bits, flags, policy):
    c = _context(fmt, rounding, overflow, subnormals, tininess, rng, random_bits, flags,
                 what=name, policy=policy)
    if name == "fma" and c.result.fmt.precision_bits > _MAX_FMA_PRECISION:
        raise ValueError(
            f"fma supports formats of at most {_MAX_FMA_PRECISION} precision bits (the product "
            f"must be exact in float64), got {c.result.fmt.name} with {c.result.fmt.precision_bits}"
        )
    out = _float32_path(name, args, c)  # (fp16: faster than NumPy's float16 loops)
    if out is None:
        out = _native(name, args, c)
    if out is not None:
        return out[()] if out.ndim == 0 else out
    chunked = _chunked(name, args, c)
    if chunked is not None:
        out, fl = chunked
        if c.want and _flags.flags_active():
            _flags.record(fl, name)
        return (out, fl) if flags else out
    with quiet_flags():
        vals, snan, shape, scalar = _operands(args, c, name)
        out, fl = compute(name, vals, c, snan)
    if c.want:
        fl = fl.reshape(shape)
        if _flags.flags_active():
            _flags.record(fl, name)
    out = out.reshape(shape)
    if scalar:
        out = out[()]
        fl = fl[()] if fl is not None else None
    return (out, fl) if flags else out


def add(
    a,
    b,
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
    """``a + b`` correctly rounded to ``fmt`` (elementwise, broadcasting).

    Options as :func:`fpsim.round` (or ``policy=``, a :class:`fpsim.RoundingPolicy`);
    ``flags=True`` returns ``(result, flags)`` with the IEEE flags of each element. Operands
    are first converted to ``fmt`` (round to nearest even).

    >>> from fpsim.arithmetic import add
    >>> float(add(256.0, 1.0, "bf16"))  # 257 is not a bf16 number: ties to even
    256.0
    >>> float(add(1.0, -1.0, "fp16", "down"))
    -0.0
    """
    return _apply("add", (a, b), fmt, rounding, overflow, subnormals, tininess,
                  rng, random_bits, flags, policy)


def _sub_flat(a, b, c, exact_operands: bool = True):
    return add_flat(a, -b, c, exact_operands)


def sub(
    a,
    b,
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
    """``a - b`` correctly rounded to ``fmt`` (elementwise, broadcasting); see :func:`add`.

    >>> from fpsim.arithmetic import sub
    >>> float(sub(1.0, 2.0**-25, "fp32", "toward_zero"))
    0.9999999403953552
    """
    return _apply("sub", (a, b), fmt, rounding, overflow, subnormals, tininess,
                  rng, random_bits, flags, policy)


def mul(
    a,
    b,
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
    """``a * b`` correctly rounded to ``fmt`` (elementwise, broadcasting); see :func:`add`.

    >>> import fpsim
    >>> from fpsim.arithmetic import mul
    >>> v, f = mul(300.0, 300.0, "fp16", flags=True)  # 90000 > 65504
    >>> float(v), fpsim.Flags(int(f))
    (inf, <Flags.INEXACT|OVERFLOW: 5>)
    >>> float(mul(300.0, 300.0, "fp16", overflow="saturate"))
    65504.0
    """
    return _apply("mul", (a, b), fmt, rounding, overflow, subnormals, tininess,
                  rng, random_bits, flags, policy)


def div(
    a,
    b,
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
    """``a / b`` correctly rounded to ``fmt`` (elementwise, broadcasting); see :func:`add`.

    A finite nonzero ``a`` over zero gives a signed infinity and DIVBYZERO; ``0/0`` and
    ``inf/inf`` give NaN and INVALID.

    >>> from fpsim.arithmetic import div
    >>> float(div(1.0, 3.0, "bf16")), float(div(1.0, 3.0, "bf16", "up"))
    (0.333984375, 0.333984375)
    >>> float(div(1.0, 3.0, "bf16", "down"))
    0.33203125
    """
    return _apply("div", (a, b), fmt, rounding, overflow, subnormals, tininess,
                  rng, random_bits, flags, policy)


def sqrt(
    a,
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
    """The square root of ``a`` correctly rounded to ``fmt``; ``sqrt(-0) = -0``, a negative
    number gives NaN and INVALID. See :func:`add` for the options.

    >>> from fpsim.arithmetic import sqrt
    >>> float(sqrt(2.0, "fp16")), float(sqrt(-0.0, "fp16"))
    (1.4140625, -0.0)
    """
    return _apply("sqrt", (a,), fmt, rounding, overflow, subnormals, tininess,
                  rng, random_bits, flags, policy)


def fma(
    a,
    b,
    c,
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
    """The fused multiply-add ``a * b + c`` rounded once to ``fmt`` (elementwise,
    broadcasting); formats of at most 26 precision bits. See :func:`add` for the options.

    >>> from fpsim.arithmetic import fma, mul, sub
    >>> x = 1.0 + 3 * 2.0**-10  # x*x - 1 = 6*2**-10 + 9*2**-20: only fused keeps the tail
    >>> float(fma(x, x, -1.0, "fp16")), float(sub(mul(x, x, "fp16"), 1.0, "fp16"))
    (0.00586700439453125, 0.005859375)
    """
    return _apply("fma", (a, b, c), fmt, rounding, overflow, subnormals,
                  tininess, rng, random_bits, flags, policy)


_KERNELS = {"add": add_flat, "sub": _sub_flat, "mul": mul_flat, "div": _div_flat,
            "sqrt": _sqrt_flat, "fma": _fma_flat}
