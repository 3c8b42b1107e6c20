"""Quantized layers on the autograd engine: integer-only INT8 inference, NF4 weight-only
(QLoRA's base layer) and FP8 training with delayed scaling.

- :class:`Int8Linear` / :class:`Int8Conv2d`: inference only. The input is quantized with its
  calibrated ``(scale, zero_point)`` as ``torch.quantize_per_tensor`` does (FBGEMM: the zero
  point added before one float32 rounding; :func:`fpsim.quant.quantize`), multiplied as
  integers with the int8 weights into an exact int32 accumulator (IMMA / DP4A semantics: int8 x int8
  products, int32 sums, an overflow is an error), the int32 bias added, and the accumulator
  requantized to the output's 8-bit grid by TensorFlow Lite's fixed-point multiplier
  (:func:`fpsim.quant.int8_linear`, bit-exact); the output is dequantized to float32 so that
  float layers (and the next quantized layer) can follow. Each layer is a quantize -> integer
  GEMM -> requantize -> dequantize island, as an ONNX "QDQ" graph; when the next quantized
  layer reuses this layer's output ``(scale, zero_point)`` (what :func:`fpsim.quant.convert`
  arranges in a Sequential), re-quantizing the dequantized output gives back the same integers,
  so a chain of layers computes exactly what an all-integer pipeline computes
  (:meth:`Int8Linear.forward_int`). Narrower integer grids (2 to 8 bits) live in int8 / uint8
  containers. The bias is quantized to int32 with scale ``x_scale * w_scale`` and zero point 0
  (TFLite's convention; PyTorch's fbgemm keeps a float bias instead).
- :class:`NF4Linear`: the weight stored as NF4 codes in blocks of 64 with double-quantized
  absmax constants (:func:`fpsim.quant.nf4_quantize`, bitsandbytes' layout); the forward pass
  dequantizes the weight to bf16 (``bf16(float32(code value * absmax))``, as bitsandbytes'
  ``dequantize_4bit``), casts the input to bf16 and multiplies with fp32 accumulation
  (cuBLAS' bf16 GEMM with ``CUBLAS_COMPUTE_32F``: the engine's ``"fp32"`` model, exact
  products summed and rounded to fp32), rounding the output to bf16. The base is frozen: only
  the input receives a gradient.
- :class:`FP8Linear`: Transformer Engine's FP8 linear with per-tensor delayed scaling. Forward:
  input and weight cast to E4M3 with their scales (:class:`fpsim.quant.DelayedScaling`), the
  products of fp8 values accumulated in fp32, the accumulator descaled by the float32 product
  of the two ``scale_inv`` and the bias added in fp32. Backward: the incoming gradient cast to
  E5M2 with its own delayed scale; ``dgrad = grad_fp8 @ w_fp8`` and ``wgrad = grad_fp8.T @
  x_fp8`` accumulated in fp32 and descaled the same way; the bias gradient is the fp32 sum of
  the unquantized gradient. In training mode every forward first folds the previous step's
  amaxes into the histories and updates the scales, so each step uses scales computed from the
  steps before it (the scale lags by one step, as in TE).

:func:`model_size_bytes` adds up what a model stores for inference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..autograd import functional as F
from ..autograd.accumulate import gemm_acc
from ..autograd.context import as_accumulation, get_accumulation, round_to, widen
from ..autograd.operands import ints as _ints
from ..autograd.tensor import Tensor, as_format, make_result
from ..checks import as_int, as_int_in, as_stored_scale
from ..formats import BF16, FP16, FP32, Format
from ..nn import init
from ..nn.module import Module, Parameter, as_module
from .fake_quant import dequantize, quantize
from .fp8_scaling import DelayedScaling, as_fp8_format, fp8_values
from .int8 import int8_linear
from .nf4 import (
    DoubleQuantized,
    double_quantize,
    nf4_dequantize,
    nf4_quantize,
    pack_4bit,
    unpack_4bit,
)
from .qparams import real_array

__all__ = [
    "QParams",
    "INT8_LAYER_BITS",
    "Int8Linear",
    "Int8Conv2d",
    "NF4Linear",
    "FP8Linear",
    "model_size_bytes",
]

INT8_LAYER_BITS = (2, 3, 4, 5, 6, 7, 8)
_I32_MAX = (1 << 31) - 1


def check_bits(bits) -> int:
    """``bits`` as an int in :data:`INT8_LAYER_BITS` (ValueError naming the valid widths;
    TypeError for what ``range()`` does not take, :func:`fpsim.checks.as_int`).

    >>> check_bits(4)
    4
    """
    return as_int_in("bits", bits, INT8_LAYER_BITS,
                     "unsupported bit width {!r} for an integer layer (int8 containers)")


@dataclass(frozen=True)
class QParams:
    """How one tensor is quantized: float32 ``scale`` and int64 ``zero_point`` (shape (1,) per
    tensor, (C,) per channel along ``axis``) and the integer range.

    >>> qp = QParams(np.array([0.5], np.float32), np.array([3]), 0, 15)
    >>> qp.bits, qp.signed, qp.container
    (4, False, 'uint8')
    """

    scale: np.ndarray
    zero_point: np.ndarray
    quant_min: int
    quant_max: int
    axis: int | None = None

    def __post_init__(self) -> None:
        s = np.atleast_1d(as_stored_scale("scales", real_array(self.scale, "scales")))
        z = np.atleast_1d(np.asarray(self.zero_point))
        if z.dtype.kind not in "iuf" or (z.dtype.kind == "f" and not (
                np.isfinite(z).all() and (z == np.round(z)).all())):
            raise TypeError(f"zero points must be integers, got {self.zero_point!r}")
        z = z.astype(np.int64)
        if not (np.isfinite(s).all() and (s > 0).all()):
            raise ValueError(f"scales must be finite and positive, got {self.scale!r}")
        if s.shape != z.shape:
            raise ValueError(f"scale and zero_point shapes differ: {s.shape} vs {z.shape}")
        qmin, qmax = int(self.quant_min), int(self.quant_max)
        if not qmin < qmax:
            raise ValueError(f"the integer range [{qmin}, {qmax}] is empty or a single value "
                             "(a zero range)")
        if qmin < -128 or qmax > 255 or (qmin < 0 and qmax > 127):
            raise ValueError(f"[{qmin}, {qmax}] does not fit an int8 or uint8 container")
        if (z < qmin).any() or (z > qmax).any():
            raise ValueError(f"zero_point {z.tolist()} outside [{qmin}, {qmax}]")
        if self.axis is None and s.size != 1:
            raise ValueError("per-tensor qparams need exactly one scale (or give axis)")
        object.__setattr__(self, "scale", s)
        object.__setattr__(self, "zero_point", z)
        object.__setattr__(self, "quant_min", qmin)
        object.__setattr__(self, "quant_max", qmax)

    @property
    def signed(self) -> bool:
        """True for a signed (int8-held) range."""
        return self.quant_min < 0

    @property
    def container(self) -> str:
        """"int8" or "uint8": the storage of the integers."""
        return "int8" if self.signed else "uint8"

    @property
    def bits(self) -> int:
        """The width of the integer grid: ceil(log2(quant_max - quant_min + 1))."""
        return (self.quant_max - self.quant_min).bit_length()

    @property
    def per_channel(self) -> bool:
        """True when there is one scale per channel."""
        return self.axis is not None


def _as_f32(x) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.numpy()
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiuV":
        raise TypeError(f"expected real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float32)


def _quantize_bias(bias, x_qp: QParams, w_qp: QParams, n_out: int) -> np.ndarray | None:
    """int32 bias with scale ``x_scale * w_scale`` (float64 product of the float32 scales),
    zero point 0, rounded half to even; a value that does not fit int32 is an error (it means
    a zero or tiny range: the scale ``x_scale * w_scale`` is too small for the bias)."""
    if bias is None:
        return None
    b = _as_f32(bias).astype(np.float64).reshape(-1)
    if b.shape != (n_out,):
        raise ValueError(f"bias has shape {b.shape}, expected ({n_out},)")
    if not np.isfinite(b).all():
        raise ValueError("the bias contains NaN or infinity")
    bscale = np.float64(x_qp.scale[0]) * np.broadcast_to(w_qp.scale.astype(np.float64), (n_out,))
    q = np.rint(b / bscale)
    bad = np.abs(q) > _I32_MAX
    if bad.any():
        c = int(np.flatnonzero(bad)[0])
        raise ValueError(f"the bias of output channel {c} ({b[c]!r}) does not fit int32 at "
                         f"scale x_scale * w_scale = {bscale[c]!r}: the input or weight range "
                         "is zero or tiny (e.g. calibration saw only zeros)")
    return q.astype(np.int32)


class _Int8Base(Module):
    """Shared state of the integer layers: quantized weight, int32 bias and qparams."""

    def __init__(self, weight_q: np.ndarray, bias_q: np.ndarray | None, input_qparams: QParams,
                 weight_qparams: QParams, output_qparams: QParams, relu: bool = False,
                 requantize: str = "tflite") -> None:
        super().__init__()
        for name, qp in (("input_qparams", input_qparams), ("weight_qparams", weight_qparams),
                         ("output_qparams", output_qparams)):
            if not isinstance(qp, QParams):
                raise TypeError(f"{name} must be a QParams, got {type(qp).__name__}")
        if input_qparams.per_channel or output_qparams.per_channel:
            raise ValueError("activations are quantized per tensor")
        if not weight_qparams.signed or (weight_qparams.zero_point != 0).any():
            raise ValueError("weights must be quantized symmetrically to a signed range "
                             "(zero point 0), as PyTorch's qint8 weight observers do")
        if weight_qparams.per_channel and weight_qparams.axis != 0:
            raise ValueError(f"per-channel weight scales must be on axis 0 (output channels), "
                             f"got axis {weight_qparams.axis}")
        wq = np.asarray(weight_q)
        if wq.dtype != np.int8:
            raise TypeError(f"weight_q must be int8, got dtype {wq.dtype}")
        if wq.size and (wq.min() < weight_qparams.quant_min or
                        wq.max() > weight_qparams.quant_max):
            raise ValueError("weight_q holds values outside the weight's quantization range")
        n_out = wq.shape[0]
        if weight_qparams.per_channel and weight_qparams.scale.size != n_out:
            raise ValueError(f"{weight_qparams.scale.size} weight scales for {n_out} output "
                             "channels")
        if requantize not in ("tflite", "float"):
            raise ValueError(f"unknown requantize {requantize!r}; valid: 'tflite', 'float'")
        self.weight_q = wq
        self.bias_q = None if bias_q is None else np.asarray(bias_q, dtype=np.int32)
        if self.bias_q is not None and self.bias_q.shape != (n_out,):
            raise ValueError(f"bias_q must have shape ({n_out},)")
        self.input_qparams = input_qparams
        self.weight_qparams = weight_qparams
        self.output_qparams = output_qparams
        self.relu = bool(relu)
        self.requantize = requantize

    @staticmethod
    def _quantize_weight(weight, w_qp: QParams) -> np.ndarray:
        w = _as_f32(weight)
        if not np.isfinite(w).all():
            raise ValueError("the weight contains NaN or infinity")
        return quantize(w, w_qp.scale if w_qp.per_channel else w_qp.scale[0],
                        w_qp.zero_point if w_qp.per_channel else w_qp.zero_point[0],
                        w_qp.quant_min, w_qp.quant_max, "int8",
                        axis=0 if w_qp.per_channel else None)

    def quantize_input(self, x) -> np.ndarray:
        """The input's integers (int8 or uint8 container) with the input qparams; NaN raises.

        >>> lin = Int8Linear.from_float(np.eye(2, dtype=np.float32), None,
        ...     QParams([1 / 64], [0], 0, 255), QParams([1 / 64], [0], -128, 127),
        ...     QParams([1 / 64], [0], 0, 255))
        >>> lin.quantize_input(np.array([[0.5, 5.0]], np.float32)).tolist()
        [[32, 255]]
        """
        qp = self.input_qparams
        return quantize(_as_f32(x), qp.scale[0], qp.zero_point[0], qp.quant_min, qp.quant_max,
                        qp.container)

    def _gemm_int(self, xq2: np.ndarray, wq2: np.ndarray) -> np.ndarray:
        """(M, K) input integers x (N, K) weights -> requantized (M, N) output integers."""
        iq, wqp, oq = self.input_qparams, self.weight_qparams, self.output_qparams
        ws = wqp.scale if wqp.per_channel else wqp.scale[0]
        yq = int8_linear(xq2, wq2, self.bias_q, iq.scale[0], iq.zero_point[0], ws, 0,
                         oq.scale[0], oq.zero_point[0], out_dtype=oq.container,
                         requantize=self.requantize)
        lo = max(oq.quant_min, int(oq.zero_point[0])) if self.relu else oq.quant_min
        return np.clip(yq, lo, oq.quant_max).astype(yq.dtype)  # narrow grid, fused ReLU

    def dequantize_output(self, yq: np.ndarray) -> np.ndarray:
        """float32 ``(yq - out_zero_point) * out_scale``."""
        oq = self.output_qparams
        return dequantize(yq, oq.scale[0], oq.zero_point[0])

    def forward(self, x: Tensor) -> Tensor:
        """Quantize ``x``, compute on integers, dequantize: an fp32 Tensor without a graph
        (inference only)."""
        yq = self.forward_int(self.quantize_input(x))
        return Tensor.wrap(self.dequantize_output(yq), FP32)

    def forward_int(self, xq: np.ndarray) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def inference_nbytes(self, packed: bool = True) -> int:
        """Bytes stored for inference: weights (packed to their bit width when ``packed``,
        else one byte each), int32 bias, per-channel float32 scales and int32 zero points of
        the weight, and the (scale, zero point) of input and output."""
        n = self.weight_q.size
        wbytes = math.ceil(n * self.weight_qparams.bits / 8) if packed else n
        bbytes = 0 if self.bias_q is None else 4 * self.bias_q.size
        return wbytes + bbytes + 8 * self.weight_qparams.scale.size + 2 * 8

    def extra_repr(self) -> str:
        w, i, o = self.weight_qparams, self.input_qparams, self.output_qparams
        per = "per-channel" if w.per_channel else "per-tensor"
        return (f"weight {tuple(self.weight_q.shape)} {w.bits}-bit {per}, input [{i.quant_min}, "
                f"{i.quant_max}], output [{o.quant_min}, {o.quant_max}], relu={self.relu}")


class Int8Linear(_Int8Base):
    """Integer-only fully-connected layer (see the module docstring): int8 weights (N, K),
    int32 bias, exact int32 accumulation, TFLite requantization, optional fused ReLU
    (the output clamped below at its zero point, TFLite's fused activation).

    >>> w = np.array([[0.5, -0.25], [1.0, 0.75]], np.float32)
    >>> lin = Int8Linear.from_float(w, np.array([0.1, 0.0], np.float32),
    ...     QParams([1 / 128], [0], 0, 255), QParams([1 / 127, 1 / 127], [0, 0], -128, 127, 0),
    ...     QParams([1 / 32], [128], 0, 255))
    >>> lin(Tensor([[1.0, 0.5]])).tolist()
    [[0.46875, 1.375]]
    """

    def __init__(self, weight_q: np.ndarray, bias_q: np.ndarray | None, input_qparams: QParams,
                 weight_qparams: QParams, output_qparams: QParams, relu: bool = False,
                 requantize: str = "tflite") -> None:
        if np.asarray(weight_q).ndim != 2:
            raise ValueError(f"weight_q must be (out_features, in_features), got shape "
                             f"{np.asarray(weight_q).shape}")
        super().__init__(weight_q, bias_q, input_qparams, weight_qparams, output_qparams, relu,
                         requantize)
        self.out_features, self.in_features = self.weight_q.shape

    @classmethod
    def from_float(cls, weight, bias, input_qparams: QParams, weight_qparams: QParams,
                   output_qparams: QParams, relu: bool = False,
                   requantize: str = "tflite") -> Int8Linear:
        """Quantize a float weight (N, K) and bias (N,) with the given qparams (per-channel
        weight qparams on axis 0)."""
        wq = cls._quantize_weight(weight, weight_qparams)
        bq = _quantize_bias(bias, input_qparams, weight_qparams, wq.shape[0])
        return cls(wq, bq, input_qparams, weight_qparams, output_qparams, relu, requantize)

    def forward_int(self, xq: np.ndarray) -> np.ndarray:
        """Integer input (..., K) -> requantized integer output (..., N) (int8 / uint8)."""
        xq = np.asarray(xq)
        if xq.ndim < 1 or xq.shape[-1] != self.in_features:
            raise ValueError(f"input has shape {xq.shape}, expected (..., {self.in_features})")
        yq = self._gemm_int(xq.reshape(-1, self.in_features), self.weight_q)
        return yq.reshape(xq.shape[:-1] + (self.out_features,))


class Int8Conv2d(_Int8Base):
    """Integer-only 2-D convolution by im2col (the padding filled with the input's zero point,
    the integer that stands for 0.0) and :func:`fpsim.quant.int8_linear`; weight (C_out, C,
    kh, kw), stride and zero padding as :class:`fpsim.nn.Conv2d`.

    >>> conv = Int8Conv2d.from_float(np.ones((1, 1, 2, 2), np.float32), None,
    ...     QParams([1 / 16], [0], 0, 255), QParams([1 / 127], [0], -128, 127, 0),
    ...     QParams([1 / 16], [0], 0, 255))
    >>> conv(Tensor(np.full((1, 1, 3, 3), 0.5))).tolist()
    [[[[2.0, 2.0], [2.0, 2.0]]]]
    """

    def __init__(self, weight_q: np.ndarray, bias_q: np.ndarray | None, input_qparams: QParams,
                 weight_qparams: QParams, output_qparams: QParams, relu: bool = False,
                 requantize: str = "tflite", stride=1, padding=0) -> None:
        if np.asarray(weight_q).ndim != 4:
            raise ValueError(f"weight_q must be (C_out, C, kh, kw), got shape "
                             f"{np.asarray(weight_q).shape}")
        super().__init__(weight_q, bias_q, input_qparams, weight_qparams, output_qparams, relu,
                         requantize)
        self.stride = _ints(stride, "stride", "Int8Conv2d", 1)  # 0 or < 0 would slice wrongly
        self.padding = _ints(padding, "padding", "Int8Conv2d", 0)

    @classmethod
    def from_float(cls, weight, bias, input_qparams: QParams, weight_qparams: QParams,
                   output_qparams: QParams, relu: bool = False, requantize: str = "tflite",
                   stride=1, padding=0) -> Int8Conv2d:
        """Quantize a float weight (C_out, C, kh, kw) and bias with the given qparams."""
        wq = cls._quantize_weight(weight, weight_qparams)
        bq = _quantize_bias(bias, input_qparams, weight_qparams, wq.shape[0])
        return cls(wq, bq, input_qparams, weight_qparams, output_qparams, relu, requantize,
                   stride, padding)

    def forward_int(self, xq: np.ndarray) -> np.ndarray:
        """Integer input (N, C, H, W) -> requantized integer output (N, C_out, OH, OW)."""
        xq = np.asarray(xq)
        cout, c, kh, kw = self.weight_q.shape
        if xq.ndim != 4 or xq.shape[1] != c:
            raise ValueError(f"input has shape {xq.shape}, expected (N, {c}, H, W)")
        (sh, sw), (ph, pw) = self.stride, self.padding
        zp = int(self.input_qparams.zero_point[0])
        if ph or pw:
            xq = np.pad(xq, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=zp)
        n, _, h, w = xq.shape
        if h < kh or w < kw:
            raise ValueError(f"kernel {(kh, kw)} is larger than the padded input {(h, w)}")
        win = np.lib.stride_tricks.sliding_window_view(xq, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        oh, ow = win.shape[2], win.shape[3]
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
        yq = self._gemm_int(cols, self.weight_q.reshape(cout, -1))
        return np.ascontiguousarray(yq.reshape(n, oh, ow, cout).transpose(0, 3, 1, 2))


# -- NF4 --------------------------------------------------------------------------------------

def _compute_format(fmt: Format | str) -> Format:
    f = as_format(fmt)
    if f not in (BF16, FP16, FP32):
        raise ValueError(f"unsupported compute format {f.name!r}; valid: bf16, fp16, fp32")
    return f


class NF4Linear(Module):
    """A frozen linear layer whose weight is stored in NF4 (module docstring): ``y = bf16(x)
    @ bf16(dequantize(W)).T + b`` with fp32 accumulation, output in ``compute_fmt`` (bf16).

    >>> lin = NF4Linear(np.full((2, 64), 0.5, np.float32))  # 64 B of codes + 10 B of absmax
    >>> lin(Tensor(np.ones((1, 64)))).tolist(), lin.weight_nbytes()
    ([[32.0, 32.0]], 74)
    """

    def __init__(self, weight, bias=None, *, block_size: int = 64, double_quant: bool = True,
                 compute_fmt: Format | str = BF16, accumulation="fp32") -> None:
        super().__init__()
        w = _as_f32(weight)
        if w.ndim != 2:
            raise ValueError(f"weight must be (out_features, in_features), got shape {w.shape}")
        self.compute_fmt = _compute_format(compute_fmt)
        self.accumulation = as_accumulation(accumulation)
        codes, absmax = nf4_quantize(w, block_size)
        self.block_size = int(block_size)
        self.out_features, self.in_features = w.shape
        self.packed_codes = pack_4bit(codes)
        self.absmax: np.ndarray | DoubleQuantized = (double_quantize(absmax) if double_quant
                                                     else absmax)
        self.double_quant = bool(double_quant)
        if bias is None:
            self.register_buffer("bias", None)
        else:
            b = _as_f32(bias).reshape(-1)
            if b.shape != (self.out_features,):
                raise ValueError(f"bias has shape {b.shape}, expected ({self.out_features},)")
            self.register_buffer("bias", Tensor(b, self.compute_fmt))  # frozen, as in QLoRA
        self._weight = None

    @classmethod
    def from_linear(cls, linear: Module, **kwargs) -> NF4Linear:
        """An NF4Linear holding ``linear``'s weight and bias (``kwargs`` as the constructor)."""
        bias = getattr(linear, "bias", None)
        return cls(linear.weight.numpy(np.float32), None if bias is None else
                   bias.numpy(np.float32), **kwargs)

    def codes(self) -> np.ndarray:
        """The NF4 codes (uint8 in [0, 16)), shape (out_features, in_features)."""
        n = self.out_features * self.in_features
        return unpack_4bit(self.packed_codes, n).reshape(self.out_features, self.in_features)

    def dequantize(self) -> np.ndarray:
        """The weight in ``compute_fmt`` storage: ``fmt(float32(NF4_VALUES[code] * absmax))``
        with the double-dequantized absmax."""
        if self._weight is None:  # the kernel dequantizes on every call; the values are equal
            dt = self.compute_fmt.storage_dtype
            self._weight = nf4_dequantize(self.codes(), self.absmax, self.block_size, dtype=dt)
        return self._weight

    def forward(self, x: Tensor) -> Tensor:
        xc = F.cast_to(x, self.compute_fmt) if isinstance(x, Tensor) else Tensor(
            x, self.compute_fmt)
        w = Tensor.wrap(self.dequantize(), self.compute_fmt)  # frozen: no gradient
        return F.linear(xc, w, self.bias, accumulation=self.accumulation)

    def weight_nbytes(self) -> int:
        """Bytes of the packed codes and the absmax constants (double-quantized: one byte per
        block, a float32 per 256 blocks and the float32 offset; else a float32 per block)."""
        if isinstance(self.absmax, DoubleQuantized):
            c = self.absmax.qabsmax.nbytes + self.absmax.absmax2.nbytes + 4
        else:
            c = self.absmax.nbytes
        return self.packed_codes.nbytes + c

    def inference_nbytes(self) -> int:
        """Weight bytes plus the bias in ``compute_fmt``."""
        return self.weight_nbytes() + (0 if self.bias is None else self.bias.data.nbytes)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"block_size={self.block_size}, double_quant={self.double_quant}, "
                f"compute={self.compute_fmt.name}")


