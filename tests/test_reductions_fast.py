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


def test_binade_lookup_by_sign_and_exponent():
    """The running sum's binade, kept per sum and, for a new finite non-zero sum, per sign
    and exponent (a wrong one only slows the steps: the binade's bounds then never hold)."""
    for fmt in (fpsim.FP32, fpsim.FP8_E4M3):
        def binade_of(s, fmt=fmt):
            return reductions._binade(s, fmt) if s - s == 0.0 else None
        binade = reductions._memo(binade_of)
        sub = float(fmt.smallest_normal) / 4
        for s in [1.5, -1.5, 1.25, -1.75, 3.0, -3.0, 2.0, -2.0, 0.0, -0.0, sub, -sub, np.inf,
                  -np.inf, np.nan, float(fmt.max), -float(fmt.max), 1.0, -1.25]:
            assert binade(s) == binade_of(s), (fmt.name, s)


@pytest.mark.parametrize("fmt", [fpsim.BF16, fpsim.FP32], ids=lambda f: f.name)
def test_inline_kahan_inexact_float64_sums(fmt):
    """Where float64's x - c or s + y is inexact and lands on a multiple of the format's
    quantum (a tiny c or y beside a value near 1): the tie-free modes' exactness checks,
    which run only there (the result is then not float64's), with values after each such
    step that carry a wrong c into the sum."""
    m = fmt.mantissa_bits
    tiny = 2.0**-100  # s near it: c = fl(t - s) - y of the order of 2**-(100 + m)
    rows = []
    for a in (1.0, -1.0):
        for b in (1.0, -1.0):
            rows.append([a * 1.5 * tiny, a * tiny * 2.0 ** -(m + 2), b, -b * 0.75, b * 0.5,
                         a * tiny, b * 0.25])
            rows.append([b, a * 2.0**-60, -b * 2.0**-60, b * 2.0**-61, b * 0.5, -b, a])
    X = np.asarray(fpsim.round(np.array(rows), fmt))
    for mode in MODES:
        _check(fmt, X, mode, {})


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


_NANS = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000123,  # quiet, payloads
                  0xFFF80000000A0001, 0x7FF0000000000005],  # a signalling NaN
                 np.uint64).view(np.float64)


def _nan_rows(fmt, n: int = 80) -> np.ndarray:
    """Rows whose sums end in NaN by each way there: NaN values of both signs and with low
    payload bits (which float32 / float16 / bfloat16 cannot hold), a signalling NaN, two
    NaN values of different patterns (which one an add of two NaNs returns), a sum that
    overflows to inf then meets -inf (inf - inf in t and in c: the default NaN and, by the
    negated c, its negation), inf then finite values (c = inf - inf, a NaN c subtracted),
    and a row that starts at NaN; a finite row too. Long stretches after the NaN: the
    absorbing state the inline row sum skips."""
    rng = np.random.default_rng(11)
    big = float(fmt.max)
    rows = []
    for k, nan in enumerate(_NANS):
        r = rng.standard_normal(n)
        r[3 + k] = nan
        rows.append(r)
        r = rng.standard_normal(n)
        r[2], r[40 + k] = nan, _NANS[(k + 1) % _NANS.size]  # two NaN patterns
        rows.append(r)
    for sign in (1.0, -1.0):
        r = rng.standard_normal(n)
        r[:4] = sign * big  # overflow to inf (a saturating policy holds fmax)
        r[30] = -sign * np.inf
        rows.append(r)
        r = rng.standard_normal(n)
        r[5] = sign * np.inf  # then finite values: c = inf - inf
        r[50] = -sign * np.inf
        rows.append(r)
        r = rng.standard_normal(n)
        r[0], r[60] = sign * np.nan, -sign * np.nan
        rows.append(r)
    rows.append(rng.standard_normal(n))
    X = np.asarray(fpsim.round(np.array(rows), fmt))
    nan = np.isnan(np.array(rows))
    X[nan] = np.array(rows)[nan]  # NaN values keep their float64 patterns exactly
    return X


@pytest.mark.parametrize("fmt", [fpsim.FP32, fpsim.BF16, fpsim.FP16, fpsim.FP8_E4M3,
                                 fpsim.FP8_E5M2], ids=lambda f: f.name)
def test_nan_bit_patterns_equal_the_loops(fmt, monkeypatch):
    """A NaN sum's exact float64 pattern (sign, payload, quiet bit) is the reference loop's
    (_kahan_loop, _sequential_loop: a - b is a + (-b), an add of NaNs returns the first,
    quieted), on every route: each row alone (the inline Kahan steps, deterministic and
    stochastic, with short stretches so that the NaN skip runs), all rows at once (more
    than 16: the native float32 / float16 / bfloat16 route in nearest even without flags),
    with and without flags, every mode. The 'wide' order's native accumulator against its
    loop (flags: no native route)."""
    monkeypatch.setattr(reductions, "_NAN_TRY", 16)
    X = _nan_rows(fmt)
    assert X.shape[0] > reductions._SCALAR_ROWS
    for mode in [*MODES, "stochastic"]:
        for rows in [X[i:i + 1] for i in range(len(X))] + [X]:
            for want_flags in (False, True):
                for order, loop in (("kahan", reductions._kahan_loop),
                                    ("sequential", reductions._sequential_loop)):
                    g_ref, g = np.random.default_rng(4), np.random.default_rng(4)
                    c = fpsim.arithmetic.context(fmt, mode, rng=g_ref, flags=want_flags)
                    acc = reductions._Acc(c, rows.shape[0])
                    want = loop(fpsim.arithmetic.convert_operand(rows, c)[0], acc)
                    got = fpsim.sum(rows, fmt, axis=1, order=order, rounding=mode, rng=g,
                                    flags=want_flags)
                    got = got[0] if want_flags else got
                    assert np.array_equal(np.asarray(got).view(np.uint64),
                                          want.view(np.uint64)), (order, mode, want_flags)
                    assert _same_state(g, g_ref), (order, mode)  # the skip's draws
        if mode != "stochastic":
            for acc_fmt in ("fp32", "bf16", "fp16"):
                plain = fpsim.sum(X, fmt, axis=1, order="wide", accumulator=acc_fmt,
                                  rounding=mode)
                loop = fpsim.sum(X, fmt, axis=1, order="wide", accumulator=acc_fmt,
                                 rounding=mode, flags=True)[0]
                assert np.array_equal(plain.view(np.uint64), loop.view(np.uint64)), acc_fmt


