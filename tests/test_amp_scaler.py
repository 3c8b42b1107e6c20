"""Loss scalers against hand-computed trajectories and exact rational arithmetic.

Expected scale sequences below were written out by hand from the rules of PyTorch's
``_amp_update_scale_`` kernel, DeepSpeed's ``DynamicLossScaler.update_scale`` and Apex's
``LossScaler.update_scale`` (see the comments next to each); products are checked against
``tests/exact.py`` (fractions.Fraction) rounding, never against fpsim's rounding.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.amp import (
    OPT_LEVELS,
    ApexLossScaler,
    DynamicLossScaler,
    GradScaler,
    StaticLossScaler,
    describe_opt_level,
    get_opt_level,
)
from tests.exact import round_exact

F32_MAX = float(np.finfo(np.float32).max)


class FakeParam:
    def __init__(self, grad=None, fmt=fpsim.FP32):
        self.grad = grad
        self.fmt = fmt


class FakeOptimizer:
    """The duck-typed optimizer protocol: param_groups, step(), zero_grad()."""

    def __init__(self, *params):
        self.param_groups = [{"params": list(params)}]
        self.steps = 0

    def step(self):
        self.steps += 1
        return f"step {self.steps}"

    def zero_grad(self):
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None


def fake_backward(scaler, params, bad: bool, dtype=np.float32):
    """Gradients of a loss scaled by the scaler's current scale; inf in one element if bad."""
    s = scaler.get_scale()
    for p in params:
        g = np.array([1.0, -0.5, 0.25]) * s
        if bad:
            g[1] = np.inf
        p.grad = g.astype(dtype)


def run(scaler, pattern: str, dtype=np.float32):
    """Drive scale/step/update over a pattern of G (finite) and I (inf) steps; returns the
    scales used, the scales after update, the step return values and the optimizer."""
    p = FakeParam()
    opt = FakeOptimizer(p)
    used, after, rets = [], [], []
    for c in pattern:
        scaler.scale(np.float32(1.0))
        fake_backward(scaler, [p], c == "I", dtype)
        used.append(scaler.get_scale())
        rets.append(scaler.step(opt))
        scaler.update()
        after.append(scaler.get_scale())
    return used, after, rets, opt


# --------------------------------------------------------------------------- GradScaler
def test_gradscaler_trajectory_hand_computed():
    # growth_interval 3: the 3rd consecutive good step doubles; an inf halves and resets.
    s = GradScaler(init_scale=1024.0, growth_interval=3)
    pattern = "GGGGIGGGIIGGG"
    used, after, rets, opt = run(s, pattern)
    assert used == [1024, 1024, 1024, 2048, 2048, 1024, 1024, 1024, 2048, 1024, 512, 512, 512]
    assert after == [1024, 1024, 2048, 2048, 1024, 1024, 1024, 2048, 1024, 512, 512, 512, 1024]
    assert [h["growth_tracker"] for h in s.history] == [1, 2, 0, 1, 0, 1, 2, 0, 0, 0, 1, 2, 0]
    # the optimizer is stepped exactly on the good steps; skipped steps return None
    assert opt.steps == pattern.count("G") == 10
    assert [r is None for r in rets] == [c == "I" for c in pattern]
    assert [h["skipped"] for h in s.history] == [c == "I" for c in pattern]
    assert [h["found_inf"] for h in s.history] == [c == "I" for c in pattern]
    assert [h["step"] for h in s.history] == list(range(len(pattern)))
    assert [h["scale"] for h in s.history] == used
    assert [h["new_scale"] for h in s.history] == after


