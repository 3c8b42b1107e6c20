"""benchmarks/bench_training_step.py: its NumPy baselines do the same maths as fpsim (one SGD
step in float64 gives the same loss and parameters as fpsim in fp64), and the script runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fpsim.autograd import Tensor, matmul_accumulation

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_training_step.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_training_step", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_numpy_baseline_is_the_same_step(bench, case):
    build, numpy_cls = {"mlp": (bench.mlp, bench.NumpyMLP), "cnn": (bench.cnn, bench.NumpyCNN)}[
        case]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((bench.BATCH, 64) if case == "mlp" else (bench.BATCH, 1, 8, 8))
    y = rng.integers(0, 10, bench.BATCH)
    model = build(0)
    ref = numpy_cls([p.numpy(np.float64) for p in model.parameters()], np.float64)
    with matmul_accumulation("exact"):
        step = bench.fpsim_stepper(model, "fp64", False, "exact")
        for _ in range(2):  # the second step uses the momentum buffer
            loss = step(Tensor(x, "fp64"), y)
            ref_loss = ref.step(x, y)
            assert loss == pytest.approx(ref_loss, rel=1e-12)
    for p, q in zip(model.parameters(), ref.p, strict=True):
        np.testing.assert_allclose(p.numpy(np.float64), q, rtol=1e-10, atol=1e-11)


def test_script_runs_with_breakdown(bench, capsys):
    assert bench.main(["--repeat", "1", "--steps", "1", "--breakdown"]) == 0
    out = capsys.readouterr().out
    assert "fp16+master / numpy fp32" in out and "GEMM (float64 BLAS)" in out
    assert out.count("fpsim fp16+master sgemm") == 2
