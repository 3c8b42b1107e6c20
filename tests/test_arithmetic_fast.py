"""The arithmetic's shortcuts against the slow exact path and MPFR:

- round to nearest (either tie rule) without flags at p <= 25 rounds the float64 result of
  + - / sqrt without its error term (innocuous double rounding, ``_float64_result_enough``);
  with ``flags=True`` the error term is kept, so that path is the reference here, and MPFR
  (gmpy2, the format's precision and exponent range, subnormalize) is the independent one;
- float32 / float16 operands are rounded to the format as they are (no float64 copy first).

Operands: random significands across a few binades (cancellation, ties and sticky bits in
sums, exact and near-midpoint quotients), subnormals and squares of format values and their
neighbours for sqrt; p = 25 (the limit) and p = 26 (beyond it: the shortcut is off)."""

from __future__ import annotations

import gmpy2
import numpy as np
import pytest

import fpsim
from fpsim import arithmetic
from fpsim.formats import Format, NaNEncoding
from fpsim.modes import Rounding
from fpsim.rounding.native import fma32_odd

FORMATS = {"fp16": fpsim.FP16, "bf16": fpsim.BF16, "e4m3": fpsim.FP8_E4M3, "e5m2": fpsim.FP8_E5M2,
           "e5m7": Format(5, 7), "e8m24 (p = 25)": Format(8, 24), "e6m3": Format(6, 3)}
OPS = ["add", "sub", "div", "sqrt"]


