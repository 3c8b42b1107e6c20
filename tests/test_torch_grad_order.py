"""The order gradients add in, against PyTorch: random graphs whose tensors are used several
times (fp16, bf16, fp32), recorded by tools/record_torch_grad_order.py into
tests/data/torch/grad_order.npz. A tensor's gradients add in its format, each add rounded, so
the order of the adds shows in the last bit; PyTorch runs the ops by descending sequence
number and adds each tensor's gradients as they arrive, and so must fpsim's engine."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fpsim import checkpoint
from fpsim.autograd import Tensor

ROOT = Path(__file__).resolve().parents[1]
DATA = np.load(ROOT / "tests" / "data" / "torch" / "grad_order.npz")
FORMATS = ("fp16", "bf16", "fp32")
# the recorder's graph builder, which takes any tensors with +, -, * (not torch itself)
_spec = importlib.util.spec_from_file_location("record_torch_grad_order",
                                               ROOT / "tools" / "record_torch_grad_order.py")
recorder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recorder)


def _bits(a: np.ndarray) -> np.ndarray:
    """float64 bit patterns: +0 and -0 differ; NaNs compare by pattern."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _grads(tensors: list[Tensor]) -> np.ndarray:
    return np.array([np.zeros(recorder.SIZE) if t.grad is None else t.grad.astype(np.float64)
                     for t in tensors])


@pytest.mark.parametrize("fmt", FORMATS)
def test_gradients_add_in_pytorchs_order(fmt):
    """Graph by graph: the forward values first (a difference there would not be the
    engine's), then the gradients of every op output and leaf after one backward pass, and
    the leaves' after a second pass over the graph built again (adding to ``.grad``)."""
    d = {key: DATA[f"{fmt}/{key}"] for key in ("ops", "consts", "leaves", "upstream", "outs",
                                                "leaf_grads", "unused", "node_grads")}
    bad_values, bad_grads, bad_second = [], [], []
    for k in range(len(d["ops"])):
        leaves = [Tensor(a, fmt, requires_grad=True) for a in d["leaves"][k]]
        nodes, out = recorder.build(leaves, d["ops"][k], d["consts"][k])
        out.backward(Tensor(d["upstream"][k, 0], fmt))
        if not np.array_equal(_bits([t.numpy(np.float64) for t in nodes]), _bits(d["outs"][k])):
            bad_values.append(k)
            continue
        assert [t.grad is None for t in leaves] == d["unused"][k].tolist(), k
        if not (np.array_equal(_bits(_grads(leaves)), _bits(d["leaf_grads"][k, 0]))
                and np.array_equal(_bits(_grads(nodes)), _bits(d["node_grads"][k]))):
            bad_grads.append(k)
        _, out = recorder.build(leaves, d["ops"][k], d["consts"][k])
        out.backward(Tensor(d["upstream"][k, 1], fmt))
        if not np.array_equal(_bits(_grads(leaves)), _bits(d["leaf_grads"][k, 1])):
            bad_second.append(k)
    assert not bad_values, f"{fmt}: forward values differ from PyTorch in graphs {bad_values}"
    assert not bad_grads, f"{fmt}: gradients differ from PyTorch in graphs {bad_grads}"
    assert not bad_second, f"{fmt}: second pass's .grad differs in graphs {bad_second}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("checkpointed", [False, True], ids=["inline", "checkpoint"])
def test_checkpoint_gradients_are_pytorchs(fmt, checkpointed):
    """The same graphs with a run of ops made one segment, inline or through fpsim's
    checkpoint: the gradients of the leaves and of every tensor seen outside the segment are
    PyTorch's (inline, which its non-reentrant checkpoint equals: the recorder checks it), so
    checkpointing changes no bit, even where a segment's input or parameter is also used
    outside it."""
    d = {key: DATA[f"{fmt}/{key}"] for key in ("ops", "consts", "leaves", "upstream")}
    ck = {key: DATA[f"{fmt}/checkpoint/{key}"] for key in ("segments", "leaf_grads", "unused",
                                                            "node_grads", "nodes")}
    bad = []
    for k in range(len(d["ops"])):
        leaves = [Tensor(a, fmt, requires_grad=True) for a in d["leaves"][k]]
        nodes, out = recorder.build(leaves, d["ops"][k], d["consts"][k],
                                    tuple(ck["segments"][k]), checkpoint if checkpointed else None)
        out.backward(Tensor(d["upstream"][k, 0], fmt))
        assert len(nodes) == ck["nodes"][k], k
        assert [t.grad is None for t in leaves] == ck["unused"][k].tolist(), k
        if not (np.array_equal(_bits(_grads(leaves)), _bits(ck["leaf_grads"][k]))
                and np.array_equal(_bits(_grads(nodes)), _bits(ck["node_grads"][k, :len(nodes)]))):
            bad.append(k)
    assert not bad, f"{fmt}: gradients differ from PyTorch in graphs {bad}"


def test_the_graphs_reuse_tensors():
    """The recorded graphs exercise the order: most use some tensor more than once."""
    for fmt in FORMATS:
        ops = DATA[f"{fmt}/ops"]
        reused = 0
        for g in ops:
            inputs = [i for code, i, j in g for i in ((i,) if code == recorder.SCALE else (i, j))]
            reused += len(inputs) != len(set(inputs))
        assert reused > 0.9 * len(ops), (fmt, reused)


@pytest.mark.parametrize("order", ["big first", "small first"])
def test_ordered_grads_add_one_by_one_in_their_order(order):
    """A node returning OrderedGrads: each delivered gradient is one of its own, added in the
    order given, each add rounded (fp16: 1 + 2**-11 is a tie to 1, so the order shows), None and
    parents without grad skipped."""
    from fpsim.autograd.tensor import OrderedGrads, make_result

    a = Tensor([0.0], "fp16", requires_grad=True)
    c = Tensor([0.0], "fp16")  # no gradient wanted
    parts = [np.array([1.0]), np.array([2.0 ** -11]), np.array([2.0 ** -11])]
    if order == "small first":
        parts.reverse()

    def backward(g):
        def run(deliver):
            for i, pg in [(1, g)] + [(0, p * g) for p in parts] + [(0, None)]:
                deliver(i, pg)

        return OrderedGrads(run)

    make_result(np.zeros(1, np.float16), a.fmt, (a, c), backward, "custom").backward(
        np.ones(1, np.float16))
    assert c.grad is None
    assert a.grad.tolist() == ([1.0] if order == "big first" else [1.0 + 2.0 ** -10])
