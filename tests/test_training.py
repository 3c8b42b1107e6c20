"""fpsim.training: recipes, the instrumented trainer's measurements and the reports.

References: fp16 facts (facts.md: smallest subnormal 2^-24, fp16(2^-25) = 0 by ties-to-even),
fpsim.amp.lost_updates / underflow_stats (tested against exact arithmetic in
test_amp_instrument.py), and byte counts computed from the architecture by hand.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fpsim.amp import lost_updates
from fpsim.formats import BF16, FP16, FP32
from fpsim.training import PRECISIONS, TrainConfig, get_recipe, parse_loss_scale, train
from fpsim.training.model import MLP
from fpsim.training.report import (
    format_bytes,
    json_lines,
    markdown_table,
    memory_table,
    results_table,
)
from fpsim.training.trainer import _lost, _underflow

SIZES = (64, 16, 16, 10)
N_PARAMS = 64 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10


def tiny(precision, **kw):
    args = dict(precision=precision, sizes=SIZES, steps=3, batch_size=32, eval_every=3)
    args.update(kw)
    return train(**args)


# ------------------------------------------------------------------------- recipes
def test_recipes():
    assert list(PRECISIONS) == ["fp32", "fp16", "fp16-master", "mixed-fp16", "mixed-bf16",
                                "bf16", "bf16-sr"]
    assert get_recipe("bf16").fmt == BF16 and not get_recipe("bf16").master_weights
    assert get_recipe("bf16").update_rounding == "nearest_even"
    assert get_recipe("bf16-sr").update_rounding == "stochastic"
    assert get_recipe("mixed-fp16").loss_scale == "dynamic"
    assert get_recipe("fp16").opt_level == "O3" and not get_recipe("fp16").master_weights
    assert get_recipe("mixed-bf16").fmt == BF16 and get_recipe("fp16-master").fmt == FP16


@pytest.mark.parametrize("bad", ["fp8", "mixed", "", None])
def test_unknown_precision_lists_the_valid_ones(bad):
    with pytest.raises(ValueError, match="unknown precision .*valid: fp32, fp16, fp16-master, "
                                         "mixed-fp16, mixed-bf16, bf16, bf16-sr"):
        get_recipe(bad)
    with pytest.raises(ValueError, match="valid: fp32, fp16"):
        TrainConfig(precision=bad).validate()


def test_loss_scale_parsing():
    assert parse_loss_scale("None") == 1.0 and parse_loss_scale(" dynamic ") == "dynamic"
    assert parse_loss_scale("128") == 128.0 and parse_loss_scale(None) is None
    for bad in ("auto", "-1", "0", "inf"):
        with pytest.raises(ValueError, match="loss scale must be"):
            parse_loss_scale(bad)
    with pytest.raises(TypeError, match="loss scale must be"):
        parse_loss_scale(True)


@pytest.mark.parametrize("field,value,match", [
    ("steps", 0, "steps must be a positive int"), ("schedule", "step", "valid: constant"),
    ("lr", -1.0, "lr must be a positive number"), ("momentum", 1.0, "momentum must be in"),
    ("sizes", (32, 10), "start with 64")])
def test_config_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**{field: value}).validate()


# ---------------------------------------------------------------- the measurements
def test_underflow_counts_against_fp16_facts():
    # fp16: 2^-26 -> 0; 2^-25 is a tie between 0 and 2^-24 -> 0 (even); 3 * 2^-26 -> 2^-24
    # (subnormal); 2^-20 subnormal; 1.0 normal; 70000 overflows (not underflow)
    exact = np.array([0.0, 2.0**-26, -(2.0**-25), 3 * 2.0**-26, 2.0**-20, 1.0, 7e4])
    run = np.array([0.0, 0.0, 0.0, 2.0**-24, 0.0, 1.0, np.inf]).astype(np.float16)
    c = _underflow(exact, FP16, run)
    assert (c.zeroed, c.nonzero, c.subnormal, c.observed_zero) == (2, 6, 2, 3)
    c32 = _underflow(exact, FP32, None)  # all of these are fp32 values
    assert (c32.zeroed, c32.subnormal) == (0, 0)


def test_lost_update_prefilter_is_exact():
    rng = np.random.default_rng(0)
    for fmt in (FP16, BF16, FP32):
        w = np.asarray(rng.standard_normal(4000) * np.exp2(rng.integers(-20, 5, 4000)))
        w = w.astype(fmt.storage_dtype).astype(np.float64)
        w[:50] = 0.0
        u = rng.standard_normal(4000) * np.exp2(rng.integers(-40, 0, 4000))
        u[50:100] = 0.0
        lost, nonzero = _lost(w, u, fmt)
        ref = lost_updates(w, u, fmt)
        assert (lost, nonzero) == (ref.lost, ref.nonzero)
        assert 0 < lost < nonzero


def test_tiny_updates_are_all_lost():
    # lr so small that lr * g is below half an ulp of every weight: nothing moves, and every
    # element with a non-zero gradient counts as a lost update (fp16 and fp32 alike)
    for precision in ("fp16", "fp32", "mixed-fp16"):
        r = tiny(precision, lr=1e-30, momentum=0.0, steps=2)
        assert r.lost_update_fraction == 1.0 and r.updates["nonzero"] > 0, precision
    r = tiny("fp16", lr=1e-30, momentum=0.0, steps=2)
    untrained = MLP(SIZES, rng=0, out_init_scale=0.01).to("fp16")
    assert r.eval_train_loss[-1] == tiny("fp16", lr=1e-30, steps=1).eval_train_loss[-1]
    assert untrained.fc1.weight.data.dtype == np.float16


def test_pure_fp16_loses_updates_that_master_weights_keep():
    # default output layer: lr * g mostly 1e-7..1e-5 against weights ~0.1, below half an
    # fp16 ulp there (2^-12 relative) and far above half an fp32 ulp (2^-25 relative)
    pure = tiny("fp16", lr=1e-3, steps=2, out_init_scale=1.0)
    master = tiny("fp16-master", lr=1e-3, steps=2, out_init_scale=1.0)
    assert pure.lost_update_fraction > 0.5
    assert master.lost_update_fraction < 0.01


def test_fp32_run_has_no_underflow_and_keeps_its_updates():
    r = tiny("fp32", lr=0.1)
    assert r.grad_underflow_fraction == 0.0
    assert r.lost_update_fraction < 0.05
    assert r.grad["all"]["nonzero"] > 0


def test_mixed_scales_and_master_weights():
    r = tiny("mixed-fp16", steps=4)
    assert r.config.precision == "mixed-fp16" and r.loss_scale == "dynamic"
    assert r.step_scale[0] == 2.0**16
    # the fp32 master copy is the one updated: fp32 lost-update test (essentially none)
    assert r.lost_update_fraction < 0.05
    s = r.summary()
    for key in ("precision", "loss_scale", "final_loss", "test_accuracy", "skipped_steps",
                "final_loss_scale", "grad_underflow_fraction"):
        assert key in s
    json.dumps(s)  # JSON-ready


def test_loss_scale_override():
    r = tiny("fp16-master", loss_scale="1024")
    assert r.loss_scale == "1024" and set(r.step_scale) == {1024.0}


@pytest.mark.parametrize("precision,low,master", [("fp32", "fp32", False),
                                                  ("fp16", "fp16", False),
                                                  ("mixed-fp16", "fp16", True),
                                                  ("mixed-bf16", "bf16", True)])
def test_memory_by_format_matches_the_architecture(precision, low, master):
    batch = 32
    r = tiny(precision, batch_size=batch)
    m = r.memory
    low_bytes = 4 if low == "fp32" else 2
    assert m["weights"] == {low: N_PARAMS * low_bytes}
    assert m["gradients"] == {low: N_PARAMS * low_bytes}
    assert m["master_weights"] == ({"fp32": N_PARAMS * 4} if master else {})
    assert m["master_gradients"] == ({"fp32": N_PARAMS * 4} if master else {})
    # SGD momentum buffer: one value per parameter, fp32 (O0 / O2) or like the weights (O3)
    state = "fp32" if master or low == "fp32" else low
    assert m["optimizer_state"] == {state: N_PARAMS * (4 if state == "fp32" else 2)}
    # saved activations by PyTorch's derivative formulas: each linear keeps its input (the
    # B x 64 image, or its cast, then the two B x 16 ReLU outputs, which ReLU keeps too, one
    # storage each), log_softmax its fp32 B x 10 output (nll_loss keeps the same storage);
    # loss scaling (O2, O1) multiplies the fp32 scalar loss, and mul keeps it
    inputs = batch * (64 + 16 + 16)
    scaled = 4 if master else 0
    if low == "fp32":
        expect = {"fp32": 4 * (inputs + batch * 10) + scaled}
    else:
        expect = {low: 2 * inputs, "fp32": 4 * batch * 10 + scaled}
    assert m["activations"] == expect


def test_memory_figures_are_the_memory_meters():
    """The run's memory figures are what fpsim.memory.meter() measures over the same first
    step done by hand (fp16-master: O2 with a static loss scale of 1024)."""
    import fpsim
    from fpsim.amp import initialize, scale_loss
    from fpsim.autograd import functional as F
    from fpsim.autograd.tensor import Tensor
    from fpsim.datasets import load_digits
    from fpsim.optim import SGD

    batch = 32
    r = tiny("fp16-master", batch_size=batch, loss_scale="1024", instrument=False)
    recipe = get_recipe("fp16-master")
    model = MLP(SIZES, rng=0, init_scale=1.0, out_init_scale=0.01)
    model, opt = initialize(model, SGD(model.parameters(), lr=0.006, momentum=0.9),
                            recipe.opt_level, dtype=recipe.fmt, loss_scale=1024.0)
    data = load_digits()
    idx = np.random.default_rng(0).permutation(len(data.x_train))[:batch]
    with fpsim.memory.meter(model, opt) as m:
        opt.zero_grad()
        loss = F.cross_entropy(model(Tensor(data.x_train[idx], FP32)), data.y_train[idx])
        with scale_loss(loss, opt) as scaled:
            scaled.backward()
        opt.step()
    rep = m.report()
    weights = sum(p.data.nbytes for p in model.parameters())
    assert weights == 2 * N_PARAMS
    assert r.memory["weights"] == {"fp16": weights} == rep.by_format["parameters"]
    assert r.memory["master_weights"] == {"fp32": 2 * weights}
    assert rep.current["master_weights"] == 2 * weights
    assert r.memory["master_gradients"] == {"fp32": rep.current["gradients"]}
    assert r.memory["optimizer_state"] == {"fp32": rep.current["optimizer_states"]}
    assert r.memory["activations"] == rep.activations_by_format
    assert sum(r.memory["activations"].values()) == rep.max["activations"] > 0
    assert r.peak_bytes == rep.peak_total == sum(rep.peak.values())
    assert "peak_bytes" in r.summary() and "peak" in memory_table([r]).splitlines()[0]


def test_reports():
    runs = [tiny("fp32"), tiny("fp16")]
    table = results_table(runs)
    assert table.splitlines()[0].split()[:3] == ["precision", "loss", "scale"]
    assert "fp16" in table and "%" in table
    assert "fp16" in memory_table(runs) and "KiB" in memory_table(runs)
    lines = json_lines(runs).splitlines()
    assert [json.loads(s)["precision"] for s in lines] == ["fp32", "fp16"]
    assert markdown_table(runs).count("\n") == 3
    assert format_bytes(1023) == "1023 B" and format_bytes(2**20) == "1.00 MiB"


def test_progress_callback():
    seen = []
    tiny("fp32", progress=seen.append)
    assert seen == [1, 1, 1]


def test_grad_shift_leaves_fp32_unchanged_and_moves_fp16_gradients():
    """The gradient scale-down multiplies the loss by 2^-k and the learning rate by 2^k:
    powers of two are exact in fp32, so the fp32 run is the same to the bit, while fp16's
    gradients move k binades down (more of them underflow)."""
    a = tiny("fp32", steps=4)
    b = tiny("fp32", steps=4, grad_shift=13)
    assert np.array_equal(a.step_loss, b.step_loss)
    assert a.eval_test_accuracy.tolist() == b.eval_test_accuracy.tolist()
    u0 = tiny("fp16-master", steps=4).grad_underflow_fraction
    u13 = tiny("fp16-master", steps=4, grad_shift=13).grad_underflow_fraction
    assert u13 > u0 + 0.2


def test_measure_every_samples_the_statistics():
    r = tiny("mixed-fp16", steps=6, measure_every=3)
    assert np.isfinite(r.step_underflow).tolist() == [True, False, False, True, False, False]
    with pytest.raises(ValueError, match="measure_every must be a positive int"):
        TrainConfig(measure_every=0).validate()
    with pytest.raises(ValueError, match="grad_shift must be an int from 0 to 40"):
        TrainConfig(grad_shift=-1).validate()


def test_bf16_sr_rounds_the_updates_stochastically():
    """Same start and batches: pure bf16 under RNE and under SR differ only by the rounding
    of the optimizer's writes (the first forward pass is the same)."""
    rne = tiny("bf16", steps=3)
    sr = tiny("bf16-sr", steps=3)
    assert rne.step_loss[0] == sr.step_loss[0]
    assert not np.array_equal(rne.step_loss[1:], sr.step_loss[1:])
