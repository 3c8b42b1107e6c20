"""The course notebooks: each fpsim/course_notebooks/NN_name.ipynb (shipped inside the package,
so any install can write them out) is paired (jupytext, percent format) with NN_name.py beside
it, the source people edit; the two must hold the same cells, and every
notebook runs top to bottom on a fresh install (a broken cell fails CI) and prints what its
stored outputs show, numbers aside (durations, process ids, and last digits that another
machine's BLAS may change): outputs that predate what the code prints fail CI. The
stored outputs stay as committed; the run happens on a copy in memory, in a scratch folder: a
notebook writes nothing beside itself (what it saves goes to a folder of the student's, the
working directory).

After editing a .py source: ``jupytext --sync fpsim/course_notebooks/NN_name.py``, then execute
the notebook so its stored outputs are real, from a scratch working directory (``cd $(mktemp -d)
&& jupyter nbconvert --to notebook --execute --inplace
$REPO/fpsim/course_notebooks/NN_name.ipynb --ExecutePreprocessor.cwd=.``), and commit both
files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "fpsim" / "course_notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
SOURCES = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py"))
PAIRED_FORMATS = "ipynb,py:percent"


def _cells(nb) -> list[tuple[str, str, list[str]]]:
    """What must agree between a pair: each cell's type, source and tags, in order."""
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def test_every_notebook_has_its_source() -> None:
    assert NOTEBOOKS, "no notebooks found"
    assert [p.stem for p in NOTEBOOKS] == [p.stem for p in SOURCES]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_pair_in_sync(path: Path) -> None:
    """The .ipynb's cells equal its .py source's cells (fails on drift: edit the .py, then
    ``jupytext --sync``)."""
    nbformat = pytest.importorskip("nbformat")
    jupytext = pytest.importorskip("jupytext")
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("jupytext", {}).get("formats") == PAIRED_FORMATS
    source = jupytext.read(path.with_suffix(".py"))
    assert source.metadata.get("jupytext", {}).get("formats") == PAIRED_FORMATS
    ipynb_cells, py_cells = _cells(nb), _cells(source)
    assert len(ipynb_cells) == len(py_cells), (
        f"{path.name} has {len(ipynb_cells)} cells, its .py source {len(py_cells)}")
    drift = [i for i, (a, b) in enumerate(zip(ipynb_cells, py_cells, strict=True)) if a != b]
    assert not drift, f"{path.name}: cells {drift} differ from {path.with_suffix('.py').name}"


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_notebook_writes_only_into_the_working_directory(path: Path) -> None:
    """A notebook saves into a folder of the student's (the working directory), never into the
    repository or the package: no path that climbs out of it, none built from fpsim's own
    location (reading shipped data from there is fine)."""
    code = "\n".join(line for line in path.read_text().splitlines()
                     if not line.startswith("#"))
    assert not re.search(r"""["']\.\./|Path\(["']\.\.["']\)""", code), path.name
    for call in re.findall(r"(?:savefig|save_figure|write_text|write_bytes|open)\(([^)]*)\)",
                           code):
        assert "__file__" not in call and "docs" not in call, (path.name, call)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    beside = sorted(NOTEBOOKS_DIR.rglob("*"))
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, on the first failure
    assert sorted(NOTEBOOKS_DIR.rglob("*")) == beside  # nothing written into the package
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    # the stored outputs are this code's: every cell prints what it printed when committed
    stored = nbformat.read(path, as_version=4)
    stale = [i for i, (a, b) in enumerate(zip(_printed(stored), _printed(nb), strict=True))
             if a != b]
    assert not stale, (f"{path.name}: cells {stale} print other text than their stored outputs: "
                       "re-execute the notebook and commit it")


# What varies between two runs of the same code: durations, process ids, object addresses, the
# widths of the tables that hold them; and, on another machine, the last digits of results
# (BLAS builds sum float64 GEMMs in their own order, so a training run can end a sample apart).
# So the numbers are masked: what is compared is what a cell prints (its rows, labels, words),
# which a change of the code that prints it changes.
_VARIES = [(re.compile(r"0x[0-9a-f]{6,}"), "<address>"),
           (re.compile(r"\d+(\.\d+)?(e[+-]?\d+)?"), "#"),
           (re.compile(r"-{2,}"), "--"), (re.compile(r"[ \t]+"), " ")]


def _printed(nb) -> list[str]:
    """Each code cell's printed text (streams and plain-text results), numbers and what else
    varies between runs of the same code masked."""
    out = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        text = ""
        for o in c.get("outputs", []):
            t = o.get("text") if o.get("output_type") == "stream" else \
                o.get("data", {}).get("text/plain")
            text += "".join(t) if isinstance(t, list) else (t or "")
        for pattern, mask in _VARIES:
            text = pattern.sub(mask, text)
        out.append(text)
    return out
