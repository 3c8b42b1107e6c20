"""The ``fpsim probe`` command: reveal a library's summation order, or fingerprint a GPU unit.

- ``fpsim probe --order numpy.sum [--n 16] [--fmt fp32]``: the accumulation tree of a
  library function (:func:`fpsim.probe.reveal_order`), printed as a nested tuple, with the
  number of calls it took.
- ``fpsim probe --fingerprint --gpu H100 --input-format fp16 [--output-format fp32]``: runs
  :func:`fpsim.probe.fingerprint` against fpsim's own model of the GPU, treated as a black box
  (a self-check and a demonstration; ``tools/record_tensorcore.py --fingerprint`` does the
  same with a real GPU), and prints the unit found beside the table's.

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (none), :func:`configure_parser`
and :func:`run_cli`; :data:`ORDER_FUNCTIONS` names the functions ``--order`` knows.

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> run_cli(p.parse_args(["--order", "python.sum", "--n", "4"]))  # doctest: +ELLIPSIS
python.sum over 4 fp32 values: (((0, 1), 2), 3)
...
0
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable

import numpy as np

from ..formats import get_float_format
from ..probe.fingerprint import fingerprint
from ..probe.order import reveal_order
from .common import Output

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "ORDER_FUNCTIONS"]

HELP = "reveal a sum's accumulation order, or fingerprint a GPU unit (black box)"
OUTPUTS: tuple[Output, ...] = ()


def _strided_reduce(x: np.ndarray) -> object:
    y = np.zeros(2 * len(x), dtype=x.dtype)
    y[::2] = x
    return np.add.reduce(y[::2])


def _tensorcore_dot(x: np.ndarray) -> float:
    from ..tensorcore import dot

    return float(dot(np.asarray(x, np.float64), np.ones(len(x)), 0.0, gpu="H100",
                     input_format="fp16"))


#: The functions ``--order`` knows, by name.
ORDER_FUNCTIONS: dict[str, Callable[[np.ndarray], object]] = {
    "numpy.sum": np.sum,
    "numpy.dot": lambda x: np.dot(x, np.ones_like(x)),
    "numpy.add.reduce-strided": _strided_reduce,
    "numpy.cumsum": lambda x: np.cumsum(x)[-1],
    "python.sum": sum,
    "math.fsum": math.fsum,
    "fpsim.tensorcore.dot-H100-fp16": _tensorcore_dot,
}


def configure_parser(p: argparse.ArgumentParser) -> None:
    """Add the ``fpsim probe`` arguments to ``p``."""
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--order", choices=list(ORDER_FUNCTIONS),
                      help="reveal this function's accumulation tree")
    what.add_argument("--fingerprint", action="store_true",
                      help="fingerprint fpsim's model of --gpu as a black box")
    p.add_argument("--n", type=int, default=16, help="--order: number of values (default 16)")
    # not --format: the other commands' --format is a list of formats (fpsim show)
    p.add_argument("--fmt", default=None,
                   help="--order: the values' format (default fp32; fp16 for the tensor core)")
    p.add_argument("--gpu", default=None, help="--fingerprint: a GPU name (fpsim's model)")
    p.add_argument("--input-format", default=None, help="--fingerprint: the input format")
    p.add_argument("--output-format", default="fp32",
                   help="--fingerprint: the output format (default fp32)")


class _Counted:
    def __init__(self, fn: Callable) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def run_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim probe``; returns the exit status."""
    if args.order is not None:
        fmt = args.fmt or ("fp16" if args.order.startswith("fpsim.tensorcore") else "fp32")
        fmt = get_float_format(fmt)
        fn = _Counted(ORDER_FUNCTIONS[args.order])
        tree = reveal_order(fn, args.n, fmt=fmt)
        print(f"{args.order} over {args.n} {fmt.name} values: {tree}")
        print(f"({fn.calls} calls; child order within a node is free)")
        return 0
    if args.gpu is None or args.input_format is None:
        raise ValueError("--fingerprint needs --gpu NAME and --input-format FORMAT")
    from ..tensorcore import get_gpu, matmul

    gpu = get_gpu(args.gpu)
    table = gpu.unit_for(args.input_format, args.output_format)

    def black_box(A, B, C):
        return matmul(A, B, C, gpu=gpu, input_format=args.input_format,
                      output_format=args.output_format)

    box = _Counted(black_box)
    unit = fingerprint(box, args.input_format, args.output_format)
    print(f"{gpu.name} {args.input_format}->{args.output_format}, as a black box "
          f"({box.calls} calls):")
    print(f"  found: {unit!r}")
    print(f"         {unit.describe()}")
    print(f"  table: {table!r}")
    # every parameter of the unit (the label excepted): a new BlockFMA field is listed too
    differ = [f.name for f in dataclasses.fields(unit)
              if f.compare and getattr(unit, f.name) != getattr(table, f.name)]
    if differ:
        print(f"  fields that differ: {', '.join(differ)} (values the queries showed to make "
              f"no difference; tests/test_probe_fingerprint.py checks the results)")
    else:
        print("  the same parameters")
    return 0
