"""The block-scaled GEMM: ``C = A @ B`` from MX / NVFP4 operands, under named accumulation models.

The OCP MX v1.0 dot product of two blocks (section 6.2) is ``X_a * X_b * sum_i(P_a,i * P_b,i)``,
the sum taken "at an implementation-defined precision" (at least fp32 in practice); a GEMM
adds the blocks along K. :func:`matmul` takes ``qa`` blocked along its columns (M x K,
``axis=1``) and ``qb`` along its rows (K x N, ``axis=0``), with the same block size, and
computes one of:

- ``"exact"``: every block dot exactly (integer-valued float64 GEMMs whose sums stay below
  2**53), scaled exactly, and the sum over blocks rounded once to float64 (``math.fsum`` per
  output: a reference for small shapes, a Python loop over outputs). Returns float64.
- ``"fp32"``: each block's exact dot times its scales rounded once to fp32 (nearest even), the
  blocks added in fp32 in ascending k. Returns float32 values (as float64).
- a :class:`fpsim.tensorcore.BlockFMA` or a GPU name of :func:`fpsim.tensorcore.list_gpus`: the
  elements go through fpsim's block-FMA tensor-core model (products aligned to the largest
  exponent, truncated, rounded once per unit block) with the scale product applied to each MX
  block's result: ``D_b = X_ab * unit(P_a,b, P_b,b, D_(b-1) / X_ab)``, exact power-of-two
  scaling while ``D / X_ab`` stays inside fp32's range. MX formats only (NVFP4's e4m3 scales
  are not powers of two).

NVFP4 per-tensor scales multiply the fp32 result at the end (fp32 multiply of
``per_tensor_scale_a * per_tensor_scale_b``, as cuBLAS applies ``alpha``; exact mode: exactly).

Unmeasured on hardware: how Blackwell's ``tcgen05.mma`` block-scaled kinds (and AMD CDNA 4's
MX instructions) align and truncate products inside a block, where they apply the scales, and
how they round between blocks; the "fp32" and unit models are plausible, not measured.
"""

from __future__ import annotations

import math

import numpy as np

from ..formats import FP8_E4M3, FP8_E5M2, FP16, Format
from ..rounding import round_pair
from ..rounding.eft import two_sum
from .formats import MXINT8_FRACTION_BITS
from .quantize import MXArray

__all__ = ["matmul", "block_dots"]

_EXACT_LIMIT = 53  # bits an integer-valued float64 sum may reach and stay exact


def _int_parts(q: MXArray) -> tuple[np.ndarray, int, int]:
    """(elements as integer-valued float64, fraction bits f with P = I * 2**-f, bits of |I|)."""
    p = q.element_values().astype(np.float64)
    if q.fmt.is_int:
        f = MXINT8_FRACTION_BITS
    else:
        el = q.fmt.element
        f = el.mantissa_bits - el.emin  # the smallest subnormal is 2**-f
    i = np.ldexp(p, f)
    i[np.isnan(i)] = 0  # NaN elements sit in NaN-scale blocks; the scale carries the NaN
    bits = int(math.ceil(math.log2(q.fmt.elem_max * 2.0**f + 1)))
    return i, f, bits


def _check(qa: MXArray, qb: MXArray) -> int:
    for name, q in (("qa", qa), ("qb", qb)):
        if not isinstance(q, MXArray):
            raise TypeError(f"matmul: {name} must be an MXArray from fpsim.mx.quantize, got "
                            f"{type(q).__name__}")
        if len(q.shape) != 2:
            raise ValueError(f"matmul: {name} must be 2-D, got shape {q.shape}")
    if qa.axis != 1:
        raise ValueError("matmul: qa must be blocked along K, its columns: quantize(a, fmt, "
                         "axis=1)")
    if qb.axis != 0:
        raise ValueError("matmul: qb must be blocked along K, its rows: quantize(b, fmt, "
                         "axis=0)")
    if qa.shape[1] != qb.shape[0]:
        raise ValueError(f"matmul: inner dimensions differ: qa is {qa.shape[0]} x "
                         f"{qa.shape[1]}, qb is {qb.shape[0]} x {qb.shape[1]}")
    if qa.block_size != qb.block_size:
        raise ValueError(f"matmul: block sizes differ ({qa.block_size} and {qb.block_size}); "
                         "the blocks of both operands must cover the same k")
    if (qa.fmt.scale == "e4m3") != (qb.fmt.scale == "e4m3"):
        raise ValueError("matmul: NVFP4 multiplies only with NVFP4 (e4m3 block scales)")
    return qa.block_size


