"""Record PyTorch's results for conv2d, pooling, cross_entropy, the other ops and the
optimizers (values and gradients, float64, CPU) into tests/data/torch/reference.npz, the
independent reference of tests/test_torch_reference.py. Needs torch (not a dependency of fpsim):

    pip install torch && python tools/record_torch_reference.py

The cases cover dilation, groups, 'same' / 'valid' padding, strides, ceil_mode, pooling
indices with NaN and -inf, count_include_pad / divisor_override, cross-entropy with class
weights, ignore_index, label smoothing, probability targets and (N, C, d1, d2) inputs; the
elementwise ops, reductions, softmaxes, losses, layer and batch norm (running statistics
included); five steps of SGD, Adam and AdamW under each of their options; and
torch.amp.GradScaler's scales, skipped steps and unscaled gradients; fp16 / bf16 add, mul,
div, sqrt and gelu on the CPU (bit patterns).
"""

from __future__ import annotations

import itertools
import json
from functools import partial
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "reference.npz"


def main() -> int:
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(2026)
    arrays: dict[str, np.ndarray] = {}
    cases: list[dict] = []

    def run(fn, *arrays: np.ndarray):
        """fn on float64 tensors of ``arrays`` and its backward from a random gradient:
        (output tensor, gradient, input tensors), or None where PyTorch refuses the call."""
        ts = [torch.tensor(a, requires_grad=True) for a in arrays]
        try:
            out = fn(*ts)
        except RuntimeError:
            return None
        g = rng.standard_normal(tuple(out.shape))
        out.backward(torch.tensor(g))
        return out, g, ts

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
        done = run(partial(TF.conv2d, stride=s, padding=p, dilation=d, groups=groups), x, w, b)
        if done is None:
            continue
        out, g, (xt, wt, bt) = done
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
            done = run(partial(TF.avg_pool2d, kernel_size=k, stride=s, padding=p, ceil_mode=ceil,
                               count_include_pad=cip, divisor_override=div), x2)
            if done is None:
                continue
            r, g, (xt,) = done
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

    # elementwise ops, reductions and normalisations: name -> (torch function of the tensors)
    x = rng.standard_normal((4, 6)) * 3
    xp = np.abs(x) + 0.1
    y = rng.standard_normal((4, 6))
    x3 = rng.standard_normal((3, 4, 5))
    ops = {
        "gelu": (lambda t: TF.gelu(t), [x]),
        "gelu_tanh": (lambda t: TF.gelu(t, approximate="tanh"), [x]),
        "softmax0": (lambda t: TF.softmax(t, 0), [x]),
        "softmax1": (lambda t: TF.softmax(t, 1), [x]),
        "log_softmax0": (lambda t: TF.log_softmax(t, 0), [x]),
        "log_softmax1": (lambda t: TF.log_softmax(t, 1), [x]),
        "tanh": (torch.tanh, [x]), "sigmoid": (torch.sigmoid, [x]), "exp": (torch.exp, [x]),
        "log": (torch.log, [xp]), "sqrt": (torch.sqrt, [xp]),
        "pow": (lambda a, b: a ** b, [xp, x / 3]), "div": (lambda a, b: a / b, [x, xp]),
        "mse_mean": (lambda a, b: TF.mse_loss(a, b), [x, y]),
        "mse_sum": (lambda a, b: TF.mse_loss(a, b, reduction="sum"), [x, y]),
        "mse_none": (lambda a, b: TF.mse_loss(a, b, reduction="none"), [x, y]),
        "max_all": (lambda t: t.max(), [x]),
        "max_dim1_keep": (lambda t: t.max(1, keepdim=True).values, [x]),
        "sum_dim0": (lambda t: t.sum(0), [x]), "mean_dim1_keep": (lambda t: t.mean(1, True), [x]),
        "layer_norm": (lambda t, w, b: TF.layer_norm(t, (5,), w, b),
                       [x3, rng.standard_normal(5), rng.standard_normal(5)]),
        "layer_norm_2d_eps": (lambda t, w, b: TF.layer_norm(t, (4, 5), w, b, eps=1e-3),
                              [x3, rng.standard_normal((4, 5)), rng.standard_normal((4, 5))]),
        # shape ops, indexing (repeated indices add their gradients), ties, broadcasting
        "index_repeated": (lambda t: t[[0, 2, 0], 1:3], [x3]),
        "index_cols": (lambda t: t[:, [1, 1, 3]], [x3]),
        "strided": (lambda t: t[..., ::2], [x3]),
        "cat1": (lambda a, b: torch.cat([a, b], 1), [x3, x3 * 2]),
        "stack2": (lambda a, b: torch.stack([a, b], 2), [x3, x3 + 1]),
        "permute_reshape": (lambda t: t.permute(2, 0, 1).reshape(5, -1), [x3]),
        "transpose_unsqueeze": (lambda t: t.transpose(0, 2).unsqueeze(1).squeeze(1), [x3]),
        "max_ties": (lambda t: t.max(), [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, -1.0]])]),
        "max_dim_ties": (lambda t: t.max(1).values,
                         [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, -1.0]])]),
        "abs_at_zero": (torch.abs, [np.array([-1.0, 0.0, 2.0])]),
        "neg_pow": (lambda t: -(t ** 2), [x3]),
        "broadcast_add": (lambda a, b: a + b, [x3[:, :1], rng.standard_normal((4, 1))]),
        "broadcast_sub": (lambda a, b: a - b, [x3[:, :1], rng.standard_normal((4, 1))]),
        "broadcast_mul": (lambda a, b: a * b, [x3[:, :1], rng.standard_normal((4, 1))]),
        "broadcast_div": (lambda a, b: a / b, [x3[:, :1], rng.uniform(1, 2, (4, 1))]),
    }
    for sa, sb in [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((2, 3, 4), (4, 5)),
                   ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5))]:
        ops[f"matmul_{sa}_{sb}"] = (lambda a, b: a @ b, [rng.standard_normal(sa),
                                                          rng.standard_normal(sb)])
    for name, (fn, inputs) in ops.items():
        r, g, ts = run(fn, *inputs)
        add("op", dict(name=name, n=len(inputs)), g=g, out=r.detach().numpy(),
            **{f"in{k}": a for k, a in enumerate(inputs)},
            **{f"d{k}": t.grad.numpy() for k, t in enumerate(ts)})

    # batch norm, training and eval, with its running statistics
    for shape, training in itertools.product([(8, 3), (4, 3, 2, 2)], [True, False]):
        xb = rng.standard_normal(shape) * 2 + 1
        wb, bb = rng.standard_normal(3), rng.standard_normal(3)
        rm, rv = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
        rm_t, rv_t = torch.tensor(rm), torch.tensor(rv)
        ts = [torch.tensor(a, requires_grad=True) for a in (xb, wb, bb)]
        r = TF.batch_norm(ts[0], rm_t, rv_t, ts[1], ts[2], training, 0.2, 1e-4)
        g = rng.standard_normal(tuple(r.shape))
        r.backward(torch.tensor(g))
        add("batch_norm", dict(training=training, momentum=0.2, eps=1e-4), x=xb, w=wb, b=bb,
            running_mean=rm, running_var=rv, g=g, out=r.detach().numpy(),
            dx=ts[0].grad.numpy(), dw=ts[1].grad.numpy(), db=ts[2].grad.numpy(),
            new_mean=rm_t.numpy(), new_var=rv_t.numpy())

    # optimizers: five steps from the same start with the same gradients
    settings = [("SGD", dict(lr=0.1, momentum=m, dampening=dm, nesterov=n, weight_decay=wd,
                             maximize=mx))
                for m, dm, n, wd, mx in itertools.product([0.0, 0.9], [0.0, 0.3], [False, True],
                                                          [0.0, 0.01], [False, True])
                if not (n and (m == 0 or dm != 0))]
    settings += [(name, dict(lr=0.01, betas=[0.8, 0.99], eps=1e-6, weight_decay=wd,
                             amsgrad=ams, maximize=mx))
                 for name in ("Adam", "AdamW")
                 for ams, wd, mx in itertools.product([False, True], [0.0, 0.05], [False, True])]
    for name, kw in settings:
        p0 = rng.standard_normal((3, 4))
        grads = rng.standard_normal((5, 3, 4))
        pt = torch.tensor(p0.copy(), requires_grad=True)
        opt = getattr(torch.optim, name)([pt], **{k: tuple(v) if k == "betas" else v
                                                   for k, v in kw.items()})
        for gstep in grads:
            pt.grad = torch.tensor(gstep)
            opt.step()
        add("optim", dict(name=name, kwargs=kw), p0=p0, grads=grads, out=pt.detach().numpy())

    # torch.amp.GradScaler on the CPU: scales, skipped steps and unscaled gradients over 30
    # steps of gradients spanning 16 decades with occasional inf / NaN
    for _ in range(12):
        kw = dict(init_scale=float(2.0 ** rng.integers(0, 20)),
                  growth_factor=float(rng.choice([2.0, 1.5, 3.0])),
                  backoff_factor=float(rng.choice([0.5, 0.25, 0.7])),
                  growth_interval=int(rng.integers(1, 4)))
        scaler = torch.amp.GradScaler("cpu", **kw)
        pt = torch.zeros(5, dtype=torch.float32, requires_grad=True)
        opt = torch.optim.SGD([pt], lr=0.1)
        grads = (rng.standard_normal((30, 5)) * 10.0 ** rng.integers(-8, 8, (30, 1)))
        grads = grads.astype(np.float32)
        hit = rng.random(30) < 0.2
        grads[hit, rng.integers(0, 5, hit.sum())] = rng.choice([np.inf, -np.inf, np.nan],
                                                               hit.sum())
        scales, unscaled, params = [], [], []
        for g in grads:
            loss_scale = float(scaler.scale(torch.tensor(1.0)))
            scales.append(loss_scale)
            pt.grad = torch.tensor((g * np.float32(loss_scale)).astype(np.float32))
            scaler.step(opt)
            scaler.update()
            unscaled.append(pt.grad.numpy().copy())
            params.append(pt.detach().numpy().copy())
        add("grad_scaler", dict(kwargs=kw), grads=grads, scales=np.array(scales),
            unscaled=np.array(unscaled), params=np.array(params),
            final_scale=np.array(scaler.get_scale()))

    # fp16 / bf16 elementwise ops on the CPU (PyTorch computes in float32 and rounds once):
    # operands and results as 16-bit patterns
    import ml_dtypes

    n = 8192
    for fmt, tdt, ndt in (("fp16", torch.float16, np.float16),
                          ("bf16", torch.bfloat16, ml_dtypes.bfloat16)):
        a = (rng.standard_normal(n) * 2.0 ** rng.integers(-12, 12, n)).astype(ndt)
        b = (rng.standard_normal(n) * 2.0 ** rng.integers(-12, 12, n)).astype(ndt)
        a[:16] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 65504.0] * 2,
                          dtype=np.float32).astype(ndt)
        ta = torch.tensor(a.astype(np.float32)).to(tdt)
        tb = torch.tensor(b.astype(np.float32)).to(tdt)
        outs = {"add": ta + tb, "mul": ta * tb, "div": ta / tb, "sqrt": ta.abs().sqrt(),
                "gelu": TF.gelu(ta)}
        bits = {k: v.view(torch.int16).numpy().view(np.uint16) for k, v in outs.items()}
        i = len(cases)
        cases.append({"kind": "half_ops", "fmt": fmt})
        arrays[f"{i}/a"] = a.view(np.uint16)
        arrays[f"{i}/b"] = b.view(np.uint16)
        for k, v in bits.items():
            arrays[f"{i}/{k}"] = v

    arrays["cases"] = np.array(json.dumps(cases))
    arrays["torch_version"] = np.array(torch.__version__)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"{len(cases)} cases -> {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
