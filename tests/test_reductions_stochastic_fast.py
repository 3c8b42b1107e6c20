"""Stochastic sequential / Kahan sums with few outputs (fpsim.reductions' Python-int steps)
against the vectorised element loops kept as the reference (``_sequential_loop``,
``_kahan_loop``, the per-step ``_Acc`` adds): values (bit patterns, zero signs), flags and the
generator's state afterwards, for the same generator and seed, in every format class (pair
formats such as bf16 whose adds draw ``random()`` / ``integers(0, 2**r)``, formats whose adds
are exact in float64 and draw raw 64-bit integers), every ``random_bits`` width class (None,
<= 32 bits drawn as 32-bit values, > 32 bits), several bit generators, policies and 1..16
outputs."""

import numpy as np
import pytest

import fpsim
from fpsim import reductions
from fpsim.rounding import scalar
from fpsim.rounding.scalar import RAW_DOUBLE_BITGENS
from tests.test_reductions_steps import _hard_rows

FORMATS = [fpsim.FP16, fpsim.BF16, fpsim.FP32, fpsim.FP8_E4M3, fpsim.FP8_E5M2,
           fpsim.FP8_E4M3FNUZ, fpsim.FP8_E5M2FNUZ, fpsim.FP4_E2M1, fpsim.FP6_E3M2,
           fpsim.Format(4, 3, subnormals=False), fpsim.Format(11, 20),
           # pair-path formats (adds inexact in float64) with float64-subnormal tininess
           # scaling, no negative zero, no NaN
           fpsim.Format(10, 30, bias=1000), fpsim.Format(8, 7, nan_encoding="fnuz"),
           fpsim.Format(8, 7, nan_encoding="none")]
OPTIONS = [{}, {"overflow": "saturate"}, {"subnormals": "flush"}, {"tininess": "before"},
           {"subnormals": "flush_daz", "overflow": "saturate"}]
RANDOM_BITS = [None, 1, 7, 32, 33, 53, 63]
BITGENS = [np.random.PCG64, np.random.MT19937, np.random.Philox, np.random.SFC64]


def _data(fmt, rows: int, n: int, seed: int, specials: bool) -> np.ndarray:
    X = _hard_rows(fmt, max(rows, 4), n, seed)[:rows].copy()
    if specials:  # inf - inf (INVALID), NaN operands, in formats that have them
        if fmt.nan_encoding is fpsim.NaNEncoding.IEEE:
            X[0, 2], X[0, 5] = np.inf, -np.inf
        if fmt.nan_encoding is not fpsim.NaNEncoding.NONE:
            X[-1, 3] = np.nan
    return X


def _bits(a) -> np.ndarray:
    a = np.asarray(a, np.float64)
    return np.where(np.isnan(a), np.uint64(0x7FF8 << 48), a.view(np.uint64))


def _check(fmt, X, order, opts, rb, bitgen, seed, flags=True):
    loop = reductions._sequential_loop if order == "sequential" else reductions._kahan_loop
    g_ref, g_fast = np.random.Generator(bitgen(seed)), np.random.Generator(bitgen(seed))
    c = fpsim.arithmetic.context(fmt, "stochastic", rng=g_ref, random_bits=rb, flags=flags,
                                 **opts)
    acc = reductions._Acc(c, X.shape[0])
    want = loop(fpsim.arithmetic.convert_operand(X, c)[0], acc)  # as sum reads X (daz)
    got = fpsim.sum(X, fmt, axis=1, order=order, rounding="stochastic", rng=g_fast,
                    random_bits=rb, flags=flags, **opts)
    if flags:
        got, fl = got
        assert np.array_equal(fl, acc.fl), (order, opts, rb, fl, acc.fl)
    assert np.array_equal(_bits(got), _bits(want)), (order, opts, rb, got, want)
    # the generator ends where the loop left it: the same state, the same next draws
    assert _same_state(g_fast, g_ref), (order, opts, rb)
    assert np.array_equal(g_fast.integers(0, 2**64, 5, dtype=np.uint64),
                          g_ref.integers(0, 2**64, 5, dtype=np.uint64))
    assert g_fast.random() == g_ref.random()


def _same_state(g1, g2) -> bool:
    """The bit generators' full states (MT19937's key is an array; PCG64's holds the
    buffered 32-bit half) are equal."""
    def same(a, b):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return np.array_equal(a, b)
    return same(g1.bit_generator.state, g2.bit_generator.state)


def _fast_only(monkeypatch):
    """The public sum must not reach the reference loops (the fast path ran)."""
    def boom(*a, **k):
        raise AssertionError("the vectorised loop ran")
    monkeypatch.setattr(reductions, "_sequential_loop", boom)
    monkeypatch.setattr(reductions, "_kahan_loop", boom)


