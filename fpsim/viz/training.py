"""Figures of mixed-precision training runs: loss curves, loss-scale trajectories and gradient
exponent histograms against a format's range (Micikevicius et al. 2018, Figure 3).

The functions take run results duck-typed: anything with ``precision`` (a name),
``step_loss`` (mini-batch loss per step), ``step_scale`` / ``step_skipped`` (per step),
``eval_steps`` / ``eval_test_accuracy`` / ``eval_train_loss`` (:class:`fpsim.training.
RunResult` has them all). Precisions are drawn in their format's colour (fp32 blue, fp16
orange, bf16 green); the fp16 recipes differ by line style.

:mod:`fpsim.viz` and :mod:`fpsim.training` do not import each other (an import-linter contract
in pyproject.toml): the command line joins them. ``fpsim demo`` saves :func:`demo_figures` with
its runs (:func:`fpsim.cli.demo.save_plots`), and :mod:`fpsim.cli.figures` adds the demo's
figures to the gallery.

>>> from types import SimpleNamespace
>>> import numpy as np
>>> run = SimpleNamespace(precision="fp32", step_loss=np.linspace(2.3, 0.1, 50),
...                       eval_steps=np.array([25, 50]), eval_test_accuracy=np.array([0.5, 0.9]),
...                       eval_train_loss=np.array([1.0, 0.1]))
>>> len(loss_curves([run]).axes)
2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from ..amp.instrument import (
    ExponentHistogram,
    exponent_histogram,
    fp16_range_shading,
    merge_histograms,
)
from ..checks import as_int
from . import style
from ._common import float_format

__all__ = ["PRECISION_STYLES", "precision_style", "loss_curves", "loss_panels",
           "loss_scale_trajectory", "gradient_exponent_histogram", "gradient_histogram_grid",
           "add_caption", "demo_figures"]

# recipe name -> (format whose colour it takes, line style, label)
PRECISION_STYLES: dict[str, tuple[str, str, str]] = {
    "fp32": ("fp32", "-", "FP32"),
    "fp16": ("fp16", ":", "pure FP16 (no master, no scaling)"),
    "fp16-master": ("fp16", "--", "FP16 + master weights, no scaling"),
    "mixed-fp16": ("fp16", "-", "mixed FP16 (master + dynamic scaling)"),
    "mixed-bf16": ("bf16", "-", "mixed BF16 (master, no scaling)"),
    "bf16": ("bf16", ":", "pure BF16 (no master, round to nearest)"),
    "bf16-sr": ("bf16", "--", "pure BF16, stochastically rounded updates"),
}


def add_caption(fig: style.Figure, text: str, width: int = 110) -> style.Figure:
    """Put ``text`` (wrapped at ``width`` characters) under the figure as its caption.

    >>> fig, ax = style.new_figure((4, 3))
    >>> add_caption(fig, "What the figure shows.")._supxlabel.get_text()
    'What the figure shows.'
    """
    import textwrap

    fig.supxlabel("\n".join(textwrap.wrap(text, width)), fontsize=9, ha="center")
    return fig


def precision_style(name: str) -> dict[str, Any]:
    """Line keyword arguments (color, linestyle, label) for a precision recipe name.

    >>> precision_style("mixed-bf16")["color"] == style.format_color("bf16")
    True
    """
    fmt, ls, label = PRECISION_STYLES.get(name, ("fp64", "-", name))
    return {"color": style.format_color(fmt), "linestyle": ls, "label": label}


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Running mean over ``window`` steps (shorter at the start); NaN/inf steps ignored."""
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(y)
    c = np.concatenate([[0.0], np.cumsum(np.where(ok, y, 0.0))])
    n = np.concatenate([[0], np.cumsum(ok)])
    hi = np.arange(1, y.size + 1)
    lo = np.maximum(hi - window, 0)
    cnt = n[hi] - n[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, (c[hi] - c[lo]) / cnt, np.nan)


def _check_runs(runs: Sequence[Any]) -> list[Any]:
    runs = list(runs)
    if not runs:
        raise ValueError("need at least one run to plot")
    return runs


