"""Bytes moved and the roofline: fpsim.memory.tensor_bytes (bytes of a tensor per format, block
scales included) against NumPy's nbytes and the real packed size of fpsim.mx's quantized arrays;
fpsim.tensorcore.perf's gemm_bytes, arithmetic_intensity, ridge_point, roofline_tflops and
gemm_roofline against the formulas worked by hand in exact arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim.mx as mx
from fpsim.memory import tensor_bytes
from fpsim.tensorcore.perf import (
    PERF_GPUS,
    arithmetic_intensity,
    gemm_bytes,
    gemm_roofline,
    peak_tflops,
    ridge_point,
    roofline_tflops,
)

# -- tensor_bytes ---------------------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "dtype"), [
    ("fp32", np.float32), ("fp16", np.float16), ("bf16", ml_dtypes.bfloat16),
    ("fp8_e4m3", ml_dtypes.float8_e4m3fn), ("fp8_e5m2", ml_dtypes.float8_e5m2),
    ("fp6_e2m3", ml_dtypes.float6_e2m3fn), ("fp4_e2m1", ml_dtypes.float4_e2m1fn),
    ("int8", np.int8)])
@pytest.mark.parametrize("shape", [(7, 33), (1,), (0, 5), (2, 3, 4)])
def test_plain_unpacked_is_numpys_nbytes(fmt, dtype, shape):
    assert tensor_bytes(shape, fmt, packed=False) == np.zeros(shape, dtype).nbytes


@pytest.mark.parametrize(("fmt", "bits"), [("fp32", 32), ("bf16", 16), ("fp8_e4m3", 8),
                                           ("fp6_e3m2", 6), ("fp4_e2m1", 4)])
def test_plain_packed_is_bits_rounded_up_once(fmt, bits):
    for shape in [(8192, 8192), (3,), (5, 7), ()]:
        n = math.prod(shape)
        assert tensor_bytes(shape, fmt) == -(-n * bits // 8)


def test_tf32_is_stored_as_fp32():
    assert tensor_bytes((10, 10), "tf32") == 400 == tensor_bytes((10, 10), "tf32", packed=False)


@pytest.mark.parametrize("fmt", sorted(mx.MX_FORMATS))
@pytest.mark.parametrize("shape", [(64,), (3, 40), (5, 16), (2, 3, 33), (1, 1), (4, 0)])
def test_block_scaled_is_the_quantized_arrays_nbytes(fmt, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert tensor_bytes(shape, fmt) == mx.quantize(x, fmt).nbytes
    if fmt == "nvfp4":
        q = mx.quantize(x, fmt, per_tensor_scale=0.5)
        assert tensor_bytes(shape, fmt, per_tensor_scale=True) == q.nbytes
    q = mx.quantize(x, fmt, block_size=8)
    assert tensor_bytes(shape, fmt, block_size=8) == q.nbytes


def test_block_scaled_by_hand():
    n = 8192 * 8192
    assert tensor_bytes((8192, 8192), "mxfp8_e4m3") == n + n // 32
    assert tensor_bytes((8192, 8192), "mxfp6_e2m3") == n * 6 // 8 + n // 32
    assert tensor_bytes((8192, 8192), "mxfp4") == n // 2 + n // 32
    assert tensor_bytes((8192, 8192), "nvfp4", per_tensor_scale=True) == n // 2 + n // 16 + 4
    # unpacked fp4 elements: one byte each (the storage dtype), the scales on top
    assert tensor_bytes((8192, 8192), "mxfp4", packed=False) == n + n // 32
    # bits per value at large sizes: element bits + 8 / block
    for name, f in mx.MX_FORMATS.items():
        assert Fraction(tensor_bytes((1024, 1024), name) * 8, 1024 * 1024) == \
            Fraction(f.bits_per_value)


def test_tensor_bytes_refuses():
    with pytest.raises(ValueError, match="block-scaled"):
        tensor_bytes((4,), "bf16", per_tensor_scale=True)
    with pytest.raises(ValueError, match="block-scaled"):
        tensor_bytes((4,), "fp8_e4m3", block_size=32)
    with pytest.raises(ValueError, match="NVFP4"):
        tensor_bytes((32,), "mxfp4", per_tensor_scale=True)
    with pytest.raises(ValueError, match="at least one axis"):
        tensor_bytes((), "mxfp8_e4m3")
    with pytest.raises(TypeError, match="shape"):
        tensor_bytes(5, "bf16")
    with pytest.raises(ValueError, match="shape"):
        tensor_bytes((-1, 4), "bf16")
    with pytest.raises(ValueError):
        tensor_bytes((4,), "no such format")
    with pytest.raises(ValueError, match="block_size"):
        tensor_bytes((4,), "mxfp4", block_size=0)


# -- the roofline ---------------------------------------------------------------------------

def test_gemm_bytes_and_intensity_by_hand():
    M, N, K = 512, 1024, 4096
    for bi, bo in [(16, 16), (8, 16), (8.25, 16), (4.5, 32), (32, 32)]:
        exact = (Fraction(M * K + K * N) * Fraction(bi) + M * N * Fraction(bo)) / 8
        assert gemm_bytes(M, N, K, bi, bo) == float(exact)
        assert arithmetic_intensity(M, N, K, bi, bo) == pytest.approx(
            float(2 * M * N * K / exact), rel=1e-15)
    assert gemm_bytes(M, N, K, 16) == gemm_bytes(M, N, K, 16, 16)
    # square n, one format of b bytes: 2 n / (3 b)
    for n, b in [(4096, 2), (8192, 1), (1000, 4)]:
        assert arithmetic_intensity(n, n, n, 8 * b) == pytest.approx(2 * n / (3 * b), rel=1e-15)
    # halving the bytes doubles the intensity
    assert arithmetic_intensity(777, 333, 129, 8) == 2 * arithmetic_intensity(777, 333, 129, 16)


def test_ridge_and_roofline():
    assert ridge_point(989.0, 2.0) == 494.5
    for ai in (1.0, 100.0, 494.5, 1e4):
        assert roofline_tflops(ai, 989.0, 2.0) == min(989.0, 2.0 * ai)
    assert roofline_tflops(ridge_point(312.0, 1.5), 312.0, 1.5) == 312.0


@pytest.mark.parametrize("gpu", sorted(PERF_GPUS))
def test_gemm_roofline_by_hand(gpu):
    for dtype in PERF_GPUS[gpu].peak_tflops:
        p = peak_tflops(gpu, dtype)
        for (M, N, K), bw in [((4096, 4096, 4096), 2.0), ((8, 4096, 4096), 1.0),
                              ((8192, 1024, 65536), 0.5)]:
            r = gemm_roofline(M, N, K, gpu, dtype, bandwidth_tbps=bw)
            b = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1, "fp8": 1}[dtype]
            nbytes = (M * K + K * N + M * N) * b
            assert (r.flops, r.bytes, r.peak_tflops) == (2 * M * N * K, nbytes, p)
            assert r.compute_s == pytest.approx(2 * M * N * K / (p * 1e12), rel=1e-15)
            assert r.memory_s == pytest.approx(nbytes / (bw * 1e12), rel=1e-15)
            assert r.time_s == max(r.compute_s, r.memory_s)
            assert r.bound == ("compute" if r.intensity >= r.ridge else "memory")
            assert r.attainable_tflops == pytest.approx(min(p, bw * r.intensity), rel=1e-12)
            assert r.ridge == p / bw
            assert gpu in str(r) and r.bound in str(r)


def test_gemm_roofline_bits_and_the_crossover():
    # fp8 on H100: twice bf16's peak and half its bytes: the same crossover size
    r = gemm_roofline(1024, 1024, 1024, "H100", "fp8", bandwidth_tbps=3.0, in_bits=8.25,
                      out_bits=16)
    assert (r.in_bits, r.out_bits) == (8.25, 16)
    assert r.bytes == (2 * 1024 * 1024 * 8.25 + 1024 * 1024 * 16) / 8
    assert gemm_roofline(1, 1, 1, "A100", "tf32", bandwidth_tbps=1).in_bits == 32
    # square n is compute-bound from n = 3 b P / (2 B) on
    n_star = 3 * 2 * 989 / (2 * 2.0)
    assert gemm_roofline(math.ceil(n_star), math.ceil(n_star), math.ceil(n_star), "H100",
                         "bf16", bandwidth_tbps=2.0).bound == "compute"
    m = math.floor(n_star) - 1
    assert gemm_roofline(m, m, m, "H100", "bf16", bandwidth_tbps=2.0).bound == "memory"


def test_roofline_refuses():
    with pytest.raises(ValueError, match="bandwidth_tbps"):
        ridge_point(989.0, 0)
    with pytest.raises(ValueError, match="peak_tflops"):
        roofline_tflops(1.0, math.inf, 1.0)
    with pytest.raises(TypeError, match="intensity"):
        roofline_tflops("1", 1.0, 1.0)
    with pytest.raises(ValueError, match="in_bits"):
        gemm_bytes(4, 4, 4, -8)
    with pytest.raises(ValueError, match="K"):
        arithmetic_intensity(4, 4, 0)
    with pytest.raises(TypeError):
        gemm_roofline(4, 4, 4, "H100", "bf16")  # no bandwidth: fpsim has none to assume
    with pytest.raises(ValueError, match="no fp8 peak|has no fp8"):
        gemm_roofline(4, 4, 4, "A100", "fp8", bandwidth_tbps=1.0)
    with pytest.raises(TypeError, match="out_bits"):
        gemm_bytes(4, 4, 4, 8, out_bits=True)
