"""Mixed-precision training helpers: autocast (PyTorch's per-op cast policy), Apex's
initialize / scale_loss with opt levels O0-O3, loss scalers (PyTorch, Apex, DeepSpeed) and
instrumentation of underflow, lost updates and exponent ranges.

>>> from fpsim.amp import GradScaler
>>> GradScaler().get_scale()
65536.0
"""

from .autocast_policy import (
    AUTOCAST_POLICY,
    autocast,
    autocast_policy_table,
    get_autocast_dtype,
    get_autocast_policy,
    is_autocast_enabled,
    reset_autocast_policy,
    set_autocast_policy,
)
from .deepspeed_scaler import DynamicLossScaler
from .initialize import AmpOptimizer, AmpProperties, initialize, scale_loss
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
    "autocast", "autocast_policy_table", "AUTOCAST_POLICY", "get_autocast_policy",
    "set_autocast_policy", "reset_autocast_policy", "is_autocast_enabled", "get_autocast_dtype",
    "initialize", "scale_loss", "AmpOptimizer", "AmpProperties",
    "GradScaler", "StaticLossScaler", "ApexLossScaler", "DynamicLossScaler", "OptState",
    "OPT_LEVELS", "OptLevel", "describe_opt_level", "get_opt_level",
    "underflow_stats", "UnderflowStats", "nonfinite_count", "lost_updates", "LostUpdates",
    "exponent_histogram", "ExponentHistogram", "merge_histograms", "fp16_range_shading",
    "RangeShading", "StepRecord", "TrainingMonitor",
]
