"""The block-scaled formats: OCP Microscaling (MX) v1.0 and NVIDIA's NVFP4, as named presets.

An :class:`MXFormat` pairs an element format (fpsim's ``FP8_E4M3``, ``FP8_E5M2``, ``FP6_E2M3``,
``FP6_E3M2``, ``FP4_E2M1`` or MXINT8's 8-bit two's complement integer with an implicit scale of
2**-6) with one scale per block of ``block_size`` elements:

- MX (OCP Microscaling Formats v1.0, Sept. 2023, section 5): an E8M0 scale (a power of two
  2**(code - 127), code 255 is NaN) per block of 32 elements.
- NVFP4 (NVIDIA Blackwell; cuBLAS "1D block scaling"): fp4 e2m1 elements, one fp8 e4m3 scale
  per block of 16 elements, and an optional fp32 per-tensor scale.

The tables below are printed from the presets:

>>> from fpsim.mx import get_mx_format
>>> f = get_mx_format("mxfp4")
>>> f.element.name, f.block_size, f.scale, f.elem_emax, f.elem_max, f.bits_per_value
('fp4_e2m1', 32, 'e8m0', 2, 6.0, 4.25)
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..formats import (
    FP4_E2M1,
    FP6_E2M3,
    FP6_E3M2,
    FP8_E4M3,
    FP8_E5M2,
    INT8,
    Format,
    IntFormat,
)
from ..rounding.scale import E8M0_BIAS

__all__ = ["MXFormat", "ScaleMode", "MX_FORMATS", "get_mx_format", "as_scale_mode",
           "E8M0_BIAS", "E8M0_NAN", "MXINT8_FRACTION_BITS"]

E8M0_NAN = 255  # the one NaN code of E8M0
MXINT8_FRACTION_BITS = 6  # MXINT8 elements are int8 * 2**-6 (spec section 5.3.2)


class ScaleMode(str, enum.Enum):
    """How a block's shared exponent is chosen from its largest magnitude ``amax``.

    - ``FLOOR``: the OCP MX v1.0 spec (section 6.3): ``floor(log2(amax)) - emax_elem``; values
      of the top binade above the element max are clamped (torchao
      ``ScaleCalculationMode.FLOOR``, its default).
    - ``CEIL``: ``ceil(log2(amax)) - emax_elem``: never clamps, but a coarser grid (torchao
      ``ScaleCalculationMode.CEIL``).
    - ``EVEN``: amax rounded to the element's mantissa width (half away, on the bit pattern)
      before the floor, so that a block max that would round up to the next binade moves the
      scale up (torchao ``ScaleCalculationMode.EVEN``, from the microxcaling recipe for MXFP4).
    - ``RCEIL``: ``ceil(log2(amax / elem_max))`` with the division in fp32: the smallest power
      of two that keeps every element unclamped (NVIDIA cuBLAS's "Computing scaling factors for
      FP8 with UE8M0 scales", Transformer Engine's MXFP8, PTX ``cvt.rp.satfinite.ue8m0x2.f32``;
      torchao ``ScaleCalculationMode.RCEIL``).
    """

    FLOOR = "floor"
    CEIL = "ceil"
    EVEN = "even"
    RCEIL = "rceil"


def as_scale_mode(mode: ScaleMode | str) -> ScaleMode:
    """The :class:`ScaleMode` named by ``mode``; ValueError naming the valid ones otherwise."""
    if isinstance(mode, ScaleMode):
        return mode
    if isinstance(mode, str):
        try:
            return ScaleMode(mode.strip().lower())
        except ValueError:
            pass
    valid = ", ".join(repr(m.value) for m in ScaleMode)
    raise ValueError(f"unknown scale_mode {mode!r}; valid: {valid}")


@dataclass(frozen=True)
class MXFormat:
    """A block-scaled format: element format, default block size and scale format.

    ``elem_emax`` is the exponent of the element format's largest binade (the spec's
    ``emax_elem``), ``elem_max`` its largest finite value, ``elem_mbits`` its mantissa bits.
    """

    name: str
    element: Format | IntFormat
    block_size: int
    scale: str  # "e8m0" (MX) or "e4m3" (NVFP4)

    @functools.cached_property  # read on every quantize call; frozen, so cached
    def is_int(self) -> bool:
        """True for MXINT8, whose elements are integers times 2**-6."""
        return isinstance(self.element, IntFormat)

    @functools.cached_property
    def elem_bits(self) -> int:
        """Stored bits per element."""
        return self.element.bits

    @functools.cached_property
    def elem_emax(self) -> int:
        """The spec's emax_elem: exponent of the largest binade of the element format."""
        return 0 if self.is_int else self.element.emax

    @functools.cached_property
    def elem_max(self) -> float:
        """Largest finite element value (MXINT8: 127 / 64, the symmetric range)."""
        if self.is_int:
            return 127.0 / (1 << MXINT8_FRACTION_BITS)
        return self.element.max

    @functools.cached_property
    def elem_mbits(self) -> int:
        """Fraction bits of the element (MXINT8: 6, the bits below its implicit binary point)."""
        return MXINT8_FRACTION_BITS if self.is_int else self.element.mantissa_bits

    @functools.cached_property
    def storage_dtype(self) -> np.dtype:
        """The dtype ``elements`` are held in (one element per byte; :meth:`MXArray.pack`
        packs fp6 and fp4 to their real width)."""
        return np.dtype(np.int8) if self.is_int else self.element.dtype

    @functools.cached_property
    def scale_dtype(self) -> np.dtype:
        """The dtype of the block scales: ml_dtypes float8_e8m0fnu or float8_e4m3fn."""
        if self.scale == "e8m0":
            return np.dtype(ml_dtypes.float8_e8m0fnu)
        return np.dtype(ml_dtypes.float8_e4m3fn)

    @functools.cached_property
    def bits_per_value(self) -> float:
        """Storage per value at the default block size: element bits + 8 / block_size."""
        return self.elem_bits + 8 / self.block_size


MX_FORMATS: dict[str, MXFormat] = {
    f.name: f
    for f in (
        MXFormat("mxfp8_e4m3", FP8_E4M3, 32, "e8m0"),
        MXFormat("mxfp8_e5m2", FP8_E5M2, 32, "e8m0"),
        MXFormat("mxfp6_e2m3", FP6_E2M3, 32, "e8m0"),
        MXFormat("mxfp6_e3m2", FP6_E3M2, 32, "e8m0"),
        MXFormat("mxfp4", FP4_E2M1, 32, "e8m0"),
        MXFormat("mxint8", INT8, 32, "e8m0"),
        MXFormat("nvfp4", FP4_E2M1, 16, "e4m3"),
    )
}


def get_mx_format(fmt: MXFormat | str) -> MXFormat:
    """The preset named ``fmt`` (an :class:`MXFormat` passes through).

    >>> get_mx_format("nvfp4").scale
    'e4m3'
    """
    if isinstance(fmt, MXFormat):
        return fmt
    if isinstance(fmt, str) and fmt.strip().lower() in MX_FORMATS:
        return MX_FORMATS[fmt.strip().lower()]
    valid = ", ".join(repr(k) for k in MX_FORMATS)
    raise ValueError(f"unknown block-scaled format fmt={fmt!r}; valid: {valid}")
