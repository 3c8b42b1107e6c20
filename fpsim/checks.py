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

This module sits in fpsim's bottom layer: it imports only NumPy, so every layer may use it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["as_int", "as_int_in"]


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
