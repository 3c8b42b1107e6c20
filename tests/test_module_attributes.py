"""Module keeps parameters, buffers and sub-modules in its three stores (the state_dict's order)
and mirrors them in the instance __dict__, so that ``layer.weight`` is a plain attribute read:
every way of adding, replacing, clearing or deleting one must keep attribute access, the stores
and the mirror in agreement."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from fpsim.autograd import Tensor
from fpsim.nn import Linear, Module, Parameter, ReLU, Sequential

STORES = ("_parameters", "_buffers", "_modules")


def _agree(m: Module) -> None:
    """Each registered name reads back, through attribute access and __dict__, as its store
    holds it, and no name sits in two stores."""
    seen: set[str] = set()
    for store in STORES:
        for name, value in getattr(m, store).items():
            assert name not in seen
            seen.add(name)
            assert getattr(m, name) is value
            assert m.__dict__[name] is value
    for child in m._modules.values():
        if child is not None:
            _agree(child)


def test_assign_replace_clear_delete():
    m = Module()
    p = Parameter([1.0])
    m.w = p
    _agree(m)
    assert m.w is p and list(m.state_dict()) == ["w"]
    q = Parameter([2.0])
    m.w = q  # replace
    _agree(m)
    assert m.w is q
    m.w = None  # clear: stays registered, reads None
    _agree(m)
    assert m.w is None and "w" in m._parameters
    del m.w
    _agree(m)
    assert "w" not in m._parameters
    with pytest.raises(AttributeError):
        m.w  # noqa: B018


def test_register_and_change_kind():
    m = Module()
    m.register_parameter("a", Parameter([1.0]))
    m.register_buffer("b", Tensor([0.0]))
    m.add_module("c", ReLU())
    _agree(m)
    m.a = Linear(1, 1, rng=0)  # a parameter name reassigned a module: moves stores
    _agree(m)
    assert "a" in m._modules and "a" not in m._parameters
    m.b = Tensor([3.0])  # a buffer replaced
    _agree(m)
    assert float(m.b.item()) == 3.0
    m.c = None
    _agree(m)
    del m.c
    _agree(m)
    with pytest.raises(TypeError):
        m.a = 3.0  # a module name takes a Module or None only
    _agree(m)


def test_plain_attributes_stay_plain():
    m = Module()
    m.scale = 2.0
    assert m.scale == 2.0 and all("scale" not in getattr(m, s) for s in STORES)
    m.register_parameter("scale", Parameter([5.0]))  # a name taken by a plain attribute
    _agree(m)
    assert isinstance(m.scale, Parameter)


def test_layers_models_copies_and_state_dict():
    net = Sequential(Linear(3, 4, rng=0), ReLU(), Linear(4, 2, rng=1))
    _agree(net)
    net.to("fp16")
    _agree(net)
    for clone in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        _agree(clone)
        assert clone[0].weight is clone._modules["0"]._parameters["weight"]
        assert clone[0].weight is not net[0].weight
    other = Sequential(Linear(3, 4, rng=5), ReLU(), Linear(4, 2, rng=6))
    other.load_state_dict(net.state_dict())
    _agree(other)
    x = Tensor(np.ones((2, 3)), "fp32")
    np.testing.assert_array_equal(other.to("fp16")(x.to("fp16")).numpy(), net(x.to("fp16")).numpy())
