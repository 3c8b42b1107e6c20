"""What every ``fpsim`` command shares, in the command-line layer (:func:`fpsim.cli.main`
applies it to each command; a command module declares the output options it writes in its
``OUTPUTS``):

- **Output paths are checked before a command works.** :func:`check_output_path` says, in one
  line, why a file (``--json PATH``) or a folder (``--out DIR``) cannot be written: a folder
  where a file is wanted or the other way round, a parent that does not exist or is a file, a
  place the process may not write. It writes nothing it leaves behind (it probes with a
  temporary file it removes, and creates no folder), so a command refused later for another
  argument has left no trace. :func:`check_outputs` applies it to a command's declared
  :class:`Output` options, so ``fpsim quant --json BADPATH`` fails at once, not after the
  experiment, with its results lost.
- **Negative-looking values are values.** :data:`NEGATIVE_NUMBER` is the pattern by which a
  parser reads ``-inf``, ``-nan``, ``-1e999`` or ``-.5`` as a value (argparse's own pattern
  takes only ``-1`` and ``-1.5``, and read ``fpsim show -inf`` as an unknown option);
  :func:`accept_negative_values` gives it to a parser.
- **Every error is one clear line** (:func:`error_line`): the exit status and message of an
  exception escaping a command, never a traceback.

>>> check_output_path("results.json", Output("json", OutputKind.FILE))
PosixPath('results.json')
"""

from __future__ import annotations

import argparse
import enum
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OutputKind", "Output", "check_output_path", "check_outputs", "NEGATIVE_NUMBER",
           "accept_negative_values", "error_line", "EXIT_USAGE", "EXIT_FAILURE"]

EXIT_USAGE = 2  # a bad argument (argparse's own status for one)
EXIT_FAILURE = 1  # the command could not do its work
# an optional sign-less decimal after the "-": digits, a point, an exponent; or inf / nan
NEGATIVE_NUMBER = re.compile(r"^-((\d[\d_]*\.?\d*|\.\d+)(e[-+]?\d+)?|inf|infinity|nan)$", re.I)


class OutputKind(enum.Enum):
    """What an output option names: a file the command writes, or a folder it writes into
    (and creates, with its parents, if needed)."""

    FILE = "file"
    DIR = "folder"


@dataclass(frozen=True)
class Output:
    """An output option of a command: its ``dest`` in the parsed arguments, what it names,
    the ``dest`` of a flag that turns the writing off (``--no-plots``, ``--list``), and for a
    positional argument its ``metavar`` (``DIR``), the name its messages use."""

    dest: str
    kind: OutputKind
    unless: str | None = None
    metavar: str | None = None

    @property
    def positional(self) -> bool:
        """True for a positional argument (it has a metavar, not an option string)."""
        return self.metavar is not None

    @property
    def option(self) -> str:
        """The option as the user types it (a positional argument's metavar)."""
        return self.metavar if self.positional else "--" + self.dest.replace("_", "-")


def _probe_dir(folder: Path) -> None:
    """OSError unless a file can be created (and removed) in the existing ``folder``."""
    fd, name = tempfile.mkstemp(prefix=".fpsim-write-test-", dir=folder)
    os.close(fd)
    os.unlink(name)


