"""Quantization numerics: observers and qparams (PyTorch), fake quantization and LSQ
gradients, integer-only int8 inference (TFLite requantization), NF4 with double quantization
(bitsandbytes / QLoRA) and FP8 delayed scaling (Transformer Engine).

The numerics are NumPy; the layers on the autograd engine build on them: QAT and PTQ
(:mod:`fpsim.quant.qat`: FakeQuantize, LSQFakeQuantize, prepare / prepare_qat / convert),
integer-only Int8Linear / Int8Conv2d, NF4Linear and FP8Linear (:mod:`fpsim.quant.layers`),
block-scaled training with MXLinear (MXFP8 / NVFP4 recipes, :mod:`fpsim.quant.mx_layers`),
LoRA / QLoRA with memory accounting (:mod:`fpsim.quant.lora`) and the experiment behind
``fpsim quant`` (:mod:`fpsim.quant.experiment`).

Quantizing a language model (:class:`fpsim.models.GPT`): group-wise weight-only INT4 / NF4
(:mod:`fpsim.quant.groupwise`), SmoothQuant (:mod:`fpsim.quant.smoothquant`) and W8A8
(:mod:`fpsim.quant.w8a8`), KV-cache int8 / fp8 (:mod:`fpsim.quant.kv_cache`), measured by
:mod:`fpsim.quant.lm_eval`.

>>> import numpy as np
>>> import fpsim.quant as q
>>> obs = q.MinMaxObserver(dtype="quint8")
>>> _ = obs(np.array([-1.0, 3.0], np.float32))
>>> s, z = obs.calculate_qparams()
>>> q.fake_quantize(np.array([0.5, 10.0], np.float32), float(s[0]), int(z[0]), 0, 255)
array([0.5019608, 2.9960785], dtype=float32)
"""

from .experiment import format_result, run_experiment
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
from .groupwise import (
    GROUPWISE_MODES,
    GroupQuantized,
    groupwise_dequantize,
    groupwise_fake_quantize,
    groupwise_quantize,
    quantize_model_weights,
)
from .int8 import (
    int8_linear,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from .kv_cache import KV_GRANULARITIES, attention_error, kv_fake_quantize, quantize_kv_cache
from .layers import (
    FP8Linear,
    Int8Conv2d,
    Int8Linear,
    NF4Linear,
    QParams,
    model_size_bytes,
)
from .lm_eval import lm_loss, logits_difference
from .lora import (
    LoRALinear,
    TrainingMemory,
    full_finetune_memory,
    lora_parameters,
    prepare_qlora,
    training_memory,
)
from .mx_layers import MXLinear
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
from .qat import (
    FakeQuantize,
    LSQFakeQuantize,
    MovingAveragePerChannelMinMaxObserver,
    ObserverModule,
    QATConv2d,
    QATLinear,
    QConfig,
    convert,
    disable_fake_quant,
    disable_observer,
    enable_fake_quant,
    enable_observer,
    fake_quantize_ste,
    get_default_qat_qconfig,
    get_default_qconfig,
    lsq_fake_quantize,
    prepare,
    prepare_qat,
    quantize_ptq,
)
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
from .smoothquant import calibrate_activation_max, smooth_gpt, smoothing_factors
from .w8a8 import INT8_GRANULARITIES, W8A8Linear, int8_fake_quantize, quantize_w8a8

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
    # layers on the autograd engine
    "FP8Linear", "FakeQuantize", "Int8Conv2d", "Int8Linear", "LSQFakeQuantize", "LoRALinear",
    "MXLinear", "MovingAveragePerChannelMinMaxObserver", "NF4Linear", "ObserverModule", "QATConv2d",
    "QATLinear", "QConfig", "QParams", "TrainingMemory", "convert", "disable_fake_quant",
    "disable_observer", "enable_fake_quant", "enable_observer", "fake_quantize_ste",
    "format_result", "full_finetune_memory", "get_default_qat_qconfig", "get_default_qconfig",
    "lora_parameters", "lsq_fake_quantize", "model_size_bytes", "prepare", "prepare_qat",
    "prepare_qlora", "quantize_ptq", "run_experiment", "training_memory",
    # quantizing a language model (course notebook 13)
    "GROUPWISE_MODES", "GroupQuantized", "INT8_GRANULARITIES", "KV_GRANULARITIES",
    "W8A8Linear", "attention_error", "calibrate_activation_max", "groupwise_dequantize",
    "groupwise_fake_quantize", "groupwise_quantize", "int8_fake_quantize", "kv_fake_quantize",
    "lm_loss", "logits_difference", "quantize_kv_cache", "quantize_model_weights",
    "quantize_w8a8", "smooth_gpt", "smoothing_factors",
]