def operands(fmt: Format, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = fmt.mantissa_bits

    def values(k: int) -> np.ndarray:
        sig = rng.integers(1 << m, 1 << (m + 1), k).astype(np.float64)
        few = (rng.integers(1, 8, k) << rng.integers(0, m + 1, k)).astype(np.float64)
        sig = np.where(rng.random(k) < 0.3, few, sig)  # few bits: exact results, ties
        e = rng.integers(-3, 4, k)
        e = np.where(rng.random(k) < 0.1, fmt.emin - 1, e)  # subnormals
        v = np.ldexp(sig, e - m)
        return fpsim.round(np.where(rng.random(k) < 0.5, -v, v), fmt)

    return values(n), values(n)


def mpfr(op: str, a: float, b: float, fmt: Format) -> float:
    ctx = gmpy2.context(precision=fmt.precision_bits, emin=fmt.emin - fmt.mantissa_bits + 1,
                        emax=fmt.emax + 1, subnormalize=True, round=gmpy2.RoundToNearest)
    with ctx:
        x, y = gmpy2.mpfr(a), gmpy2.mpfr(b)
        r = {"add": lambda: x + y, "sub": lambda: x - y, "div": lambda: x / y,
             "mul": lambda: x * y,
             "sqrt": lambda: gmpy2.sqrt(x)}[op]()
    return float(r)


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    nan = np.isnan(want)
    return (np.isnan(got) == nan) & (nan | (got.view(np.uint64) == want.view(np.uint64)))


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize("op", OPS)
def test_nearest_without_error_term_equals_the_exact_path(name: str, op: str) -> None:
    fmt = FORMATS[name]
    a, b = operands(fmt, 4000, sum(map(ord, name + op)))  # a stable seed
    if op == "sqrt":
        sq = fpsim.round(np.abs(a) * (1 + 2.0 ** -(fmt.mantissa_bits + 1)), fmt)
        a = np.concatenate([np.abs(a), fpsim.round(sq * sq, fmt), np.abs(b)])
        args = (a,)
    else:
        args = (a, b)
    c = arithmetic.context(fmt)
    assert arithmetic._float64_result_enough(c)
    for mode in ("nearest_even", "nearest_away"):
        fast = getattr(fpsim, op)(*args, fmt, mode)
        slow, _ = getattr(fpsim, op)(*args, fmt, mode, flags=True)
        ok = same_bits(fast, slow)
        i = np.flatnonzero(~ok)
        assert ok.all(), f"{op} {name} {mode}: {i.size} differ, first at {args[0][i[0]]!r}"
    if fmt.nan_encoding is not NaNEncoding.IEEE:
        return  # MPFR's overflow is inf, which such a format does not have
    got = getattr(fpsim, op)(*args, fmt)
    sample = np.random.default_rng(3).choice(got.size, 300, replace=False)
    for i in sample:
        xs = [float(v[i]) for v in args]
        want = mpfr(op, xs[0], xs[-1], fmt)
        assert same_bits(np.array([got[i]]), np.array([want]))[0], (op, name, xs, got[i], want)


def test_the_shortcut_stops_at_25_bits_and_at_the_other_modes() -> None:
    assert not arithmetic._float64_result_enough(arithmetic.context(Format(8, 25)))
    assert not arithmetic._float64_result_enough(arithmetic.context("fp16", "up"))
    assert not arithmetic._float64_result_enough(arithmetic.context("fp16", flags=True))
    assert not arithmetic._float64_result_enough(arithmetic.context("fp16", "stochastic"))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("mode", ["nearest_even", "up"])
def test_narrow_operands_convert_as_their_float64_values(dtype, mode: str) -> None:
    """float32 / float16 operands (not values of the format) give what their exact float64
    values give, signalling NaNs included (INVALID)."""
    rng = np.random.default_rng(5)
    with np.errstate(over="ignore"):
        a = (rng.standard_normal(3000) * np.ldexp(1.0, rng.integers(-30, 30, 3000))).astype(dtype)
    b = a[::-1].copy()
    u = {np.float32: np.uint32, np.float16: np.uint16}[dtype]
    a[:3] = np.array([0x7F800001, 0x7FC00000, 0xFF800000] if dtype is np.float32 else
                     [0x7C01, 0x7E00, 0xFC00], dtype=u).view(dtype)
    with np.errstate(invalid="ignore"):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for fmt in ("fp8_e4m3", "e5m7", "fp16", "bf16"):
        for op in ("add", "mul", "div"):
            v, f = getattr(fpsim, op)(a, b, fmt, mode, flags=True)
            v64, f64 = getattr(fpsim, op)(a64, b64, fmt, mode, flags=True)
            assert same_bits(v, v64).all()
            assert f[0] & fpsim.Flags.INVALID
            np.testing.assert_array_equal(f[1:], f64[1:])
            fast = getattr(fpsim, op)(a, b, fmt, mode)
            assert same_bits(fast, v).all(), (fmt, op)


F32_FORMATS = {"fp16": fpsim.FP16, "e4m3": fpsim.FP8_E4M3, "e5m2": fpsim.FP8_E5M2,
               "e4m3fnuz": fpsim.FP8_E4M3FNUZ, "e5m7": Format(5, 7), "e3m1": Format(3, 1),
               "fp6_e3m2": fpsim.get_format("fp6_e3m2")}
MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"]


def _check_against_flags_path(op: str, args: tuple, fmt, mode: str, name: str) -> bool:
    """fpsim.<op> in ``mode`` equals its flags=True path (the float64 kernel) bit for bit,
    on the float32 operands and, to nearest even, on their float16 casts; returns whether
    the float32 path applied."""
    used = arithmetic._float32_path(op, args, arithmetic.context(fmt, mode)) is not None
    fast = getattr(fpsim, op)(*args, fmt, mode)
    slow, _ = getattr(fpsim, op)(*args, fmt, mode, flags=True)
    ok = same_bits(fast, slow)
    i = np.flatnonzero(~ok)
    assert ok.all(), (f"{op} {name} {mode}: {i.size} differ, first "
                      f"{[float(x[i[0]]) for x in args]}: {fast[i[0]]!r} vs {slow[i[0]]!r}")
    if mode == "nearest_even":
        with np.errstate(over="ignore"):
            h = tuple(x.astype(np.float16) for x in args)
        np.testing.assert_array_equal(getattr(fpsim, op)(*h, fmt, mode).view(np.uint64),
                                      getattr(fpsim, op)(*h, fmt, mode, flags=True)[0]
                                      .view(np.uint64))
    return used


@pytest.mark.parametrize("name", list(F32_FORMATS))
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt"])
def test_float32_path_equals_the_exact_path(monkeypatch, name: str, op: str) -> None:
    """float32 (and float16) operand arrays, values of the format or not, with zeros,
    infinities and NaNs in some chunks, every deterministic mode: the float32 path (where it
    applies) equals the flags=True path (the float64 kernel) and, in the IEEE formats to
    nearest even, MPFR."""
    monkeypatch.setattr(arithmetic, "_CHUNK", 512)
    fmt = F32_FORMATS[name]
    a, b = operands(fmt, 3000, sum(map(ord, name + op)))
    rng = np.random.default_rng(7)
    raw = (rng.standard_normal(3000) * 2.0 ** rng.integers(-12, 12, 3000))
    a = np.where(rng.random(3000) < 0.3, raw, a).astype(np.float32)  # not values of fmt
    b = b.astype(np.float32)
    b[::97] = 0.0
    a[2500:2510] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 1e-30, 3.0, 5.0]
    args = (np.abs(a),) if op == "sqrt" else (a, b)
    used = [_check_against_flags_path(op, args, fmt, mode, name) for mode in MODES]
    assert any(used), f"{op} {name}: the float32 path should apply to some mode"
    if fmt.nan_encoding is NaNEncoding.IEEE:
        got = getattr(fpsim, op)(*args, fmt)
        for i in np.random.default_rng(3).choice(got.size, 200, replace=False):
            xs = [float(fpsim.round(np.float64(v[i]), fmt)) for v in args]
            assert same_bits(np.array([got[i]]), np.array([mpfr(op, xs[0], xs[-1], fmt)]))[0]


