"""Quantization numerics: observers and qparams (PyTorch), fake quantization and LSQ
gradients, integer-only int8 inference (TFLite requantization), NF4 with double quantization
(bitsandbytes / QLoRA) and FP8 delayed scaling (Transformer Engine).

Everything here is NumPy; the autograd FakeQuantize modules build on :func:`fake_quantize`,
:func:`fake_quantize_ste_mask` and :func:`lsq_grad`.

>>> import numpy as np
>>> import fpsim.quant as q
>>> obs = q.MinMaxObserver(dtype="quint8")
>>> _ = obs(np.array([-1.0, 3.0], np.float32))
>>> s, z = obs.calculate_qparams()
>>> q.fake_quantize(np.array([0.5, 10.0], np.float32), float(s[0]), int(z[0]), 0, 255)
array([0.5019608, 2.9960785], dtype=float32)
"""

from .fake_quant import (
    dequantize,
    fake_quantize,
    fake_quantize_per_channel,
    fake_quantize_ste_mask,
    lsq_grad,
    lsq_grad_scale,
    lsq_init_step,
    quantize,
    tensorrt_fake_quantize,
    tensorrt_quantize,
    tensorrt_scale,
)
from .fp8_scaling import DelayedScaling, fp8_dequantize, fp8_quantize, fp8_scale
from .int8 import (
    int8_linear,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from .nf4 import (
    NF4_THRESHOLDS,
    NF4_VALUES,
    VALID_BLOCK_SIZES,
    DoubleQuantized,
    bits_per_parameter,
    create_dynamic_map,
    double_dequantize,
    double_quantize,
    nf4_dequantize,
    nf4_quantize,
    pack_4bit,
    unpack_4bit,
)
from .observers import MinMaxObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver
from .qparams import (
    FLOAT32_EPS,
    VALID_QUANT_BITS,
    QDtype,
    QScheme,
    as_qdtype,
    as_qscheme,
    calculate_qmin_qmax,
    calculate_qparams,
    quant_range,
)

__all__ = [
    "DelayedScaling", "DoubleQuantized", "FLOAT32_EPS", "MinMaxObserver",
    "MovingAverageMinMaxObserver", "NF4_THRESHOLDS", "NF4_VALUES", "PerChannelMinMaxObserver",
    "QDtype", "QScheme", "VALID_BLOCK_SIZES", "VALID_QUANT_BITS", "as_qdtype", "as_qscheme",
    "bits_per_parameter", "calculate_qmin_qmax", "calculate_qparams", "create_dynamic_map",
    "dequantize", "double_dequantize", "double_quantize", "fake_quantize",
    "fake_quantize_per_channel", "fake_quantize_ste_mask", "fp8_dequantize", "fp8_quantize",
    "fp8_scale", "int8_linear", "lsq_grad", "lsq_grad_scale", "lsq_init_step",
    "multiply_by_quantized_multiplier", "nf4_dequantize", "nf4_quantize", "pack_4bit",
    "quant_range", "quantize", "quantize_multiplier", "rounding_divide_by_pot",
    "saturating_rounding_doubling_high_mul", "tensorrt_fake_quantize", "tensorrt_quantize",
    "tensorrt_scale", "unpack_4bit",
]
