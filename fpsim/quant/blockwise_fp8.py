"""DeepSeek-V3's fine-grained FP8 training of a linear layer (DeepSeek-AI, "DeepSeek-V3
Technical Report", arXiv:2412.19437, section 3.3).

- **Fine-grained scales** (3.3.2): activations are quantized in 1x128 tiles (per token, 128
  channels), weights in 128x128 blocks, each with its own scale ``amax / 448`` computed online
  from the tile (no delayed scaling, no amax history); every GEMM operand is E4M3, the
  gradients included (the report uses E4M3 for all tensors). In the backward pass the data
  gradient ``dx = g W`` reads ``g`` in 1x128 tiles along ``out_features`` and the weight in its
  128x128 blocks; the weight gradient ``dW = g^T x`` reads ``g`` and ``x`` in 128x1 tiles
  (128 tokens of one channel), since its reduction runs over the tokens.
- **Increased accumulation precision** (3.3.2): the tensor cores accumulate 128 products
  (N_C = 128, four WGMMAs) and the partial sum is then promoted to CUDA cores: multiplied by
  the two operands' scales and added into an FP32 accumulator. ``tensor_core=None`` (the
  default, used in training) takes each 128-product partial sum exactly and rounds it to fp32
  (an ideal fp32 tensor-core accumulator); ``tensor_core="H100"`` runs every partial sum
  through fpsim's published model of the H100's fp8 block-FMA
  (:func:`fpsim.tensorcore.matmul`), the limited-precision accumulator the promotion exists
  for. The tensor-core model costs about 0.2 s per 1024 x 128 x 192 product on one CPU core,
  so ``fpsim lm`` trains with ``None`` and measures the H100 path's difference on sampled
  GEMMs (docs/lm.md).

The weight and bias are fp32 parameters (the master copy); the bias is added in fp32 and its
gradient is the fp32 sum of the output gradient.

>>> import numpy as np
>>> from fpsim.autograd.tensor import Tensor
>>> lin = BlockwiseFP8Linear(2, 1)
>>> lin.weight.data = [[0.5, 0.25]]; lin.bias.data = [0.0]
>>> lin(Tensor([[448.0, 224.0]])).tolist()  # each tile's amax maps to 448: exact here
[[280.0]]
>>> lin(Tensor([[3.0, 1.0]])).tolist()  # 1 / (3 / 448) = 149.3 -> e4m3 144: 0.964, not 1
[[1.7410714626312256]]
"""

from __future__ import annotations

import math

import numpy as np

from .. import flags as _flags
from ..autograd.context import round_to, widen
from ..autograd.tensor import Tensor, make_result
from ..checks import as_int
from ..formats import FP32, get_float_format
from ..mx.quantize import block_amax, clamped_values32
from ..nn import init
from ..nn.module import Module, Parameter
from ..rounding import cast, policy_of
from .layers import linear_like

__all__ = ["BlockwiseFP8Linear", "quantize_tiles", "blockwise_gemm", "TILE"]

TILE = 128  # DeepSeek-V3's tile / block edge and its promotion interval N_C
_E4M3 = get_float_format("e4m3")
_E4M3_NEAREST = policy_of("fp8_e4m3")  # the tiles' elements, after the clamp


