"""Collectives of N simulated data-parallel ranks on NumPy arrays, counting the data they move.

Every collective takes one array per rank (a list, rank order) and returns one per rank. Two
things are kept apart:

- **What is computed.** A reduction (``op="sum"`` or ``"mean"``) adds the ranks' values in
  float64 in rank order (0, 1, ..., N-1), divides by N for ``mean``, and rounds ONCE, to nearest
  even, to the format of the input arrays (fp16, bf16, fp32...). For fp16 inputs and N < 4096
  this is the correctly rounded exact sum / mean: the float64 sum of fp16 values is exact (their
  exponents span 40 bits, plus log2(N) bits of carries, fit in 53), and the float64 quotient is
  never close enough to an fp16 rounding boundary for the second rounding to matter. This is a
  fixed, reproducible reduction order; NCCL's ring instead rounds each partial sum to the
  buffer's format hop by hop, in an order that depends on the rank.
- **What is moved.** Bytes and elements are counted per rank with the ring algorithms' volumes
  (NCCL's ring, the convention of the ZeRO paper): the buffer of S elements is cut in N chunks;
  reduce-scatter and all-gather take N - 1 steps in which every rank sends one chunk to its
  successor and receives one from its predecessor, ``(N - 1) / N * S`` elements sent and as many
  received per rank; all-reduce is a reduce-scatter followed by an all-gather,
  ``2 (N - 1) / N * S``; broadcast is a pipelined chain from the root, where every rank except
  the root receives S and every rank except the last of the chain sends S. The paper's "2 Psi"
  for an all-reduce is the large-N limit of ``2 (N - 1) / N * Psi``.

>>> import numpy as np
>>> comm = Communicator(4)
>>> out = comm.all_reduce([np.full(8, r, dtype=np.float16) for r in range(4)])
>>> out[0].tolist()  # 0 + 1 + 2 + 3 on every rank
[6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0]
>>> comm.stats[0].sent_elements  # 2 (N - 1) / N * 8
12
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..checks import as_int, check_allocation
from ..formats import get_float_format
from ..rounding import cast

__all__ = ["Communicator", "CommStats", "ring_volume", "ordered_reduce", "COLLECTIVES",
           "REDUCE_OPS"]

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
REDUCE_OPS = ("sum", "mean")


def ring_volume(collective: str, size: int, world_size: int) -> float:
    """Elements one rank sends (and receives) in a ring ``collective`` on a buffer of ``size``
    elements (the full buffer: the input of all-reduce and reduce-scatter, the output of
    all-gather); broadcast: what a middle rank of the chain sends. ``size`` is a whole number
    >= 0 and ``world_size`` one >= 1 (ints, or floats with an integral value).

    >>> ring_volume("all_reduce", 1000, 4), ring_volume("all_gather", 1000, 4)
    (1500.0, 750.0)
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
    size = as_int("size", size, 0, whole_floats=True)
    n = as_int("world_size", world_size, 1, whole_floats=True)
    if collective == "broadcast":
        return float(size) if n > 1 else 0.0
    factor = 2 if collective == "all_reduce" else 1
    return factor * (n - 1) * size / n


