"""W8A8 (fpsim.quant.w8a8) against symmetric absmax int8 written out here (NumPy, and exact
codes by hand), the layer's output against int8(x) int8(W)^T + b computed in NumPy, the model
helper leaving its input alone, and SmoothQuant's gain on a GPT with an outlier channel."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim.autograd.tensor import Tensor
from fpsim.models import GPT
from fpsim.nn import Linear
from fpsim.quant import (
    W8A8Linear,
    calibrate_activation_max,
    int8_fake_quantize,
    logits_difference,
    quantize_w8a8,
    smooth_gpt,
)


def _ref(x, amax):
    """int8 absmax: round_half_even(x * 127 / amax), clamped to [-127, 127], times amax / 127."""
    inv = np.float32(127) / np.float32(amax)
    return (np.clip(np.rint(x.astype(np.float32) * inv), -127, 127) / inv).astype(np.float32)


def test_hand_codes():
    x = np.array([[1.0, 0.01, -0.02], [0.5, 0.25, 0.0]], np.float32)
    # per tensor, amax 1: codes 127, 1, -3 (1.27, -2.54 round to 1, -3), 64 (63.5 -> even), 32
    codes = np.rint(int8_fake_quantize(x, "per_tensor").astype(np.float64) * 127)
    assert codes.tolist() == [[127, 1, -3], [64, 32, 0]]
    codes = np.rint(int8_fake_quantize(x, "per_token")[1].astype(np.float64) * 127 / 0.5)
    assert codes.tolist() == [127, 64, 0]  # 63.5 -> 64


def test_against_numpy_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    np.testing.assert_array_equal(int8_fake_quantize(x), _ref(x, np.abs(x).max()))
    rows = np.abs(x).max(-1, keepdims=True)
    np.testing.assert_array_equal(int8_fake_quantize(x, "per_token"), _ref(x, rows))
    np.testing.assert_array_equal(int8_fake_quantize(x, "per_channel"),
                                  int8_fake_quantize(x, "per_token"))
    assert (int8_fake_quantize(np.zeros((2, 3)), "per_token") == 0).all()


def test_outlier_channel_hurts_per_tensor_and_per_token():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    x[:, 3] *= 100  # one outlier channel, on every token
    small = np.arange(32) != 3
    for g in ("per_tensor", "per_token"):
        err = np.abs(int8_fake_quantize(x, g) - x)[:, small]
        assert err.mean() > 0.1  # ~ 100 * max|x| / 254 ... most small values round to 0 or 1
    clean = x.copy()
    clean[:, 3] /= 100
    assert np.abs(int8_fake_quantize(clean, "per_token") - clean).mean() < 0.01


def test_layer_output():
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((6, 8)), rng.standard_normal(6)
    x = rng.standard_normal((3, 8))
    lin = W8A8Linear(w, b, act_granularity="per_token")
    wq = _ref(w, np.abs(w.astype(np.float32)).max(1, keepdims=True)).astype(np.float64)
    xq = _ref(x, np.abs(x.astype(np.float32)).max(1, keepdims=True)).astype(np.float64)
    np.testing.assert_allclose(lin(Tensor(x)).numpy(np.float64),
                               xq @ wq.T + b.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_model_helper_and_no_mutation():
    gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=2, n_heads=2, rng=0)
    before = {n: p.numpy(np.float64).copy() for n, p in gpt.named_parameters()}
    q = quantize_w8a8(gpt, "per_token")
    assert sum(type(m) is W8A8Linear for m in q.modules()) == 8
    assert not any(type(m) is W8A8Linear for m in gpt.modules())
    for n, p in gpt.named_parameters():
        np.testing.assert_array_equal(p.numpy(np.float64), before[n])
    d = logits_difference(q, gpt, np.array([[1, 2, 3, 4]]))
    assert 0 < d["max_abs"] < 0.05
    assert type(quantize_w8a8(Linear(4, 2, rng=0))) is W8A8Linear


def test_smoothquant_rescues_w8a8_with_an_outlier_channel():
    gpt = GPT(vocab_size=11, context=8, d_model=32, n_layers=1, n_heads=2, rng=0)
    rng = np.random.default_rng(3)
    for name, p in gpt.named_parameters():  # a trained-looking model: larger weights
        if name.endswith("weight") and p.ndim == 2:
            p.data = rng.standard_normal(p.shape) * 0.3
    for ln in (gpt.h[0].ln_1, gpt.h[0].ln_2):
        w = np.ones(32)
        w[[4, 17]] = 40.0  # outlier channels of the LayerNorm outputs, as in LLMs
        ln.weight.data = w
    idx = rng.integers(0, 11, size=(4, 8))
    amax = calibrate_activation_max(gpt, [idx])
    smoothed, _ = smooth_gpt(gpt, amax, 0.5)
    plain = logits_difference(quantize_w8a8(gpt, "per_tensor"), gpt, idx)["rms"]
    smooth = logits_difference(quantize_w8a8(smoothed, "per_tensor"), gpt, idx)["rms"]
    assert smooth < plain / 2


def test_bad_inputs():
    with pytest.raises(ValueError, match="valid: 'per_tensor', 'per_token', 'per_channel'"):
        int8_fake_quantize(np.ones(3), "per_row")
    with pytest.raises(ValueError, match="NaN"):
        int8_fake_quantize(np.array([np.inf, 1.0]))
    with pytest.raises(TypeError, match="real array"):
        int8_fake_quantize(np.array(["a"]))
    with pytest.raises(ValueError, match="non-empty"):
        int8_fake_quantize(np.array([]))
    with pytest.raises(ValueError, match="out_features, in_features"):
        W8A8Linear(np.ones(3))
    with pytest.raises(ValueError, match="act_granularity"):
        W8A8Linear(np.ones((2, 3)), act_granularity="per_channel")
    with pytest.raises(ValueError, match="bias has shape"):
        W8A8Linear(np.ones((2, 3)), np.ones(3))
    with pytest.raises(TypeError, match="fpsim Module"):
        quantize_w8a8("gpt")
