"""Figures of ``fpsim lm``: validation-loss curves of every recipe, and the exponent
histograms of the exact gradients (and attention logits) at the start and the end of training
against the range of the format each gradient is stored in.

The functions take :class:`fpsim.training.lm.LMRunResult` objects (duck-typed: ``recipe``,
``eval_steps``, ``eval_val_loss``, ``histograms``).

>>> from types import SimpleNamespace
>>> import numpy as np
>>> run = SimpleNamespace(recipe="fp32", eval_steps=np.array([1, 2]),
...                       eval_val_loss=np.array([3.0, 2.5]), histograms={})
>>> val_loss_figure([run]).axes[0].get_ylabel()
'validation loss (nats / char)'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import get_float_format
from . import style

__all__ = ["val_loss_figure", "histogram_figure", "save_lm_figures"]

_MARKERS, _LINES = (".", "s", "^"), ("-", "--", ":")  # per group of 10 (the colour cycle)
_HIST_LO = -80  # fpsim.training.lm.HIST_BINS starts here (viz does not import it: no cycle)


def val_loss_figure(runs: Sequence[Any]) -> style.Figure:
    """Validation loss against the step, one line per recipe."""
    fig, ax = style.new_figure((7.5, 4.5))
    for i, r in enumerate(runs):
        ax.plot(r.eval_steps, r.eval_val_loss, marker=_MARKERS[i // 10 % len(_MARKERS)],
                ls=_LINES[i // 10 % len(_LINES)], label=r.recipe)  # colours repeat after 10
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats / char)")
    ax.legend(fontsize="small", ncol=2)
    ax.set_title("GPT on Tiny Shakespeare: validation loss by recipe")
    return fig


def _summed(hist: dict[str, Any], prefix_filter: str | None = None) -> np.ndarray:
    tot = None
    for name, h in hist.items():
        if prefix_filter is not None and not name.endswith(prefix_filter):
            continue
        c = np.asarray(h["counts"], np.int64)
        tot = c if tot is None else tot + c
    return np.zeros(0, np.int64) if tot is None else tot


def _bars(ax: Any, ex: np.ndarray, counts: np.ndarray, **kwargs: Any) -> None:
    """A histogram's bars of width 1 at the exponents ``ex``: the non-empty bins only (an
    empty bin's bar has no height and draws nothing; most of the range is empty, and each bar
    is a patch of its own that matplotlib lays out and draws), all of them when every bin is
    empty (the legend's handle)."""
    keep = counts != 0
    if keep.any():
        ex, counts = ex[keep], counts[keep]
    ax.bar(ex, counts, width=1.0, **kwargs)


def histogram_figure(runs: Sequence[Any]) -> style.Figure:
    """Per recipe (rows), the exponent histogram of all exact gradients times the loss scale
    at the first (left) and last (right) sampled step, with the smallest subnormal, smallest
    normal and largest value of the gradient format marked; attention logits in grey."""
    runs = [r for r in runs if r.histograms]
    n = max(len(runs), 1)
    height = 1.9 * n + 0.6
    fig, axes = style.new_figure((10, height), nrows=n, ncols=2, squeeze=False)
    # fixed margins (inches at the top and the bottom) instead of constrained layout, whose
    # pass over these 2n panels took ~0.8 s of the ~1.4 s the figure took to save
    fig.set_layout_engine(None)
    fig.subplots_adjust(left=0.06, right=0.99, top=1 - 0.3 / height, bottom=0.55 / height,
                        hspace=0.5, wspace=0.12)
    for i, r in enumerate(runs):
        for j, phase in enumerate(("start", "end")):
            ax = axes[i][j]
            h = r.histograms.get(phase)
            if not h:
                ax.set_visible(False)
                continue
            counts = _summed(h["grads"])
            ex = np.arange(_HIST_LO, _HIST_LO + len(counts))
            _bars(ax, ex, counts, color="tab:blue", label="exact gradients x scale")
            scores = _summed(h["scores"])
            if scores.size:
                _bars(ax, ex, scores, color="0.5", alpha=0.5, label="attention logits")
            fmts = sorted(set(h["formats"].values()))
            for fname in fmts:
                try:  # a scaled quantizer ("fp8_e5m2 x delayed scale") has no fixed range
                    f = get_float_format(fname)
                except (ValueError, TypeError):
                    continue
                for v, ls in ((f.smallest_subnormal, ":"), (f.smallest_normal, "--"),
                              (f.max, "-")):
                    ax.axvline(np.log2(v), color=style.format_color(f), ls=ls, lw=1)
            if counts.any() or scores.any():
                ax.set_yscale("log")
            ax.set_xlim(_HIST_LO - 10, 20)  # fp32 / bf16's lower limits (-126, -149) lie left
            ax.set_title(f"{r.recipe}, step {h['step'] + 1} (scale {h['scale']:g}); "
                         f"grads in {', '.join(fmts)}", fontsize="small")
            if i == n - 1:
                ax.set_xlabel("exponent  floor(log2 |x|)")
    if runs:
        axes[0][0].legend(fontsize="x-small")
    return fig


def save_lm_figures(runs: Sequence[Any], out: str | Path) -> list[Path]:
    """Write lm_val_loss.png and lm_histograms.png under ``out``; returns their paths."""
    out = Path(out)
    return [style.save_figure(val_loss_figure(runs), out / "lm_val_loss.png"),
            style.save_figure(histogram_figure(runs), out / "lm_histograms.png")]