def block_dots(qa: MXArray, qb: MXArray) -> tuple[np.ndarray, np.ndarray]:
    """Every block's element dot ``sum_i P_a,i * P_b,i`` exactly, unscaled: a float64 pair
    (hi, lo) of shape (blocks, M, N) with hi + lo the exact value (hi the nearest float64).

    >>> import numpy as np, fpsim.mx as mx
    >>> a = mx.quantize(np.ones((1, 32)), "mxfp8_e4m3", axis=1)
    >>> b = mx.quantize(np.full((32, 1), 3.0), "mxfp8_e4m3", axis=0)
    >>> [float(v[0, 0, 0]) for v in mx.block_dots(a, b)]  # 32 * (256 * 384)
    [3145728.0, 0.0]
    """
    bs = _check(qa, qb)
    ia, fa, ba = _int_parts(qa)
    ib, fb, bb = _int_parts(qb)
    m, n = qa.shape[0], qb.shape[1]
    nb = qa.scales.shape[1]
    ia = ia.reshape(m, nb, bs).transpose(1, 0, 2)  # (blocks, M, bs)
    ib = ib.reshape(nb, bs, n)  # (blocks, bs, N)
    grow = int(math.ceil(math.log2(bs))) if bs > 1 else 0
    if ba + bb + grow <= _EXACT_LIMIT:
        hi = np.matmul(ia, ib)  # integer sums below 2**53: exact in any order
        lo = np.zeros_like(hi)
    else:
        c = _EXACT_LIMIT - bb - grow  # split qa's integers into c-bit halves
        if c < 1 or ba - c > c:
            raise ValueError(f"matmul: blocks of {bs} {qa.fmt.name} x {qb.fmt.name} products "
                             "exceed the exact float64 range of this model; use block_size "
                             "<= 32")
        top = np.floor(np.ldexp(ia, -c))
        low = ia - np.ldexp(top, c)
        hi, lo = two_sum(np.ldexp(np.matmul(top, ib), c), np.matmul(low, ib))
    return np.ldexp(hi, -(fa + fb)), np.ldexp(lo, -(fa + fb))


def _scales(qa: MXArray, qb: MXArray) -> tuple[np.ndarray, bool]:
    """Per-block scale products, (blocks, M, N) float64 (exact), and whether they are powers
    of two (MX) rather than e4m3 products (NVFP4)."""
    sa = qa.scales.astype(np.float64).T[:, :, None]  # (blocks, M, 1)
    sb = qb.scales.astype(np.float64)[:, None, :]  # (blocks, 1, N)
    return sa * sb, qa.fmt.scale == "e8m0"


def _global(qa: MXArray, qb: MXArray) -> float | None:
    if qa.per_tensor_scale is None and qb.per_tensor_scale is None:
        return None
    ga = 1.0 if qa.per_tensor_scale is None else qa.per_tensor_scale
    gb = 1.0 if qb.per_tensor_scale is None else qb.per_tensor_scale
    return ga * gb  # two fp32 values: the product is exact in float64


