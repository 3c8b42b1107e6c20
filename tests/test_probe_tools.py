"""tools/record_tensorcore.py --fingerprint without a GPU: the plumbing from fingerprint's
``A @ B + C`` to bit-pattern cases and back, with a stand-in for the GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import fpsim.tensorcore as tc
from fpsim.probe import fingerprint

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def record():
    spec = importlib.util.spec_from_file_location("record_tensorcore_fp",
                                                  ROOT / "tools" / "record_tensorcore.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_matmul_fn_is_a_matmul(record):
    """One case per element of D: the same D as the model's matmul, K padded to whole calls."""
    rng = np.random.default_rng(1)
    A = tc.convert_input(rng.normal(size=(5, 21)), "fp16")
    B = tc.convert_input(rng.normal(size=(21, 3)), "fp16")
    C = np.asarray(rng.normal(size=(5, 3)), dtype=np.float32).astype(np.float64)

    def runner(ab, bb, cb, fin, fout):
        assert ab.shape == (15, 32)  # K = 21 padded to two wmma calls of 16
        return record.model_patterns(ab, bb, cb, fin, fout, "A100")
    got = record.matmul_fn("fp16", "fp32", runner)(A, B, C)
    assert np.array_equal(got, tc.matmul(A, B, C, gpu="A100"))


def test_fingerprint_through_the_plumbing(record):
    """A stand-in GPU (a custom unit behind the bit-pattern runner) is read back."""
    unit = tc.BlockFMA(8, 3, "nearest_even", -130)

    def runner(ab, bb, cb, fin, fout):
        return record.model_patterns(ab, bb, cb, fin, fout, unit)
    assert fingerprint(record.matmul_fn("bf16", "fp32", runner), "bf16") == unit


def test_unsupported_pattern_is_an_error(record):
    def runner(ab, bb, cb, fin, fout):
        return np.full(len(cb), 0xFFFFFFFF, dtype=np.uint64)
    with pytest.raises(RuntimeError, match="does not run"):
        record.matmul_fn("fp8_e4m3", "fp32", runner)(np.ones((1, 2)), np.ones((2, 1)),
                                                     np.zeros((1, 1)))


def test_dry_run_cli(record, tmp_path, capsys):
    assert record.main(["--fingerprint", "--dry-run", "--model", "V100", "--pairs",
                        "fp16:fp16,bf16:fp32", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "V100_fingerprint.txt").read_text()
    assert "V100 fp16->fp16: BlockFMA(block_size=4, extra_bits=0, " \
           "output_rounding='nearest_even', min_exponent=-19)" in text
    assert "bf16" not in text  # V100 has no bf16 mode: skipped, said on stderr
    assert "skip bf16->fp32" in capsys.readouterr().err
