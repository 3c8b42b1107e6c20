"""Block-scaled training: a fake-quantized Linear whose GEMM operands are MX or NVFP4 values.

:class:`MXLinear` keeps fp32 master weights; every GEMM of a training step (forward
``y = x W^T``, data gradient ``dx = g W``, weight gradient ``dW = g^T x``) reads operands
quantized with :func:`fpsim.mx.quantize` along that GEMM's reduction dimension and dequantized
(exact for MX), then multiplies them under the engine's ``"fp32"`` accumulation model (float64
products summed, one rounding to fp32). The bias and its gradient stay fp32. This is fake
quantization: the values are bit-exact block-scaled values, the accumulation order is not a
hardware's (see :func:`fpsim.mx.matmul` for block-wise accumulation models).

Recipes (``recipe=``), each choice with its source:

- ``"mxfp8"``, NVIDIA Transformer Engine's ``MXFP8BlockScaling`` (TE 2.x): E4M3 elements for
  every operand of both passes (TE's default ``Format.E4M3`` for MXFP8), one E8M0 scale per
  1x32 block along the reduction dimension of each GEMM (TE makes a row-wise and a
  column-wise copy of each tensor, so the weight is re-quantized along ``out_features`` for
  the data gradient and the activations along the batch for the weight gradient), the scale
  rounded up (``rceil``: TE's ``float_to_e8m0`` with ``cvt.rp``, and cuBLAS's "1D block
  scaling" for FP8 with UE8M0 scales), round to nearest even.
- ``"nvfp4"``, NVIDIA's NVFP4 pretraining recipe (NVIDIA, "Pretraining Large Language Models
  with NVFP4", arXiv:2509.25149, 2025; TE's ``NVFP4BlockScaling``): fp4 e2m1 elements with an
  e4m3 scale per 1x16 block and an fp32 per-tensor scale ``amax / (6 * 448)`` (section 2);
  weights quantized in 16x16 2-D blocks so that the forward and backward passes see the same
  quantized weight (``weight_2d``, section 4.3); a 16x16 random Hadamard transform with a
  fixed random sign vector applied to both inputs of the weight-gradient GEMM along the batch
  dimension (``hadamard``, section 4.2; the transform cancels in the product, ``(H g)^T (H x)
  = g^T x``, and spreads outliers before quantization); stochastic rounding of the gradients
  (``stochastic_gradients``, section 4.4; weights and activations round to nearest even). The
  recipe's fourth element, keeping some layers in higher precision (the last ones, section
  4.1), is a model choice: use a BF16 ``nn.Linear`` there (as ``fpsim quant`` does).

``stochastic_gradients``, ``hadamard`` and ``weight_2d`` override a recipe's defaults (the
ablations), and ``tensor_scale=False`` drops NVFP4's second scale level (the fp32 per-tensor
scale, section 2): the e4m3 block scales alone, clamped at 2**-6 as torchao does, cannot reach
values below about 2**-8, which is where the gradients of a mean-reduced loss live (docs/mx.md,
"Where FP4 fails"). ``rng`` seeds the stochastic rounding and the Hadamard signs.

>>> import numpy as np
>>> from fpsim.autograd.tensor import Tensor
>>> lin = MXLinear(32, 2, recipe="mxfp8", rng=0)
>>> lin.weight.data = np.full((2, 32), 0.5); lin.bias.data = [0.0, 1.0]
>>> lin(Tensor(np.ones((1, 32)))).tolist()
[[16.0, 17.0]]
"""

from __future__ import annotations

import math

import numpy as np

from .. import mx
from ..autograd.context import round_to, widen
from ..autograd.tensor import Tensor, make_result
from ..checks import as_int
from ..formats import FP32
from ..nn import init
from ..nn.module import Module, Parameter
from ..state import as_generator
from .layers import linear_like

__all__ = ["MXLinear", "RECIPES", "hadamard16", "fake_quantize_mx", "fake_quantize_nbytes"]

# recipe: (format, scale mode, stochastic gradients, hadamard on wgrad, 2-D weight blocks)
RECIPES = {
    "mxfp8": ("mxfp8_e4m3", "rceil", False, False, False),
    "nvfp4": ("nvfp4", "floor", True, True, True),
}
_TILE = 16  # NVFP4's block, and the 2-D weight tile and Hadamard size of the recipe


def hadamard16(signs: np.ndarray) -> np.ndarray:
    """The recipe's 16x16 random Hadamard matrix ``H diag(signs) / 4`` (orthogonal).

    >>> h = hadamard16(np.ones(16))
    >>> bool(np.allclose(h @ h.T, np.eye(16)))
    True
    """
    h = np.array([[1.0]])
    while h.shape[0] < _TILE:
        h = np.block([[h, h], [h, -h]])  # Sylvester's construction
    return h * np.asarray(signs, dtype=np.float64)[None, :] / math.sqrt(_TILE)


