"""The course around the notebooks: auto-checked numeric questions and student editions.

- :func:`checker` gives a notebook its ``check(question, answer)``: it says whether a numeric
  answer is right without printing the expected value. The answer key below holds facts of the
  formats (each checked in tests/test_course.py against NumPy / ml_dtypes casts or exact
  arithmetic, independently of fpsim).
- :func:`student_edition` turns an instructor notebook into a student one: the cells tagged
  ``solution`` are removed (nbconvert's ``TagRemovePreprocessor``), every output is cleared
  (``ClearOutputPreprocessor``), and a placeholder cell stands where each solution was (a
  ``check(question, ...)`` line for a checked answer, ``# your code here`` otherwise) unless the
  exercise already has one.
- ``fpsim notebooks --student OUT/`` writes the student edition of every notebook
  (:func:`run_cli`); nbformat and nbconvert come with the ``test`` extra.

Solution cells are tagged ``solution`` in the notebooks' jupytext sources
(``# %% tags=["solution"]``); so is the "Solution" heading above each, which goes too.

>>> check = checker("02")
>>> check("fp16 2048 + 1", 2048)
right
>>> check("fp16 2048 + 1", 2049)  # doctest: +ELLIPSIS
not right yet: fp16 2048 + 1: what is the spacing of fp16 numbers just above 2**11? A tie goes...
"""

from __future__ import annotations

import argparse
import ast
import math
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

import numpy as np

__all__ = ["QUESTIONS", "Question", "Verdict", "checker", "configure_parser", "run_cli",
           "student_edition", "write_student_editions"]

SOLUTION_TAG = "solution"
PLACEHOLDER = "# your code here"
# Where a checked answer is stripped, the student gets this line to complete.
CHECK_PLACEHOLDER = "check({question!r}, ...)  # replace ... with your answer"


@dataclass(frozen=True)
class Question:
    """A numeric question: its answer, the tolerance it is checked with, and a hint shown on a
    wrong answer (never the answer itself)."""

    answer: float
    hint: str
    rel_tol: float = 0.0


# notebook -> question -> Question. Facts of the formats and exact arithmetic; tests/test_course.py
# checks each against NumPy / ml_dtypes casts or exact arithmetic, without fpsim.
QUESTIONS: dict[str, dict[str, Question]] = {
    "01": {
        "largest N in fp16": Question(
            2048.0, "count the significand bits, the hidden bit included"),
        "fp16 add(65519, 1)": Question(
            math.inf, "the exact sum is rounded once: where is the rounding boundary above "
            "fp16's largest finite value?"),
    },
    "02": {
        "fp16(2**-25)": Question(
            0.0, "2**-25 is exactly half the smallest subnormal: a tie"),
        "fp16 2048 + 1": Question(
            2048.0, "what is the spacing of fp16 numbers just above 2**11? A tie goes to the "
            "even neighbour"),
    },
    "03": {
        "bytes per parameter, Adam + master": Question(
            16.0, "fp16 weight and gradient, plus fp32 master, exp_avg and exp_avg_sq"),
    },
    "05": {
        "parameters on 80 GB with offload": Question(
            40e9, "with offload only the fp16 parameters stay on the GPU"),
    },
    "06": {
        "quint8 scale for [-1, 3]": Question(
            4 / 255, "s = (max - min) / (qmax - qmin)", rel_tol=1e-6),
        "quint8 zero point for [-1, 3]": Question(
            64.0, "z = qmin - round(min / s)"),
    },
    "08": {
        "fp16(1e-8)": Question(
            0.0, "compare 1e-8 with fp16's smallest subnormal, 2**-24 (about 6e-8)"),
        "largest integer x with exp(x) finite in fp16": Question(
            11.0, "fp16's largest value is 65504: take its natural logarithm"),
    },
    "09": {
        "A100 waves for 2560 tiles": Question(
            24.0, "one tile per SM at a time; A100 has 108 SMs and a partial wave costs a "
            "whole one"),
    },
}


@dataclass(frozen=True)
class Verdict:
    """The result of a check: truthy when right; it displays as its message."""

    right: bool
    message: str

    def __bool__(self) -> bool:
        return self.right

    def __repr__(self) -> str:
        return self.message


def _as_number(answer) -> float:
    if isinstance(answer, bool) or not isinstance(answer, (Real, np.number, np.ndarray)):
        raise TypeError(f"answer must be a number, got {type(answer).__name__} ({answer!r})")
    a = np.asarray(answer)
    if a.size != 1 or a.dtype.kind not in "iuf":
        raise TypeError(f"answer must be a single real number, got {answer!r}")
    return float(a.astype(np.float64).reshape(()))


def _is_right(answer: float, q: Question) -> bool:
    if math.isnan(q.answer) or math.isnan(answer):
        return math.isnan(q.answer) and math.isnan(answer)
    if math.isinf(q.answer) or math.isinf(answer) or q.rel_tol == 0.0:
        return answer == q.answer
    return math.isclose(answer, q.answer, rel_tol=q.rel_tol)


