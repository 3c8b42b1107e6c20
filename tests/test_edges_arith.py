"""Arithmetic and reductions at the edges (issue 15): argument errors, the native fast paths
against the general kernel and MPFR, bounded memory, and the vectorised sequential sum against
the element-by-element reference loop."""

from __future__ import annotations

import tracemalloc
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import arithmetic, reductions
from fpsim.rounding.native import cast as native_cast
from tests.exact import round_exact
from tests.test_arith_mpfr import mpfr_op


def test_dot_length_mismatch_names_both_lengths():
    with pytest.raises(ValueError, match="length 3 in a and 1 in b"):
        fpsim.dot([1.0, 2.0, 3.0], [2.0], "fp16")
    with pytest.raises(ValueError, match="length 2 in a and 1 in b"):
        fpsim.dot(np.ones((2, 3)), np.ones(3), "fp16", axis=0)
    with pytest.raises(ValueError, match="at least one axis"):
        fpsim.dot(1.0, [1.0, 2.0], "fp16")
    with pytest.raises(TypeError, match="axis must be an int"):
        fpsim.dot([1.0], [1.0], "fp16", axis=0.5)
    # the other axes still broadcast
    assert fpsim.dot(np.ones((2, 3)), np.ones(3), "fp16").tolist() == [3.0, 3.0]


@pytest.mark.parametrize("axis", [1.5, "0", (0, 1.0), True])
def test_sum_axis_type_errors(axis):
    with pytest.raises(TypeError, match="axis must be None, an int or a tuple of ints"):
        fpsim.sum(np.ones((2, 3)), "fp16", axis=axis)


def test_sum_axis_out_of_range():
    with pytest.raises(ValueError, match="axis 5"):  # NumPy's AxisError is a ValueError
        fpsim.sum(np.ones((2, 3)), "fp16", axis=5)


# -- the native default path (fp16 / bf16 / fp32, nearest even, no flags) ---------------------

NATIVE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}
OPS = {"add": fpsim.add, "sub": fpsim.sub, "mul": fpsim.mul, "div": fpsim.div}


def _general(monkeypatch, op, args, fmt):
    """The general kernel's result (the native path off)."""
    with monkeypatch.context() as m:
        m.setattr(arithmetic, "_FORCE_GENERAL", True)
        return (fpsim.sqrt if op == "sqrt" else OPS[op])(*args, fmt)


def _same(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))


def _all_patterns(dt) -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)


def _tie_partners(x: np.ndarray, fmt) -> np.ndarray:
    """x * 2**-p (a half ulp of x: x + it is a tie), x's neighbours, tiny and huge values."""
    p = fmt.precision_bits
    with np.errstate(all="ignore"):
        return np.asarray(x.astype(np.float64) * 2.0**-p).astype(x.dtype)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt"])
@pytest.mark.parametrize("name", list(NATIVE))
def test_native_path_equals_general_kernel_on_every_pattern(monkeypatch, name, op):
    """Every 16-bit pattern (subnormals, ties, overflow, inf, NaN) against a shuffled one, its
    half-ulp partner (ties in sums) and specials: the native result equals the general
    kernel's bit for bit."""
    fmt, dt = fpsim.get_format(name), NATIVE[name]
    a = _all_patterns(dt)
    rng = np.random.default_rng(5)
    partners = [rng.permutation(a), _tie_partners(a, fmt), np.full_like(a, 3.0),
                np.full_like(a, fmt.smallest_subnormal), np.full_like(a, -fmt.max)]
    if op == "sqrt":
        partners = partners[:1]
    for b in partners:
        args = (a,) if op == "sqrt" else (a, b)
        assert arithmetic._native(op, args, arithmetic.context(fmt)) is not None  # taken
        got = fpsim.sqrt(*args, fmt) if op == "sqrt" else OPS[op](*args, fmt)
        want = _general(monkeypatch, op, args, fmt)
        bad = ~_same(got, want)
        assert not bad.any(), (name, op, [x[bad][:3] for x in args], got[bad][:3],
                               want[bad][:3])


@pytest.mark.parametrize("name", list(NATIVE))
def test_native_path_against_mpfr(name):
    fmt, dt = fpsim.get_format(name), NATIVE[name]
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 16, size=(2, 400)).astype(np.uint16)
    a, b = bits[0].view(dt), bits[1].view(dt)
    for op in ("add", "sub", "mul", "div", "sqrt"):
        args = (np.abs(a),) if op == "sqrt" else (a, b)
        got = fpsim.sqrt(*args, fmt) if op == "sqrt" else OPS[op](*args, fmt)
        for i in range(got.size):
            xs = [float(x[i]) for x in args]
            if any(np.isnan(xs)) or any(np.isinf(xs)):
                continue  # MPFR has no signed NaN / IEEE specials to compare here
            with np.errstate(all="ignore"):
                want = mpfr_op(op, xs, fmt, "nearest_even")
            assert _same(got[i], want), (name, op, xs, float(got[i]), want)


