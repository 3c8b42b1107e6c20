"""The demo's printed findings (fpsim.training.report.CLAIMS): each threshold of issue 14 is
tested on both sides, on stand-in runs whose numbers are chosen here (test accuracy in points
against fp32; the claims: fp16 / fp16-master >= 10 points below with most gradients lost,
mixed-fp16 and mixed-bf16 within 1, pure bf16 >= 5 below with most updates lost, bf16-sr
within 2)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from fpsim.training.report import CLAIMS, findings, findings_text

REF = 0.90  # fp32's test accuracy in these stand-ins


def run(precision, gap_points, uf=0.0, lost=0.0, skipped=0, scale=1.0):
    return NS(precision=precision, test_accuracy=REF - gap_points / 100.0,
              grad_underflow_fraction=uf, lost_update_fraction=lost, skipped_steps=skipped,
              final_loss_scale=scale)


def holds(*runs):
    return {f.recipe: f.holds for f in findings([run("fp32", 0.0), *runs])}


def test_one_row_per_recipe_in_the_printed_order():
    assert [c.recipe for c in CLAIMS] == ["fp16", "fp16-master", "mixed-fp16", "mixed-bf16",
                                          "bf16", "bf16-sr"]
    assert findings([run("bf16", 10.0, lost=0.9)]) == []  # no fp32 run: nothing to compare


@pytest.mark.parametrize("name", ["fp16", "fp16-master"])
def test_fp16_without_scaling(name):
    assert holds(run(name, 10.5, uf=0.6))[name]
    assert not holds(run(name, 9.5, uf=0.6))[name]   # not 10 points below
    assert not holds(run(name, 30.0, uf=0.4))[name]  # fails, but not by underflow


def test_mixed_fp16_within_one_point_and_underflow_cut_tenfold():
    assert holds(run("mixed-fp16", 0.9, uf=0.01))["mixed-fp16"]
    assert holds(run("mixed-fp16", -0.9, uf=0.01))["mixed-fp16"]  # above fp32 counts too
    assert not holds(run("mixed-fp16", 1.1, uf=0.01))["mixed-fp16"]
    master = run("fp16-master", 20.0, uf=0.5)
    assert holds(master, run("mixed-fp16", 0.5, uf=0.049))["mixed-fp16"]
    assert not holds(master, run("mixed-fp16", 0.5, uf=0.051))["mixed-fp16"]


def test_mixed_bf16_within_one_point_without_underflow():
    assert holds(run("mixed-bf16", 0.9))["mixed-bf16"]
    assert not holds(run("mixed-bf16", 1.1))["mixed-bf16"]
    assert not holds(run("mixed-bf16", 0.0, uf=1e-3))["mixed-bf16"]


def test_pure_bf16_five_points_below_by_lost_updates():
    assert holds(run("bf16", 5.1, lost=0.9))["bf16"]
    assert not holds(run("bf16", 4.9, lost=0.9))["bf16"]
    assert not holds(run("bf16", 20.0, lost=0.4))["bf16"]  # not through lost updates
    assert not holds(run("bf16", 20.0, uf=0.1, lost=0.9))["bf16"]


def test_bf16_sr_within_two_points():
    assert holds(run("bf16-sr", 1.9, lost=0.9))["bf16-sr"]
    assert not holds(run("bf16-sr", 2.1, lost=0.9))["bf16-sr"]


def test_printed_lines_carry_the_measured_numbers():
    text = findings_text([run("fp32", 0.0), run("mixed-fp16", 0.45, uf=0.0006, skipped=18,
                                                 scale=2.0**32),
                          run("bf16", 12.2, lost=0.9218)])
    lines = text.splitlines()
    assert lines[0] == ("  [yes] mixed-fp16: dynamic loss scaling (final scale 2^32, 18 steps "
                        "skipped on overflow) cuts the underflow to 0.06%; test accuracy within "
                        "0.45 points of fp32 (claim: <= 1)")
    assert lines[1].startswith("  [yes] bf16: pure bf16 (no master copy) loses 92.18% of its")
    assert "stagnates 12.2 points below fp32 (claim: >= 5); with fp32 master" in lines[1]
    assert findings_text([run("fp32", 0.0), run("bf16-sr", 3.0)]).startswith("  [NO] bf16-sr")
