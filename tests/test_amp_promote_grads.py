"""AmpOptimizer.promote_grads (Apex O2's fp32 master gradients) widens fp16 / bf16 / fp8
gradients by the engine's exact widening (fp16's table, bf16's shift, fp8's byte table) instead
of astype, which is slow on fp16 subnormals (issue 31): the fp32 gradients must be astype's bit
for bit on every pattern, NaN payloads and signs included, small and large.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim import nn, optim
from fpsim.amp import initialize


@pytest.mark.parametrize("dtype,fmt", [(np.float16, "fp16"), (ml_dtypes.bfloat16, "bf16"),
                                       (ml_dtypes.float8_e4m3fn, "fp8_e4m3"),
                                       (ml_dtypes.float8_e5m2, "fp8_e5m2")])
@pytest.mark.parametrize("n", [300, 1 << 16])
def test_promote_grads_equals_astype(dtype, fmt, n):
    model = nn.Linear(n // 4, 4, rng=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    model, opt = initialize(model, opt, "O2", dtype=fmt, loss_scale=1.0)
    size = np.dtype(dtype).itemsize
    bits = np.arange(1 << (8 * size), dtype=f"u{size}")  # every pattern of the format
    bits = np.resize(bits[np.random.default_rng(0).permutation(bits.size)], n)
    w = model.weight
    g = bits.view(dtype).reshape(w.shape)
    w.set_grad_(g.copy())
    opt.promote_grads()
    with np.errstate(invalid="ignore"):
        want = g.astype(np.float32)
    assert w.grad.dtype == np.float32 and w.grad.shape == want.shape
    assert w.grad.tobytes() == want.tobytes()
    assert not np.shares_memory(w.grad, g)
