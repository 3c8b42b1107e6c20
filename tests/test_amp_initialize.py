"""fpsim.amp.initialize / scale_loss: Apex's opt levels O0-O3 on fpsim models.

References: the properties of each level from NVIDIA Apex (apex/amp/frontend.py, facts.md
"Apex AMP opt levels"), values from NumPy / ml_dtypes casts and exact powers of two.
"""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim import nn, optim
from fpsim.amp import AmpOptimizer, initialize, scale_loss
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F

RNG = np.random.default_rng(3)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6, rng=0)
        self.bn = nn.BatchNorm1d(6)
        self.out = nn.Linear(6, 3, rng=1)

    def forward(self, x):
        self.h = self.bn(self.fc(x))
        return self.out(F.relu(self.h))


def setup(level, **kw):
    net = Net()
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    return initialize(net, opt, level, **kw)


X = RNG.standard_normal((8, 4)).astype(np.float32)
Y = RNG.integers(0, 3, 8)


def test_o0_is_plain_fp32():
    net, opt = setup("O0")
    assert isinstance(opt, AmpOptimizer)
    assert {p.fmt.name for p in net.parameters()} == {"fp32"}
    assert not opt.master_weights and not opt.scaler.dynamic and opt.scaler.get_scale() == 1.0
    assert net(Tensor(X)).fmt.name == "fp32"
    assert not opt.autocast().enabled


def test_o1_keeps_fp32_weights_and_casts_per_op():
    net, opt = setup("O1")
    assert {p.fmt.name for p in net.parameters()} == {"fp32"}
    assert opt.scaler.dynamic and opt.scaler.get_scale() == 2.0**16
    assert not opt.master_weights
    out = net(Tensor(X))
    assert out.fmt.name == "fp32"  # outputs come back in fp32
    assert net.h.fmt.name == "fp32"  # batch norm runs in fp32 under autocast
    # the first linear ran on fp16 casts of x and its weights (reference: NumPy casts)
    ref = Net()
    lo = [a.astype(np.float16).astype(np.float64) for a in
          (X, ref.fc.weight.numpy(), ref.fc.bias.numpy())]
    fc16 = (lo[0] @ lo[1].T + lo[2]).astype(np.float32).astype(np.float16)
    with opt.autocast():
        got = net.fc(Tensor(X))
    np.testing.assert_array_equal(got.data, fc16)


def test_o2_fp16_model_fp32_batchnorm_master_weights():
    net, opt = setup("O2")
    assert net.fc.weight.fmt.name == "fp16" and net.out.weight.fmt.name == "fp16"
    assert net.bn.weight.fmt.name == "fp32" and net.bn.running_mean.fmt.name == "fp32"
    assert opt.master_weights and opt.scaler.dynamic
    out = net(Tensor(X))
    assert out.fmt.name == "fp32"
    assert net.h.fmt.name == "fp16"  # batch norm in fp32 returns its input's format


def test_o3_pure_fp16():
    net, opt = setup("O3")
    assert {p.fmt.name for p in net.parameters()} == {"fp16"}
    assert net.bn.running_var.fmt.name == "fp16"
    assert not opt.master_weights and opt.state_fmt.name == "fp16"
    assert not opt.scaler.dynamic and opt.scaler.get_scale() == 1.0


def test_overrides():
    net, opt = setup("O2", loss_scale=128.0, keep_batchnorm_fp32=False)
    assert opt.scaler.get_scale() == 128.0 and not opt.scaler.dynamic
    assert net.bn.weight.fmt.name == "fp16"
    net, opt = setup("O2", dtype="bf16")
    assert net.fc.weight.fmt.name == "bf16" and opt.master_weights
    net, opt = setup("O3", cast_model_type="bf16")
    assert net.fc.weight.fmt.name == "bf16"
    net, opt = setup("O2", scale_window=7, init_scale=2.0**4)
    assert opt.scaler.get_scale() == 16.0


