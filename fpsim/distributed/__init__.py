"""Data parallelism simulated in one process: N ranks, ring collectives that count the bytes
they move, and ZeRO stages 0-3 with offload (:class:`ZeroEngine`).

>>> import numpy as np
>>> from fpsim.distributed import Communicator
>>> comm = Communicator(2)
>>> [a.tolist() for a in comm.all_gather([np.array([1.0]), np.array([2.0])])]
[[1.0, 2.0], [1.0, 2.0]]
"""

from .adam import adam_step_flat
from .collectives import COLLECTIVES, REDUCE_OPS, CommStats, Communicator, ring_volume
from .zero import ZERO_STAGES, ZeroEngine, ZeroRank

__all__ = [
    "COLLECTIVES", "REDUCE_OPS", "ZERO_STAGES", "CommStats", "Communicator", "ZeroEngine",
    "ZeroRank", "adam_step_flat", "ring_volume",
]