def test_float32_path_scope() -> None:
    ok = arithmetic._float32_exact_enough
    assert ok("mul", fpsim.FP16, Rounding.UP)  # 22-bit products are exact in float32
    assert not ok("add", fpsim.FP16, Rounding.UP)  # needs the error term
    assert ok("div", fpsim.FP16, Rounding.NEAREST_EVEN)
    assert not ok("div", Format(5, 11), Rounding.NEAREST_EVEN)  # p = 12 > 11
    c = arithmetic.context("fp16", flags=True)
    a = np.ones(4, np.float32)
    assert arithmetic._float32_path("add", (a, a), c) is None
    assert arithmetic._float32_path("add", (a, a[::-1].copy().reshape(2, 2)),
                                    arithmetic.context("fp16")) is None


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e4m3fnuz", "fp6_e2m3", "fp4_e2m1"])
@pytest.mark.parametrize("mode", MODES)
def test_fma_exact_in_float64_equals_exact_fractions(name: str, mode: str) -> None:
    """Formats whose a * b + c is exact in float64 (plan.fma_exact: no TwoSum) against exact
    rational arithmetic rounded by tests/exact.py."""
    from fractions import Fraction

    from tests.exact import round_exact, same

    fmt = fpsim.get_format(name)
    assert arithmetic.plan_for(fmt).fma_exact
    rng = np.random.default_rng(11)
    v = fpsim.round(rng.standard_normal(3 * 600) * 2.0 ** rng.integers(-8, 8, 3 * 600), fmt,
                    "toward_zero", overflow="saturate").reshape(3, -1)
    got = fpsim.fma(v[0], v[1], v[2], fmt, mode)
    for x, y, z, g in zip(*v, got, strict=True):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        if exact == 0:
            continue  # the sign of an exact zero sum: tests/test_arith_mpfr.py
        want, _ = round_exact(exact, fmt, mode)
        assert same(float(g), want), (x, y, z, g, want)


@pytest.mark.parametrize("name", list(F32_FORMATS))
def test_float32_fma_equals_the_exact_path(monkeypatch, name: str) -> None:
    """fma on float32 (and float16) operand arrays by the float32 path (TwoSum in float32,
    rounded to odd at 24 bits, then to the format) equals the flags=True path (the float64
    kernel) in every deterministic mode: sums that cancel (exact zeros, their sign in mode
    down), near-midpoint and sticky sums, products and addends far apart, subnormal
    results, overflow, and chunks with infinities and NaNs; and MPFR's fma to nearest even."""
    monkeypatch.setattr(arithmetic, "_CHUNK", 512)
    fmt = F32_FORMATS[name]
    n = 4000
    a, b = operands(fmt, n, sum(map(ord, name + "fma")))
    c, d = operands(fmt, n, 5)
    rng = np.random.default_rng(9)
    with np.errstate(invalid="ignore", over="ignore"):  # (formats without inf: NaN)
        prod = fpsim.round(a * b, fmt, "toward_zero", overflow="saturate")
        # an addend far below the product (a tie of the product, or one just off it,
        # decided by the sticky tail that float32's 24 bits lose)
        tiny = fpsim.round(np.abs(a * b) * 2.0 ** -rng.integers(10, 40, n)
                           * rng.choice([-1.0, 1.0], n), fmt)
    c = np.where(rng.random(n) < 0.2, -prod, c)  # cancellation: exact zeros and tails
    c = np.where(rng.random(n) < 0.3, tiny, c)
    raw = rng.standard_normal(n) * 2.0 ** rng.integers(-12, 12, n)
    a = np.where(rng.random(n) < 0.2, raw, a).astype(np.float32)  # not values of fmt
    b, c = b.astype(np.float32), c.astype(np.float32)
    a[::89] = 0.0
    c[::101] = -0.0
    a[3500:3508] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 1e-30]
    b[3600:3603] = [np.inf, 0.0, np.nan]
    args = (a, b, c)
    for mode in MODES:
        assert _check_against_flags_path("fma", args, fmt, mode, name), f"{name} {mode}"
    if fmt.nan_encoding is NaNEncoding.IEEE:
        got = fpsim.fma(*args, fmt)
        ctx = gmpy2.context(precision=fmt.precision_bits, emin=fmt.emin - fmt.mantissa_bits + 1,
                            emax=fmt.emax + 1, subnormalize=True, round=gmpy2.RoundToNearest)
        for i in np.random.default_rng(3).choice(3400, 300, replace=False):
            xs = [gmpy2.mpfr(float(fpsim.round(np.float64(v[i]), fmt))) for v in args]
            with ctx:
                want = float(gmpy2.fma(*xs))
            assert same_bits(np.array([got[i]]), np.array([want]))[0], (name, i)


