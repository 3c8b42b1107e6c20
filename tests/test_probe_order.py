"""fpsim.probe.reveal_order: accumulation trees of black-box sums (FPRev's masking).

Every recovered tree is checked independently of the masking: its sums, recomputed here one
add at a time in the function's accumulator (float32 or float64), must equal the function's
results bit for bit on random inputs. PyTorch's sums come from tests/data/torch/probe_order.npz
(tools/record_torch_probe_order.py, PyTorch 2.13.0 CPU): reveal_order runs again on a function
replaying torch's recorded answers and must give the recorded tree, which must reproduce
torch's recorded sums of random inputs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import fpsim.tensorcore as tc
from fpsim.probe import OrderError, reveal_order

DATA = Path(__file__).parent / "data" / "torch" / "probe_order.npz"
#: PyTorch's CPU cumsum of float32 accumulates in double (at::acc_type<float, false>) and
#: rounds each running sum to float32 once; its other sums add in float32.
TORCH_ACCUMULATOR = {"torch.cumsum[-1]": np.float64}


def recompute(tree, x, dtype):
    """The tree's sum of x, each two-operand add rounded to ``dtype`` (written from the tree
    alone: a leaf is x[i], a node adds its children left to right)."""
    if isinstance(tree, int):
        return dtype(x[tree])
    acc = recompute(tree[0], x, dtype)
    for child in tree[1:]:
        acc = dtype(acc + recompute(child, x, dtype))
    return acc


def random_rows(n, rows=40, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    e = rng.integers(-6, 7, size=(rows, n))
    x = rng.uniform(1, 2, size=(rows, n)) * np.exp2(e) * rng.choice((-1.0, 1.0), (rows, n))
    return x.astype(dtype)


def assert_reproduces(fn, tree, n, dtype=np.float32, acc=np.float32):
    for row in random_rows(n, dtype=dtype):
        got = float(fn(row.copy()))
        want = float(recompute(tree, row, acc))
        assert got == want, (tree, row)


def binary(tree):
    return isinstance(tree, int) or (len(tree) == 2 and all(binary(c) for c in tree))


def canonical(tree):
    """Children sorted by their smallest leaf: child order within a node is free."""
    if isinstance(tree, int):
        return tree
    return tuple(sorted((canonical(c) for c in tree), key=lambda c: min(leaves(c))))


def leaves(tree):
    return [tree] if isinstance(tree, int) else [i for c in tree for i in leaves(c)]


class Counted:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, x):
        self.calls += 1
        return self.fn(x)


def _strided_reduce(x):
    y = np.zeros(3 * len(x), dtype=x.dtype)
    y[::3] = x
    return np.add.reduce(y[::3])


def _loop(x):
    s = np.float32(0)
    for v in x:
        s = np.float32(s + v)
    return s


def _loop_reversed(x):
    return _loop(x[::-1])


def _blocked(x, block=5):
    total = np.float32(0)
    for k in range(0, len(x), block):
        part = np.float32(0)
        for v in x[k:k + block]:
            part = np.float32(part + v)
        total = np.float32(total + part)
    return total


def _unrolled(x, ways=4):
    acc = [np.float32(0)] * ways
    for k, v in enumerate(x):
        acc[k % ways] = np.float32(acc[k % ways] + v)
    return np.float32(np.float32(acc[0] + acc[1]) + np.float32(acc[2] + acc[3]))


def _python_float(x):
    s = 0.0
    for v in x:
        s += float(v)
    return s


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 16, 31, 64, 100, 130])
@pytest.mark.parametrize("name, fn", [
    ("numpy.sum", np.sum), ("numpy.add.reduce strided", _strided_reduce),
    ("python loop", _loop), ("python loop reversed", _loop_reversed),
    ("blocked", _blocked), ("unrolled", _unrolled)])
def test_float32_orders_recomputed(name, fn, n):
    tree = reveal_order(fn, n)
    assert sorted(leaves(tree)) == list(range(n))
    assert binary(tree)
    assert_reproduces(fn, tree, n)


def test_known_shapes():
    assert canonical(reveal_order(_loop, 5)) == ((((0, 1), 2), 3), 4)
    assert canonical(reveal_order(_loop_reversed, 4)) == canonical((((3, 2), 1), 0))
    # NumPy's pairwise sum keeps 8 accumulators (numpy/_core/src/umath/loops_utils.h.src)
    assert canonical(reveal_order(np.sum, 8)) == (((0, 1), (2, 3)), ((4, 5), (6, 7)))


def test_python_float_accumulator():
    tree = reveal_order(_python_float, 20)
    assert canonical(tree) == canonical(reveal_order(_loop, 20))
    assert_reproduces(_python_float, tree, 20, acc=np.float64)


@pytest.mark.parametrize("n", [32, 64, 256])
def test_numpy_dot(n):
    """np.dot of float32 with ones (BLAS sdot): lengths its vector kernel covers whole."""
    def fn(x):
        return np.dot(x, np.ones_like(x))
    tree = reveal_order(fn, n)
    assert_reproduces(fn, tree, n)


@pytest.mark.parametrize("gpu, fmt", [("V100", "fp16"), ("A100", "fp16"), ("H100", "bf16"),
                                      ("A100", "tf32"), ("MI300X", "fp16")])
def test_tensor_core_multi_term_nodes(gpu, fmt):
    """A tensor core's chain of block FMAs: blocks of the unit's size, each a node of the
    block's products and the previous block (docs/tensorcore-model.md, 'A longer K')."""
    unit = tc.get_gpu(gpu).unit_for(fmt, "fp32")
    n, K = unit.block_size, 3 * unit.block_size + 2

    def fn(x):
        return tc.dot(np.asarray(x, np.float64), np.ones(K), 0.0, gpu=gpu, input_format=fmt)
    tree = reveal_order(fn, K, fmt=fmt)
    want = tuple(range(n))
    for start in range(n, K, n):
        want = (want, *range(start, min(start + n, K)))
    assert canonical(tree) == canonical(want)


