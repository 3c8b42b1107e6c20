"""Binary floating-point formats: one small dataclass, derived properties named after numpy.finfo.

A :class:`Format` is defined by a handful of orthogonal fields (exponent bits, mantissa bits,
bias and the special-value policies); everything else (``eps``, ``max``, ``tiny``, ...) is
derived with integer arithmetic. Presets for the formats of machine learning are exported at the
top level of the package (``fpsim.FP16``, ``fpsim.BF16``, ...).
"""

from __future__ import annotations

import enum
import functools
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

import ml_dtypes
import numpy as np

from .checks import as_int

__all__ = [
    "NaNEncoding",
    "Format",
    "FP64",
    "FP32",
    "TF32",
    "FP16",
    "BF16",
    "FP8_E4M3",
    "FP8_E5M2",
    "FP8_E4M3FNUZ",
    "FP8_E5M2FNUZ",
    "FP6_E2M3",
    "FP6_E3M2",
    "FP4_E2M1",
    "PRESETS",
    "IntFormat",
    "INT4",
    "UINT4",
    "INT8",
    "UINT8",
    "INT16",
    "INT32",
    "INT_PRESETS",
    "get_format",
    "get_float_format",
    "get_int_format",
    "list_formats",
]


class NaNEncoding(str, enum.Enum):
    """How a format spends its top exponent code (the OCP / LLVM naming).

    - ``IEEE``: exponent all ones is infinity (mantissa 0) or NaN (mantissa != 0).
    - ``FN``: "finite": no infinity; only exponent and mantissa all ones is NaN (e4m3fn).
    - ``FNUZ``: "finite, unsigned zero": no infinity, no -0; the pattern of -0 is the one NaN.
    - ``NONE``: every pattern is a finite number (the OCP MX fp6 / fp4 formats). Infinities
      round to +-max (INEXACT); a NaN has no pattern: :func:`fpsim.round` gives NaN with
      INVALID, :func:`fpsim.cast` and :func:`fpsim.to_bits` raise ValueError.
    """

    IEEE = "ieee"
    FN = "fn"
    FNUZ = "fnuz"
    NONE = "none"

    @property
    def meaning(self) -> str:
        """One line saying what the encoding does with the top codes.

        >>> NaNEncoding.FNUZ.meaning
        'no infinity and no -0: the pattern of -0 is the one NaN'
        """
        return {
            "ieee": "exponent all ones is infinity (mantissa 0) or NaN (mantissa != 0)",
            "fn": "no infinity: only exponent and mantissa all ones is NaN",
            "fnuz": "no infinity and no -0: the pattern of -0 is the one NaN",
            "none": "no NaN and no infinity: every pattern is a finite number",
        }[self.value]


