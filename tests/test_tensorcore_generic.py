"""The generic block-FMA parameters (sticky bit, normalised products, late c, odd/even groups,
c truncated far below, exact and pairwise summation, subnormal flushing, the product limit)
against independent references: the Fraction reference of tests/tensorcore_reference.py for
the aligned family, exact Fractions for the exact sum, float32 arithmetic for the pairwise
tree; plus the argument checks and the issue-14/15 error messages."""

from __future__ import annotations

import dataclasses
import math
import zlib
from fractions import Fraction

import numpy as np
import pytest
import tensorcore_reference as ref

import fpsim
import fpsim.tensorcore as tc
from tests.intlike import Count

FORMATS = {"fp16": (-14, 10, 15), "bf16": (-126, 7, 127), "fp8_e4m3": (-6, 3, 8),
           "fp8_e4m3fnuz": (-7, 3, 7)}


def _draw(rng, fin: str, shape, spread: int) -> np.ndarray:
    emin, m, emax = FORMATS[fin]
    e = rng.integers(max(emin - m, -spread), min(emax, spread) + 1, shape)
    x = rng.uniform(1, 2, shape) * np.exp2(e) * rng.choice([-1.0, 1.0], shape)
    x[rng.random(shape) < 0.1] = 0.0
    v = tc.convert_input(x, fin)
    return np.where(np.isfinite(v), v, 0.0)


GENERIC_CASES = [
    ("sticky", dict(sticky_bit=True), ref.Generic(sticky=True)),
    ("normalised", dict(products="normalised"), ref.Generic(normalised=True)),
    ("late_rz", dict(c_addition="late"), ref.Generic(late=True)),
    ("late_rd", dict(c_addition="late", alignment_rounding="down"),
     ref.Generic(late=True, armode="rd")),
    ("late_ru_3", dict(c_addition="late", alignment_rounding="up", late_extra_bits=3),
     ref.Generic(late=True, armode="ru", late_bits=3)),
    ("late_rne", dict(c_addition="late", alignment_rounding="nearest_even"),
     ref.Generic(late=True, armode="rne")),
    ("odd_even", dict(grouping="odd_even", c_addition="late", alignment_rounding="down",
                      c_far_truncation=25),
     ref.Generic(late=True, armode="rd", odd_even=True, c_far=25)),
    ("odd_even_sticky_norm", dict(grouping="odd_even", c_addition="late", sticky_bit=True,
                                  products="normalised"),
     ref.Generic(late=True, odd_even=True, sticky=True, normalised=True)),
]


@pytest.mark.parametrize("fin", ["fp16", "bf16", "fp8_e4m3fnuz"])
@pytest.mark.parametrize("name,kw,g", GENERIC_CASES, ids=[c[0] for c in GENERIC_CASES])
@pytest.mark.parametrize("rounding", ["rz", "rne"])
def test_aligned_family_matches_fraction_reference(fin, name, kw, g, rounding):
    rng = np.random.default_rng([7, len(name), len(fin), len(rounding)])
    n, neab, mel = 8, 1, (-133 if name.startswith("late") else None)
    unit = tc.BlockFMA(n, neab, rounding, mel, **kw)
    emin = FORMATS[fin][0]
    u = ref.Unit(n, neab, rounding, mel, emin)
    rows, K = 60, 2 * n + 3
    spread = 20 if fin != "bf16" else 60
    a = _draw(rng, fin, (rows, K), spread)
    b = _draw(rng, fin, (rows, K), spread)
    c = np.asarray(fpsim.round(rng.standard_normal(rows) * np.exp2(
        rng.integers(-40, 40, rows)), "fp32"), dtype=np.float64)
    c[::5] = 0.0
    c[1::7] = -(a[1::7] * b[1::7]).sum(axis=1)  # cancellation
    c = np.asarray(fpsim.round(c, "fp32"), dtype=np.float64)
    got = tc.dot(a, b, c, gpu=unit, input_format=fin)
    want = np.array([ref.dot_generic(list(a[r]), list(b[r]), float(c[r]), u, g)
                     for r in range(rows)])
    np.testing.assert_array_equal(np.asarray(fpsim.to_bits(got, "fp32")),
                                  np.asarray(fpsim.to_bits(want, "fp32")))


