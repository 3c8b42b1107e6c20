"""The course around the notebooks: auto-checked numeric questions, and the notebooks written
out for a class.

- The notebooks ship inside the package (``fpsim/course_notebooks/``: each ``NN_name.ipynb``
  with its jupytext source ``NN_name.py``), so any install can write them out
  (:mod:`fpsim.cli.notebooks`): ``fpsim notebooks DIR`` the instructor editions
  (:func:`write_teacher_editions`), ``fpsim notebooks --student DIR`` the student editions
  (:func:`write_student_editions`). A notebook already in DIR (a student's edited copy) is
  overwritten only with ``--force``.
- :func:`checker` gives a notebook its ``check(question, answer)``: it says whether a numeric
  answer is right without printing the expected value, and names the unit when an answer is off
  by a power of ten. The package holds only digests of the answers (:func:`answer_digest`),
  not the answers: the answer key is in tests/test_course.py, which checks each answer against
  NumPy / ml_dtypes casts or exact arithmetic, independently of fpsim, and against the
  notebook's own expression.
- :func:`student_edition` turns an instructor notebook into a student one: the cells tagged
  ``solution`` are removed (nbconvert's ``TagRemovePreprocessor``), every output is cleared
  (``ClearOutputPreprocessor``), and a placeholder cell stands where each solution was (a
  ``check(question, ...)`` line for a checked answer, ``# your code here`` otherwise) unless the
  exercise already has one. nbformat and nbconvert come with the ``course`` extra.

Solution cells are tagged ``solution`` in the notebooks' jupytext sources
(``# %% tags=["solution"]``); so is the "Solution" heading above each, which goes too.

>>> check = checker("02")
>>> check("fp16 2048 + 1", ...)
fp16 2048 + 1: replace ... with your answer
>>> check("fp16 2048 + 1", 2049)  # doctest: +ELLIPSIS
not right yet: fp16 2048 + 1: what is the spacing of fp16 numbers just above 2**11? A tie goes...
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

import numpy as np

__all__ = ["QUESTIONS", "Question", "Verdict", "answer_digest", "checker", "default_source",
           "student_edition", "write_student_editions", "write_teacher_editions"]

SOLUTION_TAG = "solution"
PLACEHOLDER = "# your code here"
# Where a checked answer is stripped, the student gets this line to complete.
CHECK_PLACEHOLDER = "check({question!r}, ...)  # replace ... with your answer"


@dataclass(frozen=True)
class Question:
    """A numeric question: the digest of its answer (:func:`answer_digest`; the answer itself is
    not in the package, so a student cannot read it from the installed files), a hint shown on a
    wrong answer (never the answer itself), the unit the answer is given in (named when an
    answer is off by a power of ten) and, for a non-integer answer, the significant digits an
    answer must agree to (``None``: exactly)."""

    digest: str
    scale_free_digest: str
    hint: str
    unit: str
    digits: int | None = None


# The digests below are of the canonical text of each answer, keyed by the notebook and the
# question (so two questions with one answer have different digests). tests/test_course.py
# holds the answers, checks each against NumPy / ml_dtypes casts or exact arithmetic without
# fpsim, and against the notebook's own expression.
_SALT = "fpsim-course-v1"
# an answer checked exactly is compared as repr(float); its scale-free form (its significand
# without the power of ten) is compared to this many digits
_SCALE_FREE_DIGITS = 15


def _canonical(x: float, digits: int | None) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    return repr(float(x)) if digits is None else f"{x:.{digits - 1}e}"


def _scale_free(x: float, digits: int | None) -> str | None:
    """The significand of ``x`` to ``digits`` digits, its power of ten dropped (None for 0,
    inf and NaN, which have no scale)."""
    if not math.isfinite(x) or x == 0:
        return None
    n = _SCALE_FREE_DIGITS if digits is None else digits
    return f"{x:.{n - 1}e}".split("e")[0]


def _digest(notebook: str, question: str, text: str) -> str:
    return hashlib.sha256(f"{_SALT}|{notebook}|{question}|{text}".encode()).hexdigest()


def answer_digest(notebook: str, question: str, answer: float,
                  digits: int | None = None) -> tuple[str, str]:
    """The two digests a :class:`Question` stores for ``answer``: of the answer, and of its
    significand with the power of ten dropped (to tell an answer off by a power of ten).

    >>> digest, scale_free = answer_digest("02", "fp16 2048 + 1", 2049.0)
    >>> digest == QUESTIONS["02"]["fp16 2048 + 1"].digest  # 2049 is not the answer
    False
    """
    scale_free = _scale_free(float(answer), digits)
    return (_digest(notebook, question, _canonical(float(answer), digits)),
            "" if scale_free is None else _digest(notebook, question, "x10^|" + scale_free))


def _q(digests: tuple[str, str], hint: str, unit: str, digits: int | None = None) -> Question:
    return Question(digests[0], digests[1], hint, unit, digits)


# notebook -> question -> Question (digests made with answer_digest; the answers and their
# references are in tests/test_course.py)
QUESTIONS: dict[str, dict[str, Question]] = {
    "01": {
        'largest N in fp16': _q(
            ("14ccbef0e4420ca338ad4bee655daa88273fca89ed711380b7587e510b83edc1",
             "9865b0c4e49839566062635dd5e9157c68e55b1bd5c34697fc0faa665c3bb3cd"),
            'count the significand bits, the hidden bit included',
            'integers (a count, no scaling)'),
        'fp16 add(65519, 1)': _q(
            ("56d7ca1ec27177b53add5c3079b86bb49e219644009169257d074a35e7de2d47",
             "8b87bc113ecab53ca4e39248364b0de7cce5ca28fe203299cd6b2515fb6eb14a"),
            'fpsim.add takes fp16 numbers: it rounds each operand to fp16 first, then the '
            'exact sum once. What is 65519 in fp16?',
            'the value itself (a plain number)'),
    },
    "02": {
        'fp16(2**-25)': _q(
            ("f45c4b4e1954ab2427471dcc4f5efadc7fffc9e0812fd31dbb6432d3cb068f7c",
             ""),
            '2**-25 is exactly half the smallest subnormal: a tie',
            'the value itself (a plain number)'),
        'fp16 2048 + 1': _q(
            ("737101017eb64d1c2e86490a25f8b5f366e6c42466ee6ac028c0a82926166213",
             "ae02f2ecc120b36eefb3e81736a5a48dd081dc9ab820c33c5c820eea0a36101d"),
            'what is the spacing of fp16 numbers just above 2**11? A tie goes to the even '
            'neighbour',
            'the value itself (a plain number)'),
    },
    "03": {
        'bytes per parameter, Adam + master': _q(
            ("e4f7d915b84f40f7d04128f3ee25e6789fb814f6349ec6c95fceba19db02c38f",
             "7640a65d240571e6fdda9696c38f92ccf2429242edcee90e5b1879eddbdd63c9"),
            'fp16 weight and gradient, plus fp32 master, exp_avg and exp_avg_sq',
            'bytes per parameter'),
    },
    "04": {
        'A100 fraction bits F': _q(
            ("7e0c7823ade6d94152a560d041ab92f4e349c687eb4f38ee795a76c226f87d07",
             "cdbbbdbc15dfdae2b452a5bf0479cb576893e3908ef36bd63bfe743449d50d87"),
            'F = 23 + neab, and A100 keeps one extra alignment bit',
            'bits'),
    },
    "05": {
        'parameters on 80 GB with offload': _q(
            ("bc1cce96720c3e213a005c0e44c9e57a0461d53192a79545c771c321c1bab1f1",
             "b0e7ab1af75752b871133669d2a5e69ae211a75f15cb9f144a6247a4728f8c12"),
            'with offload only the fp16 parameters stay on the GPU',
            'parameters (a count, not billions)'),
    },
    "06": {
        'quint8 scale for [-1, 3]': _q(
            ("faeb425f18919a210cb1f819e11368f3802097751c5de8ef4e816407439d4ef1",
             "ae1347a294ab9415883ff2cfab59f3d8ea7f1d9b21111d2b05d7786cb8b63398"),
            's = (max - min) / (qmax - qmin)',
            'real units per integer step', 6),
        'quint8 zero point for [-1, 3]': _q(
            ("97a02fffda3c58e15f423617a2e13ee340a999a70982ae4aba7d105ffd29181a",
             "9bc964b6c2da694a90a40f6f528e7564688f06ed82758d374651867ecd8f8428"),
            'z = qmin - round(min / s)',
            'integer codes'),
    },
    "07": {
        'bytes of a 4096 x 4096 MXFP4 matrix': _q(
            ("a6fdeb398b80523d867513196d42d9131f58ee7f8d0cc2c143c88982ba0a3de7",
             "0e7b972b4a5acefa85433359b0c04ddd5740dec9cb4f8558c5c731f0475aa99c"),
            '4 bits per element plus one 1-byte E8M0 scale per block of 32',
            'bytes'),
        'smallest integer outlier that flushes 1/16 in per-tensor E4M3': _q(
            ("850fc5b2341442287fc9ad08021ebe546101233bb0206c7e4e83eb545a2a617f",
             "4c8557e4ab8319c0e4b4bd8169a3bb030b1fef6395a67a9a1eca3ed15763e98b"),
            "1/16 * 448 / amax must stay above half of e4m3's smallest subnormal, 2**-9; a "
            'tie goes to 0',
            "the data's own units (a pixel is at most 1)"),
    },
    "08": {
        'fp16(1e-8)': _q(
            ("0662a33943452d79d3baaf1d60d7fad79fe3fb94e5092062bbb6dd304e527870",
             ""),
            "compare 1e-8 with fp16's smallest subnormal, 2**-24 (about 6e-8)",
            'the value itself (a plain number)'),
        'largest integer x with exp(x) finite in fp16': _q(
            ("afe11b7568700dbb3a540cae482de5462a15325b4e339119ebe133c3f68ddebc",
             "e318122804ce9bed90c13935daeaad67f1758845317e32324b669a49065844dc"),
            "fp16's largest value is just below 2**16: take its natural logarithm",
            'the exponent x itself'),
    },
    "09": {
        'A100 waves for 2560 tiles': _q(
            ("260894b968cae132b8b637c4c401ea13651d83c87b38474a39b76349b5a780ee",
             "95e16de18b56ae0c61336a84296ad4a6906be482590137d21068fa5cca10fdbc"),
            'one tile per SM at a time; A100 has 108 SMs and a partial wave costs a whole one',
            'waves'),
        'H100 fp8 accumulator fraction bits': _q(
            ("f18edabf40a35998875e59e58ca18656323b644fbc5ca34daf9a5e0d7a4e7397",
             "70a779cbb0fbac80fc1f38d27bc323d6e154f3ef25e7f1984e471d91a2663429"),
            "fp32 keeps 23 fraction bits; the unit's extra_bits, negative for fp8, says how many "
            'more (or fewer) its alignment keeps',
            'bits (a count, no scaling)'),
    },
    "10": {
        'smallest integer deviation whose fp16 square is inf': _q(
            ("61f20950d6598f5912e3528da3caf7bf633353c9b04e1823cd401e6bbaf6644e",
             "421a53dcc01de5bf993474dd7f847d75f6786c06356205a120997f6a7f128dd3"),
            "a square rounds to inf in fp16 from 65520 on (halfway between fp16's largest value "
            'and 2**16)',
            'the deviation itself (a plain number)'),
        'largest fp16 loss whose product with 2**16 is finite in fp16': _q(
            ("351f8a754e04655127e54c541d47ac08285985d76ed8d344df820b4db2efd8a2",
             "a20243912248e8e78f63066aa9773ea3e99980c2a4c3a50e41136e8efeefa0c0"),
            "the product must stay at most fp16's largest finite value (fpsim.FP16.max); "
            'multiplying by 2**16 is exact, so divide',
            'nats (the loss itself)'),
        'largest update to a bf16 weight of 1.0 that rounds away': _q(
            ("dbd52a735063ca3b599a2d855c56c3f632e835d80d5a1055ee5fbaedb70785c7",
             "459bcb16e8f04d77a31265df5aa2c91b30818de72488b0534cc1bb1b093fdf9d"),
            "bf16's spacing at 1.0 is 2**-7; round to nearest keeps the old weight up to half "
            'of it, and a tie goes to the even neighbour (1.0)',
            'the update itself (a plain number)'),
    },
    "11": {
        'smallest n with n u >= 1 in fp16': _q(
            ("4bb663378b3602e36caa65b4498bae320dc0e759eb57f2713fa97010d617971e",
             "f35fc922ab9fd1e9d256b0bcbe926497ecd96c33c3cc83f3a301f94a38da4175"),
            'u = 2**-(mantissa bits + 1)',
            'a count of addends'),
        'sqrt(n) u for n = 4096, in units of u': _q(
            ("c1f1eeea0b08cc70afecd0ffa8433f6fb5b3e597b1ae1dc6f0f81c43f6825c70",
             "4e1909b6cea21d3413cb2c2c00e2466e296341941aed071e6f6380fe60f20c86"),
            'the square root of the number of addends',
            'units of u'),
    },
    "12": {
        'bytes of an 8192 x 8192 NVFP4 matrix, tensor scale included': _q(
            ("9e1b1d2539401faf8e623819e367a487b66b482db7de270bcf9cba45312d03d1",
             "161b0f3d57579acae8c2caf6a5b65bc32140dac81b995b9d960e5a61c35f470a"),
            '4 bits per element, one 1-byte E4M3 scale per block of 16, and one 4-byte fp32 '
            'scale for the whole tensor',
            'bytes'),
        'arithmetic intensity of a square 4096 bf16 GEMM': _q(
            ("4cc9ce9936bff801b4034e57b6a88ff87b8dc764d63648c929ce8dba704bd48d",
             "31ac91fd1bafe6952878de8900f15a86881526f1445f594aa63d17ac3374aa19"),
            '2 n^3 operations over the bytes of three n x n matrices of 2-byte values',
            'operations per byte', 6),
        'bandwidth an H100 needs for a square 4096 fp8 GEMM at peak': _q(
            ("88d842de4da537034fbebbb884cd0bce9eb7b9b3e38263eb66a08bc8f8de1e0b",
             "c84259eb6aec507fbe93542c9e28dfb49ad06185d4aafef37e7da1ad51fce7ae"),
            "the peak rate divided by the arithmetic intensity; H100's fp8 peak is in "
            "perf.peak_tflops, and an fp8 value is one byte",
            'TB/s (10**12 bytes per second)', 5),
    },
    "13": {
        'bytes per parameter of INT4 group 128 with fp16 scales': _q(
            ("802c4f01a70dd4e1184a72a8878280c4ce2041e6d2c17532e32591f79801efc9",
             "be835fba97c08f12e5aabe7b1ce0651ca989169270e31daa6d74b8c2f723234e"),
            'a 4-bit code per weight, plus one 2-byte fp16 scale shared by the 128 weights of '
            'its group',
            'bytes per parameter'),
        'NF4 value of 0.3 in a group of absmax 1': _q(
            ("9ea063ab3a7d55bdd455b7edf873fbd26044d44ed99ae0419d89c4dd70efc568",
             "17156e5e8f075f06eca70b678c08d671c840d172a54274a209fe764f551bf673"),
            'the NF4 code value (q.NF4_VALUES) nearest to 0.3 / absmax, times absmax; give '
            'it as the float32 value fpsim returns',
            'the weight\'s units'),
        'SmoothQuant factor for max|X| = 16, max|W| = 0.25, alpha = 0.5': _q(
            ("1c98ce40cd0ca76a3d82d0faf0f6e8ce995b672ce47e082a35bb825b8a6c7f49",
             "d8ef6953066670e5113786275f59909463cf904c29fa1b0f89a8f97ff3a00e9c"),
            's = max|X|**alpha / max|W|**(1 - alpha)',
            'a pure number (a factor)'),
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
        digest, scale_free = answer_digest(self.notebook, question, _as_number(answer),
                                           q.digits)
        if digest == q.digest:
            return Verdict(True, "right")
        if scale_free and scale_free == q.scale_free_digest:
            return Verdict(False, f"not right yet: {question}: the digits are right but it is "
                                  f"off by a power of ten: give the answer in {q.unit}")
        return Verdict(False, f"not right yet: {question}: {q.hint} (answer in {q.unit})")

    def __repr__(self) -> str:
        return f"check for notebook {self.notebook}: questions {sorted(self.questions)}"


def checker(notebook: str) -> _Checker:
    """The ``check(question, answer)`` of notebook ``notebook`` ("01" ... "13").

    >>> checker("02")("fp16(2**-25)", 1)  # doctest: +ELLIPSIS
    not right yet: fp16(2**-25): 2**-25 is exactly half the smallest subnormal: a tie ...
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


