"""Differentiable operations, each in one place with its forward and its backward; the names and
defaults of ``torch`` / ``torch.nn.functional`` (exported as :mod:`fpsim.functional`).

Precision rules
===============

Every op computes its result exactly, or in float64 where that is exact enough, and rounds it ONCE
to the output format, with the policy of :func:`fpsim.autograd.rounding_context` (default nearest
even). Its backward computes each input's gradient the same way, from the incoming gradient and the
saved tensors PyTorch's derivative formulas use (e.g. ``exp`` reuses its rounded output), and
rounds it once to that input's ``grad_fmt``. Ops mixing formats output the promoted format
(:func:`fpsim.autograd.context.promote_formats`: the format containing the others, e.g. fp16 + fp32
-> fp32, fp16 + bf16 -> fp32). A Python scalar does not change the format (as PyTorch's wrapped
numbers) and enters as float64. matmul, linear and conv2d do not mix formats, as PyTorch's:
operands (and a bias) of different formats are a TypeError, so a bf16 model given fp32 data (an
fp32 Tensor, or a NumPy float64 array, which is fp64) does not silently compute in fp32; inside
:class:`fpsim.amp.autocast` the policy casts them and any mix left promotes
(:func:`fpsim.autograd.context.check_same_format`).

=============================  ============  ==============================================
op                             output        forward / backward computation
=============================  ============  ==============================================
add, sub, mul, div, sqrt       promoted      The exact result rounded once, as
                                             fpsim.add / sub / mul / div / sqrt round it: the
                                             arithmetic layer's kernel
                                             (fpsim.arithmetic.compute), every mode and
                                             format, IEEE flags into an active
                                             fpsim.flag_context. Round to nearest even
                                             without flags may go faster, with the same
                                             result: fp32 / fp16 by the IEEE float32
                                             operation (+ one native cast for fp16: 24 >=
                                             2*11+2 bits, Figueroa's theorem); formats of
                                             <= 25 bits whose float64 operation cannot
                                             overflow or underflow by one float64 operation
                                             and one rounding (53 >= 2*25+2). A Python scalar
                                             that is not a value of the output format enters
                                             at its exact float64 value. fp64 results:
                                             float64 (no IEEE flags). Backward: float64,
                                             one rounding; broadcast dims summed in float64.
pow                            promoted      float64 ``**``, one rounding; backward float64.
neg, abs, relu, max, reshape,  input         exact (values are moved, not computed); no
view, flatten, (un)squeeze,    (cat, stack:  rounding except into a promoted format. Backward
transpose, permute, T,         promoted)     exact; repeated indices / overlapping pooling
getitem, cat, stack, clone,                  windows add their gradients in float64 and round
max_pool2d, masked_fill                      once.
embedding                      weight        exact (rows gathered). Backward: the rows'
                                             gradients added in index order (row-major over
                                             the index array), each add rounded to the
                                             weight's grad format, from +0, as PyTorch's CPU
                                             kernel (padding_idx's row: none).
causal attention               input         no op of its own (fpsim.models.GPT): matmul,
(q k^T / sqrt(hs), masked_fill               mul by the scalar, masked_fill with -inf above
-inf, softmax, @ v)                          the diagonal, softmax, matmul, each rounded as
                                             its row says (bit for bit PyTorch's CPU fp16 /
                                             bf16 results: tests/test_torch_gpt.py).
avg_pool2d                     input         float64 window sum / divisor, one rounding;
                                             backward g / divisor added in float64, one
                                             rounding.
exp, log, tanh, sigmoid,       input         float64 (NumPy libm; erf after Cody 1969), one
gelu (exact and tanh forms)                  rounding (float64 accuracy: ~1 ulp of float64
                                             before it). Backward: float64 formula on the
                                             saved rounded tensors, one rounding.
sum, mean                      input         float64 (pairwise) sum, one rounding (exact for
                                             fp16 / fp8 terms up to 2**13 of them); backward
                                             sum: the gradient broadcast (exact); mean: g / n
                                             in float64, one rounding.
softmax, log_softmax           input         float64, one rounding; backward float64 using the
                                             rounded output (as PyTorch).
nll_loss, mse_loss             input         float64, one rounding; backward float64.
cross_entropy                  input         log_softmax then nll_loss: two ops, two
                                             roundings, as PyTorch (one graph node for
                                             plain class targets, the same roundings);
                                             label smoothing and probability targets add
                                             PyTorch's further ops (mul, sum, div, add),
                                             each rounded.
matmul, linear, conv2d         operands'     the matmul accumulation model
                                             (:mod:`fpsim.autograd.accumulate`, default
                                             "fp32"); both gradients use the model active at
                                             backward time. A bias joins the accumulator;
                                             its gradient is a float64 sum, one rounding.
                                             Mixed formats: TypeError outside autocast.
layer_norm, batch_norm         promoted      float64 (normalisation and affine fused), one
                                             rounding; running statistics updated in float64
                                             and rounded once to the buffers' format.
                                             Backward float64, one rounding per input.
dropout                        input         x * mask / (1 - p) in float64, one rounding;
                                             backward the same on the gradient.
Tensor.to / cast_to            target        one rounding with the given mode; the gradient
                                             passes back, rounded to the source's format.
=============================  ============  ==============================================
"""

from __future__ import annotations

import builtins
import math
import operator
import sys
from collections import namedtuple
from collections.abc import Sequence

import numpy as np

from .. import arithmetic as _arithmetic
from .. import flags as _flags
from ..checks import as_array, as_int
from ..formats import BF16, FP16, FP32, FP64, Format
from ..modes import Rounding, Subnormals, as_rounding
from ..rounding import round as fpsim_round
from ..rounding.fp16 import f16_to_wide, f64_to_f16, f64_to_f32_to_f16
from ..rounding.native import (
    NATIVE_ARITHMETIC_FORMATS,
    NATIVE_CAST_FORMATS,
)
from . import accumulate as _acc
from . import tensor as _tensor
from .context import (
    F32_SAFE,
    autocast_args,
    bf16_sum32,
    check_same_format,
    plain_rounding,
    promote_formats,
    round_to,
    settings,
    widen,
)
from .generator import get_generator
from .operands import (
    accumulation_model,
    as_tensor,
    binary_operands,
    operand_dtype,
)
from .special import erfc
from .tensor import Tensor, as_format, make_result

__all__ = [
    "add", "sub", "mul", "div", "neg", "pow", "abs", "matmul", "linear",
    "sum", "mean", "max", "reshape", "flatten", "transpose", "permute", "unsqueeze", "squeeze",
    "getitem", "cat", "stack", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu",
    "softmax", "log_softmax", "nll_loss", "cross_entropy", "mse_loss", "dropout", "layer_norm",
    "batch_norm", "conv2d", "max_pool2d", "avg_pool2d", "cast_to", "masked_fill", "embedding",
]

_F64 = np.float64
_F32 = np.float32
_F16 = np.float16
_BF16_STORE = BF16.storage_dtype
_SQRT1_2 = 0.7071067811865476  # 1/sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327  # 1/sqrt(2 pi)
_SQRT_2_PI = 0.7978845608028654  # sqrt(2/pi)

MaxResult = namedtuple("max", ["values", "indices"])


# ---------------------------------------------------------------------- operand helpers
def _shape(v) -> tuple:
    return v._data.shape if isinstance(v, Tensor) else ()


def _check_broadcast(x, y, op: str) -> tuple:
    try:
        return np.broadcast_shapes(_shape(x), _shape(y))
    except ValueError:
        raise ValueError(f"{op}: shapes {_shape(x)} and {_shape(y)} cannot be broadcast "
                         "together") from None


def _val(v, dtype=_F64):
    """Compute values of a Tensor (exact widening) or a scalar."""
    return widen(v._data, dtype) if isinstance(v, Tensor) else v


def _representable(v: float, fmt: Format) -> bool:
    """Is the Python scalar ``v`` a value of ``fmt``?"""
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt.dtype is not None:
            return float(fmt.dtype.type(v)) == v
        return float(fpsim_round(v, fmt)) == v


def _float32_ok(fmt: Format, *vals) -> bool:
    """May + - * / of these operands run in float32 and round with one cast (see table)?"""
    if not settings().plain or fmt not in F32_SAFE:
        return False
    return all(isinstance(v, Tensor) or _representable(v, fmt) for v in vals)


_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
_PLAN_FAST = {"add": "add_fast", "sub": "add_fast", "mul": "mul_fast", "div": "div_fast",
              "sqrt": "sqrt_fast"}


def _float64_ok(op: str, fmt: Format, st) -> bool:
    """May ``op`` run as one float64 operation and one rounding to nearest even (see the
    table)? Yes when the format has at most 25 bits (53 >= 2p + 2: Figueroa's theorem), the
    float64 operation cannot overflow or lose bits to float64's subnormals for operands of the
    format (the arithmetic kernel's plan), subnormals are kept and the mode is nearest even."""
    return (st.policy.rounding is Rounding.NEAREST_EVEN and st.policy.subnormals is Subnormals.KEEP
            and fmt.precision_bits <= 25 and getattr(_arithmetic.plan_for(fmt), _PLAN_FAST[op]))


