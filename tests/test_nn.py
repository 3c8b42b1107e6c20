"""fpsim.nn: module bookkeeping, PyTorch's default initialisation, layers against NumPy
references, format casting, and real learning checks (a fixed-seed MLP and CNN)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fpsim
from fpsim import nn, optim
from fpsim.autograd import Tensor, manual_seed, no_grad
from fpsim.autograd import functional as F

FP16, FP32, FP64 = fpsim.FP16, fpsim.FP32, fpsim.FP64


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4, rng=0)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(4, 2, bias=False, rng=1)
        self.register_buffer("scale", Tensor([2.0]))

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_registration_and_traversal():
    m = TwoLayer()
    assert [n for n, _ in m.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "fc2"]
    assert len(list(m.modules())) == 4 and [n for n, _ in m.named_buffers()] == ["scale"]
    assert m.fc2.bias is None
    # PyTorch's order: a module's own parameters and buffers, then its children, depth first
    assert list(m.state_dict()) == ["scale", "fc1.weight", "fc1.bias", "fc2.weight"]
    outer = nn.Sequential(nn.Sequential(nn.Linear(1, 1, rng=0)), nn.Linear(1, 1, rng=0))
    assert [n for n, _ in outer.named_modules()] == ["", "0", "0.0", "1"]
    m.eval()
    assert not any(mod.training for mod in m.modules())
    m.train()
    assert all(mod.training for mod in m.modules())
    with pytest.raises(AttributeError, match="nope"):
        _ = m.nope
    with pytest.raises(TypeError, match="Parameter or None"):
        m.fc1.weight = Tensor(np.zeros((4, 3)))
    assert "Linear(in_features=3" in repr(m)


def test_state_dict_roundtrip_and_errors():
    a, b = TwoLayer(), TwoLayer()
    for p in b.parameters():
        p.data = np.zeros(p.shape)
    b.load_state_dict(a.state_dict())
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert na == nb and np.array_equal(pa.data, pb.data)
    sd = a.state_dict()
    sd["fc1.weight"] = np.zeros((5, 3))
    with pytest.raises(ValueError, match=r"fc1.weight.*\(5, 3\).*\(4, 3\)"):
        b.load_state_dict(sd)
    sd = a.state_dict()
    del sd["scale"]
    sd["extra"] = np.zeros(1)
    with pytest.raises(ValueError, match="missing keys \\['scale'\\].*unexpected keys"):
        b.load_state_dict(sd)
    missing, unexpected = b.load_state_dict(sd, strict=False)
    assert missing == ["scale"] and unexpected == ["extra"]


def test_to_casts_parameters_and_buffers():
    bn = nn.BatchNorm1d(3)
    net = nn.Sequential(nn.Linear(3, 3, rng=0), bn)
    w = net[0].weight
    ref = fpsim.round(w.numpy(np.float64), FP16)
    net.to("fp16")
    assert net[0].weight is w and w.fmt == FP16 and w.data.dtype == np.float16
    assert np.array_equal(w.numpy(np.float64), ref)
    assert bn.running_mean.fmt == FP16 and bn.running_var.data.dtype == np.float16
    assert bn.num_batches_tracked.fmt == FP64  # an integer counter is not cast
    y = net(Tensor(np.ones((2, 3)), FP16))
    assert y.fmt == FP16


def test_zero_grad():
    m = TwoLayer()
    m(Tensor(np.ones((2, 3)))).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(not p.grad.any() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


# ---------------------------------------------------------------------- initialisation
def test_default_init_follows_pytorch_bounds_and_is_seeded():
    lin = nn.Linear(100, 300, rng=3)
    bound = 1 / math.sqrt(100)  # kaiming_uniform(a=sqrt(5)) and the bias rule give 1/sqrt(fan_in)
    w, b = lin.weight.numpy(np.float64), lin.bias.numpy(np.float64)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound  # the std of U(-c, c)
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.9 * bound
    again = nn.Linear(100, 300, rng=3)
    assert np.array_equal(again.weight.data, lin.weight.data)
    # the weight is drawn first, then the bias, from one generator (as PyTorch)
    gen = np.random.default_rng(3)
    np.testing.assert_array_equal(w, fpsim.round(gen.uniform(-bound, bound, (300, 100)), FP32))
    np.testing.assert_array_equal(b, fpsim.round(gen.uniform(-bound, bound, 300), FP32))
    conv = nn.Conv2d(2, 5, 3, rng=0)
    assert np.abs(conv.weight.numpy()).max() <= 1 / math.sqrt(2 * 9)
    manual_seed(7)
    a = nn.Linear(4, 4).weight.numpy().copy()
    manual_seed(7)
    assert np.array_equal(a, nn.Linear(4, 4).weight.numpy())
    half = nn.Linear(4, 4, fmt="fp16", rng=0)
    assert half.weight.data.dtype == np.float16


# ------------------------------------------------------------------------------ layers
def test_layers_against_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3))
    lin = nn.Linear(3, 2, fmt=FP64, rng=0)
    np.testing.assert_allclose(lin(Tensor(x, FP64)).numpy(),
                               x @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-14)
    ln = nn.LayerNorm(3, fmt=FP64)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln(Tensor(x, FP64)).numpy(), ref, rtol=1e-12)
    assert nn.Flatten()(Tensor(np.zeros((2, 3, 4)))).shape == (2, 12)
    img = rng.standard_normal((1, 1, 4, 4))
    np.testing.assert_array_equal(nn.MaxPool2d(2)(Tensor(img, FP64)).numpy(),
                                  img.reshape(1, 1, 2, 2, 2, 2).max(axis=(3, 5)))
    assert nn.GELU("tanh")(Tensor([0.0])).item() == 0.0
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


def test_batchnorm_module_running_stats_and_modes():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 3)) * 2 + 1
    bn = nn.BatchNorm1d(3, fmt=FP64)
    bn(Tensor(x, FP64))
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-14)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(0, ddof=1), rtol=1e-14)
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    y = bn(Tensor(x, FP64)).numpy()
    ref = (x - bn.running_mean.numpy()) / np.sqrt(bn.running_var.numpy() + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-13)
    cum = nn.BatchNorm1d(3, momentum=None, fmt=FP64)  # cumulative moving average
    x2 = rng.standard_normal((8, 3))
    cum(Tensor(x, FP64))
    cum(Tensor(x2, FP64))
    np.testing.assert_allclose(cum.running_mean.numpy(), (x.mean(0) + x2.mean(0)) / 2,
                               rtol=1e-13)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(Tensor(np.ones((1, 3))))
    with pytest.raises(ValueError, match="4D input"):
        nn.BatchNorm2d(3)(Tensor(np.ones((2, 3))))


def test_dropout_module():
    d = nn.Dropout(0.5, rng=0)
    x = Tensor(np.ones(1000))
    a, b = d(x).numpy(), d(x).numpy()
    assert not np.array_equal(a, b)  # one generator: a new mask per call
    assert set(np.unique(a)) == {0.0, 2.0}
    d.eval()
    assert d(x) is x


# ---------------------------------------------------------------------------- learning
def blobs(n_per_class: int, seed: int):
    """Three Gaussian blobs in 2-D (NumPy only)."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 3.0], [3.0, -1.5], [-3.0, -1.5]])
    x = np.concatenate([c + rng.standard_normal((n_per_class, 2)) for c in centers])
    y = np.repeat(np.arange(3), n_per_class)
    return x, y


