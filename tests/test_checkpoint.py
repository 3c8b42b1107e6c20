"""Gradient checkpointing (fpsim.autograd.checkpoint).

References: the same network trained without checkpointing (gradients must be bitwise equal);
Chen et al.'s k + n/k activation count (fpsim.memory.checkpoint_peak_activations) and the
segment schedule written out by hand for the measured peaks; the layer count for the
recomputation cost.
"""

from __future__ import annotations

import numpy as np
import pytest

from fpsim import Rounding, memory, nn
from fpsim.autograd import (
    Tensor,
    get_generator,
    manual_seed,
    matmul_accumulation,
    no_grad,
    rounding_context,
)
from fpsim.autograd import functional as F
from fpsim.autograd.checkpoint import checkpoint, checkpoint_sequential
from fpsim.autograd.memory_meter import MemoryMeter
from tests.intlike import Count


def net_with_dropout(fmt, layers=6, d=10, module_rng=False):
    mods = []
    for i in range(layers):
        mods += [nn.Linear(d, d, rng=10 + i), nn.GELU() if i % 2 else nn.ReLU(),
                 nn.Dropout(0.25, rng=100 + i if module_rng else None)]
    return nn.Sequential(*mods).to(fmt)


def grads_of(net, x, segments=None, seed=7, **ctx):
    """(loss bits, parameter gradients, input gradient, next random draw) of one step."""
    for p in net.parameters():
        p.grad = None
    x.grad = None
    manual_seed(seed)
    if segments is None:
        out = net(x)
    else:
        out = checkpoint_sequential(net, segments, x)
    loss = F.cross_entropy(out, np.arange(len(x.data)) % out.shape[1])
    loss.backward()
    return (loss.data.tobytes(), [p.grad.tobytes() for p in net.parameters()],
            x.grad.tobytes(), get_generator().random())


@pytest.mark.parametrize("fmt", ["fp32", "fp16"])
@pytest.mark.parametrize("module_rng", [False, True])
def test_gradients_are_bitwise_identical_with_dropout(fmt, module_rng):
    x = Tensor(np.random.default_rng(1).normal(size=(6, 10)), fmt, requires_grad=True)
    net = net_with_dropout(fmt, module_rng=module_rng)
    n = len(net)
    if module_rng:  # each run must start from the same module generator states
        states = [m.rng.bit_generator.state for m in net if isinstance(m, nn.Dropout)]

    def run(segments):
        if module_rng:
            for m, st in zip([m for m in net if isinstance(m, nn.Dropout)], states,
                             strict=True):
                m.rng.bit_generator.state = st
        return grads_of(net, x, segments)

    plain = run(None)
    for k in (1, 2, 3, 5, n):
        assert run(k) == plain, f"{k} segments"


def test_forward_context_is_reentered_in_the_recomputation():
    net = net_with_dropout("bf16", layers=4)
    x = Tensor(np.random.default_rng(2).normal(size=(6, 10)), "bf16", requires_grad=True)

    def step(segments):
        for p in net.parameters():
            p.grad = None
        manual_seed(3)
        # forward with stochastic rounding and a bf16 sequential accumulator; backward runs
        # outside both, in the default settings
        with rounding_context("stochastic", rng=np.random.default_rng(11)), \
                matmul_accumulation(("sequential", "bf16")):
            out = net(x) if segments is None else checkpoint_sequential(net, segments, x)
            loss = out.sum()
        loss.backward()
        return [p.grad.tobytes() for p in net.parameters()]

    assert step(3) == step(None)


def test_extra_generators_are_restored():
    gen = np.random.default_rng(9)
    w = Tensor(np.ones((4, 4)), "fp16", requires_grad=True)
    x = Tensor(np.ones((2, 4)), "fp16")

    def seg(t):
        return F.dropout(t @ w, 0.5, rng=gen)

    def grad_of(use_ckpt, rngs=()):
        gen.bit_generator.state = np.random.default_rng(9).bit_generator.state
        w.grad = None
        out = checkpoint(seg, x, rngs=rngs) if use_ckpt else seg(x)
        (out * out).sum().backward()
        return w.grad.tobytes()

    assert grad_of(True, rngs=[gen]) == grad_of(False)
    assert grad_of(True) != grad_of(False)  # a generator checkpoint cannot see: other masks


