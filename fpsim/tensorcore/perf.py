"""A small performance model of a GEMM on tensor cores, for teaching: tile quantization, wave
quantization, the alignment rule and the dense peak throughput of V100, A100 and H100 SXM.

The rules follow NVIDIA's *Matrix Multiplication Background* guide (``docs/facts.md``):

- The output ``M x N`` is cut into tiles (``tile``, 128 x 128 by default); a thread block
  computes one tile, and a partial tile at the edge costs a whole one (**tile quantization**).
- Tiles run in **waves** of ``SMs x blocks_per_sm`` at a time; the last wave may be nearly
  empty but takes as long as a full one (**wave quantization**). A100 has 108 SMs, H100 SXM
  132, V100 80.
- Tensor cores are most efficient when M, N and K are multiples of 16 bytes of elements
  (8 for fp16 / bf16, 16 for int8 / fp8, 4 for tf32); on A100 best at multiples of 128 bytes
  (64 fp16 elements). The model reports the rule; it does not invent a penalty for breaking it.
- Peak dense TFLOPS (TOPS for int8): V100 fp32 15.7, fp16 125; A100 fp32 19.5, tf32 156,
  fp16 / bf16 312, int8 624; H100 SXM fp32 67, tf32 495, fp16 / bf16 989, fp8 1979.

Every tile does ``2 * tile_m * tile_n * K`` operations and every SM runs at its share of the
peak, so the estimated time is ``waves x`` (time of one full wave at peak) and the achieved
fraction of peak (``utilisation``) is ``tile_efficiency x wave_efficiency``. Memory traffic,
K-tiling and kernel launch costs are left out: the numbers are an upper bound on speed that
shows *why* some shapes are slower, not a benchmark.

The **roofline** adds the memory side: a GEMM moves at least ``(M K + K N) * in_bits / 8``
bytes in and ``M N * out_bits / 8`` out (:func:`gemm_bytes`; each matrix once), so its
arithmetic intensity is ``2 M N K`` operations over those bytes (:func:`arithmetic_intensity`).
A GPU with peak rate ``P`` and memory bandwidth ``B`` runs it at no more than
``min(P, B x intensity)`` (:func:`roofline_tflops`): memory-bound below the **ridge point**
``P / B`` operations per byte (:func:`ridge_point`), compute-bound above; :func:`gemm_roofline`
puts it together. fpsim holds **no memory bandwidths** (the reference facts in docs/facts.md
list none), so every roofline function takes ``bandwidth_tbps`` from the caller (the
datasheet value of the GPU in question). Bits, not bytes, so that block-scaled formats fit:
MXFP8 stores 8 + 8 / 32 = 8.25 bits per value, NVFP4 4 + 8 / 16 = 4.5.

>>> from fpsim.tensorcore.perf import gemm_time_estimate
>>> r = gemm_time_estimate(4096, 4096, 4096, "A100", "fp16")
>>> r.tiles, r.waves, round(r.utilisation, 4)
(1024, 10, 0.9481)
>>> from fpsim.tensorcore.perf import arithmetic_intensity, ridge_point
>>> round(arithmetic_intensity(4096, 4096, 4096, in_bits=16), 2)  # 4096 / 3 operations per byte
1365.33
>>> ridge_point(989.0, 2.0)  # 989 TFLOPS fed by an (assumed) 2 TB/s: 494.5 operations per byte
494.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..checks import as_int

__all__ = ["GpuPerf", "PERF_GPUS", "GemmEstimate", "gemm_time_estimate", "peak_tflops",
           "alignment", "get_perf_gpu", "DTYPE_BYTES", "gemm_bytes", "arithmetic_intensity",
           "ridge_point", "roofline_tflops", "GemmRoofline", "gemm_roofline"]

#: Bytes per element of each dtype the model knows.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1, "fp8": 1}
# fpsim format names (and a few spellings) that map onto the model's dtypes
_DTYPE_ALIASES = {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8",
                  "float8": "fp8", "float32": "fp32", "single": "fp32", "float16": "fp16",
                  "half": "fp16", "bfloat16": "bf16", "tensorfloat32": "tf32"}
#: Tensor cores want every dimension to be a multiple of this many bytes of elements.
ALIGN_BYTES = 16


@dataclass(frozen=True)
class GpuPerf:
    """Throughput facts of one GPU: SM count, dense peak TFLOPS per dtype and the alignment
    (in bytes) at which its tensor cores are at their best."""

    name: str
    sms: int
    peak_tflops: dict[str, float]
    best_align_bytes: int = ALIGN_BYTES
    aliases: tuple[str, ...] = ()


PERF_GPUS: dict[str, GpuPerf] = {
    # V100 (SXM2): 80 SMs, per NVIDIA's Tesla V100 whitepaper; no tf32, bf16, int8 or fp8 on
    # its tensor cores.
    "V100": GpuPerf("V100", 80, {"fp32": 15.7, "fp16": 125.0}, aliases=("volta",)),
    # The 128-byte rule (64 fp16 elements) is the guide's A100 advice.
    "A100": GpuPerf("A100", 108, {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0,
                                  "int8": 624.0}, best_align_bytes=128, aliases=("ampere",)),
    "H100": GpuPerf("H100", 132, {"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0,
                                  "fp8": 1979.0}, aliases=("h100sxm", "hopper")),
}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def get_perf_gpu(gpu: str | GpuPerf) -> GpuPerf:
    """The :class:`GpuPerf` of a GPU name ("A100", "h100 sxm", ...); ValueError listing the
    modelled ones otherwise.

    >>> get_perf_gpu("H100 SXM").sms
    132
    """
    if isinstance(gpu, GpuPerf):
        return gpu
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name, got {gpu!r}")
    k = _key(gpu)
    for g in PERF_GPUS.values():
        if k == _key(g.name) or k in g.aliases:
            return g
    raise ValueError(f"no performance data for GPU {gpu!r}; valid: {', '.join(PERF_GPUS)}")


def _dtype(dtype: str) -> str:
    if not isinstance(dtype, str):
        name = getattr(dtype, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"dtype must be a name such as 'fp16', got {dtype!r}")
        dtype = name
    k = dtype.strip().lower()
    k = _DTYPE_ALIASES.get(k, _DTYPE_ALIASES.get(_key(k), k))
    if k not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPE_BYTES)}")
    return k


def peak_tflops(gpu: str | GpuPerf, dtype: str) -> float:
    """Dense peak TFLOPS (TOPS for int8) of ``gpu`` for ``dtype`` ("fp32" is the CUDA cores,
    the others the tensor cores).

    >>> peak_tflops("A100", "bf16"), peak_tflops("H100", "fp8")
    (312.0, 1979.0)
    """
    g = get_perf_gpu(gpu)
    d = _dtype(dtype)
    if d not in g.peak_tflops:
        raise ValueError(f"{g.name} has no {d} peak in the model; valid for {g.name}: "
                         f"{', '.join(g.peak_tflops)}")
    return g.peak_tflops[d]


def alignment(dtype: str, gpu: str | GpuPerf | None = None) -> tuple[int, int]:
    """(required, best) multiple of elements for M, N and K: 16 bytes of elements, and on A100
    128 bytes for the best performance. fp32 runs on the CUDA cores: (1, 1).

    >>> alignment("fp16"), alignment("int8"), alignment("tf32"), alignment("fp16", "A100")
    ((8, 8), (16, 16), (4, 4), (8, 64))
    """
    d = _dtype(dtype)
    if d == "fp32":
        return 1, 1
    need = ALIGN_BYTES // DTYPE_BYTES[d]
    best = need if gpu is None else get_perf_gpu(gpu).best_align_bytes // DTYPE_BYTES[d]
    return need, max(need, best)


@dataclass(frozen=True)
class GemmEstimate:
    """The estimate of one ``M x K`` by ``K x N`` GEMM (see the module docstring).

    ``tile_efficiency`` = M N / (tiles x tile area); ``wave_efficiency`` = tiles / (waves x
    concurrent); ``utilisation`` their product, the achieved fraction of ``peak_tflops``;
    ``time_s`` the estimated time, ``ideal_time_s`` the time of ``flops`` at peak."""

    M: int
    N: int
    K: int
    gpu: str
    dtype: str
    tile: tuple[int, int]
    blocks_per_sm: int
    sms: int
    tiles_m: int
    tiles_n: int
    tiles: int
    concurrent: int
    waves: int
    tile_efficiency: float
    wave_efficiency: float
    utilisation: float
    peak_tflops: float
    flops: int
    ideal_time_s: float
    time_s: float
    achieved_tflops: float
    arithmetic_intensity: float
    alignment: int
    best_alignment: int
    aligned: bool
    best_aligned: bool
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        tm, tn = self.tile
        lines = [
            f"GEMM {self.M} x {self.N} x {self.K} ({self.dtype}) on {self.gpu}: "
            f"{self.flops:.4g} operations",
            f"  tiles {tm}x{tn}: {self.tiles_m} x {self.tiles_n} = {self.tiles} "
            f"(tile efficiency {self.tile_efficiency:.1%})",
            f"  waves of {self.concurrent} ({self.sms} SMs x {self.blocks_per_sm}): "
            f"{self.waves} (wave efficiency {self.wave_efficiency:.1%})",
            f"  utilisation {self.utilisation:.1%} of {self.peak_tflops:g} TFLOPS -> "
            f"{self.achieved_tflops:.1f} TFLOPS, {self.time_s * 1e3:.4g} ms "
            f"(ideal {self.ideal_time_s * 1e3:.4g} ms)",
            f"  alignment: multiples of {self.alignment} "
            f"{'ok' if self.aligned else 'NOT met'}; best at {self.best_alignment} "
            f"{'ok' if self.best_aligned else 'not met'}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def gemm_time_estimate(M: int, N: int, K: int, gpu: str | GpuPerf = "A100",
                       dtype: str = "fp16", tile: tuple[int, int] = (128, 128),
                       blocks_per_sm: int = 1) -> GemmEstimate:
    """Estimate a GEMM ``C (M x N) = A (M x K) @ B (K x N)`` with tile and wave quantization.

    ``gpu`` is "V100", "A100" or "H100" (SXM); ``dtype`` the input type ("fp32", "tf32",
    "fp16", "bf16", "int8", "fp8", or an fpsim format name); ``tile`` the output tile of one
    thread block; ``blocks_per_sm`` how many tiles one SM runs at once.

    >>> r = gemm_time_estimate(1152, 1536, 1024, "A100", "fp16")  # 9 x 12 = 108 tiles
    >>> r.tiles, r.waves, r.utilisation
    (108, 1, 1.0)
    >>> gemm_time_estimate(1152, 1537, 1024, "A100").waves  # one more column: a second wave
    2
    """
    M, N, K = as_int("M", M, 1), as_int("N", N, 1), as_int("K", K, 1)
    if not isinstance(tile, (tuple, list)) or len(tile) != 2:
        raise ValueError(f"tile must be a pair (tile_m, tile_n), got {tile!r}")
    tm, tn = as_int("tile[0]", tile[0], 1), as_int("tile[1]", tile[1], 1)
    bps = as_int("blocks_per_sm", blocks_per_sm, 1)
    g = get_perf_gpu(gpu)
    d = _dtype(dtype)
    peak = peak_tflops(g, d)
    tiles_m, tiles_n = -(-M // tm), -(-N // tn)
    tiles = tiles_m * tiles_n
    concurrent = g.sms * bps
    waves = -(-tiles // concurrent)
    tile_eff = (M * N) / (tiles * tm * tn)
    wave_eff = tiles / (waves * concurrent)
    flops = 2 * M * N * K
    # one wave: `concurrent` tiles of 2 tm tn K operations each, at the whole GPU's peak
    wave_time = 2 * tm * tn * K * concurrent / (peak * 1e12)
    time_s = waves * wave_time
    need, best = alignment(d, g)
    aligned = all(v % need == 0 for v in (M, N, K))
    best_aligned = all(v % best == 0 for v in (M, N, K))
    nbytes = DTYPE_BYTES[d]
    notes = []
    if not aligned:
        bad = [f"{n}={v}" for n, v in (("M", M), ("N", N), ("K", K)) if v % need]
        notes.append(f"{', '.join(bad)} not a multiple of {need} ({ALIGN_BYTES} bytes of "
                     f"{d}): before cuBLAS 11 tensor cores were not used; now slower kernels")
    if d == "fp32":
        notes.append("fp32 runs on the CUDA cores (no tensor cores)")
    return GemmEstimate(
        M, N, K, g.name, d, (tm, tn), bps, g.sms, tiles_m, tiles_n, tiles, concurrent, waves,
        tile_eff, wave_eff, tile_eff * wave_eff, peak, flops, flops / (peak * 1e12), time_s,
        flops / time_s / 1e12, flops / ((M * K + K * N + M * N) * nbytes), need, best,
        aligned, best_aligned, notes)


# -- the roofline: bytes moved, arithmetic intensity, ridge point -------------------------------

def _positive(name: str, v: float) -> float:
    """``v`` as a float, checked finite and > 0 (TypeError for what is not a real number)."""
    if isinstance(v, (bool, str, bytes)) or not isinstance(v, (int, float)) and not hasattr(
            v, "__float__"):
        raise TypeError(f"{name} must be a number, got {v!r}")
    f = float(v)
    if not (math.isfinite(f) and f > 0):
        raise ValueError(f"{name} must be positive and finite, got {v!r}")
    return f


def gemm_bytes(M: int, N: int, K: int, in_bits: float = 16, out_bits: float | None = None
               ) -> float:
    """The fewest bytes a GEMM ``C (M x N) = A (M x K) @ B (K x N)`` moves to and from memory:
    A and B read once at ``in_bits`` per element, C written once at ``out_bits`` (default
    ``in_bits``). Bits may be fractional: a block-scaled format's scales are spread over its
    values (MXFP8 8.25 bits, NVFP4 4.5; see :mod:`fpsim.mx`). A kernel that re-reads its
    operands, or reads a C to add, moves more.

    >>> gemm_bytes(4096, 4096, 4096, 16)  # three 4096 x 4096 bf16 matrices
    100663296.0
    >>> gemm_bytes(4096, 4096, 4096, 8, out_bits=16)  # fp8 in, bf16 out
    67108864.0
    """
    M, N, K = as_int("M", M, 1), as_int("N", N, 1), as_int("K", K, 1)
    bi = _positive("in_bits", in_bits)
    bo = bi if out_bits is None else _positive("out_bits", out_bits)
    return ((M * K + K * N) * bi + M * N * bo) / 8


def arithmetic_intensity(M: int, N: int, K: int, in_bits: float = 16,
                         out_bits: float | None = None) -> float:
    """Operations per byte moved of a GEMM: ``2 M N K / gemm_bytes(M, N, K, in_bits,
    out_bits)``. A square ``n`` GEMM with one format of ``b`` bytes throughout reaches
    ``2 n / (3 b)``; a matrix-vector product (``M = 1``) about ``2 / b`` whatever its size.

    >>> round(arithmetic_intensity(1, 4096, 4096, 16), 4)  # one token through a bf16 layer
    0.9995
    >>> arithmetic_intensity(4096, 4096, 4096, 8) / arithmetic_intensity(4096, 4096, 4096, 16)
    2.0
    """
    M, N, K = as_int("M", M, 1), as_int("N", N, 1), as_int("K", K, 1)
    return 2 * M * N * K / gemm_bytes(M, N, K, in_bits, out_bits)


def ridge_point(peak_tflops: float, bandwidth_tbps: float) -> float:
    """The arithmetic intensity (operations per byte) at which a GPU's memory, delivering
    ``bandwidth_tbps`` (10**12 bytes per second), just keeps its ``peak_tflops`` busy: ``peak /
    bandwidth``. Below it a kernel is memory-bound, above it compute-bound.

    >>> ridge_point(312.0, 1.5)  # A100 bf16 peak, with an assumed 1.5 TB/s
    208.0
    """
    return _positive("peak_tflops", peak_tflops) / _positive("bandwidth_tbps", bandwidth_tbps)


def roofline_tflops(intensity: float, peak_tflops: float, bandwidth_tbps: float) -> float:
    """The roofline: the most TFLOPS a kernel of ``intensity`` operations per byte reaches,
    ``min(peak_tflops, bandwidth_tbps x intensity)``.

    >>> roofline_tflops(100.0, 989.0, 2.0), roofline_tflops(1000.0, 989.0, 2.0)
    (200.0, 989.0)
    """
    ai = _positive("intensity", intensity)
    return min(_positive("peak_tflops", peak_tflops),
               _positive("bandwidth_tbps", bandwidth_tbps) * ai)


@dataclass(frozen=True)
class GemmRoofline:
    """The roofline estimate of one GEMM (:func:`gemm_roofline`): its ``flops`` and the
    ``bytes`` it moves at least, their ratio ``intensity``, the GPU's ``peak_tflops`` and
    ``ridge`` (operations per byte at ``bandwidth_tbps``), the time at peak ``compute_s``, the
    time to move the bytes ``memory_s``, the larger of the two ``time_s``, which side binds
    (``bound``: "compute" or "memory"; "compute" on a tie) and the rate reached
    (``attainable_tflops``)."""

    M: int
    N: int
    K: int
    gpu: str
    dtype: str
    in_bits: float
    out_bits: float
    flops: int
    bytes: float
    intensity: float
    peak_tflops: float
    bandwidth_tbps: float
    ridge: float
    compute_s: float
    memory_s: float
    time_s: float
    bound: str
    attainable_tflops: float

    def __str__(self) -> str:
        return (f"GEMM {self.M} x {self.N} x {self.K} ({self.dtype}, {self.in_bits:g} bits in, "
                f"{self.out_bits:g} out) on {self.gpu} at {self.bandwidth_tbps:g} TB/s: "
                f"{self.intensity:.4g} operations per byte, ridge {self.ridge:.4g}: "
                f"{self.bound}-bound, {self.time_s * 1e6:.4g} us "
                f"({self.attainable_tflops:.4g} of {self.peak_tflops:g} TFLOPS)")


def gemm_roofline(M: int, N: int, K: int, gpu: str | GpuPerf = "H100", dtype: str = "bf16",
                  *, bandwidth_tbps: float, in_bits: float | None = None,
                  out_bits: float | None = None) -> GemmRoofline:
    """The roofline of a GEMM on ``gpu``'s tensor cores for ``dtype`` (its dense peak,
    :func:`peak_tflops`) fed by ``bandwidth_tbps`` TB/s of memory, which the caller gives:
    fpsim holds no bandwidths. ``in_bits`` defaults to the dtype's storage (tf32 is read as
    fp32, 32 bits), ``out_bits`` to ``in_bits``; a block-scaled input passes its bits per value
    (``dtype="fp8", in_bits=8.25`` for MXFP8 at the fp8 rate). Tile and wave quantization are
    :func:`gemm_time_estimate`'s; here the compute side runs at peak.

    >>> r = gemm_roofline(4096, 4096, 4096, "H100", "fp8", bandwidth_tbps=2.0, out_bits=16)
    >>> r.bound, round(r.intensity, 1), round(r.ridge, 1)
    ('compute', 2048.0, 989.5)
    >>> gemm_roofline(16, 4096, 4096, "H100", "fp8", bandwidth_tbps=2.0).bound  # decode
    'memory'
    """
    M, N, K = as_int("M", M, 1), as_int("N", N, 1), as_int("K", K, 1)
    g = get_perf_gpu(gpu)
    d = _dtype(dtype)
    peak = peak_tflops(g, d)
    bw = _positive("bandwidth_tbps", bandwidth_tbps)
    bi = 8.0 * DTYPE_BYTES[d] if in_bits is None else _positive("in_bits", in_bits)
    bo = bi if out_bits is None else _positive("out_bits", out_bits)
    flops = 2 * M * N * K
    nbytes = gemm_bytes(M, N, K, bi, bo)
    compute_s = flops / (peak * 1e12)
    memory_s = nbytes / (bw * 1e12)
    time_s = max(compute_s, memory_s)
    return GemmRoofline(M, N, K, g.name, d, bi, bo, flops, nbytes, flops / nbytes, peak, bw,
                        ridge_point(peak, bw), compute_s, memory_s, time_s,
                        "compute" if compute_s >= memory_s else "memory",
                        flops / time_s / 1e12)