def test_pairwise_tensor_core():
    """MI210: products added in a binary tree in fp32, then c (the previous block)."""
    def fn(x):
        return tc.dot(np.asarray(x, np.float64), np.ones(8), 0.0, gpu="MI210",
                      input_format="fp16")
    assert canonical(reveal_order(fn, 8, fmt="fp16")) == (((0, 1), (2, 3)), ((4, 5), (6, 7)))


@pytest.mark.parametrize("fn, match", [
    (math.fsum, "fixed tree|exact"),
    (lambda x: np.sum(np.sort(x)), "fixed tree|reorders"),
    (lambda x: np.sum(x[np.argsort(np.abs(x))]), "fixed tree|reorders"),
    (lambda x: _python_float(np.sort(x)), "fixed tree|reorders"),
    (lambda x: 2 * np.sum(x), "not a sum"),
    (lambda x: np.sum(np.abs(x)), "not a sum"),
    (lambda x: float(np.sum(x.astype(np.float64) ** 3)), "not a sum"),
])
def test_not_a_tree_sum_is_refused(fn, match):
    with pytest.raises(OrderError, match=match):
        reveal_order(fn, 16)


def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        reveal_order(3, 4)
    with pytest.raises(ValueError, match="n"):
        reveal_order(np.sum, 0)
    with pytest.raises(OrderError, match="scalar"):
        reveal_order(lambda x: x, 4)
    with pytest.raises(ValueError, match="format"):
        reveal_order(np.sum, 4, fmt="nope")


def test_calls_grow_as_fprev():
    """n - 1 masked calls (plus n + 5 checks) for a sequential sum; O(n log n) for pairwise."""
    for n in (64, 256):
        f = Counted(_loop)
        reveal_order(f, n)
        assert f.calls <= 2 * n + 8
        g = Counted(np.sum)
        reveal_order(g, n)
        assert g.calls <= n * math.log2(n) + 2 * n


def _cases():
    if not DATA.exists():
        return []
    with np.load(DATA) as z:
        index = json.loads(str(z["index"]))
    return [pytest.param(c, id=f"{c['function']}-{c['n']}") for c in index["cases"]]


@pytest.mark.parametrize("case", _cases())
def test_torch_recorded(case):
    with np.load(DATA) as z:
        queries = z[f"{case['key']}/queries"]
        outputs = z[f"{case['key']}/outputs"]
        rand, sums = z[f"{case['key']}/random"], z[f"{case['key']}/random_sums"]
    answers = {q.astype(np.float32).tobytes(): y for q, y in zip(queries, outputs,
                                                                 strict=True)}

    def replay(x):
        return answers[np.asarray(x, np.float32).tobytes()]  # KeyError: a new query

    tree = reveal_order(replay, case["n"])
    want = json.loads(case["tree"])

    def as_tuple(t):
        return t if isinstance(t, int) else tuple(as_tuple(c) for c in t)
    assert canonical(tree) == canonical(as_tuple(want))
    acc = TORCH_ACCUMULATOR.get(case["function"], np.float32)
    for row, s in zip(rand.astype(np.float32), sums, strict=True):
        assert float(np.float32(recompute(tree, row, acc))) == s
