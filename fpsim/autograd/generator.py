"""The random generator of parameter initialisation and dropout (``manual_seed``, as PyTorch's).

An explicit ``rng`` argument (a :class:`numpy.random.Generator` or an int seed) always wins;
without one, :mod:`fpsim.nn` initialisers and :func:`fpsim.functional.dropout` draw from this
module's generator.
"""

from __future__ import annotations

import numpy as np

from .. import state as _state
from ..rounding import seed as _seed_rounding

__all__ = ["manual_seed", "get_generator"]

# the generator itself is ambient state, per thread: fpsim.state.local.init_rng


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the generator of initialisation and dropout, and (with the same seed) the one of
    stochastic rounding (:func:`fpsim.seed`); returns the new generator.

    >>> a = manual_seed(0).random(); b = manual_seed(0).random()
    >>> a == b
    True
    """
    seed = _state.as_seed(seed, "manual_seed: seed")
    _state.local.init_rng = gen = np.random.default_rng(seed)
    _seed_rounding(seed)
    return gen


def get_generator(rng: np.random.Generator | int | None = None) -> np.random.Generator:
    """``rng`` itself, a new generator for an int seed, or the module's generator for None.

    >>> isinstance(get_generator(3), np.random.Generator)
    True
    """
    return _state.as_generator(rng, _state.local.init_rng)
