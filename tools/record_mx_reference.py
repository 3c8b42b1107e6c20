"""Record torchao's block-scaled quantization (MX v1.0 ``to_mx`` and ``nvfp4_quantize``, CPU)
into tests/data/mx/torchao_reference.npz: the independent reference of tests/test_mx_torchao.py.
Needs torch and torchao (not dependencies of fpsim):

    pip install torch torchao && python tools/record_mx_reference.py

For each element dtype (fp8 e4m3 / e5m2, fp6 e2m3 / e3m2, fp4 e2m1) and each of torchao's
ScaleCalculationMode (floor, ceil, even, rceil) the inputs go through ``to_mx`` with block size
32; NVFP4 inputs through ``nvfp4_quantize`` (block 16) without and with a per-tensor scale, and
``NVFP4Tensor.dequantize``. Stored: the float32 inputs, the scale codes (uint8), the element
codes (uint8: fp8 patterns, fp6 codes in the low 6 bits, fp4 codes unpacked from torchao's
``pack_uint4`` layout, first element in the low nibble) and, for NVFP4, the dequantized values.

The inputs (float32, rows of whole blocks) hold: Gaussian rows with outliers, zeros and
all-zero blocks, powers of two, blocks whose small elements land in the element format's
subnormals, every rounding boundary of every element format (each midpoint between neighbouring
element values and the float32 values either side of it, in a block whose amax fixes the scale),
tiny blocks (float32 subnormal amax), huge blocks (amax near float32's max), and NaN / inf.

torchao is BSD-3-Clause licensed (Copyright (c) Meta Platforms, Inc. and affiliates); only its
outputs on the inputs above are stored, with the versions, in the npz's ``meta`` entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "mx" / "torchao_reference.npz"
BLOCK = 32
NV_BLOCK = 16
# element format: (name in fpsim.mx, values of the positive element grid computed from bits)
ELEMENTS = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4")
MODES = ("floor", "ceil", "even", "rceil")


def element_grid(ebits: int, mbits: int, fn_nan: bool, ieee: bool) -> np.ndarray:
    """All finite non-negative values of a small float format, from its bit fields."""
    bias = (1 << (ebits - 1)) - 1
    vals = []
    for e in range(1 << ebits):
        for m in range(1 << mbits):
            if ieee and e == (1 << ebits) - 1:
                continue  # inf / NaN
            if fn_nan and e == (1 << ebits) - 1 and m == (1 << mbits) - 1:
                continue  # the e4m3fn NaN
            if e == 0:
                vals.append(m * 2.0 ** (1 - bias - mbits))
            else:
                vals.append((1 + m / (1 << mbits)) * 2.0 ** (e - bias))
    return np.array(sorted(vals))


GRIDS = {
    "mxfp8_e4m3": (element_grid(4, 3, True, False), 8),
    "mxfp8_e5m2": (element_grid(5, 2, False, True), 15),
    "mxfp6_e2m3": (element_grid(2, 3, False, False), 2),
    "mxfp6_e3m2": (element_grid(3, 2, False, False), 4),
    "mxfp4": (element_grid(2, 1, False, False), 2),
}


def rows_to_blocks(vals: np.ndarray, head: float, block: int) -> np.ndarray:
    """Pack values into blocks of ``block`` whose first element is ``head`` (fixing amax)."""
    per = block - 1
    n = -(-len(vals) // per)
    out = np.zeros((n, block), np.float32)
    out[:, 0] = head
    flat = np.zeros(n * per, np.float32)
    flat[: len(vals)] = vals
    out[:, 1:] = flat.reshape(n, per)
    return out.reshape(-1)


def boundary_values(name: str, block: int) -> np.ndarray:
    """Every midpoint of the element grid and its float32 neighbours, both signs, in blocks
    whose head element is the element max times 2**k (so the floor scale is 2**k)."""
    grid, emax = GRIDS[name]
    mids = (grid[1:] + grid[:-1]) / 2
    mids = np.concatenate([mids, [grid[-1] * 1.0625, grid[-1] * 1.5]])  # beyond the max
    m32 = mids.astype(np.float32)
    cand = np.concatenate([m32, np.nextafter(m32, np.float32(np.inf)),
                           np.nextafter(m32, np.float32(0)), grid.astype(np.float32)])
    cand = np.concatenate([cand, -cand])
    out = []
    for k in (-20, 0, 7):
        out.append(rows_to_blocks(cand * np.float32(2.0**k), np.float32(grid[-1] * 2.0**k),
                                  block))
    return np.concatenate(out)


def inputs(block: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Named float32 input matrices (each row a whole number of blocks)."""
    width = 4 * block
    cases: dict[str, np.ndarray] = {}
    g = rng.standard_normal((64, width)).astype(np.float32)
    g[rng.random(g.shape) < 0.01] *= 1000  # outliers
    g[rng.random(g.shape) < 0.05] = 0  # zeros
    g[3, :block] = 0  # an all-zero block
    g[5, block:2 * block] = -0.0
    cases["gauss"] = g
    p = np.ldexp(1.0, rng.integers(-30, 30, (16, width))).astype(np.float32)
    p *= np.where(rng.random(p.shape) < 0.5, -1, 1).astype(np.float32)
    cases["pow2"] = p
    sub = (rng.standard_normal((16, width)) * 2.0 ** rng.integers(-14, -2, (16, width)))
    sub[:, ::block] = 448.0  # one big element per block: the rest land in subnormals
    cases["subnormal"] = sub.astype(np.float32)
    wide = rng.standard_normal((16, width)) * np.ldexp(1.0, rng.integers(-40, 40, (16, width)))
    cases["wide"] = wide.astype(np.float32)
    tiny = (rng.standard_normal((4, width)) * 1e-39).astype(np.float32)  # fp32 subnormals
    tiny[0] *= np.float32(1e6)  # amax about 1e-33: a small but normal scale
    cases["tiny"] = tiny
    huge = (rng.uniform(-1, 1, (4, width)) * 3.3e38).astype(np.float32)
    cases["huge"] = huge
    special = rng.standard_normal((6, width)).astype(np.float32)
    special[0, 3] = np.nan
    special[1, 5] = np.inf
    special[2, 7] = -np.inf
    special[3, block + 1] = np.nan
    special[3, block + 2] = np.inf
    special[4, :] = np.inf
    special[5, 2 * block:3 * block] = np.nan
    cases["special"] = special
    for name in GRIDS:
        b = boundary_values(name, block)
        pad = (-b.size) % width
        cases[f"boundary_{name}"] = np.concatenate([b, np.zeros(pad, np.float32)]).reshape(
            -1, width)
    return cases


