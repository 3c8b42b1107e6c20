"""``fpsim train --precision NAME [--loss-scale none|dynamic|N] [...]``: one precision recipe
on the digits with the demo's configuration and the overrides given; the same outputs as
``fpsim demo`` (:mod:`fpsim.cli.demo`).

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (``--out``), :func:`configure_parser`
and :func:`run_cli`.

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> a = p.parse_args(["--precision", "mixed-bf16", "--loss-scale", "dynamic"])
>>> a.precision, a.loss_scale
('mixed-bf16', 'dynamic')
"""

from __future__ import annotations

import argparse
import sys

from ..training.experiment import demo_config
from ..training.recipes import PRECISIONS, parse_loss_scale
from ..training.trainer import SCHEDULES, train
from .common import Output, OutputKind
from .demo import add_common_options, check_out, finish, intro, show_progress

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli"]

HELP = "train one precision recipe on the digits data"
OUTPUTS = (Output("out", OutputKind.DIR, unless="no_plots"),)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim train`` (defaults: the demo's configuration).

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> p.parse_args(["--precision", "fp16", "--steps", "5"]).steps
    5
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
    add_common_options(parser)


def run_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim train``: one recipe with the demo's configuration and the overrides given,
    the same outputs as ``fpsim demo``; returns the exit status (2 for bad arguments).

    >>> import contextlib, io, json
    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> a = p.parse_args(["--precision", "fp16", "--steps", "2", "--hidden", "8", "--json",
    ...                   "--no-progress", "--no-plots"])
    >>> out = io.StringIO()
    >>> with contextlib.redirect_stdout(out):
    ...     status = run_cli(a)
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
    if not check_out(args, "train"):
        return 2
    if not args.json:
        print(intro(f"the {cfg.precision} recipe", cfg.grad_shift))
    run = train(cfg, progress=show_progress(args))
    return finish([run], args)
