"""fpsim.reductions.sum / dot against independent references: NumPy's own float32 pairwise sum
and float16 / float32 / bfloat16 running sums (np.cumsum rounds every add), exact Fraction
arithmetic rounded by tests/exact.py, and hand-derived cases (bf16 stagnation at 256, Kahan
recovering an exact sum that sequential summation loses)."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.flags import FloatingPointTrap
from fpsim.reductions import dot
from fpsim.reductions import sum as fsum
from tests.exact import round_exact

ORDERS = ["sequential", "pairwise", "kahan", "wide"]


def _wide_range(rng, n, lo=-20, hi=20):
    return rng.standard_normal(n) * np.exp2(rng.integers(lo, hi, n))


# -- hand-derived -----------------------------------------------------------------------------


def test_bf16_sum_of_ones_stagnates_at_256():
    # 256 + 1 is halfway between the bf16 neighbours 256 and 258: ties to even keep 256
    assert float(fsum(np.ones(10000), "bf16")) == 256.0
    assert float(fsum(np.ones(1000), "bf16", order="kahan")) == 1000.0
    assert float(fsum(np.ones(1000), "bf16", order="pairwise")) == 1000.0
    # an accumulator stagnates just the same: wide sums in a bf16 accumulator stop at 256
    assert float(fsum(np.ones(1000), "fp16", order="wide", accumulator="bf16")) == 256.0
    assert float(fsum(np.ones(1000), "fp16", order="wide")) == 1000.0


def test_kahan_recovers_the_exact_sum():
    # fp16: 1 + 2**-11 is a tie (stays 1); Kahan carries the lost half ulp and adds 2**-10
    # every second step, landing exactly on 1 + 500 * 2**-10
    x = np.array([1.0] + [2.0**-11] * 1000)
    exact = 1 + 1000 * Fraction(1, 2**11)
    assert float(fsum(x, "fp16")) == 1.0
    assert Fraction(float(fsum(x, "fp16", order="kahan"))) == exact
    assert Fraction(float(fsum(x, "fp16", order="wide"))) == exact


def test_empty_and_single():
    assert float(fsum(np.array([]), "fp16")) == 0.0
    for order in ORDERS:
        v = fsum(np.array([-0.0]), "fp16", order=order)
        assert float(v) == 0.0 and np.signbit(v)
        assert float(fsum([0.1], "bf16", order=order)) == float(fpsim.round(0.1, "bf16"))


# -- NumPy's own rounding sums as references ---------------------------------------------------


_NUMPY_BLOCKS_REDUCTIONS = tuple(int(v) for v in np.__version__.split(".")[:2]) < (2, 3)


@pytest.mark.parametrize("n", [8, 9, 15, 16, 127, 128, 129, 200, 1000, 4099, 8192])
def test_pairwise_is_numpys_float32_tree(n):
    rng = np.random.default_rng(n)
    x = _wide_range(rng, n).astype(np.float32)
    # NumPy's blocked pairwise sum, every add rounded to float32: one tree up to 8192 values
    # under every NumPy (beyond: test_pairwise_beyond_numpys_buffer)
    want = np.sum(x)
    got = fsum(x, "fp32", order="pairwise")
    assert got == float(want)
    X = np.stack([x, x[::-1], -x])  # rows: vectorised over the kept axis
    np.testing.assert_array_equal(fsum(X, "fp32", axis=1, order="pairwise"), X.sum(axis=1))
    np.testing.assert_array_equal(fsum(X.T, "fp32", axis=0, order="pairwise"),
                                  X.sum(axis=1))


@pytest.mark.parametrize("n", [8193, 10007, 20011])
def test_pairwise_beyond_numpys_buffer(n):
    """Beyond 8192 values fpsim's pairwise stays one tree (its result is the same under every
    NumPy). NumPy >= 2.3 sums the same tree; NumPy < 2.3 sums each 8192-value buffer by that
    tree and adds the buffers' sums in order: both checked against the NumPy installed."""
    rng = np.random.default_rng(n)
    x = _wide_range(rng, n).astype(np.float32)
    got = fsum(x, "fp32", order="pairwise")
    if not _NUMPY_BLOCKS_REDUCTIONS:
        assert got == float(np.sum(x))
        return
    b = np.getbufsize()
    parts = [fsum(x[i:i + b], "fp32", order="pairwise") for i in range(0, n, b)]
    assert all(p == float(np.sum(x[i:i + b])) for p, i in zip(parts, range(0, n, b), strict=True))
    acc = np.float32(parts[0])
    for p in parts[1:]:
        acc = np.float32(acc + np.float32(p))
    assert acc == np.sum(x)  # the buffered form, rebuilt from fpsim's trees


