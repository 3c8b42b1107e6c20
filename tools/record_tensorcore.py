#!/usr/bin/env python
"""Record tensor-core results on a real NVIDIA GPU for the cases no public data covers.

The published measurements (tests/data/tensorcore/) are single blocks of random values near 1.
This script generates the cases they miss, runs them on the GPU one dot product per warp (row 0
of A, column 0 of B and C[0, 0] non-zero, as the published methodology), and writes files in
the same format, ``<GPU>_<in>_to_<out>_<group>.txt.gz``:

- ``negative_c``: c negative, cancelling most of the products;
- ``overflow``: exact sums past the largest finite value (does round-toward-zero give +-inf, as
  the published model says, or the largest finite value, as IEEE would?), fp16 sums around
  65504 / 65520, c = +-FLT_MAX plus products;
- ``specials``: NaN, 0 x inf, +inf with -inf, inf and NaN in c, e4m3 NaN, e5m2 inf;
- ``signed_zero``: -0 inputs, exact cancellation with c = -0 or +0 (the sign of zero);
- ``subnormal``: fp32 and fp16 subnormal results, subnormal inputs, tiny products near the
  alignment floor mel;
- ``extra_bits``: a tie at the output precision plus one tiny term 2**-j below it, for j = 1..40:
  the first j at which the tie is no longer broken measures the extra alignment bits (fp16
  output, B200 fp8 with round to nearest) - the published data cannot pin these;
- ``multiblock``: K = 8 GPU calls (random, and large and small terms alternating), fp32 and
  fp16 output: the chaining order and the rounding between blocks.

Run on a GPU machine (PyTorch with CUDA and a compiler for its extensions; fpsim installed from
this repository with ``pip install -e .``)::

    python tools/record_tensorcore.py --out results/            # all pairs the GPU supports
    python tools/record_tensorcore.py --out results/ --pairs fp16:fp16,e4m3:fp32 --rows 400
    fpsim check-hardware results/*.txt.gz                        # compare with the model

The CUDA code (compiled once with ``torch.utils.cpp_extension.load_inline``) uses ``wmma``
16x16x16 for fp16 / bf16 (16x16x8 for tf32, whose fp32 operands are passed unconverted so the
GPU drops their low bits itself) and ``mma.sync m16n8k32`` for fp8 (sm_89 and later); K longer
than one call chains calls through the accumulator. c is converted to fp16 on the GPU (round to
nearest even) for fp16 output. Nothing here has been run on a GPU yet: check a few rows of
``multiblock`` against the published data's single blocks first.

Without a GPU, ``--dry-run --model H100`` writes the same inputs with the model's predictions
(the CPU test of the case generation and file writing; tests/test_tensorcore_tools.py).

``--fingerprint`` runs :func:`fpsim.probe.fingerprint` against the GPU instead (one case per
element of each ``A @ B + C`` it asks for) and prints, for each pair, the ``BlockFMA`` that
reproduces the unit (``<GPU>_fingerprint.txt`` in ``--out`` if given); with ``--dry-run
--model H100`` it fingerprints fpsim's model through the same bit-pattern plumbing
(tests/test_probe_tools.py)::

    python tools/record_tensorcore.py --fingerprint --pairs fp16:fp32,e4m3:fp32
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np

import fpsim
import fpsim.mx as mx
import fpsim.tensorcore as tc

# Values of one GPU call along K: wmma 16x16x16, tf32 16x16x8, fp8 mma m16n8k32.
TILE = {"fp16": 16, "bf16": 16, "tf32": 8, "fp8_e4m3": 32, "fp8_e5m2": 32}
ALL_PAIRS = [("fp16", "fp32"), ("fp16", "fp16"), ("bf16", "fp32"), ("tf32", "fp32"),
             ("fp8_e4m3", "fp32"), ("fp8_e5m2", "fp32")]
_FILE_IN = {"fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}

Case = tuple[np.ndarray, np.ndarray, np.ndarray]  # a (R, K), b (R, K), c (R,): exact values


def _fmt(name: str) -> fpsim.Format:
    return fpsim.get_float_format(name)


def _inputs(x, fin: str) -> np.ndarray:
    return tc.convert_input(np.asarray(x, dtype=np.float64), fin)


def _c(x) -> np.ndarray:
    return np.asarray(fpsim.round(np.asarray(x, dtype=np.float64), "fp32"), dtype=np.float64)


def _big(fin: str) -> float:
    """A large input value of the format (its largest power of two)."""
    return float(2.0 ** _fmt(fin).emax)


# -- case groups -----------------------------------------------------------------------------

def negative_c(rng, fin, _fout, rows, k) -> Case:
    a = _inputs(rng.standard_normal((rows, k)), fin)
    b = _inputs(rng.standard_normal((rows, k)), fin)
    exact = (a * b).sum(axis=1)
    jitter = 1 + rng.standard_normal(rows) * np.exp2(-rng.integers(8, 30, rows))
    c = _c(-np.abs(exact) * jitter)  # negative, cancelling
    c[::3] = _c(-np.abs(rng.standard_normal(len(c[::3]))) * 4)
    return a, b, c


def overflow(_rng, fin, fout, rows, k) -> Case:
    a = np.zeros((rows, k))
    b = np.zeros((rows, k))
    c = np.zeros(rows)
    fmax32 = float(np.finfo(np.float32).max)
    big = _big(fin)
    for r in range(rows):
        kind = r % 6
        sign = -1.0 if (r // 6) % 2 else 1.0
        if fout == "fp16":  # sums around 65504 / 65520, one power of two per product
            target = [65504, 65512, 65519, 65520, 65535, 70000][kind]
            bits = [i for i in range(17) if target >> i & 1]
            for j, i in enumerate(bits):
                a[r, j] = sign * 2.0 ** min(i, 15)
                b[r, j] = 2.0 ** (i - min(i, 15))
        elif kind < 3 and _fmt(fin).emax >= 64:  # bf16 / tf32: products past 2**128
            a[r, :kind + 2] = sign * big * (1 + kind / 4)
            b[r, :kind + 2] = 2.0
        else:  # c = +-FLT_MAX plus products: RZ keeps the maximum or overflows?
            c[r] = sign * fmax32
            a[r, :kind + 1] = sign * min(big, 2.0**6)
            b[r, :kind + 1] = min(big, 2.0**6)
    return _inputs(a, fin), _inputs(b, fin), _c(c)


def specials(rng, fin, _fout, rows, k) -> Case:
    fmt = _fmt(fin)
    a = _inputs(rng.standard_normal((rows, k)), fin)
    b = _inputs(rng.standard_normal((rows, k)), fin)
    c = _c(rng.standard_normal(rows))
    inf = np.inf if fmt.has_infinity else np.nan  # e4m3 has no infinity: NaN instead
    for r in range(rows):
        j = int(rng.integers(0, k))
        kind = r % 7
        if kind == 0:
            a[r, j] = np.nan
        elif kind == 1:
            a[r, j], b[r, j] = inf, 0.0  # 0 x inf
        elif kind == 2:
            a[r, j], b[r, j] = inf, 1.0
            j2 = (j + 1) % k
            a[r, j2], b[r, j2] = -inf, 1.0  # +inf with -inf
        elif kind == 3:
            c[r] = np.inf
        elif kind == 4:
            c[r] = np.nan
        elif kind == 5:
            a[r, j], b[r, j] = inf, -2.0
        else:
            c[r] = -np.inf
            a[r, j], b[r, j] = inf, 1.0
    return a, b, c


def signed_zero(rng, fin, _fout, rows, k) -> Case:
    a = np.zeros((rows, k))
    b = np.zeros((rows, k))
    c = np.zeros(rows)
    for r in range(rows):
        kind = r % 4
        if kind == 0:  # all zero, c = -0, -0 inputs
            a[r, ::2] = -0.0
            c[r] = -0.0
        elif kind == 1:  # x - x = 0 exactly, c = -0
            x = float(_inputs(rng.standard_normal(), fin))
            a[r, :2] = [x, x]
            b[r, :2] = [1.0, -1.0]
            c[r] = -0.0
        elif kind == 2:  # products cancel c exactly
            x = float(_inputs(rng.uniform(1, 2), fin))
            a[r, 0], b[r, 0] = x, 1.0
            c[r] = -x
        else:  # one tiny negative product (lost in fp16-output alignment), c = -0
            a[r, 0] = -float(_fmt(fin).smallest_subnormal)
            b[r, 0] = float(_fmt(fin).smallest_subnormal)
            c[r] = -0.0
    return _inputs(a, fin), _inputs(b, fin), _c(c)


def subnormal(rng, fin, fout, rows, k) -> Case:
    fmt = _fmt(fin)
    out_e = -14 if fout == "fp16" else -126
    out_tiny = 2.0**out_e
    # product exponents around the output's subnormal range, as far as the inputs reach
    lowest = 2 * (fmt.emin - fmt.mantissa_bits)
    hi_e = max(min(out_e + 2, 2 * fmt.emax), lowest + 12)
    lo_e = max(lowest, hi_e - 32)
    e = rng.integers(lo_e, hi_e, size=(rows, k))
    ea = e // 2
    a = _inputs(rng.uniform(1, 2, (rows, k)) * np.exp2(ea) * rng.choice([-1, 1], (rows, k)), fin)
    b = _inputs(rng.uniform(1, 2, (rows, k)) * np.exp2(e - ea), fin)
    c = _c(rng.uniform(-1, 1, rows) * out_tiny)
    c[::2] = 0.0
    if fout == "fp16":
        c = np.asarray(fpsim.round(c, "fp16"), dtype=np.float64)
    return a, b, c


def extra_bits(_rng, fin, fout, rows, k) -> Case:
    """A large term L plus a term at the output precision plus one tiny term t = 2**-j below
    it, j = 1..40 (rows cycle through j in groups of 40):

    - tie rows: L + half an ulp + t: round to nearest breaks the tie upwards only while t
      survives the alignment (j <= F - p - 1 for F = 23 + extra bits, p fraction bits kept);
    - ulp rows: L + one ulp - t: round toward zero gives L while t survives, L + ulp when the
      alignment truncates t away.

    Both with positive and negative signs. The published rows cannot pin the extra bits of
    fp16-output units or of B200 fp8; these can."""
    fmt = _fmt(fin)
    a = np.zeros((rows, k))
    b = np.zeros((rows, k))
    c = np.zeros(rows)
    p = 10 if fout == "fp16" else 23
    top = 2.0 ** min(6, fmt.emax)  # the large term: top * top
    big_e = 2 * int(np.log2(top))
    for r in range(rows):
        j = r % 40 + 1
        kind = (r // 40) % 4
        sign = -1.0 if kind % 2 else 1.0
        a[r, 0], b[r, 0] = sign * top, top
        mid_e = big_e - p - 1 if kind < 2 else big_e - p  # half an ulp, or one ulp
        a[r, 1], b[r, 1] = sign * 2.0 ** (mid_e // 2), 2.0 ** (mid_e - mid_e // 2)
        tiny = 2.0 ** (big_e - p - 1 - j)
        c[r] = sign * tiny if kind < 2 else -sign * tiny  # c carries the tiny term
    a, b = _inputs(a, fin), _inputs(b, fin)
    c = _c(c)
    if fout == "fp16":
        c = np.asarray(fpsim.round(c, "fp16"), dtype=np.float64)
    return a, b, c


def c_late(_rng, fin, _fout, rows, k) -> Case:
    """Does c join the products' alignment, or is it added after the block's products are
    summed (and at what width)? The B200 fp8 rows fit both (docs/tensorcore-model.md).

    c = +-2**30 (1 + 2**-23) (last bit odd); a product p1 = 2**6 (8 x 8) is half an ulp of c;
    a product p2 = -2**(6 - j), j = 1..24, sits just below it (rows cycle through j, both
    signs, and p2 split over two or three products for the rows of the second half). If c
    joins the alignment (block 32, F = 23 + extra bits below 2**30), p2 is truncated to 0 once
    j > extra bits - 1 and the exact tie goes to even (up); if the products are summed first,
    2**6 - 2**(6 - j) is exact and stays below the tie (down) for every j up to 24. The j at
    which the result flips gives the extra bits of a joined c; no flip means a late c.

    Expected on a B200 (e5m2, every j reachable): B200's default, issue 33's rule (products
    summed toward zero to fp32 with 2 extra bits, then c added to nearest even), never flips:
    every row gives c (rounded down), as the exact sum (B200-fp8-exact) does; the variant's
    joined c (7 extra bits) flips from j = 7 on, the published RNE model's from j = 2. A flip
    proves c joins the alignment, and the rule wrong."""
    fmt = _fmt(fin)
    a = np.zeros((rows, k))
    b = np.zeros((rows, k))
    c = np.zeros(rows)
    for r in range(rows):
        j = r % 24 + 1
        kind = (r // 24) % 4
        sign = -1.0 if kind % 2 else 1.0
        c[r] = sign * 2.0**30 * (1 + 2.0**-23)
        a[r, 0], b[r, 0] = sign * 8.0, 8.0
        e = 6 - j
        lo = max(fmt.emin - fmt.mantissa_bits, e - fmt.emax)
        ea = max(lo, e // 2)
        if kind < 2:
            a[r, 1], b[r, 1] = -sign * 2.0**ea, 2.0 ** (e - ea)
        else:  # the same p2 as two halves in separate products (k = 1, 17)
            a[r, 1], b[r, 1] = -sign * 2.0**ea, 2.0 ** (e - 1 - ea)
            a[r, 17 % k], b[r, 17 % k] = -sign * 2.0**ea, 2.0 ** (e - 1 - ea)
    a, b = _inputs(a, fin), _inputs(b, fin)
    return a, b, _c(c)


def wide_products(_rng, fin, _fout, rows, k) -> Case:
    """How wide is the products' accumulator? A largest product P = 2**top (as large as the
    inputs allow, at most 2**30), a product half an fp32 ulp below it (a tie), and one tiny
    product 2**(top - 24 - j), j = 1, 2, ... as far as the format reaches; c = 0 (or -P with
    the tie and the tiny term left, rows of the second half). The tiny product breaks the tie
    upward only while it survives: a joined alignment with F = 23 + extra fraction bits drops
    it once 24 + j > F; an exact (Kulisch) product sum never does. The B200 fp8 rows fit both
    (docs/tensorcore-model.md); this group separates them.

    Expected on a B200: B200's default, issue 33's rule, never breaks the tie: its products'
    sum is truncated to fp32 (toward zero) before c is added, so every row gives P (c = 0) or
    P / 4 (c = -3P / 4), for every j; the exact sum (B200-fp8-exact) breaks it in every row,
    the variant (7 extra bits, nearest even) for j <= 6 (rows with c = 0). A tie broken
    upwards proves the product sum is not truncated toward zero, and the rule wrong."""
    fmt = _fmt(fin)
    a = np.zeros((rows, k))
    b = np.zeros((rows, k))
    c = np.zeros(rows)
    half = min(fmt.emax, 15)
    top = 2 * half
    low = 2 * (fmt.emin - fmt.mantissa_bits)  # the smallest product's exponent
    jmax = max(1, top - 24 - low)
    for r in range(rows):
        j = r % jmax + 1
        sign = -1.0 if (r // jmax) % 2 else 1.0
        a[r, 0], b[r, 0] = sign * 2.0**half, 2.0**half
        te = top - 24
        a[r, 1], b[r, 1] = sign * 2.0 ** (te // 2), 2.0 ** (te - te // 2)
        e = te - j
        ea = max(fmt.emin - fmt.mantissa_bits, e - half)
        a[r, 2], b[r, 2] = sign * 2.0**ea, 2.0 ** (e - ea)
        if (r // (2 * jmax)) % 2:
            c[r] = -sign * 2.0**top * 0.75  # the result stays near the top
    return _inputs(a, fin), _inputs(b, fin), _c(c)


def exceptional(_rng, fin, fout, rows, k) -> Case:
    """The exceptional cases of the published model_validation/ExceptionalCasesTest.m, for
    every pair: c near FLT_MAX (2**127) plus a product of the same size (+inf, or the
    largest finite value under round toward zero?); +inf x -inf (-inf); +inf + -inf (NaN);
    two products at the fp16 output's limit (2**15 x 1, twice: +-inf); the same with negative
    c; c = -0 with zero products (the sign of zero); NaN in c."""
    fmt = _fmt(fin)
    big = _big(fin)
    inf = np.inf if fmt.has_infinity else np.nan
    a = np.zeros((rows, k))
    b = np.zeros((rows, k))
    c = np.zeros(rows)
    for r in range(rows):
        kind = r % 8
        sign = -1.0 if (r // 8) % 2 else 1.0
        if kind == 0:  # c + a1 b1 with c = 2**127 and a1 b1 as large as the inputs allow
            c[r] = sign * 2.0**127
            a[r, 0], b[r, 0] = sign * min(big, 2.0**127), min(2.0, 2.0**127 / min(big, 2.0**127))
        elif kind == 1:
            a[r, 0], b[r, 0] = inf, -inf
        elif kind == 2:
            a[r, 0], b[r, 0] = -inf, 1.0
            a[r, 1], b[r, 1] = inf, 1.0
        elif kind == 3:  # fp16 overflow from two products of 2**15
            a[r, :2] = sign * min(big, 2.0**15)
            b[r, :2] = 2.0**15 / min(big, 2.0**15)
        elif kind == 4:  # negative c pulling the sum past the limit
            c[r] = -sign * 65504.0
            a[r, 0], b[r, 0] = -sign * min(big, 2.0**15), 2.0**15 / min(big, 2.0**15)
        elif kind == 5:  # c = -0, all products zero: the sign of zero
            c[r] = -0.0
        elif kind == 6:  # c = -0, products cancelling exactly
            c[r] = -0.0
            a[r, :2] = [1.0, 1.0]
            b[r, :2] = [sign, -sign]
        else:
            c[r] = np.nan
    c = _c(c)
    if fout == "fp16":
        with np.errstate(over="ignore"):
            c = np.asarray(fpsim.round(c, "fp16"), dtype=np.float64)
    return _inputs(a, fin), _inputs(b, fin), c


def multiblock(rng, fin, fout, rows, k) -> Case:
    a = np.abs(rng.standard_normal((rows, k)))
    b = np.abs(rng.standard_normal((rows, k))) * (0.25 if fout == "fp16" else 1.0)
    alt = slice(1, rows, 2)  # large and small terms alternating, mixed signs
    scale = np.where(np.arange(k) % 2 == 0, 1.0, 2.0**-12)
    a[alt] = a[alt] * scale * rng.choice([-1, 1], a[alt].shape)
    c = _c(rng.standard_normal(rows))
    if fout == "fp16":
        c = np.asarray(fpsim.round(c, "fp16"), dtype=np.float64)
    return _inputs(a, fin), _inputs(b, fin), c


GROUPS: dict[str, tuple[Callable, int]] = {  # name -> (generator, GPU calls along K)
    "negative_c": (negative_c, 1),
    "overflow": (overflow, 1),
    "specials": (specials, 1),
    "signed_zero": (signed_zero, 1),
    "subnormal": (subnormal, 1),
    "extra_bits": (extra_bits, 1),
    "multiblock": (multiblock, 8),
    "c_late": (c_late, 1),
    "wide_products": (wide_products, 1),
    "exceptional": (exceptional, 1),
}


def make_cases(group: str, fin: str, fout: str, rows: int, seed: int = 0) -> Case:
    """The inputs of one group for one (input, output) pair: exact values, K a multiple of
    the GPU call's K."""
    gen, calls = GROUPS[group]
    rng = np.random.default_rng([seed, sum(map(ord, group + fin + fout))])
    k = TILE[fin] * calls
    a, b, c = gen(rng, fin, fout, rows, k)
    return a, b, c