def test_gradscaler_growth_capped_below_float32_inf():
    # 2**127 * 2 = 2**128 overflows float32: the scale is kept, the tracker still restarts
    s = GradScaler(init_scale=2.0**127, growth_interval=2)
    used, after, _, opt = run(s, "GGGIGG")
    assert after == [2.0**127, 2.0**127, 2.0**127, 2.0**126, 2.0**126, 2.0**127]
    assert [h["growth_tracker"] for h in s.history] == [1, 0, 1, 0, 1, 0]
    assert opt.steps == 5
    # the float32 max itself: max * 1.0000001 exceeds max + ulp/2 = (2**24 - 1/2) * 2**104
    s = GradScaler(init_scale=F32_MAX, growth_factor=1.0000001, growth_interval=1)
    _, after, _, _ = run(s, "GG")
    assert after == [F32_MAX, F32_MAX]


def test_gradscaler_update_products_rounded_to_float32():
    # the kernel: float32(float32 scale * double factor); reference by exact fractions
    s = GradScaler(init_scale=3.0, growth_factor=1.1, backoff_factor=0.3, growth_interval=1)
    _, after, _, _ = run(s, "GGI")
    expect, x = [], Fraction(3)
    for factor in (1.1, 1.1, 0.3):
        prod64 = round_exact(x * Fraction(factor), fpsim.FP64)[0]  # the double product
        x = Fraction(round_exact(prod64, fpsim.FP32)[0])
        expect.append(float(x))
    assert after == expect
    assert after[0] == 3.299999952316284  # float32(3.3), written out by hand
    assert all(np.float32(a) == a for a in after)


def test_gradscaler_init_scale_is_float32():
    s = GradScaler(init_scale=0.1)
    assert s.get_scale() == 0.1  # before the first scale(), PyTorch reports _init_scale
    s.scale(np.float32(1.0))
    assert s.get_scale() == round_exact(0.1, fpsim.FP32)[0] == 0.10000000149011612


def test_unscale_multiplies_by_float32_of_float64_reciprocal():
    s = GradScaler(init_scale=3.0)
    # 1/3 = 0.0101...b: 2**25 / 3 = 11184810.67 rounds to 11184811 (24 bits), ulp 2**-25
    inv = Fraction(11184811, 2**25)
    assert round_exact(Fraction(1, 3), fpsim.FP32)[0] == float(inv)
    assert np.float32(1) / np.float32(3) == float(inv)  # float32 division agrees here
    rng = np.random.default_rng(1)
    g = (rng.standard_normal(64) * 2.0 ** rng.integers(-140, 120, 64)).astype(np.float32)
    g[:3] = [np.float32(2.0**-149), np.float32(F32_MAX), np.float32(1.0)]
    p = FakeParam(g.copy())
    s.scale(np.float32(1.0))
    s.unscale_(FakeOptimizer(p))
    expect = [round_exact(Fraction(float(x)) * inv, fpsim.FP32)[0] for x in g]
    assert p.grad.dtype == np.float32
    assert p.grad.tolist() == expect


def test_unscale_in_place_and_keeps_fp32_subnormals():
    s = GradScaler(init_scale=2.0**16)
    g = np.array([2.0**-126, 2.0**-133, 3.0], np.float32)
    p = FakeParam(g)
    s.scale(1.0)
    s.unscale_(FakeOptimizer(p))
    assert p.grad is g  # modified in place, as PyTorch
    assert g.tolist() == [2.0**-142, 2.0**-149, 3.0 * 2.0**-16]


def test_unscale_float64_and_bfloat16_grads():
    s = GradScaler(init_scale=3.0)
    inv = Fraction(11184811, 2**25)
    g64 = np.array([1.0, 0.1, 7e-300])
    gbf = np.array([1.0, 3.0, 0.1, 1e-38], dtype=ml_dtypes.bfloat16)
    p64, pbf = FakeParam(g64.copy()), FakeParam(gbf.copy())
    s.scale(1.0)
    s.unscale_(FakeOptimizer(p64, pbf))
    # float64: one double product; bf16: float32 product (opmath) then bf16
    assert p64.grad.tolist() == [round_exact(Fraction(x) * inv, fpsim.FP64)[0] for x in g64]
    want = [round_exact(round_exact(Fraction(float(x)) * inv, fpsim.FP32)[0], fpsim.BF16)[0]
            for x in gbf]
    assert pbf.grad.dtype == gbf.dtype
    assert pbf.grad.astype(np.float64).tolist() == want


