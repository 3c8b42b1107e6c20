"""The specialised kernels of the generic block FMA (fpsim/tensorcore/model.py: exact, late-c /
odd-even, pairwise) against the stage-by-stage kernel they replace when no trace is asked for.

The independent references of these units are the published models run in Octave
(tests/test_tensorcore_octave.py) and the Fraction reference (tests/test_tensorcore_generic.py),
and both now run through the specialised kernels; this file adds what those rows cannot reach:
bit-for-bit agreement with the stage-by-stage kernel on adversarial inputs (exponents over the
whole range, subnormals, zeros of both signs, cancellation, huge and tiny values in one block,
sums that overflow, ragged K) for every AMD unit and pair and for custom units that vary the
parameters no published unit varies; and the fp32 output rounding by casts against fpsim's own
rounding kernel and NumPy's float32 conversion.
"""

from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import pytest

import fpsim
import fpsim.tensorcore as tc
from fpsim.formats import FP32
from fpsim.modes import Rounding
from fpsim.tensorcore import model as tc_model
from tests.tensorcore_reference import adversarial

AMD = [(g, fin) for g in ("MI100", "MI210", "MI300X") for fin, _ in tc.get_gpu(g).units]
CUSTOM = [
    *(tc.BlockFMA(n, 2, "rne", mel, grouping=grp, c_addition="late", alignment_rounding=ar,
                  c_far_truncation=far, late_extra_bits=3)
      for n, grp in ((6, "none"), (8, "odd_even"))
      for ar in ("toward_zero", "down", "up", "nearest_even")
      for far, mel in ((None, None), (3, -20))),
    tc.BlockFMA(8, 1, "rz", None, grouping="odd_even", c_addition="late", product_limit=True),
    tc.BlockFMA(5, 0, "rz", summation="exact"),
    tc.BlockFMA(3, -5, "rne", summation="exact"),
    tc.BlockFMA(4, 0, "rne", summation="pairwise"),
    tc.BlockFMA(8, 0, "rne", summation="pairwise", output_subnormals="flush"),
    tc.BlockFMA(2, 0, "rne", summation="pairwise", output_subnormals="flush",
                input_subnormals="daz"),
    # c added to the rounded product sum (B200's fp8 rule and variations)
    tc.BlockFMA(8, 2, "rz", -133, c_addition="rounded_sum"),
    tc.BlockFMA(6, 1, "rne", None, c_addition="rounded_sum", c_rounding="toward_zero"),
    tc.BlockFMA(4, -5, "rz", -20, c_addition="rounded_sum", c_rounding="down"),
    tc.BlockFMA(8, 0, "up", None, c_addition="rounded_sum", c_rounding="up",
                overflow="saturate"),
    tc.BlockFMA(5, 0, "rz", summation="exact", c_addition="rounded_sum"),
]




def _stagewise(monkeypatch, f):
    """f() computed by the stage-by-stage kernel (no specialised kernel)."""
    with monkeypatch.context() as m:
        m.setattr(tc_model, "_fast_kind", lambda unit: None)
        return f()


def _same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return np.array_equal(x.view(np.uint64), y.view(np.uint64))


def _cases(rng, fin):
    """(A, B, C) triples: adversarial, tiny (subnormal products and sums for wide formats),
    huge (partial sums past fp32's range, products below the product limit), -0 c."""
    wide = fin in ("bf16", "tf32")
    for K in (1, 3, 8, 17, 48):
        yield (adversarial(rng, (5, K)), adversarial(rng, (K, 7)),
               adversarial(rng, (5, 7)) * 2.0 ** rng.integers(-30, 30))
    A = adversarial(rng, (4, 33))
    yield A, A.T[:, ::-1].copy(), -A @ A.T[:, ::-1]  # cancellation against c
    A[0] = -0.0  # a row of zero products with c = -0 and +0
    yield A, np.abs(adversarial(rng, (33, 2))), np.array([[-0.0, 0.0]] * 4)
    if wide:
        for lo, hi in ((-70, -55), (55, 63)):
            yield (adversarial(rng, (4, 24)) * 2.0 ** rng.integers(lo, hi, size=(4, 24)),
                   adversarial(rng, (24, 3)) * 2.0 ** rng.integers(lo, hi, size=(24, 3)),
                   np.full((4, 3), -0.0))


@pytest.mark.parametrize("gpu,fin", AMD + [(u, f) for u in CUSTOM for f in ("fp16", "bf16")],
                         ids=lambda v: v if isinstance(v, str) else v.describe()[:40])