def test_parameters_used_inside_and_outside_a_segment():
    w = Tensor(np.random.default_rng(4).normal(size=(5, 5)), "fp16", requires_grad=True)
    x = Tensor(np.random.default_rng(5).normal(size=(3, 5)), "fp16", requires_grad=True)

    def seg(h):
        return F.tanh(h @ w)

    def loss_of(use_ckpt):
        w.grad = x.grad = None
        h = checkpoint(seg, x) if use_ckpt else seg(x)
        (h @ w).sum().backward()
        return w.grad.tobytes(), x.grad.tobytes()

    assert loss_of(True) == loss_of(False)


def _nested_and_twice(fmt: str, xv, wv, gv, cs: list, checkpointed: bool):
    """x's and w's gradients (bytes) of a graph with a segment inside a segment and one
    tensor passed as two inputs of a segment, each also used outside (segments inline or
    checkpointed)."""
    x, w = (Tensor(v, fmt, requires_grad=True) for v in (xv, wv))
    a = x * 1.5

    def inner(u):
        return u * cs[0] + u * w + u * cs[1]

    def outer(u):
        return (checkpoint(inner, u) if checkpointed else inner(u)) * cs[2] + u * cs[3]

    def two(u, v):
        return u * cs[0] + v * cs[1] + u * v

    y = checkpoint(outer, a) if checkpointed else outer(a)
    z = checkpoint(two, a, a) if checkpointed else two(a, a)
    (y + z + a * cs[4] + w * cs[5]).backward(Tensor(gv, fmt))
    return x.grad.tobytes(), w.grad.tobytes()


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_nested_segments_and_an_input_passed_twice_add_as_inline(fmt):
    """A segment inside a segment, and one tensor passed as two inputs, each also used outside:
    its gradients from inside arrive one by one (not summed first), so each add rounds as
    inline (the checkpoint that summed them first fails here in each format);
    tests/test_torch_grad_order.py has PyTorch's side."""
    rng = np.random.default_rng(5)
    for _ in range(40):
        xv, wv, gv = rng.standard_normal((3, 4))
        cs = [float(c) for c in Tensor(rng.standard_normal(6), fmt).data]
        assert _nested_and_twice(fmt, xv, wv, gv, cs, True) == \
            _nested_and_twice(fmt, xv, wv, gv, cs, False)


def _returned_as_is(returned: str, checkpointed: bool, xv, wv, c: float):
    """x's and w's gradients (bytes) after two backward passes of a graph whose segment returns
    a tensor it was given, with no op (the second pass adds to ``.grad``: the order of the
    adds shows)."""
    x, w = (Tensor(v, "fp16", requires_grad=True) for v in (xv, wv))
    for _ in range(2):
        a = x if returned == "leaf input" else x * c
        fn = (lambda u: w) if returned == "parameter" else (lambda u: u)  # noqa: B023
        y = checkpoint(fn, a) if checkpointed else fn(a)
        (y * c + a * w + w * c).sum().backward()
    return x.grad.tobytes(), w.grad.tobytes()


@pytest.mark.parametrize("returned", ["input", "leaf input", "parameter"])
def test_a_segment_that_returns_a_tensor_it_was_given(returned):
    """fn returning one of its inputs, or a parameter, with no op: the gradient still flows
    to it, and adds as inline."""
    rng = np.random.default_rng(6)
    for _ in range(40):
        xv, wv = rng.standard_normal((2, 4))
        c = float(Tensor([rng.standard_normal()], "fp16").item())
        assert _returned_as_is(returned, True, xv, wv, c) == \
            _returned_as_is(returned, False, xv, wv, c)


def _random_program(rng: np.random.Generator, n_ops: int) -> list[tuple[int, int, int]]:
    """Ops as (kind, first input, second input); inputs index the tensors made so far."""
    return [(int(rng.integers(0, 7)), int(rng.integers(0, 1000)), int(rng.integers(0, 1000)))
            for _ in range(n_ops)]