def to_patterns(a, b, c, fin: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bit patterns as the files store them (tf32 inputs as fp32 patterns, c as fp32)."""
    pat = "fp32" if fin == "tf32" else fin
    return (np.asarray(fpsim.to_bits(a, pat)).astype(np.uint64),
            np.asarray(fpsim.to_bits(b, pat)).astype(np.uint64),
            np.asarray(fpsim.to_bits(c, "fp32")).astype(np.uint64))


# -- running ---------------------------------------------------------------------------------

def model_patterns(a_bits, b_bits, c_bits, fin, fout, model: str) -> np.ndarray:
    """What the fpsim model predicts for the patterns (the dry run)."""
    pat = "fp32" if fin == "tf32" else fin
    a = fpsim.from_bits(a_bits, pat)
    b = fpsim.from_bits(b_bits, pat)
    c = fpsim.round(fpsim.from_bits(c_bits, "fp32"), fout)  # fp16 output: c rounded (RNE)
    d = tc.dot(a, b, c, gpu=model, input_format=fin, output_format=fout)
    return np.asarray(fpsim.to_bits(d, fout)).astype(np.uint64)


CUDA_SRC = r"""
#include <torch/extension.h>
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>
using namespace nvcuda;

// bf16 / tf32 wmma need sm_80, fp8 mma sm_89: other GPUs write this pattern instead.
#define UNSUPPORTED 0xFFFFFFFFu

// One warp per case: A row 0 = a, B column 0 = b, C[0][0] = c; everything else zero.
// In: a, b as raw patterns (uint16 for fp16/bf16, uint32 for tf32), c as fp32 patterns.
template <typename TFrag, typename TPrec, typename TRaw, int KT, bool HALF_ACC>
__global__ void wmma_cases(const TRaw* a, const TRaw* b, const uint32_t* c, uint32_t* d, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  constexpr bool supported = std::is_same<TPrec, __half>::value;
#else
  constexpr bool supported = true;
#endif
  const int cs = blockIdx.x;
  if constexpr (!supported) {
    if (threadIdx.x == 0) d[cs] = UNSUPPORTED;
  } else {
    __shared__ __align__(32) TRaw As[16 * KT];   // row-major 16 x KT
    __shared__ __align__(32) TRaw Bs[KT * 16];   // col-major KT x 16: column 0 is Bs[0..KT)
    __shared__ __align__(32) float Cf[16 * 16];
    __shared__ __align__(32) __half Ch[16 * 16];
    using TAcc = typename std::conditional<HALF_ACC, __half, float>::type;
    wmma::fragment<wmma::accumulator, 16, 16, KT, TAcc> acc;
    for (int i = threadIdx.x; i < 256; i += 32) {
      const float cv = i == 0 ? __uint_as_float(c[cs]) : 0.f;
      Cf[i] = cv;
      Ch[i] = __float2half_rn(cv);   // fp16 output: c rounded to nearest even on the GPU
    }
    __syncwarp();
    if constexpr (HALF_ACC) wmma::load_matrix_sync(acc, Ch, 16, wmma::mem_row_major);
    else wmma::load_matrix_sync(acc, Cf, 16, wmma::mem_row_major);
    for (int k0 = 0; k0 < K; k0 += KT) {
      for (int i = threadIdx.x; i < 16 * KT; i += 32) {
        const int row = i / KT, col = i % KT;
        As[i] = row == 0 ? a[(size_t)cs * K + k0 + col] : (TRaw)0;
        Bs[i] = i < KT ? b[(size_t)cs * K + k0 + i] : (TRaw)0;
      }
      __syncwarp();
      wmma::fragment<wmma::matrix_a, 16, 16, KT, TPrec, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, KT, TPrec, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, reinterpret_cast<const TFrag*>(As), KT);
      wmma::load_matrix_sync(fb, reinterpret_cast<const TFrag*>(Bs), KT);
      // tf32: no __float_to_tf32 on purpose; the GPU drops the low 13 bits itself.
      wmma::mma_sync(acc, fa, fb, acc);
      __syncwarp();
    }
    if constexpr (HALF_ACC) {
      wmma::store_matrix_sync(Ch, acc, 16, wmma::mem_row_major);
      __syncwarp();
      if (threadIdx.x == 0) d[cs] = (uint32_t)__half_as_ushort(Ch[0]);
    } else {
      wmma::store_matrix_sync(Cf, acc, 16, wmma::mem_row_major);
      __syncwarp();
      if (threadIdx.x == 0) d[cs] = __float_as_uint(Cf[0]);
    }
  }
}

