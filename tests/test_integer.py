"""fpsim.integer against exact references: Python integers and fractions.Fraction for the
conversions and the arithmetic, explicit int32 wrapping / per-group saturation in Python for dp4a
and the int8 GEMM, NumPy's own casts where NumPy defines the result, statistics for stochastic
rounding. (The TestFloat vectors are in test_testfloat_int.py.)"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import Flags, integer
from fpsim.integer import round_to_integral, to_int

INT_FMTS = ["int4", "uint4", "int8", "uint8", "int16", "int32"]
DET_MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"]


# ------------------------------------------------------------------ Python references
def ref_round(v: float, mode: str) -> int:
    """The integer ``mode`` picks for the finite float ``v``, by exact rational arithmetic."""
    q = Fraction(v)
    lo = math.floor(q)
    frac = q - lo
    half = Fraction(1, 2)
    if mode == "nearest_even":
        return lo + (frac > half or (frac == half and lo % 2 == 1))
    if mode == "nearest_away":
        return lo + (frac > half or (frac == half and q > 0))
    if mode == "toward_zero":
        return math.trunc(q)
    if mode == "up":
        return math.ceil(q)
    if mode == "down":
        return lo
    t = math.trunc(q)  # odd: truncate, then make it odd if that lost something
    return t + (1 if q > 0 else -1) if (t != q and t % 2 == 0) else t


def ref_policy(n: int, lo: int, hi: int, bits: int, policy: str) -> int:
    if lo <= n <= hi:
        return n
    if policy == "saturate":
        return min(max(n, lo), hi)
    if policy == "wrap":
        return (n - lo) % (1 << bits) + lo
    return lo if lo < 0 else hi  # "indefinite": the integer indefinite


def samples(rng: np.random.Generator) -> np.ndarray:
    """Boundaries of every format, ties, tiny and huge values, both signs."""
    parts = []
    for f in INT_FMTS:
        fmt = fpsim.get_int_format(f)
        parts.append(np.arange(fmt.min - 2, fmt.min + 2.25, 0.25))
        parts.append(np.arange(fmt.max - 2, fmt.max + 2.25, 0.25))
    parts.append(np.arange(-6, 6.25, 0.25))
    parts.append(rng.integers(-(2**40), 2**40, 300) + rng.choice([0, 0.25, 0.5, 0.75], 300))
    parts.append(rng.standard_normal(400) * 10.0 ** rng.integers(-3, 12, 400))
    parts.append(np.ldexp(rng.random(300) + 0.5, rng.integers(-60, 1023, 300))
                 * rng.choice([-1, 1], 300))
    parts.append(np.array([0.0, -0.0, 5e-324, -5e-324, 0.49999999999999994, -0.5000000000000001,
                           2.0**52 + 1, 2.0**53, 2.0**63, -(2.0**63), 2.0**64, 2.0**64 + 2**12,
                           -(2.0**70 + 2**18), 3 * 2.0**62, -(3 * 2.0**62), 1.7e308, -1.7e308,
                           2.0**31 - 0.5, -(2.0**31) - 0.5, 2.0**31 - 1, 2.0**31]))
    return np.concatenate(parts)


_RNG = np.random.default_rng(20240601)
X = samples(_RNG)
REF = {m: [ref_round(float(v), m) for v in X] for m in DET_MODES}


# ------------------------------------------------------------------ to_int
@pytest.mark.parametrize("mode", DET_MODES)
@pytest.mark.parametrize("policy", ["saturate", "wrap", "indefinite"])
def test_to_int_against_fractions(mode, policy):
    for name in INT_FMTS:
        fmt = fpsim.get_int_format(name)
        v, f = to_int(X, name, mode, overflow=policy, flags=True)
        assert v.dtype == fmt.dtype
        want = [ref_policy(n, fmt.min, fmt.max, fmt.bits, policy) for n in REF[mode]]
        assert v.astype(np.int64).tolist() == want, name
        valid = np.array([fmt.min <= n <= fmt.max for n in REF[mode]])
        inexact = np.array([n != Fraction(float(x)) for n, x in zip(REF[mode], X, strict=True)])
        want_f = np.where(~valid, Flags.INVALID, np.where(inexact, Flags.INEXACT, 0))
        np.testing.assert_array_equal(f, want_f.astype(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_to_int_narrow_float_inputs(dtype):
    with np.errstate(over="ignore"):
        xs = X.astype(dtype)
    finite = np.isfinite(xs.astype(np.float64))
    xs = xs[finite]
    for mode in DET_MODES:
        refs = [ref_round(float(v), mode) for v in xs.astype(np.float64)]
        for name in ("int4", "uint8", "int32"):
            fmt = fpsim.get_int_format(name)
            for pol in ("saturate", "wrap", "indefinite"):
                v = to_int(xs, name, mode, overflow=pol)
                assert v.astype(np.int64).tolist() == [
                    ref_policy(n, fmt.min, fmt.max, fmt.bits, pol) for n in refs]


def test_to_int_specials_and_policies():
    x = np.array([np.nan, np.inf, -np.inf, -np.nan])
    for name in INT_FMTS:
        fmt = fpsim.get_int_format(name)
        v, f = to_int(x, name, flags=True)
        assert v.astype(np.int64).tolist() == [0, fmt.max, fmt.min, 0]
        assert (f == Flags.INVALID).all()
        v, f = to_int(x, name, overflow="wrap", flags=True)
        assert v.astype(np.int64).tolist() == [0, 0, 0, 0] and (f == Flags.INVALID).all()
        v = to_int(x, name, overflow="indefinite")
        indefinite = fmt.min if fmt.signed else fmt.max
        assert v.astype(np.int64).tolist() == [indefinite] * 4


def test_to_int_matches_numpy_where_numpy_defines_it():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1e15, 1e15, 20_000)
    # NumPy: float64 -> int64 truncates; int64 -> int8 wraps
    np.testing.assert_array_equal(to_int(x, "int8", "toward_zero", overflow="wrap"),
                                  np.trunc(x).astype(np.int64).astype(np.int8))
    np.testing.assert_array_equal(to_int(x, "uint8", "toward_zero", overflow="wrap"),
                                  np.trunc(x).astype(np.int64).astype(np.uint8))
    y = rng.uniform(-200, 200, 20_000).astype(np.float32)
    np.testing.assert_array_equal(to_int(y, "int8"),
                                  np.clip(np.rint(y), -128, 127).astype(np.int8))
    np.testing.assert_array_equal(to_int(y / 20, "int4"),
                                  np.clip(np.rint(y / 20), -8, 7).astype(ml_dtypes.int4))


def test_to_int_integer_inputs_exact():
    vals = [0, 1, -1, 127, 128, -128, -129, 255, 256, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63)]
    for name in INT_FMTS:
        fmt = fpsim.get_int_format(name)
        for pol in ("saturate", "wrap"):
            v, f = to_int(np.array(vals, np.int64), name, overflow=pol, flags=True)
            assert v.astype(np.int64).tolist() == [
                ref_policy(n, fmt.min, fmt.max, fmt.bits, pol) for n in vals]
            assert f.tolist() == [0 if fmt.min <= n <= fmt.max else Flags.INVALID for n in vals]
    big = np.array([2**64 - 1, 2**63, 5], np.uint64)
    assert to_int(big, "int8", overflow="wrap").tolist() == [-1, 0, 5]
    assert to_int(big, "int16").tolist() == [32767, 32767, 5]
    assert int(to_int(2**70 + 300, "int16", overflow="wrap")) == ref_policy(
        2**70 + 300, -(2**15), 2**15 - 1, 16, "wrap")
    assert int(to_int(-(2**70), "uint8")) == 0


def test_to_int_wide_formats():
    # bits > 32 and 64-bit formats: wrap and saturate on values beyond 2**63
    for fmt in (fpsim.IntFormat(64), fpsim.IntFormat(64, signed=False), fpsim.IntFormat(40),
                fpsim.IntFormat(12)):
        for pol in ("saturate", "wrap"):
            v = to_int(X, fmt, "nearest_even", overflow=pol)
            assert [int(e) for e in v] == [
                ref_policy(n, fmt.min, fmt.max, fmt.bits, pol) for n in REF["nearest_even"]]


def test_to_int_flag_context_and_scalars():
    with fpsim.flag_context() as ctx:
        v = to_int(2.5, "int8")
    assert v == 2 and isinstance(v, np.int8) and ctx.flags == Flags.INEXACT
    with pytest.raises(fpsim.FloatingPointTrap):
        with fpsim.flag_context(trap="invalid"):
            to_int([1.0, 1e3], "int8")


def test_stochastic_to_int_unbiased():
    n = 200_000
    for x in (0.3, -2.75, 126.6, 0.5):
        v = to_int(np.full(n, x), "int8", "stochastic", rng=123).astype(np.float64)
        assert set(np.unique(v)) <= {math.floor(x), math.ceil(x)}
        p = x - math.floor(x)
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(v.mean() - x) < 5 * sigma, x
    # exact integers never move
    assert (to_int(np.full(1000, 7.0), "int8", "stochastic", rng=1) == 7).all()
    # with r random bits the probability is floor(frac * 2**r) / 2**r (hardware truncation)
    v = to_int(np.full(n, 0.3), "int8", "stochastic", rng=5, random_bits=2).astype(float)
    p = math.floor(0.3 * 4) / 4
    assert abs(v.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
    v = to_int(np.full(n, 0.2), "int8", "stochastic", rng=5, random_bits=2)
    assert (v == 0).all()  # 0.2 * 4 < 1: the top 2 bits of the fraction are zero
    # reproducible from the seed
    a = to_int(np.full(100, 0.5), "int8", "stochastic", rng=9)
    b = to_int(np.full(100, 0.5), "int8", "stochastic", rng=np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ round_to_integral
def test_round_to_integral_signs_and_specials():
    assert np.signbit(round_to_integral(-0.25, "fp16"))
    assert float(round_to_integral(-0.25, "fp16", "down")) == -1.0
    s = round_to_integral(np.full(1000, -0.25), "fp16", "stochastic", rng=3)
    assert set(s.tolist()) == {-1.0, 0.0} and np.signbit(s[s == 0]).all()
    assert abs((s == -1).mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 1000)
    # fnuz formats have no -0
    assert not np.signbit(round_to_integral(-0.25, "fp8_e4m3fnuz"))
    out = round_to_integral([np.inf, -np.inf, np.nan], "bf16")
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])


def test_round_to_integral_against_fractions():
    for fmt in ("bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp4_e2m1"):
        vals = fpsim.all_values(fmt)
        for mode in DET_MODES:
            out, f = round_to_integral(vals, fmt, mode, exact=True, flags=True)
            want = [float(ref_round(float(v), mode)) for v in vals]
            assert out.tolist() == want, (fmt, mode)
            np.testing.assert_array_equal(f, np.where(out != vals, Flags.INEXACT, 0))


def test_round_to_integral_overflow_in_e2m3():
    # fp6_e2m3's top binade is [4, 7.5] in steps of 0.5: 7.5 rounds to 8, beyond max
    out, f = round_to_integral(7.5, "fp6_e2m3", flags=True)
    assert f & Flags.OVERFLOW
    out, f = round_to_integral(7.5, "fp6_e2m3", "toward_zero", flags=True)
    assert out == 7.0 and f == 0


# ------------------------------------------------------------------ arithmetic
def operands(fmt, seed, n=1500):
    """All pairs of boundary values, then random pairs (Python ints: any width)."""
    edge = [fmt.min, fmt.min + 1, -1, 0, 1, fmt.max - 1, fmt.max]
    edge = [e for e in edge if fmt.min <= e <= fmt.max]
    rnd = random.Random(seed)
    a = [x for x in edge for _ in edge] + [rnd.randint(fmt.min, fmt.max) for _ in range(n)]
    b = [y for _ in edge for y in edge] + [rnd.randint(fmt.min, fmt.max) for _ in range(n)]
    return a, b


@pytest.mark.parametrize("name", INT_FMTS + ["int40", "uint64"])
@pytest.mark.parametrize("policy", ["saturate", "wrap"])
def test_arithmetic_against_python_ints(name, policy):
    fmt = {"int40": fpsim.IntFormat(40), "uint64": fpsim.IntFormat(64, signed=False)}.get(
        name) or fpsim.get_int_format(name)
    a, b = operands(fmt, fmt.bits)
    a, b = np.array(a, fmt.dtype), np.array(b, fmt.dtype)
    for op, pyop in ((integer.add, int.__add__), (integer.sub, int.__sub__),
                     (integer.mul, int.__mul__)):
        out = op(a, b, fmt, overflow=policy)
        assert out.dtype == fmt.dtype
        want = [ref_policy(pyop(int(x), int(y)), fmt.min, fmt.max, fmt.bits, policy)
                for x, y in zip(a, b, strict=True)]
        assert [int(v) for v in out] == want, op.__name__


def test_arithmetic_scalars_and_python_lists():
    assert integer.add(100, 100) == 127 and isinstance(integer.add(100, 100), np.int8)
    assert integer.mul([3, -4], 50, "int8", "wrap").tolist() == [-106, 56]
    i4 = np.array([7, -8], ml_dtypes.int4)
    out = integer.add(i4, i4, "int4", "wrap")
    assert out.dtype == np.dtype(ml_dtypes.int4) and out.astype(int).tolist() == [-2, 0]


# ------------------------------------------------------------------ dp4a / int8_matmul
def wrap32(n: int) -> int:
    return (n + 2**31) % 2**32 - 2**31


def test_dp4a_against_python():
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (6, 20)).astype(np.int8)
    b = rng.integers(-128, 128, (6, 20)).astype(np.int8)
    c = rng.integers(-(2**31), 2**31, (6, 5))
    c[0] = 2**31 - 1
    c[1] = -(2**31)
    a[0] = b[0] = 127
    a[1], b[1] = -128, 127
    out = integer.dp4a(a, b, c)
    assert out.dtype == np.int32 and out.shape == (6, 5)
    for i in range(6):
        for j in range(5):
            s = int(c[i, j]) + sum(int(a[i, 4 * j + t]) * int(b[i, 4 * j + t]) for t in range(4))
            assert int(out[i, j]) == wrap32(s)
    # unsigned variant: uint8 operands are read as 0..255
    u = np.full(4, 255, np.uint8)
    assert integer.dp4a(u, u, 0).tolist() == [4 * 255 * 255]


def ref_matmul(A, B, C, bits=32, policy="wrap"):
    """Python: exact sums wrapped, or the accumulator clamped after every group of 4."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    M, K = A.shape
    N = B.shape[1]
    out = np.zeros((M, N), dtype=object)
    for i in range(M):
        for j in range(N):
            acc = int(C[i, j]) if C is not None else 0
            prods = [int(A[i, k]) * int(B[k, j]) for k in range(K)]
            if policy == "wrap":
                out[i, j] = (acc + sum(prods) - lo) % (1 << bits) + lo
            else:
                for g in range(0, K, 4):
                    acc = min(max(acc + sum(prods[g:g + 4]), lo), hi)
                out[i, j] = acc
    return out.astype(np.int64)


