"""Record PyTorch's results for conv2d, max_pool2d, avg_pool2d and cross_entropy (values and
gradients, float64, CPU) into tests/data/torch/reference.npz, the independent reference of
tests/test_torch_reference.py. Needs torch (not a dependency of fpsim):

    pip install torch && python tools/record_torch_reference.py

The cases cover dilation, groups, 'same' / 'valid' padding, strides, ceil_mode, pooling
indices with NaN and -inf, count_include_pad / divisor_override, and cross-entropy with class
weights, ignore_index, label smoothing, probability targets and (N, C, d1, d2) inputs.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "reference.npz"


def main() -> int:
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(2026)
    arrays: dict[str, np.ndarray] = {}
    cases: list[dict] = []

    def add(kind: str, cfg: dict, **arrs: np.ndarray) -> None:
        i = len(cases)
        cases.append({"kind": kind, **cfg})
        for name, a in arrs.items():
            arrays[f"{i}/{name}"] = np.asarray(a, dtype=np.float64 if name != "indices"
                                               else np.int64)

    convs = list(itertools.product([1, 2], [1, 3], [1, 2], [1, 2, 3], [1, 2],
                                   [0, 1, "same", "valid"], [1, 2]))
    # every 'same' case with an even kernel (its odd total padding puts the extra row and
    # column at the end), then a random sample of the rest
    picked = [j for j, cfg in enumerate(convs) if cfg[5] == "same" and cfg[3] == 2][:6]
    picked += [j for j in rng.permutation(len(convs)) if j not in picked][:44]
    for j in picked:
        cin_g, cout_g, groups, k, s, p, d = convs[j]
        if p == "same" and s != 1:
            continue
        cin, cout = cin_g * groups, cout_g * groups
        x = rng.standard_normal((1, cin, 6, 5))
        w = rng.standard_normal((cout, cin_g, k, k))
        b = rng.standard_normal(cout)
        xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        try:
            out = TF.conv2d(xt, wt, bt, s, p, d, groups)
        except RuntimeError:
            continue
        g = rng.standard_normal(tuple(out.shape))
        out.backward(torch.tensor(g))
        add("conv2d", dict(stride=s, padding=p, dilation=d, groups=groups), x=x, w=w, b=b, g=g,
            out=out.detach().numpy(), dx=xt.grad.numpy(), dw=wt.grad.numpy(),
            db=bt.grad.numpy())

    pools = list(itertools.product([5, 6], [2, 3], [None, 1, 2], [0, 1], [1, 2],
                                   [False, True]))
    for j in rng.permutation(len(pools))[:40]:
        h, k, s, p, d, ceil = pools[j]
        if p > k // 2:
            continue
        x = rng.standard_normal((1, 2, h, h + 1))
        x[0, 0, 0, 0] = np.nan
        x[0, 1, 1, 1:3] = -np.inf
        xt = torch.tensor(x, requires_grad=True)
        try:
            v, idx = TF.max_pool2d(xt, k, s, p, d, ceil, return_indices=True)
        except RuntimeError:
            continue
        g = rng.standard_normal(tuple(v.shape))
        v.backward(torch.tensor(g))
        add("max_pool2d", dict(kernel=k, stride=s, padding=p, dilation=d, ceil_mode=ceil),
            x=x, g=g, out=v.detach().numpy(), indices=idx.numpy(), dx=xt.grad.numpy())
        if d == 1:
            cip, div = bool(rng.integers(2)), [None, 3][int(rng.integers(2))]
            x2 = rng.standard_normal((1, 2, h, h + 1))
            xt = torch.tensor(x2, requires_grad=True)
            try:
                r = TF.avg_pool2d(xt, k, s, p, ceil, cip, div)
            except RuntimeError:
                continue
            g = rng.standard_normal(tuple(r.shape))
            r.backward(torch.tensor(g))
            add("avg_pool2d", dict(kernel=k, stride=s, padding=p, ceil_mode=ceil,
                                   count_include_pad=cip, divisor_override=div),
                x=x2, g=g, out=r.detach().numpy(), dx=xt.grad.numpy())

    ces = list(itertools.product([(6, 5), (5,), (2, 4, 2, 3)], ["mean", "sum", "none"],
                                 [0.0, 0.2], [False, True], [False, True], [False, True]))
    for shape, red, ls, weighted, ignore, probs in ces:
        if probs and ignore:
            continue
        c = shape[0] if len(shape) == 1 else shape[1]
        x = rng.standard_normal(shape) * 2
        tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
        w = rng.uniform(0.5, 2, c) if weighted else None
        if probs:
            t = rng.dirichlet(np.ones(c), tshape if tshape else None)
            t = np.moveaxis(t, -1, 1) if len(shape) > 1 else t
        else:
            t = rng.integers(0, c, tshape)
            if ignore and t.ndim:
                t.flat[1] = -100
        xt = torch.tensor(x, requires_grad=True)
        r = TF.cross_entropy(xt, torch.tensor(t), None if w is None else torch.tensor(w),
                             reduction=red, label_smoothing=ls)
        g = rng.standard_normal(tuple(r.shape))
        r.backward(torch.tensor(g))
        extra = {} if w is None else {"weight": w}
        add("cross_entropy", dict(reduction=red, label_smoothing=ls, probs=probs), x=x,
            target=t, g=g, out=r.detach().numpy(), dx=xt.grad.numpy(), **extra)

    arrays["cases"] = np.array(json.dumps(cases))
    arrays["torch_version"] = np.array(torch.__version__)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"{len(cases)} cases -> {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
