"""Figures of the tensor-core model: one block FMA bit by bit (alignment, truncation, rounding),
the error of tensor-core dot products as K grows, and tile / wave quantization of a GEMM.

>>> from fpsim.viz import block_alignment
>>> fig = block_alignment([1.0, 1.0], [1.0, -2.0**-24], -1 + 2.0**-24, gpu="V100")
>>> [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "title"]
['One block FMA on V100 (fp16 inputs, fp32 output): d = c + Σ a_k·b_k, k = 0..1']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from .. import tensorcore as tc
from ..checks import as_array, as_int
from ..formats import Format
from ..reductions import dot as fp_dot
from ..state import as_seed
from ..tensorcore.gpus import BlockFMA, GpuModel
from ..tensorcore.perf import gemm_time_estimate, get_perf_gpu
from . import style
from ._common import float_format
from .gallery import register

__all__ = ["block_alignment", "error_vs_k", "gemm_efficiency", "GPU_COLORS", "BIT_COLORS",
           "README_ALIGNMENT_EXAMPLE"]

#: One colour per GPU generation (Okabe-Ito hues not used by the fp32 baselines).
GPU_COLORS: dict[str, str] = {
    "V100": "#D55E00", "A100": "#E69F00", "A30": "#E69F00", "A2": "#E69F00", "Ada": "#999933",
    "L40S": "#999933", "H100": "#CC79A7", "H200": "#CC79A7", "B200": "#882255",
    "B200-fp8-variant": "#882255", "B200-fp8-published": "#AA4499",
    "B200-fp8-rz-then-c": "#882255",
}
_BASELINE_COLORS = {"sequential": "#0072B2", "pairwise": "#56B4E9", "kahan": "#009E73",
                    "wide": "#404040"}
_FALLBACK = ("#6A3D9A", "#B15928", "#1F78B4", "#33A02C")

#: Fill colours of the bit boxes, by what happens to the bit (a 0 bit is drawn white).
BIT_COLORS: dict[str, str] = {
    "kept": "#AFC8F0",  # aligned and kept
    "dropped": "#F4A582",  # truncated by the alignment
    "sum": "#A8D5BA",  # a bit of the exact sum that the rounded result keeps
    "rounded": "#FDD49E",  # a bit of the exact sum that the output rounding removes
    "result": "#A8D5BA",  # a bit of the rounded result
}
_BAND_KEPT = "#EEF2F8"
_BAND_DROPPED = "#FDF0E6"
_CUT = "#B0173A"

#: The inputs of the README figure ``tensorcore_alignment``: an unnormalised product (2.25),
#: a negative one, one partly and one wholly truncated, a zero product and a truncated c.
README_ALIGNMENT_EXAMPLE = {
    "a": [1.5, 1.5, -0.3, 0.1, 2.0**-12, 0.0, 0.625, 2.0**-8],
    "b": [1.25, 1.5, 0.7, 0.3, 2.0**-14, 5.0, -0.375, 0.5],
    "c": 1 / 3,
}


# --------------------------------------------------------------------------- block alignment
@dataclass
class _Row:
    label: str  # left text
    sign: str  # "+", "−" or ""
    note: str  # right text
    bits: list[tuple[int, int, str]]  # (weight exponent, digit, state)
    gid: str
    empty: str = ""  # text in place of the boxes (a zero term)


def _digits(n: int, low: int, state) -> list[tuple[int, int, str]]:
    """Bits of the non-negative integer n as (exponent, digit, state(exponent)), bit i having
    weight 2**(low + i)."""
    return [(low + i, (n >> i) & 1, state(low + i)) for i in range(max(n.bit_length(), 1))]


def _as_int(x: Fraction, what: str) -> int:
    if x.denominator != 1:
        raise RuntimeError(f"internal error: {what} is not an integer ({x})")
    return int(x)


def _short(x: float | Fraction) -> str:
    v = float(x)
    return "0" if v == 0 else f"{v:.8g}"


def _term_rows(blk, q: int) -> list[_Row]:
    rows = []
    for t in blk.terms:
        name = "c" if t.label == "c" else t.label.replace("*", "·")
        sign = "−" if t.value < 0 else "+"
        label = f"{name}  {sign}{_short(abs(t.value))}"
        if t.exponent is None:
            rows.append(_Row(label, "", "", [], f"term:{t.label}",
                             empty="zero: takes no part in the alignment"))
            continue
        sb = t.significand_bits
        n = _as_int(t.significand * 2**sb, f"significand of {t.label}")
        width = sb + (1 if t.label == "c" else 2)  # products' significands lie in [0, 4)
        low = t.exponent - sb
        cut = q if t.cut is None else t.cut  # generic units: each group has its own cut
        bits = [(low + i, (n >> i) & 1, "kept" if low + i >= cut else "dropped")
                for i in range(width)]
        if t.group:
            label = f"{label} [{t.group}]"
        if t.truncated == 0:
            note = "exact"
        elif t.aligned == 0:
            note = "all bits dropped → 0"
        else:
            note = f"{float(t.truncated):.3g} dropped"
        rows.append(_Row(label, sign, note, bits, f"term:{t.label}"))
    return rows


@style.styled
def block_alignment(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    c: float = 0.0,
    gpu: str | GpuModel | BlockFMA = "A100",
    *,
    input_format: Format | str = "fp16",
    output_format: Format | str = "fp32",
    block: int = 0,
    max_bits: int = 40,
) -> Figure:
    """One tensor-core block FMA ``d = c + Σ a_k b_k`` drawn bit by bit, from the record of
    :func:`fpsim.tensorcore.dot` with ``explain=True``.

    One row per term (each product ``a_k·b_k`` and ``c``): its significand bits on a common
    axis of bit weights 2^k, placed by the term's exponent (a product's significand lies in
    [0, 4): two integer bits). The alignment exponent maxE is the largest term exponent (or
    the unit's floor); every term keeps ``F = 23 + extra bits`` fraction bits below 2^maxE and
    the bits right of the cut are truncated (sign-magnitude). Below: the exact integer sum of
    the kept bits, the bits the output rounding removes, and the rounded result. ``block``
    picks a block when K is longer than the unit's block; ``max_bits`` caps the number of bit
    columns (bits further right are counted, not drawn).

    >>> fig = block_alignment([1.0] * 4, [2.0**-24] * 4, 1 - 2.0**-24, gpu="V100")  # D5
    >>> [g for g in (p.get_gid() or "" for p in fig.axes[0].patches)
    ...  if g.startswith("bit:a0*b0:") and g.endswith(":1")]  # (row, 2^k, state, digit)
    ['bit:a0*b0:-24:kept:1']
    """
    block = as_int("block", block, 0)  # its upper end is checked once K is known
    max_bits = as_int("max_bits", max_bits, 8)
    a, b, c = as_array(a, "a"), as_array(b, "b"), as_array(c, "c")
    if np.ndim(a) != 1 or np.ndim(b) != 1:
        raise ValueError(f"block_alignment needs 1-D a and b (one dot product), got shapes "
                         f"{np.shape(a)} and {np.shape(b)}")
    if np.ndim(c) != 0:
        raise ValueError(f"c must be one number, got shape {np.shape(c)}")
    unit, _fi, fo, _label = tc.resolve_unit(gpu, input_format, output_format)
    d, rec = tc.dot(a, b, c, gpu=gpu, input_format=input_format, output_format=output_format,
                    explain=True)
    if rec.special:
        raise ValueError(f"block_alignment draws finite values only: {rec.special}")
    nblocks = len(rec.blocks)
    if not 0 <= block < nblocks:
        raise ValueError(f"block {block} out of range: K = {len(rec.a)} makes {nblocks} "
                         f"block(s) of {unit.block_size}; valid: 0..{nblocks - 1}")
    if unit.summation != "aligned":
        raise ValueError(f"block_alignment draws aligned summation; {rec.gpu} sums "
                         f"{unit.summation} (dot(..., explain=True) prints its steps)")
    blk = rec.blocks[block]
    F, maxe = blk.fraction_bits, blk.max_exponent
    q = maxe - F  # weight of the last kept bit
    rows = _term_rows(blk, q)

    # the exact sum, and the rounded result in the unit's result format
    rfmt = unit.result_format(fo)
    r = blk.result
    s_int = abs(blk.exact_sum)
    lo_r = None
    r_bits: list[tuple[int, int, str]] = []
    if math.isfinite(r) and r != 0:
        er = max(math.frexp(r)[1] - 1, rfmt.emin)
        lo_r = er - rfmt.mantissa_bits
        nr = _as_int(abs(Fraction(r)) / Fraction(2) ** lo_r, "result significand")
        r_bits = _digits(nr, lo_r, lambda _w: "result")
    s_bits = _digits(s_int, q, lambda w: "sum" if lo_r is None or w >= lo_r else "rounded") \
        if s_int else []
    mode = blk.rounding
    sum_sign = "−" if blk.exact_sum < 0 else "+"
    rows_sum = [
        _Row(f"exact sum  {sum_sign}{_short(abs(blk.value))}", sum_sign if s_int else "",
             f"{s_int} × 2^{q}" if len(str(s_int)) <= 12 else "", s_bits, "sum",
             empty="" if s_int else "exact sum = 0"),
        _Row(f"d  {'−' if math.copysign(1, r) < 0 else '+'}{_short(abs(r))}",
             ("−" if r < 0 else "+") if r_bits else "",
             f"{rfmt.name}, {mode}", r_bits, "result",
             empty="" if r_bits else ("overflow → inf" if math.isinf(r) else "result = 0")),
    ]

    # bit columns: weight T (left) down to B (right)
    weights = [w for row in rows + rows_sum for w, _, _ in row.bits]
    top = max([maxe + 1, *weights])
    low = min([q - 1, *weights])
    bottom = min(max(low, top - max_bits + 1), q - 1)
    ncol = top - bottom + 1
    col = lambda w: top - w  # noqa: E731 - x of the box of weight 2**w

    # layout in box units (u inches per box)
    u = 0.16
    char = 0.071 / u  # box units per character of the 8.5 pt monospace labels
    left = max(len(row.label) for row in rows + rows_sum) * char + 2.2
    for row in rows + rows_sum:  # bits beyond the right end are counted in the note
        clipped = sum(1 for w, _, _ in row.bits if w < bottom)
        if clipped:
            row.note = f"{row.note} (+{clipped} bits)" if row.note else f"+{clipped} bits"
    notes = [row.note for row in rows + rows_sum]
    right = max(len(t) for t in notes) * char * 0.95 + 1.6
    pitch = 1.35
    title_h, head_h = 3.4, 2.9
    body_h = pitch * (len(rows) + len(rows_sum)) + 0.9
    foot_h = 4.2
    height = title_h + head_h + body_h + foot_h
    width = left + ncol + right
    fig = style.Figure(figsize=(width * u, height * u))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-left, ncol + right)
    ax.set_ylim(0, height)
    ax.set_axis_off()

    ytop = height - title_h - head_h  # top of the first row
    y_rows = [ytop - pitch * (i + 1) + (pitch - 1) for i in range(len(rows))]
    y_sum = [y_rows[-1] - 0.9 - pitch * (i + 1) + (pitch - 1) for i in range(2)]
    cut_x = col(q) + 1
    # background bands: the kept window and the truncated region
    y0, y1 = y_rows[-1] - 0.2, ytop + 0.1
    ax.add_patch(Rectangle((0, y0), cut_x, y1 - y0, facecolor=_BAND_KEPT, lw=0, zorder=0,
                           gid="band:kept"))
    ax.add_patch(Rectangle((cut_x, y0), ncol - cut_x, y1 - y0, facecolor=_BAND_DROPPED, lw=0,
                           zorder=0, gid="band:dropped"))
    ax.plot([cut_x, cut_x], [y0, ytop + head_h - 0.3], color=_CUT, lw=1.3, ls="--", zorder=3,
            gid="cut")
    mx = col(maxe)
    ax.add_patch(Rectangle((mx, y0), 1, ytop + 1.3 - y0, facecolor="#D5DEEE", lw=0, zorder=0.5,
                           gid="band:maxE"))

    # header: exponent ticks every 4 columns from maxE (and at the cut), markers above
    ticks = [w for w in range(top, bottom - 1, -1) if (maxe - w) % 4 == 0 and abs(w - q) > 2]
    for w in ticks:
        ax.text(col(w) + 0.5, ytop + 0.25, style.pow2_label(w), ha="center", va="bottom",
                fontsize=7.5, color="#404040", gid=f"tick:{w}")
    ax.text(cut_x - 0.1, ytop + 0.25, style.pow2_label(q), ha="right", va="bottom",
            fontsize=7.5, color=_CUT, gid=f"tick:{q}")
    yh = ytop + 1.6
    ax.text(mx + 0.5, yh, "maxE", ha="center", va="bottom", fontsize=8.5, fontweight="bold",
            gid="label:maxE")
    ax.text(cut_x - 0.3, yh, f"kept: F = {F} fraction bits", ha="right", va="bottom",
            fontsize=8.5, color="#1F4E9C")
    ax.text(cut_x + 0.3, yh, "truncated", ha="left", va="bottom", fontsize=8.5, color=_CUT)
    ax.text(-left + 0.3, ytop + 0.25, "bit weight", ha="left", va="bottom", fontsize=8,
            color="#606060")

    def draw_row(row: _Row, y: float) -> None:
        ax.text(-left + 0.3, y + 0.5, row.label, ha="left", va="center", fontsize=8.5,
                family="DejaVu Sans Mono", gid=f"label:{row.gid}")
        if row.sign:
            ax.text(-0.9, y + 0.5, row.sign, ha="center", va="center", fontsize=10,
                    fontweight="bold")
        if row.empty:
            ax.text(0.3, y + 0.5, row.empty, ha="left", va="center", fontsize=8.5,
                    style="italic", color="#505050", gid=f"empty:{row.gid}")
        clipped = False
        for w, digit, state in row.bits:
            if w < bottom:
                clipped = True
                continue
            x = col(w)
            fill = BIT_COLORS[state] if digit else "white"
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=fill, edgecolor="#909090", lw=0.5,
                                   zorder=2, gid=f"bit:{row.gid.split(':')[-1]}:{w}:{state}:"
                                                 f"{digit}"))
            ax.text(x + 0.5, y + 0.47, str(digit), ha="center", va="center", fontsize=6.5,
                    color="#202020" if digit else "#A0A0A0", family="DejaVu Sans Mono",
                    zorder=3)
        if clipped:
            ax.text(ncol + 0.2, y + 0.5, "…", ha="left", va="center", fontsize=9)
        if row.note:
            ax.text(ncol + 1.2, y + 0.5, row.note, ha="left", va="center", fontsize=8,
                    color="#303030", gid=f"note:{row.gid}")

    for row, y in zip(rows, y_rows, strict=True):
        draw_row(row, y)
    ysep = y_rows[-1] - 0.55
    ax.plot([-left + 0.3, ncol + right - 0.3], [ysep, ysep], color="#606060", lw=0.8)
    for row, y in zip(rows_sum, y_sum, strict=True):
        draw_row(row, y)

    k0, k1 = blk.k_start, blk.k_stop - 1
    which = f", block {block + 1} of {nblocks}" if nblocks > 1 else ""
    ax.text(-left + 0.3, height - 0.4,
            f"One block FMA on {rec.gpu} ({rec.input_format} inputs, {rec.output_format} "
            f"output): d = c + Σ a_k·b_k, k = {k0}..{k1}{which}", ha="left", va="top",
            fontsize=10.5, fontweight="bold", gid="title")
    ax.text(-left + 0.3, height - 1.95, unit.describe(), ha="left", va="top", fontsize=9,
            color="#303030", gid="subtitle")
    if blk.stages:  # generic units: groups with their own cuts, a late c, in words
        ax.text(-left + 0.3, height - 2.75, "; ".join(blk.stages[-2:]), ha="left", va="top",
                fontsize=7.5, color="#303030", gid="stages")
    value = f"{_short(blk.value)}" if blk.value == Fraction(float(blk.value)) else \
        f"≈{float(blk.value):.10g}"
    ax.text(-left + 0.3, y_sum[-1] - 0.9,
            f"exact integer sum {blk.exact_sum} × 2^{q} = {value};  rounded {mode} to "
            f"{rfmt.name}: d = {r!r}", ha="left", va="top", fontsize=8.5, gid="summary")
    handles = [Patch(facecolor=BIT_COLORS[k], edgecolor="#909090", label=lab) for k, lab in (
        ("kept", "1 bit kept"), ("dropped", "1 bit truncated by the alignment"),
        ("rounded", "removed by the output rounding"), ("result", "bit of the sum / result"))]
    handles.append(Line2D([], [], color=_CUT, ls="--", label="cut: last kept bit"))
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.005, 0.005), ncols=5,
               fontsize=8, frameon=False, handlelength=1.2, columnspacing=1.2)
    return fig


# --------------------------------------------------------------------------- error vs K
def _label(g: str | GpuModel | BlockFMA) -> str:
    if isinstance(g, str):
        return tc.get_gpu(g).name
    if not isinstance(g, (GpuModel, BlockFMA)):
        raise TypeError(f"error_vs_k: each of gpus must be a GPU name, a GpuModel or a BlockFMA "
                        f"unit, got {type(g).__name__} {g!r}")
    return g.name


def _color(label: str, i: int) -> str:
    return GPU_COLORS.get(label, _FALLBACK[i % len(_FALLBACK)])


_BASELINE_ORDERS = ("sequential", "pairwise", "kahan", "wide")
_STATISTICS = ("mean", "max")


@style.styled
def error_vs_k(
    ks: Sequence[int] = (16, 64, 256, 1024, 4096),
    gpus: Sequence[str | GpuModel | BlockFMA] = ("V100", "A100", "H100"),
    *,
    input_format: Format | str = "fp16",
    baselines: Sequence[str] = ("sequential", "pairwise"),
    baseline_format: Format | str = "fp32",
    trials: int = 20,
    distribution: str = "uniform",
    statistic: str = "mean",
    seed: int = 0,
    ax: Axes | None = None,
) -> Figure:
    """Relative error |d − exact| / |exact| of dot products of length K against K (log-log):
    each GPU's tensor cores (:func:`fpsim.tensorcore.dot`, fp32 output; a
    :class:`~fpsim.tensorcore.BlockFMA` for a custom unit) and the baselines
    :func:`fpsim.dot` in ``baseline_format`` with each order of ``baselines`` ("sequential",
    "pairwise", "kahan", "wide"), all on the same inputs.

    Inputs are ``trials`` vectors per K drawn from ``distribution`` ("uniform" on [0, 1): all
    products positive, errors never cancel; or "normal"), converted to ``input_format``. The
    exact value is ``math.fsum`` of the exact products (correctly rounded to float64, far
    more accurate than any curve). ``statistic`` is "mean" or "max" over the trials. The
    dotted line K·u is the classic worst-case bound of sequential summation in
    ``baseline_format``.

    >>> fig = error_vs_k(ks=(16, 64), gpus=("A100",), baselines=("sequential",), trials=2)
    >>> [line.get_gid() for line in fig.axes[0].lines]
    ['error:A100', 'error:fp32 sequential', 'bound']
    """
    if hasattr(ks, "__index__") and np.ndim(ks) == 0:  # one K (an int, a 0-d array...)
        ks = [ks]
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise TypeError(f"ks must be an int or a sequence of ints (dot-product lengths K), got "
                        f"{type(ks).__name__} {ks!r}")
    ks = [as_int(f"ks[{i}]", k, 1) for i, k in enumerate(ks)]
    if not ks:
        raise ValueError("ks must be positive ints, got none")
    if isinstance(gpus, (str, GpuModel, BlockFMA)):
        gpus = [gpus]
    if isinstance(baselines, str):
        baselines = [baselines]
    bad = [o for o in baselines if o not in _BASELINE_ORDERS]
    if bad:
        raise ValueError(f"unknown baseline order(s) {bad}; valid: {', '.join(_BASELINE_ORDERS)}")
    if not list(gpus) and not list(baselines):
        raise ValueError("error_vs_k needs at least one GPU or baseline")
    if distribution not in ("uniform", "normal"):
        raise ValueError(f"distribution must be 'uniform' or 'normal', got {distribution!r}")
    if statistic not in _STATISTICS:
        raise ValueError(f"statistic must be one of {_STATISTICS}, got {statistic!r}")
    trials = as_int("trials", trials, 1)
    bfmt = float_format(baseline_format)
    units = [(_label(g), g) for g in gpus]
    for _lab, g in units:
        tc.resolve_unit(g, input_format, "fp32")  # unknown GPU / unsupported input: ValueError
    fi = float_format(input_format)
    names = [lab for lab, _ in units] + [f"{bfmt.name} {o}" for o in baselines]
    errs = {n: np.zeros(len(ks)) for n in names}
    rng = np.random.default_rng(as_seed(seed))
    draw = rng.random if distribution == "uniform" else rng.standard_normal
    reduce = np.mean if statistic == "mean" else np.max
    for i, k in enumerate(ks):
        a = tc.convert_input(draw((trials, k)), fi)
        b = tc.convert_input(draw((trials, k)), fi)
        exact = np.array([math.fsum(row) for row in a * b])  # products exact in float64
        denom = np.where(exact == 0, 1.0, np.abs(exact))
        results = {lab: tc.dot(a, b, 0.0, gpu=g, input_format=fi, output_format="fp32")
                   for lab, g in units}
        for o in baselines:
            results[f"{bfmt.name} {o}"] = fp_dot(a, b, bfmt, order=o)
        for n, dv in results.items():
            errs[n][i] = reduce(np.abs(np.asarray(dv) - exact) / denom)

    fig, ax = style.new_figure((8, 4.8), ax)
    for j, (lab, _g) in enumerate(units):
        ax.plot(ks, errs[lab], marker="o", lw=1.8, color=_color(lab, j), gid=f"error:{lab}",
                label=f"{lab} tensor cores")
    for o in baselines:
        n = f"{bfmt.name} {o}"
        ax.plot(ks, errs[n], marker="s", ls="--", lw=1.5, color=_BASELINE_COLORS[o],
                gid=f"error:{n}", label=f"fpsim.dot, {bfmt.name}, order={o!r}")
    u = bfmt.unit_roundoff
    ax.plot(ks, [k * u for k in ks], ls=":", color="#808080", lw=1.2, gid="bound",
            label=f"K·u ({bfmt.name} bound, u = {style.pow2_label(-bfmt.mantissa_bits - 1)})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("K (length of the dot product)")
    ax.set_ylabel(f"{statistic} relative error ({trials} trials)")
    what = "on [0, 1)" if distribution == "uniform" else "standard normal"
    ax.set_title(f"Dot products of {fi.name} inputs {what}: tensor cores (fp32 output) against "
                 f"{bfmt.name} summation", loc="left")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return fig


# --------------------------------------------------------------------------- tile / wave
@style.styled
def gemm_efficiency(
    sizes: Sequence[int] | None = None,
    *,
    gpu: str = "A100",
    dtype: str = "fp16",
    M: int | None = None,
    K: int = 4096,
    tile: tuple[int, int] = (128, 128),
    blocks_per_sm: int = 1,
    ax: Axes | None = None,
) -> Figure:
    """Achieved fraction of peak of GEMMs against N, from
    :func:`fpsim.tensorcore.perf.gemm_time_estimate`: tile quantization (partial tiles) and
    wave quantization (a last, partly empty wave) multiply into the utilisation, which saws
    up and down as N grows. ``M`` defaults to N (square outputs).

    >>> fig = gemm_efficiency(range(128, 1025, 128), gpu="H100")
    >>> [line.get_gid() for line in fig.axes[0].lines]
    ['utilisation', 'tile_efficiency', 'wave_efficiency']
    """
    g = get_perf_gpu(gpu)
    ns = list(range(256, 4097, 32) if sizes is None else sizes)
    if not ns:
        raise ValueError("sizes must hold at least one N")
    est = [gemm_time_estimate(n if M is None else M, n, K, g, dtype, tile, blocks_per_sm)
           for n in ns]
    fig, ax = style.new_figure((9, 4.2), ax)
    util = [e.utilisation for e in est]
    ax.plot(ns, util, color="#0072B2", lw=1.8, marker="." if len(ns) <= 80 else None,
            gid="utilisation", label="utilisation = tile × wave efficiency")
    ax.plot(ns, [e.tile_efficiency for e in est], color="#009E73", lw=1.0, ls="--",
            gid="tile_efficiency", label="tile efficiency (partial tiles)")
    ax.plot(ns, [e.wave_efficiency for e in est], color="#D55E00", lw=1.0, ls=":",
            gid="wave_efficiency", label=f"wave efficiency (waves of {est[0].concurrent})")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("N" + (" (= M)" if M is None else f" (M = {M})") + f", K = {K}")
    ax.set_ylabel(f"fraction of {est[0].peak_tflops:g} TFLOPS")
    tm, tn = est[0].tile
    ax.set_title(f"{g.name} {est[0].dtype} GEMM: tile ({tm}×{tn}) and wave ({g.sms} SMs × "
                 f"{blocks_per_sm}) quantization", loc="left")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return fig


# --------------------------------------------------------------------------- gallery
register("tensorcore_alignment",
         "one A100 block FMA bit by bit: alignment to maxE, truncation, rounding")(
    lambda: block_alignment(**README_ALIGNMENT_EXAMPLE, gpu="A100"))
register("tensorcore_error_vs_k",
         "error of tensor-core dot products against K: V100, A100, H100 and fp32 summation")(
    lambda: error_vs_k(ks=(16, 64, 256, 1024, 4096, 16384), trials=20))
