"""Long sums on few outputs (issue #35's speed item): the sequential order's runs of adds at
one quantum (vectorised) and its inline steps (Python floats) against the chain of public
:func:`fpsim.add` calls, values, zero signs and flags, in regimes that take each path: a random
walk (long runs once the sum is large), steady growth into overflow, a sum that hovers around
a binade boundary or near zero (short runs: the steps), subnormal sums, ties, an infinity and a
NaN on the way. The chain runs vectorised over the regimes (one row each); each row is summed
alone, as a 1-D sum (the path under test)."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim.reductions import sum as fsum

N = 1200  # runs of 256 and 512 values, and the steps' doubling stretches
MODES = ["up", "down", "toward_zero", "nearest_even", "nearest_away", "odd"]
FORMATS = [fpsim.BF16, fpsim.FP16, fpsim.FP32, fpsim.FP8_E4M3, fpsim.FP8_E5M2,
           fpsim.Format(2, 0, nan_encoding="fn"), fpsim.Format(3, 2, nan_encoding="fn")]


def _regimes(fmt, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tiny, big = fmt.smallest_normal, fmt.max
    half = 2.0 ** np.floor(np.log2(big)) / 4  # a binade boundary well inside the range
    rows = [
        rng.standard_normal(N),  # random walk
        rng.random(N),  # growth (overflow in the small formats)
        -rng.random(N) * half / 64,  # negative growth
        np.where(np.arange(N) % 2, 1, -1) * (half * (1 + rng.random(N) / 8)),  # boundary
        rng.standard_normal(N) * tiny * 3,  # around the subnormal range
        rng.integers(-8, 9, N) * 0.25,  # ties in the small formats
        rng.choice(fpsim.all_values(fmt) if fmt.bits <= 16 else rng.standard_normal(64), N),
    ]
    spec = rng.standard_normal(N)
    spec[N // 3] = np.inf
    spec[2 * N // 3] = -np.inf if fmt.nan_encoding is fpsim.NaNEncoding.IEEE else np.nan
    rows.append(spec)
    nan = rng.standard_normal(N)
    nan[N // 2] = np.nan
    rows.append(nan)
    return np.asarray(fpsim.round(np.array(rows), fmt, overflow="saturate"))


def _chain(X, fmt, kw):
    s, fl = X[:, 0], np.zeros(X.shape[0], np.uint8)
    for k in range(1, X.shape[1]):
        s, f = fpsim.add(s, X[:, k], fmt, flags=True, **kw)
        fl |= f
    return s, fl


@pytest.mark.slow  # ~10 s of CPU: 42 sums of 1200 (300) values against add chains
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_long_sequential_sum_is_the_chain_of_adds(fmt, mode):
    # the policies alternate by mode (the kernel's chain checks them everywhere else)
    for opts in [{}, {"subnormals": "flush", "overflow": "saturate"}][MODES.index(mode) % 2:][:1]:
        X = _regimes(fmt, MODES.index(mode))
        kw = {"rounding": mode, **opts}
        want, want_fl = _chain(X, fmt, kw)
        for i, row in enumerate(X):
            got, fl = fsum(row, fmt, flags=True, **kw)
            same = (got == want[i] and np.signbit(got) == np.signbit(want[i])) or (
                np.isnan(got) and np.isnan(want[i]))
            assert same, (fmt.name, mode, opts, i, got, want[i])
            assert fl == want_fl[i], (fmt.name, mode, opts, i, fpsim.Flags(int(fl)),
                                      fpsim.Flags(int(want_fl[i])))
            plain = fsum(row, fmt, **kw)  # without flags: the same value
            assert plain == got or (np.isnan(plain) and np.isnan(got))


def _kahan_chain(X, fmt, kw):
    s, comp, fl = X[:, 0], np.zeros(X.shape[0]), np.zeros(X.shape[0], np.uint8)

    def op(f, a, b):
        v, g = f(a, b, fmt, flags=True, **kw)
        fl[:] |= g
        return v

    for k in range(1, X.shape[1]):
        y = op(fpsim.sub, X[:, k], comp)
        t = op(fpsim.add, s, y)
        comp = op(fpsim.sub, op(fpsim.sub, t, s), y)
        s = t
    return s, fl


@pytest.mark.slow  # ~10 s of CPU: 42 sums of 1200 (300) values against add chains
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_long_kahan_sum_is_the_chain_of_operations(fmt, mode):
    # Kahan's Python-float steps (the fast adder, Sterbenz's exact t - s), every regime
    opts = [{}, {"subnormals": "flush", "overflow": "saturate"}][MODES.index(mode) % 2]
    X = _regimes(fmt, 10 + MODES.index(mode))[:, :300]
    kw = {"rounding": mode, **opts}
    want, want_fl = _kahan_chain(X, fmt, kw)
    for i, row in enumerate(X):
        got, fl = fsum(row, fmt, order="kahan", flags=True, **kw)
        same = (got == want[i] and np.signbit(got) == np.signbit(want[i])) or (
            np.isnan(got) and np.isnan(want[i]))
        assert same, (fmt.name, mode, opts, i, got, want[i])
        assert fl == want_fl[i], (fmt.name, mode, opts, i, fpsim.Flags(int(fl)),
                                  fpsim.Flags(int(want_fl[i])))


@pytest.mark.parametrize("order", ["sequential", "kahan"])
def test_exact_sum_on_the_nan_pattern_overflows(order):
    # in an 'fn' format the top binade's last grid point is NaN: an exact s + x landing on it
    # overflows (the adder's policy), it is no value to keep
    for fmt in (fpsim.Format(3, 2, nan_encoding="fn"), fpsim.FP8_E4M3):
        top = fmt.max  # the largest finite value
        step = float(2.0 ** (np.floor(np.log2(top)) - fmt.mantissa_bits))
        for mode in MODES:
            for opts in ({}, {"overflow": "saturate"}):
                want = fpsim.add(top, step, fmt, rounding=mode, **opts)
                got = fsum([top, step], fmt, order=order, rounding=mode, **opts)
                assert got == want or (np.isnan(got) and np.isnan(want)), (fmt.name, mode)


@pytest.mark.parametrize("random_bits", [None, 40])
@pytest.mark.parametrize("fmt", [fpsim.BF16, fpsim.FP16, fpsim.FP32, fpsim.FP8_E4M3,
                                 fpsim.Format(3, 2, nan_encoding="fn")], ids=lambda f: f.name)
def test_long_stochastic_sum_is_the_chain_of_adds(fmt, random_bits):
    # one row, stochastic rounding: the runs take the raw draws in blocks (and give back
    # those a run did not use); the chain of fpsim.add calls draws one value per add from the
    # same seed: the same values, flags and the generator's final state
    X = _regimes(fmt, 20)[[0, 1, 3, 5, 6, 7, 8], :600]
    walk = X[0] * 64  # tiny values in a large sum: s + x is not exact in float64 (bf16,
    walk[::7] *= 2.0**-60  # fp32: the pair branch of the rounding)
    X = np.vstack([X, np.asarray(fpsim.round(walk, fmt))])
    opts = {"rounding": "stochastic", "random_bits": random_bits}
    for i, row in enumerate(X):
        g_ref, g = np.random.default_rng(i), np.random.default_rng(i)
        s, want_fl = row[0], 0
        for v in row[1:]:
            s, f = fpsim.add(s, v, fmt, flags=True, rng=g_ref, **opts)
            want_fl |= int(f)
        got, fl = fsum(row, fmt, flags=True, rng=g, **opts)
        assert got == s or (np.isnan(got) and np.isnan(s)), (fmt.name, i, got, s)
        assert fl == want_fl, (fmt.name, i, fpsim.Flags(int(fl)), fpsim.Flags(want_fl))
        assert g.bit_generator.state == g_ref.bit_generator.state
