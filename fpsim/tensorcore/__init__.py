"""Bit-exact model of GPU tensor-core / matrix-core multiply-accumulate, checked against real GPUs.

``matmul(A, B, C, gpu="A100", input_format="fp16", output_format="fp32")`` returns, bit for
bit, what the tensor cores of the named GPU compute (the block-FMA model of Khattak &
Mikaitis 2025: blocks of n exact products aligned to the largest exponent with a few extra
bits, truncated, added exactly, rounded once; blocks chained in ascending k). Every row of the
measured results in ``tests/data/tensorcore/`` (V100 to B200; fp16, bf16, tf32, fp8) is
reproduced. AMD matrix cores (MI100, MI210, MI250, MI300A, MI300X) and the RTX PRO 6000 follow
the published models (no measured AMD rows exist yet), built from :class:`BlockFMA`'s generic
parameters: exact or pairwise block sums, odd/even product groups, a late-added c, subnormal
flushing (docs/tensorcore-model.md). ``dot(..., explain=True)`` shows the steps;
:class:`BlockFMA` describes a custom unit ("what if the accumulator kept 3 extra bits?").

>>> import fpsim.tensorcore as tc
>>> # 1 - (1 - 2**-24): V100 aligns without an extra bit and loses the last one
>>> [float(tc.dot([1.0], [1.0], -(1 - 2.0**-24), gpu=g)) for g in ("V100", "A100", "H100")]
[1.1920928955078125e-07, 5.960464477539063e-08, 5.960464477539063e-08]
>>> # MI210 flushes the subnormal fp16 input 2**-24 and adds in fp32; MI300X adds c late
>>> [float(tc.dot([1.0, 1.0], [1.0, 2.0**-24], -(1 - 2.0**-24), gpu=g)) for g in ("MI210",
...                                                                               "MI300X")]
[5.960464477539063e-08, 1.1920928955078125e-07]
"""

from .accuracy import ErrorVsK, error_vs_k
from .explain import BlockStep, DotExplanation, TermStep
from .gpus import (
    GPUS,
    BlockFMA,
    BlockOverflow,
    GpuModel,
    get_gpu,
    list_gpus,
    resolve_unit,
    support_matrix,
)
from .hardware import (
    FileReport,
    HardwareFile,
    HardwareReport,
    Mismatch,
    check_hardware,
    load_hardware_file,
    model_results,
    parse_file_name,
    write_hardware_file,
)
from .model import CHUNK_ELEMENTS, convert_input, dot, matmul
from .promotion import PromotionResult, promotion_experiment

__all__ = [
    "matmul", "dot", "convert_input", "BlockFMA", "BlockOverflow", "GpuModel", "GPUS", "get_gpu",
    "list_gpus",
    "resolve_unit", "support_matrix", "DotExplanation", "BlockStep", "TermStep",
    "error_vs_k", "ErrorVsK", "HardwareFile", "load_hardware_file", "write_hardware_file",
    "parse_file_name", "model_results", "check_hardware", "HardwareReport", "FileReport",
    "Mismatch", "CHUNK_ELEMENTS", "promotion_experiment",
    "PromotionResult",
]
