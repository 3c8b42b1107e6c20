"""fpsim's arithmetic against Berkeley TestFloat 3e vectors (results and flags from SoftFloat 3e):
binary16 and binary32 add, sub, mul, div, sqrt and mulAdd (fma), all six rounding modes.

Every vector is run twice: through the float64 fast path the formats normally take, and through
the general path (significands and exponents split by frexp, rounding on a shifted format) that
float64-wide formats take, so that both are checked bit for bit. NaN results compare as NaN
(SoftFloat returns its default NaN); everything else bit for bit, signed zeros included, and
the five exception flags exactly (tininess after rounding, as SoftFloat's default).
"""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim import arithmetic
from tests.testfloat import load

MODES = ["rnear_even", "rnear_maxMag", "rminMag", "rmin", "rmax", "rodd"]
FORMATS = {"f16": fpsim.FP16, "f32": fpsim.FP32}
OPS = {  # TestFloat function -> (fpsim function, number of operands)
    "add": (arithmetic.add, 2),
    "sub": (arithmetic.sub, 2),
    "mul": (arithmetic.mul, 2),
    "div": (arithmetic.div, 2),
    "sqrt": (arithmetic.sqrt, 1),
    "mulAdd": (arithmetic.fma, 3),
}

def test_loader_reads_known_lines():
    a, b, r, f = load("f16_add__rnear_even")
    assert len(a) == 7744
    # first line of the file: "87FF E850 E850 01"
    assert (int(a[0]), int(b[0]), int(r[0]), int(f[0])) == (0x87FF, 0xE850, 0xE850, 0x01)


@pytest.fixture(params=[False, True], ids=["fast", "general"])
def path(request, monkeypatch):
    monkeypatch.setattr(arithmetic, "_FORCE_GENERAL", request.param)
    return request.param


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fname", list(OPS))
@pytest.mark.parametrize("fkey", list(FORMATS))
def test_testfloat_arithmetic(fkey, fname, mode, path):
    fmt = FORMATS[fkey]
    func, nargs = OPS[fname]
    cols = load(f"{fkey}_{fname}__{mode}")
    assert len(cols) == nargs + 2
    operands = [fpsim.from_bits(c, fmt) for c in cols[:nargs]]
    want_bits, want_flags = cols[nargs], cols[nargs + 1].astype(np.uint8)
    got, got_flags = func(*operands, fmt, mode, flags=True)
    want = fpsim.from_bits(want_bits, fmt)
    want_nan = np.isnan(want)
    got_bits = fpsim.to_bits(got, fmt).astype(np.uint64)
    bad = np.flatnonzero(np.where(want_nan, ~np.isnan(got), got_bits != want_bits)
                         | (got_flags != want_flags))
    if bad.size:
        i = bad[0]
        ops = " ".join(f"{int(c[i]):0{fmt.bits // 4}X}" for c in cols[:nargs])
        pytest.fail(
            f"{bad.size} of {want.size} cases differ; first: {fname}({ops}) = "
            f"{int(got_bits[i]):X} flags {int(got_flags[i]):02X}, TestFloat "
            f"{int(want_bits[i]):X} flags {int(want_flags[i]):02X}"
        )
