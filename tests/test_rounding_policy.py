"""fpsim.RoundingPolicy (issue 20 item 3): one value object for the rounding options, parsed
once, accepted as ``policy=`` beside the separate keywords by round, round_pair,
round_rational, cast, every arithmetic op, sum and dot, with the same results (stochastic
rounding included: the same seed gives the same draws)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fpsim
from fpsim import arithmetic, rounding
from fpsim.rounding import RoundingPolicy, policy_of, round_rational
from tests.intlike import Count as _Count

MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd", "stochastic"]
OPTIONS = [{}, {"overflow": "saturate"}, {"subnormals": "flush"}, {"subnormals": "daz"},
           {"tininess": "before"}]


def _same(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool((((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b)))
                .all())


def _both(fn, args, fmt, mode, opts, **extra):
    """fn by keywords and by policy=, with the same seed for stochastic rounding."""
    seed = {"rng": 5} if mode == "stochastic" else {}
    by_kw = fn(*args, fmt, mode, **opts, **seed, **extra)
    by_policy = fn(*args, policy=RoundingPolicy(fmt, mode, **opts, **seed), **extra)
    return by_kw, by_policy


def test_fields_are_parsed_and_frozen():
    p = RoundingPolicy("bf16", "up", overflow="saturate", subnormals="flush_daz")
    assert p.fmt is fpsim.BF16 and p.rounding is fpsim.Rounding.UP
    assert p.overflow is fpsim.Overflow.SATURATE and p.flush and p.daz
    assert RoundingPolicy("fp16") == RoundingPolicy(fpsim.FP16, fpsim.Rounding.NEAREST_EVEN)
    assert RoundingPolicy(fpsim.Format(4, 3, subnormals=False)).flush  # no subnormals: flush
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.rounding = "down"
    assert policy_of("fp16", "up") is policy_of("fp16", "up")  # parsed once, then cached


@pytest.mark.parametrize("kwargs, match", [
    ({"rounding": "sideways"}, "nearest_even"),
    ({"overflow": "wrap"}, "saturate"),
    ({"subnormals": "drop"}, "flush"),
    ({"tininess": "never"}, "after"),
    ({"random_bits": 8}, "random_bits only applies to rounding='stochastic'"),
    ({"rounding": "stochastic", "random_bits": 0}, r"random_bits must be an int in \[1, 63\]"),
    ({"rounding": "stochastic", "random_bits": 64}, r"random_bits must be an int in \[1, 63\]"),
    ({"rounding": "stochastic", "random_bits": np.int64(-1)}, r"in \[1, 63\], got np.int64"),
])
def test_bad_options_name_the_argument_and_the_choices(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RoundingPolicy("fp16", **kwargs)
    with pytest.raises(ValueError, match=match):  # the keyword route says the same
        fpsim.add(1.0, 1.0, "fp16", **kwargs)


def test_random_bits_shares_the_as_int_rule():
    # random_bits is checked by fpsim.checks.as_int, then its range [1, 63]: what range()
    # takes gives the int's draws; other types are a TypeError on every route
    from fpsim.integer import round_to_integral, to_int

    x = np.linspace(-3.0, 3.0, 41) / 7.0
    calls = (lambda rb: fpsim.round(x, "bf16", "stochastic", rng=1, random_bits=rb),
             lambda rb: fpsim.add(x, 1.0, "fp16", "stochastic", rng=1, random_bits=rb),
             lambda rb: to_int(x * 9, "int8", "stochastic", rng=1, random_bits=rb),
             lambda rb: round_to_integral(fpsim.round(x * 9, "fp16"), "fp16", "stochastic",
                                          rng=1, random_bits=rb))
    for call in calls:
        ref = call(8)
        for rb in (np.int8(8), np.uint64(8), np.array(8), _Count(8)):
            np.testing.assert_array_equal(call(rb), ref)
            assert RoundingPolicy("fp16", "stochastic", random_bits=rb).random_bits == 8
        for bad in (True, np.True_, 8.0, "8", np.array([8]), np.timedelta64(8)):
            with pytest.raises(TypeError, match="random_bits must be an int, got "
                                                + type(bad).__name__):
                call(bad)


def test_bad_format_and_mixing_policy_with_options():
    with pytest.raises(TypeError, match="got None"):
        RoundingPolicy(None)
    with pytest.raises(TypeError, match="integer format"):
        RoundingPolicy("int8")
    p = RoundingPolicy("fp16", "up")
    with pytest.raises(TypeError, match="either policy= or fmt.*fmt"):
        fpsim.round(1.0, "fp16", policy=p)
    with pytest.raises(TypeError, match="either policy= or fmt.*overflow"):
        fpsim.add(1.0, 1.0, policy=p, overflow="saturate")
    with pytest.raises(TypeError, match="either policy= or fmt.*rounding"):
        fpsim.sum([1.0], rounding="down", policy=p)
    with pytest.raises(TypeError, match="policy must be a fpsim.RoundingPolicy, got dict"):
        fpsim.mul(1.0, 1.0, policy={"fmt": "fp16"})
    with pytest.raises(TypeError, match="got None"):  # neither: fmt is still required
        fpsim.add(1.0, 1.0)
    with pytest.raises(TypeError, match="cast.*either policy="):
        fpsim.cast(1.0, "fp16", policy=p)


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "e11m10"])
def test_policy_equals_keywords_everywhere(fmt):
    rng = np.random.default_rng(3)
    f = fpsim.get_format(fmt)
    x = rng.standard_normal(64) * 2.0 ** rng.integers(f.emin - f.mantissa_bits - 2,
                                                      f.emax + 2, 64)
    x[:4] = [0.0, -0.0, np.inf, np.nan]
    y = np.asarray(fpsim.round(rng.standard_normal(64), fmt))
    for mode in MODES:
        for opts in OPTIONS:
            for fn, args in ((fpsim.round, (x,)), (fpsim.add, (x, y)), (fpsim.sub, (y, x)),
                             (fpsim.mul, (x, y)), (fpsim.div, (y, x)),
                             (fpsim.sqrt, (np.abs(x),)), (fpsim.fma, (x, y, y))):
                for flags in (False, True):
                    a, b = _both(fn, args, fmt, mode, opts, flags=flags)
                    if flags:
                        assert _same(a[0], b[0]) and np.array_equal(a[1], b[1]), (fn, mode)
                    else:
                        assert _same(a, b), (fn.__name__, fmt, mode, opts)
            for order in ("sequential", "pairwise", "kahan", "wide"):
                seed = {"rng": 5} if mode == "stochastic" else {}
                a = fpsim.sum(x[4:].reshape(6, 10), fmt, axis=1, order=order, rounding=mode,
                              **opts, **seed)
                b = fpsim.sum(x[4:].reshape(6, 10), axis=1, order=order,
                              policy=RoundingPolicy(fmt, mode, **opts, **seed))
                assert _same(a, b), ("sum", order, mode, opts)
            seed = {"rng": 5} if mode == "stochastic" else {}
            a = fpsim.dot(x[4:36], y[4:36], fmt, rounding=mode, **opts, **seed)
            b = fpsim.dot(x[4:36], y[4:36], policy=RoundingPolicy(fmt, mode, **opts, **seed))
            assert _same(a, b), ("dot", mode, opts)


@pytest.mark.parametrize("mode", MODES)
def test_policy_for_pairs_rationals_and_cast(mode):
    seed = {"rng": 9} if mode == "stochastic" else {}
    pol = RoundingPolicy("bf16", mode, **seed)
    hi = np.array([1.0, 3.0, -5.5, 1e-40])
    lo = np.array([2.0**-60, -(2.0**-55), 2.0**-54, 0.0])
    assert _same(fpsim.round_pair(hi, lo, "bf16", mode, **seed), fpsim.round_pair(hi, lo,
                                                                                 policy=pol))
    for v in ("0.1", 2**100 - 1, "-1e999"):
        assert _same(round_rational(v, "bf16", mode, **seed), round_rational(v, policy=pol))
    x = np.array([0.1, 1 / 3, 3e38, -7e-42])
    a, b = fpsim.cast(x, "bf16", mode, **seed), fpsim.cast(x, policy=pol)
    assert a.dtype == b.dtype and _same(a.astype(np.float64), b.astype(np.float64))


def test_an_add_parses_its_options_once(monkeypatch):
    """The policy is parsed once per distinct set of options, then reused: a repeated add
    (and sum) parses nothing (it parsed three times per call before)."""
    calls = []
    real = rounding.policy.as_rounding
    monkeypatch.setattr(rounding.policy, "as_rounding", lambda m: calls.append(m) or real(m))
    a, b = np.float16([1.5, 2.5]), np.float16([0.1, 3.0])
    fpsim.add(a, b, "fp16", "toward_zero", overflow="saturate")
    calls.clear()
    fpsim.add(a, b, "fp16", "toward_zero", overflow="saturate")
    fpsim.sum(np.ones(5), "fp16", rounding="toward_zero", overflow="saturate")
    fpsim.round(a, "fp16", "toward_zero", overflow="saturate")
    assert calls == []
    p = RoundingPolicy("fp16", "down")
    calls.clear()
    fpsim.mul(a, b, policy=p)
    fpsim.mul(a, b, policy=p)
    assert len(calls) <= 2  # the derived result / conversion policies, once


def test_context_takes_a_policy():
    p = RoundingPolicy("fp8_e4m3", "up", rng=None)
    c = arithmetic.context(policy=p, flags=True)
    assert c.result.fmt is fpsim.FP8_E4M3 and c.result.rounding is fpsim.Rounding.UP and c.want
    assert c.conversion.rounding is fpsim.Rounding.NEAREST_EVEN
    # the operation's context holds its two policies and no copies of their fields
    assert {f.name for f in dataclasses.fields(c)} == {"result", "conversion", "want"}
    d = arithmetic.context("bf16", "stochastic", subnormals="flush_daz", rng=3)
    assert d.result.subnormals is fpsim.Subnormals.FLUSH and d.conversion.daz
    assert isinstance(d.result.rng, np.random.Generator)  # resolved once per operation
