"""The memory meter of the autograd engine (fpsim.autograd.memory_meter).

References: byte counts written out from the shapes and formats (and fpsim.memory's
activation_bytes / zero_model_state_bytes calculators), and the saved-tensor rules of PyTorch's
derivatives.yaml as listed in the module docstring.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import fpsim
from fpsim import memory, nn
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F
from fpsim.autograd.memory_meter import CATEGORIES, MemoryMeter
from fpsim.optim import SGD, Adam

B, D, L = 8, 12, 5


def mlp(fmt, layers=L, d=D):
    mods = []
    for i in range(layers):
        mods += [nn.Linear(d, d, rng=i), nn.ReLU()]
    return nn.Sequential(*mods).to(fmt)


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "fp8_e4m3", "fp64"])
def test_saved_activations_of_an_mlp_by_format(fmt):
    net = mlp(fmt)
    x = Tensor(np.random.default_rng(0).normal(size=(B, D)), fmt)
    with MemoryMeter(net) as m:
        loss = net(x).sum()
        after_forward = m.sample()
        loss.backward()
    r = m.report()
    # saved: the input (kept by the first linear) and every ReLU output (kept by the ReLU and
    # the next linear): L + 1 arrays of B x D elements at the format's real width
    want = memory.activation_bytes([(B, D)] * (L + 1), fmt)
    assert want == (L + 1) * B * D * np.dtype(fpsim.get_format(fmt).storage_dtype).itemsize
    assert r.max["activations"] == want
    assert r.activations_by_format == {fpsim.get_format(fmt).name: want}
    psi = L * (D * D + D)
    param_bytes = memory.activation_bytes([(psi,)], fmt)
    assert r.current == {"parameters": param_bytes, "master_weights": 0,
                         "gradients": param_bytes, "optimizer_states": 0, "activations": 0}
    assert after_forward == param_bytes + want
    # the sample after the first layer's backward: all gradients exist, nothing is saved
    assert r.timeline[-2] == (0, 2 * param_bytes)
    assert r.peak_total >= after_forward
    # forward ops: L linear + L relu + sum; FLOPs 2 B D D per linear, one per output element
    # of the others (B D per relu, 1 for the sum)
    assert r.ops == 2 * L + 1
    assert r.flops == L * 2 * B * D * D + L * B * D + 1
    assert r.recomputed_ops == 0 and r.recompute_overhead == 0.0


def test_saved_tensors_are_released_when_the_graph_goes():
    net = mlp("fp16")
    x = Tensor(np.ones((B, D)), "fp16")
    with MemoryMeter(net) as m:
        loss = net(x).sum()
        assert m.report().current["activations"] > 0
        del loss
        gc.collect()
        m.sample()
        assert m.report().current["activations"] == 0
        loss = net(x).sum()
        loss.backward(retain_graph=True)  # saved tensors stay for a second backward
        m.sample()
        kept = m.report().current["activations"]
        assert kept == (L + 1) * B * D * 2
        loss.backward()
        assert m.report().current["activations"] == 0


def test_rules_for_views_dropout_pooling_and_parameters():
    w = Tensor(np.ones((4, 6)), "fp16", requires_grad=True)
    x = Tensor(np.ones((3, 4)), "fp16")
    with MemoryMeter(params=[w]) as m:
        h = x @ w                        # keeps x (24 bytes); w is a parameter
        v = h.reshape(6, 3)              # a view: nothing saved
        y = (v * v).sum() + (h * 2.0).sum()  # mul keeps v once (shared storage with h)
    r = m.report()
    assert r.max["activations"] == 24 + 36
    assert r.max["parameters"] == 48
    img = Tensor(np.ones((1, 2, 4, 4)), "bf16", requires_grad=True)
    with MemoryMeter(params=[]) as m:
        d = F.dropout(img, 0.5, rng=0)   # PyTorch keeps a bool mask: 1 byte per element
        p = F.max_pool2d(d, 2)           # keeps its input and int64 indices per output
        s = p.sum()
    r = m.report()
    assert r.activations_by_format == {"bool": 32, "bf16": 64, "int64": 8 * 8}
    assert r.max["activations"] == 32 + 64 + 64
    del y, s


def test_model_states_with_master_weights_and_adam():
    net = mlp("fp16", layers=2)
    psi = sum(p.numel() for p in net.parameters())
    opt = Adam(net.parameters(), lr=1e-3, master_weights=True)
    x = Tensor(np.ones((B, D)), "fp16")
    with MemoryMeter(net, opt) as m:
        net(x).sum().backward()
        opt.step()
        m.sample()
    r = m.report()
    assert r.current == {"parameters": 2 * psi, "master_weights": 4 * psi,
                         "gradients": 2 * psi, "optimizer_states": 8 * psi, "activations": 0}
    # the ZeRO paper's 16 Psi bytes of mixed-precision Adam (one rank, nothing partitioned)
    assert sum(r.current.values()) == memory.zero_model_state_bytes(psi, 0, 1, k=12)
    assert r.by_format["master_weights"] == {"fp32": 4 * psi}
    sgd = SGD(net.parameters(), lr=0.1, momentum=0.9)
    with MemoryMeter(optimizer=sgd) as m:
        net(x).sum().backward()
        sgd.step()
        m.sample()
    assert m.report().current["optimizer_states"] == 4 * psi  # fp32 momentum buffers


def test_discovered_parameters_and_report_text():
    w = Tensor([[1.0, 2.0], [3.0, 4.0]], "fp16", requires_grad=True)
    with MemoryMeter() as m:
        (Tensor([[1.0, 1.0]], "fp16") @ w).relu().sum().backward()
    r = m.report()
    assert r.current["parameters"] == 8 and r.current["gradients"] == 8
    text = r.table("B")
    for c in CATEGORIES:
        assert c in text
    assert set(r.as_dict()) >= {"current", "peak", "max", "ops", "recompute_overhead"}
    with pytest.raises(ValueError, match="valid: B, KiB"):
        r.table("bits")


def test_meter_errors():
    with pytest.raises(TypeError, match="parameters"):
        MemoryMeter(model=42)
    with pytest.raises(TypeError, match="param_groups"):
        MemoryMeter(optimizer=object())
    m = MemoryMeter()
    with m, pytest.raises(RuntimeError, match="already active"):
        m.__enter__()


def test_gradients_are_named_by_the_array_held():
    # Apex O2 keeps fp32 master gradients in the .grad of fp16 parameters: the meter must
    # report what is stored (4 bytes an element, "fp32"), not the parameter's grad format.
    w = Tensor(np.ones((3, 4)), fpsim.FP16, requires_grad=True)
    (w * 2.0).sum().backward()
    w._grad = w._grad.astype(np.float32)
    with MemoryMeter(params=[w]) as m:
        pass
    assert m.report().by_format["gradients"] == {"fp32": 3 * 4 * 4}


def test_a_meter_entered_during_a_recomputation_counts_normally_afterwards():
    """recomputing() undoes its count only on the meters it counted in: one entered inside the
    block (e.g. by code in a checkpointed segment) must not end at -1 and count later ops as
    recomputed ones."""
    from fpsim.autograd.memory_meter import recomputing

    with recomputing():
        inner = MemoryMeter()
        inner.__enter__()
    try:
        assert inner._recomputing == 0
        x = Tensor(np.ones((4, 8)), "fp16", requires_grad=True)
        (x * 2).sum().backward()
        assert inner.recomputed_forward_calls == 0
    finally:
        inner.__exit__(None, None, None)
