"""Record PyTorch's gradients of random graphs whose tensors are used several times, in fp16,
bf16 and fp32, into tests/data/torch/grad_order.npz, the independent reference of
tests/test_torch_grad_order.py. Needs torch (not a dependency of fpsim):

    pip install torch && python tools/record_torch_grad_order.py

A tensor used by several ops receives one gradient from each, added in the tensor's format,
each add rounded: the order of the adds decides the sum's last bit. PyTorch's engine runs the
ready ops by descending sequence number (the most recently recorded first) and adds the
gradients of a tensor as they arrive. Each graph here: three leaves of shape (4,), then
``STEPS`` ops, each on tensors made before it (a scale by a constant of the format, or add,
sub, mul of two tensors), the tensors nothing uses added up (in order) into the output, whose
backward starts from a random gradient. Recorded, as float64 (every value of the three formats
is one): the leaves, the constants, the upstream gradient, every op's output, the leaves'
gradients and every op output's gradient (``retain_grad``); and which leaves no op used (their
gradient None).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "grad_order.npz"
GRAPHS = 300  # per format
LEAVES, STEPS, SIZE = 3, 10, 4
SCALE, ADD, SUB, MUL = range(4)  # the op codes of the ``ops`` array


def main() -> int:
    import ml_dtypes
    import torch

    rng = np.random.default_rng(2026)
    arrays: dict[str, np.ndarray] = {}
    formats = {"fp16": (np.float16, torch.float16), "bf16": (ml_dtypes.bfloat16, torch.bfloat16),
               "fp32": (np.float32, torch.float32)}
    for name, (ndt, tdt) in formats.items():
        def values(*shape, ndt=ndt):
            """Normal values rounded to the format, as float64 (exact)."""
            return rng.standard_normal(shape).astype(ndt).astype(np.float64)

        ops = np.empty((GRAPHS, STEPS, 3), np.int64)  # (code, first input, second input)
        consts = values(GRAPHS, STEPS)
        leaves = values(GRAPHS, LEAVES, SIZE)
        upstream = values(GRAPHS, SIZE)
        outs = np.empty((GRAPHS, STEPS, SIZE))
        leaf_grads = np.zeros((GRAPHS, LEAVES, SIZE))
        unused = np.zeros((GRAPHS, LEAVES), bool)
        node_grads = np.empty((GRAPHS, STEPS, SIZE))
        for k in range(GRAPHS):
            ts = [torch.tensor(a, dtype=tdt, requires_grad=True) for a in leaves[k]]
            used = set()
            for s in range(STEPS):
                n = LEAVES + s
                code = int(rng.integers(0, 4))
                i, j = (int(v) for v in rng.choice(n, 2, replace=False))
                ops[k, s] = code, i, j
                a, b = ts[i], ts[j]
                t = (a * float(consts[k, s]), a + b, a - b, a * b)[code]
                t.retain_grad()
                ts.append(t)
                used.update((i,) if code == SCALE else (i, j))
            sinks = [t for m, t in enumerate(ts) if m >= LEAVES and m not in used]
            out = sinks[0]
            for t in sinks[1:]:
                out = out + t
            out.backward(torch.tensor(upstream[k], dtype=tdt))

            def f64(t):
                return t.detach().to(torch.float64).numpy()

            outs[k] = [f64(t) for t in ts[LEAVES:]]
            node_grads[k] = [f64(t.grad) for t in ts[LEAVES:]]
            for m, t in enumerate(ts[:LEAVES]):
                unused[k, m] = t.grad is None
                if t.grad is not None:
                    leaf_grads[k, m] = f64(t.grad)
        for key, a in (("ops", ops), ("consts", consts), ("leaves", leaves),
                       ("upstream", upstream), ("outs", outs), ("leaf_grads", leaf_grads),
                       ("unused", unused), ("node_grads", node_grads)):
            arrays[f"{name}/{key}"] = a
    arrays["torch_version"] = np.array(torch.__version__)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {GRAPHS} graphs x {len(formats)} formats, "
          f"torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
