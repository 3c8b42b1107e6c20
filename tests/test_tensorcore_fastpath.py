"""Issue 33's fast matmul kernels (fpsim/tensorcore/fastpath.py) against the kernels they
stand in for, bit for bit.

- The plain units (c joins the aligned sum: A100, H100, V100, Ada, fp8, custom units) run
  ``chain_plain_f32`` (float32 products, int8 exponents, int32 sums); the reference is the
  plain float64 kernel ``_chain`` (itself checked against the Fraction reference and the
  recorded GPU rows elsewhere).
- The ``c_addition="rounded_sum"`` units (B200 fp8) take their block sums from float64 BLAS
  where ``rounded_sums_blas`` proves them exact; the reference is the stage-by-stage kernel.

Inputs: ordinary and adversarial values (exponents over the whole range, subnormals, zeros of
both signs, cancellation against c, inf and NaN), K not a multiple of the block, chained
blocks, tiny and huge c, partial sums that overflow, promote_every, small chunks, and rows
built on the edge of each fast path's exactness bound, where one bit more or less changes the
result. Each case also checks that the fast kernel ran (and, where it must, handed back).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import fpsim
import fpsim.tensorcore as tc
from fpsim.tensorcore import fastpath
from fpsim.tensorcore import model as tc_model
from tests.tensorcore_reference import adversarial

PLAIN = [("A100", "fp16"), ("H100", "fp16"), ("A100", "bf16"), ("H100", "bf16"),
         ("A100", "tf32"), ("H100", "tf32"), ("V100", "fp16"), ("H100", "fp8_e4m3"),
         ("Ada", "fp8_e5m2"),
         (tc.BlockFMA(8, 1, "rne", -132), "fp16"),  # nearest even by the float32 cast
         (tc.BlockFMA(4, 3, "rz", None), "bf16"),  # no floor
         (tc.BlockFMA(8, 0, "rz", -20), "fp16"),  # a floor above the products' range
         (tc.BlockFMA(5, -4, "rz", -130), "fp16")]  # fewer result bits, odd block
ROUNDED = [("B200", "fp8_e4m3"), ("B200", "fp8_e5m2"), ("B200-fp8-rz-then-c", "e4m3"),
           (tc.BlockFMA(8, 2, "rz", -133, c_addition="rounded_sum"), "fp16"),
           (tc.BlockFMA(6, 1, "rne", None, c_addition="rounded_sum",
                        c_rounding="toward_zero"), "bf16"),
           (tc.BlockFMA(4, -5, "rz", -20, c_addition="rounded_sum", c_rounding="down"),
            "fp16"),
           (tc.BlockFMA(8, 2, "rz", -20, c_addition="rounded_sum"), "fp16"),  # a high floor
           (tc.BlockFMA(8, 1, "rz", -133, c_addition="rounded_sum"), "bf16")]  # sums past fp32


def _label(v) -> str:
    return v if isinstance(v, str) else v.describe()[:40]


def _adversarial(rng, shape, lo=-40, hi=40):
    return adversarial(rng, shape, lo, hi, fp16_subnormals=True)


def _specials(rng, x):
    x = x.copy()
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, size=max(1, flat.size // 50), replace=False)
    flat[idx] = rng.choice([np.inf, -np.inf, np.nan], size=idx.size)
    return x


def _cases(rng, wide: bool):
    """(A, B, C) triples for one unit."""
    for K in (1, 7, 8, 9, 17, 33, 100):
        yield rng.standard_normal((6, K)), rng.standard_normal((K, 5)), None
        yield (_adversarial(rng, (7, K)), _adversarial(rng, (K, 9)),
               _adversarial(rng, (7, 9)) * 2.0 ** rng.integers(-30, 30))
    A = _adversarial(rng, (5, 40))
    yield A, A.T[:, ::-1].copy(), -A @ A.T[:, ::-1]  # cancellation against c
    A[0] = -0.0  # a row of zero products, c = -0 and +0
    yield A, np.abs(_adversarial(rng, (40, 2))), np.array([[-0.0, 0.0]] * 5)
    Z = rng.standard_normal((4, 24))
    Z[:, :8] = 0.0  # a first block without products
    tiny = np.array([[2.0**-140, -(2.0**-110)], [2.0**-126, 0.0], [-(2.0**-149), 1.0],
                     [2.0**-100, 2.0**-103]])
    yield Z, rng.standard_normal((24, 2)), tiny  # tiny and subnormal c, nothing to add
    yield (_specials(rng, _adversarial(rng, (6, 30))), _specials(rng, _adversarial(rng, (30, 4))),
           _specials(rng, rng.standard_normal((6, 4))))
    big = rng.standard_normal((3, 48)) * 2.0**12
    yield big, rng.standard_normal((48, 3)) * 2.0**12, np.full((3, 3), 3.0e38)  # c near max
    small = rng.standard_normal((5, 24)) * 2.0**-12  # products near fp16's bottom
    yield small, rng.standard_normal((24, 4)) * 2.0**-12, None

    def binade(shape, e):  # values of one binade 2**e, full significands, both signs
        return rng.choice([-1.0, 1.0], shape) * (1 + rng.integers(0, 1024, shape) / 1024) * 2.0**e

    yield binade((4, 16), -13), binade((16, 3), -13), None  # no spread, all products tiny
    if wide:  # the exponent ranges the float32 kernel refuses or hands back
        for s in (20, 25, 28, 31):  # rows / columns of two scales: spreads around the window
            A = rng.standard_normal((6, 32)) * 2.0 ** -(s * (np.arange(6) % 2))[:, None]
            B = rng.standard_normal((32, 5)) * 2.0 ** -(s * (np.arange(5) % 2))
            A[:, 3] = B[5] = 0.0
            yield A, B, None
        for s in (26, 29, 32, 35):  # a row and a column far below the others, zeros
            A, B = binade((3, 24), 0), binade((24, 3), 0)
            A[1], B[:, 1] = binade(24, -s), binade(24, -s)
            A[2, 5] = B[7, 2] = 0.0
            yield A, B, None
        for lo, hi in ((-70, -55), (55, 63), (-60, 60)):
            yield (_adversarial(rng, (4, 24)) * 2.0 ** rng.integers(lo, hi, size=(4, 24)),
                   _adversarial(rng, (24, 3)) * 2.0 ** rng.integers(lo, hi, size=(24, 3)),
                   np.full((4, 3), -0.0))
        yield (rng.standard_normal((3, 40)) * 2.0**62, rng.standard_normal((40, 2)) * 2.0**62,
               None)  # partial sums past fp32's range
        yield (rng.standard_normal((4, 24)) * 2.0**-70, rng.standard_normal((24, 3)) * 2.0**-62,
               None)  # sums in fp32's subnormal range


def _reference(monkeypatch, f):
    """f() computed by the kernels the fast ones stand in for."""
    with monkeypatch.context() as m:
        m.setattr(tc_model._PlainFast, "make", classmethod(lambda cls, *a, **k: None))
        m.setattr(tc_model, "_fast_kind", lambda unit: None)
        return f()


def _spy(monkeypatch, name):
    calls = []
    f = getattr(fastpath, name)
    monkeypatch.setattr(fastpath, name,
                        lambda *a, _f=f, **k: calls.append(r := _f(*a, **k)) or r)
    return calls


def _same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return np.array_equal(x.view(np.uint64), y.view(np.uint64))


def _check(monkeypatch, gpu, fin, A, B, C, **kw):
    with np.errstate(all="ignore"):
        fast = tc.matmul(A, B, C, gpu=gpu, input_format=fin, **kw)
        slow = _reference(monkeypatch, lambda: tc.matmul(A, B, C, gpu=gpu, input_format=fin,
                                                         **kw))
    assert _same(fast, slow), (_label(gpu), fin, A.shape, B.shape,
                               np.argwhere(~(fast.view(np.uint64) == slow.view(np.uint64)))[:5])


@pytest.mark.parametrize("gpu,fin", PLAIN, ids=_label)
def test_plain_float32_kernel_equals_the_plain_kernel(monkeypatch, gpu, fin):
    used = _spy(monkeypatch, "chain_plain_f32")
    rng = np.random.default_rng(zlib.crc32(f"{gpu!r} {fin}".encode()))
    for A, B, C in _cases(rng, fin in ("bf16", "tf32")):
        _check(monkeypatch, gpu, fin, A, B, C)
    assert used


@pytest.mark.parametrize("gpu,fin", ROUNDED, ids=_label)
def test_blas_block_sums_equal_the_stagewise_kernel(monkeypatch, gpu, fin):
    used = _spy(monkeypatch, "rounded_sums_blas")
    rng = np.random.default_rng(zlib.crc32(f"{gpu!r} {fin}".encode()))
    for A, B, C in _cases(rng, True):
        _check(monkeypatch, gpu, fin, A, B, C)
    assert used and any(r is None for r in used) and any(r is not None for r in used)


@pytest.mark.parametrize("gpu,fin", [("A100", "fp16"), ("H100", "bf16"), ("B200", "e5m2"),
                                     ("MI300X", "fp16")], ids=_label)
def test_chunks_and_promotion(monkeypatch, gpu, fin):
    """Small chunks (over rows and columns, so that cached exponents are reused per column
    range) and DeepSeek's promotion (partial sums of N_C products) through the fast kernels;
    MI300X (c added late) is the third c_addition kind, for completeness."""
    rng = np.random.default_rng(3)
    A, B = _adversarial(rng, (9, 70)), _adversarial(rng, (70, 33))
    C = rng.standard_normal((9, 33))
    monkeypatch.setattr(tc_model, "CHUNK_ELEMENTS", 48)
    _check(monkeypatch, gpu, fin, A, B, C)
    monkeypatch.undo()
    _check(monkeypatch, gpu, fin, rng.standard_normal((8, 128)), rng.standard_normal((128, 6)),
           C[:8, :6], promote_every=32)


@pytest.mark.parametrize("gpu,fin", [("A100", "fp16"), ("H100", "bf16"), ("A100", "bf16"),
                                     ("H100", "fp8_e4m3"), (PLAIN[9][0], "fp16")], ids=_label)
def test_plain_kernel_on_rows_long_enough_for_the_unbuffered_products(monkeypatch, gpu, fin):
    """Chunks with rows of at least ``_UNBUFFERED_ROW`` columns take the products from the
    unbuffered multiply (narrower ones from einsum), with an even number of rows as complex
    products of row pairs: the same results as the reference on ordinary, adversarial (zeros
    of both signs, subnormals, wide exponents) and special inputs, K ragged, with c; and
    NumPy's buffer size is left as it was."""
    rng = np.random.default_rng(zlib.crc32(f"{gpu!r} {fin} wide".encode()))
    used = []
    f = fastpath.outer
    monkeypatch.setattr(fastpath, "outer", lambda op, a, b, out, **k:
                        used.append((b.shape[1], b.dtype)) or f(op, a, b, out, **k))
    N = fastpath._UNBUFFERED_ROW + 3
    bufsize = np.getbufsize()
    for K, M in ((9, 4), (40, 3)):  # M even: rows in pairs; odd: not
        _check(monkeypatch, gpu, fin, rng.standard_normal((M, K)),
               rng.standard_normal((K, N)), rng.standard_normal((M, N)))
        _check(monkeypatch, gpu, fin, _adversarial(rng, (4, K)), _adversarial(rng, (K, N)),
               _adversarial(rng, (4, N)) * 2.0 ** rng.integers(-30, 30))
    _check(monkeypatch, gpu, fin, _specials(rng, _adversarial(rng, (2, 17))),
           _specials(rng, _adversarial(rng, (17, N))), None)
    assert np.getbufsize() == bufsize
    assert used and min(u[0] for u in used) >= fastpath._UNBUFFERED_ROW
    # both orders of a chunk: rows of A in pairs (complex products; M even) and not (M odd)
    assert {np.complex64, np.float32} <= {u[1].type for u in used}


