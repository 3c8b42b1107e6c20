"""Integer formats: float -> integer conversion in every rounding mode, IEEE roundToIntegral,
exact integer arithmetic that saturates or wraps, CUDA's ``__dp4a`` and an int8 GEMM with int32
accumulation as tensor cores (IMMA) compute it.

Every integer result is computed exactly first (NumPy int64, float BLAS where every partial sum
is an exactly representable integer, or Python ints for formats wider than 32 bits) and only
then saturated or wrapped, so overflow behaviour is a stated policy, never an accident of the
storage dtype.

Overflow policies (:class:`IntOverflow`):

- ``saturate``: clamp to ``[fmt.min, fmt.max]`` (quantized kernels, Arm ``FCVTZS``, CUDA
  ``__float2int_rn``); NaN converts to 0, as Arm and CUDA do.
- ``wrap``: reduce modulo ``2**bits`` (C casts of in-range values, NumPy, two's-complement
  hardware); defined for every finite value by exact integer arithmetic. NaN and infinities
  give 0.
- ``indefinite``: conversions only: every invalid conversion (NaN, infinity, out of range)
  returns the "integer indefinite" value that Berkeley SoftFloat's default (x86 SSE) build and
  so the TestFloat vectors return: ``fmt.min`` for signed formats (0x80000000 for int32) and
  ``fmt.max`` (all ones) for unsigned ones. Its old name ``"ieee"`` is refused, naming this
  one: IEEE 754 leaves the result of an invalid conversion unspecified and only requires the
  INVALID flag (which :func:`to_int` raises under every policy), so "ieee" named x86's choice,
  not the standard's; in fpsim "ieee" means IEEE 754's own rule (``NaNEncoding.IEEE``).
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from . import flags as _flags
from .checks import as_array
from .flags import Flags
from .formats import Format, IntFormat, get_float_format, get_int_format
from .modes import Overflow, Rounding, as_overflow, as_rounding
from .rounding import as_float64, default_rng, listed, policy_of, random_bits_of, run_chunks
from .rounding import round as _round

__all__ = [
    "IntOverflow",
    "as_int_overflow",
    "iinfo",
    "to_int",
    "round_to_integral",
    "add",
    "sub",
    "mul",
    "dp4a",
    "int8_matmul",
]

_U = np.uint64
_CHUNK = 1 << 16  # elements per block of to_int: keeps the temporaries in cache
_ML_INT_DTYPES = {
    np.dtype(getattr(ml_dtypes, n)): n
    for n in ("int1", "int2", "int4", "uint1", "uint2", "uint4")
    if hasattr(ml_dtypes, n)
}


class IntOverflow(str, enum.Enum):
    """What an integer result outside the format's range becomes (see the module docstring)."""

    SATURATE = "saturate"  # clamp to [min, max]
    WRAP = "wrap"  # modulo 2**bits, two's complement
    INDEFINITE = "indefinite"  # conversions only: SoftFloat/x86 "integer indefinite"


_ARITH_POLICIES = (IntOverflow.SATURATE, IntOverflow.WRAP)
_INT_OVERFLOW_ALIASES = {"sat": IntOverflow.SATURATE, "clamp": IntOverflow.SATURATE,
                         "modular": IntOverflow.WRAP, "x86": IntOverflow.INDEFINITE}


def as_int_overflow(
    policy: IntOverflow | str, allowed: tuple[IntOverflow, ...] = tuple(IntOverflow)
) -> IntOverflow:
    """The :class:`IntOverflow` member for a name ("saturate", "wrap", "indefinite") or
    member; ValueError listing the valid ones otherwise (``allowed`` narrows them per
    operation; "ieee", the old name of "indefinite", is refused naming the new one).

    >>> as_int_overflow("wrap")
    <IntOverflow.WRAP: 'wrap'>
    """
    member = None
    if isinstance(policy, IntOverflow):
        member = policy
    elif isinstance(policy, str):
        key = policy.strip().lower()
        member = _INT_OVERFLOW_ALIASES.get(key)
        if member is None and key in {m.value for m in IntOverflow}:
            member = IntOverflow(key)
    if member is None or member not in allowed:
        # checked here, off the per-call path: allowed is the caller's, not the user's
        if isinstance(allowed, (str, bytes)) or not all(isinstance(m, IntOverflow)
                                                        for m in allowed):
            raise TypeError(f"as_int_overflow: allowed must be IntOverflow members, got "
                            f"{allowed!r}")
        valid = ", ".join(repr(m.value) for m in allowed)
        old = (" ('ieee' is now 'indefinite': IEEE 754 leaves that value unspecified)"
               if isinstance(policy, str) and policy.strip().lower() == "ieee"
               and IntOverflow.INDEFINITE in allowed else "")
        raise ValueError(f"unknown integer overflow policy {policy!r}; valid: {valid}{old}")
    return member


