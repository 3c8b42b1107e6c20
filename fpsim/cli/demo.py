"""``fpsim demo [--quick] [--seed N] [--json] [--out DIR] [--no-plots] [--jobs N]``: the seven
precision recipes on the digits (in N processes, default one per available CPU), a results
table, the findings they support, the control run (fp16-master without the gradient
scale-down) and the configuration's deliberate choices, and a memory table (or JSON lines,
without the control), plots in DIR. tqdm progress on a terminal only (not with ``--json``): a
bar per recipe, or one counting recipes with ``--jobs`` > 1.

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (``--out``), :func:`configure_parser`
and :func:`run_cli`. It also holds what ``fpsim train`` (:mod:`fpsim.cli.train`) shares with
it (the common options, the printed results) and :func:`save_plots`, which joins the runs of
:mod:`fpsim.training` to the figures of :mod:`fpsim.viz.training` (neither imports the other).

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> p.parse_args(["--quick", "--seed", "3"]).seed
3
"""

from __future__ import annotations

import argparse
import inspect
import json
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..training.experiment import (
    DEFAULT_OUT,
    QUICK_CONFIG,
    check_out_dir,
    default_workers,
    demo_config,
    run_demo,
    run_demo_and_control,
)
from ..training.recipes import PRECISIONS
from ..training.report import (
    choices_text,
    control_text,
    findings_text,
    json_lines,
    memory_table,
    results_table,
)
from .common import Output, OutputKind

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "save_plots", "DEMO_CACHE_FILE"]

HELP = "the main job: FP32 / FP16 / mixed-precision training on the digits, measured"
OUTPUTS = (Output("out", OutputKind.DIR, unless="no_plots"),)
DEMO_CACHE_FILE = "demo_runs.pickle"  # written next to results.json; `fpsim figures` reads it

_INTRO = ("Mixed-precision training on the UCI digits: the same MLP, the same initial weights "
          "and batches, under {what} (Micikevicius et al. 2018), with the gradients scaled "
          "down by 2^-{shift} into the range of a large network's (see docs/demo.md). Sampled "
          "steps are measured against an exact fp64 shadow of themselves.")


def intro(what: str, shift: int) -> str:
    """The paragraph ``fpsim demo`` and ``fpsim train`` open with (internal: for
    :mod:`fpsim.cli.train`)."""
    return _INTRO.format(what=what, shift=shift)


def show_progress(args: argparse.Namespace) -> bool:
    """tqdm bars only for a person watching a terminal: not with --json or --no-progress,
    not when stderr is a file or a pipe (internal: for :mod:`fpsim.cli.train`)."""
    return not (args.no_progress or args.json) and sys.stderr.isatty()


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options ``fpsim demo`` and ``fpsim train`` share (internal: for
    :mod:`fpsim.cli.train`)."""
    parser.add_argument("--quick", action="store_true",
                        help=f"the short configuration ({QUICK_CONFIG['steps']} steps per run)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialisation and "
                                                            "the data order (default 0)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per run instead of the tables")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help=f"folder for the plots and results.json (default {DEFAULT_OUT}/)")
    parser.add_argument("--no-plots", action="store_true", help="do not save plots")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars (there are none with --json or off a terminal)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim demo``.

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> p.parse_args(["--quick", "--json"]).out
    'fpsim-output'
    """
    add_common_options(parser)
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="train the recipes in N processes at once (default: the CPUs "
                             "available, at most one per recipe; the results do not depend "
                             "on it)")