def test_float32_fma_bf16_equals_the_exact_path(monkeypatch) -> None:
    """bf16's fma by the float32 path (nearest even), chunk by chunk where every product is
    exact in float32 and no sum leaves it: chunks of values near 1, of tiny products (below
    2**-126: the general path), of huge ones (beyond float32: the general path), ties
    decided by a far tail, infinities and NaNs; against the flags path and MPFR."""
    monkeypatch.setattr(arithmetic, "_CHUNK", 256)
    fmt, n = fpsim.BF16, 4096
    a, b = operands(fmt, n, 17)
    c, _ = operands(fmt, n, 18)
    rng = np.random.default_rng(4)
    for v in (a, b):  # no subnormal factors but in chunk 7 (products below 2**-126)
        small = (np.abs(v) < 2.0**-100) & (np.arange(n) // 256 != 7)
        v[small] = np.copysign(0.75, v[small])
    with np.errstate(under="ignore"):
        tiny = fpsim.round(np.abs(a * b) * 2.0 ** -rng.integers(8, 40, n)
                           * rng.choice([-1.0, 1.0], n), fmt)
    c = np.where(rng.random(n) < 0.3, tiny, c)
    a[1024:1280] *= 2.0**-70  # products below 2**-126
    b[1024:1280] *= 2.0**-70
    a[1280:1536] *= 2.0**100  # products beyond float32
    b[1280:1536] *= 2.0**60
    c[1536:1792] = fpsim.round(-a[1536:1792] * b[1536:1792], fmt, "toward_zero")
    a, b, c = (fpsim.round(v, fmt).astype(np.float32) for v in (a, b, c))
    # -2**-150 + 0 is -0 in bf16; float32's product would be -0 and the sum +0
    a[1800:1802], b[1800:1802], c[1800:1802] = 2.0**-75, [-(2.0**-75), 2.0**-75], [0.0, -0.0]
    a[3000:3004] = [np.inf, np.nan, 0.0, -0.0]
    raw = (rng.standard_normal(n) * 4).astype(np.float32)  # not values of bf16
    b[2048:2304] = raw[2048:2304]
    args = (a, b, c)
    with np.errstate(over="ignore", invalid="ignore"):  # (the chunks it declines)
        used = [fma32_odd(*(x[i:i + 256] for x in args), Rounding.NEAREST_EVEN,
                          guard=True) is not None for i in range(0, n, 256)]
    assert arithmetic._float32_path("fma", args, arithmetic.context(fmt)) is not None
    assert used[0] and used[6] and not (used[4] or used[5] or used[7])  # 7: 1800
    fast = fpsim.fma(*args, fmt)
    slow, _ = fpsim.fma(*args, fmt, flags=True)
    ok = same_bits(fast, slow)
    i = np.flatnonzero(~ok)
    assert ok.all(), f"{i.size} differ, first at {i[0]}: {fast[i[0]]!r} vs {slow[i[0]]!r}"
    ctx = gmpy2.context(precision=8, emin=fmt.emin - 6, emax=fmt.emax + 1, subnormalize=True,
                        round=gmpy2.RoundToNearest)
    for j in np.random.default_rng(3).choice(n, 400, replace=False):
        xs = [gmpy2.mpfr(float(fpsim.round(np.float64(v[j]), fmt))) for v in args]
        with ctx:
            want = float(gmpy2.fma(*xs))
        assert same_bits(np.array([fast[j]]), np.array([want]))[0], j
    assert arithmetic._float32_path("fma", args, arithmetic.context(fmt, "up")) is None
