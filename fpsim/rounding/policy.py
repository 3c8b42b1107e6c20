"""How to round: :class:`RoundingPolicy` (format, mode, overflow, subnormals, tininess,
generator, random bits) parsed and validated once, :func:`policy_of` for a call's separate
options, and the ambient generator of stochastic rounding (:func:`seed`, :func:`default_rng`).

Contract: everything below the policy takes parsed values only (enum members, a
:class:`~fpsim.formats.Format`); option parsing and its error messages live here and nowhere
else. No rounding happens in this module.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np

from .. import state as _state
from ..checks import as_int
from ..formats import Format, get_float_format
from ..modes import (
    Overflow,
    Rounding,
    Subnormals,
    Tininess,
    as_overflow,
    as_rounding,
    as_subnormals,
    as_tininess,
)


def seed(value: int | None) -> None:
    """Reseed the generator stochastic rounding uses when no ``rng`` is given.

    >>> import fpsim
    >>> fpsim.seed(0); a = fpsim.round([0.1] * 4, "bf16", "stochastic")
    >>> fpsim.seed(0); b = fpsim.round([0.1] * 4, "bf16", "stochastic")
    >>> bool((a == b).all())
    True
    """
    _state.rounding_rng = np.random.default_rng(  # ambient state lives in fpsim.state
        None if value is None else _state.as_seed(value, "fpsim.seed: value"))

def default_rng(rng: np.random.Generator | int | None = None, *,
                name: str = "rng") -> np.random.Generator:
    """The generator to use: ``rng`` itself, a new one seeded by a non-negative int, or fpsim's
    default; a bad ``rng`` is an error naming the argument ``name``
    (:func:`fpsim.state.as_generator`).

    >>> bool(default_rng(3).integers(10) == default_rng(3).integers(10))
    True
    """
    return _state.as_generator(rng, _state.rounding_rng, name=name)

def random_bits_of(random_bits, rounding: Rounding) -> int | None:
    """Internal API of every function that takes ``random_bits`` (:class:`RoundingPolicy`,
    fpsim.integer): None stays None; else ``rounding`` must be stochastic and ``random_bits`` an
    int in [1, 63] by fpsim.checks.as_int's rule (what range() takes; a TypeError for other
    types), returned as an int.

    >>> random_bits_of(np.int8(8), Rounding.STOCHASTIC)
    8
    >>> random_bits_of(64, Rounding.STOCHASTIC)
    Traceback (most recent call last):
    ...
    ValueError: random_bits must be an int in [1, 63], got 64
    """
    if random_bits is None:
        return None
    if rounding is not Rounding.STOCHASTIC:
        raise ValueError("random_bits only applies to rounding='stochastic'")
    n = as_int("random_bits", random_bits, None)  # what range() takes; TypeError else
    if not 1 <= n <= 63:
        raise ValueError(f"random_bits must be an int in [1, 63], got {random_bits!r}")
    return n

@dataclass(frozen=True)
class RoundingPolicy:
    """How values are rounded to a format: the one value object behind the ``fmt``,
    ``rounding``, ``overflow``, ``subnormals``, ``tininess``, ``rng`` and ``random_bits``
    arguments of fpsim's rounding and arithmetic, parsed and validated once.

    The fields take what those arguments take and hold the parsed values (a
    :class:`~fpsim.formats.Format`, enum members, an int ``random_bits``); ``rng`` is kept as
    given (None: fpsim's default generator at the time of use). ``flush`` and ``daz`` are
    derived (``flush`` also for a format without subnormals). Functions that take the
    separate options also take ``policy=`` instead (then ``fmt`` and the options stay unset).
    ``flags=`` is not part of the policy: it says what to return, not how to round.

    >>> p = RoundingPolicy("bf16", "up")
    >>> p.fmt.name, p.rounding.value, p.flush
    ('bf16', 'up', False)
    >>> import fpsim
    >>> float(fpsim.round(1/3, policy=p)) == float(fpsim.round(1/3, "bf16", "up"))
    True
    """

    fmt: Format
    rounding: Rounding = Rounding.NEAREST_EVEN
    overflow: Overflow = Overflow.INF
    subnormals: Subnormals = Subnormals.KEEP
    tininess: Tininess = Tininess.AFTER
    rng: np.random.Generator | int | None = None
    random_bits: int | None = None
    flush: bool = field(init=False, repr=False, compare=False)
    daz: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = functools.partial(object.__setattr__, self)  # frozen: set the parsed values once
        fmt = get_float_format(self.fmt)
        mode = as_rounding(self.rounding)
        sub = as_subnormals(self.subnormals)
        random_bits = random_bits_of(self.random_bits, mode)
        put("fmt", fmt)
        put("rounding", mode)
        put("overflow", as_overflow(self.overflow))
        put("subnormals", sub)
        put("tininess", as_tininess(self.tininess))
        put("random_bits", random_bits)
        put("flush", sub in (Subnormals.FLUSH, Subnormals.FLUSH_DAZ) or not fmt.subnormals)
        put("daz", sub in (Subnormals.DAZ, Subnormals.FLUSH_DAZ))

    def generator(self) -> np.random.Generator | None:
        """The generator stochastic rounding draws from (None in the other modes). Called
        once per call: an int ``rng`` seeds a new generator each time.

        >>> RoundingPolicy("bf16").generator() is None
        True
        """
        return default_rng(self.rng) if self.rounding is Rounding.STOCHASTIC else None

    def replace(self, **changes) -> RoundingPolicy:
        """This policy with some fields changed (keywords as the constructor's), parsed and
        validated as a new one; ``flush`` and ``daz`` are derived again.

        >>> p = RoundingPolicy("fp16", "up", subnormals="flush").replace(fmt="bf16")
        >>> p.fmt.name, p.rounding.value, p.flush
        ('bf16', 'up', True)
        """
        return dataclasses.replace(self, **changes)


def without_daz(policy: RoundingPolicy) -> RoundingPolicy:
    """``policy`` without denormals-are-zero (flushing kept): how an exact value computed from
    the operands (a pair, an operation's result) is rounded, DAZ having applied to the
    operands already. ``policy`` itself when it has no DAZ. Internal API (pair, arithmetic).

    >>> without_daz(policy_of("fp16", subnormals="flush_daz")).subnormals.value
    'flush'
    """
    if not policy.daz:
        return policy
    flush = policy.subnormals is Subnormals.FLUSH_DAZ
    return policy.replace(subnormals=Subnormals.FLUSH if flush else Subnormals.KEEP)

_OPTIONS = {"rounding": "nearest_even", "overflow": "inf", "subnormals": "keep",
            "tininess": "after", "rng": None, "random_bits": None}

@functools.lru_cache(maxsize=512, typed=True)
def _parsed(fmt, rounding, overflow, subnormals, tininess, random_bits) -> RoundingPolicy:
    return RoundingPolicy(fmt, rounding, overflow, subnormals, tininess, None, random_bits)

def policy_of(fmt, rounding="nearest_even", overflow="inf", subnormals="keep",
              tininess="after", rng=None, random_bits=None,
              policy: RoundingPolicy | None = None, *, what: str = "round") -> RoundingPolicy:
    """The :class:`RoundingPolicy` of a call's arguments, parsed once (cached: the same
    arguments give the same object); a ``policy`` given instead is returned as it is. Giving
    both (``fmt`` or a non-default option besides ``policy``) is a TypeError.

    >>> policy_of("fp16", "up") is policy_of("fp16", "up")
    True
    """
    if policy is not None:
        if not isinstance(policy, RoundingPolicy):
            raise TypeError(f"{what}: policy must be a fpsim.RoundingPolicy, got "
                            f"{type(policy).__name__}")
        given = [k for k, v in zip(_OPTIONS, (rounding, overflow, subnormals, tininess, rng,
                                              random_bits), strict=True)
                 if v is not _OPTIONS[k] and not (isinstance(v, str) and v == _OPTIONS[k])]
        if fmt is not None:
            given.insert(0, "fmt")
        if given:
            raise TypeError(f"{what}: give either policy= or fmt and the rounding options, not "
                            f"both (got policy= with {', '.join(given)})")
        return policy
    try:
        pol = _parsed(fmt, rounding, overflow, subnormals, tininess, random_bits)
    except (TypeError, ValueError):  # hashing a generic np.timedelta64 is a ValueError
        if _hashable(fmt, rounding, overflow, subnormals, tininess, random_bits):
            raise  # the argument's own clear error
        pol = RoundingPolicy(fmt, rounding, overflow, subnormals, tininess, None, random_bits)
    if rng is not None:
        pol = RoundingPolicy(pol.fmt, pol.rounding, pol.overflow, pol.subnormals, pol.tininess,
                             rng, pol.random_bits)
    return pol

def _hashable(*args) -> bool:
    try:
        hash(args)
    except (TypeError, ValueError):
        return False
    return True
