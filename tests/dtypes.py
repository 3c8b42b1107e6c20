"""The one table of fpsim presets -> the NumPy / ml_dtypes dtype of the same format, whose
casts the tests use as the independent reference (issue 35: one copy, imported)."""

import ml_dtypes
import numpy as np

DTYPES = {
    "fp64": np.float64,
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "fp8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
}


def dtypes(*names: str) -> dict:
    """The part of :data:`DTYPES` for ``names``, in that order."""
    return {n: DTYPES[n] for n in names}
