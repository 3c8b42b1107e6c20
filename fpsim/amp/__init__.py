"""Mixed-precision training helpers: loss scalers (PyTorch, Apex, DeepSpeed), Apex opt levels
and instrumentation of underflow, lost updates and exponent ranges.

>>> from fpsim.amp import GradScaler
>>> GradScaler().get_scale()
65536.0
"""

from .deepspeed_scaler import DynamicLossScaler
from .instrument import (
    ExponentHistogram,
    LostUpdates,
    RangeShading,
    StepRecord,
    TrainingMonitor,
    UnderflowStats,
    exponent_histogram,
    fp16_range_shading,
    lost_updates,
    merge_histograms,
    nonfinite_count,
    underflow_stats,
)
from .opt_levels import OPT_LEVELS, OptLevel, describe_opt_level, get_opt_level
from .scaler import ApexLossScaler, GradScaler, OptState, StaticLossScaler

__all__ = [
    "GradScaler", "StaticLossScaler", "ApexLossScaler", "DynamicLossScaler", "OptState",
    "OPT_LEVELS", "OptLevel", "describe_opt_level", "get_opt_level",
    "underflow_stats", "UnderflowStats", "nonfinite_count", "lost_updates", "LostUpdates",
    "exponent_histogram", "ExponentHistogram", "merge_histograms", "fp16_range_shading",
    "RangeShading", "StepRecord", "TrainingMonitor",
]