def _arith(op: str, x, y, fmt: Format) -> np.ndarray:
    """``x op y`` (Tensors or scalars; ``sqrt`` takes only x) rounded ONCE to ``fmt``, as
    :func:`fpsim.add` / ``sub`` / ``mul`` / ``div`` / ``sqrt`` round it: round to nearest even
    without flags may take the float32 IEEE operation (fp16 / fp32, see the table) or one
    float64 operation (:func:`_float64_ok`); everything else (directed and stochastic modes,
    wide-exponent formats, flush / DAZ, an active :func:`fpsim.flag_context`, a Python scalar
    that is not a value of ``fmt``) runs the arithmetic layer's kernel
    (:func:`fpsim.arithmetic.compute`), which records the IEEE flags in the active flag
    contexts."""
    vals = (x,) if op == "sqrt" else (x, y)
    st = settings()
    if fmt.mantissa_bits > _arithmetic.MAX_MANTISSA:
        # fp64 (and wider-mantissa formats): float64's own operations, as fpsim.add refuses
        # them; no IEEE flags are recorded for these
        a = [_val(v) for v in vals]
        return round_to(np.asarray(np.sqrt(a[0]) if op == "sqrt" else _ARITH[op](*a)), fmt)
    want = _flags.flags_active()
    exact = all(isinstance(v, Tensor) or _representable(v, fmt) for v in vals)
    if not want:
        if (op == "add" or op == "sub") and fmt is BF16 and type(x) is Tensor \
                and type(y) is Tensor and x._data.dtype == _BF16_STORE \
                and y._data.dtype == _BF16_STORE and st.plain:
            r = bf16_sum32(_ARITH[op], x._data, y._data)  # bf16 +- bf16 in float32
            if r is not None:
                return r
        if _float32_ok(fmt, *vals):
            f32 = [_val(v, _F32) for v in vals]
            r = np.sqrt(f32[0]) if op == "sqrt" else _ARITH[op](*f32)
            return round_to(np.asarray(r), fmt)
        if exact and _float64_ok(op, fmt, st):
            a = [_val(v) for v in vals]
            return round_to(np.asarray(np.sqrt(a[0]) if op == "sqrt" else _ARITH[op](*a)), fmt)
    c = _arithmetic.context(policy=st.policy_for(fmt), flags=want, what=op)
    shape = np.broadcast_shapes(*(_shape(v) for v in vals))
    flat = [np.ascontiguousarray(np.broadcast_to(_val(v), shape), dtype=_F64).reshape(-1)
            for v in vals]
    flat = [_arithmetic.daz_operand(v, c) for v in flat]
    snan = None
    if want:
        for v in vals:
            if isinstance(v, Tensor):
                m = _arithmetic.snan_mask(v._data)
                if m is not None:
                    m = np.broadcast_to(m, shape).reshape(-1)
                    snan = m if snan is None else (snan | m)
    with _flags.suspended(), np.errstate(all="ignore"):
        out, fl = _arithmetic.compute(op, flat, c, snan, exact_operands=exact)
    if want:
        _flags.record(fl.reshape(shape), op)
    return _store(out.reshape(shape), fmt)


def _store(values: np.ndarray, fmt: Format) -> np.ndarray:
    """float64 values of ``fmt`` -> its storage array (exact: no rounding happens)."""
    if fmt == FP16:
        return f64_to_f16(values)  # exact here; NumPy's own cast is slow on subnormals
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(fmt.storage_dtype)


