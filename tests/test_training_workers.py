"""``run_demo(workers=N)`` trains the recipes in N processes: the same results as in one
process (every run is deterministic for its seed), in recipe order; bad values refused."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim.training.experiment import default_workers, run_demo

SHORT = dict(quick=True, precisions=["bf16-sr", "fp32", "mixed-fp16"], progress=False,
             steps=12, eval_every=6, measure_every=3, sizes=(64, 16, 10))


def test_processes_give_the_same_runs_in_recipe_order():
    one = run_demo(**SHORT, workers=1)
    two = run_demo(**SHORT, workers=2)
    assert [r.precision for r in two] == SHORT["precisions"]
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a.step_loss, b.step_loss)
        assert np.array_equal(a.step_scale, b.step_scale)
        assert a.test_accuracy == b.test_accuracy and a.updates == b.updates
        assert a.grad == b.grad


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_workers(bad):
    with pytest.raises(ValueError, match="workers must be a positive int"):
        run_demo(**SHORT, workers=bad)


def test_default_workers_at_most_one_per_run(monkeypatch):
    import os

    assert default_workers(1) == 1
    assert 1 <= default_workers(7) <= 7
    # the CPUs this process may use (3 of them), not more than one per run (7)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert default_workers(7) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert default_workers(7) == 7 and default_workers(2) == 2


def test_demo_cli_refuses_bad_jobs(capsys):
    import argparse

    import fpsim.training.cli as cli

    p = argparse.ArgumentParser()
    cli.configure_demo_parser(p)
    assert cli.run_demo_cli(p.parse_args(["--quick", "--no-plots", "--jobs", "0"])) == 2
    out = capsys.readouterr()
    assert "--jobs must be a positive int, got 0" in out.err and out.out == ""
