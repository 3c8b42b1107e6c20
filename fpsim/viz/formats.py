"""Figures of what a format can represent: the number line binade by binade, the bit fields of
one value, and the dynamic ranges of several formats against real data.

>>> from fpsim.viz import number_line
>>> fig = number_line("fp4_e2m1")
>>> fig.axes[0].get_title(loc="left")
'fp4_e2m1 (e2m1): sign + 2 exponent + 1 mantissa bits, bias 1'
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..encoding import classify, fields
from ..flags import Flags
from ..formats import Format, NaNEncoding
from ..modes import as_rounding
from ..rounding import round as fp_round
from . import style
from ._common import exact_decimal, finite_real, float_format, values_between

__all__ = [
    "number_line",
    "bit_layout",
    "bit_layouts",
    "format_ranges",
    "range_stats",
    "DEFAULT_RANGE_FORMATS",
]

DEFAULT_RANGE_FORMATS = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
_SCALES = ("log2", "linear")
# A format with at most this many positive values is drawn whole by default; a wider one
# (fp16, bf16, ...) shows a window of _ZOOM values either side of 1.
_WHOLE = 256
_ZOOM = 16
# format_ranges' default view clips format ranges to [2**-_VIEW, 2**_VIEW] (data is never clipped)
_VIEW = 40


# --------------------------------------------------------------------------- number line
def _check_scale(scale: str) -> str:
    if scale not in _SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(map(repr, _SCALES))}")
    return scale


def _count_positive(f: Format) -> int:
    """Positive finite values of f (every pattern from the smallest subnormal to max)."""
    from ..encoding import to_bits

    return int(to_bits(f.max, f)) - int(to_bits(f.smallest_subnormal, f)) + 1


def _default_window(f: Format, scale: str) -> tuple[float, float]:
    if _count_positive(f) <= _WHOLE:
        return (f.smallest_subnormal if scale == "log2" else 0.0), f.max
    below = math.ldexp(1.0, f.negep)  # spacing just below 1
    return 1.0 - _ZOOM * below, 1.0 + _ZOOM * f.eps


def _binades(f: Format, a: float, b: float) -> list[tuple[float, float, int | None]]:
    """Bands covering the magnitudes [a, b] (0 <= a < b): (left, right, exponent), exponent
    None for the subnormal range [0, 2**emin)."""
    out: list[tuple[float, float, int | None]] = []
    tiny = f.smallest_normal
    if a < tiny:
        out.append((a, min(b, tiny), None))
    k = max(int(np.frexp(max(a, tiny))[1]) - 1, f.emin)
    while math.ldexp(1.0, k) < b and k <= f.emax:
        left, right = math.ldexp(1.0, k), math.ldexp(1.0, k + 1)
        out.append((max(a, left), min(b, right), k))
        k += 1
    return out


def _overflow_note(f: Format) -> str:
    if f.has_infinity:
        return "overflow: rounds to inf"
    if f.has_nan:
        return "overflow: NaN (no inf)"
    return "overflow: saturates at max"


@style.styled
def number_line(
    fmt: Format | str,
    *,
    xmin: float | None = None,
    xmax: float | None = None,
    scale: str = "log2",
    ax: Axes | None = None,
) -> Figure:
    """The representable values of ``fmt`` in [xmin, xmax], binade by binade: each binade
    [2^k, 2^(k+1)) a band labelled with its spacing, a tick per value, subnormals in their own
    colour, and the smallest subnormal, smallest normal and largest value annotated.

    By default a format of at most 256 positive values (fp8, fp6, fp4) is shown whole (its
    positive half; negatives mirror it); a wider one shows 16 values either side of 1 (pass
    ``xmin`` / ``xmax`` for another window, e.g. fp16 near 2048). ``scale`` is ``"log2"``
    (equal width per binade; needs xmin > 0) or ``"linear"`` (spacing doubling per binade).

    >>> fig = number_line("fp8_e4m3")
    >>> len(fig.axes)
    1
    >>> fig = number_line("fp16", xmin=2040, xmax=2060, scale="linear")
    """
    f = float_format(fmt)
    _check_scale(scale)
    d_lo, d_hi = _default_window(f, scale)
    lo = d_lo if xmin is None else finite_real(xmin, "xmin")
    hi = d_hi if xmax is None else finite_real(xmax, "xmax")
    if not lo < hi:
        raise ValueError(f"need xmin < xmax, got xmin={lo!r}, xmax={hi!r}")
    if scale == "log2" and lo <= 0:
        raise ValueError(f"a log2 number line needs xmin > 0 (got {lo!r}); use scale='linear'")
    vals = values_between(f, lo, hi)

    fig, ax = style.new_figure((10, 2.9), ax)
    # axis limits a little beyond [lo, hi] so the end ticks are visible
    if scale == "log2":
        pad = 2.0 ** (0.02 * math.log2(hi / lo))
        alo, ahi = lo / pad, hi * pad
        style.log2_axis(ax, alo, ahi, max_ticks=20)
        frac = lambda x: math.log2(x / alo) / math.log2(ahi / alo)  # noqa: E731
    else:
        pad = 0.02 * (hi - lo)
        alo, ahi = lo - pad, hi + pad
        ax.set_xlim(alo, ahi)
        frac = lambda x: (x - alo) / (ahi - alo)  # noqa: E731
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.spines["left"].set_visible(False)

    # bands per binade, mirrored for negative values
    bands: list[tuple[float, float, int | None]] = []
    if ahi > 0:
        bands += _binades(f, max(alo, 0.0), min(ahi, f.max))
    if alo < 0:
        bands += [(-b, -a, k) for a, b, k in _binades(f, max(-ahi, 0.0), min(-alo, f.max))]
    label_bands = len(bands) <= 24
    for a, b, k in bands:
        color = (style.ROLE_COLORS["band_subnormal"] if k is None else
                 style.ROLE_COLORS["band_even" if k % 2 == 0 else "band_odd"])
        ax.axvspan(a, b, color=color, lw=0, zorder=0, gid=f"band:{'sub' if k is None else k}")
        if label_bands and frac(b) - frac(a) >= 0.045:
            step = f.emin - f.mantissa_bits if k is None else k - f.mantissa_bits
            mid = math.sqrt(a * b) if scale == "log2" and a > 0 else (a + b) / 2
            ax.text(mid, 0.68, "Δ=" + style.pow2_label(step), ha="center", va="bottom",
                    fontsize=8, color="#505050", zorder=3)
    for edge, side in ((f.max, 1), (-f.max, -1)):
        if (side > 0 and ahi > edge) or (side < 0 and alo < edge):
            a, b = (edge, ahi) if side > 0 else (alo, edge)
            ax.axvspan(a, b, color=style.ROLE_COLORS["overflow"], alpha=0.5, lw=0, zorder=0,
                       gid="overflow")

    # one tick per value: normal, subnormal and zero in their colours
    sub = (vals != 0) & (np.abs(vals) < f.smallest_normal)
    groups = (("normal", (vals != 0) & ~sub, 1.0), ("subnormal", sub, 1.0),
              ("zero", vals == 0, 1.6))
    for role, mask, width in groups:
        if mask.any():
            ax.vlines(vals[mask], 0.3, 0.62, colors=style.ROLE_COLORS[role],
                      lw=width if len(vals) < 400 else 0.5, zorder=2, gid=f"values:{role}",
                      label=f"{role} values ({int(mask.sum())})" if role != "zero" else "zero")

    # the three landmarks of the range
    marks = [(f.smallest_subnormal, "min subnormal", "below", "left"),
             (f.smallest_normal, "min normal", "above", "center"),
             (f.max, "max", "below", "right")]
    if not f.subnormals:
        marks = marks[1:]
    for x, name, where, ha in marks:
        if not lo <= x <= hi:
            continue
        k = int(np.frexp(x)[1]) - 1
        num = exact_decimal(x, 10)
        num = f"≈ {x:.6g}" if num.startswith("≈") else f"= {num}"
        text = (f"{name} {num}" if name == "max" and x != 2.0 ** k
                else f"{name} {style.pow2_label(k)} {num}")
        if name == "max":
            text += f"\n{_overflow_note(f)}"
        if frac(x) < 0.15:
            ha = "left"  # keep the text inside the axes near its edges
        elif frac(x) > 0.85:
            ha = "right"
        ytext, ytip = (0.93, 0.63) if where == "above" else (0.1, 0.29)
        ax.annotate(text, xy=(x, ytip), xytext=(x, ytext), ha=ha, va="center", fontsize=9,
                    arrowprops={"arrowstyle": "->", "color": "#303030", "lw": 0.9},
                    zorder=4, gid=f"mark:{name}")

    ax.set_title(
        f"{style.format_label(f)}: sign + {f.exponent_bits} exponent + {f.mantissa_bits} "
        f"mantissa bits, bias {f.bias}", loc="left")
    side = " (positive half; negatives mirror it)" if lo >= 0 else ""
    ax.set_xlabel(("value, log2 scale: every binade equally wide" if scale == "log2" else
                   "value, linear scale: the spacing doubles every binade") + side)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        # above the axes, right of the title: inside it would cover values or annotations
        ax.legend(handles, labels, loc="lower right", fontsize=8, ncols=3,
                  bbox_to_anchor=(1.0, 1.0), borderaxespad=0.1, frameon=False,
                  handlelength=0.8, columnspacing=1.0)
    return fig


# --------------------------------------------------------------------------- bit layout
def _bits(n: int, width: int) -> str:
    return format(int(n), f"0{width}b") if width else ""


def _describe(value: float, f: Format, rounding: str) -> dict:
    """Fields and their decoded meaning for one value rounded to f."""
    x = finite_or_special(value)
    stored = float(fp_round(x, f, rounding))
    fl = fields(x, f, rounding)
    s, e, m = int(fl.sign), int(fl.exponent), int(fl.mantissa)
    kind = classify(x, f, rounding)
    E, M = f.exponent_bits, f.mantissa_bits
    ebits, mbits = _bits(e, E), _bits(m, M)
    sign_txt = f"sign  {s}  →  {'−1' if s else '+1'}"
    if kind in ("normal", "subnormal"):
        unb = int(fl.unbiased_exponent)
        lead = "1" if kind == "normal" else "0"
        frac = m / (1 << M) if M else 0.0
        sig = (1.0 if kind == "normal" else 0.0) + frac
        if kind == "normal":
            exp_txt = (f"exponent  {ebits}₂ = {e}  →  2^({e} − {f.bias}) = "
                       f"{style.pow2_label(unb)}")
        else:
            exp_txt = (f"exponent  {ebits}₂: subnormal  →  2^(1 − {f.bias}) = "
                       f"{style.pow2_label(unb)}")
        man_txt = f"mantissa  {lead}.{mbits or '0'}₂ = {exact_decimal(sig, 30)}"
        val_txt = (f"value  {'−' if s else '+'}1 × {style.pow2_label(unb)} × "
                   f"{exact_decimal(sig, 30)} = {exact_decimal(stored, 30)}")
    else:
        if kind == "zero":
            exp_txt = f"exponent  {ebits}₂ and mantissa all zeros: zero"
        elif kind == "infinity":
            exp_txt = f"exponent  {ebits}₂ all ones, mantissa 0: infinity"
        elif f.nan_encoding is NaNEncoding.FNUZ:
            exp_txt = f"exponent  {ebits}₂, sign 1, mantissa 0 (the pattern of −0): the one NaN"
        elif f.nan_encoding is NaNEncoding.FN:
            exp_txt = f"exponent  {ebits}₂ and mantissa all ones: NaN (this format has no inf)"
        else:
            exp_txt = f"exponent  {ebits}₂ all ones, mantissa ≠ 0: NaN"
        man_txt = f"mantissa  {mbits or '-'}₂"
        val_txt = f"value  {exact_decimal(stored) if kind != 'nan' else 'NaN'}"
    if math.isnan(x) or math.isnan(stored):
        change = "" if math.isnan(x) else "  (out of range → NaN)"
    elif stored == x:
        change = "  (exact)"
    elif math.isinf(stored) and not math.isinf(x):
        change = "  (overflow)"
    elif abs(x) > f.max:
        change = "  (overflow: saturated at max)"
    else:
        err = stored - x
        rel = f", rel. {err / x:+.2e}" if x != 0 else ""
        change = f"  (error {err:+.3g}{rel})"
    title = (f"{style.format_label(f)}:  {x!r}  →  "
             f"{exact_decimal(stored, 30) if not math.isnan(stored) else 'NaN'}{change}")
    return {"sign": s, "exponent": e, "mantissa": m, "bits": int(fl.bits), "stored": stored,
            "kind": kind, "ebits": ebits, "mbits": mbits, "title": title,
            "lines": (("sign", sign_txt), ("exponent", exp_txt), ("mantissa", man_txt),
                      ("value", val_txt))}


def finite_or_special(value: object) -> float:
    """A real number (inf / NaN allowed: their encodings are part of the lesson)."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"value must be a real number, got {value!r}")
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001 - anything that is not array-like is a bad value
        raise ValueError(f"value must be a real number, got {value!r}") from None
    if arr.ndim != 0 or arr.dtype.kind not in "iuf":
        raise ValueError(f"value must be one real number, got {value!r}")
    return float(arr)


