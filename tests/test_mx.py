"""fpsim.mx.quantize against an exact model of the OCP MX v1.0 spec written with Fractions (the
element grids built from the bit fields, the shared exponent by comparing with powers of two,
round to nearest even by searching the grid), plus the API contract: errors, axes, padding,
stochastic rounding, packing and storage."""

from __future__ import annotations

import bisect
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim
import fpsim.mx as mx
from tests.exact import floor_log2
from tests.intlike import Count as _Count

MX_NAMES = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"]


def grid(name: str) -> list[Fraction]:
    """Non-negative element values in code order, from the bit fields (independent of fpsim)."""
    if name == "mxint8":
        return [Fraction(k, 64) for k in range(128) if k <= 127]
    ebits, mbits, kind = {"mxfp8_e4m3": (4, 3, "fn"), "mxfp8_e5m2": (5, 2, "ieee"),
                          "mxfp6_e2m3": (2, 3, "none"), "mxfp6_e3m2": (3, 2, "none"),
                          "mxfp4": (2, 1, "none"), "nvfp4": (2, 1, "none")}[name]
    bias = (1 << (ebits - 1)) - 1
    out = []
    for e in range(1 << ebits):
        for m in range(1 << mbits):
            if kind == "ieee" and e == (1 << ebits) - 1:
                continue
            if kind == "fn" and e == (1 << ebits) - 1 and m == (1 << mbits) - 1:
                continue
            if e == 0:
                out.append(Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias))
            else:
                out.append((1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias))
    return out


GRIDS = {n: grid(n) for n in MX_NAMES}
EMAX = {"mxfp8_e4m3": 8, "mxfp8_e5m2": 15, "mxfp6_e2m3": 2, "mxfp6_e3m2": 4, "mxfp4": 2,
        "mxint8": 0}


def rne(v: Fraction, g: list[Fraction]) -> Fraction:
    """v rounded to the grid g (non-negative, code order), ties to the even code, saturating."""
    a = abs(v)
    if a >= g[-1]:
        r = g[-1]
    else:
        i = bisect.bisect_right(g, a) - 1  # g[i] <= a < g[i+1]
        lo, hi = g[i], g[i + 1]
        if a - lo < hi - a or (a - lo == hi - a and i % 2 == 0):
            r = lo
        else:
            r = hi
    return -r if v < 0 else r


def spec_block(vals, name: str, mode: str):
    """(shared exponent, exact dequantized values) of one block, per the spec's algorithm."""
    fr = [Fraction(float(v)) for v in vals]
    amax = max(abs(v) for v in fr)
    if amax == 0:
        s = -127
    else:
        e = floor_log2(amax)
        if mode == "ceil" and Fraction(2) ** e != amax:
            e += 1
        s = max(-127, min(127, e - EMAX[name]))
    x = Fraction(2) ** s
    return s, [rne(v / x, GRIDS[name]) * x for v in fr]


