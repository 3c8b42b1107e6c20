"""Every script in examples/ runs from a fresh process on a small setting: exit status 0, no
traceback or warning on stderr, each figure it announces written (a PNG) under the folder it
was given, nothing written into the working directory, and a line of its results printed.
The settings are the scripts' own options made small (fewer epochs, layers, K values), so the
whole file takes seconds; the figures' contents are the library's, tested elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# script: (arguments, with {out} the output folder; a piece of text its results print)
RUNS = {
    "formats_tour.py": (["--out", "{out}"], "Figures"),
    "memory_checkpointing.py": (["--layers", "4", "--out", "{out}/checkpointing.png"],
                                "wrote"),
    "mixed_precision_digits.py": ([], "test accuracy"),
    "quantization_digits.py": (["--epochs", "2", "--out", "{out}/quantization.png"],
                               "QLoRA"),
    "tensorcore_error_vs_k.py": (["--quick", "--out", "{out}/error_vs_k.png"], "wrote"),
    "underflow_overflow.py": (["--epochs", "1", "--out", "{out}"], "GradScaler"),
}


def test_every_example_is_covered():
    assert sorted(RUNS) == sorted(p.name for p in EXAMPLES.glob("*.py"))


@pytest.mark.parametrize("script", sorted(RUNS))
def test_example_runs(script, tmp_path):
    args, marker = RUNS[script]
    out, cwd = tmp_path / "out", tmp_path / "cwd"
    out.mkdir()
    cwd.mkdir()
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONWARNINGS="error")
    cmd = [sys.executable, str(EXAMPLES / script)] + [a.format(out=out) for a in args]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr[-3000:]
    assert marker in done.stdout
    assert not any(cwd.iterdir()), f"{script} wrote into the working directory"
    figures = sorted(out.rglob("*.png"))
    if script != "mixed_precision_digits.py":  # the one example that draws nothing
        assert figures, f"{script} wrote no figure"
    for f in figures:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(f) in done.stdout or f.name in done.stdout  # announced where it went
