"""fpsim.models.GPT: the contract of issue 31 (parameter names, shapes and order, the tied
head, initialisation, the input checks, formats) and that it learns. Its values and gradients
against PyTorch are tests/test_torch_gpt.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fpsim
from fpsim import functional as F
from fpsim.models import GPT
from fpsim.optim import AdamW


def _names(v, c, d, n_layers):
    names = [("wte.weight", (v, d)), ("wpe.weight", (c, d))]
    for i in range(n_layers):
        p = f"h.{i}."
        names += [(p + "ln_1.weight", (d,)), (p + "ln_1.bias", (d,)),
                  (p + "attn.c_attn.weight", (3 * d, d)), (p + "attn.c_attn.bias", (3 * d,)),
                  (p + "attn.c_proj.weight", (d, d)), (p + "attn.c_proj.bias", (d,)),
                  (p + "ln_2.weight", (d,)), (p + "ln_2.bias", (d,)),
                  (p + "mlp.c_fc.weight", (4 * d, d)), (p + "mlp.c_fc.bias", (4 * d,)),
                  (p + "mlp.c_proj.weight", (d, 4 * d)), (p + "mlp.c_proj.bias", (d,))]
    return names + [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


@pytest.mark.parametrize("v, c, d, n_layers, n_heads", [(11, 8, 16, 2, 4), (65, 32, 24, 3, 3)])
def test_named_parameters_are_the_contract(v, c, d, n_layers, n_heads):
    model = GPT(v, c, d, n_layers, n_heads, rng=0)
    got = [(n, p.shape) for n, p in model.named_parameters()]
    assert got == _names(v, c, d, n_layers)
    assert all(p.fmt.name == "fp32" for p in model.parameters())
    assert set(model.state_dict()) == {n for n, _ in got}  # no buffers, no head weight


def test_initialisation_is_nanogpts():
    n_layers = 4
    model = GPT(50, 64, 128, n_layers, 4, rng=1)
    params = dict(model.named_parameters())
    proj = 0.02 / math.sqrt(2 * n_layers)
    for name, p in params.items():
        a = p.numpy().astype(np.float64)
        if name.endswith("bias"):
            assert not a.any(), name
        elif "ln_" in name:
            assert (a == 1).all(), name
        else:
            want = proj if name.endswith("c_proj.weight") else 0.02
            assert abs(a.std() / want - 1) < 0.1 and abs(a.mean()) < want / 10, name
    same = GPT(50, 64, 128, n_layers, 4, rng=1)
    for (n, p), (_, q) in zip(model.named_parameters(), same.named_parameters(), strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=n)
    other = GPT(50, 64, 128, n_layers, 4, rng=2)
    assert not np.array_equal(other.wte.weight.numpy(), model.wte.weight.numpy())
    fpsim.manual_seed(3)
    a = GPT(5, 4, 8, 1, 2).wte.weight.numpy()
    fpsim.manual_seed(3)
    np.testing.assert_array_equal(a, GPT(5, 4, 8, 1, 2).wte.weight.numpy())


def test_head_is_tied_and_gets_both_gradients():
    model = GPT(11, 8, 16, 1, 2, rng=0).to("fp64")
    idx = np.array([[1, 2, 3, 3]])
    logits = model(idx)
    assert logits.shape == (1, 4, 11) and logits.fmt.name == "fp64"
    logits.sum().backward()
    # the head's gradient alone would be the same for every row of wte: sum over positions of
    # ln_f(x); the embedding's adds to rows 1, 2, 3 only
    g = model.wte.weight.grad
    head_only = g[[0, 4, 5]]
    np.testing.assert_allclose(head_only, np.broadcast_to(head_only[0], head_only.shape))
    assert not np.allclose(g[3], g[0])


def test_shorter_sequences_and_causality():
    model = GPT(11, 8, 16, 2, 4, rng=0).to("fp64")
    idx = np.array([[1, 2, 3, 4, 5, 6, 7, 8]]) % 11
    full = model(idx).numpy()
    # a prefix sees only itself: the same logits as in the full sequence (to float64's
    # rounding: the BLAS may block other shapes differently)
    for t in (1, 3, 8):
        np.testing.assert_allclose(model(idx[:, :t]).numpy(), full[:, :t], rtol=1e-13,
                                   atol=1e-15)
    changed = idx.copy()
    changed[0, 5] = 0
    np.testing.assert_allclose(model(changed).numpy()[:, :5], full[:, :5], rtol=1e-13,
                               atol=1e-15)
    assert not np.allclose(model(changed).numpy()[:, 5:], full[:, 5:])


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp64"])
def test_to_format(fmt):
    model = GPT(11, 8, 16, 1, 2, rng=0).to(fmt)
    logits = model(np.array([[0, 1, 2]]))
    assert logits.fmt.name == fmt
    F.cross_entropy(F.reshape(logits, (-1, 11)), np.array([1, 2, 3])).backward()
    for n, p in model.named_parameters():
        assert p.fmt.name == fmt and p.grad is not None and p.grad.shape == p.shape, n


@pytest.mark.parametrize("idx, err, match", [
    (np.zeros((2, 9), np.int64), ValueError, r"1 <= T <= context \(8\)"),
    (np.zeros((2, 0), np.int64), ValueError, "shape"),
    (np.zeros(5, np.int64), ValueError, r"shape \(B, T\)"),
    (np.zeros((2, 3)), TypeError, "integer"),
    (np.array([[0, 11]]), IndexError, "token id 11 is out of range for vocab_size 11"),
    (np.array([[-1, 0]]), IndexError, "token id -1"),
    (fpsim.Tensor([[1.0]]), TypeError, "not an fpsim Tensor"),
])
def test_bad_input(idx, err, match):
    with pytest.raises(err, match=match):
        GPT(11, 8, 16, 1, 2, rng=0)(idx)


@pytest.mark.parametrize("args, err, match", [
    ((11, 8, 16, 1, 3), ValueError, r"d_model \(16\) must be divisible by n_heads \(3\)"),
    ((0, 8, 16, 1, 2), ValueError, "vocab_size must be a positive integer"),
    ((11, 8.5, 16, 1, 2), TypeError, "context must be a positive integer"),
    ((11, 8, 16, True, 2), TypeError, "n_layers"),
    ((11, 8, 16, 10**30, 2), ValueError, "too large"),  # refused, not built for ever
])
def test_bad_construction(args, err, match):
    with pytest.raises(err, match=match):
        GPT(*args)
    with pytest.raises(TypeError, match="rng"):
        GPT(11, 8, 16, 1, 2, rng="x")


def test_it_learns_a_repeating_text():
    """AdamW fits a periodic sequence in a few steps (the Shakespeare run is in the report)."""
    text = np.tile(np.array([0, 1, 2, 3, 4, 5, 1, 3]), 40)
    model = GPT(6, 16, 16, 1, 2, rng=0)
    opt = AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(60):
        ix = rng.integers(0, text.size - 17, 8)
        x = np.stack([text[i:i + 16] for i in ix])
        y = np.stack([text[i + 1:i + 17] for i in ix])
        loss = F.cross_entropy(F.reshape(model(x), (-1, 6)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 1.5 and losses[-1] < 0.3, (losses[0], losses[-1])


def test_formats_without_infinity_give_nan_not_a_silent_number():
    """The documented edge: -inf in e4m3 is NaN, so a pure-e4m3 model's logits are NaN at
    every position that masks a later one (all but the last), and so is its loss."""
    model = GPT(11, 8, 16, 1, 2, rng=0).to("e4m3")
    logits = model(np.array([[1, 2, 3]]))
    assert np.isnan(logits.numpy(np.float64)[:, :2]).all()
    assert math.isnan(F.cross_entropy(F.reshape(logits, (-1, 11)), np.array([2, 3, 4])).item())
