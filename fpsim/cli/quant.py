"""``fpsim quant [--quick] [--bits B] [--seeds N] [--lora-rank R] [--json PATH]``: the
quantization experiment of :mod:`fpsim.quant.experiment` (INT8 PTQ / QAT, LSQ, NF4 + LoRA, FP8
and block-scaled training on the digits), printed as its tables.

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (``--json``), :func:`configure_parser`
and :func:`run_cli`.

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> run_cli(p.parse_args(["--seeds", "0"]))
Traceback (most recent call last):
...
ValueError: --seeds must be from 1 to 1000 (each seed trains every configuration again), got 0
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ..quant import experiment
from ..quant.layers import check_bits
from .common import Output, OutputKind

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "MAX_SEEDS"]

HELP = "INT8 PTQ / QAT, LSQ, NF4 + LoRA and FP8 on the digits data: a table"
OUTPUTS = (Output("json", OutputKind.FILE),)
MAX_SEEDS = 1000  # --seeds: the experiment runs once per seed (a quick one takes ~30 s)


def configure_parser(p: argparse.ArgumentParser) -> None:
    """Options of ``fpsim quant``."""
    p.add_argument("--quick", action="store_true",
                   help="one seed and fewer epochs (what the tests run; < 40 s)")
    p.add_argument("--bits", type=int, default=None,
                   help="bit width of the sensitive setting (2..8; default 3)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default 5; "
                   "--quick: 1)")
    p.add_argument("--lora-rank", type=int, default=None, help="LoRA rank (default 8)")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="also write the results as JSON to PATH")


def run_cli(args: argparse.Namespace) -> int:
    """Run the experiment (:data:`fpsim.quant.experiment.QUICK` with ``--quick``) and print
    the three tables; a bad option raises ValueError (``fpsim`` prints it: exit status 2)."""
    cfg = experiment.QUICK if args.quick else experiment.ExperimentConfig()
    if args.bits is not None:
        cfg = replace(cfg, sensitive_bits=check_bits(args.bits))
    if args.seeds is not None:
        if not 1 <= args.seeds <= MAX_SEEDS:  # 10**30 seeds made range() overflow
            raise ValueError(f"--seeds must be from 1 to {MAX_SEEDS} (each seed trains every "
                             f"configuration again), got {args.seeds}")
        cfg = replace(cfg, seeds=tuple(range(args.seeds)))
    if args.lora_rank is not None:
        if args.lora_rank < 1:
            raise ValueError(f"--lora-rank must be >= 1, got {args.lora_rank}")
        cfg = replace(cfg, lora_rank=args.lora_rank, lora_alpha=2.0 * args.lora_rank)
    result = experiment.run_experiment(cfg)
    print(experiment.format_result(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result.to_dict(), fh, indent=1)
    return 0