def fake_quantize_mx(x: np.ndarray, fmt: str, axis: int, scale_mode: str = "floor",
                     rounding: str = "nearest_even", rng=None,
                     tensor_scale: bool = True) -> np.ndarray:
    """``x`` quantized along ``axis`` and dequantized (float32); NVFP4 with the recipe's
    per-tensor scale ``amax / (6 * 448)`` (none for an all-zero tensor, or with
    ``tensor_scale=False``: block scales only).

    >>> fake_quantize_mx(np.array([[0.3, 1.0, 7.0, 0.0]]), "mxfp4", axis=1).tolist()
    [[0.5, 1.0, 6.0, 0.0]]
    """
    # quantize(...).dequantize(), without the codes where it can (nearest even)
    if fmt == "nvfp4":
        pts = _tensor_scale(x) if tensor_scale else None
        return mx.dequantized(x, fmt, axis=axis, rounding=rounding, rng=rng,
                              per_tensor_scale=pts)
    return mx.dequantized(x, fmt, axis=axis, scale_mode=scale_mode, rounding=rounding, rng=rng)


def fake_quantize_nbytes(w: np.ndarray, fmt: str, tensor_scale: bool = True) -> int:
    """Storage of ``w`` quantized along its rows (axis 1) in ``fmt``, NVFP4's per-tensor
    scale included (unless ``tensor_scale=False``).

    >>> fake_quantize_nbytes(np.ones((2, 32), np.float32), "nvfp4")  # 32 + 4 scales + 4
    40
    """
    pts = _tensor_scale(w) if fmt == "nvfp4" and tensor_scale else None
    q = mx.quantize(w, fmt, axis=1, per_tensor_scale=pts)
    return q.nbytes


def _tensor_scale(x: np.ndarray) -> float | None:
    """NVFP4's per-tensor scale of ``x``, None where it is 0 or not finite, or its float32
    reciprocal is not (a tensor of values below ~1e-35: mx.quantize refuses such a scale)."""
    pts = mx.nvfp4_per_tensor_scale(x)
    if not (pts > 0 and math.isfinite(pts)):
        return None
    with np.errstate(over="ignore"):
        return pts if np.isfinite(np.float32(1) / np.float32(pts)) else None


