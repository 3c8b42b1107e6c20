"""The autograd engine in exact fp64 mode: every op's gradient against float64 central finite
differences (an independent reference: only forward evaluations), the graph machinery, and
errors on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fpsim
from fpsim.autograd import (
    Tensor,
    enable_grad,
    is_grad_enabled,
    matmul_accumulation,
    no_grad,
    rounding_context,
    set_grad_enabled,
)
from fpsim.autograd import functional as F
from fpsim.autograd.special import erf, erfc

FP64 = fpsim.FP64


def t64(a, requires_grad=True) -> Tensor:
    return Tensor(np.asarray(a, dtype=np.float64), FP64, requires_grad=requires_grad)


def check_grads(fn, *arrays, h=1e-6, rtol=1e-6, atol=1e-8, seed=0):
    """Compare the analytic gradients of sum(fn(*tensors) * R) (R a fixed random projection,
    so the whole vector-Jacobian product is tested) with central differences."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    ts = [t64(a) for a in arrays]
    out = fn(*ts)
    rng = np.random.default_rng(seed)
    proj = rng.standard_normal(out.shape)
    loss = (out * Tensor(proj, FP64)).sum()
    loss.backward()

    def value(*arrs):
        with no_grad():
            o = fn(*[t64(a, False) for a in arrs])
        return float(np.sum(o.numpy(np.float64) * proj))

    for i, a in enumerate(arrays):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i][idx] += h
            minus[i][idx] -= h
            num[idx] = (value(*plus) - value(*minus)) / (2 * h)
        got = ts[i].grad
        assert got is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(got, num, rtol=rtol, atol=atol, err_msg=f"input {i}")


RNG = np.random.default_rng(1234)


def rnd(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape)


def pos(*shape):
    return RNG.uniform(0.5, 2.0, size=shape)


# ------------------------------------------------------------------------ arithmetic
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)),
                                    ((2, 3, 4), (3, 1)), ((), (3,))])
def test_binary_broadcasting(op, shapes):
    a, b = rnd(*shapes[0]), pos(*shapes[1])
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
          "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
    check_grads(fn, a, b)


def test_scalars_and_reverse_operators():
    a = pos(3)
    check_grads(lambda x: 2.5 + x, a)
    check_grads(lambda x: 2.5 - x, a)
    check_grads(lambda x: x - 2.5, a)
    check_grads(lambda x: 3.0 * x, a)
    check_grads(lambda x: 3.0 / x, a)
    check_grads(lambda x: x / 4.0, a)
    check_grads(lambda x: -x, a)
    check_grads(lambda x: F.add(x, 1), a)


def test_pow_and_abs():
    check_grads(lambda x: x ** 3, rnd(4))
    check_grads(lambda x: x ** 0.5, pos(4))
    check_grads(lambda x: x ** -2, pos(4))
    check_grads(lambda x, y: x ** y, pos(3), rnd(3))
    check_grads(lambda y: 2.0 ** y, rnd(3))
    check_grads(lambda x: F.abs(x), np.array([-1.5, 0.7, 2.0]))


def test_same_tensor_twice_accumulates():
    check_grads(lambda x: x * x + x, rnd(3, 2))
    check_grads(lambda x: x @ x, rnd(3, 3))


# ---------------------------------------------------------------------------- matmul
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
                                   ((4,), (4,)), ((2, 3, 4), (4, 5)),
                                   ((2, 3, 4), (1, 4, 2)), ((3, 4), (2, 4, 5))])
def test_matmul(sa, sb):
    check_grads(lambda a, b: a @ b, rnd(*sa), rnd(*sb))


@pytest.mark.parametrize("model", ["exact", "fp32"])
def test_matmul_fp64_models_are_exact_in_fp64(model):
    with matmul_accumulation(model):
        check_grads(lambda a, b: F.matmul(a, b), rnd(3, 4), rnd(4, 2))


def test_linear():
    check_grads(lambda x, w, b: F.linear(x, w, b), rnd(5, 3), rnd(4, 3), rnd(4))
    check_grads(lambda x, w: F.linear(x, w), rnd(2, 5, 3), rnd(4, 3))


# ------------------------------------------------------------------------ reductions
@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), (-1, False),
                                         ((0, 2), False), ((0, 2), True)])
def test_sum_mean(dim, keepdim):
    x = rnd(2, 3, 4)
    check_grads(lambda t: F.sum(t, dim, keepdim), x)
    check_grads(lambda t: t.mean(dim, keepdim), x)


