"""``fpsim show VALUE [--format F]... [--rounding MODE]``: a value rounded to a format, bit by
bit (the value, its bits, class, error, flags and neighbours).

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (none), :func:`configure_parser`
and :func:`run_cli`.

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> run_cli(p.parse_args(["65520", "-f", "fp16"]))  # doctest: +ELLIPSIS
input        : 65520 -> fp16, rounding nearest_even
rounded      : inf
...
0
"""

from __future__ import annotations

import argparse
import decimal
import sys
from fractions import Fraction

import numpy as np

from ..encoding import bit_string, classify, next_down, next_up
from ..flags import Flags
from ..formats import PRESETS, get_float_format
from ..modes import Rounding, as_rounding, rounding_aliases
from ..rounding import as_rational, far_decimal, round_rational
from .common import Output

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "show_value"]

HELP = "show a value rounded to a format, bit by bit"
OUTPUTS: tuple[Output, ...] = ()


def _fmt_exact(q: Fraction) -> str:
    """An exact rational to 7 significant digits, at any size (beyond float64 too)."""
    if q == 0:
        return "0"
    with decimal.localcontext() as ctx:
        ctx.prec = 7
        d = decimal.Decimal(q.numerator) / decimal.Decimal(q.denominator)
    return f"{d:+.6e}"


def show_value(value, fmt_name: str, rounding: str = "nearest_even") -> str:
    """A value rounded to a format: the value, its bits, class, error and neighbours. The
    value (a decimal string, int, Fraction or float) is read exactly and rounded once.

    >>> print(show_value("0.1", "fp16").splitlines()[1])
    rounded      : 0.0999755859375
    >>> print(show_value("1e999", "fp16", "rtz").splitlines()[-2])
    flags        : INEXACT|OVERFLOW
    """
    fmt = get_float_format(fmt_name)
    mode = as_rounding(rounding)
    v, fl = round_rational(value, fmt, mode, flags=True)
    v = float(v)
    lines = [f"input        : {value} -> {fmt.name}, rounding {mode.value}",
             f"rounded      : {v!r}"]
    if np.isnan(v) and not fmt.has_nan:
        lines.append(f"bits         : none ({fmt.name} has no NaN: the result is INVALID)")
    else:
        lines += [f"bits         : {bit_string(v, fmt)}   (sign | exponent | mantissa)",
                  f"class        : {classify(v, fmt)}"]
    far = far_decimal(value)
    x = None if far else as_rational(value)[0]
    if far and np.isfinite(v):  # 10**+-1000 and beyond: its exact Fraction takes minutes
        what = "the rounded value itself" if far < 0 and v else "-x"
        where = "below 10**-1000" if far < 0 else "above 10**1000"
        lines.append(f"error        : {what}, to every digit shown (|x| is {where})")
    elif np.isfinite(v) and isinstance(x, Fraction):
        err = Fraction(v) - x
        rel = abs(err / x) if x != 0 else Fraction(0)
        lines.append(f"error        : {_fmt_exact(err)} (relative {_fmt_exact(rel)[1:]}, "
                     f"unit roundoff {fmt.unit_roundoff:.3g})")
    flags = Flags(int(fl))
    lines.append(f"flags        : {flags.name if flags else 'none'}")
    if not np.isnan(v):
        lines.append(f"neighbours   : {float(next_down(v, fmt))!r} < {v!r} < "
                     f"{float(next_up(v, fmt))!r}")
    return "\n".join(lines)


def _rounding_help() -> str:
    aliases = rounding_aliases()
    return "rounding mode (default nearest_even): " + "; ".join(
        f"{m.value} ({', '.join(aliases[m])})" if aliases[m] else m.value for m in Rounding)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim show``."""
    parser.add_argument("value", help="a decimal number, read exactly and rounded once, e.g. "
                                      "0.1, 65520, 1e999, -0, inf, nan")
    parser.add_argument("--format", "-f", action="append", default=None,
                        help="format name (repeatable; default fp16): " + ", ".join(PRESETS)
                        + ", an alias (half, bfloat16, e4m3, ...) or eXmY (e3m4, e4m3fn, "
                          "e5m2fnuz)")
    parser.add_argument("--rounding", "-r", default="nearest_even", help=_rounding_help())


def run_cli(args: argparse.Namespace) -> int:
    """Print :func:`show_value` for each ``--format`` (default fp16); 2, with one line on
    stderr, when VALUE is not a decimal number."""
    try:
        decimal.Decimal(args.value.strip())
    except ArithmeticError:
        print(f"fpsim show: VALUE must be a decimal number such as 0.1, 65520, 1e999, -0, inf "
              f"or nan, got {args.value!r}", file=sys.stderr)
        return 2
    for name in args.format or ["fp16"]:  # append's default must be None, not ["fp16"]
        print(show_value(args.value, name, args.rounding))
        print()
    return 0
