"""benchmarks/bench_training_step.py: its NumPy baselines do the same maths as fpsim (one SGD
step in float64 gives the same loss and parameters as fpsim in fp64), and the script runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fpsim.autograd import Tensor, matmul_accumulation
from fpsim.formats import FP16

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_training_step.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_training_step", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_numpy_baseline_is_the_same_step(bench, case):
    build, numpy_cls = {"mlp": (bench.mlp, bench.NumpyMLP), "cnn": (bench.cnn, bench.NumpyCNN)}[
        case]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((bench.BATCH, 64) if case == "mlp" else (bench.BATCH, 1, 8, 8))
    y = rng.integers(0, 10, bench.BATCH)
    model = build(0)
    ref = numpy_cls([p.numpy(np.float64) for p in model.parameters()], np.float64)
    with matmul_accumulation("exact"):
        step = bench.fpsim_stepper(model, "fp64", False, "exact")
        for _ in range(2):  # the second step uses the momentum buffer
            loss = step(Tensor(x, "fp64"), y)
            ref_loss = ref.step(x, y)
            assert loss == pytest.approx(ref_loss, rel=1e-12)
    for p, q in zip(model.parameters(), ref.p, strict=True):
        np.testing.assert_allclose(p.numpy(np.float64), q, rtol=1e-10, atol=1e-11)


def test_script_runs_with_breakdown(bench, capsys):
    assert bench.main(["--repeat", "1", "--steps", "1", "--breakdown"]) == 0
    out = capsys.readouterr().out
    assert "fp16+master speed vs numpy fp32" in out and "GEMM (float64 BLAS)" in out
    assert out.count("fpsim fp16+master sgemm") == 2
    assert out.count("numpy fp16+master  ") == 2  # the floor row of each model
    assert out.count("fpsim bf16+master") == 2
    assert "engine overhead of fpsim fp16+master over its floor" in out
    rows = [ln for ln in out.splitlines() if "fpsim fp16+master  " in ln]
    assert len(rows) == 2 and all(ln.rstrip().endswith("%") for ln in rows)


def test_script_engine_rows(bench, capsys):
    assert bench.main(["--repeat", "1", "--steps", "1", "--engine"]) == 0
    out = capsys.readouterr().out
    assert "numpy fp64" not in out and "sgemm" not in out
    assert out.count("numpy fp16+master  ") == 2
    assert "per-thread CPU" not in out
    assert bench.main(["--repeat", "1", "--steps", "1", "--engine", "--pairs", "2"]) == 0
    out_lines = capsys.readouterr().out.splitlines()
    line = [ln for ln in out_lines if ln.startswith("engine overhead by per-thread CPU")]
    assert len(line) == 1 and "2 pairs of steps" in line[0]
    for part in line[0].split(": ", 1)[1].split("; "):  # per model: best, median, quartiles
        assert part.count("%") == 4 and "best " in part and "median " in part
    graph = [ln for ln in out_lines if ln.startswith("cost of a graph alone")]
    assert len(graph) == 1 and "CNN" in graph[0] and "MLP" not in graph[0]
    assert graph[0].split("NumpyCNNHalfGraph), ", 1)[1].count("%") == 4
    by_hand = [ln for ln in out_lines if ln.startswith("cost of recording alone")]
    assert len(by_hand) == 1 and "CNN" in by_hand[0] and "MLP" not in by_hand[0]
    assert by_hand[0].split("NumpyCNNHalfByHand), ", 1)[1].count("%") == 4


def test_script_glue_line(bench, capsys):
    from fpsim.rounding import fp16 as fastcast

    kernels = {name: getattr(fastcast, name) for name in bench._KERNELS}
    assert bench.main(["--repeat", "1", "--steps", "1", "--engine", "--glue", "2",
                       "--pairs", "3"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if "between kernels" in ln]
    assert len(line) == 1 and "2 rounds" in line[0] and "x the work's own time" in line[0]
    assert all(getattr(fastcast, n) is f for n, f in kernels.items())  # wrappers removed
    # the wrappers count the floor's fp16 kernel calls: each call of an MLP step
    t0, tk, alone, n_calls = bench.glue_cost(1, 2)
    assert n_calls > 20 and min(t0, tk, alone) > 0


@pytest.mark.parametrize("variant", ["NumpyCNNHalfGraph", "NumpyCNNHalfByHand"])
def test_the_floor_as_a_graph_is_the_floor_bit_for_bit(bench, variant):
    """NumpyCNNHalfGraph (the floor's ops recorded in fpsim's graph, run backward by the
    engine) and NumpyCNNHalfByHand (the same graph's closures called by hand) give the floor's
    losses and parameters, bit for bit, over three steps: what the benchmark measures of them
    is the graph's cost, not other arithmetic."""
    from fpsim.rounding import fp16 as fastcast

    rng = np.random.default_rng(5)
    x = fastcast.f64_to_f16(rng.standard_normal((bench.BATCH, 1, 8, 8)))
    y = rng.integers(0, 10, bench.BATCH)
    params = [p.numpy(np.float64) for p in bench.cnn(4).parameters()]
    floor, graph = bench.NumpyCNNHalf(params), getattr(bench, variant)(params)
    losses = [(floor.step(x, y), graph.step(x, y)) for _ in range(3)]
    assert [a for a, _ in losses] == [b for _, b in losses]
    assert len({a for a, _ in losses}) > 1
    for p, q in zip(floor.p, graph.p, strict=True):
        np.testing.assert_array_equal(p.view(np.uint16), q.view(np.uint16))
    if variant == "NumpyCNNHalfGraph":  # the engine filled every gradient
        assert all(t.grad is not None for t in graph.leaves)


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_numpy_fp16_floor_is_fpsims_step_bit_for_bit(bench, case):
    """The hand-written fp16 + fp32-master NumPy step (the floor the benchmark compares the
    engine with) computes what fpsim computes: the same losses and fp16 parameters, bit for
    bit, over three steps (the later ones use the momentum buffers and the master weights)."""
    build, floor_cls, shape = {"mlp": (bench.mlp, bench.NumpyMLPHalf, (bench.BATCH, 64)),
                               "cnn": (bench.cnn, bench.NumpyCNNHalf, (bench.BATCH, 1, 8, 8))}[
        case]
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    y = rng.integers(0, 10, bench.BATCH)
    model = build(3)
    floor = floor_cls([p.numpy(np.float64) for p in model.parameters()])
    step = bench.fpsim_stepper(model, "fp16", True)
    xt = Tensor(x, "fp16")
    losses = [(step(xt, y), floor.step(xt.numpy(), y)) for _ in range(3)]
    assert [a for a, _ in losses] == [b for _, b in losses]
    assert len({a for a, _ in losses}) > 1  # the steps change the loss: a real check
    for p, q in zip(model.parameters(), floor.p, strict=True):
        assert q.dtype == np.float16
        np.testing.assert_array_equal(p.numpy().view(np.uint16), q.view(np.uint16))


# The engine fast paths the training step takes, against references computed another way.
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_relu_bit_patterns_all_values(fmt):
    """relu decides on bit patterns: every one of the 2**16 values of fp16 / bf16 gives +0 for
    x < 0 (-inf included) and x itself otherwise (the same pattern: -0 and NaNs of either sign
    too), and its gradient passes where x > 0 or x is NaN (PyTorch's rules); the reference
    compares float64 values."""
    import ml_dtypes

    import fpsim.autograd.functional as F

    dt = np.float16 if fmt == "fp16" else ml_dtypes.bfloat16
    data = np.arange(1 << 16, dtype=np.uint16).view(dt)
    x = Tensor(data, fmt, requires_grad=True)
    out = F.relu(x)
    with np.errstate(invalid="ignore"):  # NaN patterns cast with a warning
        v = data.astype(np.float64)
    want = np.where(v < 0, 0, np.arange(1 << 16)).astype(np.uint16)
    np.testing.assert_array_equal(out.numpy().view(np.uint16), want)
    out.backward(np.ones(1 << 16))
    passes = (v > 0) | np.isnan(v)
    np.testing.assert_array_equal(x.grad.astype(np.float64), passes.astype(np.float64))


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nll_loss_unweighted_path(fmt, reduction):
    """nll_loss without class weights: the loss is -sum(picked) (/ N), one rounding, and the
    gradient -g (/ N) at the targets, from float64 sums of the picked values (exact here:
    few terms of a narrow format); infinities and NaN in the picked values propagate."""
    import fpsim.autograd.functional as F
    from fpsim.autograd.context import round_to

    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((37, 6)) * 8, fmt, requires_grad=True)
    t = rng.integers(0, 6, 37)
    loss = F.nll_loss(x, t, reduction=reduction)
    picked = x.numpy(np.float64)[np.arange(37), t]
    total = -picked.sum()
    want = round_to(np.asarray(total / 37 if reduction == "mean" else total), x.fmt)
    assert loss.numpy().tobytes() == want.tobytes()
    loss.backward()
    gx = np.zeros((37, 6))
    gx[np.arange(37), t] = -1.0 / 37 if reduction == "mean" else -1.0
    np.testing.assert_array_equal(x.grad, round_to(gx, x.fmt))
    # the weighted path (another code path) agrees, and so do ignore_index and bad targets
    w = F.nll_loss(x, t, weight=Tensor(np.ones(6), fmt), reduction=reduction)
    assert w.numpy().tobytes() == loss.numpy().tobytes()
    bad = np.array(x.numpy())
    bad[0, t[0]] = np.inf
    assert np.isneginf(F.nll_loss(Tensor(bad, fmt), t, reduction=reduction).item())
    assert np.isfinite(F.nll_loss(Tensor(bad, fmt), t, ignore_index=int(t[0]),
                                  reduction=reduction).item())  # the inf's row is ignored
    bad[1, t[1]] = -np.nan  # a NaN keeps its sign bit as on the weighted path
    ones = Tensor(np.ones(6), fmt)
    assert F.nll_loss(Tensor(bad, fmt), t, reduction=reduction).numpy().tobytes() == \
        F.nll_loss(Tensor(bad, fmt), t, ones, reduction=reduction).numpy().tobytes()
    with pytest.raises(IndexError):
        F.nll_loss(x, np.r_[t[:-1], 6])


