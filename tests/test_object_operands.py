"""Object arrays (and lists NumPy makes object arrays of) of exact numbers as operands.

A Fraction, a Decimal or a Python int of any size is rounded once, exactly, as a scalar
(issue 15); an object array of them must work as its elements do, in arithmetic (each element
converted to the format with one round-to-nearest-even, silently, then the operation rounded
once, with its flags) and in fpsim.round / fpsim.cast (each element rounded once in the mode).

Independent references:

- exact Fractions: each element's exact value rounded by tests/exact.py, then the IEEE
  operation of tests/test_arith_mpfr.py's Fraction reference (values and all flags), every
  deterministic mode, several policies;
- MPFR via gmpy2: each element read exactly as an ``mpq``, rounded to the format's precision
  and exponent range (subnormalized), then the operation in the mode (values);
- the scalar path: every element alone gives the same value and flags, bit for bit.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import gmpy2
import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import arithmetic
from tests.exact import MODES, round_exact
from tests.test_arith_mpfr import MPFR_MODES, _same, reference
from tests.test_arithmetic_wide_operands import FUNCS, OPS  # op -> arity, function

FORMATS = {
    "fp16": fpsim.FP16,
    "bf16": fpsim.BF16,
    "e4m3": fpsim.FP8_E4M3,
    "e5m2": fpsim.FP8_E5M2,
    "fp32": fpsim.FP32,
    "e11m20": fpsim.Format(11, 20),  # float64's exponent range: reaches below its subnormals
}
RNG = np.random.default_rng(1515)
INVALID = int(fpsim.Flags.INVALID)


def _pow2(k: int) -> Fraction:
    return Fraction(2) ** k


def _elements(fmt, n: int) -> list:
    """Exact numbers around the format's interesting places, mixed types: ties (of normals,
    of subnormals, of the overflow threshold) exactly and off by far less than float64 sees,
    subnormal-range values, values beyond float64 both ways, zeros of both signs, negatives,
    big ints, Decimals, plain floats, and random Fractions across the range."""
    m, emin, emax = fmt.mantissa_bits, fmt.emin, fmt.emax
    tie = 1 + _pow2(-m - 1)  # halfway between 1 and its successor: rounds to even
    tie_up = 1 + 3 * _pow2(-m - 1)  # halfway, the even neighbour above
    sub_half = _pow2(emin - m - 1)  # halfway between 0 and the smallest subnormal
    vmax = Fraction(fmt.max)
    edge = vmax + _pow2(emax - m - 1)  # the overflow threshold (a tie in IEEE formats)
    fixed = [
        Fraction(1, 3), -Fraction(2, 7), tie, -tie, tie_up, tie + _pow2(-1100),
        tie - _pow2(-1100), sub_half, 3 * sub_half, -3 * sub_half, sub_half + _pow2(-1100),
        Fraction(5, 7) * _pow2(emin - 1), _pow2(emin) - _pow2(emin - 80),
        Fraction(1, 2**1100), -Fraction(1, 2**1100), 10**400, -(10**400), edge,
        edge - _pow2(-1100), -edge, vmax,
        Decimal("0.1"), Decimal("-1e-400"), Decimal("1e400"), Decimal("-0"), Decimal("0"),
        Decimal("-2.5"), 0, 7, -3, 2**53 + 1, 2**64 + 1, -(3**100), Fraction(0),
        0.1, -0.0, math.inf, math.nan, np.float32(1 / 3), np.int64(-(2**62) - 1),
        Decimal("inf"),
    ]
    k = max(0, n - len(fixed))
    rnd = []
    for _ in range(k):
        num = int(RNG.integers(1, 1 << 62)) << 20 | int(RNG.integers(0, 1 << 20))
        den = int(RNG.integers(1, 1 << 62)) | 1
        e = int(RNG.integers(emin - m - 3, emax + 2))
        rnd.append(Fraction(num, den) * _pow2(e) * (1 if RNG.random() < 0.5 else -1))
    out = fixed + rnd
    return [out[i] for i in RNG.permutation(len(out))]


def _obj(values) -> np.ndarray:
    a = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # element by element: a list element stays one
        a[i] = v
    return a


def _exact(v):
    """(exact value as tests/exact.py reads it, negative_zero): a float for floats and
    infinities / NaN, else a Fraction."""
    if isinstance(v, Decimal):
        if not v.is_finite():
            return float(v), False
        return Fraction(v), v.is_signed()
    if isinstance(v, (float, np.floating)):
        return float(v), False
    return Fraction(int(v)) if isinstance(v, np.integer) else Fraction(v), False


def _converted(v, fmt, opts) -> float:
    """The element rounded once to fmt, nearest even, by the Fraction reference."""
    sub = opts.get("subnormals", "keep")
    x, negz = _exact(v)
    return round_exact(x, fmt, "nearest_even", overflow=opts.get("overflow", "inf"),
                       subnormals="daz" if sub in ("daz", "flush_daz") else "keep",
                       negative_zero=negz)[0]


def _columns(op, fmt, n):
    cols = [_obj(_elements(fmt, n)) for _ in range(OPS[op])]
    if op == "fma" and fmt.precision_bits > 26:
        pytest.skip("fma: formats of at most 26 precision bits")
    return cols


def _check(op, fmt, cols, modes, opts):
    keep = [c.copy() for c in cols]
    conv = [[_converted(v, fmt, opts) for v in col] for col in cols]
    for mode in modes:
        got, fl = FUNCS[op](*cols, fmt, mode, flags=True, **opts)
        assert got.shape == cols[0].shape and got.dtype == np.float64
        for i in range(got.size):
            want, wfl = reference(op, [c[i] for c in conv], fmt, mode, opts)
            assert _same(float(got[i]), want) and int(fl[i]) == wfl, (
                f"{op}{tuple(repr(c[i]) for c in cols)} in {fmt.name} {mode} {opts}: got "
                f"{float(got[i])!r} flags {int(fl[i]):#04x}, reference {want!r} {wfl:#04x}")
    for c, k in zip(cols, keep, strict=True):  # the inputs are not mutated
        assert all(x is y for x, y in zip(c, k, strict=True))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fkey", list(FORMATS))
def test_object_operands_against_fractions(fkey, op):
    fmt = FORMATS[fkey]
    _check(op, fmt, _columns(op, fmt, 48), MODES, {})


@pytest.mark.parametrize("opts", [{"overflow": "saturate"}, {"subnormals": "daz"},
                                  {"subnormals": "flush_daz"}, {"tininess": "before"}],
                         ids=lambda o: "-".join(o.values()))
@pytest.mark.parametrize("fkey", ["fp16", "e4m3", "e11m20"])
def test_object_operands_with_policies(fkey, opts):
    fmt = FORMATS[fkey]
    for op in OPS:
        _check(op, fmt, _columns(op, fmt, 44), ("nearest_even", "up", "toward_zero"), opts)


def _mpq(v):
    x, negz = _exact(v)
    return gmpy2.mpq(x.numerator, x.denominator) if isinstance(x, Fraction) else x


def _mpfr(op, xs, fmt, mode):
    base = dict(precision=fmt.precision_bits, emin=fmt.emin - fmt.mantissa_bits + 1,
                emax=fmt.emax + 1, subnormalize=True)
    with gmpy2.context(round=gmpy2.RoundToNearest, **base):
        v = [gmpy2.mpfr(_mpq(x)) for x in xs]
    with gmpy2.context(round=MPFR_MODES[mode], **base):
        r = {"add": lambda: v[0] + v[1], "sub": lambda: v[0] - v[1],
             "mul": lambda: v[0] * v[1], "div": lambda: v[0] / v[1],
             "sqrt": lambda: gmpy2.sqrt(v[0]), "fma": lambda: gmpy2.fma(*v)}[op]()
    return float(r)


def _mpfr_values(fmt, n):
    """Elements MPFR reads the same (no signed zeros: an mpq has none)."""
    return _obj([v for v in _elements(fmt, n)
                 if not (isinstance(v, Decimal) and v.is_zero()) and not (
                     isinstance(v, float) and v == 0)])


@pytest.mark.parametrize("fkey", ["fp16", "bf16", "fp32", "e5m2", "e11m20"])
def test_object_operands_against_mpfr(fkey):
    fmt = FORMATS[fkey]
    for op in OPS:
        if op == "fma" and fmt.precision_bits > 26:
            continue
        cols = [_mpfr_values(fmt, 30) for _ in range(OPS[op])]
        size = min(c.size for c in cols)
        cols = [c[:size] for c in cols]
        for mode in MPFR_MODES:
            got = FUNCS[op](*cols, fmt, mode)
            for i in range(size):
                want = _mpfr(op, [c[i] for c in cols], fmt, mode)
                assert _same(float(got[i]), want), (
                    f"{op}{tuple(repr(c[i]) for c in cols)} in {fmt.name} {mode}: got "
                    f"{float(got[i])!r}, MPFR {want!r}")


@pytest.mark.parametrize("fkey", ["fp16", "e4m3", "e11m20"])
def test_object_arrays_equal_their_elements_as_scalars(fkey):
    """Bit for bit, values and flags: the array path and the scalar path of each element."""
    fmt = FORMATS[fkey]
    for op in OPS:
        cols = [_obj(_elements(fmt, 24)) for _ in range(OPS[op])]
        size = min(c.size for c in cols)
        cols = [c[:size] for c in cols]
        for mode in ("nearest_even", "up"):
            got, fl = FUNCS[op](*cols, fmt, mode, flags=True)
            for i in range(size):
                v, f = FUNCS[op](*(c[i] for c in cols), fmt, mode, flags=True)
                assert (np.float64(got[i]).view(np.uint64) == np.float64(v).view(np.uint64)
                        and int(fl[i]) == int(f)), (op, mode, [c[i] for c in cols])


@pytest.mark.parametrize("fkey", list(FORMATS))
def test_round_and_cast_take_object_arrays(fkey):
    """fpsim.round / fpsim.cast: each element rounded once in the mode, values and flags as
    the Fraction reference and as the element alone; cast stores the same values."""
    fmt = FORMATS[fkey]
    a = _obj(_elements(fmt, 40))
    keep = a.copy()
    for mode in MODES:
        for opts in ({}, {"overflow": "saturate"}, {"subnormals": "flush"},
                     {"subnormals": "daz"}):
            got, fl = fpsim.round(a, fmt, mode, flags=True, **opts)
            for i, v in enumerate(a):
                x, negz = _exact(v)
                want, wfl = round_exact(x, fmt, mode, negative_zero=negz, **opts)
                assert _same(float(got[i]), want) and int(fl[i]) == wfl, (
                    f"round({v!r}, {fmt.name}, {mode}, {opts}): got {float(got[i])!r} "
                    f"{int(fl[i]):#04x}, reference {want!r} {wfl:#04x}")
                if mode in ("nearest_even", "down"):
                    sv, sf = fpsim.round(v, fmt, mode, flags=True, **opts)
                    assert (np.float64(sv).view(np.uint64) == got[i:i + 1].view(np.uint64)[0]
                            and int(sf) == int(fl[i])), (v, mode, opts)
    assert all(x is y for x, y in zip(a, keep, strict=True))
    if fmt.nan_encoding.value != "none":
        c = fpsim.cast(a, fmt, "up")
        assert c.dtype == fmt.storage_dtype and c.shape == a.shape
        ref = fpsim.cast(fpsim.round(a, fmt, "up"), fmt)
        assert np.array_equal(c.view(f"u{c.dtype.itemsize}"),
                              ref.view(f"u{ref.dtype.itemsize}"))


def test_broadcasting_shapes_lists_and_scalars():
    fmt = FORMATS["fp16"]
    a = _obj([Fraction(1, 3), 10**400, Decimal("-1e-400"), 2**70 + 1])
    b = np.array([[0.5], [-1.0], [2.0**-20]])
    got, fl = arithmetic.mul(a, b, fmt, "up", flags=True)
    assert got.shape == fl.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            want, wfl = reference("mul", [_converted(a[j], fmt, {}), float(b[i, 0])], fmt,
                                  "up", {})
            assert _same(float(got[i, j]), want) and int(fl[i, j]) == wfl
    # a nested list NumPy makes an object array of: the same as that array
    nested = [[Fraction(1, 3), 2**70 + 1], [Decimal("0.1"), -(10**400)]]
    arr = np.array(nested, dtype=object)
    for op in ("add", "div"):
        x = FUNCS[op](nested, 3, fmt, "down")
        y = FUNCS[op](arr, np.float64(3), fmt, "down")
        assert x.shape == (2, 2) and np.array_equal(x.view(np.uint64), y.view(np.uint64))
    assert fpsim.round(nested, fmt).shape == (2, 2)
    # a 0-d object array is a scalar, as the number itself
    z = arithmetic.add(np.array(Fraction(1, 3), dtype=object), 0.0, fmt)
    assert np.ndim(z) == 0 and float(z) == float(arithmetic.add(Fraction(1, 3), 0.0, fmt))
    # stochastic rounding: the object operands convert first (nearest even), then the same
    # draws as on the converted float64 operands
    conv = np.array([_converted(v, fmt, {}) for v in a])
    s1 = arithmetic.add(a, 1.0, fmt, "stochastic", rng=3)
    s2 = arithmetic.add(conv, 1.0, fmt, "stochastic", rng=3)
    assert np.array_equal(s1.view(np.uint64), s2.view(np.uint64))


@pytest.mark.parametrize("bad", ["0.5", None, 1 + 2j, b"1", [1, 2], object()],
                         ids=["str", "None", "complex", "bytes", "list", "object"])
def test_elements_that_are_not_numbers(bad):
    kind = type(bad).__name__
    arr = _obj([Fraction(1, 3), bad, 2])
    for op, n in OPS.items():
        for pos in range(n):
            args = [1.5] * n
            args[pos] = arr
            msg = rf"operand {'abc'[pos]} must hold real numbers: element \[1\] is a {kind}"
            with pytest.raises(TypeError, match=msg):
                FUNCS[op](*args, "fp16")
    grid = np.array([[Fraction(1), 2], [3, 4]], dtype=object)
    grid[1, 0] = bad
    for f in (fpsim.round, fpsim.cast):
        msg = rf"x must hold real numbers: element \[1, 0\] is a {kind}"
        with pytest.raises(TypeError, match=msg):
            f(grid, "bf16")


def test_signalling_nans_in_object_arrays_and_scalars():
    """A float64 signalling NaN element (and a Decimal sNaN) signals INVALID, as alone."""
    snan = np.array([0x7FF0000000000001], np.uint64).view(np.float64)[0]
    a = _obj([float(snan), Decimal("sNaN"), Decimal("nan"), 1.0])
    v, fl = arithmetic.add(a, 1.0, "fp16", flags=True)
    assert np.isnan(v[:3]).all() and fl.tolist() == [INVALID, INVALID, 0, 0]
    for x in (float(snan), Decimal("sNaN")):
        sv, sf = arithmetic.add(x, 1.0, "fp16", flags=True)
        assert math.isnan(sv) and int(sf) == INVALID
        rv, rf = fpsim.round(x, "fp16", flags=True)
        assert math.isnan(rv) and int(rf) == INVALID
    rv, rf = fpsim.round(a, "fp16", flags=True)
    assert rf.tolist() == [INVALID, INVALID, 0, 0]


IEEE_NAN_DTYPES = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                   ml_dtypes.float8_e5m2]


def _nans(dtype) -> tuple:
    """(signalling, quiet) NaN of a dtype with IEEE NaNs, built from its field widths: the
    exponent all ones; the quiet bit (the top mantissa bit) clear with the lowest bit set, or
    set."""
    fin = ml_dtypes.finfo(dtype)
    m, bits = fin.nmant, np.dtype(dtype).itemsize * 8
    exp = ((1 << (bits - 1 - m)) - 1) << m
    u = np.dtype(f"u{bits // 8}")
    return (np.array(exp | 1, u).view(dtype), np.array(exp | (1 << (m - 1)), u).view(dtype))


@pytest.mark.parametrize("dtype", IEEE_NAN_DTYPES, ids=lambda d: np.dtype(d).name)
def test_signalling_nans_of_every_ieee_dtype(dtype):
    """A signalling NaN operand of any IEEE-NaN dtype (0-d array, NumPy scalar, in an array)
    signals INVALID in every operation and operand position, as fpsim.round of it does, in
    its own format and in others; a quiet NaN signals nothing. (fp8_e5m2's sNaN was read as
    quiet by arithmetic while fpsim.round flagged it.)"""
    snan, qnan = _nans(dtype)
    own = fpsim.get_float_format(np.dtype(dtype))
    fmts = {"fp16", "bf16", "fp32"} | ({own.name} if own.mantissa_bits <= 50 else set())
    for fmt in sorted(fmts):  # (arithmetic takes formats of at most 50 mantissa bits)
        assert int(fpsim.round(snan, fmt, flags=True)[1]) == INVALID
        for nan, want in ((snan, INVALID), (qnan, 0)):
            for x in (nan, nan[()], nan.reshape(1)):
                for op, n in OPS.items():
                    for pos in range(n):
                        args = [1.5] * n
                        args[pos] = x
                        v, fl = FUNCS[op](*args, fmt, flags=True)
                        assert np.isnan(v).all() and (np.asarray(fl) == want).all(), (
                            op, pos, fmt, x)
            arr = np.array([1, 0, 2], dtype=dtype)
            arr[1] = nan
            assert int(fpsim.sum(arr, fmt, flags=True)[1]) == want
            assert int(fpsim.dot(arr, np.ones(3, dtype), fmt, flags=True)[1]) == want


def test_chunks_keep_every_element_in_its_place(monkeypatch):
    """Arrays longer than one chunk: the same values, flags, sNaN mask and error index as
    in one piece (the chunk size made tiny here)."""
    fmt = FORMATS["e11m20"]
    a = _obj(_elements(fmt, 23))
    snan = np.array([0x7FF0000000000001], np.uint64).view(np.float64)[0]
    a[17] = float(snan)
    whole = fpsim.round(a, fmt, "odd", flags=True)
    whole_op = arithmetic.mul(a, 3, fmt, "down", flags=True)
    monkeypatch.setattr(fpsim.rounding.kernel, "CHUNK", 5)
    parts = fpsim.round(a, fmt, "odd", flags=True)
    parts_op = arithmetic.mul(a, 3, fmt, "down", flags=True)
    for w, p in (whole, parts), (whole_op, parts_op):
        assert np.array_equal(w[0].view(np.uint64), p[0].view(np.uint64))
        assert np.array_equal(w[1], p[1])
    assert parts_op[1][17] == INVALID
    a[21] = "x"
    with pytest.raises(TypeError, match=r"element \[21\] is a str"):
        fpsim.round(a, fmt)


def test_stochastic_rounding_of_object_elements_has_the_exact_probability():
    """fpsim.round(..., "stochastic") on Fractions beyond float64's precision: each element
    rounds up with probability (x - down) / ulp, here 1/3 (4-sigma bounds, fixed seed)."""
    n = 12000
    x = 1 + Fraction(1, 3 * 2**10) + Fraction(1, 2**1100)  # 1/3 (+ a bit) of an fp16 ulp
    p = float((x - 1) * 2**10)
    got = fpsim.round(_obj([x] * n), "fp16", "stochastic", rng=11)
    assert set(got.tolist()) <= {1.0, 1.0 + 2**-10}
    up = float(np.mean(got > 1.0))
    assert abs(up - p) < 4 * math.sqrt(p * (1 - p) / n), (up, p)


def test_round_to_fp64_matches_python_true_division():
    """fp64 itself: CPython's int / int true division is correctly rounded (nearest even,
    gradual underflow), an independent reference for the exact split of each element."""
    fmt = fpsim.FP64
    vals = [v for v in _elements(FORMATS["e11m20"], 60)
            if not isinstance(v, (float, np.floating)) and not (
                isinstance(v, Decimal) and not v.is_finite())]
    vals += [Fraction(3, 2**1075), Fraction(2**1024 - 2**970), Fraction(2**1024 - 2**970 - 1),
             Fraction(1, 2**1075), Fraction(1, 2**1075) + Fraction(1, 2**1200), 2**64 - 1,
             np.uint64(2**64 - 1), np.longdouble(1) / 3]
    got = fpsim.round(_obj(vals), fmt)
    for g, v in zip(got, vals, strict=True):
        q, negz = _exact(v) if not isinstance(v, np.longdouble) else (
            Fraction(*v.as_integer_ratio()), False)
        try:
            want = q.numerator / q.denominator
        except OverflowError:
            want = math.inf if q > 0 else -math.inf
        if q == 0:
            want = -0.0 if negz else 0.0
        assert _same(float(g), want), (v, float(g), want)