def test_unscale_bfloat16_rounds_through_float32_as_the_kernel():
    # inv = float32(1/10) = 13421773 * 2**-27; grad 5 * 2**-133 (a bf16 subnormal):
    # exact product 67108865 * 2**-160, just above 2**-134 (half bf16's smallest subnormal).
    # float32 first (quantum 2**-149): 32768.0005 quanta -> exactly 2**-134; then bf16: the
    # tie goes to even, 0. Rounded once it would be 2**-133.
    s = GradScaler(init_scale=10.0)
    g = np.array([5 * 2.0**-133, 10.0], dtype=ml_dtypes.bfloat16)
    p = FakeParam(g)
    s.scale(1.0)
    s.unscale_(FakeOptimizer(p))
    assert p.grad.astype(np.float64).tolist() == [0.0, 1.0]
    assert round_exact(Fraction(5, 2**133) * Fraction(13421773, 2**27), fpsim.BF16)[0] == (
        2.0**-133)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16,
                                   ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_unscale_records_ieee_flags_in_a_flag_context(dtype):
    """Unscaling rounds (the float32 product, then the gradient's dtype): in a flag_context it
    records those roundings' IEEE flags, as the fp8 path does (the fast float32 / fp16 / bf16
    path recorded none); the values are those without the context. Reference: fpsim.round's
    flags of the exact product (float64: 24 x 24 bits) to fp32, then to the gradient's format.
    fp16 gradients go through ApexLossScaler (GradScaler refuses them, as PyTorch)."""
    g = np.array([1.0, 3.0, 2.0**-14, 2.0**-126], dtype)
    fmt = fpsim.formats.get_float_format(np.dtype(dtype))
    grads = {}
    for ctx_on in (False, True):
        if dtype == np.float16:
            s = ApexLossScaler(loss_scale=3.0)
        else:
            s = GradScaler(init_scale=3.0)
            s.scale(1.0)
        p = FakeParam(g.copy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Apex: "not fp32"
            if ctx_on:
                with fpsim.flag_context() as ctx:
                    s.unscale_(FakeOptimizer(p))
            else:
                s.unscale_(FakeOptimizer(p))
        grads[ctx_on] = p.grad.astype(np.float64)
    np.testing.assert_array_equal(grads[True], grads[False])
    exact = g.astype(np.float64) * np.float64(np.float32(1) / np.float32(3))
    p32, f32 = fpsim.round(exact, "fp32", flags=True)
    _, f_out = fpsim.round(np.asarray(p32, np.float64), fmt, flags=True)
    want = int(np.bitwise_or.reduce(np.concatenate([f32.reshape(-1), f_out.reshape(-1)])))
    assert want & int(fpsim.flags.Flags.INEXACT)
    assert int(ctx.flags) == want


def test_found_inf_is_tested_on_the_input_gradient():
    # PyTorch's kernel tests isfinite(val) before multiplying: with scale 1/2 a float32 max
    # gradient becomes inf after unscaling yet found_inf stays 0 and the step runs
    s = GradScaler(init_scale=0.5)
    p = FakeParam(np.array([F32_MAX], np.float32))
    opt = FakeOptimizer(p)
    s.scale(1.0)
    assert s.step(opt) == "step 1"
    assert np.isinf(p.grad[0])
    s.update()
    assert s.history[-1]["found_inf"] is False


def test_nan_grad_skips_and_backs_off():
    s = GradScaler(init_scale=256.0)
    p = FakeParam(np.array([np.nan, 1.0], np.float32))
    opt = FakeOptimizer(p)
    s.scale(1.0)
    assert s.step(opt) is None
    assert opt.steps == 0
    s.update()
    assert s.get_scale() == 128.0


def test_unscale_then_step_unscales_once():
    s = GradScaler(init_scale=4.0)
    p = FakeParam(np.array([8.0], np.float32))
    opt = FakeOptimizer(p)
    s.scale(1.0)
    s.unscale_(opt)
    assert p.grad.tolist() == [2.0]
    assert s.step(opt) == "step 1"
    assert p.grad.tolist() == [2.0]


def test_multiple_optimizers_share_one_inf_decision():
    s = GradScaler(init_scale=64.0, growth_interval=1)
    good, bad = FakeParam(np.ones(2, np.float32)), FakeParam(np.array([np.inf], np.float32))
    o1, o2 = FakeOptimizer(good), FakeOptimizer(bad)
    s.scale(1.0)
    assert s.step(o1) == "step 1"  # o1's own gradients are finite
    assert s.step(o2) is None
    s.update()  # any inf anywhere backs off
    assert s.get_scale() == 32.0 and s.history[-1]["found_inf"] is True


def test_misuse_errors_match_pytorch():
    s = GradScaler()
    p = FakeParam(np.ones(2, np.float32))
    opt = FakeOptimizer(p)
    with pytest.raises(RuntimeError, match="did not use scaler.scale"):
        s.unscale_(opt)  # before any scale()
    s.scale(1.0)
    s.unscale_(opt)
    with pytest.raises(RuntimeError) as e:
        s.unscale_(opt)
    assert str(e.value) == (
        "unscale_() has already been called on this optimizer since the last update().")
    s.step(opt)
    with pytest.raises(RuntimeError) as e:
        s.step(opt)
    assert str(e.value) == "step() has already been called since the last update()."
    with pytest.raises(RuntimeError, match=r"unscale_\(\) is being called after step\(\)"):
        s.unscale_(opt)
    s.update()
    with pytest.raises(RuntimeError, match="No inf checks were recorded prior to update."):
        s.update()
    with pytest.raises(RuntimeError, match="No inf checks were recorded for this optimizer."):
        s.step(FakeOptimizer(FakeParam(None)))
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        s.step(opt, closure=lambda: 0.0)
    with pytest.raises(ValueError, match="The growth factor must be > 1.0."):
        GradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match="The backoff factor must be < 1.0."):
        GradScaler(backoff_factor=1.0)
    with pytest.raises(ValueError, match="growth_interval"):
        GradScaler(growth_interval=0)
    with pytest.raises(TypeError, match="param_groups"):
        s.unscale_(object())


