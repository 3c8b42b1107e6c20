"""tools/record_tensorcore.py without a GPU (--dry-run: the cases with the model's predictions
go through the same file writing, read back with the loader) and the error-vs-K example."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import fpsim
import fpsim.tensorcore as tc

ROOT = Path(__file__).resolve().parent.parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def record():
    return _load(ROOT / "tools" / "record_tensorcore.py", "record_tensorcore")


def test_dry_run_writes_loadable_files(record, tmp_path, capsys):
    assert record.main(["--dry-run", "--model", "H100", "--out", str(tmp_path), "--rows", "48",
                        "--pairs", "fp16:fp32,fp16:fp16,bf16:fp32,tf32:fp32,e4m3:fp32"]) == 0
    files = sorted(tmp_path.glob("*.txt.gz"))
    assert len(files) == 5 * len(record.GROUPS)
    assert capsys.readouterr().out.count("H100_") == len(files)
    report = tc.check_hardware(files)
    assert report.ok and report.rows == 48 * len(files)
    by_name = {f.name: tc.load_hardware_file(f) for f in files}
    for hf in by_name.values():
        assert hf.gpu == "H100" and hf.rows == 48
        assert hf.k % record.TILE[hf.input_format] == 0
    # the groups hold what they say
    assert np.isnan(by_name["H100_fp16_to_fp32_specials.txt.gz"].d).any()
    assert np.isinf(by_name["H100_bf16_to_fp32_overflow.txt.gz"].d).any()
    assert np.isinf(by_name["H100_fp16_to_fp16_overflow.txt.gz"].d).any()
    assert (by_name["H100_fp16_to_fp32_negative-c.txt.gz"].c < 0).all()
    assert (by_name["H100_fp16_to_fp32_signed-zero.txt.gz"].d == 0).any()
    sub = by_name["H100_bf16_to_fp32_subnormal.txt.gz"].d
    assert ((sub != 0) & (np.abs(sub) < 2.0**-126)).any()
    assert by_name["H100_tf32_to_fp32_multiblock.txt.gz"].k == 64  # 8 calls of 8
    e4m3 = by_name["H100_e4m3_to_fp32_specials.txt.gz"]
    assert (e4m3.a_bits == 0x7F).any()  # the e4m3 NaN pattern


@pytest.mark.parametrize("gpu,neab", [("A100", 1), ("H100", 2)])
def test_extra_bits_cases_measure_the_extra_bits(record, gpu, neab):
    """For fp16 output (round to nearest) the tie + 2**-j rows round up exactly while
    j <= 12 + neab: a GPU run of this group reads the extra bits off the file."""
    a, b, c = record.make_cases("extra_bits", "fp16", "fp16", 40)
    ab, bb, cb = record.to_patterns(a, b, c, "fp16")
    d = record.model_patterns(ab, bb, cb, "fp16", "fp16", gpu)
    up = d != d[-1]
    assert up[:12 + neab].all() and not up[12 + neab:].any()


def test_b200_fp8_extra_bits_cases_separate_the_variants(record):
    a, b, c = record.make_cases("extra_bits", "fp8_e4m3", "fp32", 40)
    ab, bb, cb = record.to_patterns(a, b, c, "fp8_e4m3")
    published = record.model_patterns(ab, bb, cb, "fp8_e4m3", "fp32", "B200-fp8-published")
    variant = record.model_patterns(ab, bb, cb, "fp8_e4m3", "fp32", "B200-fp8-variant")
    assert (published != variant).any()


def test_b200_fp8_probes_separate_the_candidate_rules(record):
    """The candidates that all fit the 6,000 measured B200 fp8 rows differ on the probes:
    wide_products separates the product window's width from an exact sum (e5m2 up to 38
    bits), c_late a joined c from a late one."""
    cands = {"default": "B200", "rule": "B200-fp8-rz-then-c", "variant": "B200-fp8-variant",
             "exact": "B200-fp8-exact", "joined20": tc.BlockFMA(32, 20, "rne", -133),
             "late7": tc.BlockFMA(32, 7, "rne", -133, c_addition="late")}
    out, cases = {}, {}
    for group in ("wide_products", "c_late"):
        a, b, c = cases[group] = record.make_cases(group, "fp8_e5m2", "fp32", 160)
        assert np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c).all()
        out[group] = {n: tc.dot(a, b, c, gpu=u, input_format="fp8_e5m2")
                      for n, u in cands.items()}
    w, cl = out["wide_products"], out["c_late"]
    assert (w["variant"] != w["exact"]).any() and (w["joined20"] != w["exact"]).any()
    assert (w["variant"] != w["joined20"]).any()
    assert (cl["variant"] != cl["late7"]).any()
    # the expected answers of B200's default, issue 33's rule (the groups' docstrings):
    # wide_products never breaks the tie (P, or P / 4 with c = -3P / 4), in every row, where
    # the exact sum always does and the variant does for small j; c_late never flips (c,
    # rounded down), as the exact sum, where the variant's joined c flips
    np.testing.assert_array_equal(w["default"], w["rule"])
    np.testing.assert_array_equal(cl["default"], cl["rule"])
    a, b, c = cases["wide_products"]
    tie_kept = a[:, 0] * b[:, 0] + c
    np.testing.assert_array_equal(w["default"], tie_kept)
    assert (np.abs(w["exact"]) > np.abs(tie_kept)).all()
    assert (w["variant"] != w["default"]).any()
    a, b, c = cases["c_late"]
    np.testing.assert_array_equal(cl["default"], c)
    np.testing.assert_array_equal(cl["exact"], c)
    assert (np.abs(cl["variant"]) > np.abs(c)).any()


def test_record_arguments(record, tmp_path):
    with pytest.raises(SystemExit):
        record.main(["--dry-run", "--out", str(tmp_path)])  # no --model
    with pytest.raises(SystemExit):
        record.main(["--dry-run", "--model", "A100", "--out", str(tmp_path), "--groups", "x"])
    with pytest.raises(SystemExit):
        record.main(["--dry-run", "--model", "A100", "--out", str(tmp_path),
                     "--pairs", "fp32:fp32"])
    # pairs the model lacks are skipped, not guessed
    assert record.main(["--dry-run", "--model", "V100", "--out", str(tmp_path), "--rows", "4",
                        "--pairs", "bf16:fp32", "--groups", "specials"]) == 0
    assert not list(tmp_path.glob("*.gz"))


def test_patterns_are_exact(record):
    a, b, c = record.make_cases("negative_c", "tf32", "fp32", 10)
    ab, _, cb = record.to_patterns(a, b, c, "tf32")
    np.testing.assert_array_equal(fpsim.from_bits(ab, "fp32"), a)
    np.testing.assert_array_equal(fpsim.from_bits(cb, "fp32"), c)
    assert not (ab & 0x1FFF).any()  # tf32 values: the low 13 bits are zero


@pytest.mark.slow
def test_error_vs_k_example_runs(tmp_path, capsys):
    ex = _load(ROOT / "examples" / "tensorcore_error_vs_k.py", "tensorcore_error_vs_k")
    out = tmp_path / "e.png"
    ex.main(["--quick", "--out", str(out)])
    assert out.stat().st_size > 1000
    assert "fp32 pairwise" in capsys.readouterr().out
