"""The bit-exact rounding core: any real value to any :class:`~fpsim.formats.Format`.

One rule, every copy of it in one package, by concept:

- :mod:`~fpsim.rounding.policy`: how to round (:class:`RoundingPolicy`, :func:`policy_of`,
  the stochastic generator: :func:`seed`, :func:`default_rng`);
- :mod:`~fpsim.rounding.kernel`: the general bit kernel on float64 patterns and on exact wide
  values, the reference for everything else;
- :mod:`~fpsim.rounding.fast`: the fast paths, each equal to the kernel on its domain, in
  one registry (``REGISTRY``; the exact widenings: ``WIDENINGS``);
- :mod:`~fpsim.rounding.native`: NumPy's / ml_dtypes' casts where they round once, the
  one-byte tables, fp4 by comparisons, bf16's widening, and the one rule of "may this run
  natively?" (``native_ok``); :mod:`~fpsim.rounding.fp16`: fp16's casts by the FPU's
  addition; :mod:`~fpsim.rounding.eft`: the error-free transformations;
  :mod:`~fpsim.rounding.bits`: rounding of values known to be normal by masking their bit
  patterns (the tensor-core model's output rounding; None hands anything else back);
- :mod:`~fpsim.rounding.convert`: exact input conversion and result shaping;
- :mod:`~fpsim.rounding.chunks`: the chunked drivers over arrays;
- :mod:`~fpsim.rounding.exact`: ints, Fractions, Decimals and object arrays, rounded once
  from their exact values (:func:`round_rational`);
- :mod:`~fpsim.rounding.pair`: an exact pair ``hi + lo`` rounded once (:func:`round_pair`);
- :mod:`~fpsim.rounding.api`: :func:`round` and :func:`cast`.

The names below are the package's API: the public ones in ``__all__`` and the internal API
the layers above import (arithmetic, integer, encoding, reductions, tensorcore, cli).

>>> import fpsim
>>> float(fpsim.rounding.round(1/3, "bf16", "up"))
0.333984375
"""

from .api import cast, round
from .convert import as_float64
from .exact import as_rational, round_rational
from .pair import round_pair
from .policy import RoundingPolicy, default_rng, seed

__all__ = ["round", "round_rational", "as_rational", "round_pair", "cast", "seed", "default_rng",
           "as_float64", "RoundingPolicy"]

# The internal API the layers above import from here (arithmetic, integer, encoding,
# reductions, tensorcore, the command line). CHUNK is read here; the drivers read
# fpsim.rounding.kernel.CHUNK (set that one to change it).
from .api import round_with  # noqa: E402, F401
from .chunks import run_chunks  # noqa: E402, F401
from .convert import listed  # noqa: E402, F401
from .exact import far_decimal, round_objects_with  # noqa: E402, F401
from .fast import float32_ok, round_float32, round_rest32  # noqa: E402, F401
from .kernel import (  # noqa: E402, F401
    CHUNK,
    EXP_MASK,
    FRAC,
    HIDDEN,
    ONE,
    QUIET,
    SIGN,
    ZERO,
    kernel_params,
)
from .pair import round_flat, round_pair_with  # noqa: E402, F401
from .policy import policy_of, random_bits_of, without_daz  # noqa: E402, F401