def _quiet(v: float) -> int:
    return int(np.float64(v).view(np.uint64)) | (1 << 51)


def _pairwise_first_nan(xs: list[float]) -> float | None:
    """The NaN a sum of finite values and NaNs takes in the pairwise tree as the module
    docstring draws it, where every add returns its first NaN operand: the first NaN leaf
    in the tree's operand order (runs under 8 in order; eight strided partial sums, then
    the leftovers; halves split at n//2 - (n//2) % 8 past 128)."""
    def first(vals):
        return next((v for v in vals if v is not None and v != v), None)

    n = len(xs)
    if n < 8:
        return first(xs)
    if n > 128:
        n2 = n // 2 - (n // 2) % 8
        return first([_pairwise_first_nan(xs[:n2]), _pairwise_first_nan(xs[n2:])])
    m = n - n % 8
    return first([first(xs[j:m:8]) for j in range(8)] + xs[m:])


@pytest.mark.parametrize("fmt", [fpsim.FP32, fpsim.BF16, fpsim.FP16, fpsim.FP8_E4M3,
                                 fpsim.FP8_E5M2], ids=lambda f: f.name)
@pytest.mark.parametrize("rows", [1, 5, 64])
def test_a_nan_sum_is_its_first_nan_quieted_under_any_numpy(fmt, rows):
    """The NaN rule (rounding.scalar.nan_of: an add returns its first NaN operand, quieted;
    inf - inf the canonical quiet NaN) makes a sum of finite values and NaNs its first NaN
    value, quieted, in the sequential, Kahan (its y, t and c all carry it) and 'wide'
    orders, and the first NaN leaf of the pairwise tree, on every route (one row: the
    inline steps; five: the Python floats; 64: the vectorised loop and native routes,
    where NumPy 2.2's float64 add returned the *second* NaN of long arrays and 2.4 the
    first: this runs under both in CI); a dot product of those rows with ones (NaNs under
    the first NaNs: products of two NaNs) too. Computed here from the patterns alone; a
    row whose infinities cancel before any NaN is the canonical NaN."""
    rng = np.random.default_rng(5)
    n = 150  # past the pairwise order's 128-value split
    pats = rng.integers(1, 1 << 50, size=(rows, 2), dtype=np.uint64)
    signs = rng.integers(0, 2, size=(rows, 2)).astype(np.uint64) << np.uint64(63)
    nans = (pats | signs | np.uint64(0x7FF0000000000000)).view(np.float64)  # some signalling
    X = np.asarray(fpsim.round(rng.standard_normal((rows, n)) * 0.25, fmt))
    where = np.sort(rng.choice(n, size=(rows, 2), replace=True), axis=1)
    r = np.arange(rows)
    X[r, where[:, 1]] = nans[:, 1]
    X[r, where[:, 0]] = nans[:, 0]  # the first NaN (where both fall on one place, this one)
    want = np.array([_quiet(v) for v in nans[:, 0]], dtype=np.uint64)
    ones = np.ones_like(X)
    ones[r, where[:, 0]] = nans[::-1, 1]  # other NaNs under X's first ones
    want_pairwise = np.array([_quiet(_pairwise_first_nan(row)) for row in X.tolist()],
                             dtype=np.uint64)
    cancel = None
    if fmt.has_infinity:  # inf, -inf, then a NaN: the invalid add's canonical NaN comes first
        cancel = X[:1].copy()
        cancel[0, :3] = [np.inf, -np.inf, nans[0, 0]]
    for mode in [*MODES, "stochastic"]:
        for order in ("sequential", "pairwise", "kahan", "wide"):
            for flags in (False, True):
                kw = dict(order=order, rounding=mode, rng=np.random.default_rng(1), flags=flags)
                got = fpsim.sum(X, fmt, axis=1, **kw)
                got = np.asarray(got[0] if flags else got, np.float64)
                w = want_pairwise if order == "pairwise" else want
                assert np.array_equal(got.view(np.uint64), w), (order, mode, flags)
                kw["rng"] = np.random.default_rng(1)
                got = fpsim.dot(X, ones, fmt, **kw)  # NaN * NaN: the first, X's
                got = np.asarray(got[0] if flags else got, np.float64)
                assert np.array_equal(got.view(np.uint64), w), ("dot", order, mode, flags)
                if cancel is not None and order != "pairwise":
                    c = fpsim.sum(cancel, fmt, axis=1, **kw)
                    c = np.asarray(c[0] if flags else c, np.float64)
                    assert int(c.view(np.uint64)[0]) == 0x7FF8000000000000, (order, mode)
