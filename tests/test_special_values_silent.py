"""Special values are silent, as in PyTorch: no NumPy RuntimeWarning from inside fpsim.

Infinities and NaNs (an fp16 overflow's inf meeting a zero weight, inf - inf in a sum or a
GEMM) give NaN without a warning, forward and backward, in every format (IEEE flags are
fpsim's own business: fpsim.flag_context records them).

fp32 and fp64 tensors may hold signalling NaNs (construction keeps the stored pattern, as
PyTorch's tensors do). The ops widen fp32 ones to float64 (or cast them to a narrower format):
the cast quiets the NaN and sets the FPU's invalid flag, which NumPy reports as a RuntimeWarning
from inside fpsim unless the cast ignores it; fp64 ones meet the arithmetic itself, which sets
the same flag. The ops run forward and backward here under warnings-as-errors, and a NaN stays
a NaN.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fpsim
import fpsim.autograd.functional as F
from fpsim.autograd import Tensor, matmul_accumulation, rounding_context

# signalling NaNs (quiet bit clear, payload non-zero) of both signs, a quiet NaN, ordinary values
_BITS = {
    "fp32": (np.uint32, np.float32, [0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FC00000, 0x3F800000,
                                     0xC0000000, 0x00000001, 0x00000000]),
    "fp64": (np.uint64, np.float64, [0x7FF0000000000001, 0xFFF0000000000001, 0x7FF7FFFFFFFFFFFF,
                                     0x7FF8000000000000, 0x3FF0000000000000, 0xC000000000000000,
                                     0x0000000000000001, 0x0000000000000000]),
}


def _values(fmt: str) -> np.ndarray:
    uint, flt, bits = _BITS[fmt]
    return np.array(bits, dtype=uint).view(flt)


def _tensor(fmt: str, shape=(2, 4)) -> Tensor:
    t = Tensor(_values(fmt).reshape(shape), fmt, requires_grad=True)
    assert np.array_equal(t.data.view(_BITS[fmt][0]).ravel(), _values(fmt).view(_BITS[fmt][0]))
    return t


def _other(fmt: str, shape) -> Tensor:
    return Tensor(np.full(shape, 0.5), fmt, requires_grad=True)


OPS = {
    "add": lambda t, f: t + _other(f, t.shape),
    "mul": lambda t, f: t * 3.0,
    "div": lambda t, f: t / _other(f, t.shape),
    "neg": lambda t, f: -t,
    "abs": lambda t, f: F.abs(t),
    "exp": lambda t, f: F.exp(t),
    "log": lambda t, f: F.log(F.abs(t) + 1.0),
    "sqrt": lambda t, f: F.sqrt(F.abs(t) + 1.0),
    "tanh": lambda t, f: F.tanh(t),
    "sigmoid": lambda t, f: F.sigmoid(t),
    "relu": lambda t, f: F.relu(t),
    "gelu": lambda t, f: F.gelu(t),
    "sum": lambda t, f: F.sum(t),
    "mean": lambda t, f: F.mean(t, dim=1),
    "max": lambda t, f: F.max(t),
    "max_dim": lambda t, f: F.max(t, dim=1).values,
    "matmul": lambda t, f: F.matmul(t, _other(f, (4, 3))),
    "linear": lambda t, f: F.linear(t, _other(f, (3, 4)), _other(f, (3,))),
    "softmax": lambda t, f: F.softmax(t, dim=1),
    "log_softmax": lambda t, f: F.log_softmax(t, dim=1),
    "cross_entropy": lambda t, f: F.cross_entropy(t, np.array([0, 3])),
    "mse_loss": lambda t, f: F.mse_loss(t, np.zeros(t.shape)),
    "mse_loss_inf_target": lambda t, f: F.mse_loss(t, np.full(t.shape, np.inf)),
    "reshape": lambda t, f: t.reshape((4, 2)),
    "transpose": lambda t, f: F.transpose(t, 0, 1),
    "to_fp16": lambda t, f: t.to("fp16"),
    "to_bf16": lambda t, f: t.to("bf16"),
    "to_fp8": lambda t, f: t.to("fp8_e4m3"),
    "to_fp32": lambda t, f: t.to("fp32"),
    "conv2d": lambda t, f: F.conv2d(t.reshape((1, 1, 2, 4)), _other(f, (2, 1, 2, 2))),
    "max_pool2d": lambda t, f: F.max_pool2d(t.reshape((1, 1, 2, 4)), 2),
    "avg_pool2d": lambda t, f: F.avg_pool2d(t.reshape((1, 1, 2, 4)), 2),
    "layer_norm": lambda t, f: F.layer_norm(t, (4,)),
    "batch_norm": lambda t, f: F.batch_norm(t, None, None, training=True),
    "batch_norm_running": lambda t, f: F.batch_norm(
        t, Tensor(np.zeros(4), f), Tensor(np.ones(4), f), training=True),
    "dropout": lambda t, f: F.dropout(t, 0.5, rng=0),
}


@pytest.mark.parametrize("fmt", ["fp32", "fp64"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_ops_on_signalling_nans_are_silent(fmt, op):
    t = _tensor(fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = OPS[op](t, fmt)
        out.backward(np.ones(out.shape))
        values = out.numpy(np.float64)  # (Tensor.numpy's cast too)
        as_array = np.asarray(t, dtype=np.float32 if fmt == "fp64" else np.float64)  # __array__
    assert np.isnan(values).any() and np.isnan(as_array).sum() == 4
    assert t.grad is not None and t.grad.shape == t.shape


_SPECIALS = np.array([np.inf, -np.inf, 0.0, -0.0, np.nan, 1.0, -2.0, 65504.0])


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32", "fp64", "fp8_e4m3"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("grad", ["ones", "infinities"])
def test_ops_on_infinities_and_nans_are_silent(fmt, op, grad):
    t = Tensor(_SPECIALS.reshape(2, 4), fmt, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = OPS[op](t, fmt)
        g = np.ones(out.shape)
        if grad == "infinities":  # an overflowed loss gradient: +inf and -inf in turn
            g = np.where(np.arange(g.size).reshape(g.shape) % 2 == 0, np.inf, -np.inf)
        out.backward(g)
    assert t.grad is not None and t.grad.shape == t.shape


# the paths an op takes under other rounding modes, a flag context, other overflow / subnormal
# policies and other accumulation models (casts, sequential sums, the tensor-core model)
_CONTEXTS = {
    "up": lambda: rounding_context("up"),
    "stochastic": lambda: rounding_context("stochastic", rng=0),
    "flag_context": fpsim.flag_context,
    "saturate": lambda: rounding_context(overflow="saturate"),
    "flush": lambda: rounding_context(subnormals="flush"),
    "sequential_fp16": lambda: matmul_accumulation(("sequential", "fp16")),
    "sgemm": lambda: matmul_accumulation("sgemm"),
    "exact": lambda: matmul_accumulation("exact"),
    "tensorcore_A100": lambda: matmul_accumulation(("tensorcore", "A100")),
}


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("context", sorted(_CONTEXTS))
def test_ops_on_infinities_and_nans_are_silent_in_every_mode_and_model(fmt, context):
    for op in sorted(OPS):
        t = Tensor(_SPECIALS.reshape(2, 4), fmt, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with _CONTEXTS[context]():
                out = OPS[op](t, fmt)
                g = np.where(np.arange(out.data.size).reshape(out.shape) % 2 == 0, np.inf,
                             -np.inf)
                out.backward(g)
        assert t.grad is not None, op