def test_specialised_kernels_equal_the_stagewise_kernel(monkeypatch, gpu, fin):
    rng = np.random.default_rng(zlib.crc32(f"{gpu!r} {fin}".encode()))
    for A, B, C in _cases(rng, fin):
        with np.errstate(all="ignore"):
            fast = tc.matmul(A, B, C, gpu=gpu, input_format=fin)
            slow = _stagewise(monkeypatch, lambda A=A, B=B, C=C:
                              tc.matmul(A, B, C, gpu=gpu, input_format=fin))
        assert _same(fast, slow), (gpu, fin, A.shape, np.nonzero(~(fast == slow))[0][:5])
        a, b, c = A, adversarial(rng, A.shape), C[:, 0]
        with np.errstate(all="ignore"):
            fd = tc.dot(a, b, c, gpu=gpu, input_format=fin)
            sd = _stagewise(monkeypatch, lambda a=a, b=b, c=c:
                            tc.dot(a, b, c, gpu=gpu, input_format=fin))
        assert _same(fd, sd), (gpu, fin, "dot", A.shape)


def test_specialised_kernels_cover_the_amd_units(monkeypatch):
    used = []
    for name in ("_chain_exact", "_chain_late", "_chain_pairwise", "_chain_general"):
        f = getattr(tc_model, name)
        monkeypatch.setattr(tc_model, name,
                            lambda *a, _f=f, _n=name, **k: used.append(_n) or _f(*a, **k))
    rng = np.random.default_rng(1)
    for gpu, fin in AMD:
        used.clear()
        tc.matmul(rng.standard_normal((4, 20)), rng.standard_normal((20, 3)), gpu=gpu,
                  input_format=fin)
        assert used and "_chain_general" not in used, (gpu, fin, used)
    # what the specialised kernels leave to the stage-by-stage one: explain, a reachable
    # product limit, and an overflowed block (recomputed)
    used.clear()
    tc.dot([1.0, 2.0], [3.0, 4.0], 0.5, gpu="MI300X", explain=True)
    assert used == ["_chain_general"]
    used.clear()
    big = np.full((2, 8), 2.0**70)
    tc.matmul(big, big.T, gpu="MI300X", input_format="bf16")
    assert used == ["_chain_general"]
    used.clear()
    d = tc.matmul(np.full((1, 8), 2.0**63), np.full((8, 1), 2.0**63), gpu="MI300X",
                  input_format="bf16")  # products 2**126 < the limit; their sum overflows
    assert used == ["_chain_late", "_chain_general"] and d[0, 0] == np.inf


def test_rounded_sum_units_take_their_own_kernel(monkeypatch):
    """c added to the rounded product sum: the aligned summation runs _chain_rounded, never
    the joined-c plain kernel nor the exact kernel (whose c joins the sum); an exact product
    sum with c added after runs the stage-by-stage kernel."""
    used = []
    for name in ("_chain", "_chain_exact", "_chain_late", "_chain_rounded", "_chain_general"):
        f = getattr(tc_model, name)
        monkeypatch.setattr(tc_model, name,
                            lambda *a, _f=f, _n=name, **k: used.append(_n) or _f(*a, **k))
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((4, 64)), rng.standard_normal((64, 3))
    for gpu, fin, kernel in (
            ("B200", "fp8_e5m2", "_chain_rounded"), ("B200-fp8-rz-then-c", "e4m3",
                                                     "_chain_rounded"),
            ("B200-fp8-exact", "e5m2", "_chain_exact"),
            (tc.BlockFMA(8, 0, "rz", summation="exact", c_addition="rounded_sum"), "bf16",
             "_chain_general")):
        used.clear()
        tc.matmul(A, B, gpu=gpu, input_format=fin)
        assert used == [kernel], (gpu, used)


