"""fpsim.state: one home for the ambient state; snapshot() / restore() round-trip every piece,
and gradient checkpointing recomputes under the forward's state."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest

import fpsim
from fpsim import state
from fpsim.amp import autocast
from fpsim.autograd import (
    Tensor,
    get_accumulation,
    get_generator,
    get_rounding,
    is_grad_enabled,
    manual_seed,
    matmul_accumulation,
    rounding_context,
    set_grad_enabled,
)
from fpsim.autograd.checkpoint import checkpoint
from fpsim.autograd.context import get_autocast_hook, settings
from fpsim.autograd.memory_meter import MemoryMeter
from fpsim.flags import flag_context, flags_active


def _enter(stack: contextlib.ExitStack, variant: int) -> dict:
    """Change every piece of ambient state (two different variants) and return what the
    public API then reports."""
    fpsim.seed(100 + variant)                   # rounding_rng
    manual_seed(200 + variant)                  # init_rng (and rounding_rng again)
    fpsim.seed(300 + variant)
    stack.enter_context(set_grad_enabled(variant % 2 == 0))
    meter = stack.enter_context(MemoryMeter())  # observers
    stack.enter_context(rounding_context(["up", "stochastic"][variant], rng=400 + variant,
                                 overflow=["inf", "saturate"][variant]))
    stack.enter_context(matmul_accumulation([("sequential", "bf16"), "exact"][variant]))
    fctx = stack.enter_context(flag_context(trap=[None, "invalid"][variant]))
    stack.enter_context(autocast(["bf16", "fp16"][variant]))
    for g in (fpsim.rounding.default_rng(), get_generator(), settings().policy.rng):
        g.random(3 + variant)                   # rng_states: advance every generator
    return _observe() | {"meter": meter, "flag_ctx": fctx}


def _observe() -> dict:
    gens = (fpsim.rounding.default_rng(), get_generator(), settings().policy.rng)
    return {
        "grad": is_grad_enabled(),
        "observers": tuple(state.observers),
        "gens": gens,
        "gen_states": [g.bit_generator.state for g in gens],
        "mode": get_rounding(),
        "overflow": settings().policy.overflow,
        "accumulation": get_accumulation(),
        "flags": flags_active(),
        "flag_stack": state.flag_stack.get(),
        "hook": get_autocast_hook(),
    }


def test_snapshot_restore_round_trips_every_piece():
    with contextlib.ExitStack() as outer:
        first = _enter(outer, 0)
        snap = state.snapshot()
        assert snap.names == state.PIECES
        assert snap == state.snapshot()  # nothing changed: equal by value
        with contextlib.ExitStack() as inner:
            second = _enter(inner, 1)
            changed = [k for k in second if k not in ("meter", "flag_ctx")
                       and second[k] != first[k]]
            # every piece differs from the first variant
            assert set(changed) == {"grad", "observers", "gens", "gen_states", "mode",
                                    "overflow", "accumulation", "flag_stack", "hook"}
            assert snap != state.snapshot()
            state.restore(snap)
            now = _observe()
            for k in now:
                if k in ("gens", "flag_stack"):
                    assert all(x is y for x, y in zip(now[k], first[k], strict=True)), k
                elif k in ("observers",):
                    assert now[k] == first[k] and first["meter"] in now[k]
                else:
                    assert now[k] == first[k], k
            assert snap == state.snapshot()
            # the restored generators repeat the draws they would have made at snapshot time
            draws = [g.random(4) for g in now["gens"]]
            state.restore(snap)
            assert all(np.array_equal(d, g.random(4))
                       for d, g in zip(draws, now["gens"], strict=True))
        # leaving the inner contexts puts their own saved values back
    assert is_grad_enabled() and get_autocast_hook() is None and not flags_active()
    assert get_rounding() is fpsim.Rounding.NEAREST_EVEN and state.observers == []


def test_partial_snapshot_restores_only_its_pieces():
    fpsim.seed(1)
    snap = state.snapshot("grad_enabled")
    with set_grad_enabled(False):
        gen = fpsim.rounding.default_rng()
        fpsim.seed(2)
        state.restore(snap)
        assert is_grad_enabled()
        assert fpsim.rounding.default_rng() is not gen  # rounding_rng not in the snapshot
    with pytest.raises(KeyError, match="rng_states"):
        snap["rng_states"]


def test_snapshot_is_immutable_and_checked():
    snap = state.snapshot()
    with pytest.raises(AttributeError):
        snap.x = 1
    assert isinstance(snap["observers"], tuple)
    for _, st in snap["rng_states"]:
        with pytest.raises(TypeError):
            st["state"] = {}
    with pytest.raises(ValueError, match="unknown state piece.*valid: grad_enabled"):
        state.snapshot("grad")
    with pytest.raises(ValueError, match="unknown state piece"):
        snap.replace(mode="up")
    with pytest.raises(TypeError, match="restore takes a Snapshot"):
        state.restore({"grad_enabled": True})
    assert snap.without("rng_states").names == state.PIECES[:-1]
    with pytest.raises(TypeError):
        hash(snap)


def test_scoped_sets_and_restores_only_its_pieces():
    with state.scoped(grad_enabled=False):
        assert not is_grad_enabled()
        fpsim.seed(5)
        gen = fpsim.rounding.default_rng()
    assert is_grad_enabled()
    assert fpsim.rounding.default_rng() is gen  # a seed inside the block stays


def test_one_generator_rule():
    g = np.random.default_rng(0)
    for normalise in (state.as_generator, fpsim.rounding.default_rng, get_generator):
        assert normalise(g) is g
        assert normalise(np.int64(3)).random() == np.random.default_rng(3).random()
        with pytest.raises(TypeError, match="rng must be a numpy.random.Generator, an int "
                                            "seed or None, got True"):
            normalise(True)
    with pytest.raises(TypeError, match="got 'a'"):
        rounding_context("stochastic", rng="a")
    # the demo MLP and MXLinear take the same rule (None: a fresh, unseeded generator)
    from fpsim.quant.mx_layers import MXLinear
    from fpsim.training.model import MLP
    for make in (lambda rng: MLP((3, 2), rng=rng), lambda rng: MXLinear(32, 2, rng=rng)):
        w = [p.data.copy() for p in make(5).parameters()]
        assert all(np.array_equal(a, p.data) for a, p in zip(w, make(np.int64(5)).parameters(),
                                                              strict=True))
        with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
            make("a")
    assert fpsim.rounding.default_rng() is state.rounding_rng
    assert get_generator() is state.init_rng


def _train_step(use_checkpoint: bool):
    """One forward under non-default state (stochastic rounding with a seeded generator,
    dropout from the seeded init generator, a flag context, bf16 sequential accumulation),
    then a backward under *other* state; returns everything the run produced."""
    manual_seed(7)
    net = fpsim.nn.Sequential(fpsim.nn.Linear(8, 8, rng=1), fpsim.nn.Dropout(0.3),
                              fpsim.nn.ReLU(), fpsim.nn.Linear(8, 4, rng=2))
    x = Tensor(np.random.default_rng(3).standard_normal((5, 8)), requires_grad=True)
    with flag_context() as fc, rounding_context("stochastic", rng=11), \
            matmul_accumulation(("sequential", "bf16")):
        y = checkpoint(net, x) if use_checkpoint else net(x)
        segment = dict(fc.counts)  # what the segment raised
        loss = (y * y).sum()
    forward_flags, forward_counts = fc.flags, (dict(fc.counts), segment)
    fpsim.seed(99)   # the backward runs under different ambient state
    manual_seed(123)
    with rounding_context("down"):
        loss.backward()
    after = (fpsim.rounding.default_rng().random(), get_generator().random())
    grads = [x.grad] + [p.grad for p in net.parameters()]
    return y.data, grads, (forward_flags, forward_counts), (fc.flags, dict(fc.counts)), after


def test_checkpoint_recomputes_bit_identically_under_non_default_state():
    y0, g0, f0, fb0, after0 = _train_step(False)
    y1, g1, f1, fb1, after1 = _train_step(True)
    assert y0.dtype == y1.dtype and np.array_equal(y0.view(np.uint32), y1.view(np.uint32))
    for a, b in zip(g0, g1, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert f0 == f1 and f0[0] & fpsim.Flags.INEXACT
    assert fb0 == (f0[0], f0[1][0])  # without checkpointing, backward ran outside the flag context
    # the recomputation ran inside the forward's flag context: the same flags, counted again
    counts, segment = f0[1]
    assert segment[fpsim.Flags.INEXACT] > 0
    assert fb1[0] == f0[0] and fb1[1] == {k: counts[k] + segment[k] for k in counts}
    assert after0 == after1  # the recomputation consumed no randomness
    # and the stochastic rounding really drew: another seed changes the result
    with rounding_context("stochastic", rng=12):
        manual_seed(7)
        z = fpsim.nn.Linear(8, 4, rng=2)(Tensor(np.full((1, 8), 0.1)))
    with rounding_context("stochastic", rng=11):
        manual_seed(7)
        z2 = fpsim.nn.Linear(8, 4, rng=2)(Tensor(np.full((1, 8), 0.1)))
    assert not np.array_equal(z.data, z2.data)


def test_one_scoped_object_entered_again_while_active_restores_in_order():
    """A scoped object entered inside its own block (a context object kept in a variable and
    reused, or a decorated function that recurses) restores each entry's state on its exit."""
    import fpsim.state as st

    original = st.autograd_settings
    inside, value = object(), object()
    ctx = st.scoped(autograd_settings=value)
    try:
        with ctx:
            assert st.autograd_settings is value
            st.autograd_settings = inside  # changed inside the block
            with ctx:
                assert st.autograd_settings is value
            assert st.autograd_settings is inside  # the inner exit restored the inner entry's
        assert st.autograd_settings is original  # and the outer exit the outer entry's
    finally:
        st.autograd_settings = original


