"""The ``fpsim`` command: the top layer of fpsim, above :mod:`fpsim.training` and
:mod:`fpsim.viz` (which do not import each other; what joins them for a command lives here).

One module per subcommand (``fpsim formats`` is :mod:`fpsim.cli.formats`, ``fpsim
check-hardware`` is :mod:`fpsim.cli.check_hardware`, ...), each holding the same four names:

- ``HELP``: its line in ``fpsim --help``;
- ``OUTPUTS``: the options naming the files or folders it writes (:class:`~fpsim.cli.common.
  Output`), checked by :func:`main` before the command works;
- ``configure_parser(parser)``: adds its arguments to an argparse parser;
- ``run_cli(args) -> int``: runs it on the parsed arguments and returns the exit status.

:data:`COMMANDS` lists them in the order ``fpsim --help`` shows; what every command shares (the
output checks, negative-looking values, one-line errors) is :mod:`fpsim.cli.common`. The
console script ``fpsim`` and ``python -m fpsim.cli`` run :func:`main`.

>>> sorted(COMMANDS)[:3]
['check-hardware', 'demo', 'figures']
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from . import (
    check_hardware,
    demo,
    figures,
    formats,
    lm,
    memory,
    notebooks,
    probe,
    quant,
    show,
    tour,
    train,
    zero,
)
from .common import Output, accept_negative_values, check_outputs, error_line

__all__ = ["COMMANDS", "DESCRIPTION", "build_parser", "main"]

#: What ``fpsim --help`` says above the commands.
DESCRIPTION = """The fpsim command line: fpsim formats, fpsim show, fpsim demo and friends.

Run a command with --help for its options, e.g. fpsim show --help.
"""

#: command name -> its module, in the order ``fpsim --help`` lists them
COMMANDS: dict[str, ModuleType] = {
    "formats": formats, "show": show, "tour": tour, "demo": demo, "train": train, "lm": lm,
    "check-hardware": check_hardware, "figures": figures, "quant": quant, "memory": memory,
    "zero": zero, "notebooks": notebooks, "probe": probe,
}

# name -> (help, configure parser, handler): what main() runs (tests swap a handler here)
_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    name: (m.HELP, m.configure_parser, m.run_cli) for name, m in COMMANDS.items()}
# name -> the options naming files or folders the command writes: checked before it runs
_OUTPUTS: dict[str, tuple[Output, ...]] = {name: m.OUTPUTS for name, m in COMMANDS.items()}


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``fpsim`` command.

    >>> build_parser().prog
    'fpsim'
    """
    parser = argparse.ArgumentParser(prog="fpsim", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, configure, _) in _COMMANDS.items():
        configure(accept_negative_values(sub.add_parser(name, help=help_text)))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fpsim`` console script. Every error is one line on stderr and an
    exit status (2: a bad argument, output paths included, checked before the command works;
    1: the command failed), never a traceback (:mod:`fpsim.cli.common`).

    >>> main(["show", "1", "--format", "fp16"])  # doctest: +ELLIPSIS
    input ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a command is required: help on stderr, a usage error
        parser.print_help(sys.stderr)
        return 2
    try:
        check_outputs(args, _OUTPUTS.get(args.command, ()))
        return int(_COMMANDS[args.command][2](args) or 0)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - one line, not a traceback
        status, line = error_line(args.command, exc)
        print(line, file=sys.stderr)
        return status
