"""One training step (forward, backward, optimizer step) in fpsim against plain NumPy.

Models: an MLP 64-256-256-10 (ReLU) and a small CNN (1x8x8 input, conv 8 channels 3x3 padding
1, ReLU, 2x2 max pool, linear 128 -> 10), batch 128, cross-entropy loss, SGD with momentum 0.9.

Variants, timed in the same run:

- ``numpy fp32``: hand-written NumPy float32 forward / backward / update (the baseline);
- ``numpy fp64``: the same code in float64 (the price of float64 GEMMs, as the "fp32" model pays);
- ``numpy fp16+master`` (MLP and CNN): fpsim's fp16 step written directly in NumPy, every
  rounding done by fpsim's kernels, no graph, no Tensor objects, no argument checks: the floor
  of this maths in NumPy (bit-identical to fpsim's step, checked by
  tests/test_bench_training_step.py);
- ``fpsim fp32``: fpsim tensors in fp32;
- ``fpsim fp16+master``: model and input in fp16, fp32 master weights in the optimizer, "fp32"
  matmul accumulation (float64 products and sums, rounded to fp32, then to fp16);
- ``fpsim fp16+master sgemm``: the same with the "sgemm" model (a float32 accumulator: BLAS
  sgemm), for comparison;
- ``fpsim bf16+master``: the fp16+master step in bf16, whose conversions are ml_dtypes' compiled
  casts (fp16's are fpsim's NumPy kernels): the price of the conversions, seen from the side.

Ratio convention: speed vs numpy fp32 = numpy-fp32 time / variant time (1.0 = as fast as the
NumPy float32 step, < 1 slower); BLAS pinned to one thread. Issue 5 asked fp16+master >= 0.33
(at most 3x the NumPy time); it ended blocked: the MLP's floor itself (the same maths with no
engine) is under 0.33 with the "fp32" model's float64 GEMMs. The ``engine overhead``
column is fpsim fp16+master time / floor time - 1 (what the graph, the Tensor objects and
the ops' argument handling add; target < 10%; ``--engine`` times only the rows it needs).
Where it goes
(``--breakdown`` times the parts of the MLP step and prints their costs): the "fp32" model
accumulates in float64 (BLAS dgemm, slower than sgemm: compare the numpy fp64 and fp32 rows),
every fp16 result is rounded by fpsim.rounding.fp16 (NumPy passes over the array) and every
fp16 operand is widened through a 65536-entry table. The floor rows show that these
conversions, not the engine, set the cost (docs/autograd.md gives the measured overhead). BLAS
runs on one thread (timing.pinned_blas): several threads on these small GEMMs ran slower on a
busy 2-core machine. The script also keeps freed memory in the process (timing.steady_malloc):
otherwise glibc's adaptive mmap threshold made a step page its arrays in afresh in some runs
and not in others (page faults on the floor or on fpsim by the luck of what ran before), which
moved the engine overhead between runs.

With ``--pairs``, the CNN's floor is also timed against itself run as a graph
(``NumpyCNNHalfGraph``: each op the floor's code, recorded in fpsim's graph and run backward by
fpsim's engine): what recording the step as a graph costs by itself, before any of fpsim's
ops; and against the same graph with its closures called by hand (``NumpyCNNHalfByHand``):
what the records cost without the engine's traversal.

``--glue K`` shows what Python work between kernel calls costs: it times the MLP floor with K
rounds of plain Python work (small objects made and dropped, as an engine's bookkeeping does)
before each of its fp16 kernel calls, against the same wrappers doing none, and that Python
work alone, all by per-thread CPU time.

    python benchmarks/bench_training_step.py [--repeat 7] [--steps 20] [--breakdown] [--engine]
                                             [--pairs 200] [--glue 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fpsim.autograd.conv as _conv
import fpsim.autograd.functional as F
from fpsim import nn, optim
from fpsim.autograd import Tensor, matmul_accumulation
from fpsim.autograd.tensor import make_result
from fpsim.formats import BF16, FP16, FP32
from fpsim.rounding import fp16 as fastcast
from fpsim.training import MLP

BATCH = 128


# --------------------------------------------------------------------- NumPy baseline
class NumpyMLP:
    """64-256-256-10 MLP, float32, SGD momentum: the same maths written directly."""

    def __init__(self, params: list[np.ndarray], dtype=np.float32) -> None:
        self.p = [a.astype(dtype) for a in params]  # W1, b1, W2, b2, W3, b3
        self.buf = [np.zeros_like(a) for a in self.p]

    def step(self, x: np.ndarray, y: np.ndarray, lr: float = 0.01, mom: float = 0.9) -> float:
        w1, b1, w2, b2, w3, b3 = self.p
        h1 = x @ w1.T + b1
        a1 = np.maximum(h1, 0)
        h2 = a1 @ w2.T + b2
        a2 = np.maximum(h2, 0)
        z = a2 @ w3.T + b3
        zmax = z.max(axis=1, keepdims=True)
        e = np.exp(z - zmax)
        s = e.sum(axis=1, keepdims=True)
        logp = z - zmax - np.log(s)
        n = x.shape[0]
        loss = -logp[np.arange(n), y].mean()
        dz = e / s
        dz[np.arange(n), y] -= 1
        dz /= n
        gw3 = dz.T @ a2
        gb3 = dz.sum(0)
        da2 = dz @ w3
        dh2 = da2 * (h2 > 0)
        gw2 = dh2.T @ a1
        gb2 = dh2.sum(0)
        da1 = dh2 @ w2
        dh1 = da1 * (h1 > 0)
        gw1 = dh1.T @ x
        gb1 = dh1.sum(0)
        for i, g in enumerate((gw1, gb1, gw2, gb2, gw3, gb3)):
            self.buf[i] = mom * self.buf[i] + g
            self.p[i] -= lr * self.buf[i]
        return float(loss)


class NumpyMLPHalf:
    """The fp16 + fp32-master step of fpsim written directly in NumPy: fp16 storage, float64
    GEMMs rounded to fp32 then fp16, every op's one rounding by fpsim's fastest kernels
    (fpsim.rounding.fp16), and the float32 master update. No graph, no Tensor objects: the
    floor of this maths in NumPy, so ``fpsim fp16+master`` / this is what the engine adds.
    tests/test_bench_training_step.py checks it gives fpsim's parameters, bit for bit."""

    def __init__(self, params: list[np.ndarray]) -> None:
        self.p = [fastcast.f64_to_f16(np.asarray(a, np.float64)) for a in params]
        self.master = [a.astype(np.float32) for a in self.p]  # from the fp16 values, as fpsim
        self.buf: list[np.ndarray | None] = [None] * len(params)

    def step(self, x: np.ndarray, y: np.ndarray, lr: float = 0.01, mom: float = 0.9) -> float:
        wide, r16, acc16 = fastcast.f16_to_wide, fastcast.f64_to_f16, fastcast.f64_to_f32_to_f16
        w1, b1, w2, b2, w3, b3 = (wide(a) for a in self.p)
        x64 = wide(x)
        h1 = acc16(x64 @ w1.T + b1)  # each linear: bias in the float64 accumulator
        a1 = _relu16(h1)
        a1w = wide(a1)
        h2 = acc16(a1w @ w2.T + b2)
        a2 = _relu16(h2)
        a2w = wide(a2)
        loss, logp = _cross_entropy16(wide(acc16(a2w @ w3.T + b3)), y)
        dz = wide(r16(_cross_entropy16_grad(logp, y)))
        grads = [None] * 6
        grads[4], grads[5] = acc16(dz.T @ a2w), r16(dz.sum(axis=0))
        dh2 = wide(_masked16(acc16(dz @ w3), h2))
        grads[2], grads[3] = acc16(dh2.T @ a1w), r16(dh2.sum(axis=0))
        dh1 = wide(_masked16(acc16(dh2 @ w2), h1))
        grads[0], grads[1] = acc16(dh1.T @ x64), r16(dh1.sum(axis=0))
        _sgd_master(self, grads, lr, mom)
        return float(loss)