def _quantize_weight_2d(w: np.ndarray, rounding: str, rng,
                        tensor_scale: bool = True) -> np.ndarray:
    """NVFP4 with one scale per 16x16 tile of ``w`` (zero-padded to whole tiles): the tiles laid
    out as rows of 256 values, quantized as blocks of 256, and put back."""
    o, i = w.shape
    po, pi = -(-o // _TILE) * _TILE, -(-i // _TILE) * _TILE
    pad = np.zeros((po, pi), np.float32)
    pad[:o, :i] = w
    tiles = pad.reshape(po // _TILE, _TILE, pi // _TILE, _TILE).transpose(0, 2, 1, 3)
    tiles = tiles.reshape(po // _TILE, pi // _TILE, _TILE * _TILE)
    d = mx.dequantized(tiles, "nvfp4", block_size=_TILE * _TILE, rounding=rounding, rng=rng,
                       per_tensor_scale=_tensor_scale(w) if tensor_scale else None)
    d = d.reshape(po // _TILE, pi // _TILE, _TILE, _TILE).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(d.reshape(po, pi)[:o, :i])


def _rht_rows(a: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``a`` (N x C) with every group of 16 rows multiplied by ``h`` (rows zero-padded to a
    multiple of 16; zero rows add nothing to the weight gradient)."""
    n, c = a.shape
    pn = -(-n // _TILE) * _TILE
    pad = np.zeros((pn, c))
    pad[:n] = a
    return np.einsum("ij,gjc->gic", h, pad.reshape(pn // _TILE, _TILE, c)).reshape(pn, c)


def _gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The engine's fp32 model: float64 products summed, rounded once to fp32."""
    return np.asarray(round_to(a.astype(np.float64) @ b.astype(np.float64), FP32))


class MXLinear(Module):
    """Linear layer trained with block-scaled GEMM operands (module docstring for the recipes
    and their sources).

    - ``recipe``: ``"mxfp8"`` or ``"nvfp4"``.
    - ``stochastic_gradients``, ``hadamard``, ``weight_2d``: None for the recipe's choice, or a
      bool (NVFP4's ablations; ``weight_2d`` needs NVFP4).
    - ``tensor_scale``: NVFP4's fp32 per-tensor scale on every operand (default True; False:
      e4m3 block scales only, the failure case of docs/mx.md).
    - ``rng``: seed or Generator for the initialisation, stochastic rounding and the Hadamard
      sign vector.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 recipe: str = "mxfp8", stochastic_gradients: bool | None = None,
                 hadamard: bool | None = None, weight_2d: bool | None = None,
                 tensor_scale: bool = True,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        if recipe not in RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}; valid: {', '.join(map(repr, RECIPES))}")
        fmt, smode, sr, rht, w2d = RECIPES[recipe]
        self.recipe, self.fmt, self.scale_mode = recipe, fmt, smode
        self.stochastic_gradients = sr if stochastic_gradients is None else bool(
            stochastic_gradients)
        self.hadamard = rht if hadamard is None else bool(hadamard)
        self.weight_2d = w2d if weight_2d is None else bool(weight_2d)
        if self.weight_2d and fmt != "nvfp4":
            raise ValueError("weight_2d (16x16 weight blocks) is part of the NVFP4 recipe; "
                             f"recipe {recipe!r} quantizes weights in 1x32 blocks")
        self.tensor_scale = bool(tensor_scale)
        if not self.tensor_scale and fmt != "nvfp4":
            raise ValueError("tensor_scale=False drops NVFP4's per-tensor scale; recipe "
                             f"{recipe!r} has E8M0 block scales only already")
        # sizes as nn.Linear takes them: ints >= 1 (1 / sqrt(in_features) bounds the bias)
        in_features = as_int("in_features", in_features, 1)
        out_features = as_int("out_features", out_features, 1)
        self.in_features, self.out_features = in_features, out_features
        self._rng = np.random.default_rng() if rng is None else as_generator(rng)
        self.weight = Parameter(np.zeros((out_features, in_features)), FP32)
        if bias:
            self.bias = Parameter(np.zeros(out_features), FP32)
        else:
            self.register_parameter("bias", None)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), rng=self._rng)  # nn.Linear's init
        if bias:
            bound = 1 / math.sqrt(in_features)
            init.uniform_(self.bias, -bound, bound, rng=self._rng)
        # one fixed random sign vector for the layer's Hadamard transforms (the recipe fixes it)
        self._h = hadamard16(self._rng.choice([-1.0, 1.0], _TILE))

    @classmethod
    def from_linear(cls, linear: Module, **kwargs) -> MXLinear:
        """An MXLinear starting from ``linear``'s weight and bias."""
        return linear_like(cls, linear, **kwargs)

    def _q(self, a: np.ndarray, axis: int, gradient: bool = False) -> np.ndarray:
        sr = gradient and self.stochastic_gradients
        return fake_quantize_mx(a, self.fmt, axis, self.scale_mode,
                                "stochastic" if sr else "nearest_even", self._rng,
                                self.tensor_scale)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"input has shape {x.shape}, expected (..., {self.in_features})")
        x32 = x.numpy(np.float32).reshape(-1, self.in_features)
        w32 = self.weight.numpy(np.float32)
        xq = self._q(x32, axis=1)  # forward: blocks along in_features
        if self.weight_2d:
            wq = _quantize_weight_2d(w32, "nearest_even", self._rng, self.tensor_scale)
            wq_t = wq  # the same quantized weight serves the data gradient
        else:
            wq = self._q(w32, axis=1)
            wq_t = None
        out32 = _gemm(xq, wq.T)
        parents = [x, self.weight]
        if self.bias is not None:
            with np.errstate(over="ignore"):
                out32 = out32 + self.bias.numpy(np.float32)  # fp32 bias epilogue
            parents.append(self.bias)
        out = round_to(out32.reshape(x.shape[:-1] + (self.out_features,)), FP32)
        x_shape = x.shape

        def backward(g):
            g32 = widen(g, np.float32).reshape(-1, self.out_features)
            grads = [None] * len(parents)
            if x.requires_grad:  # dgrad = g W: reduction over out_features
                w_d = wq_t if wq_t is not None else self._q(w32, axis=0)
                grads[0] = _gemm(self._q(g32, axis=1, gradient=True), w_d).reshape(x_shape)
            if self.weight.requires_grad:  # wgrad = g^T x: reduction over the batch
                gw, xw = g32, x32
                if self.hadamard:
                    gw, xw = _rht_rows(g32, self._h), _rht_rows(x32, self._h)
                grads[1] = _gemm(self._q(gw, axis=0, gradient=True).T, self._q(xw, axis=0))
            if len(parents) == 3 and parents[2].requires_grad:
                grads[2] = widen(g32).sum(axis=0)
            return tuple(grads)

        return make_result(out, FP32, parents, backward, "mx_linear")

    def inference_nbytes(self) -> int:
        """Bytes the quantized weight (packed elements and scales: one per 1x32 / 1x16 block,
        or per 16x16 tile with ``weight_2d``, plus NVFP4's fp32 per-tensor scale) and the fp32
        bias take."""
        w32 = self.weight.numpy(np.float32)
        bias = 0 if self.bias is None else 4 * self.bias.numel()
        if self.weight_2d:
            tiles = -(-self.out_features // _TILE) * -(-self.in_features // _TILE)
            return (w32.size * 4 + 7) // 8 + tiles + 4 * self.tensor_scale + bias
        return fake_quantize_nbytes(w32, self.fmt, self.tensor_scale) + bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"recipe={self.recipe}, stochastic_gradients={self.stochastic_gradients}, "
                f"hadamard={self.hadamard}, weight_2d={self.weight_2d}"
                + ("" if self.tensor_scale else ", tensor_scale=False"))
