"""The public rounding entry points :func:`round`, :func:`cast` and the internal
:func:`round_with`: input conversion, then the fast paths of their domain or the chunked
kernel, then the result in the caller's shape (float64 values, or the format's storage dtype).

Contract: one correct rounding per element, equal to the general kernel bit for bit
whichever path runs; flags are computed only when asked for or recorded by an active flag
context.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np

from .. import flags as _flags
from ..flags import Flags
from ..formats import Format
from ..modes import Overflow, Rounding, Subnormals, Tininess
from .chunks import run_chunks, run_wide
from .convert import as_float64, finish, listed, refuse_nan, via_float32
from .exact import round_exact, round_objects
from .fast import array_path
from .kernel import QUIET, ZERO, kernel_params
from .policy import RoundingPolicy, policy_of


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
    return finish(*_round_core(x, pol, want, None), bool(flags), "round")


def round_with(x, policy: RoundingPolicy, want: bool = False):
    """Internal API of the layers above (arithmetic, reductions): :func:`round` by a parsed
    policy. Returns ``(values, flags)``, the flags computed when ``want`` (else None) and not
    recorded in the flag contexts: the caller records what its operation raised.

    >>> v, f = round_with(1/3, policy_of("bf16", "up"))
    >>> float(v), f
    (0.333984375, None)
    """
    return finish(*_round_core(x, policy, want, None), True, None)


def _round_core(x, pol: RoundingPolicy, want: bool, store):
    """:func:`round` by a parsed policy: (patterns, flags or None, shape, scalar) for
    :func:`finish`; with a ``store`` dtype, the common path writes its values straight into
    an array of that dtype (:func:`cast`), others return float64 patterns."""
    fmt = pol.fmt
    if isinstance(x, np.ndarray) and x.ndim > 0 and not want:  # a whole-array fast path?
        row = array_path(pol, x.dtype, store is not None)
        if row is not None and x.size >= row.min_size:
            out = row.function(x, fmt, store)
            if out is not None:  # (None: the path declines, e.g. the byte table on NaN)
                return out, None, x.shape, False
    if isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float16):
        hi, lo, scalar = x, None, x.ndim == 0  # widened to float64 chunk by chunk in run_chunks
    elif isinstance(x, (Fraction, Decimal)) or (
            isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 1 << 53):
        out, fl = round_exact(x, pol, want)
        return out, fl, (), True
    else:
        x = listed(x)
        if isinstance(x, np.ndarray) and x.dtype == object:
            out, fl, _ = round_objects(x.reshape(-1), x.shape, pol, want, "x")
            return out, fl, x.shape, x.ndim == 0
        hi, lo, scalar = as_float64(x)
    if lo is not None:  # long double, or 64-bit integers beyond 2**53: exact, chunked
        out, fl = run_wide(np.asarray(x), hi, pol, want)
        return out, fl, np.shape(hi), scalar
    p = kernel_params(fmt)
    if p.identity and not pol.daz and not pol.flush:
        out = np.array(hi, dtype=np.float64, copy=True)  # exact widening
        fl = np.zeros(out.shape, np.uint8) if want else None
        if want:
            snan = np.isnan(out) & ((out.view(np.uint64) & QUIET) == ZERO)
            fl[snan] = np.uint8(Flags.INVALID)
        return out.view(np.uint64), fl, out.shape, scalar
    out, fl = run_chunks(hi, pol, want, store)
    return out, fl, np.shape(hi), scalar


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
    out = finish(*_round_core(x, pol, want, store), flags, "round")
    values = np.asarray(out[0] if flags else out)
    if values.dtype != store:  # the other paths (scalars, long double, wide ints, fp64)
        refuse_nan(values, fmt)
        values = via_float32(values, store).astype(store)
    return (values, out[1]) if flags else values