def _pow2(k: int) -> float:
    """2**k as an exact float (k within the float64 range)."""
    return math.ldexp(1.0, k)


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: sign bit, ``exponent_bits``, ``mantissa_bits`` (stored
    fraction bits, the implicit leading bit not counted).

    Defining fields are orthogonal; ``bias`` defaults to ``2**(exponent_bits-1) - 1`` and
    ``name`` to ``"e{E}m{M}"`` plus what it takes for :func:`get_format` to read the same
    layout back (``fn`` / ``fnuz`` suffixes, ``_nonan``, ``_b<bias>``, ``_nosub``,
    ``_ieee``). Only formats whose every value float64 holds exactly are accepted (at most 52
    mantissa bits, exponents inside float64's), so every result of fpsim is an exact float64.

    >>> import fpsim
    >>> f = fpsim.Format(exponent_bits=5, mantissa_bits=6)
    >>> f.name, f.bits, f.max, f.eps
    ('e5m6', 12, 65024.0, 0.015625)
    """

    exponent_bits: int
    mantissa_bits: int
    bias: int | None = None
    nan_encoding: NaNEncoding | str = NaNEncoding.IEEE
    subnormals: bool = True
    name: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # bit counts: what range() takes (fpsim.checks.as_int), stored as ints below
        ebits = as_int("Format.exponent_bits", self.exponent_bits, None)
        if ebits < 1:
            raise ValueError(f"Format needs at least 1 exponent bit, got {ebits}")
        mbits = as_int("Format.mantissa_bits", self.mantissa_bits, 0)
        try:
            enc = NaNEncoding(self.nan_encoding)
        except ValueError:
            valid = ", ".join(repr(e.value) for e in NaNEncoding)
            raise ValueError(
                f"unknown nan_encoding {self.nan_encoding!r}; valid: {valid}"
            ) from None
        object.__setattr__(self, "nan_encoding", enc)
        object.__setattr__(self, "exponent_bits", ebits)
        object.__setattr__(self, "mantissa_bits", mbits)
        if not isinstance(self.subnormals, (bool, np.bool_)):
            raise ValueError(
                f"Format.subnormals must be True (gradual underflow) or False (none: the "
                f"format flushes), got {self.subnormals!r}")
        object.__setattr__(self, "subnormals", bool(self.subnormals))
        if self.bias is None:
            object.__setattr__(self, "bias", (1 << (self.exponent_bits - 1)) - 1)
        if isinstance(self.bias, bool) or not isinstance(self.bias, (int, np.integer)):
            raise TypeError(f"Format.bias must be an int or None, got {self.bias!r}")
        object.__setattr__(self, "bias", int(self.bias))
        if self.name is None:
            object.__setattr__(self, "name", _default_name(self))
        elif not isinstance(self.name, str):
            raise TypeError(f"Format.name must be a str or None, got {type(self.name).__name__}")
        if enc is NaNEncoding.IEEE and self.exponent_bits < 2:
            raise ValueError("an IEEE-style format needs >= 2 exponent bits (one code is inf/NaN)")
        if enc is NaNEncoding.IEEE and self.mantissa_bits == 0:
            raise ValueError(
                "an IEEE-style format needs >= 1 mantissa bit: with none, NaN (exponent all "
                "ones, mantissa != 0) has no pattern and would read as infinity; use "
                "nan_encoding 'fn', 'fnuz' or 'none' for a 0-mantissa format")
        if enc is NaNEncoding.FN and self.exponent_bits + self.mantissa_bits < 2:
            raise ValueError("an 'fn' format needs at least 2 exponent+mantissa bits")
        # float64 must hold every value exactly: precision, largest and smallest exponents.
        if self.mantissa_bits > 52:
            raise ValueError(
                f"format {self.name} has {self.mantissa_bits} mantissa bits; fpsim holds values "
                "in float64, so at most 52 are supported"
            )
        if self.emax > 1023 or self.emin < -1022 or self.emin - self.mantissa_bits < -1074:
            raise ValueError(
                f"format {self.name} has exponents [{self.emin}, {self.emax}] outside what "
                "float64 holds exactly ([-1022, 1023], smallest subnormal 2**-1074)"
            )

    # -- encoding facts -----------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width in bits (sign + exponent + mantissa)."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def has_infinity(self) -> bool:
        """True when the format encodes +-inf."""
        return self.nan_encoding is NaNEncoding.IEEE

    @property
    def has_nan(self) -> bool:
        """True when some bit pattern is NaN."""
        return self.nan_encoding is not NaNEncoding.NONE

    @property
    def has_negative_zero(self) -> bool:
        """False for 'fnuz' formats, whose -0 pattern is NaN."""
        return self.nan_encoding is not NaNEncoding.FNUZ

    @property
    def precision_bits(self) -> int:
        """p: significand bits including the implicit one."""
        return self.mantissa_bits + 1

    @property
    def nmant(self) -> int:
        """numpy.finfo name for the stored mantissa bits."""
        return self.mantissa_bits

    @property
    def nexp(self) -> int:
        """numpy.finfo name for the exponent bits."""
        return self.exponent_bits

    iexp = nexp

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number, 2**emin (numpy's ``minexp``)."""
        return 1 - self.bias

    minexp = emin

    @property
    def emax(self) -> int:
        """Exponent of the largest finite binade."""
        top = (1 << self.exponent_bits) - 1  # largest biased exponent code
        if self.nan_encoding is NaNEncoding.IEEE:
            top -= 1  # the all-ones code is inf/NaN
        elif self.nan_encoding is NaNEncoding.FN and self.mantissa_bits == 0:
            top -= 1  # a lone NaN pattern takes the whole top binade
        return top - self.bias

    @property
    def maxexp(self) -> int:
        """numpy.finfo ``maxexp``: the first exponent that overflows (emax + 1)."""
        return self.emax + 1

    @property
    def max_significand(self) -> int:
        """Largest integer significand of the top binade (with the implicit bit)."""
        full = (1 << (self.mantissa_bits + 1)) - 1
        if self.nan_encoding is NaNEncoding.FN and self.mantissa_bits > 0:
            return full - 1  # the all-ones mantissa of the top binade is NaN
        return full

    @functools.cached_property
    def max(self) -> float:
        """Largest finite value."""
        return math.ldexp(float(self.max_significand), self.emax - self.mantissa_bits)

    @property
    def min(self) -> float:
        """Most negative finite value (``-max``)."""
        return -self.max

    @property
    def smallest_normal(self) -> float:
        """2**emin, the smallest positive normal value."""
        return _pow2(self.emin)

    tiny = smallest_normal

    @property
    def smallest_subnormal(self) -> float:
        """The smallest positive value: 2**(emin - mantissa_bits), or 2**emin without subnormals."""
        return _pow2(self.emin - self.mantissa_bits) if self.subnormals else _pow2(self.emin)

    @property
    def eps(self) -> float:
        """Distance from 1 to the next larger value, 2**-mantissa_bits."""
        return _pow2(-self.mantissa_bits)

    @property
    def epsneg(self) -> float:
        """Distance from 1 to the next smaller value: 2**(-mantissa_bits - 1), or eps when 1 is
        the smallest normal (emin = 0, as fp4 / fp6 e2m3), whose neighbour below is subnormal."""
        return _pow2(self.negep)

    @property
    def machep(self) -> int:
        """Exponent of eps (numpy.finfo ``machep``)."""
        return -self.mantissa_bits

    @property
    def negep(self) -> int:
        """Exponent of epsneg (numpy.finfo ``negep``): the spacing below 1 is that of the binade
        [1/2, 1), or of the subnormals when that binade lies below 2**emin."""
        return max(-1, self.emin) - self.mantissa_bits

    @property
    def unit_roundoff(self) -> float:
        """u = eps / 2: the relative error bound of round to nearest."""
        return _pow2(-self.mantissa_bits - 1)

    @property
    def precision(self) -> int:
        """Approximate decimal digits, numpy.finfo's ``precision`` (floor(-log10(eps)))."""
        return int(math.floor(self.mantissa_bits * math.log10(2)))

    @property
    def resolution(self) -> float:
        """10**-precision, as numpy.finfo."""
        return float(10.0 ** -self.precision)

    @functools.cached_property  # asked on every op; a frozen dataclass still has a __dict__
    def dtype(self) -> np.dtype | None:
        """The NumPy / ml_dtypes storage dtype holding this format at its real width, or None."""
        return _STORAGE.get(self._key())

    @functools.cached_property
    def storage_dtype(self) -> np.dtype:
        """The dtype tensors of this format are stored in: the native one, else float32 when
        every value fits float32, else float64."""
        if self.dtype is not None:
            return self.dtype
        fits32 = self.mantissa_bits <= 23 and self.emax <= 127 and (
            self.emin - self.mantissa_bits >= -149
        )
        return np.dtype(np.float32) if fits32 else np.dtype(np.float64)

    @property
    def num_finite(self) -> int:
        """How many finite bit patterns the format has (both signs, both zeros counted)."""
        n = 1 << self.bits
        if self.nan_encoding is NaNEncoding.IEEE:
            n -= 2 << self.mantissa_bits
        elif self.nan_encoding is NaNEncoding.FN:
            n -= 2
        elif self.nan_encoding is NaNEncoding.FNUZ:
            n -= 1
        return n

    def exact_max(self) -> Fraction:
        """The largest finite value as an exact Fraction (for tests and teaching)."""
        return Fraction(self.max)

    def _key(self) -> tuple:
        return (self.exponent_bits, self.mantissa_bits, self.bias, self.nan_encoding,
                self.subnormals)

    def __str__(self) -> str:
        return self.name  # type: ignore[return-value]

    def describe(self) -> str:
        """One line: name, layout and range.

        >>> import fpsim
        >>> fpsim.FP16.describe()
        'fp16: 1 sign + 5 exponent + 10 mantissa bits, bias 15, max 65504, eps 0.000976562'
        """
        return (
            f"{self.name}: 1 sign + {self.exponent_bits} exponent + {self.mantissa_bits} mantissa"
            f" bits, bias {self.bias}, max {self.max:.6g}, eps {self.eps:.6g}"
        )


FP64 = Format(11, 52, name="fp64")
FP32 = Format(8, 23, name="fp32")
TF32 = Format(8, 10, name="tf32")
FP16 = Format(5, 10, name="fp16")
BF16 = Format(8, 7, name="bf16")
FP8_E4M3 = Format(4, 3, nan_encoding=NaNEncoding.FN, name="fp8_e4m3")
FP8_E5M2 = Format(5, 2, name="fp8_e5m2")
FP8_E4M3FNUZ = Format(4, 3, bias=8, nan_encoding=NaNEncoding.FNUZ, name="fp8_e4m3fnuz")
FP8_E5M2FNUZ = Format(5, 2, bias=16, nan_encoding=NaNEncoding.FNUZ, name="fp8_e5m2fnuz")
FP6_E2M3 = Format(2, 3, nan_encoding=NaNEncoding.NONE, name="fp6_e2m3")
FP6_E3M2 = Format(3, 2, nan_encoding=NaNEncoding.NONE, name="fp6_e3m2")
FP4_E2M1 = Format(2, 1, nan_encoding=NaNEncoding.NONE, name="fp4_e2m1")

PRESETS: dict[str, Format] = {
    f.name: f  # type: ignore[misc]
    for f in (FP64, FP32, TF32, FP16, BF16, FP8_E4M3, FP8_E5M2, FP8_E4M3FNUZ, FP8_E5M2FNUZ,
              FP6_E2M3, FP6_E3M2, FP4_E2M1)
}



@dataclass(frozen=True)
class IntFormat:
    """A two's-complement (``signed=True``) or unsigned integer format of ``bits`` bits, with
    properties named after ``numpy.iinfo``.

    >>> import fpsim
    >>> fpsim.INT8.min, fpsim.INT8.max, fpsim.UINT4.max
    (-128, 127, 15)
    """

    bits: int
    signed: bool = True
    name: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        bits = as_int("IntFormat.bits", self.bits, None)  # what range() takes
        if not 2 <= bits <= 64:
            raise ValueError(f"IntFormat.bits must lie in [2, 64], got {bits}")
        object.__setattr__(self, "bits", bits)
        if self.name is None:
            object.__setattr__(self, "name", f"{'' if self.signed else 'u'}int{self.bits}")

    @property
    def min(self) -> int:
        """Smallest value (numpy.iinfo ``min``)."""
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        """Largest value (numpy.iinfo ``max``)."""
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def kind(self) -> str:
        """'i' for signed, 'u' for unsigned, as numpy.iinfo."""
        return "i" if self.signed else "u"

    @property
    def dtype(self) -> np.dtype:
        """The NumPy / ml_dtypes dtype holding this format (int4 as ml_dtypes.int4)."""
        return _INT_STORAGE.get((self.bits, self.signed)) or np.dtype(
            f"{self.kind}{max(1, 1 << (max(self.bits, 8) - 1).bit_length()) // 8}"
        )

    storage_dtype = dtype

    def __str__(self) -> str:
        return self.name  # type: ignore[return-value]


INT4 = IntFormat(4, True, name="int4")
UINT4 = IntFormat(4, False, name="uint4")
INT8 = IntFormat(8, True, name="int8")
UINT8 = IntFormat(8, False, name="uint8")
INT16 = IntFormat(16, True, name="int16")
INT32 = IntFormat(32, True, name="int32")
INT_PRESETS: dict[str, IntFormat] = {f.name: f for f in (INT4, UINT4, INT8, UINT8, INT16, INT32)}  # type: ignore[misc]
_INT_STORAGE = {
    (4, True): np.dtype(ml_dtypes.int4), (4, False): np.dtype(ml_dtypes.uint4),
    (8, True): np.dtype(np.int8), (8, False): np.dtype(np.uint8),
    (16, True): np.dtype(np.int16), (32, True): np.dtype(np.int32),
}

_ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64", "f64": "fp64", "binary64": "fp64",
    "float32": "fp32", "single": "fp32", "float": "fp32", "f32": "fp32", "binary32": "fp32",
    "tensorfloat32": "tf32", "tensorfloat-32": "tf32",
    "float16": "fp16", "half": "fp16", "f16": "fp16", "binary16": "fp16",
    "bfloat16": "bf16", "brainfloat16": "bf16",
    "e4m3": "fp8_e4m3", "e4m3fn": "fp8_e4m3", "fp8": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "e4m3fnuz": "fp8_e4m3fnuz", "float8_e4m3fnuz": "fp8_e4m3fnuz",
    "e5m2fnuz": "fp8_e5m2fnuz", "float8_e5m2fnuz": "fp8_e5m2fnuz",
    "e2m3": "fp6_e2m3", "float6_e2m3fn": "fp6_e2m3", "e3m2": "fp6_e3m2",
    "float6_e3m2fn": "fp6_e3m2", "e2m1": "fp4_e2m1", "float4_e2m1fn": "fp4_e2m1", "fp4": "fp4_e2m1",
}