def _print_results(runs: list, args: argparse.Namespace, paths: list[Path],
                   control=None) -> None:
    if args.json:
        print(json_lines(runs))
        for p in paths:
            print(f"saved {p}", file=sys.stderr)
        return
    print()
    print(results_table(runs))
    found = findings_text(runs)
    if found:
        print()
        print("What the runs show (each statement checked on these runs):")
        print(found)
    if control is not None and control_text(control, runs):
        print(control_text(control, runs))
    if control is not None:
        from ..amp import GradScaler  # the scaler's default window is PyTorch's

        default = inspect.signature(GradScaler).parameters["growth_interval"].default
        print(choices_text(runs[0].config, default))  # the tables' runs, not the control
    print()
    print("Memory by format (bytes of the arrays, from their dtypes):")
    print(memory_table(runs))
    print()
    print("grad underflow / subnormal: share of the non-zero exact gradient values (weights "
          "and layer outputs, every step) that round to zero / to a subnormal in their "
          "gradient format; lost updates: share of the weight updates that rounding erased "
          "(update below half an ulp of the weight, fp32 master included).")
    for r in runs:
        if r.nonfinite_steps and not r.skipped_steps:
            print(f"note: {r.precision}: {r.nonfinite_steps} steps had inf/NaN gradients and "
                  "none was skipped: a static loss scale (Apex's, and no scaling) neither "
                  "checks nor skips, so they reached the weights; --loss-scale dynamic skips "
                  "them and backs off.")
    for p in paths:
        print(f"saved {p}")


def check_out(args: argparse.Namespace, command: str) -> bool:
    """Fail early, in one line, when --out cannot be written (before any training); internal:
    for :mod:`fpsim.cli.train`."""
    if args.no_plots:
        return True
    try:
        check_out_dir(args.out)
    except ValueError as exc:
        print(f"fpsim {command}: {exc}", file=sys.stderr)
        return False
    return True


def save_plots(runs: Sequence[Any], out: Any = None) -> list:
    """Save loss_curves.png, loss_scale.png and gradient_histogram.png (+ the results as
    results.json, and the runs for ``fpsim figures`` as demo_runs.pickle) under ``out``
    (default ``fpsim-output``); returns the paths of the figures and of results.json.

    >>> import tempfile
    >>> from fpsim.training.experiment import run_demo
    >>> runs = run_demo(precisions=["fp32"], progress=False, steps=2, eval_every=1)
    >>> [p.name for p in save_plots(runs, tempfile.mkdtemp())]
    ['loss_curves.png', 'loss_scale.png', 'gradient_histogram.png', 'results.json']
    """
    from ..viz import style  # matplotlib: only when the plots are saved
    from ..viz.training import demo_figures

    out = check_out_dir(DEFAULT_OUT if out is None else out)
    paths = [style.save_figure(fig, out / f"{name}.png")
             for name, fig in demo_figures(runs).items()]
    cache = out / DEMO_CACHE_FILE  # `fpsim figures` reuses these runs instead of training
    with cache.open("wb") as fh:
        pickle.dump({"runs": list(runs)}, fh)
    path = out / "results.json"
    path.write_text(json.dumps([r.summary() for r in runs], indent=1) + "\n")
    paths.append(path)
    return paths


def finish(runs: list, args: argparse.Namespace, control=None) -> int:
    """Save the plots (unless ``--no-plots``) and print the results; returns 0 (internal: for
    :mod:`fpsim.cli.train`)."""
    paths = [] if args.no_plots else save_plots(runs, args.out)
    _print_results(runs, args, paths, control)
    return 0


def run_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim demo``: the seven recipes (tqdm bars on stderr), then the results and
    memory tables and the findings (or JSON lines with ``--json``), plots and results.json in
    ``--out``; returns the exit status (2, with one line on stderr, for a bad ``--jobs`` or an
    ``--out`` that cannot be written).

    >>> import contextlib, io
    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     run_cli(p.parse_args(["--quick", "--jobs", "0"]))
    2
    >>> print(err.getvalue().strip())
    fpsim demo: --jobs must be a positive int, got 0
    """
    jobs = default_workers(len(PRECISIONS)) if args.jobs is None else args.jobs
    if jobs < 1:
        print(f"fpsim demo: --jobs must be a positive int, got {jobs}", file=sys.stderr)
        return 2
    if not check_out(args, "demo"):
        return 2
    if args.json:
        runs = run_demo(quick=args.quick, seed=args.seed, progress=show_progress(args),
                        workers=jobs)
        return finish(runs, args)
    cfg = demo_config(args.quick)
    print(intro(f"{len(PRECISIONS)} precision recipes", cfg.grad_shift))
    # the tables' runs and, in the same processes, the control printed under them
    runs, control = run_demo_and_control(quick=args.quick, seed=args.seed,
                                         progress=show_progress(args), workers=jobs)
    return finish(runs, args, control)
