"""One name, one meaning (issue 20 item 3): each public name that used to clash, imported and
checked for what it is; the old spellings are gone (issue 35 item 1: 0.1 has no users to keep
them for), some refused with an error naming the new one."""

import inspect
import types
from pathlib import Path

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
    for name in ("indefinite", "x86", " Indefinite ", IntOverflow.INDEFINITE):
        assert as_int_overflow(name) is IntOverflow.INDEFINITE
    x = [np.nan, np.inf, -1e10, 2.5]
    want = [-(2**31)] * 3 + [2]  # 0x80000000 for every invalid case
    assert to_int(x, "int32", overflow="indefinite").tolist() == want
    # the old name is gone (issue 35 item 1: no compatibility names in 0.1), refused naming
    # the new one
    assert not hasattr(IntOverflow, "IEEE")
    for old in ("ieee", " IEEE "):
        with pytest.raises(ValueError, match="'ieee' is now 'indefinite'"):
            to_int(x, "int32", overflow=old)
    assert to_int([np.nan, -1.0], "uint8", overflow="indefinite").tolist() == [255, 255]
    with pytest.raises(ValueError, match="valid: 'saturate', 'wrap', 'indefinite'"):
        as_int_overflow("clip")


def test_ieee_means_ieee_754_elsewhere():
    assert fpsim.NaNEncoding.IEEE.value == "ieee"


def test_block_fma_takes_the_core_policy_values():
    """Issue 35 item 1: BlockFMA's overflow and subnormal fields take the core's Overflow and
    Subnormals values with the core's meaning; the published model's always-inf rule has its
    own name, and the old spelling "ieee" is refused with the new names."""
    from fpsim.tensorcore import BlockFMA, BlockOverflow

    assert BlockFMA(8).overflow is BlockOverflow.ALWAYS_INF
    for v in ("inf", fpsim.Overflow.INF, BlockOverflow.INF):
        assert BlockFMA(8, overflow=v).overflow is BlockOverflow.INF
    assert BlockFMA(8, overflow=fpsim.Overflow.SATURATE).overflow is BlockOverflow.SATURATE
    with pytest.raises(ValueError, match="'ieee' is now 'inf'.*'always_inf'"):
        BlockFMA(8, overflow="ieee")
    u = BlockFMA(4, 0, "rne", summation="pairwise", input_subnormals=fpsim.Subnormals.DAZ,
                 output_subnormals="flush")
    assert u.input_subnormals is fpsim.Subnormals.DAZ
    assert u.output_subnormals is fpsim.Subnormals.FLUSH
    for kw in (dict(input_subnormals="flush"), dict(output_subnormals="daz")):
        with pytest.raises(ValueError, match="must be one of .* \\(fpsim.Subnormals\\)"):
            BlockFMA(8, **kw)


@pytest.mark.parametrize("mode", ["toward_zero", "nearest_even", "up", "down"])
@pytest.mark.parametrize("overflow", ["always_inf", "inf", "saturate"])
def test_block_fma_overflow_policies(mode, overflow):
    """A block whose exact sum leaves fp32's range: "inf" and "saturate" give what the core's
    rounding of that exact sum gives under the same policy (fpsim.round, checked by TestFloat
    and MPFR); "always_inf" gives +-inf in every mode (the published model)."""
    from fractions import Fraction

    from fpsim.tensorcore import BlockFMA, dot

    unit = BlockFMA(8, 1, mode, None, overflow=overflow)
    big = float(np.float32(2.0**127))
    # exact sums 2**128 (past the range), 2**128 - 2**103 (the tie above the largest value)
    # and 1.5 * 2**127 (inside)
    cases = [([big, big], [1.0, 1.0]), ([big, big * (1 - 2.0**-24)], [1.0, 1.0]),
             ([big, big / 2], [1.0, 1.0])]
    for sign in (1.0, -1.0):
        for a, b in cases:
            a32 = np.array(a, np.float32) * np.float32(sign)
            b32 = np.array(b, np.float32)
            got = float(dot(a32, b32, gpu=unit, input_format="fp32", output_format="fp32"))
            exact = sum(Fraction(float(x)) * Fraction(float(y))
                        for x, y in zip(a32, b32, strict=True))
            if overflow == "always_inf" and abs(exact) >= 2**128:
                want = sign * np.inf
            else:
                want = float(fpsim.round(float(exact), "fp32", mode, overflow=(
                    "saturate" if overflow == "saturate" else "inf")))
            assert got == want, (sign, a, got, want)


def test_dead_helper_removed():
    assert not hasattr(integer, "_is_int_dtype")


# ------------------------------------------------------------------ get_format
def test_one_format_lookup():
    # fpsim.get_format is fpsim.formats.get_format (one function, integer formats included; the
    # old re-exports fpsim.rounding.get_format and fpsim.encoding.get_format are gone); the
    # float operations refuse integer formats by name through get_float_format
    assert fpsim.get_format is fpsim.formats.get_format
    assert not hasattr(fpsim.rounding, "get_format") and not hasattr(fpsim.encoding, "get_format")
    assert fpsim.get_format("int8") is fpsim.INT8
    with pytest.raises(TypeError, match="'int8' is an integer format"):
        fpsim.formats.get_float_format("int8")
    with pytest.raises(TypeError, match="'int8' is an integer format"):
        fpsim.round(1.0, "int8")
    with pytest.raises(TypeError, match="'fp16' is a floating-point format|floating-point"):
        fpsim.formats.get_int_format("fp16")