def test_int8_matmul_small_against_python():
    rng = np.random.default_rng(11)
    for M, K, N in ((7, 37, 5), (3, 4, 2), (1, 1, 1), (4, 1030, 3)):
        A = rng.integers(-128, 128, (M, K)).astype(np.int8)
        B = rng.integers(-128, 128, (K, N)).astype(np.int8)
        C = rng.integers(-(2**31), 2**31, (M, N))
        C[0, 0] = 2**31 - 5  # an overflow in the first group
        for pol in ("wrap", "saturate"):
            got = integer.int8_matmul(A, B, C, overflow=pol)
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, ref_matmul(A, B, C, 32, pol))
        np.testing.assert_array_equal(integer.int8_matmul(A, B), ref_matmul(A, B, None))
    # int16 accumulation, both policies
    A = rng.integers(-128, 128, (5, 24)).astype(np.int8)
    B = rng.integers(-128, 128, (24, 6)).astype(np.int8)
    C = rng.integers(-(2**15), 2**15, (5, 6))
    for pol in ("wrap", "saturate"):
        got = integer.int8_matmul(A, B, C, accumulate="int16", overflow=pol)
        assert got.dtype == np.int16
        np.testing.assert_array_equal(got, ref_matmul(A, B, C, 16, pol))


@pytest.mark.slow
def test_int8_matmul_int32_overflow_large_k():
    # K * 127 * 127 passes 2**31 after 133 145 products; the second half comes back down, so
    # sequential saturation, wrapping and the clamped exact sum all differ
    K = 300_000
    A = np.empty((2, K), np.int8)
    A[0] = 127
    A[1, : K // 2], A[1, K // 2:] = 127, -128
    B = np.full((K, 2), 127, np.int8)
    B[:, 1] = -128
    wrap = integer.int8_matmul(A, B)
    sat = integer.int8_matmul(A, B, overflow="saturate")
    np.testing.assert_array_equal(wrap, ref_matmul(A, B, None, 32, "wrap"))
    np.testing.assert_array_equal(sat, ref_matmul(A, B, None, 32, "saturate"))
    # the row that climbs then falls: saturate keeps max - descent, unlike the clamped sum
    assert int(sat[1, 0]) == 2**31 - 1 - 127 * 128 * (K // 2)
    assert int(wrap[1, 0]) == wrap32(127 * 127 * (K // 2) - 128 * 127 * (K // 2))


def test_int8_matmul_shapes_and_unsigned():
    rng = np.random.default_rng(3)
    A = rng.integers(-128, 128, (2, 3, 8)).astype(np.int8)
    B = rng.integers(-128, 128, (8, 4)).astype(np.int8)
    got = integer.int8_matmul(A, B)
    np.testing.assert_array_equal(got, np.matmul(A.astype(np.int64), B.astype(np.int64)))
    v = rng.integers(-128, 128, 8).astype(np.int8)
    assert int(integer.int8_matmul(v, v)) == int(np.dot(v.astype(np.int64), v.astype(np.int64)))
    U = rng.integers(0, 256, (3, 9)).astype(np.uint8)
    np.testing.assert_array_equal(integer.int8_matmul(U, B[:, :2].repeat(2, 0)[:9]),
                                  U.astype(np.int64) @ B[:, :2].repeat(2, 0)[:9].astype(np.int64))


# ------------------------------------------------------------------ bad input
def test_bad_input_errors():
    with pytest.raises(TypeError, match="floating-point format"):
        to_int([1.0], "fp16")
    with pytest.raises(TypeError, match="integer format"):
        round_to_integral([1.0], "int8")
    with pytest.raises(TypeError, match="floating-point format"):
        integer.add([1], [2], "bf16")
    with pytest.raises(ValueError, match="'saturate', 'wrap', 'indefinite'"):
        to_int([1.0], "int8", overflow="clip")
    with pytest.raises(ValueError, match="valid: 'saturate', 'wrap'$"):
        integer.add([1], [2], "int8", overflow="indefinite")
    with pytest.raises(ValueError, match="'saturate', 'wrap'"):
        integer.int8_matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), overflow="x")
    with pytest.raises(TypeError, match="must be integers"):
        integer.add(1.5, 2)
    with pytest.raises(TypeError, match="must be integers"):
        integer.mul(np.array([1.0]), np.array([2]))
    with pytest.raises(TypeError, match="bool"):
        integer.sub(True, 1)
    with pytest.raises(ValueError, match="outside int8"):
        integer.add(200, 1, "int8")
    with pytest.raises(ValueError, match="multiple of 4"):
        integer.dp4a(np.ones(6, np.int8), np.ones(6, np.int8))
    with pytest.raises(ValueError, match="same shape"):
        integer.dp4a(np.ones(8, np.int8), np.ones(4, np.int8))
    with pytest.raises(TypeError, match="must be integers"):
        integer.int8_matmul(np.ones((2, 2)), np.ones((2, 2), np.int8))
    with pytest.raises(ValueError, match="outside int8"):
        integer.int8_matmul(np.full((2, 2), 300), np.ones((2, 2), np.int8))
    with pytest.raises(ValueError, match="not one"):
        round_to_integral([0.1], "fp16")
    with pytest.raises(TypeError, match="complex"):
        to_int(1 + 2j, "int8")
    with pytest.raises(TypeError):
        to_int(np.array(["a"]), "int8")
    with pytest.raises(ValueError, match="random_bits"):
        to_int([0.5], "int8", "up", random_bits=8)
    for bad in (0, 64, np.int64(-1)):
        with pytest.raises(ValueError, match=r"random_bits must be an int in \[1, 63\]"):
            to_int([0.5], "int8", "stochastic", random_bits=bad)
    with pytest.raises(ValueError, match="rounding mode"):
        to_int([0.5], "int8", "sideways")


def test_dp4a_accumulator_must_broadcast_to_the_result():
    """c of another shape than the result's (..., k) is refused by name, never broadcast
    into a bigger result or a NumPy error (issue 15)."""
    a = np.arange(16, dtype=np.int8).reshape(2, 8)
    ref = (a.astype(np.int64) ** 2).reshape(2, 2, 4).sum(-1)  # exact int64 reference
    for c in (0, [1, 2], [[1], [2]], np.ones((2, 2), np.int32)):
        got = integer.dp4a(a, a, c)
        assert got.shape == (2, 2) and np.array_equal(got, ref + np.asarray(c))
    for c in ([1, 2, 3], np.zeros((3, 2), np.int32), np.zeros((2, 2, 1), np.int32)):
        with pytest.raises(ValueError, match=r"dp4a: c of shape .* result shape \(2, 2\)"):
            integer.dp4a(a, a, c)


def test_lists_numpy_would_round_are_refused():
    # a list mixing floats with integers float64 cannot hold: NumPy's array of it rounds the
    # integers (2**53 + 1 -> 2**53), a silent wrong number; fpsim.round reads such a list
    # exactly (fpsim.rounding.listed), to_int and round_to_integral refuse it by name
    lossy = ([2**53 + 1, 0.5], (2**54 + 2**30 + 1, 0.5), [[np.int64(2**62 + 1), 1.0], [2, 3]],
             [np.uint64(2**64 - 1), -1])
    for x in lossy:
        with pytest.raises(ValueError, match="to_int: x mixes floats with integers"):
            to_int(x, "int64")
        with pytest.raises(ValueError, match="round_to_integral takes values of fp32; some "
                                             "inputs are not even float64 values"):
            round_to_integral(x, "fp32")
    # lists NumPy holds exactly, and integers alone, keep their paths and values
    assert to_int([2**53 + 1, 3], "int64").tolist() == [2**53 + 1, 3]
    assert to_int([2**53, 0.5, -1.5], "int64").tolist() == [2**53, 0, -2]
    np.testing.assert_array_equal(round_to_integral([2.5, 2.0**53], "fp64"), [2.0, 2.0**53])