@pytest.mark.parametrize("dtype,fmt", [(np.float32, "fp32"), (np.float16, "fp16"),
                                       (ml_dtypes.bfloat16, "bf16")])
def test_sequential_is_a_running_sum(dtype, fmt):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 500)).astype(dtype)
    want = np.cumsum(x, axis=1)[:, -1].astype(np.float64)  # one rounding per add
    np.testing.assert_array_equal(fsum(x, fmt, axis=1), want)
    np.testing.assert_array_equal(fsum(x.T, fmt, axis=0), want)


# -- exact rational references ----------------------------------------------------------------


def _rounder(fmt, mode):
    """x -> x rounded by the reference; infinities and NaN stay floats (IEEE arithmetic on
    them is float arithmetic), finite values are Fractions."""
    def r(x):
        if isinstance(x, float):
            return x
        v = round_exact(x, fmt, mode)[0]
        return Fraction(v) if np.isfinite(v) else v
    return r


def _plus(a, b):
    return float(a) + float(b) if isinstance(a, float) or isinstance(b, float) else a + b


def _ref_sequential(values, fmt, mode="nearest_even"):
    r = _rounder(fmt, mode)
    s = Fraction(float(values[0]))
    for v in values[1:]:
        s = r(_plus(s, Fraction(float(v))))
    return float(s)


def _ref_pairwise(values, fmt, mode="nearest_even"):
    """NumPy's pairwise_sum (numpy/_core/src/umath/loops_utils.h.src) on exact fractions,
    every add rounded by the reference."""
    r = _rounder(fmt, mode)

    def add(a, b):
        return r(_plus(a, b))

    def pw(v):
        n = len(v)
        if n < 8:
            s = v[0]
            for t in v[1:]:
                s = add(s, t)
            return s
        if n <= 128:
            acc = list(v[:8])
            i = 8
            while i < n - n % 8:
                acc = [add(acc[j], v[i + j]) for j in range(8)]
                i += 8
            res = add(add(add(acc[0], acc[1]), add(acc[2], acc[3])),
                      add(add(acc[4], acc[5]), add(acc[6], acc[7])))
            for t in v[i:]:
                res = add(res, t)
            return res
        n2 = n // 2
        n2 -= n2 % 8
        return add(pw(v[:n2]), pw(v[n2:]))

    return float(pw([Fraction(float(x)) for x in values]))


def _ref_kahan(values, fmt, mode="nearest_even"):
    r = _rounder(fmt, mode)

    def neg(x):
        return -x

    s, c = Fraction(float(values[0])), Fraction(0)
    for v in values[1:]:
        y = r(_plus(Fraction(float(v)), neg(c)))
        t = r(_plus(s, y))
        c = r(_plus(r(_plus(t, neg(s))), neg(y)))
        s = t
    return float(s)


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "odd"])
@pytest.mark.parametrize("fmt", [fpsim.BF16, fpsim.FP8_E5M2, fpsim.Format(11, 20)],
                         ids=lambda f: f.name)
def test_orders_against_fraction_references(fmt, mode):
    rng = np.random.default_rng(7)
    x = np.asarray(fpsim.round(_wide_range(rng, 300, -6, 6), fmt))
    for order, ref, k in [("sequential", _ref_sequential, 300),
                          ("pairwise", _ref_pairwise, 300), ("kahan", _ref_kahan, 60)]:
        got, want = fsum(x[:k], fmt, order=order, rounding=mode), ref(list(x[:k]), fmt, mode)
        assert got == want or (np.isnan(got) and np.isnan(want)), (order, got, want)