@pytest.mark.parametrize("n", [1, 5, fastpath._UNBUFFERED_ROW - 1, fastpath._UNBUFFERED_ROW,
                               300])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int16, np.uint8])
def test_outer_is_the_broadcast_operation(n, dtype):
    """Every way of fastpath.outer (einsum, the unbuffered ufunc, plain broadcasting) gives
    op(a[k, i], b[k, j]) for every (k, i, j): products exact (inputs of at most 12 significant
    bits), -0 products with their sign where asked (``zero_signs``), exponent sums; the ufunc
    buffer size is restored, also when the operation fails."""
    rng = np.random.default_rng(n)
    bufsize = np.getbufsize()
    if np.dtype(dtype).kind == "f":
        a = tc.convert_input(rng.standard_normal((3, 7)) * 2.0 ** rng.integers(-12, 4, (3, 7)),
                             "fp16").astype(dtype)
        b = tc.convert_input(rng.standard_normal((3, n)), "bf16").astype(dtype)
        a[1, 2] = -0.0
        b[2, 0] = -0.0
        exact = a.astype(np.float64)[:, :, None] * b.astype(np.float64)[:, None, :]
        for zero_signs in (False, True):
            out = np.full((3, 7, n), np.nan, dtype)
            fastpath.outer(np.multiply, a, b, out, zero_signs=zero_signs)
            assert np.getbufsize() == bufsize
            assert np.array_equal(out.astype(np.float64), exact)
            if zero_signs:  # the signs of zeros as the broadcasting multiply's
                assert np.array_equal(np.signbit(out), np.signbit(a[:, :, None] * b[:, None, :]))
    a = rng.integers(0, 100, (3, 7)).astype(dtype)
    b = rng.integers(0, 100, (3, n)).astype(dtype)
    out = np.zeros((3, 7, n), dtype)
    fastpath.outer(np.add, a, b, out)
    assert np.getbufsize() == bufsize
    assert np.array_equal(out, a[:, :, None] + b[:, None, :])
    with pytest.raises(ValueError):
        fastpath.outer(np.add, a, b, out[:, :, :1] if n > 1 else out[:, :1])
    assert np.getbufsize() == bufsize


