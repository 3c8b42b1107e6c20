"""Issue 33's B200 fp8 rule, B200's fp8 default, against computations made apart from it.

The rule: the 32 products aligned as the published B200 model does (2 extra bits, alignment
floor 2**-133) and their sum truncated toward zero to fp32; c then added and the result rounded
to nearest even to fp32; blocks chained in ascending k, each block's result the next one's c.
fpsim has it as ``BlockFMA(..., c_addition="rounded_sum")``, the unit of ``gpu="B200"`` with
e4m3 / e5m2 inputs and of ``gpu="B200-fp8-rz-then-c"``.

Two computations of the rule apart from that code: ``issue_rule`` (the products' sum by the
plain block-FMA kernel with c = 0, which takes no part in the alignment, then ``fpsim.add``,
the core's correctly rounded addition), and ``fraction_rule`` (Fractions, through the scalar
reference of tests/tensorcore_reference.py). Both equal the default on the 6,000 measured rows
of tests/data/tensorcore/open/ (as do the exact rule and the fitted variant: these rows cannot
tell them apart) and on wide-spread inputs over several blocks, where the exact rule differs.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fpsim
import fpsim.tensorcore as tc
from fpsim.tensorcore.model import dot_rows
from tests import tensorcore_reference as ref

OPEN = Path(__file__).parent / "data" / "tensorcore" / "open"
FORMATS = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2"}
#: The products' stage of the rule: a joined-c unit whose c is 0 takes no part in it.
PRODUCTS = tc.BlockFMA(32, 2, "toward_zero", -133)


def issue_rule(a: np.ndarray, b: np.ndarray, c: np.ndarray, fi) -> np.ndarray:
    """Rows of a, b (R x K, exact fi values) and c (R, fp32 values): per block of 32, the
    products' sum truncated to fp32 (PRODUCTS with c = 0), then fpsim.add (nearest even)."""
    d = np.asarray(c, dtype=np.float64).copy()
    for k0 in range(0, a.shape[1], 32):
        s = dot_rows(a[:, k0:k0 + 32], b[:, k0:k0 + 32], np.zeros(len(d)), PRODUCTS, fi,
                     fpsim.FP32)
        d = np.asarray(fpsim.add(d, s, "fp32"), dtype=np.float64)
    return d


def fraction_rule(a, b, c: float, fmt: str) -> float:
    """One row on Fractions: each block's products through the scalar reference's block FMA
    with c = 0 (alignment, truncation and the rounding toward zero, all on Fractions), then
    c + that sum rounded to nearest even by the reference's own rounding."""
    unit = ref.Unit(32, 2, "rz", -133, ref.IN_EMIN[fmt])
    d = float(c)
    for k0 in range(0, len(a), 32):
        s = ref.block_fma([float(x) for x in a[k0:k0 + 32]], [float(y) for y in b[k0:k0 + 32]],
                          0.0, unit)
        total = Fraction(d) + Fraction(s)
        d = 0.0 if total == 0 else ref.round_to(total, 23, -126, 127, "rne")
    return d


def _bits(x) -> np.ndarray:
    return np.asarray(fpsim.to_bits(np.asarray(x, dtype=np.float64), "fp32")).astype(np.uint64)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_default_is_the_rule_on_the_measured_rows(fmt):
    hf = tc.load_hardware_file(OPEN / f"B200_{fmt}_to_fp32.txt.gz")
    assert hf.rows == 3000
    fi = fpsim.get_format(hf.input_format)
    a, b = tc.convert_input(hf.a, fi), tc.convert_input(hf.b, fi)
    rule = _bits(issue_rule(a, b, hf.c, fi))
    assert (rule == hf.d_bits).all()
    assert (tc.model_results(hf) == rule).all()  # the default: gpu="B200"
    assert (tc.model_results(hf, "B200-fp8-rz-then-c") == rule).all()
    # the Fraction computation agrees on a sample of the rows
    for i in range(0, 3000, 25):
        assert _bits(fraction_rule(a[i], b[i], hf.c[i], FORMATS[fmt])) == hf.d_bits[i], i
    # the other candidates that fit these rows still do; the published parameters do not
    for gpu in ("B200-fp8-exact", "B200-fp8-variant"):
        assert (tc.model_results(hf, gpu) == hf.d_bits).all(), gpu
    assert (tc.model_results(hf, "B200-fp8-published") != hf.d_bits).mean() > 0.3


def _wide(rng, fi, rows: int, K: int):
    """Products spread over most of the format's range (e5m2: 2**-32 to 2**31), about one
    input in eight zero, c of both signs over a wide range (a quarter of them zero)."""
    emin = fi.emin - fi.mantissa_bits
    shape = (rows, K)

    def side():
        e = rng.integers(emin, fi.emax + 1, shape)
        v = np.minimum(rng.uniform(1, 2, shape) * np.exp2(e), fi.max)
        v *= rng.choice((-1.0, 1.0), shape)
        return tc.convert_input(v * (rng.random(shape) > 0.125), fi)

    c = rng.uniform(1, 2, rows) * np.exp2(rng.integers(-60, 40, rows)) * \
        rng.choice((-1.0, 1.0), rows) * (rng.random(rows) > 0.25)
    return side(), side(), np.asarray(fpsim.round(c, "fp32"), dtype=np.float64)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("K", [32, 64, 96, 40])
