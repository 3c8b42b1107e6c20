"""A run that went non-finite reports its fractions as undefined (issue 32 item 9): an all-NaN
run's table showed "grad underflow 0, lost updates 0" (0 of the values it never compared) and
its JSON held a bare NaN, which JSON readers refuse. The class: every figure computed as a
share of a run's values (underflow, subnormal, per layer, lost updates), in the table, the
findings and the JSON, for each way a run goes non-finite."""

from __future__ import annotations

import json
import warnings

import pytest

from fpsim.training import train
from fpsim.training.report import UNDEFINED, findings_text, json_lines, results_table

FRACTIONS = ("grad_underflow_fraction", "weight_grad_underflow_fraction",
             "activation_grad_underflow_fraction", "grad_subnormal_fraction",
             "grad_zero_fraction", "lost_update_fraction")


def _run(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Apex's "unscaling non-fp32 grads" warning
        return train(steps=3, sizes=(64, 8, 10), eval_every=3, **kw)


def _strict(text: str) -> dict:
    def refuse(name):
        raise AssertionError(f"bare {name} in the JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("kw", [
    dict(precision="fp16", loss_scale="1e30"),  # a static scale overflows every gradient
    dict(precision="mixed-fp16", loss_scale="1e30"),
    dict(precision="fp32", lr=1e30),  # the weights themselves blow up
], ids=["fp16-static-1e30", "mixed-fp16-static-1e30", "fp32-lr-1e30"])
def test_a_nonfinite_run_reports_undefined_fractions(kw):
    r = _run(**kw)
    assert r.nonfinite_run
    row = results_table([r]).splitlines()[2].split()
    assert row.count(UNDEFINED) == 3 and "0" not in row[4:6]  # underflow, subnormal, lost
    s = _strict(json_lines([r]))
    assert s["nonfinite_run"] is True
    assert all(s[k] is None for k in FRACTIONS)
    assert all(v is None for v in s["grad_underflow_by_layer"].values())
    assert "0.00%" not in findings_text([r])


def test_a_finite_run_keeps_its_numbers():
    r = _run(precision="mixed-fp16")
    assert not r.nonfinite_run
    s = _strict(json_lines([r]))
    assert s["nonfinite_run"] is False
    assert all(isinstance(s[k], float) and 0 <= s[k] <= 1 for k in FRACTIONS)
    assert UNDEFINED not in results_table([r])


def test_skipped_overflow_steps_are_not_a_nonfinite_run():
    # dynamic scaling starts at 2**16 and skips its overflowing steps: they never reach the
    # weights, and the fractions of the steps it took are defined
    r = _run(precision="mixed-fp16", loss_scale="dynamic")
    assert r.nonfinite_steps == r.skipped_steps
    assert not r.nonfinite_run


# the same class one layer down: the amp instruments' fractions (fpsim.amp), which report
# any training loop's steps


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3"])
def test_amp_fractions_of_nonfinite_values_are_undefined(fmt):
    import math

    import numpy as np

    from fpsim.amp import TrainingMonitor, lost_updates, underflow_stats

    for bad in (np.nan, np.inf, -np.inf):
        s = underflow_stats(np.full(5, bad), fmt)
        assert math.isnan(s.fraction) and math.isnan(s.subnormal_fraction) and s.nonfinite == 5
        r = lost_updates(np.ones(4), np.full(4, bad), fmt)
        assert math.isnan(r.fraction) and r.nonfinite == 4
    # defined where something finite was compared, and 0 of 0 finite zeros stays 0
    assert underflow_stats(np.array([np.nan, 1e-300, 1.0]), fmt).fraction == 0.5
    assert underflow_stats(np.zeros(3), fmt).fraction == 0.0
    assert lost_updates(np.ones(2), np.array([np.nan, 1e-9]), fmt).fraction == 0.5
    m = TrainingMonitor(fmt)
    m.record(loss=float("nan"), grads={"fc": np.full(3, np.nan)},
             updates={"fc": (np.ones(3), np.full(3, np.nan))})
    summary = m.summary()
    assert math.isnan(summary["underflow_mean"]["fc"])
