"""Block-scaled formats: OCP Microscaling (MX) v1.0 and NVIDIA NVFP4, bit for bit.

``quantize(x, fmt, block_size, axis, scale_mode, rounding)`` returns an :class:`MXArray` with
the block ``scales`` (E8M0 as ``ml_dtypes.float8_e8m0fnu``; NVFP4's as ``float8_e4m3fn``), the
``elements`` in the element format's storage dtype, ``dequantize()`` and the real packed
``nbytes``; ``matmul(qa, qb, accumulate=...)`` is the spec's block dot product under fpsim's
accumulation models. Checked bit for bit against recorded torchao results and an exact
Fraction model of the spec (tests/test_mx*.py).

>>> import numpy as np, fpsim.mx as mx
>>> q = mx.quantize(np.linspace(-1, 1, 64, dtype=np.float32), "mxfp4")
>>> q.scales.shape, q.elements.dtype.name, q.nbytes
((2,), 'float4_e2m1fn', 34)
"""

from .formats import (
    MX_FORMATS,
    MXFormat,
    ScaleMode,
    as_scale_mode,
    get_mx_format,
)
from .matmul import block_dots, matmul
from .quantize import MXArray, dequantized, e8m0_exponent, nvfp4_per_tensor_scale, quantize

__all__ = ["quantize", "dequantized", "MXArray", "MXFormat", "ScaleMode", "MX_FORMATS",
           "get_mx_format", "as_scale_mode", "nvfp4_per_tensor_scale", "e8m0_exponent", "matmul",
           "block_dots"]
