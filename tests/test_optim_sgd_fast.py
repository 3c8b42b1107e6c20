"""SGD's straight loop for fp32-master parameters (SGD.step) against the general path of
Optimizer.step, bit for bit: parameters, masters, momentum buffers.

The reference is the same optimizer with an identity update hook, which sends every parameter
through the general path (Optimizer._step_param and SGD._update, whose formulas
tests/test_optim.py and tests/test_torch_reference.py check against PyTorch). A spy on
_step_param proves which parameters took the straight loop.
"""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim.autograd import rounding_context
from fpsim.nn import Parameter
from fpsim.optim import SGD
from fpsim.optim.optimizer import Optimizer


def _identity_hook(update, *args):
    return update(*args)


def _grads(rng: np.random.Generator, shapes, kind: str, step: int) -> list:
    out = []
    for shape in shapes:
        g = rng.standard_normal(shape) * (10.0 ** rng.integers(-8, 3))
        if kind == "specials" and g.size and step == 2:
            flat = g.reshape(-1)
            flat[0] = np.inf
            flat[-1] = 2.0**-30  # a subnormal of fp16, zero in fp8
        out.append(g)
    return out


def _train(fmt: str, shapes, groups_kw: list[dict], hooked: bool, kind: str, steps: int,
           rounding=None, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = [Parameter(rng.standard_normal(s), fmt) for s in shapes]
    split = len(params) // 2 if len(groups_kw) == 2 else len(params)
    groups = [{"params": params[:split], **groups_kw[0]}]
    if len(groups_kw) == 2:
        groups.append({"params": params[split:], **groups_kw[1]})
    opt = SGD(groups, lr=0.05, momentum=0.9, master_weights=True)
    if hooked:
        opt.register_update_hook(_identity_hook)
    grng = np.random.default_rng(seed + 1)
    for step in range(steps):
        for i, (p, g) in enumerate(zip(params, _grads(grng, shapes, kind, step), strict=True)):
            p.grad = None if (step == 1 and i == 0) else g  # a parameter without a gradient
        if step == 2:
            opt.param_groups[0]["lr"] = 0.01  # a scheduler's edit between steps
        if rounding is None:
            opt.step()
        else:
            with rounding_context(rounding, rng=seed):
                opt.step()
    return params, opt


def _state_arrays(params, opt):
    out = []
    for p in params:
        out.append(p.data)
        st = opt.state.get(p, {})
        out.extend(st[k] for k in sorted(st))
    return out


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))


SHAPES = [(7, 5), (3,), (1, 1), (4, 3, 2), (0, 3), ()]


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("kind", ["normal", "specials"])
@pytest.mark.parametrize("groups_kw", [
    [{}],
    [{"momentum": 0.5}, {"nesterov": True}],
    [{"weight_decay": 0.01}, {"momentum": 0.99}],
    [{"dampening": 0.1}, {"maximize": True}],
])
def test_straight_loop_equals_general_path(fmt, kind, groups_kw):
    ref = _train(fmt, SHAPES, groups_kw, True, kind, 5)
    got = _train(fmt, SHAPES, groups_kw, False, kind, 5)
    a, b = _state_arrays(*ref), _state_arrays(*got)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert _same(x, y)


@pytest.mark.parametrize("rounding", ["up", "toward_zero", "stochastic"])
def test_straight_loop_under_a_rounding_context(rounding):
    ref = _train("fp16", SHAPES, [{}], True, "normal", 4, rounding)
    got = _train("fp16", SHAPES, [{}], False, "normal", 4, rounding)
    for x, y in zip(_state_arrays(*ref), _state_arrays(*got), strict=True):
        assert _same(x, y)


def test_which_parameters_take_the_straight_loop(monkeypatch):
    calls = []
    real = Optimizer._step_param

    def spy(self, p, group, update):
        calls.append((p.shape, group.get("nesterov")))
        return real(self, p, group, update)

    monkeypatch.setattr(Optimizer, "_step_param", spy)
    rng = np.random.default_rng(0)
    fp16 = [Parameter(rng.standard_normal((3, 2)), "fp16") for _ in range(2)]
    scalar = Parameter(1.0, "fp16")
    fp32 = Parameter(rng.standard_normal(4), "fp32")  # no master: the general path
    nesterov = Parameter(rng.standard_normal(5), "fp16")
    opt = SGD([{"params": fp16 + [scalar, fp32]}, {"params": [nesterov], "nesterov": True}],
              lr=0.1, momentum=0.9, master_weights=True)
    for p in fp16 + [scalar, fp32, nesterov]:
        p.grad = np.ones(p.shape)
    opt.step()
    assert len(calls) == 5  # the first step makes the state: all general
    calls.clear()
    opt.step()
    # the fp16 matrices take the straight loop; the 0-d parameter, the fp32 one (no master)
    # and the Nesterov group the general path
    assert sorted(calls, key=str) == sorted([((), False), ((4,), False), ((5,), True)], key=str)


def test_state_dict_round_trip_then_straight_loop():
    ref = _train("fp16", SHAPES, [{}], True, "normal", 2)
    got = _train("fp16", SHAPES, [{}], False, "normal", 2)
    for params, opt in (ref, got):
        sd = opt.state_dict()
        opt.load_state_dict(sd)
        for p in params:
            p.grad = np.full(p.shape, 0.125)
        opt.step()
    for x, y in zip(_state_arrays(*ref), _state_arrays(*got), strict=True):
        assert _same(x, y)


def test_flags_of_the_parameter_rounding_are_recorded():
    for hooked in (True, False):
        p = Parameter(np.array([65504.0, 1.0]), "fp16")
        opt = SGD([p], lr=1.0, momentum=0.5, master_weights=True)
        if hooked:
            opt.register_update_hook(_identity_hook)
        p.grad = np.array([-8.0, 0.0])
        opt.step()
        p.grad = np.array([-8.0, 2.0**-30])
        with fpsim.flag_context() as ctx:
            opt.step()
        assert ctx.flags & fpsim.Flags.OVERFLOW, hooked  # 65504 + 20 rounds to inf in fp16
        assert np.isinf(p.data[0])
