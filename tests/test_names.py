"""One name, one meaning (issue 20 item 3): each public name that used to clash, imported and
checked for what it is; old spellings kept for compatibility checked to mean the new one."""

import inspect
import types

import numpy as np
import pytest

import fpsim
import fpsim.rounding
from fpsim import integer
from fpsim.integer import IntOverflow, as_int_overflow, to_int


# ------------------------------------------------------------------ "ieee"
def test_integer_indefinite_is_not_called_ieee():
    # integer.py's policy is x86's "integer indefinite" (IEEE 754 leaves the value unspecified)
    assert IntOverflow.INDEFINITE.value == "indefinite"
    assert [m.value for m in IntOverflow] == ["saturate", "wrap", "indefinite"]
    # the old spellings still mean it
    assert IntOverflow.IEEE is IntOverflow.INDEFINITE
    for name in ("indefinite", "ieee", "x86", " IEEE "):
        assert as_int_overflow(name) is IntOverflow.INDEFINITE
    x = [np.nan, np.inf, -1e10, 2.5]
    want = [-(2**31)] * 3 + [2]  # 0x80000000 for every invalid case
    for pol in ("indefinite", "ieee", IntOverflow.IEEE):
        assert to_int(x, "int32", overflow=pol).tolist() == want
    assert to_int([np.nan, -1.0], "uint8", overflow="indefinite").tolist() == [255, 255]
    with pytest.raises(ValueError, match="valid: 'saturate', 'wrap', 'indefinite'"):
        as_int_overflow("clip")


def test_ieee_means_ieee_754_elsewhere():
    # the tensor-core unit's overflow="ieee": IEEE 754's rule (toward zero stops at max finite)
    from fpsim.tensorcore import BlockFMA

    assert BlockFMA(8, overflow="ieee").overflow == "ieee"
    assert fpsim.NaNEncoding.IEEE.value == "ieee"


def test_dead_helper_removed():
    assert not hasattr(integer, "_is_int_dtype")


# ------------------------------------------------------------------ get_format
def test_one_format_lookup():
    # rounding.get_format is fpsim.get_format (one function, integer formats included); the
    # float operations refuse integer formats by name through get_float_format
    assert fpsim.rounding.get_format is fpsim.get_format is fpsim.formats.get_format
    assert fpsim.rounding.get_format("int8") is fpsim.INT8
    assert fpsim.get_format("int8") is fpsim.INT8
    with pytest.raises(TypeError, match="'int8' is an integer format"):
        fpsim.formats.get_float_format("int8")
    with pytest.raises(TypeError, match="'int8' is an integer format"):
        fpsim.round(1.0, "int8")
    with pytest.raises(TypeError, match="'fp16' is a floating-point format|floating-point"):
        fpsim.formats.get_int_format("fp16")


# ------------------------------------------------------------------ module vs function
def test_fpsim_rounding_is_the_module_and_round_the_function():
    assert isinstance(fpsim.rounding, types.ModuleType)
    assert fpsim.round is fpsim.rounding.round
    assert inspect.isfunction(fpsim.round)


def test_fpsim_checkpoint_is_the_function():
    assert inspect.isfunction(fpsim.checkpoint)
    assert inspect.isfunction(fpsim.checkpoint_sequential)


# ------------------------------------------------------------------ one FP8 format check
def test_one_fp8_format_check():
    from fpsim.quant import FP8Linear, fp8_scale, layers
    from fpsim.quant.fp8_scaling import as_fp8_format

    assert not hasattr(layers, "_fp8_format")
    assert as_fp8_format("e5m2") is fpsim.FP8_E5M2
    # both callers get both checks: 8 bits wide, and within float32's range
    for bad, why in (("fp16", "must be an 8-bit float format"), ("e9m9", "beyond float32")):
        with pytest.raises(ValueError, match=why):
            fp8_scale(1.0, bad)
        with pytest.raises(ValueError, match=f"fwd_fmt .*{why}|fwd_fmt {bad} .*{why}"):
            FP8Linear(2, 2, fwd_fmt=bad)
    with pytest.raises(TypeError, match="integer format"):
        FP8Linear(2, 2, bwd_fmt="int8")
