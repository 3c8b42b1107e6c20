"""Shared pieces of the notebook generators (tools/make_notebooks_*.py): cell builders, and
writing a notebook after executing it with nbclient so it is stored with its outputs."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = ROOT / "notebooks"


def md(text: str):
    """A markdown cell (surrounding blank lines dropped)."""
    return new_markdown_cell(text.strip("\n"))


def code(src: str):
    """A code cell (surrounding blank lines dropped)."""
    return new_code_cell(src.strip("\n"))


def hidden_code(src: str):
    """A collapsed (source-hidden) code cell tagged 'solution'."""
    cell = new_code_cell(src.strip("\n"))
    cell.metadata["jupyter"] = {"source_hidden": True}
    cell.metadata["tags"] = ["solution"]
    return cell


def solution(src: str, title: str = "Solution") -> list:
    """A 'Solution' heading and a collapsed code cell holding an exercise's solution."""
    return [md(f"#### {title}\n\n*(Expand the hidden cell below to see one solution.)*"),
            hidden_code(src)]


def write_notebook(cells: list, path: Path, execute: bool = True) -> float:
    """Build a notebook from ``cells``, execute it in a temporary folder (as CI does) when
    ``execute``, validate and write it; returns the execution time in seconds."""
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    seconds = 0.0
    if execute:
        from nbclient import NotebookClient

        with tempfile.TemporaryDirectory() as tmp:
            client = NotebookClient(nb, timeout=300, kernel_name="python3",
                                    record_timing=False, resources={"metadata": {"path": tmp}})
            t0 = time.perf_counter()
            client.execute()
            seconds = time.perf_counter() - t0
    path.parent.mkdir(exist_ok=True)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(notebooks: dict[str, tuple[str, Callable[[], list]]], description: str,
         argv: list[str] | None = None) -> int:
    """The command line of a generator: build the named notebooks (default: all)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("which", nargs="*", help=f"notebooks to build: {', '.join(notebooks)} "
                   "(default: all)")
    p.add_argument("--no-execute", action="store_true", help="write without outputs")
    args = p.parse_args(argv)
    unknown = [k for k in args.which if k not in notebooks]
    if unknown:
        p.error(f"unknown notebook(s) {', '.join(unknown)}; valid: {', '.join(notebooks)}")
    for key in args.which or list(notebooks):
        name, make = notebooks[key]
        path = NOTEBOOKS_DIR / name
        seconds = write_notebook(make(), path, execute=not args.no_execute)
        rel = path.relative_to(ROOT)
        print(f"{rel}: executed in {seconds:.1f} s" if seconds else f"{rel}: written")
    return 0