# ------------------------------------------------------------------ rounding=
# where a public parameter named ``mode`` means something else than the rounding mode
_OTHER_MODES = {"set_grad_enabled", "as_scale_mode", "e8m0_exponent", "Module.train",
                "GroupQuantized", "groupwise_quantize", "groupwise_fake_quantize",
                "quantize_model_weights"}


def test_one_rounding_keyword():
    """Issue 35 item 1: the rounding mode is ``rounding=`` at every layer (round, the
    arithmetic, the reductions, the integer conversions, the autograd engine's context and
    casts, the parsers in fpsim.modes); no other spelling, and the autograd context's old name
    is gone from fpsim.autograd."""
    import importlib

    import fpsim.autograd

    bad = []
    for name in ("fpsim", "fpsim.rounding", "fpsim.arithmetic", "fpsim.reductions",
                 "fpsim.integer", "fpsim.encoding", "fpsim.modes", "fpsim.autograd",
                 "fpsim.autograd.context", "fpsim.autograd.functional", "fpsim.functional",
                 "fpsim.mx", "fpsim.quant", "fpsim.amp", "fpsim.nn", "fpsim.optim",
                 "fpsim.tensorcore"):
        mod = importlib.import_module(name)
        for n in getattr(mod, "__all__", ()):
            obj = getattr(mod, n)
            found = [(n, obj)]
            if inspect.isclass(obj):
                found += [(f"{n}.{k}", v) for k, v in vars(obj).items()
                          if callable(v) and not k.startswith("_")]
            for qual, f in found:
                try:
                    params = inspect.signature(f).parameters
                except (TypeError, ValueError):
                    continue
                for p in params:
                    if p in ("round_mode", "rounding_mode", "rmode") or (
                            p == "mode" and qual not in _OTHER_MODES):
                        bad.append(f"{name}.{qual}({p}=)")
    assert bad == []
    assert "rounding" not in fpsim.autograd.__all__ and not hasattr(fpsim.autograd, "rounding")
    for f in (fpsim.autograd.rounding_context, fpsim.autograd.context.round_to,
              fpsim.modes.as_rounding, fpsim.integer.to_int, fpsim.sum):
        assert "rounding" in inspect.signature(f).parameters, f


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


# ------------------------------------------------------------------ amp.autocast
def test_amp_autocast_is_the_class_and_its_module_has_another_name():
    import importlib

    import fpsim.amp.autocast_policy as policy_module
    from fpsim import amp

    assert inspect.isclass(amp.autocast)
    assert amp.autocast is policy_module.autocast
    assert isinstance(policy_module, types.ModuleType)
    assert amp.AUTOCAST_POLICY is policy_module.AUTOCAST_POLICY
    # no module hides behind the class any more: `import fpsim.amp.autocast as m` used to give
    # the class, `from fpsim.amp.autocast import ...` the module
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fpsim.amp.autocast")


# ------------------------------------------------------------------ the ZeRO command line
def test_zero_cli_lives_in_the_cli_layer():
    import importlib

    from fpsim.cli import zero

    assert callable(zero.run_cli) and callable(zero.configure_parser)
    with pytest.raises(ModuleNotFoundError):  # it imports fpsim.training: not below it
        importlib.import_module("fpsim.distributed.cli")
    # nor beside it under its second name (a file check: an editable install of another
    # checkout on sys.path could still answer the import)
    assert not (Path(fpsim.__file__).parent / "cli_zero.py").exists()


# ------------------------------------------------------------------ the format argument
def test_quantize_takes_fmt_beside_dtype():
    from fpsim.quant import quantize

    x = np.array([-1.0, 0.05, 0.15, 100.0, 30.0], np.float32)
    for name in ("int8", "uint8", "int32", fpsim.UINT8):
        want = quantize(x, 0.1, 3, dtype=name)
        got = quantize(x, 0.1, 3, fmt=name)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert quantize(x, 0.1, 3).dtype == np.int8  # the default is unchanged
    assert np.array_equal(quantize(x, 0.1, 3, None, None, "uint8"), quantize(x, 0.1, 3,
                                                                             fmt="uint8"))
    with pytest.raises(TypeError, match="fmt or dtype"):
        quantize(x, 0.1, 3, dtype="int8", fmt="int8")


def test_checkpoint_functions_and_their_module():
    # laid out as torch.utils.checkpoint.checkpoint: the functions' public home is fpsim, the
    # module keeps its name and is never hidden behind a function
    import fpsim.autograd.checkpoint as ckpt_module

    assert isinstance(fpsim.autograd.checkpoint, types.ModuleType)
    assert fpsim.autograd.checkpoint is ckpt_module
    assert fpsim.checkpoint is ckpt_module.checkpoint
    assert fpsim.checkpoint_sequential is ckpt_module.checkpoint_sequential
    assert "checkpoint" not in fpsim.autograd.__all__
