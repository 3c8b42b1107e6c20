"""fpsim.viz.lm's histogram figure draws the bars of the non-empty bins only (an empty bin's
bar has no height and draws nothing; each bar is a patch matplotlib lays out and draws, most
of the exponent range is empty, and the figure of twelve recipes took seconds at the end of
``fpsim lm``): the same pixels as a bar for every bin, the route it replaces."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

import fpsim.viz.lm as viz_lm  # noqa: E402

_BINS = 101  # fpsim.training.lm.HIST_BINS: exponents -80 .. 20


def _hist(rng: np.random.Generator, empty: bool) -> dict:
    counts = np.zeros(_BINS, np.int64)
    if not empty:
        counts[20:75] = rng.integers(0, 4, 55) * 10 ** rng.integers(0, 6, 55)  # zeros, ones
        counts[30] = 1
    scores = np.zeros(_BINS, np.int64)
    if not empty:
        scores[70:82] = rng.integers(0, 3000, 12)
    return {"step": 0, "scale": 1.0, "grads": {"w": {"counts": counts.tolist()}},
            "formats": {"w": "fp32", "b": "bf16"}, "scores": {"q": {"counts": scores.tolist()}}}


def _runs() -> list:
    rng = np.random.default_rng(4)
    # the first axes (the legend's) empty: its legend still shows both entries
    return [SimpleNamespace(recipe=f"r{i}", histograms={"start": _hist(rng, i == 0),
                                                        "end": _hist(rng, False)})
            for i in range(3)]


def _pixels(fig) -> np.ndarray:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def test_non_empty_bars_draw_the_pixels_of_every_bar(monkeypatch):
    runs = _runs()
    got = _pixels(viz_lm.histogram_figure(runs))

    def every_bar(ax, ex, counts, **kwargs):
        ax.bar(ex, counts, width=1.0, **kwargs)

    monkeypatch.setattr(viz_lm, "_bars", every_bar)
    want = _pixels(viz_lm.histogram_figure(runs))
    assert got.shape == want.shape and np.array_equal(got, want)