@style.styled
def loss_curves(runs: Sequence[Any], *, smooth: int = 20, ax: Axes | None = None,
                title: str | None = None) -> style.Figure:
    """Training loss (mini-batch losses, running mean over ``smooth`` steps, log scale) and
    test accuracy at the evaluation points, one line per run. With ``ax`` only the loss panel
    is drawn, into that axes."""
    runs = _check_runs(runs)
    if smooth < 1:
        raise ValueError(f"smooth must be a positive number of steps, got {smooth}")
    if ax is None:
        fig, (ax_loss, ax_acc) = style.new_figure((10, 4), ncols=2)
    else:
        fig, ax_loss = style.new_figure((6, 4), ax=ax)
        ax_acc = None
    for r in runs:
        kw = precision_style(r.precision)
        # the fp32 baseline is drawn wide and light, so curves that match it stay visible
        lw, alpha = (3.5, 0.45) if r.precision == "fp32" else (1.6, 1.0)
        loss = _smooth(r.step_loss, smooth)
        ax_loss.plot(np.arange(1, loss.size + 1), loss, lw=lw, alpha=alpha, **kw)
        if ax_acc is not None:
            ax_acc.plot(r.eval_steps, 100 * np.asarray(r.eval_test_accuracy), lw=lw,
                        alpha=alpha, marker="o", ms=3, **kw)
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel(f"training loss (running mean of {smooth} steps)")
    ax_loss.grid(True, which="major")
    ax_loss.set_title("Training loss" if title is None else title)
    if ax_acc is not None:
        ax_acc.set_xlabel("step")
        ax_acc.set_ylabel("test accuracy (%)")
        ax_acc.grid(True)
        ax_acc.set_title("Test accuracy")
        ax_acc.legend(loc="lower right")  # accuracy rises to the upper right: corner is free
    else:
        ax_loss.legend(loc="upper right")  # the loss falls from the upper left
    return fig