def _sgd_master(floor, grads: list, lr: float, mom: float) -> None:
    """SGD with momentum on the fp32 masters, as fpsim.optim computes it, in place where
    fpsim's SGD is (its momentum buffer and the update's step array): buf = mom * buf + g
    (1 - dampening 0 is g exactly), master -= lr * buf, the fp16 copy rounded from it."""
    for i, g16 in enumerate(grads):
        g = fastcast.f16_to_wide(g16, np.float32)
        buf = floor.buf[i]
        if buf is None:
            buf = floor.buf[i] = g.copy()
        else:
            np.multiply(buf, mom, out=buf)
            np.add(buf, g, out=buf)
        step = lr * buf
        floor.master[i] = np.subtract(floor.master[i], step, out=step)
        floor.p[i] = fastcast.f32_to_f16(floor.master[i])


def _relu16(h: np.ndarray) -> np.ndarray:
    """max(h, 0) on fp16 bit patterns (-0 and NaN aside, which fpsim's relu keeps as PyTorch:
    not met here)."""
    return F.masked_bits(h, h.view(np.int16) > 0)


def _masked16(g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """g where h > 0, else +0 (ReLU's backward) on bit patterns (NaN aside, where fpsim's
    relu passes g as PyTorch: not met here)."""
    return F.masked_bits(g, h.view(np.int16) > 0)


_TAP_OFFSETS = np.array([0, 1, 8, 9])  # a 2x2 window's taps in an 8x8 plane, row-major


class NumpyCNNHalf:
    """The CNN's fp16 + fp32-master step of fpsim written directly in NumPy, as
    :class:`NumpyMLPHalf` for the MLP: im2col conv as one float64 GEMM (bias in the
    accumulator) rounded to fp32 then fp16, ReLU and its backward on bit patterns, 2x2 max
    pooling by the first maximum of each window (its gradient scattered to that position),
    the linear layer, loss and SGD as the MLP's. The activations keep the model's NCHW layout.
    tests/test_bench_training_step.py checks it gives fpsim's parameters, bit for bit."""

    def __init__(self, params: list[np.ndarray]) -> None:
        self.p = [fastcast.f64_to_f16(np.asarray(a, np.float64)) for a in params]
        self.master = [a.astype(np.float32) for a in self.p]
        self.buf: list[np.ndarray | None] = [None] * len(params)
        self._origin = np.zeros(0, np.intp)

    def _origins(self, n: int) -> np.ndarray:
        """Flat position in an (n, 8, 8, 8) array of each 2x2 window's top-left tap, windows in
        (n, c, i, j) order (index arithmetic fixed by the shape: made once per batch size)."""
        if self._origin.size != n * 128:
            win = np.arange(n * 8 * 4)[:, None] * 16 + np.arange(4) * 2  # (n, c, i) rows, j
            self._origin = win.reshape(-1)
        return self._origin

    def _conv(self, x: np.ndarray, wc: np.ndarray, bc: np.ndarray):
        """conv2d 1 -> 8, 3x3, padding 1 of the fp16 input: the output (fp16, NCHW) and the
        im2col columns its weight gradient needs."""
        n = x.shape[0]
        xp = np.zeros((n, 1, 10, 10))  # zero padding 1 (np.pad's result, as fpsim's conv2d)
        xp[:, :, 1:9, 1:9] = fastcast.f16_to_wide(x)
        s0, s1, s2, s3 = xp.strides  # the 3x3 windows (n, 1, 8, 8, 3, 3) as a strided view
        win = np.lib.stride_tricks.as_strided(xp, (n, 1, 8, 8, 3, 3), (s0, s1, s2, s3, s2, s3),
                                              writeable=False)
        cols = np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5).reshape(n * 64, 9))
        # (1, M, 9) @ (1, 9, 8): NumPy's batched loop beats a BLAS call on this skinny
        # product (fpsim's conv2d does the same); the bias added in place
        acc = (cols[None] @ wc.reshape(1, 8, 9).transpose(0, 2, 1))[0]
        acc += bc
        conv = fastcast.f64_to_f32_to_f16(acc)  # rows (n, h, w), channels last
        return np.ascontiguousarray(conv.reshape(n, 8, 8, 8).transpose(0, 3, 1, 2)), cols

    def _pool_positions(self, act: np.ndarray) -> np.ndarray:
        """2x2 max pooling by fpsim's kernel: the first maximum of each window of the widened
        values (compared tap by tap over strided views: no copy of the windows); each winner's
        flat position in act, its tap's offset (dy, dx) = divmod(arg, 2) in the 8x8 plane from
        a table plus its window's origin (fpsim's max_pool2d does the same)."""
        wide = fastcast.f16_to_wide(act)
        arg = _conv.first_max(_conv.window_view(wide, 2, 2, 2, 2, 1, 1, 4, 4), 2, 2)[0]
        pos = _TAP_OFFSETS.take(arg.reshape(-1))
        pos += self._origins(act.shape[0])
        return pos

    def step(self, x: np.ndarray, y: np.ndarray, lr: float = 0.01, mom: float = 0.9) -> float:
        wide, r16, acc16 = fastcast.f16_to_wide, fastcast.f64_to_f16, fastcast.f64_to_f32_to_f16
        wc, bc, w, b = (wide(a) for a in self.p)
        n = x.shape[0]
        conv, cols = self._conv(x, wc, bc)
        act = _relu16(conv)
        pos = self._pool_positions(act)  # the winners, gathered and (backward) scattered
        flat = wide(act.reshape(-1)[pos]).reshape(n, 128)
        z = wide(acc16(flat @ w.T + b))
        loss, logp = _cross_entropy16(z, y)
        dz = wide(r16(_cross_entropy16_grad(logp, y)))
        grads: list = [None] * 4
        grads[2], grads[3] = acc16(dz.T @ flat), r16(dz.sum(axis=0))
        dflat = acc16(dz @ w)  # fp16, scattered to the winning taps
        dact = np.zeros(n * 512, np.float16)
        dact[pos] = dflat.reshape(-1)
        dact = dact.reshape(n, 8, 8, 8)
        g2 = wide(_masked16(dact, conv)).transpose(0, 2, 3, 1).reshape(n * 64, 8)
        grads[0] = acc16(g2.T @ cols).reshape(8, 1, 3, 3)
        grads[1] = r16(g2.sum(axis=0))
        _sgd_master(self, grads, lr, mom)
        return float(loss)


