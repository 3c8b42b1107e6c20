"""The block-scaled GEMM probes of tools/record_tensorcore.py without a GPU: every probe's bit
patterns decode (independently: ml_dtypes, the spec's E2M1 table, E8M0 by its definition) to
the exact products it claims, the candidate models disagree on the rows meant to separate them,
the "exact" candidates are the claimed sums rounded by an exact-Fraction reference (itself
checked against NumPy's cast; fpsim.round, which the tool uses, agrees with it on 20,022 numbers
per mode), the scale layout matches cuBLAS's formula, the fp4 packing torch's nibble layout, and
a dry run written with one candidate is recognised by the checker."""

from __future__ import annotations

import importlib.util
import math
import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# the 16 E2M1 codes of OCP MX v1.0 (section 5.3.3): sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
PAIRS = [(g, f) for g, fs in (("in_block", ("mxfp8_e4m3",)),
                              ("across_blocks", ("mxfp8_e4m3", "mxfp4", "nvfp4")),
                              ("scale_range", ("mxfp8_e4m3", "mxfp4")),
                              ("output_rounding", ("mxfp8_e4m3", "mxfp4", "nvfp4"))) for f in fs]


@pytest.fixture(scope="module")
def rt():
    spec = importlib.util.spec_from_file_location("record_tensorcore_bs",
                                                  ROOT / "tools" / "record_tensorcore.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def probes(rt):
    out = {}
    for group, fmt in PAIRS:
        codes = rt.block_codes(rt.make_block_case(fmt, group))
        preds = {m: rt._fp32_bits(rt.block_model_outputs(fmt, codes, m))
                 for m in rt.block_models(fmt)}
        out[group, fmt] = (rt.make_block_case(fmt, group), codes, preds)
    return out


def _elem(codes: np.ndarray, fmt: str) -> list[list[Fraction]]:
    if fmt == "mxfp8_e4m3":
        v = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        return [[Fraction(x) for x in row] for row in v]
    return [[Fraction(E2M1[c & 7]) * (-1 if c & 8 else 1) for c in row] for row in codes]


def _scale(codes: np.ndarray, fmt: str) -> list[list[Fraction]]:
    if fmt == "nvfp4":
        v = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        return [[Fraction(x) for x in row] for row in v]
    assert (codes != 255).all()  # no NaN scale in any probe
    return [[Fraction(2) ** (int(c) - 127) for c in row] for row in codes]


def test_the_registry_matches(rt):
    assert sorted((g, f) for g, fs in rt.BS_GROUP_FORMATS.items() for f in fs) == sorted(PAIRS)
    with pytest.raises(ValueError, match="does not apply"):
        rt.make_block_case("nvfp4", "in_block")


@pytest.mark.parametrize("group,fmt", PAIRS)
def test_bit_patterns_hold_the_claimed_products(probes, group, fmt):
    case, codes, _ = probes[group, fmt]
    bs = 16 if fmt == "nvfp4" else 32
    a, b = _elem(codes["a"], fmt), _elem(codes["b"], fmt)
    sa, sb = _scale(codes["sa"], fmt), _scale(codes["sb"], fmt)
    assert codes["a"].shape == codes["b"].shape == (len(case.terms), 8 * bs)
    for r, terms in enumerate(case.terms):
        got = {(j // bs, j % bs): a[r][j] * b[r][j] * sa[r][j // bs] * sb[r][j // bs]
               for j in range(8 * bs) if a[r][j] * b[r][j] != 0}
        want = {(blk, slot): sign * Fraction(2) ** e for blk, slot, e, sign in terms}
        assert got == want, (group, fmt, r)


@pytest.mark.parametrize("group,fmt", PAIRS)
def test_candidates_disagree(probes, group, fmt):
    _, _, p = probes[group, fmt]
    rows = len(p["exact"])

    def differ(m1, m2):
        return int((p[m1] != p[m2]).sum())

    # most rows separate some pair of candidates (the rest are controls, where all agree)
    split = sum(len({int(p[m][i]) for m in p}) > 1 for i in range(rows))
    assert split >= rows // 2
    if group == "in_block":  # exact block sums vs truncating alignment (2 and 7 extra bits)
        assert differ("exact", "B200-fp8-variant") > 0
        assert differ("exact", "B200-fp8-published") > differ("exact", "B200-fp8-variant")
        assert differ("exact", "prescaled") > 0 and differ("exact", "fp32") == 0
    elif group == "across_blocks":  # wide across blocks vs fp32 block by block
        assert differ("exact", "fp32") >= rows // 3
    elif group == "scale_range":  # scales on the sum vs on each product; accumulator range
        assert differ("fp32", "prescaled") > 0 and differ("exact", "fp32") > 0
        assert np.isnan(p["prescaled"].view(np.float32)).any()
    else:  # the output rounding
        assert differ("exact", "exact-rz") >= rows // 2
    assert differ("exact", "exact-rz") > 0


def _fraction_to_fp32(q: Fraction, rounding: str = "nearest_even") -> float:
    """The reference: ``q`` rounded once to fp32 on exact Fractions (subnormals kept;
    "nearest_even" overflows to inf, "toward_zero" to the largest finite value)."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    quantum = max(e, -126) - 23
    scaled = q / Fraction(2) ** quantum
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rounding == "nearest_even" and (rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2)):
        n += 1
    value = Fraction(n) * Fraction(2) ** quantum
    if value >= Fraction(2) ** 128:
        return sign * (math.inf if rounding == "nearest_even" else float(np.finfo(np.float32).max))
    return sign * float(value)


def test_exact_rounding_reference_matches_numpy():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(2000) * np.exp2(rng.integers(-160, 130, 2000)),
                        [2.0**-150, 3 * 2.0**-151, 2.0**-149, 2.0**128, -(2.0**128) * 0.9999,
                         float(np.finfo(np.float32).max), 1 + 2.0**-24, 1 + 3 * 2.0**-24]])
    with np.errstate(over="ignore"):
        ref = x.astype(np.float32)  # one correct rounding (nearest even) of each float64
    got = np.array([_fraction_to_fp32(Fraction(v)) for v in x], np.float32)
    np.testing.assert_array_equal(got, ref)
    # toward zero: NumPy's nearest, moved one step toward zero where it rounded away
    with np.errstate(over="ignore"):
        fin = np.isfinite(ref) & (np.abs(ref.astype(np.float64)) > np.abs(x))
        rz = np.where(fin, np.nextafter(ref, np.float32(0)), ref)
        rz = np.where(np.isinf(ref), np.copysign(np.finfo(np.float32).max, x), rz)
    got = np.array([_fraction_to_fp32(Fraction(v), "toward_zero") for v in x], np.float32)
    np.testing.assert_array_equal(got, rz.astype(np.float32))


def _fractions(rng, n: int) -> list[Fraction]:
    """Exact numbers around fp32's grid: random Fractions with wide numerators and
    denominators (not float64 values) over fp32's whole range and past it, exact ties of the
    normal and subnormal quanta with and without a tiny term beside them, the overflow
    threshold (the largest finite value plus half an ulp) and values at and below 2**-150."""
    out = []
    for _ in range(n):
        num = int(rng.integers(1, 2**62)) * 2**int(rng.integers(0, 30)) + 1
        den = int(rng.integers(1, 2**62)) | 1
        out.append(Fraction(num, den) * Fraction(2) ** int(rng.integers(-170, 140)))
    for _ in range(n):
        e = int(rng.integers(-160, 129))
        quantum = max(e, -126) - 23
        m = int(rng.integers(0, 2**24))
        tie = Fraction(2 * m + 1) * Fraction(2) ** (quantum - 1)
        tiny = Fraction(1, 2**int(rng.integers(60, 400)))
        out += [tie, tie + tiny, tie - tiny, Fraction(m) * Fraction(2) ** quantum]
    top = Fraction(2) ** 128 - Fraction(2) ** 103  # max + half an ulp: a tie past max
    out += [top, top - Fraction(1, 2**500), top + 1, Fraction(2) ** 128, Fraction(2) ** 200,
            Fraction(2) ** -150, Fraction(3, 2**151), Fraction(1, 2**151), Fraction(1, 3 * 2**149),
            Fraction(2) ** -149, Fraction(0)]
    return [q * sign for q in out for sign in (1, -1)]


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero"])
def test_fpsim_rounds_exact_sums_as_the_reference(rounding):
    """The tool's exact candidates round with fpsim.round (exact on Fractions): the same
    fp32 values, signs of zero included, as the Fraction reference, on 20,022 numbers."""
    import fpsim

    qs = _fractions(np.random.default_rng(3), 2000)
    assert len(qs) == 20_022  # the count the docstrings state: 2 signs x (2000 + 4 x 2000 + 11)
    ref = np.array([_fraction_to_fp32(q, rounding) for q in qs])
    got = np.array([float(fpsim.round(q, "fp32", rounding)) for q in qs])
    np.testing.assert_array_equal(got.view(np.uint64), ref.view(np.uint64))


@pytest.mark.parametrize("group,fmt", PAIRS)
def test_exact_predictions_are_the_claimed_sums_rounded(probes, group, fmt):
    case, _, p = probes[group, fmt]
    for model, rounding in (("exact", "nearest_even"), ("exact-rz", "toward_zero")):
        want = [_fraction_to_fp32(sum((sign * Fraction(2) ** e for _, _, e, sign in terms),
                                      Fraction(0)), rounding) for terms in case.terms]
        np.testing.assert_array_equal(p[model], np.array(want).astype(np.float32)
                                      .view(np.uint32), err_msg=f"{group} {fmt} {model}")


def test_scale_layout_and_fp4_packing(rt):
    rng = np.random.default_rng(1)
    s = rng.integers(0, 255, (200, 6)).astype(np.uint8)
    got = rt._to_blocked(s)
    ref = np.zeros(256 * 8, np.uint8)  # cuBLAS docs: 128 x 4 tiles, 32 x 4 x 4 inside
    for i in range(200):
        for j in range(6):
            tile = 512 * ((i // 128) * 2 + j // 4)
            ref[tile + (i % 128 % 32) * 16 + (i % 128 // 32) * 4 + j % 4] = s[i, j]
    np.testing.assert_array_equal(got, ref)
    # fp4 operands: every pair of the 16 E2M1 codes, two per byte, the first in the low nibble
    # (torch float4_e2m1fn_x2); the high nibble of a code's byte is not read
    first, second = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    codes = np.stack([first.ravel(), second.ravel()], axis=1).reshape(8, 64).astype(np.uint8)
    for fmt in ("mxfp4", "nvfp4"):
        got = rt._packed_elements(fmt, codes)
        want = [[int(row[2 * j]) | int(row[2 * j + 1]) << 4 for j in range(32)] for row in codes]
        np.testing.assert_array_equal(got, np.array(want, np.uint8))
        np.testing.assert_array_equal(rt._packed_elements(fmt, codes | np.uint8(0xF0)), got)


def test_dry_run_is_recognised(rt, tmp_path, capsys):
    assert rt.main(["--block-scaled", "--dry-run", "--model", "fp32", "--out",
                    str(tmp_path)]) == 0
    files = sorted(tmp_path.glob("*.npz"))
    assert len(files) == len(PAIRS)
    res = rt.check_block_scaled(files)
    for name, _, model, agree, total in res:
        if model == "fp32":  # recorded with fp32: the stored rows read back and re-predicted
            assert agree == total, name
    assert any(m == "exact" and a < t for _, _, m, a, t in res)
    capsys.readouterr()
    assert rt.main(["--check-block", str(files[0])]) == 0
    assert "fp32" in capsys.readouterr().out


def test_block_scaled_needs_out(rt, capsys):
    with pytest.raises(SystemExit):
        rt.main(["--block-scaled", "--dry-run", "--model", "fp32"])
    assert "--out is required" in capsys.readouterr().err