def test_exact_summation_is_the_correctly_rounded_sum():
    rng = np.random.default_rng(3)
    rows, K = 300, 12
    a = _draw(rng, "bf16", (rows, K), 66)
    b = _draw(rng, "bf16", (rows, K), 66)
    c = np.asarray(fpsim.round(rng.standard_normal(rows) * np.exp2(
        rng.integers(-140, 100, rows)), "fp32"), dtype=np.float64)
    c[::3] = -(a[::3, :4] * b[::3, :4]).sum(axis=1) * (1 + 2.0**-30)
    c = np.asarray(fpsim.round(c, "fp32"), dtype=np.float64)
    c = np.where(np.isfinite(c), c, 1.0)
    for mode in ("rne", "rz", "up", "down"):
        unit = tc.BlockFMA(4, 0, mode, summation="exact")
        got = tc.dot(a, b, c, gpu=unit, input_format="bf16")
        want = []
        for r in range(rows):
            d = float(c[r])
            for k0 in range(0, K, 4):
                s = Fraction(d) + sum(Fraction(float(x)) * Fraction(float(y))
                                      for x, y in zip(a[r, k0:k0 + 4], b[r, k0:k0 + 4],
                                                      strict=True))
                d = _round_fp32(s, mode)
                if math.isinf(d):
                    break
            want.append(d)
        np.testing.assert_array_equal(got, np.array(want), err_msg=mode)


def _round_fp32(s: Fraction, mode: str) -> float:
    """Exact rational -> fp32 with the mode (MPFR-free: the float64 nearest plus a tie-break
    by the sign of the remainder, done on Fractions)."""
    if s == 0:
        return 0.0
    e = max(ref.floor_log2(abs(s)), -126)
    q = s / ref.pow2(e - 23)
    fl = q.numerator // q.denominator
    rem = q - fl
    if mode == "rne":
        n = fl + (1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2) else 0)
    elif mode == "rz":
        n = fl if s > 0 or rem == 0 else fl + 1
    elif mode == "up":
        n = fl if rem == 0 else fl + 1
    else:
        n = fl
    v = n * ref.pow2(e - 23)
    if abs(s) >= ref.pow2(128) or abs(v) >= ref.pow2(128):  # the model's rule: +-inf
        return math.copysign(math.inf, float(s))
    return float(v)


def test_pairwise_summation_is_float32_tree():
    rng = np.random.default_rng(5)
    rows, K = 500, 8
    a = _draw(rng, "fp16", (rows, K), 15)
    b = _draw(rng, "fp16", (rows, K), 15)
    c = np.asarray(fpsim.round(rng.standard_normal(rows), "fp32"), dtype=np.float64)
    unit = tc.BlockFMA(4, 0, "rne", summation="pairwise")
    got = tc.dot(a, b, c, gpu=unit)
    p = (a * b).astype(np.float32)
    d = c.astype(np.float32)
    for k0 in (0, 4):
        q = p[:, k0:k0 + 4]
        d = d + ((q[:, 0] + q[:, 1]) + (q[:, 2] + q[:, 3]))
    np.testing.assert_array_equal(got, d.astype(np.float64))


def test_flushing_and_product_limit():
    unit = tc.BlockFMA(4, 0, "rne", summation="pairwise", input_subnormals="daz",
                       output_subnormals="flush", product_limit=True)
    tiny16 = 2.0**-20  # an fp16 subnormal input: flushed to +0
    assert float(tc.dot([tiny16, 1.0], [1.0, 1.0], 0.0, gpu=unit)) == 1.0
    assert float(tc.dot([1.0], [2.0**-13], 2.0**-140, gpu=unit)) == 2.0**-13  # c flushed
    d = tc.dot([2.0**-62], [1.5 * 2.0**-64], -2.0**-125, gpu=unit,
               input_format="bf16")  # a result of -2**-127, flushed
    assert float(d) == 0.0 and math.copysign(1, float(d)) == -1.0  # the sign is kept
    big = 2.0**64
    d = tc.dot([big, big], [-big, 1.0], 1.0, gpu=unit, input_format="bf16")
    assert float(d) == -math.inf  # a product of -2**128: -inf (the published model: +inf)
    d = tc.dot([big, big], [-big, big], 1.0, gpu=unit, input_format="bf16")
    assert math.isnan(float(d))


