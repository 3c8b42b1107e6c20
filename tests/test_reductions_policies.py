"""One rounding rule on every path of every reduction (issue #32, items 2-4).

:func:`fpsim.sum` and :func:`fpsim.dot` choose a path by the number of outputs (at most 16
deterministic or stochastic outputs: Python-float steps; more: the loop vectorised across the
rows), by the format (native types) and by the order. Whatever the path, the result must be the
chain of public :func:`fpsim.add` / :func:`fpsim.sub` / :func:`fpsim.mul` calls the module
docstring describes (each of them checked against MPFR and exact Fractions in
tests/test_arith_mpfr.py), with the same policies: here for 1, 16 and 17 outputs (both sides
of the path boundary), every rounding mode, every subnormal policy, every order, formats with
0-bit mantissas (where "even" is the last bit of the exponent) and the usual ones. Also: an
axis tuple is a set, as in NumPy (its order is not the accumulation order).
"""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim.reductions import dot
from fpsim.reductions import sum as fsum

MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd", "stochastic"]
SUBNORMALS = ["keep", "flush", "daz", "flush_daz"]
ROWS = [1, 16, 17]  # the Python-float steps take at most 16 outputs
FORMATS = [
    fpsim.Format(2, 0, nan_encoding="fn"),  # issue #32's example: 1 + 2 is a tie
    fpsim.Format(3, 0, nan_encoding="none"),
    fpsim.Format(3, 0, bias=4, nan_encoding="fnuz"),  # an even bias
    fpsim.Format(4, 0, nan_encoding="fn"),
    fpsim.FP4_E2M1,
    fpsim.Format(3, 2, nan_encoding="fn"),  # fp6 e3m2
    fpsim.FP8_E4M3,
    fpsim.FP8_E5M2,
    fpsim.FP16,
    fpsim.BF16,
]


def _ids(fmt):
    return fmt.name


def _data(fmt, rows: int, n: int, seed: int) -> np.ndarray:
    """Values of fmt near the bottom of its range (subnormals, the smallest normals, sums that
    cross into and out of the subnormal range) with few significant bits (ties), both signs."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(-7, 8, (rows, n)).astype(np.float64)
    e = fmt.emin - fmt.mantissa_bits + rng.integers(0, fmt.mantissa_bits + 4, (rows, n))
    x = np.asarray(fpsim.round(np.ldexp(ints, e), fmt, overflow="saturate"))
    big = rng.random((rows, n)) < 0.2  # values from the whole range: overflow, stagnation
    vals = fpsim.all_values(fmt)
    x[big] = rng.choice(vals, int(big.sum()))
    return x


def _kw(mode, sub, seed):
    return {"rounding": mode, "subnormals": sub,
            "rng": np.random.default_rng(seed) if mode == "stochastic" else None}


# -- the references: chains of the public operations, vectorised over rows -------------------


def _ref_sequential(X, fmt, kw):
    s = X[:, 0]
    for k in range(1, X.shape[1]):
        s = np.asarray(fpsim.add(s, X[:, k], fmt, **kw))
    return s


def _ref_kahan(X, fmt, kw):
    s, comp = X[:, 0], np.zeros(X.shape[0])
    for k in range(1, X.shape[1]):
        y = fpsim.sub(X[:, k], comp, fmt, **kw)
        t = fpsim.add(s, y, fmt, **kw)
        comp = fpsim.sub(fpsim.sub(t, s, fmt, **kw), y, fmt, **kw)
        s = np.asarray(t)
    return s


def _ref_pairwise(X, fmt, kw):
    """The module docstring's pairwise tree, written as the recursion it describes."""
    n = X.shape[1]
    if n < 8:
        return _ref_sequential(X, fmt, kw)
    if n <= 128:
        # the eight strided partial sums side by side (stochastic rounding draws for the
        # eight at once, row by row, as the vectorised loop does), then the pairs
        body = n - n % 8
        r = X[:, :8]
        for k in range(8, body, 8):
            r = np.asarray(fpsim.add(r, X[:, k:k + 8], fmt, **kw))
        while r.shape[1] > 1:
            r = np.asarray(fpsim.add(r[:, 0::2], r[:, 1::2], fmt, **kw))
        s = r[:, 0]
        for k in range(body, n):
            s = np.asarray(fpsim.add(s, X[:, k], fmt, **kw))
        return s
    n2 = n // 2
    n2 -= n2 % 8
    left = _ref_pairwise(X[:, :n2], fmt, kw)
    right = _ref_pairwise(X[:, n2:], fmt, kw)
    return np.asarray(fpsim.add(left, right, fmt, **kw))


