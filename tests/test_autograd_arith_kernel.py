"""The Tensor ops + - * / sqrt and the array functions fpsim.add/sub/mul/div/sqrt share one
rounded-arithmetic kernel (fpsim.arithmetic.compute): a Tensor op gives exactly the value and
the IEEE flags of the array function, in every format and every mode (issue 15, item 6), and
the autograd ops report their flags to fpsim.flag_context (item 4).

References: fpsim.add/... themselves are checked against exact Fractions and MPFR in
tests/test_arith_mpfr.py; the issue's examples and Python-scalar operands (kept at their exact
float64 value) are checked here against exact rational arithmetic (tests/exact.py).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpsim
from fpsim import arithmetic, autograd
from fpsim.autograd import Tensor
from tests.exact import MODES, round_exact
from tests.test_arith_mpfr import _values, rows_strategy

FORMATS = {
    "fp16": fpsim.FP16,
    "bf16": fpsim.BF16,
    "fp32": fpsim.FP32,
    "tf32": fpsim.TF32,
    "e4m3": fpsim.FP8_E4M3,
    "e5m2": fpsim.FP8_E5M2,
    "e11m20": fpsim.Format(11, 20),  # float64-wide exponent: the frexp-scaled general path
    "e10m30": fpsim.Format(10, 30),
}
OPS = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1}
ARRAY = {"add": arithmetic.add, "sub": arithmetic.sub, "mul": arithmetic.mul,
         "div": arithmetic.div, "sqrt": arithmetic.sqrt}
TENSOR = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "sqrt": lambda a: a.sqrt()}
POLICIES = [{}, {"overflow": "saturate"}, {"subnormals": "flush"}, {"subnormals": "daz"}]


def _bits_equal(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Same value, same sign of zero; NaN equals NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return (((got == want) & (np.signbit(got) == np.signbit(want)))
            | (np.isnan(got) & np.isnan(want)))


def _operands(fmt, rows):
    """Operand arrays both APIs take as they are: the storage dtype's own bit patterns (so a
    signalling NaN stays one) where the format has a NumPy type, else float64 values with NaNs
    quiet (a Tensor's construction quiets them, as any conversion does)."""
    if fmt.dtype is not None:
        cols = np.array(rows, dtype=np.uint64).T
        return [c.astype(f"u{fmt.dtype.itemsize}").view(fmt.dtype) for c in cols]
    return [np.where(np.isnan(x), np.nan, x) for x in _values(fmt, rows)]


def _tensor_result(op, xs, fmt, mode, opts, seed):
    ts = [Tensor(x, fmt) for x in xs]
    rng = np.random.default_rng(seed) if mode == "stochastic" else None
    with autograd.rounding_context(mode, rng, **opts), fpsim.flag_context() as ctx:
        out = TENSOR[op](*ts)
    assert out.fmt == fmt
    return out.numpy(np.float64), ctx.flags


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fkey", list(FORMATS))
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_tensor_ops_equal_array_functions(fkey, op, data):
    fmt = FORMATS[fkey]
    xs = _operands(fmt, data.draw(rows_strategy(fmt, op)))
    opts = data.draw(st.sampled_from(POLICIES))
    for mode in (*MODES, "stochastic"):
        got, got_flags = _tensor_result(op, xs, fmt, mode, opts, seed=7)
        rng = np.random.default_rng(7) if mode == "stochastic" else None
        want, want_fl = ARRAY[op](*xs, fmt, mode, flags=True, rng=rng, **opts)
        same = _bits_equal(got, want)
        i = int(np.argmin(same)) if not same.all() else 0
        assert same.all(), (f"{op}{tuple(float(x[i]) for x in xs)} {fmt.name} {mode} {opts}: "
                            f"Tensor {got[i]!r}, fpsim.{op} {want[i]!r}")
        assert got_flags == fpsim.Flags(int(np.bitwise_or.reduce(want_fl))), (op, mode, opts)


@pytest.mark.parametrize("fkey", list(FORMATS))
def test_default_path_equals_array_functions_without_flags(fkey):
    """Round to nearest even without a flag context takes the fast paths (float32 / one
    float64 operation): still the array functions' results."""
    fmt = FORMATS[fkey]
    rng = np.random.default_rng(3)
    xs = [np.asarray(fpsim.round(rng.standard_normal(4000) * 2.0 ** rng.integers(-30, 30, 4000),
                                 fmt)) for _ in range(2)]
    xs[1][::7] = 0.0
    for op in OPS:
        args = xs[:OPS[op]]
        got = TENSOR[op](*[Tensor(x, fmt) for x in args]).numpy(np.float64)
        want = ARRAY[op](*args, fmt)
        assert _bits_equal(got, want).all(), (fkey, op)


def test_issue_examples_against_exact_fractions():
    f = fpsim.Format(11, 20)
    a, b = Tensor([2.0**-540], f), Tensor([1.25 * 2.0**-540], f)
    with autograd.rounding_context("up"):
        got = (a * b).item()
    want = round_exact(Fraction(2.0**-540) * Fraction(1.25 * 2.0**-540), f, "up")[0]
    assert got == want == 2.0**-1042
    big = Tensor([2.0**512], f)
    with autograd.rounding_context("down"):
        got = (big * big).item()
    assert got == round_exact(Fraction(2) ** 1024, f, "down", overflow="inf")[0] == f.max
    with autograd.rounding_context("up"):
        assert (big * big).item() == math.inf


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fkey", ["fp16", "bf16", "e11m20"])
def test_python_scalars_enter_exactly(fkey, mode):
    """A Python scalar that is not a value of the format is used at its exact float64 value
    (one rounding of x op 0.1, not of x op RN(0.1))."""
    fmt = FORMATS[fkey]
    xs = np.asarray(fpsim.round(np.linspace(-3.0, 3.0, 41), fmt))
    t = Tensor(xs, fmt)
    for op, s in (("add", 0.1), ("sub", 1e-30), ("mul", 0.1), ("div", 3.3), ("rdiv", 0.7)):
        ops = {"add": lambda s: t + s, "sub": lambda s: t - s, "mul": lambda s: t * s,
               "div": lambda s: t / s, "rdiv": lambda s: s / t}
        with autograd.rounding_context(mode):
            out = ops[op](s).numpy(np.float64)
        for x, got in zip(xs, out, strict=True):
            fx, fs = Fraction(float(x)), Fraction(s)
            if op == "rdiv" and fx == 0:
                continue
            exact = {"add": fx + fs, "sub": fx - fs, "mul": fx * fs,
                     "div": fx / fs, "rdiv": fs / fx if fx else None}[op]
            want = round_exact(exact, fmt, mode)[0]
            if exact == 0:
                continue  # the sign of an exact zero: covered by the property test
            assert got == want, (op, float(x), s, mode, got, want)


def test_flag_context_sees_autograd_ops():
    a = Tensor([300.0], "fp16")
    with fpsim.flag_context() as ctx:
        y = a * a
    assert y.item() == math.inf
    assert ctx.flags == fpsim.Flags.OVERFLOW | fpsim.Flags.INEXACT
    with pytest.raises(fpsim.FloatingPointTrap, match="OVERFLOW"):
        with fpsim.flag_context(trap="overflow"):
            _ = a * a
    with fpsim.flag_context() as ctx:  # an exact op raises nothing
        _ = a + a
    assert ctx.flags == fpsim.Flags.NONE
    with fpsim.flag_context() as ctx:  # other ops round through fpsim.cast: their flags too
        _ = Tensor([20.0], "fp16").exp()
    assert fpsim.Flags.OVERFLOW in ctx
    with fpsim.flag_context() as ctx:
        _ = Tensor([0.0], "bf16") / Tensor([0.0], "bf16")
        _ = Tensor([1.0], "bf16") / Tensor([-0.0], "bf16")
    assert ctx.flags == fpsim.Flags.INVALID | fpsim.Flags.DIVBYZERO
    with fpsim.flag_context() as ctx:  # fp64: float64's own operations, no flags, no error
        assert (Tensor([1.0], "fp64") / 3).item() == 1 / 3
    assert ctx.flags == fpsim.Flags.NONE


def test_tensor_and_seed_errors():
    assert Tensor(2**70, "fp32").item() == 2.0**70
    assert Tensor(2**70 + 2**46 + 1, "fp32").item() == 2.0**70 + 2.0**47  # one rounding
    assert Tensor(2**70, "fp16").item() == math.inf
    with pytest.raises(TypeError, match="data must hold real numbers"):
        Tensor([2**70, 1], "fp16")
    with pytest.raises(TypeError, match="data must hold real numbers"):
        Tensor("1.0")
    with pytest.raises(ValueError, match="rectangular"):
        Tensor([[1.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="non-negative"):
        autograd.manual_seed(-1)


def test_mixed_formats_in_matmul_linear_conv_raise_outside_autocast():
    """A bf16 model fed fp32 data (a Tensor or a NumPy array) must not silently compute in
    fp32: matmul, linear and conv2d refuse mixed formats as PyTorch does; under autocast they
    mix (the autocast policy casts, anything left promotes)."""
    from fpsim import amp, nn
    from fpsim import functional as F
    x = np.random.default_rng(0).standard_normal((4, 64))
    model = nn.Sequential(nn.Linear(64, 32, rng=0), nn.ReLU(), nn.Linear(32, 10, rng=1))
    model = model.to("bf16")
    with pytest.raises(TypeError, match=r"linear: operands have different formats \(fp32"):
        model(Tensor(x))
    with pytest.raises(TypeError, match=r"different formats \(fp64"):
        model(x)  # a NumPy float64 array is an fp64 operand
    assert model(Tensor(x, "bf16")).fmt == fpsim.BF16
    w = Tensor(np.ones((3, 2)), "bf16")
    with pytest.raises(TypeError, match="matmul"):
        Tensor(np.ones((2, 3)), "fp16") @ w
    with pytest.raises(TypeError, match="linear"):
        F.linear(Tensor(np.ones((1, 2)), "bf16"), Tensor(np.ones((3, 2)), "bf16"),
                 Tensor(np.zeros(3), "fp32"))  # the bias too
    with pytest.raises(TypeError, match="conv2d"):
        F.conv2d(Tensor(np.ones((1, 1, 3, 3)), "fp32"), Tensor(np.ones((1, 1, 2, 2)), "bf16"))
    with amp.autocast("bf16"):
        assert model(Tensor(x)).fmt == fpsim.BF16
        assert (Tensor(np.ones((2, 3)), "fp16") @ Tensor(np.ones((3, 2)), "fp32")).fmt \
            == fpsim.BF16


def test_the_engine_takes_the_whole_policy():
    """rounding_context holds one fpsim.RoundingPolicy, so tininess and random_bits reach the
    Tensor ops as the array functions take them (issue 35 item 1)."""
    a = np.float16([1 + 2.0**-10] * 3)
    b = np.float16([1023 * 2.0**-24, 3 * 2.0**-24, 1.0])  # a[0] * b[0] = 2**-14 * (1 - 2**-20)
    for tininess in ("after", "before"):
        opts = {"subnormals": "flush", "tininess": tininess}
        with autograd.rounding_context("nearest_even", **opts):
            got = (Tensor(a, "fp16") * Tensor(b, "fp16")).numpy(np.float64)
        want = fpsim.mul(a, b, "fp16", **opts)
        assert _bits_equal(got, want).all(), (tininess, got, want)
        # tiny before rounding only: flushed when tininess is detected before rounding
        assert got[0] == (0.0 if tininess == "before" else 2.0**-14)
    x = np.float16(np.random.default_rng(1).uniform(1, 2, 256))
    y = np.float16(np.random.default_rng(2).uniform(1, 2, 256))
    results = []
    for random_bits in (None, 2):
        with autograd.rounding_context("stochastic", rng=5, random_bits=random_bits):
            got = (Tensor(x, "fp16") * Tensor(y, "fp16")).numpy(np.float64)
        want = fpsim.mul(x, y, "fp16", "stochastic", rng=5, random_bits=random_bits)
        assert _bits_equal(got, want).all(), random_bits
        results.append(got)
    assert not np.array_equal(*results)  # the random bits are used
    with pytest.raises(ValueError, match="random_bits only applies"):
        autograd.rounding_context("up", random_bits=8)
