"""Exact rounding of numbers float64 cannot hold: Python ints of any size, Fractions,
Decimals (and decimal strings), and object arrays of them, each rounded once from its exact
value (:func:`round_rational`, :func:`as_rational`, :func:`round_objects_with`).

Contract: a value is split exactly into ``(neg, sig, e_top)`` (a 62-bit significand with a
sticky bit) and rounded by :func:`fpsim.rounding.kernel.round_scaled`; no value goes through
a float64 first. Far Decimals (beyond 10**+-1000) are replaced by a power of two on the same
side, which rounds the same in every mode.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np

from .. import flags as _flags
from ..formats import Format
from ..modes import Overflow, Rounding, Subnormals, Tininess
from . import kernel
from .convert import ML_FLOAT_KINDS, finish, widen
from .fast import round_patterns
from .kernel import EXP_MASK, ONE, QUIET, SIGN, TOP, ZERO, kernel_params, round_scaled
from .policy import RoundingPolicy, policy_of

_U = np.uint64


def _split_rational(x: Fraction) -> tuple[int, int, int]:
    """A Fraction (or int) to (neg, sig, e_top) of :func:`round_scaled`, exactly."""
    return _split_ratio(x.numerator, x.denominator)


def _split_ratio(n: int, d: int) -> tuple[int, int, int]:
    """n / d (Python ints, d > 0) to (neg, sig, e_top) of :func:`round_scaled`, exactly.
    Object arrays call this per element: int operations only, no Fraction arithmetic."""
    neg = int(n < 0)
    n = -n if neg else n
    if n == 0:
        return neg, 0, 0
    e = n.bit_length() - d.bit_length()  # 2**(e-1) < n/d < 2**(e+1)
    if (n < (d << e)) if e >= 0 else ((n << -e) < d):
        e -= 1  # now 2**e <= n/d < 2**(e+1)
    sh = TOP - e
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
    """A finite Decimal to (neg, sig, e_top) of :func:`round_scaled`: exact, except that
    beyond 10**+-1000 a power of two on the same side stands in, which rounds the same in
    every mode (values, flags, stochastic draws): Decimal('1e-999999999') must not build a
    billion-digit integer."""
    neg = int(d.is_signed())  # keeps the sign of -0
    if d and abs(d.adjusted()) > _DECIMAL_FAR:
        return neg, 1 << TOP, _FAR_E_TOP if d.adjusted() > 0 else -_FAR_E_TOP
    return (neg,) + _split_ratio(*d.as_integer_ratio())[1:]


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


def round_exact(x, pol: RoundingPolicy, want: bool):
    """One exact number rounded once: (patterns of shape (1,), flags or None)."""
    x = _decimal_of(x) if isinstance(x, str) else x
    gen = pol.generator()
    if isinstance(x, Decimal) and x.is_finite():  # split without a Fraction (far exponents)
        neg, sig, e_top = _split_decimal(x)
    else:
        v, neg = as_rational(x)  # neg holds the sign of a zero
        if isinstance(v, float):  # inf, NaN: the float64 kernel
            return round_patterns(np.array([v]).view(np.uint64), kernel_params(pol.fmt), pol,
                                  gen, want)
        _, sig, e_top = _split_rational(v)
    return round_scaled(np.array([neg], _U), np.array([sig], _U),
                        np.array([e_top], np.int64), pol, gen, want)


# -- object arrays: exact numbers element by element ------------------------------------------

_OBJECT_ELEMENTS = ("int, float, fractions.Fraction, decimal.Decimal or NumPy real scalars "
                    "(None, strings and complex numbers are not real numbers)")


def _object_element(v):
    """An object-array element other than a Fraction or Python int, read exactly: (neg, sig,
    e_top) of :func:`round_scaled`, or a float64 for the float kernel (floats keep their
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
    if kind in "f" + ML_FLOAT_KINDS:
        try:
            return widen(np.asarray(v).reshape(1))[0]  # exact, sNaN kept
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


def round_objects(flat: np.ndarray, shape: tuple, pol: RoundingPolicy, want: bool, name: str):
    """A flat object array rounded once per element, exactly as its elements are as scalars
    (Fractions, Decimals and ints of any size through :func:`round_scaled`, floats through the
    float64 kernel), chunk by chunk. Returns (float64 patterns, flags or None, the mask of
    signalling-NaN elements or None)."""
    step = kernel.CHUNK  # read per call: tests shrink it
    p = kernel_params(pol.fmt)
    n = flat.size
    out = np.empty(n, dtype=np.uint64)
    fl = np.empty(n, dtype=np.uint8) if want else None
    snan = None
    gen = pol.generator()  # once per call: every chunk draws from it
    for lo in range(0, n, step):
        exact_at, parts, float_at, floats = [], [], [], []
        for i, v in enumerate(flat[lo:lo + step], lo):  # per element: Python numbers
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
            r, f = round_scaled(neg, sig, e_top, pol, gen, want)
            out[exact_at] = r
            if want:
                fl[exact_at] = f
        if floats:
            b = np.array(floats, dtype=np.float64).view(np.uint64)  # copies the patterns
            r, f = round_patterns(b, p, pol, gen, want)
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
    out, fl, snan = round_objects(arr.reshape(-1), arr.shape, policy, want, name)
    out = out.view(np.float64).reshape(arr.shape)
    return (out, None if fl is None else fl.reshape(arr.shape),
            None if snan is None else snan.reshape(arr.shape))


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
    out, fl = round_exact(x, pol, bool(flags) or _flags.flags_active())
    return finish(out, fl, (), True, bool(flags), "round")
