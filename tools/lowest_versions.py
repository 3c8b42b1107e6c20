"""Run fpsim's tests with the lowest versions of NumPy and ml_dtypes that pyproject.toml
declares (issue 32 item 5): the second half of the README's test command (and so of CI).

fpsim's results must not depend on which version of a dependency inside its declared range is
installed; the main run tests the newest versions pip picks, this one the floors. It reads the
floors (``numpy>=X``, ``ml_dtypes>=Y``) from ``pyproject.toml`` (one place to change them),
makes the virtual environment ``.venv-lowest`` next to it (kept for the next run), installs
fpsim there with exactly those two versions as wheels plus pytest, pytest-xdist, hypothesis and
gmpy2, and runs ``python -m pytest -q -n 2 -m "not slow and not exhaustive"`` there (two
workers), less the test files that exercise no numerics a NumPy or ml_dtypes version could
change (:data:`NOT_NUMERICS`: the command-line plumbing, figures, course and docs checks, the
probe's searches, MPI launches; the main run has them all), to keep CI within its time (tests
that need packages of the ``test`` extra not installed there, the notebooks', skip themselves).
Its exit status is pytest's; a floor without a wheel for this Python is a clear error naming
both.

    python tools/lowest_versions.py [pytest arguments ...]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-lowest"
PINNED = ("numpy", "ml_dtypes")  # the numerical dependencies whose floors are tested
TEST_TOOLS = ("pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "gmpy2>=2.1", "nbformat>=5",
              "nbconvert>=7")
#: test files (glob patterns under tests/) left to the main run: no version-sensitive numerics
NOT_NUMERICS = ("test_cli*.py", "test_viz*.py", "test_demo.py", "test_examples.py",
                "test_course.py", "test_readme.py", "test_notebooks.py", "test_layers.py",
                "test_probe_fingerprint.py", "test_probe_cli.py", "test_probe_tools.py",
                "test_zero_mpi.py", "test_tensorcore_tools.py")


def floors() -> dict[str, str]:
    """``{name: lowest version}`` of :data:`PINNED` from pyproject.toml's dependencies."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S)  # [project]'s
    out = {}
    for name, version in re.findall(r'"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)"',
                                    block.group(1) if block else ""):
        if name in PINNED:
            out[name] = version
    missing = [p for p in PINNED if p not in out]
    if missing:
        raise SystemExit(f"lowest_versions: pyproject.toml declares no 'NAME>=VERSION' floor "
                         f"for {', '.join(missing)}")
    return out


def run(cmd: list[str]) -> int:
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT)


def main(argv: list[str]) -> int:
    pins = floors()
    python = VENV / "bin" / "python"
    if not python.exists() and run([sys.executable, "-m", "venv", str(VENV)]):
        return 1
    wanted = [f"{name}=={version}" for name, version in pins.items()]
    # the two floors as wheels only: an sdist build would test a compiler, not the version
    if run([str(python), "-m", "pip", "install", "-q", "--only-binary", ",".join(PINNED),
            *wanted, *TEST_TOOLS, "-e", str(ROOT)]):
        raise SystemExit(f"lowest_versions: could not install {' and '.join(wanted)} (wheels) "
                         f"for Python {sys.version_info.major}.{sys.version_info.minor}: run "
                         f"it on a Python that these versions support, or raise the floors in "
                         f"pyproject.toml")
    check = ("import numpy, ml_dtypes; print('lowest declared versions: numpy', "
             "numpy.__version__, 'ml_dtypes', ml_dtypes.__version__)")
    if run([str(python), "-c", check]):
        return 1
    ignore = [f"--ignore={p.relative_to(ROOT)}" for pattern in NOT_NUMERICS
              for p in sorted((ROOT / "tests").glob(pattern))]
    return run([str(python), "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                "-m", "not slow and not exhaustive", *ignore, *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
