"""Tensor-core model: probe vectors observed on GPUs, the exact scalar reference
(tests/tensorcore_reference.py) on random, adversarial and long-K inputs, input conversion
against NumPy / ml_dtypes, special values, API errors and custom units."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpsim
import fpsim.tensorcore as tc
from fpsim.tensorcore import model as tc_model
from tests import tensorcore_reference as ref

P = 2.0  # powers of two below are written P**k for readability
GPUS = ["V100", "A100", "A30", "A2", "Ada", "L40S", "H100", "H200", "B200"]
PAIRS = {  # what each GPU supports, from the doc's table
    "V100": [("fp16", "fp32"), ("fp16", "fp16")],
    **{g: [("fp16", "fp32"), ("fp16", "fp16"), ("bf16", "fp32"), ("tf32", "fp32")]
       for g in ("A100", "A30", "A2", "B200")},
    **{g: [("fp16", "fp32"), ("fp16", "fp16"), ("bf16", "fp32"), ("tf32", "fp32"),
           ("fp8_e4m3", "fp32"), ("fp8_e5m2", "fp32")] for g in ("Ada", "L40S", "H100", "H200")},
}


def pad(xs, k):
    return list(xs) + [0.0] * (k - len(xs))


# -- probe vectors observed on hardware (docs/tensorcore-model.md) ---------------------------

V100_PROBES = [  # id, a, b, c, d
    ("A3", [0.0], [0.0], P**-149, P**-149),
    ("A5", [P**-14], [1.0], -(P**-15), P**-15),
    ("B1", [1 - P**-11] * 4, [1 - P**-11] * 4, 0.0, 4 * (1 - P**-10 + P**-22)),
    ("B3", [1.0] * 4, [P**-24] * 4, 1.0, 1.0),
    ("C1", [1.0] * 4, [2.0, P**-23 + P**-24, 0.0, 0.0], 0.0, 2.0),
    ("D1", [1.0], [1.0], -(1 - P**-24), P**-23),
    ("D3", [1.0, 1.0], [1.0, -(P**-24)], -1 + P**-24, P**-23),
    ("D4b", [1.0] * 4, [1.0, 1.5, 1.75, 1.875], 1.875, 8.0),
    ("D5a", [1.0] * 4, [P**-24] * 4, 1 - P**-24, 1 + P**-23),
    ("D5b", [1.0] * 4, [P**-24] * 4, 1.0, 1.0),
]
A100_PROBES = [
    ("B3", [0.5] * 4, [P**-24] * 4, 1.0, 1.0),
    ("D1", [1.0], [1.0], -(1 - P**-24), P**-24),
    ("D3", [1.0, 1.0], [1.0, -(P**-24)], -1 + P**-24, 0.0),
    ("D4c", [1.0] * 4, [1.0] * 4, 1 + P**-22 + P**-23, 5.0),
]


@pytest.mark.parametrize("pid,a,b,c,d", V100_PROBES, ids=[p[0] for p in V100_PROBES])
def test_v100_probes(pid, a, b, c, d):
    assert tc.dot(pad(a, 4), pad(b, 4), c, gpu="V100") == d


@pytest.mark.parametrize("pid,a,b,c,d", A100_PROBES, ids=[p[0] for p in A100_PROBES])
def test_a100_probes(pid, a, b, c, d):
    assert tc.dot(pad(a, 8), pad(b, 8), c, gpu="A100") == d


def test_a100_bf16_and_tf32_probes():
    # bf16: a subnormal fp32 output, and a subnormal bf16 input
    assert tc.dot(pad([P**-126], 8), pad([0.5], 8), 0.0, gpu="A100",
                  input_format="bf16") == P**-127
    assert tc.dot(pad([P**-133], 8), pad([P**7], 8), 0.0, gpu="A100",
                  input_format="bf16") == P**-126
    # tf32: fp32 patterns 1 - 2**-24 are truncated to 1 - 2**-11
    x = np.float32(1 - P**-24)
    assert tc.dot(pad([x], 4), pad([x], 4), 0.0, gpu="A100",
                  input_format="tf32") == 1 - P**-10 + P**-22


def test_probes_tell_the_generations_apart():
    # D1 without an extra bit (V100), with one (A100): the same inputs, different d
    args = ([1.0, 0, 0, 0], [1.0, 0, 0, 0], -(1 - P**-24))
    assert tc.dot(*args, gpu="V100") == P**-23
    assert tc.dot(*args, gpu="A100") == P**-24


# -- the exact reference ----------------------------------------------------------------------

def _random_inputs(rng, fin: str, shape, adversarial: bool) -> np.ndarray:
    """Values of ``fin``: normal(0, 1), or with random exponents over most of the range,
    random signs, some zeros and subnormals (adversarial)."""
    fmt = fpsim.get_format(fin)
    if not adversarial:
        return tc.convert_input(rng.standard_normal(shape), fin)
    lo = fmt.emin - fmt.mantissa_bits
    hi = min(fmt.emax, 20)
    e = rng.integers(lo, hi, size=shape)
    x = rng.uniform(1, 2, size=shape) * np.exp2(e) * rng.choice([-1.0, 1.0], size=shape)
    x[rng.random(shape) < 0.1] = 0.0
    return tc.convert_input(x, fin)


def _ref_matmul(A, B, C, gpu, fin, fout):
    u = ref.unit_for(gpu, fin, fout)
    return np.array(ref.matmul(A.tolist(), B.tolist(), C.tolist(), u))


@pytest.mark.parametrize("gpu", GPUS)
def test_matmul_matches_reference_every_gpu_and_format(gpu):
    rng = np.random.default_rng(sum(map(ord, gpu)))
    for fin, fout in PAIRS.get(gpu, PAIRS["A100"]):
        for adversarial in (False, True):
            M, K, N = 3, 37, 4  # K not a multiple of any block size: padding and chaining
            A = _random_inputs(rng, fin, (M, K), adversarial)
            B = _random_inputs(rng, fin, (K, N), adversarial)
            C = fpsim.round(rng.standard_normal((M, N)) * (4.0 if adversarial else 1.0), fout)
            D = tc.matmul(A, B, C, gpu=gpu, input_format=fin, output_format=fout)
            R = _ref_matmul(A, B, C, gpu, fin, fout)
            np.testing.assert_array_equal(D, R, err_msg=f"{gpu} {fin}->{fout} adv={adversarial}")


def _cancelling(rng, k, fin):
    """Sums that nearly cancel: x, -x(1 + tiny), c close to minus the rest."""
    a = tc.convert_input(rng.uniform(0.5, 2, k), fin)
    b = tc.convert_input(rng.uniform(0.5, 2, k) * rng.choice([-1, 1], k), fin)
    b[1::2] = -b[0::2][: len(b[1::2])] * (1 + fpsim.get_format(fin).eps)
    b = tc.convert_input(b, fin)
    c = -float(np.sum(a * b)) * (1 + 2.0**-20)
    return a, b, c


@st.composite
def _any_dot(draw):
    """A GPU, a supported pair, K and ANY bit patterns (NaN, inf, subnormals included)."""
    gpu = draw(st.sampled_from(GPUS))
    fin, fout = draw(st.sampled_from(PAIRS.get(gpu, PAIRS["A100"])))
    k = draw(st.integers(1, 40))
    pat = "fp32" if fin == "tf32" else fin
    bits = fpsim.get_format(pat).bits
    a = draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=k, max_size=k))
    b = draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=k, max_size=k))
    c = draw(st.integers(0, (1 << 32) - 1))
    return gpu, fin, fout, fpsim.from_bits(np.array(a), pat), fpsim.from_bits(
        np.array(b), pat), float(fpsim.from_bits(c, "fp32"))


@settings(max_examples=300)
@given(_any_dot())
def test_any_bit_patterns_match_reference(case):
    gpu, fin, fout, a, b, c = case
    a, b = tc.convert_input(a, fin), tc.convert_input(b, fin)
    c = float(fpsim.round(c, fout))
    d = tc.dot(a, b, c, gpu=gpu, input_format=fin, output_format=fout)
    r = ref.dot(a.tolist(), b.tolist(), c, ref.unit_for(gpu, fin, fout))
    assert (math.isnan(d) and math.isnan(r)) or (d == r and np.signbit(d) == np.signbit(r)), \
        (d, r)


@pytest.mark.parametrize("gpu", ["V100", "A100", "H100"])
@pytest.mark.parametrize("fout", ["fp32", "fp16"])
def test_adversarial_dots_match_reference(gpu, fout):
    rng = np.random.default_rng(7)
    u = ref.unit_for(gpu, "fp16", fout)
    for _ in range(40):
        k = int(rng.integers(1, 40))
        a, b, c = _cancelling(rng, k, "fp16")
        c = float(fpsim.round(c, fout))
        assert tc.dot(a, b, c, gpu=gpu, output_format=fout) == ref.dot(
            a.tolist(), b.tolist(), c, u)
    # subnormal fp16 inputs and outputs
    for _ in range(40):
        k = int(rng.integers(1, 20))
        a = tc.convert_input(rng.uniform(-1, 1, k) * 2.0**-12, "fp16")
        b = tc.convert_input(rng.uniform(-1, 1, k) * 2.0**-8, "fp16")
        c = float(fpsim.round(rng.uniform(-1, 1) * 2.0**-18, fout))
        assert tc.dot(a, b, c, gpu=gpu, output_format=fout) == ref.dot(
            a.tolist(), b.tolist(), c, u)


@pytest.mark.slow
def test_long_k_chaining_matches_reference_and_gpus_differ():
    rng = np.random.default_rng(2024)
    K = 8192
    results = {}
    for dist in ("uniform", "adversarial"):
        if dist == "uniform":
            a = tc.convert_input(rng.random(K), "fp16")
            b = tc.convert_input(rng.random(K), "fp16")
        else:
            a = _random_inputs(rng, "fp16", (K,), True)
            b = _random_inputs(rng, "fp16", (K,), True)
        for gpu in ("V100", "A100", "H100"):
            u = ref.unit_for(gpu, "fp16", "fp32")
            d = tc.dot(a, b, 0.0, gpu=gpu)
            assert d == ref.dot(a.tolist(), b.tolist(), 0.0, u), (gpu, dist)
            results[gpu, dist] = float(d)
        exact = math.fsum((a * b).tolist())
        got = [results[g, dist] for g in ("V100", "A100", "H100")]
        assert len(set(got)) == 3, f"{dist}: V100, A100, H100 should differ: {got}"
        if dist == "uniform":  # truncation loses more with smaller blocks / fewer bits
            errs = [abs(x - exact) for x in got]
            assert errs[0] > errs[1] > errs[2]


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["V100", "A100", "H100"])
def test_long_k_fp16_output_chaining(gpu):
    # each block's result is rounded to fp16 and is the next block's c
    rng = np.random.default_rng(11)
    K = 2048
    a = tc.convert_input(rng.random(K) * 0.25, "fp16")
    b = tc.convert_input(rng.random(K) * 0.25, "fp16")
    u = ref.unit_for(gpu, "fp16", "fp16")
    d = tc.dot(a, b, 0.0, gpu=gpu, output_format="fp16")
    assert d == ref.dot(a.tolist(), b.tolist(), 0.0, u)
    assert d == float(np.float16(d))  # an fp16 value
    # the fp16 accumulator is far less accurate than the fp32 one
    exact = math.fsum((a * b).tolist())
    assert abs(d - exact) > 10 * abs(float(tc.dot(a, b, 0.0, gpu=gpu)) - exact)


def test_chunking_does_not_change_results(monkeypatch):
    rng = np.random.default_rng(5)
    A = _random_inputs(rng, "bf16", (9, 70), True)
    B = _random_inputs(rng, "bf16", (70, 33), True)
    C = fpsim.round(rng.standard_normal((9, 33)), "fp32")
    want = tc.matmul(A, B, C, gpu="H100", input_format="bf16")
    monkeypatch.setattr(tc_model, "CHUNK_ELEMENTS", 40)  # forces chunks over rows AND columns
    got = tc.matmul(A, B, C, gpu="H100", input_format="bf16")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[::4, ::8], _ref_matmul(A[::4], B[:, ::8], C[::4, ::8],
                                                            "H100", "bf16", "fp32"))


# -- special values, overflow, zeros ----------------------------------------------------------

@pytest.mark.parametrize("gpu", ["V100", "A100", "H100"])
def test_special_values_over_the_whole_dot_product(gpu):
    inf, nan = math.inf, math.nan
    k = 40  # several blocks: the special is found wherever it is
    cases = [
        ({5: nan}, {}, 0.0, nan),
        ({5: inf}, {5: 0.0}, 0.0, nan),  # 0 * inf
        ({5: inf, 30: -inf}, {}, 0.0, nan),  # +inf together with -inf
        ({5: inf}, {}, -inf, nan),
        ({5: -inf}, {}, 1.0, -inf),
        ({}, {}, inf, inf),
        ({}, {}, nan, nan),
        ({39: inf}, {39: -2.0}, 0.0, -inf),
    ]
    u = ref.unit_for(gpu, "fp16", "fp32")
    for sa, sb, c, want in cases:
        a, b = np.ones(k), np.full(k, 0.5)
        for i, v in sa.items():
            a[i] = v
        for i, v in sb.items():
            b[i] = v
        d = tc.dot(a, b, c, gpu=gpu)
        r = ref.dot(a.tolist(), b.tolist(), c, u)
        assert (math.isnan(d) and math.isnan(want) and math.isnan(r)) or d == want == r, \
            (sa, sb, c, d)


def test_specials_in_matmul_only_touch_their_row_and_column():
    A = np.ones((3, 20))
    B = np.ones((20, 4))
    A[1, 7] = np.inf
    B[7, 2] = 0.0  # row 1 x column 2: inf * 0 = NaN
    C = np.zeros((3, 4))
    C[2, 3] = -np.inf
    D = tc.matmul(A, B, C, gpu="A100")
    assert np.isnan(D[1, 2]) and D[1, 0] == np.inf and D[2, 3] == -np.inf
    assert (D[0] == [20, 20, 19, 20]).all() and D[2, 0] == 20


def test_overflow_gives_infinity():
    # fp16 output: 65504 + 16 rounds (RNE) to 65536 -> inf
    assert tc.dot([65504.0, 16.0], [1.0, 1.0], 0.0, gpu="A100", output_format="fp16") == np.inf
    assert tc.dot([65504.0, 8.0], [1.0, 1.0], 0.0, gpu="A100", output_format="fp16") == 65504
    # fp32 output rounds toward zero, but an exact sum past 2**128 is +-inf (the model's rule)
    big = 2.0**127
    for gpu in ("A100", "H100"):
        u = ref.unit_for(gpu, "bf16", "fp32")
        for a, b, c in (([big, big], [1.0, 1.0], 0.0), ([big], [-2.0], 0.0),
                        ([big], [1.0], float(np.float32(3.4e38))), ([1.0], [1.0], 3.4e38)):
            d = tc.dot(a, b, c, gpu=gpu, input_format="bf16")
            assert d == ref.dot(tc.convert_input(a, "bf16").tolist(),
                                tc.convert_input(b, "bf16").tolist(),
                                float(fpsim.round(c, "fp32")), u)
        assert tc.dot([big, big], [1.0, 1.0], gpu=gpu, input_format="bf16") == np.inf
        assert tc.dot([big], [-2.0], gpu=gpu, input_format="bf16") == -np.inf
    # RZ below 2**128 keeps the largest finite value; overflow="inf" (IEEE) never makes inf
    fmax = float(np.finfo(np.float32).max)
    assert tc.dot([1.0], [1.0], fmax, gpu="A100") == fmax
    ieee = tc.BlockFMA(8, 1, "rz", -132, overflow="inf")
    assert tc.dot([big, big], [1.0, 1.0], gpu=ieee, input_format="bf16") == fmax


def test_overflow_in_an_early_block_stays_infinite():
    a = [65504.0] * 8 + [-65504.0] * 8
    d = tc.dot(a, [1.0] * 16, 0.0, gpu="A100", output_format="fp16")  # block 1 overflows
    assert d == np.inf
    assert ref.dot(a, [1.0] * 16, 0.0, ref.unit_for("A100", "fp16", "fp16")) == np.inf
    assert tc.dot(a, [1.0] * 16, 0.0, gpu="H100", output_format="fp16") == 0.0  # one block


def test_zero_results_are_positive_zero():
    for c in (0.0, -0.0):
        d = tc.dot([0.0, -0.0], [1.0, 1.0], c, gpu="A100")
        assert d == 0 and not np.signbit(d)
    d = tc.dot([1.0, 1.0], [2.0, -2.0], -0.0, gpu="H100")  # exact cancellation
    assert d == 0 and not np.signbit(d)
    D = tc.matmul(np.zeros((2, 0)), np.zeros((0, 3)), -0.0 * np.ones((2, 3)), gpu="V100")
    assert D.shape == (2, 3) and not np.signbit(D).any()


# -- input conversion ---------------------------------------------------------------------------

def test_convert_input_against_numpy_and_ml_dtypes():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(2000) * np.exp2(rng.integers(-30, 15, 2000))
    np.testing.assert_array_equal(tc.convert_input(x, "fp16"), x.astype(np.float16))
    np.testing.assert_array_equal(tc.convert_input(x, "bf16"), x.astype(ml_dtypes.bfloat16))
    small = x[np.abs(x) < 400]
    np.testing.assert_array_equal(tc.convert_input(small, "e4m3"),
                                  small.astype(ml_dtypes.float8_e4m3fn))
    np.testing.assert_array_equal(tc.convert_input(small, "e5m2"),
                                  small.astype(ml_dtypes.float8_e5m2))
    # tf32: the fp32 pattern with its low 13 bits cleared (float64 -> fp32 RNE first)
    x32 = x.astype(np.float32)
    want = (x32.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    np.testing.assert_array_equal(tc.convert_input(x, "tf32"), want)


def test_tf32_truncates_after_rounding_float64_to_fp32():
    x = 1 + 2.0**-10 - 2.0**-25  # fp32 RNE gives 1 + 2**-10, which tf32 keeps
    assert tc.convert_input(x, "tf32") == 1 + 2.0**-10
    assert tc.convert_input(np.float32(1 + 2.0**-10 - 2.0**-23), "tf32") == 1.0  # truncation
    assert tc.convert_input(-(1 + 2.0**-10 - 2.0**-23), "tf32") == -1.0  # toward zero


def test_ml_dtypes_inputs_accepted():
    A = np.array([[1.5, 2.0]], dtype=ml_dtypes.bfloat16)
    B = np.array([[2.0], [0.25]], dtype=np.float16)
    assert tc.matmul(A, B, gpu="H100", input_format="bf16")[0, 0] == 3.5
    with pytest.raises(TypeError):
        tc.matmul(np.array([[1j]]), np.array([[1.0]]))


# -- API: shapes, names, custom units -------------------------------------------------------------

def test_c_broadcasting_and_shape_errors():
    A, B = np.ones((2, 3)), np.ones((3, 4))
    np.testing.assert_array_equal(tc.matmul(A, B), np.full((2, 4), 3.0))
    np.testing.assert_array_equal(tc.matmul(A, B, 1.0), np.full((2, 4), 4.0))
    np.testing.assert_array_equal(tc.matmul(A, B, np.arange(4.0))[1], 3 + np.arange(4.0))
    np.testing.assert_array_equal(tc.matmul(A, B, [[1.0], [2.0]])[:, 0], [4.0, 5.0])
    with pytest.raises(ValueError, match="broadcast"):
        tc.matmul(A, B, np.ones(3))
    with pytest.raises(ValueError, match="inner dimensions"):
        tc.matmul(A, np.ones((4, 4)))
    with pytest.raises(ValueError, match="2-D"):
        tc.matmul(np.ones(3), B)
    with pytest.raises(ValueError, match="same length K: a has 2, b has 3"):
        tc.dot([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="broadcast"):
        tc.dot([[1, 2]] * 3, [1, 2], c=[1, 2])
    assert tc.matmul(np.ones((0, 3)), B).shape == (0, 4)


def test_dot_batches_broadcast():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(tc.dot(a, [1.0, 1.0], [0.5, 0.25], gpu="V100"), [3.5, 7.25])
    assert isinstance(tc.dot([1.0], [2.0]), float | np.floating)


def test_gpu_names_and_errors():
    assert tc.get_gpu("rtx 4090").name == "Ada"
    assert tc.get_gpu("RTX40").name == "Ada"
    assert tc.get_gpu("l40s").name == "L40S"
    assert tc.get_gpu("h-200").name == "H200"
    for name in GPUS:
        assert tc.get_gpu(name.lower()).name == name
    with pytest.raises(ValueError, match="V100, A100"):
        tc.matmul(np.ones((1, 1)), np.ones((1, 1)), gpu="Z9000")
    with pytest.raises(ValueError, match="fp8_e4m3->fp32 is supported on Ada"):
        tc.matmul(np.ones((1, 1)), np.ones((1, 1)), gpu="V100", input_format="e4m3")
    with pytest.raises(ValueError, match="tf32->fp32 is supported on A100"):
        tc.dot([1.0], [1.0], gpu="V100", input_format="tf32")
    with pytest.raises(ValueError, match="no modelled GPU supports tf32->fp16"):
        tc.dot([1.0], [1.0], gpu="A100", input_format="tf32", output_format="fp16")
    # B200 fp8 has a default (issue 33's rule); RTXPRO6000 has none: the error names the GPUs
    # that model the pair, the B200 rules by name among them
    for fin in ("e4m3", "e5m2"):
        with pytest.raises(ValueError, match=r"RTXPRO6000 has no tensor-core mode fp8_e\dm\d "
                                             r"inputs.*supported on Ada.*B200, B200-fp8-published,"
                                             r" B200-fp8-variant, B200-fp8-published-rn, "
                                             r"B200-fp8-exact, B200-fp8-rz-then-c \(RTX Blackwell"):
            tc.dot([1.0], [1.0], gpu="RTXPRO6000", input_format=fin)
    with pytest.raises(ValueError, match="unknown format"):
        tc.dot([1.0], [1.0], input_format="fp17")
    with pytest.raises(ValueError, match="take inputs in"):
        tc.dot([1.0], [1.0], input_format="fp32")
    with pytest.raises(TypeError):
        tc.dot([1.0], [1.0], gpu=3)


def test_units_follow_the_parameter_table():
    for gpu in GPUS:
        for fin, fout in PAIRS.get(gpu, PAIRS["A100"]):
            u = tc.get_gpu(gpu).unit_for(fin, fout)
            r = ref.unit_for(gpu, fin, fout)
            assert (u.block_size, u.extra_bits, u.min_exponent) == (r.n, r.neab, r.mel)
            assert u.output_rounding.value == {"rz": "toward_zero", "rne": "nearest_even"}[
                r.rounding]


def test_custom_block_fma_units():
    # "what if the V100 accumulator kept 3 extra bits?": probe D5 then rounds like H100
    args = ([1.0] * 4, [2.0**-24] * 4, 1.0)
    assert tc.dot(*args, gpu="V100") == 1.0
    u3 = tc.BlockFMA(block_size=4, extra_bits=3, output_rounding="toward_zero")
    assert tc.dot(*args, gpu=u3) == 1.0 + 2.0**-22  # 4 * 2**-24 survives the alignment
    assert tc.dot(*args, gpu="H100") == 1.0 + 2.0**-22
    rng = np.random.default_rng(9)
    A = _random_inputs(rng, "fp16", (3, 29), True)
    B = _random_inputs(rng, "fp16", (29, 2), True)
    C = np.zeros((3, 2))
    for n, neab, rnd, mel in ((4, 3, "rz", None), (2, -3, "rne", -40), (64, 9, "rne", -133)):
        u = tc.BlockFMA(n, neab, rnd, mel)
        r = ref.Unit(n, neab, "rz" if rnd == "rz" else "rne", mel, -14)
        np.testing.assert_array_equal(tc.matmul(A, B, C, gpu=u),
                                      np.array(ref.matmul(A.tolist(), B.tolist(), C.tolist(), r)))
    # a unit takes other formats too, e.g. bf16 output
    assert tc.dot([1.0, 2.0**-9], [1.0, 1.0], gpu=tc.BlockFMA(8, 1, "rne"),
                  output_format="bf16") == 1.0


def test_block_fma_validation():
    with pytest.raises(ValueError, match="block_size"):
        tc.BlockFMA(0)
    with pytest.raises(ValueError, match="2\\*\\*53"):
        tc.BlockFMA(32, 25)
    with pytest.raises(ValueError, match="extra_bits"):
        tc.BlockFMA(8, -23)
    with pytest.raises(ValueError, match="rounding"):
        tc.BlockFMA(8, 1, "sideways")
    with pytest.raises(ValueError, match="stochastic"):
        tc.BlockFMA(8, 1, "stochastic")
    with pytest.raises(ValueError, match="overflow"):
        tc.BlockFMA(8, 1, overflow="wrap")
    with pytest.raises(TypeError):
        tc.BlockFMA(8.0)
    with pytest.raises(ValueError, match="outside"):
        tc.dot([1.0], [1.0], gpu=tc.BlockFMA(8), input_format="fp64")


# -- explain ------------------------------------------------------------------------------------

def test_explain_record_is_consistent_and_readable():
    rng = np.random.default_rng(1)
    a = tc.convert_input(rng.standard_normal(20), "fp16")
    b = tc.convert_input(rng.standard_normal(20) * 2.0**-6, "fp16")
    d, rec = tc.dot(a, b, 0.75, gpu="A100", explain=True)
    assert d == tc.dot(a, b, 0.75, gpu="A100")
    assert len(rec.blocks) == 3 and rec.result == d
    for i, blk in enumerate(rec.blocks):
        from fractions import Fraction
        assert blk.max_exponent >= max(t.exponent for t in blk.terms if t.exponent is not None)
        assert sum(t.aligned for t in blk.terms) == blk.exact_sum
        for t in blk.terms:  # value = aligned integer * lsb + dropped part, dropped < lsb
            lsb = Fraction(2) ** (blk.max_exponent - blk.fraction_bits)
            assert abs(t.value) == abs(t.aligned) * lsb + t.truncated
            assert 0 <= t.truncated < lsb
        if i:
            assert blk.c == rec.blocks[i - 1].result
    text = str(rec)
    assert "Block 3: k = 16..19" in text and "exact integer sum" in text and "rounded" in text
    assert "A100" in text and text.strip().endswith(f"d = {float(d)!r}")
    with pytest.raises(ValueError, match="1-D"):
        tc.dot([[1.0]], [[1.0]], explain=True)
    _, rec = tc.dot([np.inf], [0.0], explain=True)
    assert "0 x inf" in str(rec)


# -- error versus K ---------------------------------------------------------------------------

def test_error_vs_k_trends():
    r = tc.error_vs_k(ks=(32, 1024), gpus=("V100", "A100", "H100"), trials=6)
    for name in ("V100", "A100", "H100", "fp32 sequential"):
        assert r.mean[name][1] > r.mean[name][0]  # errors grow with K
    assert r.mean["V100"][1] > r.mean["A100"][1] > r.mean["H100"][1]
    assert r.mean["fp32 pairwise"][1] < r.mean["fp32 sequential"][1]
    assert "fp32 pairwise" in str(r)
    with pytest.raises(ValueError, match="distribution"):
        tc.error_vs_k(distribution="cauchy")
