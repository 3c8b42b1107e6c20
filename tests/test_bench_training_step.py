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
    assert "fp16+master speed vs numpy fp32" in out and "GEMM (float64 BLAS)" in out
    assert out.count("fpsim fp16+master sgemm") == 2
    assert out.count("numpy fp16+master  ") == 2  # the floor row of each model
    assert out.count("fpsim bf16+master") == 2
    assert "engine overhead of fpsim fp16+master over its floor" in out
    rows = [ln for ln in out.splitlines() if "fpsim fp16+master  " in ln]
    assert len(rows) == 2 and all(ln.rstrip().endswith("%") for ln in rows)


def test_script_engine_rows(bench, capsys):
    assert bench.main(["--repeat", "1", "--steps", "1", "--engine"]) == 0
    out = capsys.readouterr().out
    assert "numpy fp64" not in out and "sgemm" not in out
    assert out.count("numpy fp16+master  ") == 2


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_numpy_fp16_floor_is_fpsims_step_bit_for_bit(bench, case):
    """The hand-written fp16 + fp32-master NumPy step (the floor the benchmark compares the
    engine with) computes what fpsim computes: the same losses and fp16 parameters, bit for
    bit, over three steps (the later ones use the momentum buffers and the master weights)."""
    build, floor_cls, shape = {"mlp": (bench.mlp, bench.NumpyMLPHalf, (bench.BATCH, 64)),
                               "cnn": (bench.cnn, bench.NumpyCNNHalf, (bench.BATCH, 1, 8, 8))}[
        case]
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    y = rng.integers(0, 10, bench.BATCH)
    model = build(3)
    floor = floor_cls([p.numpy(np.float64) for p in model.parameters()])
    step = bench.fpsim_stepper(model, "fp16", True)
    xt = Tensor(x, "fp16")
    losses = [(step(xt, y), floor.step(xt.numpy(), y)) for _ in range(3)]
    assert [a for a, _ in losses] == [b for _, b in losses]
    assert len({a for a, _ in losses}) > 1  # the steps change the loss: a real check
    for p, q in zip(model.parameters(), floor.p, strict=True):
        assert q.dtype == np.float16
        np.testing.assert_array_equal(p.numpy().view(np.uint16), q.view(np.uint16))
