"""The fpsim command line: fpsim formats, fpsim show, fpsim demo and friends.

Run a command with --help for its options, e.g. fpsim show --help.
"""

from __future__ import annotations

import argparse
import decimal
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from .cli_common import Output, OutputKind, accept_negative_values, check_outputs, error_line
from .encoding import bit_string, classify, next_down, next_up
from .flags import Flags
from .formats import PRESETS, NaNEncoding, get_float_format
from .modes import Rounding, as_rounding, rounding_aliases
from .rounding import as_rational, far_decimal, round_rational
from .rounding import round as fp_round


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


def _cmd_formats(_args: argparse.Namespace) -> int:
    print(formats_table())
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        decimal.Decimal(args.value.strip())
    except ArithmeticError:
        print(f"fpsim show: VALUE must be a decimal number such as 0.1, 65520, 1e999, -0, inf "
              f"or nan, got {args.value!r}", file=sys.stderr)
        return 2
    for name in args.format:
        print(show_value(args.value, name, args.rounding))
        print()
    return 0


def _cmd_tour(_args: argparse.Namespace) -> int:
    print(demo_tour())
    return 0


# name -> (help, configure parser, handler); other layers add their commands here lazily.
_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {}
# name -> the options naming files or folders the command writes: checked before it runs
_OUTPUTS: dict[str, tuple[Output, ...]] = {}


def _register(name: str, help_text: str, configure: Callable, handler: Callable,
              outputs: tuple[Output, ...] = ()) -> None:
    _COMMANDS[name] = (help_text, configure, handler)
    _OUTPUTS[name] = outputs


def _rounding_help() -> str:
    aliases = rounding_aliases()
    return "rounding mode (default nearest_even): " + "; ".join(
        f"{m.value} ({', '.join(aliases[m])})" if aliases[m] else m.value for m in Rounding)


def _configure_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("value", help="a decimal number, read exactly and rounded once, e.g. 0.1, "
                                 "65520, 1e999, -0, inf, nan")
    p.add_argument("--format", "-f", action="append", default=None,
                   help="format name (repeatable; default fp16): " + ", ".join(PRESETS)
                   + ", an alias (half, bfloat16, e4m3, ...) or eXmY (e3m4, e4m3fn, e5m2fnuz)")
    p.add_argument("--rounding", "-r", default="nearest_even", help=_rounding_help())


_register("formats", "table of the preset formats", lambda _p: None, _cmd_formats)
_register("show", "show a value rounded to a format, bit by bit", _configure_show, _cmd_show)
_register("tour", "a short tour of the formats and one rounding example per mode",
          lambda _p: None, _cmd_tour)


def _lazy(module: str, attr: str) -> Callable:
    """A parser hook or handler from a module imported only when the command is used."""

    def call(*args):
        import importlib

        return getattr(importlib.import_module(module), attr)(*args)

    return call


_register("demo", "the main job: FP32 / FP16 / mixed-precision training on the digits, measured",
          _lazy("fpsim.training.cli", "configure_demo_parser"),
          _lazy("fpsim.training.cli", "run_demo_cli"),
          (Output("out", OutputKind.DIR, unless="no_plots"),))
_register("train", "train one precision recipe on the digits data",
          _lazy("fpsim.training.cli", "configure_train_parser"),
          _lazy("fpsim.training.cli", "run_train_cli"),
          (Output("out", OutputKind.DIR, unless="no_plots"),))
_register("lm", "a small GPT on Tiny Shakespeare under each precision recipe, measured",
          _lazy("fpsim.training.lm_cli", "configure_lm_parser"),
          _lazy("fpsim.training.lm_cli", "run_lm_cli"),
          (Output("out", OutputKind.DIR, unless="no_plots"),))
_register("check-hardware", "compare the tensor-core model with measured GPU results",
          _lazy("fpsim.tensorcore", "configure_parser"), _lazy("fpsim.tensorcore", "run_cli"))
_register("figures", "render the README figures to PNG files",
          _lazy("fpsim.viz.figures_cli", "configure_parser"),
          _lazy("fpsim.viz.figures_cli", "run_cli"),
          (Output("out", OutputKind.DIR, unless="list"),))
_register("quant", "INT8 PTQ / QAT, LSQ, NF4 + LoRA and FP8 on the digits data: a table",
          _lazy("fpsim.quant.experiment", "configure_parser"),
          _lazy("fpsim.quant.experiment", "run_cli"), (Output("json", OutputKind.FILE),))
_register("memory", "ZeRO model-state memory per rank, communication, fits-on-GPU",
          _lazy("fpsim.memory", "configure_parser"), _lazy("fpsim.memory", "run_cli"))
_register("zero", "ZeRO stages 0-3 on N ranks: simulated, or MPI processes (fpsim[mpi])",
          _lazy("fpsim.cli_zero", "configure_parser"),
          _lazy("fpsim.cli_zero", "run_cli"))
_register("notebooks", "write the course notebooks into a folder (--student: solutions removed)",
          _lazy("fpsim.course", "configure_parser"), _lazy("fpsim.course", "run_cli"),
          (Output("out", OutputKind.DIR, metavar="DIR"),))
_register("probe", "reveal a sum's accumulation order, or fingerprint a GPU unit (black box)",
          _lazy("fpsim.probe.cli", "configure_parser"), _lazy("fpsim.probe.cli", "run_cli"))


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``fpsim`` command.

    >>> build_parser().prog
    'fpsim'
    """
    parser = argparse.ArgumentParser(prog="fpsim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, configure, _) in _COMMANDS.items():
        configure(accept_negative_values(sub.add_parser(name, help=help_text)))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fpsim`` console script. Every error is one line on stderr and an
    exit status (2: a bad argument, output paths included, checked before the command works;
    1: the command failed), never a traceback (:mod:`fpsim.cli_common`).

    >>> main(["show", "1", "--format", "fp16"])  # doctest: +ELLIPSIS
    input ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a command is required: help on stderr, a usage error
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "format", "x") is None:
        args.format = ["fp16"]
    try:
        check_outputs(args, _OUTPUTS.get(args.command, ()))
        return int(_COMMANDS[args.command][2](args) or 0)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - one line, not a traceback
        status, line = error_line(args.command, exc)
        print(line, file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