@pytest.mark.parametrize("order", ["sequential", "kahan"])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_fast_equals_loop_formats_policies_random_bits(fmt, order):
    n = 24 if order == "sequential" else 12
    for k, opts in enumerate(OPTIONS):
        for j, rb in enumerate(RANDOM_BITS):
            rows = (1, 3, 16)[(k + j) % 3]
            X = _data(fmt, rows, n, seed=7 * k + j + fmt.bits, specials=(k + j) % 2 == 0)
            _check(fmt, X, order, opts, rb, np.random.PCG64, seed=100 * k + j)


@pytest.mark.parametrize("bitgen", BITGENS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("fmt", [fpsim.BF16, fpsim.FP8_E4M3], ids=lambda f: f.name)
def test_fast_equals_loop_bit_generators(fmt, bitgen):
    """MT19937's random() is not (u >> 11) * 2**-53: pair formats draw op by op there."""
    for rb in (None, 8, 32, 40):
        for order in ("sequential", "kahan"):
            for rows in (1, 2, 16):
                X = _data(fmt, rows, 16, seed=rows, specials=True)
                _check(fmt, X, order, {}, rb, bitgen, seed=rows + 5, flags=rows != 2)


@pytest.mark.parametrize("order", ["sequential", "kahan"])
def test_fast_path_runs_and_scope(order, monkeypatch):
    """<= 16 outputs take the fast path (the loops are not called); 17 do not; e11m20's adds
    (the general path) keep the loop."""
    X = _data(fpsim.BF16, 16, 20, seed=1, specials=True)
    for rows in range(1, 17):
        c = fpsim.arithmetic.context("bf16", "stochastic", rng=1)
        assert reductions._stochastic_ok(c, rows)
    c = fpsim.arithmetic.context("bf16", "stochastic", rng=1)
    assert not reductions._stochastic_ok(c, 17)
    assert not reductions._stochastic_ok(fpsim.arithmetic.context("bf16", "up"), 1)
    assert not reductions._stochastic_ok(
        fpsim.arithmetic.context(fpsim.Format(11, 20), "stochastic", rng=1), 1)
    want = {rows: fpsim.sum(X[:rows], "bf16", axis=1, order=order, rounding="stochastic",
                            rng=3, random_bits=12) for rows in (1, 7, 16)}
    with monkeypatch.context() as m:
        _fast_only(m)
        for rows, w in want.items():
            got = fpsim.sum(X[:rows], "bf16", axis=1, order=order, rounding="stochastic",
                            rng=3, random_bits=12)
            assert np.array_equal(_bits(got), _bits(w))


def test_many_steps_cross_draw_blocks(monkeypatch):
    """More raw draws than one block (several bulk draws), long single axis and 16 rows."""
    # blocks of 7 * rows raw values: the adder's bulk draws (rounding.scalar) and the
    # reductions' draws for a skipped NaN stretch
    monkeypatch.setattr(scalar, "DRAW_BLOCK", 7)
    monkeypatch.setattr(reductions, "DRAW_BLOCK", 7)
    for fmt in (fpsim.BF16, fpsim.FP16):
        for rows, n in ((1, 200), (16, 30)):
            X = _data(fmt, rows, n, seed=n, specials=False)
            for order in ("sequential", "kahan"):
                _check(fmt, X, order, {}, None, np.random.PCG64, seed=9)
                _check(fmt, X, order, {}, 40, np.random.PCG64, seed=9)


def test_dot_and_short_pairwise_use_it():
    """dot's products then the sequential sum; pairwise below 8 values is sequential."""
    rng = np.random.default_rng(0)
    a = np.asarray(fpsim.round(rng.standard_normal((3, 40)), "bf16"))
    b = np.asarray(fpsim.round(rng.standard_normal((3, 40)), "bf16"))
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    got = fpsim.dot(a, b, "bf16", rounding="stochastic", rng=g1)
    c = fpsim.arithmetic.context("bf16", "stochastic", rng=g2)
    prod, _, _ = fpsim.arithmetic.mul_flat(a.reshape(-1), b.reshape(-1), c)
    want = reductions._sequential_loop(prod.reshape(3, 40), reductions._Acc(c, 3))
    assert np.array_equal(_bits(got), _bits(want))
    assert _same_state(g1, g2)
    x = a[:, :6]
    g1, g2 = np.random.default_rng(6), np.random.default_rng(6)
    got = fpsim.sum(x, "bf16", axis=1, order="pairwise", rounding="stochastic", rng=g1)
    c = fpsim.arithmetic.context("bf16", "stochastic", rng=g2)
    want = reductions._sequential_loop(x, reductions._Acc(c, 3))
    assert np.array_equal(_bits(got), _bits(want))
    assert _same_state(g1, g2)


def test_raw_draw_identities():
    """The identities the bulk draws rest on, for each bit generator: n raw 64-bit values
    drawn at once are the n drawn one op at a time; integers(0, 2**r) for r > 32 is
    u >> (64 - r); random() is (u >> 11) * 2**-53 except for MT19937."""
    for bitgen in BITGENS:
        g1, g2, g3 = (np.random.Generator(bitgen(11)) for _ in range(3))
        for g in (g1, g2, g3):
            g.integers(0, 10, 3, dtype=np.int32)  # a pending 32-bit half, where buffered
        raw = g1.integers(0, 2**64, 60, dtype=np.uint64).tolist()
        parts = sum((g2.integers(0, 2**64, 3, dtype=np.uint64).tolist() for _ in range(20)),
                    [])
        assert raw == parts
        for r in (33, 40, 63):
            g = np.random.Generator(bitgen(11))
            g.integers(0, 10, 3, dtype=np.int32)
            assert g.integers(0, 1 << r, 60).tolist() == [u >> (64 - r) for u in raw]
        same = g3.random(60).tolist() == [(u >> 11) * 2.0**-53 for u in raw]
        assert same == (bitgen in RAW_DOUBLE_BITGENS), bitgen


@pytest.mark.parametrize("fmt", [fpsim.BF16, fpsim.FP32, fpsim.Format(10, 30, bias=1000)],
                         ids=lambda f: f.name)
def test_terms_below_the_float64_spacing_of_the_sum(fmt):
    """Running sums on the format's grid plus terms far below their float64 spacing (TwoSum
    errors of either sign: the pair path's value toward zero is the grid point below when
    the error points down). With few random bits the probability is truncated, so a wrong
    toward-zero value shows on almost every draw."""
    rng = np.random.default_rng(1)
    one = float(np.asarray(fpsim.round(1.0, fmt)))
    # just below the float64 spacing at 1 (the probability's float64 value shows them) and
    # far below it (only the direction counts)
    tiny = [2.0 ** -k for k in range(54, 62)] + [
        2.0 ** k for k in range(fmt.emin - fmt.mantissa_bits, fmt.emin - fmt.mantissa_bits + 40, 5)]
    rows = []
    for sign in (1.0, -1.0):
        t = rng.choice(tiny, 40) * rng.choice([-1.0, 1.0], 40)
        rows.append(np.concatenate([[sign * one], t]))
        rows.append(np.concatenate([[sign * one * 2.0 ** 5], -sign * np.abs(t)]))
    X = np.asarray(fpsim.round(np.array(rows), fmt))
    for rb in (1, 2, 5, None, 40):
        for opts in ({}, {"subnormals": "flush"}):
            for order in ("sequential", "kahan"):
                _check(fmt, X, order, opts, rb, np.random.PCG64, seed=rb or 0)
                _check(fmt, X[:1], order, opts, rb, np.random.SFC64, seed=3)


@pytest.mark.parametrize("bitgen", BITGENS, ids=lambda b: b.__name__)
def test_draw_conversions_equal_the_generator_calls(bitgen):
    """Each op's draws as the adder makes them (bulk raw values converted, or the op's own
    call) equal what the loop's call on the same generator returns: integers(0, 2**64)
    (uint64) on the kernel path, random() or integers(0, 2**r) on the pair path."""
    for fmt in (fpsim.BF16, fpsim.FP16):
        for rb in (None, 1, 32, 33, 63):
            for rows in (1, 5):
                g = np.random.Generator(bitgen(21))
                ref = np.random.Generator(bitgen(21))
                c = fpsim.arithmetic.context(fmt, "stochastic", rng=g, random_bits=rb)
                st = reductions._stochastic_adder(c, rows, 4)
                assert st._kernel_draws() == ref.integers(0, 2**64, rows,
                                                          dtype=np.uint64).tolist()
                if not st.exact:
                    want = (ref.random(rows) if rb is None
                            else ref.integers(0, 1 << rb, rows)).tolist()
                    assert st._pair_draws() == want, (fmt.name, rb, rows)
                    assert st._kernel_draws() == ref.integers(0, 2**64, rows,
                                                              dtype=np.uint64).tolist()


def test_ambient_generator_state():
    """rng=None draws from fpsim's default generator (fpsim.seed): it ends where the loop
    leaves it."""
    X = _data(fpsim.BF16, 3, 30, seed=2, specials=False)
    fpsim.seed(8)
    got = fpsim.sum(X, "bf16", axis=1, order="kahan", rounding="stochastic")
    state = fpsim.rounding.default_rng().bit_generator.state
    after = fpsim.round(np.full(64, 0.1), "bf16", "stochastic")
    fpsim.seed(8)
    c = fpsim.arithmetic.context("bf16", "stochastic")
    want = reductions._kahan_loop(X, reductions._Acc(c, 3))
    assert np.array_equal(_bits(got), _bits(want))
    assert fpsim.rounding.default_rng().bit_generator.state == state
    assert np.array_equal(fpsim.round(np.full(64, 0.1), "bf16", "stochastic"), after)