// fp8: mma.sync m16n8k32, f32 accumulate. Lanes 0..3 (groupID 0) hold row 0 of A
// (a0: k = 4*lane + 0..3, a2: k = 16 + 4*lane + 0..3) and column 0 of B (b0, b1 alike);
// lane 0's c0 / d0 is element (0, 0).
template <bool E5M2>
__global__ void mma_fp8_cases(const uint8_t* a, const uint8_t* b, const uint32_t* c,
                              uint32_t* d, int K) {
  const int cs = blockIdx.x, lane = threadIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (lane == 0) acc[0] = __uint_as_float(c[cs]);
  for (int k0 = 0; k0 < K; k0 += 32) {
    uint32_t ra[4] = {0, 0, 0, 0}, rb[2] = {0, 0};
    if (lane < 4) {
      const uint8_t* pa = a + (size_t)cs * K + k0;
      const uint8_t* pb = b + (size_t)cs * K + k0;
      for (int i = 0; i < 4; i++) {
        ra[0] |= (uint32_t)pa[4 * lane + i] << (8 * i);
        ra[2] |= (uint32_t)pa[16 + 4 * lane + i] << (8 * i);
        rb[0] |= (uint32_t)pb[4 * lane + i] << (8 * i);
        rb[1] |= (uint32_t)pb[16 + 4 * lane + i] << (8 * i);
      }
    }
    float out[4];
    if (E5M2) {
      asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                   : "=f"(out[0]), "=f"(out[1]), "=f"(out[2]), "=f"(out[3])
                   : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]),
                     "f"(acc[0]), "f"(acc[1]), "f"(acc[2]), "f"(acc[3]));
    } else {
      asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                   : "=f"(out[0]), "=f"(out[1]), "=f"(out[2]), "=f"(out[3])
                   : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]),
                     "f"(acc[0]), "f"(acc[1]), "f"(acc[2]), "f"(acc[3]));
    }
    for (int i = 0; i < 4; i++) acc[i] = out[i];
  }
  if (lane == 0) d[cs] = __float_as_uint(acc[0]);