def boundary_block_values(name: str, rng) -> np.ndarray:
    """Midpoints of the element grid (and just either side, in float64) scaled by 2**k, with the
    element max at the head of each block so that the floor scale is 2**k."""
    g = [float(v) for v in GRIDS[name]]
    mids = [(a + b) / 2 for a, b in zip(g[:-1], g[1:], strict=True)]
    vals = []
    for m in mids:
        vals += [m, m * (1 + 2.0**-40), m * (1 - 2.0**-40)]
    vals = np.array(vals) * np.where(rng.random(len(vals)) < 0.5, -1, 1)
    k = int(rng.integers(-30, 30))
    per = 31
    n = -(-len(vals) // per)
    out = np.zeros((n, 32))
    out[:, 0] = g[-1]
    flat = np.zeros(n * per)
    flat[: len(vals)] = vals
    out[:, 1:] = flat.reshape(n, per)
    return out * 2.0**k


@pytest.mark.parametrize("name", MX_NAMES)
@pytest.mark.parametrize("mode", ["floor", "ceil"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_exact_spec_model(name, mode, dtype):
    rng = np.random.default_rng(hash((name, mode, dtype.__name__)) % 2**32)
    rand = rng.standard_normal((24, 32)) * np.ldexp(1.0, rng.integers(-20, 20, (24, 1)))
    rand[rng.random(rand.shape) < 0.02] *= 1e4  # outliers
    rand[2] = 0.0
    rand[3] = np.ldexp(1.0, rng.integers(-10, 10, 32))  # powers of two
    x = np.concatenate([rand, boundary_block_values(name, rng)]).astype(dtype)
    q = mx.quantize(x, name, scale_mode=mode)
    assert q.elements.dtype == q.fmt.storage_dtype and q.scales.dtype == ml_dtypes.float8_e8m0fnu
    codes = q.scales.view(np.uint8)
    dq = q.dequantize()
    assert dq.dtype == np.float32 and dq.shape == x.shape
    for r in range(x.shape[0]):
        s, vals = spec_block(x[r], name, mode)
        assert int(codes[r, 0]) == s + 127
        got = [Fraction(float(v)) for v in dq[r]]
        assert got == vals, (r, [(float(a), float(b)) for a, b in zip(got, vals, strict=True)
                                 if a != b][:4])


def test_every_value_of_every_element_format_round_trips():
    for name in MX_NAMES:
        g = np.array([float(v) for v in GRIDS[name]])
        x = np.concatenate([g, -g])
        pad = (-x.size) % 32
        x = np.concatenate([x, np.zeros(pad)])
        x = x.reshape(-1, 32)
        x[:, 0] = g[-1]  # amax = element max: the scale is 1 (code 127)
        q = mx.quantize(x, name)
        assert (q.scales.view(np.uint8) == 127).all()
        np.testing.assert_array_equal(q.dequantize(), x.astype(np.float32))


def test_even_and_rceil_scales_named_rules():
    f = mx.get_mx_format("mxfp4")
    # even: amax 7 (= 1.75 * 4) rounds (to 1 mantissa bit, half away) to 8: the scale moves up
    assert int(mx.e8m0_exponent(np.array([7.0]), f, mx.ScaleMode.EVEN)[0]) == 1
    assert int(mx.e8m0_exponent(np.array([6.9]), f, mx.ScaleMode.EVEN)[0]) == 0
    # rceil: smallest 2**s with amax / 2**s <= 6
    for amax in (6.0, 6.0001, 12.0, 0.75, 3e-30):
        s = int(mx.e8m0_exponent(np.array([amax]), f, mx.ScaleMode.RCEIL)[0])
        assert amax / 2.0**s <= 6.0 < amax / 2.0 ** (s - 1)


def test_zero_blocks_nan_and_inf():
    x = np.zeros((3, 32), np.float32)
    x[1, 4] = np.nan
    x[2, :] = 1.0
    x[2, 7] = np.inf
    q = mx.quantize(x, "mxfp8_e4m3")
    assert q.scales.view(np.uint8).tolist() == [[0], [255], [127 + 128 - 8]]
    dq = q.dequantize()
    assert (dq[0] == 0).all() and np.isnan(dq[1]).all()
    # inf saturates to 448 * 2**120, beyond float32: it decodes to inf again; the finite
    # values of its block are lost
    assert dq[2, 7] == np.inf and (dq[2, :7] == 0).all()
    # formats without NaN elements: the NaN scale carries the block's NaN
    for name in ("mxfp4", "mxfp6_e2m3", "mxint8"):
        assert np.isnan(mx.quantize(x, name).dequantize()[1]).all()
    assert mx.quantize(x, "mxint8").scales.view(np.uint8)[2, 0] == 255  # 2**128 overflows
    assert mx.quantize(x, "mxfp4", scale_mode="rceil").scales.view(np.uint8)[2, 0] == 254
    # float64 input beyond E8M0's range: NaN scale
    big = mx.quantize(np.full(32, 1e300), "mxfp8_e4m3")
    assert big.scales.view(np.uint8)[0] == 255
    # the last representable scale 2**127 holds amax up to 2**(127 + emax_elem + 1)
    for name, emax in (("mxfp8_e4m3", 8), ("mxfp4", 2), ("mxint8", 0)):
        top = mx.quantize(np.full(32, 2.0 ** (127 + emax)), name).scales.view(np.uint8)[0]
        over = mx.quantize(np.full(32, 2.0 ** (128 + emax)), name).scales.view(np.uint8)[0]
        assert (top, over) == (254, 255)


def test_saturation_and_mxint8_range():
    x = np.array([1.0] * 31 + [1.99], np.float64)
    q = mx.quantize(x, "mxint8")
    assert q.elements.dtype == np.int8
    assert q.elements.max() == 127 and q.elements.min() >= -127
    assert mx.quantize(-x, "mxint8").elements.min() == -127
    # floor scale: 7.9 / 2**(2 - 2) would be 7.9 > 6, saturates to 6 in mxfp4
    assert mx.quantize(np.array([7.9] + [0.0] * 31), "mxfp4").dequantize()[0] == 6.0


@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero", "up", "down",
                                  "stochastic"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mxint8_saturates_in_every_mode(mode, dtype):
    """MXINT8 elements near the top of the range, in every rounding mode: the element is
    P = x * 2**6 (scale 1 here) clamped to [-127, 127], then rounded to an integer: the floor
    or ceiling of the clamped P (Fractions), as the mode says, never beyond +-127."""
    rng = np.random.default_rng(7)
    x = np.ones((40, 32))
    x[:, 1:9] = [1.99999, -1.99999, 126.6 / 64, -126.4 / 64, 127 / 64, -127 / 64, 2 - 2**-20,
                 -(2 - 2**-20)]
    x[:, 9:] = rng.uniform(-2, 2, (40, 23))
    x = x.astype(dtype)
    q = mx.quantize(x, "mxint8", rounding=mode, rng=3 if mode == "stochastic" else None)
    assert (q.scales.view(np.uint8) == 127).all()  # scale 2**0: P is x * 64
    e = q.elements.astype(int)
    assert e.min() >= -127 and e.max() <= 127
    for v, got in zip(x.ravel().tolist(), e.ravel().tolist(), strict=True):
        p = min(max(Fraction(v) * 64, Fraction(-127)), Fraction(127))
        lo, hi = math.floor(p), math.ceil(p)
        if mode == "stochastic":
            assert got in (lo, hi)
            continue
        frac = p - lo
        want = {"toward_zero": lo if p >= 0 else hi, "up": hi, "down": lo,
                "nearest_away": (hi if frac >= Fraction(1, 2) else lo) if p >= 0 else
                (lo if frac <= Fraction(1, 2) else hi),
                "nearest_even": lo if frac < Fraction(1, 2) or (frac == Fraction(1, 2) and
                                                                lo % 2 == 0) else hi}[mode]
        assert got == want, (v, mode)


def test_axis_padding_and_input_untouched():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 40, 3)).astype(np.float32)
    keep = x.copy()
    q = mx.quantize(x, "mxfp6_e3m2", axis=1)
    np.testing.assert_array_equal(x, keep)
    assert q.scales.shape == (5, 2, 3) and q.elements.shape == (5, 64, 3) and q.axis == 1
    assert q.dequantize().shape == x.shape
    padded = np.concatenate([x, np.zeros((5, 24, 3), np.float32)], axis=1)
    qt = mx.quantize(np.moveaxis(padded, 1, -1), "mxfp6_e3m2")
    np.testing.assert_array_equal(np.moveaxis(qt.dequantize(), -1, 1)[:, :40], q.dequantize())
    np.testing.assert_array_equal(mx.quantize(x, "mxfp6_e3m2", axis=-2).dequantize(),
                                  q.dequantize())


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4", "mxint8", "nvfp4"])
def test_stochastic_rounding_is_unbiased_and_reproducible(name):
    bs = 16 if name == "nvfp4" else 32
    x = np.full((4000, bs), 0.3, np.float32)
    x[:, 0] = 0.9  # amax fixes the scale; 0.3 falls between two element values
    q1 = mx.quantize(x, name, rounding="stochastic", rng=5)
    q2 = mx.quantize(x, name, rounding="stochastic", rng=5)
    np.testing.assert_array_equal(q1.elements.view(np.uint8), q2.elements.view(np.uint8))
    d = q1.dequantize()[:, 1:].astype(np.float64)
    rn = mx.quantize(x, name).dequantize()[:, 1:]
    assert len(np.unique(d)) == 2 and np.isin(rn[0, 0], np.unique(d))
    lo, hi = np.unique(d)
    se = (hi - lo) / 2 / np.sqrt(d.size)
    assert abs(d.mean() - float(np.float32(0.3))) < 5 * se


def unpack(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Reference unpacking: a little-endian bit stream, first value in the lowest bits."""
    stream = int.from_bytes(packed.tobytes(), "little")
    return np.array([(stream >> (bits * i)) & ((1 << bits) - 1) for i in range(n)], np.uint8)


@pytest.mark.parametrize("name,bits_per_value", [
    ("mxfp8_e4m3", 8.25), ("mxfp8_e5m2", 8.25), ("mxfp6_e2m3", 6.25), ("mxfp6_e3m2", 6.25),
    ("mxfp4", 4.25), ("mxint8", 8.25), ("nvfp4", 4.5)])
def test_pack_and_nbytes(name, bits_per_value):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    q = mx.quantize(x, name)
    assert q.nbytes * 8 / x.size == bits_per_value
    packed = q.pack()
    bits = q.fmt.elem_bits
    assert packed.dtype == np.uint8 and packed.size == x.size * bits // 8
    codes = q.elements.view(np.uint8).reshape(-1) & ((1 << bits) - 1)
    np.testing.assert_array_equal(unpack(packed, bits, x.size), codes)
    if name == "nvfp4":
        qp = mx.quantize(x, name, per_tensor_scale=mx.nvfp4_per_tensor_scale(x))
        assert qp.nbytes == q.nbytes + 4


def test_nvfp4_recipe_scales():
    x = np.linspace(-3.0, 3.0, 32, dtype=np.float32)
    q = mx.quantize(x, "nvfp4")
    assert q.block_size == 16 and q.scales.dtype == ml_dtypes.float8_e4m3fn
    assert q.scales.astype(np.float32).tolist() == [0.5, 0.5]  # 3 / 6, exact in e4m3
    pts = mx.nvfp4_per_tensor_scale(x)
    assert pts == float(np.float32(3.0) / np.float32(2688.0))
    qt = mx.quantize(x, "nvfp4", per_tensor_scale=pts)
    # fp4's top spacing 2 times a block scale about 0.5: error at most half of 1
    assert np.abs(qt.dequantize() - x).max() <= 0.5 * 1.01


@pytest.mark.parametrize("kwargs,err,match", [
    ({"fmt": "mxfp3"}, ValueError, "valid: 'mxfp8_e4m3'"),
    ({"block_size": 0}, ValueError, "block_size"),
    ({"block_size": 2.5}, TypeError, "block_size"),
    ({"block_size": True}, TypeError, "block_size"),
    ({"block_size": np.timedelta64(32)}, TypeError, "block_size must be an int"),
    ({"block_size": np.array([32])}, TypeError, "block_size must be an int"),
    ({"block_size": "32"}, TypeError, "block_size must be an int"),
    ({"block_size": np.int64(-32)}, ValueError, "block_size must be >= 1, got -32"),
    ({"axis": 2}, ValueError, "axis 2 is out of range"),
    ({"axis": 1.0}, TypeError, "axis"),
    ({"scale_mode": "round"}, ValueError, "valid: 'floor', 'ceil', 'even', 'rceil'"),
    ({"rounding": "banker"}, ValueError, "nearest_even"),
    ({"per_tensor_scale": 1.0}, ValueError, "NVFP4"),
    ({"fmt": "nvfp4", "per_tensor_scale": -1.0}, ValueError, "positive"),
    ({"fmt": "nvfp4", "per_tensor_scale": "x"}, TypeError, "per_tensor_scale"),
    ({"fmt": "nvfp4", "scale_mode": "ceil"}, ValueError, "scale_mode"),
])
def test_bad_arguments(kwargs, err, match):
    args = {"fmt": "mxfp8_e4m3", **kwargs}
    with pytest.raises(err, match=match):
        mx.quantize(np.ones((2, 32)), **args)


def test_block_size_takes_what_range_takes():
    # block_size is checked by fpsim.checks.as_int: the same blocks as with the int
    x = np.random.default_rng(0).standard_normal((2, 64))
    ref = mx.quantize(x, "mxfp8_e4m3", block_size=16)
    for bs in (np.int8(16), np.uint32(16), np.array(16), _Count(16)):
        q = mx.quantize(x, "mxfp8_e4m3", block_size=bs)
        assert q.block_size == 16 and type(q.block_size) is int
        np.testing.assert_array_equal(q.dequantize(), ref.dequantize())


def test_bad_inputs():
    with pytest.raises(ValueError, match="at least one dimension"):
        mx.quantize(1.0, "mxfp4")
    with pytest.raises(TypeError, match="real"):
        mx.quantize(np.ones(4, complex), "mxfp4")
    with pytest.raises(TypeError, match="real numbers"):
        mx.quantize(["a", "b"], "mxfp4")


def test_lazy_attribute_and_formats():
    assert fpsim.mx.quantize is mx.quantize
    assert set(mx.MX_FORMATS) == set(MX_NAMES) | {"nvfp4"}
    assert mx.get_mx_format("MXFP4").name == "mxfp4"


def test_fast_fp4_rounding_equals_ml_dtypes_cast():
    from fpsim.rounding.native import fp4_nearest_even

    # every 331st float32 pattern of [0, 6], both signs, and each decision point's neighbours
    a = np.arange(0, 0x40C00001, 331, dtype=np.int64).astype(np.int32).view(np.float32)
    t = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.0, 0.5, 1.0, 2.0, 4.0],
                 np.float32)
    y = np.concatenate([a, -a, t, -t, np.nextafter(t, np.float32(0)),
                        np.nextafter(t, np.float32(9))])
    np.testing.assert_array_equal(fp4_nearest_even(y).view(np.uint8),
                                  y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8))


def test_docs_mx_examples_run():
    import doctest
    from pathlib import Path

    doc = Path(__file__).resolve().parents[1] / "docs" / "mx.md"
    result = doctest.testfile(str(doc), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 20 and result.failed == 0


def directed(v: Fraction, g: list[Fraction], mode: str) -> Fraction:
    """v rounded to the grid g (non-negative, code order) by a directed / away mode,
    saturating at the grid's max."""
    a = abs(v)
    if a >= g[-1]:
        r = g[-1]
    else:
        i = bisect.bisect_right(g, a) - 1
        lo, hi = g[i], g[i + 1]
        if a == lo:
            r = lo
        elif mode == "toward_zero":
            r = lo
        elif mode == "nearest_away":
            r = hi if a - lo >= hi - a else lo
        else:  # up / down: toward +inf / -inf on the signed value
            r = hi if (mode == "up") == (v > 0) else lo
    return -r if v < 0 else r


def scale_exponent(amax: Fraction, name: str, mode: str) -> int:
    """The shared exponent of the four scale modes, from their definitions, exactly."""
    if amax == 0:
        return -127
    mbits = {"mxfp8_e4m3": 3, "mxfp8_e5m2": 2, "mxfp6_e2m3": 3, "mxfp6_e3m2": 2, "mxfp4": 1,
             "mxint8": 6}[name]
    emax = EMAX[name]
    e = floor_log2(amax)
    if mode == "ceil" and Fraction(2) ** e != amax:
        e += 1
    if mode == "even":  # amax rounded half away to mbits fraction bits first
        ulp = Fraction(2) ** (e - mbits)
        if (amax / ulp - int(amax / ulp)) >= Fraction(1, 2):
            amax = (int(amax / ulp) + 1) * ulp
        e = floor_log2(amax)
    if mode == "rceil":  # smallest s with amax / 2**s <= elem_max
        emax_val = GRIDS[name][-1]
        s = floor_log2(amax / emax_val)
        if Fraction(2) ** s < amax / emax_val:
            s += 1
        return max(-127, min(127, s))
    return max(-127, min(127, e - emax))


@pytest.mark.parametrize("name", MX_NAMES)
@pytest.mark.parametrize("mode", ["even", "rceil"])
def test_even_and_rceil_against_their_definitions(name, mode):
    rng = np.random.default_rng(len(name) + len(mode))
    x = rng.standard_normal((40, 32)) * np.ldexp(1.0, rng.integers(-30, 30, (40, 1)))
    g = [float(v) for v in GRIDS[name]]
    # block maxima at and around each mantissa rounding point of the element's top binade
    for r, top in enumerate(np.linspace(g[-1] / 2, g[-1] * 2, 20)):
        x[r, 0] = top
    x[20:30, 0] = np.ldexp(1.0, rng.integers(-5, 5, 10)) * (2 - 2.0 ** -rng.integers(1, 8, 10))
    x = x.astype(np.float32)
    q = mx.quantize(x, name, scale_mode=mode)
    codes = q.scales.view(np.uint8)[:, 0].astype(int) - 127
    dq = q.dequantize()
    for r in range(x.shape[0]):
        fr = [Fraction(float(v)) for v in x[r]]
        s = scale_exponent(max(abs(v) for v in fr), name, mode)
        assert codes[r] == s, (r, float(x[r, 0]))
        want = [rne(v / Fraction(2) ** s, GRIDS[name]) * Fraction(2) ** s for v in fr]
        assert [Fraction(float(v)) for v in dq[r]] == want


@pytest.mark.parametrize("name", ["mxfp6_e3m2", "mxfp8_e5m2", "mxint8"])
@pytest.mark.parametrize("mode", ["toward_zero", "up", "down", "nearest_away"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_other_rounding_modes_against_exact_model(name, mode, dtype):
    rng = np.random.default_rng(len(name) * 3 + len(mode))
    x = np.concatenate([rng.standard_normal((8, 32)) * 3,
                        boundary_block_values(name, rng)]).astype(dtype)
    q = mx.quantize(x, name, rounding=mode)
    dq = q.dequantize()
    for r in range(x.shape[0]):
        s = int(q.scales.view(np.uint8)[r, 0]) - 127
        fr = [Fraction(float(v)) for v in x[r]]
        want = [directed(v / Fraction(2) ** s, GRIDS[name], mode) * Fraction(2) ** s
                for v in fr]
        assert [Fraction(float(v)) for v in dq[r]] == want


@pytest.mark.parametrize("name", MX_NAMES + ["nvfp4"])
@pytest.mark.parametrize("shape,axis", [((0,), 0), ((3, 0), 1), ((0, 32), 1), ((0, 32), 0),
                                        ((2, 0, 5), 2)])
def test_empty_arrays(name, shape, axis):
    q = mx.quantize(np.zeros(shape, np.float32), name, axis=axis)
    assert q.dequantize().shape == shape and q.pack().size == 0
    assert q.nbytes == q.scales.size + (q.elements.size * q.fmt.elem_bits + 7) // 8


@pytest.mark.parametrize("name", MX_NAMES + ["nvfp4"])
def test_nan_scale_blocks_hold_defined_element_codes(name):
    import warnings

    x = np.ones((3, 32))
    x[0, 3] = np.nan
    x[1, :] = 2.0**200  # E8M0 overflow (float64 input): NaN scale without a NaN input
    x[2, 5] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no invalid casts inside
        q = mx.quantize(x, name)
    codes = q.elements.view(np.uint8)
    nan_scale = np.repeat(np.isnan(q.scales.astype(np.float32)), q.block_size, axis=1)
    assert nan_scale[0, 3] and (nan_scale[1].all() or name == "nvfp4")
    if q.fmt.is_int or not q.fmt.element.has_nan:
        assert (codes[nan_scale] == 0).all()  # +0: the NaN scale carries the NaN
    assert np.isnan(q.dequantize()[nan_scale]).all()


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2",
                                  "mxfp4", "mxint8"])
def test_rceil_scale_of_tiny_blocks(name):
    """RCEIL's scale is the smallest power of two >= amax / elem_max, the division in float32;
    where that quotient underflows to 0 (a nonzero amax near float32's smallest subnormal),
    the scale is E8M0's smallest, as for an all-zero block (the zero fix once ran only for
    blocks with a zero or non-finite amax). Expected exponents from exact Fractions."""
    from fractions import Fraction

    from fpsim.mx import ScaleMode, get_mx_format
    from fpsim.mx.quantize import e8m0_exponent

    fmt = get_mx_format(name)
    amax = np.array([2.0**-149, 2.0**-147, 2.0**-140, 2.0**-126, 0.75, 448.0], np.float32)

    def expected(a):
        d = Fraction(float(np.float32(a) / np.float32(fmt.elem_max)))  # the fp32 division
        if d == 0:
            return -127
        e = -127
        while Fraction(2) ** e < d:
            e += 1
        return min(e, 127)

    got = e8m0_exponent(amax, fmt, ScaleMode.RCEIL)
    assert got.tolist() == [expected(a) for a in amax]


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2",
                                  "mxfp4", "nvfp4"])
