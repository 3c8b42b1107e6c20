"""fpsim.amp.autocast: PyTorch's per-op cast policy on the autograd engine.

The reference for every op's format is PyTorch's autocast lists (aten/src/ATen/
autocast_mode.cpp, CUDA; docs/facts.md "PyTorch torch.amp") and, for values, NumPy / ml_dtypes
casts: a "lower" op must equal the op run on inputs cast by ``ndarray.astype(float16)``.
The training-loop test follows torch.amp.GradScaler's documented protocol.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.amp import (
    AUTOCAST_POLICY,
    GradScaler,
    autocast,
    autocast_policy_table,
    get_autocast_dtype,
    get_autocast_policy,
    is_autocast_enabled,
    reset_autocast_policy,
    set_autocast_policy,
)
from fpsim.amp.autocast_policy import cache_size
from fpsim.autograd import Tensor, no_grad
from fpsim.autograd import functional as F
from fpsim.autograd.context import autocast_args, get_autocast_hook

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _clean_policy():
    reset_autocast_policy()
    yield
    reset_autocast_policy()
    assert get_autocast_hook() is None  # no region leaks out of a test


def f32(shape, scale=1.0):
    return Tensor(RNG.standard_normal(shape) * scale, "fp32")


def f16(shape, scale=1.0):
    return Tensor(RNG.standard_normal(shape) * scale, "fp16")


# ------------------------------------------------------------------ the policy table
def test_table_lists_pytorch_lists():
    # PyTorch's CUDA lists: lower_precision_fp has matmul/linear/conv; fp32 has exp, log, pow,
    # layer_norm, the losses; fp32_set_opt_dtype has softmax, log_softmax, sum
    assert {op for op, p in AUTOCAST_POLICY.items() if p == "lower"} == {
        "matmul", "linear", "conv2d"}
    fp32 = {op for op, p in AUTOCAST_POLICY.items() if p == "fp32"}
    assert {"exp", "log", "pow", "softmax", "log_softmax", "sum", "layer_norm", "nll_loss",
            "mse_loss", "cross_entropy"} <= fp32
    assert {"mean", "batch_norm"} <= fp32  # the brief's additions, documented as such
    text = autocast_policy_table()
    for op in AUTOCAST_POLICY:
        assert op in text
    assert "fp16" in text and "bf16" in autocast_policy_table("bf16")


# -------------------------------------------------------------------- "lower" ops
@pytest.mark.parametrize("fmt,dtype", [("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)])
def test_linear_runs_on_low_precision_inputs(fmt, dtype):
    x, w, b = f32((5, 7)), f32((3, 7)), f32((3,))
    with autocast(fmt):
        y = F.linear(x, w, b)
    assert y.fmt.name == fmt and y.data.dtype == dtype
    # reference: inputs cast by the dtype's own cast, exact float64 products and sums (7
    # terms of 8/11-bit values are exact), rounded to fp32 (the accumulator), then to dtype
    lo = [a.numpy().astype(dtype).astype(np.float64) for a in (x, w, b)]
    ref = (lo[0] @ lo[1].T + lo[2]).astype(np.float32).astype(dtype)
    np.testing.assert_array_equal(y.data.view(np.uint16), ref.view(np.uint16))


def test_matmul_and_conv2d_lower():
    a, b = f32((4, 6)), f32((6, 2))
    img, ker = f32((1, 2, 5, 5)), f32((3, 2, 3, 3))
    with autocast("fp16"):
        assert (a @ b).fmt.name == "fp16"
        assert F.matmul(a, b).fmt.name == "fp16"
        assert F.conv2d(img, ker).fmt.name == "fp16"
    ref = a.numpy().astype(np.float16).astype(np.float64) @ \
        b.numpy().astype(np.float16).astype(np.float64)
    with autocast("fp16"):
        out = (a @ b).data
    np.testing.assert_array_equal(out, ref.astype(np.float32).astype(np.float16))


def test_any_format_as_autocast_dtype():
    a, b = f32((3, 4)), f32((4, 2))
    with autocast(fpsim.FP8_E4M3):
        assert (a @ b).fmt == fpsim.FP8_E4M3
        assert get_autocast_dtype() == fpsim.FP8_E4M3


# ---------------------------------------------------------------------- "fp32" ops
FP32_OPS = {
    "exp": lambda x: F.exp(x),
    "log": lambda x: F.log(x),
    "pow": lambda x: F.pow(x, 2.0),
    "softmax": lambda x: F.softmax(x, dim=1),
    "log_softmax": lambda x: F.log_softmax(x, dim=1),
    "sum": lambda x: x.sum(),
    "mean": lambda x: x.mean(dim=0),
    "layer_norm": lambda x: F.layer_norm(x, 4),
    "batch_norm": lambda x: F.batch_norm(x, None, None, training=True),
    "nll_loss": lambda x: F.nll_loss(x, [0, 1, 2]),
    "cross_entropy": lambda x: F.cross_entropy(x, [0, 1, 2]),
    "mse_loss": lambda x: F.mse_loss(x, np.zeros((3, 4))),
}


@pytest.mark.parametrize("op", list(FP32_OPS))
def test_fp32_ops_compute_in_fp32(op):
    x = Tensor(np.abs(RNG.standard_normal((3, 4))) + 0.1, "fp16")  # positive: log's domain
    with autocast("fp16"):
        y = FP32_OPS[op](x)
    assert y.fmt.name == "fp32", op
    # same as casting the input to fp32 by hand (fp16 -> fp32 is exact) and running the op
    ref = FP32_OPS[op](Tensor(x.numpy().astype(np.float32), "fp32"))
    np.testing.assert_array_equal(y.data, ref.data)
    # outside autocast the op keeps fp16
    assert FP32_OPS[op](x).fmt.name == "fp16"


def test_promote_ops_and_unlisted_ops():
    h, s, b = f16((2, 3)), f32((2, 3)), Tensor(np.ones((2, 3)), "bf16")
    with autocast("fp16"):
        assert (h + s).fmt.name == "fp32"
        assert (h * b).fmt.name == "fp32"  # fp16 with bf16 -> fp32, as torch.promote_types
        assert (h - h).fmt.name == "fp16"
        assert F.relu(h).fmt.name == "fp16" and F.tanh(h).fmt.name == "fp16"
        assert F.relu(s).fmt.name == "fp32"  # unlisted ops run in their input's format


def test_fp64_is_never_cast():
    x = Tensor(RNG.standard_normal((2, 3)), "fp64")
    with autocast("fp16"):
        assert F.exp(x).fmt.name == "fp64"
        assert autocast_args("matmul", x, x)[0] is x


# ---------------------------------------------------------------------- overrides
def test_region_override():
    x = f16((2, 3))
    with autocast("fp16", overrides={"softmax": "lower", "linear": "fp32"}):
        assert F.softmax(x, dim=1).fmt.name == "fp16"
        assert F.linear(x, f32((2, 3))).fmt.name == "fp32"
    with autocast("fp16"):
        assert F.softmax(x, dim=1).fmt.name == "fp32"


def test_module_level_override_and_reset():
    x = f16((2, 3))
    set_autocast_policy("exp", "lower")
    assert "(overridden)" in autocast_policy_table()
    with autocast("bf16"):
        assert F.exp(x).fmt.name == "bf16"
    reset_autocast_policy("exp")
    with autocast("bf16"):
        assert F.exp(x).fmt.name == "fp32"
    assert get_autocast_policy()["exp"] == "fp32"


@pytest.mark.parametrize("bad,match", [({"relu": "lower"}, "no op 'relu'; valid: matmul"),
                                       ({"exp": "half"}, "policy 'half'.*lower, fp32, promote")])
def test_bad_overrides(bad, match):
    with pytest.raises(ValueError, match=match):
        autocast("fp16", overrides=bad)
    op, policy = next(iter(bad.items()))
    with pytest.raises(ValueError, match=match):
        set_autocast_policy(op, policy)


def test_bad_dtype_and_enabled():
    with pytest.raises(ValueError, match="unknown format 'fp17'; valid names: fp64"):
        autocast("fp17")
    with pytest.raises(TypeError, match="integer format"):
        autocast("int8")
    with pytest.raises(TypeError, match="enabled must be a bool"):
        autocast("fp16", enabled=1)


# ------------------------------------------------------------------------ the cache
def test_weight_casts_are_cached_in_the_region():
    w = Tensor(RNG.standard_normal((3, 4)), "fp32", requires_grad=True)
    x = f32((2, 4))
    with autocast("fp16"):
        c1 = autocast_args("linear", x, w, None)[1]
        c2 = autocast_args("matmul", x, w)[1]
        assert c1 is c2 and c1.fmt.name == "fp16"
        assert cache_size() == 1
        # non-leaf / no-grad inputs are cast afresh every time (PyTorch's rule)
        assert autocast_args("linear", x, w, None)[0] is not autocast_args("linear", x, w,
                                                                           None)[0]
    assert cache_size() == 0
    with autocast("fp16"):
        c3 = autocast_args("linear", x, w, None)[1]
    assert c3 is not c1  # the cache was dropped on exit


def test_cache_off_and_no_grad():
    w = Tensor(RNG.standard_normal((3, 4)), "fp32", requires_grad=True)
    with autocast("fp16", cache_enabled=False):
        assert autocast_args("exp", w) is not None
        a = autocast_args("matmul", w, w)[0]
        b = autocast_args("matmul", w, w)[0]
        assert a is not b
    with autocast("fp16"), no_grad():
        autocast_args("matmul", w, w)
        assert cache_size() == 0


def test_cached_weight_accumulates_both_gradients_through_fp16():
    # w used twice in one region: one cast, whose fp16 gradient collects both uses
    w = Tensor([[0.5, -0.25, 1.0]], "fp32", requires_grad=True)
    x = Tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]], "fp16")
    with autocast("fp16"):
        loss = F.linear(x, w).sum() + (F.linear(x, w) * 2.0).sum()
    loss.backward()
    # d/dw = 3 * column sums of x (exact small values)
    np.testing.assert_array_equal(w.grad, 3.0 * x.numpy(np.float64).sum(axis=0, keepdims=True))
    assert w.grad.dtype == np.float32


def test_backward_runs_in_the_forward_formats():
    # a tiny gradient reaching an fp32 weight through its fp16 cast underflows there
    w = Tensor(np.full((1, 2), 0.5), "fp32", requires_grad=True)
    x = Tensor(np.array([[2.0**-14, 1.0]]), "fp32")
    with autocast("fp16"):
        y = F.linear(x, w)  # fp16
    (y.to("fp32") * 2.0**-12).sum().backward()
    # exact: dL/dw = 2**-12 * x = [2**-26, 2**-12]; the fp16 gradient of the cast copy
    # holds 2**-12 * [1] and the weight gradient 2**-12 * x rounds to fp16: 2**-26 -> 0
    # (below 2**-25, half the smallest fp16 subnormal)
    np.testing.assert_array_equal(w.grad, np.array([[0.0, 2.0**-12]], np.float32))
    w2 = Tensor(np.full((1, 2), 0.5), "fp32", requires_grad=True)
    (F.linear(x, w2).to("fp32") * 2.0**-12).sum().backward()  # no autocast: fp32 throughout
    np.testing.assert_array_equal(w2.grad, np.array([[2.0**-26, 2.0**-12]], np.float32))


# ------------------------------------------------------------------ nesting, decorator
def test_nested_and_disabled_regions():
    a, b = f32((2, 2)), f32((2, 2))
    assert not is_autocast_enabled()
    with autocast("fp16"):
        assert (a @ b).fmt.name == "fp16"
        with autocast("bf16"):
            assert (a @ b).fmt.name == "bf16"
        with autocast("fp16", enabled=False):
            assert not is_autocast_enabled()
            assert (a @ b).fmt.name == "fp32"
        assert (a @ b).fmt.name == "fp16" and get_autocast_dtype().name == "fp16"
    assert (a @ b).fmt.name == "fp32" and get_autocast_dtype() is None


def test_nested_region_shares_the_outer_cache():
    w = Tensor(RNG.standard_normal((2, 2)), "fp32", requires_grad=True)
    with autocast("fp16"):
        c1 = autocast_args("matmul", w, w)[0]
        with autocast("fp16"):
            assert autocast_args("matmul", w, w)[0] is c1
        assert cache_size() == 1
    assert cache_size() == 0


def test_decorator():
    @autocast("bf16")
    def forward(a, b):
        return a @ b

    assert forward(f32((2, 2)), f32((2, 2))).fmt.name == "bf16"
    assert not is_autocast_enabled()


# --------------------------------------------------- autocast + GradScaler training loop
def test_gradscaler_autocast_loop_skips_an_inf_step_and_halves_the_scale():
    from fpsim import nn, optim

    model = nn.Linear(4, 3, rng=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=2.0**10, growth_interval=3)
    x = Tensor(RNG.standard_normal((8, 4)), "fp32")
    y = RNG.integers(0, 3, 8)
    scales, weights = [], []
    for step in range(5):
        opt.zero_grad()
        with autocast("fp16"):
            loss = F.cross_entropy(model(x), y)
        assert loss.fmt.name == "fp32" and model(x).fmt.name == "fp32"  # outside: fp32
        scaler.scale(loss).backward()
        assert model.weight.grad.dtype == np.float32  # fp32 weights: fp32 gradients
        if step == 2:
            model.weight.grad[0, 0] = np.inf  # an overflowed gradient
        before = model.weight.numpy().copy()
        scaler.step(opt)
        scaler.update()
        changed = not np.array_equal(before, model.weight.numpy())
        weights.append(changed)
        scales.append(scaler.get_scale())
    # PyTorch's rule by hand: good steps 0, 1 (tracker 2); step 2 inf: skip, scale * 0.5,
    # tracker 0; steps 3, 4 good (tracker 2, no growth before 3 good steps)
    assert weights == [True, True, False, True, True]
    assert scales == [2.0**10, 2.0**10, 2.0**9, 2.0**9, 2.0**9]
    assert [h["skipped"] for h in scaler.history] == [False, False, True, False, False]


def test_gradscaler_misuse_raises_pytorchs_errors():
    from fpsim import nn, optim

    model = nn.Linear(2, 2, rng=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler()
    with autocast("fp16"):
        loss = model(Tensor(np.ones((1, 2)), "fp32")).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    # fp16 gradients (a model cast to fp16 without master gradients) are refused
    half = nn.Linear(2, 2, rng=0).to("fp16")
    opt16 = optim.SGD(half.parameters(), lr=0.1)
    s2 = GradScaler()
    s2.scale(half(Tensor(np.ones((1, 2)), "fp16")).sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        s2.step(opt16)
