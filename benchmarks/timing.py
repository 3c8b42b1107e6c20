"""The timer every benchmark script shares: the best of several wall-clock runs."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeat: int, warmup: bool = True) -> float:
    """Shortest wall time of ``repeat`` calls of ``fn`` (the run least disturbed by other
    load), after one untimed warm-up call (caches, first-call imports) when ``warmup``."""
    if warmup:
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