def iinfo(fmt: IntFormat | str | np.dtype | type) -> IntFormat:
    """The integer format, whose ``min``, ``max``, ``bits``, ``kind`` and ``dtype`` are named
    as in ``numpy.iinfo`` (TypeError for a floating-point format).

    >>> iinfo("int4").min, iinfo("uint8").max, iinfo("int16").bits
    (-8, 255, 16)
    """
    return get_int_format(fmt)


# --------------------------------------------------------------------------------------------
# Helpers: exact integer representation and the overflow policies
# --------------------------------------------------------------------------------------------

def _store(neg: np.ndarray, mag: np.ndarray, fmt: IntFormat) -> np.ndarray:
    """The value ``(-1)**neg * mag`` reduced modulo ``2**fmt.bits`` (``mag`` is the magnitude
    modulo 2**64 as uint64), as an int64 (uint64 for 64-bit unsigned) array."""
    # Two's complement modulo 2**64; unsigned wrap-around is what we want here.
    u = np.where(neg, _U(0) - mag, mag)
    if fmt.bits == 64:
        return u.view(np.int64) if fmt.signed else u
    low = (u & _U((1 << fmt.bits) - 1)).astype(np.int64)
    if fmt.signed:
        low = np.where(low > fmt.max, low - (1 << fmt.bits), low)
    return low


def _to_dtype(v: np.ndarray, fmt: IntFormat) -> np.ndarray:
    """Cast in-range int64/uint64/object values to the format's dtype."""
    return np.asarray(v).astype(fmt.dtype)


def _int_array(x, what: str) -> np.ndarray:
    """An integer array (int64, uint64 or, for Python ints beyond 64 bits, object of ints);
    TypeError for floats, booleans and anything else that is not an integer."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{what} must be integers, got a bool")
    if isinstance(x, (float, complex, np.floating, np.complexfloating)):
        raise TypeError(f"{what} must be integers, got {type(x).__name__}; "
                        "convert floats with fpsim.to_int first")
    arr = as_array(x, what)
    dt = arr.dtype
    if dt in _ML_INT_DTYPES:
        return arr.astype(np.int64)
    if dt.kind in "iu":
        return arr
    if dt.kind == "O" and arr.size and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
            for v in arr.flat):
        return arr
    raise TypeError(
        f"{what} must be integers (NumPy integer arrays, ml_dtypes int4/uint4, Python ints), "
        f"got dtype {dt}; convert floats with fpsim.to_int first"
    )


def _check_range(arr: np.ndarray, lo: int, hi: int, what: str, fmt_name: str) -> None:
    if arr.size == 0:
        return
    amin, amax = int(arr.min()), int(arr.max())
    if amin < lo or amax > hi:
        bad = amin if amin < lo else amax
        raise ValueError(
            f"{what} hold {bad}, outside {fmt_name} [{lo}, {hi}]; convert them with "
            f"fpsim.to_int(..., overflow='saturate' or 'wrap') first"
        )


def _apply_policy(v: np.ndarray, fmt: IntFormat, policy: IntOverflow) -> np.ndarray:
    """Exact integer results (int64 or object) -> fmt, saturating or wrapping."""
    if policy is IntOverflow.SATURATE:
        out = np.clip(v, fmt.min, fmt.max)
    else:
        span = 1 << fmt.bits
        if v.dtype == object:
            out = (v - fmt.min) % span + fmt.min
        else:
            # int64 two's complement masking is the reduction modulo 2**bits (bits <= 32 here)
            out = ((v - fmt.min) & (span - 1)) + fmt.min
    return _to_dtype(out, fmt)


# --------------------------------------------------------------------------------------------
# Rounding to integral values
# --------------------------------------------------------------------------------------------

def _rounded_by_numpy(x) -> bool:
    """Whether ``x`` is a list (or tuple) whose NumPy array rounds integer elements to floats
    (``[2**53 + 1, 0.5]``: :func:`fpsim.rounding.listed` gives an object array for it), so
    that reading NumPy's floats would be a silent wrong number."""
    if not isinstance(x, (list, tuple)):
        return False
    held = listed(x)
    return isinstance(held, np.ndarray) and held.dtype == object and \
        np.asarray(x).dtype.kind == "f"


