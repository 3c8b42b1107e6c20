"""Threads (issue 32 item 1): every context manager, every piece of ambient state and every
cached fast path gives, in 8 threads running at once, exactly what it gives in one thread.

Each case is a function ``case(i, sync)`` run by thread ``i`` of 8; ``sync()`` is a
:class:`threading.Barrier` wait when the 8 run at once (so that they are inside their blocks,
or between their seed and their draws, at the same time) and nothing when they run one after
the other, each alone in a fresh thread: that run gives the single-thread results the
concurrent run must repeat exactly. The threads use different settings (modes, formats, seeds),
so that one thread seeing another's state changes its results. Where NumPy / ml_dtypes give an
independent reference (the fp16 casts), the results are also compared with it. Ambient state is
per thread, and a new thread starts from the defaults (CONTRIBUTING.md, "Ambient state").
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import fpsim
import fpsim.autograd.functional as F
from fpsim import state
from fpsim.amp import autocast
from fpsim.amp.autocast_policy import cache_size, get_autocast_dtype, set_autocast_policy
from fpsim.autograd import (
    Tensor,
    enable_grad,
    get_accumulation,
    get_generator,
    get_rounding,
    is_grad_enabled,
    manual_seed,
    matmul_accumulation,
    no_grad,
    rounding_context,
    set_grad_enabled,
)
from fpsim.autograd.checkpoint import checkpoint
from fpsim.autograd.context import get_autocast_hook
from fpsim.autograd.memory_meter import MemoryMeter
from fpsim.flags import flag_context, flags_active, suspended
from fpsim.rounding.fp16 import f16_to_wide, f32_to_f16, f64_to_f16, f64_to_f32_to_f16

N = 8


def _run(case: Callable, together: bool) -> list:
    """``case(i, sync)`` in N threads: at once (a barrier for sync), or one after the other."""
    results: list = [None] * N
    errors: list = []
    barrier = threading.Barrier(N, timeout=60) if together else None
    sync = barrier.wait if barrier is not None else (lambda: None)

    def work(i: int) -> None:
        try:
            results[i] = case(i, sync)
        except BaseException as e:  # noqa: BLE001 - reported below, with the thread's number
            errors.append((i, e))
            if barrier is not None:
                barrier.abort()  # the others stop waiting

    threads = [threading.Thread(target=work, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
        if not together:
            t.join()
    for t in threads:
        t.join(120)
    real = [(i, e) for i, e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        i, e = (real or errors)[0]
        raise AssertionError(f"thread {i} failed: {e!r}") from e
    return results


def _key(v):
    """Results made comparable bit for bit (arrays by dtype, shape and bytes)."""
    if isinstance(v, Tensor):
        v = v.data
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        return ("array", a.dtype.str, a.shape, a.tobytes())
    if isinstance(v, dict):
        return tuple((k, _key(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(_key(x) for x in v)
    return v


@pytest.fixture(autouse=True)
def main_thread_untouched():
    """The threads leave the main thread's ambient state as it was."""
    before = state.snapshot().without("rng_states")
    yield
    assert state.snapshot().without("rng_states") == before


def check(case: Callable) -> list:
    """The single-thread results, which 8 threads at once must repeat exactly."""
    alone = [_key(r) for r in _run(case, together=False)]
    assert len(set(alone)) > 1 or N == 1, "the threads' settings should give different results"
    together = [_key(r) for r in _run(case, together=True)]
    differ = [i for i in range(N) if together[i] != alone[i]]
    assert not differ, f"threads {differ} differ from their single-thread results"
    return alone


# ------------------------------------------------------------------ cached fast paths
def test_fp16_kernels_match_numpy_in_threads():
    """The fp16 casts' work arrays are per thread (issue 32: four threads calling f64_to_f16
    100 times gave 34 of 400 results unlike NumPy's cast with shared ones)."""

    def case(i, sync):
        rng = np.random.default_rng(i)
        n = 20_000 + 1000 * i  # above the kernels' 512-element threshold, below 2**20
        x64 = rng.standard_normal(n) * 2.0 ** rng.integers(-30, 18, n)  # subnormal to overflow
        with np.errstate(over="ignore"):
            x32 = x64.astype(np.float32)
            h = x64.astype(np.float16)
            want = (x64.astype(np.float16), x32.astype(np.float16),
                    x32.astype(np.float16), h.astype(np.float64), h.astype(np.float32))
        sync()
        bad = 0
        for _ in range(25):
            got = (f64_to_f16(x64), f32_to_f16(x32), f64_to_f32_to_f16(x64), f16_to_wide(h),
                   f16_to_wide(h, np.float32))
            bad += sum(g.dtype != w.dtype or g.tobytes() != w.tobytes()
                       for g, w in zip(got, want, strict=True))
        return bad, f64_to_f16(x64)

    results = check(case)
    assert all(r[0] == 0 for r in results)  # and NumPy's own casts agree


