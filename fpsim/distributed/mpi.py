"""The MPI backend of :class:`~fpsim.distributed.zero.ZeroEngine`: one rank per process, the
collectives as MPI point-to-point messages of the arrays' real width (fp16: 2 bytes per
element), their bytes counted as they are sent. Needs the optional extra ``fpsim[mpi]``
(mpi4py and an MPI library, e.g. the ``mpich`` wheel).

The result is the simulation's, bit for bit, because the arithmetic is the simulation's: the
same :func:`~fpsim.distributed.collectives.ordered_reduce` (float64 sum in rank order 0..N-1,
one rounding) on the same N arrays. MPI's own reductions (``MPI_Reduce_scatter``,
``MPI_Allreduce``) are not used: MPI fixes neither the order in which they add the ranks'
contributions nor the precision of the partial sums (the algorithm, and so the order, changes
with the message size and the number of ranks, and a ring rounds each partial sum to the
buffer's format hop by hop), and MPI has no standard fp16 / bf16 sum. The algorithms:

- **reduce-scatter** (direct, pairwise exchange): in N - 1 rounds, round k, rank r sends its
  chunk ``(r + k) mod N`` to that rank and receives chunk r from rank ``(r - k) mod N``; then it
  holds every rank's copy of its own chunk, and reduces them in rank order. Each rank sends
  ``(N - 1) / N * S`` elements: the ring's volume, at the buffer's width (a ring would have to
  send float64 partial sums to keep one rounding).
- **all-gather** (ring): N - 1 steps; in each, every rank sends one chunk to its successor and
  receives one from its predecessor: ``(N - 1) / N * S`` elements.
- **all-reduce**: reduce-scatter then all-gather, ``2 (N - 1) / N * S``.
- **broadcast**: a chain from the root (every rank but the root receives S, every rank but
  the last of the chain sends S), as the simulation counts it.

No rank waits forever: every message is posted non-blocking and waited for with a deadline
(``timeout`` seconds); a rank that passes it raises :class:`CommTimeout` naming itself, the
collective and the peers it waited for. The command line (:mod:`fpsim.cli.zero`)
turns any rank's exception into a message naming the rank and ``MPI_Abort``, which ends every
rank of the job.

>>> import importlib.util
>>> importlib.util.find_spec("mpi4py") is None or MPICommunicator.__name__ == "MPICommunicator"
True
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from .collectives import REDUCE_OPS, CommStats, Communicator, ordered_reduce

__all__ = ["MPICommunicator", "CommTimeout", "MissingMPIError", "import_mpi"]

MPI_EXTRA_HINT = ("install the optional extra: python -m pip install 'fpsim[mpi]' "
                  "(mpi4py and the mpich wheel, which provides mpiexec)")


class MissingMPIError(RuntimeError):
    """mpi4py (or an MPI library) is not installed: the extra ``fpsim[mpi]`` is missing."""


class CommTimeout(RuntimeError):
    """A rank waited longer than its deadline for a message (a peer died or hangs)."""


def import_mpi():
    """``mpi4py.MPI`` (initialising MPI), or :class:`MissingMPIError` naming the extra."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as exc:  # no mpi4py, or no MPI library
        raise MissingMPIError(f"the MPI engine needs mpi4py and an MPI library, which do not "
                              f"load ({exc}); " + MPI_EXTRA_HINT) from None
    return MPI


def _check_op(op: str) -> None:
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; valid: {', '.join(REDUCE_OPS)}")


