"""Differentiable operations on :class:`fpsim.Tensor`, named as in ``torch`` /
``torch.nn.functional``; the precision table is in :mod:`fpsim.autograd.functional`.

>>> import fpsim
>>> from fpsim import functional as F
>>> F.relu(fpsim.autograd.Tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from .autograd.functional import *  # noqa: F401,F403
from .autograd.functional import __all__  # noqa: F401