def _seed_takers():
    """Every public function with an int seed argument (or an ``rng`` one that takes seeds),
    called with ``seed`` on a small case; the name its error must give."""
    from dataclasses import replace

    from fpsim import datasets, viz
    from fpsim.quant import experiment as qe
    from fpsim.tensorcore.accuracy import error_vs_k
    from fpsim.training.trainer import TrainConfig
    from fpsim.viz.gallery import synthetic_gradients
    return {
        "fpsim.seed": (fpsim.seed, "fpsim.seed: value"),
        "manual_seed": (manual_seed, "manual_seed: seed"),
        "train_test_split": (lambda s: datasets.train_test_split(
            np.zeros((4, 1)), np.zeros(4), 0.5, seed=s), "seed"),
        "load_digits": (lambda s: datasets.load_digits(seed=s), "seed"),
        "make_blobs": (lambda s: datasets.make_blobs(8, 2, 2, seed=s), "seed"),
        "synthetic_gradients": (lambda s: synthetic_gradients(8, seed=s), "seed"),
        "error_vs_k": (lambda s: error_vs_k((4,), ("V100",), trials=1, seed=s), "seed"),
        "viz.error_vs_k": (lambda s: viz.error_vs_k(ks=(4,), gpus=("V100",), trials=1,
                                                    seed=s), "seed"),
        "quant.make_mlp": (lambda s: qe.make_mlp(4, seed=s), "seed"),
        "quant.train": (lambda s: qe.train(qe.make_mlp(4), np.zeros((2, 64), np.float32),
                                           np.zeros(2, np.int64), 1, 1e-3, seed=s), "seed"),
        "quant.run_experiment": (lambda s: qe.run_experiment(replace(
            qe.QUICK, epochs=1, qat_epochs=1, ft_epochs=1, hidden=8, seeds=(0, s))), "seeds[1]"),
        "TrainConfig.validate": (lambda s: TrainConfig(seed=s).validate(), "seed"),
        "viz.rounding_modes": (lambda s: viz.rounding_modes("fp8_e4m3", 1.0, 1.5, n=3, seed=s),
                               "seed"),
        "viz.stochastic_rounding": (lambda s: viz.stochastic_rounding("fp8_e4m3", 1.1, n=4,
                                                                      seed=s), "seed"),
        "get_generator": (get_generator, "rng"),
        "default_rng": (fpsim.rounding.default_rng, "rng"),
        "models.GPT": (lambda s: fpsim.models.GPT(5, 4, 8, 1, 2, rng=s), "rng"),
        "nn.Embedding": (lambda s: fpsim.nn.Embedding(5, 4, rng=s), "rng"),
    }


@pytest.mark.parametrize("taker", sorted(_seed_takers()))
def test_every_seed_argument_is_checked_at_the_call(taker):
    """A negative, non-int or bool seed fails at the call with an error naming the argument
    (not NumPy's "expected non-negative integer" from deep inside, nor silently accepted, nor
    after minutes of training); TrainConfig.validate raises only ValueErrors (its contract).
    A NumPy integer is a seed like the int."""
    import matplotlib.pyplot as plt
    fn, name = _seed_takers()[taker]
    type_error = ValueError if taker == "TrainConfig.validate" else TypeError
    for bad, err in ((-1, ValueError), (np.int64(-2), ValueError), ("a", type_error),
                     (True, type_error), (1.5, type_error)):
        with pytest.raises(err, match=re.escape(f"{name} must be")):
            fn(bad)
    fn(np.int64(1))
    plt.close("all")