def test_generic_units_run_through_matmul_and_explain_matches_dot():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((3, 40))
    B = rng.standard_normal((40, 2))
    for gpu, fin in (("MI100", "fp16"), ("MI210", "bf16"), ("MI300X", "tf32"),
                     ("MI300X", "fp8_e5m2fnuz"), ("RTXPRO6000", "fp16")):
        D = tc.matmul(A, B, gpu=gpu, input_format=fin)
        for i in range(3):
            for j in range(2):
                d = tc.dot(A[i], B[:, j], 0.0, gpu=gpu, input_format=fin)
                assert fpsim.to_bits(d, "fp32") == fpsim.to_bits(D[i, j], "fp32")


@pytest.mark.parametrize("kw,match", [
    (dict(summation="kulisch"), "summation must be one of"),
    (dict(grouping="odd_even"), "needs c_addition='late'"),
    (dict(c_addition="early"), "c_addition must be one of"),
    (dict(alignment_rounding="stochastic"), "alignment_rounding must be one of"),
    (dict(sticky_bit=1), "sticky_bit must be True or False"),
    (dict(products="denormalised"), "products must be one of"),
    (dict(input_subnormals="ftz"), "input_subnormals must be one of"),
    (dict(late_extra_bits=-1), "late_extra_bits"),
    (dict(c_far_truncation=-2), "c_far_truncation"),
    (dict(summation="exact", c_addition="late"), "no alignment to add c late to"),
    (dict(summation="exact", sticky_bit=True), "apply to summation='aligned' only"),
    (dict(summation="pairwise", output_rounding="rne", c_addition="rounded_sum"),
     "c_addition must be 'joined'"),
    (dict(c_rounding="stochastic"), "c_rounding must be one of"),
    (dict(c_addition="rounded_sum", c_rounding="nearest_away"), "c_rounding must be one of"),
    (dict(c_rounding="toward_zero"), "needs c_addition='rounded_sum'"),
    (dict(c_addition="late", c_rounding="up"), "needs c_addition='rounded_sum'"),
    (dict(grouping="odd_even", c_addition="rounded_sum"), "needs c_addition='late'"),
])
def test_bad_generic_parameters(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        tc.BlockFMA(8, 1, **kw)


def test_block_fma_integer_fields_share_the_as_int_rule():
    # BlockFMA's integer fields are checked by fpsim.checks.as_int: what range() takes is
    # stored as an int (the unit equals, hashes as and computes as the one made from ints);
    # other types are a TypeError naming the field, values out of range a ValueError
    ints = dict(block_size=8, extra_bits=1, min_exponent=-132, late_extra_bits=3,
                c_far_truncation=25)
    ref = tc.BlockFMA(output_rounding="rz", c_addition="late", **ints)
    a, b = np.linspace(-2, 2, 16), np.linspace(3, -1, 16)
    want = tc.dot(a, b, 0.5, gpu=ref, input_format="bf16")
    for conv in (np.int16, np.array, Count):
        u = tc.BlockFMA(output_rounding="rz", c_addition="late",
                        **{k: conv(v) for k, v in ints.items()})
        assert u == ref and hash(u) == hash(ref)
        assert all(type(getattr(u, k)) is int for k in ints)
        assert tc.dot(a, b, 0.5, gpu=u, input_format="bf16") == want
    assert tc.BlockFMA(8, 1, output_fraction_bits=np.int8(10)).output_fraction_bits == 10
    for bad in (True, 8.0, "8", np.array([8]), np.timedelta64(8)):
        for name in ("block_size", "extra_bits", "min_exponent", "late_extra_bits",
                     "c_far_truncation", "output_fraction_bits"):
            kw = {**dict(block_size=8, extra_bits=1), name: bad}
            with pytest.raises(TypeError, match=f"BlockFMA.{name} must be "):
                tc.BlockFMA(**kw)
    for name, low, high in (("min_exponent", -601, 301), ("output_fraction_bits", -1, 24),
                            ("late_extra_bits", -1, 17)):
        for v in (low, high, np.int64(high)):
            with pytest.raises(ValueError, match=rf"BlockFMA.{name} must be .*an int in \["):
                tc.BlockFMA(8, 1, **{name: v})
    with pytest.raises(ValueError, match="BlockFMA.c_far_truncation must be >= 0, got -1"):
        tc.BlockFMA(8, 1, c_far_truncation=np.int64(-1))


def test_pairwise_needs_power_of_two_and_rne():
    with pytest.raises(ValueError, match="power-of-two"):
        tc.BlockFMA(6, 0, "rne", summation="pairwise")
    with pytest.raises(ValueError, match="nearest_even"):
        tc.BlockFMA(4, 0, "rz", summation="pairwise")


def test_defaults_keep_the_plain_kernel():
    assert all(u.is_plain for g in ("V100", "A100", "Ada", "H100", "B200", "B200-fp8-variant")
               for (fin, _), u in tc.get_gpu(g).units.items()
               if not (g == "B200" and fin.startswith("fp8")))
    # B200's fp8 default is issue 33's rule: B200-fp8-rz-then-c's units, the products summed
    # toward zero (2 extra bits, floor 2**-133) and c added after to nearest even (not plain)
    for fin in ("fp8_e4m3", "fp8_e5m2"):
        u = tc.get_gpu("B200").unit_for(fin, "fp32")
        assert u == tc.get_gpu("B200-fp8-rz-then-c").unit_for(fin, "fp32") and not u.is_plain
        assert u != tc.get_gpu("B200-fp8-exact").unit_for(fin, "fp32")
        assert (u.block_size, u.extra_bits, u.min_exponent, u.summation, u.c_addition) == (
            32, 2, -133, "aligned", "rounded_sum")
        assert u.output_rounding.value == "toward_zero"
        assert u.c_rounding.value == "nearest_even"
        assert repr(u) == ("BlockFMA(block_size=32, extra_bits=2, output_rounding="
                           "'toward_zero', min_exponent=-133, c_addition='rounded_sum')")
        assert u.describe().endswith("then c added to the rounded sum (nearest_even)")
    assert not any(u.is_plain for g in ("MI100", "MI210", "MI300X")
                   for u in tc.get_gpu(g).units.values())
    assert repr(tc.get_gpu("A100").unit_for("fp16", "fp32")) == (
        "BlockFMA(block_size=8, extra_bits=1, output_rounding='toward_zero', min_exponent=-132)")


def test_amd_units_and_support():
    assert tc.get_gpu("MI300X").supported() == [
        "fp16->fp32", "bf16->fp32", "tf32->fp32", "fp8_e4m3fnuz->fp32", "fp8_e5m2fnuz->fp32"]
    assert tc.get_gpu("MI250").units == tc.get_gpu("MI210").units
    with pytest.raises(ValueError, match="MI100 has no tensor-core mode fp16 inputs -> fp16"):
        tc.dot([1.0], [1.0], gpu="MI100", output_format="fp16")
    with pytest.raises(ValueError, match="MI300X has no tensor-core mode fp8_e4m3 inputs"):
        tc.dot([1.0], [1.0], gpu="MI300X", input_format="fp8_e4m3")


# -- issue 15 / 14 leftovers -----------------------------------------------------------------

def test_dot_k_mismatch_and_empty():
    with pytest.raises(ValueError, match="a has 3, b has 1"):
        tc.dot([1.0, 2.0, 3.0], [1.0])
    with pytest.raises(ValueError, match="a has 2, b has 3"):
        tc.dot([[1.0, 2.0]], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="K = 0"):
        tc.dot([], [])
    with pytest.raises(ValueError, match="ks must be a non-empty sequence"):
        tc.error_vs_k(ks=())
    with pytest.raises(ValueError, match=r"ks\[1\] must be >= 1, got 0"):
        tc.error_vs_k(ks=(4, 0))
    with pytest.raises(ValueError, match="trials must be >= 1, got 0"):
        tc.error_vs_k(ks=(4,), trials=0)
    # counts are checked by fpsim.checks.as_int: what range() takes, else a TypeError
    for bad in (True, 4.0, "4", None, np.array([4]), np.timedelta64(4)):
        with pytest.raises(TypeError, match=r"ks\[0\] must be an int, got "
                                            + type(bad).__name__):
            tc.error_vs_k(ks=(bad,))
        with pytest.raises(TypeError, match="trials must be an int, got " + type(bad).__name__):
            tc.error_vs_k(ks=(4,), trials=bad)

    # one K is a sequence of one; what is neither is a TypeError naming ks (was Python's
    # "'int' object is not iterable" for ks=16, "ks[0] ... str '1'" for ks="16")
    one = tc.error_vs_k(ks=(8,), gpus=("A100",), trials=2, seed=1)
    for k in (8, np.int64(8), np.array(8), Count(8)):
        r = tc.error_vs_k(ks=k, gpus=("A100",), trials=2, seed=1)
        assert list(r.ks) == list(one.ks) == [8] and r.mean.keys() == one.mean.keys()
        assert all(np.array_equal(r.mean[key], one.mean[key]) for key in one.mean)
    for bad in ("16", b"16", None, 16.0, {"k": 16}.items):
        with pytest.raises(TypeError, match="ks must be a sequence of dot-product lengths K"):
            tc.error_vs_k(ks=bad)
    ref = tc.error_vs_k(ks=(4, 8), gpus=("A100",), trials=4, seed=1)
    for k, t in ((np.int64(4), np.uint8(4)), (np.array(4), np.array(4)), (Count(4), Count(4))):
        r = tc.error_vs_k(ks=(k, 8), gpus=("A100",), trials=t, seed=1)
        assert list(r.ks) == list(ref.ks) and all(type(v) is int for v in r.ks)
        for got, want in ((r.mean, ref.mean), (r.max, ref.max)):
            assert got.keys() == want.keys()
            for key in want:
                np.testing.assert_array_equal(got[key], want[key])


@pytest.mark.parametrize("gpu", ["A100", "MI300X", "MI210"])
def test_invalid_flag_for_zero_times_inf(gpu):
    with fpsim.flag_context() as ctx:
        d = tc.dot([0.0, 1.0], [np.inf, 1.0], 0.0, gpu=gpu)
    assert math.isnan(float(d)) and ctx.flags & fpsim.Flags.INVALID
    with fpsim.flag_context() as ctx:
        D = tc.matmul([[np.inf, 1.0], [1.0, 1.0]], [[1.0], [-np.inf]], gpu=gpu)
    assert math.isnan(D[0, 0]) and ctx.flags & fpsim.Flags.INVALID  # +inf meets -inf
    with fpsim.flag_context() as ctx:  # a quiet NaN input raises nothing
        tc.dot([np.nan, 1.0], [1.0, 1.0], 0.0, gpu=gpu)
    assert not ctx.flags & fpsim.Flags.INVALID


def _published_b200_matches(path) -> int:
    """Rows of a measured B200 fp8 file whose result the published B200 fp8 model gives bit
    for bit (the files hold no NaN results, so no NaN-for-NaN rule is needed)."""
    hf = tc.load_hardware_file(path)
    assert not np.isnan(hf.d).any()
    return int((tc.model_results(hf, "B200-fp8-published") == hf.d_bits).sum())


def _published_b200_unit(fin: str) -> ref.Unit:
    """The published B200 fp8 parameters (docs/tensorcore-model.md: upstream B200TC.m, block
    32, 2 extra bits, RZ; the fp32 output's floor -133 as the other Blackwell units), typed
    in for the Fraction reference."""
    return ref.Unit(32, 2, "rz", -133, ref.IN_EMIN[fin])


@pytest.mark.slow
def test_b200_fp8_published_model_is_the_fraction_reference():
    """Every measured B200 fp8 row: fpsim's published-parameter model gives the pattern the
    Fraction reference (tests/tensorcore_reference.py) gives, so the CLI counts above are the
    reference's (a few seconds: every row's 32 products in Fractions)."""
    import pathlib

    data = pathlib.Path(__file__).parent / "data" / "tensorcore" / "open"
    for path in sorted(data.glob("B200_*.txt.gz")):
        hf = tc.load_hardware_file(path)
        fin = hf.input_format
        u = _published_b200_unit(fin)
        a, b = tc.convert_input(hf.a, fin), tc.convert_input(hf.b, fin)
        c = fpsim.round(hf.c, "fp32")
        want = np.array([ref.dot(a[i].tolist(), b[i].tolist(), float(c[i]), u)
                         for i in range(hf.rows)], dtype=np.float32)
        got = tc.model_results(hf, "B200-fp8-published")
        np.testing.assert_array_equal(got, fpsim.to_bits(want, "fp32").astype(np.uint64))


def test_check_hardware_cli_messages(tmp_path, capsys):
    from fpsim.cli import main

    assert main(["check-hardware", str(tmp_path / "missing.txt")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such file" in err and "Traceback" not in err
    import pathlib

    data = pathlib.Path(__file__).parent / "data" / "tensorcore" / "open"
    files = sorted(str(p) for p in data.glob("B200_*.txt.gz"))
    rows = [tc.load_hardware_file(f).rows for f in files]  # the files' own row counts
    assert len(files) == 2 and min(rows) > 0
    # B200 fp8 runs with its default (issue 33's rule): every row, counts per file
    assert main(["check-hardware", *files]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] + line.split()[4:6] for line in out[:2]] == [
        ["B200_e4m3_to_fp32.txt.gz", "B200", "fp8_e4m3->fp32", f"{rows[0]}/{rows[0]}", "rows"],
        ["B200_e5m2_to_fp32.txt.gz", "B200", "fp8_e5m2->fp32", f"{rows[1]}/{rows[1]}", "rows"]]
    assert out[2].startswith(f"total: {sum(rows)}/{sum(rows)} rows match in 2 file(s)")
    # the named alternatives are still selectable
    assert main(["check-hardware", *files, "--gpu", "B200-fp8-variant"]) == 0
    assert f"total: {sum(rows)}/{sum(rows)}" in capsys.readouterr().out
    # the published parameters miss rows: the CLI's counts are the rows whose model pattern
    # equals the measured one (test_b200_fp8_published_model_is_the_fraction_reference pins
    # those patterns to the Fraction reference, row by row)
    hit = [_published_b200_matches(f) for f in files]
    assert 0 < sum(hit) < sum(rows)
    assert main(["check-hardware", *files, "--gpu", "B200-fp8-published", "--show", "0"]) == 1
    out = capsys.readouterr().out.splitlines()
    per_file = list(zip(hit, rows, strict=True))
    assert [line.split()[4] for line in out[:2]] == [f"{h}/{n}" for h, n in per_file]
    assert [line.split()[7] for line in out[:2]] == [str(n - h) for h, n in per_file]
    assert out[2].startswith(f"total: {sum(hit)}/{sum(rows)} rows match in 2 file(s)")
    # the GPU notes' figures are these files' counts: B200's "all 6,000 measured rows", the
    # published parameters' "~64% of measured rows"
    assert f"fits all {sum(rows):,} measured rows" in tc.get_gpu("B200").notes
    assert f"~{round(100 * sum(hit) / sum(rows))}% of measured rows" in \
        tc.get_gpu("B200-fp8-published").notes
    # an unmodelled pair: one short line naming the valid --gpu choices, nothing read
    rtx = tmp_path / "RTXPRO6000_e4m3_to_fp32.txt"
    rtx.write_text("")
    for argv in ([*files, "--gpu", "RTXPRO6000"], [str(rtx)]):
        assert main(["check-hardware", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and len(err) < 400 and "Traceback" not in err
        assert "RTXPRO6000 has no modelled fp8_e4m3->fp32 unit" in err
        assert err.endswith("valid --gpu choices for fp8_e4m3->fp32: Ada, L40S, H100, H200, "
                            "B200, B200-fp8-published, B200-fp8-variant, "
                            "B200-fp8-published-rn, B200-fp8-exact, "
                            "B200-fp8-rz-then-c")
    p = tmp_path / "A100_fp16_to_fp32.txt"
    tc.write_hardware_file(p, "A100", "fp16", "fp32", [[0x3c00] + [0] * 7],
                           [[0x3c00] + [0] * 7], [0xbf7fffff], [0x33800000])
    q = tmp_path / "MI300X_fp16_to_fp32_long.txt"
    tc.write_hardware_file(q, "MI300X", "fp16", "fp32", [[0x3c00] + [0] * 7],
                           [[0x3c00] + [0] * 7], [0], [0x3f800000])
    assert main(["check-hardware", str(p), str(q)]) == 0
    lines = capsys.readouterr().out.splitlines()[:2]
    assert lines[0].index("K=") == lines[1].index("K=")
    assert lines[0].index("rows match") == lines[1].index("rows match")


# -- the exceptional cases of the published model_validation/ExceptionalCasesTest.m ----------

@pytest.mark.parametrize("gpu", ["A100", "H100", "B200", "MI300X"])
def test_published_exceptional_cases(gpu):
    big = 2.0**127
    # 1: c = 2**127 plus a product of 2**127: +inf, even where the output rounds toward zero
    for fin in ("bf16", "tf32"):
        assert float(tc.dot([big], [1.0], big, gpu=gpu, input_format=fin)) == math.inf
        assert float(tc.dot([-big], [1.0], -big, gpu=gpu, input_format=fin)) == -math.inf
    # 2: +inf x -inf = -inf; 3: -inf + inf = NaN
    assert float(tc.dot([np.inf], [-np.inf], 0.0, gpu=gpu, input_format="bf16")) == -math.inf
    assert math.isnan(float(tc.dot([-np.inf, np.inf], [1.0, 1.0], 0.0, gpu=gpu,
                                   input_format="bf16")))
    if gpu.startswith("MI"):
        return  # the AMD models have no fp16 output
    # 4, 5: two products of 65504 overflow the fp16 output: +-inf
    for s in (1.0, -1.0):
        d = tc.dot([65504.0, 65504.0], [s, s], 0.0, gpu=gpu, output_format="fp16")
        assert float(d) == s * math.inf


@pytest.mark.parametrize("gpu", ["MI100", "MI210", "MI300X", "RTXPRO6000"])
def test_every_unit_handles_short_and_ragged_k(gpu):
    """K from 1 to two blocks and one (a last block shorter than n, odd or even): each dot
    equals the same dot with the zero padding written out (the unit pads K with zeros)."""
    rng = np.random.default_rng(11)
    for (fin, fout), unit in tc.get_gpu(gpu).units.items():
        n = unit.block_size
        for K in sorted({1, 2, 3, n - 1, n + 1, 2 * n + 1} - {0}):
            a = rng.standard_normal(K)
            b = rng.standard_normal(K)
            pad = (-K) % n
            d = tc.dot(a, b, 0.25, gpu=gpu, input_format=fin, output_format=fout)
            e = tc.dot(np.r_[a, np.zeros(pad)], np.r_[b, np.zeros(pad)], 0.25, gpu=gpu,
                       input_format=fin, output_format=fout)
            assert fpsim.to_bits(d, fout) == fpsim.to_bits(e, fout), (fin, fout, K)
            assert np.isfinite(d)


@pytest.mark.parametrize("fo", ["fp32", "fp16"])
@pytest.mark.parametrize("unit", [
    tc.BlockFMA(8, 1, "rz", -132, c_addition="rounded_sum"),
    tc.BlockFMA(8, 2, "rne", None, c_addition="rounded_sum", c_rounding="toward_zero"),
    tc.BlockFMA(4, 0, "up", None, c_addition="rounded_sum", c_rounding="down"),
    tc.BlockFMA(16, -6, "rz", None, c_addition="rounded_sum", c_rounding="up"),
    tc.BlockFMA(8, 0, "rz", summation="exact", c_addition="rounded_sum"),
], ids=lambda u: u.describe()[:60])
def test_rounded_sum_is_the_product_sum_then_one_addition(unit, fo):
    """c_addition="rounded_sum", block by block: the products' sum as the same unit with
    c joined computes it for c = 0 (a zero c takes no part in the alignment), then
    fpsim.add with c_rounding in the unit's result format (the core's addition)."""
    from fpsim.tensorcore.model import dot_rows

    fi, fo_ = fpsim.get_format("bf16"), fpsim.get_format(fo)
    rfmt = unit.result_format(fo_)
    products = dataclasses.replace(unit, c_addition="joined", c_rounding="nearest_even")
    rng = np.random.default_rng(zlib.crc32(repr(unit).encode() + fo.encode()))
    R, K = 400, 3 * unit.block_size + 3
    e = rng.integers(-12, 6, (2, R, K))
    v = rng.standard_normal((2, R, K)) * np.exp2(e) * (rng.random((2, R, K)) > 0.1)
    a, b = tc.convert_input(v[0], fi), tc.convert_input(v[1], fi)
    c = np.asarray(fpsim.round(rng.standard_normal(R) * np.exp2(rng.integers(-30, 12, R)),
                               rfmt), dtype=np.float64)
    c[::7] = -0.0
    want = c.copy()
    for k0 in range(0, K, unit.block_size):
        k1 = min(K, k0 + unit.block_size)
        s = dot_rows(a[:, k0:k1], b[:, k0:k1], np.zeros(R), products, fi, fo_)
        want = np.asarray(fpsim.add(want, s, rfmt, unit.c_rounding), dtype=np.float64)
    got = dot_rows(a, b, c, unit, fi, fo_)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)
    # the stage-by-stage kernel (a trace asked for) gives the same bits
    np.testing.assert_array_equal(dot_rows(a, b, c, unit, fi, fo_, trace=[]), want)