def _targets(paths: list[Path], out: Path, force: bool) -> list[Path]:
    """The files ``paths`` become in ``out``, after checking nothing of the student's is lost:
    ``out`` must be a folder (or not exist yet), and a notebook already there is overwritten
    only with ``force``."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a folder (or a new path), got the file {str(out)!r}")
    targets = [out / path.name for path in paths]
    folders = [t for t in targets if t.is_dir()]
    if folders:
        raise ValueError(f"{str(out)!r} holds folders where notebooks would go: "
                         + ", ".join(t.name for t in folders))
    existing = [t for t in targets if t.exists()]
    if existing and not force:
        raise ValueError(f"{str(out)!r} already holds {len(existing)} of the notebooks ("
                         + ", ".join(t.name for t in existing) + "), perhaps with your edits: "
                         "pass --force (force=True) to overwrite them, or choose a new folder")
    return targets


@contextlib.contextmanager
def _writing(out: Path):
    """The OS's refusals (a parent that is a file, no permission, a full disk) as a clear error
    naming the folder, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise ValueError(f"cannot write the notebooks into {str(out)!r}: "
                         f"{exc.strerror or exc}") from None


def _sources(source: Path, out: Path) -> list[Path]:
    if not source.is_dir():
        raise ValueError(f"source must be a folder of notebooks, got {str(source)!r}")
    paths = sorted(source.glob("*.ipynb"))
    if not paths:
        raise ValueError(f"source {str(source)!r} holds no .ipynb notebooks")
    if out.exists() and out.is_dir() and out.resolve() == source.resolve():
        raise ValueError("out must differ from source (the instructor editions would be "
                         "overwritten)")
    return paths


