"""DeepSeek-V3's accumulation experiment (section 3.5.2): the error of fp8 GEMMs against K,
with the tensor cores' own accumulation and with partial sums promoted to fp32 every N_C
products (:func:`fpsim.tensorcore.matmul`'s ``promote_every``).

Inputs, as close as the paper's text allows (it gives none): A and B uniform in [0, 1),
rounded to the input format (positive, so that the sum grows with K and no cancellation
hides the accumulator's width); per output the relative error ``|d - exact| / exact``, the
exact value being the float64 sum of the exact products (every product of two fp8 values
has at most 8 significant bits between 2**-18 and 2**18, so the sum of up to 2**15 of them
is exact in float64). Reported: the maximum over the outputs.

>>> r = promotion_experiment(ks=(128, 1024), every=(128,), outputs=4)
>>> print(r)  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
max relative error of H100 fp8_e4m3 GEMMs (A, B uniform in [0, 1), 4 x 4 outputs)
      K  tensor cores   N_C=128
    128     ...
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..checks import as_int
from ..state import as_seed
from .gpus import resolve_unit
from .model import convert_input, matmul

__all__ = ["PromotionResult", "promotion_experiment"]


@dataclass
class PromotionResult:
    """Maximum relative errors per K: ``plain`` (the unit's own accumulation) and
    ``promoted[N_C]``."""

    ks: list[int]
    plain: np.ndarray
    promoted: dict[int, np.ndarray]
    gpu: str
    input_format: str
    outputs: int

    def __str__(self) -> str:
        head = "      K  tensor cores" + "".join(f"{'N_C=' + str(n):>10s}"
                                               for n in self.promoted)
        out = [f"max relative error of {self.gpu} {self.input_format} GEMMs (A, B uniform in "
               f"[0, 1), {self.outputs} x {self.outputs} outputs)", head]
        for i, k in enumerate(self.ks):
            out.append(f"{k:7d}  {self.plain[i]:12.2e}" + "".join(
                f"{self.promoted[n][i]:10.2e}" for n in self.promoted))
        return "\n".join(out)


def promotion_experiment(ks: Iterable[int] = (128, 256, 512, 1024, 2048, 4096, 8192, 16384),
                         every: Iterable[int] = (32, 64, 128, 256), *, gpu: str = "H100",
                         input_format: str = "fp8_e4m3", outputs: int = 8,
                         seed: int = 0) -> PromotionResult:
    """The table: one GEMM of ``outputs x K`` by ``K x outputs`` per K (the same draw, its
    first K columns), with and without promotion every N_C in ``every``. See the module
    docstring."""
    ks = [as_int("ks", k, 1) for k in ks]
    every = [as_int("every", n, 1) for n in every]
    outputs = as_int("outputs", outputs, 1)
    rng = np.random.default_rng(as_seed(seed, "seed"))
    unit, fi, _, label = resolve_unit(gpu, input_format, "fp32")
    kmax = max(ks)
    A = convert_input(rng.random((outputs, kmax)), fi)
    B = convert_input(rng.random((kmax, outputs)), fi)
    plain = np.empty(len(ks))
    promoted = {n: np.empty(len(ks)) for n in every}
    for i, k in enumerate(ks):
        a, b = A[:, :k], B[:k]
        exact = a @ b  # exact: see the module docstring
        plain[i] = np.max(np.abs(matmul(a, b, gpu=unit, input_format=fi) - exact) / exact)
        for n in every:
            d = matmul(a, b, gpu=unit, input_format=fi, promote_every=n)
            promoted[n][i] = np.max(np.abs(d - exact) / exact)
    return PromotionResult(ks, plain, promoted, label, fi.name, outputs)