def test_conv_windows_view_is_sliding_window_view():
    """conv2d / pooling build their window view with as_strided: the same view NumPy's
    sliding_window_view gives (then strided), read-only, for strides, dilations and a
    non-contiguous input."""
    import itertools

    from fpsim.autograd import conv as C

    rng = np.random.default_rng(5)
    cases = 0
    for h, w, kh, kw, sh, sw, dh, dw in itertools.product(
            [5, 8], [7], [1, 3], [2, 3], [1, 2], [1, 3], [1, 2], [1, 3]):
        eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        if eh > h or ew > w:
            continue
        oh, ow = (h - eh) // sh + 1, (w - ew) // sw + 1
        for xp in (rng.standard_normal((2, 3, h, w)),
                   rng.standard_normal((3, 2, w, h)).transpose(1, 0, 3, 2)):
            ref = np.lib.stride_tricks.sliding_window_view(xp, (eh, ew), axis=(2, 3))[
                :, :, :sh * (oh - 1) + 1:sh, :sw * (ow - 1) + 1:sw, ::dh, ::dw]
            got = C.window_view(xp, kh, kw, sh, sw, dh, dw, oh, ow)
            assert got.shape == ref.shape and not got.flags.writeable
            np.testing.assert_array_equal(got, ref)
            cases += 1
    assert cases > 100


