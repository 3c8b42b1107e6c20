"""NF4 against the QLoRA / bitsandbytes code values (docs/facts.md), brute-force nearest-value
search, the analytic expected error on N(0, 1) weights (Gaussian integrals, computed here),
and the storage arithmetic of double quantization."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

from fpsim.quant import (
    NF4_THRESHOLDS,
    NF4_VALUES,
    bits_per_parameter,
    create_dynamic_map,
    double_dequantize,
    double_quantize,
    nf4_dequantize,
    nf4_quantize,
    pack_4bit,
    unpack_4bit,
)
from tests.intlike import Count

# docs/facts.md, "QLoRA NF4 code values (bitsandbytes)"
FACTS_NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
             -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
             0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
             0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def test_code_values_are_the_published_table():
    assert NF4_VALUES.dtype == np.float32
    assert NF4_VALUES.tolist() == [float(np.float32(v)) for v in FACTS_NF4]


def test_thresholds_are_float32_midpoints():
    mids = [(FACTS_NF4[i] + FACTS_NF4[i + 1]) / 2 for i in range(15)]
    assert NF4_THRESHOLDS.tolist() == [float(np.float32(m)) for m in mids]


def test_nearest_code_brute_force_and_ties_go_low():
    rng = np.random.default_rng(0)
    w = rng.standard_normal(64 * 200).astype(np.float32)
    codes, absmax = nf4_quantize(w)
    blocks = w.reshape(-1, 64)
    assert absmax.tolist() == [float(np.abs(b).max()) for b in blocks]
    inv = np.float32(1.0) / absmax
    normed = (blocks * inv[:, None]).reshape(-1)  # what bitsandbytes feeds its tree
    vals = np.array(FACTS_NF4, np.float32)
    dist = np.abs(normed[:, None].astype(np.float64) - vals[None, :].astype(np.float64))
    best = dist.min(axis=1)
    chosen = dist[np.arange(dist.shape[0]), codes.astype(np.int64)]
    assert np.array_equal(chosen, best)  # always a nearest value
    # exact midpoints (the float32 thresholds) go to the lower code
    w2 = np.concatenate([[1.0], NF4_THRESHOLDS, np.zeros(48)]).astype(np.float32)
    c2, a2 = nf4_quantize(w2)
    assert float(a2[0]) == 1.0
    assert c2[1:16].tolist() == list(range(15))
    assert c2[0] == 15


def test_dequantize_is_value_times_absmax_and_short_last_block():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, 30)).astype(np.float32)  # 150 values: blocks 64, 64, 22
    codes, absmax = nf4_quantize(w)
    assert codes.shape == w.shape and absmax.shape == (3,)
    assert float(absmax[2]) == float(np.abs(w.reshape(-1)[128:]).max())
    d = nf4_dequantize(codes, absmax)
    assert d.shape == w.shape and d.dtype == np.float32
    flat_c, flat_d = codes.reshape(-1), d.reshape(-1)
    for i in range(150):
        expect = Fraction(float(NF4_VALUES[flat_c[i]])) * Fraction(float(absmax[i // 64]))
        assert Fraction(float(flat_d[i])) == Fraction(float(np.float32(float(expect))))
    # the absmax element of each block is exact
    assert np.abs(d).reshape(-1)[np.argmax(np.abs(w.reshape(-1))[:64])] == absmax[0]


def test_all_zero_block():
    codes, absmax = nf4_quantize(np.zeros(64, np.float32))
    assert absmax.tolist() == [0.0] and set(codes.tolist()) == {7}
    assert nf4_dequantize(codes, absmax).tolist() == [0.0] * 64


def test_pack_unpack():
    assert pack_4bit([1, 2]).tolist() == [0x12]
    assert pack_4bit([15, 0, 7]).tolist() == [0xF0, 0x70]
    rng = np.random.default_rng(2)
    c = rng.integers(0, 16, 1001).astype(np.uint8)
    p = pack_4bit(c)
    assert p.dtype == np.uint8 and p.size == 501
    assert unpack_4bit(p, 1001).tolist() == c.tolist()


def test_bits_per_parameter():
    assert bits_per_parameter(64, double_quant=False) == 4 + 32 / 64 == 4.5
    assert round(bits_per_parameter(64), 3) == 4.127
    assert bits_per_parameter(64) == 4 + 8 / 64 + 32 / (64 * 256)
    assert bits_per_parameter(128, double_quant=False) == 4.25


# -- expected error: Gaussian integrals ----------------------------------------------------------

def _phi(x):
    return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _Phi(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def expected_rmse(levels: list[float], block: int = 64) -> float:
    """E[(w - Q(w))^2]^(1/2) for i.i.d. N(0,1) blocks: integrate over the block maximum A
    (density block * 2 phi(A) (2 Phi(A) - 1)^(block-1)); given A, the other block-1 values are
    N(0,1) restricted to [-A, A], quantized to the nearest A * level (cells split at
    midpoints); the maximum itself is exact."""
    edges = [-1.0] + [(levels[i] + levels[i + 1]) / 2 for i in range(len(levels) - 1)] + [1.0]

    def cell(a, b, c):  # integral over [a, b] of (x - c)^2 phi(x)
        def f(x):
            return _Phi(x) - x * _phi(x) + 2 * c * _phi(x) + c * c * _Phi(x)
        return f(b) - f(a)

    total, grid = 0.0, np.linspace(1e-3, 8.0, 2001)
    da = grid[1] - grid[0]
    for a in grid:
        dens = block * 2 * _phi(a) * (2 * _Phi(a) - 1) ** (block - 1)
        if dens < 1e-300:
            continue
        sq = sum(cell(a * edges[i], a * edges[i + 1], a * v) for i, v in enumerate(levels))
        total += dens * (block - 1) / block * sq / (2 * _Phi(a) - 1) * da
    return math.sqrt(total)


def test_rmse_on_normal_weights_matches_the_integral_and_beats_int4():
    pred_nf4 = expected_rmse(FACTS_NF4)
    pred_int4 = expected_rmse([k / 7 for k in range(-7, 8)])
    assert pred_nf4 < pred_int4
    rng = np.random.default_rng(3)
    w = rng.standard_normal(2**20).astype(np.float32)
    codes, absmax = nf4_quantize(w)
    rmse_nf4 = float(np.sqrt(np.mean((nf4_dequantize(codes, absmax) - w) ** 2.0)))
    b = w.reshape(-1, 64)
    a = np.abs(b).max(axis=1, keepdims=True)
    rmse_int4 = float(np.sqrt(np.mean((np.rint(b / a * 7) * a / 7 - b) ** 2.0)))
    assert abs(rmse_nf4 / pred_nf4 - 1) < 0.02
    assert abs(rmse_int4 / pred_int4 - 1) < 0.02
    assert rmse_nf4 < rmse_int4
    assert rmse_nf4 < 0.0935  # the bound documented in fpsim.quant.nf4 (0.0920 + 1.5%)


# -- double quantization -------------------------------------------------------------------

def test_dynamic_map_bit_counts_share_the_as_int_rule():
    ref = create_dynamic_map(True, 5, 7)
    for e, t in ((np.int8(5), np.int64(7)), (np.array(5), np.array(7))):
        np.testing.assert_array_equal(create_dynamic_map(True, e, t), ref)
    for bad in (True, 7.0, "7", None, np.array([7]), np.timedelta64(7)):
        for kwargs, name in (({"max_exponent_bits": bad}, "max_exponent_bits"),
                             ({"total_bits": bad}, "total_bits")):
            with pytest.raises(TypeError, match=f"{name} must be an int, got "
                                                f"{type(bad).__name__}"):
                create_dynamic_map(**kwargs)
    with pytest.raises(ValueError, match="total_bits must be >= 1, got 0"):
        create_dynamic_map(total_bits=0)


def test_dynamic_map_structure():
    m = create_dynamic_map()
    assert m.dtype == np.float32 and m.size == 256
    assert np.all(np.diff(m) > 0)  # sorted, distinct
    assert m[-1] == 1.0 and (m == 0).sum() == 1
    # decade 10**(i-6) holds 2**i values 10**(i-6) * (0.1 + 0.9 (2j + 1) / 2**(i+1))
    pos = sorted(float(v) for v in m if 0 < v < 1)
    expect = sorted(float(Fraction(10) ** (i - 6) * (Fraction(1, 10) + Fraction(9, 10) *
                                                       Fraction(2 * j + 1, 2 ** (i + 1))))
                    for i in range(7) for j in range(2**i))
    assert len(pos) == len(expect) == 127
    assert np.allclose(pos, expect, rtol=2e-6, atol=0)
    neg = sorted(-float(v) for v in m if v < 0)
    assert neg == pos


def test_double_quantization_error_bound():
    rng = np.random.default_rng(4)
    w = rng.standard_normal(64 * 1000).astype(np.float32)
    _, absmax = nf4_quantize(w)
    dq = double_quantize(absmax)
    assert dq.qabsmax.dtype == np.uint8 and dq.qabsmax.size == 1000
    assert dq.absmax2.size == 4  # blocks of 256
    back = double_dequantize(dq)
    centred = absmax - np.float32(np.mean(absmax, dtype=np.float64))
    am2 = np.repeat(np.abs(np.concatenate([centred, np.zeros(24, np.float32)])).reshape(4, 256)
                    .max(axis=1), 256)[:1000]
    # the widest gap of the map is 0.9 / 64 (top decade) and 1 - its top mean; half of it
    m = create_dynamic_map()
    half_gap = float(np.max(np.diff(m.astype(np.float64)))) / 2
    assert half_gap < 0.0071
    assert np.all(np.abs(back - absmax) <= half_gap * am2 * (1 + 1e-5) + 1e-6)
    d_dq = nf4_dequantize(nf4_quantize(w)[0], dq)
    d = nf4_dequantize(*nf4_quantize(w))
    assert float(np.max(np.abs(d_dq - d))) < 0.01 * float(np.max(np.abs(w)))


def test_double_quantization_fp8_code():
    rng = np.random.default_rng(5)
    am = np.abs(rng.standard_normal(700)).astype(np.float32) + 1
    dq = double_quantize(am, code="fp8_e4m3")
    back = double_dequantize(dq)
    centred = np.abs(am - dq.offset)
    # e4m3 keeps 3 mantissa bits: relative error <= 2**-4 above its normal range
    assert np.all(np.abs(back - am) <= centred * 2.0**-4 + 2.0**-9 * dq.absmax2.max() + 1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        nf4_quantize(np.array([1.0, np.nan], np.float32))
    with pytest.raises(ValueError, match="valid: 32, 64, 128"):
        nf4_quantize(np.ones(10), block_size=63)
    with pytest.raises(ValueError, match=r"\[0, 16\)"):
        nf4_dequantize(np.array([16], np.uint8), np.ones(1, np.float32))
    with pytest.raises(ValueError, match="absmax"):
        nf4_dequantize(np.zeros(200, np.uint8), np.ones(1, np.float32))
    with pytest.raises(ValueError, match=r"\[0, 16\)"):
        pack_4bit([3, 17])
    with pytest.raises(ValueError, match="valid"):
        double_quantize(np.ones(4, np.float32), code="nf8")
    with pytest.raises(ValueError, match="dq_block_size"):
        bits_per_parameter(64, True, 100)


def test_block_sizes_share_the_as_int_rule():
    # block_size / dq_block_size are checked by fpsim.checks.as_int, then against the valid
    # sizes: what range() takes gives the int's codes; other types are a TypeError
    w = np.random.default_rng(3).standard_normal(200).astype(np.float32)
    ref = nf4_quantize(w, 64)
    for bs in (np.int16(64), np.array(64), Count(64)):
        got = nf4_quantize(w, bs)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
    for bad in (True, 64.0, "64", None, np.array([64]), np.timedelta64(64)):
        with pytest.raises(TypeError, match=f"block_size must be an int, got "
                                            f"{type(bad).__name__}"):
            nf4_quantize(w, bad)
    for bad in (0, -64, 48, np.int64(8192)):
        msg = f"unsupported block_size {bad!r}; valid: 32, 64"
        with pytest.raises(ValueError, match=re.escape(msg)):
            nf4_quantize(w, bad)


def test_block_size_siblings_share_the_as_int_rule():
    """The other users of the same block-size check: nf4_dequantize, double_quantize and
    bits_per_parameter (block_size and dq_block_size) take what range() takes as the int,
    and refuse other types and invalid sizes by the argument's name."""
    w = np.random.default_rng(4).standard_normal(256).astype(np.float32)
    codes, absmax = nf4_quantize(w, 64)
    ref_w = nf4_dequantize(codes, absmax, 64)
    ref_dq = double_quantize(absmax.repeat(64), 256)
    for conv in (np.int16, np.array, Count):
        np.testing.assert_array_equal(nf4_dequantize(codes, absmax, conv(64)), ref_w)
        dq = double_quantize(absmax.repeat(64), conv(256))
        assert dq.block_size == 256 and type(dq.block_size) is int
        np.testing.assert_array_equal(dq.qabsmax, ref_dq.qabsmax)
        np.testing.assert_array_equal(dq.absmax2, ref_dq.absmax2)
        assert bits_per_parameter(conv(64), True, conv(256)) == bits_per_parameter(64, True, 256)
        assert bits_per_parameter(conv(32), False) == bits_per_parameter(32, False)
    calls = (("block_size", lambda b: nf4_dequantize(codes, absmax, b)),
             ("block_size", lambda b: double_quantize(absmax, b)),
             ("block_size", lambda b: bits_per_parameter(b)),
             ("dq_block_size", lambda b: bits_per_parameter(64, True, b)))
    for name, call in calls:
        for bad in (True, 64.0, "64", None, np.array([64]), np.timedelta64(64)):
            with pytest.raises(TypeError, match=f"{name} must be an int, got "
                                                f"{type(bad).__name__}"):
                call(bad)
        for bad in (0, -64, 48, np.int64(8192)):
            with pytest.raises(ValueError, match=re.escape(f"unsupported {name} {bad!r}; valid")):
                call(bad)


def test_unpack_4bit_count_is_an_int():
    """unpack_4bit's n is a count (fpsim.checks.as_int): 2.7, True and "3" were truncated or
    parsed by int() into a count; what range() takes is accepted, the range is [0, 2 * bytes]."""
    p = pack_4bit([1, 2, 15])
    for n in (3, np.int8(3), np.array(3), Count(3)):
        assert unpack_4bit(p, n).tolist() == [1, 2, 15]
    assert unpack_4bit(p, 0).tolist() == [] and unpack_4bit(p, 4).tolist() == [1, 2, 15, 0]
    for bad in (2.7, 3.0, True, "3", np.array([3]), np.timedelta64(3)):
        with pytest.raises(TypeError, match=f"n must be an int, got {type(bad).__name__}"):
            unpack_4bit(p, bad)
    for bad in (-1, 5, np.int64(-3)):
        with pytest.raises(ValueError, match=re.escape(f"n must be in [0, 4], got {bad}")):
            unpack_4bit(p, bad)