def _integral(x: np.ndarray, mode: Rounding, gen, random_bits: int | None) -> np.ndarray:
    """Round the finite elements of a binary float array to integral values in the same dtype.

    Exact in every binary format: floor/ceil/trunc/rint are exact, and ``x - trunc(x)`` is the
    fractional part, which the format holds exactly. Non-finite elements come back unchanged.
    """
    if mode is Rounding.NEAREST_EVEN:
        return np.rint(x)
    if mode is Rounding.TOWARD_ZERO:
        return np.trunc(x)
    if mode is Rounding.UP:
        return np.ceil(x)
    if mode is Rounding.DOWN:
        return np.floor(x)
    one = x.dtype.type(1)
    with np.errstate(invalid="ignore"):
        if mode is Rounding.NEAREST_AWAY:
            t = np.trunc(x)
            away = np.abs(x - t) >= x.dtype.type(0.5)
            return np.where(away, t + np.copysign(one, x), t)
        if mode is Rounding.ODD:
            t = np.trunc(x)
            bump = (t != x) & (np.fmod(t, 2) == 0) & np.isfinite(x)
            return np.where(bump, t + np.copysign(one, x), t)
        # stochastic: floor + 1 with probability frac = x - floor(x), from 64 random bits
        f = np.floor(x)
        frac = np.where(np.isfinite(x), x - f, 0)
        rnd = gen.integers(0, 1 << 64, size=x.shape, dtype=np.uint64, endpoint=False)
        if random_bits is None:
            # P(up) = ceil(frac * 2**64) / 2**64: frac itself whenever it has <= 64 fraction
            # bits; the threshold is an exact integer below 2**64
            thr = np.ceil(np.ldexp(frac, 64)).astype(np.uint64)
            up = rnd < thr
        else:
            # hardware style: r random bits added to the top r dropped bits, lower ones ignored
            r = random_bits
            u = rnd >> _U(64 - r)
            top = np.floor(np.ldexp(frac, r)).astype(np.uint64)
            up = (u + top) >= _U(1 << r)
        return np.where(up, f + one, f)


def _float_work(x) -> tuple[np.ndarray, bool] | None:
    """The input as an array of a binary float dtype that holds it exactly (float32 for
    float16/float32/ml_dtypes floats, float64, long double), or None for integer input."""
    if isinstance(x, (complex, np.complexfloating)):
        raise TypeError("complex input is not supported: convert the real and imaginary parts")
    arr = as_array(x, "x")
    scalar = arr.ndim == 0
    dt = arr.dtype
    if dt.kind in "iub" or dt in _ML_INT_DTYPES or dt.kind == "O":
        return None
    if dt.kind == "f":
        if dt.itemsize <= 4:
            return arr.astype(np.float32, copy=False), scalar
        return arr, scalar
    hi, lo, scalar = as_float64(arr)  # ml_dtypes floats (every one fits float32); raises else
    if np.dtype(dt).itemsize <= 2:
        return hi.astype(np.float32), scalar
    return hi, scalar


def _int_input_parts(x) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(neg, magnitude modulo 2**64, magnitude >= 2**64, scalar) of integer input."""
    scalar = np.ndim(x) == 0
    if isinstance(x, int) and not isinstance(x, bool) and not -(1 << 63) <= x < (1 << 64):
        return (np.array(x < 0), np.array(_U(abs(x) % (1 << 64))), np.array(True), True)
    arr = np.asarray(x)
    if arr.dtype == object:
        arr = _int_array(arr, "integer input")
        neg = np.array([v < 0 for v in arr.flat], bool).reshape(arr.shape)
        mag = np.array([abs(int(v)) % (1 << 64) for v in arr.flat], _U).reshape(arr.shape)
        huge = np.array([abs(int(v)) >= 1 << 64 for v in arr.flat], bool).reshape(arr.shape)
        return neg, mag, huge, scalar
    if arr.dtype in _ML_INT_DTYPES or arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind == "u":
        return np.zeros(arr.shape, bool), arr.astype(_U), np.zeros(arr.shape, bool), scalar
    a = arr.astype(np.int64)
    neg = a < 0
    # 0 - x in uint64 is |x| for negative x, INT64_MIN included
    mag = np.where(neg, _U(0) - a.astype(_U), a.astype(_U))
    return neg, mag, np.zeros(arr.shape, bool), scalar


def _float_parts(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(neg, |r| modulo 2**64 as uint64, |r| >= 2**64) of finite integral floats ``r``."""
    neg = np.signbit(r)
    a = np.abs(r)
    two63 = r.dtype.type(2.0**63)
    small = a < two63
    mag = np.where(small, a, 0).astype(_U)  # exact: integral and below 2**63
    huge = a >= r.dtype.type(2.0**64)
    if not small.all():
        # |r| = M * 2**sh with an integer significand M < 2**P; M << sh modulo 2**64 is exact
        # uint64 arithmetic (bits shifted out are multiples of 2**64)
        idx = np.nonzero(~small)
        p = np.finfo(r.dtype).nmant + 1
        m, e = np.frexp(a[idx])
        sig = np.ldexp(m, p).astype(_U)
        sh = e.astype(np.int64) - p
        big = np.where(sh < 64, sig << np.minimum(sh, 63).astype(_U), _U(0))
        mag[idx] = big
    return neg, mag, huge


