"""The shared look of fpsim's figures: one colour per format, colours for bit fields, rounding
modes and value classes, font sizes, and small helpers every plotting module uses.

Every figure module (formats, rounding, and later training, tensorcore, ...) builds its figures
with :func:`new_figure` inside :func:`context`, takes colours from :func:`format_color` /
:data:`ROLE_COLORS` / :data:`MODE_COLORS`, and labels log2 axes with :func:`log2_axis`, so a
format has the same colour in every figure of the course.

Figures are :class:`Figure` objects (a :class:`matplotlib.figure.Figure` with a PNG repr),
never registered with pyplot: they render headless (Agg), leave no global state behind, and
Jupyter shows a returned figure inline.

>>> from fpsim.viz import style
>>> style.format_color("fp16") == style.format_color("half")
True
>>> fig, ax = style.new_figure((4, 3))
>>> type(fig).__name__
'Figure'
"""

from __future__ import annotations

import contextlib
import functools
import io
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as _MplFigure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

from ..formats import Format, IntFormat, get_format

__all__ = [
    "Figure",
    "FORMAT_COLORS",
    "FIELD_COLORS",
    "FIELD_TEXT_COLORS",
    "ROLE_COLORS",
    "MODE_COLORS",
    "RC",
    "format_color",
    "format_label",
    "mode_color",
    "context",
    "styled",
    "new_figure",
    "root_figure",
    "log2_axis",
    "pow2_label",
    "save_figure",
]

# One colour per format, the same in every figure (Okabe-Ito / Tol colour-blind-safe hues).
FORMAT_COLORS: dict[str, str] = {
    "fp64": "#404040",
    "fp32": "#0072B2",
    "tf32": "#56B4E9",
    "fp16": "#E69F00",
    "bf16": "#009E73",
    "fp8_e4m3": "#CC79A7",
    "fp8_e5m2": "#D55E00",
    "fp8_e4m3fnuz": "#AA4499",
    "fp8_e5m2fnuz": "#882255",
    "fp6_e2m3": "#999933",
    "fp6_e3m2": "#44AA99",
    "fp4_e2m1": "#117733",
    "int32": "#5F5F5F",
    "int16": "#7F7F7F",
    "int8": "#332288",
    "uint8": "#6699CC",
    "int4": "#88CCEE",
    "uint4": "#A5D6E8",
}
# Colours for formats outside the presets, picked by a stable hash of the name.
_FALLBACK = ("#6A3D9A", "#B15928", "#1F78B4", "#33A02C", "#E31A1C", "#FF7F00", "#A6761D")

# Bit-field boxes: light fills with a darker text colour of the same hue.
FIELD_COLORS: dict[str, str] = {"sign": "#F4B6C2", "exponent": "#A8D5BA", "mantissa": "#AFC8F0"}
FIELD_TEXT_COLORS: dict[str, str] = {
    "sign": "#B0173A", "exponent": "#1E7A3C", "mantissa": "#1F4E9C", "value": "#202020",
}

# Classes of values and regions, shared by every figure.
ROLE_COLORS: dict[str, str] = {
    "normal": "#1F4E9C",
    "subnormal": "#D55E00",
    "zero": "#202020",
    "band_even": "#EEF2F8",
    "band_odd": "#DDE4F0",
    "band_subnormal": "#FBE3D3",
    "underflow": "#9ECAE1",
    "overflow": "#F4A582",
    "tie": "#7F7F7F",
    "exact": "#202020",
    "mean": "#D62728",
    "data": "#7F7F7F",
    "bound": "#404040",
}

MODE_COLORS: dict[str, str] = {
    "nearest_even": "#0072B2",
    "nearest_away": "#56B4E9",
    "toward_zero": "#009E73",
    "up": "#D55E00",
    "down": "#CC79A7",
    "odd": "#E69F00",
    "stochastic": "#7F7F7F",
}

# Font sizes and axes look: readable at dpi 100 in a README and on a projector.
RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 12,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "grid.alpha": 0.3,
    "legend.frameon": True,
    "legend.framealpha": 0.9,
    "savefig.dpi": 100,
    "mathtext.default": "regular",
}

F = TypeVar("F", bound=Callable[..., Any])


class Figure(_MplFigure):
    """A matplotlib Figure that Jupyter shows inline when a cell returns it, even if pyplot was
    never imported (IPython asks for ``_repr_png_`` when no figure formatter is registered).

    >>> fig = Figure(figsize=(1, 1))
    >>> fig._repr_png_()[:4]
    b'\\x89PNG'
    """

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def format_color(fmt: Format | IntFormat | str) -> str:
    """The colour of a format (by preset name or alias; a custom format gets a stable one).

    >>> format_color("bfloat16")
    '#009E73'
    """
    f = get_format(fmt)
    name = str(f.name)
    if name in FORMAT_COLORS:
        return FORMAT_COLORS[name]
    return _FALLBACK[zlib.crc32(name.encode()) % len(_FALLBACK)]


def format_label(fmt: Format | IntFormat | str) -> str:
    """A short label: the preset name, with the layout for floats ("fp16 (e5m10)").

    >>> format_label("e4m3")
    'fp8_e4m3 (e4m3)'
    """
    f = get_format(fmt)
    if isinstance(f, IntFormat):
        return str(f.name)
    layout = f"e{f.exponent_bits}m{f.mantissa_bits}"
    return str(f.name) if str(f.name).startswith(layout) else f"{f.name} ({layout})"


