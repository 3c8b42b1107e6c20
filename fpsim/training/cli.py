"""Command-line entry points ``fpsim demo`` and ``fpsim train`` (wired into fpsim/cli.py).

- ``fpsim demo [--quick] [--seed N] [--json] [--out DIR] [--no-plots]``: the five precision
  recipes on the digits, a results table and a memory table (or JSON lines), plots in DIR.
- ``fpsim train --precision NAME [--loss-scale none|dynamic|N] [...]``: one recipe, the same
  outputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .experiment import DEFAULT_OUT, QUICK_CONFIG, demo_config, run_demo, save_plots
from .recipes import PRECISIONS, parse_loss_scale
from .report import json_lines, memory_table, results_table
from .trainer import SCHEDULES, train

__all__ = ["configure_demo_parser", "run_demo_cli", "configure_train_parser", "run_train_cli"]

_INTRO = ("Mixed-precision training on the UCI digits: the same MLP under five precision "
          "recipes (Micikevicius et al. 2018). Every step is measured against an exact fp64 "
          "shadow of itself; see docs/demo.md.")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help=f"the short configuration ({QUICK_CONFIG['steps']} steps per run)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialisation and "
                                                            "the data order (default 0)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per run instead of the tables")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help=f"folder for the plots and results.json (default {DEFAULT_OUT}/)")
    parser.add_argument("--no-plots", action="store_true", help="do not save plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def configure_demo_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim demo``.

    >>> p = argparse.ArgumentParser(); configure_demo_parser(p)
    >>> p.parse_args(["--quick", "--seed", "3"]).seed
    3
    """
    _common(parser)


def _print_results(runs: list, args: argparse.Namespace, paths: list[Path]) -> None:
    if args.json:
        print(json_lines(runs))
        for p in paths:
            print(f"saved {p}", file=sys.stderr)
        return
    print()
    print(results_table(runs))
    print()
    print("Memory by format (bytes of the arrays, from their dtypes):")
    print(memory_table(runs))
    print()
    print("grad underflow / subnormal: share of the non-zero exact gradient values (weights "
          "and layer outputs, every step) that round to zero / to a subnormal in their "
          "gradient format; lost updates: share of the weight updates that rounding erased "
          "(update below half an ulp of the weight, fp32 master included).")
    for p in paths:
        print(f"saved {p}")


def _finish(runs: list, args: argparse.Namespace) -> int:
    paths = [] if args.no_plots else save_plots(runs, args.out)
    _print_results(runs, args, paths)
    return 0


def run_demo_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim demo``: the five recipes (tqdm bars on stderr), then the results and memory
    tables (or JSON lines with ``--json``), plots and results.json in ``--out``; returns the
    exit status. ``fpsim demo --quick`` takes 20-30 s (the example stops before running).

    >>> p = argparse.ArgumentParser(); configure_demo_parser(p)
    >>> p.parse_args(["--quick", "--json"]).out
    'fpsim-output'
    """
    if not args.json:
        print(_INTRO)
    runs = run_demo(quick=args.quick, seed=args.seed, progress=not args.no_progress)
    return _finish(runs, args)


def configure_train_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim train`` (defaults: the demo's configuration).

    >>> p = argparse.ArgumentParser(); configure_train_parser(p)
    >>> a = p.parse_args(["--precision", "mixed-bf16", "--loss-scale", "dynamic"])
    >>> a.precision, a.loss_scale
    ('mixed-bf16', 'dynamic')
    """
    parser.add_argument("--precision", required=True, choices=list(PRECISIONS),
                        help="the precision recipe")
    parser.add_argument("--loss-scale", default=None, metavar="{none,dynamic,N}",
                        help="override the recipe's loss scaling: none, dynamic or a number")
    parser.add_argument("--steps", type=int, default=None, help="training steps")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (SGD)")
    parser.add_argument("--momentum", type=float, default=None, help="SGD momentum")
    parser.add_argument("--batch-size", type=int, default=None, help="mini-batch size")
    parser.add_argument("--schedule", choices=SCHEDULES, default=None,
                        help="learning-rate schedule")
    parser.add_argument("--hidden", default=None, metavar="W,W,...",
                        help="hidden layer widths, e.g. 128,128,128")
    parser.add_argument("--out-init-scale", type=float, default=None,
                        help="factor on the output layer's initial weights")
    _common(parser)


def run_train_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim train``: one recipe with the demo's configuration and the overrides given,
    the same outputs as ``fpsim demo``; returns the exit status (2 for bad arguments).

    >>> import contextlib, io, json, tempfile
    >>> p = argparse.ArgumentParser(); configure_train_parser(p)
    >>> a = p.parse_args(["--precision", "fp16", "--steps", "2", "--hidden", "8", "--json",
    ...                   "--no-progress", "--no-plots"])
    >>> out = io.StringIO()
    >>> with contextlib.redirect_stdout(out):
    ...     status = run_train_cli(a)
    >>> status, json.loads(out.getvalue())["precision"]
    (0, 'fp16')
    """
    overrides = {}
    for name in ("steps", "lr", "momentum", "batch_size", "schedule", "out_init_scale"):
        v = getattr(args, name)
        if v is not None:
            overrides[name] = v
    try:
        if args.loss_scale is not None:
            parse_loss_scale(args.loss_scale)
            overrides["loss_scale"] = args.loss_scale
        if args.hidden is not None:
            try:
                widths = tuple(int(w) for w in args.hidden.split(","))
            except ValueError:
                raise ValueError(f"--hidden takes comma-separated layer widths such as "
                                 f"128,128, got {args.hidden!r}") from None
            overrides["sizes"] = (64, *widths, 10)
        cfg = demo_config(args.quick, precision=args.precision, seed=args.seed, **overrides)
        cfg.validate()
    except (ValueError, TypeError) as exc:
        print(f"fpsim train: {exc}", file=sys.stderr)
        return 2
    if not args.json:
        print(_INTRO)
    run = train(cfg, progress=not args.no_progress)
    return _finish([run], args)
