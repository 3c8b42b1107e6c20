"""fpsim.memory.checkpoint_sweep: gradient checkpointing measured against Chen et al.'s
k + ceil(n/k) (the sweep examples/memory_checkpointing.py and notebook 05 each wrote).

References: the formula (``checkpoint_peak_activations``, an exact integer expression), and
the recomputed share counted by hand from the meter's documented FLOP convention (a linear
layer 2 x outputs x in_features, an elementwise op its outputs, the final sum 1) and the
documented cut of ``checkpoint_sequential`` (pieces as equal as possible, longer first; the
last piece runs normally)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fpsim import memory, nn
from fpsim.autograd import Tensor


def chain(n, width, fmt):
    return [nn.Sequential(nn.Linear(width, width, rng=i), nn.ReLU()).to(fmt) for i in range(n)]


@pytest.mark.parametrize("n, width, batch, fmt", [(6, 8, 4, "fp16"), (9, 16, 3, "fp32"),
                                                  (7, 4, 5, "bf16")])
def test_sweep_against_the_formula_and_flop_count(n, width, batch, fmt):
    layers = chain(n, width, fmt)
    x = Tensor(np.random.default_rng(1).normal(size=(batch, width)), fmt)
    rows = memory.checkpoint_sweep(layers, x)
    assert [r.segments for r in rows] == list(range(1, n + 1))
    per_layer = 2 * batch * width * width + batch * width  # linear + relu
    for r in rows:
        k = r.segments
        assert r.formula == k + -(-n // k)
        assert float(r.peak).is_integer() and r.peak <= r.formula
        if n % k == 0 or k == 1:
            assert r.peak == r.formula
        last = n // k  # longer pieces first: the last (normal) piece is the shortest
        expected = Fraction((n - last) * per_layer, n * per_layer + 1)
        assert r.recomputed == pytest.approx(float(expected), rel=1e-12)
    assert rows[0].peak == n + 1 and rows[0].recomputed == 0.0  # the input + n outputs


def test_units_are_layer_outputs_in_any_format():
    peaks = {fmt: [r.peak for r in memory.checkpoint_sweep(
        chain(5, 8, fmt), Tensor(np.ones((2, 8)), fmt))] for fmt in ("fp32", "fp16", "fp64")}
    assert peaks["fp32"] == peaks["fp16"] == peaks["fp64"]


def test_selected_segments_sequential_and_gradients_untouched():
    layers = chain(6, 8, "fp32")
    x = Tensor(np.ones((3, 8)))
    layers[0][0].weight.grad = np.full((8, 8), 7.0)
    before = [None if p.grad is None else np.array(p.grad, copy=True)
              for lay in layers for p in lay.parameters()]
    some = memory.checkpoint_sweep(layers, x, segments=[3, 2])
    seq = memory.checkpoint_sweep(nn.Sequential(*layers), x, segments=(2, 3))
    assert [r.segments for r in some] == [3, 2]
    assert sorted(some) == sorted(seq)
    after = [p.grad for lay in layers for p in lay.parameters()]
    for b, a in zip(before, after, strict=True):
        assert (a is None) if b is None else np.array_equal(np.asarray(a), b)


@pytest.mark.parametrize("layers, x, segments, exc, words", [
    ([], "x", None, TypeError, "layers must be a non-empty sequence"),
    ([1, 2], "x", None, TypeError, "layers must be a non-empty sequence"),
    ("chain", "x", None, TypeError, "layers must be a non-empty sequence"),
    (None, np.ones((1, 8)), None, TypeError, "x must be an fpsim.autograd.Tensor"),
    (None, None, [0], ValueError, "segments must be >= 1"),
    (None, None, [4], ValueError, r"segments must be a non-empty list of counts in \[1, "),
    (None, None, [], ValueError, "segments must be a non-empty list"),
    (None, None, [1.5], TypeError, "segments must be an int"),
])
def test_bad_arguments(layers, x, segments, exc, words):
    layers = chain(3, 8, "fp32") if layers is None else layers
    x = Tensor(np.ones((1, 8))) if x is None else x
    with pytest.raises(exc, match=words):
        memory.checkpoint_sweep(layers, x, segments)
