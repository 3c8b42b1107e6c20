"""cross_entropy's PyTorch options in exact fp64 mode: label smoothing, class-probability
targets and K-dimensional inputs against the loss formulas of PyTorch's documentation written
out in NumPy (an independent reference), gradients against central finite differences, and
bad input."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F
from tests.test_autograd import check_grads, t64


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def doc_loss(x, target, weight=None, eps=0.0, ignore_index=-100, reduction="mean"):
    """torch.nn.CrossEntropyLoss's documented formula for class-index targets with label
    smoothing: l_n = -sum_c w_c q_nc log p_nc with q = (1 - eps) onehot + eps / C; the mean
    divides by sum_n w_{y_n} over the non-ignored targets."""
    n, c = x.shape
    w = np.ones(c) if weight is None else np.asarray(weight, dtype=np.float64)
    logp = log_softmax(x, 1)
    keep = target != ignore_index
    tc = np.where(keep, target, 0)
    q = np.full((n, c), eps / c)
    q[np.arange(n), tc] += 1 - eps
    per = -(w * q * logp).sum(1) * keep
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    return per.sum() / (w[tc] * keep).sum()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [False, True])
def test_label_smoothing_values(reduction, weighted, ignore):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5)) * 2
    target = np.array([0, 4, 2, 2, 1, 3])
    if ignore:
        target[1] = -100
    w = rng.uniform(0.5, 2.0, 5) if weighted else None
    for eps in (0.0, 0.1, 0.35, 1.0):
        got = F.cross_entropy(t64(x, False), target, weight=w, label_smoothing=eps,
                              reduction=reduction).numpy(np.float64)
        ref = doc_loss(x, target, w, eps, reduction=reduction)
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_label_smoothing_gradients(reduction):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3))
    target = np.array([2, -100, 0, 1])
    w = np.array([0.5, 2.0, 1.25])
    check_grads(lambda t: F.cross_entropy(t, target, weight=w, label_smoothing=0.2,
                                          reduction=reduction), x)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_probability_targets(reduction):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4))
    p = rng.dirichlet(np.ones(4), 5)
    w = np.array([1.0, 0.5, 2.0, 1.5])
    for eps, weight in ((0.0, None), (0.25, w)):
        q = p * (1 - eps) + eps / 4
        per = -((np.ones(4) if weight is None else weight) * q * log_softmax(x, 1)).sum(1)
        ref = {"none": per, "sum": per.sum(), "mean": per.sum() / 5}[reduction]
        got = F.cross_entropy(t64(x, False), p, weight=weight, label_smoothing=eps,
                              reduction=reduction).numpy(np.float64)
        np.testing.assert_allclose(got, ref, rtol=1e-13)
    # gradients reach both the logits and the (soft) targets, as in PyTorch
    check_grads(lambda a, b: F.cross_entropy(a, b, weight=w, label_smoothing=0.1,
                                             reduction=reduction), x, p)


def test_k_dimensional_inputs():
    """(N, C, H, W) logits with (N, H, W) targets: every position a row of the 2-D loss."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 5))
    target = rng.integers(0, 3, (2, 4, 5))
    target[0, 1, 2] = -100
    rows = x.transpose(0, 2, 3, 1).reshape(-1, 3)
    for reduction in ("mean", "sum", "none"):
        for eps in (0.0, 0.3):
            got = F.cross_entropy(t64(x, False), target, label_smoothing=eps,
                                  reduction=reduction).numpy(np.float64)
            ref = doc_loss(rows, target.reshape(-1), eps=eps, reduction=reduction)
            np.testing.assert_allclose(got, ref.reshape(target.shape) if reduction == "none"
                                       else ref, rtol=1e-13, atol=1e-15)
    small = rng.standard_normal((2, 3, 2))
    check_grads(lambda t: F.cross_entropy(t, np.array([[0, 2], [1, -100]]),
                                          label_smoothing=0.1), small)
    soft = rng.dirichlet(np.ones(3), (2, 2)).transpose(0, 2, 1)  # (N, C, d1) probabilities
    per = -(soft * log_softmax(small, 1)).sum(1)
    assert F.cross_entropy(t64(small, False), soft).item() == pytest.approx(per.mean(),
                                                                         rel=1e-13)


def test_low_precision_and_autocast():
    """In fp16 the composed loss is within a few fp16 roundings of the exact one; under
    autocast cross_entropy runs in fp32 (PyTorch's policy)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 10))
    target = rng.integers(0, 10, 8)
    exact = doc_loss(x, target, eps=0.1)
    x16 = Tensor(x, fpsim.FP16)
    got = F.cross_entropy(x16, target, label_smoothing=0.1)
    assert got.fmt == fpsim.FP16
    assert abs(got.item() - exact) < 8 * 2.0 ** -11 * abs(exact) + 1e-3
    with fpsim.amp.autocast("fp16"):
        assert F.cross_entropy(x16, target, label_smoothing=0.1).fmt == fpsim.FP32


def test_masked_fill():
    x = t64([[1.0, -2.0], [3.0, 4.0]])
    out = F.masked_fill(x, np.array([True, False]), 7.0)
    assert out.tolist() == [[7.0, -2.0], [7.0, 4.0]]
    out.sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0], [0.0, 1.0]]
    h = F.masked_fill(Tensor([1.0, 2.0], fpsim.FP16), np.array([True, False]), 0.1)
    assert h.tolist()[0] == float(np.float16(0.1))  # the value rounded to the format
    with pytest.raises(TypeError, match="boolean"):
        F.masked_fill(x, np.array([1, 0]), 0.0)
    with pytest.raises(ValueError, match=r"mask shape \(3,\)"):
        F.masked_fill(x, np.array([True, False, True]), 0.0)


def test_bad_input():
    x = t64(np.zeros((2, 3)), False)
    with pytest.raises(ValueError, match="label_smoothing must be between 0.0 and 1.0"):
        F.cross_entropy(x, [0, 1], label_smoothing=1.5)
    with pytest.raises(ValueError, match="ignore_index is not supported"):
        F.cross_entropy(x, np.full((2, 3), 1 / 3), ignore_index=0)
    with pytest.raises(ValueError, match=r"weight shape \(2,\) does not match 3 classes"):
        F.cross_entropy(x, [0, 1], weight=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"expected target shape \(2, 4\)"):
        F.cross_entropy(t64(np.zeros((2, 3, 4)), False), [0, 1])
    with pytest.raises(ValueError, match="valid: mean, sum, none"):
        F.cross_entropy(x, [0, 1], reduction="avg")
