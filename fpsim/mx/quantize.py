"""Quantize arrays to block-scaled formats (OCP MX v1.0, NVFP4) to the bit, and back.

Contract of :func:`quantize` (``x`` real values, ``axis`` the blocked axis):

1. ``x`` is read as float32 (float16 / bfloat16 / float32 inputs, exactly) or float64 (float64,
   integer and Python inputs); NVFP4 always reads float32, since its recipe is fp32 arithmetic.
2. Blocks are ``block_size`` consecutive values along ``axis``. When the axis length is not a
   multiple of ``block_size`` the last block is padded with zeros (a zero never changes a
   block's amax); the padded elements are kept (code +0) and counted by ``nbytes``, and
   :meth:`MXArray.dequantize` drops them.
3. MX scales (E8M0, a power of two X = 2**s): ``amax`` = the largest magnitude of the block;
   ``s`` from ``scale_mode`` (see :class:`~fpsim.mx.formats.ScaleMode`), clamped to the E8M0
   range [-127, 127]. An all-zero block gets s = -127 (code 0), as floor(log2(0)) = -inf
   clamps there. A block holding a NaN gets the NaN scale (code 255), which makes every value
   of the block NaN (spec section 5.3.1). A block holding +-inf (and no NaN) is scaled as if
   amax were 2**128 (the exponent field of the inf pattern, which is what torchao computes;
   the spec leaves non-finite inputs to the implementation), so its infinities saturate to
   +-elem_max and its finite values lose all precision; with "rceil" the scale code is 254
   (``cvt.rp.satfinite`` of inf). A shared exponent beyond 127 (an inf block of MXINT8, or a
   float64 amax of 2**(128 + emax_elem) or more) is the NaN scale.
4. Elements ``P = x / X``: exact (X is a power of two), then rounded to the element format by
   ``rounding`` (round to nearest even by default; ``"stochastic"`` and the other fpsim modes
   too) with saturation: magnitudes beyond the element max, infinities included, become
   +-elem_max (spec section 6.3, "clamped to the maximum"). MXINT8 elements are integers
   k = P * 64 in [-127, 127] (the symmetric range; -128 is never produced). NaN inputs give
   element NaN where the element format has one (fp8) and +0 otherwise: the NaN scale carries
   the block's NaN.
5. NVFP4 (NVIDIA's recipe, as torchao's ``nvfp4_quantize`` computes it in fp32): block scale
   ``amax / 6``, divided by ``per_tensor_scale`` when given (the recipe's global scale is
   ``amax(x) / (6 * 448)``, :func:`nvfp4_per_tensor_scale`), clamped to [2**-6, 448] and rounded
   to fp8 e4m3 (nearest even); elements are ``x * r`` with ``r = 1 / s`` (or
   ``(1 / per_tensor_scale) / s``) in fp32, clamped to [-6, 6] and rounded to fp4 e2m1.
   :meth:`MXArray.dequantize` returns ``P * (per_tensor_scale * s)`` in fp32.

6. ``flags=True`` also returns the IEEE flags (:class:`fpsim.Flags`, one uint8 per element of
   ``x``) of each value against what :meth:`MXArray.dequantize` gives back: INEXACT where it
   differs; UNDERFLOW too where a non-zero finite value comes back 0 (flushed: an inf or a
   large value in its block); OVERFLOW too where a finite value was saturated at the element
   max or comes back infinite; INVALID where an infinity comes back finite or NaN (NVFP4 turns
   +-inf into +-2688, torchao's result, kept: no rounding gives it, so it is an invalid
   operation rather than an overflow, as IEEE 754 says of an infinity converted to an integer
   format) or a finite value comes back NaN (an E8M0 scale overflow). Inside
   :func:`fpsim.flag_context` the flags are recorded whether or not ``flags=True`` is passed.
7. Bad sizes and scales are refused before any work: a ``block_size`` larger than both the
   axis and the format's block (its padding would allocate ``block_size`` values per row for
   nothing: ``block_size=10**12`` asked for 3.6 TiB), and a ``per_tensor_scale`` that
   float32 (where it is stored) turns into 0 or inf, or whose reciprocal does (``1e-50``
   became 0 and :meth:`MXArray.dequantize` returned zeros).

Every step is vectorised (no loop over blocks); the default round-to-nearest-even path on
float32 input uses ml_dtypes' compiled casts after an exact power-of-two scaling and a clamp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..checks import as_int
from ..flags import Flags, flags_active, record
from ..integer import round_to_integral
from ..modes import Rounding, as_rounding
from ..rounding import RoundingPolicy, policy_of
from ..rounding import round as fp_round
from ..rounding.fast import values32
from ..rounding.native import (
    FP4_COMPARE_MIN,
    fp4_nearest_even,
    narrow_to_byte,
    table_cast_ok,
    widen_byte,
)
from ..rounding.scale import SCALE_NAN
from ..rounding.scale import e8m0_exponent as scale_exponent
from .formats import (
    E8M0_BIAS,
    MX_FORMATS,
    MXINT8_FRACTION_BITS,
    MXFormat,
    ScaleMode,
    as_scale_mode,
    get_mx_format,
)

__all__ = ["MXArray", "quantize", "dequantized", "nvfp4_per_tensor_scale", "e8m0_exponent"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_E4M3_TINY = np.float32(2.0**-6)  # torch.finfo(float8_e4m3fn).tiny, the recipe's scale floor
_E4M3_MAX = np.float32(448.0)
_FP4_MAX = np.float32(6.0)
_E4M3_STORE = np.dtype(ml_dtypes.float8_e4m3fn)
# the element formats dequantized rounds to without the codes (nearest even; clamped first)
_E4M3_NEAREST = policy_of("fp8_e4m3")
_E2M1_NEAREST = policy_of("fp4_e2m1")
_ABS_MASK = {4: np.int32(0x7FFFFFFF), 8: np.int64(0x7FFFFFFFFFFFFFFF)}  # clears the sign bit
_UINT_VIEW = {4: np.int32, 8: np.int64}
_ROUNDINGS: dict[str, Rounding] = {}  # names already looked up (the call's fixed cost)
_IGNORE = dict(invalid="ignore", divide="ignore", over="ignore")
# the per-tensor scales float32 stores as a positive finite value with a finite reciprocal
_PTS_MIN = np.float32(1) / np.finfo(np.float32).max  # 2**-128 + a bit: a normal float32
_PTS_MAX = np.finfo(np.float32).max

# Clamps are ndarray.clip (NumPy's clip ufunc; a NaN passes through) with the bounds as 0-d
# arrays of the clamped array's dtype, made once: np.clip's Python wrapper costs more than
# clamping a small block, and the ufunc takes a 0-d array operand for less than a NumPy scalar
# (np.minimum / np.maximum cost two passes, each slower than clip's on large blocks).
_BOUNDS: dict[tuple[float, str], tuple[np.ndarray, np.ndarray]] = {}


def _bounds(value: float, dt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(-value, value) as read-only 0-d arrays of float dtype ``dt`` (cached)."""
    key = (value, dt.char)
    b = _BOUNDS.get(key)
    if b is None:
        b = tuple(np.array(v, dt) for v in (-value, value))
        for a in b:
            a.flags.writeable = False
        _BOUNDS[key] = b
    return b