def main() -> int:
    import torch
    import torchao
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import (
        NVFP4Tensor,
        nvfp4_quantize,
        per_tensor_amax_to_scale,
    )

    dtypes = {"mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2,
              "mxfp6_e2m3": DTYPE_FP6_E2M3, "mxfp6_e3m2": DTYPE_FP6_E3M2,
              "mxfp4": torch.float4_e2m1fn_x2}
    modes = {m: ScaleCalculationMode(m) for m in MODES}
    rng = np.random.default_rng(17)
    arrays: dict[str, np.ndarray] = {}
    mx_inputs = inputs(BLOCK, rng)
    nv_inputs = inputs(NV_BLOCK, rng)

    def codes(t: torch.Tensor, name: str) -> np.ndarray:
        u = t.contiguous().view(torch.uint8)
        if name == "mxfp4" or name == "nvfp4":
            u = unpack_uint4(u)  # low nibble first
        return u.numpy().copy()

    for case, x in mx_inputs.items():
        arrays[f"mx/{case}/x"] = x
        for name, dt in dtypes.items():
            for mode, sm in modes.items():
                s, e = to_mx(torch.from_numpy(x.copy()), dt, BLOCK, sm)
                arrays[f"mx/{case}/{name}/{mode}/scales"] = s.view(torch.uint8).numpy().copy()
                arrays[f"mx/{case}/{name}/{mode}/elements"] = codes(e, name)
    for case, x in nv_inputs.items():
        arrays[f"nv/{case}/x"] = x
        t = torch.from_numpy(x.copy())
        for tag, pts in (("none", None), ("tensor", "amax")):
            scale = None
            if pts is not None:
                scale = per_tensor_amax_to_scale(torch.nan_to_num(t, posinf=0.0, neginf=0.0)
                                                 .abs().max())
                if float(scale) == 0.0:
                    continue
                arrays[f"nv/{case}/{tag}/per_tensor_scale"] = np.float32(scale.item())
            s, e = nvfp4_quantize(t, NV_BLOCK, scale)
            arrays[f"nv/{case}/{tag}/scales"] = s.view(torch.uint8).numpy().copy()
            arrays[f"nv/{case}/{tag}/elements"] = codes(e, "nvfp4")
            q = NVFP4Tensor.to_nvfp4(t, block_size=NV_BLOCK, per_tensor_scale=scale)
            arrays[f"nv/{case}/{tag}/dequantized"] = q.dequantize(torch.float32).numpy().copy()
    meta = {
        "torch": torch.__version__,
        "torchao": torchao.__version__,
        "numpy": np.__version__,
        "licence": "torchao is BSD-3-Clause, Copyright (c) Meta Platforms, Inc. and "
                   "affiliates; only its outputs on the generated inputs are stored here.",
        "recorded_by": "tools/record_mx_reference.py",
        "block": BLOCK,
        "nv_block": NV_BLOCK,
    }
    arrays["meta"] = np.array(json.dumps(meta))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(arrays)} arrays)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