@pytest.mark.parametrize("name", list(NATIVE))
def test_native_path_float64_operands_round_once(monkeypatch, name):
    """float64 operands are converted by the native cast: at and next to every midpoint of
    the format in a few binades (normal and subnormal) the native cast
    (fpsim.rounding.native.cast: ml_dtypes 0.5 rounded float64 twice, via float32) equals the exact
    rounding and the results equal the general kernel's."""
    fmt, dt = fpsim.get_format(name), NATIVE[name]
    with np.errstate(invalid="ignore"):
        vals = _all_patterns(dt).astype(np.float64)
    vals = np.unique(vals[np.isfinite(vals) & (vals > 0)])
    mids = (vals[:-1] + vals[1:]) / 2  # exact in float64
    x = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
                        mids * (1 + 2.0**-40), mids * (1 - 2.0**-40)])
    x = np.concatenate([x, -x, [fmt.max * (1 + 2.0**-fmt.precision_bits) * (1 - 2.0**-50)]])
    sample = x[np.random.default_rng(2).choice(x.size, 300, replace=False)]
    for v in sample:  # the native cast against exact rounding (a Fraction model)
        assert float(native_cast(np.array([v]), dt)[0]) == round_exact(float(v), fmt)[0], v
    assert _same(native_cast(x, dt), fpsim.round(x, fmt)).all()
    y = np.full_like(x, 1.0)
    for op in OPS:
        assert _same(OPS[op](x, y, fmt), _general(monkeypatch, op, (x, y), fmt)).all(), op
    assert _same(fpsim.sqrt(np.abs(x), fmt), _general(monkeypatch, "sqrt", (np.abs(x),),
                                                      fmt)).all()


def test_native_path_is_not_taken_for_other_options():
    a = np.array([1.0, 2.0**-24], np.float16)
    b = np.array([2.0**-11, 2.0**-30], np.float16)
    assert fpsim.add(a, b, "fp16", "up")[0] == 1.0 + 2.0**-10  # directed mode: the kernel
    assert fpsim.mul(a, b, "fp16", subnormals="flush")[1] == 0.0
    v, f = fpsim.add(a, b, "fp16", flags=True)
    assert int(f[0]) == int(fpsim.Flags.INEXACT)
    with fpsim.flag_context() as ctx:
        fpsim.add(a, b, "fp16")
    assert fpsim.Flags.INEXACT in ctx
    assert fpsim.mul(np.float16(300.0), np.float16(300.0), "fp16", overflow="saturate") == \
        65504.0
    assert type(fpsim.add(np.float16(1.0), 2.0, "fp16")) is np.float64


# -- sequential sums by the native add -----------------------------------------------------------

def _reference_sequential(X, fmt):
    """The element-by-element loop (one fpsim.add per column), kept as the reference."""
    c = arithmetic.context(fmt)
    return reductions._sequential_loop(np.asarray(X, np.float64), reductions._Acc(c, len(X)))


@pytest.mark.parametrize("block", [7, 1 << 16])
@pytest.mark.parametrize("name", ["fp16", "bf16", "fp32"])
def test_native_sequential_sum_equals_reference_loop(monkeypatch, name, block):
    monkeypatch.setattr(reductions, "_NATIVE_BLOCK", block)
    fmt = fpsim.get_format(name)
    rng = np.random.default_rng(9)
    rows, n = 40, 300
    scale = 2.0 ** rng.integers(fmt.emin - fmt.mantissa_bits, fmt.emax + 1, (rows, 1))
    X = np.asarray(fpsim.round(rng.standard_normal((rows, n)) * scale, fmt))
    X[0] = 1.0  # stagnation at 2**p: ties to even
    X[1, ::2] = fmt.max  # overflow to inf, then inf - inf = NaN
    X[1, 1::2] = -fmt.max
    X[2] = fmt.smallest_subnormal  # subnormal sums
    X[3, 5] = np.inf
    c = arithmetic.context(fmt)
    got = reductions._native_sequential(X, c)
    assert got is not None
    want = _reference_sequential(X, fmt)
    assert (((got == want) & (np.signbit(got) == np.signbit(want)))
            | (np.isnan(got) & np.isnan(want))).all()
    assert _same(fpsim.sum(X, fmt, axis=1), want).all()
    assert _same(fpsim.dot(X, np.ones(n), fmt), want).all()  # exact products, same sums


def test_sequential_sum_of_a_million_ones_is_fast_and_stagnates():
    """bf16 stops at 256 (256 + 1 ties to even), fp16 at 2048 (issue 15: was ~39 s)."""
    assert fpsim.sum(np.ones(10**6), "bf16") == 256.0
    assert fpsim.sum(np.ones(10**6), "fp16") == 2048.0
    assert fpsim.sum(np.ones(3 * 10**5, np.float32), "fp32") == 3e5


def test_sequential_general_path_unchanged_for_other_modes():
    x = np.ones(300)
    # mode up: 256 + 1 rounds up to 258, every add then gains an ulp
    assert float(fpsim.sum(x, "bf16", rounding="up")) == float(
        _reference_sequential_mode(x, "bf16", "up"))


def _reference_sequential_mode(x, fmt, mode):
    s = x[0]
    for v in x[1:]:
        s = fpsim.add(s, v, fmt, mode)
    return s


