"""``fpsim figures``: list or render the gallery's figures (:mod:`fpsim.viz.gallery`) from the
command line. It sits above the gallery and the figure modules, so the gallery imports none of
them back (the demo's figures reuse the runs a previous ``fpsim demo`` saved).
"""

from __future__ import annotations

import argparse
import sys

from ..training.experiment import DEFAULT_OUT as DEMO_OUT  # where `fpsim demo` saves its runs
from ..training.experiment import check_out_dir
from .gallery import DEFAULT_OUT, README_FIGURES, description, names, render
from .training import prime_demo_runs

__all__ = ["configure_parser", "run_cli", "DEMO_OUT", "MAX_DPI"]
# a print shop's resolution: 100000 dpi made a 1.2-gigapixel-per-inch bitmap per figure, and
# matplotlib died allocating it (std::bad_alloc, a traceback)
MAX_DPI = 1200


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

    >>> import argparse, tempfile
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
