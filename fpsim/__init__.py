"""fpsim: see, to the bit, what FP16, BF16, FP8, TF32 and INT8 do to a computation.

The core is a bit-exact rounding engine (:func:`round`) over :class:`Format` objects; everything
else (arithmetic, the tensor-core model, autograd and mixed-precision training) builds on it.

>>> import fpsim
>>> float(fpsim.round(0.1, fpsim.FP16))
0.0999755859375
"""

from .arithmetic import add, div, fma, mul, sqrt, sub
from .encoding import (
    Fields,
    all_values,
    bit_string,
    classify,
    fields,
    from_bits,
    next_down,
    next_up,
    to_bits,
    ulp,
)
from .flags import FlagContext, Flags, FloatingPointTrap, flag_context
from .formats import (
    BF16,
    FP4_E2M1,
    FP6_E2M3,
    FP6_E3M2,
    FP8_E4M3,
    FP8_E4M3FNUZ,
    FP8_E5M2,
    FP8_E5M2FNUZ,
    FP16,
    FP32,
    FP64,
    INT4,
    INT8,
    INT16,
    INT32,
    INT_PRESETS,
    PRESETS,
    TF32,
    UINT4,
    UINT8,
    Format,
    IntFormat,
    NaNEncoding,
    get_float_format,
    get_format,
    get_int_format,
    list_formats,
)
from .integer import IntOverflow, round_to_integral, to_int
from .modes import Overflow, Rounding, Subnormals, Tininess
from .reductions import Order, dot, sum
from .rounding import RoundingPolicy, cast, round, round_pair, seed

# Everything above the numerics core loads on first use (``fpsim.Tensor``, ``fpsim.nn``,
# ``fpsim.tensorcore``, ...), so that ``import fpsim`` loads the core only: no autograd, nn or
# optim until one is used, and never matplotlib by itself.
_SUBMODULES = ("amp", "autograd", "datasets", "distributed", "functional", "integer", "memory",
               "models", "mx", "nn", "optim", "probe", "quant", "tensorcore", "training", "viz")
# name -> the module that defines it (loaded on first use, then cached in this module)
_LAZY = {
    **dict.fromkeys(("Tensor", "enable_grad", "is_grad_enabled", "manual_seed",
                     "matmul_accumulation", "no_grad", "set_grad_enabled"), "autograd"),
    **dict.fromkeys(("checkpoint", "checkpoint_sequential"), "autograd.checkpoint"),
}


def __getattr__(name: str):
    import importlib

    if name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    elif name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'fpsim' has no attribute {name!r}")
    globals()[name] = value  # later uses are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    # formats
    "BF16", "FP4_E2M1", "FP6_E2M3", "FP6_E3M2", "FP8_E4M3", "FP8_E4M3FNUZ", "FP8_E5M2",
    "FP8_E5M2FNUZ", "FP16", "FP32", "FP64", "INT4", "INT8", "INT16", "INT32", "INT_PRESETS",
    "PRESETS", "TF32", "UINT4", "UINT8", "Format", "IntFormat", "NaNEncoding", "get_float_format",
    "get_format", "get_int_format", "list_formats",
    # rounding
    "Overflow", "Rounding", "RoundingPolicy", "Subnormals", "Tininess", "cast", "round",
    "round_pair", "seed",
    # flags
    "FlagContext", "Flags", "FloatingPointTrap", "flag_context",
    # encoding
    "Fields", "all_values", "bit_string", "classify", "fields", "from_bits", "next_down",
    "next_up", "to_bits", "ulp",
    # arithmetic, integers, reductions
    "add", "div", "fma", "mul", "sqrt", "sub", "IntOverflow", "round_to_integral", "to_int",
    "Order", "dot", "sum",
    # autograd (loaded on first use)
    "Tensor", "autograd", "checkpoint", "checkpoint_sequential", "enable_grad", "functional",
    "is_grad_enabled", "manual_seed", "matmul_accumulation", "nn", "no_grad", "optim",
    "set_grad_enabled",
    "__version__",
]