class NumpyCNNHalfGraph(NumpyCNNHalf):
    """The floor's CNN step with a graph: each op's forward is the floor's code, recorded as a
    node of fpsim's autograd graph whose closure is the floor's backward code for that op;
    ``backward()`` of fpsim's engine runs them and rounds the gradients (the floor's r16 of
    the biases' and logits' gradients), the parameters are leaf tensors, and the update is the
    floor's. What it adds to the floor is the cost of a graph alone: Tensor objects, closures,
    the engine's traversal, without fpsim's ops (their argument handling, formats, models).
    tests/test_bench_training_step.py checks it gives the floor's parameters, bit for bit."""

    def __init__(self, params: list[np.ndarray]) -> None:
        super().__init__(params)
        self.leaves = [Tensor(a, FP16, requires_grad=True) for a in self.p]

    def record(self, x: np.ndarray, y: np.ndarray) -> tuple[float, list[Tensor]]:
        """The forward pass recorded: the loss and the graph's nodes, the loss node first."""
        wide, acc16 = fastcast.f16_to_wide, fastcast.f64_to_f32_to_f16
        for t, a in zip(self.leaves, self.p, strict=True):
            t.set_data_(a)
            t.grad = None
        tc, tbc, tw, tb = self.leaves
        wc, bc, w, b = (wide(a) for a in self.p)
        n = x.shape[0]
        conv, cols = self._conv(x, wc, bc)

        def conv_back(g):
            g2 = wide(g).transpose(0, 2, 3, 1).reshape(n * 64, 8)
            return acc16(g2.T @ cols).reshape(8, 1, 3, 3), g2.sum(axis=0)

        t_conv = make_result(conv, FP16, (tc, tbc), conv_back, "conv2d")
        act = _relu16(conv)
        t_act = make_result(act, FP16, (t_conv,), lambda g: (_masked16(g, conv),), "relu")
        pos = self._pool_positions(act)

        def pool_back(g):
            dact = np.zeros(n * 512, np.float16)
            dact[pos] = g.reshape(-1)
            return (dact.reshape(n, 8, 8, 8),)

        t_pool = make_result(act.reshape(-1)[pos].reshape(n, 128), FP16, (t_act,), pool_back,
                             "max_pool2d")
        flat = wide(t_pool.data)

        def linear_back(g):
            dz = wide(g)
            return acc16(dz @ w), acc16(dz.T @ flat), dz.sum(axis=0)

        t_z = make_result(acc16(flat @ w.T + b), FP16, (t_pool, tw, tb), linear_back, "linear")
        loss, logp = _cross_entropy16(wide(t_z.data), y)
        top = make_result(loss, FP16, (t_z,), lambda _g: (_cross_entropy16_grad(logp, y),),
                          "cross_entropy")
        return float(loss), [top, t_z, t_pool, t_act, t_conv]

    def step(self, x: np.ndarray, y: np.ndarray, lr: float = 0.01, mom: float = 0.9) -> float:
        loss, nodes = self.record(x, y)
        nodes[0].backward()
        _sgd_master(self, [t.grad for t in self.leaves], lr, mom)
        return loss