# layout of a bit panel, in box units (one box = one bit)
_LINE_PT = 15.5  # text line height in points
_BOX_IN = 0.3  # inches per box for formats up to 32 bits


def _panel_units(u: float) -> tuple[float, float]:
    """(line height, panel height) in box units for u inches per box."""
    line = _LINE_PT / 72.0 / u
    return line, 1.0 + 2.2 * line + 5.3 * line


def _draw_panel(ax: Axes, info: dict, f: Format, u: float, width: float) -> None:
    """Draw one format's bit boxes and decoded meaning into ax (box units, origin bottom-left)."""
    line, height = _panel_units(u)
    ax.set_xlim(-0.3, width + 0.3)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    y_box = height - 1.0 - 2.2 * line  # bottom of the boxes
    ax.text(0, height - 0.2 * line, info["title"], ha="left", va="top", fontsize=10.5,
            fontweight="bold")
    bits = _bits(info["bits"], f.bits)
    field_of = ["sign"] + ["exponent"] * f.exponent_bits + ["mantissa"] * f.mantissa_bits
    fs_bit = max(6.0, min(11.0, u * 72 * 0.5))
    for i, (b, name) in enumerate(zip(bits, field_of, strict=True)):
        ax.add_patch(Rectangle((i, y_box), 1, 1, facecolor=style.FIELD_COLORS[name],
                               edgecolor="#404040", lw=0.8, gid=f"bit:{name}"))
        ax.text(i + 0.5, y_box + 0.5, b, ha="center", va="center", fontsize=fs_bit,
                family="DejaVu Sans Mono", gid=f"bitval:{i}")
    # field names above their boxes, abbreviated when the field is narrow
    spans = (("sign", 0, 1), ("exponent", 1, 1 + f.exponent_bits),
             ("mantissa", 1 + f.exponent_bits, f.bits))
    for name, a, b in spans:
        if b <= a:
            continue
        w_in = (b - a) * u
        # the longest label that fits over the field (8.5 pt text: ~0.075 in per character)
        fits = [t for t in (f"{name} ({b - a} bits)", name, name[:3], name[0])
                if len(t) * 0.075 <= w_in + 0.05]
        label = fits[0] if fits else name[0]
        ax.text((a + b) / 2, y_box + 1.0 + 0.15 * line, label, ha="center", va="bottom",
                fontsize=8.5, color=style.FIELD_TEXT_COLORS[name])
    ax.text(f.bits + 0.3, y_box + 0.5, f"0x{info['bits']:0{(f.bits + 3) // 4}X}", ha="left",
            va="center", fontsize=9, color="#505050", family="DejaVu Sans Mono")
    for j, (name, text) in enumerate(info["lines"]):
        ax.text(0, y_box - (j + 1) * line, text, ha="left", va="baseline", fontsize=9.5,
                color=style.FIELD_TEXT_COLORS[name], gid=f"meaning:{name}")


