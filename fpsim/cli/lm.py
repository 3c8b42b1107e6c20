"""``fpsim lm [--quick] [--recipes a,b,...] [--steps N] [--seed S] [--jobs N] [--json]
[--out DIR] [--no-plots] [--overwrite]``: the small GPT on Tiny Shakespeare under each
precision recipe (:mod:`fpsim.training.lm`), a table, the findings the runs support, figures.

With ``--json``: one JSON object per recipe per line (recipe, val_loss, train_loss, steps,
skipped_steps, grad_underflow, nonfinite_steps, time_s, cpu_time_s and more). The figures
and ``lm_results.json`` go to ``--out``; files already there are not overwritten unless
``--overwrite`` is given (checked before any training).

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (``--out``), :func:`configure_parser`
and :func:`run_cli`; it joins the runs of :mod:`fpsim.training.lm` to the figures of
:mod:`fpsim.viz.lm` (neither imports the other).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..training.experiment import DEFAULT_OUT, check_out_dir, default_workers
from ..training.lm import LM_FULL, LM_QUICK, lm_config, run_lm
from ..training.lm_recipes import ABLATIONS, CONTROLS, LM_RECIPES, parse_recipes
from ..training.lm_report import lm_findings, lm_json_lines, lm_table, strict_json
from .common import Output, OutputKind

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "OUTPUT_FILES"]

HELP = "a small GPT on Tiny Shakespeare under each precision recipe, measured"
OUTPUTS = (Output("out", OutputKind.DIR, unless="no_plots"),)

OUTPUT_FILES = ("lm_results.json", "lm_val_loss.png", "lm_histograms.png")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim lm``.

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> a = p.parse_args(["--quick", "--recipes", "fp32,bf16", "--json"])
    >>> a.quick, a.recipes, a.json
    (True, 'fp32,bf16', True)
    """
    parser.add_argument("--quick", action="store_true",
                        help=f"the short configuration ({LM_QUICK['steps']} steps; full: "
                             f"{LM_FULL['steps']})")
    parser.add_argument("--recipes", default=None, metavar="A,B,...",
                        help="recipes to run, comma-separated (default all): "
                             + ", ".join(LM_RECIPES) + "; NVFP4's ablations by name: "
                             + ", ".join(ABLATIONS) + "; controls: " + ", ".join(CONTROLS))
    parser.add_argument("--steps", type=int, default=None, help="training steps per recipe")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the initial weights and the batches (default 0)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="train N recipes at once in separate processes (default: the "
                             "CPUs available, at most one per recipe; results do not "
                             "depend on it)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per recipe per line instead of the table")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help=f"folder for the figures and lm_results.json (default "
                             f"{DEFAULT_OUT}/)")
    parser.add_argument("--no-plots", action="store_true",
                        help="write nothing to --out (no figures, no lm_results.json)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace lm_* files already in --out")


def _check_outputs(args: argparse.Namespace) -> str | None:
    """None when --out can take the outputs, else the one-line reason (before any run)."""
    if args.no_plots:
        return None
    try:
        out = check_out_dir(args.out)
    except ValueError as exc:
        return str(exc)
    there = [f for f in OUTPUT_FILES if (out / f).exists()]
    if there and not args.overwrite:
        return (f"--out {str(out)!r} already holds {', '.join(there)}; pass --overwrite to "
                "replace them, or choose another --out")
    return None


def run_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim lm``; returns the exit status (2, with one line on stderr, for a bad
    argument or an --out that cannot take the outputs, before any training).

    >>> import contextlib, io
    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     run_cli(p.parse_args(["--recipes", "fp33"]))
    2
    >>> "valid: fp32" in err.getvalue()
    True
    """
    try:
        names = parse_recipes(args.recipes)
        cfg = lm_config(args.quick, steps=args.steps, seed=args.seed)
        cfg.validate()
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs must be a positive int, got {args.jobs}")
    except (ValueError, TypeError) as exc:
        print(f"fpsim lm: {exc}", file=sys.stderr)
        return 2
    problem = _check_outputs(args)
    if problem:
        print(f"fpsim lm: {problem}", file=sys.stderr)
        return 2
    jobs = default_workers(len(names)) if args.jobs is None else args.jobs
    runs = run_lm(names, quick=args.quick, seed=args.seed, jobs=jobs, steps=args.steps)
    paths: list[Path] = []
    if not args.no_plots:
        out = Path(args.out)
        p = out / OUTPUT_FILES[0]
        p.write_text(json.dumps(strict_json([r.summary() | {"histograms": r.histograms}
                                             for r in runs]), allow_nan=False) + "\n")
        paths.append(p)
        from ..viz.lm import save_lm_figures  # matplotlib: only when the figures are saved

        paths += save_lm_figures(runs, out)
    if args.json:
        print(lm_json_lines(runs))
        for p in paths:
            print(f"saved {p}", file=sys.stderr)
        return 0
    print(f"A GPT (d {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, context "
          f"{cfg.context}) on Tiny Shakespeare, batch {cfg.batch_size} x {cfg.context}, "
          f"AdamW lr {cfg.lr:g} (warm-up {cfg.warmup}, cosine to {cfg.min_lr:g}), "
          f"{cfg.steps} steps, seed {cfg.seed}; the same initial weights and batches for every "
          "recipe, nothing staged.")
    print()
    print(lm_table(runs))
    found = lm_findings(runs)
    if found:
        print()
        print("What the runs show (each statement checked on these runs):")
        for s in found:
            print(f"- {s}")
    print()
    print("val / train loss: nats per character (float64 cross-entropy of the recipe's "
          "logits on fixed windows); grad underflow: share of the non-zero exact gradient "
          "values (fp64 shadow of sampled steps, weights and linear outputs) that round to "
          "zero in the run's gradient format; lost updates: non-zero AdamW updates that "
          "rounding erased (sampled steps). Times: this machine, other load included.")
    for p in paths:
        print(f"saved {p}")
    return 0
