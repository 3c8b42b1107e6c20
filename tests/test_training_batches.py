"""The trainer and examples/mixed_precision_digits.py draw their mini-batches with
fpsim.datasets.minibatches (issue 20 review). Reference: the loop both wrote by hand before,
copied inline below; the batches must be the same indices in the same order, step for step,
for batch sizes that divide n, that do not, and that exceed n (the trainer then takes the
whole, reshuffled, training set every step). Also the counts of the MLP the trainer builds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fpsim.autograd import Tensor
from fpsim.datasets import Split
from fpsim.training import train

ROOT = Path(__file__).resolve().parents[1]


def old_trainer_batches(n: int, batch_size: int, steps: int, seed: int) -> list[np.ndarray]:
    """The trainer's batching loop before minibatches, verbatim but for the bookkeeping."""
    rng = np.random.default_rng(seed)
    per_epoch = max(n // batch_size, 1)
    order = rng.permutation(n)
    out = []
    for step in range(steps):
        k = step % per_epoch
        if k == 0 and step:
            order = rng.permutation(n)
        out.append(order[k * batch_size:(k + 1) * batch_size])
    return out


class _Labels(np.ndarray):
    """Training labels that note every integer-array index the trainer takes of them (once a
    step: ``y = data.y_train[idx]``)."""

    def __getitem__(self, key):
        if isinstance(key, np.ndarray) and key.dtype.kind in "iu":
            self.taken.append(np.array(key))
        return np.asarray(super().__getitem__(key))


def trainer_batches(n: int, batch_size: int, steps: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1234)
    x = rng.random((n, 64), dtype=np.float32)
    y = np.asarray(rng.integers(0, 10, n)).view(_Labels)
    y.taken = []
    data = Split(x, y, rng.random((4, 64), dtype=np.float32), np.arange(4))
    train(precision="fp32", sizes=(64, 4, 10), steps=steps, batch_size=batch_size,
          eval_every=steps, seed=seed, instrument=False, data=data)
    return y.taken


CASES = [  # (n, batch_size, steps, seed)
    (12, 4, 7, 0),     # 3 full batches an epoch, steps end inside an epoch
    (12, 4, 6, 3),     # steps end on an epoch boundary
    (13, 4, 10, 1),    # n not divisible: one sample left out of every epoch
    (10, 3, 8, 7),
    (7, 7, 3, 2),      # batch == n
    (5, 8, 4, 0),      # batch > n: the whole set, reshuffled, every step
    (3, 100, 3, 9),
    (1, 1, 3, 5),
]


@pytest.mark.parametrize("n, batch_size, steps, seed", CASES)
def test_trainer_draws_the_batches_of_its_former_loop(n, batch_size, steps, seed):
    want = old_trainer_batches(n, batch_size, steps, seed)
    got = trainer_batches(n, batch_size, steps, seed)
    assert len(got) == steps
    for a, b in zip(want, got, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    if batch_size > n:
        assert all(sorted(b.tolist()) == list(range(n)) for b in got)


def test_trainer_on_the_digits_keeps_its_batches():
    """The demo's data (1348 training digits, batch 256: 5 batches an epoch, 148 samples
    left out) for two epochs and a bit."""
    from fpsim.datasets import load_digits

    data = load_digits()
    y = np.asarray(data.y_train).view(_Labels)
    y.taken = []
    train(precision="fp32", sizes=(64, 4, 10), steps=12, batch_size=256, eval_every=12,
          instrument=False, data=Split(data.x_train, y, data.x_test, data.y_test))
    want = old_trainer_batches(len(data.x_train), 256, 12, 0)
    assert len(y.taken) == 12
    assert all(np.array_equal(a, b) for a, b in zip(want, y.taken, strict=True))


def _example():
    path = ROOT / "examples" / "mixed_precision_digits.py"
    spec = importlib.util.spec_from_file_location("mixed_precision_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def old_example_batches(n: int, steps: int, batch: int, seed: int = 0) -> list[np.ndarray]:
    """examples/mixed_precision_digits.py's ``batches`` before minibatches."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    out = []
    for step in range(steps):
        k = step % (n // batch)
        if k == 0 and step:
            order = rng.permutation(n)
        out.append(order[k * batch:(k + 1) * batch])
    return out


@pytest.mark.parametrize("n, seed", [(1348, 0), (1348, 5), (1300, 0), (129, 2)])
def test_example_draws_the_batches_of_its_former_loop(n, seed):
    ex = _example()
    want = old_example_batches(n, ex.STEPS, ex.BATCH, seed)
    got = list(ex.batches(n, seed))
    assert len(got) == ex.STEPS == len(want)
    assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))


def test_mlp_sizes_and_seeds_are_counts():
    """The trainer's MLP (fpsim.training.MLP) takes its widths and layer seeds as counts
    (fpsim.checks.as_int): int() took a width of 2.7 as 2, True as 1 and "64" as 64."""
    from fpsim.training import MLP
    from tests.intlike import Count

    x = Tensor(np.linspace(-1, 1, 3 * 64).reshape(3, 64))
    ref = MLP((64, 8, 10), layer_seeds=(0, 1))(x).numpy()
    for conv in (np.int16, np.array, Count):
        net = MLP(tuple(conv(v) for v in (64, 8, 10)), layer_seeds=(conv(0), conv(1)))
        assert net.sizes == (64, 8, 10) and all(type(v) is int for v in net.sizes)
        np.testing.assert_array_equal(net(x).numpy(), ref)
    for bad in (True, 8.0, 2.7, "8", None, np.array([8])):
        with pytest.raises(TypeError, match=rf"sizes\[1\] must be an int, got "
                                            f"{type(bad).__name__}"):
            MLP((64, bad, 10))
        with pytest.raises(TypeError, match=rf"layer_seeds\[0\] must be an int, got "
                                            f"{type(bad).__name__}"):
            MLP((64, 8, 10), layer_seeds=(bad, 1))
    for bad in ((64, 0, 10), (64, -8, 10), (64,)):
        with pytest.raises(ValueError, match="sizes must list at least an input and an output"):
            MLP(bad)
    with pytest.raises(ValueError, match=r"layer_seeds\[1\] must be >= 0, got -1"):
        MLP((64, 8, 10), layer_seeds=(0, -1))
