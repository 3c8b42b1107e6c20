"""fpsim.course: the answer key of the notebooks' auto-checked questions (held here: the package
holds only digests) against NumPy / ml_dtypes casts and exact arithmetic (not fpsim) and against
each notebook's own expression, check() saying right/wrong without revealing the answer (and
naming the unit of an answer off by a power of ten), the student and instructor editions
written out (nothing of the student's overwritten without --force), and the student editions
themselves (solutions stripped, outputs cleared, a placeholder where each solution was, no later
cell relying on a stripped one)."""

from __future__ import annotations

import ast
import builtins
import fnmatch
import math
import re
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fpsim import course
from fpsim.cli import main

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "fpsim" / "course_notebooks"
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


def _smallest_outlier_flushing_a_sixteenth() -> float:
    # per-tensor E4M3: x * 448 / amax cast to e4m3 (ml_dtypes' OCP float8_e4m3fn), exact scale
    amax = np.arange(16_384, 65_536, dtype=np.float64)
    scaled = (np.float64(1 / 16) * 448 / amax).astype(ml_dtypes.float8_e4m3fn)
    return float(amax[np.argmax(scaled.astype(np.float64) == 0)])


# docs/facts.md, "QLoRA NF4 code values (bitsandbytes)"
NF4_PUBLISHED = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0]


def _largest_fp16_loss_under_2_16() -> float:
    # every positive finite fp16 value L, the product L * 2**16 exact in float64, then cast to
    # fp16 (NumPy: IEEE round to nearest even, inf past 65520)
    values = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    finite = np.isfinite((values * 2.0**16).astype(np.float16))
    return float(values[finite].max())


def _largest_lost_bf16_update_at_1() -> float:
    # updates u on a grid of 2**-20 (exact in float32 and float64 beside 1.0): the largest with
    # bfloat16(1 + u) == 1 (ml_dtypes: round to nearest even)
    u = np.arange(1, 2**14) * 2.0**-20
    lost = (1.0 + u).astype(ml_dtypes.bfloat16).astype(np.float64) == 1.0
    return float(u[lost].max())