class NumpyCNNHalfByHand(NumpyCNNHalfGraph):
    """:class:`NumpyCNNHalfGraph`'s recorded graph, its closures called by hand in the chain's
    order (each gradient rounded to fp16 where the engine rounds it) instead of by the engine:
    against the graph, what the engine's traversal costs; against the floor, what recording
    (Tensor objects, closures) costs. tests/test_bench_training_step.py checks it gives the
    floor's parameters, bit for bit."""

    def step(self, x: np.ndarray, y: np.ndarray, lr: float = 0.01, mom: float = 0.9) -> float:
        r16 = fastcast.f64_to_f16
        loss, (top, t_z, t_pool, t_act, t_conv) = self.record(x, y)
        (dz,) = top._backward(np.ones((), np.float16))
        dflat, gw, gb = t_z._backward(r16(dz))
        (dact,) = t_pool._backward(dflat)
        (dconv,) = t_act._backward(dact)
        gwc, gbc = t_conv._backward(dconv)
        _sgd_master(self, [gwc, r16(gbc), gw, r16(gb)], lr, mom)
        return loss


def _cross_entropy16(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean cross-entropy of float64 logits ``z`` (values of fp16) as fpsim's one-node
    cross_entropy computes it: (loss, log_softmax), both rounded to fp16."""
    r16, n = fastcast.f64_to_f16, z.shape[0]
    z = z - z.max(axis=1, keepdims=True)
    logp = r16(z - np.log(np.exp(z).sum(axis=1, keepdims=True)))
    return r16(np.asarray(-fastcast.f16_to_wide(logp)[np.arange(n), y].sum() / n)), logp


def _cross_entropy16_grad(logp: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Its gradient with respect to the logits, in float64 before the engine's rounding to
    fp16: nll_loss's gradient (rounded to fp16, as the engine stores it), then log_softmax's."""
    n, c = logp.shape
    gl = np.zeros((n, c))
    gl[np.arange(n), y] = -1.0 / n
    gl = fastcast.f16_to_wide(fastcast.f64_to_f16(gl))
    return gl - np.exp(fastcast.f16_to_wide(logp)) * gl.sum(axis=1, keepdims=True)


class NumpyCNN:
    """conv 1->8 3x3 pad 1, ReLU, max pool 2, linear 128->10, float32, SGD momentum."""

    def __init__(self, params: list[np.ndarray], dtype=np.float32) -> None:
        self.p = [a.astype(dtype) for a in params]  # Wc, bc, W, b
        self.buf = [np.zeros_like(a) for a in self.p]

    def step(self, x: np.ndarray, y: np.ndarray, lr: float = 0.01, mom: float = 0.9) -> float:
        wc, bc, w, b = self.p
        n = x.shape[0]
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * 64, 9)
        conv = (cols @ wc.reshape(8, 9).T + bc).reshape(n, 8, 8, 8).transpose(0, 3, 1, 2)
        act = np.maximum(conv, 0)
        blocks = act.reshape(n, 8, 4, 2, 4, 2)
        pooled = blocks.max(axis=(3, 5))
        flat = pooled.reshape(n, 128)
        z = flat @ w.T + b
        zmax = z.max(axis=1, keepdims=True)
        e = np.exp(z - zmax)
        s = e.sum(axis=1, keepdims=True)
        loss = -(z - zmax - np.log(s))[np.arange(n), y].mean()
        dz = e / s
        dz[np.arange(n), y] -= 1
        dz /= n
        gw = dz.T @ flat
        gb = dz.sum(0)
        dpool = (dz @ w).reshape(n, 8, 4, 1, 4, 1)
        mask = blocks == pooled.reshape(n, 8, 4, 1, 4, 1)
        dact = (mask * dpool).reshape(n, 8, 8, 8)
        dconv = dact * (conv > 0)
        g2 = dconv.transpose(0, 2, 3, 1).reshape(-1, 8)
        gwc = (g2.T @ cols).reshape(8, 1, 3, 3)
        gbc = g2.sum(0)
        for i, g in enumerate((gwc, gbc, gw, gb)):
            self.buf[i] = mom * self.buf[i] + g
            self.p[i] -= lr * self.buf[i]
        return float(loss)