_STORAGE: dict[tuple, np.dtype] = {
    FP64._key(): np.dtype(np.float64),
    FP32._key(): np.dtype(np.float32),
    FP16._key(): np.dtype(np.float16),
    BF16._key(): np.dtype(ml_dtypes.bfloat16),
    FP8_E4M3._key(): np.dtype(ml_dtypes.float8_e4m3fn),
    FP8_E5M2._key(): np.dtype(ml_dtypes.float8_e5m2),
    FP8_E4M3FNUZ._key(): np.dtype(ml_dtypes.float8_e4m3fnuz),
    FP8_E5M2FNUZ._key(): np.dtype(ml_dtypes.float8_e5m2fnuz),
    FP6_E2M3._key(): np.dtype(ml_dtypes.float6_e2m3fn),
    FP6_E3M2._key(): np.dtype(ml_dtypes.float6_e3m2fn),
    FP4_E2M1._key(): np.dtype(ml_dtypes.float4_e2m1fn),
}


_NAME_RE = re.compile(
    r"(?:float\d+_)?e(\d+)m(\d+)(?:b(\d+))?(fnuz|fn)?((?:_(?:b-?\d+|nonan|nosub|ieee))*)")
_SUFFIX = {NaNEncoding.IEEE: "", NaNEncoding.FN: "fn", NaNEncoding.FNUZ: "fnuz",
           NaNEncoding.NONE: "_nonan"}


