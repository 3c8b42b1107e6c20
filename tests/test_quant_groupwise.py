"""Group-wise weight-only quantization (fpsim.quant.groupwise) against hand-computed cases in
exact arithmetic (Fractions), AWQ's RTN formulas written out here in NumPy, the published NF4
code values (bitsandbytes / QLoRA) with a brute-force nearest search, the storage arithmetic,
invariances, bad inputs, and the model helper leaving its input alone."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fpsim.models import GPT
from fpsim.quant import (
    groupwise_dequantize,
    groupwise_fake_quantize,
    groupwise_quantize,
    quantize_model_weights,
)

# docs/facts.md, "QLoRA NF4 code values (bitsandbytes)"
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], np.float32)


def _round_half_even(f: Fraction) -> int:
    return round(f)  # Python rounds a Fraction half to even


def test_symmetric_hand_case_exact():
    w = [[0.7, -0.35, 0.1, 0.0]]
    q = groupwise_quantize(w, group_size=2, mode="sym", bits=4)
    # group 1: s = fp16(0.7 / 7); group 2: s = fp16(0.1 / 7)
    s = [Fraction(float(np.float16(0.7 / 7))), Fraction(float(np.float16(0.1 / 7)))]
    codes = [_round_half_even(Fraction(w[0][i]) / s[i // 2]) for i in range(4)]
    assert q.codes.tolist() == [codes] == [[7, -4, 7, 0]]
    assert q.codes.dtype == np.int8 and q.scales.dtype == np.float16
    assert [Fraction(float(v)) for v in q.scales[0]] == s
    deq = groupwise_dequantize(q, np.float64)[0]
    assert [Fraction(float(v)) for v in deq] == [c * s[i // 2] for i, c in enumerate(codes)]


def test_asymmetric_hand_case_exact():
    w = [[-1.0, 0.0, 0.5, 2.0]]
    q = groupwise_quantize(w, group_size=4, mode="asym", bits=4)
    s = Fraction(float(np.float16(3 / 15)))
    z = min(max(-_round_half_even(Fraction(-1) / s), 0), 15)
    codes = [min(max(_round_half_even(Fraction(v) / s) + z, 0), 15) for v in w[0]]
    assert (z, codes) == (5, [0, 5, 8, 15])
    assert q.zeros.tolist() == [[z]] and q.codes.tolist() == [codes]
    assert q.codes.dtype == np.uint8 and q.zeros.dtype == np.uint8
    deq = groupwise_dequantize(q, np.float64)[0]
    assert [Fraction(float(v)) for v in deq] == [(c - z) * s for c in codes]


def _awq_reference(w, g, bits, zero_point):
    """AWQ's pseudo_quantize_tensor (awq/quantize/quantizer.py), NumPy, float16 scales."""
    out_f, in_f = w.shape
    x = w.reshape(-1, g)
    if zero_point:
        mx, mn = x.max(1, keepdims=True), x.min(1, keepdims=True)
        qmax = 2**bits - 1
        s = (np.maximum(mx - mn, 1e-5) / qmax).astype(np.float16).astype(np.float64)
        z = np.clip(-np.rint(mn / s), 0, qmax)
        y = (np.clip(np.rint(x / s) + z, 0, qmax) - z) * s
    else:
        qmax, qmin = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))
        s = (np.abs(x).max(1, keepdims=True) / qmax).astype(np.float16).astype(np.float64)
        y = np.clip(np.rint(x / s), qmin, qmax) * s
    return y.reshape(out_f, in_f)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("mode", ["sym", "asym"])
@pytest.mark.parametrize("group", [32, 128, None])
def test_matches_awq_rtn(bits, mode, group):
    rng = np.random.default_rng(bits)
    w = rng.standard_normal((8, 256)) * 0.02
    ref = _awq_reference(w, group or 256, bits, mode == "asym")
    got = groupwise_fake_quantize(w, group, mode, bits)
    np.testing.assert_array_equal(got, ref)


def test_nf4_is_the_nearest_published_code_of_each_group():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 128)).astype(np.float32)
    q = groupwise_quantize(w, group_size=64, mode="nf4", scale_dtype="float32")
    groups = w.reshape(4, 2, 64)
    absmax = np.abs(groups).max(axis=2)
    np.testing.assert_array_equal(q.scales, absmax)
    normed = (groups / absmax[..., None]).reshape(4, 128)
    nearest = np.abs(normed[..., None] - NF4.astype(np.float64)).argmin(-1)
    np.testing.assert_array_equal(q.codes, nearest)
    deq = groupwise_dequantize(q, np.float64)
    np.testing.assert_array_equal(deq, NF4[nearest].astype(np.float64)
                                  * np.repeat(absmax, 64, axis=1).astype(np.float64))


def test_nf4_scales_in_float16_by_default():
    w = np.full((1, 32), 0.3)
    q = groupwise_quantize(w, None, "nf4")
    assert q.scales.dtype == np.float16 and q.codes.tolist() == [[15] * 32]
    assert groupwise_dequantize(q, np.float64)[0, 0] == float(np.float16(np.float32(0.3)))


