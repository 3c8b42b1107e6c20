"""matmul(..., promote_every=N_C): DeepSeek-V3's promotion of tensor-core partial sums to fp32,
against the Fraction reference (tests/tensorcore_reference.py) with float32 additions; and the
accumulation experiment (fpsim.tensorcore.promotion)."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim.tensorcore as tc
from tests import tensorcore_reference as ref


@pytest.mark.parametrize("gpu, fin, every", [("H100", "fp8_e4m3", 32), ("H100", "fp8_e5m2", 64),
                                             ("A100", "fp16", 16), ("H100", "bf16", 48)])
def test_promotion_against_reference(gpu, fin, every):
    rng = np.random.default_rng(7)
    M, K, N = 3, 100, 2
    scale = np.exp2(rng.integers(-6, 6, size=(M, K)))
    A = tc.convert_input(rng.normal(size=(M, K)) * scale, fin)
    B = tc.convert_input(rng.normal(size=(K, N)), fin)
    C = rng.normal(size=(M, N)).astype(np.float32).astype(np.float64)
    got = tc.matmul(A, B, C, gpu=gpu, input_format=fin, promote_every=every)
    u = ref.unit_for(gpu, fin, "fp32")
    for i in range(M):
        for j in range(N):
            d = np.float32(C[i, j])
            for k0 in range(0, K, every):
                part = ref.dot(list(A[i, k0:k0 + every]), list(B[k0:k0 + every, j]), 0.0, u)
                d = np.float32(d + np.float32(part))
            assert got[i, j] == float(d), (i, j)


def test_promotion_differs_from_plain():
    """The doctest case: 64 products of 2**-9 beside 256 vanish in the 13-bit accumulator."""
    A, B = np.full((1, 64), 1.0), np.full((64, 1), 2.0 ** -9)
    plain = tc.matmul(A, B, [[256.0]], gpu="H100", input_format="fp8_e4m3")
    prom = tc.matmul(A, B, [[256.0]], gpu="H100", input_format="fp8_e4m3", promote_every=32)
    assert (plain[0, 0], prom[0, 0]) == (256.0, 256.125)


@pytest.mark.parametrize("every, err, match", [
    (48, ValueError, "multiple of the unit's block size 32"), (0, ValueError, "promote_every"),
    ("abc", TypeError, "promote_every")])
def test_promotion_bad_arguments(every, err, match):
    with pytest.raises(err, match=match):
        tc.matmul(np.ones((1, 64)), np.ones((64, 1)), gpu="H100", input_format="fp8_e4m3",
                  promote_every=every)


def test_promotion_needs_fp32_output():
    with pytest.raises(ValueError, match="fp32"):
        tc.matmul(np.ones((1, 16)), np.ones((16, 1)), gpu="H100", output_format="fp16",
                  promote_every=16)


def test_deepseek_experiment():
    """Without promotion the error grows with K (the 13 + 1-bit accumulator); promoting every
    N_C keeps it flat, smaller for smaller N_C."""
    r = tc.promotion_experiment(ks=(128, 1024, 4096), every=(32, 128), outputs=4)
    print(r)
    assert r.plain[2] > 20 * r.plain[0] and r.plain[2] > 0.01
    for n in (32, 128):
        assert r.promoted[n][2] < r.plain[2] / 10
        assert r.promoted[n][2] < 2 * r.promoted[n][0] + 1e-6
    assert r.promoted[32][2] < r.promoted[128][2]