# -- FP8 ---------------------------------------------------------------------------------------

def _fp8_accumulation(model):
    m = get_accumulation() if model is None else model
    if m.kind == "tensorcore":
        raise ValueError("FP8Linear supports the 'fp32', 'exact', sequential and pairwise "
                         "accumulation models: the tensor-core model takes one input format, "
                         "and the backward GEMMs mix E5M2 gradients with E4M3 operands")
    return m


def _descale(acc: np.ndarray, inv_a: np.float32, inv_b: np.float32) -> np.ndarray:
    """float32(float32(acc) * float32(inv_a * inv_b)): cuBLASLt's alpha = scale_a * scale_b."""
    with np.errstate(over="ignore"):
        return acc.astype(np.float32) * np.float32(inv_a * inv_b)


def linear_like(cls, linear: Module, **kwargs):
    """A ``cls(in_features, out_features, bias, **kwargs)`` layer (FP8Linear, MXLinear) starting
    from ``linear``'s float32 weight and bias."""
    out_f, in_f = linear.weight.shape
    layer = cls(in_f, out_f, linear.bias is not None, **kwargs)
    layer.weight.data = linear.weight.numpy(np.float32)
    if linear.bias is not None:
        layer.bias.data = linear.bias.numpy(np.float32)
    return layer