def to_int(
    x,
    fmt: IntFormat | str = "int8",
    rounding: Rounding | str = "nearest_even",
    *,
    overflow: IntOverflow | str = "saturate",
    rng: np.random.Generator | int | None = None,
    random_bits: int | None = None,
    flags: bool = False,
):
    """Convert real values to the integer format ``fmt`` (IEEE convertToInteger), rounding with
    any fpsim mode; returns an array of ``fmt.dtype`` (int8, uint8, int16, int32, ml_dtypes
    int4 / uint4), a NumPy scalar for scalar input.

    - ``rounding``: ``nearest_even`` (default), ``nearest_away``, ``toward_zero``, ``up``,
      ``down``, ``odd`` (truncate, then make the integer odd if that was inexact),
      ``stochastic`` (up with probability equal to the fractional part, from 64 random bits of
      ``rng``, or from ``random_bits`` of them as hardware does).
    - ``overflow``: ``saturate`` (clamp; NaN -> 0), ``wrap`` (modulo ``2**bits``, exact for
      every finite value; NaN and +-inf -> 0), or ``indefinite`` (every invalid case gives
      SoftFloat's x86 "integer indefinite": ``fmt.min`` for signed formats, ``fmt.max`` for
      unsigned).
    - ``flags=True`` returns ``(values, flags)``: INVALID for NaN, infinities and values whose
      rounded integer is out of range (whatever the policy then returns), else INEXACT when
      rounding changed the value, as SoftFloat's ``f32_to_i32(..., exact=true)``.

    Integer input is converted exactly (never inexact).

    >>> import fpsim
    >>> from fpsim.integer import to_int
    >>> to_int([2.5, 3.5, -2.5, 300.0, float("nan")], "int8")
    array([  2,   4,  -2, 127,   0], dtype=int8)
    >>> to_int([2.5, -2.5], "int8", "nearest_away").tolist()
    [3, -3]
    >>> to_int(300.0, "int8", overflow="wrap"), to_int(300.0, "int32", "up")
    (np.int8(44), np.int32(300))
    >>> v, f = to_int([0.5, 1e10], "int32", overflow="indefinite", flags=True)
    >>> v.tolist(), [fpsim.Flags(int(i)).name for i in f]
    ([0, -2147483648], ['INEXACT', 'INVALID'])
    """
    ifmt = get_int_format(fmt)
    mode = as_rounding(rounding)
    policy = as_int_overflow(overflow)
    random_bits = random_bits_of(random_bits, mode)
    if _rounded_by_numpy(x):
        raise ValueError("to_int: x mixes floats with integers that float64 cannot hold "
                         "(beyond 2**53), which NumPy's array of the list would round; pass "
                         "the integers apart, as Python ints or an integer array")
    want = bool(flags) or _flags.flags_active()
    work = _float_work(x)
    if work is None:
        neg, mag, huge, scalar = _int_input_parts(x)
        shape = neg.shape
        out, fl = _convert_parts(neg.reshape(-1), mag.reshape(-1), huge.reshape(-1),
                                 np.zeros(neg.size, bool), np.zeros(neg.size, bool), None,
                                 ifmt, policy)
    else:
        xa, scalar = work
        shape = xa.shape
        flat = np.ascontiguousarray(xa).reshape(-1)
        gen = default_rng(rng) if mode is Rounding.STOCHASTIC else None
        out = np.empty(flat.size, ifmt.dtype)
        fl = np.zeros(flat.size, np.uint8)
        for lo in range(0, flat.size, _CHUNK):
            hi = min(flat.size, lo + _CHUNK)
            _to_int_block(flat[lo:hi], out[lo:hi], fl[lo:hi] if want else None, ifmt, mode,
                          policy, gen, random_bits)
    res = _to_dtype(out, ifmt).reshape(shape)
    fl = fl.reshape(shape)
    if want and _flags.flags_active():
        _flags.record(fl, "to_int")
    if scalar:
        res, fl = res[()], fl[()]
    return (res, fl) if flags else res