class _Checker:
    """``check(question, answer)`` for one notebook's questions."""

    def __init__(self, notebook: str, questions: dict[str, Question]) -> None:
        self.notebook = notebook
        self.questions = questions

    def __call__(self, question: str, answer) -> Verdict:
        if question not in self.questions:
            raise ValueError(f"question must be one of notebook {self.notebook}'s questions "
                             f"{sorted(self.questions)}, got {question!r}")
        if answer is Ellipsis:
            return Verdict(False, f"{question}: replace ... with your answer")
        q = self.questions[question]
        if _is_right(_as_number(answer), q):
            return Verdict(True, "right")
        return Verdict(False, f"not right yet: {question}: {q.hint}")

    def __repr__(self) -> str:
        return f"check for notebook {self.notebook}: questions {sorted(self.questions)}"


def checker(notebook: str) -> _Checker:
    """The ``check(question, answer)`` of notebook ``notebook`` ("01" ... "09").

    >>> checker("02")("fp16(2**-25)", 0)
    right
    """
    if notebook not in QUESTIONS:
        raise ValueError(f"notebook must be one of {sorted(QUESTIONS)}, got {notebook!r}")
    return _Checker(notebook, QUESTIONS[notebook])


# ----------------------------------------------------------------------------- student editions
def _checked_questions(source: str) -> list[str]:
    """The questions a solution cell answers with ``check("...", answer)`` calls, in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name) and node.func.id == "check"
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)),
                   key=lambda node: (node.lineno, node.col_offset))
    return [node.args[0].value for node in calls]


def _is_placeholder(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(
        (PLACEHOLDER, "check(")) and SOLUTION_TAG not in cell.metadata.get("tags", [])


def student_edition(nb):
    """A student copy of the notebook ``nb`` (an ``nbformat.NotebookNode``, not modified):
    solution cells removed, outputs cleared, a placeholder where each solution was.

    >>> from nbformat.v4 import new_notebook, new_code_cell, new_markdown_cell
    >>> nb = new_notebook(cells=[new_markdown_cell("Exercise"),
    ...     new_code_cell("x = 1", metadata={"tags": ["solution"]})])
    >>> [c.source for c in student_edition(nb).cells]
    ['Exercise', '# your code here']
    """
    import copy

    from nbconvert.preprocessors import ClearOutputPreprocessor, TagRemovePreprocessor
    from nbformat.v4 import new_code_cell

    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        if SOLUTION_TAG not in cell.metadata.get("tags", []):
            cells.append(cell)
            continue
        if cell.cell_type != "code":
            continue
        asked = _checked_questions(cell.source)
        if asked:  # one line per question; print() so that every verdict shows
            lines = [CHECK_PLACEHOLDER.format(question=q) for q in asked]
            if len(lines) > 1:
                lines = [f"print({line.replace('  #', ')  #', 1)}" for line in lines]
            cells.append(new_code_cell("\n".join(lines)))
        elif not (cells and _is_placeholder(cells[-1])):
            cells.append(new_code_cell(PLACEHOLDER))
        cells.append(cell)  # removed below by its tag, as nbconvert does
    nb.cells = cells
    resources: dict = {}
    nb, resources = TagRemovePreprocessor(remove_cell_tags={SOLUTION_TAG}).preprocess(
        nb, resources)
    nb, resources = ClearOutputPreprocessor().preprocess(nb, resources)
    for cell in nb.cells:  # a hidden source made sense only for solutions
        cell.metadata.pop("jupyter", None)
    return nb


def write_student_editions(source: Path | str, out: Path | str) -> list[Path]:
    """Write the student edition of every ``*.ipynb`` in ``source`` into ``out``; returns the
    written paths."""
    import nbformat

    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise ValueError(f"source must be a folder of notebooks, got {str(source)!r}")
    paths = sorted(source.glob("*.ipynb"))
    if not paths:
        raise ValueError(f"source {str(source)!r} holds no .ipynb notebooks")
    if out.resolve() == source.resolve():
        raise ValueError("out must differ from source (the instructor editions would be "
                         "overwritten)")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        nb = student_edition(nbformat.read(path, as_version=4))
        nb.metadata.pop("jupytext", None)  # the student copy is not paired with a source
        nbformat.validate(nb)
        target = out / path.name
        nbformat.write(nb, target)
        written.append(target)
    return written


def _default_source() -> Path:
    return Path(__file__).resolve().parents[1] / "notebooks"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of the ``notebooks`` subcommand."""
    parser.add_argument("--student", metavar="OUT", required=True,
                        help="write student editions (solutions removed, outputs cleared) "
                             "into this folder")
    parser.add_argument("--source", default=None,
                        help="folder of instructor notebooks (default: the repository's "
                             "notebooks/)")


def run_cli(args: argparse.Namespace) -> int:
    """Run ``fpsim notebooks --student OUT/``."""
    try:
        import nbconvert  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as exc:
        raise ValueError(f"fpsim notebooks needs nbformat and nbconvert ({exc}); install "
                         "them, e.g. pip install 'fpsim[test]'") from None
    source = Path(args.source) if args.source else _default_source()
    for path in write_student_editions(source, args.student):
        print(path)
    return 0
