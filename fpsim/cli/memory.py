"""``fpsim memory --params PSI --gpus N [--stage S] [--k K] [--gpu-memory GB]``: ZeRO's
model-state memory per rank, the communication per step and whether it fits on a GPU
(:func:`fpsim.memory.memory_report`).

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (none), :func:`configure_parser`
and :func:`run_cli`.

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> run_cli(p.parse_args(["--params", "7.5e9", "--gpus", "64", "--stage", "3"]))
... # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
model states per rank: 7.5e+09 parameters, 64 data-parallel ranks, K = 12 ...
stage  split     GB     GiB    comm/step (elems)  comm GB (fp16)  fits 80 GB
3      P_os+g+p  1.875  1.746           2.25e+10              45  yes
0
"""

from __future__ import annotations

import argparse

from ..memory import memory_report
from ..zero_stages import ZERO_STAGES
from .common import Output

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli"]

HELP = "ZeRO model-state memory per rank, communication, fits-on-GPU"
OUTPUTS: tuple[Output, ...] = ()


def configure_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim memory``."""
    p.add_argument("--params", type=float, required=True,
                   help="number of parameters Psi, e.g. 7.5e9")
    p.add_argument("--gpus", type=int, required=True, help="data-parallel degree N_d")
    p.add_argument("--stage", type=int, default=None, choices=ZERO_STAGES,
                   help="one ZeRO stage (default: all of 0-3)")
    p.add_argument("--k", type=float, default=12,
                   help="optimizer-state bytes per parameter K (Adam: 12)")
    p.add_argument("--gpu-memory", type=float, default=80, dest="gpu_memory",
                   help="GPU memory in GB (10**9 bytes) for the fits column (default 80)")


def run_cli(args: argparse.Namespace) -> int:
    """Handler of ``fpsim memory``: prints :func:`~fpsim.memory.memory_report`."""
    print(memory_report(args.params, args.gpus, args.stage, args.k, args.gpu_memory))
    return 0
