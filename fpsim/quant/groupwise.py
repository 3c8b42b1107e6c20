"""Group-wise weight-only quantization of a language model's linear layers: INT4 (or 2 to 8
bits) round-to-nearest, symmetric or asymmetric, as GPTQ's and AWQ's RTN baseline, and NF4,
with one scale per group of ``group_size`` consecutive input channels of each output row.

A weight ``W`` (out_features, in_features) is cut along its input dimension into groups of
``group_size`` (128 by default, as GPTQ / AWQ ship it; ``None``: one group per row, i.e.
per-channel). Each group ``g`` gets a scale stored in ``scale_dtype`` (float16 by default, as
AWQ's checkpoints; or float32):

- ``mode="sym"`` (AWQ's ``pseudo_quantize_tensor(zero_point=False)``):
  ``s = absmax / (2**(bits-1) - 1)`` rounded to ``scale_dtype``, codes
  ``clamp(round_half_even(w / s), -2**(bits-1), 2**(bits-1) - 1)`` (int8); ``w ~ s * code``.
- ``mode="asym"`` (AWQ's ``zero_point=True``): ``s = max(max - min, 1e-5) / (2**bits - 1)``
  rounded to ``scale_dtype``, zero point ``z = clamp(-round(min / s), 0, 2**bits - 1)``
  (uint8), codes ``clamp(round(w / s) + z, 0, 2**bits - 1)`` (uint8); ``w ~ s * (code - z)``.
- ``mode="nf4"`` (QLoRA's NormalFloat, 4 bits only): :func:`fpsim.quant.nf4_quantize` on
  blocks that are the groups (its codes: bitsandbytes' comparison tree, uint8 in [0, 16)),
  the float32 absmax then stored in ``scale_dtype``; ``w ~ NF4_VALUES[code] * absmax``. NF4's
  block sizes are bitsandbytes' (:data:`fpsim.quant.VALID_BLOCK_SIZES`).

A group of zeros gets the scale 0 and dequantizes to zeros. The divisions are done in float64
with the stored scale, so ``dequantize`` gives back exactly ``s * code`` in float64 (then
``dtype``). Storage (:meth:`GroupQuantized.nbytes`) counts the codes at ``bits`` bits each
(packed two to a byte for 4 bits, as the kernels store them), the scales at their width and
the zero points at ``bits`` bits: INT4 with group 128 and float16 scales costs
``4/8 + 2/128 = 0.515625`` bytes per weight (``+ 0.5/128`` asymmetric).

:func:`quantize_model_weights` applies this to every :class:`fpsim.nn.Linear` below a model
(the GPT's c_attn, c_proj, c_fc, c_proj), on a copy: the embeddings and the tied output head
stay in their format, as GPTQ / AWQ leave them. The copy's weights hold the dequantized values
(weight-only quantization: the matmuls run in the model's format on ``s * code``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..checks import as_choice, as_int
from ..nn import Linear, Module
from .nf4 import NF4_VALUES, VALID_BLOCK_SIZES, nf4_quantize

__all__ = ["GROUPWISE_MODES", "GroupQuantized", "groupwise_quantize", "groupwise_dequantize",
           "groupwise_fake_quantize", "quantize_model_weights"]

GROUPWISE_MODES = ("sym", "asym", "nf4")
_SCALE_DTYPES = {"float16": np.float16, "float32": np.float32}
_AWQ_MIN_RANGE = 1e-5  # AWQ clamps max - min to at least 1e-5


@dataclass(frozen=True)
class GroupQuantized:
    """A weight quantized group-wise: ``codes`` (out, in) int8 / uint8, ``scales`` (out,
    in // group_size) in the scale dtype, ``zeros`` (asym only: uint8, like ``scales``)."""

    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None
    mode: str
    bits: int
    group_size: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The weight's shape (out_features, in_features)."""
        return self.codes.shape

    def nbytes(self) -> float:
        """Storage bytes: codes at ``bits`` bits each, scales at their width, zero points at
        ``bits`` bits each."""
        n = self.codes.size * self.bits / 8 + self.scales.nbytes
        if self.zeros is not None:
            n += self.zeros.size * self.bits / 8
        return float(n)

    def bytes_per_parameter(self) -> float:
        """:meth:`nbytes` over the number of weights."""
        return self.nbytes() / self.codes.size


def _bits(bits, mode: str) -> int:
    b = as_int("bits", bits, None)
    if mode == "nf4" and b != 4:
        raise ValueError(f"mode 'nf4' has 4-bit codes; bits must be 4, got {bits!r}")
    if not 2 <= b <= 8:
        raise ValueError(f"bits must be in 2 .. 8 for integer codes, got {bits!r}")
    return b


def _scale_dtype(scale_dtype) -> type:
    key = np.dtype(scale_dtype).name if isinstance(scale_dtype, type) and scale_dtype in (
        np.float16, np.float32) else scale_dtype
    if not isinstance(key, str) or key not in _SCALE_DTYPES:
        raise ValueError(f"scale_dtype must be 'float16' or 'float32', got {scale_dtype!r}")
    return _SCALE_DTYPES[key]


def _weight(w) -> np.ndarray:
    arr = np.asarray(w)
    if arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
        raise TypeError(f"weight must be a real array (out_features, in_features), got dtype "
                        f"{arr.dtype}")
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"weight must be a non-empty 2-d array (out_features, in_features), "
                         f"got shape {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError("weight contains NaN or infinity; group-wise scales need finite "
                         "values")
    return arr