def test_fp32_cast_rounding_equals_the_rounding_kernel():
    """Nearest-even fp32 results by float64 -> float32 casts (IEEE conversion) equal
    _round_out's, over the normal and subnormal ranges, ties and the overflow threshold."""
    rng = np.random.default_rng(7)
    mant = rng.integers(0, 2**52, size=20000, dtype=np.uint64)
    mant[::4] &= ~np.uint64(2**28 - 1)  # low bits clear: ties and exact values
    v = (mant | np.uint64(1023 << 52)).view(np.float64)  # every significand in [1, 2)
    v = np.ldexp(v, rng.integers(-160, 130, size=20000))  # over and around fp32's range
    ties = (np.arange(1, 2001) * 2 + 1) * 2.0**-150  # halfway between subnormals
    edge = np.array([FP32.max, np.nextafter(2.0**128, 0), 2.0**128 - 2.0**103,
                     np.nextafter(2.0**128 - 2.0**103, 0), 2.0**128, 2.0**-126, 2.0**-150,
                     np.nextafter(2.0**-150, 1), 2.0**-149, 0.0])
    v = np.concatenate([v, -v, ties, -ties, edge, -edge])
    cast = tc_model._rounder(FP32, Rounding.NEAREST_EVEN, "inf")
    got = np.empty_like(v)
    cast(v, got)
    want = np.empty_like(v)
    tc_model._round_out(v, FP32, Rounding.NEAREST_EVEN, "inf", want)
    assert _same(got, want)
    with np.errstate(over="ignore"):
        assert _same(want, v.astype(np.float32).astype(np.float64))
    assert _same(np.asarray(fpsim.round(v[:20000], "fp32")), want[:20000])


def _fp32_nearest_even(s: Fraction) -> float:
    """The fp32 number nearest to the exact s (ties to even), by comparing Fractions with the
    neighbours of a float32 guess."""
    x = np.float32(float(s))
    cands = [np.nextafter(x, np.float32(-np.inf)), x, np.nextafter(x, np.float32(np.inf))]
    return float(min(cands, key=lambda v: (abs(Fraction(float(v)) - s),
                                           int(np.array(v).view(np.uint32)) & 1)))


@pytest.mark.parametrize("fin,a,b,c", [
    # c far below the products: its bits lie past float64's 53; exact: just off a tie
    ("fp16", [1.0, 2.0**-12], [1.0, 2.0**-12], 2.0**-100),  # 1 + 2**-24 + 2**-100
    ("fp16", [1.0, 2.0**-11, 2.0**-12], [1.0, 2.0**-12, 2.0**-12], -(2.0**-100)),
    # c far above the products' lowest bit: 2**10 + 2**-14 (a tie) + 2**-44
    ("bf16", [2.0**-7, 2.0**-22], [2.0**-7, 2.0**-22], 2.0**10),
    ("bf16", [2.0**-7, -(2.0**-22)], [2.0**-7, 2.0**-22], 2.0**10 + 2.0**-13),
])
def test_exact_sums_where_float64_would_round(fin, a, b, c):
    """MI100's exact block sums on single blocks whose exact value needs more than 53 bits and
    lies just off an fp32 tie: the correctly rounded sum (exact Fractions), for one dot product
    and as one row among ordinary ones (where the block-wide exactness test must not pass)."""
    exact = sum(Fraction(x) * Fraction(y) for x, y in zip(a, b, strict=True)) + Fraction(c)
    want = _fp32_nearest_even(exact)
    naive = float(np.float32(sum(x * y for x, y in zip(a, b, strict=True)) + c))
    assert naive != want  # a float64 sum rounded to fp32 would be wrong here
    assert float(tc.dot(a, b, c, gpu="MI100", input_format=fin)) == want
    A = np.vstack([np.full((3, len(a)), 0.5), a])
    C = np.array([[1.0, 0.75], [0.5, 1.5], [2.0, 1.0], [c, 1.0]])
    B = np.array([b, [1.0] * len(b)]).T
    got = tc.matmul(A, B, C, gpu="MI100", input_format=fin)
    assert got[3, 0] == want


@pytest.mark.parametrize("fin", ["fp16", "bf16"])
def test_exact_blas_sums_with_many_elements_recomputed(monkeypatch, fin):
    """MI100's matrix products take float64 BLAS block sums and recompute the elements the
    exactness bound does not cover, a bounded number at a time: with tiny chunks (several
    steps of recomputed elements per block) and inputs spanning wide exponent ranges (most
    elements recomputed), the results equal the stage-by-stage kernel's."""
    rng = np.random.default_rng(1617)
    A = adversarial(rng, (9, 13), -60, 60) * 2.0 ** rng.integers(-20, 20, size=(9, 13))
    B = adversarial(rng, (13, 11), -60, 60)
    C = adversarial(rng, (9, 11)) * 2.0**-30
    with np.errstate(all="ignore"):
        want = _stagewise(monkeypatch, lambda: tc.matmul(A, B, C, gpu="MI100", input_format=fin))
        monkeypatch.setattr(tc_model, "CHUNK_ELEMENTS", 24)
        got = tc.matmul(A, B, C, gpu="MI100", input_format=fin)
    assert _same(got, want)
