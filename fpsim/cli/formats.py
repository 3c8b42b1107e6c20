"""``fpsim formats``: the table of the preset formats (bits, bias, range, eps, NaN encoding).

A command module of :mod:`fpsim.cli`: ``HELP`` (its line in ``fpsim --help``), ``OUTPUTS``
(the options naming what it writes: none), :func:`configure_parser` and :func:`run_cli`.

>>> import argparse, contextlib, io
>>> with contextlib.redirect_stdout(io.StringIO()) as out:
...     status = run_cli(argparse.Namespace())
>>> status, out.getvalue().split()[0]
(0, 'format')
"""

from __future__ import annotations

import argparse

from ..formats import PRESETS, NaNEncoding
from .common import Output

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli", "formats_table"]

HELP = "table of the preset formats"
OUTPUTS: tuple[Output, ...] = ()


def _fmt_num(v: float) -> str:
    return f"{v:.9g}"


def formats_table() -> str:
    """The table of preset formats: bits, bias, min subnormal, min normal, max, eps, u, and a
    legend of the NaN column.

    >>> "fp16" in formats_table() and "fnuz  no infinity" in formats_table()
    True
    """
    head = ("format", "bits", "e", "m", "bias", "min subnormal", "min normal", "max", "eps",
            "unit roundoff", "inf", "NaN")
    rows = []
    for f in PRESETS.values():
        rows.append((f.name, str(f.bits), str(f.exponent_bits), str(f.mantissa_bits), str(f.bias),
                     _fmt_num(f.smallest_subnormal), _fmt_num(f.smallest_normal),
                     _fmt_num(f.max), _fmt_num(f.eps), _fmt_num(f.unit_roundoff),
                     "yes" if f.has_infinity else "no", f.nan_encoding.value))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    lines += ["", "NaN column (the format's NaN encoding):"]
    lines += [f"  {e.value:5s} {e.meaning}" for e in NaNEncoding]
    lines += ["Other formats by name: eXmY (X exponent, Y mantissa bits), e.g. e3m4, e4m3fn, "
              "e5m2fnuz."]
    return "\n".join(lines)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``fpsim formats`` takes no arguments."""


def run_cli(args: argparse.Namespace) -> int:  # noqa: ARG001 - it takes no arguments
    """Print :func:`formats_table`; returns 0."""
    print(formats_table())
    return 0
