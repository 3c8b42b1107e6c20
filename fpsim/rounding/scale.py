"""Power-of-two block scales: the E8M0 shared exponent of a block from its largest magnitude,
in each rule the OCP MX spec and its implementations use (internal API: :mod:`fpsim.mx`,
whose :func:`fpsim.mx.e8m0_exponent` names the format and mode; issue 35 item 2).

The four rules (``mode``; :class:`fpsim.mx.ScaleMode` has the same values):

- ``"floor"``: ``floor(log2(amax)) - elem_emax`` (OCP MX v1.0, section 6.3);
- ``"ceil"``: ``ceil(log2(amax)) - elem_emax``;
- ``"even"``: amax rounded to ``elem_mbits`` fraction bits, half away from zero on its bit
  pattern, then the floor (torchao's EVEN);
- ``"rceil"``: ``ceil(log2(amax / elem_max))`` with the division rounded in amax's dtype
  (float32 for the hardware rule: cvt.rp.satfinite.ue8m0x2.f32).

Results are clamped to [-127, 128]; 128 marks the NaN scale (a NaN amax, or beyond the
largest scale); an infinite amax reads as 2**128, its exponent field (rceil: satfinite, 127);
a zero amax gives -127, the smallest scale. tests/test_rounding_scale.py checks each rule
against exact Fractions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["E8M0_BIAS", "SCALE_MODES", "SCALE_NAN", "e8m0_exponent"]

E8M0_BIAS = 127  # E8M0 value = 2**(code - 127), codes 0..254 (spec section 5.4.1)
SCALE_MODES = ("floor", "ceil", "even", "rceil")
SCALE_NAN = E8M0_BIAS + 1  # the shared exponent that marks the NaN scale (code 255)


def e8m0_exponent(amax: np.ndarray, elem_emax: int, elem_mbits: int, elem_max: float,
                  mode: str) -> np.ndarray:
    """The shared exponent ``s`` (int32, in [-127, 128]; 128 marks the NaN scale) of blocks with
    largest magnitudes ``amax`` (float32 or float64, >= 0 or NaN), for elements whose largest
    binade is ``2**elem_emax``, with ``elem_mbits`` fraction bits and largest value
    ``elem_max``, by the rule ``mode`` (one of :data:`SCALE_MODES`).

    >>> import numpy as np
    >>> [int(e8m0_exponent(np.array([a]), 8, 3, 448.0, m)[0])  # e4m3 elements
    ...  for a in (448.0, 500.0) for m in ("floor", "ceil")]
    [0, 1, 0, 1]
    """
    if mode not in SCALE_MODES:  # an unknown name must not read as "floor"
        raise ValueError(f"unknown scale mode {mode!r}; valid: {', '.join(SCALE_MODES)}")
    amax = np.asarray(amax)
    if amax.ndim == 0:  # frexp of a 0-d array gives scalars; the in-place fixes need arrays
        return e8m0_exponent(amax.reshape(1), elem_emax, elem_mbits, elem_max,
                             mode).reshape(())
    m, k = np.frexp(amax)  # amax = m * 2**k, m in [0.5, 1): floor(log2 amax) = k - 1
    k = k.astype(np.int32)
    # finite nonzero blocks are the rule: the zero / inf / NaN fixes run only when needed
    special = not bool(amax.all() and np.isfinite(amax).all())  # amax >= 0: zero, inf, NaN
    if mode == "rceil":
        elem_max = amax.dtype.type(elem_max)
        with np.errstate(over="ignore", invalid="ignore"):
            descale = (amax / elem_max).astype(amax.dtype)  # rounded, as the hardware does
        dm, dk = np.frexp(descale)
        e = dk.astype(np.int32) - (dm == 0.5)  # ceil(log2(descale))
        # a tiny nonzero amax can give descale 0 too (amax / elem_max below float32's range)
        if special or not bool((descale > 0).all() and (descale < np.inf).all()):
            e[descale == 0] = -E8M0_BIAS
            e[np.isinf(descale)] = E8M0_BIAS  # satfinite: inf -> code 254
        np.maximum(e, -E8M0_BIAS, out=e)
        np.minimum(e, E8M0_BIAS, out=e)
        if special:
            e[np.isnan(descale)] = SCALE_NAN
        return e
    e = k - 1
    if mode == "ceil":
        e = e + (m != 0.5)
    elif mode == "even":
        # torchao adds half a unit of the element's last mantissa place to the bit pattern of
        # amax and truncates: the exponent moves up iff 2m >= 2 - 2**-(mbits + 1).
        e = e + (2 * m >= 2 - 2.0 ** -(elem_mbits + 1))
    e = e.astype(np.int32, copy=False)
    if special:
        e[amax == 0] = -E8M0_BIAS - 1
        e[np.isinf(amax)] = SCALE_NAN  # the exponent field of inf: 2**128
    e -= elem_emax
    np.maximum(e, -E8M0_BIAS, out=e)
    np.minimum(e, SCALE_NAN, out=e)
    if special:
        e[np.isnan(amax)] = SCALE_NAN
    return e
