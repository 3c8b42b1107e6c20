"""fpsim.course: the answer key of the notebooks' auto-checked questions against NumPy casts and
exact arithmetic (not fpsim), check() saying right/wrong without revealing the answer, and the
student editions (solutions stripped, outputs cleared, a placeholder where each solution was,
no later cell relying on a stripped one)."""

from __future__ import annotations

import ast
import builtins
import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fpsim import course
from fpsim.cli import main

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")


def _largest_run_of_integers_fp16() -> float:
    n = np.arange(0, 10_000)
    exact = n.astype(np.float16).astype(np.int64) == n
    return float(np.argmin(exact) - 1)  # the last N before the first inexact integer


def _quint8_qparams(lo: float, hi: float) -> tuple[Fraction, int]:
    # PyTorch's affine observer formula (docs/facts in the design card), in exact arithmetic
    s = (Fraction(hi) - Fraction(lo)) / 255
    return s, 0 - round(Fraction(lo) / s)


# question -> its answer from an independent reference: NumPy's IEEE fp16 casts of exact values,
# or exact arithmetic on published constants.
REFERENCES = {
    "largest N in fp16": _largest_run_of_integers_fp16,
    "fp16 add(65519, 1)": lambda: float(np.float16(65519.0 + 1.0)),  # exact sum, one rounding
    "fp16(2**-25)": lambda: float(np.float16(2.0**-25)),
    "fp16 2048 + 1": lambda: float(np.float16(2049.0)),
    "bytes per parameter, Adam + master": lambda: 2 + 2 + 3 * 4,  # ZeRO's 2 + 2 + K, K = 12
    "A100 waves for 2560 tiles": lambda: math.ceil(2560 / 108),  # A100: 108 SMs
    "parameters on 80 GB with offload": lambda: 80e9 / 2,  # fp16 parameters only
    "quint8 scale for [-1, 3]": lambda: float(_quint8_qparams(-1, 3)[0]),
    "quint8 zero point for [-1, 3]": lambda: _quint8_qparams(-1, 3)[1],
    "fp16(1e-8)": lambda: float(np.float16(1e-8)),
    "largest integer x with exp(x) finite in fp16": lambda: float(
        max(x for x in range(30) if np.isfinite(np.float16(math.exp(x))))),
}


def _all_questions():
    return [(nb, q) for nb, qs in course.QUESTIONS.items() for q in qs]


@pytest.mark.parametrize(("notebook", "question"), _all_questions())
def test_answer_key_matches_reference(notebook: str, question: str) -> None:
    assert question in REFERENCES, f"add an independent reference for {question!r}"
    with np.errstate(over="ignore"):  # the casts to fp16 overflow on purpose
        expected = REFERENCES[question]()
    q = course.QUESTIONS[notebook][question]
    if q.rel_tol:
        assert math.isclose(q.answer, expected, rel_tol=1e-12)
    else:
        assert q.answer == expected
    check = course.checker(notebook)
    assert check(question, expected)
    assert check(question, np.float64(expected))


@pytest.mark.parametrize(("notebook", "question"), _all_questions())
def test_wrong_answer_is_told_without_the_answer(notebook: str, question: str) -> None:
    q = course.QUESTIONS[notebook][question]
    check = course.checker(notebook)
    wrong = 1.0 if q.answer != 1.0 else 2.0
    verdict = check(question, wrong)
    assert not verdict and verdict.message.startswith("not right yet")
    text = verdict.message.replace(question, "")
    for spelling in {f"{q.answer:g}", repr(q.answer), f"{q.answer:.0f}"
                     if math.isfinite(q.answer) else "inf"}:
        assert not re.search(rf"(?<![\w.]){re.escape(spelling)}(?![\w.])", text), spelling
    if q.rel_tol:  # within the tolerance is right, outside it is wrong
        assert check(question, q.answer * (1 + q.rel_tol / 2))
        assert not check(question, q.answer * (1 + 4 * q.rel_tol))


def test_check_bad_input() -> None:
    check = course.checker("02")
    with pytest.raises(ValueError, match="question must be one of"):
        check("no such question", 1)
    with pytest.raises(TypeError, match="answer must be a number"):
        check("fp16 2048 + 1", "2048")
    with pytest.raises(TypeError, match="answer must be a number"):
        check("fp16 2048 + 1", True)
    with pytest.raises(TypeError, match="single real number"):
        check("fp16 2048 + 1", np.array([2048, 2048]))
    with pytest.raises(ValueError, match="notebook must be one of"):
        course.checker("99")
    assert not check("fp16 2048 + 1", ...)
    assert "replace ..." in repr(check("fp16 2048 + 1", ...))
    assert check("fp16 2048 + 1", np.float16(2048))
    assert not check("fp16(2**-25)", float("nan"))


def _checks_in(source: str) -> list[str]:
    return course._checked_questions(source)