def test_max():
    x = rnd(3, 4)
    check_grads(lambda t: t.max(), x)
    check_grads(lambda t: t.max(dim=1).values, x)
    check_grads(lambda t: t.max(0, keepdim=True).values, x)
    r = Tensor([[1.0, 3.0, 3.0]], FP64, requires_grad=True)
    r.max().backward()
    assert r.grad.tolist() == [[0.0, 0.5, 0.5]]  # ties share, as PyTorch's max()
    vi = Tensor([[1.0, 3.0], [4.0, 2.0]]).max(dim=1)
    assert vi.indices.tolist() == [1, 0] and vi.values.tolist() == [3.0, 4.0]


# --------------------------------------------------------------------------- shapes
def test_shape_ops():
    x = rnd(2, 3, 4)
    check_grads(lambda t: t.reshape(4, 6), x)
    check_grads(lambda t: t.view(-1), x)
    check_grads(lambda t: t.transpose(0, 2), x)
    check_grads(lambda t: t.permute(1, 2, 0), x)
    check_grads(lambda t: t.flatten(1), x)
    check_grads(lambda t: t.unsqueeze(1).squeeze(), x)
    check_grads(lambda t: t.reshape(6, 4).T, x)


def test_indexing():
    x = rnd(4, 5)
    check_grads(lambda t: t[1:3, ::2], x)
    check_grads(lambda t: t[2], x)
    check_grads(lambda t: t[..., None, 1], x)
    check_grads(lambda t: t[np.array([0, 2, 2, 3])], x)  # repeated rows add up
    check_grads(lambda t: t[x > 0], x)
    check_grads(lambda t: t[[0, 1], [1, 1]], x)


def test_cat_stack():
    check_grads(lambda a, b: F.cat([a, b], dim=1), rnd(2, 3), rnd(2, 2))
    check_grads(lambda a, b: F.cat([a, b]), rnd(1, 3), rnd(2, 3))
    check_grads(lambda a, b: F.stack([a, b], dim=1), rnd(2, 3), rnd(2, 3))


# ----------------------------------------------------------------------- elementwise
@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh"])
def test_unary(name):
    x = np.array([-3.1, -1.2, -0.3, 0.4, 1.1, 2.7])
    special = {"gelu": lambda t: F.gelu(t), "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}
    fn = special[name] if name in special else getattr(F, name)
    check_grads(fn, x)


def test_log_sqrt():
    check_grads(F.log, pos(5))
    check_grads(F.sqrt, pos(5))
    check_grads(lambda t: t.exp().log(), rnd(5))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dim):
    x = rnd(3, 4)
    check_grads(lambda t: F.softmax(t, dim), x)
    check_grads(lambda t: F.log_softmax(t, dim=dim), x)


def test_gelu_values_against_math_erf():
    x = np.linspace(-8, 8, 101)
    ref = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x])  # no cancellation
    got = F.gelu(t64(x, False)).numpy(np.float64)
    np.testing.assert_allclose(got, ref, rtol=2e-14, atol=1e-300)
    ref_tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(F.gelu(t64(x, False), "tanh").numpy(), ref_tanh, rtol=1e-14)


def test_erf_erfc_against_math():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000) * 3, rng.uniform(-27, 27, 5000),
                        rng.standard_normal(200) * 1e-12, [0.46875, -0.46875, 4.0, -4.0]])
    ref = np.array([math.erf(v) for v in x])
    refc = np.array([math.erfc(v) for v in x])
    ok = np.abs(refc) > 1e-300  # compare normal results in ulps

    def ulps(a, b):
        return np.max(np.abs(a - b) / np.spacing(np.abs(b)))

    assert ulps(erf(x), ref) <= 4
    assert ulps(erfc(x)[ok], refc[ok]) <= 8
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    assert erf(specials)[:4].tolist() == [0.0, -0.0, 1.0, -1.0] and np.isnan(erf(specials)[4])
    assert erfc(specials)[:4].tolist() == [1.0, 1.0, 0.0, 2.0]


# -------------------------------------------------------------------------- losses
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_nll(reduction):
    x = rnd(5, 4)
    target = np.array([0, 3, 1, 1, 2])
    check_grads(lambda t: F.cross_entropy(t, target, reduction=reduction), x)
    w = np.array([0.5, 1.0, 2.0, 1.5])
    check_grads(lambda t: F.cross_entropy(t, target, weight=w, reduction=reduction), x)
    tgt_ignore = np.array([0, -100, 1, 1, 2])
    check_grads(lambda t: F.nll_loss(F.log_softmax(t, 1), tgt_ignore, reduction=reduction), x)