def _sum_to(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Gradient of a broadcast: sum over the broadcast dims (float64)."""
    if g.shape == shape:
        return g
    g = widen(g)
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and g.shape[i + lead] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


def _result2(out, fmt, x, y, grad_x, grad_y, op: str) -> Tensor:
    """Record a binary op whose operands may be scalars; grad_x / grad_y map g to a gradient."""
    parents, fns = [], []
    if isinstance(x, Tensor):
        parents.append(x)
        fns.append(grad_x)
    if isinstance(y, Tensor):
        parents.append(y)
        fns.append(grad_y)

    def backward(g):  # (silent on infinities and NaNs: the engine runs it under errstate)
        return tuple(f(g) if p._requires_grad else None
                     for f, p in zip(fns, parents, strict=True))

    return make_result(out, fmt, parents, backward, op)


def _axes(dim, ndim: int) -> tuple[int, ...]:
    if type(dim) is int and -ndim <= dim < ndim:  # the common case: one valid int
        return (dim % ndim,)
    if dim is None:
        return tuple(range(ndim))
    try:
        dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
        dims = tuple(operator.index(d) for d in dims)  # ints, NumPy integers (bools, as before)
    except TypeError:
        raise TypeError(f"dim must be an int or a sequence of ints, got "
                        f"{type(dim).__name__} {dim!r}") from None
    out = []
    for d in dims:
        lo, hi = -builtins.max(ndim, 1), builtins.max(ndim, 1) - 1
        if not lo <= d <= hi:
            raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], "
                             f"but got {d})")
        out.append(d % builtins.max(ndim, 1))
    return tuple(out)


# ------------------------------------------------------------------------ arithmetic
def add(input, other) -> Tensor:
    """``input + other`` with broadcasting.

    >>> import fpsim
    >>> (Tensor([1.0, 2.0], fpsim.FP16) + Tensor([0.5], fpsim.FP32)).fmt.name
    'fp32'
    """
    input, other = autocast_args("add", input, other)
    x, y, fmt = binary_operands(input, other, "add")
    _check_broadcast(x, y, "add")
    with np.errstate(all="ignore"):
        out = _arith("add", x, y, fmt)
    return _result2(out, fmt, x, y, lambda g: _sum_to(g, x.shape),
                    lambda g: _sum_to(g, y.shape), "add")


def sub(input, other) -> Tensor:
    """``input - other`` with broadcasting.

    >>> float((Tensor([3.0]) - 1).item())
    2.0
    """
    input, other = autocast_args("sub", input, other)
    x, y, fmt = binary_operands(input, other, "sub")
    _check_broadcast(x, y, "sub")
    with np.errstate(all="ignore"):
        out = _arith("sub", x, y, fmt)
    return _result2(out, fmt, x, y, lambda g: _sum_to(g, x.shape),
                    lambda g: _sum_to(-widen(g), y.shape), "sub")


def mul(input, other) -> Tensor:
    """``input * other`` with broadcasting.

    >>> float((Tensor([3.0]) * 0.5).item())
    1.5
    """
    input, other = autocast_args("mul", input, other)
    x, y, fmt = binary_operands(input, other, "mul")
    _check_broadcast(x, y, "mul")
    if type(y) is float and _halving(y):
        return _mul_pow2(x, y, fmt, True)
    if type(x) is float and _halving(x):
        return _mul_pow2(y, x, fmt, False)
    with np.errstate(all="ignore"):
        out = _arith("mul", x, y, fmt)
    return _result2(out, fmt, x, y, lambda g: _sum_to(widen(g) * _val(y), x.shape),
                    lambda g: _sum_to(widen(g) * _val(x), y.shape), "mul")


def _halving(s: float) -> bool:
    """Is ``s`` 2**k with -16 <= k <= 0? A value of fp16, bf16 (or a float32 value, save below
    float32's normal range) times ``s`` is then exact in float32: fp16 / bf16 values are
    multiples of 2**-24 / 2**-133, so the product is a multiple of 2**-149 (float32's
    quantum) no larger than the value."""
    m, e = math.frexp(s)  # s = m * 2**e, 0.5 <= m < 1 for s > 0
    return m == 0.5 and -15 <= e <= 1


# gradient formats whose rounding (round_to, plain) from float32 is the one rounding of the
# float32 value: fp16 (f32_to_f16), bf16 (its native cast) and fp32 (none: float32 itself)
_F32_GRADS = (np.dtype(np.float16), BF16.storage_dtype, np.dtype(np.float32))


def _mul_pow2(x: Tensor, s: float, fmt: Format, first: bool) -> Tensor:
    """``x * s`` (or ``s * x``) for a tensor ``x`` and a scalar ``s`` = 2**k, -16 <= k <= 0
    (:func:`_halving`; the GPT's attention scale 1 / sqrt(16)), as mul's general route rounds
    it: bf16 in float32 rather than float64 (the exact product, one rounding: the same
    result), fp16 and fp32 as _arith does. Its backward computes ``g * s`` in float32 where
    that is the value the float64 route rounds: an fp16 or bf16 ``g`` (exact) or a float32
    ``g`` into an fp32 gradient (float32's own rounding of the exact product), of the
    input's shape, plain rounding, into an fp16 / bf16 / fp32 gradient; else the float64
    route (tests/test_autograd_mul_pow2.py checks both against it bit for bit)."""
    xd = x._data
    with np.errstate(all="ignore"):
        if fmt is BF16 and x.fmt is BF16 and plain_rounding():
            out = round_to(np.multiply(widen(xd, _F32), _F32(s)), fmt)
        else:
            out = _arith("mul", x, s, fmt) if first else _arith("mul", s, x, fmt)
    shape = xd.shape

    def grad(g):
        gfmt = x.grad_fmt
        sd = gfmt.storage_dtype
        if g.shape == shape and gfmt.dtype is not None and sd in _F32_GRADS \
                and (g.dtype == _F16 or g.dtype == _BF16_STORE
                     or (g.dtype == _F32 and sd == _F32)) and plain_rounding():
            return np.multiply(widen(g, _F32), _F32(s))
        return _sum_to(widen(g) * s, shape)

    return _result2(out, fmt, x, s, grad, None, "mul") if first else \
        _result2(out, fmt, s, x, None, grad, "mul")


def div(input, other) -> Tensor:
    """``input / other`` with broadcasting (IEEE: x/0 is inf or NaN, no error).

    >>> import fpsim
    >>> Tensor([1.0], fpsim.FP16) / 3
    Tensor([0.33325195], fmt=fp16)
    """
    input, other = autocast_args("div", input, other)
    x, y, fmt = binary_operands(input, other, "div")
    _check_broadcast(x, y, "div")
    with np.errstate(all="ignore"):
        out = _arith("div", x, y, fmt)
    return _result2(out, fmt, x, y, lambda g: _sum_to(widen(g) / _val(y), x.shape),
                    lambda g: _sum_to(-widen(g) * _val(x) / (_val(y) * _val(y)), y.shape),
                    "div")


def neg(input: Tensor) -> Tensor:
    """``-input`` (exact).

    >>> float(neg(Tensor([2.0])).item())
    -2.0
    """
    x = as_tensor(input)
    out = np.negative(x._data)
    return make_result(out, x.fmt, (x,), lambda g: (np.negative(g),), "neg")


def abs(input: Tensor) -> Tensor:  # noqa: A001 - torch.abs
    """``|input|`` (exact); the gradient is sign(x) * g with PyTorch's sign (0 at either zero
    and at NaN).

    >>> abs(Tensor([-2.0])).item()
    2.0
    """
    x = as_tensor(input)
    out = np.abs(x._data)

    def backward(g):
        # PyTorch's sign: (x > 0) - (x < 0), so 0 for NaN and for either zero
        x64 = widen(x._data)
        return (((x64 > 0).astype(_F64) - (x64 < 0)) * widen(g),)

    return make_result(out, x.fmt, (x,), backward, "abs")


def pow(input, exponent) -> Tensor:  # noqa: A001 - torch.pow
    """``input ** exponent``: float64 power, one rounding. A tensor exponent gets the gradient
    g * out * log(base) (0 where the base is 0, as PyTorch).

    >>> float(pow(Tensor([3.0]), 2).item())
    9.0
    """
    input, exponent = autocast_args("pow", input, exponent)
    x, y, fmt = binary_operands(input, exponent, "pow")
    _check_broadcast(x, y, "pow")
    with np.errstate(all="ignore"):
        out = round_to(np.asarray(np.power(_val(x), _val(y))), fmt)

    def grad_base(g):
        e = _val(y)
        d = np.where(e == 0, 0.0, e * np.power(_val(x), e - 1.0))
        return _sum_to(widen(g) * d, x.shape)

    def grad_exp(g):
        b = _val(x)
        d = np.where((b == 0) & (_val(y) >= 0), 0.0, widen(out) * np.log(b))
        return _sum_to(widen(g) * d, y.shape)

    return _result2(out, fmt, x, y, grad_base, grad_exp, "pow")


# --------------------------------------------------------------------------- matmul
def _swap(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def matmul(input: Tensor, other: Tensor, *, accumulation=None) -> Tensor:
    """Matrix product with NumPy / PyTorch semantics (1-D operands, batch broadcasting),
    accumulated per ``accumulation`` (default: the :func:`matmul_accumulation` context).

    >>> import fpsim
    >>> a = Tensor([[1.0, 2.0]], fpsim.FP16); b = Tensor([[3.0], [4.0]], fpsim.FP16)
    >>> (a @ b).item()
    11.0
    """
    input, other = autocast_args("matmul", input, other)
    a, b = as_tensor(input), as_tensor(other)
    check_same_format("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: both arguments need at least 1 dimension, got shapes "
                         f"{a.shape} and {b.shape}")
    fmt = a.fmt if a.fmt is b.fmt else promote_formats(a.fmt, b.fmt)
    model = accumulation_model(accumulation)
    dt = operand_dtype(model, a.fmt, b.fmt)
    a64, b64 = widen(a._data, dt), widen(b._data, dt)
    a2 = a64 if a.ndim > 1 else a64[None, :]
    b2 = b64 if b.ndim > 1 else b64[:, None]
    try:
        if a2.shape[-1] != b2.shape[-2]:
            raise ValueError
        np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                         f"({a2.shape[-1]} != {b2.shape[-2]} or batch dims mismatch)") from None
    out2 = _acc.gemm(a2, b2, fmt, model, fmt)
    out2_shape = out2.shape
    out = out2
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]

    def backward(g):
        m = accumulation_model(accumulation)
        g2 = widen(g, operand_dtype(m, fmt)).reshape(out2_shape)
        gfmt = fmt  # the output's gradient format
        ga = gb = None
        if a._requires_grad:
            acc = _acc.gemm_acc(g2, _swap(b2), m, promote_formats(gfmt, b.fmt))
            ga = _acc.finish(_sum_to(acc, a2.shape), a.grad_fmt, m).reshape(a.shape)
        if b._requires_grad:
            acc = _acc.gemm_acc(_swap(a2), g2, m, promote_formats(a.fmt, gfmt))
            gb = _acc.finish(_sum_to(acc, b2.shape), b.grad_fmt, m).reshape(b.shape)
        return ga, gb

    return make_result(out, fmt, (a, b), backward, "matmul")


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None, *,
           accumulation=None) -> Tensor:
    """``input @ weight.T + bias`` as one op: the bias joins the accumulator before the single
    rounding (a GEMM epilogue), so the result is rounded once.

    >>> import fpsim
    >>> linear(Tensor([[1.0, 1.0]]), Tensor([[2.0, 3.0]]), Tensor([0.5])).tolist()
    [[5.5]]
    """
    input, weight, bias = autocast_args("linear", input, weight, bias)
    x, w = as_tensor(input), as_tensor(weight)
    xd, wd = x._data, w._data  # the arrays' shapes: Tensor.shape is a property call
    x_shape = xd.shape
    if wd.ndim != 2 or not x_shape or x_shape[-1] != wd.shape[1]:
        raise ValueError(f"linear: input shape {x.shape} and weight shape {w.shape} do not "
                         f"match (need input (..., {w.shape[-1] if w.ndim else '?'}) and weight "
                         "(out_features, in_features))")
    n_out, n_in = wd.shape
    fmt = x.fmt
    if bias is None:
        b = None
        parents = (x, w)
        if w.fmt is not fmt:  # one format: nothing to check
            check_same_format("linear", x, w)
            fmt = promote_formats(fmt, w.fmt)
    else:
        b = as_tensor(bias)
        parents = (x, w, b)
        if w.fmt is not fmt or b.fmt is not fmt:
            check_same_format("linear", x, w, b)
            fmt = promote_formats(fmt, w.fmt, b.fmt)
        if b._data.shape != (n_out,):
            raise ValueError(f"linear: bias shape {b.shape} does not match weight shape "
                             f"{w.shape} (need ({n_out},))")
    model = accumulation_model(accumulation)
    if fmt is FP16 and model.kind == "fp32" and len(x_shape) == 2 and w.fmt is fmt \
            and (b is None or b.fmt is fmt) and _fp16_plain():
        return _linear_fp16(x, w, b, accumulation)
    dt = operand_dtype(model, x.fmt, w.fmt)
    rows = math.prod(x_shape[:-1])  # not -1: a reshape cannot infer it when n_in is 0
    x2 = widen(xd, dt).reshape(rows, n_in)
    w64 = widen(wd, dt)
    out = _acc.gemm(x2, w64.T, fmt, model, fmt, None if b is None else widen(b._data))
    if len(x_shape) != 2:
        out = out.reshape(x_shape[:-1] + (n_out,))

    def backward(g):
        return _linear_grads(g, x, w, b, x2, w64, fmt, accumulation)

    return make_result(out, fmt, parents, backward, "linear")


def _linear_grads(g: np.ndarray, x: Tensor, w: Tensor, b: Tensor | None, x2: np.ndarray,
                  w64: np.ndarray, fmt: Format, accumulation) -> tuple:
    """linear's backward: the gradients of ``x``, ``w`` (and ``b``) from the output's gradient
    ``g``, with ``x2`` (the input as rows) and ``w64`` widened at forward time, under the
    accumulation model active now (or ``accumulation``)."""
    m = accumulation_model(accumulation)
    x_shape = x._data.shape
    g2 = widen(g, operand_dtype(m, fmt)).reshape(x2.shape[0], w64.shape[0])
    gx = gw = None
    if x._requires_grad:
        in_fmt = fmt if w.fmt is fmt else promote_formats(fmt, w.fmt)
        gx = _acc.finish(_acc.gemm_acc(g2, w64, m, in_fmt), x.grad_fmt, m)
        if len(x_shape) != 2:
            gx = gx.reshape(x_shape)
    if w._requires_grad:
        in_fmt = fmt if x.fmt is fmt else promote_formats(fmt, x.fmt)
        gw = _acc.finish(_acc.gemm_acc(g2.T, x2, m, in_fmt), w.grad_fmt, m)
    if b is None:
        return gx, gw
    return gx, gw, (g2.sum(axis=0, dtype=_F64) if b._requires_grad else None)


# the fp16 fast paths' gate (context.plain_rounding), under a name of its own here so that a
# test can close it for these paths alone
_fp16_plain = plain_rounding


def _linear_fp16(x: Tensor, w: Tensor, b: Tensor | None, accumulation) -> Tensor:
    """linear of a 2-D fp16 input, fp16 weight and bias under the "fp32" accumulation model,
    rounding the plain way (:func:`_fp16_plain`): the general path's kernels called directly
    (the product and bias in float64, rounded to fp32 then fp16), without its dispatch (what
    that buys a training step: ``benchmarks/bench_training_step.py --engine --pairs``). Its
    backward takes the same direct route while those conditions still hold and the gradients
    are fp16, else the general backward. tests/test_linear_fast_path.py proves both equal to
    the general path, bit for bit."""
    x2, w64 = f16_to_wide(x._data), f16_to_wide(w._data)
    with np.errstate(all="ignore"):  # inf - inf, inf * 0 give NaN silently, as PyTorch
        acc = x2 @ w64.T
        if b is not None:
            acc += f16_to_wide(b._data)  # in place: the bias joins the float64 accumulator
    out = f64_to_f32_to_f16(acc)

    def backward(g):
        if g.dtype != np.float16 or not _fp16_plain() \
                or accumulation_model(accumulation).kind != "fp32" \
                or x.grad_fmt is not FP16 or w.grad_fmt is not FP16:
            return _linear_grads(g, x, w, b, x2, w64, FP16, accumulation)
        g2 = f16_to_wide(g)
        gx = f64_to_f32_to_f16(g2 @ w64) if x._requires_grad else None
        gw = f64_to_f32_to_f16(g2.T @ x2) if w._requires_grad else None
        if b is None:
            return gx, gw
        return gx, gw, (g2.sum(axis=0) if b._requires_grad else None)

    return make_result(out, FP16, (x, w) if b is None else (x, w, b), backward, "linear")


# ------------------------------------------------------------------------ reductions
def sum(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch.sum
    """Sum over ``dim`` (int, tuple, or None for all): float64 sum, one rounding.

    >>> import fpsim
    >>> sum(Tensor([[1.0, 2.0], [3.0, 4.0]], fpsim.FP16), dim=0).tolist()
    [4.0, 6.0]
    """
    input = autocast_args("sum", input)
    x = as_tensor(input)
    axes = _axes(dim, x.ndim)
    with np.errstate(all="ignore"):  # inf + -inf is NaN, silently (as PyTorch)
        total = widen(x._data).sum(axis=axes, keepdims=keepdim)
    out = round_to(np.asarray(total), x.fmt)

    def backward(g):
        if not keepdim:
            g = np.expand_dims(g, axes)
        return (np.broadcast_to(g, x.shape),)

    return make_result(out, x.fmt, (x,), backward, "sum")


def mean(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim``: float64 sum / n, one rounding.

    >>> mean(Tensor([1.0, 2.0])).item()
    1.5
    """
    input = autocast_args("mean", input)
    x = as_tensor(input)
    axes = _axes(dim, x.ndim)
    n = int(np.prod([x.shape[a] for a in axes])) if x.ndim else 1
    with np.errstate(all="ignore"):
        out = round_to(np.asarray(widen(x._data).sum(axis=axes, keepdims=keepdim) / n), x.fmt)

    def backward(g):
        g64 = widen(g) / n
        if not keepdim:
            g64 = np.expand_dims(g64, axes)
        return (np.broadcast_to(g64, x.shape),)

    return make_result(out, x.fmt, (x,), backward, "mean")


def max(input: Tensor, dim: int | None = None, keepdim: bool = False):  # noqa: A001
    """The largest value; with ``dim``, a named tuple ``(values, indices)`` (indices an int64
    array) as ``torch.max``. The gradient goes to the selected index (with ``dim``) or is
    shared evenly among equal maxima (without), as PyTorch.

    >>> r = max(Tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1)
    >>> r.values.tolist(), r.indices.tolist()
    ([5.0, 7.0], [1, 0])
    """
    x = as_tensor(input)
    x64 = widen(x._data)
    if dim is None:
        m = x64.max()
        out = round_to(np.asarray(m), x.fmt)

        def backward_all(g):
            mask = (x64 == m) | (np.isnan(x64) & np.isnan(m))
            return (mask * (widen(g) / mask.sum()),)

        return make_result(out, x.fmt, (x,), backward_all, "max")
    (d,) = _axes(dim, x.ndim)
    idx = np.expand_dims(np.argmax(x64, axis=d), d)
    vals = np.take_along_axis(x._data, idx, axis=d)
    if not keepdim:
        vals, idx_out = np.squeeze(vals, d), np.squeeze(idx, d)
    else:
        idx_out = idx

    def backward(g):
        gx = np.zeros(x.shape, dtype=g.dtype)
        np.put_along_axis(gx, idx, g if keepdim else np.expand_dims(g, d), axis=d)
        return (gx,)

    return MaxResult(make_result(vals, x.fmt, (x,), backward, "max"), idx_out)


# ------------------------------------------------------------------ shape and indexing
def reshape(input: Tensor, shape: Sequence[int]) -> Tensor:
    """The same values in a new shape (-1 infers one dimension).

    >>> reshape(Tensor([1.0, 2.0, 3.0, 4.0]), (2, 2)).shape
    (2, 2)
    """
    x = as_tensor(input)
    x_shape = x._data.shape
    try:
        out = x._data.reshape(shape if type(shape) is tuple else tuple(shape))
    except ValueError:
        raise ValueError(f"reshape: shape {tuple(shape)} is invalid for input of shape "
                         f"{x_shape} ({x._data.size} elements)") from None
    return make_result(out, x.fmt, (x,), lambda g: (g.reshape(x_shape),), "reshape")


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims ``start_dim..end_dim``.

    >>> flatten(Tensor(np.zeros((2, 3, 4))), 1).shape
    (2, 12)
    """
    x = as_tensor(input)
    xs = x._data.shape
    nd = len(xs)
    if nd == 0:
        return reshape(x, (1,))
    if type(start_dim) is int and type(end_dim) is int and -nd <= start_dim < nd \
            and -nd <= end_dim < nd:  # the common case, without _axes' general parse
        s, e = start_dim % nd, end_dim % nd
    else:
        s, e = _axes((start_dim, end_dim), nd)
    shape = xs[:s] + (math.prod(xs[s:e + 1]),) + xs[e + 1:]  # ints, exact
    return reshape(x, shape)


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two dimensions.

    >>> transpose(Tensor(np.zeros((2, 3))), 0, 1).shape
    (3, 2)
    """
    x = as_tensor(input)
    d0, d1 = _axes((dim0, dim1), x.ndim)
    out = np.swapaxes(x._data, d0, d1)
    return make_result(out, x.fmt, (x,), lambda g: (np.swapaxes(g, d0, d1),), "transpose")


def permute(input: Tensor, dims: Sequence[int]) -> Tensor:
    """Reorder the dimensions.

    >>> permute(Tensor(np.zeros((2, 3, 4))), (2, 0, 1)).shape
    (4, 2, 3)
    """
    x = as_tensor(input)
    dims = _axes(tuple(dims), x.ndim)
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"permute: dims {dims} are not a permutation of the {x.ndim} "
                         f"dimensions of shape {x.shape}")
    inverse = tuple(np.argsort(dims))
    out = np.transpose(x._data, dims)
    return make_result(out, x.fmt, (x,), lambda g: (np.transpose(g, inverse),), "permute")


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """Insert a dimension of size 1 at ``dim``.

    >>> unsqueeze(Tensor([1.0, 2.0]), 0).shape
    (1, 2)
    """
    x = as_tensor(input)
    (d,) = _axes(dim, x.ndim + 1)
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def squeeze(input: Tensor, dim: int | None = None) -> Tensor:
    """Drop dimensions of size 1 (only ``dim`` when given).

    >>> squeeze(Tensor(np.zeros((1, 2, 1)))).shape
    (2,)
    """
    x = as_tensor(input)
    if dim is None:
        shape = tuple(n for n in x.shape if n != 1)
    else:
        (d,) = _axes(dim, x.ndim)
        shape = x.shape[:d] + x.shape[d + 1:] if x.shape[d] == 1 else x.shape
    return reshape(x, shape)


def _index_arg(index):
    if isinstance(index, Tensor):
        return index._data.astype(np.int64)
    if isinstance(index, tuple):
        return tuple(_index_arg(i) for i in index)
    return index


def _is_basic(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return builtins.all(
        i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)) for i in items)


def getitem(input: Tensor, index) -> Tensor:
    """``input[index]`` with NumPy indexing (ints, slices, None, Ellipsis, integer and boolean
    arrays). The backward scatters the gradient; repeated indices add in float64.

    >>> Tensor([1.0, 2.0, 3.0])[1:].tolist()
    [2.0, 3.0]
    """
    x = as_tensor(input)
    index = _index_arg(index)
    out = x._data[index]
    basic = _is_basic(index)

    def backward(g):
        if basic:
            gx = np.zeros(x.shape, dtype=g.dtype)
            gx[index] = g
            return (gx,)
        pos = np.arange(x._data.size).reshape(x.shape)[index]
        flat = np.bincount(pos.ravel(), weights=widen(g).ravel(), minlength=x._data.size)
        return (flat.reshape(x.shape),)

    return make_result(np.asarray(out), x.fmt, (x,), backward, "getitem")


# ------------------------------------------------------------------------- embedding
def _embedding_indices(input, num: int) -> np.ndarray:
    """The index argument of :func:`embedding` as an int64 array of its shape, or a clear
    error: an integer array (any shape) with values in [0, num)."""
    if isinstance(input, Tensor):
        raise TypeError("embedding: indices must be an integer array (a NumPy int array, a "
                        "list of ints or an int), not an fpsim Tensor (whose values are "
                        "floating-point); pass e.g. np.asarray(t.numpy(), dtype=np.int64)")
    idx = as_array(input, "embedding: indices")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers (an int array or ints), got "
                        f"dtype {idx.dtype}")
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= num:
            bad = lo if lo < 0 else hi
            raise IndexError(f"embedding: index {bad} is out of range for a weight of "
                             f"{num} rows (valid: 0 .. {num - 1})")
    return idx.astype(np.int64, copy=False)


