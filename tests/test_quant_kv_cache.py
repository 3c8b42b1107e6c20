"""KV-cache quantization (fpsim.quant.kv_cache) against int8 absmax written out in NumPy,
ml_dtypes' OCP float8_e4m3fn cast for fp8, per-head scales equal to per-token scales of each
head's slice, the quantized GPT's queries untouched, nanoGPT's attention against the model's own
forward, lm_loss against a log-softmax in NumPy, bad inputs and no mutation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim.models import GPT
from fpsim.quant import (
    attention_error,
    kv_fake_quantize,
    lm_loss,
    logits_difference,
    quantize_kv_cache,
)
from fpsim.quant.kv_cache import _attention


def _gpt():
    return GPT(vocab_size=11, context=8, d_model=16, n_layers=2, n_heads=2, rng=0)


def _int8(x, amax):
    inv = np.float32(127) / np.float32(amax)
    return (np.clip(np.rint(x * inv), -127, 127) / inv).astype(np.float32)


def test_int8_per_token_and_per_head():
    rng = np.random.default_rng(0)
    k = rng.standard_normal((2, 5, 12)).astype(np.float32)
    np.testing.assert_array_equal(kv_fake_quantize(k, "int8", "per_token"),
                                  _int8(k, np.abs(k).max(-1, keepdims=True)))
    per_head = kv_fake_quantize(k, "int8", "per_head", n_heads=3)
    for h in range(3):
        part = k[..., 4 * h:4 * h + 4]
        np.testing.assert_array_equal(per_head[..., 4 * h:4 * h + 4],
                                      _int8(part, np.abs(part).max(-1, keepdims=True)))
    np.testing.assert_array_equal(kv_fake_quantize(k, "int8", "per_tensor"),
                                  _int8(k, np.abs(k).max()))


def test_fp8_per_tensor_against_ml_dtypes():
    rng = np.random.default_rng(1)
    v = (rng.standard_normal((3, 7, 8)) * 3).astype(np.float32)
    scale = np.float32(448) / np.abs(v).max()
    ref = (v * scale).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * (np.float32(1) / scale)
    np.testing.assert_array_equal(kv_fake_quantize(v, "e4m3", "per_tensor"), ref)
    scale = np.float32(57344) / np.abs(v).max()
    ref = (v * scale).astype(ml_dtypes.float8_e5m2).astype(np.float32) * (np.float32(1) / scale)
    np.testing.assert_array_equal(kv_fake_quantize(v, "e5m2", "per_tensor"), ref)
    assert (kv_fake_quantize(np.zeros((2, 4)), "e4m3", "per_token") == 0).all()


def test_quantized_model_changes_only_k_and_v():
    gpt = _gpt()
    before = {n: p.numpy(np.float64).copy() for n, p in gpt.named_parameters()}
    q = quantize_kv_cache(gpt, "int8", "per_head")
    x = np.random.default_rng(2).standard_normal((1, 4, 16))
    from fpsim.autograd.tensor import Tensor
    ref = gpt.h[0].attn.c_attn(Tensor(x)).numpy(np.float64)
    got = q.h[0].attn.c_attn(Tensor(x)).numpy(np.float64)
    np.testing.assert_array_equal(got[..., :16], ref[..., :16])  # the queries
    np.testing.assert_array_equal(got[..., 16:32], kv_fake_quantize(ref[..., 16:32], "int8",
                                                                     "per_head", 2))
    for n, p in gpt.named_parameters():
        np.testing.assert_array_equal(p.numpy(np.float64), before[n])
    d = logits_difference(q, gpt, np.array([[1, 2, 3, 4, 5]]))
    assert 0 < d["max_abs"] < 0.01 and d["top1_agree"] == 1.0


def test_attention_matches_the_model_and_errors_order():
    gpt = _gpt()
    idx = np.array([[1, 2, 3, 4, 5, 6]])
    seen = {}
    lin, proj = gpt.h[0].attn.c_attn, gpt.h[0].attn.c_proj
    old_lin, old_proj = lin.forward, proj.forward
    object.__setattr__(lin, "forward", lambda x: seen.setdefault("qkv", old_lin(x)))

    def proj_forward(y):
        seen["y"] = y
        return old_proj(y)

    object.__setattr__(proj, "forward", proj_forward)
    gpt(idx)
    np.testing.assert_allclose(_attention(seen["qkv"].numpy(np.float64), 2),
                               seen["y"].numpy(np.float64), rtol=1e-5, atol=1e-6)
    int8 = attention_error(_gpt(), idx, "int8", "per_head")
    fp8 = attention_error(_gpt(), idx, "e4m3", "per_tensor")
    assert set(int8) == {"h.0", "h.1"}
    assert all(0 < int8[k] < fp8[k] < 0.1 for k in int8)  # 8 bits of int8 beat e4m3's 4


def test_lm_loss_against_numpy():
    gpt = _gpt()
    ids = np.arange(30) % 11
    t = 8
    starts = np.linspace(0, 30 - t - 1, 3).astype(np.int64)
    pos = starts[:, None] + np.arange(t)
    z = gpt(ids[pos]).numpy(np.float64)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    ref = np.mean(lse - np.take_along_axis(z, ids[pos + 1][..., None], -1)[..., 0])
    assert lm_loss(gpt, ids, windows=3, batch_size=2) == pytest.approx(ref, rel=1e-12)


def test_bad_inputs():
    k = np.ones((2, 4))
    with pytest.raises(ValueError, match="valid: 'int8', or an 8-bit float"):
        kv_fake_quantize(k, "int4")
    with pytest.raises(ValueError, match="valid: 'per_tensor', 'per_token', 'per_head'"):
        kv_fake_quantize(k, "int8", "per_block")
    with pytest.raises(ValueError, match="divisor of the last axis"):
        kv_fake_quantize(k, "int8", "per_head", n_heads=3)
    with pytest.raises(ValueError, match="NaN"):
        kv_fake_quantize(np.array([[np.nan]]))
    with pytest.raises(TypeError, match="GPT"):
        quantize_kv_cache(k)
    with pytest.raises(TypeError, match="integer"):
        lm_loss(_gpt(), np.ones(20))
    with pytest.raises(ValueError, match="more than context"):
        lm_loss(_gpt(), np.arange(5))