def check_output_path(path: str | os.PathLike, out: Output) -> Path:
    """``path`` as a Path when ``out`` (a file or a folder option) can be written there; else
    ValueError naming the option, the path and the reason. Nothing is left behind.

    >>> check_output_path("/dev/null/x.json", Output("json", OutputKind.FILE))
    Traceback (most recent call last):
    ...
    ValueError: --json '/dev/null/x.json': its folder '/dev/null' is not a folder
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{out.option} takes a path, got {type(path).__name__}")
    text = os.fspath(path)
    if not text or not str(text).strip():
        raise ValueError(f"{out.option} needs a path, got {text!r}")
    p = Path(text)
    where = f"{out.option} {text!r}"
    if "\0" in str(text):  # Path.exists() says False for it, and the OS refuses it
        raise ValueError(f"{where} is not a usable path: it holds a NUL byte")
    try:
        if out.kind is OutputKind.FILE:
            if p.is_dir():
                raise ValueError(f"{where} is a folder; give the path of a file")
            parent = p.parent
            if not parent.exists():
                raise ValueError(f"{where}: its folder {str(parent)!r} does not exist")
            if not parent.is_dir():
                raise ValueError(f"{where}: its folder {str(parent)!r} is not a folder")
            if p.exists():
                with p.open("ab"):  # opens for writing without changing a byte
                    pass
            else:
                _probe_dir(parent)
            return p
        if p.exists() and not p.is_dir():
            raise ValueError(f"{where} is a file, not a folder")
        ancestor = p
        while not ancestor.exists():  # the folder and its parents are created when written
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise ValueError(f"{where}: {str(ancestor)!r} is a file, not a folder")
        _probe_dir(ancestor)
    except OSError as exc:
        raise ValueError(f"{where} cannot be written: {exc.strerror or exc}") from None
    return p


def check_outputs(args: argparse.Namespace, outputs: Sequence[Output]) -> None:
    """:func:`check_output_path` on each of ``outputs`` given in ``args`` (an option left at
    None, or turned off by its ``unless`` flag, writes nothing and is not checked).

    >>> check_outputs(argparse.Namespace(out="/dev/null", no_plots=True),
    ...               [Output("out", OutputKind.DIR, unless="no_plots")])
    """
    for out in outputs:
        value = getattr(args, out.dest, None)
        if value is None or (out.unless is not None and getattr(args, out.unless, False)):
            continue
        check_output_path(value, out)


def accept_negative_values(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make ``parser`` read :data:`NEGATIVE_NUMBER` arguments (``-inf``, ``-nan``, ``-1e5``)
    as values, positional or after an option, rather than as unknown options; returns it.

    >>> p = accept_negative_values(argparse.ArgumentParser())
    >>> _ = p.add_argument("x"); _ = p.add_argument("--lr", type=float)
    >>> a = p.parse_args(["-inf", "--lr", "-1e-3"]); a.x, a.lr
    ('-inf', -0.001)
    """
    # argparse keeps the pattern as a private attribute (the only hook it has): checked by
    # tests/test_cli_sweep.py on the Python that runs the suite
    parser._negative_number_matcher = NEGATIVE_NUMBER
    return parser


def error_line(command: str, exc: BaseException) -> tuple[int, str]:
    """The exit status and the one-line message (``fpsim COMMAND: ...``) of an exception that
    escaped ``command``: a bad argument (ValueError, TypeError: 2), the OS refusing a file
    (its own words and the path: 1), no memory, an interrupt, or a bug in fpsim (1, said so).

    >>> error_line("quant", ValueError("--seeds must be >= 1, got 0"))
    (2, 'fpsim quant: --seeds must be >= 1, got 0')
    >>> error_line("quant", FileNotFoundError(2, "No such file or directory", "x/y.json"))
    (1, "fpsim quant: No such file or directory: 'x/y.json'")
    """
    head = f"fpsim {command}: "
    if isinstance(exc, (ValueError, TypeError)):
        return EXIT_USAGE, head + str(exc)
    if isinstance(exc, OSError):
        name = f": {exc.filename!r}" if exc.filename is not None else ""
        return EXIT_FAILURE, head + f"{exc.strerror or exc}{name}"
    if isinstance(exc, MemoryError):
        return EXIT_FAILURE, head + f"out of memory ({exc or 'the arguments ask for more'}); " \
                                    "ask for less"
    if isinstance(exc, KeyboardInterrupt):
        return 130, head + "interrupted"
    return EXIT_FAILURE, head + (f"internal error, a bug in fpsim (please report it with the "
                                 f"command line): {type(exc).__name__}: {exc}")
