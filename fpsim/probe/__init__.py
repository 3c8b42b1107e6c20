"""Read a unit from outside: the accumulation order of a black-box sum, and the block-FMA
parameters of a black-box matrix unit (docs/probe.md).

- :func:`reveal_order` (``fpsim/probe/order.py``): FPRev's masking (Xie et al., ATC'25)
  returns the tree in which ``fn`` adds its inputs, or :class:`OrderError`.
- :func:`fingerprint` (``fpsim/probe/fingerprint.py``): designed queries to ``fn(A, B, C)``
  find the :class:`~fpsim.tensorcore.BlockFMA` that computes what the unit computes, or
  :class:`FingerprintError`.

This package sits beside :mod:`fpsim.autograd` in the layers: it uses the rounding core and
the tensor-core model, and nothing above them.

>>> import numpy as np, fpsim.probe as probe
>>> probe.reveal_order(lambda x: x[0] + (x[1] + x[2]), 3)
(0, (1, 2))
"""

from .fingerprint import FingerprintError, fingerprint
from .order import OrderError, Tree, reveal_order

__all__ = ["reveal_order", "OrderError", "Tree", "fingerprint", "FingerprintError"]