# ------------------------------------------------------------------------- fpsim models
def mlp(seed: int) -> nn.Module:
    """fpsim.training.MLP 64-256-256-10, layer i from seed + i, keeping no activation grads."""
    return MLP((64, 256, 256, 10), layer_seeds=(seed, seed + 1, seed + 2), retain_grads=False)


def cnn(seed: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, rng=seed), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(128, 10, rng=seed + 1))


def fpsim_stepper(model: nn.Module, fmt, master: bool, accumulation: str = "fp32"):
    model.to(fmt)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9, master_weights=master)

    def step(x: Tensor, y: np.ndarray) -> float:
        with matmul_accumulation(accumulation):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return loss.item()

    return step


def bench(variants: dict, steps: int, repeat: int) -> dict:
    """Best over ``repeat`` rounds of the mean time of ``steps`` calls (seconds) per variant;
    the variants take turns within each round, so a change of machine load hits them alike."""
    for fn, args in variants.values():
        fn(*args)  # warm up
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeat):
        for label, (fn, args) in variants.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                fn(*args)
            best[label] = min(best[label], (time.perf_counter() - t0) / steps)
    return best


def cpu_pairs(floor: tuple, engine: tuple, pairs: int) -> tuple[float, float, np.ndarray]:
    """Per-thread CPU time of the floor and of fpsim over ``pairs`` rounds of two floor steps
    and two fpsim steps, the order swapped every round (what runs first pays for a cold
    cache): the best time per step of each (seconds), and each round's ratio fpsim / floor.
    CPU time leaves out the time other processes take the core from this one; the ratios of
    neighbouring steps share the machine's state, so their median is the steadiest measure of
    the engine's overhead on a shared machine (the two bests can come from different moments)."""
    (ffn, fargs), (efn, eargs) = floor, engine
    ffn(*fargs), efn(*eargs)  # warm up
    best_f = best_e = float("inf")
    ratios = np.empty(pairs)
    clock = time.thread_time
    for i in range(pairs):
        first, second = (ffn, fargs), (efn, eargs)
        if i % 2:
            first, second = second, first
        t0 = clock()
        first[0](*first[1])
        first[0](*first[1])
        t1 = clock()
        second[0](*second[1])
        second[0](*second[1])
        t2 = clock()
        tf, te = (t1 - t0, t2 - t1) if i % 2 == 0 else (t2 - t1, t1 - t0)
        best_f, best_e = min(best_f, tf / 2), min(best_e, te / 2)
        ratios[i] = te / tf
    return best_f, best_e, ratios


