"""The timer every benchmark script shares: the best of several wall-clock runs, one BLAS
thread for the run (:func:`pinned_blas`) and, where steps allocate large arrays, an allocator
that keeps freed memory (:func:`steady_malloc`).

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


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def steady_malloc(threshold: int = 1 << 30) -> bool:
    """Keep freed memory in the process for the rest of the run (glibc ``mallopt``: blocks up to
    ``threshold`` bytes come from the heap, not mmap, and the heap is not trimmed), so that a
    timed step does not page its arrays in afresh. glibc adapts its mmap threshold to the blocks
    freed so far, so without this a step of the same code can pay hundreds of page faults (about
    a millisecond) in one process and none in the next, depending on what ran before it.
    Returns whether it applied (False off glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, threshold))


def best_time(fn: Callable[[], object], repeat: int, warmup: bool = True,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Shortest wall time of ``repeat`` calls of ``fn`` (the run least disturbed by other
    load), after one untimed warm-up call (caches, first-call imports) when ``warmup``.
    ``clock=time.process_time``: CPU time instead (single-threaded work on a shared machine)."""
    if warmup:
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def best_wall_and_cpu(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(shortest wall time, shortest process CPU time) of ``repeat`` calls of ``fn`` after one
    warm-up call. On a shared machine the CPU time is what the other load disturbs least
    (it still pays for shared caches): printed beside the wall time, which is the target's."""
    fn()
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu
