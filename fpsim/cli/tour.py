"""``fpsim tour``: a short tour of the formats and one rounding example per mode.

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (none), :func:`configure_parser`
and :func:`run_cli`.
"""

from __future__ import annotations

import argparse

import numpy as np

from ..modes import Rounding
from ..rounding import round as fp_round
from .common import Output
from .formats import formats_table

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "demo_tour"]

HELP = "a short tour of the formats and one rounding example per mode"
OUTPUTS: tuple[Output, ...] = ()


def demo_tour() -> str:
    """A short tour: the formats, then one rounding example per mode.

    >>> "stochastic" in demo_tour()
    True
    """
    out = ["fpsim: what low-precision formats do to your numbers", "", formats_table(), ""]
    x = 1 + 2.0**-11 + 2.0**-13  # between two fp16 neighbours of 1
    out.append(f"Rounding x = 1 + 2^-11 + 2^-13 = {x!r} to fp16 (neighbours 1 and 1 + 2^-10):")
    for mode in Rounding:
        kw = {"rng": 0} if mode is Rounding.STOCHASTIC else {}
        vals = fp_round(np.full(10000, x), "fp16", mode, **kw)
        if mode is Rounding.STOCHASTIC:
            out.append(f"  {mode.value:13s} -> mean of 10000 draws {float(vals.mean())!r} "
                       f"(unbiased: x = {x!r})")
        else:
            out.append(f"  {mode.value:13s} -> {float(vals[0])!r}")
    out.append("")
    facts = [float(fp_round(v, "fp16")) for v in (65519.0, 65520.0, 2.0**-25, 2.0**-24)]
    out.append("Famous fp16 facts: 65519 -> {!r}, 65520 -> {!r}, 2^-25 -> {!r}, "
               "2^-24 -> {!r}".format(*facts))
    b1, b2 = float(fp_round(1 + 2.0**-8, "bf16")), float(fp_round(1e38, "bf16"))
    out.append(f"bf16 keeps fp32's range but not its precision: 1 + 2^-8 -> {b1!r}, "
               f"1e38 -> {b2!r}")
    return "\n".join(out)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``fpsim tour`` takes no arguments."""


def run_cli(args: argparse.Namespace) -> int:  # noqa: ARG001 - it takes no arguments
    """Print :func:`demo_tour`; returns 0."""
    print(demo_tour())
    return 0
