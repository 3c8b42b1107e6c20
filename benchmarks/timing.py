"""The timer every benchmark script shares: the best of several wall-clock runs, and one BLAS
thread for the run (:func:`pinned_blas`).

Ratio convention of every benchmark: "speed vs reference" = reference time / fpsim time
(1.0 = as fast as the reference, < 1 slower, > 1 faster), stated in each script's header.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

RATIO_CONVENTION = ("speed vs reference = reference time / fpsim time (1.0 = as fast as the "
                    "reference, < 1 slower)")


@contextlib.contextmanager
def pinned_blas(threads: int = 1) -> Iterator[None]:
    """BLAS limited to ``threads`` threads (threadpoolctl): small GEMMs run faster on one
    thread than on several that wait for each other, and the timings are steadier."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads, user_api="blas"):
        yield


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
