"""The inline Kahan steps of few-output sums (``fpsim.reductions._kahan_fast``, s's binade
cached; ``_kahan_fast_stochastic``, raw draws in blocks) against the element loop kept as the
reference (``_kahan_loop``: four rounded ops per value through the vectorised kernel): values
(bit patterns, zero signs), flags and, with stochastic rounding, the generator's state
afterwards, in every mode, on data that takes each branch (a random walk that stays in a
binade, growth through binade tops into overflow, sums hovering at a binade boundary or near
zero, ties, exact cancellations, subnormals, infinities and NaN), several seeds. Also short
sums in directed modes against exact Fractions (tests/exact.py), independent of the kernel."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim import reductions
from tests.test_reductions_long import _regimes
from tests.test_reductions_steps import _hard_rows, _ref_rows, _same
from tests.test_reductions_stochastic_fast import _same_state

MODES = ["up", "down", "toward_zero", "nearest_even", "nearest_away", "odd"]
FORMATS = [fpsim.BF16, fpsim.FP16, fpsim.FP32, fpsim.FP8_E4M3, fpsim.FP8_E5M2,
           fpsim.FP8_E4M3FNUZ, fpsim.FP4_E2M1, fpsim.Format(3, 2, nan_encoding="fn"),
           fpsim.Format(2, 0, nan_encoding="fn")]
OPTIONS = [{}, {"overflow": "saturate"}, {"tininess": "before"}]
# the loops are ~3 s a format: the lowest-versions run (which leaves out `slow`) keeps three
# formats, one of each storage (bfloat16, float16, a one-byte ml_dtypes type); the main run all
_CORE = ("bf16", "fp16", "fp8_e4m3")
LOOP_FORMATS = [f if f.name in _CORE else pytest.param(f, marks=pytest.mark.slow)
                for f in FORMATS]


def _data(fmt, seed: int, n: int = 400) -> np.ndarray:
    X = np.vstack([_regimes(fmt, seed)[:, :n], _hard_rows(fmt, 4, n, seed)])
    X[-1, 7] = -0.0  # a signed zero amid values
    return X


def _bits(a) -> np.ndarray:
    a = np.asarray(a, np.float64)
    return np.where(np.isnan(a), np.uint64(0x7FF8 << 48), a.view(np.uint64))


def _check(fmt, X, mode, opts, seed=None, bitgen=np.random.PCG64):
    """Each row summed alone (the 1-D path), and all rows at once (<= 16 rows), against the
    loop with the same options and generator."""
    for rows in [X[i:i + 1] for i in range(len(X))] + [X[:3]]:
        g_ref = np.random.Generator(bitgen(seed)) if seed is not None else None
        g = np.random.Generator(bitgen(seed)) if seed is not None else None
        c = fpsim.arithmetic.context(fmt, mode, rng=g_ref, flags=True, **opts)
        acc = reductions._Acc(c, rows.shape[0])
        want = reductions._kahan_loop(fpsim.arithmetic.convert_operand(rows, c)[0], acc)
        got, fl = fpsim.sum(rows, fmt, axis=1, order="kahan", rounding=mode, rng=g,
                            flags=True, **opts)
        assert np.array_equal(_bits(got), _bits(want)), (fmt.name, mode, opts, got, want)
        assert np.array_equal(fl, acc.fl), (fmt.name, mode, opts, fl, acc.fl)
        if seed is not None:
            assert _same_state(g, g_ref), (fmt.name, opts)
        else:  # without flags: the same values
            plain = fpsim.sum(rows, fmt, axis=1, order="kahan", rounding=mode, **opts)
            assert np.array_equal(_bits(plain), _bits(want)), (fmt.name, mode, opts)


@pytest.mark.parametrize("fmt", LOOP_FORMATS, ids=lambda f: f.name)
def test_inline_kahan_equals_the_loop(fmt):
    for k, mode in enumerate(MODES):
        _check(fmt, _data(fmt, k, 120), mode, OPTIONS[k % len(OPTIONS)])


@pytest.mark.parametrize("fmt", LOOP_FORMATS, ids=lambda f: f.name)
def test_inline_kahan_stochastic_equals_the_loop(fmt):
    """Same draws: one raw 64-bit value per operation, in order; random_bits widths of every
    class (the kernel's carry from their top bits), several seeds and bit generators."""
    for k, (rb, bitgen) in enumerate([(None, np.random.PCG64), (1, np.random.PCG64),
                                      (13, np.random.Philox), (40, np.random.SFC64),
                                      (53, np.random.PCG64DXSM)]):
        opts = {**OPTIONS[k % len(OPTIONS)], "random_bits": rb}
        _check(fmt, _data(fmt, 30 + k, 100), "stochastic", opts, seed=k, bitgen=bitgen)


def test_inline_kahan_takes_the_fast_path():
    """The inline steps apply in every mode with the usual policies; DAZ, flushed results
    and ties in a format without mantissa bits keep the operation-by-operation path."""
    ok = reductions._kahan_fast_ok
    for mode in [*MODES, "stochastic"]:
        assert ok(fpsim.arithmetic.context("bf16", mode, rng=0))
        assert not ok(fpsim.arithmetic.context("bf16", mode, rng=0, subnormals="daz"))
        assert not ok(fpsim.arithmetic.context("bf16", mode, rng=0, subnormals="flush"))
    e2m0 = fpsim.Format(2, 0, nan_encoding="fn")
    assert not ok(fpsim.arithmetic.context(e2m0, "nearest_even"))
    assert ok(fpsim.arithmetic.context(e2m0, "up"))


@pytest.mark.slow  # ~30 s of CPU: 3,000-value loops in every mode
def test_long_walk_several_binades():
    """A long random walk (the binade cache in use for most steps, crossing binades both
    ways: t and d rounded inline across a power of two; in directed modes c = fl(d - y)
    rounded inline too) and a sum that grows through many binade tops, every mode, bf16,
    fp16 and fp32."""
    rng = np.random.default_rng(7)
    walk = rng.standard_normal(3000)
    walk[1000:1100] *= 64  # large steps: t leaves s's binade
    grow = rng.random(3000) * 2.0 ** rng.integers(-8, 3, 3000)
    for fmt in (fpsim.BF16, fpsim.FP16, fpsim.FP32):
        X = np.asarray(fpsim.round(np.vstack([walk, grow]), fmt))
        for mode in MODES:
            _check(fmt, X, mode, {})
        _check(fmt, X, "stochastic", {}, seed=3)


@pytest.mark.parametrize("fmt", [fpsim.BF16, fpsim.FP16, fpsim.FP8_E4M3], ids=lambda f: f.name)
def test_short_kahan_sums_against_fractions(fmt):
    """Every operation rounded by exact rational arithmetic (independent of fpsim's kernel):
    a large first value then small ones (t in s's binade: the cached steps), ties at half
    the running sum's quantum, and cancellations to zero."""
    q = 2.0 ** (6 - fmt.mantissa_bits)  # the quantum of values in [64, 128)
    rng = np.random.default_rng(fmt.bits)
    rows = np.array([
        [100.0, *rng.standard_normal(29)],
        [100.0, *([q / 2, -q / 4, 3 * q / 8] * 9), q, -q],
        [-100.0, *rng.standard_normal(29) * q],
        [96.0, *([-48.0, -48.0, 48.0] * 9), 1.0, -0.0],
    ])
    X = np.asarray(fpsim.round(rows, fmt))
    for mode in MODES:
        want, wfl = _ref_rows(X, fmt, mode, {}, "kahan")
        got, fl = fpsim.sum(X, fmt, axis=1, order="kahan", rounding=mode, flags=True)
        assert _same(got, want), (mode, got, want)
        assert np.array_equal(fl, wfl), (mode, fl, wfl)


@pytest.mark.parametrize("fmt", [fpsim.FP8_E4M3, fpsim.FP8_E5M2, fpsim.BF16], ids=lambda f: f.name)
def test_kahan_nan_running_sum_skipped(fmt, monkeypatch):
    """A sum that overflows to inf / NaN and stays there (the absorbing state the row sum
    skips up to the next NaN value), NaN values after it (payloads differ), and a row that
    starts at NaN: the loop's values, flags and draws, with short stretches so that each
    branch of the skip runs."""
    monkeypatch.setattr(reductions, "_NAN_TRY", 16)
    rng = np.random.default_rng(5)
    big = float(fmt.max) / 4
    grow = np.concatenate([np.full(8, big), rng.standard_normal(300)])
    grow[150] = np.nan
    grow[200] = -np.inf
    start_nan = np.concatenate([[np.nan], rng.standard_normal(200)])
    for row in (grow, start_nan):
        X = np.asarray(fpsim.round(row, fmt))[None, :]
        for k, mode in enumerate(MODES):
            _check(fmt, X, mode, OPTIONS[k % len(OPTIONS)])
        for k, rb in enumerate([None, 13, 40]):
            _check(fmt, X, "stochastic", {"random_bits": rb}, seed=k)


@pytest.mark.parametrize("fmt", [fpsim.FP8_E4M3, fpsim.FP8_E5M2, fpsim.FP8_E4M3FNUZ,
                                 fpsim.BF16], ids=lambda f: f.name)
def test_kahan_saturating_sum(fmt):
    """A sum held at the largest finite value (the top binade inline: toward zero, odd, the
    saturate policy, and up / down on the side that saturates), with steps that overflow
    y and t both ways and steps back below: the loop's values and flags."""
    rng = np.random.default_rng(9)
    big = float(fmt.max)
    row = np.concatenate([[big / 2, big / 2], rng.standard_normal(150) * big / 8,
                          rng.standard_normal(150) * big / 64, [-big, -big / 2],
                          rng.standard_normal(100) * big / 16])
    for sign in (1.0, -1.0):
        X = np.asarray(fpsim.round(sign * row, fmt))[None, :]
        for mode in MODES:
            for opts in ({}, {"overflow": "saturate"}):
                _check(fmt, X, mode, opts)