def mode_color(mode: str) -> str:
    """The colour of a rounding mode (by its canonical name).

    >>> mode_color("nearest_even")
    '#0072B2'
    """
    return MODE_COLORS.get(str(getattr(mode, "value", mode)), "#404040")


@contextlib.contextmanager
def context() -> Iterator[None]:
    """Apply fpsim's rc settings while figures are built (restored afterwards).

    >>> with context():
    ...     fig, ax = new_figure((3, 2))
    """
    # rc_context changes matplotlib's process-wide rcParams and restores them on exit: two
    # threads building figures at once would each restore the other's settings (one thread
    # at a time; re-entrant, as styled functions call each other)
    with _RC_LOCK, mpl.rc_context(RC):
        yield


_RC_LOCK = threading.RLock()


def styled(func: F) -> F:
    """Decorator: run a figure-building function inside :func:`context`.

    >>> @styled
    ... def empty():
    ...     return new_figure((2, 2))[0]
    >>> float(empty().get_figwidth())
    2.0
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with context():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def new_figure(
    figsize: tuple[float, float], ax: Axes | None = None, nrows: int = 1, ncols: int = 1,
    **subplot_kw: Any,
) -> tuple[Figure, Any]:
    """A new pyplot-free Figure with constrained layout and its axes, or, when ``ax`` is given,
    that axes and its figure (so a plot can go into a panel of a larger figure).

    >>> fig, axes = new_figure((6, 3), ncols=2)
    >>> len(axes)
    2
    """
    if ax is not None:
        return root_figure(ax), ax  # root_figure refuses what is not an Axes
    fig = Figure(figsize=figsize, layout="constrained")  # fpsim's Figure: no pyplot involved
    subplot_kw.setdefault("squeeze", True)
    axes = fig.subplots(nrows, ncols, **subplot_kw)
    return fig, axes


def root_figure(ax: Axes) -> _MplFigure:
    """The top-level figure holding ``ax`` (through subfigures; any matplotlib >= 3.6).

    >>> fig, ax = new_figure((2, 2))
    >>> root_figure(ax) is fig
    True
    """
    if not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    return ax.figure.figure  # a Figure's .figure is itself, a SubFigure's is its root


def pow2_label(k: int) -> str:
    """Mathtext label of 2**k.

    >>> pow2_label(-6)
    '$2^{-6}$'
    """
    return f"$2^{{{int(k)}}}$"


def log2_axis(ax: Axes, lo: float, hi: float, axis: str = "x", max_ticks: int = 12) -> None:
    """Log-base-2 scale on ``axis`` over [lo, hi] (lo > 0), major ticks at powers of two
    labelled 2^k (every k-th power when the range is wide), or plain numbers when the range
    spans less than a factor of 4.

    >>> fig, ax = new_figure((4, 2))
    >>> log2_axis(ax, 2.0**-10, 2.0**10)
    >>> ax.get_xscale()
    'log'
    """
    if not 0 < lo < hi:
        raise ValueError(f"a log2 axis needs 0 < lo < hi, got lo={lo!r}, hi={hi!r}")
    set_scale = ax.set_xscale if axis == "x" else ax.set_yscale
    set_lim = ax.set_xlim if axis == "x" else ax.set_ylim
    target = ax.xaxis if axis == "x" else ax.yaxis
    set_scale("log", base=2)
    set_lim(lo, hi)
    klo = int(np.frexp(lo)[1]) - 1  # exact exponents: frexp gives lo = f * 2**e, f in [0.5, 1)
    khi = int(np.frexp(hi)[1])
    if khi - klo < 3:
        # less than two binades: powers of two would give one tick; plain numbers read better
        target.set_major_locator(MaxNLocator(nbins=6))
        target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        target.set_minor_locator(FixedLocator([]))
        target.set_minor_formatter(NullFormatter())
        return
    step = 1
    for s in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        step = s
        if (khi - klo) / s <= max_ticks:
            break
    ks = np.arange(-(-klo // step) * step, khi + 1, step)
    target.set_major_locator(FixedLocator(np.ldexp(1.0, ks)))
    target.set_major_formatter(
        FuncFormatter(lambda v, _pos: pow2_label(int(np.frexp(v)[1]) - 1) if v > 0 else "0")
    )
    minor = np.arange(klo, khi + 1)
    target.set_minor_locator(FixedLocator(np.ldexp(1.0, minor) if step <= 8 else []))
    target.set_minor_formatter(NullFormatter())


def save_figure(fig: _MplFigure, path: str | Path, dpi: int = 100,
                palette: bool = True) -> Path:
    """Write ``fig`` to ``path`` at ``dpi`` (PNG, or the format of the suffix); makes parent
    folders. A PNG is reduced to a 256-colour palette (``palette=True``): flat-colour figures
    look the same at a third of the size, which keeps the repository's figures small.

    >>> import tempfile, os
    >>> fig, ax = new_figure((2, 2))
    >>> p = save_figure(fig, os.path.join(tempfile.mkdtemp(), "a", "empty.png"))
    >>> p.stat().st_size > 0
    True
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() != ".png" or not palette:
        fig.savefig(path, dpi=dpi)
        return path
    from PIL import Image  # matplotlib depends on Pillow

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    image = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                           dither=Image.Dither.NONE)
    image.save(path, format="png", optimize=True)  # no version metadata: byte-stable
    return path
