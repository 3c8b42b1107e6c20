"""fpsim.rounding.eft against exact Fractions: TwoSum's and TwoProduct's pairs are the exact
sum and product, Veltkamp's halves are exact and of at most 26 bits."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fpsim.rounding.eft import split, two_prod, two_sum, two_sum_err


def _values(seed: int, n: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-400, 400, n))
    x[:8] = [0.0, -0.0, 1.0, -1.0, 2.0**-1074, 2.0**1000, 1 + 2.0**-52, -(2.0 - 2.0**-52)]
    return x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_sum_is_exact(seed):
    a, b = _values(seed), _values(seed + 10)[::-1].copy()
    s, e = two_sum(a, b)
    assert np.array_equal(s, a + b)
    assert np.array_equal(e, two_sum_err(a, b, s))
    for ai, bi, si, ei in zip(a, b, s, e, strict=True):
        assert Fraction(si) + Fraction(ei) == Fraction(ai) + Fraction(bi)


def _bits(x: float) -> int:
    m = Fraction(abs(x))
    if m == 0:
        return 0
    while m.denominator != 1:
        m *= 2
    n = m.numerator
    while n % 2 == 0:
        n //= 2
    return n.bit_length()


@pytest.mark.parametrize("seed", [0, 1])
def test_split_halves_are_exact_and_short(seed):
    x = _values(seed)
    x = x[np.abs(x) < 2.0**990]
    hi, lo = split(x)
    for xi, h, low in zip(x, hi, lo, strict=True):
        assert Fraction(h) + Fraction(low) == Fraction(xi)
        assert _bits(h) <= 26 and _bits(low) <= 26


@pytest.mark.parametrize("seed", [0, 1])
def test_two_prod_is_exact_without_overflow_or_underflow(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(3000) * np.exp2(rng.integers(-300, 300, 3000))
    b = rng.standard_normal(3000) * np.exp2(rng.integers(-300, 300, 3000))
    p, e = two_prod(a, b)
    assert np.array_equal(p, a * b)
    for ai, bi, pi, ei in zip(a, b, p, e, strict=True):
        assert Fraction(pi) + Fraction(ei) == Fraction(ai) * Fraction(bi)
