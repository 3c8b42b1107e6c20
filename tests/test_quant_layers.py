"""Quantized layers against references written here: Int8Linear / Int8Conv2d against a Python-int
transcription of the integer GEMM and TFLite's requantization; NF4Linear against dequantize-
then-bf16-matmul computed with the published NF4 table, exact fractions and MPFR float32
rounding; LoRA's frozen base, B = 0 start and scaling; FP8Linear against e4m3 / e5m2 casts by
ml_dtypes with delayed scales computed by hand; the memory accounting against hand counts."""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from fpsim import nn
from fpsim.autograd import Tensor, no_grad
from fpsim.optim import Adam
from fpsim.quant import (
    FP8Linear,
    Int8Conv2d,
    Int8Linear,
    LoRALinear,
    NF4Linear,
    QParams,
    full_finetune_memory,
    lora_parameters,
    model_size_bytes,
    prepare_qlora,
    quantize,
    training_memory,
)
from tests.intlike import Count as _Count

# QLoRA's NF4 code values (bitsandbytes), copied from the paper's appendix / shared facts
NF4_TABLE = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
             -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
             0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
             0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def f32(v) -> Fraction:
    """An exact rational rounded once to float32 (nearest even), by MPFR."""
    q = Fraction(v)
    with gmpy2.ieee(32):
        r = gmpy2.mpfr(gmpy2.mpq(q.numerator, q.denominator))
    return Fraction(*(int(t) for t in r.as_integer_ratio()))


# -- a Python-int reference of the integer layer (TFLite's reference kernels) ----------------------