#else
  if (lane == 0) d[cs] = UNSUPPORTED;
#endif
}

torch::Tensor run_cases(torch::Tensor a, torch::Tensor b, torch::Tensor c, int64_t mode) {
  const int rows = a.size(0), K = a.size(1);
  auto d = torch::zeros({rows}, torch::dtype(torch::kInt32).device(a.device()));
  auto cp = (const uint32_t*)c.data_ptr();
  auto dp = (uint32_t*)d.data_ptr();
  switch (mode) {
    case 0: wmma_cases<__half, __half, uint16_t, 16, false><<<rows, 32>>>(
        (const uint16_t*)a.data_ptr(), (const uint16_t*)b.data_ptr(), cp, dp, K); break;
    case 1: wmma_cases<__half, __half, uint16_t, 16, true><<<rows, 32>>>(
        (const uint16_t*)a.data_ptr(), (const uint16_t*)b.data_ptr(), cp, dp, K); break;
    case 2: wmma_cases<__nv_bfloat16, __nv_bfloat16, uint16_t, 16, false><<<rows, 32>>>(
        (const uint16_t*)a.data_ptr(), (const uint16_t*)b.data_ptr(), cp, dp, K); break;
    case 3: wmma_cases<float, wmma::precision::tf32, uint32_t, 8, false><<<rows, 32>>>(
        (const uint32_t*)a.data_ptr(), (const uint32_t*)b.data_ptr(), cp, dp, K); break;
    case 4: mma_fp8_cases<false><<<rows, 32>>>(
        (const uint8_t*)a.data_ptr(), (const uint8_t*)b.data_ptr(), cp, dp, K); break;
    case 5: mma_fp8_cases<true><<<rows, 32>>>(
        (const uint8_t*)a.data_ptr(), (const uint8_t*)b.data_ptr(), cp, dp, K); break;
    default: TORCH_CHECK(false, "unknown mode");
  }
  return d;
}
"""
CPP_SRC = "torch::Tensor run_cases(torch::Tensor a, torch::Tensor b, torch::Tensor c, " \
          "int64_t mode);"
MODES = {("fp16", "fp32"): 0, ("fp16", "fp16"): 1, ("bf16", "fp32"): 2, ("tf32", "fp32"): 3,
         ("fp8_e4m3", "fp32"): 4, ("fp8_e5m2", "fp32"): 5}


def gpu_patterns(a_bits, b_bits, c_bits, fin, fout, _cache={}) -> np.ndarray:  # noqa: B006
    """Run the cases on the GPU (PyTorch + a small CUDA extension)."""
    import torch
    from torch.utils.cpp_extension import load_inline

    if "mod" not in _cache:
        _cache["mod"] = load_inline("fpsim_tc_record", cpp_sources=CPP_SRC,
                                    cuda_sources=CUDA_SRC, functions=["run_cases"],
                                    extra_cuda_cflags=["-O2"], verbose=False)
    mod = _cache["mod"]
    cap = torch.cuda.get_device_capability()
    need = (8, 9) if fin.startswith("fp8") else (8, 0) if fin in ("bf16", "tf32") else (7, 0)
    if cap < need:
        raise RuntimeError(f"{fin} tensor-core inputs need compute capability "
                           f"{need[0]}.{need[1]}, this GPU has {cap[0]}.{cap[1]}")
    raw = {"fp16": np.int16, "bf16": np.int16, "tf32": np.int32, "fp8_e4m3": np.uint8,
           "fp8_e5m2": np.uint8}[fin]
    wide = {np.int16: np.uint16, np.int32: np.uint32, np.uint8: np.uint8}[raw]
    ta = torch.from_numpy(np.ascontiguousarray(a_bits.astype(wide).view(raw))).cuda()
    tb = torch.from_numpy(np.ascontiguousarray(b_bits.astype(wide).view(raw))).cuda()
    tcs = torch.from_numpy(c_bits.astype(np.uint32).view(np.int32)).cuda()
    d = mod.run_cases(ta, tb, tcs, MODES[(fin, fout)])
    torch.cuda.synchronize()
    return d.cpu().numpy().view(np.uint32).astype(np.uint64)


def detect_gpu_name() -> str:
    """A short label from torch.cuda.get_device_name (e.g. 'H100'), for the file names."""
    import torch

    name = torch.cuda.get_device_name().upper()
    for label in ("V100", "A100", "A30", "A10", "A2", "L40S", "L40", "L4", "H100", "H200",
                  "B200", "T4"):
        if label in name:
            return label
    if "RTX" in name and "40" in name:
        return "Ada"
    return "".join(ch for ch in name if ch.isalnum())[:16] or "GPU"


def record(out: Path, pairs, groups, rows: int, seed: int, label: str,
           model: str | None) -> list[Path]:
    """Generate, run (GPU, or the model when ``model`` is given) and write every file."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fin, fout in pairs:
        if model is not None:
            try:
                tc.resolve_unit(model, fin, fout)
            except ValueError as exc:
                print(f"skip {fin}->{fout}: {exc.args[0].split(';')[0]}", file=sys.stderr)
                continue
        for group in groups:
            a, b, c = make_cases(group, fin, fout, rows, seed)
            ab, bb, cb = to_patterns(a, b, c, fin)
            if model is not None:
                db = model_patterns(ab, bb, cb, fin, fout, model)
            else:
                try:
                    db = gpu_patterns(ab, bb, cb, fin, fout)
                except RuntimeError as exc:
                    print(f"skip {fin}->{fout}: {exc}", file=sys.stderr)
                    break
            name = f"{label}_{_FILE_IN.get(fin, fin)}_to_{fout}_{group.replace('_', '-')}.txt.gz"
            written.append(tc.write_hardware_file(out / name, label, fin, fout, ab, bb, cb, db))
    return written