def _group(group_size, in_features: int, mode: str) -> int:
    if group_size is None:
        g = in_features
    else:
        g = as_int("group_size", group_size, 1)
        if in_features % g:
            raise ValueError(f"group_size {g} does not divide in_features {in_features}; "
                             f"valid: a divisor of {in_features}, or None (one group per "
                             f"output channel)")
    if mode == "nf4" and g not in VALID_BLOCK_SIZES:
        raise ValueError(f"mode 'nf4' takes bitsandbytes' block sizes as groups; group_size "
                         f"{g} is not one of {VALID_BLOCK_SIZES}")
    return g


def _stored(values: np.ndarray, dtype: type) -> np.ndarray:
    with np.errstate(over="ignore"):
        s = values.astype(dtype)
    if not np.isfinite(s).all():
        raise ValueError(f"a group's scale {float(values.max()):.6g} overflows "
                         f"{np.dtype(dtype).name}; use scale_dtype='float32'")
    return s


def groupwise_quantize(w, group_size: int | None = 128, mode: str = "sym", bits: int = 4,
                       scale_dtype: str = "float16") -> GroupQuantized:
    """Quantize the weight ``w`` (out, in) in groups of ``group_size`` input channels (see
    the module docstring).

    >>> q = groupwise_quantize(np.array([[0.7, -0.35, 0.1, 0.0]]), group_size=2)
    >>> q.codes.tolist(), q.scales.tolist(), q.bytes_per_parameter()
    ([[7, -4, 7, 0]], [[0.0999755859375, 0.0142822265625]], 1.5)
    """
    mode = as_choice("group-wise quantization mode", mode, GROUPWISE_MODES)
    b = _bits(bits, mode)
    sd = _scale_dtype(scale_dtype)
    arr = _weight(w)
    out_f, in_f = arr.shape
    g = _group(group_size, in_f, mode)
    grouped = arr.reshape(out_f, in_f // g, g)
    zeros = None
    if mode == "nf4":
        codes, absmax = nf4_quantize(grouped.astype(np.float32), g)
        return GroupQuantized(codes.reshape(out_f, in_f), _stored(
            absmax.reshape(out_f, in_f // g), sd), None, mode, b, g)
    if mode == "sym":
        qmax, qmin = 2 ** (b - 1) - 1, -(2 ** (b - 1))
        s = _stored(np.abs(grouped).max(axis=2) / qmax, sd)
        s64 = s.astype(np.float64)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(s64 > 0, np.rint(grouped / s64), 0.0)
        codes = np.clip(q, qmin, qmax).astype(np.int8)
    else:
        qmax = 2**b - 1
        lo, hi = grouped.min(axis=2), grouped.max(axis=2)
        s = _stored(np.maximum(hi - lo, _AWQ_MIN_RANGE) / qmax, sd)
        s64 = s.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(s64 > 0, np.clip(-np.rint(lo / s64), 0, qmax), 0.0)
            q = np.where(s64[..., None] > 0, np.rint(grouped / s64[..., None]), 0.0)
        codes = np.clip(q + z[..., None], 0, qmax).astype(np.uint8)
        zeros = z.astype(np.uint8)
    return GroupQuantized(codes.reshape(out_f, in_f), s, zeros, mode, b, g)


def groupwise_dequantize(q: GroupQuantized, dtype=np.float32) -> np.ndarray:
    """The weight back from :func:`groupwise_quantize`: ``s * code`` (sym), ``s * (code -
    z)`` (asym) or ``NF4_VALUES[code] * s`` (nf4), computed in float64, cast to ``dtype``.

    >>> q = groupwise_quantize(np.array([[0.7, -0.35, 0.1, 0.0]]), group_size=2)
    >>> groupwise_dequantize(q, np.float64).tolist()
    [[0.6998291015625, -0.39990234375, 0.0999755859375, 0.0]]
    """
    if not isinstance(q, GroupQuantized):
        raise TypeError(f"groupwise_dequantize takes groupwise_quantize's result (a "
                        f"GroupQuantized), got {type(q).__name__}")
    out_f, in_f = q.codes.shape
    g = q.group_size
    c = q.codes.reshape(out_f, in_f // g, g)
    s = q.scales.astype(np.float64)[..., None]
    if q.mode == "nf4":
        vals = NF4_VALUES[c].astype(np.float64) * s
    elif q.mode == "sym":
        vals = c.astype(np.float64) * s
    else:
        vals = (c.astype(np.float64) - q.zeros.astype(np.float64)[..., None]) * s
    return vals.reshape(out_f, in_f).astype(dtype)


def groupwise_fake_quantize(w, group_size: int | None = 128, mode: str = "sym",
                            bits: int = 4, scale_dtype: str = "float16") -> np.ndarray:
    """``groupwise_dequantize(groupwise_quantize(w, ...))`` in float64.

    >>> w = np.array([[1.0, 0.5, 0.25, -1.0] * 8])  # NF4 groups: 32, 64, ... 4096 values
    >>> groupwise_fake_quantize(w, None, "nf4")[0, :4].round(4)
    array([ 1.    ,  0.4407,  0.2461, -1.    ])
    """
    return groupwise_dequantize(groupwise_quantize(w, group_size, mode, bits, scale_dtype),
                                np.float64)


def quantize_model_weights(model: Module, group_size: int | None = 128, mode: str = "sym",
                           bits: int = 4, scale_dtype: str = "float16"
                           ) -> tuple[Module, dict[str, GroupQuantized]]:
    """A copy of ``model`` whose every :class:`fpsim.nn.Linear` weight holds its group-wise
    quantized values (``model`` itself is not changed), and each layer's
    :class:`GroupQuantized` by name (for its bytes). A layer ``group_size`` does not divide
    is a ValueError naming it.

    >>> from fpsim.models import GPT
    >>> gpt = GPT(vocab_size=11, context=8, d_model=16, n_layers=1, n_heads=2, rng=0)
    >>> qgpt, qs = quantize_model_weights(gpt, group_size=16)
    >>> sorted(qs)[:2], qs["h.0.mlp.c_proj"].scales.shape
    (['h.0.attn.c_attn', 'h.0.attn.c_proj'], (16, 4))
    """
    if not isinstance(model, Module):
        raise TypeError(f"model must be an fpsim Module, got {type(model).__name__}")
    mode = as_choice("group-wise quantization mode", mode, GROUPWISE_MODES)
    _bits(bits, mode)
    _scale_dtype(scale_dtype)
    out = copy.deepcopy(model)
    done: dict[str, GroupQuantized] = {}
    for name, mod in out.named_modules():
        if type(mod) is not Linear:
            continue
        w = mod.weight.numpy(np.float64)
        try:
            q = groupwise_quantize(w, group_size, mode, bits, scale_dtype)
        except ValueError as e:
            raise ValueError(f"layer {name}: {e}") from None
        mod.weight.data = groupwise_dequantize(q, np.float64)
        done[name] = q
    if not done:
        raise ValueError("the model has no nn.Linear layer to quantize")
    return out, done
