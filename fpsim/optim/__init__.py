"""Optimizers of ``torch.optim`` for :mod:`fpsim.nn` parameters, with optional fp32 master
weights for low-precision parameters (see :mod:`fpsim.optim.optimizer`).

>>> import fpsim
>>> from fpsim.nn import Parameter
>>> w = Parameter([1.0], "fp16"); w.grad = [1.0]
>>> opt = fpsim.optim.SGD([w], lr=1e-4)
>>> opt.step(); w.item()  # 1 - 1e-4 rounds back to 1 in fp16: the update is lost
1.0
"""

from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Adam", "AdamW", "Optimizer", "SGD"]