# -- block-scaled probes (MXFP8, MXFP4, NVFP4 GEMMs on Blackwell) ------------------------------
#
# The OCP MX spec leaves the accumulation of a block-scaled dot product to the implementation;
# fpsim.mx.matmul offers candidate models. Each probe row is one dot product of length K (whole
# blocks) built from powers of two placed so that the candidates disagree: its expected result
# under every candidate is written beside the inputs, and a GPU run of the same rows says which
# candidates survive (``--check``). The questions, one group each:
#
# - ``in_block`` (MXFP8 only: fp4 products span too few binades): are the 32 products of one
#   block summed exactly, or aligned to the largest and truncated (how many extra bits)? A large
#   product, a product at half an fp32 ulp of it (a tie) and a tiny one 2**-j below the tie; and
#   large + one ulp - tiny. Exact summation breaks the tie; a truncating alignment drops the tiny
#   product once j passes its extra bits.
# - ``across_blocks``: are the blocks' scaled sums added in fp32 one block at a time, or kept
#   wider? A large block and n blocks of a quarter ulp each, the large one first or last (fp32
#   in ascending k loses the small ones only when the large one comes first); a tie block and a
#   tiny block after the large one.
# - ``scale_range`` (MX only: NVFP4's e4m3 scales cannot leave fp32's range): are the scales
#   applied to the block's sum or to each product, and what range does the sum across blocks
#   have? Products that overflow fp32 once scaled but cancel inside their block; blocks that
#   overflow fp32 but cancel across blocks; products below half of fp32's smallest subnormal
#   once scaled whose block sum is representable; a lone subnormal result (flushed or kept).
# - ``output_rounding``: the final rounding to fp32: exact sums a quarter, a half and three
#   quarters of an ulp above an odd or even fp32 value, both signs (nearest even or toward zero).
#
# Candidates (BS_MODELS): "exact" (one rounding of the exact sum to fp32, nearest even),
# "exact-rz" (the same, toward zero), "fp32" (mx.matmul's model: each block's exact sum times
# its scales rounded to fp32, blocks added in fp32 in ascending k), "prescaled" (each product
# times its scales rounded to fp32, then added in fp32 in ascending k: scales before the sum),
# and for MX formats the block-FMA units "B200-fp8-exact", "B200-fp8-variant",
# "B200-fp8-published" (mx.matmul with that unit: fpsim's B200 FP8 fits, applied per MX block).

BS_FORMATS = ("mxfp8_e4m3", "mxfp4", "nvfp4")
BS_BLOCKS = 8  # blocks per row in every group (K = 256 for MX, 128 for NVFP4)
# powers of two an element can hold exactly: e4m3 2**-9 (subnormal) .. 2**8, e2m1 0.5 .. 4
_ELEM_POW2 = {"fp8_e4m3": (-9, 8), "fp4_e2m1": (-1, 2)}
_SCALE_POW2 = {"e8m0": (-127, 127), "e4m3": (-9, 8)}
BS_UNITS = ("B200-fp8-exact", "B200-fp8-variant", "B200-fp8-published")


class BlockCase:
    """The rows of one probe group: exact element values ``a`` and ``b`` (R x K; row r of A
    times row r of B^T is probe r), the scale exponents ``sa``, ``sb`` (R x blocks: scale =
    2**s), and for each row the exact terms it was built from (what the probe claims)."""

    def __init__(self, fmt, group, a, b, sa, sb, terms):
        self.fmt, self.group, self.a, self.b, self.sa, self.sb = fmt, group, a, b, sa, sb
        self.terms = terms