def _mlp_step(i: int, sync, fmt: str = "fp16", steps: int = 3) -> list:
    """A few fp16 (or bf16) training steps with fp32 master weights: the linear and
    cross-entropy fast paths, SGD's loop, fpsim.rounding.fp16's casts and the cached plans."""
    rng = np.random.default_rng(100 + i)
    x = Tensor(rng.standard_normal((64, 32)), fmt)
    y = rng.integers(0, 10, 64)
    net = fpsim.nn.Sequential(fpsim.nn.Linear(32, 48, rng=i), fpsim.nn.ReLU(),
                              fpsim.nn.Linear(48, 10, rng=i + 1)).to(fmt)
    opt = fpsim.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, master_weights=True)
    sync()
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        out.append(loss.data)
    return out + [p.data for p in net.parameters()]


def test_training_steps_in_threads():
    check(_mlp_step)


def test_conv_and_pool_plans_in_threads():
    """conv2d / max_pool2d cache their plans (index tables, shared and read only)."""

    def case(i, sync):
        rng = np.random.default_rng(i)
        x = Tensor(rng.standard_normal((4, 2, 9, 9)), "fp16", requires_grad=True)
        w = Tensor(rng.standard_normal((3, 2, 3, 3)), "fp16", requires_grad=True)
        sync()
        y = F.max_pool2d(F.conv2d(x, w, padding=1, stride=(1, 2)), 2, padding=1)
        y.sum().backward()
        return y, x.grad, w.grad

    check(case)


def test_caches_of_rounding_mx_and_sums_in_threads():
    """Parsed policies, MX bounds, format promotion: caches shared by threads (their values
    immutable); each thread's results are its own."""
    fmts = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32", "fp6_e3m2", "fp4_e2m1", "fp16"]
    modes = ["nearest_even", "up", "down", "toward_zero", "nearest_away", "nearest_even",
             "up", "odd"]

    def case(i, sync):
        rng = np.random.default_rng(i)
        x = rng.standard_normal(3000) * 2.0 ** rng.integers(-20, 10, 3000)
        sync()
        out = []
        for _ in range(5):
            out.append(fpsim.round(x, fmts[i], modes[i]))
            out.append(fpsim.sum(x.reshape(30, 100), fmts[i], axis=1, rounding=modes[i]))
            out.append(fpsim.mx.quantize(x[:2048], ["mxfp8_e4m3", "mxfp4", "nvfp4",
                                                    "mxfp6_e3m2"][i % 4]).dequantize())
            out.append(fpsim.autograd.promote_formats(
                fpsim.get_format(fmts[i]), fpsim.get_format(fmts[-1 - i])).name)
        return out

    check(case)


# --------------------------------------------------------------------- grad mode
_SHARED_NO_GRAD = no_grad()  # one object entered by several threads at once


def test_grad_mode_contexts_in_threads():
    def case(i, sync):
        w = Tensor([1.0], requires_grad=True)

        def observe():
            return is_grad_enabled(), (w * 2).requires_grad

        before = observe()
        kind = i % 4
        if kind == 0:
            ctx = no_grad()
        elif kind == 1:
            ctx = _SHARED_NO_GRAD
        elif kind == 2:
            ctx = set_grad_enabled(False)
        else:
            ctx = None
        if ctx is None:  # enable_grad inside no_grad: on in the inner block
            with no_grad(), enable_grad():
                sync()
                inside = observe()
                sync()
        else:
            with ctx:
                sync()
                inside = observe()
                sync()
        sync()
        return before, inside, observe()

    results = check(case)
    assert results[0] == ((True, True), (False, False), (True, True))
    assert results[3] == ((True, True), (True, True), (True, True))


