"""The order gradients add in, against PyTorch: random graphs whose tensors are used several
times (fp16, bf16, fp32), recorded by tools/record_torch_grad_order.py into
tests/data/torch/grad_order.npz. A tensor's gradients add in its format, each add rounded, so
the order of the adds shows in the last bit; PyTorch runs the ops by descending sequence
number and adds each tensor's gradients as they arrive, and so must fpsim's engine."""

from pathlib import Path

import numpy as np
import pytest

from fpsim.autograd import Tensor

DATA = np.load(Path(__file__).parent / "data" / "torch" / "grad_order.npz")
FORMATS = ("fp16", "bf16", "fp32")
SCALE, ADD, SUB, MUL = range(4)  # tools/record_torch_grad_order.py's op codes


def _bits(a: np.ndarray) -> np.ndarray:
    """float64 bit patterns: +0 and -0 differ; NaNs compare by pattern."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _replay(fmt: str, k: int) -> tuple[list[Tensor], list[Tensor]]:
    """Graph ``k`` of ``fmt`` rebuilt in fpsim and run backward: (leaves, op outputs)."""
    ops, consts = DATA[f"{fmt}/ops"][k], DATA[f"{fmt}/consts"][k]
    ts = [Tensor(a, fmt, requires_grad=True) for a in DATA[f"{fmt}/leaves"][k]]
    n_leaves = len(ts)
    used = set()
    for (code, i, j), c in zip(ops, consts, strict=True):
        a, b = ts[i], ts[j]
        t = (a * float(c), a + b, a - b, a * b)[code]
        t.retain_grad()
        ts.append(t)
        used.update((i,) if code == SCALE else (i, j))
    sinks = [t for m, t in enumerate(ts) if m >= n_leaves and m not in used]
    out = sinks[0]
    for t in sinks[1:]:
        out = out + t
    out.backward(Tensor(DATA[f"{fmt}/upstream"][k], fmt))
    return ts[:n_leaves], ts[n_leaves:]


@pytest.mark.parametrize("fmt", FORMATS)
def test_gradients_add_in_pytorchs_order(fmt):
    n_graphs = len(DATA[f"{fmt}/ops"])
    outs, leaf_grads = DATA[f"{fmt}/outs"], DATA[f"{fmt}/leaf_grads"]
    node_grads, unused = DATA[f"{fmt}/node_grads"], DATA[f"{fmt}/unused"]
    bad_values, bad_grads = [], []
    for k in range(n_graphs):
        leaves, nodes = _replay(fmt, k)
        # the forward values first: a difference there would not be the engine's
        got = np.array([t.numpy(np.float64) for t in nodes])
        if not np.array_equal(_bits(got), _bits(outs[k])):
            bad_values.append(k)
            continue
        for m, leaf in enumerate(leaves):
            assert (leaf.grad is None) == bool(unused[k, m]), (k, m)
        got = np.array([np.zeros(4) if t.grad is None else t.grad.astype(np.float64)
                        for t in leaves])
        gnodes = np.array([t.grad.astype(np.float64) for t in nodes])
        if not (np.array_equal(_bits(got), _bits(leaf_grads[k]))
                and np.array_equal(_bits(gnodes), _bits(node_grads[k]))):
            bad_grads.append(k)
    assert not bad_values, f"{fmt}: forward values differ from PyTorch in graphs {bad_values}"
    assert not bad_grads, f"{fmt}: gradients differ from PyTorch in graphs {bad_grads}"


def test_the_graphs_reuse_tensors():
    """The recorded graphs exercise the order: most use some tensor more than once."""
    for fmt in FORMATS:
        ops = DATA[f"{fmt}/ops"]
        reused = 0
        for g in ops:
            inputs = [i for code, i, j in g for i in ((i,) if code == SCALE else (i, j))]
            reused += len(inputs) != len(set(inputs))
        assert reused > 0.9 * len(ops), (fmt, reused)
