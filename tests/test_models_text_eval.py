"""fpsim.models.text_eval: the one scoring rule of fpsim lm and fpsim.quant.lm_loss, checked
against Python's own arithmetic (math.log / math.exp per row, math.fsum)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fpsim.models import GPT
from fpsim.models.text_eval import cross_entropy64, mean_loss, spread_starts, windows
from fpsim.quant import lm_loss


def _ce_python(logits: np.ndarray, targets: np.ndarray) -> float:
    rows = logits.reshape(-1, logits.shape[-1]).tolist()
    losses = []
    for row, t in zip(rows, targets.reshape(-1).tolist(), strict=True):
        m = max(row)
        losses.append(m + math.log(math.fsum(math.exp(v - m) for v in row)) - row[t])
    return math.fsum(losses) / len(losses)


@pytest.mark.parametrize("scale", [1.0, 1e3, 1e300])
def test_cross_entropy64_is_the_log_sum_exp_loss(scale):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((4, 5, 7)) * scale  # 1e300: exp without the max overflows
    targets = rng.integers(0, 7, (4, 5))
    got = cross_entropy64(logits, targets)
    assert math.isfinite(got)
    assert got == pytest.approx(_ce_python(logits, targets), rel=1e-12)


def test_windows_and_starts():
    ids = np.arange(50) * 3
    starts = spread_starts(ids.size, 5, 8)
    assert starts[0] == 0 and starts[-1] == 50 - 8 - 1 and np.all(np.diff(starts) > 0)
    x, y = windows(ids, starts, 8)
    assert x.shape == y.shape == (5, 8)
    assert np.array_equal(y[:, :-1], x[:, 1:]) and np.array_equal(y[:, -1], ids[starts + 8])


@pytest.mark.parametrize("batch_size", [1, 3, 7, 100])
def test_mean_loss_is_the_mean_over_every_window_whatever_the_batches(batch_size):
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 6, 300)
    table = rng.standard_normal((6, 6)) * 4  # logits from the current token only

    def logits64(x):
        return table[x]

    starts = spread_starts(ids.size, 10, 12)
    x, y = windows(ids, starts, 12)
    want = _ce_python(table[x], y)
    assert mean_loss(logits64, ids, starts, 12, batch_size) == pytest.approx(want, rel=1e-12)


def test_lm_loss_scores_as_the_rule():
    gpt = GPT(vocab_size=9, context=8, d_model=16, n_layers=1, n_heads=2, rng=1)
    ids = np.random.default_rng(2).integers(0, 9, 200)
    starts = spread_starts(ids.size, 6, 8)
    x, y = windows(ids, starts, 8)
    want = _ce_python(gpt(x).numpy(np.float64), y)
    assert lm_loss(gpt, ids, windows=6, batch_size=4) == pytest.approx(want, rel=1e-12)
