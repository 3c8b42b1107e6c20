"""fpsim's losses and softmaxes at their edges against PyTorch's own results (float64, CPU;
recorded by tools/record_torch_loss_edges.py into tests/data/torch/loss_edges.npz): empty
batches, ignored targets, classes of weight 0, all weights 0, label smoothing, the three
reductions, softmaxes over an empty dimension. Values and gradients must match PyTorch's with
the signs of zeros (an ignored target's loss and gradient are +0, a weight-0 class's are -0)
and the places of NaNs (a mean over no element or no weight is NaN)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fpsim import functional as F
from fpsim.autograd import Tensor

DATA = np.load(Path(__file__).resolve().parent / "data" / "torch" / "loss_edges.npz")
CASES = json.loads(str(DATA["cases"]))


def same(got, ref) -> None:
    """Equal shapes, NaNs in the same places, zeros of the same sign, the rest to 1e-12."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    zero = (ref == 0) & ~np.isnan(ref)
    assert np.array_equal(got[zero] == 0, np.ones(zero.sum(), bool))
    assert np.array_equal(np.signbit(got[zero]), np.signbit(ref[zero]))
    np.testing.assert_allclose(np.nan_to_num(got, nan=0.0), np.nan_to_num(ref, nan=0.0),
                               rtol=1e-12, atol=1e-12)


def test_the_data_cover_every_edge():
    ops = {c["op"] for c in CASES}
    assert ops == {"cross_entropy", "nll_loss", "mse_loss", "softmax", "log_softmax"}
    ce = [c for c in CASES if c["op"] == "cross_entropy"]
    assert {c["targets"] for c in ce} == {"empty", "all_ignored", "some_ignored", "valid"}
    assert {c["weights"] for c in ce} == {"none", "zero_class", "all_zero"}
    assert {c["reduction"] for c in ce} == {"mean", "sum", "none"}
    # the edges are there: PyTorch's NaN means and -0 losses of weight-0 classes
    nan_means = [i for i, c in enumerate(CASES) if c.get("reduction") == "mean"
                 and np.isnan(DATA[f"{i}/out"]).any()]
    neg_zero = [i for i, c in enumerate(CASES) if c.get("weights") == "zero_class"
                and c["reduction"] == "none" and np.signbit(DATA[f"{i}/out"]).any()]
    assert nan_means and neg_zero


@pytest.mark.parametrize("i", range(len(CASES)))
def test_against_pytorch(i):
    c = CASES[i]
    x = Tensor(DATA[f"{i}/x"], "fp64", requires_grad=True)
    op = c["op"]
    if op in ("cross_entropy", "nll_loss"):
        weight = DATA[f"{i}/weight"] if f"{i}/weight" in DATA.files else None
        target = DATA[f"{i}/target"].astype(np.int64)
        if op == "cross_entropy":
            out = F.cross_entropy(x, target, weight, ignore_index=-100,
                                  reduction=c["reduction"],
                                  label_smoothing=c["label_smoothing"])
        else:
            out = F.nll_loss(x, target, weight, ignore_index=-100, reduction=c["reduction"])
    elif op == "mse_loss":
        out = F.mse_loss(x, Tensor(DATA[f"{i}/target"], "fp64"), reduction=c["reduction"])
    else:
        out = getattr(F, op)(x, c["dim"])
    out.backward(DATA[f"{i}/g"])
    same(out.numpy(np.float64), DATA[f"{i}/out"])
    same(x.grad, DATA[f"{i}/dx"])


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32", "fp32"])
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 2)])
@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss"])
def test_ignored_targets_give_positive_zeros_in_every_format_and_shape(fmt, shape, op):
    """The recorded cases are float64 (N, C); the rule they pin, that an ignored target's loss
    and gradient are +0 and a mean over no element or no weight is NaN, holds in the narrow
    formats and for (N, C, d1, d2) inputs too (PyTorch skips ignored positions whatever the
    dtype or shape)."""
    rng = np.random.default_rng(7)
    tshape = (shape[0],) + shape[2:]
    target = rng.integers(0, shape[1], tshape)
    target.reshape(-1)[::2] = -100  # every other position ignored
    ignored = np.moveaxis(np.broadcast_to((target == -100)[:, None], shape), 1, -1)
    fn = getattr(F, op)
    for red in ("none", "sum", "mean"):
        x = Tensor(rng.standard_normal(shape), fmt, requires_grad=True)
        out = fn(x, target, ignore_index=-100, reduction=red)
        g = np.ones(out.shape) if red == "none" else None
        out.backward(g)
        gx = np.moveaxis(np.asarray(x.grad, np.float64), 1, -1)
        assert (gx[ignored] == 0).all() and not np.signbit(gx[ignored]).any()
        assert np.isfinite(gx).all()
        if red == "none":
            lo = out.numpy(np.float64)
            assert (lo[target == -100] == 0).all()
            assert not np.signbit(lo[target == -100]).any()
    everything = np.full(tshape, -100)
    x = Tensor(rng.standard_normal(shape), fmt, requires_grad=True)
    out = fn(x, everything, ignore_index=-100)
    out.backward()
    assert np.isnan(out.numpy(np.float64))
    gx = np.asarray(x.grad, np.float64)
    assert (gx == 0).all() and not np.signbit(gx).any()


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32", "fp32"])
def test_empty_inputs_in_every_format(fmt):
    for op in (F.softmax, F.log_softmax):
        for shape, dim in (((0,), 0), ((0, 3), 1), ((2, 0), 1)):
            x = Tensor(np.zeros(shape), fmt, requires_grad=True)
            y = op(x, dim)
            y.backward(np.ones(shape))
            assert y.shape == shape and x.grad.shape == shape
    x = Tensor(np.zeros((0, 3)), fmt, requires_grad=True)
    loss = F.mse_loss(x, Tensor(np.zeros((0, 3)), fmt))
    loss.backward()
    assert np.isnan(loss.numpy(np.float64)) and x.grad.shape == (0, 3)
    x = Tensor(np.zeros((0, 3)), fmt, requires_grad=True)
    assert np.isnan(F.cross_entropy(x, np.zeros(0, np.int64)).numpy(np.float64))