def test_optimizer_plan_follows_format_changes():
    """Optimizer.step keeps a per-parameter plan (state format, dtype, master), remade when the
    parameter's format or master_weights changes. SGD (lr 1, no momentum) on w = 1.0 (fp16)
    with gradients of 2**-12, a quarter of fp16's ulp at 1.0: the first step leaves w at 1.0
    (1 - 2**-12 is a tie below 1.0, to even) and the fp32 master at 1 - 2**-12. Then:
    with the master, the second step reaches 1 - 2**-11; with master weights switched off it
    stays at 1.0 (again a tie); moved to fp64 (no master there) it is exactly 1 - 2**-12."""
    from fpsim import optim
    from fpsim.nn import Parameter

    tiny = 2.0 ** -12
    for change, want in (("none", 1 - 2 * tiny), ("master off", 1.0), ("fp64", 1 - tiny)):
        w = Parameter([1.0], "fp16")
        opt = optim.SGD([w], lr=1.0, master_weights=True)
        w.grad = np.array([tiny], np.float16)
        opt.step()
        assert w.item() == 1.0 and opt.state[w]["master"][0] == np.float32(1 - tiny)
        if change == "master off":
            opt.master_weights = False
        elif change == "fp64":
            w.cast_("fp64")
        w.grad = np.array([tiny], w.data.dtype)
        opt.step()
        assert w.item() == want, change


