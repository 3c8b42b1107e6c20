"""The rounding package's bit path (fpsim/rounding/bits.py) and the tensor-core output rounding
built on it, against fpsim.round's general kernel (itself checked against TestFloat, ml_dtypes
and exact Fractions in tests/test_rounding*.py).

The class of bug this guards: the bit path took 2**(emax + 1) as the first non-finite value,
which is wrong for formats whose top patterns are NaN (e4m3fn's largest finite value is 448,
not 480), so a custom unit with e4m3fn output rounding toward zero returned 480. Every output
format a custom BlockFMA accepts x every deterministic rounding mode x every overflow policy,
at the overflow edge and across the subnormals, for the three ways a block's result is
rounded (c joined, c added late, c added to the rounded product sum).
"""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
import fpsim.tensorcore as tc
from fpsim.formats import FP32, PRESETS
from fpsim.modes import Rounding
from fpsim.rounding.bits import round_normal, truncation_mask

# what BlockFMA accepts as an output format (gpus._check_custom_format)
OUT_FORMATS = [f for f in PRESETS.values()
               if f.mantissa_bits <= 23 and f.emax <= 127 and f.emin >= -126]
MODES = [m for m in Rounding if m is not Rounding.STOCHASTIC]
OVERFLOWS = ("always_inf", "inf", "saturate")
KINDS = ({}, {"c_addition": "late"}, {"c_addition": "rounded_sum"})


def _edge_values(fmt, rng) -> np.ndarray:
    """fp32 values (so that a product by 1.0 is exact in the block) around fmt's largest
    finite value and 2**(emax + 1), and across its subnormals and smallest normals, both
    signs."""
    ulp_max = np.ldexp(1.0, fmt.emax - fmt.mantissa_bits)
    top = np.ldexp(1.0, fmt.emax + 1)
    edge = [fmt.max + k * ulp_max / 8 for k in range(-16, 17)]
    edge += [top * (1 - 2.0**-k) for k in range(1, 24)] + [top, top * 1.5, top * 2]
    tiny = fmt.smallest_normal
    sub = np.ldexp(1.0, fmt.emin - fmt.mantissa_bits)  # the subnormal grid
    steps = 4 << min(fmt.mantissa_bits + 1, 6)  # every quarter step of small formats
    low = list(np.arange(1, steps + 8) * (tiny * 2 / steps))
    low += [k * sub / 4 for k in range(1, 64)]
    low += [tiny * (1 + k * 2.0**-20) for k in range(-8, 9)]
    low += list(tiny * 2.0 ** rng.uniform(-fmt.mantissa_bits - 3, 2, 200))
    mid = list(2.0 ** rng.uniform(fmt.emin, fmt.emax + 1, 200))
    v = np.array(edge + low + mid)
    v = v[np.abs(v) <= FP32.max].astype(np.float32).astype(np.float64)
    v = v[v != 0]  # (a zero product takes no part in a block: its sum is +0)
    return np.concatenate([v, -v])


def _expected(v: np.ndarray, fmt, mode: Rounding, overflow: str) -> np.ndarray:
    """The block rule: the exact value rounded once by fpsim.round; under "always_inf" an
    exact value at or past 2**(emax + 1) is +-inf in every mode (docs/tensorcore-model.md)."""
    core = "saturate" if overflow == "saturate" else "inf"
    r = np.asarray(fpsim.round(v, fmt, mode, overflow=core), dtype=np.float64)
    if overflow == "always_inf":
        r = np.where(np.abs(v) >= np.ldexp(1.0, fmt.emax + 1), np.copysign(np.inf, v), r)
    return r


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    both_nan = np.isnan(x) & np.isnan(y)
    return bool(np.all(both_nan | ((x == y) & (np.signbit(x) == np.signbit(y)))))


