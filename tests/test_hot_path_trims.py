"""The per-step path made shorter without changing behaviour: the conv / pool plan caches
take only plain arguments as keys (an equal bool, float, NumPy integer or list is parsed and
checked as without a cache), Sequential calls a layer's forward directly only where the
layer's __call__ is Module's, and the backward pass (leaves collected as their gradients
arrive) gives the gradients and ownership rules it gave."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim import FP16
from fpsim.autograd import Tensor
from fpsim.autograd import conv as conv_mod
from fpsim.autograd import functional as F
from fpsim.nn import Linear, Module, ReLU, Sequential


def _outcome(fn):
    """A call's result bits, or its exception's type and message."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return type(e), str(e)
    if isinstance(out, tuple):
        return tuple(np.asarray(o.data if isinstance(o, Tensor) else o).tobytes() for o in out)
    return out.data.tobytes(), out.shape


X = Tensor(np.random.default_rng(0).standard_normal((2, 2, 6, 6)), FP16)
W = Tensor(np.random.default_rng(1).standard_normal((4, 2, 3, 3)), FP16)


@pytest.mark.parametrize("name, plain, other", [
    ("stride", 1, True), ("stride", 1, 1.0), ("stride", 1, np.int64(1)), ("stride", (1, 1), [1, 1]),
    ("stride", (1, 1), (1, True)), ("padding", 1, True), ("padding", (1, 1), (1.0, 1)),
    ("dilation", 1, True), ("groups", 1, True), ("groups", 1, 1.0), ("padding", "same", b"same"),
])
def test_conv_plan_cache_parses_arguments_that_only_equal_a_cached_key(name, plain, other):
    def call(v):
        return lambda: F.conv2d(X, W, None, **{name: v})

    conv_mod._CONV_PLANS.clear()
    fresh = _outcome(call(other))  # no plan cached
    conv_mod._CONV_PLANS.clear()
    _outcome(call(plain))  # caches the plain argument's plan under an equal key
    assert _outcome(call(other)) == fresh


@pytest.mark.parametrize("name, plain, other", [
    ("kernel_size", 2, True), ("kernel_size", 2, 2.0), ("stride", 2, [2, 2]),
    ("padding", 0, False), ("dilation", 1, True), ("ceil_mode", True, 1), ("ceil_mode", False, 0),
    ("stride", (2, 2), (2, 2.0)),
])
def test_max_pool_plan_cache_parses_arguments_that_only_equal_a_cached_key(name, plain, other):
    def call(v):
        kw = {"kernel_size": 2, "return_indices": True, name: v}
        return lambda: F.max_pool2d(X, **kw)

    conv_mod._MAXPOOL_PLANS.clear()
    fresh = _outcome(call(other))
    conv_mod._MAXPOOL_PLANS.clear()
    _outcome(call(plain))
    assert _outcome(call(other)) == fresh


class _Doubled(ReLU):
    """A layer whose __call__ is its own: Sequential must go through it."""

    def __call__(self, x):
        return super().__call__(x) * 2.0


def test_sequential_calls_a_layers_own_call():
    net = Sequential(Linear(3, 2, rng=0), _Doubled())
    x = Tensor(np.ones((1, 3)))
    want = F.relu(net[0](x)) * 2.0
    assert np.array_equal(net(x).data, want.data)
    plain = Sequential(Linear(3, 2, rng=0), ReLU())
    assert np.array_equal(plain(x).data, F.relu(plain[0](x)).data)


def test_sequential_of_a_plain_module_subclass_runs_its_forward():
    class Affine(Module):
        def forward(self, x):
            return x * 3.0 + 1.0

    assert Sequential(Affine(), Affine())(Tensor([1.0])).tolist() == [13.0]


def test_backward_of_a_leaf_takes_a_copy_of_a_shared_gradient():
    x = Tensor([1.0, 2.0], requires_grad=True)
    g = np.array([[3.0, 4.0]])[0]  # a view: x.grad must not share its memory
    x.backward(g)
    assert x.grad.tolist() == [3.0, 4.0] and not np.shares_memory(x.grad, g)
    x.backward(np.array([1.0, 1.0]))  # a second pass adds
    assert x.grad.tolist() == [4.0, 5.0]


def test_leaf_gradients_sum_a_pass_before_adding_to_the_previous_grad():
    # fp16: (old + (a + b)) and ((old + a) + b) differ; the pass's sum comes first
    x = Tensor([1.0], FP16, requires_grad=True)
    x.grad = np.array([2048.0], np.float16)
    y = x * 1.0 + x * 1.0  # two contributions of 1 each: 2048 + 2 = 2050 (1 + 1 first)
    y.backward(np.array([1.0], np.float16))
    assert x.grad.tolist() == [2050.0]  # ((2048 + 1) + 1) would round to 2048 twice


def test_retained_intermediate_gradients_and_the_freed_graph():
    x = Tensor([2.0], requires_grad=True)
    w = Tensor([3.0], requires_grad=True)
    mid = x * w
    mid.retain_grad()
    out = F.relu(mid) * mid  # mid reached twice: its gradient sums both paths
    out.backward(np.array([1.0]))
    assert (x.grad.tolist(), w.grad.tolist(), mid.grad.tolist()) == ([36.0], [24.0], [12.0])
    assert not np.shares_memory(mid.grad, x.grad) and not np.shares_memory(x.grad, w.grad)
    with pytest.raises(RuntimeError, match="second time"):
        out.backward(np.array([1.0]))


def test_matmul_accumulation_contexts_are_reused_and_nest():
    from fpsim.autograd import matmul_accumulation, rounding_context
    from fpsim.autograd.context import get_accumulation as accumulation
    from fpsim.autograd.context import get_rounding

    a, b = matmul_accumulation("fp32"), matmul_accumulation("fp32")
    assert a is b  # the loop's per-step context: built once
    with a:
        assert accumulation().kind == "fp32"
        with matmul_accumulation("exact"):  # another base: its own context
            assert accumulation().kind == "exact"
            with a:  # the same object entered again while active
                assert accumulation().kind == "fp32"
            assert accumulation().kind == "exact"
        assert accumulation().kind == "fp32"
    assert accumulation().kind == "fp32"
    with rounding_context("up"):
        c = matmul_accumulation("fp32")
        assert c is not a
        with c:  # keeps the rounding mode active when it was made
            assert get_rounding().name == "UP"
    with pytest.raises(ValueError, match="unknown accumulation model"):
        matmul_accumulation(["fp32"])  # unhashable: parsed, and refused, on every call
    with pytest.raises(ValueError, match="unknown accumulation model"):
        matmul_accumulation("fp33")


def test_scoped_restores_plain_globals_after_an_exception_and_nested_entries():
    import fpsim.state as st

    ctx = st.scoped(grad_enabled=False)
    with pytest.raises(KeyError):
        with ctx:
            with ctx:
                assert st.grad_enabled is False
            raise KeyError("x")
    assert st.grad_enabled is True
    with st.scoped(grad_enabled=False, flag_stack=("f",)):
        assert st.grad_enabled is False and st.flag_stack.get() == ("f",)
    assert st.grad_enabled is True and st.flag_stack.get() == ()
