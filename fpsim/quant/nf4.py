"""NF4 (QLoRA's 4-bit NormalFloat) block-wise quantization with double quantization, as
bitsandbytes does it.

- :data:`NF4_VALUES`: the 16 code values (bitsandbytes' table, float32).
- :func:`nf4_quantize`: per block of ``block_size`` (64) consecutive values of the flattened
  array, ``absmax`` = max |w| (float32); each value becomes ``w * (1.0f / absmax)`` in float32
  and the nearest code value, decided by bitsandbytes' comparison tree ``x > t`` against the
  15 midpoints of adjacent code values (``dQuantizeNF4`` in ``csrc/kernels.cu``): a value
  exactly on a midpoint takes the LOWER code. An all-zero block (absmax 0) gets code 7 (the
  value 0.0); bitsandbytes computes 0 * inf = NaN there, which its tree sends to code 0 (-1.0),
  and dequantizes to -1.0 * 0 = 0 all the same.
- :func:`nf4_dequantize`: ``NF4_VALUES[code] * absmax`` in float32.
- :func:`pack_4bit` / :func:`unpack_4bit`: two codes per byte, the first in the high nibble
  (bitsandbytes' order).
- :func:`double_quantize`: QLoRA's double quantization of the float32 absmax constants:
  subtract their mean (the "offset"), then 8-bit block-wise quantization in blocks of 256 with
  bitsandbytes' dynamic map (:func:`create_dynamic_map`, nearest value, ties to the lower)
  and one float32 absmax per block (``code="dynamic"``, the default); or, with
  ``code="fp8_e4m3"``, the centred constants scaled by ``448 / absmax`` and rounded to OCP
  e4m3 by :func:`fpsim.round` (saturating).
- :func:`bits_per_parameter`: ``4 + 32/64 = 4.5`` bits without double quantization, ``4 +
  8/64 + 32/(64 * 256) = 4.127`` with it (the fp32 offset of the whole tensor not counted).

Error on N(0, 1) weights, block 64: the expected quantize-dequantize RMSE follows from the
distribution of the block maximum ``A`` (density ``64 * 2 phi(A) * (2 Phi(A) - 1)**63``) and,
given ``A``, the other 63 values being N(0, 1) restricted to ``[-A, A]``: integrating the
squared distance to the nearest ``A * NF4_VALUES[i]`` over each cell gives RMSE = 0.0920
(the block maximum itself is exact). Uniform int4 absmax (``round(7 w / A) A / 7``) gives
0.1076 by the same integral; 2**22 samples measure 0.0920 and 0.1077.
tests/test_quant_nf4.py computes both integrals independently and checks the measured errors
against them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import as_int, as_int_in
from ..encoding import from_bits, to_bits
from ..formats import FP8_E4M3

__all__ = [
    "NF4_VALUES",
    "NF4_THRESHOLDS",
    "VALID_BLOCK_SIZES",
    "nf4_quantize",
    "nf4_dequantize",
    "pack_4bit",
    "unpack_4bit",
    "create_dynamic_map",
    "DoubleQuantized",
    "double_quantize",
    "double_dequantize",
    "bits_per_parameter",
]

NF4_VALUES = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
], dtype=np.float32)
NF4_VALUES.setflags(write=False)

# bitsandbytes' dQuantizeNF4 thresholds (float literals: the float32 midpoints of the codes)
NF4_THRESHOLDS = np.array([
    -0.8480964004993439, -0.6106329262256622, -0.4599952697753906, -0.33967943489551544,
    -0.23460740596055984, -0.13791173323988914, -0.045525018125772476, 0.03979014977812767,
    0.1202552504837513, 0.2035212516784668, 0.2920137718319893, 0.3893125355243683,
    0.5016634166240692, 0.6427869200706482, 0.8614784181118011,
], dtype=np.float32)
NF4_THRESHOLDS.setflags(write=False)

VALID_BLOCK_SIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)


def _check_block(block_size, name="block_size") -> int:
    return as_int_in(name, block_size, VALID_BLOCK_SIZES, f"unsupported {name} {{!r}}")


def _blocks(flat: np.ndarray, block: int) -> np.ndarray:
    """(nblocks, block) view with the last block padded by zeros (padding never wins absmax)."""
    nb = -(-flat.size // block)
    if nb * block != flat.size:
        flat = np.concatenate([flat, np.zeros(nb * block - flat.size, flat.dtype)])
    return flat.reshape(nb, block)


def _absmax_inverse(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    absmax = np.abs(blocks).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.float32(1.0) / absmax  # bitsandbytes multiplies by 1.0f / absmax
    return absmax.astype(np.float32), np.where(absmax == 0, np.float32(0), inv)


def _finite_float32(w, what: str) -> np.ndarray:
    arr = np.asarray(w)
    if arr.dtype.kind not in "fiuV":
        raise TypeError(f"{what} must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"{what} contain NaN or infinity; block-wise absmax needs finite "
                         "values")
    return arr


def nf4_quantize(w, block_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """NF4 codes (uint8 in [0, 16), the shape of ``w``) and the float32 absmax of each block
    of ``block_size`` consecutive values (C order; the last block may be short).

    >>> codes, absmax = nf4_quantize(np.array([0.5, -1.0, 0.25, 0.0], np.float32))
    >>> codes.tolist(), absmax.tolist()
    ([12, 0, 10, 7], [1.0])

    (0.5 lies nearer to 0.4407 (code 12) than to 0.5626 (code 13).)
    """
    block = _check_block(block_size)
    arr = _finite_float32(w, "weights")
    blocks = _blocks(arr.reshape(-1), block)
    absmax, inv = _absmax_inverse(blocks)
    normed = blocks * inv[:, None]
    # searchsorted(side="left") counts thresholds t < x: the code of bitsandbytes' x > t tree
    codes = np.searchsorted(NF4_THRESHOLDS, normed, side="left").astype(np.uint8)
    codes[absmax == 0] = 7
    return codes.reshape(-1)[: arr.size].reshape(arr.shape), absmax


def nf4_dequantize(codes, absmax, block_size: int = 64, dtype=np.float32) -> np.ndarray:
    """``NF4_VALUES[codes] * absmax`` in float32 (cast to ``dtype``), the shape of ``codes``.
    ``absmax`` is the float32 array of :func:`nf4_quantize` or a :class:`DoubleQuantized`.

    >>> codes, absmax = nf4_quantize(np.array([0.5, -1.0, 0.25, 0.0], np.float32))
    >>> nf4_dequantize(codes, absmax)
    array([ 0.44070983, -1.        ,  0.2461123 ,  0.        ], dtype=float32)
    """
    block = _check_block(block_size)
    c = np.asarray(codes)
    if c.dtype.kind not in "iu" or (c.size and (c.min() < 0 or c.max() > 15)):
        raise ValueError("codes must be integers in [0, 16)")
    if isinstance(absmax, DoubleQuantized):
        absmax = double_dequantize(absmax)
    am = np.asarray(absmax, np.float32).reshape(-1)
    nb = -(-c.size // block)
    if am.size != nb:
        raise ValueError(f"{c.size} codes in blocks of {block} need {nb} absmax values, got "
                         f"{am.size}")
    vals = _blocks(NF4_VALUES[c.reshape(-1)], block) * am[:, None]
    return vals.reshape(-1)[: c.size].reshape(c.shape).astype(dtype)


def pack_4bit(codes) -> np.ndarray:
    """Two 4-bit codes per byte, the first of each pair in the high nibble; an odd count is
    padded with a zero nibble.

    >>> pack_4bit([1, 2, 15]).tolist()
    [18, 240]
    """
    c = np.asarray(codes).reshape(-1)
    if c.dtype.kind not in "iu" or (c.size and (c.min() < 0 or c.max() > 15)):
        raise ValueError("codes must be integers in [0, 16)")
    c = c.astype(np.uint8)
    if c.size % 2:
        c = np.concatenate([c, np.zeros(1, np.uint8)])
    return (c[0::2] << 4) | c[1::2]


def unpack_4bit(packed, n: int | None = None) -> np.ndarray:
    """The codes of :func:`pack_4bit` (``n`` of them; default all ``2 * len(packed)``).

    >>> unpack_4bit(np.array([18, 240], np.uint8), 3).tolist()
    [1, 2, 15]
    """
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise TypeError(f"packed codes must be uint8, got dtype {p.dtype}")
    p = p.reshape(-1)
    out = np.empty(2 * p.size, np.uint8)
    out[0::2] = p >> 4
    out[1::2] = p & 0x0F
    if n is None:
        return out
    k = as_int("n", n, None)  # a count: int(2.7), int(True), int("3") were taken as counts
    if not 0 <= k <= out.size:
        raise ValueError(f"n must be in [0, {out.size}], got {n}")
    return out[:k]


def _linspace32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace in float32 (the scalar kernel: the first half counts up from start,
    the second half down from end)."""
    s, e = np.float32(start), np.float32(end)
    if steps == 1:
        return np.array([s], np.float32)
    step = (e - s) / np.float32(steps - 1)
    idx = np.arange(steps)
    up = s + step * idx.astype(np.float32)
    down = e - step * (steps - idx - 1).astype(np.float32)
    return np.where(idx < steps // 2, up, down).astype(np.float32)


def create_dynamic_map(signed: bool = True, max_exponent_bits: int = 7,
                       total_bits: int = 8) -> np.ndarray:
    """bitsandbytes' dynamic 8-bit quantization map (``create_dynamic_map``): for each decade
    ``10**(i - max_exponent_bits + 1)``, ``2**i`` values (the midpoints of a linspace over
    [0.1, 1]), mirrored when ``signed``, plus 0 and 1; sorted, float32. Computed in float32 as
    torch does (its vectorised linspace may differ in the last bit of a few entries).

    >>> m = create_dynamic_map(); m.size, float(m[0]), float(m[-1]), int((m == 0).sum())
    (256, -0.992968738079071, 1.0, 1)
    """
    max_exponent_bits = as_int("max_exponent_bits", max_exponent_bits, 1)
    total_bits = as_int("total_bits", total_bits, 1)
    if total_bits > 16:  # 2**total_bits float32 entries; a huge count hung in 2**(...)
        raise ValueError(f"total_bits must be at most 16 (a map of 2**total_bits values), got "
                         f"{total_bits}")
    non_sign_bits = total_bits - 1  # bitsandbytes: total_bits - (1 if signed else 1)
    if max_exponent_bits > non_sign_bits:
        raise ValueError("max_exponent_bits must be <= total_bits - 1")
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    data: list[np.ndarray] = []
    i = 0
    for i in range(max_exponent_bits):
        items = (2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                 else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        b = _linspace32(0.1, 1.0, items)
        means = (b[:-1] + b[1:]) / np.float32(2.0)
        decade = np.float32(10.0 ** (-(max_exponent_bits - 1) + i))
        data.append(decade * means)
        if signed:
            data.append(-decade * means)
    if additional_items > 0:
        b = _linspace32(0.1, 1.0, additional_items + 1)
        means = (b[:-1] + b[1:]) / np.float32(2.0)
        decade = np.float32(10.0 ** (-(max_exponent_bits - 1) + i))
        data.append(decade * means)
        if signed:
            data.append(-decade * means)
    values = np.concatenate(data + [np.array([0.0, 1.0], np.float32)])
    if values.size > 2**total_bits:
        raise ValueError("the map has more values than total_bits can index")
    values = np.concatenate([values, np.zeros(2**total_bits - values.size, np.float32)])
    return np.sort(values).astype(np.float32)


@dataclass(frozen=True)
class DoubleQuantized:
    """Double-quantized absmax constants: 8-bit codes, one float32 absmax per block of
    ``block_size`` codes, the float32 offset (the mean subtracted first) and the code book."""

    qabsmax: np.ndarray  # uint8 codes
    absmax2: np.ndarray  # float32, one per block
    offset: np.float32
    block_size: int
    code: str  # "dynamic" or "fp8_e4m3"
    code_values: np.ndarray | None  # the dynamic map (None for fp8_e4m3)


def _nearest_index(sorted_values: np.ndarray, x: np.ndarray) -> np.ndarray:
    mids = (sorted_values[:-1] + sorted_values[1:]) / np.float32(2.0)
    return np.searchsorted(mids, x, side="left")  # a tie goes to the lower value


def double_quantize(absmax, block_size: int = 256, code: str = "dynamic") -> DoubleQuantized:
    """QLoRA's double quantization of the absmax constants (see the module docstring). The
    offset is their mean, computed in float64 and rounded to float32.

    >>> dq = double_quantize(np.linspace(1.0, 3.0, 300, dtype=np.float32))
    >>> dq.qabsmax.dtype, dq.absmax2.shape, float(dq.offset)
    (dtype('uint8'), (2,), 2.0)
    """
    block = _check_block(block_size)
    if code not in ("dynamic", "fp8_e4m3"):
        raise ValueError(f"unknown double-quantization code {code!r}; valid: 'dynamic', "
                         "'fp8_e4m3'")
    am = _finite_float32(absmax, "absmax constants").reshape(-1)
    if am.size == 0:
        raise ValueError("no absmax constants to quantize")
    offset = np.float32(np.mean(am, dtype=np.float64))
    centred = am - offset
    blocks = _blocks(centred, block)
    absmax2, inv = _absmax_inverse(blocks)
    if code == "dynamic":
        values = create_dynamic_map()
        q = _nearest_index(values, blocks * inv[:, None]).astype(np.uint8)
        q[absmax2 == 0] = int(np.flatnonzero(values == 0)[0])
    else:
        values = None
        scaled = blocks.astype(np.float64) * (inv.astype(np.float64) * FP8_E4M3.max)[:, None]
        q = to_bits(scaled, FP8_E4M3, overflow="saturate").astype(np.uint8)
    return DoubleQuantized(q.reshape(-1)[: am.size], absmax2, offset, block, code, values)


def double_dequantize(dq: DoubleQuantized) -> np.ndarray:
    """The float32 absmax constants back: ``code[q] * absmax2 + offset``.

    >>> am = np.linspace(1.0, 3.0, 300, dtype=np.float32)
    >>> bool(np.abs(double_dequantize(double_quantize(am)) - am).max() < 0.01)
    True
    """
    if not isinstance(dq, DoubleQuantized):
        raise TypeError(f"double_dequantize takes double_quantize's result (a DoubleQuantized), "
                        f"got {type(dq).__name__} {dq!r}")
    n = dq.qabsmax.size
    q = _blocks(dq.qabsmax.reshape(-1), dq.block_size)
    if dq.code == "dynamic":
        vals = dq.code_values[q] * dq.absmax2[:, None]
    else:
        dec = from_bits(q, FP8_E4M3) / FP8_E4M3.max
        vals = (dec * dq.absmax2.astype(np.float64)[:, None]).astype(np.float32)
    return (vals.reshape(-1)[:n] + dq.offset).astype(np.float32)


def bits_per_parameter(block_size: int = 64, double_quant: bool = True,
                       dq_block_size: int = 256) -> float:
    """Storage bits per weight of NF4: 4 bits of code plus the share of the block constants.

    >>> bits_per_parameter(64, double_quant=False), round(bits_per_parameter(64), 3)
    (4.5, 4.127)
    """
    block = _check_block(block_size)
    if not double_quant:
        return 4.0 + 32.0 / block
    dq = _check_block(dq_block_size, "dq_block_size")
    return 4.0 + 8.0 / block + 32.0 / (block * dq)