def test_fp16_grads_refused_and_left_untouched():
    s = GradScaler(init_scale=8.0)
    g32 = np.array([8.0], np.float32)
    g16 = np.array([8.0], np.float16)
    opt = FakeOptimizer(FakeParam(g32), FakeParam(g16))
    s.scale(1.0)
    with pytest.raises(ValueError) as e:
        s.unscale_(opt)
    assert str(e.value) == "Attempting to unscale FP16 gradients."
    assert g32.tolist() == [8.0] and g16.tolist() == [8.0]
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
        s.step(opt)
    assert opt.steps == 0


def test_update_with_new_scale():
    s = GradScaler(init_scale=8.0)
    _, _, _, opt = run(s, "G")
    s.scale(1.0)
    s.step(opt)
    s.update(0.1)
    assert s.get_scale() == 0.10000000149011612  # stored as float32
    s.scale(1.0)
    s.step(opt)
    s.update(np.array([32.0]))
    assert s.get_scale() == 32.0
    s.scale(1.0)
    with pytest.raises(TypeError, match="new_scale"):
        s.update(np.array([1.0, 2.0]))


def test_disabled_passes_through():
    s = GradScaler(enabled=False)
    loss = np.float16(3.0)
    assert s.scale(loss) is loss
    p = FakeParam(np.array([np.inf], np.float32))
    opt = FakeOptimizer(p)
    s.unscale_(opt)
    assert s.step(opt) == "step 1"  # no inf check when disabled
    s.update()
    assert s.get_scale() == 1.0 and not s.is_enabled()
    assert s.state_dict() == {} and s.history == []
    assert GradScaler().is_enabled()


