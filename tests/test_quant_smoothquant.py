"""SmoothQuant (fpsim.quant.smoothquant) against hand-computed factors, the identity
(X / s) (W * s)^T == X W^T in float64, the smoothed GPT computing the same logits in fp64,
the balance alpha = 0.5 strikes (the smoothed activation and weight maxima equal), the
calibrated maxima against a LayerNorm written out in NumPy, bad inputs and no mutation."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim.models import GPT
from fpsim.quant import calibrate_activation_max, smooth_gpt, smoothing_factors

IDS = [np.array([[1, 2, 3, 4, 5, 6, 7, 0], [3, 3, 9, 10, 2, 1, 0, 5]])]


def _gpt(**kw):
    return GPT(vocab_size=11, context=8, d_model=16, n_layers=2, n_heads=2, rng=0, **kw)


def test_factors_hand_case():
    act, w = [16.0, 1.0], [[1.0, 4.0], [-0.25, 1.0]]  # column maxima 1 and 4
    np.testing.assert_array_equal(smoothing_factors(act, w, 0.5), [4.0, 0.5])
    np.testing.assert_array_equal(smoothing_factors(act, w, 1.0), [16.0, 1.0])
    np.testing.assert_array_equal(smoothing_factors(act, w, 0.0), [1.0, 0.25])
    # a channel never active and a column of zeros are clamped as the reference code does
    np.testing.assert_array_equal(smoothing_factors([0.0, 4.0], [[1.0, 0.0]], 0.5),
                                  [1e-5, 4.0 ** 0.5 / 1e-5 ** 0.5])


def test_identity_in_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 24)) * np.where(np.arange(24) == 5, 50.0, 1.0)
    w = rng.standard_normal((40, 24))
    s = smoothing_factors(np.abs(x).max(0), w, 0.5)
    np.testing.assert_allclose((x / s) @ (w * s).T, x @ w.T, rtol=1e-12, atol=1e-12)
    # alpha = 0.5 balances: the smoothed activation and weight maxima of each channel agree
    np.testing.assert_allclose(np.abs(x / s).max(0), np.abs(w * s).max(0), rtol=1e-12)


def test_smoothed_gpt_computes_the_same_function():
    gpt = _gpt().to("fp64")
    amax = calibrate_activation_max(gpt, IDS)
    smoothed, s = smooth_gpt(gpt, amax, alpha=0.5)
    np.testing.assert_allclose(smoothed(IDS[0]).numpy(), gpt(IDS[0]).numpy(), rtol=0,
                               atol=1e-12)
    assert sorted(s) == ["h.0.attn.c_attn", "h.0.mlp.c_fc", "h.1.attn.c_attn", "h.1.mlp.c_fc"]
    # after smoothing, the calibrated maxima of c_attn's input are divided by s
    amax2 = calibrate_activation_max(smoothed, IDS)
    np.testing.assert_allclose(amax2["h.0.attn.c_attn"], amax["h.0.attn.c_attn"]
                               / s["h.0.attn.c_attn"], rtol=1e-12)
    w0 = gpt.h[0].attn.c_attn.weight.numpy(np.float64)
    np.testing.assert_allclose(smoothed.h[0].attn.c_attn.weight.numpy(np.float64),
                               w0 * s["h.0.attn.c_attn"], rtol=1e-15)


def test_calibration_against_layernorm_in_numpy():
    gpt = _gpt()
    amax = calibrate_activation_max(gpt, IDS)
    wte, wpe = gpt.wte.weight.numpy(np.float64), gpt.wpe.weight.numpy(np.float64)
    x = wte[IDS[0]] + wpe[np.arange(8)]
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)  # init 1, 0
    np.testing.assert_allclose(amax["h.0.attn.c_attn"], np.abs(ln).reshape(-1, 16).max(0),
                               rtol=1e-5)
    assert set(amax) == {f"h.{i}.{m}" for i in range(2) for m in (
        "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    assert amax["h.0.mlp.c_proj"].shape == (64,)
    # two batches: the channel maxima are the larger of each batch's
    a, b = (calibrate_activation_max(gpt, [IDS[0][i:i + 1]]) for i in range(2))
    np.testing.assert_array_equal(amax["h.1.mlp.c_fc"], np.maximum(a["h.1.mlp.c_fc"],
                                                                   b["h.1.mlp.c_fc"]))


def test_no_mutation():
    gpt = _gpt()
    before = {n: p.numpy(np.float64).copy() for n, p in gpt.named_parameters()}
    amax = calibrate_activation_max(gpt, IDS)
    smooth_gpt(gpt, amax, 0.8)
    for n, p in gpt.named_parameters():
        np.testing.assert_array_equal(p.numpy(np.float64), before[n])
    assert "forward" not in vars(gpt.h[0].attn.c_attn)  # no wrapper left behind


def test_bad_inputs():
    w = np.ones((3, 2))
    with pytest.raises(ValueError, match="alpha must be in"):
        smoothing_factors([1.0, 1.0], w, 1.5)
    with pytest.raises(TypeError, match="alpha"):
        smoothing_factors([1.0, 1.0], w, "0.5")
    with pytest.raises(ValueError, match="2 channels but the weight has 3"):
        smoothing_factors([1.0, 1.0], np.ones((2, 3)))
    with pytest.raises(ValueError, match=">= 0"):
        smoothing_factors([-1.0, 1.0], w)
    with pytest.raises(ValueError, match="NaN"):
        smoothing_factors([np.nan, 1.0], w)
    gpt = _gpt()
    with pytest.raises(TypeError, match="GPT"):
        smooth_gpt(gpt.h[0], {})
    with pytest.raises(ValueError, match="no channel maxima for layer 'h.0.attn.c_attn'"):
        smooth_gpt(gpt, {})
    with pytest.raises(ValueError, match="empty"):
        calibrate_activation_max(gpt, [])
    with pytest.raises(TypeError, match="iterable"):
        calibrate_activation_max(gpt, IDS[0])
