"""The autograd engine's glue (fpsim.autograd.context, nn.Module attributes, linear and
cross-entropy edges, IEEE flags of GEMM ops): behaviour its speed-ups (issue 20) must keep.

- ``rounding_context`` / ``matmul_accumulation`` became a scoped class instead of a
  ``contextlib.contextmanager``: they must still work as decorators (a contextmanager is a
  ContextDecorator) and a context object entered again while active must restore the settings
  in order (the class keeps its saved state on the object).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import fpsim
from fpsim import Rounding
from fpsim.autograd import (
    Tensor,
    get_accumulation,
    get_rounding,
    matmul_accumulation,
    rounding_context,
)
from fpsim.autograd import functional as F
from fpsim.nn import Dropout, Linear, Module, Parameter, ReLU, Sequential


@pytest.mark.parametrize(("make", "read", "want"), [
    (lambda: rounding_context("up"), get_rounding, Rounding.UP),
    (lambda: rounding_context("toward_zero"), get_rounding, Rounding.TOWARD_ZERO),
    (lambda: matmul_accumulation("exact"), lambda: get_accumulation().kind, "exact"),
])
def test_contexts_decorate_functions(make, read, want):
    before = read()

    @make()
    def inside(x):
        return read(), x

    assert inside(3) == (want, 3)
    assert inside(x=4) == (want, 4)  # each call enters afresh
    assert read() == before


def test_decorated_function_rounds_its_ops():
    x = Tensor([1.0], "fp16")

    @rounding_context("up")
    def bump(t):
        return t + 2.0**-20

    assert float(bump(x).item()) == 1 + 2.0**-10
    assert float((x + 2.0**-20).item()) == 1.0


@pytest.mark.parametrize(("make", "read"), [
    (lambda: rounding_context("up"), get_rounding),
    (lambda: matmul_accumulation(("sequential", "fp16")), get_accumulation),
])
def test_one_context_object_entered_twice(make, read):
    before = read()
    ctx = make()
    with ctx as s:
        inner_value = read()
        with ctx as s2:  # the same object, nested
            assert read() == inner_value and s2 is s
        assert read() == inner_value
    assert read() == before  # nothing leaks past the outer block
    with ctx:  # and once more, sequentially
        assert read() == inner_value
    assert read() == before


def test_reentered_context_restores_after_an_exception():
    ctx = rounding_context("down")
    with pytest.raises(KeyError):
        with ctx:
            with ctx:
                raise KeyError("x")
    assert get_rounding() is Rounding.NEAREST_EVEN
    np.testing.assert_array_equal(
        (Tensor([1.0], "fp16") + 2.0**-20).numpy(), np.array([1.0], np.float16))


# --------------------------------------------------------------------------- Module mirror
# Module mirrors its parameters, buffers and sub-modules in the instance __dict__ (a plain
# attribute read). The mirror must not change what an attribute read finds where a registered
# name is also Module's own state or a class attribute, nor which store wins when one name is
# registered in two (parameters, then buffers, then sub-modules, as __getattr__ looks).

def test_registering_modules_own_attribute_names_corrupts_nothing():
    m = Dropout(0.5)
    m.register_buffer("training", Tensor([1.0]))
    assert m.training is True and "training" in m._buffers
    m.eval()
    assert m.training is False
    del m.training  # removes the buffer, not the module's training flag
    assert m.training is False and "training" not in m._buffers
    n = Module()
    n.register_buffer("_parameters", Tensor([1.0]))
    n.w = Parameter([2.0])  # the parameter store is still the module's own
    assert [name for name, _ in n.named_parameters()] == ["w"]
    assert list(n.state_dict()) == ["w", "_parameters"]


def test_class_attributes_are_found_first_as_before():
    seq = Sequential(ReLU())
    seq.add_module("forward", Linear(2, 2, rng=0))  # a sub-module named like a method
    x = Tensor([[1.0, -1.0]])
    assert callable(seq.forward) and not isinstance(seq.forward, Module)
    second = Linear(2, 2, rng=0)
    np.testing.assert_array_equal(seq(x).numpy(), second(F.relu(x)).numpy())

    class WithDefault(Module):
        bias = None  # a class attribute: attribute reads find it first

        def __init__(self):
            super().__init__()
            self.register_parameter("scale", Parameter([1.0]))
            self.bias = Parameter([1.0])

    m = WithDefault()
    assert m.bias is None and list(m.state_dict()) == ["scale", "bias"]
    assert isinstance(m.scale, Parameter)
    p = Module()
    p.register_parameter("eval", Parameter([1.0]))
    assert p.eval() is p


def test_one_name_in_two_stores_reads_the_parameter_first():
    m = Module()
    m.register_parameter("w", Parameter([1.0]))
    m.register_buffer("w", Tensor([2.0]))
    assert isinstance(m.w, Parameter) and m.w.tolist() == [1.0]
    del m.w  # the parameter goes; the buffer shows
    assert not isinstance(m.w, Parameter) and m.w.tolist() == [2.0]
    del m.w
    with pytest.raises(AttributeError):
        m.w  # noqa: B018
    assert "w" not in m.__dict__


def test_shallow_copy_keeps_both_modules_consistent():
    m = Linear(2, 2, rng=0)
    w = m.weight
    c = copy.copy(m)
    assert c.weight is w and c.bias is m.bias and type(c) is Linear
    c.weight = Parameter([[1.0, 0.0], [0.0, 1.0]])
    for mod in (m, c):  # what forward reads is what parameters() trains and state_dict saves
        assert mod.weight is mod._parameters["weight"]
        assert any(p is mod.weight for p in mod.parameters())
    assert m.weight is w
    x = Tensor([[1.0, 2.0]])
    np.testing.assert_array_equal(c(x).numpy(), F.linear(x, c.weight, c.bias).numpy())


# ------------------------------------------------------------------------- linear, empty
# linear reshapes its input to (rows, in_features): with in_features or out_features 0 the
# rows cannot be inferred by reshape(-1, 0) (a NumPy ValueError before). An empty sum is 0:
# the result is the bias broadcast, as NumPy's matmul of the same arrays.

@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "fp64"])
@pytest.mark.parametrize(("x_shape", "w_shape"), [
    ((3, 0), (2, 0)), ((0,), (2, 0)), ((2, 3, 0), (4, 0)), ((3, 4), (0, 4)), ((2, 2, 4), (0, 4)),
    ((0, 4), (2, 4)), ((0, 0), (0, 0)),
])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_with_an_empty_dimension(x_shape, w_shape, with_bias, fmt):
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal(x_shape), fmt, requires_grad=True)
    w = Tensor(rng.standard_normal(w_shape), fmt, requires_grad=True)
    b = Tensor(rng.standard_normal(w_shape[0]), fmt, requires_grad=True) if with_bias else None
    y = F.linear(x, w, b)
    x64, w64 = x.numpy(np.float64), w.numpy(np.float64)
    want = x64 @ w64.T + (b.numpy(np.float64) if with_bias else 0.0)
    assert y.shape == want.shape and y.fmt.name == fmt
    np.testing.assert_array_equal(y.numpy(np.float64), want)
    g = np.ones(y.shape)
    y.backward(g)
    rows = int(np.prod(x_shape[:-1]))
    g2, x2 = g.reshape(rows, w_shape[0]), x64.reshape(rows, w_shape[1])
    np.testing.assert_array_equal(x.grad.astype(np.float64), g @ w64)
    np.testing.assert_array_equal(w.grad.astype(np.float64), g2.T @ x2)
    if with_bias:
        np.testing.assert_array_equal(b.grad.astype(np.float64), g2.sum(0))


# ------------------------------------------------------------- cross_entropy's direct path
# cross_entropy with class-index targets goes straight to the unweighted nll once its checks
# pass. nll_loss reads the target as a plain array (np.asarray); a masked array's max skips its
# masked entries, so a masked out-of-range class must not pass the check (it indexed the
# last class, silently).

@pytest.mark.parametrize("bad", [-1, 3, 200])
def test_cross_entropy_masked_array_target_is_checked_as_a_plain_array(bad):
    x = Tensor(np.arange(12.0).reshape(4, 3) / 10, "fp32", requires_grad=True)
    t = np.ma.array([0, 1, bad, 2], mask=[False, False, True, False])
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds for 3 classes"):
        F.cross_entropy(x, t)
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds for 3 classes"):
        F.nll_loss(F.log_softmax(x, dim=1), t)
    ok = np.ma.array([0, 1, 1, 2], mask=[False, False, True, False])  # values as a plain array
    np.testing.assert_array_equal(F.cross_entropy(x, ok).numpy(),
                                  F.cross_entropy(x, np.asarray(ok)).numpy())


def test_shallow_copy_keeps_slots_and_plain_attributes():
    class Slotted(Linear):
        __slots__ = ("tag", "unset")

    m = Slotted(2, 2, rng=0)
    m.tag = "t"
    m.note = [1]
    c = copy.copy(m)
    assert c.tag == "t" and c.note is m.note and not hasattr(c, "unset")
    assert c.weight is m.weight and c.training is m.training


@pytest.mark.parametrize("dim", ["a", 1.0, (0, "b"), 1.5, [0.0]])
def test_dims_that_are_not_integers_are_a_clear_type_error(dim):
    """A dim that is not an int (or a sequence of ints) names itself in a TypeError instead of
    int()'s ValueError (a string) or being truncated (a float), across the ops that take one."""
    x = Tensor(np.ones((2, 3)))
    for op in (lambda: F.sum(x, dim), lambda: F.mean(x, dim), lambda: F.cat([x, x], dim)):
        with pytest.raises(TypeError, match="dim must be an int or a sequence of ints"):
            op()


