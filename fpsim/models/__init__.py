"""Models built from :mod:`fpsim.nn` layers, for the experiments: a small GPT
(:class:`fpsim.models.GPT`, nanoGPT's layout), and how a language model is scored on a text
(:mod:`fpsim.models.text_eval`: fixed windows, float64 cross-entropy).

This layer sits above ``nn : optim : functional`` and below ``amp : quant : memory :
distributed`` (the import contracts in pyproject.toml): a model uses layers and ops, and the
precision machinery (autocast, quantization, ZeRO) may take a model.

>>> import numpy as np
>>> from fpsim.models import GPT
>>> GPT(11, 8, 16, 1, 2, rng=0)(np.zeros((2, 5), np.int64)).shape
(2, 5, 11)
"""

from . import text_eval
from .gpt import GPT

__all__ = ["GPT", "text_eval"]
