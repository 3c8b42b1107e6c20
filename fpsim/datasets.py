"""Small real data sets shipped inside the package, loaded offline.

- :func:`load_digits`: the UCI 8x8 handwritten digits (1,797 samples, 10 classes, CC BY 4.0;
  see fpsim/data/README.md).
- :func:`shakespeare_chars`: Tiny Shakespeare (1,115,394 characters, public domain; see
  fpsim/data/README.md) as character ids, split as nanoGPT's ``shakespeare_char``.
- :func:`make_blobs`: a synthetic, labelled-as-synthetic Gaussian-blobs task.
- :func:`minibatches`: the shuffled mini-batch indices of a training loop, epoch after epoch.
"""

from __future__ import annotations

import gzip
import lzma
from collections.abc import Iterator
from importlib import resources
from typing import NamedTuple

import numpy as np

from .checks import as_int, check_allocation
from .state import as_generator, as_seed

__all__ = ["Split", "load_digits", "make_blobs", "minibatches", "shakespeare_chars",
           "train_test_split"]


class Split(NamedTuple):
    """A train/test split: float32 features, int64 labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def train_test_split(x: np.ndarray, y: np.ndarray, test_fraction: float = 0.25,
                     seed: int = 0) -> Split:
    """Shuffle with ``seed`` and hold out ``test_fraction`` of the samples.

    >>> s = train_test_split(np.arange(8.0)[:, None], np.arange(8), 0.25, seed=1)
    >>> s.x_train.shape, s.x_test.shape
    ((6, 1), (2, 1))
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    n = len(x)
    order = np.random.default_rng(as_seed(seed)).permutation(n)
    n_test = int(round(n * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Split(x[train], y[train], x[test], y[test])


def load_digits(split: bool = True, test_fraction: float = 0.25, seed: int = 0,
                scale: bool = True):
    """The UCI 8x8 digits: 1,797 images as 64 features (divided by 16 when ``scale``) and
    labels 0..9. Returns a :class:`Split` (``split=True``) or ``(x, y)``.

    >>> x, y = load_digits(split=False)
    >>> x.shape, y.shape, int(y.max())
    ((1797, 64), (1797,), 9)
    """
    raw = resources.files("fpsim").joinpath("data/digits.csv.gz").read_bytes()
    table = np.loadtxt(gzip.decompress(raw).decode().splitlines(), delimiter=",",
                       dtype=np.int64)
    x = table[:, :-1].astype(np.float32)
    if scale:
        x /= np.float32(16.0)
    y = table[:, -1]
    return train_test_split(x, y, test_fraction, seed) if split else (x, y)



def shakespeare_chars() -> tuple[np.ndarray, np.ndarray, str]:
    """Tiny Shakespeare at the character level, as nanoGPT's ``shakespeare_char/prepare.py``
    makes it: ``vocab`` is the sorted unique characters of the whole text (a str of 65; id
    ``i`` is ``vocab[i]``), the text's ids are split at ``int(0.9 * len)``, the first 90% for
    training and the last 10% for validation. Ids are uint8 arrays (fresh on each call).

    >>> train, val, vocab = shakespeare_chars()
    >>> train.size, val.size, len(vocab), train.dtype.name
    (1003854, 111540, 65, 'uint8')
    >>> "".join(vocab[i] for i in train[:14])
    'First Citizen:'
    """
    raw = lzma.decompress(
        resources.files("fpsim").joinpath("data/tinyshakespeare.txt.xz").read_bytes())
    codes = np.frombuffer(raw, np.uint8)  # the text is ASCII: one byte per character
    present = np.unique(codes)  # sorted byte values = sorted characters
    table = np.zeros(256, np.uint8)
    table[present] = np.arange(present.size, dtype=np.uint8)
    ids = table[codes]
    n = int(ids.size * 0.9)
    return ids[:n].copy(), ids[n:].copy(), bytes(present).decode("ascii")

def make_blobs(n_samples: int = 1000, n_features: int = 16, n_classes: int = 4,
               spread: float = 1.0, seed: int = 0, split: bool = True,
               test_fraction: float = 0.25):
    """A SYNTHETIC task: Gaussian blobs around random class centres.

    >>> s = make_blobs(100, 4, 3, seed=0)
    >>> s.x_train.shape[1], sorted(set(s.y_train.tolist())) == [0, 1, 2]
    (4, True)
    """
    n_samples = as_int("n_samples", n_samples, 1)
    n_features = as_int("n_features", n_features, 1)
    n_classes = as_int("n_classes", n_classes, 1)
    check_allocation("n_samples x n_features", max(n_samples, n_classes) * n_features, 8)
    if not (isinstance(spread, (int, float, np.integer, np.floating))
            and not isinstance(spread, bool) and 0 <= spread < np.inf):
        raise ValueError(f"spread must be a finite number >= 0, got {spread!r}")
    rng = np.random.default_rng(as_seed(seed))
    centres = rng.normal(0.0, 3.0, size=(n_classes, n_features))
    y = rng.integers(0, n_classes, n_samples)
    x = (centres[y] + rng.normal(0.0, spread, size=(n_samples, n_features))).astype(np.float32)
    return train_test_split(x, y, test_fraction, seed) if split else (x, y)


def minibatches(n_samples: int, batch_size: int, epochs: int = 1,
                rng: np.random.Generator | int | None = 0, drop_last: bool = True
                ) -> Iterator[tuple[int, np.ndarray]]:
    """``(epoch, indices)`` of shuffled mini-batches of ``range(n_samples)``, epoch after
    epoch: every epoch draws a fresh permutation from ``rng`` (one generator for the whole
    run: a Generator, an int seed or None for a fresh one) and cuts it into consecutive
    batches of ``batch_size``; the last partial batch is dropped (``drop_last=True``, as
    PyTorch's ``DataLoader(..., drop_last=True)``: every step sees a full batch) or yielded
    short.

    The same arguments give the same batches: two runs (e.g. fp32 and fp16) seeded alike see
    the same data in the same order. Arguments are checked when called, not when iterated.

    >>> [(e, idx.tolist()) for e, idx in minibatches(5, 2, epochs=2, rng=0)]
    [(0, [2, 4]), (0, [3, 0]), (1, [4, 1]), (1, [2, 0])]
    >>> [idx.size for _, idx in minibatches(5, 2, drop_last=False)]
    [2, 2, 1]
    """
    n = as_int("n_samples", n_samples, 1)
    size = as_int("batch_size", batch_size, 1)
    n_epochs = as_int("epochs", epochs, 0)
    check_allocation("n_samples", n, 8, "indices")  # one permutation per epoch
    if not isinstance(drop_last, (bool, np.bool_)):
        raise TypeError(f"drop_last must be a bool, got {drop_last!r}")
    if drop_last and size > n:
        raise ValueError(f"batch_size {size} is larger than n_samples {n}: with "
                         "drop_last=True there would be no batch (use a smaller batch_size "
                         "or drop_last=False)")
    gen = as_generator(rng)
    if gen is None:
        gen = np.random.default_rng()
    stop = n - size + 1 if drop_last else n

    def batches() -> Iterator[tuple[int, np.ndarray]]:
        for epoch in range(n_epochs):
            order = gen.permutation(n)
            for i in range(0, stop, size):
                yield epoch, order[i:i + size]

    return batches()
