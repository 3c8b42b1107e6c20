"""Low-precision behaviour of the autograd engine: one rounding per op and per gradient,
checked against exact rational arithmetic (fractions.Fraction, MPFR via gmpy2) rounded with
the Fraction reference of tests/exact.py; the native fast casts against fpsim.round; format
promotion against exhaustive value sets; the matmul accumulation models against scalar
Fraction loops; fp16 gradient underflow."""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

import fpsim
from fpsim.autograd import Tensor, matmul_accumulation, rounding_context
from fpsim.autograd import functional as F
from fpsim.autograd.context import contains, promote_formats, round_to, widen
from fpsim.rounding.fp16 import f32_to_f16, f64_to_f16, f64_to_f32_to_f16
from fpsim.rounding.native import NATIVE_CAST_FORMATS
from tests.exact import round_exact

FP16, BF16, FP32, FP64, TF32 = fpsim.FP16, fpsim.BF16, fpsim.FP32, fpsim.FP64, fpsim.TF32
E4M3, E5M2 = fpsim.FP8_E4M3, fpsim.FP8_E5M2


def rx(value, fmt, mode="nearest_even", negative_zero=False) -> float:
    """The exact reference: Fraction (or float) rounded once to fmt."""
    return round_exact(value, fmt, mode, negative_zero=negative_zero)[0]


def zero_sign(op: str, a: float, b: float, mode: str) -> bool:
    """IEEE 754 sign of an exactly zero result of a op b (sections 6.3)."""
    sa, sb = math.copysign(1, a) < 0, math.copysign(1, b) < 0
    if op in ("mul", "div"):
        return sa != sb
    if op == "sub":
        sb = not sb
    return (sa and sb) or (sa != sb and mode == "down")


def frac(v) -> Fraction:
    """An exact Fraction of a float or an MPFR number (as Python ints)."""
    n, d = v.as_integer_ratio()
    return Fraction(int(n), int(d))


def vals(t: Tensor) -> np.ndarray:
    return t.numpy(np.float64)


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def sample(fmt, n, rng, lo=-4.0, hi=4.0) -> np.ndarray:
    """n random values of fmt (rounded uniform draws, some zeros and tiny values)."""
    x = rng.uniform(lo, hi, n)
    x[: n // 10] *= 2.0 ** -12
    return fpsim.round(x, fmt)


# -------------------------------------------------------------------- the fast casts
def hard_inputs(fmt) -> np.ndarray:
    """Every finite value of fmt (or a sample for fp32), the midpoints and their float64
    neighbours, overflow thresholds, specials and random values across the range."""
    rng = np.random.default_rng(5)
    if fmt.bits <= 16:
        v = fpsim.all_values(fmt)
    else:
        v = rng.standard_normal(20000).astype(np.float32).astype(np.float64) * 2.0 ** rng.integers(
            -140, 120, 20000)
    v = np.unique(v[np.isfinite(v)])
    mid = (v[1:] + v[:-1]) / 2
    top = fmt.max + np.array([0.25, 0.5, 0.75]) * fpsim.ulp(fmt.max, fmt)
    return np.concatenate([v, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), top,
                           -top, [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e300, 5e-324],
                           rng.standard_normal(20000) * 10.0 ** rng.integers(-45, 40, 20000)])


@pytest.mark.parametrize("fmt", sorted(NATIVE_CAST_FORMATS, key=lambda f: f.name),
                         ids=lambda f: f.name)