@pytest.mark.parametrize("N", [3, fastpath._UNBUFFERED_ROW + 1])
def test_pairwise_kernel_keeps_the_sign_of_zero_products(monkeypatch, N):
    """The pairwise float32 kernel's products keep the signs of zeros on narrow and wide rows
    alike (a broadcasting multiply's, never einsum's +0), so its signed zero results are what
    they were: -0 + -0 = -0 for a unit that keeps subnormals (a -0 c stays -0). MI210
    (which flushes) as the stage-by-stage kernel."""
    rng = np.random.default_rng(N)
    A = rng.standard_normal((4, 8))
    A[0] = -0.0  # a row of -0 products (positive B), +0 ones in column 0 (negative B)
    B = np.abs(rng.standard_normal((8, N)))
    B[:, 0] = -B[:, 0]
    C = np.full((4, N), -0.0)
    _check(monkeypatch, "MI210", "fp16", A, B, C)
    unit = tc.BlockFMA(4, 0, "rne", None, summation="pairwise")
    got = tc.matmul(A, B, C, gpu=unit, input_format="fp16")
    assert np.all(np.signbit(got[0, 1:])) and not np.signbit(got[0, 0])


@pytest.mark.parametrize("out_fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_pairwise_units_add_zeros_as_ieee_does(monkeypatch, out_fmt, n):
    """A pairwise unit that keeps subnormals adds in a tree of IEEE additions, so a zero
    result is -0 exactly where every product and c are -0 (round to nearest even: -0 + -0 =
    -0, -0 + +0 = +0), for every output format and on the fast and the stage-by-stage kernels
    alike (the stage-by-stage products once came from einsum, whose -0 products are +0: fp16 /
    bf16 outputs, which only that kernel computes, returned +0)."""
    rng = np.random.default_rng(n)
    K, M, N = 2 * n + 1, 6, 5  # two blocks and a padded one (padding: +0 products)
    A = np.where(rng.random((M, K)) < 0.5, -0.0, 0.0)
    A[0] = -0.0  # rows of -0 products (B > 0 in every column but the last)
    A[1, :K - 1] = -0.0  # ... and one with the padded block's real product +0
    A[1, K - 1] = 0.0
    B = np.abs(rng.standard_normal((K, N))) + 0.5
    B[:, -1] = -B[:, -1]  # the last column: the sign of every product flipped
    C = np.where(rng.random((M, N)) < 0.7, -0.0, 0.0)
    unit = tc.BlockFMA(n, 0, "rne", None, summation="pairwise")
    prods = np.signbit(A)[:, :, None] ^ np.signbit(B)[None, :, :]  # (M, K, N): -0 products
    padded = K % n != 0  # the unit pads the last block with +0 products
    want = prods.all(axis=1) & np.signbit(C) & (not padded)
    with np.errstate(all="ignore"):
        fast = tc.matmul(A, B, C, gpu=unit, input_format="fp16", output_format=out_fmt)
        slow = _reference(monkeypatch, lambda: tc.matmul(A, B, C, gpu=unit, input_format="fp16",
                                                         output_format=out_fmt))
    for got in (fast, slow):
        assert np.all(got == 0)
        assert np.array_equal(np.signbit(got), want), (out_fmt, np.signbit(got), want)
    # a block that fills exactly: no padding, so -0 results appear
    Af, Bf, Cf = A[:, :2 * n], B[:2 * n], C
    want = (np.signbit(Af)[:, :, None] ^ np.signbit(Bf)[None]).all(axis=1) & np.signbit(Cf)
    assert want.any()
    with np.errstate(all="ignore"):
        for got in (tc.matmul(Af, Bf, Cf, gpu=unit, input_format="fp16", output_format=out_fmt),
                    _reference(monkeypatch, lambda: tc.matmul(
                        Af, Bf, Cf, gpu=unit, input_format="fp16", output_format=out_fmt))):
            assert np.array_equal(np.signbit(got), want), (out_fmt, n)


def _edge_rows(fi, n: int, spread: int) -> tuple[np.ndarray, np.ndarray, list]:
    """Rows of one block: products 2**H and -(s**2) 2**(H - e) (s = 1 + 2**-m: the last bit
    set) for e = spread and spread + 1, each factor a normal input value; returns A, B and the
    exact sums."""
    m = fi.mantissa_bits
    s = 1 + 2.0**-m
    H = min(2 * (fi.emax - 1), 20)  # the sum stays far inside fp32's range
    A = np.zeros((2, n))
    B = np.zeros((n, 2))
    exact = []
    for r, e in enumerate((spread, spread + 1)):
        lo = H - e
        A[r, :2] = [2.0 ** (H // 2), -s * 2.0 ** (lo // 2)]
        B[:2, r] = [2.0 ** (H - H // 2), s * 2.0 ** (lo - lo // 2)]
        exact.append(2.0**H - s * s * 2.0**lo)
    return A, B, exact


@pytest.mark.parametrize("gpu,fin", [("B200", "fp8_e4m3"), ("B200", "fp8_e5m2"),
                                     (ROUNDED[3][0], "fp16"),
                                     (tc.BlockFMA(8, 1, "rz", -133, c_addition="rounded_sum"),
                                      "bf16")],
                         ids=_label)
def test_blas_sums_on_the_edge_of_their_bound(monkeypatch, gpu, fin):
    """A product spread of exactly the exactness bound F - 2m: no bit falls off the alignment
    grid and the result is the exact sum's rounding (BLAS's sum); one binade more: the last
    bit is truncated and the result differs from the exact sum's rounding (the reference's
    kernel computes it). Both equal the stage-by-stage kernel's. (Units rounding toward zero:
    there the dropped bit moves the result.)"""
    unit, fi, _, _ = tc.gpus.resolve_unit(gpu, fin, "fp32")
    lim = unit.fraction_bits - 2 * fi.mantissa_bits
    A, B, exact = _edge_rows(fi, unit.block_size, lim)
    assert np.array_equal(tc.convert_input(A, fi), A)  # every input exact in the format
    assert np.array_equal(tc.convert_input(B, fi), B)
    with np.errstate(all="ignore"):
        got = tc.matmul(A, B, gpu=gpu, input_format=fin)
    rounded = [float(fpsim.round(x, "fp32", unit.output_rounding)) for x in exact]
    assert got[0, 0] == rounded[0] and got[1, 1] != rounded[1]
    _check(monkeypatch, gpu, fin, A, B, None)


@pytest.mark.parametrize("gpu,fin", [("A100", "fp16"), ("H100", "fp16"), ("A100", "bf16"),
                                     ("H100", "fp8_e4m3")], ids=_label)
def test_plain_sums_where_one_bit_falls_off(monkeypatch, gpu, fin):
    """The plain kernel's truncation on the edge: c = 2**k and products whose last bits lie
    just on / just below the grid 2**(maxE - F), negative so that truncation moves the sum
    across a rounding boundary; several blocks chain."""
    unit, fi, _, _ = tc.gpus.resolve_unit(gpu, fin, "fp32")
    F, m, n = unit.fraction_bits, fi.mantissa_bits, unit.block_size
    rows, cs = [], []
    s = 1 + 2.0**-m
    for shift in range(F - 2 * m - 2, F + 3):
        a = np.zeros(2 * n)
        a[0], a[n] = -s * 2.0**-shift, s * 2.0**-shift
        rows.append(a)
        cs.append(1.0)
    A = np.array(rows)
    B = np.zeros((2 * n, 1))
    B[0, 0] = B[n, 0] = s
    C = np.array(cs)[:, None]
    _check(monkeypatch, gpu, fin, A, B, C)


@pytest.mark.parametrize("gpu,fin", [("A100", "fp16"), ("H100", "bf16"), ("A100", "tf32")],
                         ids=_label)
def test_uint8_exponent_sums_keep_zero_products_apart(gpu, fin):
    """Over a grid of exponent ranges: where ``window`` accepts them, the uint8 sum of two
    biased exponents is the float32 exponent field e_a + e_b + 127 (no wrap) and at least
    ``live``, and every sum with a zero factor lies below ``live``."""
    unit, fi, fo, _ = tc.gpus.resolve_unit(gpu, fin, "fp32")
    p = fastpath.plain_f32_setup(unit, fi, unit.result_format(fo))
    edges = 0
    for lo_a in range(-70, 10, 7):
        for hi_a in range(lo_a, 64, 9):
            for lo_b in range(-70, 10, 5):
                for hi_b in range(lo_b, 64, 11):
                    bias = fastpath.window(p, lo_a, hi_a, lo_b, hi_b)
                    lo = lo_a + lo_b
                    if bias is None:
                        continue
                    edges += (hi_a - lo_a) + (hi_b - lo_b) == lo + 125
                    ea = np.arange(lo_a, hi_a + 1)
                    eb = np.arange(lo_b, hi_b + 1)
                    a8 = fastpath.biased_exponents(np.append(ea, 0), np.arange(ea.size + 1)
                                                   < ea.size, bias).astype(int)
                    b8 = fastpath.biased_exponents(np.append(eb, 0), np.arange(eb.size + 1)
                                                   < eb.size, 127 - bias).astype(int)
                    real = a8[:-1, None] + b8[None, :-1]
                    assert a8[-1] == b8[-1] == 0
                    assert np.array_equal(real, ea[:, None] + eb[None, :] + 127)
                    assert real.max() <= 255 and real.min() >= lo + 127
                    assert a8.max() < lo + 127 and b8.max() < lo + 127  # sums with a zero
    assert edges  # the grid reaches the window's edge


def test_fast_kernels_hand_back_what_they_cannot_do(monkeypatch):
    """The float32 kernel hands a chunk to _chain when the exponents leave its window (bf16
    spread), a block when c is tiny with no products or maxE could overflow; the results are
    the reference's (checked above); here: _chain ran after the fast kernel started."""
    used = []
    f = tc_model._chain
    monkeypatch.setattr(tc_model, "_chain", lambda *a, **k: used.append(1) or f(*a, **k))
    fast = _spy(monkeypatch, "chain_plain_f32")
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((3, 40)), rng.standard_normal((40, 2))
    tc.matmul(A, B, gpu="A100")
    assert fast and not used  # ordinary inputs: the fast kernel alone
    tc.matmul(A * 2.0**60, B * 2.0**60, gpu="H100", input_format="bf16")  # may overflow
    assert used
    used.clear()
    A[:, :8] = 0.0
    tc.matmul(A, B, [[2.0**-120, 0.0]] * 3, gpu="A100")  # tiny c, a block with no products
    assert used
    used.clear()
    A[0, 9] *= 2.0**-70  # a column of A whose exponents spread over 70 binades
    tc.matmul(A, B, gpu="A100", input_format="bf16")
    assert used


@pytest.mark.parametrize("gpu,fin", [("A100", "fp16"), ("H100", "bf16")])
def test_hand_backs_from_rows_in_pairs(monkeypatch, gpu, fin):
    """The hand-backs of the float32 kernel (A100: tiny c with no products; H100: a maxE that
    could overflow, in a later block) from a chunk carried with its rows in pairs (M even, N
    wide): _chain gets c in row order and the results are the reference's."""
    rng = np.random.default_rng(5)
    N = fastpath._UNBUFFERED_ROW + 1
    A, B = rng.standard_normal((4, 40)), rng.standard_normal((40, N))
    if gpu == "A100":
        A[:, :8] = 0.0  # the first block: no products, with a tiny c
        A[2] = 0.0  # and a row without any, whose results are its c's
        C = rng.standard_normal((4, N)) * 2.0**-120
        C[1] = 0.0
    else:
        big = 2.0 ** np.where(np.arange(40) < 16, 40, 59)  # later products near 2**120
        A, B = np.abs(A[:, ::-1]) * big, B * big[:, None]
        C = rng.standard_normal((4, N)) * 2.0**70
    used, calls = [], _spy(monkeypatch, "chain_plain_f32")
    f = tc_model._chain
    with monkeypatch.context() as m:
        m.setattr(tc_model, "_chain", lambda *x, **k: used.append(1) or f(*x, **k))
        with np.errstate(all="ignore"):
            fast = tc.matmul(A, B, C, gpu=gpu, input_format=fin)
    assert calls and used  # the float32 kernel ran and handed blocks back
    with np.errstate(all="ignore"):
        slow = _reference(monkeypatch, lambda: tc.matmul(A, B, C, gpu=gpu, input_format=fin))
    assert _same(fast, slow)


@pytest.mark.parametrize("gpu,fin", [("A100", "fp16"), ("H100", "bf16")])
def test_chunks_reuse_the_kernels_temporaries(monkeypatch, gpu, fin):
    """Several chunks of one product (rows in pairs, wide, the last chunk smaller) share the
    kernel's temporaries through ``work``: the results are the reference's, and each chunk's
    result is an array of its own (not a view of the temporaries the next chunk reuses)."""
    rng = np.random.default_rng(6)
    N = fastpath._UNBUFFERED_ROW + 4
    A, B = rng.standard_normal((14, 40)), rng.standard_normal((40, N))
    if fin == "fp16":  # (bf16's wide exponent range would send the chunks to _chain)
        A = _adversarial(rng, (14, 40))
    C = rng.standard_normal((14, N))
    results = []
    f = fastpath.chain_plain_f32

    def spy(*a, **k):
        results.append((r := f(*a, **k), k["work"]))
        return r

    n = tc.gpus.resolve_unit(gpu, fin, "fp32")[0].block_size
    monkeypatch.setattr(tc_model, "CHUNK_ELEMENTS", n * N)  # fast chunks of 4 rows
    monkeypatch.setattr(fastpath, "chain_plain_f32", spy)
    _check(monkeypatch, gpu, fin, A, B, C)
    assert len(results) >= 3 and all(w is results[0][1] for _, w in results)
    for r, work in results:
        assert not any(np.shares_memory(r, t) for t in work.values())


def test_the_small_ufunc_buffer_is_the_calling_threads_own():
    """fastpath.outer sets NumPy's ufunc buffer size for its own multiply and restores it:
    that is safe beside other threads only because the setting is per thread (a context
    variable since NumPy 2.0, the lowest declared version included). A thread holding the
    small buffer leaves another thread's size, and its results, as they were."""
    import threading

    default = np.getbufsize()
    held, seen = threading.Event(), []
    release = threading.Event()

    def small():
        old = np.setbufsize(16)
        try:
            held.set()
            release.wait(5)
        finally:
            np.setbufsize(old)

    t = threading.Thread(target=small)
    t.start()
    try:
        assert held.wait(5)
        seen.append(np.getbufsize())
        a = np.arange(3.0 * 300).reshape(3, 300)
        out = np.empty((3, 300, 300))
        fastpath.outer(np.multiply, a, a, out)  # restores this thread's size, not the other's
        seen.append(np.getbufsize())
    finally:
        release.set()
        t.join()
    assert seen == [default, default] and np.getbufsize() == default
    assert np.array_equal(out, a[:, :, None] * a[:, None, :])
