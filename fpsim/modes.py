"""Named policies of rounding: rounding modes, overflow, subnormals and tininess.

Every public function takes either the enum member or its string value; :func:`as_rounding`
and friends turn either into the enum and reject anything else with the list of valid names.
"""

from __future__ import annotations

import enum

__all__ = [
    "Rounding",
    "Overflow",
    "Subnormals",
    "Tininess",
    "as_rounding",
    "rounding_aliases",
    "as_overflow",
    "as_subnormals",
    "as_tininess",
]


class Rounding(str, enum.Enum):
    """Rounding modes (IEEE 754 attributes plus round-to-odd and stochastic rounding).

    Every function taking a mode also accepts these aliases (:func:`rounding_aliases`):
    ``rne``, ``rn``, ``nearest``, ``rnear_even``, ``ties_to_even`` (nearest_even); ``rna``,
    ``rnear_maxmag``, ``ties_to_away`` (nearest_away); ``rz``, ``rtz``, ``rminmag``,
    ``truncate`` (toward_zero); ``ru``, ``rmax``, ``toward_positive`` (up); ``rd``, ``rmin``,
    ``toward_negative`` (down); ``ro``, ``rodd`` (odd); ``sr`` (stochastic).
    """

    NEAREST_EVEN = "nearest_even"  # IEEE roundTiesToEven, the default
    NEAREST_AWAY = "nearest_away"  # IEEE roundTiesToAway
    TOWARD_ZERO = "toward_zero"  # IEEE roundTowardZero (truncation)
    UP = "up"  # IEEE roundTowardPositive
    DOWN = "down"  # IEEE roundTowardNegative
    ODD = "odd"  # truncate, then set the last bit if inexact: safe before a second rounding
    STOCHASTIC = "stochastic"  # up with probability (x - down) / ulp


class Overflow(str, enum.Enum):
    """What a finite result beyond the largest finite value becomes."""

    INF = "inf"  # IEEE: +-inf or +-max depending on the mode; NaN for formats without inf
    SATURATE = "saturate"  # clamp to +-max (what fp8 kernels and quantizers do)


class Subnormals(str, enum.Enum):
    """Subnormal handling on the result side (flush) and the input side (daz)."""

    KEEP = "keep"  # gradual underflow, IEEE
    FLUSH = "flush"  # flush-to-zero: tiny results become signed zero
    DAZ = "daz"  # denormals-are-zero: subnormal inputs read as signed zero
    FLUSH_DAZ = "flush_daz"  # both, as CUDA's -ftz=true and x86 FTZ+DAZ


class Tininess(str, enum.Enum):
    """When underflow is detected (IEEE 754 leaves the choice to the implementation)."""

    AFTER = "after"  # after rounding, as x86 SSE, Arm and RISC-V do (SoftFloat's default)
    BEFORE = "before"  # before rounding, as some other architectures do


_ROUNDING_ALIASES = {
    "rne": Rounding.NEAREST_EVEN, "rn": Rounding.NEAREST_EVEN, "nearest": Rounding.NEAREST_EVEN,
    "rnear_even": Rounding.NEAREST_EVEN, "ties_to_even": Rounding.NEAREST_EVEN,
    "rna": Rounding.NEAREST_AWAY, "rnear_maxmag": Rounding.NEAREST_AWAY,
    "ties_to_away": Rounding.NEAREST_AWAY,
    "rz": Rounding.TOWARD_ZERO, "rtz": Rounding.TOWARD_ZERO, "rminmag": Rounding.TOWARD_ZERO,
    "truncate": Rounding.TOWARD_ZERO,
    "ru": Rounding.UP, "rmax": Rounding.UP, "toward_positive": Rounding.UP,
    "rd": Rounding.DOWN, "rmin": Rounding.DOWN, "toward_negative": Rounding.DOWN,
    "ro": Rounding.ODD, "rodd": Rounding.ODD,
    "sr": Rounding.STOCHASTIC,
}


def rounding_aliases() -> dict[Rounding, list[str]]:
    """The other names each rounding mode answers to (TestFloat's, CUDA's, common ones).

    >>> rounding_aliases()[Rounding.TOWARD_ZERO]
    ['rz', 'rtz', 'rminmag', 'truncate']
    """
    out: dict[Rounding, list[str]] = {m: [] for m in Rounding}
    for alias, mode in _ROUNDING_ALIASES.items():
        out[mode].append(alias)
    return out


def _lookup(enum_cls: type[enum.Enum], value: object, what: str, aliases: dict | None = None):
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        try:
            return enum_cls(key)
        except ValueError:
            if aliases and key in aliases:
                return aliases[key]
    valid = ", ".join(repr(m.value) for m in enum_cls)  # type: ignore[attr-defined]
    extra = f" (aliases: {', '.join(sorted(aliases))})" if aliases else ""
    raise ValueError(f"unknown {what} {value!r}; valid: {valid}{extra}")


def as_rounding(rounding: Rounding | str) -> Rounding:
    """The :class:`Rounding` member for a name, alias ("rne", "rz", TestFloat's "rmin", ...)
    or member.

    >>> as_rounding("rz")
    <Rounding.TOWARD_ZERO: 'toward_zero'>
    """
    return _lookup(Rounding, rounding, "rounding mode", _ROUNDING_ALIASES)


def as_overflow(overflow: Overflow | str) -> Overflow:
    """The :class:`Overflow` member for a name or member.

    >>> as_overflow("saturate")
    <Overflow.SATURATE: 'saturate'>
    """
    return _lookup(Overflow, overflow, "overflow policy")


def as_subnormals(subnormals: Subnormals | str) -> Subnormals:
    """The :class:`Subnormals` member for a name or member.

    >>> as_subnormals("flush")
    <Subnormals.FLUSH: 'flush'>
    """
    return _lookup(Subnormals, subnormals, "subnormals policy")


def as_tininess(tininess: Tininess | str) -> Tininess:
    """The :class:`Tininess` member for a name or member.

    >>> as_tininess("before")
    <Tininess.BEFORE: 'before'>
    """
    return _lookup(Tininess, tininess, "tininess")
