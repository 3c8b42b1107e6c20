"""Record PyTorch's gradients of random graphs whose tensors are used several times, in fp16,
bf16 and fp32, into tests/data/torch/grad_order.npz, the independent reference of
tests/test_torch_grad_order.py. Needs torch (not a dependency of fpsim):

    pip install torch && python tools/record_torch_grad_order.py

A tensor used by several ops receives one gradient from each, added in the tensor's format,
each add rounded: the order of the adds decides the sum's last bit. PyTorch's engine runs the
ready ops by descending sequence number (the most recently recorded first) and adds the
gradients of a tensor as they arrive. A leaf's gradients of one pass are added up
first, then added to what its ``.grad`` held. Each graph here: three leaves of shape (4,), then
``STEPS`` ops, each on tensors made before it (a scale by a constant of the format, or add,
sub, mul of two tensors), the tensors nothing uses added up (in order) into the output, whose
backward starts from a random gradient; then the same graph built again on the same leaves
and run backward from another gradient (accumulating into ``.grad``). Recorded, as float64
(every value of the three formats is one): the leaves, the constants, the two upstream
gradients, every op's output, the leaves' gradients after each pass and every op output's
gradient of the first (``retain_grad``); and which leaves no op used (their gradient None).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "grad_order.npz"
GRAPHS = 300  # per format
LEAVES, STEPS, SIZE = 3, 10, 4
SCALE, ADD, SUB, MUL = range(4)  # the op codes of the ``ops`` array


def build(leaves: list, ops: np.ndarray, consts: np.ndarray) -> tuple[list, object]:
    """The graph of ``ops`` on ``leaves`` (tensors of any library with +, -, *): every op output
    (each keeping its gradient: ``retain_grad``) and the output, the op outputs nothing uses
    added up in order. tests/test_torch_grad_order.py builds fpsim's graphs with it."""
    ts = list(leaves)
    used = set()
    for (code, i, j), c in zip(ops, consts, strict=True):
        a, b = ts[i], ts[j]
        t = (a * float(c), a + b, a - b, a * b)[code]
        t.retain_grad()
        ts.append(t)
        used.update((i,) if code == SCALE else (i, j))
    nodes = ts[len(leaves):]
    sinks = [t for m, t in enumerate(ts) if m >= len(leaves) and m not in used]
    out = sinks[0]
    for t in sinks[1:]:
        out = out + t
    return nodes, out


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
        for s in range(STEPS):
            ops[:, s, 0] = rng.integers(0, 4, GRAPHS)
            ops[:, s, 1:] = [rng.choice(LEAVES + s, 2, replace=False) for _ in range(GRAPHS)]
        consts = values(GRAPHS, STEPS)
        leaves = values(GRAPHS, LEAVES, SIZE)
        upstream = values(GRAPHS, 2, SIZE)  # one for each of the two backward passes
        outs = np.empty((GRAPHS, STEPS, SIZE))
        leaf_grads = np.zeros((GRAPHS, 2, LEAVES, SIZE))
        unused = np.zeros((GRAPHS, LEAVES), bool)
        node_grads = np.empty((GRAPHS, STEPS, SIZE))

        def f64(t):
            return t.detach().to(torch.float64).numpy()

        for k in range(GRAPHS):
            ts = [torch.tensor(a, dtype=tdt, requires_grad=True) for a in leaves[k]]
            for p in range(2):  # the second pass adds to the leaves' .grad
                nodes, out = build(ts, ops[k], consts[k])
                out.backward(torch.tensor(upstream[k, p], dtype=tdt))
                if p == 0:
                    outs[k] = [f64(t) for t in nodes]
                    node_grads[k] = [f64(t.grad) for t in nodes]
                for m, t in enumerate(ts):
                    unused[k, m] = t.grad is None
                    if t.grad is not None:
                        leaf_grads[k, p, m] = f64(t.grad)
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