# question -> its answer from an independent reference: NumPy's IEEE fp16 casts of exact values,
# ml_dtypes' casts, or exact arithmetic on published constants.
REFERENCES = {
    "largest N in fp16": _largest_run_of_integers_fp16,
    # fpsim.add takes fp16 operands: 65519 is rounded to fp16 first, then the exact sum once
    "fp16 add(65519, 1)": lambda: float(np.float16(float(np.float16(65519.0)) + 1.0)),
    "fp16(2**-25)": lambda: float(np.float16(2.0**-25)),
    "fp16 2048 + 1": lambda: float(np.float16(2049.0)),
    "bytes per parameter, Adam + master": lambda: 2 + 2 + 3 * 4,  # ZeRO's 2 + 2 + K, K = 12
    "A100 fraction bits F": lambda: 23 + 1,  # Khattak & Mikaitis 2025: A100's neab is 1
    "A100 waves for 2560 tiles": lambda: math.ceil(2560 / 108),  # A100: 108 SMs
    # Khattak & Mikaitis 2025: H100's fp8 neab is -10; DeepSeek-V3 (section 3.5.2) says "around
    # 14 bits", the leading bit counted
    "H100 fp8 accumulator fraction bits": lambda: 23 - 10,
    "parameters on 80 GB with offload": lambda: 80e9 / 2,  # fp16 parameters only
    "quint8 scale for [-1, 3]": lambda: float(_quint8_qparams(-1, 3)[0]),
    "quint8 zero point for [-1, 3]": lambda: _quint8_qparams(-1, 3)[1],
    # OCP MX: 4-bit elements and one 8-bit E8M0 scale per block of 32
    "bytes of a 4096 x 4096 MXFP4 matrix": lambda: 4096 * 4096 * 4 // 8 + 4096 * 4096 // 32,
    "smallest integer outlier that flushes 1/16 in per-tensor E4M3":
        _smallest_outlier_flushing_a_sixteenth,
    "fp16(1e-8)": lambda: float(np.float16(1e-8)),
    # fp16's unit roundoff is 2**-11 (IEEE 754 binary16: 11 significand bits)
    "smallest n with n u >= 1 in fp16": lambda: float(Fraction(1) / Fraction(1, 2**11)),
    "sqrt(n) u for n = 4096, in units of u": lambda: math.isqrt(4096),
    "largest integer x with exp(x) finite in fp16": lambda: float(
        max(x for x in range(30) if np.isfinite(np.float16(math.exp(x))))),
    # notebook 10: NumPy's IEEE fp16 casts of exact products, ml_dtypes' bfloat16 casts
    "smallest integer deviation whose fp16 square is inf": lambda: float(
        next(d for d in range(1, 1000) if np.isinf(np.float16(d * d)))),
    "largest fp16 loss whose product with 2**16 is finite in fp16": _largest_fp16_loss_under_2_16,
    "largest update to a bf16 weight of 1.0 that rounds away": _largest_lost_bf16_update_at_1,
    # NVFP4 (NVIDIA): 4-bit e2m1 elements, a 1-byte E4M3 scale per block of 16, a 4-byte fp32
    # tensor scale
    "bytes of an 8192 x 8192 NVFP4 matrix, tensor scale included":
        lambda: 8192 * 8192 * 4 // 8 + 8192 * 8192 // 16 + 4,
    # 2 n^3 operations over three n x n bf16 matrices (2 bytes a value), read or written once
    "arithmetic intensity of a square 4096 bf16 GEMM":
        lambda: float(Fraction(2 * 4096**3, 3 * 4096**2 * 2)),
    # H100 SXM dense fp8 peak 1979 TFLOPS (NVIDIA's Matrix Multiplication Background guide,
    # docs/facts.md) over the intensity 2 n^3 / (3 n^2 * 1 byte): TB/s
    "bandwidth an H100 needs for a square 4096 fp8 GEMM at peak":
        lambda: float(Fraction(1979) / Fraction(2 * 4096**3, 3 * 4096**2 * 1)),
    # 4-bit codes (half a byte) and one 2-byte fp16 scale per group of 128 weights (AWQ / GPTQ
    # checkpoints)
    "bytes per parameter of INT4 group 128 with fp16 scales":
        lambda: float(Fraction(4, 8) + Fraction(2, 128)),
    # the published NF4 table (QLoRA / bitsandbytes, docs/facts.md) as float32: the value
    # nearest 0.3 / 1
    "NF4 value of 0.3 in a group of absmax 1":
        lambda: float(min((np.float32(v) for v in NF4_PUBLISHED), key=lambda v: abs(v - 0.3))),
    # SmoothQuant (Xiao et al. 2023): s = max|X|**alpha / max|W|**(1 - alpha) = 4 / (1/2)
    "SmoothQuant factor for max|X| = 16, max|W| = 0.25, alpha = 0.5":
        lambda: float(Fraction(math.isqrt(16)) / Fraction(1, 2)),  # sqrt(16) / sqrt(1/4)
}


def _all_questions():
    return [(nb, q) for nb, qs in course.QUESTIONS.items() for q in qs]


@pytest.mark.parametrize(("notebook", "question"), _all_questions())
def test_answer_key_matches_reference(notebook: str, question: str) -> None:
    assert question in REFERENCES, f"add an independent reference for {question!r}"
    with np.errstate(over="ignore"):  # the casts to fp16 overflow on purpose
        expected = REFERENCES[question]()
    check = course.checker(notebook)
    assert check(question, expected)
    assert check(question, np.float64(expected))
    q = course.QUESTIONS[notebook][question]
    assert course.answer_digest(notebook, question, expected, q.digits)[0] == q.digest
    if q.digits:  # agreeing to q.digits significant digits is right, one digit less is not
        assert check(question, expected * (1 + 0.1 ** (q.digits + 1)))
        assert not check(question, expected * (1 + 0.1 ** (q.digits - 1)))


@pytest.mark.parametrize(("notebook", "question"), _all_questions())
def test_off_by_a_power_of_ten_names_the_unit(notebook: str, question: str) -> None:
    with np.errstate(over="ignore"):
        expected = REFERENCES[question]()
    q = course.QUESTIONS[notebook][question]
    check = course.checker(notebook)
    other = 3.25 if expected != 3.25 else 5.5
    assert "power of ten" not in check(question, other).message
    if not math.isfinite(expected) or expected == 0:
        return  # (0, inf and NaN have no scale)
    for scale in (1e-9, 1e-3, 10, 1e6):
        verdict = check(question, expected * scale)
        assert not verdict
        assert "power of ten" in verdict.message and q.unit in verdict.message


