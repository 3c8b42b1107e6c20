"""conv2d, max_pool2d, avg_pool2d and cross_entropy against PyTorch's own results (float64,
CPU; recorded by tools/record_torch_reference.py into tests/data/torch): values, gradients
and pooling indices, with fpsim in exact fp64 mode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fpsim import functional as F
from fpsim.autograd import Tensor, matmul_accumulation

DATA = np.load(Path(__file__).resolve().parent / "data" / "torch" / "reference.npz")
CASES = json.loads(str(DATA["cases"]))


def arr(i: int, name: str) -> np.ndarray:
    return DATA[f"{i}/{name}"]


def t64(a) -> Tensor:
    return Tensor(a, "fp64", requires_grad=True)


def close(got, ref) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), ref, rtol=1e-12, atol=1e-12)


def test_the_data_cover_every_op():
    kinds = {c["kind"] for c in CASES}
    assert kinds == {"conv2d", "max_pool2d", "avg_pool2d", "cross_entropy"}
    assert len(CASES) > 150


@pytest.mark.parametrize("i", range(len(CASES)),
                         ids=[f"{c['kind']}-{i}" for i, c in enumerate(CASES)])
def test_against_pytorch(i):
    c = CASES[i]
    kind = c["kind"]
    x = t64(arr(i, "x"))
    g = arr(i, "g")
    if kind == "conv2d":
        w, b = t64(arr(i, "w")), t64(arr(i, "b"))
        with matmul_accumulation("exact"):
            out = F.conv2d(x, w, b, c["stride"], c["padding"], c["dilation"], c["groups"])
            out.backward(g)
        close(w.grad, arr(i, "dw"))
        close(b.grad, arr(i, "db"))
    elif kind == "max_pool2d":
        out, idx = F.max_pool2d(x, c["kernel"], c["stride"], c["padding"], c["dilation"],
                                c["ceil_mode"], return_indices=True)
        out.backward(g)
        assert np.array_equal(idx, arr(i, "indices"))
    elif kind == "avg_pool2d":
        out = F.avg_pool2d(x, c["kernel"], c["stride"], c["padding"], c["ceil_mode"],
                           c["count_include_pad"], c["divisor_override"])
        out.backward(g)
    else:
        target = arr(i, "target")
        if not c["probs"]:
            target = target.astype(np.int64)
            target = int(target) if target.ndim == 0 else target
        weight = arr(i, "weight") if f"{i}/weight" in DATA.files else None
        out = F.cross_entropy(x, target, weight, reduction=c["reduction"],
                              label_smoothing=c["label_smoothing"])
        out.backward(g)
    ref = arr(i, "out")
    got = out.numpy(np.float64)
    assert got.shape == ref.shape
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    close(np.nan_to_num(got, nan=0.0), np.nan_to_num(ref, nan=0.0))
    close(x.grad, arr(i, "dx"))
