"""Conversions between binary formats against Berkeley TestFloat 3e vectors (results from
Berkeley SoftFloat 3e): result bits and IEEE flags, every case, all six rounding modes.

The files (tests/data/testfloat/<in>_to_<out>__<mode>.txt.gz, copied from TestFloat's
testfloat_gen, see the README and LICENSE there) hold one case a line: input pattern, result
pattern, flags, in hexadecimal. Tininess is detected after rounding (SoftFloat's default).
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest

import fpsim
from fpsim.flags import Flags
from tests.testfloat import DATA
from tests.testfloat import load as load_vectors

FORMATS = {"f16": fpsim.FP16, "bf16": fpsim.BF16, "f32": fpsim.FP32, "f64": fpsim.FP64}
# TestFloat's rounding names -> fpsim's modes (each is also an accepted alias)
MODES = {
    "rnear_even": fpsim.Rounding.NEAREST_EVEN,
    "rnear_maxMag": fpsim.Rounding.NEAREST_AWAY,
    "rminMag": fpsim.Rounding.TOWARD_ZERO,
    "rmin": fpsim.Rounding.DOWN,
    "rmax": fpsim.Rounding.UP,
    "rodd": fpsim.Rounding.ODD,
}
CONVERSIONS = ["f32_to_f16", "f64_to_f16", "f64_to_f32", "f32_to_bf16", "f16_to_f32",
               "bf16_to_f32"]
CASES = [(conv, mode) for conv in CONVERSIONS for mode in MODES]

def test_every_conversion_file_is_present():
    found = {p.name.split(".")[0] for p in DATA.glob("*_to_*.txt.gz")
             if p.name.split("__")[0] in CONVERSIONS}
    assert found == {f"{c}__{m}" for c, m in CASES}


def test_rounding_names_are_fpsim_aliases():
    for name, mode in MODES.items():
        assert fpsim.modes.as_rounding(name) is mode


@pytest.mark.parametrize("conv, mode", CASES, ids=[f"{c}-{m}" for c, m in CASES])
def test_testfloat_conversion(conv, mode):
    src_name, dst_name = conv.split("_to_")
    src, dst = FORMATS[src_name], FORMATS[dst_name]
    operand, result, want_flags = load_vectors(DATA / f"{conv}__{mode}.txt.gz")
    assert operand.size > 2000
    # from_bits keeps signalling NaNs signalling (a hardware widening would quiet them)
    x = fpsim.from_bits(operand, src)
    got, flags = fpsim.round(x, dst, MODES[mode], flags=True)
    want = fpsim.from_bits(result, dst)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg="NaN results differ")
    bits = fpsim.to_bits(x, dst, MODES[mode])
    bad = np.nonzero(bits[~nan] != result[~nan])[0]
    assert bad.size == 0, (
        f"{bad.size} results differ, first: input {int(operand[~nan][bad[0]]):#x} gave "
        f"{int(bits[~nan][bad[0]]):#x}, TestFloat {int(result[~nan][bad[0]]):#x}")
    bad = np.nonzero(flags != want_flags)[0]
    assert bad.size == 0, (
        f"{bad.size} flags differ, first: input {int(operand[bad[0]]):#x} raised "
        f"{Flags(int(flags[bad[0]]))!r}, TestFloat {Flags(int(want_flags[bad[0]]))!r}")


@pytest.mark.parametrize("conv", ["f32_to_f16", "f32_to_bf16"])
def test_testfloat_inputs_as_float32_arrays(conv):
    """The same cases given as a float32 array (the widening inside fpsim must keep
    signalling NaNs signalling too)."""
    src_name, dst_name = conv.split("_to_")
    operand, result, want_flags = load_vectors(DATA / f"{conv}__rnear_even.txt.gz")
    x32 = operand.astype(np.uint32).view(np.float32)
    got, flags = fpsim.round(x32, FORMATS[dst_name], flags=True)
    want = fpsim.from_bits(result, FORMATS[dst_name])
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    np.testing.assert_array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
    np.testing.assert_array_equal(flags, want_flags)


def test_parser_reads_known_lines(tmp_path):
    p = tmp_path / "x.txt.gz"
    p.write_bytes(gzip.compress(b"8683F7FF 8000 03\n00000000 0000 00\nC07F3FFF C3FA 01\n"))
    a, b, c = load_vectors(p)
    assert a.tolist() == [0x8683F7FF, 0, 0xC07F3FFF]
    assert b.tolist() == [0x8000, 0, 0xC3FA]
    assert c.tolist() == [3, 0, 1]
