"""Argument checks shared across fpsim's layers: one rule each, one wording of its errors.

- :func:`as_int`: a count or size argument (``batch_size``, ``world_size``, ``segments``...) as
  a Python int no smaller than a given minimum. What ``range()`` takes is accepted (Python
  ints, NumPy integers, 0-d integer arrays, objects with ``__index__``); bools (``True`` is not
  a count), ``np.timedelta64`` (a NumPy integer subclass, but a duration), strings, None,
  floats and other arrays are refused with
  a TypeError naming the argument and what was given; a value below the minimum with a
  ValueError naming the argument, the minimum and the value. Where an argument counts elements
  that people write in scientific notation (``1e9``), ``whole_floats=True`` also accepts
  finite floats with an integral value, and refuses other floats with a ValueError.
  ``minimum=None`` checks the type only, for callers whose error names a whole range.
- :func:`as_int_in`: an int argument that must be one of a few values (a bit width, a block
  size, a ZeRO stage): :func:`as_int`'s type rule, then a ValueError in the caller's words
  followed by the valid values.
- :func:`broadcast_shape`: the broadcast shape of an operation's operands, or an error naming
  the operation and the shapes.
- :func:`as_array`: an array-like argument as a NumPy array; ragged nested lists are a
  ValueError naming the argument (NumPy's own says "setting an array element with a
  sequence", from deep inside whatever function first touched the list).

- :func:`as_stored_scale`: a scale (a quantizer's, NVFP4's per-tensor one) as the dtype it is
  stored and used in: finite and positive there, with a finite reciprocal (the kernels
  multiply by it); ``1e-50`` (0 in float32) or ``1e50`` (inf) is a ValueError naming the
  argument and the valid range, not a silent 0.
- :func:`check_allocation`: a size that implies more bytes than the machine has is a
  ValueError naming the argument and the bytes, before NumPy tries to allocate them.

This module sits in fpsim's bottom layer: it imports only NumPy, so every layer may use it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["as_array", "as_int", "as_int_in", "broadcast_shape", "ragged_error",
           "as_stored_scale", "check_allocation"]


def as_stored_scale(name: str, value: object, dtype: type = np.float32) -> np.ndarray:
    """``value`` (real, finite, positive; scalar or array) as ``dtype``, where every element
    and its reciprocal must be finite and positive; else a ValueError naming ``name``, what
    the value becomes in ``dtype`` and the valid range.

    >>> as_stored_scale("scale", 0.5)
    array(0.5, dtype=float32)
    >>> as_stored_scale("scale", 1e-50)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: scale 1e-50 becomes 0.0 in float32 (where it is stored); valid: ...
    """
    a = np.asarray(value)
    if a.dtype.kind not in "iuf" or a.dtype == np.bool_:
        raise TypeError(f"{name} must be a real number (or an array of them), got "
                        f"{type(value).__name__} {value!r}")
    a64 = a.astype(np.float64)
    if not (np.isfinite(a64).all() and (a64 > 0).all()):
        raise ValueError(f"{name} must be finite and positive, got {value!r}")
    dt = np.dtype(dtype)
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        stored = a64.astype(dt)
        inverse = dt.type(1) / stored
    bad = ~(np.isfinite(stored) & (stored > 0) & np.isfinite(inverse))
    if bad.any():
        first = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
        v, sv, iv = a64[first], stored[first], inverse[first]
        what = f"becomes {float(sv)!r}" if not 0 < sv < np.inf else \
            f"has the reciprocal {float(iv)!r}"
        info = np.finfo(dt)
        lo = dt.type(1) / info.max
        raise ValueError(f"{name} {float(v)!r} {what} in {dt.name} (where it is stored); "
                         f"valid: {float(lo):.8g} .. {float(info.max):.8g}")
    return stored


def _physical_memory() -> int | None:
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not on this OS
        return None


def check_allocation(name: str, count: int, itemsize: int, what: str = "values") -> None:
    """ValueError when ``count`` items of ``itemsize`` bytes (what the argument ``name``
    asks for) exceed the machine's memory: said before NumPy tries to allocate them.

    >>> check_allocation("n", 10**3, 8)
    >>> check_allocation("n", 10**15, 8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: n asks for 1000000000000000 values (8e+15 bytes), more than this machine's ...
    """
    total = _physical_memory()
    need = int(count) * int(itemsize)
    if total is not None and need > total:
        raise ValueError(f"{name} asks for {int(count)} {what} ({need:.3g} bytes), more than "
                         f"this machine's memory ({total:.3g} bytes)")


def as_int(name: str, value: object, minimum: int | None, *,
           whole_floats: bool = False) -> int:
    """``value`` (the argument called ``name``) as an int >= ``minimum`` (None: any int).

    >>> as_int("batch_size", np.int64(32), 1)
    32
    >>> as_int("size", 8.0, 0, whole_floats=True)
    8
    >>> as_int("epochs", True, 0)
    Traceback (most recent call last):
    ...
    TypeError: epochs must be an int, got bool True
    >>> as_int("world_size", 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: world_size must be >= 1, got 0
    """
    if isinstance(value, (bool, np.bool_)):
        n = None  # True is not a count, though bool is an int subclass
    else:
        try:  # what range() takes: ints, NumPy integers, 0-d integer arrays, __index__ objects
            n = operator.index(value)
        except TypeError:  # floats, strings, None, arrays, np.timedelta64 ...
            n = None
    if n is None and whole_floats and isinstance(value, (float, np.floating)):
        if not (math.isfinite(value) and float(value).is_integer()):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        n = int(value)
    if n is None:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and n < minimum:
        # the int an __index__ object stands for, not its repr; floats as given
        shown = value if isinstance(value, (float, np.floating)) else n
        raise ValueError(f"{name} must be >= {minimum}, got {shown}")
    return n


def as_int_in(name: str, value: object, valid: Sequence[int], problem: str,
              label: Callable[[int], str] = str) -> int:
    """``value`` (the argument called ``name``) as an int (:func:`as_int`'s TypeError for other
    types) that is one of ``valid``, else a ValueError ``problem.format(value)`` followed by
    "; valid: " and the valid values (each written by ``label``).

    >>> as_int_in("bits", np.int8(4), (2, 4, 8), "unsupported bit width {!r}")
    4
    >>> as_int_in("bits", 3, (2, 4, 8), "unsupported bit width {!r}")
    Traceback (most recent call last):
    ...
    ValueError: unsupported bit width 3; valid: 2, 4, 8
    """
    n = as_int(name, value, None)
    if n not in valid:
        raise ValueError(f"{problem.format(value)}; valid: {', '.join(map(label, valid))}")
    return n


def as_choice(what: str, value: object, valid: Sequence[str]) -> str:
    """``value`` if it is one of the named choices ``valid``, else a ValueError "unknown
    ``what`` ...; valid: ..." naming them.

    >>> as_choice("mode", "sym", ("sym", "asym"))
    'sym'
    >>> as_choice("mode", "rtn", ("sym", "asym"))
    Traceback (most recent call last):
    ...
    ValueError: unknown mode 'rtn'; valid: 'sym', 'asym'
    """
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(map(repr, valid))}")
    return value


def as_array(x: object, name: str) -> np.ndarray:
    """``np.asarray(x)``, or, for ragged nested lists, a ValueError naming the argument
    ``name`` (with NumPy's reason).

    >>> as_array([1, 2], "x").tolist()
    [1, 2]
    >>> as_array([1.0, [2.0]], "x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: x must be a number or a rectangular array of numbers; NumPy says: ...
    """
    try:
        return np.asarray(x)
    except ValueError as exc:  # inhomogeneous nested sequences
        raise ragged_error(name, exc) from None


def ragged_error(name: str, exc: ValueError) -> ValueError:
    """The error for ragged input (NumPy's ``exc``) to the argument ``name``: for callers that
    meet NumPy's error elsewhere than in :func:`as_array` (``np.ndim`` of a ragged list)."""
    return ValueError(f"{name} must be a number or a rectangular array of numbers; NumPy says: "
                      f"{exc}")


def broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to, or a ValueError naming the operation ``op`` and the
    shapes (NumPy's own, from ``np.broadcast_shapes``, names neither).

    >>> broadcast_shape("fma", (2, 1), (3,), ())
    (2, 3)
    >>> broadcast_shape("fma", (0,), (4,))
    Traceback (most recent call last):
    ...
    ValueError: fma: operands could not be broadcast together with shapes (0,) (4,)
    """
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"{op}: operands could not be broadcast together with shapes "
                         f"{' '.join(map(str, shapes))}") from None