def _ref_wide(X, fmt, kw, acc_fmt):
    """The terms converted to fmt (DAZ reads its subnormals as zero), every add in the
    accumulator with the policy, one final rounding (of a result: the flush-to-zero part of
    the policy, not DAZ)."""
    if kw["subnormals"] in ("daz", "flush_daz"):
        X = np.where(np.abs(X) < fmt.smallest_normal, np.copysign(0.0, X), X)
    s = np.asarray(fpsim.round(X[:, 0], acc_fmt, **kw))  # as 0 + x would be
    s = _ref_sequential(np.column_stack([s, X[:, 1:]]), acc_fmt, kw)
    sub = kw["subnormals"]
    final = {**kw, "subnormals": "flush" if sub in ("flush", "flush_daz") else "keep"}
    return np.asarray(fpsim.round(s, fmt, **final))


REFS = {"sequential": _ref_sequential, "kahan": _ref_kahan, "pairwise": _ref_pairwise}


def _same(got, want, what):
    got, want = np.asarray(got, np.float64).reshape(-1), np.asarray(want, np.float64).reshape(-1)
    bad = ~((got == want) & (np.signbit(got) == np.signbit(want))
            | (np.isnan(got) & np.isnan(want)))
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ, e.g. row "
                           f"{int(np.flatnonzero(bad)[0])}: {got[bad][:3]} != {want[bad][:3]}")


# -- items 2 and 4: every path, mode and subnormal policy against the chain of adds ----------


@pytest.mark.parametrize("order", ["sequential", "kahan", "pairwise"])
@pytest.mark.parametrize("fmt", FORMATS, ids=_ids)
def test_sum_is_the_chain_of_adds(fmt, order):
    n = 19 if order == "pairwise" else 5  # pairwise: the strided partial sums and leftovers
    for rows in ROWS:
        for mode in MODES:
            for sub in SUBNORMALS:
                seed = rows * 1000 + MODES.index(mode) * 10 + SUBNORMALS.index(sub)
                X = _data(fmt, rows, n, seed)
                got = fsum(X, fmt, axis=1, order=order, **_kw(mode, sub, seed))
                want = REFS[order](X, fmt, _kw(mode, sub, seed))
                _same(got, want, f"{fmt.name} {order} {mode} {sub} rows={rows}")


@pytest.mark.parametrize("fmt", FORMATS, ids=_ids)
def test_wide_sum_is_the_chain_of_adds_in_the_accumulator(fmt):
    # a narrow accumulator (rounds on the way) and fp32 (exact adds for the small formats)
    for acc_fmt in ("bf16", "fp32"):
        for rows in ROWS:
            for mode in MODES[:-1]:  # stochastic: the exact adds draw nothing (documented)
                for sub in SUBNORMALS:
                    seed = rows * 1000 + MODES.index(mode) * 10 + SUBNORMALS.index(sub)
                    X = _data(fmt, rows, 6, seed)
                    if not np.array_equal(fpsim.round(X, acc_fmt), X):
                        continue  # the terms must be values of the accumulator here
                    got = fsum(X, fmt, axis=1, order="wide", accumulator=acc_fmt,
                               **_kw(mode, sub, seed))
                    want = _ref_wide(X, fmt, _kw(mode, sub, seed), acc_fmt)
                    _same(got, want, f"{fmt.name} wide({acc_fmt}) {mode} {sub} rows={rows}")


