"""Command-line entry points ``fpsim demo`` and ``fpsim train`` (wired into fpsim/cli.py).

- ``fpsim demo [--quick] [--seed N] [--json] [--out DIR] [--no-plots] [--jobs N]``: the seven
  precision recipes on the digits (in N processes, default one per available CPU), a results
  table, the findings they support, the control run (fp16-master without the gradient
  scale-down) and the configuration's deliberate choices, and a memory table (or JSON lines,
  without the control), plots in DIR. tqdm
  progress on a terminal only (not with ``--json``): a bar per recipe, or one counting
  recipes with ``--jobs`` > 1.
- ``fpsim train --precision NAME [--loss-scale none|dynamic|N] [...]``: one recipe, the same
  outputs.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

from .experiment import (
    DEFAULT_OUT,
    QUICK_CONFIG,
    check_out_dir,
    default_workers,
    demo_config,
    run_demo,
    run_demo_and_control,
)
from .recipes import PRECISIONS, parse_loss_scale
from .report import (
    choices_text,
    control_text,
    findings_text,
    json_lines,
    memory_table,
    results_table,
)
from .trainer import SCHEDULES, train

__all__ = ["configure_demo_parser", "run_demo_cli", "configure_train_parser", "run_train_cli"]

_INTRO = ("Mixed-precision training on the UCI digits: the same MLP, the same initial weights "
          "and batches, under {what} (Micikevicius et al. 2018), with the gradients scaled "
          "down by 2^-{shift} into the range of a large network's (see docs/demo.md). Sampled "
          "steps are measured against an exact fp64 shadow of themselves.")


def _intro(what: str, shift: int) -> str:
    return _INTRO.format(what=what, shift=shift)


def _progress(args: argparse.Namespace) -> bool:
    """tqdm bars only for a person watching a terminal: not with --json or --no-progress,
    not when stderr is a file or a pipe."""
    return not (args.no_progress or args.json) and sys.stderr.isatty()


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
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars (there are none with --json or off a terminal)")


def configure_demo_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim demo``.

    >>> p = argparse.ArgumentParser(); configure_demo_parser(p)
    >>> p.parse_args(["--quick", "--seed", "3"]).seed
    3
    """
    _common(parser)
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


def _check_out(args: argparse.Namespace, command: str) -> bool:
    """Fail early, in one line, when --out cannot be written (before any training)."""
    if args.no_plots:
        return True
    try:
        check_out_dir(args.out)
    except ValueError as exc:
        print(f"fpsim {command}: {exc}", file=sys.stderr)
        return False
    return True


def _finish(runs: list, args: argparse.Namespace, control=None) -> int:
    if args.no_plots:
        paths = []
    else:
        from ..viz.training import save_plots  # plotting lives above training
        paths = save_plots(runs, args.out)
    _print_results(runs, args, paths, control)
    return 0


def run_demo_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim demo``: the five recipes (tqdm bars on stderr), then the results and memory
    tables and the findings (or JSON lines with ``--json``), plots and results.json in
    ``--out``; returns the exit status (2, with one line on stderr, when ``--out`` cannot be
    written). The example stops before running.

    >>> p = argparse.ArgumentParser(); configure_demo_parser(p)
    >>> p.parse_args(["--quick", "--json"]).out
    'fpsim-output'
    """
    jobs = default_workers(len(PRECISIONS)) if args.jobs is None else args.jobs
    if jobs < 1:
        print(f"fpsim demo: --jobs must be a positive int, got {jobs}", file=sys.stderr)
        return 2
    if not _check_out(args, "demo"):
        return 2
    if args.json:
        runs = run_demo(quick=args.quick, seed=args.seed, progress=_progress(args),
                        workers=jobs)
        return _finish(runs, args)
    cfg = demo_config(args.quick)
    print(_intro(f"{len(PRECISIONS)} precision recipes", cfg.grad_shift))
    # the tables' runs and, in the same processes, the control printed under them
    runs, control = run_demo_and_control(quick=args.quick, seed=args.seed,
                                         progress=_progress(args), workers=jobs)
    return _finish(runs, args, control)


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
    parser.add_argument("--grad-shift", type=int, default=None, metavar="K",
                        help="scale the loss by 2^-K and the learning rate by 2^K (the demo's "
                             "gradient scale-down; 0 turns it off)")
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
    for name in ("steps", "lr", "momentum", "batch_size", "schedule", "out_init_scale",
                 "grad_shift"):
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
    if not _check_out(args, "train"):
        return 2
    if not args.json:
        print(_intro(f"the {cfg.precision} recipe", cfg.grad_shift))
    run = train(cfg, progress=_progress(args))
    return _finish([run], args)