def test_the_package_holds_no_answer() -> None:
    """For graded use: the installed package holds digests, not the answers."""
    source = Path(course.__file__).read_text()
    for _, question in _all_questions():  # a question may name its operands
        source = source.replace(question, "")
    for notebook, question in _all_questions():
        q = course.QUESTIONS[notebook][question]
        assert set(vars(q)) == {"digest", "scale_free_digest", "hint", "unit", "digits"}
    with np.errstate(over="ignore"):
        answers = {float(REFERENCES[q]()) for _, q in _all_questions()}
    for a in answers:  # (integers below 100 occur in any code; the others must not)
        if math.isfinite(a) and a.is_integer() and abs(a) < 100:
            continue
        spellings = {repr(a), f"{a:g}", f"{a:.6g}"} | ({f"{a:.0f}"} if a.is_integer() else set())
        for spelling in spellings:
            assert not re.search(rf"(?<![\w.]){re.escape(spelling)}(?![\w.])", source), spelling


def _imports(nb) -> dict:
    """The names a notebook imports (its import statements only, run here)."""
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(compile(ast.Module([node], []), "<notebook imports>", "exec"), namespace)
    return namespace


def _check_calls(nb):
    """(cell, question, answer expression) of every check("...", answer) in a solution cell."""
    for cell in nb.cells:
        if cell.cell_type != "code" or "solution" not in cell.metadata.get("tags", []):
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "check" and len(node.args) == 2:
                yield cell, node.args[0].value, node.args[1]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_key_is_what_the_notebooks_own_expression_gives(path: Path) -> None:
    """Each solution answers its question with the notebook's own computation (no typed
    literal, which could disagree with what the notebook prints, as 01's 'inf' did); an
    expression that needs only the notebook's imports is evaluated here and must be right (the
    others are evaluated when the notebooks run: their stored outputs must say right)."""
    nb = nbformat.read(path, as_version=4)
    namespace = _imports(nb)
    check = course.checker(_number(path))
    evaluated = 0
    for _, question, expr in _check_calls(nb):
        names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
        assert names - {"math", "float", "int"}, (
            f"{path.name}: {question!r} is answered by a typed value "
            f"({ast.unparse(expr)}), not by the notebook's expression")
        if names <= set(namespace) | set(dir(builtins)):
            with np.errstate(over="ignore"):
                value = eval(compile(ast.Expression(expr), "<answer>", "eval"), dict(namespace))
            assert check(question, value), f"{path.name}: {question}: {ast.unparse(expr)}"
            evaluated += 1
    if _number(path) == "01":
        assert evaluated >= 2  # both of 01's questions, the one that was wrong included


@pytest.mark.parametrize(("notebook", "question"), _all_questions())
def test_wrong_answer_is_told_without_the_answer(notebook: str, question: str) -> None:
    with np.errstate(over="ignore"):
        answer = float(REFERENCES[question]())
    check = course.checker(notebook)
    wrong = 1.0 if answer != 1.0 else 2.0
    verdict = check(question, wrong)
    assert not verdict and verdict.message.startswith("not right yet")
    text = verdict.message.replace(question, "")
    for spelling in {f"{answer:g}", repr(answer), f"{answer:.0f}"
                     if math.isfinite(answer) else "inf"}:
        assert not re.search(rf"(?<![\w.*]){re.escape(spelling)}(?![\w.])", text), spelling


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
        # no text telling the student of a solution below that the edition does not have
        assert not re.search(r"(each has|see) (a|one) (hidden )?solution|hidden solution below",
                             cell.source, re.I), cell.source[:200]
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
    assert main(["notebooks", "--student", str(out)]) == 0  # the notebooks fpsim ships
    written = sorted(out.glob("*.ipynb"))
    assert [p.name for p in written] == [p.name for p in NOTEBOOKS]
    assert str(written[0]) in capsys.readouterr().out
    for p in written:
        nb = nbformat.read(p, as_version=4)
        assert "jupytext" not in nb.metadata
        assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)


