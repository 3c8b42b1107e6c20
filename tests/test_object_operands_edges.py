"""Object-array operands at their edges (beside tests/test_object_operands.py).

- A Decimal far beyond every format (``Decimal('1e-999999999')``) rounds at once, alone, in an
  object array and in arithmetic, as a Decimal just past 10**+-1000 does (exact path), in every
  mode, flags and stochastic draws included; it used to build a billion-digit integer.
- A list of integers NumPy turns into float64 (``[2**53 + 1, 0.5]``, ``[2**63 + 1, -1]``)
  is rounded element by element from the integers, not from NumPy's rounded floats; a list
  NumPy holds exactly keeps the float path (same stochastic draws as its array).
- fpsim.sum / fpsim.dot take object arrays through convert_operand: checked against MPFR
  (gmpy2: each element read exactly, rounded to the format, then the sequential sum / dot in
  the format) and against the float path on the converted operands (every order and mode,
  flags and generator state); dot names the operand (a / b) whose element is not a number.

References: MPFR via gmpy2 (subnormalized contexts of fp16 / bf16 / fp32), exact Fractions.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

import fpsim

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd", "stochastic")
# MPFR contexts of the formats: precision p, exponents of m * 2**e with m in [1/2, 1)
MPFR = {"fp16": (11, -23, 16), "bf16": (8, -132, 128), "fp32": (24, -148, 128)}
MPFR_MODES = {"nearest_even": gmpy2.RoundToNearest, "toward_zero": gmpy2.RoundToZero,
              "up": gmpy2.RoundUp, "down": gmpy2.RoundDown}


def _ctx(fmt, mode="nearest_even"):
    p, emin, emax = MPFR[fmt]
    return gmpy2.context(precision=p, emin=emin, emax=emax, subnormalize=True,
                         round=MPFR_MODES[mode])


def _mpfr(v):
    """v read exactly and rounded once in the current context."""
    if isinstance(v, float):
        return gmpy2.mpfr(v)
    q = Fraction(v)
    return gmpy2.mpfr(gmpy2.mpq(q.numerator, q.denominator))


def _bits(v):
    return np.asarray(v, dtype=np.float64).view(np.uint64).tolist()


# -- Decimals far beyond every format ---------------------------------------------------------

FAR = ["1e-999999999", "-1e-999999999", "1e999999999", "-1e999999999", "7e-1001",
       "-3.5e1001"]
# the same values at 10**+-1000: the exact path (Fraction split) still takes them, so the far
# ones' stand-in is checked against exact rounding (10**+-1001 would take the stand-in too)
NEAR = {"1e-999999999": "1e-1000", "-1e-999999999": "-1e-1000", "1e999999999": "1e1000",
        "-1e999999999": "-1e1000", "7e-1001": "7e-1000", "-3.5e1001": "-3.5e1000"}


def test_far_decimals_round_at_once():
    # in a subprocess: before the fix this built 10**999999999 (no answer in minutes)
    code = (
        "from decimal import Decimal; import numpy as np, fpsim\n"
        "x = np.array([Decimal('1e-999999999'), Decimal('-1e999999999')], dtype=object)\n"
        "v = fpsim.round(x, 'fp16', 'up').tolist() + [float(fpsim.round(x[0], 'bf16', 'up')),"
        " float(fpsim.add(Decimal('-1e999999999'), 1.0, 'fp16', 'toward_zero'))]\n"
        "print(*(float(t).hex() for t in v))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    # rounding up: a tiny positive gives the smallest subnormal, a huge negative -max (IEEE
    # overflow toward +inf); operands convert by nearest even: -1e999999999 reads as -inf,
    # whatever the op's mode
    want = [fpsim.FP16.smallest_subnormal, -fpsim.FP16.max, fpsim.BF16.smallest_subnormal,
            -math.inf]
    assert [float.fromhex(t) for t in out.stdout.split()] == want


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2fnuz", "fp4_e2m1",
                                 "fp32", "fp64"])
def test_far_decimals_round_as_near_ones(fmt):
    far = [Decimal(s) for s in FAR]
    near = [Decimal(NEAR[s]) for s in FAR]  # split exactly: 10**+-1000 is cheap
    assert all(abs(d.adjusted()) <= fpsim.rounding.exact._DECIMAL_FAR < abs(Decimal(s).adjusted())
               for d, s in zip(near, FAR, strict=True))
    arr_far, arr_near = (np.array(v + [None], dtype=object)[:-1] for v in (far, near))
    for mode in MODES:
        for sub in ("keep", "flush", "daz"):
            kw = dict(subnormals=sub, flags=True)
            g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
            a = fpsim.round(arr_far, fmt, mode, rng=g1, **kw)
            b = fpsim.round(arr_near, fmt, mode, rng=g2, **kw)
            assert _bits(a[0]) == _bits(b[0]) and a[1].tolist() == b[1].tolist()
            assert g1.bit_generator.state == g2.bit_generator.state
            for x, y in zip(far, near, strict=True):
                g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
                a = fpsim.round(x, fmt, mode, rng=g1, **kw)
                b = fpsim.round(y, fmt, mode, rng=g2, **kw)
                assert _bits(a[0]) == _bits(b[0]) and int(a[1]) == int(b[1]), (x, mode)
                assert g1.bit_generator.state == g2.bit_generator.state
                assert _bits(fpsim.rounding.round_rational(str(x), fmt, mode, rng=7)) == \
                    _bits(fpsim.rounding.round_rational(str(y), fmt, mode, rng=7))


def test_far_decimals_against_mpfr():
    for fmt in MPFR:
        for mode in MPFR_MODES:
            with _ctx(fmt, mode):
                # 10**+-1000 is past every format: MPFR's answer for it holds for any farther
                want = [float(_mpfr(Decimal(NEAR[s]))) for s in FAR]
            got = fpsim.round(np.array([Decimal(s) for s in FAR], dtype=object), fmt, mode)
            assert got.tolist() == want, (fmt, mode)
    # the signs of zero results
    r = fpsim.round(np.array([Decimal("-1e-999999999"), Decimal("1e-999999999")],
                             dtype=object), "fp16")
    assert np.signbit(r).tolist() == [True, False]


# -- lists of integers NumPy turns into floats --------------------------------------------------

LOSSY = [
    [2**53 + 1, 0.5],
    [2**63 + 1, -1],
    [np.int64(2**62 + 1), 0.5],
    [np.uint64(2**64 - 1), -1],
    [[2**53 + 3, 1.0], [0.25, -(2**60) - 1]],
    (2**61 + 7, 1e-300, float("nan")),
    # float64 makes bf16 / fp32 ties of these (2**54 + 2**46, 2**54 + 2**30), which nearest
    # even rounds down; the integers lie above the ties: the nearest-even conversion of an
    # arithmetic operand differs too (double rounding), not only the directed modes
    [2**54 + 2**46 + 1, 2**54 + 2**30 + 1, 0.5],
]


@pytest.mark.parametrize("x", LOSSY, ids=range(len(LOSSY)))
def test_lists_of_wide_integers_against_mpfr(x):
    flat = list(np.asarray(x, dtype=object).reshape(-1))
    for fmt in MPFR:
        for mode in MPFR_MODES:
            with _ctx(fmt, mode):
                want = [float(_mpfr(int(v) if isinstance(v, (int, np.integer)) else v))
                        for v in flat]
            got = fpsim.round(x, fmt, mode)
            assert got.shape == np.shape(x)
            np.testing.assert_array_equal(got.reshape(-1), want, err_msg=f"{fmt} {mode}")
            # operands of arithmetic: converted by nearest even, then the exact add of 0
            with _ctx(fmt):
                conv = [float(_mpfr(int(v) if isinstance(v, (int, np.integer)) else v))
                        for v in flat]
            np.testing.assert_array_equal(fpsim.add(x, 0.0, fmt, mode).reshape(-1), conv)
            np.testing.assert_array_equal(fpsim.mul(1.0, x, fmt, mode).reshape(-1), conv)


def _flat_ints(x) -> list:
    """x's elements in C order, integers as Python ints (read exactly by MPFR)."""
    return [int(v) if isinstance(v, (int, np.integer)) else v
            for v in np.asarray(x, dtype=object).reshape(-1)]


