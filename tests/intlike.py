"""Shared by the tests of count arguments (fpsim.checks.as_int's rule): an integer-like object
that is not an int."""

from __future__ import annotations


class Count:
    """An integer-like object: range() takes it through __index__."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n
