"""QAT on the autograd engine: FakeQuantize against fpsim.quant.fake_quantize (PyTorch-exact,
tests/test_quant_fake.py) and the observers; the straight-through gradient against PyTorch's
rule written out by hand (boundaries, ties, clamping, NaN); LSQ gradients against the formulas
of Esser et al. (2020) written out here; prepare / prepare_qat / convert; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fpsim import nn
from fpsim.autograd import Tensor, no_grad
from fpsim.autograd import functional as F
from fpsim.quant import (
    FakeQuantize,
    LSQFakeQuantize,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    calculate_qparams,
    convert,
    disable_fake_quant,
    disable_observer,
    fake_quantize,
    fake_quantize_per_channel,
    fake_quantize_ste,
    get_default_qat_qconfig,
    get_default_qconfig,
    lsq_fake_quantize,
    prepare,
    prepare_qat,
)
from fpsim.quant.layers import Int8Linear
from fpsim.quant.qat import ObservedLinear, QATLinear


def grad_of(fn, x: np.ndarray, g: np.ndarray) -> np.ndarray:
    t = Tensor(x, requires_grad=True)
    fn(t).backward(g)
    return t.grad


# -- the straight-through estimator, hand-checked -------------------------------------------

def test_ste_boundaries_ties_and_clamping_per_tensor():
    # s = 0.5, z = 0, range [-4, 3]: the grid is -2.0 .. 1.5. PyTorch passes the gradient where
    # qmin <= round_half_even(x / s) + z <= qmax (the rounded value decides, not x / s).
    x = np.array([-2.0, -2.25, -2.5, 1.5, 1.7, 1.75, 0.25, -0.25, 5.0, np.nan, np.inf,
                  -np.inf], np.float32)
    #            q=-4   -4.5->-4 -5      3    3.4->3 3.5->4 .5->0  -.5->0   10    NaN   +inf  -inf
    expect = [1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    g = np.arange(1, x.size + 1, dtype=np.float32)
    got = grad_of(lambda t: fake_quantize_ste(t, 0.5, 0, -4, 3), x, g)
    assert got.tolist() == (g * np.array(expect)).tolist()
    out = fake_quantize_ste(Tensor(x), 0.5, 0, -4, 3).numpy()
    # ties to even: -2.25 -> -2.0 (q -4), 1.75 -> clamped 1.5, 0.25 -> 0, -0.25 -> -0
    assert out[:8].tolist() == [-2.0, -2.0, -2.0, 1.5, 1.5, 1.5, 0.0, 0.0]
    assert out[8:].tolist() == [1.5, -2.0, 1.5, -2.0]  # NaN -> qmin, as PyTorch's fmax


def test_ste_with_zero_point():
    # s = 0.25, z = 2, range [0, 7]: real grid -0.5 .. 1.25
    x = np.array([-0.625, -0.75, 1.125, 1.375, 1.25, -0.5], np.float32)
    # -2.5->-2 (+2=0 in), -3 (+2=-1 out), 4.5->4 (6 in), 5.5->6 (8 out), 5 (7 in), -2 (0 in)
    g = np.ones(6, np.float32)
    got = grad_of(lambda t: fake_quantize_ste(t, 0.25, 2, 0, 7), x, g)
    assert got.tolist() == [1, 0, 1, 0, 1, 1]


def test_ste_per_channel():
    x = np.array([[0.9, 1.1], [0.9, 1.1]], np.float32)
    # channel 0 (rows): scale 0.1, range [-8, 7] -> max 0.7: both clamp; channel 1: scale 1
    got = grad_of(lambda t: fake_quantize_ste(t, [0.1, 1.0], [0, 0], -8, 7, axis=0), x,
                  np.ones_like(x))
    assert got.tolist() == [[0, 0], [1, 1]]


def test_ste_keeps_format_and_input_grad_format():
    x = Tensor(np.array([0.3, 0.7]), "bf16", requires_grad=True)
    y = fake_quantize_ste(x, 0.25, 0, -8, 7)
    assert y.fmt.name == "bf16"
    assert y.numpy(np.float64).tolist() == [0.25, 0.75]
    y.sum().backward()
    assert x.grad.dtype == x.data.dtype


# -- FakeQuantize ------------------------------------------------------------------------------

def test_fake_quantize_module_equals_fake_quantize_and_observer():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.3, 2, 100).astype(np.float32), rng.normal(0, 1, 100).astype(np.float32)
    fq = FakeQuantize()  # PyTorch's default: moving-average min/max, quint8 [0, 255] affine
    obs = MovingAverageMinMaxObserver()
    for batch in (a, b):
        out = fq(Tensor(batch)).numpy()
        obs(batch)
        s, z = obs.calculate_qparams()
        assert np.array_equal(out, fake_quantize(batch, s[0], z[0], 0, 255))
    # the moving average written out: min + 0.01 * (cur - min), each step in float32
    c = np.float32(0.01)
    mn = a.min() + c * (b.min() - a.min())
    mx = a.max() + c * (b.max() - a.max())
    s_ref, z_ref = calculate_qparams(mn, mx, 0, 255)
    assert fq.scale.numpy().tolist() == s_ref.tolist()
    assert fq.zero_point.numpy().tolist() == z_ref.astype(float).tolist()


def test_per_channel_weight_fake_quant_equals_per_channel_kernel():
    rng = np.random.default_rng(1)
    w1 = rng.normal(0, 0.3, (5, 7)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (5, 7)).astype(np.float32)
    fq = get_default_qat_qconfig().weight()
    fq(Tensor(w1))
    out = fq(Tensor(w2)).numpy()
    c = np.float32(0.01)
    mn = w1.min(1) + c * (w2.min(1) - w1.min(1))
    mx = w1.max(1) + c * (w2.max(1) - w1.max(1))
    s, z = calculate_qparams(mn, mx, -128, 127, "per_channel_symmetric", "qint8",
                             has_customized_qrange=True)
    assert np.array_equal(out, fake_quantize_per_channel(w2, s, z, 0, -128, 127))
    assert (z == 0).all()


def test_moving_average_per_channel_observer_written_out():
    obs = MovingAveragePerChannelMinMaxObserver(averaging_constant=0.5, ch_axis=1)
    obs(np.array([[1.0, -2.0], [3.0, 4.0]], np.float32))
    obs(np.array([[5.0, 0.0], [-1.0, 2.0]], np.float32))
    # channel 0 (column): first min/max (1, 3); then (-1, 5): 1 + .5 (-2) = 0, 3 + .5 * 2 = 4
    assert obs.min_val.tolist() == [0.0, -1.0] and obs.max_val.tolist() == [4.0, 3.0]
    with pytest.raises(ValueError, match="channel count"):
        obs(np.zeros((2, 3), np.float32))


def test_enable_disable_observer_and_fake_quant():
    fq = FakeQuantize(quant_min=0, quant_max=15)
    fq(Tensor([0.0, 3.0]))
    s0 = fq.scale.tolist()
    fq.disable_observer()
    out = fq(Tensor([0.0, 30.0, 1.1])).numpy()
    assert fq.scale.tolist() == s0  # frozen
    assert out.tolist() == pytest.approx([0.0, 3.0, 1.2], abs=1e-6)  # clamped at 15 * 0.2
    fq.disable_fake_quant()
    assert fq(Tensor([1.1])).tolist() == Tensor([1.1]).tolist()  # pass-through
    # model.apply reaches nested modules
    q = prepare_qat(nn.Sequential(nn.Linear(3, 2, rng=0)))
    q.apply(disable_observer)
    q.apply(disable_fake_quant)
    assert not q[0].weight_quant.observer_enabled and not q[0].output_quant.fake_quant_enabled


def test_fake_quantize_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        FakeQuantize()(Tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="must be non-empty"):
        FakeQuantize(quant_min=3, quant_max=3)  # a zero integer range
    with pytest.raises(ValueError, match=r"inside uint8 \[0, 255\]"):
        FakeQuantize(quant_min=0, quant_max=256)
    with pytest.raises(ValueError, match="unsupported bit width 9"):
        get_default_qat_qconfig(9)
    with pytest.raises(ValueError, match="unsupported bit width 1"):
        get_default_qconfig(1)
    with pytest.raises(ValueError, match="unsupported bit width"):
        LSQFakeQuantize(bits=16)


# -- LSQ against the paper ---------------------------------------------------------------------

def paper_dvhat_ds(v: float, s: float, qn: int, qp: int) -> float:
    """Esser et al. 2020, eq. 3: -v/s + round(v/s) inside (-Q_N, Q_P), -Q_N below, Q_P above."""
    r = v / s
    if r <= -qn:
        return -qn
    if r >= qp:
        return qp
    return -r + round(r)


def paper_dvhat_dv(v: float, s: float, qn: int, qp: int) -> float:
    """The straight-through estimate: 1 inside (-Q_N, Q_P), else 0."""
    return 1.0 if -qn < v / s < qp else 0.0


@pytest.mark.parametrize("bits,signed", [(4, True), (3, False), (8, True)])
def test_lsq_gradients_match_the_paper(bits, signed):
    qn, qp = (2 ** (bits - 1), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    rng = np.random.default_rng(bits)
    v0 = rng.normal(0, 1, 40).astype(np.float32)
    if not signed:
        v0 = np.abs(v0)
    fq = LSQFakeQuantize(bits=bits, signed=signed)
    fq.initialize(v0)
    s_init = 2 * np.mean(np.abs(v0.astype(np.float64))) / math.sqrt(qp)  # the paper's init
    assert fq.scale.item() == pytest.approx(s_init, rel=1e-6)
    s32 = fq.scale.item()
    # keep every v / s away from a half step, where the paper (deciding on v / s) and PyTorch
    # (deciding on the rounded value) differ and where round() ties
    r = rng.normal(0, qp / 1.5, 40) if signed else np.abs(rng.normal(0, qp / 1.5, 40))
    r = np.where(np.abs(r - np.floor(r) - 0.5) < 0.1, r + 0.3, r)
    v = (r * s32).astype(np.float32)
    up = rng.normal(0, 1, v.size).astype(np.float32)
    x = Tensor(v, requires_grad=True)
    fq(x).backward(up)
    g = 1 / math.sqrt(v.size * qp)  # the step-size gradient scale
    pairs = list(zip(up.tolist(), v.tolist(), strict=True))
    ds_ref = g * sum(u * paper_dvhat_ds(vi, s32, qn, qp) for u, vi in pairs)
    dv_ref = [u * paper_dvhat_dv(vi, s32, qn, qp) for u, vi in pairs]
    assert fq.scale.grad.tolist() == pytest.approx([ds_ref], rel=1e-5, abs=1e-7)
    assert x.grad.tolist() == pytest.approx(dv_ref, rel=0, abs=0)


def test_lsq_hand_case_and_sign_detection():
    # s = 0.5, Q_N = 4, Q_P = 3: v = 0.6 -> v/s = 1.2, round 1: ds = -1.2 + 1 = -0.2;
    # v = 3.0 -> 6 >= Q_P: ds = 3; v = -5 -> -10 <= -Q_N: ds = -4
    x = Tensor(np.array([0.6, 3.0, -5.0], np.float32), requires_grad=True)
    s = Tensor([0.5], requires_grad=True)
    y = lsq_fake_quantize(x, s, -4, 3, grad_factor=0.5)
    assert y.tolist() == [0.5, 1.5, -2.0]
    y.backward(np.array([1.0, 1.0, 2.0], np.float32))
    assert s.grad.tolist() == pytest.approx([0.5 * (-0.2 + 3 - 8)], rel=1e-6)
    assert x.grad.tolist() == [1.0, 0.0, 0.0]
    fq = LSQFakeQuantize(bits=4)
    fq(Tensor([0.0, 1.0, 2.0]))
    assert (fq.quant_min, fq.quant_max, fq.signed) == (0, 15, False)


def test_lsq_zero_range_and_nan_are_errors():
    with pytest.raises(ValueError, match="zero range"):
        LSQFakeQuantize(bits=4)(Tensor(np.zeros(8)))
    with pytest.raises(ValueError, match="NaN"):
        LSQFakeQuantize(bits=4)(Tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="one-element"):
        lsq_fake_quantize(Tensor([1.0]), Tensor([1.0, 2.0]), -8, 7)
    fq = LSQFakeQuantize(bits=4, signed=True)
    fq(Tensor([1.0, -1.0]))
    fq.scale.data = [-0.5]  # an optimizer step past zero: clamped to eps, as PyTorch
    fq(Tensor([1.0]))
    assert fq.scale.item() == float(np.finfo(np.float32).eps)
    fq.scale.data = [float("nan")]
    with pytest.raises(ValueError, match="diverged"):
        fq(Tensor([1.0]))


# -- prepare / prepare_qat / convert -------------------------------------------------------------

def mlp(seed=0):
    return nn.Sequential(nn.Linear(6, 5, rng=seed), nn.ReLU(), nn.Linear(5, 3, rng=seed + 1))


def test_prepare_qat_structure_shares_nothing_with_the_original():
    net = mlp()
    q = prepare_qat(net)
    assert [type(m).__name__ for m in q] == ["QATLinear", "Identity", "QATLinear"]
    assert q[0].relu and not q[2].relu
    assert q[0].input_quant is not None and q[2].input_quant is None
    assert q[0].weight is not net[0].weight  # a copy unless inplace
    assert np.array_equal(q[0].weight.numpy(), net[0].weight.numpy())
    names = {n for n, _ in q.named_parameters()}
    assert names == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_qat_forward_is_fake_quant_of_each_stage():
    net = mlp()
    q = prepare_qat(net)
    x = np.random.default_rng(0).random((4, 6)).astype(np.float32)
    y = q(Tensor(x)).numpy()
    l0 = q[0]
    xq = fake_quantize(x, l0.input_quant.scale.item(), int(l0.input_quant.zero_point.item()),
                       0, 255)
    s, z = l0.weight_quant.scale.numpy(), l0.weight_quant.zero_point.numpy().astype(int)
    w0 = fake_quantize_per_channel(net[0].weight.numpy(), s, z, 0, -128, 127)
    h = np.maximum(xq.astype(np.float64) @ w0.T.astype(np.float64) + net[0].bias.numpy(), 0)
    h = h.astype(np.float32)
    oq = l0.output_quant
    h = fake_quantize(h, oq.scale.item(), int(oq.zero_point.item()), 0, 255)
    l2 = q[2]
    s, z = l2.weight_quant.scale.numpy(), l2.weight_quant.zero_point.numpy().astype(int)
    w2 = fake_quantize_per_channel(net[2].weight.numpy(), s, z, 0, -128, 127)
    o = (h.astype(np.float64) @ w2.T.astype(np.float64) + net[2].bias.numpy()).astype(np.float32)
    o = fake_quantize(o, l2.output_quant.scale.item(), int(l2.output_quant.zero_point.item()),
                      0, 255)
    assert np.array_equal(y, o)


def test_qat_trains_only_existing_parameters_and_convert_matches_qat_forward():
    from fpsim.autograd import functional as F
    from fpsim.optim import Adam
    rng = np.random.default_rng(0)
    x = rng.random((64, 6)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    q = prepare_qat(mlp())
    opt = Adam(q.parameters(), lr=1e-2)
    for _ in range(5):
        loss = F.cross_entropy(q(Tensor(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    q.apply(disable_observer)
    q.eval()
    with no_grad():
        ref = q(Tensor(x)).numpy()
    qi = convert(q)
    assert [type(m).__name__ for m in qi] == ["Int8Linear", "Identity", "Int8Linear"]
    out = qi(Tensor(x)).numpy()
    step = qi[2].output_qparams.scale[0]
    # the integer model requantizes with TFLite's fixed point and an int32 bias: within one
    # output step of the fake-quantized float model, and mostly equal
    assert np.abs(out - ref).max() <= step * 1.01
    assert np.mean(out == ref) > 0.8


def test_ptq_prepare_observes_and_forward_is_float():
    net = mlp()
    p = prepare(net, get_default_qconfig(8, per_channel=False))
    assert isinstance(p[0], ObservedLinear) and not isinstance(p[0], type(None))
    x = np.random.default_rng(2).random((16, 6)).astype(np.float32)
    with no_grad():
        y = p(Tensor(x)).numpy()
        y_ref = net(Tensor(x)).numpy()
    assert np.array_equal(y, y_ref)  # observers only
    obs = MinMaxObserver(quant_min=0, quant_max=255)
    obs(x)
    assert p[0].input_quant.qparams().scale.tolist() == obs.calculate_qparams()[0].tolist()
    qi = convert(p)
    assert not qi[0].weight_qparams.per_channel
    assert isinstance(qi[0], Int8Linear)


def test_qconfig_dict_and_unknown_names():
    net = mlp()
    p = prepare_qat(net, {"": get_default_qat_qconfig(4), "2": get_default_qat_qconfig(8)})
    assert p[0].weight_quant.quant_max == 7 and p[2].weight_quant.quant_max == 127
    with pytest.raises(ValueError, match="not found"):
        prepare(net, {"": get_default_qconfig(), "7": get_default_qconfig()})
    with pytest.raises(ValueError, match="no nn.Linear"):
        prepare(nn.Sequential(nn.ReLU()))


def test_convert_errors_never_calibrated_nan_and_zero_range():
    with pytest.raises(ValueError, match="seen no data"):
        convert(prepare(mlp()))
    p = prepare(mlp())
    with pytest.raises(ValueError, match="NaN"), no_grad():
        p(Tensor(np.array([[np.nan] * 6], np.float32)))
    # a zero weight range with a nonzero bias: the int32 bias cannot hold bias / (s_x * eps)
    lin = nn.Linear(6, 2, rng=0)
    lin.weight.data = np.zeros((2, 6))
    lin.bias.data = [4.0, -4.0]
    p = prepare(nn.Sequential(lin))
    with no_grad():
        p(Tensor(np.random.default_rng(0).random((8, 6))))
    with pytest.raises(ValueError, match="zero or tiny"):
        convert(p)


def test_bare_layer_and_wrapped_type_check():
    q = prepare_qat(nn.Linear(3, 2, rng=0))
    assert isinstance(q, QATLinear)
    with pytest.raises(TypeError, match="wraps a Linear"):
        QATLinear(nn.ReLU(), get_default_qat_qconfig())
    with pytest.raises(TypeError, match="QConfig"):
        QATLinear(nn.Linear(2, 2, rng=0), None)


def test_qat_conv2d_converts_and_matches():
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1, rng=0), nn.ReLU(), nn.Flatten(),
                        nn.Linear(3 * 16, 2, rng=1))
    q = prepare_qat(net)
    assert [type(m).__name__ for m in q] == ["QATConv2d", "Identity", "Flatten", "QATLinear"]
    assert q[3].input_quant is None  # fed through Flatten, which keeps the grid
    x = np.random.default_rng(3).random((4, 1, 4, 4)).astype(np.float32)
    with no_grad():
        q(Tensor(x))
    q.apply(disable_observer)
    with no_grad():
        ref = q(Tensor(x)).numpy()
    qi = convert(q)
    out = qi(Tensor(x)).numpy()
    assert np.abs(out - ref).max() <= qi[3].output_qparams.scale[0] * 1.01


def test_quantize_ptq_one_call_equals_prepare_calibrate_convert():
    from fpsim.quant import quantize_ptq
    net = mlp(3)
    x = np.random.default_rng(4).random((40, 6)).astype(np.float32)
    q1 = quantize_ptq(net, x, batch_size=16)
    q2 = quantize_ptq(net, [x[:16], x[16:32], x[32:]])
    p = prepare(net)
    with no_grad():
        for b in (x[:16], x[16:32], x[32:]):
            p(Tensor(b))
    q3 = convert(p)
    outs = [m(Tensor(x)).numpy() for m in (q1, q2, q3)]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    assert isinstance(net[0], nn.Linear)  # the float model is untouched
    single = quantize_ptq(nn.Linear(6, 2, rng=0), x)
    assert isinstance(single, Int8Linear)


def test_qat_conv2d_keeps_dilation_and_groups_and_refuses_int8_for_them():
    """A dilated, grouped conv trains with fake quantization as the float layer computes
    (dilation and groups passed through), and its int8 conversion refuses rather than
    dropping them."""
    rng = np.random.default_rng(4)
    conv = nn.Conv2d(2, 4, 3, padding=2, dilation=2, groups=2, rng=0)
    q = prepare_qat(nn.Sequential(conv))
    x = Tensor(rng.random((2, 2, 6, 6)).astype(np.float32))
    with no_grad():
        out = q(x)
    assert out.shape == conv(x).shape == (2, 4, 6, 6)
    q.apply(disable_observer)
    with no_grad():
        # the fake-quantized layer is the float conv of the fake-quantized input and weight
        layer = q[0]
        ref = F.conv2d(layer.input_quant(x), layer.weight_quant(layer.weight),
                       layer.bias, 1, 2, 2, 2)
        assert np.array_equal(q(x).numpy(), layer.output_quant(ref).numpy())
    with pytest.raises(ValueError, match="dilation 1 and groups 1"):
        convert(q)