def test_decorated_no_grad_in_threads():
    @no_grad()
    def doubled(w, sync):
        sync()
        out = (w * 2).requires_grad, is_grad_enabled()
        sync()
        return out

    def case(i, sync):
        w = Tensor([1.0], requires_grad=True)
        if i % 2:
            return doubled(w, sync), is_grad_enabled()
        sync()
        out = (w * 2).requires_grad, is_grad_enabled()
        sync()
        return out, is_grad_enabled()

    check(case)


def test_a_new_thread_starts_from_the_defaults():
    seen = []

    def probe():
        seen.append((is_grad_enabled(), get_rounding(), get_accumulation().kind,
                     get_autocast_hook(), flags_active(), state.local.observers))

    with no_grad(), rounding_context("up"), matmul_accumulation("exact"), \
            autocast("bf16"), flag_context(), MemoryMeter():
        t = threading.Thread(target=probe)
        t.start()
        t.join()
    assert seen == [(True, fpsim.Rounding.NEAREST_EVEN, "fp32", None, False, [])]


# ------------------------------------------------------------- autograd settings
_MODES = ["up", "down", "toward_zero", "nearest_even", "stochastic", "nearest_away", "odd",
          "stochastic"]


def test_rounding_context_in_threads():
    """fpsim.autograd.rounding_context (issue 32: two threads left the process in the other
    thread's mode, later fp16 ops rounding up)."""

    def case(i, sync):
        rng = np.random.default_rng(i)
        a = Tensor(rng.standard_normal(600), "fp16", requires_grad=True)
        b = Tensor(rng.standard_normal(600), "bf16")
        with rounding_context(_MODES[i], rng=i, overflow=["inf", "saturate"][i % 2]):
            sync()
            y = a * 1.1 + b * 3.3  # mixed formats: promoted, rounded in the thread's mode
            (y * y).sum().backward()
            inside = get_rounding(), y, a.grad
            sync()
        sync()
        after = get_rounding(), a * 1.1
        return inside, after

    results = check(case)
    assert all(r[1][0] is fpsim.Rounding.NEAREST_EVEN for r in results)


_SHARED_ACCUMULATION = ("sequential", "bf16")


def test_matmul_accumulation_in_threads():
    """matmul_accumulation's contexts are cached and shared: threads asking for one model
    enter one object at once."""
    models = [_SHARED_ACCUMULATION, "exact", _SHARED_ACCUMULATION, ("pairwise", "fp16"),
              _SHARED_ACCUMULATION, "sgemm", ("sequential", "fp16"), "fp32"]

    def case(i, sync):
        rng = np.random.default_rng(i)
        a = Tensor(rng.standard_normal((16, 40)), "bf16")
        b = Tensor(rng.standard_normal((40, 8)), "bf16")
        with matmul_accumulation(models[i]):
            sync()
            inside = get_accumulation(), a @ b
            sync()
        sync()
        return inside, (get_accumulation(), a @ b)

    check(case)
    assert matmul_accumulation(_SHARED_ACCUMULATION) is matmul_accumulation(_SHARED_ACCUMULATION)


def test_shared_scoped_object_and_snapshots_in_threads():
    shared = state.scoped(grad_enabled=False)

    def case(i, sync):
        fpsim.seed(i)
        snap = state.snapshot()
        with shared:
            sync()
            inside = is_grad_enabled()
            with rounding_context(_MODES[i]):
                state.restore(snap)  # this thread's snapshot: grad on, nearest even
                sync()
                restored = is_grad_enabled(), get_rounding()
            sync()
        return inside, restored, is_grad_enabled(), fpsim.rounding.default_rng().random(3)

    check(case)


# ------------------------------------------------------------------------ seeds
def test_seeds_and_default_generators_in_threads():
    """fpsim.seed and manual_seed seed the calling thread's generators."""

    def case(i, sync):
        x = np.full(2000, 1 + 2.0**-9)
        if i % 2:
            manual_seed(i)
        else:
            fpsim.seed(i)
        sync()  # every thread has seeded before any draws
        a = fpsim.round(x, "bf16", "stochastic")
        sync()
        drop = F.dropout(Tensor(np.ones(500)), 0.5) if i % 2 else None
        with rounding_context("stochastic"):
            t = Tensor(np.full(700, 0.1)) * 0.3
        return a, drop, t, get_generator().random(2) if i % 2 else None

    check(case)