@pytest.mark.parametrize("scale", [1.0, 3e4, 1e-4, 1e-7])
def test_fp16_gemm_ops_record_ieee_flags_under_flag_context(scale):
    """linear, matmul and conv2d in fp16 under the fp32 accumulation model record the IEEE flags
    of their output rounding in a flag_context, as every other op does: the fast fp16 path of
    accumulate.finish skipped them (an overflow to inf recorded nothing). Reference: the flags
    fpsim.round gives the float64 sum rounded to fp32 (the accumulator), then to fp16; values as
    without the context."""
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((4, 6)) * scale
    ws = rng.standard_normal((3, 6))
    ims = rng.standard_normal((2, 1, 5, 5)) * scale
    ks = rng.standard_normal((2, 1, 3, 3))
    x, w = Tensor(xs, "fp16"), Tensor(ws, "fp16")
    im, k = Tensor(ims, "fp16"), Tensor(ks, "fp16")
    x64, w64 = x.numpy(np.float64), w.numpy(np.float64)
    im64, k64 = im.numpy(np.float64), k.numpy(np.float64)
    win = np.lib.stride_tricks.sliding_window_view(im64, (3, 3), axis=(2, 3))
    conv_acc = np.einsum("nchwij,ocij->nohw", win, k64)
    cases = [(lambda: F.linear(x, w), x64 @ w64.T), (lambda: x @ w.T, x64 @ w64.T),
             (lambda: F.conv2d(im, k), conv_acc)]
    for op, acc in cases:
        plain = op().numpy()
        with fpsim.flag_context() as ctx:
            got = op().numpy()
        acc32, f32 = fpsim.round(acc, "fp32", flags=True)  # the fp32 accumulator's rounding
        _, f16 = fpsim.round(np.asarray(acc32, np.float64), "fp16", flags=True)
        np.testing.assert_array_equal(got.view(np.uint16), plain.view(np.uint16))
        assert int(ctx.flags) == int(np.bitwise_or.reduce(np.concatenate(
            [f32.reshape(-1), f16.reshape(-1)])))


