"""fpsim.datasets.minibatches: the shuffled mini-batches of the examples' and notebooks' training
loops (one home for what examples/underflow_overflow.py and notebook 02 each wrote).

References: NumPy's own permutation stream (one ``default_rng(seed)``, one ``permutation(n)``
per epoch), and set arithmetic for the coverage of each epoch."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim.datasets import load_digits, minibatches


@pytest.mark.parametrize("n, size", [(10, 3), (12, 4), (7, 7), (5, 1), (1797, 64)])
@pytest.mark.parametrize("drop_last", [True, False])
def test_epochs_are_numpy_permutations_cut_in_batches(n, size, drop_last):
    got = list(minibatches(n, size, epochs=3, rng=5, drop_last=drop_last))
    ref = np.random.default_rng(5)
    expected = []
    for epoch in range(3):
        order = ref.permutation(n)
        full = (n // size) * size
        cuts = [order[i:i + size] for i in range(0, full, size)]
        if not drop_last and full < n:
            cuts.append(order[full:])
        expected += [(epoch, c) for c in cuts]
    assert [e for e, _ in got] == [e for e, _ in expected]
    for (_, a), (_, b) in zip(got, expected, strict=True):
        assert a.dtype.kind == "i" and np.array_equal(a, b)


@pytest.mark.parametrize("n, size", [(10, 3), (64, 8), (100, 64)])
def test_each_epoch_covers_distinct_samples(n, size):
    per_epoch: dict[int, list[np.ndarray]] = {}
    for epoch, idx in minibatches(n, size, epochs=4, rng=0):
        assert idx.size == size  # drop_last: every batch is full
        per_epoch.setdefault(epoch, []).append(idx)
    assert sorted(per_epoch) == [0, 1, 2, 3]
    orders = []
    for batches in per_epoch.values():
        seen = np.concatenate(batches)
        assert seen.size == (n // size) * size and np.unique(seen).size == seen.size
        assert set(seen.tolist()) <= set(range(n))
        orders.append(seen.tolist())
    assert len({tuple(o) for o in orders}) > 1  # a fresh shuffle each epoch


def test_same_seed_same_batches_and_generator_continues():
    a = [idx.tolist() for _, idx in minibatches(20, 5, epochs=2, rng=3)]
    b = [idx.tolist() for _, idx in minibatches(20, 5, epochs=2, rng=3)]
    assert a == b
    assert a != [idx.tolist() for _, idx in minibatches(20, 5, epochs=2, rng=4)]
    gen = np.random.default_rng(3)
    first = [idx.tolist() for _, idx in minibatches(20, 5, rng=gen)]
    second = [idx.tolist() for _, idx in minibatches(20, 5, rng=gen)]
    assert first + second == a  # one generator: its state carries over from call to call
    assert len(list(minibatches(20, 5, epochs=2, rng=None))) == 8


def test_digits_loop_of_the_example_and_notebook():
    """The loop of examples/underflow_overflow.py and notebook 02: 15 epochs of 64 on the
    digits' 1348 training images are 21 batches per epoch, 315 steps."""
    data = load_digits()
    steps = list(minibatches(len(data.x_train), 64, epochs=15))
    assert len(data.x_train) == 1348 and len(steps) == 315
    assert [e for e, _ in steps] == [e for e in range(15) for _ in range(21)]


def test_zero_epochs_is_empty():
    assert list(minibatches(5, 2, epochs=0)) == []


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"n_samples": 0, "batch_size": 1}, ValueError, "n_samples must be >= 1"),
    ({"n_samples": 5.0, "batch_size": 1}, TypeError, "n_samples must be an int"),
    ({"n_samples": True, "batch_size": 1}, TypeError, "n_samples must be an int"),
    ({"n_samples": 5, "batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ({"n_samples": 5, "batch_size": "2"}, TypeError, "batch_size must be an int"),
    ({"n_samples": 5, "batch_size": 2, "epochs": -1}, ValueError, "epochs must be >= 0"),
    ({"n_samples": 5, "batch_size": 6}, ValueError, "larger than n_samples"),
    ({"n_samples": 5, "batch_size": 2, "drop_last": 1}, TypeError, "drop_last must be a bool"),
    ({"n_samples": 5, "batch_size": 2, "rng": 1.5}, TypeError, "rng must be"),
])
def test_bad_arguments_raise_when_called(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        minibatches(**kwargs)  # not iterated: the check is eager


def test_batch_larger_than_data_without_drop_last():
    assert [idx.size for _, idx in minibatches(5, 6, drop_last=False)] == [5]
