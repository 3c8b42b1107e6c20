"""Figures for teaching with fpsim: what a format represents, how rounding maps the reals,
and (from later modules) what tensor cores and mixed-precision training do.

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot, so it renders
headless (Agg), leaves no global state behind and shows inline in Jupyter when returned; save
it with ``fig.savefig(path)`` or :func:`style.save_figure`. The shared look (a colour per
format, fonts, log2 axes) lives in :mod:`fpsim.viz.style`; :mod:`fpsim.viz.gallery` renders
the README figures (``fpsim figures``).

Modules: ``formats`` (number line, bit layout, dynamic ranges), ``rounding`` (rounding modes,
stochastic rounding, relative error), ``tensorcore`` (one block FMA bit by bit, error against
K, tile / wave quantization); ``training`` plugs in the same way.

>>> import fpsim.viz as viz
>>> fig = viz.number_line("fp8_e5m2")
>>> fig.axes[0].get_xscale()
'log'
"""

from . import style
from .formats import bit_layout, bit_layouts, format_ranges, number_line, range_stats
from .rounding import relative_error, rounding_modes, stochastic_rounding
from .tensorcore import block_alignment, error_vs_k, gemm_efficiency

__all__ = [
    "style",
    "number_line",
    "bit_layout",
    "bit_layouts",
    "format_ranges",
    "range_stats",
    "rounding_modes",
    "stochastic_rounding",
    "relative_error",
    "block_alignment",
    "error_vs_k",
    "gemm_efficiency",
]
