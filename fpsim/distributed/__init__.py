"""Data parallelism: N ranks, ring collectives that count the bytes they move, and ZeRO stages
0-3 with offload (:class:`ZeroEngine`), run on one of two communicator backends with the same
bits: :class:`Communicator` simulates the N ranks in one process; :class:`MPICommunicator`
(extra ``fpsim[mpi]``; mpi4py is imported only when one is created) runs one rank per MPI
process. ``fpsim zero`` (:mod:`fpsim.cli.zero`) runs either from the command line.

>>> import numpy as np
>>> from fpsim.distributed import Communicator
>>> comm = Communicator(2)
>>> [a.tolist() for a in comm.all_gather([np.array([1.0]), np.array([2.0])])]
[[1.0, 2.0], [1.0, 2.0]]
"""

from .adam import adam_step_flat
from .collectives import (
    COLLECTIVES,
    REDUCE_OPS,
    CommStats,
    Communicator,
    ordered_reduce,
    ring_volume,
)
from .mpi import CommTimeout, MissingMPIError, MPICommunicator
from .zero import ZERO_STAGES, ZeroEngine, ZeroRank

__all__ = [
    "COLLECTIVES", "REDUCE_OPS", "ZERO_STAGES", "CommStats", "CommTimeout", "Communicator",
    "MPICommunicator", "MissingMPIError", "ZeroEngine", "ZeroRank", "adam_step_flat",
    "ordered_reduce", "ring_volume",
]