def _to_int_block(x, out, fl, ifmt: IntFormat, mode, policy, gen, random_bits) -> None:
    """Convert one chunk of floats into ``out`` (fmt.dtype), flags into ``fl`` when given."""
    with np.errstate(invalid="ignore"):
        r = _integral(x, mode, gen, random_bits)
    # Valid results lie in [min, max]: compare with min and max + 1, powers of two that every
    # float dtype holds exactly (NaN compares false), so float -> int casts below are exact.
    dt = r.dtype.type
    top = dt(2.0 ** (ifmt.bits - 1 if ifmt.signed else ifmt.bits))
    ok = (r >= dt(ifmt.min)) & (r < top)
    if fl is not None:
        fl[...] = np.where(ok, (r != x).view(np.uint8), np.uint8(Flags.INVALID))  # 1 = INEXACT
    if ok.all():
        out[...] = r.astype(out.dtype)
        return
    if policy is IntOverflow.SATURATE:
        r = np.where(np.isnan(r), dt(0), r)
        # the largest integral float <= max: max itself when the dtype holds it (int32 in
        # float32 does not: 2**31 - 128 is used, and the elements above are fixed after)
        below = dt(ifmt.max) if int(dt(ifmt.max)) == ifmt.max else np.nextafter(top, dt(0))
        o = np.clip(r, dt(ifmt.min), below).astype(out.dtype)
        if int(below) != ifmt.max:
            o[r >= top] = ifmt.max
        out[...] = o
        return
    if policy is IntOverflow.INDEFINITE:
        o = np.where(ok, r, dt(0)).astype(out.dtype)
        o[~ok] = ifmt.min if ifmt.signed else ifmt.max
        out[...] = o
        return
    finite = np.isfinite(r)
    r = np.where(finite, r, dt(0))  # wrap: NaN and infinities give 0
    if float(np.abs(r).max()) < 2.0**63:
        v = r.astype(np.int64)
        out[...] = _to_dtype(_store(False, v.view(_U), ifmt), ifmt)  # two's complement bits
        return
    neg, mag, huge = _float_parts(r)
    neg &= r != 0  # -0 is zero
    v, _ = _convert_parts(neg, mag, huge, ~finite, ~finite, None, ifmt, policy)
    out[...] = _to_dtype(v, ifmt)


def _convert_parts(neg, mag, huge, nan, inf, inexact, ifmt: IntFormat, policy: IntOverflow):
    """Integers given as (sign, |v| mod 2**64, |v| >= 2**64) -> (fmt values as int64, flags)."""
    limit = np.where(neg, _U(-ifmt.min), _U(ifmt.max))
    in_range = ~huge & (mag <= limit) & ~nan
    if not ifmt.signed:
        in_range &= ~neg | (mag == 0)
    v = _store(neg, mag, ifmt)
    invalid = ~in_range
    if invalid.any():
        if policy is IntOverflow.SATURATE:
            bad = np.where(neg, ifmt.min, ifmt.max)
            bad = np.where(nan, 0, bad)
        elif policy is IntOverflow.WRAP:
            bad = np.where(nan | inf, 0, v)
        else:
            bad = np.full(v.shape, ifmt.min if ifmt.signed else ifmt.max)
        v = np.where(invalid, bad.astype(v.dtype), v)
    fl = np.where(invalid, np.uint8(Flags.INVALID), np.uint8(0))
    if inexact is not None:
        fl[in_range & inexact] = np.uint8(Flags.INEXACT)
    return v, fl