def test_checkpoint_in_threads():
    """Gradient checkpointing recomputes a segment under the forward's state, per thread."""

    def case(i, sync):
        manual_seed(i)
        net = fpsim.nn.Sequential(fpsim.nn.Linear(8, 8, rng=i), fpsim.nn.Dropout(0.3),
                                  fpsim.nn.ReLU(), fpsim.nn.Linear(8, 4, rng=i + 1))
        x = Tensor(np.random.default_rng(i).standard_normal((5, 8)), requires_grad=True)
        with rounding_context("stochastic", rng=10 + i), flag_context() as fc:
            sync()
            y = checkpoint(net, x)
            sync()
        with rounding_context(_MODES[i]):
            (y * y).sum().backward()
        return y, x.grad, [p.grad for p in net.parameters()], fc.flags, fc.counts

    check(case)


# ------------------------------------------------------------------- flags
def test_flag_context_and_suspended_in_threads():
    values = [1e5, 1e-9, 0.1, 3.0, np.inf, -1e6, 2.0**-25, 0.5]

    def case(i, sync):
        x = np.full(600, values[i])
        with flag_context() as outer:
            sync()
            fpsim.round(x, "fp16")
            with suspended():
                sync()
                hidden = flags_active()
                fpsim.round(x * 7, "fp8_e4m3")  # not recorded: suspended
                sync()
            with flag_context(trap=None) as inner:
                fpsim.round(x, "bf16")
            sync()
        return hidden, outer.flags, outer.counts, inner.flags, inner.counts, flags_active()

    check(case)


# -------------------------------------------------------------------- autocast
_SHARED_AUTOCAST = autocast("bf16")


def test_autocast_in_threads():
    def case(i, sync):
        rng = np.random.default_rng(i)
        x = Tensor(rng.standard_normal((4, 6)))
        w = Tensor(rng.standard_normal((6, 3)), requires_grad=True)
        if i % 3 == 0:
            set_autocast_policy("softmax", "lower")  # this thread's table only
        ctx = (_SHARED_AUTOCAST if i % 4 == 1 else
               autocast(["fp16", "bf16"][i % 2], enabled=i != 6))
        with ctx:
            sync()
            y = x @ w
            s = y.softmax(dim=1)
            inside = (get_autocast_dtype(), y.fmt.name, s.fmt.name, cache_size(), y)
            sync()
        fpsim.amp.autocast_policy.reset_autocast_policy()
        sync()
        return inside, get_autocast_hook(), (x @ w).fmt.name

    check(case)


# ---------------------------------------------------------------- memory meter
def test_memory_meters_in_threads():
    """A meter observes its own thread's ops (the engine's observers are per thread)."""

    def case(i, sync):
        with MemoryMeter() as m:
            sync()
            ops = _mlp_step(i, lambda: None, ["fp16", "bf16"][i % 2], steps=1 + i % 2)
            meters = sum(isinstance(o, MemoryMeter) for o in state.local.observers)
            sync()
        report = m.report()
        return meters, m.ops, report.max, ops

    results = check(case)
    assert all(r[0] == 1 for r in results)


# -------------------------------------------------------------------- figures
def test_figure_style_context_is_one_thread_at_a_time():
    """fpsim.viz's rc settings go through matplotlib's process-wide rcParams: a thread entering
    while another is inside would restore the other's settings on exit (the process kept
    fpsim's style). One thread at a time: afterwards rcParams are as before."""
    import matplotlib as mpl

    from fpsim.viz import style

    key = next(k for k, v in style.RC.items() if mpl.rcParams[k] != v)
    before = mpl.rcParams[key]
    inside, entered, go, first_out = (threading.Event() for _ in range(4))

    def first():
        with style.context():
            inside.set()
            go.wait(30)
        first_out.set()

    def second():
        inside.wait(30)
        with style.context():  # saves the first thread's settings as "the original" ...
            entered.set()
            first_out.wait(30)  # ... and restores them after the first thread left

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(30)
    entered.wait(0.3)  # without the lock, the second thread enters meanwhile
    go.set()
    for t in threads:
        t.join(30)
    assert mpl.rcParams[key] == before
