"""The overflow cases a transformer has and an MLP does not, each run the naive fp16 way and
the standard way, against a float64 reference (issue 31; docs/lm.md).

=================  =============================================  ===========================
case               naive fp16                                     standard fix
=================  =============================================  ===========================
softmax            ``exp(s) / sum(exp(s))`` on fp16 logits: exp   subtract the row's max
                   overflows past ln(65504) = 11.09 (inf / inf =  first (``F.softmax``; what
                   NaN), and the row's sum past 65504 even when   every framework's kernel
                   each exp fits (every weight rounds to 0,       does)
                   silently)
layer_norm         the variance ``mean((x - mu) * (x - mu))``     statistics in fp32 (fpsim's
                   in fp16: a squared deviation above 65504       ``F.layer_norm`` computes in
                   (|x - mu| > 255.9) is inf, the output 0        float64 and rounds once;
                                                                  autocast's fp32 list)
loss               the summed token loss in fp16 past 65504 (16k  the loss in fp32
                   tokens at 4 nats), and an fp16 loss times      (autocast's fp32 list for
                   GradScaler's initial 2^16 (inf for loss >= 1)  cross_entropy; Apex casts
                                                                  the model output to fp32)
=================  =============================================  ===========================

Every case is built from fpsim's own ops on fp16 tensors: what runs is what a model written
that way would compute. :func:`overflow_cases` returns them; tests/test_lm.py asserts that
each naive version fails and each fix matches float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..autograd import functional as F
from ..autograd.tensor import Tensor
from ..formats import FP16, FP32

__all__ = ["OverflowCase", "overflow_cases", "softmax_case", "layer_norm_case", "loss_case"]


@dataclass(frozen=True)
class OverflowCase:
    """One case: what the naive fp16 computation and the fix returned, against float64.

    ``naive_failed``: the naive result holds inf / NaN or is off by more than ``tol``;
    ``fixed_error``: the fix's largest relative error against float64 (``tol`` is the bound
    it must stay within: a few fp16 ulps).
    """

    name: str
    what: str
    naive: np.ndarray
    fixed: np.ndarray
    reference: np.ndarray
    tol: float

    @property
    def naive_error(self) -> float:
        """Largest relative error of the naive result (inf when it is not finite)."""
        return _rel(self.naive, self.reference)

    @property
    def fixed_error(self) -> float:
        """Largest relative error of the fixed result."""
        return _rel(self.fixed, self.reference)

    @property
    def naive_failed(self) -> bool:
        """The naive version is not finite or off by more than ``tol``."""
        return not self.naive_error <= self.tol

    @property
    def fixed_ok(self) -> bool:
        """The fix is finite and within ``tol``."""
        return self.fixed_error <= self.tol


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    a = np.asarray(a, np.float64)
    if not np.all(np.isfinite(a)):
        return float("inf")
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def softmax_case(max_logit: float = 12.0, t: int = 64) -> list[OverflowCase]:
    """Attention weights of one row of ``t`` logits: (1) one logit at ``max_logit`` (past
    ln(65504)); (2) every logit at 7 (each exp fits fp16, their sum does not).

    >>> [c.naive_failed for c in softmax_case()], [c.fixed_ok for c in softmax_case()]
    ([True, True], [True, True])
    """
    rows = np.zeros((2, t))
    rows[0] = np.linspace(-2.0, 2.0, t)
    rows[0, -1] = max_logit
    rows[1] = 7.0
    out = []
    for r, what in ((rows[0], f"one attention logit at {max_logit:g} (> ln 65504 = 11.09)"),
                    (rows[1], f"{t} attention logits at 7 (each exp 1097 fits, the sum "
                              f"{t * np.exp(7.0):.0f} does not)")):
        s = Tensor(r[None], FP16)
        e = F.exp(s)
        naive = F.div(e, F.sum(e, dim=-1, keepdim=True)).numpy(np.float64)
        fixed = F.softmax(s, dim=-1).numpy(np.float64)
        z = s.numpy(np.float64)
        ref = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        out.append(OverflowCase("softmax", what, naive, fixed, ref, tol=2.0**-9))
    return out


def layer_norm_case(outlier: float = 400.0, d: int = 64) -> OverflowCase:
    """Layer norm of a residual-stream row with one outlier feature at ``outlier`` (large
    models carry such features: Dettmers et al. 2022, Sun et al. 2024).

    >>> c = layer_norm_case(); c.naive_failed, c.fixed_ok
    (True, True)
    """
    row = np.linspace(-1.0, 1.0, d)
    row[3] = outlier
    x = Tensor(row[None], FP16)
    mu = F.mean(x, dim=-1, keepdim=True)
    dev = F.sub(x, mu)
    var = F.mean(F.mul(dev, dev), dim=-1, keepdim=True)  # the square in fp16
    naive = F.div(dev, F.sqrt(F.add(var, 1e-5))).numpy(np.float64)
    fixed = F.layer_norm(x, (d,), eps=1e-5).numpy(np.float64)
    z = x.numpy(np.float64)
    ref = (z - z.mean()) / np.sqrt(z.var() + 1e-5)
    return OverflowCase("layer_norm", f"a feature at {outlier:g} (its squared deviation "
                        f"exceeds 65504)", naive, fixed, ref, tol=2.0**-8)


def loss_case(tokens: int = 16384, vocab: int = 65, seed: int = 0) -> list[OverflowCase]:
    """(1) The summed cross-entropy of ``tokens`` near-uniform predictions (about ln 65 = 4.2
    nats each) in fp16 and in fp32; (2) that loss's mean, in fp16 and in fp32, times
    GradScaler's initial scale 2^16.

    >>> [c.naive_failed for c in loss_case()], [c.fixed_ok for c in loss_case()]
    ([True, True], [True, True])
    """
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 0.1, (tokens, vocab))
    y = rng.integers(0, vocab, tokens)
    x16 = Tensor(logits, FP16)
    z = x16.numpy(np.float64)
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    ref_sum = np.array(np.sum(lse - z[np.arange(tokens), y]))
    naive = F.cross_entropy(x16, y, reduction="sum").numpy(np.float64)
    fixed = F.cross_entropy(x16.to(FP32), y, reduction="sum").numpy(np.float64)
    summed = OverflowCase("loss", f"the summed loss of {tokens} tokens", naive, fixed, ref_sum,
                          tol=2.0**-9)
    scale = 2.0**16
    mean16 = F.cross_entropy(x16, y)
    mean32 = F.cross_entropy(x16.to(FP32), y)
    scaled = OverflowCase("loss", "the mean loss times GradScaler's initial scale 2^16",
                          F.mul(mean16, scale).numpy(np.float64),
                          F.mul(mean32, scale).numpy(np.float64),
                          np.array(ref_sum / tokens * scale), tol=2.0**-9)
    return [summed, scaled]


def overflow_cases() -> list[OverflowCase]:
    """Every case, in the order of the module's table.

    >>> [c.name for c in overflow_cases()]
    ['softmax', 'softmax', 'layer_norm', 'loss', 'loss']
    """
    return [*softmax_case(), layer_norm_case(), *loss_case()]
