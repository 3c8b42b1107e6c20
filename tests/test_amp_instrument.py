"""Instrumentation against straightforward references: NumPy / ml_dtypes casts, exact
fractions (tests/exact.py), ml_dtypes.finfo, and explicit hand-derived cases."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.amp import (
    GradScaler,
    StepRecord,
    TrainingMonitor,
    exponent_histogram,
    fp16_range_shading,
    lost_updates,
    merge_histograms,
    nonfinite_count,
    underflow_stats,
)
from tests.exact import floor_log2, round_exact


def spread(n: int, lo: int, hi: int, seed: int = 0) -> np.ndarray:
    """Signed float64 values with exponents spread over [lo, hi)."""
    rng = np.random.default_rng(seed)
    return rng.choice([-1.0, 1.0], n) * rng.uniform(1, 2, n) * 2.0 ** rng.integers(lo, hi, n)


# --------------------------------------------------------------------------- underflow
@pytest.mark.parametrize("fmt, dtype", [(fpsim.FP16, np.float16),
                                        (fpsim.BF16, ml_dtypes.bfloat16),
                                        (fpsim.FP8_E5M2, ml_dtypes.float8_e5m2)])
def test_underflow_stats_against_dtype_casts(fmt, dtype):
    x = spread(4000, -150, 20)
    x[:5] = [0.0, -0.0, np.inf, np.nan, 1.0]
    with np.errstate(over="ignore"):
        r = x.astype(dtype).astype(np.float64)  # NumPy / ml_dtypes conversion, RNE
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    nonzero = np.isfinite(x) & (x != 0)
    s = underflow_stats(x, fmt)
    assert s.total == 4000
    assert s.nonzero == int(nonzero.sum()) == 3996
    assert s.zeroed == int((nonzero & (r == 0)).sum())
    assert s.subnormal == int((nonzero & (r != 0) & (np.abs(r) < tiny)).sum())
    assert s.overflowed == int((np.isfinite(x) & ~np.isfinite(r)).sum())
    assert s.zeroed > 0 and s.subnormal > 0
    assert s.fraction == s.zeroed / s.nonzero
    assert s.as_dict()["subnormal_fraction"] == s.subnormal / s.nonzero


def test_underflow_stats_fp16_boundaries():
    # 2**-25 is half the smallest subnormal: ties to even, 0; just above rounds up to 2**-24
    x = np.array([2.0**-25, 2.0**-25 * (1 + 2.0**-30), 2.0**-24, 2.0**-14, 2.0**-14 * 0.75,
                  65519.0, 65520.0, -2.0**-26])
    s = underflow_stats(x, "fp16")
    assert (s.nonzero, s.zeroed, s.subnormal, s.overflowed) == (8, 2, 3, 1)
    # flushing subnormal results: the three subnormals become zeros too
    f = underflow_stats(x, "fp16", subnormals="flush")
    assert (f.zeroed, f.subnormal) == (5, 0)
    empty = underflow_stats(np.zeros(3), "fp16")
    assert empty.fraction == 0.0 and empty.nonzero == 0


def test_nonfinite_count():
    a = np.array([1.0, np.inf, -np.inf, np.nan])
    b = np.array([np.nan, 1.0], np.float16)
    c = np.array([np.inf, 0.0], ml_dtypes.bfloat16)
    assert nonfinite_count(a) == 3
    assert nonfinite_count([a, b, c]) == 5
    assert nonfinite_count({"x": a, "y": np.arange(3)}) == 3
    assert nonfinite_count(np.float32("nan")) == 1
    assert nonfinite_count([]) == 0


# --------------------------------------------------------------------------- lost updates
def test_lost_updates_2048_rule_both_sides_and_tie():
    e = 2.0**-20
    # fp16 weight 1.0: spacing 2**-10 above, 2**-11 below
    cases = [
        (1.0, 2.0**-11, True),  # w / u = 2048: the tie goes to 1 (even): lost
        (1.0, 2.0**-11 * (1 - e), True),  # smaller: lost
        (1.0, 2.0**-11 * (1 + e), False),  # just past the tie: rounds up to 1 + 2**-10
        (1.0, -2.0**-11, False),  # 1 - 2**-11 is representable (the binade below)
        (1.0, -2.0**-12, True),  # tie between 1 - 2**-11 (odd) and 1 (even): lost
        (1.0, -2.0**-12 * (1 + e), False),
        (2048.0, 1.0, True),  # the same rule at 2048 (spacing 2): 2048 / 2048
        (2048.0, 1.0 + 2.0**-30, False),
        (1.0 + 2.0**-10, 2.0**-11, False),  # odd weight: the tie rounds away from it
        (1.0, 0.0, False),  # a zero update is not counted
        # double rounding trap: 1 + 2**-11 + 2**-60 rounds to the tie in float64, but the
        # exact sum lies above it, so the update survives
        (1.0, 2.0**-11 + 2.0**-60, False),
        (65504.0, 15.0, True),  # below half an ulp (32) at the top binade
        (65504.0, 16.0, False),  # the tie: 65504 is odd, rounds to 2**16, i.e. inf
        (0.0, 2.0**-26, True),  # below half the smallest subnormal
    ]
    w = np.array([c[0] for c in cases])
    u = np.array([c[1] for c in cases])
    r = lost_updates(w, u, "fp16")
    assert r.total == len(cases) and r.nonzero == len(cases) - 1
    assert r.lost == sum(c[2] for c in cases)
    for wi, ui, lost in cases:
        assert lost_updates(np.array([wi]), np.array([ui]), "fp16").lost == int(lost), (wi, ui)


def test_lost_updates_against_exact_fractions():
    rng = np.random.default_rng(3)
    w = fpsim.round(spread(300, -10, 10, seed=4), "fp16")
    u = spread(300, -25, 0, seed=5) * rng.choice([0.0, 1.0], 300, p=[0.1, 0.9])
    ref_lost = sum(
        ui != 0 and round_exact(Fraction(wi) + Fraction(ui), fpsim.FP16)[0] == wi
        for wi, ui in zip(w.tolist(), u.tolist(), strict=True)
    )
    r = lost_updates(w, u, "fp16")
    assert r.nonzero == int((u != 0).sum())
    assert r.lost == ref_lost and 0 < r.lost < r.nonzero
    assert r.fraction == r.lost / r.nonzero
    # rounding up keeps every positive update
    assert lost_updates(np.array([1.0]), np.array([1e-8]), "fp16", "up").lost == 0


def test_lost_updates_rejects_unrepresentable_weights():
    with pytest.raises(ValueError, match="cannot represent"):
        lost_updates(np.array([0.1]), np.array([1e-3]), "fp16")


# --------------------------------------------------------------------------- exponents
def test_exponent_histogram_against_exact_floor_log2():
    x = spread(500, -1074, 1000, seed=7)
    x[:6] = [5e-324, 2.0**-1022, np.nextafter(2.0**10, 0), 2.0**10, -0.75, 1.0]
    ref = {}
    for v in x.tolist():
        k = floor_log2(abs(Fraction(v)))
        ref[k] = ref.get(k, 0) + 1
    assert ref[-1074] >= 1 and ref[9] >= 1 and ref[10] >= 1
    h = exponent_histogram(np.concatenate([x, [0.0, -0.0, np.inf, np.nan]]))
    assert h.as_dict() == ref
    assert (h.zeros, h.nonfinite, h.below, h.above) == (2, 2, 0, 0)
    assert h.exponents[0] == min(ref) and h.exponents[-1] == max(ref)
    assert h.total == 504


def test_exponent_histogram_bins_and_narrow_dtypes():
    x = np.array([2.0**-24, 2.0**-14, 3.0, 65504.0, 0.0], np.float16)
    h = exponent_histogram(x, bins=range(-14, 10))
    assert (h.below, h.above, h.zeros) == (1, 1, 1)
    assert h.as_dict() == {-14: 1, 1: 1} and len(h.counts) == 24
    b = exponent_histogram(np.array([1e-40, 1.0], ml_dtypes.bfloat16))
    assert b.as_dict() == {math.frexp(float(ml_dtypes.bfloat16(1e-40)))[1] - 1: 1, 0: 1}
    with pytest.raises(ValueError, match="consecutive"):
        exponent_histogram(x, bins=[0, 2])
    assert exponent_histogram(np.zeros(2)).counts.size == 0
    m = merge_histograms([h, exponent_histogram(np.array([8.0, np.nan]))])
    assert m.as_dict() == {-14: 1, 1: 1, 3: 1} and (m.below, m.above, m.nonfinite) == (1, 1, 1)


def test_range_shading_against_ml_dtypes_finfo():
    def exps(dtype):
        fi = ml_dtypes.finfo(dtype)
        return tuple(math.frexp(float(v))[1] - 1
                     for v in (fi.smallest_subnormal, fi.smallest_normal, fi.max))

    assert tuple(fp16_range_shading()) == (-24, -14, 15) == exps(np.float16)
    assert tuple(fp16_range_shading(fpsim.BF16)) == exps(ml_dtypes.bfloat16)
    assert tuple(fp16_range_shading("fp8_e4m3")) == (-9, -6, 8) == exps(ml_dtypes.float8_e4m3fn)
    assert tuple(fp16_range_shading(fpsim.FP32)) == exps(np.float32)
    no_sub = fpsim.Format(5, 10, subnormals=False)
    assert fp16_range_shading(no_sub).smallest_subnormal == -14


# --------------------------------------------------------------------------- monitor
class P:
    def __init__(self, grad):
        self.grad = grad


class Opt:
    def __init__(self, p):
        self.param_groups = [{"params": [p]}]

    def step(self):
        return None


def test_training_monitor_with_scaler():
    s = GradScaler(init_scale=4.0, growth_interval=1)
    m = TrainingMonitor(fmt="fp16")
    p = P(None)
    opt = Opt(p)
    exact = np.array([1.0, 2.0**-27, 2.0**-25, 0.0])  # the unscaled fp32 gradients
    for i, bad in enumerate([False, True, False]):
        s.scale(1.0)
        scaled = exact * s.get_scale()
        if bad:
            scaled[0] = np.inf
        p.grad = scaled.astype(np.float32)
        s.step(opt)
        s.update()
        m.record(loss=1.0 / (i + 1), grads={"fc": scaled},
                 updates={"fc": (np.array([1.0, 2048.0]), np.array([1e-4, 0.5]))}, scaler=s)
    assert m.series("scale").tolist() == [4.0, 8.0, 4.0]  # hand: grow, back off
    assert m.series("skipped").tolist() == [False, True, False]
    # scale 4: 2**-27 * 4 = 2**-25 ties to 0 in fp16, 2**-23 is kept: 1 of 3 lost;
    # scale 8: the inf is not counted, 2**-24 and 2**-22 are kept: 0 of 2
    assert m.series("underflow", "fc").tolist() == [1 / 3, 0.0, 1 / 3]
    # 1e-4 < 2**-11 vanishes next to 1.0; 0.5 < 1 (half ulp at 2048) vanishes too
    assert m.series("lost_updates", "fc").tolist() == [1.0, 1.0, 1.0]
    summ = m.summary()
    assert summ["steps"] == 3 and summ["skipped"] == 1 and summ["found_inf"] == 1
    assert summ["scale_first"] == 4.0 and summ["scale_max"] == 8.0
    assert summ["loss_min"] == 1.0 / 3 and summ["nonfinite_losses"] == 0
    assert summ["range"] == {"smallest_subnormal": -24, "smallest_normal": -14, "max": 15}
    hist = summ["exponent_histograms"]["fc"]
    # exponents: step1 {2, -25, -23}, step2 {-24, -22} + inf, step3 {2, -25, -23}
    assert hist["counts"] == {-25: 2, -24: 1, -23: 2, -22: 1, 2: 2}
    assert hist["zeros"] == 3 and hist["nonfinite"] == 1
    assert m.layers() == ["fc"] and len(m) == 3


def test_training_monitor_underflow_without_scaling_and_errors():
    m = TrainingMonitor(histograms=False)
    g = np.array([2.0**-27, 2.0**-26, 2.0**-10, 1.0])
    r = m.record(loss=np.float32(2.0), grads={"w": g})
    assert r.underflow == {"w": 0.5} and r.histograms == {} and r.step == 0
    m.add(StepRecord(step=1, loss=float("nan"), scale=1.0))
    summ = m.summary()
    assert summ["nonfinite_losses"] == 1 and summ["loss_min"] == 2.0
    assert summ["underflow_mean"] == {"w": 0.5}
    with pytest.raises(ValueError, match="valid"):
        m.series("nope")
    with pytest.raises(ValueError, match="layer"):
        m.series("underflow")
    with pytest.raises(TypeError):
        m.add({"step": 1})
    assert TrainingMonitor().summary()["steps"] == 0

    class TensorLoss:  # an autograd tensor: .item() gives the Python float
        def item(self):
            return 0.25

    assert m.record(loss=TensorLoss()).loss == 0.25
    assert m.record(loss=np.array([1.5], ml_dtypes.bfloat16)).loss == 1.5
    with pytest.raises(ValueError, match="scalar"):
        m.record(loss=np.ones(2))
