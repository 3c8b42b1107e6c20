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

Then the same graphs with a random run of ops made one segment (see :func:`build`), and one
backward pass: PyTorch's gradients with the segment inline, which the recorder checks equal to
those of ``torch.utils.checkpoint(..., use_reentrant=False)``; it also counts the graphs where
the reentrant form (which sums the segment's gradients of an input before handing them on)
gives other gradients, and prints that count. fpsim's checkpoint must give the inline ones.
"""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "grad_order.npz"
GRAPHS = 300  # per format
LEAVES, STEPS, SIZE = 3, 10, 4
SCALE, ADD, SUB, MUL = range(4)  # the op codes of the ``ops`` array


def _run(ts: list, ops: np.ndarray, consts: np.ndarray, keep: bool) -> list:
    """Append the outputs of ``ops`` (indices into ``ts``) to ``ts``; ``keep``: each keeps its
    gradient (``retain_grad``). Returns the indices the ops used."""
    used = []
    for (code, i, j), c in zip(ops, consts, strict=True):
        a, b = ts[i], ts[j]
        t = (a * float(c), a + b, a - b, a * b)[code]
        if keep and t.requires_grad:  # (not so after torch's reentrant form without inputs)
            t.retain_grad()
        ts.append(t)
        used += (i,) if code == SCALE else (i, j)
    return used


def _total(ts: list) -> object:
    out = ts[0]
    for t in ts[1:]:
        out = out + t
    return out


def build(leaves: list, ops: np.ndarray, consts: np.ndarray, segment: tuple[int, int] | None = None,
          checkpoint=None) -> tuple[list, object]:
    """The graph of ``ops`` on ``leaves`` (tensors of any library with +, -, *): the op outputs
    seen outside a segment (each keeping its gradient: ``retain_grad``) and the output, the op
    outputs nothing uses added up in order. tests/test_torch_grad_order.py builds fpsim's
    graphs with it.

    ``segment`` (start, stop): those ops form one function of the op outputs made before it
    (the leaves it reads are its parameters), run through ``checkpoint(fn, *inputs)`` if given
    (torch's or fpsim's), else inline. Its output, the one tensor of it seen outside, is its
    op outputs nothing in it uses, added up in order; a later op naming any of its op outputs
    uses that output."""
    n_leaves = len(leaves)
    start, stop = (len(ops), len(ops)) if segment is None else segment
    ts = list(leaves)
    used = _run(ts, ops[:start], consts[:start], True)
    if start < stop:
        inputs = ts[n_leaves:]

        def fn(*xs):
            local = list(leaves) + list(xs)
            inner = _run(local, ops[start:stop], consts[start:stop], False)
            return _total([t for m, t in enumerate(local)
                           if m >= n_leaves + start and m not in inner])

        out = fn(*inputs) if checkpoint is None else checkpoint(fn, *inputs)
        if out.requires_grad:  # (not so out of torch's reentrant form without tensor inputs)
            out.retain_grad()
        reads = [i for code, a, b in ops[start:stop] for i in ((a,) if code == SCALE else (a, b))]
        used += [i for i in reads if i < n_leaves + start]  # what it reads from outside
        ts += [out] * (stop - start)
    used += _run(ts, ops[stop:], consts[stop:], True)
    nodes, seen = [], set()
    for t in ts[n_leaves:]:
        if id(t) not in seen:
            seen.add(id(t))
            nodes.append(t)
    users = {id(ts[i]) for i in used}
    return nodes, _total([t for t in nodes if id(t) not in users])


def main() -> int:
    import ml_dtypes
    import torch
    from torch.utils.checkpoint import checkpoint as tck

    rng = np.random.default_rng(2026)
    arrays: dict[str, np.ndarray] = {}
    formats = {"fp16": (np.float16, torch.float16), "bf16": (ml_dtypes.bfloat16, torch.bfloat16),
               "fp32": (np.float32, torch.float32)}
    reentrant_differs = dict.fromkeys(formats, 0)
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

        # the same graphs with a run of ops made a checkpointed segment: PyTorch's gradients
        # with the segment inline, equal (checked here) to those of torch.utils.checkpoint's
        # non-reentrant form; its reentrant form sums the segment's gradients of each input
        # first, and differs (and gives the parameters of a segment without tensor inputs no
        # gradient)
        segments = np.sort(np.stack([rng.choice(STEPS + 1, 2, replace=False)
                                     for _ in range(GRAPHS)]), axis=1)
        ck_leaf_grads = np.zeros((GRAPHS, LEAVES, SIZE))
        ck_unused = np.zeros((GRAPHS, LEAVES), bool)
        ck_node_grads = np.full((GRAPHS, STEPS, SIZE), np.nan)  # the nodes seen outside, first
        ck_nodes = np.zeros(GRAPHS, np.int64)
        for k in range(GRAPHS):
            results = []
            for use in (None, False, True):  # inline, non-reentrant, reentrant
                ts = [torch.tensor(a, dtype=tdt, requires_grad=True) for a in leaves[k]]
                ck = None if use is None else partial(tck, use_reentrant=use)
                with warnings.catch_warnings():  # reentrant: "none of the inputs requires grad"
                    warnings.simplefilter("ignore")
                    nodes, out = build(ts, ops[k], consts[k], tuple(segments[k]), ck)
                    if out.requires_grad:  # (not so out of the reentrant form, see above)
                        out.backward(torch.tensor(upstream[k, 0], dtype=tdt))
                results.append([None if t.grad is None else f64(t.grad) for t in ts + nodes])
            def same(x, y):
                return (x is None and y is None) or (
                    x is not None and y is not None and np.array_equal(x, y))

            inline, plain, reentrant = results
            assert all(map(same, inline, plain)), f"torch's checkpoint differs: {name}, {k}"
            reentrant_differs[name] += not all(map(same, inline, reentrant))
            lg, ng = inline[:LEAVES], inline[LEAVES:]
            for m, g in enumerate(lg):
                ck_unused[k, m] = g is None
                if g is not None:
                    ck_leaf_grads[k, m] = g
            ck_nodes[k] = len(ng)
            ck_node_grads[k, :len(ng)] = ng
        for key, a in (("segments", segments), ("leaf_grads", ck_leaf_grads),
                       ("unused", ck_unused), ("node_grads", ck_node_grads),
                       ("nodes", ck_nodes)):
            arrays[f"{name}/checkpoint/{key}"] = a
    arrays["torch_version"] = np.array(torch.__version__)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {GRAPHS} graphs x {len(formats)} formats, "
          f"torch {torch.__version__}); checkpointed segments: torch's reentrant checkpoint "
          f"gives other gradients than inline in {reentrant_differs} graphs, the "
          "non-reentrant one in none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
