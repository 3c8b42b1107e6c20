"""The native float32 -> bf16 path of fpsim.round / fpsim.cast (nearest even, no flags) against
the general kernel (forced by flags=True) and ml_dtypes' cast, on every bf16 boundary: each bf16
pattern with the dropped 16 bits at 0, 1, just below / at / just above the tie, and all ones
(subnormals, ties to even, the carry into the exponent, overflow to inf, NaN payloads)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fpsim

LOW_HALVES = np.array([0x0000, 0x0001, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF],
                      dtype=np.uint32)


def boundary_inputs() -> np.ndarray:
    high = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    return (high[:, None] | LOW_HALVES[None, :]).reshape(-1).view(np.float32)


def test_round_equals_general_kernel_bit_for_bit() -> None:
    x = boundary_inputs()
    fast = fpsim.round(x, "bf16")
    general, _ = fpsim.round(x, "bf16", flags=True)  # flags take the general kernel
    assert fast.dtype == np.float64 and fast.shape == x.shape
    np.testing.assert_array_equal(fast.view(np.uint64), general.view(np.uint64))


def test_cast_equals_general_kernel_and_ml_dtypes() -> None:
    x = boundary_inputs()
    fast = fpsim.cast(x, "bf16")
    general, _ = fpsim.cast(x, "bf16", flags=True)
    assert fast.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(fast.view(np.uint16), general.view(np.uint16))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(fast.view(np.uint16),
                                      x.astype(ml_dtypes.bfloat16).view(np.uint16))


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_shapes_and_strides(shape) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-140, 130, shape)).astype(np.float32)
    for view in (x, x.T, x[..., ::2]):
        np.testing.assert_array_equal(fpsim.round(view, "bf16").view(np.uint64),
                                      fpsim.round(view, "bf16", flags=True)[0].view(np.uint64))


def test_input_not_mutated_and_other_policies_unchanged() -> None:
    x = boundary_inputs()
    before = x.copy()
    fpsim.round(x, "bf16")
    np.testing.assert_array_equal(x.view(np.uint32), before.view(np.uint32))
    finite = x[np.isfinite(x)]
    # the directed modes, saturation and flushing keep the general kernel: results differ
    # from nearest even where they must
    assert (fpsim.round(finite, "bf16", "toward_zero") != fpsim.round(finite, "bf16")).any()
    big = np.array([3.4e38], np.float32)
    assert np.isinf(fpsim.round(big, "bf16"))
    assert np.isfinite(fpsim.round(big, "bf16", overflow="saturate"))
    tiny = np.array([1e-40], np.float32)
    assert fpsim.round(tiny, "bf16") != 0 and fpsim.round(tiny, "bf16", subnormals="flush") == 0
    with fpsim.flag_context() as fl:
        fpsim.round(np.array([1e-40], np.float32), "bf16")
    assert fl.flags & fpsim.Flags.UNDERFLOW


# -- the one-byte formats (fp8, fp6, fp4): the table path ------------------------------------

BYTE_FORMATS = ["fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz", "fp6_e2m3", "fp6_e3m2",
                "fp4_e2m1"]


def _finite_or_inf(x: np.ndarray) -> np.ndarray:
    return x[~np.isnan(x)]


@pytest.mark.parametrize("name", BYTE_FORMATS)
def test_byte_formats_round_and_cast_equal_the_general_kernel(name) -> None:
    """Every high half of the float32 patterns with low halves probing each rounding decision
    (the claim of fpsim.rounding.native.narrow_to_byte), against the kernel (flags=True)."""
    x = _finite_or_inf(boundary_inputs())
    fast = fpsim.round(x, name)
    general, _ = fpsim.round(x, name, flags=True)
    np.testing.assert_array_equal(fast.view(np.uint64), general.view(np.uint64))
    fast_c = fpsim.cast(x, name)
    general_c, _ = fpsim.cast(x, name, flags=True)
    assert fast_c.dtype == fpsim.PRESETS[name].dtype
    np.testing.assert_array_equal(fast_c.view(np.uint8), general_c.view(np.uint8))


@pytest.mark.parametrize("name", BYTE_FORMATS)
def test_byte_formats_with_a_nan_take_the_kernel(name) -> None:
    """A NaN (a payload to keep; fp6 / fp4 have none: NaN with INVALID, cast refuses it) in
    any chunk sends the whole array to the kernel: the same results as with flags."""
    x = np.linspace(-500, 500, 200_000, dtype=np.float32)
    x[150_001] = np.float32(np.nan)
    fast = fpsim.round(x, name)
    general, _ = fpsim.round(x, name, flags=True)
    np.testing.assert_array_equal(fast.view(np.uint64), general.view(np.uint64))
    if fpsim.PRESETS[name].nan_encoding == "none":
        with pytest.raises(ValueError, match="NaN"):
            fpsim.cast(x, name)
    else:
        np.testing.assert_array_equal(fpsim.cast(x, name).view(np.uint8),
                                      fpsim.cast(x, name, flags=True)[0].view(np.uint8))


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp4_e2m1"])
def test_byte_formats_shapes_strides_and_no_mutation(name) -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((64, 96)) * 2.0 ** rng.integers(-30, 12, (64, 96))).astype(
        np.float32)
    before = x.copy()
    for view in (x, x.T, x[:, ::2]):
        np.testing.assert_array_equal(fpsim.round(view, name).view(np.uint64),
                                      fpsim.round(view, name, flags=True)[0].view(np.uint64))
        assert fpsim.round(view, name).shape == view.shape
    np.testing.assert_array_equal(x.view(np.uint32), before.view(np.uint32))
