"""Measuring a quantized language model against its original: the mean next-token loss over
fixed windows of a text (:func:`lm_loss`), and how far its logits moved
(:func:`logits_difference`).
"""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import no_grad
from ..checks import as_int
from ..models import GPT
from ..models.text_eval import mean_loss, spread_starts

__all__ = ["lm_loss", "logits_difference"]


def _ids(ids, context: int) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"ids must be an integer array of token ids, got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size < context + 1:
        raise ValueError(f"ids must be a 1-d array of more than context ({context}) tokens, "
                         f"got shape {arr.shape}")
    return arr


def _logits64(model: GPT, x: np.ndarray) -> np.ndarray:
    with no_grad():
        return model(x).numpy(np.float64)


def lm_loss(model: GPT, ids, windows: int = 32, batch_size: int = 16) -> float:
    """Mean cross-entropy (nats per token, float64) of the GPT ``model`` predicting each next
    token of ``windows`` windows of ``model.context`` tokens spread evenly over ``ids`` (the
    same windows for every model of that context): the rule of ``fpsim lm``'s validation loss
    (:mod:`fpsim.models.text_eval`).

    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> round(lm_loss(gpt, np.arange(40) % 11, windows=4), 2)  # about log(11) untrained
    2.43
    """
    if not isinstance(model, GPT):
        raise TypeError(f"lm_loss takes an fpsim.models.GPT, got {type(model).__name__}")
    n = as_int("windows", windows, 1)
    bs = as_int("batch_size", batch_size, 1)
    t = model.context
    arr = _ids(ids, t)
    if n > arr.size - t:
        raise ValueError(f"windows ({n}) must be at most the {arr.size - t} windows of "
                         f"{t} tokens the {arr.size} ids hold")
    return mean_loss(lambda x: _logits64(model, x), arr, spread_starts(arr.size, n, t), t, bs)


def logits_difference(model: GPT, reference: GPT, idx) -> dict[str, float]:
    """How ``model``'s logits on the tokens ``idx`` (B, T) differ from ``reference``'s:
    ``max_abs`` and ``rms`` of the difference, and ``top1_agree``, the share of positions
    whose most likely next token is the same.

    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> logits_difference(gpt, gpt, np.array([[1, 2, 3]]))
    {'max_abs': 0.0, 'rms': 0.0, 'top1_agree': 1.0}
    """
    for m, what in ((model, "model"), (reference, "reference")):
        if not isinstance(m, GPT):
            raise TypeError(f"{what} must be an fpsim.models.GPT, got {type(m).__name__}")
    a, b = _logits64(model, idx), _logits64(reference, idx)
    if a.shape != b.shape:
        raise ValueError(f"the two models' logits differ in shape: {a.shape} vs {b.shape}")
    d = a - b
    return {"max_abs": float(np.abs(d).max()), "rms": float(np.sqrt(np.mean(d * d))),
            "top1_agree": float(np.mean(a.argmax(-1) == b.argmax(-1)))}
