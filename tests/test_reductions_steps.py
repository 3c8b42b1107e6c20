"""The sequential and Kahan orders where no native add applies (directed modes, round to odd,
fp8 / fp4 / wide-range formats, overflow / subnormal policies, flags), several outputs at
once, both paths (at most 16 outputs in a deterministic mode: the Python-float steps; more
outputs: the loop vectorised across them), against an independent reference: every step
rounded by exact Fractions (tests/test_arith_mpfr.py's IEEE reference built on
tests/exact.py), values and the OR of the flags per output. Also the slow element loops
(``_sequential_loop`` / ``_kahan_loop``) against the public ``sum`` on the same rows,
stochastic rounding included (same seed)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import fpsim
from fpsim import reductions
from tests.exact import MODES, round_exact
from tests.test_arith_mpfr import reference

FORMATS = [fpsim.FP16, fpsim.BF16, fpsim.FP32, fpsim.FP8_E4M3, fpsim.FP8_E5M2,
           fpsim.FP8_E4M3FNUZ, fpsim.FP4_E2M1, fpsim.Format(11, 20)]
OPTIONS = [{}, {"overflow": "saturate"}, {"subnormals": "flush"}, {"subnormals": "daz"},
           {"subnormals": "flush_daz"}, {"tininess": "before"}]


def _rows(fmt, rows: int, n: int, seed: int) -> np.ndarray:
    """Values of fmt from the subnormals to the largest finite, with cancellations."""
    rng = np.random.default_rng(seed)
    e = rng.integers(fmt.emin - fmt.mantissa_bits, fmt.emax + 1, (rows, 1))
    x = rng.standard_normal((rows, n)) * 2.0 ** (e + rng.integers(-3, 3, (rows, n)))
    x = np.asarray(fpsim.round(x, fmt, overflow="saturate"))
    x[0, ::3] = fmt.max  # overflow on the way
    x[-1, :] = np.asarray(fpsim.round(np.full(n, 1.0), fmt))  # stagnation
    return x


def _ref_rows(X, fmt, mode, opts, order):
    out, flags = [], []
    for row in X:
        s, fl = float(row[0]), 0

        def op(name, a, b):
            nonlocal fl
            v, f = reference(name, [a, b], fmt, mode, opts)
            fl |= f
            return v

        if order == "sequential":
            for t in row[1:]:
                s = op("add", s, float(t))
        else:
            comp = 0.0
            for t in row[1:]:
                y = op("sub", float(t), comp)
                u = op("add", s, y)
                comp = op("sub", op("sub", u, s), y)
                s = u
        out.append(s)
        flags.append(fl)
    return np.array(out), np.array(flags, np.uint8)


def _same(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool((((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b)))
                .all())


@pytest.mark.parametrize("order, rows, n", [("sequential", 5, 40), ("kahan", 3, 20)])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_orders_step_by_step_against_fractions(fmt, order, rows, n):
    X = _rows(fmt, rows, n, seed=rows * n + fmt.bits)
    for mode in MODES:
        for opts in OPTIONS:
            got, gfl = fpsim.sum(X, fmt, axis=1, order=order, rounding=mode, flags=True,
                                 **opts)
            want, wfl = _ref_rows(X, fmt, mode, opts, order)
            assert _same(got, want), (order, mode, opts, got, want)
            assert np.array_equal(gfl, wfl), (order, mode, opts, gfl, wfl)
            got = fpsim.sum(X, fmt, axis=1, order=order, rounding=mode, **opts)
            assert _same(got, want), ("no flags", order, mode, opts, got, want)
            # 20 outputs: the loop vectorised across them
            got, gfl = fpsim.sum(np.repeat(X, 4, axis=0), fmt, axis=1, order=order,
                                 rounding=mode, flags=True, **opts)
            assert _same(got, np.repeat(want, 4)), ("vectorised", order, mode, opts)
            assert np.array_equal(gfl, np.repeat(wfl, 4)), ("vectorised", order, mode, opts)
            # the same along axis 0 of the transposed matrix (another memory layout)
            assert _same(fpsim.sum(X.T, fmt, axis=0, order=order, rounding=mode, **opts), want)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e5m2", "fp8_e4m3"])
@pytest.mark.parametrize("order", ["sequential", "kahan"])
def test_public_sum_equals_the_element_loops(fmt, order):
    """The element-by-element loops, one rounded op per column, kept as the reference."""
    f = fpsim.get_format(fmt)
    X = _rows(f, 6, 50, seed=3)
    loop = reductions._sequential_loop if order == "sequential" else reductions._kahan_loop
    for mode in MODES:
        seed = {"rng": 11} if mode == "stochastic" else {}
        c = fpsim.arithmetic.context(fmt, mode, flags=True, **seed)
        acc = reductions._Acc(c, X.shape[0])
        want = loop(X, acc)
        got, fl = fpsim.sum(X, fmt, axis=1, order=order, rounding=mode, flags=True, **seed)
        assert _same(got, want) and np.array_equal(fl, acc.fl), (mode, got, want)


def test_one_long_axis():
    """A full reduction of one long vector: one output, every step in sequence."""
    rng = np.random.default_rng(4)
    x = np.asarray(fpsim.round(rng.standard_normal(300), "bf16"))
    for mode in ("up", "toward_zero", "odd"):
        want, wfl = _ref_rows(x[None], fpsim.BF16, mode, {}, "sequential")
        got, fl = fpsim.sum(x, "bf16", rounding=mode, flags=True)
        assert _same(got, want[0]) and int(fl) == int(wfl[0])


DETERMINISTIC = [m for m in MODES if m != "stochastic"]
SCALAR_FORMATS = FORMATS[:-1] + [fpsim.FP6_E2M3, fpsim.FP6_E3M2, fpsim.FP8_E5M2FNUZ,
                                 fpsim.Format(9, 30), fpsim.Format(4, 3, subnormals=False)]


def _hard_rows(fmt, rows, n, seed):
    """Ties, exact cancellations (signed zeros), near-overflow and subnormal sums."""
    rng = np.random.default_rng(seed)
    x = _rows(fmt, rows, n, seed)
    half = np.asarray(fpsim.round(x * 2.0 ** -(fmt.mantissa_bits + 1), fmt))
    x[1, 1::2] = half[1, 1::2]  # below or at half an ulp of the running sum
    x[2, 1::2] = -x[2, 0::2][: x[2, 1::2].size]  # exact cancellations: signed zeros
    x[3] = fmt.smallest_subnormal * rng.integers(-3, 4, n)
    x[3, 0] = -0.0
    return x


@pytest.mark.parametrize("fmt", SCALAR_FORMATS, ids=lambda f: f.name)
def test_python_float_steps_equal_the_vectorised_loop(fmt):
    """Few rows (with or without flags) run on Python floats; many rows run the vectorised
    loop: the same values, zero signs included, in every deterministic mode and policy."""
    X = _hard_rows(fmt, 6, 30, seed=fmt.bits + fmt.mantissa_bits)
    for mode in DETERMINISTIC:
        for opts in [{}, {"overflow": "saturate"}, {"subnormals": "flush", "tininess": "before"}]:
            c = fpsim.arithmetic.context(fmt, mode, flags=True, **opts)
            for order, loop in (("sequential", reductions._sequential_loop),
                                ("kahan", reductions._kahan_loop)):
                assert reductions._scalar_ok(c, X.shape[0])
                acc = reductions._Acc(c, X.shape[0])
                want = loop(X, acc)
                got, fl = fpsim.sum(X, fmt, axis=1, order=order, rounding=mode, flags=True,
                                    **opts)
                assert _same(got, want), (order, mode, opts, got, want)
                assert np.array_equal(fl, acc.fl), (order, mode, opts, fl, acc.fl)
                got = fpsim.sum(X, fmt, axis=1, order=order, rounding=mode, **opts)
                assert _same(got, want), (order, mode, opts, got, want)


def test_python_float_steps_only_where_they_apply():
    c = fpsim.arithmetic.context("bf16", "up")
    assert reductions._scalar_ok(c, 16) and not reductions._scalar_ok(c, 17)
    assert reductions._scalar_ok(fpsim.arithmetic.context("bf16", "up", flags=True), 1)
    assert not reductions._scalar_ok(fpsim.arithmetic.context("bf16", "stochastic"), 1)
    assert not reductions._scalar_ok(fpsim.arithmetic.context(fpsim.Format(11, 20), "up"), 1)


@pytest.mark.parametrize("fmt", SCALAR_FORMATS, ids=lambda f: f.name)
def test_python_float_steps_at_binade_edges(fmt):
    """a + b with a a power of two (or the largest finite, or the smallest normal) and b far
    below its last bit: the sum lies just below or above a binade edge, where the quantum
    changes. Pairs in groups of 16 rows (the Python-float path) against the vectorised loop."""
    tiny = [fmt.smallest_subnormal, fmt.smallest_normal, 2.0 ** (fmt.emin + 3)]
    big = [2.0 ** k for k in (fmt.emin, fmt.emin + 1, 0, 1, fmt.emax)] + [fmt.max]
    pairs = [(s1 * a, s2 * b) for a in big for b in tiny + [a * 2.0 ** -(fmt.mantissa_bits + 1),
                                                              a * 2.0 ** -(fmt.mantissa_bits + 2)]
             for s1 in (1, -1) for s2 in (1, -1)]
    X = np.asarray(fpsim.round(np.array(pairs), fmt, "toward_zero"))
    for mode in DETERMINISTIC:
        for opts in OPTIONS:
            c = fpsim.arithmetic.context(fmt, mode, flags=True, **opts)
            for i in range(0, len(X), 16):
                G = X[i:i + 16]
                acc = reductions._Acc(c, len(G))
                # the loop takes operands as sum converts them (daz: subnormal inputs are 0)
                want = reductions._sequential_loop(fpsim.arithmetic.convert_operand(G, c)[0], acc)
                got, fl = fpsim.sum(G, fmt, axis=1, rounding=mode, flags=True, **opts)
                assert _same(got, want), (mode, opts, G[~((got == want) | np.isnan(got))])
                assert np.array_equal(fl, acc.fl), (mode, opts, G[fl != acc.fl])


@pytest.mark.parametrize("fmt, acc", [("fp8_e4m3", "bf16"), ("fp8_e5m2", "fp16"),
                                      ("bf16", "bf16"), ("fp16", "fp32"), ("fp16", "fp8_e5m2")])
def test_wide_accumulator_python_float_steps(fmt, acc):
    """order='wide' with a rounding accumulator: the exact products added on Python floats
    (<= 16 outputs) equal the vectorised loop (20 outputs), values and flags, every
    deterministic mode; and the Fraction reference (an fma into the accumulator per term)."""
    f, fa = fpsim.get_format(fmt), fpsim.get_format(acc)
    rng = np.random.default_rng(fa.bits + f.bits)
    a = np.asarray(fpsim.round(rng.standard_normal((5, 40)) * 4.0, fmt, overflow="saturate"))
    b = np.asarray(fpsim.round(rng.standard_normal((5, 40)) * 4.0, fmt, overflow="saturate"))
    a[0, :5] = f.max  # overflow of the accumulator
    b[0, :5] = f.max
    for mode in DETERMINISTIC:
        for opts in OPTIONS[:3]:
            got, fl = fpsim.dot(a, b, fmt, order="wide", accumulator=acc, rounding=mode,
                                flags=True, **opts)
            big, bfl = fpsim.dot(np.repeat(a, 4, axis=0), np.repeat(b, 4, axis=0), fmt,
                                 order="wide", accumulator=acc, rounding=mode, flags=True,
                                 **opts)
            assert _same(got, big[::4]) and np.array_equal(fl, bfl[::4]), (mode, opts)
            for i in range(1, 3):  # the Fraction reference, rows without specials
                v = round_exact(Fraction(float(a[i, 0])) * Fraction(float(b[i, 0])), fa, mode,
                                **opts)[0]
                for x, y in zip(a[i, 1:], b[i, 1:], strict=True):
                    v = round_exact(Fraction(v) + Fraction(float(x)) * Fraction(float(y)), fa,
                                    mode, **opts)[0]
                want = round_exact(Fraction(v), f, mode, **opts)[0] if math.isfinite(v) else v
                assert _same(got[i], want), (mode, opts, i, got[i], want)