def test_fp32_gradient_sums_record_ieee_flags_under_flag_context():
    """Two fp32 gradients of one tensor are added with one rounding; inside a flag_context the
    add records its flags (the plain float32 fast path skipped them)."""
    big = np.float32(3e38)
    x = Tensor(np.array([1.0, 1.0], np.float32), "fp32", requires_grad=True)
    y = x * np.array([big, 1.0], np.float32) + x * np.array([big, 2.0**-30], np.float32)
    with fpsim.flag_context() as ctx:
        y.backward(np.ones(2, np.float32))
    assert np.isinf(x.grad[0]) and x.grad[1] == np.float32(1 + 2.0**-30)
    _, ref = fpsim.round(np.array([2 * 3e38, 1 + 2.0**-30]), "fp32", flags=True)
    assert int(ctx.flags) & int(np.bitwise_or.reduce(ref)) == int(np.bitwise_or.reduce(ref))


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e5m2"])
def test_gemm_ops_record_the_fp32_accumulators_overflow(fmt):
    """The sibling of the fp16 case above: under the fp32 accumulation model the accumulator's
    own rounding to fp32 records its flags too. A bf16 product sum above float32's maximum
    overflows in the accumulator (inf is then exact in bf16): the fast astype recorded nothing.
    Reference: fpsim.round's flags of the float64 sum to fp32, then of that to ``fmt``; values
    as without the context."""
    big = {"bf16": 3e38, "fp16": 6e4, "e5m2": 5e4}[fmt]  # fp16, e5m2: the output overflows
    x, w = Tensor(np.full((2, 2), big), fmt), Tensor(np.ones((3, 2)), fmt)
    im, k = Tensor(np.full((1, 1, 3, 3), big), fmt), Tensor(np.ones((1, 1, 2, 2)), fmt)
    x64, w64 = x.numpy(np.float64), w.numpy(np.float64)
    cases = [(lambda: F.linear(x, w), x64 @ w64.T), (lambda: x @ w.T, x64 @ w64.T),
             (lambda: F.conv2d(im, k), np.full((1, 1, 2, 2), 4 * im.numpy(np.float64)[0, 0, 0, 0]))]
    for op, acc in cases:
        plain = op().numpy(np.float64)
        with fpsim.flag_context() as ctx:
            got = op().numpy(np.float64)
        acc32, f32 = fpsim.round(acc, "fp32", flags=True)
        _, f_out = fpsim.round(np.asarray(acc32, np.float64), fmt, flags=True)
        np.testing.assert_array_equal(got, plain)
        assert np.isinf(got).all()
        want = int(np.bitwise_or.reduce(np.concatenate([f32.reshape(-1), f_out.reshape(-1)])))
        assert int(ctx.flags) == want and want & int(fpsim.flags.Flags.OVERFLOW)
