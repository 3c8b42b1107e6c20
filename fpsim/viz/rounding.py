"""Figures of rounding: how each mode maps an interval onto a format, stochastic rounding's
unbiasedness, and the relative rounding error against the unit roundoff.

>>> from fpsim.viz import rounding_modes
>>> fig = rounding_modes("fp4_e2m1", -2, 2, modes=["nearest_even", "toward_zero"])
>>> [ax.get_title(loc="left").split(":")[0] for ax in fig.axes]
['nearest_even', 'toward_zero']
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..checks import as_int, check_allocation
from ..formats import Format
from ..modes import Rounding, as_rounding
from ..rounding import default_rng
from ..rounding import round as fp_round
from . import style
from ._common import exact_decimal, finite_real, float_format, values_between

__all__ = ["rounding_modes", "stochastic_rounding", "relative_error", "MODE_NOTES",
           "DETERMINISTIC_MODES"]

DETERMINISTIC_MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd")
MODE_NOTES = {
    "nearest_even": "nearest, ties to even",
    "nearest_away": "nearest, ties away from 0",
    "toward_zero": "truncate toward 0",
    "up": "toward +∞",
    "down": "toward −∞",
    "odd": "truncate, set last bit if inexact",
    "stochastic": "up with probability (x − down) / ulp",
}
# tie markers are drawn only up to this many ties (beyond that they hide the steps)
_MAX_TIES = 80


def _modes(modes: Sequence[Rounding | str] | None) -> list[str]:
    if modes is None:
        return list(DETERMINISTIC_MODES)
    if isinstance(modes, (str, Rounding)):
        modes = [modes]
    out = [as_rounding(m).value for m in modes]
    if not out:
        raise ValueError("modes must name at least one rounding mode")
    return out


@style.styled
def rounding_modes(
    fmt: Format | str,
    lo: float,
    hi: float,
    modes: Sequence[Rounding | str] | None = None,
    *,
    n: int = 2001,
    seed: int | np.random.Generator | None = 0,
) -> Figure:
    """How each rounding mode maps the reals in [lo, hi] onto ``fmt``: one panel per mode with
    the step function fl(x) over a grid of ``n`` points (plus every tie), the line y = x, the
    representable values as horizontal lines and each tie (midpoint of two neighbours) marked
    where the mode sends it. ``modes`` defaults to the six deterministic modes; "stochastic"
    draws one random outcome per grid point (``seed``), scattered between the two neighbours.

    >>> fig = rounding_modes("fp8_e4m3", 1.0, 1.5)
    >>> len(fig.axes)
    6
    """
    f = float_format(fmt)
    lo, hi = finite_real(lo, "lo"), finite_real(hi, "hi")
    if not lo < hi:
        raise ValueError(f"need lo < hi, got lo={lo!r}, hi={hi!r}")
    n = as_int("n", n, 2)
    check_allocation("n", n, 8, "points")
    ms = _modes(modes)
    rng = default_rng(seed, name="seed")  # checked even where no stochastic panel draws
    vals = values_between(f, lo, hi)
    # the neighbours just outside [lo, hi] make the ties near the ends complete
    below = float(fp_round(lo, f, "down"))
    above = float(fp_round(hi, f, "up"))
    ext = np.unique(np.concatenate([[below], vals, [above]]))
    ext = ext[np.isfinite(ext)]
    ties = (ext[:-1] + ext[1:]) / 2  # exact: both neighbours and their midpoint fit float64
    ties = ties[(ties >= lo) & (ties <= hi)]
    x = np.unique(np.concatenate([np.linspace(lo, hi, n), ties, vals]))

    k = len(ms)
    ncols = k if k <= 3 else (2 if k == 4 else 3)
    nrows = -(-k // ncols)
    fig, axes = style.new_figure((3.6 * ncols + 0.6, 3.0 * nrows + 0.9), nrows=nrows,
                                 ncols=ncols, sharex=True, sharey=True, squeeze=False)
    flat = axes.ravel()
    for ax in flat[k:]:
        ax.set_visible(False)
    draw_ties = len(ties) <= _MAX_TIES
    yticks = vals if len(vals) <= 12 else None
    for ax, mode in zip(flat, ms, strict=False):
        color = style.mode_color(mode)
        for v in vals:
            ax.axhline(v, color="#c8c8c8", lw=0.6, zorder=0)
        if draw_ties:
            for t in ties:
                ax.axvline(t, color=style.ROLE_COLORS["tie"], lw=0.6, ls=":", zorder=0)
        ax.plot([lo, hi], [lo, hi], color="#808080", lw=1.0, ls="--", zorder=1, gid="identity")
        if mode == "stochastic":
            y = np.asarray(fp_round(x, f, mode, rng=rng))
            ax.plot(x, y, ls="none", marker=".", ms=2.5, alpha=0.35, color=color, zorder=2,
                    gid="step:stochastic")
        else:
            y = np.asarray(fp_round(x, f, mode))
            ax.plot(x, y, drawstyle="steps-post", color=color, lw=1.8, zorder=2,
                    gid=f"step:{mode}")
            if draw_ties and len(ties):
                ax.plot(ties, fp_round(ties, f, mode), ls="none", marker="o", ms=5,
                        mfc=color, mec="white", mew=0.8, zorder=3, gid=f"ties:{mode}")
        ax.set_title(f"{mode}: {MODE_NOTES[mode]}", loc="left", fontsize=10)
        ax.grid(False)
        if yticks is not None:
            ax.set_yticks(yticks)
            ax.set_yticklabels([f"{v:g}" for v in yticks])
    for ax in axes[-1]:
        ax.set_xlabel("x (exact real)")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"fl(x) in {f.name}")
    pad = 0.03 * (hi - lo)
    flat[0].set_xlim(lo - pad, hi + pad)
    finite = vals[np.isfinite(vals)]
    ylo = min(lo, below if math.isfinite(below) else lo, *finite[:1])
    yhi = max(hi, above if math.isfinite(above) else hi, *finite[-1:])
    flat[0].set_ylim(ylo - pad, yhi + pad)
    handles = [Line2D([], [], color="#808080", ls="--", label="y = x"),
               Line2D([], [], color="#c8c8c8", lw=1.5, label=f"values of {f.name}")]
    if draw_ties and len(ties):
        handles += [Line2D([], [], color=style.ROLE_COLORS["tie"], ls=":",
                           label="ties (midpoints)"),
                    Line2D([], [], ls="none", marker="o", color="#404040",
                           label="where a tie goes")]
    fig.suptitle(f"Rounding modes: the reals in [{lo:g}, {hi:g}] mapped onto "
                 f"{style.format_label(f)}", x=0.01, ha="left")
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return fig


@style.styled
def stochastic_rounding(
    fmt: Format | str, x: float, n: int = 10000, seed: int | np.random.Generator | None = 0,
) -> Figure:
    """Stochastic rounding of ``x`` to ``fmt``, ``n`` times: left, how often each neighbour
    came out against the exact probability (x - down) / (up - down), with x, the mean of the
    outcomes and round-to-nearest marked; right, the running mean of the outcomes converging
    to x (unbiased) while round-to-nearest keeps its error.

    >>> fig = stochastic_rounding("bf16", 0.1, n=1000)
    >>> int(sum(p.get_height() for p in fig.axes[0].patches))
    1000
    """
    f = float_format(fmt)
    x = finite_real(x, "x")
    if abs(x) > f.max:
        raise ValueError(f"x={x!r} lies beyond the largest value of {f.name} ({f.max:g})")
    n = as_int("n", n, 1)
    check_allocation("n", n, 8, "points")
    rng = default_rng(seed, name="seed")
    samples = np.asarray(fp_round(np.full(n, x), f, "stochastic", rng=rng))
    down = float(fp_round(x, f, "down"))
    up = float(fp_round(x, f, "up"))
    nearest = float(fp_round(x, f, "nearest_even"))
    gap = up - down
    p_up = (x - down) / gap if gap else 0.0
    outcomes, counts = np.unique(samples, return_counts=True)

    fig, (ax, ax2) = style.new_figure((11, 4.0), ncols=2, width_ratios=[1.0, 1.15])
    width = 0.18 * (gap if gap else max(abs(x), f.smallest_subnormal))
    ax.bar(outcomes, counts, width=width, color=style.format_color(f), alpha=0.85,
           gid="sr:counts", label=f"outcomes ({n} roundings)")
    ax.axvline(x, color=style.ROLE_COLORS["exact"], lw=1.8, gid="sr:x",
               label=f"x = {exact_decimal(x, 14)}")
    mean = float(samples.mean())
    ax.axvline(mean, color=style.ROLE_COLORS["mean"], lw=1.6, ls="--", gid="sr:mean",
               label=f"mean of outcomes = {mean:.10g}")
    ax.axvline(nearest, color=style.mode_color("nearest_even"), lw=1.4, ls=":",
               gid="sr:nearest", label=f"round to nearest = {exact_decimal(nearest, 14)}")
    span = gap if gap else width * 4
    ax.set_xlim(down - 0.45 * span, up + 0.45 * span)
    ax.set_ylim(0, n * 1.32)
    ax.set_xticks(sorted({down, up}), [exact_decimal(v, 14) for v in sorted({down, up})])
    ax.set_xlabel(f"value of {f.name}")
    ax.set_ylabel("count")
    for v, c in zip(outcomes, counts, strict=True):
        expect = p_up if v == up and gap else 1 - p_up
        ax.text(v, c + 0.02 * n, f"{c / n:.3f}\n(exact {expect:.3f})", ha="center",
                va="bottom", fontsize=8.5)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"Stochastic rounding of x to {style.format_label(f)}", loc="left")

    # right: the running mean converges to x, round-to-nearest stays where it is
    k = np.arange(1, n + 1)
    ulp = gap if gap else 1.0
    running = (np.cumsum(samples - down) / k + down - x) / ulp  # exact-ish: offsets first
    ax2.plot(k, running, color=style.ROLE_COLORS["mean"], lw=1.2, gid="sr:running",
             label="stochastic: mean of first k outcomes − x")
    sd = math.sqrt(p_up * (1 - p_up))
    ax2.fill_between(k, -2 * sd / np.sqrt(k), 2 * sd / np.sqrt(k), color="#d0d0d0",
                     alpha=0.6, lw=0, label="±2 standard errors")
    ax2.axhline((nearest - x) / ulp, color=style.mode_color("nearest_even"), lw=1.6, ls=":",
                gid="sr:nearest_error", label="round to nearest − x (every time)")
    ax2.axhline(0, color=style.ROLE_COLORS["exact"], lw=0.8)
    ax2.set_xscale("log")
    ax2.set_xlim(1, n)
    ax2.set_ylim(-0.6, 0.6)
    ax2.set_xlabel("k (number of roundings averaged)")
    ax2.set_ylabel("error in units of the spacing (ulp)")
    ax2.set_title("The mean of stochastic roundings is unbiased", loc="left")
    ax2.legend(loc="upper right", fontsize=8)
    return fig


@style.styled
def relative_error(
    fmts: Sequence[Format | str] = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2"),
    lo: float = 2.0**-28,
    hi: float = 2.0**12,
    *,
    n: int = 120_000,
    rounding: Rounding | str = "nearest_even",
    ax: Axes | None = None,
) -> Figure:
    """Relative rounding error |fl(x) − x| / |x| over a geometric sweep of ``n`` points in
    [lo, hi], per format: the largest error in each of ~120 bins, with the unit roundoff
    u = 2^-(m+1) dashed. Round to nearest stays under u in the normal range (closest to it at
    the bottom of each binade) and exceeds it among the subnormals; a result that underflows
    to 0 has error 1; overflowed points are left out.

    >>> fig = relative_error(["fp16"], 1.0, 2.0, n=100)
    >>> fig.axes[0].get_yscale()
    'log'
    """
    if isinstance(fmts, (str, Format)):
        fmts = [fmts]
    fs = [float_format(f) for f in fmts]
    if not fs:
        raise ValueError("relative_error needs at least one format")
    lo, hi = finite_real(lo, "lo"), finite_real(hi, "hi")
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo!r}, hi={hi!r}")
    n = as_int("n", n, 2)
    check_allocation("n", n, 8, "points")
    mode = as_rounding(rounding).value
    x = np.geomspace(lo, hi, n)
    fig, ax = style.new_figure((10, 4.2), ax)
    floor = 2.0 ** -(max(f.mantissa_bits for f in fs) + 4)
    group = max(1, n // 120)  # points per envelope bin (~120 bins over the sweep)
    for f in fs:
        col = style.format_color(f)
        y = np.asarray(fp_round(x, f, mode, rng=0))
        rel = np.abs(y - x) / x
        ok = np.isfinite(rel)
        # the upper envelope (largest error per bin) carries the message: flat at u over the
        # normal range, rising among the subnormals, 1 where results underflow to zero
        m = (len(x) // group) * group
        env = np.where(ok[:m], rel[:m], np.nan).reshape(-1, group)
        has = ~np.all(np.isnan(env), axis=1)
        xe = np.sqrt(x[:m:group] * x[group - 1:m:group])
        env_max = np.nanmax(np.where(np.isnan(env[has]), -np.inf, env[has]), axis=1)
        # exact results have error 0, which a log axis cannot show: they sit at the floor
        env_max = np.maximum(env_max, floor)
        ax.plot(xe[has], env_max, color=col, lw=1.8, gid=f"envelope:{f.name}",
                label=f"{style.format_label(f)}, u = {style.pow2_label(-f.mantissa_bits - 1)}")
        ax.axhline(f.unit_roundoff, color=col, lw=1.1, ls="--", gid=f"u:{f.name}")
    style.log2_axis(ax, lo, hi)
    style.log2_axis(ax, floor, 2.0, axis="y", max_ticks=8)
    ax.set_xlabel("x (log2 scale)")
    ax.set_ylabel("|fl(x) − x| / |x|")
    ax.set_title(f"Relative rounding error ({mode}), largest per bin of a sweep of {n} "
                 "values, against the unit roundoff u (dashed)", loc="left")
    ax.legend(loc="upper right", fontsize=8.5, ncols=min(len(fs), 2))
    return fig