def paired(floor: tuple, variant: tuple, label: str, pairs: int) -> str:
    """:func:`cpu_pairs` of the floor and ``variant``, as printed: both bests, the best's
    ratio, the median of the pairs' ratios and its quartiles."""
    tf, tv, ratios = cpu_pairs(floor, variant, pairs)
    q1, med, q3 = np.percentile(ratios, (25, 50, 75)) - 1
    return (f"floor {tf * 1e3:.3f} ms, {label} {tv * 1e3:.3f} ms, best {tv / tf - 1:+.1%}, "
            f"median {med:+.1%} (quartiles {q1:+.1%} to {q3:+.1%})")


def breakdown(step, args: tuple, steps: int) -> dict[str, float]:
    """Seconds per step spent in the GEMMs (the accumulation model), the fp16 rounding kernels
    and the fp16 widening table, measured by wrapping those functions for ``steps`` calls."""
    from fpsim.autograd import accumulate, context

    spent = dict.fromkeys(("GEMM (float64 BLAS)", "round to fp16", "widen fp16"), 0.0)
    patches = [(accumulate, "gemm_acc", "GEMM (float64 BLAS)"),
               (accumulate, "f64_to_f32_to_f16", "round to fp16"),
               (context, "f32_to_f16", "round to fp16"), (context, "f64_to_f16", "round to fp16"),
               (context, "f16_to_wide", "widen fp16")]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]

    def timed(fn, label):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.perf_counter() - t0
        return wrapper

    for mod, name, label in patches:
        setattr(mod, name, timed(getattr(mod, name), label))
    try:
        t0 = time.perf_counter()
        for _ in range(steps):
            step(*args)
        total = time.perf_counter() - t0
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
    out = {k: v / steps for k, v in spent.items()}
    out["other (graph, ops, optimizer)"] = total / steps - sum(out.values())
    return out


