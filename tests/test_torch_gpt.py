"""fpsim.models.GPT, embedding, GELU (tanh) and causal attention against PyTorch, from
tests/data/torch/gpt.npz (tools/record_torch_gpt.py, PyTorch 2.13.0 CPU; see the README there).

- GPT in fp64: logits within a relative error of 1e-12 and every parameter's gradient within
  1e-10 (normwise: max |fpsim - torch| / max |torch| per tensor) of a float64 nanoGPT with the
  same weights, for 4 shapes (1 to 3 layers, 1 to 4 heads, T = context and T < context).
- embedding in fp32 / fp16 / bf16 with repeated indices (up to 1,040 of them): outputs and
  weight gradients bit for bit (PyTorch's CPU kernel adds in index order, rounding each add).
- causal attention (q k^T / sqrt(hs), masked_fill -inf, softmax, @ v) in fp16 / bf16: values
  and gradients bit for bit; in fp32 within one ulp (PyTorch's float32 GEMMs round each add;
  fpsim's "fp32" accumulation model sums in float64 and rounds once).
- GELU (tanh) in fp16 / bf16: PyTorch's CPU kernels evaluate the formula in float32 and round
  it; most values agree, and wherever they differ, fpsim's value (float64 formula, one
  rounding) is at least as near the exact one (MPFR) as PyTorch's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import gmpy2
import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import functional as F
from fpsim.autograd import Tensor
from fpsim.models import GPT

DATA = np.load(Path(__file__).parent / "data" / "torch" / "gpt.npz")
CASES = json.loads(str(DATA["cases"]))
NP = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32}


def arr(i: int, key: str) -> np.ndarray:
    return DATA[f"{i}/{key}"]


def _ids(kind: str) -> list[int]:
    return [i for i, c in enumerate(CASES) if c["kind"] == kind]


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - ref).max() / np.abs(ref).max())


def test_recorded_with_the_pinned_torch_and_every_kind():
    assert str(DATA["torch_version"]).startswith("2.13.0")
    assert {c["kind"] for c in CASES} == {"gpt", "embedding", "gelu_tanh", "attention"}


@pytest.mark.parametrize("i", _ids("gpt"))
def test_gpt_fp64_equals_pytorch(i):
    c = CASES[i]
    model = GPT(c["vocab"], c["context"], c["d_model"], c["n_layers"], c["n_heads"],
                rng=0).to("fp64")
    assert [n for n, _ in model.named_parameters()] == c["names"]
    for name, p in model.named_parameters():
        p.data = arr(i, f"param/{name}")
    logits = model(arr(i, "idx"))
    assert logits.fmt.name == "fp64"
    assert _rel(logits.numpy(), arr(i, "logits")) <= 1e-12
    logits.backward(arr(i, "g"))
    for name, p in model.named_parameters():
        assert _rel(p.grad, arr(i, f"grad/{name}")) <= 1e-10, name


@pytest.mark.parametrize("i", _ids("embedding"))
def test_embedding_bit_for_bit(i):
    c = CASES[i]
    fmt = c["fmt"]
    w = Tensor(arr(i, "w").astype(NP[fmt]), fmt, requires_grad=True)
    out = F.embedding(arr(i, "idx"), w)
    np.testing.assert_array_equal(out.numpy(np.float32), arr(i, "out"))
    g = arr(i, "g").astype(NP[fmt])
    out.backward(g)
    np.testing.assert_array_equal(w.grad.astype(np.float32), arr(i, "grad"))


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_embedding_data_decide_the_order(fmt):
    """The recorded gradients tell orders apart: summing each row's gradients exactly and
    rounding once gives other bits in at least one case of each format."""
    differs = False
    for i in _ids("embedding"):
        if CASES[i]["fmt"] != fmt:
            continue
        flat = arr(i, "idx").reshape(-1)
        g = arr(i, "g").astype(np.float64).reshape(flat.size, -1)
        once = np.zeros((CASES[i]["num"], g.shape[1]))
        np.add.at(once, flat, g)  # float64 adds: errors far below the formats' ulps
        once = np.asarray(fpsim.round(once, fmt), dtype=np.float32)
        differs |= not np.array_equal(once, arr(i, "grad"))
    assert differs


def _attention(i: int):
    fmt = CASES[i]["fmt"]
    q, k, v = (Tensor(arr(i, n).astype(NP[fmt]), fmt, requires_grad=True) for n in "qkv")
    t, hs = q.shape[-2], q.shape[-1]
    att = F.mul(F.matmul(q, F.transpose(k, -2, -1)), 1.0 / math.sqrt(hs))
    future = np.triu(np.ones((t, t), dtype=bool), k=1)
    y = F.matmul(F.softmax(F.masked_fill(att, future, -math.inf), dim=-1), v)
    y.backward(arr(i, "g").astype(NP[fmt]))
    return y, {"q": q.grad, "k": k.grad, "v": v.grad}


@pytest.mark.parametrize("i", _ids("attention"))
def test_causal_attention(i):
    fmt = CASES[i]["fmt"]
    y, grads = _attention(i)
    pairs = [(y.numpy(), arr(i, "y"))] + [(grads[n], arr(i, "d" + n)) for n in "qkv"]
    for mine, ref in pairs:
        if fmt == "fp32":  # within one ulp of the largest value (normwise)
            assert _rel(mine, ref.astype(np.float64)) <= 2.0 ** -23
        else:
            np.testing.assert_array_equal(mine.astype(np.float32), ref)


def _exact_gelu_tanh(x: float) -> tuple:
    """MPFR value and derivative of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    xm = gmpy2.mpfr(x)
    c = gmpy2.sqrt(2 / gmpy2.const_pi())
    kappa = gmpy2.mpfr("0.044715")
    t = gmpy2.tanh(c * (xm + kappa * xm ** 3))
    dt = (1 - t * t) * c * (1 + 3 * kappa * xm * xm)
    return xm * (1 + t) / 2, (1 + t) / 2 + xm * dt / 2


@pytest.mark.parametrize("i", _ids("gelu_tanh"))
def test_gelu_tanh_low_precision(i):
    fmt = CASES[i]["fmt"]
    x = Tensor(arr(i, "x").astype(NP[fmt]), fmt, requires_grad=True)
    y = F.gelu(x, approximate="tanh")
    g = arr(i, "g").astype(np.float64)
    y.backward(arr(i, "g").astype(NP[fmt]))
    mine_y, mine_dx = y.numpy(np.float64), x.grad.astype(np.float64)
    ref_y, ref_dx = arr(i, "y").astype(np.float64), arr(i, "dx").astype(np.float64)
    assert (mine_y != ref_y).mean() < 0.05 and (mine_dx != ref_dx).mean() < 0.05
    with gmpy2.context(precision=200):
        for j in np.flatnonzero((mine_y != ref_y) | (mine_dx != ref_dx)):
            ey, ed = _exact_gelu_tanh(float(arr(i, "x")[j]))
            ed = ed * g[j]
            assert abs(ey - mine_y[j]) <= abs(ey - ref_y[j]), (j, "value")
            assert abs(ed - mine_dx[j]) <= abs(ed - ref_dx[j]), (j, "gradient")