def _check_rounding(rounding: str) -> str:
    mode = as_rounding(rounding)
    if mode.value == "stochastic":
        raise ValueError("bit_layout shows one deterministic result; choose a rounding mode "
                         "other than 'stochastic'")
    return mode.value


@style.styled
def bit_layouts(value: float, fmts: Sequence[Format | str] = ("fp32", "bf16", "fp16",
                                                                 "fp8_e4m3", "fp8_e5m2"),
                rounding: str = "nearest_even") -> Figure:
    """The bit fields of ``value`` rounded to each format, one panel per format, boxes of equal
    size so the widths compare: sign | exponent | mantissa coloured, the pattern in hex, and
    the decoded meaning (sign, 2^(e - bias), 1.mantissa or 0.mantissa for subnormals, value).

    >>> fig = bit_layouts(0.1, ["fp16", "bf16"])
    >>> len(fig.axes)
    2
    """
    if isinstance(fmts, (str, Format)):
        fmts = [fmts]
    fs = [float_format(f) for f in fmts]
    if not fs:
        raise ValueError("bit_layouts needs at least one format")
    mode = _check_rounding(rounding)
    x = finite_or_special(value)
    width_bits = max(f.bits for f in fs)
    u = _BOX_IN if width_bits <= 32 else 0.16
    text_in = 6.3  # room for the meaning lines, whatever the width of the boxes
    hex_in = 0.1 + 0.08 * (2 + (width_bits + 3) // 4)  # the pattern in hex after the boxes
    width = max(width_bits + 0.3 + hex_in / u, text_in / u)  # in box units
    line, height = _panel_units(u)
    margin = 0.15
    fig_w = width * u + 2 * margin + 0.2
    panel_h = height * u
    fig_h = panel_h * len(fs) + 2 * margin
    fig = style.Figure(figsize=(fig_w, fig_h))
    for i, f in enumerate(fs):
        bottom = fig_h - margin - (i + 1) * panel_h
        ax = fig.add_axes((margin / fig_w, bottom / fig_h, (fig_w - 2 * margin) / fig_w,
                           panel_h / fig_h))
        _draw_panel(ax, _describe(x, f, mode), f, u, width)
    return fig


@style.styled
def bit_layout(value: float, fmt: Format | str, rounding: str = "nearest_even", *,
               ax: Axes | None = None) -> Figure:
    """The bit fields of ``value`` rounded to ``fmt`` as coloured boxes with their decoded
    meaning; see :func:`bit_layouts` for several formats. With ``ax`` the panel is drawn into
    that axes (sized for it).

    >>> fig = bit_layout(-1.5, "fp16")
    >>> [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "meaning:value"]
    ['value  −1 × $2^{0}$ × 1.5 = -1.5']
    """
    f = float_format(fmt)
    if ax is None:
        return bit_layouts(value, [f], rounding)
    mode = _check_rounding(rounding)
    fig = style.root_figure(ax)
    bbox = ax.get_position()
    ax_w_in = bbox.width * fig.get_figwidth()
    width = f.bits + 2.5
    u = ax_w_in / (width + 0.6)
    _draw_panel(ax, _describe(finite_or_special(value), f, mode), f, u, width)
    return fig


# --------------------------------------------------------------------------- ranges
def range_stats(data, fmt: Format | str, rounding: str = "nearest_even") -> dict[str, float]:
    """What rounding ``data`` to ``fmt`` does to its nonzero finite values: the fractions that
    underflow to zero, land on a subnormal, stay normal, or overflow (IEEE overflow: the
    result is inf, NaN, or max for a format that saturates), and how many values were counted.

    >>> s = range_stats([1e-9, 1e-6, 1.0, 1e6], "fp16")
    >>> s["underflow"], s["subnormal"], s["normal"], s["overflow"], s["count"]
    (0.25, 0.25, 0.25, 0.25, 4)
    """
    f = float_format(fmt)
    arr = np.asarray(data)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"data must be real numbers, got dtype {arr.dtype}")
    x = arr.astype(np.float64).ravel()
    x = x[np.isfinite(x) & (x != 0)]
    n = x.size
    if n == 0:
        return {"underflow": 0.0, "subnormal": 0.0, "normal": 0.0, "overflow": 0.0, "count": 0}
    r, fl = fp_round(x, f, rounding, flags=True)
    a = np.abs(np.asarray(r))
    over = (np.asarray(fl) & np.uint8(Flags.OVERFLOW)) != 0
    under = (a == 0) & ~over
    sub = (a > 0) & (a < f.smallest_normal) & ~over
    normal = ~(over | under | sub)
    return {"underflow": float(under.mean()), "subnormal": float(sub.mean()),
            "normal": float(normal.mean()), "overflow": float(over.mean()), "count": int(n)}


