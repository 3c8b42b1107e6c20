"""Matmul accumulation models: how ``sum_k a[i, k] * b[k, j]`` is accumulated before the one
rounding to the output format.

======================  =====================================================================
model                   what is computed
======================  =====================================================================
``"fp32"`` (default)    products exact (operands are float64 values of formats with at most 26
                        significant bits), accumulated in float64 (BLAS dgemm), rounded to fp32
                        with nearest even, then to the output format with the context's mode.
                        The accumulation itself is fp32-like but finer than a GPU's: this is
                        "one rounding to fp32, then to the output". Outputs wider than fp32
                        (fp64) skip the fp32 step (GPUs accumulate fp64 GEMMs in fp64).
``"exact"``             float64 accumulation, one rounding to the output format. This is the
                        exactly rounded result whenever the float64 sum is exact (e.g. fp16 /
                        fp8 operands and K up to a few thousand), else within float64 error.
``"sgemm"``             a real float32 accumulator: NumPy's BLAS sgemm (products exact for
                        operands of <= 12 significant bits, fused multiply-adds in the BLAS's
                        blocked order), then one rounding to the output. What a CPU float32
                        GEMM returns (PyTorch on CPU also accumulates fp16 GEMMs in fp32): ~2x
                        faster than ``fp32``, each add rounded, the order the BLAS build's.
                        Operands must be of formats inside fp32.
``("sequential", F)``   acc = 0; for k in 0..K-1: acc = round_F(acc + a[:, k] * b[k, :]) (a
                        fused multiply-add: the product is exact in float64 for narrow
                        operands, one rounding per step in the context's mode); then one
                        rounding to the output. Vectorised over M and N, a Python loop over K.
``("pairwise", F)``     the K products are rounded to F, then summed as a binary tree
                        (neighbours first, an odd last element carried up), each add rounded to
                        F; then one rounding to the output.
``("tensorcore", gpu)`` :func:`fpsim.tensorcore.matmul` (the published block-FMA model of that
                        GPU's tensor cores, fp32 output), then one rounding to the output.
======================  =====================================================================

A bias (linear, conv2d) joins the accumulator before the final rounding: added in float64 for
``fp32`` / ``exact`` (cuBLAS epilogue style), as one more rounded step for sequential /
pairwise, and as an fp32 add (round to nearest even) after the sgemm or tensor-core result.
"""

from __future__ import annotations

import numpy as np

from .. import flags as _flags
from ..formats import FP16, FP32, Format
from ..modes import Rounding
from ..rounding import cast
from ..rounding.fp16 import f64_to_f32_to_f16
from .context import Accumulation, contains, plain_rounding, round_to

__all__ = ["gemm_acc", "add_bias", "finish", "gemm"]


def _accumulate(a: np.ndarray, b: np.ndarray, kind: str, fmt: Format) -> np.ndarray:
    """Sequential or pairwise accumulation in ``fmt`` of ``a @ b`` (float64 operands of shape
    (..., M, K) and (..., K, N)); returns float64 values of ``fmt``. The only Python loops are
    over K (sequential) or the log2(K) tree levels (pairwise)."""
    k_dim = a.shape[-1]
    out_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    if k_dim == 0:
        return np.zeros(out_shape)

    def rnd(v: np.ndarray) -> np.ndarray:
        return round_to(v, fmt).astype(np.float64)

    if kind == "sequential":
        acc = np.zeros(out_shape)
        for k in range(k_dim):
            acc = rnd(acc + a[..., :, k, None] * b[..., None, k, :])
        return acc
    # pairwise: the K products as a leading axis (K, ..., M, N), rounded, then halved level by
    # level
    batch = out_shape[:-2]
    a = np.moveaxis(np.broadcast_to(a, batch + a.shape[-2:]), -1, 0)  # (K, ..., M)
    b = np.moveaxis(np.broadcast_to(b, batch + b.shape[-2:]), -2, 0)  # (K, ..., N)
    terms = rnd(a[..., :, None] * b[..., None, :])
    while terms.shape[0] > 1:
        n = terms.shape[0]
        paired = rnd(terms[0:n - 1:2] + terms[1:n:2])
        terms = np.concatenate([paired, terms[n - 1:]]) if n % 2 else paired
    return terms[0]


def _tensorcore(a: np.ndarray, b: np.ndarray, gpu: str, in_fmt: Format) -> np.ndarray:
    from .. import tensorcore  # lazy: the tensor-core model is optional for the engine

    if a.ndim == 2 and b.ndim == 2:
        return np.asarray(tensorcore.matmul(a, b, gpu=gpu, input_format=in_fmt,
                                            output_format="fp32"), dtype=np.float64)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(*batch):
        out[idx] = _tensorcore(a[idx], b[idx], gpu, in_fmt)
    return out