@pytest.mark.parametrize("x", LOSSY, ids=range(len(LOSSY)))
def test_sum_dot_of_lists_of_wide_integers_against_mpfr(x):
    # sum / dot convert their operands as arithmetic does (convert_operand): each element of
    # a list NumPy makes floats of is rounded once from the integer, then the sequential sum
    # (dot: the products by 1 are exact) in the mode
    flat = _flat_ints(x)
    for fmt in MPFR:
        with _ctx(fmt):
            conv = [_mpfr(v) for v in flat]
        for mode in MPFR_MODES:
            with _ctx(fmt, mode):
                acc = conv[0]
                for v in conv[1:]:
                    acc = acc + v
            want = float(acc)
            got = fpsim.sum(x, fmt, rounding=mode)
            np.testing.assert_array_equal(got, want, err_msg=f"sum {fmt} {mode}")
            elems = list(np.asarray(x, dtype=object).reshape(-1))  # x's own elements, a list
            got = fpsim.dot(elems, np.ones(len(elems)), fmt, rounding=mode)
            np.testing.assert_array_equal(got, want, err_msg=f"dot {fmt} {mode}")


def test_exact_lists_keep_the_array_path():
    # lists NumPy holds exactly (floats, small or exactly representable ints) round as their
    # arrays do: same values, flags and stochastic draws
    lists = [[0.1, -2.5, 1e-8, 2**60, 3], [[1, 2], [3.5, 1e300]], (2**62, np.float16(0.1)),
             [np.float16(6e-8), np.float16(1)], [True, 0.5], [2**53 + 1, 3]]
    for x in lists:
        arr = np.asarray(x)
        for fmt in ("fp16", "bf16", "fp8_e5m2"):
            for mode in ("nearest_even", "up", "stochastic"):
                g1, g2 = np.random.default_rng(11), np.random.default_rng(11)
                a = fpsim.round(x, fmt, mode, rng=g1, flags=True)
                b = fpsim.round(arr, fmt, mode, rng=g2, flags=True)
                assert _bits(a[0]) == _bits(b[0]) and a[1].tolist() == b[1].tolist()
                assert g1.bit_generator.state == g2.bit_generator.state
                g1, g2 = np.random.default_rng(11), np.random.default_rng(11)
                a = fpsim.add(x, 1 / 3, fmt, mode, rng=g1, flags=True)
                b = fpsim.add(arr, 1 / 3, fmt, mode, rng=g2, flags=True)
                assert _bits(a[0]) == _bits(b[0]) and a[1].tolist() == b[1].tolist()
                assert g1.bit_generator.state == g2.bit_generator.state