@pytest.mark.parametrize("change", ["state_fmt", "grad_fmt"])
def test_optimizer_plan_follows_state_and_grad_format_changes(change):
    """The plan's other two keys: the optimizer's state format and the parameter's gradient
    format, changed between steps. The reference is the same run with the plans dropped
    before every step (each step plans afresh)."""
    from fpsim import optim
    from fpsim.nn import Parameter

    def run(drop_plans: bool) -> list:
        w = Parameter(np.linspace(0.5, 2.0, 8), "bf16")
        opt = optim.SGD([w], lr=0.3, momentum=0.9)
        out = []
        for k in range(4):
            if k == 2:
                if change == "state_fmt":
                    opt.state_fmt = FP16
                else:
                    w.grad_fmt = "fp64"  # wider than fp32: the update runs in float64
            if drop_plans:
                opt._plans.clear()
            w.grad = np.random.default_rng(k).standard_normal(8) * 2.0 ** -9
            opt.step()
            out.append(w.data.tobytes() + opt.state[w]["momentum_buffer"].tobytes())
        return out

    assert run(drop_plans=False) == run(drop_plans=True)


def test_conv_pad_is_np_pad():
    """conv.py pads by filling and copying: np.pad's constant-mode result, bit for bit, for
    float64 / float32 / fp16 arrays, contiguous or not, zero or -inf fill."""
    import itertools

    from fpsim.autograd import conv as C

    rng = np.random.default_rng(6)
    for dt, (t, b, lf, r), fill in itertools.product(
            (np.float64, np.float32, np.float16), itertools.product(range(3), repeat=4),
            (0.0, -np.inf)):
        x = rng.standard_normal((2, 3, 5, 4)).astype(dt).transpose(0, 1, 3, 2)
        ref = np.pad(x, ((0, 0), (0, 0), (t, b), (lf, r)), constant_values=fill)
        got = C._pad(x, t, b, lf, r, fill)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)
        assert np.signbit(got).tolist() == np.signbit(ref).tolist()