def test_o2_step_updates_fp32_master_and_rounds_into_the_model():
    net, opt = setup("O2", loss_scale=1.0)
    w16 = net.out.weight.numpy().copy()
    loss = F.cross_entropy(net(Tensor(X)), Y)
    with scale_loss(loss, opt) as scaled:
        scaled.backward()
    g = net.out.weight.grad.copy()
    assert g.dtype == np.float32  # master gradient: the fp16 gradient widened exactly
    opt.step()
    master = opt.state[net.out.weight]["master"]
    # SGD with momentum, first step: buf = g, w = w - lr * g in float32 (PyTorch's formula)
    ref_master = w16.astype(np.float32) - np.float32(0.1) * g
    np.testing.assert_array_equal(master, ref_master)
    np.testing.assert_array_equal(net.out.weight.numpy(), ref_master.astype(np.float16))


def test_scale_loss_saves_gradients_that_underflow_without_it():
    # loss = 2**-30 * sum(out): the exact weight gradient 2**-30 * sum(x) is below fp16's
    # smallest subnormal (2**-24); scaled by 2**16 it is a normal fp16 value
    x = np.array([[1.0, 0.5, 0.25, 2.0]], np.float32)
    exact = 2.0**-30 * np.repeat(x.astype(np.float64), 3, axis=0)
    for scale, expect in ((2.0**16, exact), (1.0, np.zeros_like(exact))):
        net = nn.Linear(4, 3, rng=0)
        net, opt = initialize(net, optim.SGD(net.parameters(), lr=0.1), "O2",
                              loss_scale=scale)
        with scale_loss(net(Tensor(x)).sum() * 2.0**-30, opt) as scaled:
            scaled.backward()
        np.testing.assert_array_equal(net.weight.grad, expect.astype(np.float32))


def test_dynamic_scale_skips_an_inf_step_and_halves():
    net, opt = setup("O2")
    before = net.fc.weight.numpy().copy()
    loss = F.cross_entropy(net(Tensor(X)), Y)
    with scale_loss(loss, opt) as scaled:
        scaled.backward()
        net.fc.weight.grad[0, 0] = np.inf  # an overflow in the fp16 gradient
    opt.step()
    assert opt.skipped_steps == 1 and opt.last_step_skipped
    assert opt.scaler.get_scale() == 2.0**15  # Apex: halve on overflow
    np.testing.assert_array_equal(net.fc.weight.numpy(), before)
    opt.zero_grad()
    loss = F.cross_entropy(net(Tensor(X)), Y)
    with scale_loss(loss, opt) as scaled:
        scaled.backward()
    opt.step()
    assert not opt.last_step_skipped and not np.array_equal(net.fc.weight.numpy(), before)


def test_o3_shortcut_does_not_scale():
    net, opt = setup("O3")
    loss = F.cross_entropy(net(Tensor(X)), Y)
    with scale_loss(loss, opt) as scaled:
        assert scaled is loss
        scaled.backward()
    assert net.fc.weight.grad.dtype == np.float16
    opt.step()
    assert opt.scaler.history == []  # nothing checked, as Apex with scale 1 and no masters


def test_plain_step_and_gradscaler_protocol_on_o1():
    net, opt = setup("O1")
    scaler = fpsim.amp.GradScaler(init_scale=4.0)
    loss = F.cross_entropy(net(Tensor(X)), Y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.history[-1]["skipped"] is False


@pytest.mark.parametrize("level,match", [("O4", "unknown opt_level 'O4'; valid: O0, O1"),
                                         ("01", "the letter O, not zero")])
def test_bad_opt_level(level, match):
    with pytest.raises(ValueError, match=match):
        setup(level)


def test_bad_input():
    with pytest.raises(ValueError, match="fp32 parameters"):
        initialize(nn.Linear(2, 2, rng=0).to("fp16"), None, "O2")
    net, opt = setup("O1")
    with pytest.raises(ValueError, match="already initialized"):
        initialize(Net(), opt, "O1")
    with pytest.raises(ValueError, match="master_weights=True needs a low-precision model"):
        initialize(Net(), None, "O1", master_weights=True)
    with pytest.raises(TypeError, match="fpsim.nn.Module"):
        initialize(object(), None, "O1")
    plain = optim.SGD(Net().parameters(), lr=0.1)
    with pytest.raises(TypeError, match="optimizer returned by fpsim.amp.initialize"):
        with scale_loss(Tensor([1.0]), plain):
            pass
    with pytest.raises(ValueError, match="loss_scale must be 'dynamic' or a positive"):
        setup("O2", loss_scale="huge")
