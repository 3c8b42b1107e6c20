"""IEEE 754 exception flags: the bit mask, and a sticky context that collects and traps them.

Every rounding in fpsim can report, per element, which of the five IEEE exceptions it raised
(``flags=True``). Inside ``with fpsim.flag_context() as ctx:`` the OR of all flags raised by
any fpsim operation is accumulated in ``ctx.flags``, whether or not ``flags=True`` was passed;
``trap=`` turns chosen flags into an exception, as ``numpy.errstate(..., ='raise')`` does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np

from . import state as _state

__all__ = ["Flags", "FlagContext", "FloatingPointTrap", "flag_context", "flags_active", "record",
           "suspended"]


class Flags(enum.IntFlag):
    """The IEEE exception bits, with TestFloat / SoftFloat's values."""

    NONE = 0
    INEXACT = 0x01
    UNDERFLOW = 0x02
    OVERFLOW = 0x04
    DIVBYZERO = 0x08
    INVALID = 0x10


class FloatingPointTrap(FloatingPointError):
    """Raised inside a :func:`flag_context` when a trapped flag is raised."""

    def __init__(self, flags: Flags, where: str):
        self.flags = flags
        super().__init__(f"floating-point exception {flags!r} trapped in {where}")


class FlagContext:
    """Sticky flag accumulator returned by :func:`flag_context`.

    ``flags`` holds the OR of everything raised; ``counts`` how many elements raised each flag.
    """

    def __init__(self, trap: Flags = Flags.NONE):
        self.flags = Flags.NONE
        self.trap = Flags(trap)
        self.counts: dict[Flags, int] = {f: 0 for f in _SINGLE}

    def __repr__(self) -> str:
        return f"FlagContext(flags={self.flags!r}, trap={self.trap!r})"

    def __contains__(self, flag: Flags) -> bool:
        return bool(self.flags & flag)

    def clear(self) -> None:
        """Reset the sticky flags and counts."""
        self.flags = Flags.NONE
        self.counts = {f: 0 for f in _SINGLE}

    def _add(self, per_element: np.ndarray, where: str) -> None:
        raised = Flags(int(np.bitwise_or.reduce(per_element, axis=None)) if per_element.size else 0)
        if raised:
            for f in _SINGLE:
                if raised & f:
                    self.counts[f] += int(np.count_nonzero(per_element & int(f)))
        self.flags |= raised
        hit = raised & self.trap
        if hit:
            raise FloatingPointTrap(hit, where)


_SINGLE = (Flags.INEXACT, Flags.UNDERFLOW, Flags.OVERFLOW, Flags.DIVBYZERO, Flags.INVALID)
_EVERY = sum(f.value for f in _SINGLE)  # the largest Flags value: every flag set
_STACK = _state.flag_stack  # the active contexts, innermost last (ambient state, fpsim.state)


def _as_flags(trap: Flags | str | Iterable[str] | int | None) -> Flags:
    if trap is None:
        return Flags.NONE
    if isinstance(trap, (Flags, int)) and not isinstance(trap, bool):
        if not 0 <= int(trap) <= _EVERY:  # Flags(-1) would set every bit, and more
            raise ValueError(f"trap must be a Flags value (0 to {_EVERY}), a flag's name or a "
                             f"list of names, got {trap!r}")
        return Flags(trap)
    names = [trap] if isinstance(trap, str) else list(trap)
    out = Flags.NONE
    for n in names:
        if isinstance(n, Flags):
            out |= n
            continue
        key = str(n).strip().upper().replace("-", "").replace("_", "")
        key = {"DIVIDEBYZERO": "DIVBYZERO", "DIVZERO": "DIVBYZERO"}.get(key, key)
        if key not in Flags.__members__ or key == "NONE":
            valid = ", ".join(f.name.lower() for f in _SINGLE)  # type: ignore[union-attr]
            raise ValueError(f"unknown flag {n!r}; valid: {valid}")
        out |= Flags[key]
    return out


@contextmanager
def flag_context(trap: Flags | str | Iterable[str] | None = None) -> Iterator[FlagContext]:
    """Collect the IEEE flags of every fpsim operation inside the block (sticky, nestable).

    ``trap`` names flags that raise :class:`FloatingPointTrap` as soon as an operation raises
    them (a Flags value, a name such as ``"overflow"``, or a list of names).

    >>> import fpsim
    >>> with fpsim.flag_context() as ctx:
    ...     _ = fpsim.round(1e5, "fp16")
    >>> bool(ctx.flags & fpsim.Flags.OVERFLOW)
    True
    """
    ctx = FlagContext(_as_flags(trap))
    with _state.scoped(flag_stack=_STACK.get() + (ctx,)):
        yield ctx


def flags_active() -> bool:
    """True inside a :func:`flag_context`, so operations know to compute flags."""
    return bool(_STACK.get())


def record(per_element: np.ndarray, where: str) -> None:
    """Add per-element flags to every enclosing context (inner first), trapping as asked."""
    for ctx in reversed(_STACK.get()):
        ctx._add(per_element, where)


def suspended() -> _state.scoped:
    """Hide the active flag contexts for the duration of the block: an operation that rounds
    several times (operand conversion, then the result) computes its flags itself and records
    them once, under its own name.

    >>> import fpsim
    >>> with fpsim.flag_context() as ctx:
    ...     with suspended():
    ...         _ = fpsim.round(1e5, "fp16")
    >>> ctx.flags
    <Flags.NONE: 0>
    """
    return _state.scoped(flag_stack=())