@style.styled
def loss_panels(runs: Sequence[Any], *, smooth: int = 10, reference: str = "fp32",
                caption: str | None = None) -> style.Figure:
    """One panel per run: its training loss (running mean over ``smooth`` steps, log scale)
    over the ``reference`` run's in grey, titled with the final test accuracy, on shared axes,
    so that each recipe is read on its own against the baseline.

    >>> from types import SimpleNamespace
    >>> runs = [SimpleNamespace(precision=p, step_loss=np.linspace(2.3, 0.1 + i, 50),
    ...                         test_accuracy=0.9) for i, p in enumerate(["fp32", "fp16"])]
    >>> len(loss_panels(runs).axes)
    2
    """
    runs = _check_runs(runs)
    if smooth < 1:
        raise ValueError(f"smooth must be a positive number of steps, got {smooth}")
    ref = next((r for r in runs if r.precision == reference), None)
    ncols = min(4, len(runs))
    nrows = -(-len(runs) // ncols)
    fig, axes = style.new_figure((3.2 * ncols, 2.5 * nrows + 0.6), nrows=nrows, ncols=ncols,
                                 sharex=True, sharey=True, squeeze=False)
    flat = list(axes.ravel())
    for ax, r in zip(flat, runs, strict=False):
        kw = precision_style(r.precision)
        if ref is not None and r is not ref:
            ref_loss = _smooth(ref.step_loss, smooth)
            ax.plot(np.arange(1, ref_loss.size + 1), ref_loss, color="0.6", lw=2.5,
                    alpha=0.6, label=reference)
        loss = _smooth(r.step_loss, smooth)
        ax.plot(np.arange(1, loss.size + 1), loss, lw=1.6, color=kw["color"], label=r.precision)
        acc = getattr(r, "test_accuracy", None)
        ax.set_title(r.precision + ("" if acc is None else f": test acc {100 * acc:.1f}%"),
                     fontsize=10, color=kw["color"])
        ax.set_yscale("log")
        ax.grid(True, which="major")
        ax.legend(loc="upper right", fontsize=7)
    for ax in flat[len(runs):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("training loss")
    for ax in axes[-1, :]:
        ax.set_xlabel("step")
    if caption:
        add_caption(fig, caption)
    return fig


@style.styled
def loss_scale_trajectory(runs: Sequence[Any], *, ax: Axes | None = None,
                          caption: str | None = None) -> style.Figure:
    """The loss scale of every step (log2 axis), skipped steps marked with a cross; runs
    without scaling (a constant scale of 1) are drawn too, as a reference.

    >>> from types import SimpleNamespace
    >>> run = SimpleNamespace(precision="mixed-fp16", step_scale=np.array([4.0, 8.0, 4.0]),
    ...                       step_skipped=np.array([False, True, False]))
    >>> loss_scale_trajectory([run]).axes[0].get_yscale()
    'log'
    """
    runs = _check_runs(runs)
    fig, ax = style.new_figure((7, 3.6), ax=ax)
    lo, hi = np.inf, 0.0
    for r in runs:
        s = np.asarray(r.step_scale, dtype=np.float64)
        if s.size == 0:
            continue
        kw = precision_style(r.precision)
        x = np.arange(1, s.size + 1)
        ax.step(x, s, where="post", lw=1.6, **kw)
        skipped = np.asarray(r.step_skipped, dtype=bool)
        if skipped.any():
            ax.plot(x[skipped], s[skipped], "x", color=kw["color"], ms=6, mew=1.5,
                    label=f"skipped step ({kw['label'].split(' (')[0]})")
        lo, hi = min(lo, s.min()), max(hi, s.max())
    if not np.isfinite(lo):
        lo, hi = 1.0, 2.0
    style.log2_axis(ax, lo / 2, max(hi * 2, lo * 4), axis="y")
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale")
    ax.set_title("Loss scale: halved on inf/NaN gradients (step skipped), doubled after "
                 "a run of good steps", fontsize=10)
    ax.grid(True, which="major", axis="y")
    ax.legend(loc="best", fontsize=8)
    if caption and ax.figure is fig:
        add_caption(fig, caption)
    return fig


def _as_hist(h: Any) -> ExponentHistogram:
    if isinstance(h, ExponentHistogram):
        return h
    if isinstance(h, Mapping) and h:
        return merge_histograms(_as_hist(v) for v in h.values())
    raise TypeError("expected an ExponentHistogram or a non-empty mapping of them (e.g. the "
                    f"layers of a run), got {type(h).__name__}")


@style.styled
def gradient_exponent_histogram(hist: Any, fmt: str = "fp16", *,
                                labels: Sequence[str] | None = None,
                                ax: Axes | None = None, title: str | None = None,
                                shift: float | None = None, caption: str | None = None
                                ) -> style.Figure:
    """Histogram of gradient exponents ``floor(log2|g|)`` (share of the non-zero values per
    binade) with ``fmt``'s range shaded, as Micikevicius et al.'s Figure 3: below half its
    smallest subnormal (2^-25 for fp16) values round to zero, from there to the smallest
    normal they round to subnormals (fewer bits), above its largest finite value they
    overflow.

    ``hist``: an :class:`~fpsim.amp.ExponentHistogram`, a mapping of them (merged, e.g. the
    layers of a run), or a list of such items: overlaid series named by ``labels``.
    ``shift``: the binades by which loss scaling moves the values (log2 of the scale), drawn
    as an arrow from the first series' mode; ``caption`` goes under the figure.

    >>> from fpsim.amp import exponent_histogram
    >>> h = exponent_histogram(np.array([2.0**-30, 2.0**-20, 0.5, 0.0]))
    >>> gradient_exponent_histogram(h).axes[0].get_xlabel()
    'binary exponent floor(log2|gradient|)'
    """
    f = float_format(fmt)
    series = list(hist) if isinstance(hist, (list, tuple)) else [hist]
    hists = [_as_hist(h) for h in series]
    if labels is not None and len(labels) != len(hists):
        raise ValueError(f"got {len(labels)} labels for {len(hists)} histograms")
    fig, ax = style.new_figure((8, 4), ax=ax)
    shade = fp16_range_shading(f)
    # values below half the smallest subnormal (and the tie at it) round to zero; from there
    # to the smallest normal they round to subnormals
    zero_edge = shade.smallest_subnormal - 1
    occupied = [h.exponents[h.counts > 0] for h in hists]
    lo = min([int(e[0]) for e in occupied if e.size] + [zero_edge])
    hi = max([int(e[-1]) for e in occupied if e.size] + [shade.max])
    lo, hi = lo - 3, hi + 3
    ax.axvspan(lo, zero_edge, color=style.ROLE_COLORS["underflow"], alpha=0.45, lw=0,
               zorder=0)
    ax.axvspan(zero_edge, shade.smallest_normal, color=style.ROLE_COLORS["band_subnormal"],
               alpha=0.9, lw=0, zorder=0)
    ax.axvspan(shade.max + 1, hi, color=style.ROLE_COLORS["overflow"], alpha=0.45, lw=0,
               zorder=0)
    palette = [style.ROLE_COLORS["data"], style.format_color(f), style.format_color("fp32"),
               style.format_color("bf16")]
    handles = []
    top = 0.0
    for i, h in enumerate(hists):
        nonzero = int(h.counts.sum()) + h.below + h.above
        share = h.counts / max(nonzero, 1)
        top = max(top, float(share.max()) if share.size else 0.0)
        color = palette[i % len(palette)]
        label = labels[i] if labels is not None else "gradient values"
        below = (h.below + int(h.counts[h.exponents < zero_edge].sum())) / max(nonzero, 1)
        edges = np.append(h.exponents, h.exponents[-1] + 1) if h.exponents.size else [0, 1]
        ax.stairs(share, edges, fill=len(hists) == 1, alpha=0.85 if len(hists) == 1 else 1.0,
                  color=color, lw=1.6, zorder=2)
        handles.append(Patch(color=color, label=f"{label}: {100 * below:.2f}% below "
                                                 f"{style.pow2_label(zero_edge)}"))
    ax.set_ylim(0, 1.6 * top if top > 0 else 1.0)  # headroom for the legend
    ax.axvline(zero_edge, color=style.ROLE_COLORS["bound"], lw=0.8, ls="--")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("binary exponent floor(log2|gradient|)")
    ax.set_ylabel("share of the non-zero values")
    name = str(f.name).upper()
    handles += [Patch(color=style.ROLE_COLORS["underflow"], alpha=0.45,
                      label=f"round to zero in {name}"),
                Patch(color=style.ROLE_COLORS["band_subnormal"],
                      label=f"{name} subnormal (fewer bits)"),
                Patch(color=style.ROLE_COLORS["overflow"], alpha=0.45,
                      label=f"overflow in {name}")]
    if shift:  # the arrow needs the top of the axes: the legend goes below
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2,
                  fontsize=8)
    else:
        ax.legend(handles=handles, loc="upper left", fontsize=8)
    ax.set_title(title if title is not None else f"Gradient exponents against the {name} range")
    if shift and hists and hists[0].counts.any():
        h0 = hists[0]
        x0 = float(h0.exponents[int(np.argmax(h0.counts))]) + 0.5
        y = 1.15 * top
        ax.annotate("", xy=(x0 + shift, y), xytext=(x0, y),
                    arrowprops={"arrowstyle": "->", "lw": 1.5, "color": "0.2"})
        ax.text(x0 + shift / 2, y * 1.03, f"loss scaling: x {style.pow2_label(int(shift))}",
                ha="center", va="bottom", fontsize=9)
    if caption and ax.figure is fig:
        add_caption(fig, caption)
    return fig


@style.styled
def gradient_histogram_grid(grads: Mapping[str, Any], fmt: str = "fp16", *, ncols: int = 3,
                            title: str | None = None) -> style.Figure:
    """One :func:`gradient_exponent_histogram` panel per named tensor, on a grid of ``ncols``
    columns: ``grads`` maps a name to its values (any array, histogrammed with
    :func:`fpsim.amp.exponent_histogram`) or to an :class:`~fpsim.amp.ExponentHistogram`.
    Only the bottom row keeps the x label and the left column the y label; ``title`` goes
    over the grid (examples/underflow_overflow.py and notebook 02 draw their recorded
    gradients with it).

    >>> fig = gradient_histogram_grid({"w": np.array([2.0**-30, 0.5]), "x": np.ones(3),
    ...                                "y": np.array([1e-6])}, ncols=2, title="three tensors")
    >>> len(fig.axes), fig.axes[0].get_title(), fig._suptitle.get_text()
    (3, 'gradient of w', 'three tensors')
    """
    if not isinstance(grads, Mapping) or not grads:
        raise TypeError("grads must be a non-empty mapping of name -> values or "
                        f"ExponentHistogram, got {type(grads).__name__}")
    ncols = as_int("ncols", ncols, 1)
    ncols = min(ncols, len(grads))
    nrows = -(-len(grads) // ncols)
    fig, axes = style.new_figure((4 * ncols, 3.2 * nrows), nrows=nrows, ncols=ncols,
                                 squeeze=False)
    for ax, (name, g) in zip(axes.ravel(), grads.items(), strict=False):
        h = g if isinstance(g, ExponentHistogram) else exponent_histogram(g)
        gradient_exponent_histogram(h, fmt, ax=ax, title=f"gradient of {name}", labels=[name])
    for ax in axes.ravel()[len(grads):]:
        ax.remove()  # the unused cells of the last row
    for i, ax in enumerate(axes.ravel()[:len(grads)]):
        if i + ncols < len(grads):  # another panel below it
            ax.set_xlabel("")
        if i % ncols:
            ax.set_ylabel("")
    if title is not None:
        fig.suptitle(title, x=0.01, ha="left")
    return fig


# ---------------------------------------------------------------------------- the demo
def _median_scale(run: Any) -> float:
    s = np.asarray(run.step_scale, dtype=np.float64)
    return float(np.median(s)) if s.size else 1.0


def demo_figures(runs: Sequence[Any]) -> dict[str, style.Figure]:
    """The three figures of ``fpsim demo``, each with a caption computed from ``runs``:
    ``loss_curves`` (one panel per recipe over fp32), ``loss_scale`` (the dynamic scale of
    the scaled runs, skipped steps marked) and ``gradient_histogram`` (the exact gradients of
    the fp32 run, and those of the first scaled run times its scale, against fp16's range,
    with the shift scaling applies).

    >>> from fpsim.training.experiment import run_demo
    >>> runs = run_demo(precisions=["fp32"], progress=False, steps=2, eval_every=1)
    >>> sorted(demo_figures(runs))
    ['gradient_histogram', 'loss_curves', 'loss_scale']
    """
    runs = _check_runs(runs)
    by_name = {r.precision: r for r in runs}
    figs: dict[str, style.Figure] = {}
    figs["loss_curves"] = loss_panels(runs, caption=(
        "Training loss of each recipe (coloured) over the fp32 run (grey); same initial "
        "weights, same batches. A curve that leaves the grey one is a recipe that fails: "
        "fp16 without loss scaling (its gradients underflow) and pure bf16 (its small "
        "updates round away)."))
    scaled = [r for r in runs if np.size(r.step_scale) and (np.asarray(r.step_scale) != 1).any()]
    shown = scaled or runs[:1]
    skipped = sum(int(np.sum(r.step_skipped)) for r in shown)
    figs["loss_scale"] = loss_scale_trajectory(shown, caption=(
        f"The dynamic loss scale of every step (PyTorch's GradScaler rule): doubled after a "
        f"run of good steps, halved when a scaled gradient overflows fp16, and that step "
        f"skipped (x, {skipped} in all). The saw-tooth is the scaler finding the largest "
        f"scale fp16 can hold."))
    series, labels = [], []
    fp32 = by_name.get("fp32")
    if fp32 is not None and fp32.histograms:
        series.append(fp32.histograms)
        labels.append("fp32 run: what fp16 must hold without scaling")
    shift = None
    if scaled and scaled[0].histograms:
        series.append(scaled[0].histograms)
        labels.append(f"{scaled[0].precision} run, times its loss scale")
        shift = float(np.round(np.log2(_median_scale(scaled[0]))))
    if not series and runs[0].histograms:
        series, labels = [runs[0].histograms], [f"{runs[0].precision} run"]
    if series:
        figs["gradient_histogram"] = gradient_exponent_histogram(
            series, "fp16", labels=labels, shift=shift,
            title="Exact gradient values of the sampled steps (weights and activations)",
            caption=("Binary exponents of the exact (fp64) gradients against fp16's range: "
                     "left of the dashed line they round to zero, in the band they keep "
                     "fewer bits. Loss scaling multiplies them by the scale (arrow: the "
                     "median scale) and moves them into the range."))
    return figs