def test_cross_entropy_values():
    x = np.array([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0]])
    t = np.array([1, 0])
    lse = np.log(np.exp(x).sum(1))
    per = lse - x[[0, 1], t]
    assert F.cross_entropy(t64(x, False), t).item() == pytest.approx(per.mean(), rel=1e-15)
    assert F.cross_entropy(t64(x, False), t, reduction="sum").item() == pytest.approx(per.sum())
    w = np.array([2.0, 3.0, 1.0])
    ref = (w[t] * per).sum() / w[t].sum()
    assert F.cross_entropy(t64(x, False), t, weight=w).item() == pytest.approx(ref, rel=1e-15)
    assert F.cross_entropy(t64(x[0], False), 1).item() == pytest.approx(per[0], rel=1e-15)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    check_grads(lambda a, b: F.mse_loss(a, b, reduction=reduction), rnd(3, 2), rnd(3, 2))


def test_dropout():
    x = rnd(4, 5)
    check_grads(lambda t: F.dropout(t, 0.3, rng=7), x)
    out = F.dropout(t64(np.ones((200, 200)), False), 0.25, rng=1).numpy()
    kept = out != 0
    assert abs(kept.mean() - 0.75) < 0.01
    assert np.all(out[kept] == 1 / 0.75)
    assert F.dropout(t64(x, False), 0.5, training=False).numpy() is not None


# --------------------------------------------------------------------- normalisation
def test_layer_norm():
    check_grads(lambda x, w, b: F.layer_norm(x, 4, w, b), rnd(3, 4), rnd(4), rnd(4))
    check_grads(lambda x: F.layer_norm(x, (3, 4)), rnd(2, 3, 4))
    x = rnd(2, 5)
    y = F.layer_norm(t64(x, False), 5, eps=0.0).numpy()
    ref = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-12)


def test_batch_norm_training_and_eval():
    check_grads(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                rnd(5, 3), rnd(3), rnd(3))
    check_grads(lambda x: F.batch_norm(x, None, None, training=True), rnd(4, 2, 3, 3))
    rm, rv = t64(rnd(3), False), t64(pos(3), False)
    check_grads(lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=False),
                rnd(5, 3), rnd(3), rnd(3))


def test_batch_norm_running_statistics():
    x = rnd(6, 3, 2, 2)
    rm = Tensor(np.zeros(3), FP64)
    rv = Tensor(np.ones(3), FP64)
    F.batch_norm(t64(x, False), rm, rv, training=True, momentum=0.2)
    mean = x.mean(axis=(0, 2, 3))
    var_unbiased = x.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(rm.numpy(), 0.2 * mean, rtol=1e-14)
    np.testing.assert_allclose(rv.numpy(), 0.8 + 0.2 * var_unbiased, rtol=1e-14)
    y = F.batch_norm(t64(x, False), rm, rv, training=False, eps=0.0).numpy()
    ref = (x - rm.numpy()[None, :, None, None]) / np.sqrt(rv.numpy())[None, :, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-13)


# ----------------------------------------------------------------------- convolution
def conv_reference(x, w, b, stride, pad):
    """Direct loops over output positions (no im2col)."""
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w) + b
    return out


@pytest.mark.parametrize("stride,pad", [(1, 0), (1, 1), (2, 1), (2, 0)])
def test_conv2d(stride, pad):
    x, w, b = rnd(2, 2, 5, 5), rnd(3, 2, 3, 3), rnd(3)
    got = F.conv2d(t64(x, False), t64(w, False), t64(b, False), stride, pad).numpy()
    # a float64 sum of 19 terms in another order: off by at most ~19 u of the sum of |terms|
    # (a relative bound fails on outputs near cancellation, which some test orders draw)
    bound = 1e-14 * conv_reference(np.abs(x), np.abs(w), np.abs(b), stride, pad)
    assert np.all(np.abs(got - conv_reference(x, w, b, stride, pad)) <= bound)
    check_grads(lambda a, k, c: F.conv2d(a, k, c, stride=stride, padding=pad), x, w, b)


def test_conv2d_unbatched_and_no_bias():
    check_grads(lambda a, k: F.conv2d(a, k, padding=1), rnd(1, 4, 4), rnd(2, 1, 2, 2))