class FP8Linear(Module):
    """Linear layer trained in FP8 with Transformer Engine's delayed scaling (module
    docstring). The weight and bias are fp32 parameters (the master copy); E4M3 casts of the
    input and weight feed the forward GEMM, E5M2 casts of the output gradient the backward
    GEMMs. ``input_scaling``, ``weight_scaling`` and ``grad_scaling`` are the
    :class:`~fpsim.quant.DelayedScaling` states (``amax_history_len``, ``margin``,
    ``amax_compute_algo`` as TE's ``DelayedScaling`` recipe). ``accumulation``: the GEMMs'
    accumulation model (default: the engine's context, ``"fp32"``); the tensor-core model is
    refused because the backward GEMMs mix formats.

    >>> lin = FP8Linear(2, 1, rng=0)
    >>> lin.weight.data = [[0.5, 0.25]]; lin.bias.data = [0.0]
    >>> lin(Tensor([[3.0, 1.0]])).tolist()  # step 1: every scale is 1
    [[1.75]]
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 fwd_fmt: Format | str = "e4m3", bwd_fmt: Format | str = "e5m2",
                 amax_history_len: int = 16, amax_compute_algo: str = "max",
                 margin: float = 0, out_fmt: Format | str = FP32, accumulation=None,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        # sizes as nn.Linear takes them: ints >= 1 (1 / sqrt(in_features) bounds the bias)
        in_features = as_int("in_features", in_features, 1)
        out_features = as_int("out_features", out_features, 1)
        self.in_features, self.out_features = in_features, out_features
        self.fwd_fmt = as_fp8_format(fwd_fmt, "fwd_fmt")
        self.bwd_fmt = as_fp8_format(bwd_fmt, "bwd_fmt")
        self.out_fmt = as_format(out_fmt)
        self.accumulation = None if accumulation is None else _fp8_accumulation(
            as_accumulation(accumulation))
        self.weight = Parameter(np.zeros((out_features, in_features)), FP32)
        if bias:
            self.bias = Parameter(np.zeros(out_features), FP32)
        else:
            self.register_parameter("bias", None)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), rng=rng)  # nn.Linear's init
        if bias:
            bound = 1 / math.sqrt(in_features)
            init.uniform_(self.bias, -bound, bound, rng=rng)
        kw = dict(margin=margin, amax_history_len=amax_history_len,
                  amax_compute_algo=amax_compute_algo)
        self.input_scaling = DelayedScaling(self.fwd_fmt, **kw)
        self.weight_scaling = DelayedScaling(self.fwd_fmt, **kw)
        self.grad_scaling = DelayedScaling(self.bwd_fmt, **kw)
        self._pending = False
        self.steps = 0

    @classmethod
    def from_linear(cls, linear: Module, **kwargs) -> FP8Linear:
        """An FP8Linear starting from ``linear``'s weight and bias."""
        return linear_like(cls, linear, **kwargs)

    def update_scales(self) -> None:
        """Fold the recorded amaxes into the histories and compute the next scales (TE does
        this once per step; a training forward calls it for the previous step)."""
        for ds in (self.input_scaling, self.weight_scaling, self.grad_scaling):
            ds.update()
        self._pending = False

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"input has shape {x.shape}, expected (..., {self.in_features})")
        record = self.training
        if record and self._pending:
            self.update_scales()
        xs, ws, gs = self.input_scaling, self.weight_scaling, self.grad_scaling
        x32 = x.numpy(np.float32).reshape(-1, self.in_features)
        w32 = self.weight.numpy(np.float32)
        if record:
            self.steps += 1
            self._pending = True
            if x32.size:
                xs.record_amax(np.max(np.abs(x32)))
            ws.record_amax(np.max(np.abs(w32)))
        sx, sw = xs.scale, ws.scale
        xq = fp8_values(x32, sx, self.fwd_fmt)  # fp8_quantize's exact float64 values
        wq = fp8_values(w32, sw, self.fwd_fmt)
        model = _fp8_accumulation(self.accumulation)
        out32 = _descale(gemm_acc(xq, wq.T, model, self.fwd_fmt), xs.scale_inv, ws.scale_inv)
        parents = [x, self.weight]
        if self.bias is not None:
            with np.errstate(over="ignore"):
                out32 = out32 + self.bias.numpy(np.float32)  # the fp32 bias epilogue
            parents.append(self.bias)
        out = round_to(out32.reshape(x.shape[:-1] + (self.out_features,)), self.out_fmt)
        x_shape = x.shape
        sxi, swi = xs.scale_inv, ws.scale_inv

        def backward(g):
            g32 = widen(g, np.float32).reshape(-1, self.out_features)
            if record and g32.size:
                gs.record_amax(np.max(np.abs(g32)))
            gq = fp8_values(g32, gs.scale, self.bwd_fmt)
            m = _fp8_accumulation(self.accumulation)
            grads = [None] * len(parents)
            if x.requires_grad:
                grads[0] = _descale(gemm_acc(gq, wq, m, self.bwd_fmt), gs.scale_inv,
                                    swi).reshape(x_shape)
            if self.weight.requires_grad:
                grads[1] = _descale(gemm_acc(gq.T, xq, m, self.bwd_fmt), gs.scale_inv, sxi)
            if len(parents) == 3 and parents[2].requires_grad:
                grads[2] = widen(g32).sum(axis=0)
            return tuple(grads)

        return make_result(out, self.out_fmt, parents, backward, "fp8_linear")

    def inference_nbytes(self) -> int:
        """Bytes for FP8 inference: one byte per weight, fp32 bias, and the fp32 scales."""
        return self.weight.numel() + (0 if self.bias is None else 4 * self.bias.numel()) + 8

    def state_nbytes(self) -> int:
        """Extra training state: the fp8 weight copy and the three amax histories (float32)."""
        hist = sum(ds.amax_history.nbytes + 4 for ds in (self.input_scaling,
                                                         self.weight_scaling, self.grad_scaling))
        return self.weight.numel() + hist

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, fwd={self.fwd_fmt.name}, bwd={self.bwd_fmt.name}, "
                f"history={self.input_scaling.amax_history.size}")


def model_size_bytes(model: Module) -> int:
    """Bytes a model stores for inference: each quantized layer's ``inference_nbytes()``, and
    every other parameter and buffer at its storage width (fp32: 4 bytes).

    >>> from fpsim import nn
    >>> model_size_bytes(nn.Linear(64, 10, rng=0))  # (640 + 10) * 4
    2600
    """
    as_module(model, "model_size_bytes: model")
    total = 0
    seen: set[int] = set()
    for mod in model.modules():
        if id(mod) in seen:
            continue
        if hasattr(mod, "inference_nbytes"):
            total += int(mod.inference_nbytes())
            seen.update(id(m) for m in mod.modules())
            seen.update(id(p) for p in mod.parameters())
            continue
        for p in mod.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                total += p.data.nbytes
        for _, b in mod.named_buffers(recurse=False):
            total += b.data.nbytes
    return total