# -- sum and dot of object arrays -------------------------------------------------------------

def _element(rnd: random.Random):
    k = rnd.randrange(4)
    if k == 0:
        return Fraction(rnd.randint(-10**12, 10**12), rnd.randint(10**9, 10**11))
    if k == 1:
        return Decimal(f"{rnd.choice('-+')}{rnd.randint(1, 10**20)}e-{rnd.randint(15, 25)}")
    if k == 2:
        return rnd.choice([1, -1]) * rnd.randint(2**64, 2**66) // 2**60  # ints past 2**53
    return rnd.uniform(-300, 300)


def _objects(values):
    return np.array(list(values) + [None], dtype=object)[:-1]


@pytest.mark.parametrize("fmt", list(MPFR))
def test_sum_dot_of_object_arrays_against_mpfr(fmt):
    rnd = random.Random(fmt)
    for _ in range(25):
        n = rnd.randint(1, 40)
        xs = [_element(rnd) for _ in range(n)]
        ys = [_element(rnd) for _ in range(n)]
        with _ctx(fmt):
            cx, cy = [_mpfr(v) for v in xs], [_mpfr(v) for v in ys]
            acc, dacc = cx[0], cx[0] * cy[0]
            for a, b in zip(cx[1:], cy[1:], strict=True):
                acc, dacc = acc + a, dacc + a * b
        assert str(float(fpsim.sum(_objects(xs), fmt))) == str(float(acc))
        assert str(float(fpsim.dot(_objects(xs), _objects(ys), fmt))) == str(float(dacc))