def quantize_tiles(a: np.ndarray, axis: int, tile: int = TILE,
                   block_axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``a`` (2-D) in E4M3 with one fp32 scale ``amax / 448`` per run of ``tile`` values along
    ``axis`` (and, with ``block_axis``, per ``tile`` x ``tile`` block). Returns the E4M3 values
    (float64, ``a``'s shape) and the scales: shape ``a.shape`` with ``axis`` (and
    ``block_axis``) cut to the number of tiles. A tile of zeros gets scale 1.

    >>> q, s = quantize_tiles(np.array([[1.0, -896.0, 3.0]]), axis=1)
    >>> s.tolist(), q.tolist()
    ([[2.0]], [[0.5, -448.0, 1.5]])
    """
    a = np.asarray(a, np.float32)
    if a.ndim != 2:
        raise ValueError(f"quantize_tiles takes a 2-D array, got shape {a.shape}")
    if axis not in (0, 1) or block_axis not in (None, 0, 1) or block_axis == axis:
        raise ValueError(f"axis must be 0 or 1 and block_axis None or the other axis, got "
                         f"axis={axis!r}, block_axis={block_axis!r}")
    t = as_int("tile", tile, 1)
    rows, cols = a.shape
    axes = {axis} | ({block_axis} if block_axis is not None else set())
    tr = t if 0 in axes else 1
    tc = t if 1 in axes else 1
    pr, pc = -(-rows // tr) * tr, -(-cols // tc) * tc
    if not _flags.flags_active():
        fast = _quantize_tiles_finite(a, tr, tc, pr, pc)
        if fast is not None:
            return fast
    pad = np.zeros((pr, pc), np.float32)
    pad[:rows, :cols] = np.abs(a)
    amax = pad.reshape(pr // tr, tr, pc // tc, tc).max(axis=(1, 3))
    scale = (amax / np.float32(_E4M3.max)).astype(np.float32)
    scale[scale == 0] = 1.0
    full = np.repeat(np.repeat(scale, tr, axis=0), tc, axis=1)[:rows, :cols]
    q = cast((a / full).astype(np.float32), _E4M3, overflow="saturate")
    return widen(q), scale  # the e4m3 storage by a 256-entry table, not ml_dtypes' loop


def _quantize_tiles_finite(a: np.ndarray, tr: int, tc: int, pr: int,
                           pc: int) -> tuple[np.ndarray, np.ndarray] | None:
    """quantize_tiles' result for a finite float32 ``a`` (None where a tile's amax is not
    finite: the general route's NaN rules apply), by the same float32 operations without its
    full-size copies: the tiles as a 4-D view of ``a`` (zero-padded only where the tiles do not
    divide it), the division by each tile's scale broadcast, and the saturating E4M3 cast as
    a clamp to +-448 and the nearest even E4M3 value of float32 (ml_dtypes' rounding, on
    E4M3's grid by :func:`fpsim.rounding.fast.values32`, without the codes): a value beyond
    448 rounds to 448 or above (480, e4m3's overflow), which saturation makes 448, and the
    clamp gives 448 too. tests/test_blockwise_fp8_fast.py checks it
    against the general route bit for bit."""
    rows, cols = a.shape
    if (pr, pc) == (rows, cols):
        pad = a
    else:
        pad = np.zeros((pr, pc), np.float32)
        pad[:rows, :cols] = a
    v = pad.reshape(pr // tr, tr, pc // tc, tc)
    amax = block_amax(v, (1, 3))
    if not np.isfinite(amax).all():
        return None
    scale = (amax / np.float32(_E4M3.max)).astype(np.float32)
    scale[scale == 0] = 1.0
    y = v / scale[:, None, :, None]  # float32 / float32: the division of the general route
    y = y.reshape(pr, pc)[:rows, :cols]
    return clamped_values32(y, _E4M3.max, _E4M3_NEAREST).astype(np.float64), scale


def _partial(a: np.ndarray, b: np.ndarray, tensor_core: str | None) -> np.ndarray:
    """One promotion interval's product: exact then fp32, or the GPU's block-FMA model."""
    if tensor_core is None:
        return np.asarray(round_to(a @ b, FP32), np.float32)
    from .. import tensorcore  # lazy: only the H100 check path needs it

    return np.asarray(tensorcore.matmul(a, b, gpu=tensor_core, input_format=_E4M3,
                                        output_format="fp32"), np.float32)


def blockwise_gemm(aq: np.ndarray, sa: np.ndarray, bq: np.ndarray, sb: np.ndarray,
                   tile: int = TILE, tensor_core: str | None = None) -> np.ndarray:
    """``A @ B`` from E4M3 operands ``aq`` (M, K), ``bq`` (K, N) and their scales per
    reduction tile, ``sa`` (M, ceil(K / tile)) and ``sb`` (ceil(K / tile), N): for each tile of
    K the partial product (exact, rounded to fp32; or ``tensor_core``'s model), times
    ``sa * sb`` in fp32, added into an fp32 accumulator (DeepSeek-V3's promotion).

    >>> aq = np.ones((1, 256)); bq = np.ones((256, 1))
    >>> blockwise_gemm(aq, np.array([[1.0, 2.0]]), bq, np.array([[1.0], [1.0]])).tolist()
    [[384.0]]
    """
    k = aq.shape[1]
    acc = np.zeros((aq.shape[0], bq.shape[1]), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j, k0 in enumerate(range(0, k, tile)):
            part = _partial(aq[:, k0:k0 + tile], bq[k0:k0 + tile], tensor_core)
            acc = acc + (part * sa[:, j:j + 1].astype(np.float32)) \
                * sb[j:j + 1].astype(np.float32)
    return acc


class BlockwiseFP8Linear(Module):
    """Linear layer trained with DeepSeek-V3's fine-grained FP8 recipe (module docstring).
    ``tensor_core``: None (exact 128-product partial sums rounded to fp32) or a GPU name of
    :data:`fpsim.tensorcore.GPUS` whose fp8 block-FMA model computes each partial sum."""

    grad_format_name = "e4m3 x 1x128 tile scales"

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 tensor_core: str | None = None,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        in_features = as_int("in_features", in_features, 1)
        out_features = as_int("out_features", out_features, 1)
        self.in_features, self.out_features = in_features, out_features
        if tensor_core is not None and not isinstance(tensor_core, str):
            raise TypeError(f"tensor_core must be None or a GPU name such as 'H100', got "
                            f"{type(tensor_core).__name__} {tensor_core!r}")
        self.tensor_core = tensor_core
        self.weight = Parameter(np.zeros((out_features, in_features)), FP32)
        if bias:
            self.bias = Parameter(np.zeros(out_features), FP32)
        else:
            self.register_parameter("bias", None)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), rng=rng)  # nn.Linear's init
        if bias:
            bound = 1 / math.sqrt(in_features)
            init.uniform_(self.bias, -bound, bound, rng=rng)

    @classmethod
    def from_linear(cls, linear: Module, **kwargs) -> BlockwiseFP8Linear:
        """A BlockwiseFP8Linear starting from ``linear``'s weight and bias."""
        return linear_like(cls, linear, **{"rng": 0, **kwargs})

    def quantize_grad(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The output gradient as the data-gradient GEMM reads it: E4M3 in 1x128 tiles along
        ``out_features`` (values times their tile's scale); and the saturated mask (none: the
        scale maps each tile's amax to 448)."""
        g2 = np.asarray(g, np.float32).reshape(-1, self.out_features)
        q, s = quantize_tiles(g2, axis=1)
        full = np.repeat(s, TILE, axis=1)[:, :self.out_features]
        return (q * full).reshape(np.shape(g)), np.zeros(np.shape(g), bool)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"input has shape {x.shape}, expected (..., {self.in_features})")
        tc = self.tensor_core
        x32 = x.numpy(np.float32).reshape(-1, self.in_features)
        w32 = self.weight.numpy(np.float32)
        xq, sx = quantize_tiles(x32, axis=1)  # 1x128 along in_features
        wq, sw = quantize_tiles(w32, axis=1, block_axis=0)  # 128x128 blocks
        n_out = self.out_features
        sw_cols = np.repeat(sw, TILE, axis=0)[:n_out].T  # (nK, out)
        out32 = blockwise_gemm(xq, sx, wq.T, sw_cols, tensor_core=tc)
        parents = [x, self.weight]
        if self.bias is not None:
            with np.errstate(over="ignore"):
                out32 = out32 + self.bias.numpy(np.float32)
            parents.append(self.bias)
        out = round_to(out32.reshape(x.shape[:-1] + (n_out,)), FP32)
        x_shape = x.shape

        def backward(g):
            g32 = widen(g, np.float32).reshape(-1, n_out)
            grads = [None] * len(parents)
            if x.requires_grad:  # dx = g W: reduction over out_features
                gq, sg = quantize_tiles(g32, axis=1)
                sw_rows = np.repeat(sw, TILE, axis=1)[:, :self.in_features]  # (nO, in)
                grads[0] = blockwise_gemm(gq, sg, wq, sw_rows, tensor_core=tc).reshape(x_shape)
            if self.weight.requires_grad:  # dW = g^T x: reduction over the tokens
                gq2, sg2 = quantize_tiles(g32, axis=0)  # 128x1 tiles
                xq2, sx2 = quantize_tiles(x32, axis=0)
                grads[1] = blockwise_gemm(gq2.T, sg2.T, xq2, sx2, tensor_core=tc)
            if len(parents) == 3 and parents[2].requires_grad:
                grads[2] = widen(g32).sum(axis=0)
            return tuple(grads)

        return make_result(out, FP32, parents, backward, "blockwise_fp8_linear")

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, tensor_core={self.tensor_core}")