def test_state_dict_round_trip():
    a = GradScaler(init_scale=512.0, growth_interval=3, growth_factor=4.0, backoff_factor=0.25)
    run(a, "GGGGI GG".replace(" ", ""))
    sd = a.state_dict()
    assert set(sd) == {"scale", "growth_factor", "backoff_factor", "growth_interval",
                       "_growth_tracker"}
    # hand: 512 -> (3 good) 2048 -> G -> I: 512 -> G G: tracker 2
    assert sd["scale"] == 512.0 and sd["_growth_tracker"] == 2
    b = GradScaler()
    b.load_state_dict(sd)
    assert b.state_dict() == sd
    _, after_a, _, _ = run(a, "GIGGG")
    _, after_b, _, _ = run(b, "GIGGG")
    assert after_a == after_b == [2048.0, 512.0, 512.0, 512.0, 2048.0]
    with pytest.raises(RuntimeError, match="state dict is empty"):
        GradScaler().load_state_dict({})


def test_scale_outputs():
    s = GradScaler(init_scale=2.0**16)
    # a 0-d float16 loss times the float32 scale promotes to float32 (no fp16 overflow)
    out = s.scale(np.float16(2.0))
    assert out.dtype == np.float32 and float(out) == 2.0**17
    out = s.scale(np.float64(0.1))
    assert out.dtype == np.float64 and float(out) == 0.1 * 2.0**16
    a, b = s.scale([np.float32(1.0), np.float32(2.0)])
    assert (float(a), float(b)) == (65536.0, 131072.0)

    class TensorLike:
        def __init__(self, v):
            self.v = v

        def __mul__(self, other):
            assert type(other) is float
            return TensorLike(self.v * other)

    assert s.scale(TensorLike(3.0)).v == 3.0 * 65536.0


# --------------------------------------------------------------------------- static
def test_static_scaler_never_changes_and_skips_by_default():
    s = StaticLossScaler(128.0)
    used, after, rets, opt = run(s, "GIGG")
    assert used == after == [128.0] * 4
    assert opt.steps == 3 and rets[1] is None
    assert [h["skipped"] for h in s.history] == [False, True, False, False]


def test_static_scaler_without_skipping_is_apex_static():
    s = StaticLossScaler(128.0, skip_on_overflow=False)
    _, after, rets, opt = run(s, "GIG")
    assert opt.steps == 3 and rets[1] == "step 2"
    assert after == [128.0] * 3
    assert [h["found_inf"] for h in s.history] == [False, True, False]
    assert not any(h["skipped"] for h in s.history)
    with pytest.raises(ValueError, match="scale must be positive"):
        StaticLossScaler(0.0)


# --------------------------------------------------------------------------- DeepSpeed
def ds_run(s, pattern):
    scales, hyst = [], []
    for c in pattern:
        s.update_scale(c == "O")
        scales.append(s.cur_scale)
        hyst.append(s.cur_hysteresis)
    return scales, hyst