def test_sum_dot_of_object_arrays_as_the_float_path():
    rnd = random.Random(2)
    for trial in range(6):
        xs = _objects(_element(rnd) for _ in range(30))
        ys = _objects(_element(rnd) for _ in range(30))
        for fmt in ("fp16", "bf16"):
            rx, ry = fpsim.round(xs, fmt), fpsim.round(ys, fmt)  # the silent conversion
            for order in ("sequential", "pairwise", "kahan", "wide"):
                for mode in ("nearest_even", "down", "stochastic"):
                    g = [np.random.default_rng(trial) for _ in range(4)]
                    a = fpsim.sum(xs, fmt, order=order, rounding=mode, rng=g[0], flags=True)
                    b = fpsim.sum(rx, fmt, order=order, rounding=mode, rng=g[1], flags=True)
                    c = fpsim.dot(xs, ys, fmt, order=order, rounding=mode, rng=g[2],
                                  flags=True)
                    d = fpsim.dot(rx, ry, fmt, order=order, rounding=mode, rng=g[3],
                                  flags=True)
                    for (u, fu), (v, fv) in ((a, b), (c, d)):
                        assert _bits(u) == _bits(v) and int(fu) == int(fv)
                    assert g[0].bit_generator.state == g[1].bit_generator.state
                    assert g[2].bit_generator.state == g[3].bit_generator.state
    a = np.array([[Fraction(1, 3), Decimal("0.1"), 2**70], [1, Fraction(-1, 7), 0.5]],
                 dtype=object)
    np.testing.assert_array_equal(fpsim.sum(a, "fp16", axis=0),
                                  fpsim.sum(fpsim.round(a, "fp16"), "fp16", axis=0))
    np.testing.assert_array_equal(fpsim.dot(a, a, "bf16", axis=1),
                                  fpsim.dot(fpsim.round(a, "bf16"), fpsim.round(a, "bf16"),
                                            "bf16", axis=1))


def test_sum_dot_name_the_operand_with_a_bad_element():
    with pytest.raises(TypeError, match=r"^b must hold real numbers: element \[1\] is a "
                                        r"NoneType"):
        fpsim.dot([1.0, 2.0], [Fraction(1), None], "fp16")
    with pytest.raises(TypeError, match=r"^a must hold real numbers: element \[0\] is a str"):
        fpsim.dot(["x", Fraction(1)], [1.0, 2.0], "fp16")
    with pytest.raises(TypeError, match=r"^x must hold real numbers: element \[1\] is a str"):
        fpsim.sum([Fraction(1), "x"], "fp16")


def test_ragged_and_junk_operands_are_refused_by_name():
    # the errors of as_float64 name the operand as the object path's do: arithmetic's a, b, c
    # (a ragged operand was NumPy's bare "inhomogeneous shape" ValueError), dot's a and b
    from tests.test_arithmetic_wide_operands import FUNCS, OPS

    ragged, junk = [[1.0, 2.0], [3.0]], np.array(["x", "y"])
    for op, n in OPS.items():
        for pos in range(n):
            for bad, err, text in ((ragged, ValueError, "be a number or a rectangular array"),
                                   (junk, TypeError, "hold real numbers")):
                args = [1.5] * n
                args[pos] = bad
                with pytest.raises(err, match=f"^operand {'abc'[pos]} must {text}"):
                    FUNCS[op](*args, "fp16")
    for bad, err, text in ((ragged, ValueError, "be a number or a rectangular array"),
                           (junk, TypeError, "hold real numbers")):
        with pytest.raises(err, match=f"^x must {text}"):
            fpsim.sum(bad, "fp16")
        with pytest.raises(err, match=f"^a must {text}"):
            fpsim.dot(bad, [1.0, 2.0], "fp16")
        with pytest.raises(err, match=f"^b must {text}"):
            fpsim.dot([1.0, 2.0], bad, "fp16")
