"""fpsim: see, to the bit, what FP16, BF16, FP8, TF32 and INT8 do to a computation.

The core is a bit-exact rounding engine (:func:`round`) over :class:`Format` objects; everything
else (arithmetic, the tensor-core model, autograd and mixed-precision training) builds on it.

>>> import fpsim
>>> float(fpsim.round(0.1, fpsim.FP16))
0.0999755859375
"""

from . import autograd, functional, nn, optim
from .arithmetic import add, div, fma, mul, sqrt, sub
from .autograd import (
    Tensor,
    enable_grad,
    is_grad_enabled,
    manual_seed,
    matmul_accumulation,
    no_grad,
    set_grad_enabled,
)
from .autograd.checkpoint import checkpoint, checkpoint_sequential
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

# Higher layers load on first use (``fpsim.tensorcore``, ``fpsim.viz``, ...), so that
# ``import fpsim`` stays light and never pulls matplotlib in by itself.
_SUBMODULES = ("amp", "datasets", "distributed", "integer", "memory", "mx", "quant", "tensorcore",
               "training", "viz", "models", "probe")


def __getattr__(name: str):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'fpsim' has no attribute {name!r}")

__version__ = "0.1.0"

__all__ = [
    "BF16", "FP4_E2M1", "FP6_E2M3", "FP6_E3M2", "FP8_E4M3", "FP8_E4M3FNUZ", "FP8_E5M2",
    "FP8_E5M2FNUZ", "FP16", "FP32", "FP64", "INT4", "INT8", "INT16", "INT32", "INT_PRESETS",
    "UINT4", "UINT8", "IntFormat", "get_float_format", "get_int_format", "PRESETS", "TF32",
    "Fields", "FlagContext", "Flags", "FloatingPointTrap", "Format", "NaNEncoding", "Overflow",
    "Rounding", "RoundingPolicy", "Subnormals", "Tininess", "checkpoint",
    "checkpoint_sequential", "Tensor",
    "autograd", "enable_grad", "functional", "is_grad_enabled", "manual_seed",
    "matmul_accumulation", "nn", "no_grad", "optim", "set_grad_enabled", "add", "sub", "mul",
    "div", "sqrt", "fma", "sum", "dot", "Order", "IntOverflow", "round_to_integral", "to_int",
    "all_values", "bit_string", "cast", "classify", "fields", "flag_context", "from_bits",
    "get_format", "list_formats", "next_down", "next_up", "round", "round_pair", "seed", "to_bits",
    "ulp", "__version__",
]