def ordered_reduce(arrays: Sequence[np.ndarray], op: str, world_size: int) -> np.ndarray:
    """The reduction every communicator uses: the arrays (one per rank, in rank order 0, 1,
    ..., N-1) added in float64 in that order, divided by ``world_size`` for ``mean``, and
    rounded ONCE, to nearest even, to the arrays' format.

    >>> ordered_reduce([np.array([1.0], np.float16), np.array([2.0], np.float16)], "mean", 2)
    array([1.5], dtype=float16)
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; valid: {', '.join(REDUCE_OPS)}")
    if isinstance(arrays, (str, bytes, np.ndarray)) or not all(
            isinstance(a, np.ndarray) for a in arrays) or not len(arrays):
        raise TypeError(f"ordered_reduce takes a non-empty sequence of NumPy arrays (one per "
                        f"rank), got {arrays!r}")
    if len({(a.shape, a.dtype) for a in arrays}) > 1:
        raise ValueError(f"ordered_reduce: the ranks' arrays differ in shape or dtype: "
                         f"{[(a.shape, a.dtype.name) for a in arrays]}")
    fmt = get_float_format(arrays[0].dtype)
    acc = arrays[0].astype(np.float64)
    for a in arrays[1:]:
        acc = acc + a.astype(np.float64)
    if op == "mean":
        acc = acc / world_size
    return np.asarray(cast(acc, fmt, "nearest_even"))


@dataclass
class CommStats:
    """What one rank sent and received: elements and bytes in total and per collective
    (``calls[name]`` counts the calls)."""

    rank: int
    sent_elements: int = 0
    recv_elements: int = 0
    sent_bytes: int = 0
    recv_bytes: int = 0
    calls: dict = field(default_factory=dict)
    by_collective: dict = field(default_factory=dict)

    def record(self, name: str, sent: int, recv: int, itemsize: int) -> None:
        """Count one call of collective ``name`` that sent and received ``sent`` / ``recv``
        elements of ``itemsize`` bytes (both communicator backends call it).

        >>> s = CommStats(0); s.record("all_gather", 3, 6, 2); s.sent_bytes, s.calls
        (6, {'all_gather': 1})
        """
        self.sent_elements += sent
        self.recv_elements += recv
        self.sent_bytes += sent * itemsize
        self.recv_bytes += recv * itemsize
        self.calls[name] = self.calls.get(name, 0) + 1
        s, r = self.by_collective.get(name, (0, 0))
        self.by_collective[name] = (s + sent, r + recv)

    def copy(self) -> CommStats:
        """An independent copy (a snapshot)."""
        return CommStats(self.rank, self.sent_elements, self.recv_elements, self.sent_bytes,
                         self.recv_bytes, dict(self.calls), dict(self.by_collective))


class Communicator:
    """N ranks in one process: ring collectives on per-rank NumPy arrays with byte counting
    (see the module docstring for the arithmetic and the volume convention).

    ``stats[r]`` is rank r's :class:`CommStats`; ``log`` lists ``(collective, elements of the
    full buffer, dtype name)`` per call; :meth:`reset` clears both.

    >>> import numpy as np
    >>> comm = Communicator(2)
    >>> shards = comm.reduce_scatter([np.array([1., 2.], np.float16),
    ...                               np.array([3., 4.], np.float16)], op="mean")
    >>> [s.tolist() for s in shards]
    [[2.0], [3.0]]
    """

    engine = "sim"  # the backend's name in reports

    def __init__(self, world_size: int) -> None:
        self.world_size = as_int("world_size", world_size, 1)
        check_allocation("world_size", self.world_size, 64, "ranks' counters")
        self.stats = [CommStats(r) for r in range(self.world_size)]
        self.log: list[tuple[str, int, str]] = []

    def reset(self) -> None:
        """Zero the counters and clear the log."""
        self.stats = [CommStats(r) for r in range(self.world_size)]
        self.log = []

    def snapshot(self) -> list[CommStats]:
        """A copy of every rank's counters (subtract two snapshots for one step's traffic)."""
        return [s.copy() for s in self.stats]

    # ----------------------------------------------------------------------- helpers
    def _check(self, arrays: Sequence[np.ndarray], name: str) -> list[np.ndarray]:
        if len(arrays) != len(self.local_ranks):
            raise ValueError(f"{name} needs one array per rank ({len(self.local_ranks)}), got "
                             f"{len(arrays)}")
        arrs = [np.asarray(a) for a in arrays]
        first = arrs[0]
        for r, a in enumerate(arrs):
            if a.ndim != 1:
                raise ValueError(f"{name} takes flat (1-D) arrays; rank {r} has shape {a.shape}")
            if a.shape != first.shape or a.dtype != first.dtype:
                raise ValueError(f"{name}: rank {r} has shape {a.shape} and dtype {a.dtype}, "
                                 f"rank 0 has {first.shape} and {first.dtype}")
        return arrs

    def _chunks(self, size: int, name: str) -> int:
        if size % self.world_size:
            raise ValueError(f"{name}: the buffer of {size} elements does not divide into "
                             f"{self.world_size} equal chunks (pad it to a multiple of the "
                             "world size)")
        return size // self.world_size

    def _count(self, name: str, sent: Sequence[int], recv: Sequence[int], itemsize: int,
               size: int, dtype) -> None:
        for r in range(self.world_size):
            self.stats[r].record(name, int(sent[r]), int(recv[r]), itemsize)
        self.log.append((name, int(size), np.dtype(dtype).name))

    def _reduce(self, arrs: list[np.ndarray], op: str) -> np.ndarray:
        """Rank-order float64 accumulation, then one rounding to the arrays' format."""
        return ordered_reduce(arrs, op, self.world_size)

    # ------------------------------------------- what is not traffic: flags and reports
    @property
    def local_ranks(self) -> tuple[int, ...]:
        """The ranks whose arrays this communicator's calls take and return, in order: all of
        them here (one process simulates every rank)."""
        return tuple(range(self.world_size))

    def all_true(self, flags: Sequence[bool]) -> bool:
        """Whether every rank's flag is true (one flag per local rank); a control message,
        not counted as traffic."""
        return all(bool(f) for f in flags)

    def gather_report(self, values: Sequence) -> list:
        """Every rank's value (one per local rank in, all N in rank order out), for reports;
        not counted as traffic."""
        if len(values) != len(self.local_ranks):
            raise ValueError(f"gather_report needs one value per local rank "
                             f"({len(self.local_ranks)}), got {len(values)}")
        return list(values)

    # ------------------------------------------------------------------- collectives
    def all_reduce(self, arrays: Sequence[np.ndarray], op: str = "sum") -> list[np.ndarray]:
        """Every rank gets the reduction of all ranks' arrays; ring volume
        ``2 (N - 1) / N * S`` per rank (S must divide by N)."""
        arrs = self._check(arrays, "all_reduce")
        size = arrs[0].size
        chunk = self._chunks(size, "all_reduce")
        out = self._reduce(arrs, op)
        vol = [2 * (size - chunk)] * self.world_size
        self._count("all_reduce", vol, vol, arrs[0].itemsize, size, arrs[0].dtype)
        return [out.copy() for _ in range(self.world_size)]

    def reduce_scatter(self, arrays: Sequence[np.ndarray], op: str = "sum"
                       ) -> list[np.ndarray]:
        """Rank r gets chunk r (of N equal chunks) of the reduction; ring volume
        ``(N - 1) / N * S`` per rank."""
        arrs = self._check(arrays, "reduce_scatter")
        size = arrs[0].size
        chunk = self._chunks(size, "reduce_scatter")
        out = self._reduce(arrs, op)
        vol = [size - chunk] * self.world_size
        self._count("reduce_scatter", vol, vol, arrs[0].itemsize, size, arrs[0].dtype)
        return [out[r * chunk:(r + 1) * chunk].copy() for r in range(self.world_size)]

    def all_gather(self, shards: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Every rank gets the concatenation of all ranks' shards (rank order); ring volume
        ``(N - 1) / N * S`` per rank, S the gathered size."""
        arrs = self._check(shards, "all_gather")
        full = np.concatenate(arrs)
        vol = [full.size - arrs[0].size] * self.world_size
        self._count("all_gather", vol, vol, full.itemsize, full.size, full.dtype)
        return [full.copy() for _ in range(self.world_size)]

    def broadcast(self, arrays: Sequence[np.ndarray], src: int = 0) -> list[np.ndarray]:
        """Every rank gets rank ``src``'s array (the other ranks' arrays give only the shape);
        a pipelined chain src, src+1, ...: all but the root receive S, all but the last send
        S."""
        arrs = self._check(arrays, "broadcast")
        n = self.world_size
        if not 0 <= src < n:
            raise ValueError(f"broadcast: src must be a rank in [0, {n}), got {src}")
        size = arrs[0].size
        last = (src - 1) % n
        sent = [0 if (r == last or n == 1) else size for r in range(n)]
        recv = [0 if r == src else size for r in range(n)]
        self._count("broadcast", sent, recv, arrs[0].itemsize, size, arrs[0].dtype)
        return [arrs[src].copy() for _ in range(n)]