def _conventional_bias(exponent_bits: int, enc: NaNEncoding) -> int:
    """The bias an eXmY name implies: IEEE's 2**(E-1) - 1, or LLVM's 2**(E-1) for 'fnuz'."""
    return (1 << (exponent_bits - 1)) - (0 if enc is NaNEncoding.FNUZ else 1)


def _default_name(f: Format) -> str:
    """The eXmY name of a format, read back by :func:`get_format`: 'fn' / 'fnuz' suffixes
    (OCP / LLVM), then '_nonan' (no NaN at all), '_b<bias>' for a bias other than the one the
    name implies, '_nosub' without subnormals, and '_ieee' where the bare name is the alias of
    a preset with another layout ('e4m3' means OCP's e4m3fn)."""
    enc = NaNEncoding(f.nan_encoding)
    name = f"e{f.exponent_bits}m{f.mantissa_bits}{_SUFFIX[enc]}"
    if f.bias != _conventional_bias(f.exponent_bits, enc):
        name += f"_b{f.bias}"
    if not f.subnormals:
        name += "_nosub"
    aliases = globals().get("_ALIASES", {})
    if name in aliases and PRESETS[aliases[name]]._key() != f._key():
        name += "_ieee"  # only IEEE layouts collide with the OCP aliases
    return name


def _parse_name(key: str) -> Format | None:
    """The format an eXmY name describes (see :func:`_default_name`), or None."""
    m = _NAME_RE.fullmatch(key)
    if m is None:
        return None
    quals = [q for q in m.group(5).split("_") if q]
    if m.group(3) is not None:  # ml_dtypes' spelling: e4m3b11fnuz
        quals.append(f"b{m.group(3)}")
    enc = {None: NaNEncoding.IEEE, "fn": NaNEncoding.FN, "fnuz": NaNEncoding.FNUZ}[m.group(4)]
    if "nonan" in quals:
        if enc is not NaNEncoding.IEEE:
            raise ValueError(f"format name {key!r}: '_nonan' replaces the 'fn'/'fnuz' suffix")
        enc = NaNEncoding.NONE
    if "ieee" in quals and enc is not NaNEncoding.IEEE:
        raise ValueError(f"format name {key!r}: '_ieee' takes no 'fn'/'fnuz'/'_nonan'")
    e, mbits = int(m.group(1)), int(m.group(2))
    bias = [int(q[1:]) for q in quals if q.startswith("b")]
    if len(bias) > 1 or len(quals) != len(set(quals)):
        raise ValueError(f"format name {key!r} repeats a qualifier")
    if e < 1:
        raise ValueError(f"format name {key!r}: a format needs at least 1 exponent bit")
    f = Format(e, mbits, bias=bias[0] if bias else _conventional_bias(e, enc), nan_encoding=enc,
               subnormals="nosub" not in quals)
    return next((p for p in PRESETS.values() if p._key() == f._key()), f)


