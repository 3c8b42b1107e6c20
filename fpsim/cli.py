"""The ``fpsim`` command line: ``fpsim formats``, ``fpsim show``, ``fpsim demo`` and friends."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import numpy as np

from .encoding import bit_string, classify, next_down, next_up
from .flags import Flags
from .formats import PRESETS, get_format
from .modes import Rounding
from .rounding import round as fp_round


def _fmt_num(v: float) -> str:
    return f"{v:.9g}"


def formats_table() -> str:
    """The table of preset formats: bits, bias, min subnormal, min normal, max, eps, u.

    >>> "fp16" in formats_table()
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
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=False)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) for r in rows]
    return "\n".join(lines)


def show_value(value: float, fmt_name: str, rounding: str = "nearest_even") -> str:
    """A value rounded to a format: the value, its bits, class, error and neighbours.

    >>> print(show_value(0.1, "fp16").splitlines()[1])
    rounded      : 0.0999755859375
    """
    fmt = get_format(fmt_name)
    v, fl = fp_round(value, fmt, rounding, flags=True)
    v = float(v)
    lines = [f"input        : {value!r} -> {fmt.name}, rounding {Rounding(rounding).value}"
             if rounding in Rounding._value2member_map_ else
             f"input        : {value!r} -> {fmt.name}, rounding {rounding}",
             f"rounded      : {v!r}",
             f"bits         : {bit_string(v, fmt)}   (sign | exponent | mantissa)",
             f"class        : {classify(v, fmt)}"]
    if np.isfinite(v) and np.isfinite(value):
        err = v - value
        rel = abs(err) / abs(value) if value != 0 else 0.0
        lines.append(f"error        : {err:+.6g} (relative {rel:.3g}, unit roundoff "
                     f"{fmt.unit_roundoff:.3g})")
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


def _cmd_formats(args: argparse.Namespace) -> int:
    print(formats_table())
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        value = float(args.value)
    except ValueError:
        print(f"fpsim show: VALUE must be a number, got {args.value!r}", file=sys.stderr)
        return 2
    for name in args.format:
        print(show_value(value, name, args.rounding))
        print()
    return 0


def _cmd_tour(args: argparse.Namespace) -> int:
    print(demo_tour())
    return 0


# name -> (help, configure parser, handler); other layers add their commands here lazily.
_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {}


def _register(name: str, help_text: str, configure: Callable, handler: Callable) -> None:
    _COMMANDS[name] = (help_text, configure, handler)


def _configure_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("value", help="a real number, e.g. 0.1 or 65520")
    p.add_argument("--format", "-f", action="append", default=None,
                   help="format name (repeatable; default fp16): " + ", ".join(PRESETS))
    p.add_argument("--rounding", "-r", default="nearest_even",
                   help="rounding mode: " + ", ".join(m.value for m in Rounding))


_register("formats", "table of the preset formats", lambda p: None, _cmd_formats)
_register("show", "show a value rounded to a format, bit by bit", _configure_show, _cmd_show)
_register("tour", "a short tour of the formats and one rounding example per mode",
          lambda p: None, _cmd_tour)


def _lazy(module: str, attr: str) -> Callable:
    """A parser hook or handler from a module imported only when the command is used."""

    def call(*args):
        import importlib

        return getattr(importlib.import_module(module), attr)(*args)

    return call


_register("demo", "the main job: FP32 / FP16 / mixed-precision training on the digits, measured",
          _lazy("fpsim.training.cli", "configure_demo_parser"),
          _lazy("fpsim.training.cli", "run_demo_cli"))
_register("train", "train one precision recipe on the digits data",
          _lazy("fpsim.training.cli", "configure_train_parser"),
          _lazy("fpsim.training.cli", "run_train_cli"))
_register("check-hardware", "compare the tensor-core model with measured GPU results",
          _lazy("fpsim.tensorcore", "configure_parser"), _lazy("fpsim.tensorcore", "run_cli"))
_register("figures", "render the README figures to PNG files",
          _lazy("fpsim.viz.gallery", "configure_parser"), _lazy("fpsim.viz.gallery", "run_cli"))
_register("quant", "INT8 PTQ / QAT, LSQ, NF4 + LoRA and FP8 on the digits data: a table",
          _lazy("fpsim.quant.experiment", "configure_parser"),
          _lazy("fpsim.quant.experiment", "run_cli"))
_register("memory", "ZeRO model-state memory per rank, communication, fits-on-GPU",
          _lazy("fpsim.memory", "configure_parser"), _lazy("fpsim.memory", "run_cli"))


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``fpsim`` command.

    >>> build_parser().prog
    'fpsim'
    """
    parser = argparse.ArgumentParser(prog="fpsim", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, configure, _) in _COMMANDS.items():
        configure(sub.add_parser(name, help=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fpsim`` console script.

    >>> main(["show", "1", "--format", "fp16"])  # doctest: +ELLIPSIS
    input ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if getattr(args, "format", "x") is None:
        args.format = ["fp16"]
    try:
        return int(_COMMANDS[args.command][2](args) or 0)
    except (ValueError, TypeError) as exc:
        print(f"fpsim {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