def _veltkamp(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = a * 134217729.0  # 2**27 + 1
    h = c - (c - a)
    return h, a - h


def _two_prod(a: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """a * b = p + e exactly (Dekker, without FMA)."""
    p = a * b
    ah, al = _veltkamp(a)
    bh, bl = _veltkamp(np.float64(b))
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _unit_input_format(qa: MXArray, qb: MXArray) -> Format:
    """The narrowest tensor-core input format holding both operands' element values exactly
    (the block-FMA model depends only on the exact products)."""
    els = {q.fmt.element.name for q in (qa, qb) if not q.fmt.is_int}
    ints = qa.fmt.is_int or qb.fmt.is_int
    within_e4m3 = {"fp8_e4m3", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1"}
    if not ints and els <= within_e4m3:
        return FP8_E4M3
    if not ints and els == {"fp8_e5m2"}:
        return FP8_E5M2
    return FP16


def matmul(qa: MXArray, qb: MXArray, accumulate="fp32") -> np.ndarray:
    """``A @ B`` of block-scaled operands (``qa`` M x K blocked on axis 1, ``qb`` K x N blocked
    on axis 0) under the accumulation model ``accumulate``: "exact", "fp32", or a tensor-core
    unit (:class:`fpsim.tensorcore.BlockFMA` or a GPU name). Returns an M x N float64 array.

    >>> import numpy as np, fpsim.mx as mx
    >>> a = np.array([[1.0] * 32 + [2.0**-25] * 32])  # two blocks: 32 and 2**-20
    >>> b = np.ones((64, 1))
    >>> qa, qb = mx.quantize(a, "mxfp8_e4m3", axis=1), mx.quantize(b, "mxfp8_e4m3", axis=0)
    >>> float(mx.matmul(qa, qb, "exact")[0, 0]) == 32 + 2.0**-20
    True
    >>> float(mx.matmul(qa, qb, "fp32")[0, 0])  # fp32's half ulp at 32 is 2**-19
    32.0
    """
    _check(qa, qb)
    m, n = qa.shape[0], qb.shape[1]
    if isinstance(accumulate, str) and accumulate in ("exact", "fp32"):
        hi, lo = block_dots(qa, qb)
        x, _ = _scales(qa, qb)
        nan = np.isnan(x)
        g = _global(qa, qb)
        if accumulate == "fp32":
            with np.errstate(invalid="ignore", over="ignore"):
                # exact: a power-of-two scaling (MX), or an e4m3 x e4m3 product (8 bits) times
                # an NVFP4 block sum of a few bits (lo = 0 there)
                vh, vl = hi * x, lo * x
                vals = np.asarray(round_pair(np.where(nan, 0, vh), np.where(nan, 0, vl),
                                             "fp32"), dtype=np.float32)
            vals[nan] = np.nan
            acc = np.zeros((m, n), np.float32)
            for b in range(vals.shape[0]):  # ascending k, one fp32 rounding per block
                acc += vals[b]
            if g is not None:
                acc = acc * np.float32(g)
            return acc.astype(np.float64)
        # exact: every term exact, one rounding of the sum to float64 per output
        with np.errstate(invalid="ignore", over="ignore"):
            terms = [hi * x, lo * x]
            if g is not None:
                terms = [part for t in terms for part in _two_prod(t, g)]
        stack = np.concatenate(terms, axis=0)  # (terms, M, N)
        out = np.empty((m, n))
        bad = nan.any(axis=0)
        flat = stack.reshape(stack.shape[0], m * n)
        for j in range(m * n):  # math.fsum per output: the reference mode, small shapes
            out.flat[j] = math.fsum(flat[:, j].tolist())
        out[bad] = np.nan
        return out
    from .. import tensorcore as tc  # same layer; loaded only for this model

    if isinstance(accumulate, str) and accumulate not in tc.list_gpus():
        raise ValueError(f"unknown accumulate={accumulate!r}; valid: 'exact', 'fp32', a "
                         f"fpsim.tensorcore.BlockFMA, or a GPU name: {', '.join(tc.list_gpus())}")
    if not isinstance(accumulate, (str, tc.BlockFMA)):
        raise TypeError(f"accumulate must be 'exact', 'fp32', a GPU name or a "
                        f"fpsim.tensorcore.BlockFMA, got {type(accumulate).__name__}")
    x, pow2 = _scales(qa, qb)
    if not pow2:
        raise ValueError("matmul: the tensor-core model applies power-of-two (E8M0) scales; "
                         "NVFP4's e4m3 scales need accumulate='exact' or 'fp32'")
    fi = _unit_input_format(qa, qb)
    bs = qa.block_size
    pa = qa.element_values().astype(np.float64)
    pb = qb.element_values().astype(np.float64)
    d = np.zeros((m, n))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for b in range(x.shape[0]):  # one MX block at a time, chained through C
            xb = x[b]
            ok = np.isfinite(xb)
            c = np.where(ok, d / np.where(ok, xb, 1.0), 0.0)
            blk = tc.matmul(np.nan_to_num(pa[:, b * bs:(b + 1) * bs]),
                            np.nan_to_num(pb[b * bs:(b + 1) * bs, :]), c, gpu=accumulate,
                            input_format=fi, output_format="fp32")
            d = np.where(ok, blk * xb, np.nan)
    return d