@pytest.mark.parametrize("k,stride,pad", [(2, None, 0), (3, 1, 1), (3, 2, 1), (2, 1, 0)])
def test_max_pool2d(k, stride, pad):
    x = RNG.permutation(2 * 2 * 5 * 5).reshape(2, 2, 5, 5) / 7.0  # distinct: no ties
    check_grads(lambda t: F.max_pool2d(t, k, stride, pad), x)
    s = k if stride is None else stride
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    oh = (5 + 2 * pad - k) // s + 1
    ref = np.array([[[[xp[n, c, i * s:i * s + k, j * s:j * s + k].max() for j in range(oh)]
                      for i in range(oh)] for c in range(2)] for n in range(2)])
    np.testing.assert_array_equal(F.max_pool2d(t64(x, False), k, stride, pad).numpy(), ref)


# ---------------------------------------------------------------------------- engine
def test_backward_accumulates_into_leaves_and_retain_graph():
    x = t64([1.0, 2.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_non_scalar_backward_needs_gradient():
    x = t64([1.0, 2.0])
    y = x * 3
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        y.backward()
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        y.backward(np.ones(3))
    y.backward(np.array([1.0, -1.0]))
    assert x.grad.tolist() == [3.0, -3.0]


def test_requires_grad_rules():
    with pytest.raises(RuntimeError, match="does not require grad"):
        t64([1.0], requires_grad=False).sum().backward()
    x = t64([1.0, 2.0])
    c = Tensor([3.0, 4.0], FP64)
    y = x * c
    assert y.requires_grad and not (c * 2).requires_grad and not y.is_leaf
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad = False
    d = y.detach()
    assert not d.requires_grad and d.is_leaf
    z = y * 1.0
    y.retain_grad()
    z.sum().backward()
    assert y.grad.tolist() == [1.0, 1.0] and c.grad is None


def test_grad_modes():
    x = t64([1.0])
    with no_grad():
        assert not is_grad_enabled()
        assert not (x * 2).requires_grad
        with enable_grad():
            assert (x * 2).requires_grad
    assert is_grad_enabled()

    @no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    with set_grad_enabled(False):
        assert not (x + 1).requires_grad
    assert (x + 1).requires_grad


def test_grad_assignment_and_numpy():
    x = Tensor([1.0, 2.0], fpsim.FP16, requires_grad=True)
    x.grad = [0.1, 0.2]
    assert x.grad.dtype == np.float16 and x.grad.tolist() == [
        float(fpsim.round(0.1, "fp16")), float(fpsim.round(0.2, "fp16"))]
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        x.grad = np.zeros(3)
    x.grad = None
    assert x.grad is None
    assert x.numpy() is x.data and x.numpy(np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="one element"):
        x.item()


def test_deep_graph_no_recursion_limit():
    x = t64([1.0])
    y = x
    for _ in range(3000):
        y = y * 1.0
    y.sum().backward()
    assert x.grad.tolist() == [1.0]


# ----------------------------------------------------------------------- bad input
def test_shape_errors_name_both_shapes():
    a, b = t64(np.zeros((2, 3))), t64(np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        a + b
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        a @ b
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        F.linear(a, b)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        F.mse_loss(a, b)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        F.cat([a, b])
    with pytest.raises(ValueError, match=r"\(5,\).*\(2, 3\)"):
        F.layer_norm(a, 5)
    with pytest.raises(ValueError, match=r"invalid for input of shape \(2, 3\)"):
        a.reshape(4, 2)
    with pytest.raises(ValueError, match="target shape"):
        F.cross_entropy(a, [0, 1, 2])


def test_bad_names_and_values():
    with pytest.raises(ValueError, match="unknown format"):
        Tensor([1.0], "fp17")
    with pytest.raises(TypeError, match="integer format"):
        Tensor([1.0], "int8")
    with pytest.raises(ValueError, match="unknown rounding mode"):
        with rounding_context("bogus"):
            pass
    with pytest.raises(ValueError, match="unknown rounding mode"):
        Tensor([1.0]).to("fp16", "bogus")
    with pytest.raises(ValueError, match="unknown accumulation"):
        with matmul_accumulation("fp31"):
            pass
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(t64(np.zeros((2, 3))), [0, 1], reduction="avg")
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(t64(np.zeros((2, 3))), [0, 3])
    with pytest.raises(TypeError, match="integer class targets"):
        F.cross_entropy(t64(np.zeros((2, 3))), [0.5, 1.0])
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(t64([1.0]), approximate="fast")
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(t64([1.0]), 1.5)
    with pytest.raises(TypeError, match="dim"):
        F.softmax(t64([1.0]))
    with pytest.raises(IndexError, match="Dimension out of range"):
        t64(np.zeros((2, 3))).sum(2)
    with pytest.raises(ValueError, match="dilation must be positive"):
        F.conv2d(t64(np.zeros((1, 1, 4, 4))), t64(np.zeros((1, 1, 2, 2))), dilation=0)