def test_cli_writes_teacher_editions(tmp_path: Path, capsys) -> None:
    out = tmp_path / "teacher"
    assert main(["notebooks", str(out)]) == 0
    written = sorted(out.glob("*.ipynb"))
    assert [p.name for p in written] == [p.name for p in NOTEBOOKS]
    for ours, theirs in zip(written, NOTEBOOKS, strict=True):
        a, b = nbformat.read(ours, as_version=4), nbformat.read(theirs, as_version=4)
        assert "jupytext" not in a.metadata  # not paired: saving it writes no .py
        assert [(c.source, c.get("outputs")) for c in a.cells] == \
            [(c.source, c.get("outputs")) for c in b.cells]  # solutions and outputs kept


@pytest.mark.parametrize("student", [True, False], ids=["student", "teacher"])
def test_cli_never_overwrites_a_students_notebook_without_force(tmp_path: Path, capsys,
                                                                 student: bool) -> None:
    """A second `fpsim notebooks [--student] DIR` would overwrite the notebooks a student has
    edited: it refuses, names them and writes nothing, unless --force."""
    out = tmp_path / "course"
    flag = ["--student"] if student else []
    assert main(["notebooks", *flag, str(out)]) == 0
    edited = out / NOTEBOOKS[0].name
    edited.write_text(edited.read_text().replace("# your code here", "x = 'my work'"))
    mine = edited.read_bytes()
    capsys.readouterr()
    assert main(["notebooks", *flag, str(out)]) == 2
    err = capsys.readouterr().err
    assert NOTEBOOKS[0].name in err and NOTEBOOKS[-1].name in err and "--force" in err
    assert edited.read_bytes() == mine
    # one notebook there is enough to refuse, and then nothing is written
    for p in out.glob("*.ipynb"):
        if p != edited:
            p.unlink()
    assert main(["notebooks", *flag, str(out)]) == 2
    assert sorted(out.glob("*.ipynb")) == [edited] and edited.read_bytes() == mine
    assert main(["notebooks", *flag, "--force", str(out)]) == 0
    assert edited.read_bytes() != mine
    assert len(list(out.glob("*.ipynb"))) == len(NOTEBOOKS)


@pytest.mark.parametrize("student", [True, False], ids=["student", "teacher"])
def test_cli_out_that_is_not_a_folder(tmp_path: Path, capsys, student: bool) -> None:
    flag = ["--student"] if student else []
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    assert main(["notebooks", *flag, str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fpsim notebooks: DIR {str(a_file)!r} is a file, not a folder"), err
    assert a_file.read_text() == "mine"
    assert main(["notebooks", *flag, str(a_file / "sub")]) == 2  # below a file
    assert f"{str(a_file)!r} is a file, not a folder" in capsys.readouterr().err
    assert a_file.read_text() == "mine"
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / NOTEBOOKS[0].name).mkdir()  # a folder where a notebook would go
    assert main(["notebooks", *flag, "--force", str(tmp_path / "o")]) == 2
    assert "holds folders where notebooks would go" in capsys.readouterr().err


def test_cli_bad_source(tmp_path: Path, capsys) -> None:
    assert main(["notebooks", "--student", str(tmp_path / "o"), "--source",
                 str(tmp_path / "missing")]) == 2
    assert "source must be a folder of notebooks" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["notebooks", "--student", str(tmp_path / "o"), "--source",
                 str(tmp_path / "empty")]) == 2
    assert "holds no .ipynb" in capsys.readouterr().err
    assert main(["notebooks", "--student", str(NOTEBOOKS_DIR), "--source",
                 str(NOTEBOOKS_DIR), "--force"]) == 2
    assert "out must differ from source" in capsys.readouterr().err


def test_the_notebooks_ship_inside_the_package() -> None:
    """Any install, editable or not, has the notebooks: they are package data of fpsim
    (pyproject.toml), found beside fpsim/course.py, and nothing points outside the package."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["fpsim"]
    package = Path(course.__file__).resolve().parent
    assert course.default_source() == NOTEBOOKS_DIR
    for path in NOTEBOOKS:
        rel = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, p) for p in patterns), rel


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