def test_bytes_per_parameter():
    w = np.ones((4, 256))
    assert groupwise_quantize(w, 128).bytes_per_parameter() == 4 / 8 + 2 / 128 == 0.515625
    assert groupwise_quantize(w, 128, "asym").bytes_per_parameter() == 4 / 8 + 2 / 128 + 0.5 / 128
    assert groupwise_quantize(w, 64, "nf4", scale_dtype="float32").bytes_per_parameter() == \
        4.5 / 8  # bitsandbytes' 4 + 32 / 64 bits without double quantization
    assert groupwise_quantize(w, None, bits=8).nbytes() == 4 * 256 + 4 * 2


def test_per_channel_is_one_group_per_row():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 96))
    a, b = groupwise_quantize(w, None), groupwise_quantize(w, 96)
    assert a.scales.shape == (3, 1)
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.scales, b.scales)


def test_smaller_groups_follow_a_weight_with_varied_scales():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 512)) * np.exp(rng.standard_normal(512))  # column scales vary
    errs = [np.sqrt(np.mean((groupwise_fake_quantize(w, g) - w) ** 2)) for g in (32, 128, None)]
    assert errs[0] < errs[1] < errs[2]


def test_power_of_two_scale_invariance():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 64))
    for mode in ("sym", "asym", "nf4"):
        a, b = groupwise_quantize(w, 32, mode), groupwise_quantize(w * 8, 32, mode)
        np.testing.assert_array_equal(a.codes, b.codes)
        np.testing.assert_array_equal(a.scales.astype(np.float64) * 8, b.scales)


def test_zero_group_and_input_not_changed():
    w = np.zeros((2, 64))
    w[1, 32:] = np.linspace(-0.875, 0.875, 32)  # a group of -7s/8 .. 7s/8, s exact in fp16
    before = w.copy()
    for mode in ("sym", "asym", "nf4"):
        q = groupwise_quantize(w, 32, mode)
        assert (groupwise_dequantize(q, np.float64)[0] == 0).all()  # zero groups stay zero
        assert (q.scales[0] == 0).all() or mode == "asym"  # AWQ clamps max - min to 1e-5
    np.testing.assert_array_equal(groupwise_quantize(w, 32).scales[1], [0, 0.125])
    np.testing.assert_array_equal(w, before)


def test_bad_inputs():
    w = np.ones((2, 128))
    with pytest.raises(ValueError, match="group_size 48 does not divide in_features 128"):
        groupwise_quantize(w, 48)
    with pytest.raises(ValueError, match="group_size must be >= 1"):
        groupwise_quantize(w, 0)
    with pytest.raises(TypeError):
        groupwise_quantize(w, 1.5)
    with pytest.raises(ValueError, match="valid: 'sym', 'asym', 'nf4'"):
        groupwise_quantize(w, 64, "int4")
    with pytest.raises(ValueError, match="bits must be in 2 .. 8"):
        groupwise_quantize(w, 64, bits=9)
    with pytest.raises(ValueError, match="bits must be 4"):
        groupwise_quantize(w, 64, "nf4", bits=3)
    with pytest.raises(ValueError, match="not one of"):
        groupwise_quantize(np.ones((2, 48)), 16, "nf4")
    with pytest.raises(ValueError, match="scale_dtype must be"):
        groupwise_quantize(w, 64, scale_dtype="bfloat16")
    with pytest.raises(ValueError, match="NaN or infinity"):
        groupwise_quantize(np.full((1, 64), np.nan), 64)
    with pytest.raises(ValueError, match="2-d"):
        groupwise_quantize(np.ones(64), 64)
    with pytest.raises(ValueError, match="overflows float16"):
        groupwise_quantize(np.full((1, 64), 1e6), 64)
    with pytest.raises(TypeError, match="GroupQuantized"):
        groupwise_dequantize(w)


def test_model_helper_quantizes_a_copy():
    gpt = GPT(vocab_size=13, context=8, d_model=32, n_layers=2, n_heads=2, rng=0)
    before = {n: p.numpy(np.float64).copy() for n, p in gpt.named_parameters()}
    q, layers = quantize_model_weights(gpt, group_size=32, mode="asym")
    for n, p in gpt.named_parameters():
        np.testing.assert_array_equal(p.numpy(np.float64), before[n])
    assert sorted(layers) == sorted(f"h.{i}.{m}" for i in range(2) for m in (
        "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"))
    qp = dict(q.named_parameters())
    for name, gq in layers.items():
        np.testing.assert_array_equal(qp[f"{name}.weight"].numpy(np.float64),
                                      groupwise_dequantize(gq, np.float32))
        np.testing.assert_array_equal(qp[f"{name}.bias"].numpy(), before[f"{name}.bias"])
    np.testing.assert_array_equal(qp["wte.weight"].numpy(np.float64), before["wte.weight"])
    with pytest.raises(ValueError, match="layer h.0.attn.c_attn: group_size 64 does not"):
        quantize_model_weights(gpt, group_size=64)
    with pytest.raises(TypeError, match="fpsim Module"):
        quantize_model_weights(np.ones((2, 2)))