def train_mlp(fmt, master: bool, steps: int = 150):
    x, y = blobs(100, seed=0)
    xt, yt = blobs(100, seed=1)
    model = nn.Sequential(nn.Linear(2, 32, rng=0), nn.ReLU(), nn.Linear(32, 3, rng=1)).to(fmt)
    opt = optim.Adam(model.parameters(), lr=0.02, master_weights=master)
    rng = np.random.default_rng(2)
    xin = Tensor(x, fmt)
    for _ in range(steps):
        idx = rng.choice(len(y), 64, replace=False)
        opt.zero_grad()
        loss = F.cross_entropy(model(xin[idx]), y[idx])
        loss.backward()
        opt.step()
    with no_grad():
        pred = model(Tensor(xt, fmt)).numpy(np.float64).argmax(1)
    return (pred == yt).mean()


def test_mlp_learns_gaussian_blobs_fp32():
    assert train_mlp(FP32, master=False) >= 0.95


def test_mlp_learns_in_fp16_with_master_weights():
    assert train_mlp(FP16, master=True) >= 0.95


def test_small_cnn_learns_bars():
    """Horizontal vs vertical bars on 8x8 images."""
    rng = np.random.default_rng(0)
    n = 128
    imgs = rng.standard_normal((n, 1, 8, 8)) * 0.3
    y = rng.integers(0, 2, n)
    pos = rng.integers(1, 7, n)
    for i in range(n):
        if y[i]:
            imgs[i, 0, :, pos[i]] += 1.5
        else:
            imgs[i, 0, pos[i], :] += 1.5
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, rng=0), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64, 2, rng=1))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = Tensor(imgs)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with no_grad():
        acc = (model(x).numpy().argmax(1) == y).mean()
    assert losses[-1] < 0.5 * losses[0] and acc >= 0.95


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: nn.Linear(0, 3), ValueError, r"Linear: in_features must be a positive integer \(>= 1\)"
                                          ", got 0"),
    (lambda: nn.Linear(3, 0), ValueError, "Linear: out_features must be a positive int"),
    (lambda: nn.Linear(-2, 3), ValueError, "Linear: in_features must be a positive int"),
    (lambda: nn.Linear(2.5, 3), TypeError, "Linear: in_features must be a positive integer, "
                                           "got float 2.5"),
    (lambda: nn.Linear(3, "4"), TypeError, "Linear: out_features must be a positive int"),
    (lambda: nn.Linear(True, 3), TypeError, "Linear: in_features must be a positive int"),
    (lambda: nn.Conv2d(0, 4, 3), ValueError, "Conv2d: in_channels must be a positive int"),
    (lambda: nn.Conv2d(2, -4, 3), ValueError, "Conv2d: out_channels must be a positive int"),
    (lambda: nn.Conv2d(2.0, 4, 3), TypeError, "Conv2d: in_channels must be a positive int"),
    (lambda: nn.Conv2d(2, 4, 0), ValueError, "Conv2d: kernel_size must be positive"),
    (lambda: nn.Conv2d(2, 4, (3, -1)), ValueError, "Conv2d: kernel_size must be positive"),
    (lambda: nn.Conv2d(2, 4, 3, stride=0), ValueError, "Conv2d: stride must be positive"),
    (lambda: nn.Conv2d(2, 4, 3, padding=-1), ValueError, "Conv2d: padding must be non-negative"),
    (lambda: nn.Conv2d(2, 4, 3, dilation=0), ValueError, "Conv2d: dilation must be positive"),
    (lambda: nn.Conv2d(2, 4, 3, groups=0), ValueError, "Conv2d: groups must be a positive int"),
    (lambda: nn.Conv2d(2, 4, 3, groups=2.0), TypeError, "Conv2d: groups must be a positive int"),
    (lambda: nn.MaxPool2d(0), ValueError, "MaxPool2d: kernel_size must be positive"),
    (lambda: nn.AvgPool2d(2, stride=0), ValueError, "AvgPool2d: stride must be positive"),
    (lambda: nn.LayerNorm(0), ValueError, "LayerNorm: normalized_shape must be a positive int"),
    (lambda: nn.LayerNorm((4, -1)), ValueError, "LayerNorm: normalized_shape must be a positive"),
    (lambda: nn.LayerNorm(2.5), TypeError, "LayerNorm: normalized_shape must be an int or a "
                                           "non-empty"),
    (lambda: nn.LayerNorm([]), TypeError, "LayerNorm: normalized_shape must be an int or a "
                                          "non-empty"),
    (lambda: nn.LayerNorm(4, eps=-1e-5), ValueError, "LayerNorm: eps must be a finite number"),
    (lambda: nn.BatchNorm1d(0), ValueError, "BatchNorm1d: num_features must be a positive int"),
    (lambda: nn.BatchNorm2d(3.0), TypeError, "BatchNorm2d: num_features must be a positive int"),
    (lambda: nn.BatchNorm2d(3, momentum=2), ValueError, r"BatchNorm2d: momentum must be a "
                                                        r"finite number in \[0.0, 1.0\]"),
    (lambda: nn.BatchNorm2d(3, eps="1e-5"), TypeError, "BatchNorm2d: eps must be a real number"),
    (lambda: nn.Dropout("0.5"), TypeError, r"Dropout: p must be a real number in \[0, 1\]"),
    (lambda: nn.Flatten(1.5), TypeError, "Flatten: start_dim must be an int"),
])
def test_layer_argument_errors(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


def test_layer_sizes_accept_numpy_ints_and_shapes():
    assert nn.Linear(np.int64(3), np.int32(2), rng=0).weight.shape == (2, 3)
    assert nn.LayerNorm(np.array([2, 3])).normalized_shape == (2, 3)
    assert nn.BatchNorm2d(3, momentum=None).momentum is None


class _Three:
    """An integer-like object: range() takes it through __index__."""

    def __index__(self) -> int:
        return 3


# layer sizes are checked by fpsim.checks.as_int: what range() takes is a size
@pytest.mark.parametrize("n", [np.int8(3), np.uint32(3), np.array(3), np.array(3, np.int16),
                               _Three()])
def test_layer_sizes_take_what_range_takes(n):
    assert len(range(n)) == 3
    lin = nn.Linear(n, n, rng=0)
    assert lin.weight.shape == (3, 3) and (lin.in_features, lin.out_features) == (3, 3)
    assert type(lin.in_features) is int
    conv = nn.Conv2d(n, n, 1, rng=0)
    assert conv.weight.shape == (3, 3, 1, 1) and type(conv.in_channels) is int
    for bn in (nn.BatchNorm1d(n), nn.BatchNorm2d(n)):
        assert bn.num_features == 3 and type(bn.num_features) is int
    ln = nn.LayerNorm(n)
    assert ln.normalized_shape == (3,) and type(ln.normalized_shape[0]) is int
    assert nn.LayerNorm((n, 2)).normalized_shape == (3, 2)


@pytest.mark.parametrize("bad", [True, np.True_, 3.0, np.float64(3.0), "3", None,
                                 np.array([3]), np.array(3.0), np.timedelta64(3)])
def test_layer_sizes_refuse_non_integers_with_a_type_error(bad):
    got = "got " + type(bad).__name__
    for make, op, name in ((lambda: nn.Linear(bad, 2), "Linear", "in_features"),
                           (lambda: nn.Linear(2, bad), "Linear", "out_features"),
                           (lambda: nn.Conv2d(bad, 2, 1), "Conv2d", "in_channels"),
                           (lambda: nn.BatchNorm1d(bad), "BatchNorm1d", "num_features"),
                           (lambda: nn.BatchNorm2d(bad), "BatchNorm2d", "num_features"),
                           (lambda: nn.LayerNorm((2, bad)), "LayerNorm", "normalized_shape")):
        with pytest.raises(TypeError, match=f"{op}: {name} must be a positive integer, {got}"):
            make()


@pytest.mark.parametrize("low", [0, -3, np.int64(0), np.array(-1)])
def test_layer_sizes_below_one_are_value_errors(low):
    with pytest.raises(ValueError, match=r"Linear: in_features must be a positive integer "
                                         r"\(>= 1\), got"):
        nn.Linear(low, 2)
    with pytest.raises(ValueError, match=r"LayerNorm: normalized_shape must be a positive "
                                         r"integer \(>= 1\), got"):
        nn.LayerNorm(low)


def test_init_zero_element_and_bad_uniform_range():
    t = Tensor(np.zeros((0, 3)))
    with pytest.warns(UserWarning, match="zero-element tensors is a no-op"):
        nn.init.kaiming_uniform_(t)  # as PyTorch: no ZeroDivisionError
    with pytest.raises(ValueError, match=r"uniform_ expects a <= b"):
        nn.init.uniform_(Tensor(np.zeros(2)), 1.0, 0.0)
    with pytest.raises(TypeError, match="uniform_: a must be a real number"):
        nn.init.uniform_(Tensor(np.zeros(2)), None, 1.0)
    with pytest.raises(ValueError, match="uniform_: b must be finite"):
        nn.init.uniform_(Tensor(np.zeros(2)), 0.0, float("inf"))


def test_module_registration_errors():
    m = nn.Module()
    with pytest.raises(TypeError, match="parameter name should be a string, got int 3"):
        m.register_parameter(3, None)
    with pytest.raises(ValueError, match="buffer name must be a non-empty string without '.'"):
        m.register_buffer("a.b", Tensor([0.0]))
    with pytest.raises(ValueError, match="module name must be a non-empty string"):
        m.add_module("", nn.Module())
    with pytest.raises(TypeError, match="module 'x' must be an fpsim.nn.Module or None, got int"):
        m.add_module("x", 3)
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        nn.Linear(2, 2, rng=0).load_state_dict([1.0, 2.0])
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        m.train("no")