def round_to_integral(
    x,
    fmt: Format | str,
    rounding: Rounding | str = "nearest_even",
    *,
    exact: bool = False,
    overflow: Overflow | str = "inf",
    rng: np.random.Generator | int | None = None,
    random_bits: int | None = None,
    flags: bool = False,
):
    """IEEE 754 roundToIntegral of values of the float format ``fmt`` (TestFloat's
    ``roundToInt``): the integral value chosen by ``rounding``, as float64 values of ``fmt``.

    Zeros keep the sign of the operand (-0.4 -> -0.0), infinities stay, NaNs come back quiet
    and a signalling NaN raises INVALID. INEXACT is raised only with ``exact=True`` (IEEE's
    roundToIntegralExact). ``x`` must hold values of ``fmt`` (ValueError otherwise: round them
    first with :func:`fpsim.round`). In formats whose top binade is not all integers (fp6_e2m3:
    max 7.5) an integral result beyond ``fmt.max`` overflows as :func:`fpsim.round` does, with
    ``overflow`` ("inf" or "saturate").

    >>> from fpsim.integer import round_to_integral
    >>> round_to_integral([2.5, -0.5, 3.25], "fp16").tolist()
    [2.0, -0.0, 3.0]
    >>> round_to_integral([2.5, 0.25], "fp16", "odd").tolist()
    [3.0, 1.0]
    """
    ffmt = get_float_format(fmt)
    mode = as_rounding(rounding)
    ovf = as_overflow(overflow)
    random_bits = random_bits_of(random_bits, mode)
    hi, lo, scalar = as_float64(x)
    if _rounded_by_numpy(x) or (lo is not None and np.any(lo != 0)):
        raise ValueError(f"round_to_integral takes values of {ffmt.name}; some inputs are not "
                         "even float64 values: round them first with fpsim.round")
    hi = np.asarray(hi, dtype=np.float64)
    finite = np.isfinite(hi)
    xf = np.where(finite, hi, 0.0)
    if ffmt.mantissa_bits < 52 or ffmt.emin > -1022 or not ffmt.subnormals:
        # representability check without recording flags: a value of fmt rounds to itself
        rb = run_chunks(xf, policy_of(ffmt, Rounding.TOWARD_ZERO, Overflow.SATURATE))[0]
        same = rb.view(np.float64).reshape(xf.shape) == xf
        if not same.all():
            bad = xf[~same].flat[0]
            raise ValueError(f"round_to_integral takes values of {ffmt.name}; {bad!r} is not "
                             f"one: round the input first with fpsim.round(x, {ffmt.name!r})")
    gen = default_rng(rng) if mode is Rounding.STOCHASTIC else None
    r = _integral(xf, mode, gen, random_bits)
    r = np.where(r == 0, np.copysign(0.0, xf), r)  # IEEE: a zero result has x's sign
    r = np.where(finite, r, hi)  # NaNs (payload, signalling bit) and infinities unchanged
    # Through fpsim.round: exact for integral values of fmt; quiets NaNs (INVALID for sNaN),
    # handles the -0 of fnuz formats and the rare integral result beyond fmt.max.
    final_mode = Rounding.NEAREST_EVEN if mode is Rounding.STOCHASTIC else mode
    out, fl = _round(r, ffmt, final_mode, overflow=ovf, flags=True)
    out = np.asarray(out)
    fl = np.asarray(fl)
    if exact:
        extra = np.where(finite & (out != hi) & ((fl & np.uint8(Flags.INEXACT)) == 0),
                         np.uint8(Flags.INEXACT), np.uint8(0))
        if _flags.flags_active():
            _flags.record(extra, "round_to_integral")
        fl = fl | extra
    if scalar:
        out, fl = out[()], fl[()]
    return (out, fl) if flags else out


# --------------------------------------------------------------------------------------------
# Integer arithmetic
# --------------------------------------------------------------------------------------------

def _binary(a, b, fmt, overflow, op: str):
    ifmt = get_int_format(fmt)
    policy = as_int_overflow(overflow, _ARITH_POLICIES)
    aa = _int_array(a, f"operands of integer.{op}")
    bb = _int_array(b, f"operands of integer.{op}")
    _check_range(aa, ifmt.min, ifmt.max, f"operands of integer.{op}", ifmt.name)
    _check_range(bb, ifmt.min, ifmt.max, f"operands of integer.{op}", ifmt.name)
    scalar = aa.ndim == 0 and bb.ndim == 0
    # exact results: int64 holds sums and products of 32-bit operands; wider formats use
    # Python ints (object arrays)
    work = np.int64 if ifmt.bits <= 32 else object
    aa, bb = aa.astype(work), bb.astype(work)
    if op == "add":
        v = aa + bb
    elif op == "sub":
        v = aa - bb
    else:
        v = aa * bb
    out = _apply_policy(np.asarray(v), ifmt, policy)
    return out[()] if scalar else out


def add(a, b, fmt: IntFormat | str = "int8", overflow: IntOverflow | str = "saturate"):
    """``a + b`` in the integer format ``fmt``: the exact sum, then saturated or wrapped.

    Operands must be integers inside ``fmt``'s range (TypeError / ValueError otherwise);
    returns ``fmt.dtype`` values.

    >>> from fpsim import integer
    >>> integer.add([100, -100], [100, -100], "int8").tolist()
    [127, -128]
    >>> integer.add([100, -100], [100, -100], "int8", overflow="wrap").tolist()
    [-56, 56]
    """
    return _binary(a, b, fmt, overflow, "add")


