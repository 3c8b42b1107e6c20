"""Quantize, dequantize and fake-quantize, bit for bit as PyTorch's CPU kernels; LSQ gradients;
TensorRT's symmetric int8 scheme.

Fake quantization rounds *before* adding the zero point (PyTorch 2.13,
``aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp``,
``_fake_quantize_tensor_helper``), for a float32 tensor::

    inv_scale = 1.0f / scale                       # float32 division, scale cast to float32
    qval_f = zero_point + nearbyint(x * inv_scale)  # float32 product, round half to even
    qval = (int64) fmin(fmax(qval_f, qmin), qmax)
    out = (float)(qval - zero_point) * scale        # float32 product
    mask = qmin <= qval_f <= qmax                   # the straight-through-estimator mask

The per-channel kernel (``_fake_quant_per_channel_cachemask_cpu_helper``, integer zero points)
is the same except that it multiplies ``(qval - zero_point) * scale`` in double and compares
the int64 ``qval``: the two differ only when ``|qval - zero_point| > 2**24`` (qint32 ranges),
where the per-tensor kernel rounds twice.

It multiplies by the float32 reciprocal instead of dividing by the scale, which is not the
same: with ``scale = 0.00214854861`` and ``x = 0.273939937``, ``x * inv_scale`` is 127.5 in
float32 (rounds to 128) while ``x / scale`` is 127.49999 (127); the
round-half-to-even of ``x / s + z`` in textbook notation is only the ideal. fpsim computes in
float32 the same way, so results are PyTorch's to the bit. ``fmax`` ignores NaN, so a NaN
input fake-quantizes to ``(qmin - z) * s`` with mask False, as in PyTorch; ``+-inf`` clamp to
``qmax`` / ``qmin`` per tensor. The per-channel kernel casts ``qval_f`` to int64 before
clamping, which C++ leaves undefined beyond int64's range; x86-64 gives INT64_MIN there, so
``+inf``, NaN and every ``|qval_f| >= 2**63`` (``1e30`` with scale 0.1) become ``qmin``, as
PyTorch 2.13 on x86-64 does and fpsim models. A float64 input computes
``x * inv_scale`` in float64 and the output product in float32, as PyTorch's double kernel;
float16 / bfloat16 inputs compute in float32 and round the output back.

:func:`quantize` follows PyTorch 2.13's CPU kernels, which add the zero point *before*
rounding, unlike fake quantization (checked against ``torch.quantize_per_tensor`` /
``quantize_per_channel`` results recorded by ``tools/record_torch_quant_ties.py`` into
``tests/data/torch/quant_ties.npz``; ``inv = 1.0f / float(scale)``, ``rint`` half to even):

- per tensor, quint8 / qint8 (FBGEMM's ``Quantize<T, LEGACY=true>`` on an AVX2 + FMA CPU,
  ``_mm256_fmadd_ps``): ``q = clamp(rint(fma(x, inv, z)))``, ``x * inv + z`` rounded once to
  float32. ``quantize(2.3, 0.0117647061124444, 59, dtype="uint8")`` is 254:
  ``195.5 + 59 = 254.5`` rounds to even, where rounding first gives ``196 + 59 = 255``;
- per tensor, qint32 (FBGEMM's scalar ``Quantize``) and per channel, every dtype (ATen's
  ``quantize_val``): ``q = clamp(rint(float32(float32(x * inv) + float32(z))))``, two float32
  roundings before ``rint``. The two differ where ``x * inv`` rounds onto a half-integer;
  a CPU without AVX2 / FMA uses the second formula per tensor too.

:func:`dequantize` is ``float32(q - z) * float32(scale)`` per tensor (FBGEMM's
``Dequantize``: one rounding for 8-bit values, two beyond ``|q - z| = 2**24``), and
``float32(float64(float32(q) - float32(z)) * scale)`` per channel (ATen's per-channel kernel
multiplies by the double scale). ``q - z`` is exact here; PyTorch computes it in int32 and
wraps when it overflows (a qint32 value at one end with a zero point of the other sign).
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import as_int, as_stored_scale
from ..formats import IntFormat
from .qparams import as_qdtype, quant_range, real_array

__all__ = [
    "quantize",
    "dequantize",
    "fake_quantize",
    "fake_quantize_per_channel",
    "fake_quantize_ste_mask",
    "lsq_grad",
    "lsq_grad_scale",
    "lsq_init_step",
    "tensorrt_scale",
    "tensorrt_quantize",
    "tensorrt_fake_quantize",
]


# -- argument checking ------------------------------------------------------------------------

def _float_input(x) -> tuple[np.ndarray, type, np.dtype]:
    """(array, compute dtype, output dtype) as PyTorch's dispatch: float64 stays float64,
    every other real input computes in float32."""
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if kind == "c" or kind not in "fiubV":
        raise TypeError(f"expected real numbers, got dtype {arr.dtype}")
    if kind in "iub":
        arr = arr.astype(np.float32)  # like torch.tensor(ints).float()
    elif kind == "V":
        arr = arr.astype(np.float32)  # ml_dtypes bfloat16 / float8: c10 converts to float
        return arr, np.float32, np.asarray(x).dtype
    ct = np.float64 if arr.dtype == np.float64 else np.float32
    return arr, ct, arr.dtype


def _scale32(scale, name: str = "scale") -> np.ndarray:
    # the kernels take `float sc` and multiply by 1.0f / sc: both finite (fpsim.checks)
    return as_stored_scale(name, real_array(scale, name), np.float32)


def _check_range(quant_min, quant_max) -> tuple[int, int]:
    for name, v in (("quant_min", quant_min), ("quant_max", quant_max)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
    qmin, qmax = int(quant_min), int(quant_max)
    if qmin > qmax:
        raise ValueError(f"quant_min should be less than or equal to quant_max, got "
                         f"[{qmin}, {qmax}]")
    return qmin, qmax


def _zero_points(zero_point, qmin: int, qmax: int) -> np.ndarray:
    z = np.asarray(zero_point)
    if z.dtype.kind == "f":
        if not (np.isfinite(z).all() and (z == np.round(z)).all()):
            raise ValueError(f"zero_point must be an integer, got {zero_point!r}")
    elif z.dtype.kind not in "iu":
        raise TypeError(f"zero_point must be an integer, got {zero_point!r}")
    z = z.astype(np.int64)
    if (z < qmin).any() or (z > qmax).any():
        raise ValueError(f"zero_point must be between quant_min and quant_max "
                         f"[{qmin}, {qmax}], got {zero_point!r}")
    return z


def _scalar(a: np.ndarray, name: str) -> np.ndarray:
    """The one value of a per-tensor parameter, as a 0-d array."""
    if a.size != 1:
        raise ValueError(f"{name} must be one value per tensor without axis (got {a.size}); "
                         "pass axis for per-channel parameters")
    return a.reshape(())


def _int_zero_points(zero_point) -> np.ndarray:
    z = np.asarray(zero_point)
    if z.dtype.kind == "f":
        if not (np.isfinite(z).all() and (z == np.round(z)).all()):
            raise ValueError(f"zero_point must be an integer, got {zero_point!r}")
    elif z.dtype.kind not in "iu":
        raise TypeError(f"zero_point must be an integer, got {zero_point!r}")
    return z.astype(np.int64)


def _channel_shape(x: np.ndarray, axis: int, n: int, what: str) -> tuple[int, ...]:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for a {x.ndim}-d input")
    axis = int(axis) % x.ndim
    if n != x.shape[axis]:
        raise ValueError(f"{what} has {n} entries but the input has {x.shape[axis]} channels "
                         f"along axis {axis}")
    shape = [1] * x.ndim
    shape[axis] = n
    return tuple(shape)


def _per_channel_params(x, scales, zero_points, axis, qmin, qmax):
    s32 = _scale32(scales, "scales")
    z = _zero_points(zero_points, qmin, qmax)
    if s32.ndim != 1 or z.ndim != 1:
        raise ValueError("per-channel scales and zero_points must be 1-d")
    if s32.shape != z.shape:
        raise ValueError(f"scales and zero_points lengths differ: {s32.size} vs {z.size}")
    shape = _channel_shape(x, axis, s32.size, "scales")
    return s32.reshape(shape), z.reshape(shape)


# -- the kernel -------------------------------------------------------------------------------

def _fake_quant_core(arr, ct, s32, z, qmin, qmax, per_channel=False):
    """(output in float32/float64 before the final cast, mask)."""
    inv = (np.float32(1.0) / s32).astype(ct)  # float inv_scale = 1.0f / sc
    with np.errstate(over="ignore", invalid="ignore"):
        t = arr.astype(ct, copy=False) * inv  # float32 * float32 (float64 * float for double)
        qval_f = z.astype(ct) + np.rint(t)  # int64 + float is a float add in C++
        mask = (qval_f >= ct(qmin)) & (qval_f <= ct(qmax))
        if per_channel:
            # static_cast<int64_t> of NaN or of |v| >= 2**63 is x86-64's INT64_MIN, which
            # then clamps to qmin (PyTorch 2.13 on x86-64; undefined in C++)
            qval_f = np.where(np.abs(qval_f) < ct(2.0**63), qval_f, ct(qmin))
        if max(-qmin, qmax) <= 2**24 and np.abs(z).max(initial=0) <= 2**24:
            # every integer involved is exact in float32, so the double clamp, the int64
            # cast and the float conversion of (q - z) change nothing: stay in ct
            q = np.fmin(np.fmax(qval_f, ct(qmin)), ct(qmax))  # fmax ignores NaN: NaN -> qmin
            return (q - z.astype(ct)).astype(np.float32) * s32, mask
        # std::fmin / std::fmax run in double and ignore NaN: NaN -> qmin
        q = np.fmin(np.fmax(qval_f.astype(np.float64), float(qmin)), float(qmax))
        q = q.astype(np.int64)
    if per_channel:
        # the per-channel kernel: qval compared as int64, (q - z) * scale in double, one
        # rounding to float on return
        qv = qval_f.astype(np.float64)  # exact; NaN and +-inf compare False
        mask = (qv >= qmin) & (qv <= qmax)
        return ((q - z).astype(np.float64) * s32.astype(np.float64)).astype(np.float32), mask
    # the per-tensor kernel: (int64 -> float) * float, two roundings when |q - z| > 2**24
    return (q - z).astype(np.float32) * s32, mask


def fake_quantize(x, scale: float, zero_point: int, quant_min: int, quant_max: int) -> np.ndarray:
    """Quantize-dequantize ``x`` per tensor, bit for bit as
    ``torch.fake_quantize_per_tensor_affine`` on CPU (see the module docstring for the exact
    float32 formula). Returns an array of the input's float dtype (float32 for integer input).

    >>> fake_quantize(np.array([0.1, 0.25, 0.35, 2.0], np.float32), 0.1, 0, -128, 127)
    array([0.1, 0.2, 0.4, 2. ], dtype=float32)

    In float32, 0.25 * (1 / 0.1) is exactly 2.5 and rounds to even (2); 0.35 (0.349999994 in
    float32) times 10 rounds to 3.5 in float32, which rounds to even (4).
    """
    qmin, qmax = _check_range(quant_min, quant_max)
    arr, ct, out_dt = _float_input(x)
    s32 = _scale32(scale)
    if s32.size != 1:
        raise ValueError("fake_quantize takes one scale; use fake_quantize_per_channel")
    z = _zero_points(zero_point, qmin, qmax)
    if z.size != 1:
        raise ValueError("fake_quantize takes one zero_point; use fake_quantize_per_channel")
    out, _ = _fake_quant_core(arr, ct, s32.reshape(()), z.reshape(()), qmin, qmax)
    return out.astype(out_dt)


def fake_quantize_per_channel(x, scales, zero_points, axis: int, quant_min: int,
                              quant_max: int) -> np.ndarray:
    """Quantize-dequantize with one scale and zero point per channel along ``axis``, as
    ``torch.fake_quantize_per_channel_affine`` on CPU (integer zero points).

    >>> x = np.array([[0.3, 0.7], [0.3, 0.7]], np.float32)
    >>> fake_quantize_per_channel(x, [0.5, 0.25], [0, 0], 0, -128, 127)
    array([[0.5 , 0.5 ],
           [0.25, 0.75]], dtype=float32)
    """
    qmin, qmax = _check_range(quant_min, quant_max)
    arr, ct, out_dt = _float_input(x)
    s32, z = _per_channel_params(arr, scales, zero_points, axis, qmin, qmax)
    out, _ = _fake_quant_core(arr, ct, s32, z, qmin, qmax, per_channel=True)
    return out.astype(out_dt)


def fake_quantize_ste_mask(x, scale, zero_point, quant_min: int, quant_max: int,
                           axis: int | None = None) -> np.ndarray:
    """The straight-through-estimator mask of :func:`fake_quantize`: True where
    ``qmin <= zero_point + nearbyint(x * inv_scale) <= qmax`` (the gradient passes), False
    where the value was clamped (and for NaN). With ``axis``, per-channel scales / zero points.

    >>> fake_quantize_ste_mask(np.array([-2.0, 0.0, 1.26, 1.36], np.float32), 0.1, 0, -10, 13)
    array([False,  True,  True, False])
    """
    qmin, qmax = _check_range(quant_min, quant_max)
    arr, ct, _ = _float_input(x)
    if axis is None:
        s32 = _scalar(_scale32(scale), "scale")
        z = _scalar(_zero_points(zero_point, qmin, qmax), "zero_point")
    else:
        s32, z = _per_channel_params(arr, scale, zero_point, axis, qmin, qmax)
    _, mask = _fake_quant_core(arr, ct, s32, z, qmin, qmax, per_channel=axis is not None)
    return mask


# -- real quantization --------------------------------------------------------------------------

def _fma_to_float32(a32: np.ndarray, b32: np.ndarray, c) -> np.ndarray:
    """float32 ``fma(a, b, c)``: ``a * b + c`` rounded once, as ``_mm256_fmadd_ps``.

    The float64 product of two float32 values is exact, and so is the float64 sum unless
    the addends' bits span more than 53 places. Rounding that sum to float32 can then round
    twice only where it lands exactly halfway between two float32 values (the low 29 bits of
    its significand ``1 << 28``); there the sum's error (TwoSum) says which way the exact
    value lies. The sum of a nonzero integer ``c`` and a product that nearly cancels it is
    exact, so float32 subnormal results need no care."""
    p = a32.astype(np.float64) * np.asarray(b32, np.float64)
    cc = np.asarray(c, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.asarray(p + cc, order="C")  # C order: the flat indices below address it
        out = s.astype(np.float32)
        mid = np.flatnonzero((s.view(np.int64) & 0x1FFFFFFF) == 0x10000000)
        if mid.size:  # the float32 halfway cases: were they exact in float64?
            pm = np.broadcast_to(p, s.shape).reshape(-1)[mid]
            sm = s.reshape(-1)[mid]
            cm = cc if cc.ndim == 0 else np.broadcast_to(cc, s.shape).reshape(-1)[mid]
            bb = sm - pm
            err = (pm - (sm - bb)) + (cm - bb)  # TwoSum: sm + err == pm + cm exactly
            fix = np.flatnonzero(err)
            if fix.size:
                nudged = np.nextafter(sm[fix], sm[fix] + np.sign(err[fix]))
                out.reshape(-1)[mid[fix]] = nudged.astype(np.float32)
    return out if out.ndim else out[()]


def quantize(x, scale, zero_point, quant_min: int | None = None, quant_max: int | None = None,
             dtype: str | IntFormat | None = None, axis: int | None = None, *,
             fmt: str | IntFormat | None = None) -> np.ndarray:
    """Quantize to integers as PyTorch 2.13's ``torch.quantize_per_tensor`` (``axis=None``)
    and ``torch.quantize_per_channel`` (``axis``) on an x86-64 CPU, bit for bit: the zero
    point is added *before* rounding (see the module docstring for the two kernels):
    ``clamp(rint(x * (1.0f / scale) + zero_point), quant_min, quant_max)`` in float32.

    ``dtype`` (PyTorch's name; ``fmt`` is fpsim's, give either) is "int8" (the default) /
    "qint8", "uint8" / "quint8", "int32" / "qint32" or an IntFormat of those; ``quant_min`` /
    ``quant_max`` default to its full range (a narrower range clamps the result further).
    The input is cast to float32 (PyTorch quantizes float32 tensors only). NaN input raises
    ValueError (an integer has no NaN); +-inf clamp.

    >>> quantize(np.array([-1.0, 0.05, 0.15, 100.0], np.float32), 0.1, 3)
    array([ -7,   4,   4, 127], dtype=int8)

    0.05 * 10 and 0.15 * 10 are 0.5 and 1.5 in float32: 3.5 and 4.5 round to the even 4.
    The reciprocal matters too (FBGEMM's own example): 0.273939937 * (1 / 0.00214854861) is
    127.5 in float32 and rounds to 128, where 0.273939937 / 0.00214854861 would give 127.

    >>> quantize(np.float32(0.273939937), 0.00214854861, 0, dtype="uint8")
    np.uint8(128)
    >>> int(quantize(np.float32(2.3), 0.0117647061124444, 59, fmt="uint8"))  # 254.5 -> 254
    254
    """
    if dtype is not None and fmt is not None:
        raise TypeError("quantize takes fmt or dtype (its PyTorch name), not both")
    fmt = as_qdtype("int8" if dtype is None and fmt is None else
                    (fmt if dtype is None else dtype)).int_format
    qmin = fmt.min if quant_min is None else quant_min
    qmax = fmt.max if quant_max is None else quant_max
    qmin, qmax = _check_range(qmin, qmax)
    if qmin < fmt.min or qmax > fmt.max:
        raise ValueError(f"[{qmin}, {qmax}] does not fit {fmt.name} [{fmt.min}, {fmt.max}]")
    arr, _, _ = _float_input(x)
    arr = arr.astype(np.float32)  # PyTorch quantizes float tensors
    if np.isnan(arr).any():
        raise ValueError("cannot quantize NaN to an integer")
    if axis is None:
        s32 = _scalar(_scale32(scale), "scale")
        z = _scalar(_zero_points(zero_point, qmin, qmax), "zero_point")
    else:
        s32, z = _per_channel_params(arr, scale, zero_point, axis, qmin, qmax)
    inv = np.float32(1.0) / s32  # float inv_scale = 1.0f / (float)scale
    with np.errstate(over="ignore", invalid="ignore"):
        if axis is None and fmt.bits == 8:
            qf = _fma_to_float32(arr, inv, z)  # FBGEMM QuantizeAvx2<T, LEGACY=true>
        else:
            # FBGEMM's scalar Quantize<T, LEGACY=true> (qint32) and ATen's quantize_val
            # (per channel): float product, float add of the int32 zero point
            qf = arr * inv + z.astype(np.float32)
        q = np.rint(qf)  # nearbyint
        if fmt.bits <= 16:  # the bounds are exact in float32: clamp there (no NaN here)
            return np.minimum(np.maximum(q, np.float32(qmin)), np.float32(qmax)).astype(
                fmt.dtype)
        q = np.minimum(np.maximum(q.astype(np.float64), float(qmin)), float(qmax))  # clamp<double>
    return q.astype(fmt.dtype)


def dequantize(q, scale, zero_point, axis: int | None = None) -> np.ndarray:
    """float32 values of quantized integers as PyTorch 2.13's ``Tensor.dequantize()``:
    ``float32(q - zero_point) * float32(scale)`` per tensor and
    ``float32(float64(float32(q) - float32(zero_point)) * scale)`` per channel (``axis``,
    the scales used as float64, as PyTorch's per-channel double scales). Both are one
    rounding of ``(q - z) * scale`` for 8-bit values. ``q - z`` is computed exactly (PyTorch
    wraps it in int32).

    >>> dequantize(np.array([-7, 4, 5, 127], np.int8), 0.1, 3)
    array([-1.      ,  0.1     ,  0.2     , 12.400001], dtype=float32)
    """
    qa = np.asarray(q)
    if qa.dtype.kind not in "iu":
        raise TypeError(f"dequantize expects integers, got dtype {qa.dtype}")
    if axis is None:
        s32 = _scalar(_scale32(scale), "scale")
        z = _scalar(_int_zero_points(zero_point), "zero_point")
        # FBGEMM Dequantize: scale * (src - zero_point), int -> float, then a float product
        return (qa.astype(np.int64) - z).astype(np.float32) * s32
    s32 = _scale32(scale, "scales").reshape(-1)
    s64 = np.asarray(scale, dtype=np.float64).reshape(-1)
    z = _int_zero_points(zero_point).reshape(-1)
    if s64.size != z.size:
        raise ValueError(f"scales and zero_points lengths differ: {s64.size} vs {z.size}")
    shape = _channel_shape(qa, axis, s32.size, "scales")
    s64, z = s64.reshape(shape), z.reshape(shape)
    diff = qa.astype(np.float32) - z.astype(np.float32)  # (float)q - zero_point, in float
    return (diff.astype(np.float64) * s64).astype(np.float32)  # float * double -> float


# -- LSQ (Esser et al. 2020) ----------------------------------------------------------------------

def lsq_grad(x, s, quant_min: int, quant_max: int, zero_point: int = 0
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per-element LSQ gradients for an upstream gradient of 1: ``(dx_mask, dscale)``.

    ``dx_mask`` is the straight-through mask (True where ``qmin <= round(x / s + z) <= qmax``)
    and ``dscale`` the derivative of the fake-quantized value with respect to ``s``:
    ``round(x / s) - x / s`` inside the range, ``qmin - z`` below it and ``qmax - z`` above it
    (LSQ's ``-v/s + round(v/s)``, ``-Q_N``, ``Q_P``). Computed in float32 as PyTorch 2.13's
    ``_fake_quantize_learnable_per_tensor_affine_backward`` CPU kernel on x86-64, checked
    against recorded results at the ties: ``xq = nearbyint(fma(x, inv_s, z))`` and, inside,
    ``dscale = fma(q - z, s, -x) * inv_s`` (the compiler contracts ``z + x * inv_s`` and
    ``(q - z) * s - x`` into fused multiply-adds, one rounding each); ``xq`` beyond int64 or
    NaN counts as below the range (x86-64's INT64_MIN). PyTorch (and fpsim) decide inside /
    outside on the rounded value, the paper on ``x / s`` itself: they differ only within half
    a step beyond the ends. Multiply the summed ``dscale`` by :func:`lsq_grad_scale`.

    ``zero_point`` is the integer the kernel uses. PyTorch's backward derives it from its
    float parameter as ``int64(z + 0.5)``, which truncates toward zero, so a negative zero
    point moves up by one there (-1 -> 0) while the forward pass uses ``nearbyint(z)``.

    >>> m, ds = lsq_grad(np.array([0.3, 0.5, 20.0, -20.0], np.float32), 1.0, -8, 7)
    >>> m.tolist(), ds.tolist()
    ([True, True, False, False], [-0.30000001192092896, -0.5, 7.0, -8.0])
    """
    qmin, qmax = _check_range(quant_min, quant_max)
    arr, _, _ = _float_input(x)
    arr = arr.astype(np.float32)  # the learnable kernels read float inputs
    s32 = _scalar(_scale32(s), "s")
    z = int(_scalar(_zero_points(zero_point, qmin, qmax), "zero_point"))
    inv = np.float32(1.0) / s32
    with np.errstate(over="ignore", invalid="ignore"):
        xq = np.rint(_fma_to_float32(arr, inv, np.asarray(z, np.float32))).astype(np.float64)
        xq = np.where(np.abs(xq) < 2.0**63, xq, -(2.0**63))  # int64 cast: x86's INT64_MIN
        inside = (xq >= qmin) & (xq <= qmax)
        qz = (np.clip(xq, qmin, qmax) - z).astype(np.float32)  # exact: |q - z| < 2**24 below
        ds_in = _fma_to_float32(qz, s32, -arr) * inv
    ds = np.where(inside, ds_in, np.where(xq < qmin, np.float32(qmin - z), np.float32(qmax - z)))
    return inside, ds.astype(np.float32)


def lsq_grad_scale(num_elements: int, quant_max: int) -> float:
    """LSQ's step-size gradient scale ``g = 1 / sqrt(N * Q_P)`` (PyTorch's ``grad_factor``).

    >>> lsq_grad_scale(1024, 127) == 1 / math.sqrt(1024 * 127)
    True
    """
    # counts (fpsim.checks.as_int): int() took 2.7 as 2 and True as 1
    n, qp = as_int("num_elements", num_elements, None), as_int("quant_max", quant_max, None)
    if n <= 0 or qp <= 0:
        raise ValueError(f"num_elements and quant_max must be positive, got {num_elements}, "
                         f"{quant_max}")
    return 1.0 / math.sqrt(n * qp)


def lsq_init_step(v, quant_max: int) -> float:
    """LSQ's initial step size ``2 * mean(|v|) / sqrt(Q_P)``.

    >>> lsq_init_step([-1.0, 1.0, 2.0, -4.0], 4)
    2.0
    """
    arr = np.asarray(v, dtype=np.float64)
    if arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError("lsq_init_step needs a non-empty array of finite values")
    qp = as_int("quant_max", quant_max, None)  # a count, as in lsq_grad_scale
    if qp <= 0:
        raise ValueError(f"quant_max must be positive, got {quant_max}")
    return float(2.0 * np.mean(np.abs(arr)) / math.sqrt(qp))


# -- TensorRT (NVIDIA pytorch-quantization) -----------------------------------------------------

def tensorrt_scale(amax, num_bits: int = 8, narrow_range: bool = False) -> np.ndarray:
    """TensorRT's symmetric scale ``s = amax / qmax`` (``amax / 127`` for int8), float32.

    >>> float(tensorrt_scale(127.0))
    1.0
    """
    _, qmax = quant_range(num_bits, True, narrow_range)
    return (_amax32(amax) / np.float32(qmax)).astype(np.float32)


def _amax32(amax) -> np.ndarray:
    """``amax`` as float32, checked: real, finite and >= 0 (TypeError / ValueError)."""
    a = real_array(amax, "amax")
    with np.errstate(over="ignore"):
        a32 = a.astype(np.float32)
    if not np.isfinite(a32).all() or (a < 0).any():
        raise ValueError(f"amax must be finite in float32 and >= 0 (the largest |x|), got "
                         f"{amax!r}")
    return a32


def _trt_inverse_scale(amax, num_bits, narrow_range):
    qmin, qmax = quant_range(num_bits, True, narrow_range)
    a = _amax32(amax)
    with np.errstate(divide="ignore"):
        inv = np.float32(qmax) / a  # pytorch-quantization's `scale = max_bound / amax`
    tiny = a <= np.float32(2.0**-24)  # amax below fp16's smallest value: everything -> 0
    return qmin, qmax, np.where(tiny, np.float32(0), inv).astype(np.float32), tiny


def tensorrt_quantize(x, amax, num_bits: int = 8, narrow_range: bool = False) -> np.ndarray:
    """TensorRT / pytorch-quantization symmetric quantization:
    ``clamp(round_half_even(x * (qmax / amax)), qmin, qmax)`` in float32 (``_tensor_quant``
    of NVIDIA pytorch-quantization 2.1); ``amax <= 2**-24`` quantizes everything to 0.
    Returns int8 for ``num_bits <= 8`` (else int32).

    >>> tensorrt_quantize(np.array([-2.0, -0.5, 0.3, 1.0], np.float32), 1.0)
    array([-128,  -64,   38,  127], dtype=int8)
    """
    arr = np.asarray(x, np.float32)
    if np.isnan(arr).any():
        raise ValueError("cannot quantize NaN to an integer")
    qmin, qmax, inv, _ = _trt_inverse_scale(amax, num_bits, narrow_range)
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.clip(np.rint(arr * inv), qmin, qmax)
    return q.astype(np.int8 if num_bits <= 8 else np.int32)


def tensorrt_fake_quantize(x, amax, num_bits: int = 8, narrow_range: bool = False
                           ) -> np.ndarray:
    """pytorch-quantization's fake quantization: :func:`tensorrt_quantize` divided by
    ``qmax / amax`` in float32 (``amax <= 2**-24`` gives 0).

    >>> tensorrt_fake_quantize(np.array([0.3, 5.0], np.float32), 1.0)
    array([0.2992126, 1.       ], dtype=float32)
    """
    q = tensorrt_quantize(x, amax, num_bits, narrow_range).astype(np.float32)
    _, _, inv, tiny = _trt_inverse_scale(amax, num_bits, narrow_range)
    inv = np.where(tiny, np.float32(1.0), inv).astype(np.float32)  # their `scale[mask] = 1.`
    return (q / inv).astype(np.float32)