def gemm_acc(a: np.ndarray, b: np.ndarray, model: Accumulation, in_fmt: Format) -> np.ndarray:
    """The accumulator of ``a @ b`` (float64 operands holding values of ``in_fmt``) before the
    final rounding, as float64: unrounded for fp32 / exact, values of the accumulator format
    for sequential / pairwise, fp32 values for the tensor-core model.

    >>> import fpsim
    >>> from fpsim.autograd.context import as_accumulation
    >>> a = np.array([[1.0, 2.0**-11, 2.0**-11]]); b = np.ones((3, 1))
    >>> float(gemm_acc(a, b, as_accumulation(("sequential", "fp16")), fpsim.FP16)[0, 0])
    1.0
    """
    kind = model.kind
    if kind in ("fp32", "exact"):  # operands may come as float32 (saved by an sgemm forward)
        if a.dtype != np.float64 or b.dtype != np.float64:
            a, b = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
        return a @ b
    if kind == "sgemm":
        if not contains(FP32, in_fmt):
            raise ValueError(f"the sgemm accumulation model takes operands of formats inside "
                             f"fp32, got {in_fmt.name}; use 'fp32' or 'exact' for wider ones")
        with np.errstate(over="ignore", invalid="ignore"):
            return a.astype(np.float32, copy=False) @ b.astype(np.float32, copy=False)
    if kind in ("sequential", "pairwise"):
        return _accumulate(a, b, kind, model.fmt)
    return _tensorcore(a, b, model.gpu, in_fmt)


def add_bias(acc: np.ndarray, bias: np.ndarray, model: Accumulation) -> np.ndarray:
    """Add a (broadcast) float64 bias to an accumulator, the model's way (see module doc).

    >>> from fpsim.autograd.context import as_accumulation
    >>> bool(add_bias(np.array([1.0]), np.array([2.0**-30]), as_accumulation("fp32"))[0] > 1)
    True
    """
    if model.kind in ("fp32", "exact"):
        acc += bias  # in place: gemm_acc's array is fresh
        return acc
    if model.kind == "sgemm":
        if acc.dtype == np.float32 and plain_rounding() \
                and np.broadcast_shapes(acc.shape, bias.shape) == acc.shape:
            b32 = bias.astype(np.float32)
            if np.array_equal(b32, bias):  # fp32 values: float32's own add is the same
                # rounding of the exact sum (float64 holds it to 53 >= 2 * 24 + 2 bits, so the
                # float64 sum rounded to fp32 is the correctly rounded sum), without the
                # float64 temporary; acc is gemm_acc's fresh array
                acc += b32
                return acc
        return round_to(acc + bias, FP32)  # float64 sum of two fp32 values: one rounding
    if model.kind == "tensorcore":
        return round_to(acc + bias, FP32).astype(np.float64)
    return round_to(acc + bias, model.fmt).astype(np.float64)


def finish(acc: np.ndarray, out_fmt: Format, model: Accumulation) -> np.ndarray:
    """Round an accumulator to the output format (storage array), the model's way.

    >>> import fpsim
    >>> from fpsim.autograd.context import as_accumulation
    >>> finish(np.array([1 + 2.0**-40]), fpsim.FP32, as_accumulation("fp32")).dtype
    dtype('float32')
    """
    if model.kind == "fp32" and out_fmt is not FP32:
        # identity test first: Format's dataclass == compares five fields
        if (out_fmt is FP16 or out_fmt == FP16) and acc.dtype == np.float64 \
                and plain_rounding():
            return f64_to_f32_to_f16(acc)  # the same two roundings, without a fresh array
        if out_fmt != FP32 and contains(FP32, out_fmt):
            if _flags.flags_active():  # the same rounding, recording its flags (an fp32 overflow)
                acc = cast(acc, FP32, Rounding.NEAREST_EVEN)
            else:
                with np.errstate(over="ignore"):
                    acc = acc.astype(np.float32)  # the fp32 accumulator's rounding: nearest even
    return round_to(acc, out_fmt)


def gemm(a: np.ndarray, b: np.ndarray, out_fmt: Format, model: Accumulation, in_fmt: Format,
         bias: np.ndarray | None = None) -> np.ndarray:
    """``a @ b (+ bias)`` rounded to ``out_fmt`` under ``model``: the whole forward of matmul.

    >>> import fpsim
    >>> from fpsim.autograd.context import as_accumulation
    >>> gemm(np.ones((1, 2)), np.ones((2, 1)), fpsim.FP16, as_accumulation("exact"),
    ...      fpsim.FP16).dtype
    dtype('float16')
    """
    with np.errstate(all="ignore"):  # inf - inf, inf * 0 give NaN silently, as PyTorch
        acc = gemm_acc(a, b, model, in_fmt)
        if bias is not None:
            acc = add_bias(acc, bias, model)
        return finish(acc, out_fmt, model)