def test_deepspeed_hysteresis_2_hand_computed():
    # window 3, hysteresis 2; growth when (cur_iter - last_overflow_iter) % 3 == 0
    # it0 O: hyst 2->1 (scale kept)   it1 O: hyst 1 -> halve (hyst stays 1)
    # it2,3 G; it4 G: (4-1)%3 == 0 -> double, hyst refilled to 2
    # it5 O: hyst 2->1; it6,7 G; it8 G: (8-5)%3 == 0 -> double, hyst 2; it9 G
    # it10 O: 2->1; it11 O: halve; it12 O: halve again (the counter is not refilled); it13 G
    s = DynamicLossScaler(init_scale=1024, scale_window=3, hysteresis=2)
    scales, hyst = ds_run(s, "OOGGGOGGGGOOOG")
    assert scales == [1024, 512, 512, 512, 1024, 1024, 1024, 1024, 2048, 2048, 2048, 1024, 512,
                      512]
    assert hyst == [1, 1, 1, 1, 2, 1, 1, 1, 2, 2, 1, 1, 1, 1]
    assert s.last_overflow_iter == 12 and s.cur_iter == 14


def test_deepspeed_growth_from_start_and_window_rules():
    # from the start (last_overflow_iter = -1) the 3rd good iteration doubles
    s = DynamicLossScaler(init_scale=1024, scale_window=3)
    assert ds_run(s, "GGGGGG")[0] == [1024, 1024, 2048, 2048, 2048, 4096]
    # newer DeepSpeed: the good iteration after 3 stable ones doubles
    s = DynamicLossScaler(init_scale=1024, scale_window=3, window_rule="stable_interval")
    assert ds_run(s, "GGGGGGG")[0] == [1024, 1024, 1024, 2048, 2048, 2048, 4096]
    with pytest.raises(ValueError, match="window_rule"):
        DynamicLossScaler(window_rule="x")


def test_deepspeed_consecutive_hysteresis():
    # O G O: with consecutive hysteresis the good step refills the counter, so no halving
    s = DynamicLossScaler(init_scale=64, scale_window=100, hysteresis=2,
                          consecutive_hysteresis=True)
    assert ds_run(s, "OGO") == ([64, 64, 64], [1, 2, 1])
    s = DynamicLossScaler(init_scale=64, scale_window=100, hysteresis=2)
    assert ds_run(s, "OGO") == ([64, 64, 32], [1, 1, 1])


def test_deepspeed_min_scale():
    s = DynamicLossScaler(init_scale=4, hysteresis=1, min_scale=1)
    assert ds_run(s, "OO")[0] == [2, 1]
    with pytest.raises(RuntimeError, match="already at minimum"):
        s.update_scale(True)
    s = DynamicLossScaler(init_scale=3, hysteresis=1, min_scale=1, raise_error_at_min_scale=False)
    assert ds_run(s, "OOO")[0] == [1.5, 1, 1]


def test_deepspeed_adapter_skips_every_overflow():
    s = DynamicLossScaler(init_scale=1024, scale_window=3, hysteresis=2)
    used, after, rets, opt = run(s, "OOGGG".replace("O", "I"))
    # the first overflow keeps the scale (hysteresis) but its step is still skipped
    assert after == [1024, 512, 512, 512, 1024]
    assert rets[:2] == [None, None] and opt.steps == 3
    assert [h["hysteresis"] for h in s.history] == [1, 1, 1, 1, 2]
    sd = s.state_dict()
    t = DynamicLossScaler()
    t.load_state_dict(sd)
    assert t.state_dict() == sd
    assert ds_run(t, "OG") == ds_run(s, "OG")


def test_deepspeed_refuses_fp16_grads():
    s = DynamicLossScaler()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
        s.unscale_(FakeOptimizer(FakeParam(np.ones(1, np.float16))))


# --------------------------------------------------------------------------- Apex
def test_apex_dynamic_doubles_every_2000_up_to_2_24():
    s = ApexLossScaler()
    assert s.get_scale() == 2.0**16
    scales = []
    for _ in range(20000):
        assert s.update_scale(False) is False
        scales.append(s.get_scale())
    assert scales[1998] == 2.0**16 and scales[1999] == 2.0**17  # the 2000th good step
    assert scales[3999] == 2.0**18
    assert scales[15999] == 2.0**24  # 8 doublings
    assert set(scales[16000:]) == {2.0**24}  # capped
    assert s.update_scale(True) is True and s.get_scale() == 2.0**23
    assert ApexLossScaler(init_scale=2.0**30).get_scale() == 2.0**24