def test_default_is_the_rule_on_wide_spread_inputs(fmt, K):
    """Several chained blocks (K = 32, 64, 96; 40 is padded), c of both signs: the default
    equals the rule computed apart, as dot products and as a matrix product, and differs from
    the exact rule, the previous default."""
    fi = fpsim.get_format(FORMATS[fmt])
    rng = np.random.default_rng([33, K, len(fmt), fi.emax])
    a, b, c = _wide(rng, fi, 1500, K)
    want = issue_rule(a, b, c, fi)
    got = tc.dot(a, b, c, gpu="B200", input_format=fi)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    exact = tc.dot(a, b, c, gpu="B200-fp8-exact", input_format=fi)
    assert (exact != got).sum() > 10
    for i in range(0, 1500, 100):  # Fractions on a sample
        assert _bits(fraction_rule(a[i], b[i], c[i], FORMATS[fmt])) == _bits(got[i]), i
    # a matrix product: every (i, j) pair is the dot product of row i and column j
    A, B = a[:12], b[:9].T.copy()
    C = c[:108].reshape(12, 9)
    D = tc.matmul(A, B, C, gpu="B200", input_format=fi)
    ai, bj = np.repeat(A, 9, axis=0), np.tile(B.T, (12, 1))
    np.testing.assert_array_equal(_bits(D.reshape(-1)), _bits(issue_rule(ai, bj, C.ravel(), fi)))


def test_the_addition_of_c_is_correctly_rounded():
    """Directed cases on Fractions: the product sum truncated, then c added with one rounding
    to nearest even (c far below, ties broken or not by the truncated products, c of the
    other sign cancelling)."""
    cases = [  # (a, b, c) in e5m2; the rule's result from Fractions
        ([1.0, 2.0**-12], [1.0, 2.0**-12], 2.0**-25),  # 1 + 2**-24 truncated to 1; + 2**-25
        ([1.0, 2.0**-12], [1.0, 2.0**-12], 2.0**-24),  # 1 + 2**-24 + 2**-24: exact 1 + 2**-23
        ([1.0, 2.0**-12, 2.0**-16], [1.0, 2.0**-12, 2.0**-16], 0.0),  # RZ: 1
        ([1.0, 2.0**-12, 2.0**-16], [1.0, 2.0**-12, 2.0**-16], 2.0**-24),  # tie: to even, 1
        ([-1.0, -(2.0**-12)], [1.0, 2.0**-12], 1 + 2.0**-22),  # cancels to 2**-22 - 2**-24
        ([1.0], [1.0], -(2.0**-40)),  # c far below: 1 - 2**-40 rounds back to 1
        ([1.5], [1.0], float(np.float32(2.0**-24 * 1.5))),  # 1.5 + 1.5 * 2**-24: up
    ]
    for a, b, c in cases:
        c = float(np.float32(c))
        a8, b8 = tc.convert_input(a, "e5m2"), tc.convert_input(b, "e5m2")
        assert np.array_equal(a8, a) and np.array_equal(b8, b)
        want = fraction_rule(a8, b8, c, "fp8_e5m2")
        got = float(tc.dot(a8, b8, c, gpu="B200", input_format="e5m2"))
        assert _bits(got) == _bits(want), (a, b, c, got, want)
    # the joined exact sum breaks the tie that the rule's truncation drops
    a = [1.0, 2.0**-12]
    assert float(tc.dot(a, a, 2.0**-25, gpu="B200", input_format="e5m2")) == 1.0
    assert float(tc.dot(a, a, 2.0**-25, gpu="B200-fp8-exact", input_format="e5m2")) == \
        1 + 2.0**-23


def test_promotion_with_the_rule():
    """promote_every=64: two 32-blocks chained by the rule from c = 0, that partial added to
    the fp32 accumulator (from C) by one float32 addition."""
    fi = fpsim.get_format("fp8_e5m2")
    rng = np.random.default_rng(5)
    a, b, c = _wide(rng, fi, 64, 192)
    A, B, C = a[:8], b[:6].T.copy(), c[:48].reshape(8, 6)
    got = tc.matmul(A, B, C, gpu="B200", input_format=fi, promote_every=64)
    ai, bj = np.repeat(A, 6, axis=0), np.tile(B.T, (8, 1))
    acc = C.ravel().astype(np.float32)
    for k0 in range(0, 192, 64):
        part = issue_rule(ai[:, k0:k0 + 64], bj[:, k0:k0 + 64], np.zeros(48), fi)
        acc = acc + part.astype(np.float32)
    np.testing.assert_array_equal(_bits(got.ravel()), _bits(acc.astype(np.float64)))


def test_fingerprint_finds_the_rule():
    """The rule as a black box (issue_rule behind a closure, blocks chained): fingerprint
    finds the BlockFMA, which equals the black box on random and adversarial inputs."""
    from fpsim.probe import fingerprint

    fi = fpsim.get_format("fp8_e5m2")

    def fn(A, B, C):
        M, N = A.shape[0], B.shape[1]
        a, b = np.repeat(A, N, axis=0), np.tile(B.T, (M, 1))
        return issue_rule(a, b, C.reshape(-1), fi).reshape(M, N)

    unit = fingerprint(fn, fi)
    assert (unit.block_size, unit.extra_bits, unit.c_addition) == (32, 2, "rounded_sum")
    assert unit.output_rounding is fpsim.Rounding.TOWARD_ZERO
    assert unit.c_rounding is fpsim.Rounding.NEAREST_EVEN
    rng = np.random.default_rng(2033)
    for K in (32, 70, 96):
        a, b, c = _wide(rng, fi, 16, K)
        A, B, C = a, b.T.copy(), np.repeat(c[:, None], 16, axis=1)
        C[::3] *= -(2.0**-20)
        A[::4, K // 2:2 * (K // 2)] = -A[::4, :K // 2]  # cancellation to the last bit
        B[K // 2:2 * (K // 2), ::4] = B[:K // 2, ::4]
        got = tc.matmul(A, B, C, gpu=unit, input_format=fi)
        np.testing.assert_array_equal(_bits(got.ravel()), _bits(fn(A, B, C).ravel()))
