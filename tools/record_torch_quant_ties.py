"""Record PyTorch's integer quantization at and around every rounding tie into
tests/data/torch/quant_ties.npz, the independent reference of tests/test_quant_fake.py's
tie tests. Needs torch (not a dependency of fpsim):

    pip install torch && python tools/record_torch_quant_ties.py

For each case (a scale, a zero point and a dtype or integer range) the inputs are
``float32(t * scale)`` and its four nearest float32 neighbours for every half-integer ``t``
(``k + 0.5``, both signs) across the integer range and a little beyond it (a window around
the interesting points for the 32-bit ranges), the integers ``k * scale`` themselves, and
0, -0, +-inf, +-1e30 and the smallest subnormal. Scales include non-powers of two (0.1,
1/3, 0.3, 7, the FBGEMM example 0.00214854861, the notebook's 0.0117647061124444) and zero
points at both ends of each range and beyond 2**24 (qint32). Recorded:

- ``torch.quantize_per_tensor`` (quint8, qint8, qint32): ``int_repr()`` and ``dequantize()``;
- ``torch.quantize_per_channel`` (axis 0 of a (C, N) tensor, and axes 1 and 2 of a 3-d one):
  ``int_repr()`` and ``dequantize()``;
- ``torch.fake_quantize_per_tensor_affine`` and ``torch.fake_quantize_per_channel_affine``
  on float32 input: the output and the gradient of its sum (the straight-through mask);
- LSQ's ``torch._fake_quantize_learnable_per_tensor_affine`` (grad_factor 1), one element
  per call: the input's gradient mask and the scale's gradient of each element;
- ``torch.fake_quantize_per_tensor_affine`` on float64, float16 and bfloat16 inputs;
- ``MinMaxObserver`` (affine / symmetric, quint8 / qint8, reduce_range, custom ranges) and
  ``PerChannelMinMaxObserver`` qparams for ranges whose ``min / scale`` is a half-integer.

NaN is recorded for fake quantization only (fpsim refuses to quantize NaN to an integer).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "quant_ties.npz"

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
RANGES = {"quint8": (0, 255), "qint8": (-128, 127), "qint32": (I32_MIN, I32_MAX)}
NOTEBOOK_SCALE = 0.0117647061124444  # MinMaxObserver(quint8) on [-0.7, 0.2, 2.3]

# (dtype, scale, zero point)
PER_TENSOR = [
    ("quint8", NOTEBOOK_SCALE, 59), ("quint8", 0.1, 0), ("quint8", 0.1, 255),
    ("quint8", 1 / 3, 128), ("quint8", 0.00214854861, 0), ("quint8", 0.3, 17),
    ("quint8", 0.5, 3), ("quint8", 0.25, 200), ("quint8", 2.0**-7, 128), ("quint8", 7.0, 100),
    ("quint8", 1 / 255, 64), ("quint8", 1e-3, 1),
    ("qint8", 0.1, 0), ("qint8", 0.1, -128), ("qint8", 0.1, 127), ("qint8", 1 / 3, -5),
    ("qint8", 0.3, 3), ("qint8", 0.5, -1), ("qint8", NOTEBOOK_SCALE, -69),
    ("qint8", 2.0**-7, 0), ("qint8", 7.0, 50), ("qint8", 0.00214854861, 10),
    ("qint32", 0.1, 0), ("qint32", 0.5, 12345), ("qint32", 1 / 3, 2**24 + 1),
    ("qint32", 0.3, -(2**24) - 3), ("qint32", 1.0, 2**30 + 5), ("qint32", 0.25, I32_MIN + 7),
    ("qint32", 1e-3, I32_MAX), ("qint32", 7.0, -1000),
]

# fake quantization: (quant_min, quant_max, scale, zero point)
FAKE = [(0, 255, s, z) for d, s, z in PER_TENSOR if d == "quint8"]
FAKE += [(-128, 127, s, z) for d, s, z in PER_TENSOR if d == "qint8"]
FAKE += [(0, 15, 0.1, 3), (-8, 7, 1 / 3, 0), (-8, 7, 0.3, -8), (0, 7, 0.37, 7),
         (-64, 63, NOTEBOOK_SCALE, 5), (I32_MIN, I32_MAX, 0.1, 12345),
         (I32_MIN, I32_MAX, 0.3, -(2**24) - 3)]


def tie_inputs(scale: float, z: int, qmin: int, qmax: int) -> np.ndarray:
    """float32 inputs whose float32 x * (1 / scale) lies on or next to a half-integer."""
    if qmax - qmin <= 1024:
        ks = np.arange(qmin - z - 4, qmax - z + 4, dtype=np.float64)
    else:  # 32-bit ranges: windows around 0, +-2**24, the zero point's image and the ends
        centres = [0, 2**24, -(2**24), -z, qmin - z, qmax - z, 2**24 - z, -(2**24) - z]
        ks = np.unique(np.concatenate([np.arange(c - 12, c + 12) for c in centres]))
        ks = ks.astype(np.float64)
    s32 = np.float64(np.float32(scale))
    t = np.concatenate([ks + 0.5, ks])
    with np.errstate(over="ignore"):
        x0 = (t * s32).astype(np.float32)
    x0 = x0[np.isfinite(x0)]
    near = [x0]
    for steps in (1, 2):
        up, down = x0.copy(), x0.copy()
        for _ in range(steps):
            up = np.nextafter(up, np.float32(np.inf))
            down = np.nextafter(down, np.float32(-np.inf))
        near += [up, down]
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e30, -1e30, 1e-45, -1e-45], np.float32)
    x = np.concatenate(near + [specials])
    return x[np.isfinite(x) | np.isinf(x)].astype(np.float32)


def main() -> int:
    import torch

    warnings.filterwarnings("ignore", message=".*deprecated.*")
    qtypes = {"quint8": torch.quint8, "qint8": torch.qint8, "qint32": torch.qint32}
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"torch": torch.__version__, "git": torch.version.git_version,
                  "engine": torch.backends.quantized.engine,
                  "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "per_tensor": [], "per_channel": [], "fake": [], "fake_per_channel": []}

    for i, (dt, scale, z) in enumerate(PER_TENSOR):
        qmin, qmax = RANGES[dt]
        x = tie_inputs(scale, z, qmin, qmax)
        q = torch.quantize_per_tensor(torch.from_numpy(x), scale, z, qtypes[dt])
        arrays[f"pt{i}/x"] = x
        arrays[f"pt{i}/q"] = q.int_repr().numpy().astype(np.int64)
        arrays[f"pt{i}/dq"] = q.dequantize().numpy()
        meta["per_tensor"].append({"dtype": dt, "scale": scale, "zero_point": z})

    rng = np.random.default_rng(15)
    per_channel = [
        ("quint8", [(NOTEBOOK_SCALE, 59), (0.1, 0), (1 / 3, 255), (0.3, 17), (7.0, 128)], 0),
        ("qint8", [(0.1, -128), (1 / 3, -5), (0.3, 127), (0.00214854861, 0)], 0),
        ("qint32", [(0.1, 0), (1 / 3, 2**24 + 1), (0.25, I32_MIN + 7)], 0),
        ("quint8", [(0.1, 7), (0.3, 200), (1 / 3, 64)], 1),
        ("qint8", [(0.5, -1), (0.1, 3)], 2),
    ]
    for i, (dt, chans, axis) in enumerate(per_channel):
        qmin, qmax = RANGES[dt]
        n = 600
        cols = []
        for scale, z in chans:
            cand = tie_inputs(scale, z, qmin, qmax)
            cols.append(np.concatenate([cand[-8:], rng.choice(cand[:-8], n - 8)]))
        x2 = np.stack(cols)  # (C, n)
        if axis == 0:
            x = x2
        elif axis == 1:
            x = np.moveaxis(x2.reshape(len(chans), 2, n // 2), 0, 1)  # (2, C, n/2)
        else:
            x = np.moveaxis(x2.reshape(len(chans), 3, n // 3), 0, 2)  # (3, n/3, C)
        x = np.ascontiguousarray(x, dtype=np.float32)
        scales = np.array([s for s, _ in chans], np.float64)
        zps = np.array([z for _, z in chans], np.int64)
        q = torch.quantize_per_channel(torch.from_numpy(x), torch.from_numpy(scales),
                                       torch.from_numpy(zps), axis, qtypes[dt])
        arrays[f"pc{i}/x"] = x
        arrays[f"pc{i}/scales"] = scales
        arrays[f"pc{i}/zero_points"] = zps
        arrays[f"pc{i}/q"] = q.int_repr().numpy().astype(np.int64)
        arrays[f"pc{i}/dq"] = q.dequantize().numpy()
        meta["per_channel"].append({"dtype": dt, "axis": axis})

    for i, (qmin, qmax, scale, z) in enumerate(FAKE):
        x = np.concatenate([tie_inputs(scale, z, qmin, qmax), np.float32([np.nan])])
        xt = torch.from_numpy(x.copy()).requires_grad_(True)
        y = torch.fake_quantize_per_tensor_affine(xt, scale, z, qmin, qmax)
        y.sum().backward()
        arrays[f"fq{i}/x"] = x
        arrays[f"fq{i}/out"] = y.detach().numpy()
        arrays[f"fq{i}/mask"] = xt.grad.numpy() != 0
        meta["fake"].append({"quant_min": qmin, "quant_max": qmax, "scale": scale,
                             "zero_point": z})

    fake_pc = [((0, 255), [(NOTEBOOK_SCALE, 59), (0.1, 0), (1 / 3, 255), (0.3, 17)]),
               ((-128, 127), [(0.1, -128), (1 / 3, -5), (0.00214854861, 0)]),
               ((-8, 7), [(0.3, 0), (1 / 3, -8), (0.1, 7)])]
    for i, ((qmin, qmax), chans) in enumerate(fake_pc):
        n = 600
        cols = [np.concatenate([tie_inputs(s, z, qmin, qmax)[-8:],
                                rng.choice(tie_inputs(s, z, qmin, qmax)[:-8], n - 8)])
                for s, z in chans]
        x = np.stack(cols).astype(np.float32)
        scales = np.array([s for s, _ in chans], np.float32)
        zps = np.array([z for _, z in chans], np.int32)
        xt = torch.from_numpy(x.copy()).requires_grad_(True)
        y = torch.fake_quantize_per_channel_affine(xt, torch.from_numpy(scales),
                                                   torch.from_numpy(zps), 0, qmin, qmax)
        y.sum().backward()
        arrays[f"fqc{i}/x"] = x
        arrays[f"fqc{i}/scales"] = scales
        arrays[f"fqc{i}/zero_points"] = zps
        arrays[f"fqc{i}/out"] = y.detach().numpy()
        arrays[f"fqc{i}/mask"] = xt.grad.numpy() != 0
        meta["fake_per_channel"].append({"quant_min": qmin, "quant_max": qmax})

    # LSQ (torch._fake_quantize_learnable_per_tensor_affine, grad_factor 1): one element per
    # call, so that the scale's gradient of each element is seen before summation
    meta["lsq"] = []
    lsq = [(0.1, 3, 0, 15), (1 / 3, 0, -8, 7), (0.3, 17, 0, 255), (NOTEBOOK_SCALE, 59, 0, 255),
           (0.5, -1, -128, 127)]
    for i, (scale, z, qmin, qmax) in enumerate(lsq):
        cand = tie_inputs(scale, z, qmin, qmax)
        x = np.concatenate([cand[-8:], rng.choice(cand[:-8], 392)]).astype(np.float32)
        dx, ds = np.zeros(x.size, bool), np.zeros(x.size, np.float32)
        for j, v in enumerate(x):
            xt = torch.tensor([v], requires_grad=True)
            st = torch.tensor([scale], dtype=torch.float32, requires_grad=True)
            zt = torch.tensor([float(z)], requires_grad=True)
            torch._fake_quantize_learnable_per_tensor_affine(xt, st, zt, qmin, qmax,
                                                             1.0).sum().backward()
            dx[j], ds[j] = bool(xt.grad[0] != 0), float(st.grad[0])
        arrays[f"lsq{i}/x"], arrays[f"lsq{i}/dx_mask"], arrays[f"lsq{i}/dscale"] = x, dx, ds
        meta["lsq"].append({"quant_min": qmin, "quant_max": qmax, "scale": scale,
                            "zero_point": z})

    # fake quantization of float64, float16 and bfloat16 inputs (the double kernel multiplies
    # by the float reciprocal in double; half inputs compute in float and round back)
    meta["fake_dtypes"] = []
    for i, (dt, scale, z, qmin, qmax) in enumerate([
            ("float64", 0.1, 3, 0, 255), ("float64", 1 / 3, -5, -128, 127),
            ("float64", NOTEBOOK_SCALE, 59, 0, 255), ("float16", 0.1, 3, 0, 255),
            ("float16", 1 / 3, 0, -8, 7), ("bfloat16", 0.3, 17, 0, 255),
            ("bfloat16", 0.5, -1, -128, 127)]):
        x32 = tie_inputs(scale, z, qmin, qmax)
        if dt == "float64":
            s64 = np.float64(np.float32(scale))
            t = np.arange(qmin - z - 4, qmax - z + 4) + 0.5
            x0 = t * s64
            x = np.concatenate([x0, np.nextafter(x0, np.inf), np.nextafter(x0, -np.inf),
                                x32.astype(np.float64)])
            xt = torch.from_numpy(x.copy())
        else:
            tdt = torch.float16 if dt == "float16" else torch.bfloat16
            with np.errstate(over="ignore"):
                xt = torch.from_numpy(x32.copy()).to(tdt)
            x = xt.float().numpy()  # the values as stored (exact in float32)
        xt.requires_grad_(True)
        y = torch.fake_quantize_per_tensor_affine(xt, scale, z, qmin, qmax)
        y.float().sum().backward()
        arrays[f"fqd{i}/x"] = x
        arrays[f"fqd{i}/out"] = y.detach().to(torch.float64).numpy()
        arrays[f"fqd{i}/mask"] = xt.grad.to(torch.float64).numpy() != 0
        meta["fake_dtypes"].append({"dtype": dt, "quant_min": qmin, "quant_max": qmax,
                                    "scale": scale, "zero_point": z})

    # observers at the zero point's ties: ranges [min, max] with min / scale = -(k + 1/2)
    # in exact arithmetic (float32 rounding moves some off the tie), per channel: one row per
    # range, so that each channel's qparams are one range's
    from torch.ao.quantization.observer import MinMaxObserver, PerChannelMinMaxObserver

    lo_hi = []
    for scale in (0.1, 1 / 3, 0.3, 2.0**-7, NOTEBOOK_SCALE, 7.0, 1e-3):
        for k in range(0, 255, 3):
            lo = -(k + 0.5) * scale
            lo_hi.append((lo, lo + 255 * scale))
            lo_hi.append((-(k + 0.5) * scale * 255 / 256, (255 - k - 0.5) * scale / 2))
    lo_hi = np.array(lo_hi, np.float32)
    arrays["obs/min_max"] = lo_hi
    meta["observers"] = []
    obs_cfgs = [("quint8", "per_tensor_affine", False, None, None),
                ("qint8", "per_tensor_affine", False, None, None),
                ("quint8", "per_tensor_affine", True, None, None),
                ("qint8", "per_tensor_symmetric", False, None, None),
                ("quint8", "per_tensor_symmetric", False, None, None),
                ("quint8", "per_tensor_affine", False, 0, 15),
                ("qint8", "per_tensor_affine", False, -8, 7)]
    for i, (dt, qs, rr, qmin, qmax) in enumerate(obs_cfgs):
        sc, zp = [], []
        for lo, hi in lo_hi:
            ob = MinMaxObserver(dtype=qtypes[dt], qscheme=getattr(torch, qs), reduce_range=rr,
                                quant_min=qmin, quant_max=qmax)
            ob(torch.tensor([lo, hi]))
            s_, z_ = ob.calculate_qparams()
            sc.append(float(s_)), zp.append(int(z_))
        arrays[f"obs{i}/scale"] = np.array(sc, np.float32)
        arrays[f"obs{i}/zero_point"] = np.array(zp, np.int64)
        meta["observers"].append({"dtype": dt, "qscheme": qs, "reduce_range": rr,
                                  "quant_min": qmin, "quant_max": qmax})
    ob = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.quint8,
                                  qscheme=torch.per_channel_affine)
    ob(torch.from_numpy(lo_hi.copy()))
    s_, z_ = ob.calculate_qparams()
    arrays["obs_pc/scale"] = s_.numpy().astype(np.float32)
    arrays["obs_pc/zero_point"] = z_.numpy().astype(np.int64)

    arrays["meta"] = np.array(json.dumps(meta))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    total = sum(a.size for k, a in arrays.items() if k.endswith("/x"))
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {total} inputs) with torch "
          f"{torch.__version__} ({meta['cpu_capability']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
