"""Memory arithmetic of training: ZeRO model states, activations per format, checkpointing.

ZeRO (Rajbhandari et al., SC'20), mixed-precision Adam with ``Psi`` parameters: fp16
parameters 2 Psi bytes, fp16 gradients 2 Psi, optimizer states K Psi (K = 12: fp32 master
parameters, momentum and variance). Per data-parallel rank, ``N_d`` ranks:

======  ==================  ==============================
stage   partitioned         bytes per rank
======  ==================  ==============================
0       nothing (baseline)  (2 + 2 + K) Psi
1       P_os                2 Psi + 2 Psi + K Psi / N_d
2       P_os+g              2 Psi + (2 + K) Psi / N_d
3       P_os+g+p            (2 + 2 + K) Psi / N_d
======  ==================  ==============================

Communication per step and rank: 2 Psi elements for stages 0-2 (reduce-scatter plus
all-gather, the volume of one all-reduce), 3 Psi for stage 3 (parameters all-gathered in the
forward and again in the backward pass, gradients reduce-scattered). GB is 10**9 bytes, as in
the paper's Table 1; GiB is 2**30.

Gradient checkpointing (Chen et al. 2016) with ``k`` segments of an ``n``-layer chain: the
peak holds the ``k`` segment inputs plus the activations of the segment being recomputed,
``k + ceil(n / k)`` layer activations (in units of one layer's output); the minimum over k is
``ceil(2 sqrt(n))``, reached near ``k = sqrt(n)``; without checkpointing it is ``n``.
:func:`checkpoint_sweep` measures it: the chain run once per segment count under the memory
meter, next to the formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from .checks import as_int
from .formats import Format, IntFormat, get_format
from .mx.formats import MX_FORMATS, MXFormat
from .zero_stages import STAGE_NAMES, ZERO_STAGES, as_zero_stage

__all__ = [
    "ZERO_STAGES",
    "zero_model_state_bytes",
    "zero_table",
    "format_zero_table",
    "zero_communication_volume",
    "zero_communication_bytes",
    "fits_on_gpu",
    "activation_bytes",
    "tensor_bytes",
    "checkpoint_peak_activations",
    "optimal_checkpoint_segments",
    "memory_report",
]

GB = 10**9
GIB = 2**30


def _positive_number(name: str, v) -> Fraction:
    """``v`` as an exact Fraction (floats are exact binary fractions), checked > 0."""
    if isinstance(v, (bool, str, bytes)):
        raise TypeError(f"{name} must be a number, got {v!r}")
    if isinstance(v, (int, Fraction)):
        f = Fraction(v)
    else:
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {v!r}") from None
        if not math.isfinite(fv):
            raise ValueError(f"{name} must be positive and finite, got {v!r}")
        f = Fraction(fv)
    if not f > 0:
        raise ValueError(f"{name} must be positive and finite, got {v!r}")
    return f


def _param_count(name: str, v) -> Fraction:
    """A count of parameters or elements: positive, finite and whole (``7.5e9`` is fine,
    ``1.5`` is not)."""
    f = _positive_number(name, v)
    if f.denominator != 1:
        raise ValueError(f"{name} must be a whole number, got {v!r}")
    return f


def _model_state_exact(psi: Fraction, stage: int, nd: int, k: Fraction) -> Fraction:
    if stage == 0:
        return (4 + k) * psi
    if stage == 1:
        return 4 * psi + k * psi / nd
    if stage == 2:
        return 2 * psi + (2 + k) * psi / nd
    return (4 + k) * psi / nd


def zero_model_state_bytes(num_params: float, stage: int, dp_degree: int, k: float = 12
                           ) -> float:
    """Model-state bytes per data-parallel rank under ZeRO ``stage`` (0 = plain data parallel).

    >>> zero_model_state_bytes(7.5e9, 0, 64) / 1e9, zero_model_state_bytes(7.5e9, 3, 64) / 1e9
    (120.0, 1.875)
    """
    psi = _param_count("num_params", num_params)
    kk = _positive_number("k", k) if k != 0 else Fraction(0)
    n_stage = as_zero_stage(stage)  # checked in the order of the arguments
    return float(_model_state_exact(psi, n_stage, as_int("dp_degree", dp_degree, 1), kk))


def zero_table(num_params_list: Iterable[float] = (7.5e9, 128e9, 1e12),
               dp_degrees: Iterable[int] = (1, 4, 16, 64, 256, 1024), k: float = 12
               ) -> dict[float, dict[int, tuple[float, float, float]]]:
    """The ZeRO paper's Table 1: ``table[num_params][dp_degree] = (P_os, P_os+g, P_os+g+p)``
    per-rank model-state memory in GB (10**9 bytes), unrounded.

    >>> t = zero_table([7.5e9], [4])
    >>> t[7.5e9][4]
    (52.5, 41.25, 30.0)
    """
    table: dict[float, dict[int, tuple[float, float, float]]] = {}
    for psi in num_params_list:
        row = {}
        for nd in dp_degrees:
            row[int(nd)] = tuple(zero_model_state_bytes(psi, s, nd, k) / GB for s in (1, 2, 3))
        table[psi] = row
    return table


def _fmt_params(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= div:
            return f"{n / div:g}{unit}"
    return f"{n:g}"


def format_zero_table(num_params_list: Sequence[float] = (7.5e9, 128e9, 1e12),
                      dp_degrees: Sequence[int] = (1, 4, 16, 64, 256, 1024), k: float = 12
                      ) -> str:
    """Table 1 of the ZeRO paper as text (GB per rank, 6 significant digits).

    >>> print(format_zero_table([7.5e9], [1, 64]))  # doctest: +NORMALIZE_WHITESPACE
    N_d   7.5B P_os  7.5B P_os+g  7.5B P_os+g+p
    1     120        120          120
    64    31.4062    16.6406      1.875
    """
    t = zero_table(num_params_list, dp_degrees, k)
    head = ["N_d"] + [f"{_fmt_params(p)} {STAGE_NAMES[s]}" for p in num_params_list
                      for s in (1, 2, 3)]
    rows = [[str(nd)] + [f"{v:.6g}" for p in num_params_list for v in t[p][nd]]
            for nd in dp_degrees]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [head] + rows)


def zero_communication_volume(num_params: float, stage: int) -> float:
    """Elements communicated per rank and step: 2 Psi for stages 0-2, 3 Psi for stage 3.

    >>> zero_communication_volume(1e9, 2), zero_communication_volume(1e9, 3)
    (2000000000.0, 3000000000.0)
    """
    psi = _param_count("num_params", num_params)
    return float((3 if as_zero_stage(stage) == 3 else 2) * psi)


def zero_communication_bytes(num_params: float, stage: int, bytes_per_element: float = 2
                             ) -> float:
    """Bytes communicated per rank and step (fp16 / bf16 elements: 2 bytes each;
    ``bytes_per_element`` may be fractional, e.g. 0.5 for packed 4-bit elements).

    >>> zero_communication_bytes(1e9, 3) / 1e9
    6.0
    """
    width = _positive_number("bytes_per_element", bytes_per_element)
    return float(Fraction(zero_communication_volume(num_params, stage)) * width)


def fits_on_gpu(num_params: float, stage: int, dp_degree: int, gpu_memory_gb: float = 80,
                k: float = 12) -> bool:
    """Whether the model states alone fit in ``gpu_memory_gb`` GB (10**9 bytes) per rank;
    activations, buffers and fragmentation come on top.

    >>> fits_on_gpu(7.5e9, 0, 64), fits_on_gpu(7.5e9, 1, 64)
    (False, True)
    """
    cap = _positive_number("gpu_memory_gb", gpu_memory_gb)
    return zero_model_state_bytes(num_params, stage, dp_degree, k) <= float(cap) * GB


def _storage_bits(fmt: Format | IntFormat | str) -> int:
    return get_format(fmt).bits


def activation_bytes(shapes: Iterable[Sequence[int]], fmt: Format | IntFormat | str,
                     packed: bool = False) -> int:
    """Bytes to store activations of the given shapes in ``fmt``: each element takes the
    format's width rounded up to whole bytes (how fp6 / fp4 / int4 sit in NumPy and ml_dtypes
    arrays), or exactly its bits with ``packed=True`` (rounded up to a byte per tensor).

    >>> activation_bytes([(32, 1024), (32, 4096)], "bf16"), activation_bytes([(8,)], "fp4")
    (327680, 8)
    >>> activation_bytes([(8,)], "fp4", packed=True)
    4
    """
    bits = _storage_bits(fmt)
    total = 0
    for shp in shapes:
        try:  # each dimension: what range() takes, >= 0
            dims = tuple(as_int("a dimension", d, 0) for d in shp)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"a shape must be a sequence of non-negative ints, got "
                            f"{shp!r}") from None
        n = math.prod(dims)
        total += (n * bits + 7) // 8 if packed else n * ((bits + 7) // 8)
    return total


def _dims(shape: Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise TypeError(f"shape must be a sequence of non-negative ints, got {shape!r}")
    try:  # each dimension: what range() takes, >= 0
        return tuple(as_int("a dimension", d, 0) for d in shape)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"shape must be a sequence of non-negative ints, got "
                        f"{shape!r}") from None


def tensor_bytes(shape: Sequence[int], fmt: Format | IntFormat | MXFormat | str, *,
                 packed: bool = True, block_size: int | None = None,
                 per_tensor_scale: bool = False) -> int:
    """Bytes of one tensor of ``shape`` stored in ``fmt``, what moving it through memory costs.

    - A plain format ("fp32", "bf16", "fp8_e4m3", "fp4_e2m1", "int8", ...): its ``bits`` per
      element, packed and rounded up to a whole byte for the tensor; ``packed=False``: whole
      bytes per element, as NumPy and ml_dtypes arrays hold them (an fp4 or fp6 value takes a
      byte). tf32 is stored as fp32 (32 bits): it is the form in which tensor cores read fp32
      data, not a storage format.
    - A block-scaled format (:data:`fpsim.mx.MX_FORMATS`: "mxfp8_e4m3", "mxfp4", "nvfp4", ...,
      or an :class:`~fpsim.mx.MXFormat`): blocks of ``block_size`` (the format's, 32 or 16, by
      default) along the last axis, the last block of each row padded with zeros; the elements
      (padding included) packed as above, one byte per block scale (E8M0 or E4M3), and 4 bytes
      for NVFP4's fp32 per-tensor scale with ``per_tensor_scale=True``. This is
      :attr:`fpsim.mx.MXArray.nbytes` of the quantized tensor, without quantizing it.

    >>> tensor_bytes((4096, 4096), "bf16"), tensor_bytes((4096, 4096), "mxfp8_e4m3")
    (33554432, 17301504)
    >>> tensor_bytes((3, 40), "mxfp4")  # two blocks a row, the second padded: 3 * (32 + 2)
    102
    >>> tensor_bytes((16,), "nvfp4", per_tensor_scale=True), tensor_bytes((8,), "fp4_e2m1",
    ...                                                                  packed=False)
    (13, 8)
    """
    dims = _dims(shape)
    n = math.prod(dims)
    mxf = fmt if isinstance(fmt, MXFormat) else (
        MX_FORMATS.get(fmt.strip().lower()) if isinstance(fmt, str) else None)
    if mxf is None:
        if block_size is not None or per_tensor_scale:
            raise ValueError(f"block_size and per_tensor_scale apply to the block-scaled "
                             f"formats ({', '.join(MX_FORMATS)}), not to {fmt!r}")
        f = get_format(fmt)
        bits = 32 if f.name == "tf32" else f.bits
        return (n * bits + 7) // 8 if packed else n * ((bits + 7) // 8)
    if not dims:
        raise ValueError("a block-scaled tensor needs at least one axis (its blocks run along "
                         "the last one), got shape ()")
    bs = mxf.block_size if block_size is None else as_int("block_size", block_size, 1)
    if per_tensor_scale and mxf.scale != "e4m3":
        raise ValueError(f"per_tensor_scale is NVFP4's fp32 global scale; {mxf.name} has none")
    blocks = (n // dims[-1] if dims[-1] else 0) * -(-dims[-1] // bs)
    elems = blocks * bs
    stored = (elems * mxf.elem_bits + 7) // 8 if packed else elems
    return stored + blocks + (4 if per_tensor_scale else 0)


def checkpoint_peak_activations(n_layers: int, segments: int) -> int:
    """Peak stored layer activations with ``segments`` checkpointed segments:
    ``segments + ceil(n_layers / segments)`` (segment inputs kept, one segment recomputed).

    >>> checkpoint_peak_activations(100, 10), checkpoint_peak_activations(100, 1)
    (20, 101)
    """
    n = as_int("n_layers", n_layers, 1)
    k = as_int("segments", segments, 1)
    if k > n:
        raise ValueError(f"segments must be in [1, n_layers={n}], got {k}")
    return k + -(-n // k)


def optimal_checkpoint_segments(n_layers: int) -> int:
    """The segment count minimising :func:`checkpoint_peak_activations`; several counts
    often tie (for 1000 layers every k in 28..36 gives 64), and the one nearest sqrt(n) is
    returned (the smaller on a tie).

    >>> optimal_checkpoint_segments(100), optimal_checkpoint_segments(1000)
    (10, 32)
    """
    n = as_int("n_layers", n_layers, 1)
    # k + ceil(n / k) is least (ceil(2 sqrt n)) at isqrt(n) or isqrt(n) + 1, and any other
    # minimiser is farther from sqrt(n): compare those two, in integers (a scan of every k
    # hung on large n; tests/test_memory_calc.py checks the two against the scan)
    a = math.isqrt(n)  # >= 1
    at_a, at_next = a + -(-n // a), a + 1 + -(-n // (a + 1))
    if at_a != at_next:
        return a if at_a < at_next else a + 1
    return a if n <= a * a + a else a + 1  # sqrt(n) < a + 1/2 exactly when n <= a^2 + a


def memory_report(num_params: float, gpus: int, stage: int | None = None, k: float = 12,
                  gpu_memory_gb: float = 80) -> str:
    """The text ``fpsim memory`` prints (the command: :mod:`fpsim.cli.memory`).

    >>> print(memory_report(7.5e9, 64, stage=3).splitlines()[-1])
    3      P_os+g+p  1.875  1.746           2.25e+10              45  yes
    """
    psi = float(_param_count("num_params", num_params))
    gpus = as_int("gpus", gpus, 1)
    cap = float(_positive_number("gpu_memory_gb", gpu_memory_gb))
    kk = float(_positive_number("k", k)) if k != 0 else 0.0
    stages = ZERO_STAGES if stage is None else (as_zero_stage(stage),)
    head = ["stage", "split", "GB", "GiB", "comm/step (elems)", "comm GB (fp16)",
            f"fits {cap:g} GB"]
    rows = []
    for s in stages:
        b = zero_model_state_bytes(psi, s, gpus, kk)
        c = zero_communication_volume(psi, s)
        fits = "yes" if fits_on_gpu(psi, s, gpus, cap, kk) else "no"
        rows.append([str(s), STAGE_NAMES[s], f"{b / GB:.4g}", f"{b / GIB:.4g}", f"{c:.4g}",
                     f"{2 * c / GB:.4g}", fits])
    # every column as wide as its widest cell; text left-aligned, numbers right-aligned
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    right = [False, False, True, True, True, True, False]

    def line(cells):
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(cells, widths, right, strict=True)).rstrip()

    lines = [f"model states per rank: {psi:g} parameters, {gpus} data-parallel ranks, "
             f"K = {kk:g} (mixed-precision Adam: 2 + 2 + K bytes per parameter)"]
    return "\n".join(lines + [line(r) for r in [head] + rows])


# -- measured memory: the meter of the autograd engine, ZeRO measured against the formulas ----

__all__ += ["meter", "zero_measured_vs_formula"]


def meter(model=None, optimizer=None, params=None):
    """A :class:`fpsim.autograd.memory_meter.MemoryMeter`: use it as ``with
    fpsim.memory.meter(model, optimizer) as m:`` and read ``m.report()`` (bytes of parameters,
    master weights, gradients, optimizer states and saved activations, by format, with the
    peak).

    >>> import fpsim
    >>> from fpsim.autograd import Tensor
    >>> x = Tensor([[1.0, 2.0]], "fp16", requires_grad=True)
    >>> with meter() as m:
    ...     y = x.exp().sum()          # exp keeps its fp16 output: 4 bytes
    >>> m.report().max["activations"]
    4
    """
    from .autograd.memory_meter import MemoryMeter

    return MemoryMeter(model, optimizer, params)


def zero_measured_vs_formula(engine, rank: int = 0) -> dict:
    """One rank of a :class:`fpsim.distributed.ZeroEngine` against the ZeRO formulas: the
    model-state bytes it holds and the elements it sent in its last step, next to
    :func:`zero_model_state_bytes` (K = 12) and the communication volume, both under the ring
    convention (``2 (N-1)/N Psi`` or ``3 (N-1)/N Psi``) and as the paper writes it (2 or 3 Psi).
    Psi is the flat buffer the ranks hold: the parameters padded to a multiple of N
    (``engine.padded``; the same as ``engine.num_params`` when N divides it). ``rank`` must
    be one of the engine's local ranks.

    >>> from fpsim import nn
    >>> from fpsim.distributed import ZeroEngine
    >>> eng = ZeroEngine(lambda: nn.Linear(3, 2, rng=0), stage=3, world_size=4)
    >>> d = zero_measured_vs_formula(eng)
    >>> d["measured_bytes"], d["formula_bytes"]
    (32, 32.0)
    """
    if not all(hasattr(engine, a) for a in ("padded", "world_size", "stage", "ranks",
                                             "model_state_bytes")):
        raise TypeError(f"zero_measured_vs_formula: engine must be a "
                        f"fpsim.distributed.ZeroEngine, got {type(engine).__name__} {engine!r}")
    psi, n, stage = engine.padded, engine.world_size, engine.stage
    held = engine.model_state_bytes(rank)
    local = [rk.rank for rk in engine.ranks].index(rank)
    factor = 3 if stage == 3 else 2
    return {
        "num_params": engine.num_params, "padded_params": psi, "stage": stage,
        "world_size": n,
        "measured_bytes": held["total"], "device_bytes": held["device"],
        "host_bytes": held["host"],
        "formula_bytes": zero_model_state_bytes(psi, stage, n, 12),
        "measured_comm_elements": engine.last_step_comm[local],
        "ring_comm_elements": factor * (n - 1) * psi / n,
        "paper_comm_elements": zero_communication_volume(psi, stage),
    }


# -- measured checkpointing: the sweep over segment counts ----------------------------------

__all__ += ["CheckpointPoint", "checkpoint_sweep"]


class CheckpointPoint(NamedTuple):
    """One row of :func:`checkpoint_sweep`: ``segments`` k, the measured ``peak`` of saved
    activations and Chen et al.'s ``formula`` k + ceil(n/k), both in layer outputs, and the
    ``recomputed`` share of the forward FLOPs run again in backward."""

    segments: int
    peak: float
    formula: int
    recomputed: float


def checkpoint_sweep(layers: Sequence[Callable[[Any], Any]], x: Any,
                     segments: Iterable[int] | None = None) -> list[CheckpointPoint]:
    """Gradient checkpointing measured: for each segment count k (default 1..n), run
    ``checkpoint_sequential(layers, k, x).sum().backward()`` under :func:`meter` and return
    one :class:`CheckpointPoint` per k. ``layers`` is a chain of n modules of equal width
    (e.g. ``Linear + ReLU`` blocks) and ``x`` its input :class:`~fpsim.autograd.Tensor`; the
    peak is in units of one layer output, ``x``'s bytes. The parameters' gradients are left as
    they were (each run starts from none; the backward passes do not accumulate into them).

    >>> import numpy as np
    >>> from fpsim import nn
    >>> from fpsim.autograd import Tensor
    >>> layers = [nn.Sequential(nn.Linear(8, 8, rng=i), nn.ReLU()) for i in range(4)]
    >>> for row in checkpoint_sweep(layers, Tensor(np.ones((2, 8)))):
    ...     print(row.segments, row.peak, row.formula, f"{row.recomputed:.0%}")
    1 5.0 5 0%
    2 4.0 4 50%
    3 4.0 5 75%
    4 5.0 5 75%
    """
    from .autograd.checkpoint import checkpoint_sequential
    from .autograd.tensor import Tensor
    from .nn import Sequential

    chain = list(layers) if isinstance(layers, (Sequence, Sequential)) else None
    if not chain or not all(callable(f) for f in chain):
        raise TypeError("layers must be a non-empty sequence of modules (or callables), got "
                        f"{layers!r}")
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be an fpsim.autograd.Tensor, got {type(x).__name__}")
    n = len(chain)
    if hasattr(segments, "__index__") and getattr(segments, "ndim", 0) == 0:
        segments = [segments]  # one count (an int, a 0-d array...)
    if segments is not None and (isinstance(segments, (str, bytes))
                                 or not isinstance(segments, Iterable)):
        raise TypeError(f"segments must be a count or a list of counts, got "
                        f"{type(segments).__name__} {segments!r}")
    ks = list(range(1, n + 1)) if segments is None else [
        as_int("segments", k, 1) for k in segments]
    if not ks or max(ks) > n:
        raise ValueError(f"segments must be a non-empty list of counts in [1, n_layers={n}], "
                         f"got {ks}")
    model = Sequential(*chain) if not isinstance(layers, Sequential) else layers
    params = list(model.parameters())
    saved = [p.grad for p in params]
    unit = x.data.nbytes
    rows = []
    try:
        for k in ks:
            for p in params:
                p.grad = None
            with meter(model) as m:
                checkpoint_sequential(chain, k, x).sum().backward()
            r = m.report()
            rows.append(CheckpointPoint(k, r.max["activations"] / unit,
                                        checkpoint_peak_activations(n, k),
                                        r.recompute_overhead))
    finally:
        for p, g in zip(params, saved, strict=True):
            p.grad = g
    return rows