def test_wide_against_fraction_reference():
    rng = np.random.default_rng(11)
    x = np.asarray(fpsim.round(_wide_range(rng, 64, -8, 8), "e4m3"))
    exact = sum(Fraction(float(v)) for v in x)
    # every partial sum of 64 e4m3 values is an fp32 number: one rounding at the end
    assert fsum(x, "e4m3", order="wide") == round_exact(exact, fpsim.FP8_E4M3)[0]
    # bf16 accumulator: rounded per add (sequential reference), then once to e4m3
    acc = _ref_sequential(list(x), fpsim.BF16)
    assert fsum(x, "e4m3", order="wide", accumulator="bf16") == \
        round_exact(Fraction(acc), fpsim.FP8_E4M3)[0]
    a = np.asarray(fpsim.round(_wide_range(rng, 50, -4, 4), "fp16"))
    b = np.asarray(fpsim.round(_wide_range(rng, 50, -4, 4), "fp16"))
    products = [Fraction(float(u)) * Fraction(float(v)) for u, v in zip(a, b, strict=True)]
    s = Fraction(round_exact(products[0], fpsim.FP32)[0])  # an fma into the accumulator
    for p in products[1:]:
        s = Fraction(round_exact(s + p, fpsim.FP32)[0])
    assert dot(a, b, "fp16", order="wide") == round_exact(s, fpsim.FP16)[0]
    seq = [Fraction(round_exact(p, fpsim.FP16)[0]) for p in products]
    assert dot(a, b, "fp16") == _ref_sequential(seq, fpsim.FP16)
    assert dot(a, b, "fp16", order="pairwise") == _ref_pairwise(seq, fpsim.FP16)
    assert dot(a, b, "fp16", order="wide", accumulator="fp64") == \
        round_exact(sum(products), fpsim.FP16)[0]


# -- stochastic rounding, flags, shapes, errors -----------------------------------------------


def test_stochastic_sum_is_unbiased():
    # 2000 independent bf16 sums of 1000 ones (one per row); sequential RN stops at 256
    runs = fsum(np.ones((2000, 1000)), "bf16", axis=1, rounding="stochastic", rng=5)
    assert runs.shape == (2000,)
    bound = 6 * runs.std() / np.sqrt(runs.size)
    assert abs(runs.mean() - 1000) < bound
    assert runs.std() > 0


def test_flags_and_traps():
    v, f = fsum(np.array([[60000.0, 60000.0], [1.0, 2.0]]), "fp16", axis=1, flags=True)
    assert np.isinf(v[0]) and v[1] == 3.0
    assert f[0] == fpsim.Flags.OVERFLOW | fpsim.Flags.INEXACT and f[1] == 0
    with fpsim.flag_context() as ctx:
        fsum(np.array([[60000.0, 60000.0], [1.0, 2.0]]), "fp16", axis=1)
    assert ctx.counts[fpsim.Flags.OVERFLOW] == 1  # recorded once per reduction and element
    with pytest.raises(FloatingPointTrap, match="sum"):
        with fpsim.flag_context(trap="overflow"):
            fsum([60000.0, 60000.0], "fp16")
    _, f = dot([0.0, 1.0], [np.inf, 1.0], "bf16", order="wide", flags=True)
    assert f & fpsim.Flags.INVALID
    _, f = fsum(np.array([np.inf, -np.inf]), "bf16", flags=True)
    assert f == fpsim.Flags.INVALID


def test_shapes():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert fsum(x, "fp32").shape == ()
    np.testing.assert_array_equal(fsum(x, "fp32", axis=(0, 2)), x.sum(axis=(0, 2)))
    assert fsum(x, "fp32", axis=1, keepdims=True).shape == (2, 1, 4)
    np.testing.assert_array_equal(fsum(x, "fp32", axis=-1, order="pairwise"), x.sum(axis=-1))
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(dot(a, np.ones(4), "fp32"), a.sum(axis=1))
    np.testing.assert_array_equal(dot(a, a, "fp32", axis=0), (a * a).sum(axis=0))
    with pytest.raises(ValueError):
        dot(np.ones(3), np.ones(4), "fp32")


def test_empty_axes():
    assert fsum(np.ones((0, 5)), "fp16", axis=1).shape == (0,)
    np.testing.assert_array_equal(fsum(np.ones((2, 0)), "fp16", axis=1), [0.0, 0.0])
    np.testing.assert_array_equal(fsum([0.1, 0.2], "bf16", axis=()),
                                  fpsim.round([0.1, 0.2], "bf16"))


def test_errors():
    with pytest.raises(ValueError, match="nearest_even' only"):
        fsum(np.arange(1.0, 100.0) / 7, "fp32", order="wide", accumulator="fp64",
             rounding="up")
    with pytest.raises(ValueError, match="unknown order"):
        fsum([1.0], "fp16", order="random")
    with pytest.raises(ValueError, match="accumulator only applies"):
        fsum([1.0], "fp16", accumulator="fp32")
    with pytest.raises(TypeError, match="integer format"):
        fsum([1.0], "int8")
    with pytest.raises(ValueError, match="at least one axis"):
        dot(1.0, 2.0, "fp16")
    with pytest.raises(ValueError, match="exact products"):
        dot([1.0], [1.0], fpsim.Format(8, 30), order="wide")
