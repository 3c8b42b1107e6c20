"""How the error of tensor-core dot products grows with K: fpsim's models of several GPUs
against the exact value (``math.fsum`` of the exact products) and fp32 sequential and pairwise
sums of the same products.

>>> import fpsim.tensorcore as tc
>>> r = tc.error_vs_k(ks=(16, 256), gpus=("V100", "H100"), trials=4)
>>> r.ks, sorted(r.mean)
([16, 256], ['H100', 'V100', 'fp32 pairwise', 'fp32 sequential'])
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..checks import as_int
from ..formats import FP32, Format
from ..rounding import round as fp_round
from ..state import as_seed
from .gpus import resolve_unit
from .model import convert_input, dot_rows

__all__ = ["ErrorVsK", "error_vs_k"]


@dataclass
class ErrorVsK:
    """Relative errors |d - exact| / |exact| of dot products of length K (mean and max over
    the trials), per method: one entry per GPU plus the fp32 baselines."""

    ks: list[int]
    mean: dict[str, np.ndarray]
    max: dict[str, np.ndarray]
    input_format: str
    distribution: str
    trials: int

    def __str__(self) -> str:
        names = list(self.mean)
        w = max(12, *(len(n) for n in names))
        out = [f"mean relative error of dot products, {self.input_format} inputs "
               f"({self.distribution}), {self.trials} trials per K",
               "K".rjust(7) + "".join(n.rjust(w + 2) for n in names)]
        for i, k in enumerate(self.ks):
            out.append(f"{k:7d}" + "".join(f"{self.mean[n][i]:{w + 2}.3e}" for n in names))
        return "\n".join(out)


def _sequential_fp32(p: np.ndarray) -> np.ndarray:
    s = np.zeros(p.shape[0], dtype=np.float32)
    for k in range(p.shape[1]):
        s = s + p[:, k]  # float32 + float32: IEEE round to nearest even
    return s.astype(np.float64)


def _pairwise_fp32(p: np.ndarray) -> np.ndarray:
    s = p
    while s.shape[1] > 1:
        if s.shape[1] % 2:
            s = np.concatenate([s, np.zeros((s.shape[0], 1), dtype=np.float32)], axis=1)
        s = s[:, 0::2] + s[:, 1::2]
    return s[:, 0].astype(np.float64)


def error_vs_k(ks=(16, 64, 256, 1024, 4096), gpus=("V100", "A100", "H100"), *,
               input_format: Format | str = "fp16", trials: int = 20,
               distribution: str = "uniform", seed: int = 0,
               baselines: bool = True) -> ErrorVsK:
    """How the error of a tensor-core dot product grows with K, per GPU (fp32 output).

    Inputs are drawn from ``distribution`` ("uniform" on [0, 1): errors accumulate, the
    classic worst case; or "normal") and converted to ``input_format``. The exact value is
    ``math.fsum`` of the exact products (correct to float64). With ``baselines`` the same
    products are also summed in fp32 sequentially and pairwise (round to nearest even).

    >>> r = error_vs_k(ks=(64, 1024), gpus=("V100", "H100"), trials=4)
    >>> bool(r.mean["V100"][1] > r.mean["H100"][1])  # more blocks, fewer bits: larger error
    True
    """
    if distribution not in ("uniform", "normal"):
        raise ValueError(f"distribution must be 'uniform' or 'normal', got {distribution!r}")
    if hasattr(ks, "__index__") and np.ndim(ks) == 0:  # one K (an int, a 0-d array...)
        ks = (ks,)
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise TypeError(f"ks must be a sequence of dot-product lengths K (ints >= 1), got "
                        f"{type(ks).__name__} {ks!r}")
    ks = tuple(as_int(f"ks[{i}]", k, 1) for i, k in enumerate(ks))  # dot-product lengths K
    if not ks:
        raise ValueError("ks must be a non-empty sequence of dot-product lengths K >= 1, "
                         "got none")
    trials = as_int("trials", trials, 1)
    rng = np.random.default_rng(as_seed(seed))
    units = [(g if isinstance(g, str) else getattr(g, "name", "custom"),
              resolve_unit(g, input_format, FP32)) for g in gpus]
    fi = units[0][1][1] if units else resolve_unit("A100", input_format, FP32)[1]
    names = [n for n, _ in units] + (["fp32 sequential", "fp32 pairwise"] if baselines else [])
    mean = {n: np.zeros(len(ks)) for n in names}
    mx = {n: np.zeros(len(ks)) for n in names}
    for i, k in enumerate(ks):
        draw = rng.random if distribution == "uniform" else rng.standard_normal
        a = convert_input(draw((trials, k)), fi)
        b = convert_input(draw((trials, k)), fi)
        prod = a * b  # exact in float64: at most 24-bit significands
        exact = np.array([math.fsum(r) for r in prod])
        denom = np.where(exact == 0, 1.0, np.abs(exact))
        results = {}
        for name, (unit, ufi, ufo, _) in units:
            results[name] = dot_rows(a, b, np.zeros(trials), unit, ufi, ufo)
        if baselines:
            p32 = np.asarray(fp_round(prod, FP32), dtype=np.float64).astype(np.float32)
            results["fp32 sequential"] = _sequential_fp32(p32)
            results["fp32 pairwise"] = _pairwise_fp32(p32)
        for name, d in results.items():
            err = np.abs(d - exact) / denom
            mean[name][i] = err.mean()
            mx[name][i] = err.max()
    return ErrorVsK(list(ks), mean, mx, fi.name, distribution, trials)