# formats whose NumPy / ml_dtypes scalar add rounds once to nearest even: fp64, and the
# rounding package's table of natively correct arithmetic (float16 and bfloat16 add in float32
# and cast back: 24 >= 2p + 2 bits, Figueroa's theorem), so np.add.at, which adds element by
# element in index order, is the declared order's rounding (plain rounding only)
_NATIVE_ADD_AT = frozenset({FP64}) | NATIVE_ARITHMETIC_FORMATS


def embedding_grad(g: np.ndarray, idx: np.ndarray, num: int, fmt: Format,
                   padding_idx: int | None = None) -> np.ndarray:
    """The weight gradient of :func:`embedding` (a storage array of ``fmt``, shape
    (num, dim)) from the output's gradient ``g`` (idx.shape + (dim,)) and the int64 indices:
    row ``idx[p]`` receives ``g[p]`` for every position ``p`` in C (row-major) order of the
    index array, each add rounded to ``fmt`` with the context's mode, starting from +0 (as
    PyTorch's CPU ``embedding_dense_backward``: one ``grad_weight[k].add_(grad[i])`` per
    index, in index order); ``padding_idx``'s row receives nothing. Internal (exported for
    the tests), not in ``__all__``.

    >>> import fpsim
    >>> g = np.array([[1.0], [2.0**-11], [2.0**-11]], np.float16)
    >>> embedding_grad(g, np.array([0, 0, 0]), 2, fpsim.FP16).ravel().tolist()
    [1.0, 0.0]
    """
    dim = g.shape[-1]
    flat = idx.reshape(-1)
    g2 = g.reshape(flat.size, dim)
    if padding_idx is not None:
        keep = flat != padding_idx
        flat, g2 = flat[keep], g2[keep]
    g2 = round_to(g2 if g2.dtype == fmt.storage_dtype else widen(g2), fmt)
    if fmt in _NATIVE_ADD_AT and plain_rounding():
        acc = np.zeros((num, dim), fmt.storage_dtype)
        with np.errstate(all="ignore"):  # inf + -inf is NaN silently, as PyTorch
            np.add.at(acc, flat, g2)
        return acc
    # any format and mode: the k-th occurrences of every row form one level (distinct rows,
    # so one vectorised add per level), levels in order: each row's adds in index order
    acc = np.zeros((num, dim))
    if flat.size == 0:
        return round_to(acc, fmt)
    order = np.argsort(flat, kind="stable")
    srt = flat[order]
    starts = np.r_[0, np.flatnonzero(srt[1:] != srt[:-1]) + 1]
    counts = np.diff(np.r_[starts, srt.size])
    rank = np.empty(flat.size, np.int64)
    rank[order] = np.arange(srt.size) - np.repeat(starts, counts)
    g64 = widen(g2)
    with np.errstate(all="ignore"):
        for r in range(int(counts.max())):
            sel = np.flatnonzero(rank == r)
            rows = flat[sel]
            acc[rows] = widen(round_to(acc[rows] + g64[sel], fmt))
    return round_to(acc, fmt)