def _pct(v: float) -> str:
    if v == 0:
        return "0%"
    if v < 0.001:
        return "<0.1%"
    return f"{100 * v:.1f}%" if v < 0.1 else f"{100 * v:.0f}%"


@style.styled
def format_ranges(
    fmts: Sequence[Format | str] = DEFAULT_RANGE_FORMATS,
    data=None,
    data_label: str | None = None,
    *,
    xlim: tuple[float, float] | None = None,
) -> Figure:
    """The dynamic range of each format on a log2 axis of magnitudes: subnormals from the
    smallest subnormal to 2^emin (light), normals from 2^emin to max (solid), the underflow
    region below the smallest subnormal and the overflow region above max shaded. With
    ``data``, a histogram of its magnitudes above, and per format the share of the data that
    underflows, turns subnormal or overflows (:func:`range_stats`).

    The default view covers the data and each format's range clipped to [2^-40, 2^40] (fp32 /
    bf16 reach 2^-149 / 2^128 and would squeeze the rest; their bars run off the axis with
    their end values written at the edge); ``xlim=(lo, hi)`` sets another view.

    >>> fig = format_ranges(["fp16", "bf16"])
    >>> sorted(p.get_gid() for p in fig.axes[-1].patches)[:2]
    ['normal:bf16', 'normal:fp16']
    """
    if isinstance(fmts, (str, Format)):
        fmts = [fmts]
    fs = [float_format(f) for f in fmts]
    if not fs:
        raise ValueError("format_ranges needs at least one format")
    mags = None
    if data is not None:
        arr = np.asarray(data)
        if arr.dtype.kind not in "iuf":
            raise ValueError(f"data must be real numbers, got dtype {arr.dtype}")
        x = np.abs(arr.astype(np.float64).ravel())
        mags = x[np.isfinite(x) & (x > 0)]
        if mags.size == 0:
            raise ValueError("data has no nonzero finite values to plot")
    if xlim is None:
        # exact binade exponents by frexp; format ranges clipped to +-_VIEW binades
        klo = max(min(f.emin - f.mantissa_bits for f in fs), -_VIEW) - 3
        khi = min(max(f.emax + 1 for f in fs), _VIEW) + 3
        if mags is not None:
            klo = min(klo, int(np.frexp(mags.min())[1]) - 3)
            khi = max(khi, int(np.frexp(mags.max())[1]) + 2)
        alo, ahi = math.ldexp(1.0, klo), math.ldexp(1.0, khi)
    else:
        alo, ahi = (finite_real(v, "xlim") for v in xlim)
        if not 0 < alo < ahi:
            raise ValueError(f"xlim must satisfy 0 < lo < hi, got {xlim!r}")

    n = len(fs)
    rows_h = 0.62 * n + 0.9
    if mags is None:
        fig, axr = style.new_figure((10, rows_h))
        axh = None
    else:
        fig, (axh, axr) = style.new_figure((10, rows_h + 2.3), nrows=2, sharex=True,
                                           height_ratios=[2.3, rows_h])
    style.log2_axis(axr, alo, ahi)
    axr.set_ylim(-0.6, n - 0.4)
    edge_lo, edge_hi = alo * 1.25, ahi / 1.25  # where clipped end values are written
    labels = []
    for i, f in enumerate(fs):
        y = n - 1 - i
        col = style.format_color(f)
        ss, tiny, mx = f.smallest_subnormal, f.smallest_normal, f.max
        # true geometry (the axis clips it): underflow (0, ss), overflow (max, inf)
        far_lo, far_hi = min(alo, ss) / 2, max(ahi, mx) * 2
        shade = {"alpha": 0.55, "lw": 0}
        axr.add_patch(Rectangle((far_lo, y - 0.4), ss - far_lo, 0.8, gid=f"underflow:{f.name}",
                                color=style.ROLE_COLORS["underflow"], **shade))
        axr.add_patch(Rectangle((mx, y - 0.4), far_hi - mx, 0.8, gid=f"overflow:{f.name}",
                                color=style.ROLE_COLORS["overflow"], **shade))
        if f.subnormals:
            axr.add_patch(Rectangle((ss, y - 0.25), tiny - ss, 0.5, facecolor=col, alpha=0.35,
                                    edgecolor=col, lw=0.8, gid=f"subnormal:{f.name}"))
        axr.add_patch(Rectangle((tiny, y - 0.25), mx - tiny, 0.5, color=col, lw=0,
                                gid=f"normal:{f.name}"))
        kss = int(np.frexp(ss)[1]) - 1
        text = {"va": "center", "fontsize": 8.5, "color": "#303030"}
        # an end beyond the view is written in white on the bar at the edge
        if ss / 1.15 > edge_lo:
            axr.text(ss / 1.15, y, style.pow2_label(kss), ha="right", **text)
        else:
            axr.text(edge_lo, y, "◀ " + style.pow2_label(kss), ha="left", **{**text,
                                                                            "color": "white"})
        if mx * 1.3 < edge_hi:
            axr.text(mx * 1.3, y, f"{mx:.4g}", ha="left", **text)
        else:
            axr.text(edge_hi, y, f"{mx:.3g} ▶", ha="right", **{**text, "color": "white"})
        label = style.format_label(f)
        if mags is not None:
            st = range_stats(mags, f)
            label += (f"\nunder {_pct(st['underflow'])} · sub {_pct(st['subnormal'])}"
                      f" · over {_pct(st['overflow'])}")
        labels.append(label)
    axr.set_yticks(range(n - 1, -1, -1), labels)
    for t, f in zip(axr.get_yticklabels(), fs, strict=True):
        t.set_color(style.format_color(f))
    axr.tick_params(axis="y", length=0)
    axr.spines["left"].set_visible(False)
    axr.set_xlabel("magnitude |x| (log2 scale)")
    key = [Rectangle((0, 0), 1, 1, color="#808080"),
           Rectangle((0, 0), 1, 1, color="#808080", alpha=0.35),
           Rectangle((0, 0), 1, 1, color=style.ROLE_COLORS["underflow"], alpha=0.55),
           Rectangle((0, 0), 1, 1, color=style.ROLE_COLORS["overflow"], alpha=0.55)]
    key_labels = ["normal", "subnormal", "underflow (→ 0)", "overflow (→ inf / NaN)"]
    title = "Dynamic range of each format: smallest subnormal … smallest normal … max"
    if axh is None:
        axr.set_title(title, loc="left")
        fig.legend(key, key_labels, loc="outside lower center", ncols=4, fontsize=8.5,
                   frameon=False)
        return fig
    bins = np.ldexp(1.0, np.arange(int(np.frexp(mags.min())[1]) - 1,
                                   int(np.frexp(mags.max())[1]) + 1))
    counts, edges = np.histogram(mags, bins=bins)
    hist = axh.stairs(counts / mags.size, edges, fill=True, color=style.ROLE_COLORS["data"],
                      alpha=0.6, gid="data:histogram")
    for f in fs:
        for x in (f.smallest_subnormal, f.max):
            axh.axvline(x, color=style.format_color(f), lw=1.0, ls="--", alpha=0.8,
                        gid=f"limit:{f.name}")
    limits = axh.plot([], [], color="#606060", lw=1.0, ls="--")[0]
    axh.set_ylabel("share per binade")
    axh.set_title(f"{data_label or 'Data'} ({mags.size} nonzero values) against the "
                  "dynamic range of each format", loc="left")
    axh.legend([hist, limits, *key],
               [data_label or "data", "smallest subnormal / max (format colours)", *key_labels],
               loc="best", fontsize=8, ncols=2)
    return fig