class MPICommunicator(Communicator):
    """The collectives of :class:`Communicator` among the processes of an MPI communicator
    (default ``MPI.COMM_WORLD``): each call takes and returns a list with ONE array, this
    process's rank's. ``stats`` (one :class:`CommStats`, this rank's) counts the bytes this
    rank actually handed to MPI; ``timeout`` bounds every wait, in seconds.
    """

    engine = "mpi"

    def __init__(self, mpi_comm=None, timeout: float = 300.0) -> None:
        MPI = import_mpi()
        self._MPI = MPI
        self._comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
                and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.rank = self._comm.Get_rank()
        super().__init__(self._comm.Get_size())
        self.stats = [CommStats(self.rank)]
        self._tag = 0

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """This process's rank only."""
        return (self.rank,)

    def reset(self) -> None:
        """Zero this rank's counters and clear the log."""
        self.stats = [CommStats(self.rank)]
        self.log = []

    # ------------------------------------------------------------------ messages
    def _next_tag(self) -> int:
        # every rank runs the same collectives in the same order: one tag per call keeps
        # the messages of consecutive collectives apart
        self._tag = (self._tag + 1) % 32768
        return self._tag

    def _wait(self, reqs: list, what: str, peers: Sequence[int] | None) -> None:
        """Wait for every request until the deadline; ``peers[i]``: the rank request i talks
        to (``None``: a collective of all ranks)."""
        MPI = self._MPI
        deadline = time.monotonic() + self.timeout
        pause = 0.0
        while not MPI.Request.Testall(reqs):
            if time.monotonic() > deadline:
                late = ("the other ranks" if peers is None else "rank(s) " + str(
                    sorted({p for p, q in zip(peers, reqs, strict=True) if not q.Test()})))
                raise CommTimeout(f"rank {self.rank}: {what} waited more than {self.timeout:g} s "
                                  f"for {late} (a peer died or hangs)")
            time.sleep(pause)  # back off a little: the ranks may share a few cores
            pause = min(2 * pause + 1e-5, 1e-3)

    @staticmethod
    def _bytes(a: np.ndarray) -> np.ndarray:
        # the payload at its real width: fp16 / bf16 / fp8 arrays go out as their bytes
        return np.ascontiguousarray(a).view(np.uint8)

    def _exchange(self, what: str, sends: list[tuple[int, np.ndarray]],
                  recvs: list[tuple[int, np.ndarray]], tag: int | None = None
                  ) -> tuple[int, int]:
        """Post every send and receive (rank, array) at once, wait for all; returns the
        elements sent and received."""
        MPI = self._MPI
        tag = self._next_tag() if tag is None else tag
        reqs, sent, got = [], 0, 0
        for src, buf in recvs:
            if not buf.flags.c_contiguous:  # MPI must write into the array itself
                raise ValueError(f"{what}: a receive buffer must be contiguous")
            reqs.append(self._comm.Irecv([self._bytes(buf), MPI.BYTE], source=src, tag=tag))
            got += buf.size
        keep = []
        for dst, buf in sends:
            b = self._bytes(buf)
            keep.append(b)  # alive until the send completes
            reqs.append(self._comm.Isend([b, MPI.BYTE], dest=dst, tag=tag))
            sent += buf.size
        self._wait(reqs, what, [p for p, _ in recvs] + [p for p, _ in sends])
        return sent, got

    def _count_local(self, name: str, sent: int, recv: int, itemsize: int, size: int,
                     dtype) -> None:
        self.stats[0].record(name, sent, recv, itemsize)
        self.log.append((name, int(size), np.dtype(dtype).name))

    def _ring_gather(self, full: np.ndarray, chunk: int, what: str) -> tuple[int, int]:
        """Ring all-gather in place: ``full`` holds this rank's chunk at its slot."""
        n, r = self.world_size, self.rank
        sent = recv = 0
        for step in range(n - 1):
            out_i, in_i = (r - step) % n, (r - step - 1) % n
            s, g = self._exchange(what, [((r + 1) % n, full[out_i * chunk:(out_i + 1) * chunk])],
                                  [((r - 1) % n, full[in_i * chunk:(in_i + 1) * chunk])])
            sent, recv = sent + s, recv + g
        return sent, recv

    def _reduce_scatter_local(self, a: np.ndarray, op: str, what: str
                              ) -> tuple[np.ndarray, int, int]:
        n, r = self.world_size, self.rank
        chunk = self._chunks(a.size, what)
        parts = [np.empty(chunk, a.dtype) for _ in range(n)]
        parts[r][...] = a[r * chunk:(r + 1) * chunk]
        sends = [((r + k) % n, a[((r + k) % n) * chunk:((r + k) % n + 1) * chunk])
                 for k in range(1, n)]
        recvs = [((r - k) % n, parts[(r - k) % n]) for k in range(1, n)]
        sent, recv = self._exchange(what, sends, recvs) if n > 1 else (0, 0)
        return ordered_reduce(parts, op, n), sent, recv

    # --------------------------------------------------------------- collectives
    def all_reduce(self, arrays: Sequence[np.ndarray], op: str = "sum") -> list[np.ndarray]:
        """Reduce-scatter (pairwise, ordered reduction) then ring all-gather."""
        (a,) = self._check(arrays, "all_reduce")
        chunk = self._chunks(a.size, "all_reduce")
        _check_op(op)
        mine, s1, r1 = self._reduce_scatter_local(a, op, "all_reduce")
        full = np.empty(a.size, a.dtype)
        full[self.rank * chunk:(self.rank + 1) * chunk] = mine
        s2, r2 = self._ring_gather(full, chunk, "all_reduce")
        self._count_local("all_reduce", s1 + s2, r1 + r2, a.itemsize, a.size, a.dtype)
        return [full]

    def reduce_scatter(self, arrays: Sequence[np.ndarray], op: str = "sum"
                       ) -> list[np.ndarray]:
        """This rank's chunk of the ordered reduction (pairwise exchange)."""
        (a,) = self._check(arrays, "reduce_scatter")
        self._chunks(a.size, "reduce_scatter")
        _check_op(op)
        mine, sent, recv = self._reduce_scatter_local(a, op, "reduce_scatter")
        self._count_local("reduce_scatter", sent, recv, a.itemsize, a.size, a.dtype)
        return [mine]

    def all_gather(self, shards: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The concatenation of every rank's shard, in rank order (ring)."""
        (a,) = self._check(shards, "all_gather")
        chunk = a.size
        sizes = self.gather_report([chunk])  # a control message: the shards must agree
        if any(c != chunk for c in sizes):
            raise ValueError(f"all_gather: the ranks' shards have sizes {sizes}; they must be "
                             "equal")
        full = np.empty(chunk * self.world_size, a.dtype)
        full[self.rank * chunk:(self.rank + 1) * chunk] = a
        sent, recv = self._ring_gather(full, chunk, "all_gather")
        self._count_local("all_gather", sent, recv, a.itemsize, full.size, a.dtype)
        return [full]

    def broadcast(self, arrays: Sequence[np.ndarray], src: int = 0) -> list[np.ndarray]:
        """Rank ``src``'s array on every rank, along the chain src, src+1, ..."""
        (a,) = self._check(arrays, "broadcast")
        n, r = self.world_size, self.rank
        if not 0 <= src < n:
            raise ValueError(f"broadcast: src must be a rank in [0, {n}), got {src}")
        buf = np.array(a, copy=True)
        sent = recv = 0
        tag = self._next_tag()  # one per call on every rank, whatever its place in the chain
        if r != src:
            _, recv = self._exchange("broadcast", [], [((r - 1) % n, buf)], tag)
        if (r + 1) % n != src:
            sent, _ = self._exchange("broadcast", [((r + 1) % n, buf)], [], tag)
        self._count_local("broadcast", sent, recv, a.itemsize, a.size, a.dtype)
        return [buf]

    # ------------------------------------------- what is not traffic: flags and reports
    def _arrive(self, what: str) -> None:
        # a non-blocking barrier under the deadline first: the blocking object collective
        # that follows then finds every rank present, and cannot hang on a dead one
        self._wait([self._comm.Ibarrier()], what, None)

    def all_true(self, flags: Sequence[bool]) -> bool:
        """Whether every rank's flag is true (a one-element control message, not counted)."""
        (f,) = flags
        self._arrive("all_true")
        return bool(self._comm.allreduce(bool(f), op=self._MPI.LAND))

    def gather_report(self, values: Sequence) -> list:
        """Every rank's value in rank order, on every rank (for reports; not counted)."""
        (v,) = values
        self._arrive("gather_report")
        return list(self._comm.allgather(v))

    def abort(self, code: int = 1) -> None:
        """``MPI_Abort``: end every rank of the job."""
        self._comm.Abort(code)