def sub(a, b, fmt: IntFormat | str = "int8", overflow: IntOverflow | str = "saturate"):
    """``a - b`` in the integer format ``fmt``: the exact difference, saturated or wrapped.

    >>> from fpsim import integer
    >>> integer.sub([0, 3], [-128, 5], "int8").tolist(), integer.sub(3, 5, "uint8", "wrap")
    ([127, -2], np.uint8(254))
    """
    return _binary(a, b, fmt, overflow, "sub")


def mul(a, b, fmt: IntFormat | str = "int8", overflow: IntOverflow | str = "saturate"):
    """``a * b`` in the integer format ``fmt``: the exact product, saturated or wrapped.

    >>> from fpsim import integer
    >>> integer.mul([-128, 16], [-1, 16], "int8").tolist()
    [127, 127]
    >>> integer.mul([-128, 16], [-1, 16], "int8", "wrap").tolist()
    [-128, 0]
    """
    return _binary(a, b, fmt, overflow, "mul")


# --------------------------------------------------------------------------------------------
# dp4a and the int8 GEMM
# --------------------------------------------------------------------------------------------

def _int8_operand(x, what: str) -> np.ndarray:
    """int8 values (uint8 for unsigned 8-bit-or-narrower dtypes, as CUDA's u8 variants) as
    int64; ranges checked."""
    dt = as_array(x, what).dtype
    unsigned = (dt.kind == "u" and dt.itemsize == 1) or _ML_INT_DTYPES.get(dt, "").startswith("u")
    arr = _int_array(x, what)
    if unsigned:
        _check_range(arr, 0, 255, what, "uint8")
    else:
        _check_range(arr, -128, 127, what, "int8")
    return arr.astype(np.int64)


def _wrap(v: np.ndarray, fmt: IntFormat) -> np.ndarray:
    return _apply_policy(v, fmt, IntOverflow.WRAP)


def dp4a(a, b, c=0) -> np.ndarray:
    """CUDA ``__dp4a``: each group of 4 consecutive int8 products along the last axis is
    summed exactly and added to the int32 accumulator ``c``, wrapping modulo 2**32.

    ``a`` and ``b`` (same shape ``(..., 4k)``; int8 values, uint8 arrays as the unsigned
    variants) give an int32 result of shape ``(..., k)``; ``c`` broadcasts to it.

    >>> from fpsim import integer
    >>> integer.dp4a([1, 2, 3, 4, 127, 127, 127, 127], [1, 1, 1, 1, 127, 127, 127, 127], 10)
    array([   20, 64526], dtype=int32)
    >>> int(integer.dp4a([127] * 4, [127] * 4, 2**31 - 1)[0]), 2**31 - 1 + 4 * 127**2 - 2**32
    (-2147419133, -2147419133)
    """
    A = _int8_operand(a, "dp4a operands")
    B = _int8_operand(b, "dp4a operands")
    if A.shape != B.shape:
        raise ValueError(f"dp4a operands need the same shape, got {A.shape} and {B.shape}")
    if A.ndim == 0 or A.shape[-1] % 4:
        raise ValueError(f"dp4a needs a last axis that is a multiple of 4, got shape {A.shape}")
    C = _int_array(c, "dp4a accumulator")
    _check_range(C, -(1 << 31), (1 << 31) - 1, "dp4a accumulator", "int32")
    out_shape = A.shape[:-1] + (A.shape[-1] // 4,)
    try:
        fits = np.broadcast_shapes(C.shape, out_shape) == out_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"dp4a: c of shape {C.shape} does not broadcast to the result shape "
                         f"{out_shape} (a's shape with its last axis divided by 4)")
    groups = (A * B).reshape(out_shape + (4,)).sum(axis=-1)
    # int64 is exact (|sum| < 2**17 + 2**31); wrapping the exact sum once equals wrapping it
    # after every addition (reduction modulo 2**32 is a ring homomorphism)
    return _wrap(groups + C.astype(np.int64), get_int_format("int32"))