def test_apex_overflow_and_min_scale():
    s = ApexLossScaler(init_scale=8.0, scale_window=2, min_loss_scale=2.0)
    used, after, rets, opt = run(s, "IIIGGG")
    assert after == [4.0, 2.0, 2.0, 2.0, 4.0, 4.0]
    assert opt.steps == 3 and rets[:3] == [None] * 3
    assert s.state_dict() == {"loss_scale": 4.0, "unskipped": 1}


def test_apex_static_never_skips_and_unscales_fp16_with_warning():
    s = ApexLossScaler(loss_scale=2.0**12)
    assert not s.dynamic and s.loss_scale() == 4096.0
    # fp16 grads: 3*2**12 -> 3*2**-0; 2**4 -> 2**-8; 2**-12 -> 2**-24 (smallest subnormal);
    # 2**-13 -> 2**-25, half the smallest subnormal: the tie goes to even, 0
    g = np.array([3 * 2.0**12, 2.0**4, 2.0**-12, 2.0**-13, np.inf], np.float16)
    p = FakeParam(g)
    opt = FakeOptimizer(p)
    with pytest.warns(UserWarning, match="not fp32"):
        ret = s.step(opt)
    assert ret == "step 1"  # Apex's static scale does not skip even with an inf
    assert g.tolist()[:4] == [3.0, 2.0**-8, 2.0**-24, 0.0] and np.isinf(g[4])
    s.update()
    assert s.get_scale() == 4096.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        s.unscale_(opt)
    with pytest.raises(ValueError, match="dynamic"):
        ApexLossScaler(loss_scale="big")
    assert ApexLossScaler(loss_scale="128.0").get_scale() == 128.0


# --------------------------------------------------------------------------- opt levels
def test_opt_levels_table_matches_apex_frontend():
    # apex/amp/frontend.py, classes O0..O3
    want = {
        "O0": (fpsim.FP32, False, None, False, 1.0),
        "O1": (None, True, None, None, "dynamic"),
        "O2": (fpsim.FP16, False, True, True, "dynamic"),
        "O3": (fpsim.FP16, False, False, False, 1.0),
    }
    assert list(OPT_LEVELS) == ["O0", "O1", "O2", "O3"]
    for name, (cast, patch, bn, master, ls) in want.items():
        lvl = OPT_LEVELS[name]
        assert (lvl.cast_model_type, lvl.patch_torch_functions, lvl.keep_batchnorm_fp32,
                lvl.master_weights, lvl.loss_scale) == (cast, patch, bn, master, ls)
    assert OPT_LEVELS["O2"].make_scaler().get_scale() == 2.0**16
    assert OPT_LEVELS["O0"].make_scaler().dynamic is False


