"""Leaf gradients own their memory: backward hands a leaf its gradient array without a copy only
when nothing else holds it, so a ``.grad`` never shares memory with another tensor's ``.grad``,
with any tensor's data or with the gradient the caller passed, and changing one in place changes
nothing else (fpsim.autograd.tensor._gradients' ``sole`` rule)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fpsim.autograd import Tensor
from fpsim.autograd import functional as F
from fpsim.nn import Parameter

FORMATS = ["fp16", "bf16", "fp32", "fp64"]


def _leaves(fmt, *shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(s), fmt) for s in shapes]


def _graphs():
    """(name, build) pairs: build(fmt) -> (leaves, output, extra tensors whose data must stay
    apart). Pass-through ops (add, reshape, clone, to, transpose, cat/split, broadcasting)
    hand ``g`` itself or views of it to several tensors; the others return fresh arrays."""

    def add_two(fmt):
        a, b = _leaves(fmt, (3, 4), (3, 4))
        return [a, b], F.sum(a + b), []

    def add_self(fmt):
        (a,) = _leaves(fmt, (3, 4))
        return [a], F.sum(a + a), []

    def reshape_add(fmt):
        a, b = _leaves(fmt, (12,), (3, 4))
        return [a, b], F.sum(F.reshape(a, (3, 4)) + b), []

    def clone_to(fmt):
        a, b = _leaves(fmt, (5,), (5,))
        return [a, b], F.sum(a.clone() + b.to(fmt)), []

    def transpose(fmt):
        a, b = _leaves(fmt, (3, 4), (4, 3))
        return [a, b], F.sum(F.transpose(a, 0, 1) - b), []

    def cat_split(fmt):
        a, b, c = _leaves(fmt, (2, 3), (4, 3), (6, 3))
        return [a, b, c], F.sum(F.cat([a, b], 0) * c), []

    def broadcast(fmt):
        a, b = _leaves(fmt, (3, 1), (1, 4))
        return [a, b], F.sum(a + b), []

    def mse(fmt):
        a, b = _leaves(fmt, (6,), (6,))
        return [a, b], F.mse_loss(a, b), []

    def mlp(fmt):
        w1, b1, w2, b2 = _leaves(fmt, (5, 4), (5,), (3, 5), (3,))
        x = Tensor(np.linspace(-1, 1, 8).reshape(2, 4), fmt)
        h = F.relu(F.linear(x, w1, b1))
        return [w1, b1, w2, b2], F.cross_entropy(F.linear(h, w2, b2), np.array([0, 2])), [x, h]

    def matmul_shared(fmt):
        a, b = _leaves(fmt, (3, 4), (4, 2))
        y = a @ b
        return [a, b], F.sum(y + y), [y]

    return [(f.__name__, f) for f in (add_two, add_self, reshape_add, clone_to, transpose,
                                      cat_split, broadcast, mse, mlp, matmul_shared)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("name", "build"), _graphs())
def test_leaf_grads_share_no_memory(name, build, fmt):
    leaves, out, extra = build(fmt)
    out.backward()
    grads = [p.grad for p in leaves]
    assert all(g is not None for g in grads)
    for g, h in itertools.combinations(grads, 2):
        assert not np.shares_memory(g, h), name
    for g in grads:
        for t in leaves + extra + [out]:
            assert not np.shares_memory(g, t.numpy()), name


@pytest.mark.parametrize("fmt", ["fp16", "fp32"])
@pytest.mark.parametrize(("name", "build"), _graphs())
def test_changing_a_grad_in_place_changes_nothing_else(name, build, fmt):
    leaves, out, extra = build(fmt)
    out.backward(retain_graph=True)
    before = [p.grad.copy() for p in leaves]
    data = [t.numpy().copy() for t in leaves + extra]
    for p in leaves:  # scribble on every gradient in place
        p.grad[...] = 7
    for p in leaves:
        assert np.all(p.grad == 7)
    assert all(np.array_equal(d, t.numpy(), equal_nan=True)
               for d, t in zip(data, leaves + extra, strict=True))
    # the retained graph still gives the same gradients (nothing it keeps was scribbled on)
    for p in leaves:
        p.grad = None
    out.backward(retain_graph=True)
    for b, p in zip(before, leaves, strict=True):
        np.testing.assert_array_equal(b, p.grad)


def test_caller_gradient_is_not_adopted():
    (a,) = _leaves("fp32", (3,))
    y = a * 2.0
    g = np.ones(3, dtype=np.float32)
    y.backward(g)
    assert not np.shares_memory(a.grad, g)
    a.grad[...] = 0
    assert np.all(g == 1)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("as_tensor", [False, True])
def test_caller_gradient_of_a_root_leaf_is_not_adopted(fmt, as_tensor):
    """The root itself a leaf, the caller's gradient already in its grad format (array or
    Tensor): backward's rounding returns it unchanged, and the leaf must still not adopt it."""
    (a,) = _leaves(fmt, (3,))
    g = Tensor(np.ones(3), fmt)
    given = g if as_tensor else g.numpy()
    a.backward(given)
    assert not np.shares_memory(a.grad, g.numpy())
    a.grad[...] = 0
    assert np.all(g.numpy() == 1)


def test_root_leaf_gradient_is_its_own():
    (a,) = _leaves("fp16", (1,))
    a.backward()
    b = a.grad
    a.backward()  # accumulates into a fresh array
    assert a.grad is not b and float(a.grad[0]) == 2.0 and float(b[0]) == 1.0


def test_retained_non_leaf_grad_is_a_copy():
    a, b = _leaves("fp32", (4,), (4,))
    h = a + b
    h.retain_grad()
    F.sum(h).backward()
    for g in (a.grad, b.grad):
        assert not np.shares_memory(h.grad, g)


@pytest.mark.parametrize("fmt", FORMATS + ["e4m3"])
def test_zero_d_leaves_get_writable_0d_arrays(fmt):
    """NumPy ops on 0-d arrays return NumPy scalars; a .grad is still a writable 0-d array
    (as PyTorch's 0-d tensor), also when two gradients are added."""
    ops = [lambda t: t.exp(), lambda t: -t, lambda t: t * t, lambda t: t + 1.0,
           lambda t: t * 3.0 + t.exp()]
    for op in ops:
        x = Tensor(2.0, fmt, requires_grad=True)
        y = op(x)
        y.backward(retain_graph=True)
        first = x.grad.copy()
        y.backward()  # accumulates
        for g in (first, x.grad):
            assert type(g) is np.ndarray and g.shape == () and g.flags.writeable
        x.grad[...] = 0
        assert float(x.grad) == 0.0


@pytest.mark.parametrize("fmt", FORMATS + ["e4m3"])
def test_zero_d_results_hold_0d_arrays(fmt):
    """The forward sibling of the 0-d .grad rule: an op on a 0-d tensor stores a 0-d array as its
    values, never a NumPy scalar (neg, relu and casts of 0-d arrays give scalars in NumPy)."""
    ops = [lambda t: -t, lambda t: t.relu(), lambda t: t.to("fp32"), lambda t: t.to("fp16"),
           lambda t: t.exp(), lambda t: t * t, lambda t: t + 1.0, lambda t: t.sum()]
    for op in ops:
        y = op(Tensor(2.0, fmt, requires_grad=True))
        assert type(y.data) is np.ndarray and y.data.shape == ()
