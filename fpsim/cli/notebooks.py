"""``fpsim notebooks [--student] [--force] [--source DIR] DIR``: write the course notebooks
into a folder, the instructor editions or (``--student``) the student editions with the
solutions removed (:mod:`fpsim.course`).

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (``DIR``), :func:`configure_parser`
and :func:`run_cli`.

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> a = p.parse_args(["out", "--student"]); a.out, a.student, a.force
('out', True, False)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..course import default_source, write_student_editions, write_teacher_editions
from .common import Output, OutputKind

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli"]

HELP = "write the course notebooks into a folder (--student: solutions removed)"
OUTPUTS = (Output("out", OutputKind.DIR, metavar="DIR"),)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of the ``notebooks`` subcommand."""
    parser.add_argument("out", metavar="DIR",
                        help="folder to write the notebooks into (created if missing)")
    parser.add_argument("--student", action="store_true",
                        help="write student editions (solutions removed, outputs cleared) "
                             "instead of the instructor editions")
    parser.add_argument("--force", action="store_true",
                        help="overwrite notebooks already in DIR (by default fpsim refuses, "
                             "naming them, so that no edited notebook is lost)")
    parser.add_argument("--source", default=None,
                        help="folder of instructor notebooks (default: the ones shipped with "
                             "fpsim)")


def run_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim notebooks [--student] [--force] DIR``: prints the paths written.

    >>> import contextlib, io, tempfile
    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     status = run_cli(p.parse_args([tempfile.mkdtemp()]))
    >>> status, out.getvalue().splitlines()[0].endswith("01_formats_and_rounding.ipynb")
    (0, True)
    """
    source = Path(args.source) if args.source else default_source()
    if args.student:
        try:
            import nbconvert  # noqa: F401
            import nbformat  # noqa: F401
        except ImportError as exc:
            raise ValueError(f"fpsim notebooks --student needs nbformat and nbconvert ({exc}); "
                             "install them: pip install 'fpsim[course]'") from None
        written = write_student_editions(source, args.out, force=args.force)
    else:
        written = write_teacher_editions(source, args.out, force=args.force)
    for path in written:
        print(path)
    return 0
