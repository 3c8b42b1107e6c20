"""The chunked drivers: arrays of float16 / float32 / float64 (:func:`run_chunks`), of
long double and 64-bit integers (:func:`run_wide`) rounded block by block, each block by a
fast path or the general kernel.

Contract: the peak memory is the input, the output and one block of ``kernel.CHUNK``
elements; the result does not depend on the block size (tests shrink it). Internal API
(fpsim.integer calls :func:`run_chunks`).
"""

from __future__ import annotations

import numpy as np

from . import kernel
from .convert import refuse_nan, widen
from .fast import float32_path, round_patterns, run_float32, store_values
from .kernel import (
    ONE,
    ZERO,
    check_pair,
    kernel_params,
    odd_from_pair,
    round_scaled,
    split_longdouble,
    split_uint,
)
from .policy import RoundingPolicy, without_daz

_U = np.uint64
_F32 = np.dtype(np.float32)


def run_chunks(x64: np.ndarray, policy: RoundingPolicy, want: bool = False,
               store: np.dtype | None = None, pair_lo: np.ndarray | None = None):
    """Round float16/32/64 ``x64`` by ``policy`` chunk by chunk (internal API, for
    :mod:`fpsim.integer` too): returns (float64 patterns, or values in the ``store`` dtype
    when given, so no full-size float64 temporary exists; flags when ``want``, else None).
    With ``pair_lo`` (float64, flat) the values are the checked pairs ``x64 + pair_lo``, taken
    to 53 bits with round-to-odd chunk by chunk (:func:`round_pair`): exact values, which
    DAZ does not read as zero (it applies to the operands they came from).

    >>> from fpsim.rounding import policy_of
    >>> r, f = run_chunks(np.array([1/3]), policy_of("bf16", "up"))
    >>> r.view(np.float64).tolist(), f
    ([0.333984375], None)
    """
    step = kernel.CHUNK  # read per call: tests shrink it
    if pair_lo is not None:
        policy = without_daz(policy)
    fmt = policy.fmt
    p = kernel_params(fmt)
    flat = np.ascontiguousarray(x64).reshape(-1)
    n = flat.size
    out = np.empty(n, dtype=np.uint64 if store is None else store)
    fl = np.empty(n, dtype=np.uint8) if want else None
    narrow = flat.dtype != np.float64  # float16/32 input: widen chunk by chunk (exact)
    bits = flat if narrow else flat.view(np.uint64)
    gen = policy.generator()  # once per call: every chunk draws from it
    if flat.dtype == _F32 and pair_lo is None and not want and float32_path(policy):
        # the registry's float32 rows (stochastic: gen's draws)
        run_float32(flat, out, p, policy, store, gen)
        return out, fl
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        if narrow:
            chunk = widen(bits[lo:hi]).view(np.uint64)
        elif pair_lo is not None:
            h, low = flat[lo:hi], pair_lo[lo:hi]
            check_pair(h, low, lo)
            chunk = odd_from_pair(h, low).view(np.uint64)
        else:
            chunk = bits[lo:hi]
        r, f = round_patterns(chunk, p, policy, gen, want)
        if store is None:
            out[lo:hi] = r
        else:  # exact: the format's values are values of its storage dtype
            v = r.view(np.float64)
            refuse_nan(v, fmt)
            out[lo:hi] = store_values(v, store, fmt)
        if want:
            fl[lo:hi] = f
    return out, fl


def run_wide(x: np.ndarray, hi: np.ndarray, policy: RoundingPolicy, want: bool = False):
    """:func:`run_chunks` for long double and 64-bit integer arrays (``hi`` their nearest float64):
    each value is split exactly into a significand and an exponent and rounded once."""
    step = kernel.CHUNK  # read per call: tests shrink it
    p = kernel_params(policy.fmt)
    flat = np.ascontiguousarray(x).reshape(-1)
    hflat = np.ascontiguousarray(hi, dtype=np.float64).reshape(-1)
    n = flat.size
    out = np.empty(n, dtype=np.uint64)
    fl = np.empty(n, dtype=np.uint8) if want else None
    gen = policy.generator()  # once per call: every chunk draws from it
    for lo in range(0, n, step):
        c = flat[lo:lo + step]
        if c.dtype.kind == "f":
            fin = np.isfinite(c)
            neg, sig, e_top = split_longdouble(np.where(fin, c, 0))
            neg = np.signbit(c).astype(_U)
        else:
            fin = None
            neg = (c < 0).astype(_U)
            u = c.astype(np.uint64)  # two's complement: -u is the magnitude of a negative
            sig, e_top = split_uint(np.where(neg == ONE, ZERO - u, u))
        r, f = round_scaled(neg, sig, e_top, policy, gen, want)
        if fin is not None and not fin.all():  # inf and NaN (payload kept): the float64 path
            bad = np.nonzero(~fin)
            rb, fb = round_patterns(hflat[lo:lo + step][bad].view(np.uint64), p, policy, gen,
                                    want)
            r[bad] = rb
            if want:
                f[bad] = fb
        out[lo:lo + step] = r
        if want:
            fl[lo:lo + step] = f
    return out, fl