def int8_matmul(
    A,
    B,
    C=None,
    *,
    accumulate: IntFormat | str = "int32",
    overflow: IntOverflow | str = "wrap",
) -> np.ndarray:
    """``A @ B (+ C)`` for int8 matrices with int32 accumulation, as tensor-core IMMA and
    ``cublasGemmEx(CUDA_R_8I, CUDA_R_32I)`` compute it; NumPy matmul shapes (batches
    broadcast), result in the accumulator's dtype.

    - ``overflow="wrap"`` (default, what IMMA does): the result modulo 2**32.
    - ``overflow="saturate"`` (what saturating dot-product instructions such as x86
      ``VPDPBUSDS`` do): the accumulator, starting at ``C``, adds the exact sum of each group
      of 4 consecutive products along K and is clamped after every group.
    - ``accumulate``: the accumulator format (int32, or e.g. int16 to study narrow ones).

    Operands hold int8 values (uint8 arrays are read as unsigned, as the u8 IMMA variants).

    >>> import numpy as np
    >>> from fpsim import integer
    >>> A = np.full((1, 8), 127, np.int8); B = np.full((8, 1), 127, np.int8)
    >>> C = np.array([[2**31 - 2**16]])
    >>> int(integer.int8_matmul(A, B, C)[0, 0]), 2**31 - 2**16 + 8 * 127**2 - 2**32
    (-2147420152, -2147420152)
    >>> int(integer.int8_matmul(A, B, C, overflow="saturate")[0, 0])
    2147483647
    """
    acc = get_int_format(accumulate)
    policy = as_int_overflow(overflow, _ARITH_POLICIES)
    if acc.bits > 62:
        raise ValueError(f"accumulate must be at most 62 bits wide, got {acc.name}")
    a = _int8_operand(A, "int8_matmul operands")
    b = _int8_operand(B, "int8_matmul operands")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("int8_matmul needs arrays of at least one dimension")
    amax = int(np.abs(a).max()) if a.size else 0
    bmax = int(np.abs(b).max()) if b.size else 0
    c = None
    if C is not None:
        c = _int_array(C, "int8_matmul accumulator C")
        _check_range(c, acc.min, acc.max, "int8_matmul accumulator C", acc.name)
        c = c.astype(np.int64)
    exact = _exact_matmul(a, b, amax * bmax)
    if c is not None:
        exact = exact + c
    if policy is IntOverflow.WRAP:
        # Wrapping the exact int64 sum once equals wrapping after every addition, because
        # reduction modulo 2**bits is a ring homomorphism: wrap(wrap(s) + t) == wrap(s + t).
        return _wrap(exact, acc)
    k = a.shape[-1]
    cmax = int(np.abs(c).max()) if c is not None and c.size else 0
    if cmax + k * amax * bmax <= acc.max:
        return _to_dtype(exact, acc)  # no partial sum can leave the range: nothing saturates
    return _to_dtype(_saturating_matmul(a, b, c, acc), acc)


def _exact_matmul(a: np.ndarray, b: np.ndarray, maxprod: int) -> np.ndarray:
    """Exact ``a @ b`` of small integers as int64, through float32 BLAS in chunks over K.

    Every product and partial sum of a chunk of ``kc`` terms is an integer of magnitude at most
    ``kc * maxprod <= 2**24``, which float32 represents exactly, so the BLAS result is exact in
    any summation order; the chunks are added in int64 (no overflow below K ~ 2**47).
    """
    kc = max(1, (1 << 24) // max(1, maxprod))
    k = a.shape[-1]
    af = a.astype(np.float32)
    bf = b.astype(np.float32)
    if k <= kc:
        return np.matmul(af, bf).astype(np.int64)
    total = None
    for k0 in range(0, k, kc):
        part = np.matmul(af[..., k0:k0 + kc], bf[k0:k0 + kc] if bf.ndim == 1
                         else bf[..., k0:k0 + kc, :]).astype(np.int64)
        total = part if total is None else total + part
    return total


def _saturating_matmul(a, b, c, acc: IntFormat) -> np.ndarray:
    """Clamp after each group of 4 products along K (the last group zero-padded), in order."""
    k = a.shape[-1]
    af = a.astype(np.float32)
    bf = b.astype(np.float32)
    total = None
    for k0 in range(0, k, 4):
        bs = bf[k0:k0 + 4] if bf.ndim == 1 else bf[..., k0:k0 + 4, :]
        # |part| <= 4 * 255**2 < 2**24: exact in float32
        part = np.matmul(af[..., k0:k0 + 4], bs).astype(np.int64)
        if total is None:
            total = part if c is None else part + c
        else:
            total = total + part
        np.clip(total, acc.min, acc.max, out=total)
    if total is None:  # K == 0
        shape = np.matmul(a.astype(np.float32), b.astype(np.float32)).shape
        total = np.zeros(shape, np.int64) if c is None else np.broadcast_to(c, shape)
    return total
