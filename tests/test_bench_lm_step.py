"""benchmarks/bench_lm_step.py: its hand-written NumPy float32 GPT step computes fpsim's loss
and gradients (so the timing compares the same work), and the script runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_lm_step.py"


def test_numpy_step_matches_fpsim_and_runs(capsys):
    spec = importlib.util.spec_from_file_location("bench_lm_step", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--repeat", "1"]) == 0  # it refuses to time steps that disagree
    out = capsys.readouterr().out
    assert "speed vs reference" in out and "disagree" not in out