# the NVFP4 recipe's float32 constants as such 0-d operands (the same dtype rules as the
# np.float32 scalars: neither is a weak Python scalar under NEP 50)
_E4M3_LO, _E4M3_HI, _FP4_MAX_OP, _ONE_OP = (
    np.array(v, np.float32) for v in (_E4M3_TINY, _E4M3_MAX, _FP4_MAX, 1.0))
for _op in (_E4M3_LO, _E4M3_HI, _FP4_MAX_OP, _ONE_OP):
    _op.flags.writeable = False  # shared by every call, as _bounds' arrays
del _op


@dataclass(frozen=True, eq=False)
class MXArray:
    """A block-scaled array: ``scales`` (one per block) and ``elements`` (one per value).

    - ``fmt``: the :class:`~fpsim.mx.formats.MXFormat`.
    - ``scales``: ml_dtypes float8_e8m0fnu (MX) or float8_e4m3fn (NVFP4), of ``shape`` with the
      blocked axis replaced by the number of blocks.
    - ``elements``: the element format's storage dtype (ml_dtypes float8/float6/float4, int8
      for MXINT8), of ``shape`` with the blocked axis padded to whole blocks.
    - ``shape``, ``axis`` (non-negative), ``block_size``, ``scale_mode`` (None for NVFP4),
      ``per_tensor_scale`` (NVFP4's fp32 global scale, or None).
    """

    fmt: MXFormat
    scales: np.ndarray
    elements: np.ndarray
    shape: tuple[int, ...]
    axis: int
    block_size: int
    scale_mode: ScaleMode | None
    per_tensor_scale: float | None = None

    @property
    def num_blocks(self) -> int:
        """Number of blocks (scales)."""
        return int(self.scales.size)

    @property
    def scale_values(self) -> np.ndarray:
        """The block scales as float32 (E8M0 code 255 is NaN); NVFP4's per-tensor scale not
        applied."""
        return self.scales.astype(np.float32)

    def element_values(self) -> np.ndarray:
        """The elements as float32 values (MXINT8: k * 2**-6), padded shape."""
        if self.fmt.is_int:
            return self.elements.astype(np.float32) * np.float32(2.0**-MXINT8_FRACTION_BITS)
        if table_cast_ok(self.elements.dtype):
            return widen_byte(self.elements)  # ml_dtypes' values, from a table
        return self.elements.astype(np.float32)

    def dequantize(self) -> np.ndarray:
        """The represented values, float32, of ``shape``: ``X * P`` per element (exact for MX;
        NVFP4 as its recipe, ``P * (per_tensor_scale * s)`` rounded in fp32).

        >>> import numpy as np, fpsim.mx as mx
        >>> q = mx.quantize(np.array([1.0, 3.0, -0.3, 100.0]), "mxfp4", block_size=4)
        >>> q.dequantize().tolist()
        [0.0, 0.0, -0.0, 96.0]
        """
        p = _move(self.element_values(), self.axis, -1)
        nb = self.scales.shape[self.axis]
        p = p.reshape(p.shape[:-1] + (nb, self.block_size))
        s = _move(self.scale_values, self.axis, -1)
        if self.per_tensor_scale is not None:
            s = np.float32(self.per_tensor_scale) * s
        with np.errstate(invalid="ignore", over="ignore"):
            out = p * s[..., None]
        out = out.reshape(out.shape[:-2] + (nb * self.block_size,))[..., : self.shape[self.axis]]
        return np.ascontiguousarray(_move(out, -1, self.axis))

    def pack(self) -> np.ndarray:
        """The elements at their real width, as a flat uint8 array: 8-bit elements one per
        byte, fp6 four per three bytes (the first element in the low bits), fp4 two per byte
        (the first in the low nibble, as torchao's ``pack_uint4`` and the PTX ``e2m1x2``
        packing). The order is that of ``elements`` in C order.

        >>> import numpy as np, fpsim.mx as mx
        >>> mx.quantize(np.ones(32), "mxfp4").pack().tolist()[:2]  # 1 = 4 * 2**-2: 0b0110
        [102, 102]
        """
        codes = self.elements.view(np.uint8).reshape(-1)
        bits = self.fmt.elem_bits
        if bits == 8:
            return codes.copy()
        codes = codes & np.uint8((1 << bits) - 1)
        per = 8 // math.gcd(8, bits)  # values per group of whole bytes
        pad = (-codes.size) % per
        c = np.concatenate([codes, np.zeros(pad, np.uint8)]).astype(np.uint32)
        c = c.reshape(-1, per)
        word = np.zeros(c.shape[0], np.uint32)
        for i in range(per):  # a handful of shifts per group, not a loop over elements
            word |= c[:, i] << np.uint32(i * bits)
        nbytes = per * bits // 8
        out = np.stack([(word >> np.uint32(8 * j)) & np.uint32(0xFF) for j in range(nbytes)],
                       axis=-1).astype(np.uint8).reshape(-1)
        return out[: (codes.size * bits + 7) // 8]

    @property
    def nbytes(self) -> int:
        """Real storage in bytes: packed elements (padding included) + one byte per scale
        (+ 4 bytes of fp32 per-tensor scale for NVFP4 when used).

        >>> import numpy as np, fpsim.mx as mx
        >>> q = mx.quantize(np.ones(1024, np.float32), "mxfp4")
        >>> q.nbytes, q.nbytes * 8 / 1024  # 4.25 bits per value
        (544, 4.25)
        """
        n = (self.elements.size * self.fmt.elem_bits + 7) // 8 + self.scales.size
        return int(n + (4 if self.per_tensor_scale is not None else 0))

    def __repr__(self) -> str:
        return (f"MXArray(fmt={self.fmt.name!r}, shape={self.shape}, axis={self.axis}, "
                f"block_size={self.block_size}, blocks={self.num_blocks}, "
                f"nbytes={self.nbytes})")


_FORMATS = dict(MX_FORMATS)  # exact names, before get_mx_format's normalising
_SCALE_MODES = {m.value: m for m in ScaleMode}


def _move(a: np.ndarray, src: int, dst: int) -> np.ndarray:
    """np.moveaxis without its overhead in the common cases (nothing to move; a 2-D swap)."""
    nd = a.ndim
    if src % nd == dst % nd:
        return a
    if nd == 2:
        return a.T
    return np.moveaxis(a, src, dst)


def nvfp4_per_tensor_scale(x) -> float:
    """NVIDIA's NVFP4 global (per-tensor) scale: ``amax(|x|) / (6 * 448)`` in fp32, so that the
    largest block scale lands on e4m3's max (torchao ``per_tensor_amax_to_scale``).

    >>> import numpy as np
    >>> nvfp4_per_tensor_scale(np.array([2688.0, -1.0]))
    1.0
    """
    a = np.asarray(x, dtype=np.float32)
    amax = np.maximum(a.max(), -a.min()) if a.size else np.float32(0.0)  # no |x| temporary
    return float(amax / np.float32(float(_FP4_MAX) * float(_E4M3_MAX)))


def e8m0_exponent(amax: np.ndarray, fmt: MXFormat | str, mode: ScaleMode | str) -> np.ndarray:
    """The shared exponent ``s`` (int32, in [-127, 128]; 128 marks the NaN scale) of blocks with
    largest magnitudes ``amax`` (float32 or float64), before the NaN code is applied: the
    rounding package's rule (:func:`fpsim.rounding.scale.e8m0_exponent`) for ``fmt``'s
    elements.

    >>> import numpy as np
    >>> from fpsim.mx.formats import get_mx_format, ScaleMode
    >>> f = get_mx_format("mxfp8_e4m3")
    >>> [int(e8m0_exponent(np.array([a]), f, m)[0]) for a in (448.0, 500.0)
    ...  for m in (ScaleMode.FLOOR, ScaleMode.CEIL)]
    [0, 1, 0, 1]
    """
    fmt, mode = get_mx_format(fmt), as_scale_mode(mode)  # a preset's name, a mode's name too
    return scale_exponent(amax, fmt.elem_emax, fmt.elem_mbits, fmt.elem_max, mode.value)


def _as_input(x, nvfp4: bool) -> np.ndarray:
    """x as float32 (narrow floats, exactly; NVFP4 always) or float64 (everything else)."""
    arr = np.asarray(x)
    if arr.dtype.kind == "c":
        raise TypeError("quantize: x must hold real values, got a complex array")
    if arr.dtype in (np.float16, np.float32) or arr.dtype.kind == "V":  # ml_dtypes floats
        return arr.astype(np.float32, copy=False)
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        raise TypeError("quantize: long double input is not supported; round it to float64 "
                        "first")
    try:
        arr = arr.astype(np.float64, copy=False)
    except (TypeError, ValueError):
        raise TypeError(f"quantize: x must hold real numbers, got dtype {arr.dtype}") from None
    if nvfp4:
        with np.errstate(over="ignore"):  # beyond float32: inf, as the recipe's fp32 reads it
            return arr.astype(np.float32)
    return arr


def block_amax(blocks: np.ndarray, axis: int | tuple[int, ...] = -1) -> np.ndarray:
    """Largest magnitude over ``axis`` (float32 or float64 blocks; quant.blockwise_fp8's tiles
    too), NaN if the block holds a NaN: the maximum of the sign-cleared bit patterns (they
    order like the magnitudes, every NaN above inf), which NumPy reduces faster over short
    rows than the float maximum, without an abs temporary.

    >>> block_amax(np.array([[1.0, -3.0], [np.nan, 2.0]], np.float32)).tolist()
    [3.0, nan]
    """
    size = blocks.dtype.itemsize
    axes = tuple(a % blocks.ndim for a in np.atleast_1d(axis))
    if any(blocks.shape[a] == 0 for a in axes):  # empty blocks: magnitude 0, as padding
        return np.zeros([d for i, d in enumerate(blocks.shape) if i not in axes], blocks.dtype)
    return (blocks.view(_UINT_VIEW[size]) & _ABS_MASK[size]).max(axis=axes).view(blocks.dtype)


def clamped_values32(y: np.ndarray, elem_max: float, grid: RoundingPolicy) -> np.ndarray:
    """Finite float32 ``y`` clamped to +-``elem_max`` in place, then rounded by ``grid`` (a
    nearest-even policy of the element format) to float32 values: the saturating cast's
    values without its codes (a value beyond the largest rounds to it, as saturation gives).

    >>> clamped_values32(np.array([0.3, -1000.0], np.float32), 448.0,
    ...                  policy_of("fp8_e4m3")).tolist()
    [0.3125, -448.0]
    """
    y.clip(*_bounds(elem_max, y.dtype), out=y)
    return values32(y, grid)


def _round_elements(y: np.ndarray, fmt: MXFormat, mode: Rounding, rng,
                    has_nan: bool) -> np.ndarray:
    """Elements P (a fresh float32 or float64 array, scaled, NaN where the block is NaN;
    overwritten) rounded with saturation to the element storage dtype. ``has_nan``: whether
    any block is NaN (the NaN scan is skipped otherwise)."""
    if fmt.is_int:
        v = np.multiply(y, y.dtype.type(1 << MXINT8_FRACTION_BITS), out=y)  # exact: a power of 2
        lo, hi = _bounds(127.0, v.dtype)
        v.clip(lo, hi, out=v)
        if has_nan:
            v[np.isnan(v)] = 0
        if mode is Rounding.NEAREST_EVEN:
            r = np.rint(v)
        else:
            r = round_to_integral(v.astype(np.float64), "fp64", mode, rng=rng)
        # no second clamp: every mode rounds a value in [-127, 127] to an integer in it
        return r.astype(np.int8)
    lo, hi = _bounds(fmt.elem_max, y.dtype)
    y.clip(lo, hi, out=y)  # saturate, infinities included; NaN passes through
    if not fmt.element.has_nan and has_nan:
        y[np.isnan(y)] = 0
    if mode is Rounding.NEAREST_EVEN and y.dtype == _F32:
        if fmt.element.bits == 4 and y.size >= FP4_COMPARE_MIN:  # the registry's fp4_compare
            return fp4_nearest_even(y)
        if table_cast_ok(fmt.storage_dtype):  # ml_dtypes' rounding, read from a table
            return narrow_to_byte(y, fmt.storage_dtype)
        return y.astype(fmt.storage_dtype)  # ml_dtypes: one correct rounding from fp32
    r = np.asarray(fp_round(y, fmt.element, mode, overflow="saturate", rng=rng))
    if not has_nan and table_cast_ok(fmt.storage_dtype):
        # element values (saturated: finite) are float32 numbers, so the byte table's cast
        # of float32 is ml_dtypes' exact cast, without its element-by-element loop
        return narrow_to_byte(r.astype(np.float32, copy=False), fmt.storage_dtype)
    return r.astype(fmt.storage_dtype)


def quantize(
    x,
    fmt: MXFormat | str,
    block_size: int | None = None,
    axis: int = -1,
    scale_mode: ScaleMode | str = "floor",
    rounding: Rounding | str = "nearest_even",
    *,
    per_tensor_scale: float | None = None,
    rng: np.random.Generator | int | None = None,
    flags: bool = False,
) -> MXArray | tuple[MXArray, np.ndarray]:
    """Quantize ``x`` to the block-scaled format ``fmt`` along ``axis``.

    ``fmt``: "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8" (block
    size 32 by default) or "nvfp4" (block size 16, optional fp32 ``per_tensor_scale``).
    ``scale_mode`` ("floor" (the spec), "ceil", "even", "rceil"; MX formats only) chooses the
    shared exponent; ``rounding`` rounds the elements (``"stochastic"`` draws from ``rng``). See
    the module docstring for the exact rules (padding, zeros, NaN and inf). ``flags=True``
    returns ``(MXArray, flags)``, the IEEE flags of each value (module docstring, rule 6).

    >>> import numpy as np, fpsim.mx as mx
    >>> x = np.array([0.5, -1.75, 3.0, 7.5], np.float32)
    >>> q = mx.quantize(x, "mxfp8_e4m3", block_size=4)  # X = 2**(floor(log2 7.5) - 8)
    >>> q.scales.astype(np.float32).tolist(), q.elements.astype(np.float32).tolist()
    ([0.015625], [32.0, -112.0, 192.0, 448.0])
    >>> q.dequantize().tolist()  # 7.5 / X = 480 is clamped to e4m3's max 448
    [0.5, -1.75, 3.0, 7.0]
    >>> mx.quantize(x, "mxfp8_e4m3", block_size=4, scale_mode="ceil").dequantize().tolist()
    [0.5, -1.75, 3.0, 7.5]
    >>> q, fl = mx.quantize(np.array([np.inf, 1.0], np.float32), "nvfp4", flags=True)
    >>> q.dequantize().tolist(), [Flags(int(f)) for f in fl]  # torchao's 2688, flagged
    ([2688.0, 0.0], [<Flags.INVALID: 16>, <Flags.INEXACT|UNDERFLOW: 3>])
    """
    return _quantize(x, fmt, block_size, axis, scale_mode, rounding, per_tensor_scale, rng,
                     flags, False)


def dequantized(x, fmt: MXFormat | str, block_size: int | None = None, axis: int = -1,
                scale_mode: ScaleMode | str = "floor", rounding: Rounding | str = "nearest_even",
                *, per_tensor_scale: float | None = None,
                rng: np.random.Generator | int | None = None) -> np.ndarray:
    """``quantize(x, ...).dequantize()`` (fake quantization), the same float32 values and the
    same random draws; MX formats with E4M3 elements and NVFP4, rounded to nearest even (the
    training recipes' forward operands) skip the codes: the scaled elements are rounded to
    the element grid in float32 (:func:`fpsim.rounding.fast.values32`, the rounding core's
    float32 path) and
    multiplied by their block's scale, as dequantize multiplies (tests/test_mx_dequantized.py
    checks it against quantize's route bit for bit).

    >>> import numpy as np
    >>> dequantized(np.array([0.5, -1.75, 3.0, 7.5], np.float32), "mxfp8_e4m3", 4).tolist()
    [0.5, -1.75, 3.0, 7.0]
    """
    return _quantize(x, fmt, block_size, axis, scale_mode, rounding, per_tensor_scale, rng,
                     False, True)


def _quantize(x, fmt, block_size, axis, scale_mode, rounding, per_tensor_scale, rng,
              flags: bool, values: bool):
    """quantize's work; ``values``: return the dequantized values (:func:`dequantized`)."""
    f = _FORMATS.get(fmt) if isinstance(fmt, str) else None
    if f is None:
        f = get_mx_format(fmt)
    nv = f.scale == "e4m3"
    bs = f.block_size if block_size is None else as_int("block_size", block_size, 1)
    if isinstance(rounding, Rounding):
        mode = rounding
    else:
        mode = _ROUNDINGS.get(rounding) if isinstance(rounding, str) else None
        if mode is None:
            mode = as_rounding(rounding)
            _ROUNDINGS[rounding] = mode
    if nv:
        if scale_mode != "floor" and as_scale_mode(scale_mode) is not ScaleMode.FLOOR:
            raise ValueError("scale_mode applies to the MX formats (E8M0 scales); nvfp4's "
                             "e4m3 scales follow NVIDIA's recipe, so leave scale_mode='floor'")
        smode = None
        if per_tensor_scale is not None:
            if isinstance(per_tensor_scale, bool) or not isinstance(
                    per_tensor_scale, (int, float, np.floating, np.integer)):
                raise TypeError(f"per_tensor_scale must be None or a float, got "
                                f"{per_tensor_scale!r}")
            if not (math.isfinite(per_tensor_scale) and per_tensor_scale > 0):
                raise ValueError(f"per_tensor_scale must be a finite positive float, got "
                                 f"{per_tensor_scale!r}")
            with np.errstate(**_IGNORE):
                stored = np.float32(per_tensor_scale)  # the recipe keeps and uses it in fp32
                inverse = np.float32(1) / stored
            if not (0 < stored < np.inf and 0 < inverse < np.inf):
                raise ValueError(f"per_tensor_scale {per_tensor_scale!r} is not a usable "
                                 f"float32 scale: it or its reciprocal becomes "
                                 f"{float(stored) if not 0 < stored < np.inf else float(inverse)}"
                                 f" in float32 (valid: {float(_PTS_MIN)!r} .. "
                                 f"{float(_PTS_MAX)!r})")
            per_tensor_scale = float(stored)
    else:
        smode = _SCALE_MODES.get(scale_mode) if isinstance(scale_mode, str) else None
        if smode is None:
            smode = as_scale_mode(scale_mode)
        if per_tensor_scale is not None:
            raise ValueError(f"per_tensor_scale is NVFP4's global scale; {f.name} has none "
                             "(pass per_tensor_scale=None)")
    arr = _as_input(x, nv)
    if arr.ndim == 0:
        raise ValueError("quantize: x must have at least one dimension (got a scalar); "
                         "pass np.atleast_1d(x)")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -arr.ndim <= axis < arr.ndim:
        raise ValueError(f"axis {axis} is out of range for x with {arr.ndim} dimension(s); "
                         f"valid: {-arr.ndim} .. {arr.ndim - 1}")
    ax = int(axis) % arr.ndim
    shape = arr.shape
    n = shape[ax]
    if bs > max(n, f.block_size):
        raise ValueError(f"block_size {bs} is larger than the blocked axis ({n} values) and "
                         f"{f.name}'s block ({f.block_size}): one block padded with "
                         f"{bs - n} zeros per row; valid: 1 .. {max(n, f.block_size)}")
    nb = -(-n // bs)
    v = _move(arr, ax, -1)
    if nb * bs != n:
        pad = np.zeros(v.shape[:-1] + (nb * bs - n,), v.dtype)
        v = np.concatenate([v, pad], axis=-1)
    blocks = v.reshape(v.shape[:-1] + (nb, bs))
    amax = block_amax(blocks)
    dt = blocks.dtype.type
    if nv:
        with np.errstate(**_IGNORE):
            block_scale = amax / _FP4_MAX_OP
            if per_tensor_scale is not None:
                block_scale = block_scale / np.float32(per_tensor_scale)
            block_scale.clip(_E4M3_LO, _E4M3_HI, out=block_scale)  # fresh: in place
            s8 = block_scale.astype(ml_dtypes.float8_e4m3fn)
            s32 = s8.astype(np.float32)
            one = _ONE_OP
            if per_tensor_scale is None:
                recip = one / s32  # a reciprocal, then a product, as the MSLK kernel does
            else:
                recip = (one / np.float32(per_tensor_scale)) / s32
            y = blocks * recip[..., None]
        scales = s8
        nan_blocks = bool(np.isnan(amax).any())  # the clip and the e4m3 cast keep NaN only
    else:
        se = scale_exponent(amax, f.elem_emax, f.elem_mbits, f.elem_max, smode.value)
        nan = se == SCALE_NAN
        nan_blocks = bool(nan.any())
        codes = (se + E8M0_BIAS).astype(np.uint8)  # the NaN exponent 128 is code 255 (NaN)
        # 1/X = 2**-s exactly (2**127 and the subnormals 2**-127, 2**-128 all fit float32)
        recip = np.ldexp(np.ones(se.shape, dt), -se)
        if nan_blocks:
            recip[nan] = np.nan
        with np.errstate(**_IGNORE):
            y = blocks * recip[..., None]
        scales = codes.view(ml_dtypes.float8_e8m0fnu)
    if values and not nan_blocks and mode is Rounding.NEAREST_EVEN and y.dtype == _F32 \
            and (nv or f.storage_dtype == _E4M3_STORE) and not flags_active():
        # fake quantization: P rounded on the element grid (NVFP4's e2m1 or E4M3, after the
        # clamp of _round_elements), times the block's scale in float32, as dequantize does
        with np.errstate(invalid="ignore", over="ignore"):  # 448 * 2**127: inf, as there
            if nv:  # per_tensor_scale * s
                s = s32 if per_tensor_scale is None else np.float32(per_tensor_scale) * s32
            else:  # 2**s
                s = np.ldexp(np.ones(se.shape, np.float32), se)
            grid = _E2M1_NEAREST if nv else _E4M3_NEAREST
            out = clamped_values32(y, f.elem_max, grid) * s[..., None]
        out = out.reshape(out.shape[:-2] + (nb * bs,))[..., :n]
        return np.ascontiguousarray(_move(out, -1, ax))
    # a NaN scale (a NaN in the block, or an E8M0 overflow) makes the block's P NaN
    elems = _round_elements(y, f, mode, rng, nan_blocks)
    elems = elems.reshape(elems.shape[:-2] + (nb * bs,))
    q = MXArray(
        fmt=f,
        scales=np.ascontiguousarray(_move(scales, -1, ax)),
        elements=np.ascontiguousarray(_move(elems, -1, ax)),
        shape=tuple(shape),
        axis=ax,
        block_size=bs,
        scale_mode=smode,
        per_tensor_scale=per_tensor_scale,
    )
    if not (flags or flags_active()):
        return q.dequantize() if values else q
    fl = _quantize_flags(arr, q)
    record(fl, f"mx.quantize({f.name})")
    if values:
        return q.dequantize()
    return (q, fl) if flags else q


def _quantize_flags(x: np.ndarray, q: MXArray) -> np.ndarray:
    """The IEEE flags of each value of ``x`` against ``q.dequantize()`` (module docstring,
    rule 6), uint8 of ``x``'s shape."""
    d = q.dequantize().astype(np.float64)
    x = x.astype(np.float64)
    fin = np.isfinite(x)
    emax = q.fmt.elem_max if not q.fmt.is_int else 127 * 2.0**-MXINT8_FRACTION_BITS
    p = _move(q.element_values(), q.axis, -1)[..., : q.shape[q.axis]]
    at_max = np.abs(_move(p, -1, q.axis)) == np.float32(emax)
    with np.errstate(invalid="ignore"):
        changed = fin & ~(d == x)
        fl = np.where(changed, np.uint8(Flags.INEXACT), np.uint8(0))
        fl[changed & (x != 0) & (d == 0)] |= np.uint8(Flags.UNDERFLOW)
        fl[changed & ((at_max & (np.abs(d) < np.abs(x))) | np.isinf(d))] |= \
            np.uint8(Flags.OVERFLOW | Flags.INEXACT)
        fl[(np.isinf(x) & ~np.isinf(d)) | (fin & np.isnan(d))] = np.uint8(Flags.INVALID)
    return fl