def test_conv_pool_plans_are_the_checked_arguments():
    """conv2d / max_pool2d keep a plan per (shape, arguments): a call served by a kept plan
    gives what a call that parses its arguments gives (values, indices, gradients), and
    arguments the parser refuses (a bool stride, a bad padding string, a zero dilation) are
    still refused after the same shapes were planned with good ones."""
    import itertools

    import fpsim.autograd.functional as F
    from fpsim.autograd import conv as C

    rng = np.random.default_rng(11)
    cases = list(itertools.product([(2, 7, 6), (1, 8, 8)], [2, 3, (2, 3)], [None, 1, 2],
                                   [0, 1], [1, 2], [False, True]))
    data = {}
    for (n, h, w), *_ in cases:
        a = rng.standard_normal((n, 3, h, w))
        a[0, 0, 0, :2] = (np.nan, -np.inf)  # the slow path's specials, in some windows
        data[n, h, w] = a

    def run(case):
        shape, k, s, p, d, ceil = case
        x = Tensor(data[shape], "fp16", requires_grad=True)
        try:
            v, i = F.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
        except ValueError as e:
            return str(e)
        v.sum().backward()
        return v.numpy().tobytes(), i.tobytes(), x.grad.tobytes()

    fresh = {}
    for case in cases:
        C._MAXPOOL_PLANS.clear()
        fresh[case] = run(case)
    for _ in range(2):  # every plan kept: a plan served to the wrong arguments would show
        for case in cases:
            assert run(case) == fresh[case], case
    assert sum(isinstance(r, tuple) for r in fresh.values()) > 100
    x = Tensor(rng.standard_normal((2, 3, 8, 8)), "fp16")
    wt = Tensor(rng.standard_normal((4, 3, 3, 3)), "fp16")
    conv_cases = list(itertools.product([1, 2, (1, 2)], [0, 1, "valid", "same", (1, 2)],
                                        [1, (2, 1)], [1, 3]))
    conv_fresh = {}

    def conv(case):
        stride, padding, dilation, groups = case
        try:
            return F.conv2d(x, wt if groups == 1 else wg, None, stride, padding, dilation,
                            groups).numpy().tobytes()
        except ValueError as e:
            return str(e)

    wg = Tensor(rng.standard_normal((3, 1, 3, 3)), "fp16")
    for case in conv_cases:
        C._CONV_PLANS.clear()
        conv_fresh[case] = conv(case)
    for case in conv_cases:
        assert conv(case) == conv_fresh[case], case
    F.conv2d(x, wt, None, 1, 1, 1)
    F.max_pool2d(x, 2, 2, 0, 1)
    for bad in (dict(padding="full"), dict(dilation=0), dict(stride=(1, 0)),
                dict(padding="same", stride=2)):
        with pytest.raises(ValueError):
            F.conv2d(x, wt, None, **bad)
    for bad in (dict(padding=2), dict(dilation=0)):
        with pytest.raises(ValueError):
            F.max_pool2d(x, 2, **bad)
    with pytest.raises(TypeError, match="stride must be an int or a pair"):  # a bool stride
        F.conv2d(x, wt, None, stride=True)
    with pytest.raises(TypeError, match="stride must be an int or a pair"):
        F.max_pool2d(x, 2, stride=True)
    # NumPy integers and lists are parsed on every call, and give the planned result
    assert F.conv2d(x, wt, None, np.int64(1), [1, 1]).numpy().tobytes() == \
        F.conv2d(x, wt, None, 1, 1).numpy().tobytes()


def test_leaf_gradients_are_never_shared():
    """No two tensors' gradients, no caller's array and no array a retained graph keeps share
    memory with a leaf's .grad."""
    import fpsim.autograd.functional as F

    a = Tensor([1.0, 2.0], "fp16", requires_grad=True)
    b = Tensor([3.0, 4.0], "fp16", requires_grad=True)
    (a + b).sum().backward()  # add's backward may give both parents one array
    assert not np.shares_memory(a.grad, b.grad)
    g = np.array([1.0, 1.0], np.float16)
    a.grad = None
    a.backward(g)  # the root is the leaf: the caller's array stays the caller's
    assert not np.shares_memory(a.grad, g)
    w = Tensor(np.ones((3, 4)), "fp16", requires_grad=True)
    x = Tensor(np.ones((2, 4)), "fp16")
    loss = F.linear(x, w).sum()
    loss.backward(retain_graph=True)
    first = w.grad.copy()
    w.grad = None
    loss.backward(retain_graph=True)  # the same graph again: the same gradient
    np.testing.assert_array_equal(w.grad, first)
    loss.backward()
    np.testing.assert_array_equal(w.grad, 2 * first)