def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ref_multiplier(real: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: real = q * 2**shift, q in [0.5, 1); round(q * 2**31)."""
    if real == 0:
        return 0, 0
    q, shift = math.frexp(real)
    t = Fraction(q) * 2**31
    m = math.floor(t + Fraction(1, 2))  # q > 0: round half away from zero
    if m == 2**31:
        m, shift = m // 2, shift + 1
    return m, shift


def ref_requantize(acc: int, real: float) -> int:
    m, shift = ref_multiplier(real)
    left, right = max(shift, 0), max(-shift, 0)
    a = acc * 2**left
    ab = a * m
    high = c_div(ab + (2**30 if ab >= 0 else 1 - 2**30), 2**31)
    mask = 2**right - 1
    rem = high & mask
    thr = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if rem > thr else 0)


def ref_layer(xq, wq, bq, iqp: QParams, wqp: QParams, oqp: QParams, relu: bool) -> list:
    out = []
    xz, oz = int(iqp.zero_point[0]), int(oqp.zero_point[0])
    for row in xq.tolist():
        res = []
        for c, wrow in enumerate(wq.tolist()):
            acc = sum((a - xz) * b for a, b in zip(row, wrow, strict=True))
            acc += 0 if bq is None else int(bq[c])
            assert -2**31 <= acc < 2**31
            ws = float(wqp.scale[c if wqp.per_channel else 0])
            real = float(iqp.scale[0]) * ws / float(oqp.scale[0])
            v = ref_requantize(acc, real) + oz
            lo = max(oqp.quant_min, oz) if relu else oqp.quant_min
            res.append(min(max(v, lo), oqp.quant_max))
        out.append(res)
    return out


def qp(scale, zp, lo, hi, axis=None):
    return QParams(np.asarray(scale, np.float32), np.asarray(zp), lo, hi, axis)


@pytest.mark.parametrize("per_channel,relu,bits", [(True, False, 8), (False, True, 8),
                                                   (True, True, 4), (False, False, 3)])
def test_int8_linear_equals_python_int_reference(per_channel, relu, bits):
    rng = np.random.default_rng(bits + 10 * relu)
    n, k, m = 6, 20, 9
    w = rng.normal(0, 0.4, (n, k)).astype(np.float32)
    b = rng.normal(0, 0.2, n).astype(np.float32)
    x = rng.random((m, k)).astype(np.float32) * 2 - 0.3
    aq = (0, 2**bits - 1)
    wr = (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    iqp = qp([2.3 / aq[1]], [round(0.3 / (2.3 / aq[1]))], *aq)
    if per_channel:
        wqp = qp(np.abs(w).max(1) / wr[1], np.zeros(n, int), *wr, axis=0)
    else:
        wqp = qp([np.abs(w).max() / wr[1]], [0], *wr)
    oqp = qp([4.0 / aq[1]], [aq[1] // 2], *aq)
    lin = Int8Linear.from_float(w, b, iqp, wqp, oqp, relu=relu)
    # the weight and bias integers
    ref_w = quantize(w, wqp.scale if per_channel else wqp.scale[0],
                     wqp.zero_point if per_channel else 0, *wr, "int8",
                     axis=0 if per_channel else None)
    assert np.array_equal(lin.weight_q, ref_w)
    for c in range(n):
        bs = Fraction(float(iqp.scale[0])) * Fraction(float(wqp.scale[c if per_channel else 0]))
        assert int(lin.bias_q[c]) == round(Fraction(float(b[c])) / bs)  # half to even
    xq = lin.quantize_input(x)
    assert xq.dtype == np.uint8
    yq = lin.forward_int(xq)
    assert yq.tolist() == ref_layer(xq, lin.weight_q, lin.bias_q, iqp, wqp, oqp, relu)
    # the float interface: quantize, the same integers, dequantize exactly
    y = lin(Tensor(x)).numpy()
    ref = [[float(f32((v - int(oqp.zero_point[0])) * Fraction(float(oqp.scale[0]))))
            for v in row] for row in yq.tolist()]
    assert y.tolist() == ref
    # close to the float layer (within a few output steps: quantized x, w, requantization)
    yf = np.maximum(x @ w.T + b, 0) if relu else x @ w.T + b
    yf = np.clip(yf, (aq[0] - oqp.zero_point[0]) * oqp.scale[0],
                 (aq[1] - oqp.zero_point[0]) * oqp.scale[0])
    assert np.abs(y - yf).max() < 4 * oqp.scale[0] + 2 * iqp.scale[0] * np.abs(w).sum(1).max()


def test_int8_conv2d_equals_python_int_reference_with_zero_point_padding():
    rng = np.random.default_rng(5)
    w = rng.normal(0, 0.5, (3, 2, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, 3).astype(np.float32)
    iqp = qp([1 / 100], [37], 0, 255)  # a nonzero zero point: the padding must be 37
    wqp = qp(np.abs(w).reshape(3, -1).max(1) / 127, np.zeros(3, int), -128, 127, axis=0)
    oqp = qp([1 / 16], [100], 0, 255)
    conv = Int8Conv2d.from_float(w, b, iqp, wqp, oqp, stride=2, padding=1)
    x = rng.random((2, 2, 5, 6)).astype(np.float32)
    xq = conv.quantize_input(x)
    yq = conv.forward_int(xq)
    n, c, h, wd = xq.shape
    pad = np.full((n, c, h + 2, wd + 2), 37, np.int64)
    pad[:, :, 1:-1, 1:-1] = xq
    oh, ow = (h + 2 - 3) // 2 + 1, (wd + 2 - 3) // 2 + 1
    assert yq.shape == (2, 3, oh, ow)
    for i in range(n):
        for r in range(oh):
            for s in range(ow):
                patch = pad[i, :, 2 * r:2 * r + 3, 2 * s:2 * s + 3].reshape(1, -1)
                ref = ref_layer(patch, conv.weight_q.reshape(3, -1), conv.bias_q, iqp, wqp,
                                oqp, False)[0]
                assert yq[i, :, r, s].tolist() == ref


def test_int8_conv2d_checks_stride_and_padding():
    # stride 0 failed deep in NumPy ('slice step cannot be zero'), stride -1 gave a wrong
    # (1, 1, 2, 2) output silently, padding -1 an indexing error; now refused by name, and
    # what range() takes (fpsim.checks.as_int) is accepted
    w = np.ones((1, 1, 2, 2), np.float32)
    qps = (qp([1 / 16], [0], 0, 255), qp([1 / 127], [0], -128, 127, axis=0),
           qp([1 / 16], [0], 0, 255))
    for kwargs, exc, match in (
            ({"stride": 0}, ValueError, r"Int8Conv2d: stride must be positive, got 0"),
            ({"stride": (1, -1)}, ValueError, r"Int8Conv2d: stride must be positive, got "
                                              r"\(1, -1\)"),
            ({"padding": -1}, ValueError, "Int8Conv2d: padding must be non-negative, got -1"),
            ({"stride": 1.5}, TypeError, "Int8Conv2d: stride must be an int or a pair of ints"),
            ({"padding": (0, 0, 0)}, ValueError, "Int8Conv2d: padding must be an int or a pair")):
        with pytest.raises(exc, match=match):
            Int8Conv2d.from_float(w, None, *qps, **kwargs)
    x = np.full((1, 1, 5, 5), 0.5, np.float32)
    ref = Int8Conv2d.from_float(w, None, *qps, stride=2, padding=1)
    conv = Int8Conv2d.from_float(w, None, *qps, stride=np.array(2), padding=(np.int8(1), 1))
    assert conv.stride == (2, 2) and conv.padding == (1, 1)
    assert conv.forward_int(conv.quantize_input(x)).tolist() == \
        ref.forward_int(ref.quantize_input(x)).tolist()


def test_int8_chain_equals_all_integer_pipeline():
    from fpsim.quant import convert, prepare
    net = nn.Sequential(nn.Linear(8, 6, rng=0), nn.ReLU(), nn.Linear(6, 4, rng=1))
    p = prepare(net)
    x = np.random.default_rng(0).random((32, 8)).astype(np.float32)
    with no_grad():
        p(Tensor(x))
    q = convert(p)
    assert q[2].input_qparams == q[0].output_qparams  # shared, as an integer pipeline
    ints = q[2].forward_int(q[0].forward_int(q[0].quantize_input(x)))
    assert np.array_equal(q(Tensor(x)).numpy(), q[2].dequantize_output(ints))


def test_int8_layer_errors():
    w = np.ones((2, 3), np.float32)
    a, wq = qp([0.1], [0], 0, 255), qp([0.1], [0], -128, 127)
    with pytest.raises(ValueError, match="symmetrically"):
        Int8Linear.from_float(w, None, a, qp([0.1], [3], -128, 127), a)
    with pytest.raises(ValueError, match="zero range"):
        qp([0.1], [0], 5, 5)
    with pytest.raises(ValueError, match="container"):
        qp([0.1], [0], -128, 255)
    with pytest.raises(ValueError, match="finite and positive"):
        qp([0.0], [0], 0, 255)
    lin = Int8Linear.from_float(w, None, a, wq, a)
    with pytest.raises(ValueError, match="NaN"):
        lin(Tensor([[1.0, float("nan"), 0.0]]))
    with pytest.raises(ValueError, match=r"expected \(\.\.\., 3\)"):
        lin.forward_int(np.zeros((1, 4), np.uint8))
    with pytest.raises(ValueError, match="NaN or infinity"):
        Int8Linear.from_float(np.array([[np.inf, 0, 0]], np.float32), None, a, wq, a)


# -- NF4 ------------------------------------------------------------------------------------------

def test_nf4_linear_equals_independent_dequantize_then_bf16_matmul():
    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.2, (8, 96)).astype(np.float32)  # 768 weights: 12 blocks of 64
    b = rng.normal(0, 0.1, 8).astype(np.float32)
    lin = NF4Linear(w, b)
    codes = lin.codes()
    dq = lin.absmax
    # the absmax constants by hand: code[q] * absmax2 (per block of 256) + offset
    absmax = [float(dq.code_values[q]) * float(dq.absmax2[i // 256]) for i, q in
              enumerate(dq.qabsmax.tolist())]
    absmax = [f32(f32(a) + Fraction(float(dq.offset))) for a in absmax]  # float32 ops
    flat = codes.reshape(-1).tolist()
    table32 = [Fraction(float(np.float32(v))) for v in NF4_TABLE]
    wdq = [float(f32(table32[cd] * absmax[i // 64])) for i, cd in enumerate(flat)]
    wb = np.array(wdq, np.float32).astype(ml_dtypes.bfloat16).reshape(w.shape)
    assert np.array_equal(lin.dequantize().astype(np.float32), wb.astype(np.float32))
    x = rng.normal(0, 1, (3, 96)).astype(np.float32)
    xb = x.astype(ml_dtypes.bfloat16)
    bb = b.astype(ml_dtypes.bfloat16)
    y = lin(Tensor(x)).numpy()
    assert y.dtype == ml_dtypes.bfloat16
    for i in range(3):
        for j in range(8):
            acc = sum(Fraction(float(xb[i, k])) * Fraction(float(wb[j, k])) for k in range(96))
            acc += Fraction(float(bb[j]))
            ref = np.float32(float(f32(acc))).astype(ml_dtypes.bfloat16)  # fp32 acc, bf16 out
            assert float(y[i, j]) == float(ref)


def test_nf4_linear_frozen_input_gradient_and_bytes():
    w = np.random.default_rng(0).normal(0, 1, (4, 128)).astype(np.float32)
    lin = NF4Linear(w, None)
    assert list(lin.parameters()) == []
    x = Tensor(np.ones((2, 128)), requires_grad=True)
    lin(x).sum().backward()
    wb = lin.dequantize().astype(np.float64)
    # the gradient of the bf16 copy of x: fp32 accumulation, rounded to bf16, passed back
    col = wb.sum(0).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(x.grad, np.tile(col, (2, 1)))
    # 512 codes -> 256 bytes; 8 blocks: 8 one-byte codes + one fp32 absmax2 + fp32 offset
    assert lin.weight_nbytes() == 256 + 8 + 4 + 4
    plain = NF4Linear(w, None, double_quant=False)
    assert plain.weight_nbytes() == 256 + 8 * 4
    with pytest.raises(ValueError, match="unsupported block_size"):
        NF4Linear(w, block_size=48)
    with pytest.raises(ValueError, match="compute format"):
        NF4Linear(w, compute_fmt="e4m3")
    with pytest.raises(ValueError, match="NaN or infinity"):
        NF4Linear(np.full((2, 64), np.nan, np.float32))


# -- LoRA ----------------------------------------------------------------------------------------

def test_lora_zero_b_gives_base_exactly_and_only_adapters_train():
    base = NF4Linear(np.random.default_rng(1).normal(0, 0.3, (5, 64)).astype(np.float32),
                     np.zeros(5, np.float32))
    lora = LoRALinear(base, r=4, alpha=8, rng=0)
    x = Tensor(np.random.default_rng(2).normal(0, 1, (3, 64)))
    assert np.array_equal(lora(x).numpy(), base(x).numpy())
    assert lora.lora_A.fmt.name == "bf16" and not np.all(lora.lora_A.numpy() == 0)
    assert np.all(lora.lora_B.numpy() == 0)
    lora(x).sum().backward()
    assert lora.lora_B.grad is not None and np.any(lora.lora_B.grad != 0)
    assert lora.lora_A.grad is not None  # d/dA = 0 while B = 0, but it is a gradient
    assert np.all(lora.lora_A.grad == 0)
    opt = Adam(lora_parameters(lora), lr=1e-2)
    opt.step()
    assert not np.array_equal(lora(x).numpy(), base(x).numpy())


def test_lora_rank_shares_the_as_int_rule():
    # r is checked by fpsim.checks.as_int: what range() takes is a rank (same adapters)
    base = nn.Linear(6, 4, fmt="fp64", rng=0)
    ref = LoRALinear(base, r=3, alpha=6, rng=0)
    for r in (np.int8(3), np.array(3), _Count(3)):
        lora = LoRALinear(base, r=r, alpha=6, rng=0)
        assert lora.r == 3 and type(lora.r) is int and lora.scaling == ref.scaling
        np.testing.assert_array_equal(lora.lora_A.numpy(), ref.lora_A.numpy())
    for bad in (True, 3.0, "3", None, np.array([3]), np.timedelta64(3)):
        with pytest.raises(TypeError, match=f"the rank r must be an int, got "
                                            f"{type(bad).__name__}"):
            LoRALinear(base, r=bad)
    for low in (0, -2, np.int64(0)):
        with pytest.raises(ValueError, match=f"the rank r must be >= 1, got {low}"):
            LoRALinear(base, r=low)


def test_full_finetune_memory_count():
    # num_params is a count (fpsim.checks.as_int, whole floats taken): int() took 2.5 as 2,
    # True as 1 and "10" as 10
    ref = full_finetune_memory(7_000_000_000, "mixed")
    for n in (7e9, np.int64(7_000_000_000), np.array(7_000_000_000), _Count(7_000_000_000)):
        assert full_finetune_memory(n, "mixed") == ref
    assert ref.total == 16 * 7_000_000_000
    for bad in (True, "10", None, np.array([10])):
        with pytest.raises(TypeError, match=f"num_params must be an int, got "
                                            f"{type(bad).__name__}"):
            full_finetune_memory(bad)
    for bad in (2.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="num_params must be a whole number"):
            full_finetune_memory(bad)
    with pytest.raises(ValueError, match="num_params must be >= 0, got -1"):
        full_finetune_memory(-1)


def test_lora_formula_and_frozen_linear_base():
    base = nn.Linear(6, 4, fmt="fp64", rng=0)
    lora = LoRALinear(base, r=2, alpha=6, fmt="fp64", rng=1)
    assert not base.weight.requires_grad and not base.bias.requires_grad
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 6)), rng.normal(size=(4, 2))
    lora.lora_A.data, lora.lora_B.data = a, b
    x = rng.normal(size=(5, 6))
    y = lora(Tensor(x, "fp64")).numpy()
    ref = x @ base.weight.numpy().T + base.bias.numpy() + 3.0 * (x @ a.T) @ b.T
    assert np.allclose(y, ref, rtol=1e-13, atol=1e-13)
    lora(Tensor(x, "fp64")).sum().backward()
    assert base.weight.grad is None and base.bias.grad is None
    with pytest.raises(ValueError, match="rank r"):
        LoRALinear(nn.Linear(2, 2, rng=0), r=0)
    with pytest.raises(ValueError, match="init_a"):
        LoRALinear(nn.Linear(2, 2, rng=0), init_a="orthogonal")


def test_qlora_memory_is_accounted_on_the_objects():
    net = nn.Sequential(nn.Linear(64, 32, rng=0), nn.ReLU(), nn.Linear(32, 10, rng=1))
    q = prepare_qlora(net, r=4, alpha=8, rng=0)
    params = lora_parameters(q)
    assert [p.shape for p in params] == [(4, 64), (32, 4), (4, 32), (10, 4)]
    opt = Adam(params, lr=1e-3, master_weights=True)
    q(Tensor(np.ones((2, 64)))).sum().backward()
    opt.step()
    n_lora = sum(p.numel() for p in params)  # 256 + 128 + 128 + 40 = 552
    assert n_lora == 552
    # NF4: 2048 + 320 codes -> 1024 + 160 bytes; 32 + 5 blocks -> one byte each, one fp32
    # absmax2 per layer and an fp32 offset per layer; bf16 biases 2 * (32 + 10)
    nf4 = (1024 + 32 + 8) + (160 + 5 + 8) + 2 * 42
    mem = training_memory(q, opt)
    assert mem.weights == nf4 + 2 * n_lora
    assert mem.gradients == 2 * n_lora  # bf16 gradients
    assert mem.optimizer == 12 * n_lora  # fp32 master + two fp32 moments
    full = full_finetune_memory(64 * 32 + 32 + 32 * 10 + 10, "fp32")
    assert full.total == 16 * 2410 and mem.total < full.total / 3
    assert full_finetune_memory(10, "mixed").total == 160
    with pytest.raises(ValueError, match="precision"):
        full_finetune_memory(10, "fp16")


# -- FP8 ------------------------------------------------------------------------------------------

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def as_f64(a, dtype):
    return np.asarray(a, np.float32).astype(dtype).astype(np.float64)


def test_fp8_linear_forward_and_backward_with_delayed_scales_by_hand():
    lin = FP8Linear(4, 2, amax_history_len=4, rng=0)
    w = np.array([[0.875, -0.3, 0.11, 0.5], [0.2, 0.7, -0.6, 0.05]], np.float32)  # amax 0.875
    b = np.array([0.1, -0.2], np.float32)
    lin.weight.data, lin.bias.data = w, b
    x1 = np.array([[3.5, 0.3, -1.2, 0.07], [1.0, 2.0, 0.4, -0.9]], np.float32)  # amax 3.5
    g1 = np.array([[7.0, 0.001], [-0.5, 2.0]], np.float32)  # amax 7
    # step 1: every scale is 1
    x = Tensor(x1, requires_grad=True)
    y = lin(x)
    xq, wq = as_f64(x1, E4M3), as_f64(w, E4M3)
    ref = (xq @ wq.T).astype(np.float32) + b
    assert np.array_equal(y.numpy(), ref)
    y.backward(g1)
    gq = as_f64(g1, E5M2)
    assert np.array_equal(x.grad, (gq @ wq).astype(np.float32))
    assert np.array_equal(lin.weight.grad, (gq.T @ xq).astype(np.float32))
    assert np.array_equal(lin.bias.grad, g1.sum(0))
    # step 2: scales from the recorded amaxes: 448 / 3.5 = 128, 448 / 0.875 = 512,
    # 57344 / 7 = 8192 (all powers of two: descaling is exact)
    x2 = np.array([[0.3, -0.01, 2.0, 1.0]], np.float32)
    g2 = np.array([[0.02, -0.3]], np.float32)
    lin.zero_grad()
    x = Tensor(x2, requires_grad=True)
    y = lin(x)
    assert (float(lin.input_scaling.scale), float(lin.weight_scaling.scale),
            float(lin.grad_scaling.scale)) == (128.0, 512.0, 8192.0)
    xq, wq = as_f64(x2 * 128, E4M3), as_f64(w * 512, E4M3)
    ref = (xq @ wq.T / (128 * 512)).astype(np.float32) + b
    assert np.array_equal(y.numpy(), ref)
    y.backward(g2)
    gq = as_f64(g2 * 8192, E5M2)
    assert np.array_equal(x.grad, (gq @ wq / (8192 * 512)).astype(np.float32))
    assert np.array_equal(lin.weight.grad, (gq.T @ xq / (8192 * 128)).astype(np.float32))
    # the histories hold step 1 (rolled) and step 2 (slot 0, not yet folded in)
    assert lin.input_scaling.amax_history.tolist() == [2.0, 0.0, 0.0, 3.5]


def test_fp8_linear_saturates_and_eval_does_not_record():
    lin = FP8Linear(2, 1, bias=False, rng=0)
    lin.weight.data = [[1.0, 1.0]]
    y = lin(Tensor([[1000.0, 1.0]]))  # scale 1: 1000 saturates to e4m3's 448
    assert y.tolist() == [[449.0]]
    lin.eval()
    with no_grad():
        lin(Tensor([[5.0, 5.0]]))
    assert float(lin.input_scaling.amax_history[0]) == 1000.0  # eval recorded nothing
    with pytest.raises(ValueError, match="8-bit float"):
        FP8Linear(2, 1, fwd_fmt="bf16")
    with pytest.raises(ValueError, match="expected"):
        lin(Tensor(np.ones((1, 3))))
    with pytest.raises(ValueError, match="tensor-core model"):
        FP8Linear(2, 1, accumulation=("tensorcore", "H100"))


def test_fp8_training_reduces_the_loss():
    from fpsim.autograd import functional as F
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int)
    net = nn.Sequential(FP8Linear(8, 16, rng=0), nn.ReLU(), FP8Linear(16, 2, rng=1))
    opt = Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(net(Tensor(x)), y)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.5 * losses[0]


def test_model_size_bytes():
    net = nn.Sequential(nn.Linear(64, 8, rng=0), nn.ReLU(), nn.Linear(8, 2, rng=1))
    assert model_size_bytes(net) == 4 * (64 * 8 + 8 + 8 * 2 + 2)
    a = qp([0.1], [0], 0, 15)
    lin = Int8Linear.from_float(np.ones((3, 10), np.float32), np.zeros(3, np.float32), a,
                                qp([0.1] * 3, [0] * 3, -8, 7, axis=0), a)
    # 30 four-bit weights = 15 bytes, 3 int32 biases, 3 (scale, zero point), in/out qparams
    assert model_size_bytes(lin) == 15 + 12 + 24 + 16
    assert lin.inference_nbytes(packed=False) == 30 + 12 + 24 + 16
    f8 = FP8Linear(10, 3, rng=0)
    assert model_size_bytes(f8) == 30 + 12 + 8