def _number(path: Path) -> str:
    return path.name[:2]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_questions_are_known_and_answered_right(path: Path) -> None:
    """Every check() in a notebook names a question of its own key and its stored output (the
    instructor's answer, executed) says right; every question of the key is asked."""
    nb = nbformat.read(path, as_version=4)
    asked = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        questions = _checks_in(cell.source)
        asked += questions
        if questions and "solution" in cell.metadata.get("tags", []):
            shown = [o["data"]["text/plain"] for o in cell.outputs
                     if o.get("output_type") == "execute_result"]
            printed = "".join(o.get("text", "") for o in cell.outputs
                              if o.get("output_type") == "stream")
            said_right = len(re.findall(r"(?<!not )\bright\b", printed))
            assert shown == ["right"] or said_right == len(questions), cell.source
    assert set(asked) <= set(course.QUESTIONS.get(_number(path), {}))
    assert set(course.QUESTIONS.get(_number(path), {})) <= set(asked)


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds anywhere, names it loads) of a code cell; IPython magics skipped."""
    source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(
        ("%", "!")))
    tree = ast.parse(source)
    bound, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, loaded


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_student_edition(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    student = course.student_edition(nb)
    assert nbformat.writes(nb) == before  # the instructor edition is not modified
    nbformat.validate(student)
    solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    assert any(c.cell_type == "code" for c in solutions), "no solution cells tagged"
    kept = [c for c in nb.cells if "solution" not in c.metadata.get("tags", [])]
    for cell in student.cells:
        assert "solution" not in cell.metadata.get("tags", [])
        assert "jupyter" not in cell.metadata
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    # the instructor's other cells, in order, plus placeholders only
    extra = [c for c in student.cells if c.source not in {k.source for k in kept}]
    assert all(c.source.startswith((course.PLACEHOLDER, "check(", "print(check("))
               for c in extra)
    assert [c.source for c in student.cells if c not in extra] == [c.source for c in kept]
    # a placeholder where each solution code cell was
    cells, i = nb.cells, 0
    for k, cell in enumerate(cells):
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            i += 1
            prev = [c for c in cells[:k] if "solution" not in c.metadata.get("tags", [])]
            asked = _checks_in(cell.source)
            if asked:
                assert any(all(f"check({q!r}, ...)" in c.source for q in asked)
                           for c in student.cells), asked
            else:
                assert prev[-1].source.startswith(course.PLACEHOLDER) or any(
                    c.source == course.PLACEHOLDER for c in extra)
    assert i == len([c for c in solutions if c.cell_type == "code"])
    # nothing after a stripped solution depends on a name only that solution defined
    solution_names: set[str] = set()
    for cell in solutions:
        if cell.cell_type == "code":
            solution_names |= _names(cell.source)[0]
    defined = set(dir(builtins)) | {"display", "get_ipython"}
    for cell in student.cells:
        if cell.cell_type != "code":
            continue
        bound, loaded = _names(cell.source)
        missing = (loaded - defined - bound) & solution_names
        assert not missing, f"{path.name}: {sorted(missing)} defined only in a solution:\n" \
                            f"{cell.source[:200]}"
        defined |= bound


def test_cli_writes_student_editions(tmp_path: Path, capsys) -> None:
    out = tmp_path / "student"
    assert main(["notebooks", "--student", str(out), "--source", str(NOTEBOOKS_DIR)]) == 0
    written = sorted(out.glob("*.ipynb"))
    assert [p.name for p in written] == [p.name for p in NOTEBOOKS]
    assert str(written[0]) in capsys.readouterr().out
    for p in written:
        nb = nbformat.read(p, as_version=4)
        assert "jupytext" not in nb.metadata
        assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)


def test_cli_bad_source(tmp_path: Path, capsys) -> None:
    assert main(["notebooks", "--student", str(tmp_path / "o"), "--source",
                 str(tmp_path / "missing")]) == 2
    assert "source must be a folder of notebooks" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["notebooks", "--student", str(tmp_path / "o"), "--source",
                 str(tmp_path / "empty")]) == 2
    assert "holds no .ipynb" in capsys.readouterr().err
    assert main(["notebooks", "--student", str(NOTEBOOKS_DIR), "--source",
                 str(NOTEBOOKS_DIR)]) == 2
    assert "out must differ from source" in capsys.readouterr().err


@pytest.mark.slow
def test_student_edition_runs(tmp_path: Path) -> None:
    """A student edition (here notebook 08's) runs top to bottom as handed out: placeholders
    included, nothing relying on a stripped solution."""
    nbclient = pytest.importorskip("nbclient")
    path = NOTEBOOKS_DIR / "08_stable_kernels.ipynb"
    student = course.student_edition(nbformat.read(path, as_version=4))
    nbclient.NotebookClient(student, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    said = [o for c in student.cells if c.cell_type == "code" and "check(" in c.source
            for o in c.outputs if o.get("output_type") == "execute_result"]
    assert said and all("replace ... with your answer" in o["data"]["text/plain"] for o in said)