# -- bounded memory ------------------------------------------------------------------------------

def test_fma_memory_is_input_output_and_one_chunk():
    n = 1 << 20
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n).astype(np.float16) for _ in range(3))
    tracemalloc.start()
    try:
        out = fpsim.fma(a, b, c, "fp16", "up")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.dtype == np.float64 and out.shape == (n,)
    # the float64 output (8 bytes per element) and one chunk's work arrays; was ~80 bytes
    assert peak < 8 * n + 200 * arithmetic._CHUNK, peak / n


@pytest.mark.parametrize("shape_a, shape_b", [((5, 1, 7), (1, 3, 7)), ((50,), (3, 1)),
                                               ((4, 9), ()), ((2, 3, 5), (3, 5))])
@pytest.mark.parametrize("op", ["add", "mul", "div", "fma", "sqrt"])
def test_chunked_equals_one_piece(monkeypatch, shape_a, shape_b, op):
    rng = np.random.default_rng(4)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b) * 1e-3
    args = {"add": (a, b), "mul": (a, b), "div": (a, b), "fma": (a, b, a), "sqrt": (a,)}[op]
    fn = getattr(fpsim, op)
    whole = fn(*args, "bf16", "toward_zero", flags=True)
    monkeypatch.setattr(arithmetic, "_CHUNK", 4)  # many chunks, broadcast views cut
    with fpsim.flag_context() as ctx:
        parts = fn(*args, "bf16", "toward_zero", flags=True)
    for w, p in zip(whole, parts, strict=True):
        assert w.shape == p.shape
        assert _same(w, p).all()
    assert ctx.flags == fpsim.Flags(int(np.bitwise_or.reduce(whole[1], axis=None)))


# -- round_pair's precondition ------------------------------------------------------------------

@pytest.mark.parametrize("hi, lo", [(1.0, 1.0), (1.0, float("nan")), (1.0, float("inf")),
                                    (1.0, 2.0**-52), (-3.0, -(2.0**-50))])
def test_round_pair_refuses_invalid_pairs(hi, lo):
    with pytest.raises(ValueError, match="round_pair needs"):
        fpsim.round_pair(hi, lo, "fp16")
    with pytest.raises(ValueError, match="round_pair needs"):
        fpsim.round_pair(np.array([0.5, hi]), np.array([0.0, lo]), "bf16", "up")


@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero", "up", "down",
                                  "odd"])
def test_round_pair_of_two_sum_pairs_against_exact_fractions(mode):
    """Valid pairs (TwoSum of random float64 values) round like the exact sum does."""
    rng = np.random.default_rng(17)
    a = rng.standard_normal(300) * 2.0 ** rng.integers(-20, 20, 300)
    b = rng.standard_normal(300) * 2.0 ** rng.integers(-80, 0, 300)
    hi = a + b
    bb = hi - a
    lo = (a - (hi - bb)) + (b - bb)
    got = fpsim.round_pair(hi, lo, "bf16", mode)
    for h, low, g in zip(hi, lo, got, strict=True):
        assert g == round_exact(Fraction(float(h)) + Fraction(float(low)), fpsim.BF16,
                                mode)[0], (h, low, mode)


@pytest.mark.parametrize("fmt, acc", [("fp8_e4m3", "fp32"), ("fp8_e5m2", "fp16"),
                                      ("bf16", "fp32"), ("fp16", "bf16"), ("fp8_e4m3", "bf16")])
def test_wide_accumulator_native_equals_reference_loop(monkeypatch, fmt, acc):
    """order='wide': the accumulator's native adds (when every exact product is one of its
    values; else the loop) equal the loop of correctly rounded adds."""
    rng = np.random.default_rng(21)
    a = rng.standard_normal((6, 700)) * 4
    b = rng.standard_normal((6, 700)) * 4
    a[0, 3] = 1e30  # overflows, inf - inf
    a[1, 5], a[1, 6] = 1e30, -1e30
    calls = []
    orig = reductions._accumulate
    monkeypatch.setattr(reductions, "_accumulate", lambda *x: calls.append(1) or orig(*x))
    got = fpsim.dot(a, b, fmt, order="wide", accumulator=acc)
    if (fmt, acc) == ("fp8_e4m3", "fp32"):
        assert calls  # the native accumulation ran
    monkeypatch.setattr(arithmetic, "_FORCE_GENERAL", True)
    want = fpsim.dot(a, b, fmt, order="wide", accumulator=acc)
    assert _same(got, want).all(), (got, want)


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp32"])
def test_native_kahan_equals_reference_loop(monkeypatch, name):
    rng = np.random.default_rng(23)
    X = rng.standard_normal((5, 400)) * 2.0 ** rng.integers(-10, 10, (5, 400))
    X[0] = 1.0
    X[1, 7] = np.inf
    got = fpsim.sum(X, name, axis=1, order="kahan")
    monkeypatch.setattr(arithmetic, "_FORCE_GENERAL", True)
    want = fpsim.sum(X, name, axis=1, order="kahan")
    assert _same(got, want).all(), (got, want)