@pytest.mark.parametrize("source", [np.float64, np.float32])
def test_native_cast_equals_fpsim_round(fmt, source):
    """round_to's native path (NumPy / ml_dtypes astype, fpsim.rounding.fp16 for fp16) is exactly
    fpsim.round with nearest even: values, signs of zero, inf and NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = hard_inputs(fmt).astype(source)
    got = round_to(x, fmt).astype(np.float64)
    assert got.dtype == np.float64
    ref = fpsim.round(x.astype(np.float64), fmt)
    bad = ~same_bits(got, ref)
    assert not bad.any(), (x[bad][:5], got[bad][:5], ref[bad][:5])


def test_fp16_kernels_on_float32_patterns():
    pats = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        wide = pats.astype(np.float64)
    ref = fpsim.round(wide, FP16)
    assert same_bits(f32_to_f16(pats), ref).all()
    assert same_bits(f64_to_f16(wide), ref).all()
    assert f32_to_f16(np.float32(0.1)).shape == () and f64_to_f16(np.zeros((2, 0))).shape == (2, 0)
    # small arrays take NumPy's own cast: exact too
    x = hard_inputs(FP16)
    ref = fpsim.round(x, FP16)
    for lo in range(0, x.size, 20011):
        part = slice(lo, lo + 300)
        with np.errstate(over="ignore", invalid="ignore"):
            x32 = x[part].astype(np.float32)
        assert same_bits(f64_to_f16(x[part]), ref[part]).all()
        assert same_bits(f32_to_f16(x32), fpsim.round(x32.astype(np.float64), FP16)).all()
    with np.errstate(over="ignore", invalid="ignore"):
        assert same_bits(x.astype(np.float16), ref).all()


def test_fp16_kernels_against_numpy_casts():
    """NumPy's own casts as the independent reference, on float32 patterns across the whole
    range (mixed normal / subnormal / overflowing arrays exercise the arithmetic select);
    NaN payloads differ by design (fpsim returns the quiet NaN 0x7E00)."""
    pats = np.arange(7, 2 ** 32, 65537, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(11)
    pats = pats[rng.permutation(pats.size)]
    with np.errstate(over="ignore", invalid="ignore"):
        ref = pats.astype(np.float16)
    got = f32_to_f16(pats)
    nan = np.isnan(pats)
    assert np.array_equal(got.view(np.uint16)[~nan], ref.view(np.uint16)[~nan])
    assert np.isnan(got[nan]).all()
    # the fp32 accumulator stored as fp16: two roundings, float64 -> float32 -> float16
    wide = rng.standard_normal(50_000) * 2.0 ** rng.integers(-30, 18, 50_000)
    wide[::7] = (np.round(wide[::7] * 2.0**20) + 0.5) * 2.0**-20  # ties of the fp16 grid
    with np.errstate(over="ignore"):
        ref2 = wide.astype(np.float32).astype(np.float16)
    for x in (wide, wide.reshape(250, 200)[:, ::2]):  # contiguous and strided
        r = ref2 if x.ndim == 1 else ref2.reshape(250, 200)[:, ::2]
        assert np.array_equal(f64_to_f32_to_f16(x).view(np.uint16), r.view(np.uint16))


def test_widen_large_arrays():
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    big = np.tile(h, 17)  # past the reused index buffer's size
    with np.errstate(invalid="ignore"):
        assert same_bits(widen(big.reshape(17, -1)).reshape(-1), big.astype(np.float64)).all()
        assert same_bits(widen(h, np.float32), h.astype(np.float32)).all()


def test_widen_is_exact():
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    with np.errstate(invalid="ignore"):
        assert same_bits(widen(h), h.astype(np.float64)).all()
        assert same_bits(widen(h, np.float32), h.astype(np.float32)).all()
    b = fpsim.cast(np.linspace(-3, 3, 101), BF16)
    assert same_bits(widen(b), b.astype(np.float64)).all()


@pytest.mark.parametrize("fmt", [BF16, E4M3, E5M2, fpsim.FP6_E2M3, fpsim.FP4_E2M1],
                         ids=lambda f: f.name)
@pytest.mark.parametrize("wide", [np.float64, np.float32])
def test_widen_fast_paths_every_pattern(fmt, wide):
    # bf16 by a shift, the byte formats by a table: every stored pattern (NaNs, signalling
    # ones, infinities, subnormals, -0 included), on arrays past the fast paths' threshold
    sd = fmt.storage_dtype
    if sd.itemsize == 2:
        x = np.arange(1 << 16, dtype=np.uint16).view(sd)
    else:  # fp6 / fp4 patterns use the low bits of their byte
        x = (np.arange(1 << 16) % (1 << fmt.bits)).astype(np.uint8).view(sd)
    for arr in (x, x.reshape(256, 256)[:, ::3]):  # contiguous and strided
        with np.errstate(invalid="ignore"):
            ref = arr.astype(wide)
        got = widen(arr, wide)
        assert got.dtype == np.dtype(wide) and got.shape == arr.shape
        u = np.uint64 if wide is np.float64 else np.uint32
        assert np.array_equal(got.view(u), ref.view(u))  # NaN payloads too


@pytest.mark.parametrize("fmt", [FP16, BF16, TF32, E4M3, E5M2, fpsim.FP6_E2M3, fpsim.FP4_E2M1],
                         ids=lambda f: f.name)
def test_construction_rounds_to_nearest_even(fmt):
    x = np.random.default_rng(0).standard_normal(500) * 3
    with rounding_context("up"):  # construction ignores the op rounding mode
        t = Tensor(x, fmt)
    assert t.data.dtype == fmt.storage_dtype
    ref = [rx(float(v), fmt) for v in x]
    assert same_bits(vals(t), ref).all()


# ------------------------------------------------------------- one rounding per op
OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "div": lambda a, b: a / b}


@pytest.mark.parametrize("fmt", [FP16, BF16, TF32, E4M3, FP32], ids=lambda f: f.name)
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up"])
@pytest.mark.parametrize("op", list(OPS))
def test_arithmetic_is_one_rounding_of_the_exact_result(fmt, mode, op):
    rng = np.random.default_rng(hash((fmt.name, mode, op)) % 2 ** 32)
    a = sample(fmt, 300, rng)
    b = sample(fmt, 300, rng)
    b[b == 0] = 1.0
    big = min(2.0 ** 30, fmt.max / 4)
    a[:5] = fpsim.round([1.0, -1.0, big, -1 / big, 3.0], fmt)  # with the tiny operands below,
    b[:5] = fpsim.round([fmt.smallest_subnormal, fmt.smallest_subnormal, -1 / big, big, 3.0],
                        fmt)  # sums that float64 cannot hold for fp32 / bf16
    with rounding_context(mode):
        got = vals(OPS[op](Tensor(a, fmt), Tensor(b, fmt)))
    ref = [rx(OPS[op](Fraction(x), Fraction(y)), fmt, mode, zero_sign(op, x, y, mode))
           for x, y in zip(a, b, strict=True)]
    assert same_bits(got, ref).all()


@pytest.mark.parametrize("mode", ["nearest_even", "down"])
def test_scalar_operands_and_sqrt(mode):
    rng = np.random.default_rng(3)
    a = np.abs(sample(FP16, 200, rng))
    x = Tensor(a, FP16)
    with rounding_context(mode):
        got_mul = vals(x * 0.75)
        got_rsub = vals(1.5 - x)
        got_rdiv = vals(3.0 / (x + 1.0))
        got_sqrt = vals(x.sqrt())
    xp1 = [rx(Fraction(v) + 1, FP16, mode) for v in a]
    assert same_bits(got_mul, [rx(Fraction(v) * Fraction(3, 4), FP16, mode) for v in a]).all()
    assert same_bits(got_rsub, [rx(Fraction(3, 2) - Fraction(v), FP16, mode) for v in a]).all()
    assert same_bits(got_rdiv, [rx(3 / Fraction(v), FP16, mode) for v in xp1]).all()
    ctx = gmpy2.context(precision=300)
    ref_sqrt = [rx(frac(gmpy2.sqrt(gmpy2.mpfr(v, context=ctx))), FP16,
                   mode) for v in a]
    assert same_bits(got_sqrt, ref_sqrt).all()


def test_scalar_not_in_the_format_is_still_one_rounding():
    # 5 * s lands on the fp16 tie 1 + 2**-11 after a float64 rounding; the exact product does
    # not: a float64-then-fp16 evaluation would round twice
    s = (1 + 2.0 ** -11) / 5
    exact = 5 * Fraction(s)
    assert float(exact) == 1 + 2.0 ** -11 and exact != 1 + Fraction(1, 2 ** 11)
    got = (Tensor([5.0], FP16) * s).item()
    assert got == rx(exact, FP16) and got == (1.0 if exact < 1 + Fraction(1, 2 ** 11)
                                              else 1 + 2.0 ** -10)
    a = fpsim.round(np.random.default_rng(2).uniform(-4, 4, 300), FP16)
    for c in (0.1, 1 / 3, 1 + 2.0 ** -30):
        assert same_bits(vals(Tensor(a, FP16) * c), [rx(Fraction(v) * Fraction(c), FP16)
                                                     for v in a]).all()
        assert same_bits(vals(Tensor(a, FP16) + c), [rx(Fraction(v) + Fraction(c), FP16)
                                                     for v in a]).all()


def mpfr_fraction(fn, v) -> Fraction:
    with gmpy2.context(precision=300):
        return frac(fn(gmpy2.mpfr(float(v))))


MPFR_FUNCS = {
    "exp": (F.exp, gmpy2.exp),
    "log": (F.log, gmpy2.log),
    "tanh": (F.tanh, gmpy2.tanh),
    "sigmoid": (F.sigmoid, lambda v: 1 / (1 + gmpy2.exp(-v))),
    "gelu": (F.gelu, lambda v: v * (1 + gmpy2.erf(v / gmpy2.sqrt(2))) / 2),
}


@pytest.mark.parametrize("fmt", [FP16, BF16, FP32], ids=lambda f: f.name)
@pytest.mark.parametrize("name", list(MPFR_FUNCS))
def test_transcendental_forward_is_one_rounding(fmt, name):
    ours, ref_fn = MPFR_FUNCS[name]
    rng = np.random.default_rng(11)
    x = sample(fmt, 200, rng, -6, 6)
    if name == "log":
        x = np.abs(x) + fmt.eps
        x = fpsim.round(x, fmt)
    got = vals(ours(Tensor(x, fmt)))
    ref = [rx(mpfr_fraction(ref_fn, v), fmt) if v != 0 or name != "log" else -math.inf
           for v in x]
    assert same_bits(got, ref).all()


def test_reductions_softmax_mean_are_one_rounding():
    rng = np.random.default_rng(4)
    a = sample(FP16, 48, rng).reshape(6, 8)
    t = Tensor(a, FP16)
    fr = [[Fraction(v) for v in row] for row in a]
    assert same_bits(vals(t.sum(1)), [rx(sum(r), FP16) for r in fr]).all()
    assert same_bits(vals(t.mean(0)), [rx(sum(fr[i][j] for i in range(6)) / 6, FP16)
                                       for j in range(8)]).all()
    with gmpy2.context(precision=300):
        sm = []
        for row in a:
            e = [gmpy2.exp(gmpy2.mpfr(float(v))) for v in row]
            s = sum(e)
            sm.append([rx(frac(v / s), FP16) for v in e])
    assert same_bits(vals(F.softmax(t, dim=1)), sm).all()


# ------------------------------------------------------------ gradients, one rounding
def test_gradients_are_rounded_exact_vjps():
    rng = np.random.default_rng(8)
    a, b, g = (sample(FP16, 64, rng).reshape(8, 8) for _ in range(3))
    b[b == 0] = 0.5
    x = Tensor(a, FP16, requires_grad=True)
    w = Tensor(b, FP16, requires_grad=True)
    (x * w).backward(g)
    assert same_bits(x.grad, [[rx(Fraction(gi) * Fraction(wi), FP16) for gi, wi in zip(
        gr, wr, strict=True)] for gr, wr in zip(g, b, strict=True)]).all()
    x.grad = w.grad = None
    (x / w).backward(g)
    ref_w = [[rx(-Fraction(gi) * Fraction(ai) / Fraction(wi) ** 2, FP16)
              for gi, ai, wi in zip(gr, ar, wr, strict=True)]
             for gr, ar, wr in zip(g, a, b, strict=True)]
    assert same_bits(w.grad, ref_w).all()
    x.grad = None
    out = x.exp()
    out.backward(g)  # PyTorch's rule: g * (the rounded output)
    assert same_bits(x.grad, [[rx(Fraction(gi) * Fraction(oi), FP16) for gi, oi in zip(
        gr, orow, strict=True)] for gr, orow in zip(g, vals(out), strict=True)]).all()
    x.grad = None
    x.mean().backward(np.float16(g[0, 0]))
    assert (vals(Tensor(x.grad, FP16)) == rx(Fraction(g[0, 0]) / 64, FP16)).all()


def test_matmul_exact_model_forward_and_backward():
    rng = np.random.default_rng(9)
    a, b = sample(FP16, 24, rng).reshape(4, 6), sample(FP16, 18, rng).reshape(6, 3)
    g = sample(FP16, 12, rng).reshape(4, 3)
    x, w = Tensor(a, FP16, requires_grad=True), Tensor(b, FP16, requires_grad=True)
    with matmul_accumulation("exact"):
        y = x @ w
        y.backward(g)
    fa, fb, fg = ([[Fraction(v) for v in r] for r in m] for m in (a, b, g))
    ref_y = [[rx(sum(fa[i][k] * fb[k][j] for k in range(6)), FP16) for j in range(3)]
             for i in range(4)]
    ref_gx = [[rx(sum(fg[i][j] * fb[k][j] for j in range(3)), FP16) for k in range(6)]
              for i in range(4)]
    ref_gw = [[rx(sum(fa[i][k] * fg[i][j] for i in range(4)), FP16) for j in range(3)]
              for k in range(6)]
    assert same_bits(vals(y), ref_y).all()
    assert same_bits(x.grad, ref_gx).all() and same_bits(w.grad, ref_gw).all()


def test_fp16_gradients_underflow_below_2_pow_minus_25():
    rng = np.random.default_rng(10)
    g = fpsim.round(2.0 ** rng.uniform(-21, -10, 400), FP16)
    g[:3] = [2.0 ** -13, 2.0 ** -13 * (1 + 2.0 ** -10), 2.0 ** -14]  # 2**-25 exactly, above
    scale = 2.0 ** -12
    x = Tensor(np.ones(400), FP16, requires_grad=True)
    x32 = Tensor(np.ones(400), FP16, requires_grad=True, grad_fmt=FP32)
    (x * scale).backward(g)
    (x32 * scale).backward(g)
    exact = g * scale  # exact in float64
    assert x.grad.dtype == np.float16 and x32.grad.dtype == np.float32
    assert np.array_equal(x.grad == 0, exact <= 2.0 ** -25)  # the tie 2**-25 goes to even 0
    assert (exact < 2.0 ** -25).sum() > 50
    assert np.array_equal(x32.grad.astype(np.float64), exact)  # fp32 gradients keep them
    assert same_bits(x.grad, fpsim.round(exact, FP16)).all()


def test_gradient_accumulation_rounds_each_sum():
    x = Tensor([1.0], FP16, requires_grad=True)
    a, b = 1 + 2.0 ** -10, 2.0 ** -11
    y = x * a + x * b
    y.backward(np.array([1.0]))
    # each contribution rounded to fp16, then their sum rounded (as PyTorch accumulates)
    assert x.grad[0] == rx(Fraction(rx(a, FP16)) + Fraction(rx(b, FP16)), FP16)


# ------------------------------------------------------------------------- promotion
SMALL = [FP16, BF16, E4M3, E5M2, fpsim.FP8_E4M3FNUZ, fpsim.FP8_E5M2FNUZ, fpsim.FP6_E2M3,
         fpsim.FP6_E3M2, fpsim.FP4_E2M1]


def test_contains_matches_exhaustive_value_sets():
    sets = {}
    for f in SMALL:
        v = fpsim.all_values(f)
        sets[f.name] = set(v[np.isfinite(v)].tolist())
    for a in SMALL:
        for b in SMALL:
            assert contains(a, b) == (sets[b.name] <= sets[a.name]), (a.name, b.name)
    for f in SMALL:
        assert contains(FP32, f) and contains(FP64, f)


def test_promotion_rule_in_ops():
    h, f, b = Tensor([1.5], FP16, True), Tensor([2.0], FP32, True), Tensor([3.0], BF16, True)
    assert (h + f).fmt == FP32 and (h * b).fmt == FP32 and (f - b).fmt == FP32
    assert (h + 1.0).fmt == FP16  # Python scalars do not promote
    with pytest.raises(TypeError, match=r"different formats \(fp16 and fp64\)"):
        h @ Tensor([[2.0]], FP64)  # matmul / linear / conv2d refuse mixed formats (PyTorch)
    assert promote_formats(E4M3, E5M2) == FP16 and promote_formats(FP16, E4M3) == FP16
    assert F.cat([h, b]).fmt == FP32
    y = h * Tensor([1 + 2.0 ** -20], FP32)
    y.backward(np.array([1 + 2.0 ** -20], dtype=np.float32))
    assert h.grad.dtype == np.float16  # the fp32 gradient is rounded into the fp16 input
    assert h.grad[0] == rx(Fraction(1 + 2.0 ** -20) ** 2, FP32) and h.grad[0] == 1.0


# --------------------------------------------------------------------- rounding modes
def test_stochastic_rounding_context_is_seeded_and_unbiased():
    x = Tensor(np.ones(4000), FP16)
    with rounding_context("stochastic", rng=np.random.default_rng(1)):
        a = vals(x + 2.0 ** -12)  # a quarter of an ulp above 1
    with rounding_context("stochastic", rng=1):
        b = vals(x + 2.0 ** -12)
    assert np.array_equal(a, b)
    assert set(np.unique(a)) == {1.0, 1 + 2.0 ** -10}
    assert abs((a > 1).mean() - 0.25) < 0.03
    assert vals(x + 2.0 ** -12)[0] == 1.0  # back to nearest even outside the context


def test_cast_to_is_differentiable():
    x = Tensor([1 / 3, 2.0], FP32, requires_grad=True)
    y = x.to(FP16, rounding="toward_zero")
    assert y.fmt == FP16 and vals(y)[0] == rx(Fraction(1 / 3), FP16, "toward_zero")
    assert x.to(FP32) is x
    (y * 2.0).backward(np.array([0.1, 0.2]))
    assert x.grad.dtype == np.float32
    assert same_bits(x.grad, [rx(Fraction(2) * Fraction(rx(0.1, FP16)), FP16),
                              rx(Fraction(2) * Fraction(rx(0.2, FP16)), FP16)]).all()
    h = Tensor([1.0], FP16, requires_grad=True)
    h.to(FP32).backward(np.array([1 + 2.0 ** -20]))
    assert h.grad[0] == 1.0  # rounded into fp16 on the way back


# ------------------------------------------------------------------- matmul models
def frac_matrix(m):
    return [[Fraction(v) for v in row] for row in m]


def reference_matmul(a, b, kind, acc_fmt, out_fmt, bias=None):
    fa, fb = frac_matrix(a), frac_matrix(b)
    m, k, n = len(fa), len(fb), len(fb[0])
    out = []
    for i in range(m):
        row = []
        for j in range(n):
            prods = [fa[i][t] * fb[t][j] for t in range(k)]
            extra = [] if bias is None else [Fraction(bias[j])]
            if kind == "exact":
                v = rx(sum(prods + extra), out_fmt)
            elif kind == "fp32":
                v = rx(Fraction(rx(sum(prods + extra), FP32)), out_fmt)
            elif kind == "sequential":
                acc = Fraction(0)
                for p in prods + extra:
                    acc = Fraction(rx(acc + p, acc_fmt))
                v = rx(acc, out_fmt)
            else:  # pairwise: rounded leaves, then a tree
                terms = [Fraction(rx(p, acc_fmt)) for p in prods]
                while len(terms) > 1:
                    nxt = [Fraction(rx(terms[t] + terms[t + 1], acc_fmt))
                           for t in range(0, len(terms) - 1, 2)]
                    terms = nxt + ([terms[-1]] if len(terms) % 2 else [])
                acc = terms[0]
                for e in extra:
                    acc = Fraction(rx(acc + e, acc_fmt))
                v = rx(acc, out_fmt)
            row.append(v)
        out.append(row)
    return out


@pytest.mark.parametrize("model", ["exact", "fp32", ("sequential", "bf16"), ("pairwise", "fp16"),
                                   ("sequential", "fp16")], ids=str)
def test_accumulation_models_against_scalar_fractions(model):
    rng = np.random.default_rng(12)
    a = fpsim.round(rng.uniform(0.5, 2, (3, 7)) * 2.0 ** rng.integers(-6, 6, (3, 7)), FP16)
    b = fpsim.round(rng.uniform(-1, 2, (7, 4)), FP16)
    bias = fpsim.round(rng.uniform(-1, 1, 4), FP16)
    kind, acc_fmt = (model, None) if isinstance(model, str) else (model[0],
                                                                  fpsim.get_format(model[1]))
    with matmul_accumulation(model):
        y = Tensor(a, FP16) @ Tensor(b, FP16)
        lin = F.linear(Tensor(a, FP16), Tensor(b.T, FP16), Tensor(bias, FP16))
    assert same_bits(vals(y), reference_matmul(a, b, kind, acc_fmt, FP16)).all()
    assert same_bits(vals(lin), reference_matmul(a, b, kind, acc_fmt, FP16, bias)).all()
    # the same model in the backward pass: dX = g @ W^T
    g = fpsim.round(rng.uniform(-1, 1, (3, 4)), FP16)
    x = Tensor(a, FP16, requires_grad=True)
    with matmul_accumulation(model):
        (x @ Tensor(b, FP16)).backward(g)
    assert same_bits(x.grad, reference_matmul(g, b.T, kind, acc_fmt, FP16)).all()


def test_fp32_model_differs_from_exact_by_the_double_rounding():
    # 1 + 2**-11 + 2**-26: just above an fp16 tie; rounding to fp32 first lands on the tie
    ta = Tensor([[1.0, 2.0 ** -11, 2.0 ** -13]], FP16)
    tb = Tensor([[1.0], [1.0], [2.0 ** -13]], FP16)
    with matmul_accumulation("exact"):
        exact = (ta @ tb).item()
    with matmul_accumulation("fp32"):
        fp32 = (ta @ tb).item()
    assert exact == 1 + 2.0 ** -10 and fp32 == 1.0


def test_tensorcore_model_delegates_to_fpsim_tensorcore():
    tc = pytest.importorskip("fpsim.tensorcore")
    if not hasattr(tc, "matmul"):
        pytest.skip("fpsim.tensorcore.matmul is not available yet")
    rng = np.random.default_rng(13)
    a = fpsim.round(rng.standard_normal((4, 16)), FP16)
    b = fpsim.round(rng.standard_normal((16, 3)), FP16)
    with matmul_accumulation(("tensorcore", "A100")):
        y = Tensor(a, FP16) @ Tensor(b, FP16)
        with pytest.raises(ValueError, match="fp32"):  # fp32 operands: no tensor-core path
            Tensor(a, FP32) @ Tensor(b, FP32)
    ref = np.asarray(tc.matmul(a, b, gpu="A100", input_format=FP16, output_format="fp32"),
                     dtype=np.float64)
    assert same_bits(vals(y), fpsim.round(ref, FP16)).all()


def test_sgemm_model_is_numpy_float32_matmul():
    """The sgemm model against NumPy's own float32 matmul (the reference: the same BLAS), then
    one rounding; forward, both gradients, a bias added in fp32 once; a float32 accumulator
    really rounds (large K, cancellation) where the fp32 model does not."""
    rng = np.random.default_rng(21)
    a = fpsim.round(rng.standard_normal((6, 300)) * 2.0 ** rng.integers(-8, 8, (6, 300)), FP16)
    b = fpsim.round(rng.standard_normal((300, 5)), FP16)
    bias = fpsim.round(rng.standard_normal(5), FP16)
    g = fpsim.round(rng.standard_normal((6, 5)), FP16)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    x = Tensor(a, FP16, requires_grad=True)
    w = Tensor(b.T, FP16, requires_grad=True)
    with matmul_accumulation("sgemm"):
        y = Tensor(a, FP16) @ Tensor(b, FP16)
        lin = F.linear(x, w, Tensor(bias, FP16))
        lin.backward(g)
    assert same_bits(vals(y), fpsim.round((a32 @ b32).astype(np.float64), FP16)).all()
    acc = (a32 @ b32).astype(np.float64) + bias
    assert same_bits(vals(lin), fpsim.round(fpsim.round(acc, FP32), FP16)).all()
    g32 = g.astype(np.float32)
    assert same_bits(x.grad, fpsim.round((g32 @ b32.T).astype(np.float64), FP16)).all()
    assert same_bits(w.grad, fpsim.round((g32.T @ a32).astype(np.float64), FP16)).all()
    # fp32 outputs: exactly NumPy's float32 product
    with matmul_accumulation("sgemm"):
        y32 = Tensor(a, FP32) @ Tensor(b, FP32)
    assert np.array_equal(y32.numpy(), a32 @ b32)
    # a float32 accumulator rounds every add: over K = 300 it differs from the fp32 model
    # (float64 accumulation, one rounding) somewhere, whatever the BLAS's order
    with matmul_accumulation("sgemm"):
        s32 = (Tensor(a, FP32) @ Tensor(b, FP32)).numpy()
    with matmul_accumulation("fp32"):
        f32 = (Tensor(a, FP32) @ Tensor(b, FP32)).numpy()
    assert (s32 != f32).any()
    assert np.abs(s32.astype(np.float64) - a @ b).max() > np.abs(f32 - a @ b).max()


def test_sgemm_model_refuses_wide_operands_and_mixes_with_other_models():
    with matmul_accumulation("sgemm"), pytest.raises(ValueError, match="inside fp32"):
        Tensor([[1.0]], "fp64") @ Tensor([[1.0]], "fp64")
    # forward under sgemm (float32 operands kept), backward under fp32 (float64 GEMM)
    rng = np.random.default_rng(22)
    a = fpsim.round(rng.standard_normal((3, 40)), FP16)
    b = fpsim.round(rng.standard_normal((40, 2)), FP16)
    x = Tensor(a, FP16, requires_grad=True)
    with matmul_accumulation("sgemm"):
        y = x @ Tensor(b, FP16)
    with matmul_accumulation("fp32"):
        y.backward(np.ones((3, 2)))
    ref = reference_matmul(np.ones((3, 2)), b.T, "fp32", None, FP16)
    assert same_bits(x.grad, ref).all()


@pytest.mark.exhaustive
def test_fp16_kernels_on_every_float32_pattern():
    """All 2**32 float32 patterns through the fast fp16 kernels (from float32, and from their
    exact float64 values) against NumPy's own cast; NaN payloads aside (minutes; opt in with
    -m exhaustive)."""
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            ref = x.astype(np.float16).view(np.uint16)
            wide = x.astype(np.float64)
        nan = np.isnan(x)
        for got in (f32_to_f16(x), f64_to_f16(wide)):
            bits = got.view(np.uint16)
            assert np.array_equal(bits[~nan], ref[~nan]), start
            assert np.isnan(got[nan]).all(), start


@pytest.mark.parametrize("share", [0.0, 1 / 1000, 1 / 20, 1 / 2, 1.0])
@pytest.mark.parametrize("source", [np.float64, np.float32])
def test_fp16_kernels_patch_sparse_and_dense_specials(share, source):
    """The out-of-range patch of the fp16 kernels takes two routes (by index where few values
    overflow, blended where many do: a diverged run's all-NaN tensors); both give fpsim.round's
    patterns: +-inf with x's sign, the quiet NaN 0x7E00 for NaN of either sign."""
    rng = np.random.default_rng(int(share * 1000))
    n = 4096
    x = rng.standard_normal(n) * 100.0
    special = rng.random(n) < share
    x[special] = rng.choice([np.inf, -np.inf, np.nan, -np.nan, 65520.0, -1e300, 7e4, 65519.0],
                            size=int(special.sum()))
    with np.errstate(over="ignore", invalid="ignore"):
        xs = x.astype(source)
    ref = fpsim.round(xs.astype(np.float64), FP16)
    got = (f64_to_f16 if source == np.float64 else f32_to_f16)(xs)
    assert same_bits(got, ref).all()
    nan = np.isnan(xs)
    assert (got.view(np.uint16)[nan] == 0x7E00).all()


@pytest.mark.parametrize("source", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(512,), (3, 700), (64, 64, 3)])
def test_fp16_kernels_all_nan_shortcut(source, shape):
    """An all-NaN array (a diverged run's) takes the kernels' shortcut: the quiet NaN 0x7E00 of
    the patch, for NaN of either sign and any payload; an array whose first value is NaN but
    not all the rest takes the full path; both equal fpsim.round's patterns."""
    rng = np.random.default_rng(len(shape))
    n = int(np.prod(shape))
    pats = rng.integers(1, 1 << 22, size=n).astype(np.uint32) | np.uint32(0x7F800000)
    pats |= (rng.random(n) < 0.5).astype(np.uint32) << np.uint32(31)  # both signs
    with np.errstate(invalid="ignore"):
        x = pats.view(np.float32).astype(source).reshape(shape)
    kern = f64_to_f16 if source == np.float64 else f32_to_f16
    got = kern(x)
    assert got.shape == shape and (got.view(np.uint16) == 0x7E00).all()
    assert got.base is None  # the result owns its memory, as the full path's
    mixed = x.copy()
    mixed.reshape(-1)[1:: 7] = rng.standard_normal(mixed.size)[1::7] * 1e-6  # subnormals too
    with np.errstate(invalid="ignore"):  # widening a signalling NaN pattern raises "invalid"
        wide = mixed.astype(np.float64)
    ref = fpsim.round(wide, FP16)
    assert same_bits(kern(mixed), ref).all()