def list_formats() -> list[str]:
    """Names of the preset floating-point formats.

    >>> import fpsim
    >>> "bf16" in fpsim.list_formats()
    True
    """
    return list(PRESETS)


def get_format(fmt: Format | IntFormat | str | np.dtype | type) -> Format | IntFormat:
    """Look a format up by preset name, alias ("half", "bfloat16", "e4m3", "int8", ...),
    eXmY name (``"e3m4"``, ``"e4m3fn"``, ``"e5m2fnuz"``: E exponent and Y mantissa bits; the
    ``fn`` suffix: no infinity, NaN at all ones; ``fnuz``: no infinity, no -0, bias 2**(E-1);
    qualifiers ``_nonan``, ``_b<bias>``, ``_nosub``, as :attr:`Format.name` writes them;
    ml_dtypes' names such as ``float8_e4m3b11fnuz`` too) or
    NumPy / ml_dtypes dtype; a :class:`Format` or :class:`IntFormat` is returned unchanged.
    Float operations take the floating-point ones (:func:`get_float_format`).

    >>> import fpsim
    >>> fpsim.get_format("half") is fpsim.FP16
    True
    >>> fpsim.get_format("E5M2").max
    57344.0
    >>> f = fpsim.get_format("e3m4"); f.max, f == fpsim.Format(3, 4)
    (15.5, True)
    """
    if isinstance(fmt, (Format, IntFormat)):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip().lower().replace(" ", "")
        key = _ALIASES.get(key, key)
        if key in PRESETS:
            return PRESETS[key]
        if key in INT_PRESETS:
            return INT_PRESETS[key]
        parsed = _parse_name(key)
        if parsed is not None:
            return parsed
        m = re.fullmatch(r"(u?)int(\d+)", key)  # IntFormat(...).name reads back too
        if m is not None:
            return IntFormat(int(m.group(2)), signed=not m.group(1))
        valid = ", ".join(list(PRESETS) + list(INT_PRESETS) + sorted(_ALIASES))
        raise ValueError(f"unknown format {fmt!r}; valid names: {valid}, or eXmY names "
                         "(E exponent and Y mantissa bits, e.g. e3m4, e4m3fn, e5m2fnuz), or "
                         "int<N> / uint<N> (2 <= N <= 64)")
    if fmt is None:  # np.dtype(None) is float64: never a silent default
        raise TypeError(f"fmt must be a Format, a format name or a dtype, got None; names: "
                        f"{', '.join(list(PRESETS) + list(INT_PRESETS))}")
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise TypeError(
            f"fmt must be a Format, a format name or a dtype, got {type(fmt).__name__}"
        ) from None
    for key, storage in _STORAGE.items():
        if storage == dt:
            return next(f for f in PRESETS.values() if f._key() == key)
    for (bits, signed), storage in _INT_STORAGE.items():
        if storage == dt:
            return next(f for f in INT_PRESETS.values() if (f.bits, f.signed) == (bits, signed))
    raise ValueError(
        f"dtype {dt} has no fpsim float format; valid: "
        f"{', '.join(str(d) for d in _STORAGE.values())}"
    )


def get_float_format(fmt: Format | str | np.dtype | type) -> Format:
    """:func:`get_format`, refusing integer formats with a TypeError (for float operations).

    >>> get_float_format("bf16").name
    'bf16'
    """
    f = get_format(fmt)
    if isinstance(f, IntFormat):
        raise TypeError(
            f"fmt {f.name!r} is an integer format; this operation needs a floating-point format "
            f"({', '.join(PRESETS)}); use fpsim.integer for integer arithmetic"
        )
    return f


def get_int_format(fmt: IntFormat | str | np.dtype | type) -> IntFormat:
    """:func:`get_format`, refusing floating-point formats with a TypeError.

    >>> get_int_format("int8").max
    127
    """
    f = get_format(fmt)
    if not isinstance(f, IntFormat):
        raise TypeError(
            f"{f.name} is a floating-point format; this operation needs an integer format "
            f"({', '.join(INT_PRESETS)})"
        )
    return f
