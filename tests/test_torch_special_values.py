"""fpsim's exact elementwise ops (relu, abs, neg) and their gradients against PyTorch's, bit for
bit, on the special values of fp16 and bf16: zeros of both signs, subnormals, infinities, NaNs
of both signs and payloads, and a sample of normal values. The reference is PyTorch's output,
recorded by tools/record_torch_special_values.py into tests/data/torch/special_values.npz (a
fresh clone needs no PyTorch).

NaN payloads: NumPy and PyTorch may both quiet or keep a payload; the ops here move bits
(mask, sign), so the patterns are compared whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fpsim.autograd.functional as F
from fpsim.autograd import Tensor

DATA = Path(__file__).parent / "data" / "torch" / "special_values.npz"


@pytest.fixture(scope="module")
def ref():
    with np.load(DATA) as z:
        return {k: z[k] for k in z.files}


def _is_nan(bits: np.ndarray, fmt: str) -> np.ndarray:
    frac = 10 if fmt == "fp16" else 7
    exp_all = (1 << (15 - frac)) - 1
    return (((bits >> frac) & exp_all) == exp_all) & ((bits & ((1 << frac) - 1)) != 0)


@pytest.mark.parametrize("op", ["relu", "abs", "neg"])
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_exact_ops_match_pytorch_on_special_values(ref, fmt, op):
    bits = ref[f"{fmt}/x"]
    dtype = Tensor(np.zeros(1), fmt).numpy().dtype
    x = Tensor(bits.view(dtype), fmt, requires_grad=True)
    assert np.array_equal(x.numpy().view(np.uint16), bits)  # no pattern changed on the way in
    out = getattr(F, op)(x)
    out.backward(ref[f"{fmt}/g"].view(dtype))
    got_out, want_out = out.numpy().view(np.uint16), ref[f"{fmt}/{op}/out"]
    got_grad, want_grad = x.grad.view(np.uint16), ref[f"{fmt}/{op}/grad"]
    # a NaN result: NaN in both (the payload NumPy's arithmetic gives may differ from
    # PyTorch's); every other result: the same pattern
    for got, want in ((got_out, want_out), (got_grad, want_grad)):
        nan = _is_nan(want, fmt)
        assert np.array_equal(_is_nan(got, fmt), nan)
        bad = np.flatnonzero((got != want) & ~nan)
        assert bad.size == 0, (f"{op} {fmt}: {bad.size} patterns differ from PyTorch, e.g. "
                               f"x={bits[bad[:4]]} got {got[bad[:4]]} want {want[bad[:4]]}")
    # the data reach every kind of special value: the comparison can fail on each
    assert {0x0000, 0x8000} <= set(bits.tolist())
    assert _is_nan(bits, fmt).sum() > 100 and (_is_nan(bits, fmt) & (bits >= 0x8000)).any()


ROUNDING_OPS = ["exp", "log", "sqrt", "tanh", "sigmoid", "gelu", "gelu_tanh"]


def _op(name: str):
    if name == "gelu_tanh":
        return lambda t: F.gelu(t, approximate="tanh")
    return getattr(F, name)


@pytest.mark.parametrize("op", ROUNDING_OPS)
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_rounding_ops_match_pytorch_at_zeros_infinities_and_nan(ref, fmt, op):
    """At +-0, +-inf and NaN the result and the gradient are decided by the op's rules for
    special values (0 * inf, sign of a zero, a NaN passed on), not by rounding."""
    _compare(ref, fmt, op, ref[f"{fmt}/edge/x"], ref[f"{fmt}/edge/g"], _op(op))
    assert {0x0000, 0x8000} <= set(ref[f"{fmt}/edge/x"].tolist())


def _compare(ref, fmt, op, bits, g, fn):
    dtype = Tensor(np.zeros(1), fmt).numpy().dtype
    x = Tensor(bits.view(dtype), fmt, requires_grad=True)
    with np.errstate(all="ignore"):
        out = fn(x)
        out.backward(g.view(dtype))
    for what, got, want in (("output", out.numpy().view(np.uint16), ref[f"{fmt}/{op}/out"]),
                            ("gradient", x.grad.view(np.uint16), ref[f"{fmt}/{op}/grad"])):
        nan = _is_nan(want, fmt)
        bad = np.flatnonzero((_is_nan(got, fmt) != nan) | ((got != want) & ~nan))
        assert bad.size == 0, (f"{op} {fmt} {what}: {bad.size} patterns differ from PyTorch, "
                               f"e.g. x={[hex(v) for v in bits[bad[:4]]]} got "
                               f"{[hex(v) for v in got[bad[:4]]]} want "
                               f"{[hex(v) for v in want[bad[:4]]]}")


# fp32 / fp64: signalling NaNs of both signs and payload ends, a quiet NaN, other values
_WIDE_PATTERNS = {
    "fp32": np.array([0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FC00000, 0x3F800000, 0x00000001],
                     dtype=np.uint32).view(np.float32),
    "fp64": np.array([0x7FF0000000000001, 0xFFF0000000000001, 0x7FF7FFFFFFFFFFFF,
                      0x7FF8000000000000, 0x3FF0000000000000, 0x1], dtype=np.uint64
                     ).view(np.float64),
}


@pytest.mark.parametrize("fmt", ["bf16", "fp8_e4m3", "fp8_e5m2", "fp16", "fp32", "fp64"])
def test_widening_every_pattern_is_exact_and_silent(fmt):
    """Every stored pattern of the format (of fp32 / fp64: their signalling NaNs and others)
    widens to its exact value (NaN to NaN) without a warning: a signalling NaN sets the FPU's
    invalid flag in the cast, which NumPy would report as a RuntimeWarning from inside fpsim."""
    import warnings

    from fpsim.autograd.context import widen

    if fmt in _WIDE_PATTERNS:
        data = _WIDE_PATTERNS[fmt]
    else:
        dtype = Tensor(np.zeros(1), fmt).numpy().dtype
        n = 1 << (8 * dtype.itemsize)
        data = np.arange(n, dtype=np.uint16 if n > 256 else np.uint8).view(dtype)
    with np.errstate(invalid="ignore"):  # the reference: the same cast, its warning ignored
        want = data.astype(np.float64)
    for target in (np.float64,) if fmt == "fp64" else (np.float64, np.float32):  # (exact ones)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = widen(data, target)
        assert got.dtype == target
        with np.errstate(invalid="ignore"):  # a float32 signalling NaN cast for the compare
            assert np.array_equal(got.astype(np.float64), want, equal_nan=True)


@pytest.mark.parametrize("fmt", ["fp32", "fp64", "fp8_e4m3", "fp8_e5m2"])
def test_relu_and_abs_follow_the_same_rules_in_the_other_formats(fmt):
    """The formats relu decides on in floating point (not on 16-bit patterns): PyTorch's rules
    checked above on fp16 / bf16, stated in float64. relu gives +0 for x < 0 and x itself
    otherwise (-0 and NaN kept, bit for bit), and passes the gradient where x > 0 or x is NaN;
    abs's gradient is g * ((x > 0) - (x < 0)): 0 at both zeros and at NaN."""
    dtype = Tensor(np.zeros(1), fmt).numpy().dtype
    if dtype.itemsize == 1:  # every pattern of an fp8 format
        data = np.arange(256, dtype=np.uint8).view(dtype)
    else:
        info = np.finfo(dtype)
        data = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.5, -1.5, info.tiny,
                         -info.tiny, info.smallest_subnormal, -info.smallest_subnormal,
                         info.max, -info.max], dtype=dtype)
    with np.errstate(invalid="ignore"):
        v = data.astype(np.float64)
    g = np.where(np.arange(data.size) % 2, -0.75, 1.25)
    bits = np.dtype(f"u{dtype.itemsize}")
    x = Tensor(data, fmt, requires_grad=True)
    out = F.relu(x)
    want = np.where(v < 0, np.zeros(1, dtype).view(bits), data.view(bits))
    np.testing.assert_array_equal(out.numpy().view(bits), want)
    out.backward(g)
    np.testing.assert_array_equal(x.grad.astype(np.float64), np.where((v > 0) | np.isnan(v), g, 0))
    assert (np.signbit(v) & (v == 0)).any() and np.isnan(v).any()  # -0 and NaN are met
    x = Tensor(data, fmt, requires_grad=True)
    F.abs(x).backward(g)
    got = x.grad.astype(np.float64)
    want = ((v > 0).astype(float) - (v < 0)) * g
    np.testing.assert_array_equal(got, want)
    assert not np.isnan(got).any()