def embedding(input, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,  # noqa: ARG001 - PyTorch's signature
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by the integer ``input``
    (any shape): output ``input.shape + (embedding_dim,)`` in the weight's format, exact (a
    gather). The weight's gradient adds the rows' gradients in the declared order of
    :func:`embedding_grad`: index order (row-major over ``input``), each add rounded to the
    weight's gradient format, as PyTorch's CPU kernel; the ``padding_idx`` row (negative:
    counted from the end) gets no gradient. ``max_norm``, ``scale_grad_by_freq`` and
    ``sparse`` are PyTorch's and not supported (an error if set).

    >>> w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> out = embedding(np.array([[1, 1, 0]]), w)
    >>> out.shape, out.tolist()[0][0]
    ((1, 3, 2), [3.0, 4.0])
    >>> out.sum().backward(); w.grad.tolist()
    [[1.0, 1.0], [2.0, 2.0]]
    """
    w = as_tensor(weight)
    if w._data.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got "
                         f"shape {w.shape}")
    if max_norm is not None:
        raise ValueError("embedding: max_norm is not supported (it renormalises the "
                                  "weight in place); pass max_norm=None")
    if scale_grad_by_freq is not False or sparse is not False:
        raise ValueError("embedding: scale_grad_by_freq and sparse are not supported; "
                                  "leave them False")
    num = w._data.shape[0]
    pad = None
    if padding_idx is not None:
        pad = as_int("embedding: padding_idx", padding_idx, None)
        if not -num <= pad < num:
            raise ValueError(f"embedding: padding_idx must be within the {num} rows "
                             f"(-{num} .. {num - 1}), got {padding_idx!r}")
        pad %= num
    idx = _embedding_indices(input, num)
    out = w._data[idx]

    def backward(g):
        return (embedding_grad(g, idx, num, w.grad_fmt, pad),)

    return make_result(out, w.fmt, (w,), backward, "embedding")


def _convert(data: np.ndarray, fmt: Format) -> np.ndarray:
    return round_to(widen(data) if data.dtype != fmt.storage_dtype else data, fmt)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim`` in the promoted format (exact: every input format is contained
    in it).

    >>> import fpsim
    >>> cat([Tensor([1.0], fpsim.FP16), Tensor([2.0], fpsim.BF16)]).fmt.name
    'fp32'
    """
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("cat: expected a non-empty sequence of tensors")
    fmt = promote_formats(*[t.fmt for t in ts])
    (d,) = _axes(dim, ts[0].ndim)
    try:
        out = np.concatenate([_convert(t._data, fmt) for t in ts], axis=d)
    except ValueError:
        raise ValueError(f"cat: shapes {[t.shape for t in ts]} do not match outside dim "
                         f"{dim}") from None
    bounds = np.cumsum([t.shape[d] for t in ts])[:-1]

    def backward(g):
        return tuple(np.split(g, bounds, axis=d))

    return make_result(out, fmt, ts, backward, "cat")


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Stack along a new dimension ``dim``.

    >>> stack([Tensor([1.0, 2.0]), Tensor([3.0, 4.0])]).shape
    (2, 2)
    """
    return cat([unsqueeze(as_tensor(t), dim) for t in tensors], dim)


def identity(input: Tensor, copy: bool = True) -> Tensor:
    """The values of ``input`` as a new graph node (a copy unless ``copy=False``); the
    gradient passes through unchanged (``Tensor.clone``; internal, not in ``__all__``).

    >>> identity(Tensor([1.0], requires_grad=True)).requires_grad
    True
    """
    x = as_tensor(input)
    return make_result(x._data.copy() if copy else x._data, x.fmt, (x,), lambda g: (g,),
                       "clone")


def cast_to(input: Tensor, fmt: Format | str,
            rounding: Rounding | str = "nearest_even") -> Tensor:
    """Differentiable cast (``Tensor.to``): one rounding with ``rounding``; the gradient passes
    back and is rounded to the input's gradient format.

    >>> import fpsim
    >>> cast_to(Tensor([0.1]), "bf16", "toward_zero").item()
    0.099609375
    """
    x = as_tensor(input)
    fmt = as_format(fmt)
    rounding = as_rounding(rounding)
    if fmt == x.fmt:
        return x
    data = x._data
    if not (data.dtype == np.float32 and rounding is Rounding.NEAREST_EVEN and data.size
            and fmt in NATIVE_CAST_FORMATS and plain_rounding()
            and not np.isnan(data.max())):
        data = widen(data)
    # else: float32 storage holds the exact values, and the native casts round them from
    # float32 once, as from their float64 widening (autocast's casts of fp32 weights and
    # activations, without the float64 copy); NaN takes the widened route, whose payloads
    # (quieted by the widening) the casts keep
    out = round_to(data, fmt, rounding)
    return make_result(out, fmt, (x,), lambda g: (g,), f"to({fmt.name})")


# ---------------------------------------------------------------------- elementwise
def _own(wide: np.ndarray, stored: np.ndarray) -> np.ndarray | None:
    """``wide`` (``widen(stored)``) as an ``out=`` buffer when it is a fresh array of the op's
    own, else None (a float64 input's widening is the stored array itself: never written)."""
    return None if wide is stored or wide.base is not None else wide


# Elements per block of the blocked elementwise kernels (softmax, tanh GELU): 128 KiB of
# float64, so that a block's temporaries stay in cache and come from memory the allocator
# reuses; whole-array float64 temporaries of megabytes cost page faults at every op.
_BLOCK = 1 << 14


def _tiles(a: np.ndarray, width: int, split: bool) -> tuple[np.ndarray, list]:
    """``a`` as rows of ``width`` elements (a 2-D view) and the row slices of about
    :data:`_BLOCK` elements (two rows at least) to process it by, when ``split`` (the caller's
    results are the same block by block: elementwise ops, reductions along rows, a rounding
    that draws no random bits), ``a`` is C-contiguous and makes more than one block; else
    ``a`` itself and one index, ``...``, for the whole-array computation."""
    # at least two rows a block, the last included: NumPy runs a one-row block's loops as 1-D
    # ones, whose NaN results can carry another sign or payload than the 2-D loops give
    step = builtins.max(2, _BLOCK // builtins.max(width, 1))
    n = a.size // width if width else 0
    if split and a.size > _BLOCK and n >= 2 * step and a.flags.c_contiguous:
        starts = range(0, n - 1 if n % step == 1 else n, step)  # no one-row tail
        return a.reshape(n, width), [slice(i, i + step) for i in starts[:-1]] + \
            [slice(starts[-1], n)]
    return a, [...]


def _store_rounded(dst: np.ndarray, rows: slice, r: np.ndarray, fmt: Format) -> None:
    """``dst[rows] = round_to(r, fmt)`` for a block of a blocked kernel (plain rounding, which
    the blocks need): fp32 and fp64 by the assignment's own cast, in one pass (round_to's
    route for them under plain rounding is NumPy's cast, astype: nearest even, IEEE overflow
    and subnormals; an fp64 copy), other formats by round_to."""
    if fmt is FP32 or fmt is FP64:
        dst[rows] = r
    else:
        dst[rows] = round_to(r, fmt)


def _block_grad_format(x: Tensor, one: bool) -> Format | None:
    """The format a blocked backward (:func:`_tiles` split it into blocks: ``one`` False)
    rounds each block of ``x``'s gradient to, or None to return the float64 gradient whole:
    the gradient format of ``x`` when it has a NumPy dtype and rounding is plain now, so that
    rounding block by block (an elementwise cast drawing no random bits) gives the array the
    engine's delivery would round the whole float64 gradient to, without it."""
    if one:
        return None
    fmt = x.grad_fmt
    return fmt if fmt.dtype is not None and plain_rounding() else None


def _unary(x: Tensor, forward, backward_of, op: str) -> Tensor:
    """A float64 elementwise op: ``forward(x64)`` rounded once; ``backward_of(x64, out, g64)``
    the float64 gradient (out: the rounded output)."""
    x64 = widen(x._data)
    with np.errstate(all="ignore"):
        out = round_to(np.asarray(forward(x64)), x.fmt)

    def backward(g):
        return (backward_of(x64, out, widen(g)),)

    return make_result(out, x.fmt, (x,), backward, op)


def exp(input: Tensor) -> Tensor:
    """Elementwise e**x; gradient g * out.

    >>> exp(Tensor([0.0])).item()
    1.0
    """
    input = autocast_args("exp", input)
    return _unary(as_tensor(input), np.exp, lambda _x, o, g: g * widen(o), "exp")


def log(input: Tensor) -> Tensor:
    """Natural logarithm; gradient g / x.

    >>> log(Tensor([1.0])).item()
    0.0
    """
    input = autocast_args("log", input)
    return _unary(as_tensor(input), np.log, lambda x, _o, g: g / x, "log")


def sqrt(input: Tensor) -> Tensor:
    """Square root; gradient g / (2 out).

    >>> sqrt(Tensor([4.0])).item()
    2.0
    """
    x = as_tensor(input)
    with np.errstate(all="ignore"):
        out = _arith("sqrt", x, None, x.fmt)

    def backward(g):
        return (widen(g) / (2.0 * widen(out)),)

    return make_result(out, x.fmt, (x,), backward, "sqrt")


def tanh(input: Tensor) -> Tensor:
    """Hyperbolic tangent; gradient g (1 - out**2).

    >>> tanh(Tensor([0.0])).item()
    0.0
    """
    def grad(_x, o, g):
        o = widen(o)
        return g * (1.0 - o * o)

    return _unary(as_tensor(input), np.tanh, grad, "tanh")


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid(input: Tensor) -> Tensor:
    """Logistic sigmoid 1 / (1 + e**-x); gradient g out (1 - out).

    >>> sigmoid(Tensor([0.0])).item()
    0.5
    """
    def grad(_x, o, g):
        o = widen(o)
        return g * o * (1.0 - o)

    return _unary(as_tensor(input), _sigmoid64, grad, "sigmoid")


_INT_OF_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_INF_BITS16 = {np.dtype(np.float16): 0x7C00}
try:  # bfloat16 shares fp16's 16-bit sign-magnitude layout with its own infinity pattern
    import ml_dtypes as _ml

    _INF_BITS16[np.dtype(_ml.bfloat16)] = 0x7F80
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    pass


def masked_bits(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``a`` where ``mask`` else +0, by AND-ing the bit patterns (np.where is slow on 2-byte
    floats). An internal kernel (not exported), shared with the training-step benchmark's
    floor.

    >>> masked_bits(np.array([-1.5, 2.0], np.float16), np.array([True, False]))
    array([-1.5,  0. ], dtype=float16)
    """
    it = _INT_OF_SIZE[a.dtype.itemsize]
    return (a.view(it) & -mask.astype(it)).view(a.dtype)


def relu(input: Tensor) -> Tensor:
    """max(x, 0) as PyTorch's relu, exact: negative values become +0; -0 and NaN pass
    unchanged. The gradient passes where the output is not <= 0 (positive or NaN), as
    PyTorch's ``threshold_backward(grad, output, 0)``; tests/test_torch_special_values.py
    compares both with PyTorch on zeros, subnormals, infinities and NaNs.

    >>> relu(Tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    x = as_tensor(input)
    data = x._data
    inf = _INF_BITS16.get(data.dtype)
    if inf is not None:  # decide on the bit patterns: float16 comparisons are slow in NumPy
        # the strictly negative numbers are the patterns 0x8001 .. 0x8000 + inf: a subtract
        # that wraps them to 0 .. inf - 1 and one compare (checked on all 2**16 patterns of
        # fp16 and bf16 by tests/test_bench_training_step.py)
        keep = data.view(np.uint16) - np.uint16(0x8001) >= inf
    else:
        keep = ~(widen(data, _F64 if data.dtype == _F64 else _F32) < 0)
    out = masked_bits(data, keep)

    def backward(g):
        if inf is not None:  # the output is +-0 where its bits but the sign are 0
            passes = (out.view(np.uint16) & np.uint16(0x7FFF)) != 0
        else:
            passes = ~(widen(out, _F64 if out.dtype == _F64 else _F32) <= 0)
        return (masked_bits(g, passes),)

    return make_result(out, x.fmt, (x,), backward, "relu")


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU: x * Phi(x) with the exact normal CDF Phi(x) = erfc(-x / sqrt 2) / 2
    (``approximate="none"``), or the tanh form (``approximate="tanh"``), as PyTorch.

    >>> round(gelu(Tensor([1.0], "fp64")).item(), 12)
    0.841344746069
    """
    x = as_tensor(input)
    if approximate == "none":
        def fwd(v):
            return v * (0.5 * erfc(-v * _SQRT1_2))

        def grad(v, _o, g):
            cdf = 0.5 * erfc(-v * _SQRT1_2)
            return g * (cdf + v * _INV_SQRT_2PI * np.exp(-0.5 * v * v))
    elif approximate == "tanh":
        return _gelu_tanh(x)
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(x, fwd, grad, "gelu")


def _gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh form in float64, one rounding (the GPT's costliest elementwise op), block by
    block (:func:`_tiles`): the forward keeps only its tanh for the backward, not the widened
    input (rewidened there), and both passes work in place in the arrays they create."""
    xs, blocks = _tiles(x._data, 1, plain_rounding())
    one = len(blocks) == 1
    fmt = x.fmt
    t_all = None if one else np.empty(xs.shape)  # the tanh, kept for the backward
    out = None if one else np.empty(xs.shape, fmt.storage_dtype)
    with np.errstate(all="ignore"):
        for b in blocks:
            xb = xs[b]
            v = widen(xb)
            # 0.5 v (1 + tanh(c (v + 0.044715 v^3))), evaluated in this order
            t = np.multiply(v, v, out=None if one else t_all[b])
            t *= v
            t *= 0.044715
            t += v
            t *= _SQRT_2_PI
            np.tanh(t, out=t)  # kept (not changed): a second backward reads it again
            r = t + 1.0
            r *= np.multiply(0.5, v, out=_own(v, xb))
            if one:
                t_all, out = t, round_to(r, fmt)
            else:
                _store_rounded(out, b, r, fmt)
    if not one:
        out = out.reshape(x._data.shape)

    # g (0.5 (1 + t) + 0.5 v (1 - t^2) c (1 + 3 * 0.044715 v^2)), the same order
    def backward(g):
        gs = g if one else g.reshape(xs.shape)
        gfmt = _block_grad_format(x, one)
        res = None if one else np.empty(xs.shape, _F64 if gfmt is None else
                                        gfmt.storage_dtype)
        for b in blocks:
            xb, t = xs[b], t_all[b]
            v = widen(xb)
            dt = t * t
            np.subtract(1.0, dt, out=dt)
            dt *= _SQRT_2_PI
            w = (3 * 0.044715) * v
            w *= v
            w += 1.0
            dt *= w
            dt *= np.multiply(0.5, v, out=_own(v, xb))
            r = np.add(t, 1.0, out=w if one or gfmt is not None else res[b])
            r *= 0.5
            r += dt
            r *= widen(gs[b])
            if one:
                res = r
            elif gfmt is not None:
                _store_rounded(res, b, r, gfmt)
        return (res if one else res.reshape(x._data.shape),)

    return make_result(out, fmt, (x,), backward, "gelu")


def _need_dim(dim, op: str) -> int:
    if dim is None:
        raise TypeError(f"{op}: pass dim explicitly (PyTorch's implicit choice is deprecated)")
    return dim


def softmax(input: Tensor, dim: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along ``dim`` in float64, one rounding; backward uses the rounded
    output: out * (g - sum(g * out)).

    >>> softmax(Tensor([0.0, 0.0]), dim=0).tolist()
    [0.5, 0.5]
    """
    input = autocast_args("softmax", input)
    x = as_tensor(input)
    (d,) = _axes(_need_dim(dim, "softmax"), x.ndim)
    xd = x._data
    # block by block along the rows when the softmax runs along the last (contiguous) axis
    xs, blocks = _tiles(xd, xd.shape[-1] if xd.ndim else 1,
                        d == xd.ndim - 1 and plain_rounding())
    one = len(blocks) == 1
    ax = d if one else -1
    out = None if one else np.empty(xs.shape, x.fmt.storage_dtype)
    with np.errstate(all="ignore"):
        for b in blocks:
            xb = xs[b]
            x64 = widen(xb)
            # the same float64 ops in one buffer (the widened copy when it is one)
            e = np.subtract(x64, x64.max(axis=ax, keepdims=True, initial=-np.inf),
                            out=_own(x64, xb))
            np.exp(e, out=e)
            o = round_to(np.divide(e, e.sum(axis=ax, keepdims=True), out=e), x.fmt)
            if one:
                out = o
            else:
                out[b] = o
    if not one:
        out = out.reshape(xd.shape)

    def backward(g):
        gs = g if one else g.reshape(xs.shape)
        ys = out if one else out.reshape(xs.shape)
        gfmt = _block_grad_format(x, one)
        res = None if one else np.empty(xs.shape, _F64 if gfmt is None else
                                        gfmt.storage_dtype)
        for b in blocks:
            y, g64 = widen(ys[b]), widen(gs[b])
            r = np.multiply(g64, y, out=None if one or gfmt is not None else res[b])
            np.subtract(g64, r.sum(axis=ax, keepdims=True), out=r)
            np.multiply(y, r, out=r)
            if one:
                res = r
            elif gfmt is not None:
                _store_rounded(res, b, r, gfmt)
        return (res if one else res.reshape(xd.shape),)

    return make_result(out, x.fmt, (x,), backward, "softmax")


def log_softmax(input: Tensor, dim: int | None = None) -> Tensor:
    """x - max - log(sum(exp(x - max))) along ``dim`` in float64, one rounding; backward
    g - exp(out) * sum(g) (the rounded output, as PyTorch).

    >>> round(log_softmax(Tensor([0.0, 0.0], "fp64"), dim=0).tolist()[0], 12)
    -0.69314718056
    """
    input = autocast_args("log_softmax", input)
    x = as_tensor(input)
    (d,) = _axes(_need_dim(dim, "log_softmax"), x._data.ndim)
    x64 = widen(x._data)
    with np.errstate(all="ignore"):
        z = x64 - x64.max(axis=d, keepdims=True, initial=-np.inf)
        out = round_to(z - np.log(np.exp(z).sum(axis=d, keepdims=True)), x.fmt)

    def backward(g):
        g64 = widen(g)
        return (g64 - np.exp(widen(out)) * g64.sum(axis=d, keepdims=True),)

    return make_result(out, x.fmt, (x,), backward, "log_softmax")


# ---------------------------------------------------------------------------- masking
def masked_fill(input: Tensor, mask, value: float) -> Tensor:
    """``input`` with ``value`` (rounded to its format) where the boolean ``mask`` (broadcast to
    the input's shape) is True, as ``torch.masked_fill``; no gradient flows to the filled
    positions.

    >>> masked_fill(Tensor([1.0, 2.0, 3.0]), np.array([False, True, False]), 0.0).tolist()
    [1.0, 0.0, 3.0]
    """
    x = as_tensor(input)
    m = np.asarray(mask._data if isinstance(mask, Tensor) else mask)
    if m.dtype != np.bool_:
        raise TypeError(f"masked_fill: the mask must be boolean, got dtype {m.dtype}")
    try:
        m = np.broadcast_to(m, x.shape)
    except ValueError:
        raise ValueError(f"masked_fill: mask shape {m.shape} cannot be broadcast to the input "
                         f"shape {x.shape}") from None
    fill = round_to(np.asarray(float(value), dtype=_F64), x.fmt)
    out = _where(m, fill, x._data)
    return make_result(out, x.fmt, (x,), lambda g: (_where(m, np.zeros((), g.dtype), g),),
                       "masked_fill")


def _where(m: np.ndarray, fill: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``np.where(m, fill, a)`` for a 0-d ``fill`` of ``a``'s dtype: a copy of a C-contiguous
    ``a`` filled where ``m`` (``np.copyto``, about twice as fast as np.where's three-operand
    loop), else np.where itself."""
    if a.flags.c_contiguous and fill.dtype == a.dtype:
        out = a.copy()
        np.copyto(out, fill, where=m)
        return out
    return np.where(m, fill, a)


# ------------------------------------------------------------------- regularisation
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, *,  # noqa: ARG001
            rng: np.random.Generator | int | None = None) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by 1 / (1 - p) (float64, one
    rounding); identity when not training. ``rng``: a Generator or seed, else the generator of
    :func:`fpsim.autograd.manual_seed`. ``inplace`` is accepted for PyTorch compatibility and
    ignored (a new tensor is returned).

    >>> dropout(Tensor([1.0, 1.0]), 0.5, training=False).tolist()
    [1.0, 1.0]
    """
    x = as_tensor(input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    keep = get_generator(rng).random(x.shape) >= p
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    factor = keep * scale
    with np.errstate(invalid="ignore"):  # a dropped inf is NaN, silently (as PyTorch)
        out = round_to(widen(x._data) * factor, x.fmt)
    return make_result(out, x.fmt, (x,), lambda g: (widen(g) * factor,), "dropout")


# ----------------------------------------------------------------------- normalisation
def _affine_parts(x: Tensor, weight, bias, shape: tuple):
    parents, fmt = [x], x.fmt
    w64 = b64 = None
    wt = bt = None
    if weight is not None:
        wt = as_tensor(weight)
        if wt.shape != shape:
            raise ValueError(f"weight shape {wt.shape} does not match the normalized shape "
                             f"{shape}")
        parents.append(wt)
        fmt = promote_formats(fmt, wt.fmt)
        w64 = widen(wt._data)
    if bias is not None:
        bt = as_tensor(bias)
        if bt.shape != shape:
            raise ValueError(f"bias shape {bt.shape} does not match the normalized shape {shape}")
        parents.append(bt)
        fmt = promote_formats(fmt, bt.fmt)
        b64 = widen(bt._data)
    return parents, fmt, wt, w64, bt, b64


def layer_norm(input: Tensor, normalized_shape, weight=None, bias=None,
               eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing ``normalized_shape`` dims
    (biased variance), in float64 with one rounding.

    >>> layer_norm(Tensor([[1.0, 3.0]], "fp64"), 2).tolist()[0][1] > 0.99
    True
    """
    input, weight, bias = autocast_args("layer_norm", input, weight, bias)
    x = as_tensor(input)
    ns = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(
        normalized_shape)
    k = len(ns)
    if x.shape[x.ndim - k:] != ns or k > x.ndim:
        raise ValueError(f"layer_norm: normalized_shape {ns} does not match the last "
                         f"dimensions of input shape {x.shape}")
    parents, fmt, wt, w64, bt, b64 = _affine_parts(x, weight, bias, ns)
    axes = tuple(range(x.ndim - k, x.ndim))
    xd = x._data
    # block by block along the rows over one normalised dim (:func:`_tiles`); x - mu, rstd and
    # xhat as whole arrays for the backward
    xs, blocks = _tiles(xd, ns[0] if k == 1 else 1, k == 1 and plain_rounding())
    one = len(blocks) == 1
    ax = axes if one else -1
    if not one:
        xhat_all, rstd_all = np.empty(xs.shape), np.empty((xs.shape[0], 1))
        out = np.empty(xs.shape, fmt.storage_dtype)
    with np.errstate(all="ignore"):  # infinities and NaNs give NaN silently, as PyTorch
        for blk in blocks:
            xb = xs[blk]
            x64 = widen(xb)
            # the float64 ops of (x - mu) * rstd * w + b, x - mu computed once, in buffers of
            # their own (fewer fresh temporaries)
            mu = x64.mean(axis=ax, keepdims=True)
            xhat = np.subtract(x64, mu, out=_own(x64, xb) if one else xhat_all[blk])
            sq = np.square(xhat)  # ** 2's own loop
            var = sq.mean(axis=ax, keepdims=True)
            rstd = 1.0 / np.sqrt(var + eps)
            xhat *= rstd
            y = xhat if w64 is None else np.multiply(xhat, w64, out=sq)
            if b64 is not None:
                y = np.add(y, b64, out=sq)
            if one:
                out = round_to(y, fmt)
            else:
                rstd_all[blk] = rstd
                _store_rounded(out, blk, y, fmt)
    if not one:
        out = out.reshape(xd.shape)
        xhat = xhat_all.reshape(xd.shape)
        rstd = rstd_all.reshape(xd.shape[:-1] + (1,))
    del x64, sq, y
    n = int(np.prod(ns))
    lead = tuple(range(x.ndim - k))

    def backward(g):
        g64 = widen(g)
        # the weight's and bias's sums first, so that the input's gradient can reuse g64's
        # buffer (the widened copy when it is one) and g * xhat's, when both are C-contiguous
        # (every array then is, the layouts, and so the sums' orders, of the fresh arrays)
        reuse = g64.flags.c_contiguous and xhat.flags.c_contiguous
        dw = db = gx = prod = None
        if bt is not None and bt._requires_grad:
            db = g64.sum(axis=lead)
        if wt is not None and wt._requires_grad:
            prod = g64 * xhat
            dw = prod.sum(axis=lead)
        if x._requires_grad:
            own = _own(g64, g) if reuse else None
            gxhat = g64 if w64 is None else np.multiply(g64, w64, out=own)
            # rstd / n * (n gxhat - sum(gxhat) - xhat sum(gxhat xhat)), the same ops in two
            # buffers
            r = np.multiply(gxhat, xhat, out=prod if reuse else None)
            s2 = r.sum(axis=axes, keepdims=True)
            np.multiply(n, gxhat, out=r)
            r -= gxhat.sum(axis=axes, keepdims=True)
            mine = w64 is not None or own is not None  # gxhat: an array of this backward's
            r -= np.multiply(xhat, s2, out=gxhat if mine else None)
            gx = np.multiply(rstd / n, r, out=r)
        grads = [gx]
        if wt is not None:
            grads.append(dw)
        if bt is not None:
            grads.append(db)
        return tuple(grads)

    return make_result(out, fmt, parents, backward, "layer_norm")


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight=None, bias=None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Batch normalisation over all dims but 1 (input (N, C) or (N, C, ...)). Training: batch
    statistics (biased variance to normalise), and the running buffers, when given, become
    (1 - momentum) * running + momentum * batch statistic (unbiased variance), computed in
    float64 and rounded once to each buffer's format. Eval: the running statistics.

    >>> x = Tensor([[1.0], [3.0]], "fp64")
    >>> batch_norm(x, None, None, training=True).tolist()[1][0] > 0.99
    True
    """
    input, weight, bias = autocast_args("batch_norm", input, weight, bias)
    x = as_tensor(input)
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected input of shape (N, C, ...), got {x.shape}")
    c = x.shape[1]
    parents, fmt, wt, w64, bt, b64 = _affine_parts(x, weight, bias, (c,))
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)
    x64 = widen(x._data)
    n = x._data.size // builtins.max(c, 1)
    for name, buf in (("running_mean", running_mean), ("running_var", running_var)):
        if buf is not None and not isinstance(buf, Tensor):  # updated in place: a Tensor
            raise TypeError(f"batch_norm: {name} must be a Tensor or None, got "
                            f"{type(buf).__name__} {buf!r}")
    use_batch = training or running_mean is None or running_var is None
    if use_batch:
        if training and n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {x.shape}")
        with np.errstate(all="ignore"):  # infinities and NaNs give NaN silently, as PyTorch
            mu = x64.mean(axis=axes)
            var = ((x64 - mu.reshape(bshape)) ** 2).mean(axis=axes)
        if training:
            for buf, stat in ((running_mean, mu), (running_var, var * n / builtins.max(n - 1, 1))):
                if buf is not None:
                    if buf.shape != (c,):
                        raise ValueError(f"batch_norm: running statistic shape {buf.shape} "
                                         f"does not match {c} channels")
                    buf._data = round_to((1.0 - momentum) * widen(buf._data) + momentum * stat,
                                         buf.fmt)
    else:
        mu, var = widen(running_mean._data), widen(running_var._data)
    with np.errstate(all="ignore"):
        rstd = (1.0 / np.sqrt(var + eps)).reshape(bshape)
        xhat = (x64 - mu.reshape(bshape)) * rstd
        y = xhat if w64 is None else xhat * w64.reshape(bshape)
        if b64 is not None:
            y = y + b64.reshape(bshape)
    out = round_to(y, fmt)

    def backward(g):
        g64 = widen(g)
        gxhat = g64 if w64 is None else g64 * w64.reshape(bshape)
        grads = []
        if x._requires_grad:
            if use_batch:
                gx = rstd / n * (n * gxhat - gxhat.sum(axis=axes, keepdims=True)
                                 - xhat * (gxhat * xhat).sum(axis=axes, keepdims=True))
            else:
                gx = gxhat * rstd
            grads.append(gx)
        else:
            grads.append(None)
        if wt is not None:
            grads.append((g64 * xhat).sum(axis=axes) if wt._requires_grad else None)
        if bt is not None:
            grads.append(g64.sum(axis=axes) if bt._requires_grad else None)
        return tuple(grads)

    return make_result(out, fmt, parents, backward, "batch_norm")


from .conv import avg_pool2d, conv2d, max_pool2d  # noqa: E402 - they use the Tensor methods
from .losses import cross_entropy, mse_loss, nll_loss  # noqa: E402 - the same

_tensor.bind_ops(sys.modules[__name__])  # Tensor's methods call the ops above