@pytest.mark.parametrize("fmt", OUT_FORMATS, ids=lambda f: f.name)
def test_round_normal_matches_kernel(fmt):
    rng = np.random.default_rng(35)
    v = _edge_values(fmt, rng)
    pats = rng.integers(0, 1 << 63, 4000, dtype=np.uint64).view(np.float64)
    pats = pats[np.isfinite(pats)]
    for mode in MODES:
        ref = np.asarray(fpsim.round(v, fmt, mode), dtype=np.float64)
        for x, expect in ((v, ref), (v[np.abs(ref) <= fmt.max], None)):
            if expect is None:
                expect = np.asarray(fpsim.round(x, fmt, mode), dtype=np.float64)
            out = np.full_like(x, 12345.0)
            mag = round_normal(x, fmt, mode, out)
            if mag is None:
                assert (out == 12345.0).all()  # untouched
                continue
            assert _same(out, expect), (fmt.name, mode)
            assert ((mag >> np.uint64(52)) == (out.view(np.uint64) >> np.uint64(52))
                    % 2048).all()
        # values already normal and finite in fmt: the bit path must take every one
        ok = (np.abs(v) >= fmt.smallest_normal) & (np.abs(ref) <= fmt.max) & (
            np.abs(v) < fmt.max)
        if mode in (Rounding.TOWARD_ZERO, Rounding.NEAREST_EVEN) and ok.any():
            x = v[ok]
            out = np.empty_like(x)
            assert round_normal(x, fmt, mode, out) is not None, (fmt.name, mode)
            assert _same(out, ref[ok])
        out = np.empty_like(pats)  # random patterns: mostly refused, never wrong
        if round_normal(pats, fmt, mode, out) is not None:
            assert _same(out, np.asarray(fpsim.round(pats, fmt, mode), dtype=np.float64))


@pytest.mark.parametrize("fmt", OUT_FORMATS, ids=lambda f: f.name)
def test_truncation_mask_is_round_toward_zero(fmt):
    rng = np.random.default_rng(7)
    v = 2.0 ** rng.uniform(fmt.emin, fmt.emax, 500) * rng.choice([-1.0, 1.0], 500)
    t = (v.view(np.uint64) & truncation_mask(fmt)).view(np.float64)
    ref = np.asarray(fpsim.round(v, fmt, "toward_zero"), dtype=np.float64)
    assert _same(t, ref)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.get("c_addition", "joined"))
@pytest.mark.parametrize("fmt", OUT_FORMATS, ids=lambda f: f.name)
def test_unit_output_rounding_every_format_mode_overflow(fmt, kind):
    """A one-product block whose exact value is v (v times 1.0, fp32 inputs, c = 0): the
    unit's result is v rounded by the block rule, for matmul and dot alike."""
    rng = np.random.default_rng(33)
    v_all = _edge_values(fmt, rng)
    # also the values between fmt's smallest normal and 2**(emax + 1) alone: a bit path that
    # takes a whole array or none of it must meet the overflow edge without other values
    inner = (np.abs(v_all) >= fmt.smallest_normal) & (np.abs(v_all) < 2.0 ** (fmt.emax + 1))
    for v in (v_all, v_all[inner]):
        for mode in MODES:
            for overflow in OVERFLOWS:
                _check_unit(v, fmt, mode, overflow, kind)


def _check_unit(v, fmt, mode, overflow, kind):
    unit = tc.BlockFMA(8, output_rounding=mode, overflow=overflow, **kind)
    expect = _expected(v, fmt, mode, overflow)
    if kind.get("c_addition") == "rounded_sum":  # +0 + -0 = +0 to nearest even
        expect = expect + 0.0
    with np.errstate(all="ignore"):
        d = tc.matmul(v[:, None], [[1.0]], gpu=unit, input_format="fp32",
                      output_format=fmt)[:, 0]
    assert _same(d, expect), (fmt.name, mode, overflow, kind,
                              v[~((d == expect) | np.isnan(d) & np.isnan(expect))][:5])
    with np.errstate(all="ignore"):
        d = tc.dot(v[:, None], np.ones((v.size, 1)), 0.0, gpu=unit,
                   input_format="fp32", output_format=fmt)
    assert _same(d, expect), (fmt.name, mode, overflow, kind)


def test_e4m3fn_toward_zero_is_448_not_480():
    """The bug this file was written for: 480 is not an e4m3fn value (its pattern is NaN)."""
    unit = tc.BlockFMA(8, output_rounding="toward_zero")
    d = tc.matmul([[490.0], [-500.0]], [[1.0]], gpu=unit, input_format="fp16",
                  output_format="fp8_e4m3")
    assert d[:, 0].tolist() == [448.0, -448.0]