def _split(e: int, lo: int, hi: int) -> tuple[int, int]:
    """e = ea + eb with both in [lo, hi] (ValueError if impossible)."""
    ea = min(hi, max(lo, e - (e // 2)))
    eb = e - ea
    if not (lo <= eb <= hi):
        raise ValueError(f"2**{e} is not a product of two values in 2**[{lo}, {hi}]")
    return ea, eb


def _build_rows(fmt_name: str, rows_terms: list[list[tuple[int, int, int, int]]]):
    """Rows from terms ``(block, slot, exponent, sign)``: the term ``sign * 2**exponent`` is
    the scaled product in ``slot`` of ``block``. A block's scale product is chosen so that its
    largest term's element product is as large as the elements allow; every term of the block
    must then fit the element range."""
    f = mx.get_mx_format(fmt_name)
    bs = f.block_size
    k = bs * BS_BLOCKS
    elo, ehi = _ELEM_POW2[f.element.name]
    slo, shi = _SCALE_POW2[f.scale]
    r = len(rows_terms)
    a = np.zeros((r, k))
    b = np.zeros((r, k))
    sa = np.zeros((r, BS_BLOCKS), np.int64)
    sb = np.zeros((r, BS_BLOCKS), np.int64)
    for i, terms in enumerate(rows_terms):
        for blk in {t[0] for t in terms}:
            in_blk = [t for t in terms if t[0] == blk]
            top = max(t[2] for t in in_blk)
            x = max(2 * slo, top - 2 * ehi)  # scale product: elements as large as possible
            sa[i, blk], sb[i, blk] = _split(x, slo, shi)
            for _, slot, e, sign in in_blk:
                ea, eb = _split(e - x, elo, ehi)
                if a[i, blk * bs + slot] != 0:
                    raise ValueError(f"row {i}: slot {slot} of block {blk} used twice")
                a[i, blk * bs + slot] = sign * 2.0**ea
                b[i, blk * bs + slot] = 2.0**eb
    return a, b, sa, sb


def _bs_in_block(_fmt_name: str) -> list:
    rows = []
    for kind in range(4):  # tie + tiny, ulp - tiny; each with both signs
        sign = -1 if kind % 2 else 1
        for j in range(1, 11):
            if kind < 2:  # 2**16 + 2**-8 (half an fp32 ulp) + 2**(-8 - j)
                rows.append([(0, 0, 16, sign), (0, 1, -8, sign), (0, 2, -8 - j, sign)])
            else:  # 2**16 + 2**-7 (one ulp) - 2**(-8 - j)
                rows.append([(0, 0, 16, sign), (0, 1, -7, sign), (0, 2, -8 - j, -sign)])
    return rows


def _bs_across_blocks(fmt_name: str) -> list:
    top = 20 if fmt_name == "nvfp4" else 30  # the large block's value 2**top (ulp 2**(top-23))
    u = top - 25  # a quarter ulp
    rows = []
    for sign in (1, -1):
        for n in range(1, BS_BLOCKS):  # the large block first, then n quarter-ulp blocks
            rows.append([(0, 0, top, sign)] + [(i, 0, u, sign) for i in range(1, n + 1)])
        for n in range(1, BS_BLOCKS):  # n quarter-ulp blocks first, the large block last
            rows.append([(i, 0, u, sign) for i in range(n)] + [(BS_BLOCKS - 1, 0, top, sign)])
        for j in range(1, 8):  # large, a tie (half ulp), a tiny block 2**-j ulp below
            rows.append([(0, 0, top, sign), (1, 0, top - 24, sign), (2, 0, top - 24 - j, sign)])
    return rows


def _bs_scale_range(_fmt_name: str) -> list:
    rows = []
    for sign in (1, -1):
        # products past fp32's range once scaled, cancelling inside block 0; block 1 holds 1
        for e in (130, 160, 200):
            rows.append([(0, 0, e, sign), (0, 1, e, -sign), (1, 0, 0, sign)])
        # blocks past fp32's range cancelling across blocks, then 1
        for e in (128, 140):
            rows.append([(0, 0, e, sign), (1, 0, e, -sign), (2, 0, 0, sign)])
        # n products of 2**-151 (below half of 2**-149 once scaled) in one block
        for n in (3, 4, 8, 15):
            rows.append([(0, i, -151, sign) for i in range(n)])
        # n blocks of 2**-150 each (a tie with 0 when a block is rounded alone)
        for n in (2, 3, 5):
            rows.append([(i, 0, -150, sign) for i in range(n)])
        for e in (-130, -140, -149):  # a lone subnormal result
            rows.append([(0, 0, e, sign)])
    return rows


def _bs_output_rounding(fmt_name: str) -> list:
    top = 20 if fmt_name == "nvfp4" else 30
    ulp = top - 23
    rows = []
    for sign in (1, -1):
        for odd in (False, True):
            base = [(0, 0, top, sign)] + ([(1, 0, ulp, sign)] if odd else [])
            for frac in ([ulp - 2], [ulp - 1], [ulp - 1, ulp - 2]):  # 1/4, 1/2, 3/4 ulp
                rows.append(base + [(2 + i, 0, e, sign) for i, e in enumerate(frac)])
    return rows


BS_GROUPS = {"in_block": _bs_in_block, "across_blocks": _bs_across_blocks,
             "scale_range": _bs_scale_range, "output_rounding": _bs_output_rounding}
# the groups a format can express (fp4 products span 2**-2 .. 2**4: no fp32 ties in a block;
# NVFP4's e4m3 scales keep every result inside fp32's range)
BS_GROUP_FORMATS = {"in_block": ("mxfp8_e4m3",), "across_blocks": BS_FORMATS,
                    "scale_range": ("mxfp8_e4m3", "mxfp4"), "output_rounding": BS_FORMATS}


def make_block_case(fmt_name: str, group: str) -> BlockCase:
    """The probe rows of ``group`` for ``fmt_name`` (see the section comment)."""
    if fmt_name not in BS_GROUP_FORMATS.get(group, ()):
        raise ValueError(f"group {group!r} does not apply to {fmt_name!r}; valid pairs: "
                         + ", ".join(f"{g}:{f}" for g, fs in BS_GROUP_FORMATS.items()
                                     for f in fs))
    terms = BS_GROUPS[group](fmt_name)
    a, b, sa, sb = _build_rows(fmt_name, terms)
    return BlockCase(fmt_name, group, a, b, sa, sb, terms)


def block_codes(case: BlockCase) -> dict[str, np.ndarray]:
    """The bit patterns a GPU reads: element codes (uint8, one element per byte; fp4 in the
    low nibble) and scale codes (uint8: E8M0, or e4m3 for NVFP4) of A and B (B as N x K)."""
    f = mx.get_mx_format(case.fmt)
    el = f.element.dtype
    sdt = f.scale_dtype
    codes = {k: getattr(case, k).astype(el).view(np.uint8) for k in ("a", "b")}
    for k in ("sa", "sb"):
        codes[k] = np.ldexp(1.0, getattr(case, k)).astype(sdt).view(np.uint8)
    return codes


def _mx_arrays(fmt_name: str, codes: dict[str, np.ndarray]):
    """MXArrays (A: R x K blocked on axis 1, B: K x R blocked on axis 0) from the codes."""
    f = mx.get_mx_format(fmt_name)
    r, k = codes["a"].shape
    el, sdt = f.element.dtype, f.scale_dtype
    qa = mx.MXArray(f, codes["sa"].view(sdt), codes["a"].view(el), (r, k), 1, f.block_size,
                    None)
    qb = mx.MXArray(f, np.ascontiguousarray(codes["sb"].view(sdt).T),
                    np.ascontiguousarray(codes["b"].view(el).T), (k, r), 0, f.block_size, None)
    return qa, qb


def _exact_terms(fmt_name: str, codes: dict[str, np.ndarray]) -> list[list[Fraction]]:
    """Every row's scaled products as exact Fractions, in ascending k."""
    f = mx.get_mx_format(fmt_name)
    el, sdt = f.element.dtype, f.scale_dtype
    va = codes["a"].view(el).astype(np.float64)
    vb = codes["b"].view(el).astype(np.float64)
    xa = codes["sa"].view(sdt).astype(np.float64)
    xb = codes["sb"].view(sdt).astype(np.float64)
    bs = f.block_size
    out = []
    for i in range(va.shape[0]):
        nz = np.flatnonzero(va[i] * vb[i])
        out.append([Fraction(va[i, j]) * Fraction(vb[i, j]) * Fraction(xa[i, j // bs])
                    * Fraction(xb[i, j // bs]) for j in nz])
    return out


def block_model_outputs(fmt_name: str, codes: dict[str, np.ndarray], model: str) -> np.ndarray:
    """fp32 results (as float64) of every row under the candidate ``model`` (BS_MODELS)."""
    if model in ("exact", "exact-rz"):
        # a prediction, so fpsim may compute it: the exact sum (a Fraction) rounded once to
        # fp32 by fpsim.round, which reads it exactly (subnormals kept; overflow: inf to
        # nearest, the largest finite value toward zero). tests/test_mx_probes.py checks these
        # predictions against its own exact-Fraction rounding.
        mode = "nearest_even" if model == "exact" else "toward_zero"
        return np.array([float(fpsim.round(sum(t, Fraction(0)), "fp32", mode))
                         for t in _exact_terms(fmt_name, codes)])
    if model == "prescaled":
        f = mx.get_mx_format(fmt_name)
        el, sdt = f.element.dtype, f.scale_dtype
        bs = f.block_size
        xa = np.repeat(codes["sa"].view(sdt).astype(np.float64), bs, axis=1)
        xb = np.repeat(codes["sb"].view(sdt).astype(np.float64), bs, axis=1)
        p = (codes["a"].view(el).astype(np.float64) * codes["b"].view(el).astype(np.float64))
        with np.errstate(over="ignore", invalid="ignore"):
            terms = np.asarray(fpsim.round(p * xa * xb, "fp32"), dtype=np.float32)
            acc = np.zeros(p.shape[0], np.float32)
            for j in range(p.shape[1]):  # ascending k, one fp32 rounding per add
                acc = acc + terms[:, j]
        return acc.astype(np.float64)
    qa, qb = _mx_arrays(fmt_name, codes)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.diagonal(mx.matmul(qa, qb, model)).copy()


def block_models(fmt_name: str) -> tuple[str, ...]:
    """The candidates that apply to ``fmt_name`` (units need power-of-two scales)."""
    base = ("exact", "exact-rz", "fp32", "prescaled")
    return base + (BS_UNITS if mx.get_mx_format(fmt_name).scale == "e8m0" else ())


def _fp32_bits(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, np.float64).astype(np.float32).view(np.uint32)


def _packed_elements(fmt_name: str, codes: np.ndarray) -> np.ndarray:
    """R x K element codes (one per byte) packed to their real width, row by row: fp4 two per
    byte, the first in the low nibble (torch float4_e2m1fn_x2, PTX e2m1x2): MXArray.pack's
    layout. It encodes the GPU's inputs, not a reference: a packing error would make the GPU
    disagree with every candidate (MXArray.pack is tested against a bitstream reference in
    tests/test_mx.py, this function against the nibble layout in tests/test_mx_probes.py)."""
    f = mx.get_mx_format(fmt_name)
    r, k = codes.shape
    scales = np.zeros((r, -(-k // f.block_size)), np.uint8).view(f.scale_dtype)  # unread
    q = mx.MXArray(fmt=f, scales=scales, elements=codes.view(f.element.dtype), shape=(r, k),
                   axis=1, block_size=f.block_size, scale_mode=None)
    return q.pack().reshape(r, -1)


def _to_blocked(scales: np.ndarray) -> np.ndarray:
    """cuBLAS's block-scaling factor layout (128 x 4 tiles, each stored 32 x 4 x 4; "1D Block
    Scaling Factors Layout" of the cuBLAS docs), rows padded to 128 and columns to 4."""
    rows, cols = scales.shape
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    pad = np.zeros((pr, pc), scales.dtype)
    pad[:rows, :cols] = scales
    t = pad.reshape(pr // 128, 128, pc // 4, 4).transpose(0, 2, 1, 3)
    return t.reshape(-1, 4, 32, 4).transpose(0, 2, 1, 3).reshape(-1)


def gpu_block_scaled(fmt_name: str, codes: dict[str, np.ndarray]) -> np.ndarray:
    """Run the rows as one block-scaled GEMM on the GPU (torch.nn.functional.scaled_mm,
    cuBLASLt on Blackwell): A is R x K, B is K x R (column-major), fp32 output; result r is
    C[r, r]. Returns the fp32 bit patterns."""
    import torch
    import torch.nn.functional as F
    from torch.nn.functional import ScalingType, SwizzleType

    f = mx.get_mx_format(fmt_name)
    r, k = codes["a"].shape
    pr = -(-r // 128) * 128  # M and N padded to the scale tiles' 128 rows

    def operand(c):
        full = np.zeros((pr, k), np.uint8)
        full[:r] = c
        if f.elem_bits == 4:
            packed = _packed_elements(fmt_name, full)
            return torch.from_numpy(packed).view(torch.float4_e2m1fn_x2).cuda()
        return torch.from_numpy(full).view(torch.float8_e4m3fn).cuda()

    def scales(c):
        full = np.zeros((pr, c.shape[1]), np.uint8)
        full[:r] = c
        sdt = torch.float8_e8m0fnu if f.scale == "e8m0" else torch.float8_e4m3fn
        return torch.from_numpy(np.ascontiguousarray(_to_blocked(full))).view(sdt).cuda()

    recipe = ScalingType.BlockWise1x32 if f.scale == "e8m0" else ScalingType.BlockWise1x16
    out = F.scaled_mm(operand(codes["a"]), operand(codes["b"]).t(), scales(codes["sa"]), recipe,
                      scales(codes["sb"]), recipe, SwizzleType.SWIZZLE_32_4_4,
                      SwizzleType.SWIZZLE_32_4_4, output_dtype=torch.float32)
    torch.cuda.synchronize()
    d = out.diagonal()[:r].cpu().numpy().astype(np.float32)
    return d.view(np.uint32)


def record_block_scaled(out: Path, label: str, model: str | None,
                        formats=BS_FORMATS, groups=tuple(BS_GROUPS)) -> list[Path]:
    """Every (format, group) probe file ``<label>_<fmt>_<group>.npz``: the codes, the GPU's
    (or ``model``'s) fp32 result bits ``d``, and every candidate's prediction ``pred_<model>``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt_name in formats:
        for group in groups:
            if fmt_name not in BS_GROUP_FORMATS[group]:
                continue
            codes = block_codes(make_block_case(fmt_name, group))
            preds = {m: _fp32_bits(block_model_outputs(fmt_name, codes, m))
                     for m in block_models(fmt_name)}
            if model is None:
                d = gpu_block_scaled(fmt_name, codes)
            else:
                d = preds[model] if model in preds else _fp32_bits(
                    block_model_outputs(fmt_name, codes, model))
            path = out / f"{label}_{fmt_name}_{group.replace('_', '-')}.npz"
            np.savez_compressed(path, d=d, **codes,
                                **{f"pred_{m}": v for m, v in preds.items()},
                                meta=np.array(f"{label}|{fmt_name}|{group}|"
                                              f"{'model ' + model if model else 'gpu'}"))
            written.append(path)
    return written


def check_block_scaled(paths) -> list[tuple[str, str, str, int, int]]:
    """For each file and candidate: (file, format, model, rows agreeing, rows). NaN agrees
    with NaN (payloads differ between hardware and models)."""
    rows = []
    for path in paths:
        z = np.load(path)
        label, fmt_name, group, _ = str(z["meta"]).split("|")
        d = z["d"].view(np.float32)
        for key in sorted(k for k in z.files if k.startswith("pred_")):
            p = z[key].view(np.float32)
            same = (z["d"] == z[key]) | (np.isnan(d) & np.isnan(p))
            rows.append((Path(path).name, fmt_name, key[5:], int(same.sum()), len(d)))
    return rows


# -- fingerprint (fpsim.probe.fingerprint against the GPU) -----------------------------------

def matmul_fn(fin: str, fout: str, runner: Callable = None) -> Callable:
    """``fn(A, B, C) = A @ B + C`` for :func:`fpsim.probe.fingerprint`, one case per element
    of D (row i of A, column j of B, C[i, j]) run by ``runner(a_bits, b_bits, c_bits, fin,
    fout)`` (default: the GPU, :func:`gpu_patterns`; the dry run passes the model). K is padded
    with zero products to whole GPU calls."""
    runner = gpu_patterns if runner is None else runner
    tile = TILE[fin]

    def fn(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
        M, K = A.shape
        N = B.shape[1]
        Kp = -(-K // tile) * tile
        a = np.zeros((M * N, Kp))
        b = np.zeros((M * N, Kp))
        a[:, :K] = np.repeat(A, N, axis=0)
        b[:, :K] = np.tile(B.T, (M, 1))
        ab, bb, cb = to_patterns(a, b, np.asarray(C, dtype=np.float64).reshape(-1), fin)
        d = runner(ab, bb, cb, fin, fout)
        if (d == 0xFFFFFFFF).any():
            raise RuntimeError(f"the GPU does not run {fin}->{fout} tensor-core cases")
        return np.asarray(fpsim.from_bits(d, fout), dtype=np.float64).reshape(M, N)

    return fn


def fingerprint_units(pairs, label: str, model: str | None, out: Path | None) -> list[str]:
    """Fingerprint every pair on the GPU (or on fpsim's ``model`` for the dry run); one line
    each, also written to ``<out>/<label>_fingerprint.txt`` when ``out`` is given."""
    from fpsim.probe import fingerprint

    lines = []
    for fin, fout in pairs:
        if model is not None:
            try:
                tc.resolve_unit(model, fin, fout)
            except ValueError as exc:
                print(f"skip {fin}->{fout}: {exc.args[0].split(';')[0]}", file=sys.stderr)
                continue

            def runner(ab, bb, cb, fi, fo):
                return model_patterns(ab, bb, cb, fi, fo, model)
        else:
            runner = None
        try:
            unit = fingerprint(matmul_fn(fin, fout, runner), fin, fout)
        except (RuntimeError, ValueError) as exc:
            lines.append(f"{label} {fin}->{fout}: no unit ({exc})")
        else:
            lines.append(f"{label} {fin}->{fout}: {unit!r}")
        print(lines[-1])
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{label}_fingerprint.txt").write_text("\n".join(lines) + "\n")
    return lines


def _pairs(text: str):
    out = []
    for item in text.split(","):
        fin, _, fout = item.partition(":")
        fin = fpsim.get_float_format(fin.strip()).name
        fout = fpsim.get_float_format((fout or "fp32").strip()).name
        if (fin, fout) not in MODES:
            raise argparse.ArgumentTypeError(
                f"unsupported pair {item!r}; valid: "
                + ", ".join(f"{_FILE_IN.get(i, i)}:{o}" for i, o in MODES))
        out.append((fin, fout))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="folder for the result files")
    p.add_argument("--pairs", type=_pairs, default=ALL_PAIRS,
                   help="input:output pairs, e.g. fp16:fp32,fp16:fp16,bf16:fp32,tf32:fp32,"
                        "e4m3:fp32,e5m2:fp32 (default: all)")
    p.add_argument("--groups", default="all",
                   help="comma-separated case groups: " + ", ".join(GROUPS) + " (default all)")
    p.add_argument("--rows", type=int, default=240, help="cases per group and pair")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu-name", default=None,
                   help="label for the files (default: from the GPU, or --model)")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: write the model's predictions (needs --model)")
    p.add_argument("--model", default=None, help="fpsim GPU model for --dry-run, e.g. H100 "
                   "(with --block-scaled: a candidate, e.g. fp32, exact, B200-fp8-variant)")
    p.add_argument("--block-scaled", action="store_true",
                   help="record the MXFP8 / MXFP4 / NVFP4 GEMM probes instead (Blackwell)")
    p.add_argument("--check-block", nargs="+", type=Path, default=None, metavar="NPZ",
                   help="compare recorded block-scaled probe files with every candidate")
    p.add_argument("--fingerprint", action="store_true",
                   help="fingerprint the GPU's units (fpsim.probe.fingerprint) for --pairs; "
                        "with --dry-run, fpsim's --model instead")
    args = p.parse_args(argv)
    if args.fingerprint:
        if args.dry_run and args.model is None:
            p.error("--dry-run needs --model (e.g. --model H100)")
        model = args.model if args.dry_run else None
        label = args.gpu_name or (tc.get_gpu(model).name if model else detect_gpu_name())
        fingerprint_units(args.pairs, label, model, args.out)
        return 0
    if args.check_block:
        for name, fmt_name, model, agree, total in check_block_scaled(args.check_block):
            print(f"{name:48s} {fmt_name:11s} {model:20s} {agree:4d} / {total}")
        return 0
    if args.out is None:
        p.error("--out is required")
    if args.block_scaled:
        if args.dry_run and args.model is None:
            p.error("--dry-run needs --model (e.g. --model fp32)")
        label = args.gpu_name or (f"model-{args.model}" if args.dry_run else detect_gpu_name())
        for f in record_block_scaled(args.out, label, args.model if args.dry_run else None):
            print(f)
        return 0
    groups = list(GROUPS) if args.groups == "all" else [g.strip() for g in args.groups.split(",")]
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        p.error(f"unknown group(s) {bad}; valid: {', '.join(GROUPS)}")
    if args.dry_run:
        if args.model is None:
            p.error("--dry-run needs --model (e.g. --model H100)")
        label = args.gpu_name or tc.get_gpu(args.model).name
        files = record(args.out, args.pairs, groups, args.rows, args.seed, label, args.model)
    else:
        label = args.gpu_name or detect_gpu_name()
        files = record(args.out, args.pairs, groups, args.rows, args.seed, label, None)
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