@pytest.mark.parametrize("mode", ["stochastic", "toward_zero", "up", "nearest_away"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_elements_byte_table_equals_mldtypes_cast(name, mode, dtype):
    """_round_elements' non-nearest modes store the rounded element values through the byte
    table (from float32) instead of ml_dtypes' cast from float64: the same bytes, on values
    spanning the element range (subnormals, zeros of both signs, saturation, inf), small and
    table-sized arrays."""
    from fpsim.mx.quantize import _round_elements
    from fpsim.rounding import round as fp_round

    fmt = mx.get_mx_format(name)
    rng = np.random.default_rng(len(name))
    for n in (37, 5000):
        y = rng.standard_normal(n) * fmt.elem_max / 3
        y[::5] *= 2.0**-12
        y[1::11] = 0.0
        y[2::11] = -0.0
        y[3::13] = np.inf
        y[4::13] = -1e30
        y = y.astype(dtype)
        got = _round_elements(y.copy(), fmt, fpsim.modes.as_rounding(mode),
                              np.random.default_rng(5), has_nan=False)
        lo, hi = -fmt.elem_max, fmt.elem_max
        ref = np.asarray(fp_round(np.clip(y, lo, hi), fmt.element, mode, overflow="saturate",
                                  rng=np.random.default_rng(5))).astype(fmt.storage_dtype)
        assert got.dtype == ref.dtype
        assert (got.view(np.uint8) == ref.view(np.uint8)).all()