@pytest.mark.parametrize("fmt", sorted(NATIVE_CAST_FORMATS - {fpsim.FP32}, key=lambda f: f.name),
                         ids=lambda f: f.name)
@pytest.mark.parametrize("n", [300, 5000, 70000])
def test_cast_to_from_float32_storage_equals_widened_route(fmt, n):
    """cast_to rounds an fp32 tensor's float32 storage directly under plain nearest even (no
    float64 copy): the same bits as rounding its float64 widening, on every kind of value
    (each format's subnormals and midpoints' neighbours, overflow, inf, NaN payloads quiet
    and signalling, both signs); other modes and flag contexts keep the widened route."""
    rng = np.random.default_rng(n)
    pats = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    x = pats.view(np.float32).copy()
    scale = np.float32(fmt.smallest_subnormal) * rng.integers(1, 4000, size=n).astype(np.float32)
    x[::3] = scale[::3]  # the format's subnormal range and above
    with np.errstate(over="ignore"):
        x[1::3] = (rng.standard_normal(n) * fmt.max).astype(np.float32)[1::3]
    x[2::17] = np.float32(np.inf)
    x[4::31] = np.uint32(0x7F800001).view(np.float32)  # a signalling NaN
    x[5::31] = np.uint32(0xFFC00123).view(np.float32)  # a quiet negative NaN
    clean = np.where(np.isnan(x), np.float32(1.5), x)  # NaN-free: the float32 route
    for arr in (clean, x):
        t = Tensor(arr, fpsim.FP32)
        with np.errstate(invalid="ignore"):
            assert t._data.dtype == np.float32
            ref = round_to(widen(t._data), fmt)
            got = F.cast_to(t, fmt)._data
        assert got.dtype == ref.dtype
        assert (got.view(f"u{got.itemsize}") == ref.view(f"u{ref.itemsize}")).all()
    with rounding_context("toward_zero"), np.errstate(invalid="ignore"):
        assert same_bits(F.cast_to(t, fmt, "toward_zero")._data.astype(np.float64),
                         fpsim.round(widen(t._data), fmt, "toward_zero")).all()
