"""The gallery: the named figures of the README and the course, rendered to PNG in one call
(``fpsim figures`` on the command line, :mod:`fpsim.cli.figures`; :func:`render` from
Python).

Figure modules register their README figures with :func:`register`; the modules listed in
:data:`FIGURE_MODULES` are imported (when they exist) before the gallery is listed, so a later
module (``fpsim.viz.training``, ``fpsim.viz.tensorcore``) adds its figures by decorating a
builder and nothing else. The three figures of ``fpsim demo`` (``loss_curves_demo``, ...) need
training runs, which the plotting layer does not import: :mod:`fpsim.cli.figures` registers
them (``fpsim figures`` lists them).

>>> "number_line_e4m3" in names()
True
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..state import as_seed
from . import style
from .formats import bit_layouts, format_ranges, number_line
from .rounding import relative_error, rounding_modes, stochastic_rounding

__all__ = ["GalleryFigure", "FIGURE_MODULES", "README_FIGURES", "register", "names", "build",
           "render", "description", "synthetic_gradients"]

# Modules whose figures join the gallery when they exist (imported by names()).
FIGURE_MODULES = ("fpsim.viz.formats", "fpsim.viz.rounding", "fpsim.viz.tensorcore",
                  "fpsim.viz.training")
DEFAULT_OUT = Path("docs") / "figures"
# The figures README.md shows from docs/figures: what `fpsim figures` renders by default.
README_FIGURES = ("bit_layout", "rounding_modes_e4m3", "tensorcore_alignment",
                  "tensorcore_error_vs_k", "format_ranges")


@dataclass(frozen=True)
class GalleryFigure:
    """One named figure: a builder taking no arguments and a line of description."""

    name: str
    build: Callable[[], Figure]
    description: str


_REGISTRY: dict[str, GalleryFigure] = {}


def register(name: str, description: str) -> Callable[[Callable[[], Figure]],
                                                       Callable[[], Figure]]:
    """Decorator adding a no-argument figure builder to the gallery under ``name`` (the PNG
    file name without suffix).

    >>> @register("doc_example", "an empty figure")
    ... def _example():
    ...     return style.new_figure((2, 2))[0]
    >>> "doc_example" in names()
    True
    >>> _ = _REGISTRY.pop("doc_example")
    """
    if not name.replace("_", "").isalnum():
        raise ValueError(f"gallery names are letters, digits and '_', got {name!r}")

    def deco(func: Callable[[], Figure]) -> Callable[[], Figure]:
        if name in _REGISTRY and _REGISTRY[name].build is not func:
            raise ValueError(f"gallery figure {name!r} is already registered")
        _REGISTRY[name] = GalleryFigure(name, func, description)
        return func

    return deco


def _load_modules() -> None:
    for mod in FIGURE_MODULES:
        if importlib.util.find_spec(mod) is not None:
            importlib.import_module(mod)


def names() -> list[str]:
    """Names of the gallery's figures, in registration order."""
    _load_modules()
    return list(_REGISTRY)


def description(name: str) -> str:
    """The one-line description ``name`` was registered with (KeyError for an unknown name).

    >>> description("number_line_e4m3")
    'every positive fp8 e4m3 value, binade by binade'
    """
    names()  # the figure modules register on import
    return _REGISTRY[name].description


def build(name: str) -> Figure:
    """Build the gallery figure ``name``.

    >>> build("number_line_e4m3").axes[0].get_xscale()
    'log'
    """
    all_names = names()
    if name not in _REGISTRY:
        raise ValueError(f"unknown gallery figure {name!r}; valid: {', '.join(all_names)}")
    return _REGISTRY[name].build()


def render(which: Sequence[str] | None = None, outdir: str | Path = DEFAULT_OUT,
           dpi: int = 100, progress: Callable[[str], object] | None = None) -> list[Path]:
    """Render the named figures (all by default) to ``outdir/<name>.png``; returns the paths.
    ``progress`` is called with each name before it is built.

    >>> import tempfile
    >>> [p.name for p in render(["bit_layout"], tempfile.mkdtemp())]
    ['bit_layout.png']
    """
    chosen = names() if which is None else list(which)
    paths = []
    for name in chosen:
        if progress is not None:
            progress(name)
        fig = build(name)
        paths.append(style.save_figure(fig, Path(outdir) / f"{name}.png", dpi=dpi))
    return paths


def synthetic_gradients(n: int = 200_000, seed: int = 0) -> np.ndarray:
    """Synthetic gradient values: normal signs and mantissas times log-normal scales centred
    near 2^-18 (the magnitudes of real activation gradients span many binades below 1).

    >>> g = synthetic_gradients(1000)
    >>> g.shape, bool((g != 0).all())
    ((1000,), True)
    """
    rng = np.random.default_rng(as_seed(seed))
    return rng.standard_normal(n) * np.exp2(rng.normal(-18.0, 5.0, n))


# ---- the core figures (formats, rounding); other modules register their own
register("number_line_e4m3", "every positive fp8 e4m3 value, binade by binade")(
    lambda: number_line("fp8_e4m3"))
register("number_line_fp16_2048", "fp16 around 2048: the spacing doubles from 1 to 2")(
    lambda: number_line("fp16", xmin=2036, xmax=2060, scale="linear"))
register("bit_layout", "the bits of 0.1 in fp32, bf16, fp16, e4m3 and e5m2")(
    lambda: bit_layouts(0.1))
register("rounding_modes", "six rounding modes on fp4 e2m1 over [-2, 2]")(
    lambda: rounding_modes("fp4_e2m1", -2.0, 2.0))
register("rounding_modes_e4m3", "rounding modes on fp8 e4m3 over [1, 1.5], ties marked")(
    lambda: rounding_modes("fp8_e4m3", 1.0, 1.5))
register("stochastic_rounding", "stochastic rounding of 1 + 2^-12 to fp16 is unbiased")(
    lambda: stochastic_rounding("fp16", 1.0 + 2.0**-12))
register("format_ranges", "dynamic ranges against synthetic gradient magnitudes")(
    lambda: format_ranges(data=synthetic_gradients(), data_label="Synthetic gradients"))
register("relative_error", "relative rounding error against the unit roundoff")(
    lambda: relative_error())
