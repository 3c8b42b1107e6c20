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