def _program_grads(program: list, fmt: str, segment: tuple[int, int], checkpointed: bool,
                   seed: int) -> tuple:
    """The gradients (bytes, or None) of x, w and b after one backward pass of ``program``, the
    ops ``segment`` (start, stop) a segment (inline or checkpointed) of every tensor made before
    it; w and b, read inside and outside the segment, are its parameters."""
    rng = np.random.default_rng(seed)
    w = Tensor(rng.standard_normal((4, 4)), fmt, requires_grad=True)
    b = Tensor(rng.standard_normal(4), fmt, requires_grad=True)
    x = Tensor(rng.standard_normal((3, 4)), fmt, requires_grad=True)
    upstream = Tensor(rng.standard_normal((3, 4)), fmt)

    def apply(ts: list, ops: list) -> list:
        for kind, i, j in ops:
            a, c = ts[i % len(ts)], ts[j % len(ts)]
            make = (lambda: a * c, lambda: a + c, lambda: F.linear(a, w, b),  # noqa: B023
                    lambda: F.relu(a) - c, lambda: a * w[0],  # noqa: B023
                    lambda: a.sum(dim=0, keepdim=True) * c, lambda: a @ w.T + c)  # noqa: B023
            ts.append(make[kind]())
        return ts

    start, stop = segment
    ts = apply([x * 1.0], program[:start])

    def fn(*xs):
        local = apply(list(xs), program[start:stop])
        return local[-1] + local[len(xs)]

    ts.append(checkpoint(fn, *ts) if checkpointed else fn(*ts))
    apply(ts, program[stop:])
    (ts[-1] + ts[len(ts) // 2] + ts[1]).backward(upstream)
    return tuple(None if t.grad is None else t.grad.tobytes() for t in (x, w, b))


def test_random_programs_checkpointed_give_the_inline_gradients():
    """Random programs of mul, add, linear, relu, indexing, broadcast sums and matmul, with a
    random run of ops as a segment whose inputs and parameters are also used outside it:
    checkpointing changes no bit of any gradient (fp16, bf16, fp32). The checkpoint that summed
    a segment's gradients of an input first differs in 35 of these 150 draws."""
    rng = np.random.default_rng(0)
    for k in range(150):
        program = _random_program(rng, 8)
        start = int(rng.integers(0, 7))
        segment = (start, int(rng.integers(start + 1, 9)))
        fmt = ("fp16", "bf16", "fp32")[k % 3]
        assert _program_grads(program, fmt, segment, True, k) == \
            _program_grads(program, fmt, segment, False, k), (k, program, segment)


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("mode", [m.value for m in Rounding])
def test_random_programs_checkpointed_in_every_rounding_mode(fmt, mode):
    """The same in every rounding mode, tf32 (a format without a NumPy type) included: with
    stochastic rounding the random draws of the gradients' roundings and adds must come in the
    inline order, so each gradient of a segment's input is rounded and added the moment the
    segment's backward produces it (handing them back as a list after the segment's backward
    differed, under stochastic rounding, in 27, 28 and 40 of 60 draws of this generator for
    fp16, bf16 and tf32)."""
    rng = np.random.default_rng(1)
    for k in range(20):
        program = _random_program(rng, 8)
        start = int(rng.integers(0, 7))
        segment = (start, int(rng.integers(start + 1, 9)))
        grads = []
        for checkpointed in (True, False):
            manual_seed(123)
            with rounding_context(mode):
                grads.append(_program_grads(program, fmt, segment, checkpointed, k))
        assert grads[0] == grads[1], (k, program, segment)


def test_retain_graph_recomputes_again():
    net = net_with_dropout("fp32", layers=3)
    x = Tensor(np.ones((2, 10)), "fp32")

    def twice(segments):
        for p in net.parameters():
            p.grad = None
        manual_seed(0)
        out = net(x) if segments is None else checkpoint_sequential(net, segments, x)
        loss = out.sum()
        loss.backward(retain_graph=True)
        loss.backward()
        return [p.grad.tobytes() for p in net.parameters()]

    assert twice(2) == twice(None)


N_LAYERS, WIDTH, BATCH = 16, 16, 8


def chain(fmt):
    mods = []
    for i in range(N_LAYERS):
        mods += [nn.Linear(WIDTH, WIDTH, rng=i), nn.ReLU()]
    return nn.Sequential(*mods).to(fmt), [nn.Sequential(mods[2 * i], mods[2 * i + 1])
                                          for i in range(N_LAYERS)]


@pytest.mark.parametrize("fmt,itemsize", [("fp32", 4), ("fp16", 2)])
def test_peak_activations_follow_k_plus_n_over_k(fmt, itemsize):
    net, layers = chain(fmt)
    x = Tensor(np.random.default_rng(0).normal(size=(BATCH, WIDTH)), fmt)
    unit = BATCH * WIDTH * itemsize  # one layer's output
    with MemoryMeter(net) as m:
        net(x).sum().backward()
    plain = m.report()
    assert plain.max["activations"] == (N_LAYERS + 1) * unit
    peaks = {}
    for k in range(1, N_LAYERS + 1):
        with MemoryMeter(net) as m:
            checkpoint_sequential(layers, k, x).sum().backward()
        r = m.report()
        assert r.max["activations"] % unit == 0
        peaks[k] = r.max["activations"] // unit
        # hand schedule: pieces of ceil / floor(n/k) layers, longer first; the last piece runs
        # normally; the peak is the k - 1 kept inputs + the last piece's input and outputs
        assert peaks[k] == k + N_LAYERS // k
        formula = memory.checkpoint_peak_activations(N_LAYERS, k)
        assert peaks[k] <= formula
        if N_LAYERS % k == 0:
            assert peaks[k] == formula
        # the extra forward: every checkpointed piece once more (2 ops per layer)
        last = N_LAYERS // k
        assert r.checkpointed_forward_calls == r.recomputed_forward_calls == k - 1
        assert r.recomputed_ops == 2 * (N_LAYERS - last)
        assert r.ops == plain.ops
        assert r.flops == plain.flops
        per_layer = 2 * BATCH * WIDTH * WIDTH + BATCH * WIDTH
        assert r.recomputed_flops == per_layer * (N_LAYERS - last)
    best = min(peaks.values())
    assert best == min(memory.checkpoint_peak_activations(N_LAYERS, k)
                       for k in range(1, N_LAYERS + 1))
    assert memory.optimal_checkpoint_segments(N_LAYERS) == 4
    assert peaks[4] == best == 2 * 4  # k = sqrt(n) = 4: 4 + 16/4
    assert peaks[1] == peaks[N_LAYERS] == N_LAYERS + 1


def test_checkpoint_errors_and_plain_paths():
    w = Tensor([[1.0]], requires_grad=True)
    x = Tensor([[2.0]])
    with pytest.raises(TypeError, match="one Tensor"):
        checkpoint(lambda t: (t @ w, t), x)
    h = x @ w  # a non-leaf that requires grad, captured from outside
    with pytest.raises(ValueError, match="pass them as inputs"):
        checkpoint(lambda t: t + h, x)
    with pytest.raises(TypeError, match="callable"):
        checkpoint(3, x)
    with pytest.raises(ValueError, match=r"segments must be in \[1, 2\]"):
        checkpoint_sequential([nn.ReLU(), nn.ReLU()], 3, x)
    with pytest.raises(TypeError, match="segments must be an int"):
        checkpoint_sequential([nn.ReLU()], 1.0, x)
    with no_grad():
        y = checkpoint(lambda t: t @ w, x)
    assert not y.requires_grad and y.is_leaf
    assert checkpoint(lambda t: t * 2.0, x).is_leaf  # nothing requires grad: no node


def test_checkpoint_sequential_segments_take_what_range_takes():
    # segments is checked by fpsim.checks.as_int: what range() takes is a count, and gives the
    # same values and gradients as the int
    layers = [nn.Linear(3, 3, rng=i) for i in range(4)]
    x0 = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    x = Tensor(x0, requires_grad=True)
    ref = checkpoint_sequential(layers, 2, x)
    ref.sum().backward()
    ref_g = x.grad.copy()
    for seg in (np.int8(2), np.uint64(2), np.array(2), Count(2)):
        assert len(range(seg)) == 2
        x = Tensor(x0, requires_grad=True)
        out = checkpoint_sequential(layers, seg, x)
        out.sum().backward()
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        np.testing.assert_array_equal(x.grad, ref_g)
    for bad in (True, np.True_, 2.0, np.float32(2.0), "2", None, np.array([2]),
                np.array(2.0), np.timedelta64(2)):
        with pytest.raises(TypeError, match="checkpoint_sequential: segments must be an int, "
                                            f"got {type(bad).__name__}"):
            checkpoint_sequential(layers, bad, x)
    for out_of_range, shown in ((0, 0), (-1, -1), (np.int64(0), 0), (np.array(5), 5), (5, 5),
                                (Count(7), 7)):  # an integer-like value named by its int
        with pytest.raises(ValueError, match=r"checkpoint_sequential: segments must be in \[1, "
                                             rf"4\] \(the number of functions\), got {shown}$"):
            checkpoint_sequential(layers, out_of_range, x)
