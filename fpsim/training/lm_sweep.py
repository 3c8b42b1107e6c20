"""Where fp16 gradient underflow starts to matter: the exact gradients of one GPT step at
initialisation, over width, depth, tokens per batch and sequence length (issue 31, docs/lm.md).

For each configuration an fp64 GPT (nanoGPT's initialisation, seed ``seed``) takes one batch of
Tiny Shakespeare windows and backpropagates the mean cross-entropy; the share of the non-zero
gradient values (every weight, every linear layer's output) that round to zero in fp16 is
the underflow an unscaled fp16 run would meet on its first step. Beside the count, the share
of the gradient's norm those values carry (``*_norm_lost``: the L2 norm of the values that
underflow over the L2 norm of all, per kind) says how much of the step the underflow takes
away: many tiny values can carry almost none of it. The loss is a mean over tokens, so the
gradients of the activations shrink as 1 / (tokens per batch): this is the axis along which
unscaled fp16 runs out of range first.

>>> r = underflow_at_init(d_model=16, n_layers=1, n_heads=2, context=8, batch_size=2)
>>> 0.0 <= r["underflow"] <= 1.0, r["tokens"]
(True, 16)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd import functional as F
from ..formats import FP16, FP64
from ..rounding import round as fp_round
from .lm import LMConfig, OutputRecorder, build_gpt, load_text, without_key_bias_noise

__all__ = ["underflow_at_init", "underflow_sweep", "SWEEP"]

# (axis, values): each varies one setting of the quick configuration
SWEEP: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("d_model", (32, 64, 128, 256)),
    ("n_layers", (1, 2, 4, 8)),
    ("batch_size", (4, 16, 64, 256)),
    ("context", (16, 64, 256)),
)


def underflow_at_init(seed: int = 0, data: Any = None, **settings: Any) -> dict[str, Any]:
    """The fp16 underflow of one exact step at initialisation with ``settings`` (fields of
    :class:`~fpsim.training.lm.LMConfig`): a dict with the settings, ``tokens`` per batch,
    ``underflow`` (all values), ``activation_underflow`` (linear outputs) and
    ``weight_underflow``, and the share of each kind's gradient norm that underflows,
    ``activation_norm_lost`` and ``weight_norm_lost``."""
    cfg = LMConfig(**{"seed": seed, **settings})
    cfg.validate()
    train_ids, _, vocab = load_text() if data is None else data
    model = build_gpt(cfg, len(vocab)).to(FP64)
    rec = OutputRecorder(model)
    rec.active = True
    starts = np.random.default_rng([seed, 7]).integers(0, len(train_ids) - cfg.context - 1,
                                                        cfg.batch_size)
    pos = starts[:, None] + np.arange(cfg.context)
    x, y = train_ids[pos], train_ids[pos + 1]
    logits = model(x)
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
    counts = {"weights": [0, 0], "activations": [0, 0]}
    sq = {"weights": [0.0, 0.0], "activations": [0.0, 0.0]}  # lost, all: sums of squares
    arrays = [("weights", without_key_bias_noise(n, np.asarray(p.grad, np.float64)))
              for n, p in model.named_parameters()] + \
        [("activations", t.grad) for t in rec.outputs.values()]
    for kind, g in arrays:
        g = np.asarray(g, np.float64)
        nz = g != 0
        lost = nz & (np.asarray(fp_round(g, FP16)) == 0)
        counts[kind][0] += int(np.count_nonzero(lost))
        counts[kind][1] += int(np.count_nonzero(nz))
        sq[kind][0] += float(np.sum(np.square(g[lost])))
        sq[kind][1] += float(np.sum(np.square(g)))
    z = sum(c[0] for c in counts.values())
    n = sum(c[1] for c in counts.values())
    return {**settings, "tokens": cfg.batch_size * cfg.context,
            "underflow": z / n if n else 0.0,
            "activation_underflow": counts["activations"][0] / max(counts["activations"][1], 1),
            "weight_underflow": counts["weights"][0] / max(counts["weights"][1], 1),
            "activation_norm_lost": _norm_share(*sq["activations"]),
            "weight_norm_lost": _norm_share(*sq["weights"])}


def _norm_share(lost_sq: float, all_sq: float) -> float:
    """||lost|| / ||all|| from the sums of squares (0 for an all-zero gradient)."""
    return float(np.sqrt(lost_sq / all_sq)) if all_sq > 0 else 0.0


def underflow_sweep(seed: int = 0) -> list[dict[str, Any]]:
    """:func:`underflow_at_init` over :data:`SWEEP`, one setting varied at a time from the
    quick configuration (d 64, 2 layers, 4 heads, context 64, batch 16)."""
    data = load_text()
    out = []
    for axis, values in SWEEP:
        for v in values:
            r = underflow_at_init(seed, data, **{axis: v})
            out.append({"axis": axis, **r})
    return out


if __name__ == "__main__":  # python -m fpsim.training.lm_sweep: the table of docs/lm.md
    for row in underflow_sweep():
        print(f"{row['axis']:10s} {row[row['axis']]:5d}  tokens {row['tokens']:6d}  "
              f"fp16 underflow {100 * row['underflow']:6.2f}%  (activations "
              f"{100 * row['activation_underflow']:6.2f}%, weights "
              f"{100 * row['weight_underflow']:6.2f}%); share of the norm lost: activations "
              f"{row['activation_norm_lost']:.1e}, weights {row['weight_norm_lost']:.1e}")