def test_describe_opt_level_and_errors():
    text = describe_opt_level("O2")
    assert text.startswith("O2: FP16 training with FP32 batchnorm and FP32 master weights.")
    assert "master_weights        True" in text and "'dynamic'" in text
    assert "Pure FP16" in describe_opt_level("o3")
    with pytest.raises(ValueError, match="letter O"):
        get_opt_level("02")
    with pytest.raises(ValueError, match="O0, O1, O2, O3"):
        get_opt_level("O4")
    with pytest.raises(TypeError):
        get_opt_level(2)


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"growth_factor": "2"}, TypeError, "growth_factor must be a real number"),
    ({"growth_factor": None}, TypeError, "growth_factor must be a real number"),
    ({"growth_factor": True}, TypeError, "growth_factor must be a real number"),
    ({"growth_factor": 1.0}, ValueError, "growth factor must be > 1.0, got growth_factor=1.0"),
    ({"growth_factor": 0.5}, ValueError, "growth factor must be > 1.0"),
    ({"growth_factor": float("inf")}, ValueError, "growth_factor must be positive and finite"),
    ({"growth_factor": float("nan")}, ValueError, "growth_factor must be positive and finite"),
    ({"backoff_factor": "0.5"}, TypeError, "backoff_factor must be a real number"),
    ({"backoff_factor": 1.0}, ValueError, r"backoff_factor=1.0 \(valid: 0 < backoff_factor < 1"),
    ({"backoff_factor": 2}, ValueError, "backoff factor must be < 1.0"),
    ({"backoff_factor": 0.0}, ValueError, "backoff_factor must be positive and finite"),
    ({"backoff_factor": -0.5}, ValueError, "backoff_factor must be positive and finite"),
    ({"init_scale": "65536"}, TypeError, "init_scale must be a real number"),
    ({"init_scale": 0.0}, ValueError, "init_scale must be positive and finite"),
    ({"init_scale": -1}, ValueError, "init_scale must be positive and finite"),
    ({"growth_interval": 2.5}, TypeError, "growth_interval must be an int, got float 2.5"),
    ({"growth_interval": "10"}, TypeError, "growth_interval must be an int, got str '10'"),
    ({"growth_interval": 0}, ValueError, "growth_interval must be >= 1, got 0"),
    ({"enabled": "no"}, TypeError, r"enabled must be a bool \(True or False\)"),
])
def test_grad_scaler_argument_errors(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        GradScaler(**kwargs)


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"init_scale": None}, TypeError, "init_scale must be a real number"),
    ({"scale_factor": "2"}, TypeError, "scale_factor must be a real number"),
    ({"scale_factor": 1}, ValueError, "scale_factor must be > 1"),
    ({"scale_factor": 0}, ValueError, "scale_factor must be positive"),
    ({"scale_window": 0}, ValueError, "scale_window must be >= 1, got 0"),
    ({"scale_window": 1.5}, TypeError, "scale_window must be an int, got float 1.5"),
    ({"hysteresis": 0}, ValueError, "hysteresis must be >= 1, got 0"),
    ({"hysteresis": "2"}, TypeError, "hysteresis must be an int, got str '2'"),
    ({"min_scale": 0}, ValueError, "min_scale must be positive and finite"),
    ({"min_scale": float("nan")}, ValueError, "min_scale must be positive and finite"),
    ({"consecutive_hysteresis": "no"}, TypeError, "consecutive_hysteresis must be a bool"),
    ({"raise_error_at_min_scale": None}, TypeError, "raise_error_at_min_scale must be a bool"),
    ({"window_rule": "x"}, ValueError, "unknown window_rule 'x'; valid: "),
])
def test_dynamic_loss_scaler_argument_errors(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        DynamicLossScaler(**kwargs)


def test_static_and_apex_scaler_argument_errors():
    with pytest.raises(TypeError, match="scale must be a real number"):
        StaticLossScaler("128")
    with pytest.raises(ValueError, match="scale must be positive and finite"):
        StaticLossScaler(0.0)
    with pytest.raises(TypeError, match="skip_on_overflow must be a bool"):
        StaticLossScaler(128.0, skip_on_overflow="no")
    with pytest.raises(ValueError, match="loss_scale must be 'dynamic' or a positive number"):
        ApexLossScaler(loss_scale="auto")
    with pytest.raises(ValueError, match="loss_scale must be positive and finite"):
        ApexLossScaler(loss_scale=-1.0)
    with pytest.raises(TypeError, match="min_loss_scale must be a real number"):
        ApexLossScaler(min_loss_scale="1")
    with pytest.raises(ValueError, match="min_loss_scale must be positive and finite"):
        ApexLossScaler(min_loss_scale=0.0)
    with pytest.raises(ValueError, match="scale_window must be >= 1"):
        ApexLossScaler(scale_window=0)
    assert ApexLossScaler(loss_scale="128.0").loss_scale() == 128.0  # as Apex