class _Record:
    __slots__ = ("a", "b", "c")


def _python_work(k: int) -> int:
    """k rounds of an engine's kind of bookkeeping: a small object, a tuple and a dict made,
    read and dropped."""
    total = 0
    for i in range(k):
        r = _Record()
        r.a, r.b, r.c = i, (i, r), {"i": i}
        total += len(r.c)
    return total


_KERNELS = ("f16_to_wide", "f64_to_f16", "f32_to_f16", "f64_to_f32_to_f16")


def glue_cost(k: int, pairs: int) -> tuple[float, float, float, int]:
    """Per-step CPU seconds of the MLP floor with ``_python_work(0)`` and with
    ``_python_work(k)`` before each fp16 kernel call (the same wrappers: their difference is
    the work's cost in the step), of that Python work alone (best of ``pairs`` interleaved
    rounds), and the number of kernel calls per step."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, BATCH)
    x = fastcast.f64_to_f16(rng.standard_normal((BATCH, 64)))
    params = [p.numpy(np.float64) for p in mlp(0).parameters()]
    originals = {name: getattr(fastcast, name) for name in _KERNELS}
    calls = [0]

    def stepper(rounds: int):
        floor = NumpyMLPHalf(params)

        def with_work(fn):
            def kernel(*a, **kw):
                calls[0] += 1
                _python_work(rounds)
                return fn(*a, **kw)
            return kernel

        patched = {name: with_work(fn) for name, fn in originals.items()}

        def step(*a):
            for name, fn in patched.items():
                setattr(fastcast, name, fn)
            try:
                return floor.step(*a)
            finally:
                for name, fn in originals.items():
                    setattr(fastcast, name, fn)
        return step

    bare, worked = stepper(0), stepper(k)
    bare(x, y)
    n_calls, calls[0] = calls[0], 0
    t0, tk, _ = cpu_pairs((bare, (x, y)), (worked, (x, y)), pairs)
    clock, alone = time.thread_time, float("inf")
    for _ in range(pairs):
        start = clock()
        for _ in range(n_calls):
            _python_work(k)
        alone = min(alone, clock() - start)
    return t0, tk, alone, n_calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--engine", action="store_true",
                    help="time only numpy fp32, the floor and fpsim fp16+master (the engine "
                         "overhead, with less time spent on the other rows)")
    ap.add_argument("--pairs", type=int, default=0,
                    help="also time the floor and fpsim fp16+master in this many interleaved "
                         "pairs of steps by per-thread CPU time (the best of each and the "
                         "median of the pairs' ratios)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the GEMMs, fp16 roundings and widenings of the MLP step")
    ap.add_argument("--glue", type=int, default=0, metavar="K",
                    help="also time the MLP floor with K rounds of plain Python work before "
                         "each of its fp16 kernel calls (what Python between kernels costs)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, BATCH)
    cases = {
        "MLP 64-256-256-10": (mlp, NumpyMLP, rng.standard_normal((BATCH, 64)), NumpyMLPHalf),
        "CNN 1x8x8 conv8-pool-fc": (cnn, NumpyCNN, rng.standard_normal((BATCH, 1, 8, 8)),
                                    NumpyCNNHalf),
    }
    print(f"one training step, batch {BATCH}, SGD momentum 0.9 "
          f"(best of {args.repeat} x {args.steps} steps); speed vs numpy fp32 = numpy-fp32 "
          "time / variant time (1.0 = as fast, < 1 slower); engine overhead = fpsim "
          "fp16+master time / numpy fp16+master (floor) time - 1 (target < 10%)")
    print(f"{'model':26s} {'variant':26s} {'ms/step':>9s} {'speed vs numpy fp32':>20s} "
          f"{'engine overhead':>16s}")
    summary, overheads, cpu, graph, by_hand = [], [], [], [], []
    for name, (build, numpy_cls, x, half_cls) in cases.items():
        params = [p.numpy(np.float64) for p in build(0).parameters()]
        variants = {"numpy fp32": (numpy_cls(params).step, (x.astype(np.float32), y)),
                    "numpy fp64": (numpy_cls(params, np.float64).step, (x, y)),
                    "numpy fp16+master": (half_cls(params).step, (fastcast.f64_to_f16(x), y))}
        for label, fmt, master, acc in (("fpsim fp32", FP32, False, "fp32"),
                                        ("fpsim fp16+master", FP16, True, "fp32"),
                                        ("fpsim fp16+master sgemm", FP16, True, "sgemm"),
                                        ("fpsim bf16+master", BF16, True, "fp32")):
            variants[label] = (fpsim_stepper(build(0), fmt, master, acc), (Tensor(x, fmt), y))
        if args.engine:  # the floor and the engine only: more rounds in the same time
            variants = {k: variants[k] for k in ("numpy fp32", "numpy fp16+master",
                                                 "fpsim fp16+master")}
        times = bench(variants, args.steps, args.repeat)
        over = times["fpsim fp16+master"] / times["numpy fp16+master"] - 1
        overheads.append(f"{name}: {over:+.1%}")
        if args.pairs > 0:
            floor = variants["numpy fp16+master"]
            cpu.append(f"{name}: " + paired(floor, variants["fpsim fp16+master"], "fpsim",
                                            args.pairs))
            if half_cls is NumpyCNNHalf:  # the floor's ops as a graph: what a graph costs
                x16 = fastcast.f64_to_f16(x)
                graph.append(f"{name}: " + paired(floor, (NumpyCNNHalfGraph(params).step,
                                                          (x16, y)), "floor as a graph",
                                                  args.pairs))
                by_hand.append(f"{name}: " + paired(floor, (NumpyCNNHalfByHand(params).step,
                                                            (x16, y)), "the graph by hand",
                                                    args.pairs))
        for label, t in times.items():
            col = f"{over:+16.1%}" if label == "fpsim fp16+master" else f"{'':16s}"
            print(f"{name:26s} {label:26s} {t * 1e3:9.3f} {times['numpy fp32'] / t:20.2f} {col}")
        base = times["numpy fp32"]
        fp64 = f"numpy fp64 {base / times['numpy fp64']:.2f}, " if "numpy fp64" in times else ""
        summary.append(f"{name}: {base / times['fpsim fp16+master']:.2f} "
                       f"({fp64}numpy fp16+master {base / times['numpy fp16+master']:.2f})")
    print("fpsim fp16+master speed vs numpy fp32 (issue 5's target >= 0.33, blocked: see the "
          "floor's own figure): " + ", ".join(summary))
    print("engine overhead of fpsim fp16+master over its floor (target < 10%): "
          + ", ".join(overheads))
    if cpu:
        print(f"engine overhead by per-thread CPU time ({args.pairs} pairs of steps: best "
              "of each, and the median of the pairs' ratios): " + "; ".join(cpu))
    if graph:
        print(f"cost of a graph alone (the floor's kernels as graph ops run by fpsim's engine: "
              f"NumpyCNNHalfGraph), by per-thread CPU time ({args.pairs} pairs of steps): "
              + "; ".join(graph))
        print(f"cost of recording alone (the same graph, its closures called by hand, without "
              f"the engine: NumpyCNNHalfByHand), by per-thread CPU time ({args.pairs} pairs of "
              "steps): " + "; ".join(by_hand))
    if args.glue > 0:
        t0, tk, alone, n_calls = glue_cost(args.glue, max(args.pairs, 100))
        print(f"Python work between kernels (MLP floor, {args.glue} rounds of it before each "
              f"of its {n_calls} fp16 kernel calls, per-thread CPU time): step {t0 * 1e3:.3f} "
              f"ms without it, {tk * 1e3:.3f} ms with it; the work alone {alone * 1e3:.3f} ms: "
              f"the step grew by {(tk - t0) / alone:.1f}x the work's own time")
    if args.breakdown:
        build, _, x, _ = cases["MLP 64-256-256-10"]
        for label, fmt, master in (("fpsim fp32", FP32, False),
                                   ("fpsim fp16+master", FP16, True)):
            step = fpsim_stepper(build(0), fmt, master)
            step(Tensor(x, fmt), y)
            parts = breakdown(step, (Tensor(x, fmt), y), args.steps * 3)
            print(f"where a step of the MLP goes, {label}:")
            for part, t in parts.items():
                print(f"  {part:32s} {t * 1e3:7.3f} ms")
    return 0


if __name__ == "__main__":
    from timing import pinned_blas, steady_malloc

    steady = steady_malloc()  # page faults must not decide the comparison (timing.py says why)
    print(f"allocator kept steady (glibc mallopt): {'yes' if steady else 'no (not glibc)'}")
    with pinned_blas():
        raise SystemExit(main())