def test_max_pool_tap_compare_is_argmax(monkeypatch):
    """max_pool2d's first maximum by comparing the taps (large outputs; windows whose maximum
    is NaN or -inf go the checked argmax path) is np.argmax's over the windows: values, indices
    and gradients equal bit for bit with the tap loop on every size and with argmax everywhere,
    on ties, signed zeros, -inf and NaN taps, padding, ceil_mode, strides and dilations; and
    first_max equals np.argmax directly where no NaN is, its maxima NaN exactly where one is."""
    import itertools

    import fpsim.autograd.functional as F
    from fpsim.autograd import conv as C

    rng = np.random.default_rng(17)
    cases = 0
    for (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil, vals in itertools.product(
            [(2, 2), (3, 2), (1, 3)], [(1, 1), (2, 2), (2, 1)], [(0, 0), (1, 1)], [(1, 1), (2, 1)],
            [False, True], ["ties", "normal", "-inf", "nan"]):
        if ph > kh // 2 or pw > kw // 2:
            continue
        if vals == "ties":
            data = rng.integers(-2, 3, (2, 3, 9, 8)).astype(float)
            zeros = data == 0
            data[zeros] = np.where(rng.random(zeros.sum()) < 0.5, 0.0, -0.0)
        else:
            data = rng.standard_normal((2, 3, 9, 8))
        if vals == "-inf":  # -inf taps, some windows all -inf (the plane's first rows): the
            # tap compare runs and the maxima send the call to the checked path where needed
            data[rng.random(data.shape) < 0.3] = -np.inf
            data[0, 0, :4] = -np.inf
        elif vals == "nan":
            data[rng.random(data.shape) < 0.05] = np.nan
            data[rng.random(data.shape) < 0.1] = -np.inf
        runs = []
        for taps_min in (0, 1 << 60):
            monkeypatch.setattr(C, "_TAPS_MIN", taps_min)
            x = Tensor(data, "fp16", requires_grad=True)
            v, i = F.max_pool2d(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil,
                                return_indices=True)
            v.sum().backward()
            runs.append((v.numpy().tobytes(), i.tobytes(), x.grad.tobytes()))
        assert runs[0] == runs[1], (kh, kw, sh, sw, ph, pw, dh, dw, ceil, vals)
        cases += 1
        h, w = data.shape[2:]
        oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
        win = C.window_view(data, kh, kw, sh, sw, dh, dw, oh, ow)
        ref = np.argmax(win.reshape(win.shape[:4] + (kh * kw,)), axis=-1)
        got, best = C.first_max(win, kh, kw)
        nan = np.isnan(win).any(axis=(-2, -1))
        assert np.array_equal(np.isnan(best), nan)  # the maxima show every NaN window
        assert got.dtype == ref.dtype and np.array_equal(got[~nan], ref[~nan])
        assert np.array_equal(best[~nan], win.max(axis=(-2, -1))[~nan])
    assert cases > 200


def test_cpu_pairs_ratios_follow_each_variant_when_the_order_swaps(bench, monkeypatch):
    # a fake per-thread clock that only the two steps advance: the floor by 1.0, fpsim by 1.25
    # (then 1.5 in the rounds after the fifth), so every ratio is known whatever runs first
    now = [0.0]
    calls = []

    def floor():
        calls.append("f")
        now[0] += 1.0

    def engine():
        calls.append("e")
        now[0] += 1.25 if calls.count("e") <= 11 else 1.5  # a warm-up call, then 2 a round

    monkeypatch.setattr(bench.time, "thread_time", lambda: now[0])
    best_f, best_e, ratios = bench.cpu_pairs((floor, ()), (engine, ()), 10)
    assert calls[2:6] == ["f", "f", "e", "e"] and calls[6:10] == ["e", "e", "f", "f"]
    assert best_f == 1.0 and best_e == 1.25
    assert ratios.tolist() == [1.25] * 5 + [1.5] * 5