def write_student_editions(source: Path | str, out: Path | str, *,
                           force: bool = False) -> list[Path]:
    """Write the student edition of every ``*.ipynb`` in ``source`` into ``out``; returns the
    written paths. A notebook already in ``out`` (perhaps a student's edited copy) is
    overwritten only with ``force=True``; nothing is written otherwise.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> paths = write_student_editions(default_source(), out)
    >>> write_student_editions(default_source(), out)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: '...' already holds ... of the notebooks (01_formats_and_rounding.ipynb, ...
    """
    import nbformat

    source, out = Path(source), Path(out)
    paths = _sources(source, out)
    targets = _targets(paths, out, force)
    editions = []
    for path in paths:  # all made before any is written: a failure writes nothing
        nb = student_edition(nbformat.read(path, as_version=4))
        nb.metadata.pop("jupytext", None)  # the student copy is not paired with a source
        nbformat.validate(nb)
        editions.append(nb)
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
        for nb, target in zip(editions, targets, strict=True):
            nbformat.write(nb, target)
    return targets


def write_teacher_editions(source: Path | str, out: Path | str, *,
                           force: bool = False) -> list[Path]:
    """Write the instructor edition of every ``*.ipynb`` in ``source`` (solutions and stored
    outputs included) into ``out``; returns the written paths. As
    :func:`write_student_editions`, an existing notebook is overwritten only with
    ``force=True``.

    >>> import tempfile
    >>> [p.name for p in write_teacher_editions(default_source(), tempfile.mkdtemp())][0]
    '01_formats_and_rounding.ipynb'
    """
    source, out = Path(source), Path(out)
    paths = _sources(source, out)
    targets = _targets(paths, out, force)
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
        for path, target in zip(paths, targets, strict=True):
            nb = json.loads(path.read_text(encoding="utf-8"))
            # the copy is not paired with a jupytext source (saving it would write a .py)
            nb.get("metadata", {}).pop("jupytext", None)
            target.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                              encoding="utf-8")
    return targets


def default_source() -> Path:
    """The notebooks shipped inside the package (fpsim/course_notebooks/), so that any install,
    editable or not, can write them out (``fpsim notebooks``' default ``--source``).

    >>> default_source().name
    'course_notebooks'
    """
    return Path(__file__).resolve().parent / "course_notebooks"
