"""fpsim.mx against torchao's own block quantization (``to_mx`` for MXFP8 / MXFP6 / MXFP4 under
each ScaleCalculationMode, ``nvfp4_quantize`` with and without a per-tensor scale, and
``NVFP4Tensor.dequantize``), recorded on the CPU by tools/record_mx_reference.py into
tests/data/mx: scale and element codes compared bit for bit, without torch.

Two documented differences are checked to be the only ones:

- a block whose scale is NaN (E8M0 code 255, or an e4m3 NaN scale) decodes to NaN whatever its
  elements hold (OCP MX v1.0 section 5.3.1), so those elements are not compared (torch's cast
  of NaN to fp6 / fp4 gives arbitrary codes there);
- a nonzero block whose E8M0 scale is 2**-127 (code 0; amax below 2**(emax_elem - 126)):
  torchao divides its elements by 2**-126 (floor / ceil / even: it clamps the float32 scale to
  the smallest normal to avoid a Triton subnormal issue) or by 1 (rceil) while storing 2**-127,
  so its elements decode to 2x (or 2**-127 times) the value; fpsim divides by the scale it
  stores, as the spec does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fpsim.mx as mx

DATA = np.load(Path(__file__).resolve().parent / "data" / "mx" / "torchao_reference.npz")
META = json.loads(str(DATA["meta"]))
MX_KEYS = sorted(k for k in DATA.files if k.startswith("mx/") and k.endswith("/scales"))
NV_KEYS = sorted(k for k in DATA.files if k.startswith("nv/") and k.endswith("/scales"))


def test_provenance_and_coverage():
    assert META["torchao"] and META["torch"] and "BSD" in META["licence"]
    names = {k.split("/")[2] for k in MX_KEYS}
    modes = {k.split("/")[3] for k in MX_KEYS}
    cases = {k.split("/")[1] for k in MX_KEYS}
    assert names == {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4"}
    assert modes == {"floor", "ceil", "even", "rceil"}
    assert {"gauss", "pow2", "subnormal", "tiny", "huge", "special"} <= cases
    assert all(f"boundary_{n}" in cases for n in names)
    assert {k.split("/")[2] for k in NV_KEYS} == {"none", "tensor"}


@pytest.mark.parametrize("key", MX_KEYS)
def test_mx_matches_torchao(key):
    _, case, name, mode, _ = key.split("/")
    x = DATA[f"mx/{case}/x"]
    q = mx.quantize(x, name, scale_mode=mode)
    s_ref = DATA[key]
    e_ref = DATA[f"mx/{case}/{name}/{mode}/elements"]
    s = q.scales.view(np.uint8)
    np.testing.assert_array_equal(s, s_ref)
    e = q.elements.view(np.uint8)
    bs = META["block"]
    blk_nan = np.repeat(s == 255, bs, axis=-1)
    amax = np.repeat(np.abs(x.reshape(x.shape[0], -1, bs)).max(-1), bs, axis=-1)
    blk_tiny = np.repeat(s == 0, bs, axis=-1) & (amax > 0)
    same = e == e_ref
    assert same[~blk_nan & ~blk_tiny].all(), np.argwhere(~same & ~blk_nan & ~blk_tiny)[:5]
    if case != "tiny":
        assert not blk_tiny.any()
    elif mode != "rceil":
        # torchao's P is x / 2**-126 there: the same element codes as fpsim on x / 2 wherever
        # x / 2 is exact in float32 (an even subnormal pattern)
        even = (x.view(np.uint32) & 1) == 0
        half = mx.quantize(x / np.float32(2), name, scale_mode=mode).elements.view(np.uint8)
        sel = blk_tiny & even & (np.abs(x) > 0)
        assert sel.any() and (half[sel] == e_ref[sel]).all()


@pytest.mark.parametrize("key", NV_KEYS)
def test_nvfp4_matches_torchao(key):
    _, case, tag, _ = key.split("/")
    x = DATA[f"nv/{case}/x"]
    pts = None if tag == "none" else float(DATA[f"nv/{case}/{tag}/per_tensor_scale"])
    q = mx.quantize(x, "nvfp4", per_tensor_scale=pts)
    s = q.scales.view(np.uint8)
    np.testing.assert_array_equal(s, DATA[key])
    e = q.elements.view(np.uint8)
    e_ref = DATA[f"nv/{case}/{tag}/elements"]
    blk_nan = np.repeat(np.isnan(q.scales.astype(np.float32)), META["nv_block"], axis=-1)
    assert (e == e_ref)[~blk_nan].all()
    got = q.dequantize()
    ref = DATA[f"nv/{case}/{tag}/dequantized"]
    assert ((got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref))).all()
