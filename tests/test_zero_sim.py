"""ZeRO simulated across N ranks (fpsim.distributed).

References: the exact rational mean rounded by tests/exact.py (collective arithmetic); the ring
algorithms' per-rank volumes written out from the chunk schedule; fpsim.optim.Adam with fp32
master weights on an ordinary single-process model (the training reference: the N micro-batches
run one after another, their fp16 gradients averaged in float64 in rank order and rounded once
to fp16 by NumPy's cast); the ZeRO paper's model-state formulas (fpsim.memory).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import fpsim
from fpsim import memory, nn
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F
from fpsim.distributed import Communicator, ZeroEngine, adam_step_flat, ring_volume
from fpsim.optim import Adam, AdamW
from tests.exact import round_exact

N = 4
LR = 3e-3


def make_model():
    # 8*16 + 16 + 16*4 + 4 = 212 parameters: divisible by N = 4
    return nn.Sequential(nn.Linear(8, 16, rng=1), nn.ReLU(), nn.Linear(16, 4, rng=2))


def batches(steps: int, size: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(size, 8)), rng.integers(0, 4, size=size)) for _ in range(steps)]


def reference(batch_list, n: int, loss_scale: float = 1.0, weight_decay: float = 0.0,
              fmt: str = "fp16"):
    """One process: micro-batch by micro-batch, fp16 gradients averaged in rank order."""
    dtype = fpsim.get_format(fmt).storage_dtype
    model = make_model().to(fmt)
    params = list(model.parameters())
    opt = Adam(params, lr=LR, weight_decay=weight_decay, master_weights=True)
    history = []
    for x, y in batch_list:
        per_rank = []
        for xr, yr in zip(np.split(x, n), np.split(y, n), strict=True):
            for p in params:
                p.grad = None
                p.grad_fmt = None
            loss = F.cross_entropy(model(Tensor(xr, fmt)), yr)
            if loss_scale != 1.0:
                loss = loss * loss_scale
            loss.backward()
            per_rank.append([p.grad.copy() for p in params])
        for i, p in enumerate(params):
            acc = per_rank[0][i].astype(np.float64)
            for r in range(1, n):
                acc = acc + per_rank[r][i].astype(np.float64)
            mean = (acc / n).astype(dtype)  # NumPy / ml_dtypes cast: round to nearest even
            if loss_scale == 1.0:
                p.grad = mean
            else:  # unscale in float32 as PyTorch's GradScaler: g * float32(1 / scale)
                p.grad_fmt = fpsim.FP32
                p.grad = mean.astype(np.float32) * np.float32(1.0 / loss_scale)
        if all(np.isfinite(p.grad.astype(np.float64)).all() for p in params):
            opt.step()
        history.append(np.concatenate([p.data.reshape(-1) for p in params]))
    return history


# ------------------------------------------------------------------------- Adam step
@pytest.mark.parametrize("decoupled,wd", [(False, 0.0), (False, 0.01), (True, 0.05)])
def test_flat_adam_equals_fpsim_optim(decoupled, wd):
    rng = np.random.default_rng(5)
    w16 = rng.normal(size=64).astype(np.float16)
    p = nn.Parameter(w16, "fp16")
    cls = AdamW if decoupled else Adam
    opt = cls([p], lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=wd, master_weights=True)
    w, m, v = w16.astype(np.float32), np.zeros(64, np.float32), np.zeros(64, np.float32)
    for t in range(1, 6):
        g = (rng.normal(size=64) * 10.0 ** rng.integers(-6, 1)).astype(np.float16)
        p.grad = g
        opt.step()
        adam_step_flat(w, g.astype(np.float32), m, v, t, lr=1e-2, betas=(0.8, 0.99), eps=1e-6,
                       weight_decay=wd, decoupled=decoupled)
        st = opt.state[p]
        assert st["master"].tobytes() == w.tobytes()
        assert st["exp_avg"].tobytes() == m.tobytes()
        assert st["exp_avg_sq"].tobytes() == v.tobytes()
        assert p.data.tobytes() == w.astype(np.float16).tobytes()


def test_flat_adam_rejects_bad_input():
    z = np.zeros(3, np.float32)
    with pytest.raises(TypeError, match="float32"):
        adam_step_flat(z.astype(np.float64), z, z, z, 1)
    with pytest.raises(ValueError, match="adam_step_flat: step must be >= 1, got 0"):
        adam_step_flat(z, z, z, z, 0)
    for bad in (True, 1.0, "1", None, np.array([1]), np.timedelta64(1)):
        with pytest.raises(TypeError, match=f"adam_step_flat: step must be an int, got "
                                            f"{type(bad).__name__}"):
            adam_step_flat(z, z, z, z, bad)


def test_flat_adam_step_takes_what_range_takes():
    # step is checked by fpsim.checks.as_int: a 0-d array or NumPy integer is the step number
    rng = np.random.default_rng(0)
    g = rng.standard_normal(5).astype(np.float32)
    states = []
    for t in (3, np.int64(3), np.array(3)):
        w, m, v = np.ones(5, np.float32), np.full(5, 0.1, np.float32), np.full(5, 0.2, np.float32)
        adam_step_flat(w, g, m, v, t, lr=1e-2)
        states.append((w, m, v))
    for w, m, v in states[1:]:
        for got, want in zip((w, m, v), states[0], strict=True):
            np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------- collectives
@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_reduction_is_the_correctly_rounded_exact_mean(n):
    rng = np.random.default_rng(n)
    size = 40 * n
    # values spread over fp16's range, subnormals included, and some exact ties
    arrays = [(rng.normal(size=size) * 2.0 ** rng.integers(-26, 14, size=size))
              .astype(np.float16) for _ in range(n)]
    arrays[0][:4] = [2.0**-24, 65504, -65504, 1.0]
    arrays[1][:4] = [2.0**-24, 65504, -65504, 2.0**-11]
    comm = Communicator(n)
    for op in ("sum", "mean"):
        out = comm.all_reduce(arrays, op=op)
        want = []
        for j in range(size):
            s = sum(Fraction(float(a[j])) for a in arrays)
            want.append(round_exact(s / n if op == "mean" else s, fpsim.FP16)[0])
        np.testing.assert_array_equal(out[0].astype(np.float64), np.array(want))
        assert all(o.tobytes() == out[0].tobytes() for o in out)
        shards = comm.reduce_scatter(arrays, op=op)
        assert np.concatenate(shards).tobytes() == out[0].tobytes()


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_ring_volumes_per_rank(n):
    size = 24 * n
    comm = Communicator(n)
    a = [np.ones(size, np.float16)] * n
    chunk = size // n
    expect = {
        # every rank sends all chunks but one, once per phase
        "all_reduce": 2 * (n - 1) * chunk,
        "reduce_scatter": (n - 1) * chunk,
        "all_gather": (n - 1) * chunk,
    }
    for name, vol in expect.items():
        comm.reset()
        if name == "all_gather":
            getattr(comm, name)([np.ones(chunk, np.float16)] * n)
        else:
            getattr(comm, name)(a)
        for s in comm.stats:
            assert s.sent_elements == s.recv_elements == vol
            assert s.sent_bytes == 2 * vol
            assert s.calls == {name: 1}
        assert ring_volume(name, size, n) == vol
    comm.reset()
    out = comm.broadcast([np.arange(size, dtype=np.float32) * (r + 1) for r in range(n)], src=1
                         if n > 1 else 0)
    src = 1 if n > 1 else 0
    assert all(o.tobytes() == (np.arange(size, dtype=np.float32) * (src + 1)).tobytes()
               for o in out)
    sent = [s.sent_elements for s in comm.stats]
    recv = [s.recv_elements for s in comm.stats]
    assert recv[src] == 0 and all(recv[r] == size for r in range(n) if r != src)
    assert sum(sent) == (n - 1) * size  # a chain: n - 1 links, each carrying the buffer once


def test_collective_errors():
    comm = Communicator(3)
    with pytest.raises(ValueError, match="one array per rank"):
        comm.all_reduce([np.zeros(3)] * 2)
    with pytest.raises(ValueError, match="equal chunks"):
        comm.reduce_scatter([np.zeros(4, np.float16)] * 3)
    with pytest.raises(ValueError, match="valid: sum, mean"):
        comm.all_reduce([np.zeros(3, np.float16)] * 3, op="max")
    with pytest.raises(ValueError, match="dtype"):
        comm.all_gather([np.zeros(1, np.float16), np.zeros(1, np.float32), np.zeros(1)])
    with pytest.raises(ValueError, match="world_size"):
        Communicator(0)
    with pytest.raises(ValueError, match="valid: all_reduce"):
        ring_volume("gather", 4, 2)
    for size, exc, message in ((-4, ValueError, "size must be >= 0"),
                               (2.5, ValueError, "whole number"),
                               (1j, TypeError, "size must be an int"),
                               (float("nan"), ValueError, "whole number"),
                               (True, TypeError, "size must be an int"),
                               ("8", TypeError, "size must be an int")):
        with pytest.raises(exc, match=message):
            ring_volume("all_reduce", size, 4)
    for n, exc, message in ((0, ValueError, ">= 1"), (-2, ValueError, ">= 1"),
                            (2.5, ValueError, "whole number"),
                            (2 + 0j, TypeError, "world_size must be an int")):
        with pytest.raises(exc, match=message):
            ring_volume("all_gather", 8, n)
    assert ring_volume("all_gather", 8.0, np.int64(4)) == 6.0
    assert ring_volume("reduce_scatter", 0, 3) == 0.0


# ---------------------------------------------------------------------------- ZeRO
@pytest.fixture(scope="module")
def ref_history():
    return reference(batches(3), N)


@pytest.mark.parametrize("stage,offload", [(0, False), (1, False), (2, False), (3, False),
                                           (2, True), (3, True)])
def test_zero_training_is_bitwise_identical_to_single_rank(stage, offload, ref_history):
    eng = ZeroEngine(make_model, stage, N, lr=LR, offload=offload)
    psi = eng.num_params
    assert psi == 212 and psi % N == 0
    for (x, y), want in zip(batches(3), ref_history, strict=True):
        eng.step(x, y)
        for r in range(N):
            assert eng.full_params(r).tobytes() == want.tobytes()
        if stage in (0, 1, 2):  # every rank holds the same full fp16 parameters
            assert all(rk.params.tobytes() == want.tobytes() for rk in eng.ranks)
        # communication per rank and step: 2 (N-1)/N Psi, or 3 (N-1)/N Psi in stage 3
        factor = 3 if stage == 3 else 2
        assert eng.last_step_comm == [factor * (N - 1) * psi // N] * N
        assert factor * psi == memory.zero_communication_volume(psi, stage)
    # model-state bytes per rank: the ZeRO formula with K = 12
    for r in range(N):
        b = eng.model_state_bytes(r)
        assert b["total"] == memory.zero_model_state_bytes(psi, stage, N, k=12)
        if offload:  # the GPU keeps only the fp16 parameters (all of them in stage 2)
            assert b["host"] == 14 * psi // N
            assert b["device"] == (2 * psi if stage == 2 else 2 * psi // N)
            # per step: the fp16 gradient partition down, the fp16 parameter partition up
            assert eng.ranks[r].transfers == {"d2h": 3 * 2 * psi // N, "h2d": 3 * 2 * psi // N}
        else:
            assert b["device"] == b["total"] and b["host"] == 0


def test_bf16_parameters():
    bl = batches(2, seed=4)
    want = reference(bl, 2, fmt="bf16")
    eng = ZeroEngine(make_model, 3, 2, lr=LR, param_fmt="bf16")
    for (x, y), w in zip(bl, want, strict=True):
        eng.step(x, y)
        assert eng.full_params().tobytes() == w.tobytes()


def test_zero_bytes_match_formula_for_several_world_sizes():
    for n in (1, 2, 4):
        for stage in range(4):
            eng = ZeroEngine(make_model, stage, n)
            assert eng.model_state_bytes(n - 1)["device"] == \
                memory.zero_model_state_bytes(eng.num_params, stage, n, k=12)
            eng.step(*batches(1, size=4)[0])
            d = memory.zero_measured_vs_formula(eng, n - 1)
            assert d["measured_bytes"] == d["formula_bytes"]
            assert d["measured_comm_elements"] == d["ring_comm_elements"]
            assert d["paper_comm_elements"] == (3 if stage == 3 else 2) * eng.num_params


def test_zero_loss_scaling_and_overflow_skip():
    bl = batches(2, seed=3)
    want = reference(bl, 2, loss_scale=1024.0)
    eng = ZeroEngine(make_model, 3, 2, lr=LR, loss_scale=1024.0)
    for (x, y), w in zip(bl, want, strict=True):
        eng.step(x, y)
        assert eng.full_params().tobytes() == w.tobytes()
    before = eng.full_params()
    huge = ZeroEngine(make_model, 2, 2, lr=LR, loss_scale=2.0**40)  # scaled loss overflows
    start = huge.full_params()
    huge.step(*bl[0])
    assert huge.skipped_steps == 1 and huge.full_params().tobytes() == start.tobytes()
    assert before.dtype == np.float16


def test_zero_padding_and_errors():
    eng = ZeroEngine(lambda: nn.Linear(3, 2, rng=0), 3, 4)  # 8 parameters
    assert eng.num_params == 8 and eng.padded == 8
    eng = ZeroEngine(lambda: nn.Linear(2, 3, rng=0), 1, 4)  # 9 parameters, padded to 12
    assert eng.padded == 12 and eng.shard == 3
    x = np.random.default_rng(1).normal(size=(4, 2))
    eng.step(x, np.arange(4) % 3)
    assert np.all(eng.ranks[0].params[9:] == 0)
    d = memory.zero_measured_vs_formula(eng, 2)  # the formula on the padded buffer held
    assert (d["num_params"], d["padded_params"]) == (9, 12)
    assert d["measured_bytes"] == d["formula_bytes"] == 4 * 12 + 12 * 12 / 4
    assert d["measured_comm_elements"] == d["ring_comm_elements"] == 2 * 3 * 12 / 4
    with pytest.raises(ValueError, match="not held"):
        eng.model_state_bytes(4)
    with pytest.raises(ValueError, match="stage"):
        ZeroEngine(make_model, 4, 2)
    # the stage is checked by fpsim.checks.as_int, then against 0-3: 2.0 was taken as stage 2,
    # np.array([2]) failed in NumPy; what range() takes is a stage
    for bad in (2.0, np.float64(1.0), True, "2", None, np.array([2]), np.timedelta64(2)):
        with pytest.raises(TypeError, match=f"stage must be an int, got {type(bad).__name__}"):
            ZeroEngine(make_model, bad, 2)
    for bad in (-1, np.int64(4)):
        with pytest.raises(ValueError, match="unknown ZeRO stage"):
            ZeroEngine(make_model, bad, 2)
    for good in (np.int8(2), np.array(2)):
        eng2 = ZeroEngine(make_model, good, 2)
        assert eng2.stage == 2 and type(eng2.stage) is int
    with pytest.raises(ValueError, match="split evenly"):
        ZeroEngine(make_model, 1, 4).step(np.zeros((6, 8)), np.zeros(6, int))
    with pytest.raises(TypeError, match="Module"):
        ZeroEngine(42, 1, 2)
    with pytest.raises(ValueError, match="stage 2 or 3"):
        ZeroEngine(make_model, 1, 2, offload=True)
