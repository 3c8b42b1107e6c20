"""Record PyTorch's losses and softmaxes at their edges into tests/data/torch/loss_edges.npz,
the independent reference of tests/test_torch_loss_edges.py. Needs torch (not a dependency of
fpsim):

    pip install torch && python tools/record_torch_loss_edges.py

The edges: an empty batch (N = 0), every target ignored, some ignored, a class of weight 0
(its target's loss and gradient are -0), every weight 0 (a mean over no weight: NaN), label
smoothing with ignored targets, the three reductions; mse_loss of no elements; softmax and
log_softmax over an empty dimension. Values and gradients (from a random upstream gradient),
float64 on the CPU; the signs of zeros and the places of NaNs are part of the result.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "loss_edges.npz"
IGNORE = -100


def main() -> int:
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(2027)
    arrays: dict[str, np.ndarray] = {}
    cases: list[dict] = []

    def add(cfg: dict, x: np.ndarray, out, xt, g: np.ndarray, **extra: np.ndarray) -> None:
        i = len(cases)
        cases.append(cfg)
        arrays[f"{i}/x"] = x
        arrays[f"{i}/g"] = g
        arrays[f"{i}/out"] = out.detach().numpy()
        arrays[f"{i}/dx"] = xt.grad.numpy()
        for k, v in extra.items():
            arrays[f"{i}/{k}"] = v

    c = 4
    targets = {  # name -> targets of a batch of n (None: the empty batch)
        "empty": lambda _n: np.zeros(0, np.int64),
        "all_ignored": lambda n: np.full(n, IGNORE),
        "some_ignored": lambda n: np.where(np.arange(n) % 2 == 0, IGNORE,
                                           rng.integers(0, c, n)),
        "valid": lambda n: rng.integers(0, c, n),
    }
    weights = {"none": None, "zero_class": np.array([0.0, 1.5, 0.5, 2.0]),
               "all_zero": np.zeros(c)}
    for (tname, make), (wname, w), red, ls, op in itertools.product(
            targets.items(), weights.items(), ("mean", "sum", "none"), (0.0, 0.1),
            ("cross_entropy", "nll_loss")):
        if op == "nll_loss" and ls:
            continue
        n = 0 if tname == "empty" else 5
        t = make(n)
        if wname == "zero_class" and n:
            t = np.where(t == IGNORE, t, np.where(np.arange(n) % 3 == 1, 0, t))  # class 0 used
        x = rng.standard_normal((n, c)) * 2
        xt = torch.tensor(x, requires_grad=True)
        kw = dict(weight=None if w is None else torch.tensor(w), ignore_index=IGNORE,
                  reduction=red)
        if op == "cross_entropy":
            out = TF.cross_entropy(xt, torch.tensor(t), label_smoothing=ls, **kw)
        else:
            out = TF.nll_loss(xt, torch.tensor(t), **kw)
        g = rng.standard_normal(tuple(out.shape))
        out.backward(torch.tensor(g))
        extra = {"target": t} if w is None else {"target": t, "weight": w}
        add(dict(op=op, targets=tname, weights=wname, reduction=red, label_smoothing=ls),
            x, out, xt, g, **extra)

    for red in ("mean", "sum", "none"):
        x, y = np.zeros((0, 3)), np.zeros((0, 3))
        xt = torch.tensor(x, requires_grad=True)
        out = TF.mse_loss(xt, torch.tensor(y), reduction=red)
        g = rng.standard_normal(tuple(out.shape))
        out.backward(torch.tensor(g))
        add(dict(op="mse_loss", reduction=red), x, out, xt, g, target=y)

    for op, shape, dim in itertools.product(("softmax", "log_softmax"),
                                            ((0,), (0, 3), (2, 0), (0, 3, 2)), (0, -1)):
        x = rng.standard_normal(shape)
        xt = torch.tensor(x, requires_grad=True)
        out = getattr(TF, op)(xt, dim)
        g = rng.standard_normal(tuple(out.shape))
        out.backward(torch.tensor(g))
        add(dict(op=op, dim=dim), x, out, xt, g)

    arrays["cases"] = np.array(json.dumps(cases))
    arrays["torch_version"] = np.array(torch.__version__)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"{len(cases)} cases -> {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
