"""Scoring a language model on a text, one rule for every caller (``fpsim lm``'s curves and
final losses, :func:`fpsim.quant.lm_loss`):

- the windows are ``count`` starts spread evenly over the token ids by ``linspace`` (the same
  windows for every model and recipe), each ``context`` tokens and the next token of each;
- the loss is the mean next-token cross-entropy in nats, from float64 logits, by log-sum-exp
  with the row's max subtracted (no rounding of the model's format enters the score);
- batches of ``batch_size`` windows; a batch's mean weighted by its windows, so the result is
  the mean over all windows whatever the batch size divides.

>>> ids = np.arange(40) % 5
>>> x, y = windows(ids, spread_starts(ids.size, 2, 4), 4)
>>> x.tolist(), y.tolist()
([[0, 1, 2, 3], [0, 1, 2, 3]], [[1, 2, 3, 4], [1, 2, 3, 4]])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["cross_entropy64", "mean_loss", "spread_starts", "windows"]


def windows(ids: np.ndarray, starts: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """The inputs ``ids[s : s + context]`` and targets ``ids[s + 1 : s + context + 1]`` of
    every start ``s`` (any shape: the results add a last axis of ``context``).

    >>> windows(np.arange(10), np.array([0, 5]), 3)[1].tolist()
    [[1, 2, 3], [6, 7, 8]]
    """
    pos = starts[..., None] + np.arange(context)
    return ids[pos], ids[pos + 1]


def spread_starts(n_tokens: int, count: int, context: int) -> np.ndarray:
    """``count`` window starts spread evenly over ``n_tokens`` ids (first at 0, last at the
    last start with a next token), the same for every run.

    >>> spread_starts(100, 3, 10).tolist()
    [0, 44, 89]
    """
    return np.linspace(0, n_tokens - context - 1, count).astype(np.int64)


def cross_entropy64(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean cross-entropy (nats) of ``logits`` (..., vocab) for ``targets`` (...), in float64:
    log-sum-exp with each row's max subtracted.

    >>> round(cross_entropy64(np.zeros((2, 4)), np.array([0, 3])), 6)  # log(4)
    1.386294
    """
    z = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - m).sum(axis=1)) + m[:, 0]
    return float(np.mean(lse - z[np.arange(len(z)), targets.reshape(-1)]))


def mean_loss(logits64: Callable[[np.ndarray], np.ndarray], ids: np.ndarray,
              starts: np.ndarray, context: int, batch_size: int) -> float:
    """The mean next-token loss over the windows at ``starts``: ``logits64(x)`` gives a batch's
    float64 logits (B, context, vocab) for the ids ``x`` (B, context); the caller sets its
    context (no_grad, autocast).

    >>> ids = np.arange(30) % 3
    >>> round(mean_loss(lambda x: np.zeros(x.shape + (3,)), ids, np.array([0, 7, 9]), 4, 2), 6)
    1.098612
    """
    per_batch = []
    for i in range(0, len(starts), batch_size):
        x, y = windows(ids, starts[i:i + batch_size], context)
        per_batch.append(cross_entropy64(logits64(x), y) * len(x))
    return float(np.sum(per_batch) / len(starts))  # NumPy's pairwise sum of the batches
