"""``fpsim figures [NAME...] [--all] [--out DIR] [--dpi N] [--list] [--demo-cache DIR]``: list
or render the gallery's figures (:mod:`fpsim.viz.gallery`) from the command line.

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (``--out``), :func:`configure_parser`
and :func:`run_cli`. It sits above the gallery and the figure modules, so the gallery imports
none of them back. It also adds to the gallery the three figures of ``fpsim demo``
(``loss_curves_demo``, ``loss_scale_demo``, ``gradient_histogram_demo``): they draw runs of
:mod:`fpsim.training` with :mod:`fpsim.viz.training`, which do not import each other, so they
are joined here. Their runs are the ones a previous ``fpsim demo`` saved
(:func:`load_cached_demo`), else ``fpsim demo --quick`` trained once for the process
(:func:`demo_runs`).

>>> {"loss_curves_demo", "bit_layout"} <= set(gallery.names())
True
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path
from typing import Any

from ..training.experiment import DEFAULT_OUT as DEMO_OUT  # where `fpsim demo` saves its runs
from ..training.experiment import check_out_dir, default_workers, run_demo
from ..training.recipes import PRECISIONS
from ..viz import gallery, style
from ..viz.gallery import DEFAULT_OUT, README_FIGURES, description, names, render
from ..viz.training import demo_figures
from .common import Output, OutputKind
from .demo import DEMO_CACHE_FILE

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "DEMO_OUT", "MAX_DPI",
           "demo_runs", "load_cached_demo", "prime_demo_runs"]

HELP = "render the README figures to PNG files"
OUTPUTS = (Output("out", OutputKind.DIR, unless="list"),)
# a print shop's resolution: 100000 dpi made a 1.2-gigapixel-per-inch bitmap per figure, and
# matplotlib died allocating it (std::bad_alloc, a traceback)
MAX_DPI = 1200

_DEMO_CACHE: dict[str, list] = {}


def load_cached_demo(path: Any) -> list | None:
    """The runs a previous ``fpsim demo`` saved in ``path`` (a folder or the pickle file),
    or None when there is none. Load only files your own ``fpsim demo`` wrote (pickle).

    >>> import tempfile
    >>> load_cached_demo(tempfile.mkdtemp()) is None
    True
    """
    p = Path(path)
    if p.is_dir():
        p = p / DEMO_CACHE_FILE
    if not p.is_file():
        return None
    try:
        with p.open("rb") as fh:
            obj = pickle.load(fh)
    except Exception:  # an old or foreign file: rerun the demo instead
        return None
    return obj.get("runs") if isinstance(obj, dict) else None


def _demo_key(quick: bool, seed: int) -> str:
    return f"{quick}:{seed}"


def prime_demo_runs(cache: Any, progress: bool = False) -> None:
    """Make the demo figures' runs ready: reuse the runs a previous ``fpsim demo`` saved in
    ``cache`` (a folder or its pickle), else train ``fpsim demo --quick`` once for the process.
    Says on stdout which it does."""
    key = _demo_key(quick=True, seed=0)  # what demo_runs() trains by default
    if key in _DEMO_CACHE:
        return
    cached = load_cached_demo(cache)
    if cached is not None:
        print(f"demo figures: reusing the runs in {cache}", flush=True)
        _DEMO_CACHE[key] = cached
    else:
        print("demo figures: training the demo (fpsim demo --quick; about half a minute "
              "of CPU)", flush=True)
        demo_runs(progress=progress)


def demo_runs(quick: bool = True, seed: int = 0, progress: bool = False) -> list:
    """The runs of ``fpsim demo --quick`` (cached for the process; the gallery's demo figures
    share them); the first call trains the seven recipes (about half a minute of CPU).
    """
    key = _demo_key(quick, seed)
    if key not in _DEMO_CACHE:
        _DEMO_CACHE[key] = run_demo(quick=quick, seed=seed, progress=progress,
                                    workers=default_workers(len(PRECISIONS)))
    return _DEMO_CACHE[key]


def _register_demo_figures() -> None:
    names()  # the figure modules' own figures first: the demo's come last, as listed before
    for name, key, text in (
            ("loss_curves_demo", "loss_curves",
             "fpsim demo: the training loss of each recipe over fp32's"),
            ("loss_scale_demo", "loss_scale",
             "fpsim demo: the dynamic loss scale, skipped steps marked"),
            ("gradient_histogram_demo", "gradient_histogram",
             "fpsim demo: exact gradient exponents, unscaled and scaled, vs FP16's range")):

        def build(key: str = key) -> style.Figure:
            return demo_figures(demo_runs())[key]

        gallery.register(name, text)(build)


_register_demo_figures()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of the ``figures`` subcommand.

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> p.parse_args([]).out
    'docs/figures'
    """
    parser.add_argument("names", nargs="*",
                        help="figures to render (default: the ones README.md shows, "
                             f"{', '.join(README_FIGURES)})")
    parser.add_argument("--all", action="store_true",
                        help="render every gallery figure (the demo's ones train the demo "
                             "unless --demo-cache holds its runs)")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--dpi", type=int, default=100,
                        help=f"resolution, 1 to {MAX_DPI} (default 100)")
    parser.add_argument("--list", action="store_true", help="list the figures and exit")
    parser.add_argument("--demo-cache", default=str(DEMO_OUT), metavar="DIR",
                        help="folder where `fpsim demo` saved its runs (demo_runs.pickle), "
                             f"reused for the demo figures (default {DEMO_OUT})")


def run_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim figures``: list or render the gallery, one line per figure as it goes
    (the list, the progress and the written paths on stdout); 2 for an unknown figure name, a
    ``--dpi`` outside 1..MAX_DPI or an unwritable ``--out`` (one line on stderr, no
    traceback), as the other ``fpsim`` commands.

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> run_cli(p.parse_args(["--list"]))  # doctest: +ELLIPSIS
    number_line_e4m3: every positive fp8 e4m3 value, binade by binade
    ...
    0
    """
    all_names = names()
    if args.list:
        for name in all_names:
            print(f"{name}: {description(name)}")
        return 0
    unknown = [n for n in args.names if n not in all_names]
    if unknown:
        print(f"fpsim figures: unknown figure(s) {', '.join(unknown)}; valid: "
              f"{', '.join(all_names)}", file=sys.stderr)
        return 2
    if not 1 <= args.dpi <= MAX_DPI:
        print(f"fpsim figures: --dpi must be positive, got {args.dpi}" if args.dpi < 1 else
              f"fpsim figures: --dpi must be from 1 to {MAX_DPI} dots per inch, got "
              f"{args.dpi}", file=sys.stderr)
        return 2
    try:
        out = check_out_dir(args.out)
    except ValueError as exc:
        print(f"fpsim figures: {exc}", file=sys.stderr)
        return 2
    chosen = list(args.names) or (all_names if getattr(args, "all", False)
                                  else list(README_FIGURES))
    if any(n.endswith("_demo") for n in chosen):
        prime_demo_runs(getattr(args, "demo_cache", DEMO_OUT), progress=sys.stderr.isatty())

    def show(name: str) -> None:
        print(f"rendering {name} ...", flush=True)

    for path in render(chosen, out, args.dpi, progress=show):
        print(f"  wrote {path}")
    return 0
