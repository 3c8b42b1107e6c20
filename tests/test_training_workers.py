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


@pytest.mark.parametrize("bad", [0, -1, np.int64(0)])
def test_bad_workers(bad):
    with pytest.raises(ValueError, match=f"workers must be >= 1, got {bad}"):
        run_demo(**SHORT, workers=bad)


@pytest.mark.parametrize("bad", [1.5, 2.0, True, "2", None, np.array([2]), np.timedelta64(2)])
def test_workers_of_other_types_are_a_type_error(bad):
    # fpsim.checks.as_int's rule: what range() takes (np.int64(2), np.array(2)) is a count
    with pytest.raises(TypeError, match=f"workers must be an int, got {type(bad).__name__}"):
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

    from fpsim.cli import demo as cli

    p = argparse.ArgumentParser()
    cli.configure_parser(p)
    assert cli.run_cli(p.parse_args(["--quick", "--no-plots", "--jobs", "0"])) == 2
    out = capsys.readouterr()
    assert "--jobs must be a positive int, got 0" in out.err and out.out == ""
