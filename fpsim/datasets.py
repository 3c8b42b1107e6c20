"""Small real data sets shipped inside the package, loaded offline.

- :func:`load_digits`: the UCI 8x8 handwritten digits (1,797 samples, 10 classes, CC BY 4.0;
  see fpsim/data/README.md).
- :func:`make_blobs`: a synthetic, labelled-as-synthetic Gaussian-blobs task.
"""

from __future__ import annotations

import gzip
from importlib import resources
from typing import NamedTuple

import numpy as np

__all__ = ["Split", "load_digits", "make_blobs", "train_test_split"]


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
    order = np.random.default_rng(seed).permutation(n)
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


def make_blobs(n_samples: int = 1000, n_features: int = 16, n_classes: int = 4,
               spread: float = 1.0, seed: int = 0, split: bool = True,
               test_fraction: float = 0.25):
    """A SYNTHETIC task: Gaussian blobs around random class centres.

    >>> s = make_blobs(100, 4, 3, seed=0)
    >>> s.x_train.shape[1], sorted(set(s.y_train.tolist())) == [0, 1, 2]
    (4, True)
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, size=(n_classes, n_features))
    y = rng.integers(0, n_classes, n_samples)
    x = (centres[y] + rng.normal(0.0, spread, size=(n_samples, n_features))).astype(np.float32)
    return train_test_split(x, y, test_fraction, seed) if split else (x, y)
