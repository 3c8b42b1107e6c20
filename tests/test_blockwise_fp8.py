"""fpsim.quant.blockwise_fp8 (DeepSeek-V3's fine-grained FP8): tile scales and E4M3 values
against ml_dtypes casts, the promoted GEMM against float64 sums of the same quantized values,
the layer's gradients against the exact ones within the format's error, and the H100
tensor-core path."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim.autograd.tensor import Tensor
from fpsim.quant.blockwise_fp8 import BlockwiseFP8Linear, blockwise_gemm, quantize_tiles


@pytest.mark.parametrize("shape,axis,block", [((5, 300), 1, None), ((300, 7), 0, None),
                                              ((130, 260), 1, 0), ((3, 128), 1, None)])
def test_tiles_match_ml_dtypes(shape, axis, block):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(shape) * np.exp(rng.uniform(-8, 8, shape))).astype(np.float32)
    q, s = quantize_tiles(a, axis, block_axis=block)
    tr = 128 if axis == 0 or block == 0 else 1
    tc = 128 if axis == 1 or block == 1 else 1
    full = np.repeat(np.repeat(s, tr, 0), tc, 1)[:shape[0], :shape[1]]
    # independent reference: the amax of each tile by a plain loop, ml_dtypes' e4m3fn cast
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            tile = a[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc]
            assert s[i, j] == np.float32(np.abs(tile).max()) / np.float32(448)
    ref = (a / full).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert np.array_equal(q, ref)
    assert np.abs(q).max() == 448.0  # every tile's amax lands on e4m3's largest value


def test_promoted_gemm_is_the_scaled_sum_of_block_products():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 384)).astype(np.float32)
    b = rng.standard_normal((384, 3)).astype(np.float32)
    aq, sa = quantize_tiles(a, 1)
    bq, sb = quantize_tiles(b, 0)
    out = blockwise_gemm(aq, sa, bq, sb)
    exact = sum((aq[:, k:k + 128] @ bq[k:k + 128]) * sa[:, j:j + 1] * sb[j:j + 1]
                for j, k in enumerate(range(0, 384, 128)))
    assert np.allclose(out, exact, rtol=2e-6)  # fp32 roundings only
    assert np.allclose(out, a @ b, rtol=0.1, atol=0.2)  # e4m3 keeps 3 bits


def test_layer_gradients_close_to_exact():
    rng = np.random.default_rng(3)
    lin = BlockwiseFP8Linear(200, 150, rng=0)
    x = Tensor(rng.standard_normal((2, 70, 200)), requires_grad=True)
    y = lin(x)
    g = rng.standard_normal(y.shape)
    (y * Tensor(g)).sum().backward()
    w = lin.weight.numpy(np.float64)
    xv = x.numpy(np.float64).reshape(-1, 200)
    g2 = g.reshape(-1, 150)
    for got, want in ((y.numpy(np.float64).reshape(-1, 150), xv @ w.T + lin.bias.numpy()),
                      (x.grad.reshape(-1, 200), g2 @ w), (lin.weight.grad, g2.T @ xv)):
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert 1e-4 < rel < 0.08  # quantized (not exact), within e4m3's few bits


def test_h100_tensor_core_path_runs_and_stays_close():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 256)).astype(np.float32)
    b = rng.standard_normal((256, 8)).astype(np.float32)
    aq, sa = quantize_tiles(a, 1)
    bq, sb = quantize_tiles(b, 0)
    ideal = blockwise_gemm(aq, sa, bq, sb)
    h100 = blockwise_gemm(aq, sa, bq, sb, tensor_core="H100")
    assert np.allclose(h100, ideal, rtol=1e-2, atol=1e-2 * np.abs(ideal).max())
    with pytest.raises(TypeError, match="tensor_core"):
        BlockwiseFP8Linear(2, 2, tensor_core=3)