@pytest.mark.parametrize("order", ["sequential", "kahan", "pairwise"])
@pytest.mark.parametrize("fmt", [FORMATS[0], FORMATS[2], fpsim.FP8_E4M3, fpsim.FP16],
                         ids=_ids)
def test_dot_is_the_chain_of_muls_and_adds(fmt, order):
    n = 10 if order == "pairwise" else 4
    for rows in ROWS:
        for mode in MODES:
            for sub in SUBNORMALS:
                seed = rows * 1000 + MODES.index(mode) * 10 + SUBNORMALS.index(sub)
                A = _data(fmt, rows, n, seed)
                # B: small factors, so that products stay near A's (subnormal) range
                pick = np.random.default_rng(seed).choice([0.5, 0.75, 1.0, -1.5, 2.0], A.shape)
                B = np.asarray(fpsim.round(pick, fmt))
                got = dot(A, B, fmt, order=order, **_kw(mode, sub, seed))
                kw = _kw(mode, sub, seed)
                P = np.asarray(fpsim.mul(A, B, fmt, **kw))
                want = REFS[order](P, fmt, kw)
                _same(got, want, f"dot {fmt.name} {order} {mode} {sub} rows={rows}")


def test_issue_examples():
    e2m0 = fpsim.Format(2, 0, nan_encoding="fn")
    for rows in ROWS:  # 1 + 2 = 3 is a tie between 2 and 4: 2, as add and round give it
        assert fsum(np.tile([1.0, 2.0], (rows, 1)), e2m0, axis=1).tolist() == [2.0] * rows
    assert float(fpsim.add(1, 2, e2m0)) == float(fpsim.round(3, e2m0)) == 2.0
    t = 2.0**-14  # fp16's smallest normal: 1.5t - t leaves a subnormal running total
    x = [1.5 * t, -t, t]
    chain = fpsim.add(fpsim.add(x[0], x[1], "fp16", subnormals="daz"), x[2], "fp16",
                      subnormals="daz")
    assert float(chain) == t
    for order in ("sequential", "kahan", "pairwise"):
        assert float(fsum(x, "fp16", subnormals="daz", order=order)) == t


# -- item 3: an axis tuple is a set -----------------------------------------------------------


@pytest.mark.parametrize("order", ["sequential", "kahan", "pairwise", "wide"])
def test_axis_tuple_order_is_not_the_accumulation_order(order):
    rng = np.random.default_rng(7)
    x = np.asarray(fpsim.round(rng.standard_normal((3, 4, 5)) * 300, "bf16"))
    # the values of each output in C order over the reduced axes, summed along one axis
    want = fsum(x.transpose(1, 0, 2).reshape(4, 15), "bf16", axis=1, order=order)
    for axis in ((0, 2), (2, 0), (-1, 0), (0, -1)):
        np.testing.assert_array_equal(fsum(x, "bf16", axis=axis, order=order), want)
    full = fsum(x.reshape(-1), "bf16", order=order)
    for axis in (None, (0, 1, 2), (2, 1, 0), (1, 2, 0), (-1, -3, 1)):
        assert fsum(x, "bf16", axis=axis, order=order) == full
    assert fsum(x, "bf16", axis=(2, 0), keepdims=True, order=order).shape == (1, 4, 1)


def test_axis_tuple_example():
    x = np.array([[256.0, 1.0], [3.0, 1.0]])
    by_rows = fsum(x, "bf16", axis=(0, 1))
    assert fsum(x, "bf16", axis=(1, 0)) == by_rows == fsum(x, "bf16")


def test_repeated_axis_is_numpys_error():
    for axis in ((0, 0), (1, -1)):
        with pytest.raises(ValueError, match="repeated axis"):
            fsum(np.ones((2, 2)), "bf16", axis=axis)
        with pytest.raises(ValueError):
            np.sum(np.ones((2, 2)), axis=axis)
