"""Peak memory of the arithmetic and of round / cast: the inputs, the output and one chunk's
work arrays, for float32 and float16 operands alike, on every path (the native fp16 / bf16 /
fp32 one, the float32 path (fma's too), the general kernel, directed and stochastic modes;
round and cast's float-domain, stochastic, bf16, one-addition and byte-table paths), on
N(0, 1) data and on wide-range data (overflow, subnormals, infinities and NaNs: the paths'
patching branches). Measured with tracemalloc, which NumPy reports its array allocations to:
a memory test, not a timed one. The chunks are shrunk to 2048 elements (the drivers read
the chunk size per call) so that the bound, CHUNK_BYTES = 24 float64 arrays of one chunk
(393 kB; the most measured is about 19, stochastic div's general path), is 0.4 of one
full-size float16 temporary of the N = 2**19 elements and 1/10 of a float64 one; each call
runs once on a slice first (its caches and tables, allocated once per process, are not per
call). At full size (1e7 float32 or float16 operands, 65536-element chunks) every op and
round / cast here holds 0.1-5 MB beyond its inputs and output."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import fpsim
from fpsim import arithmetic
from fpsim.rounding import kernel

N = 1 << 19  # a full-size float16 temporary alone is 1 MB
CHUNK = 1 << 11  # elements per chunk, rounding's and arithmetic's, in these tests
CHUNK_BYTES = 24 * 8 * CHUNK  # what one chunk may hold: 24 float64 work arrays


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch) -> None:
    monkeypatch.setattr(kernel, "CHUNK", CHUNK)
    monkeypatch.setattr(arithmetic, "_CHUNK", CHUNK)


CASES = [("fp16", "nearest_even"), ("bf16", "nearest_even"), ("fp32", "nearest_even"),
         ("fp8_e4m3", "nearest_even"), ("e5m7", "nearest_even"), ("fp16", "up"),
         ("fp16", "stochastic")]


def peak_beyond_output(fn, warm=None) -> tuple[int, int]:
    """Peak bytes traced during ``fn()`` beyond its output, and the output's bytes; ``warm``
    runs first, untraced (the same path on a slice: caches and tables)."""
    if warm is not None:
        warm()
    tracemalloc.start()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - out.nbytes, out.nbytes


def _data(dtype, wide: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(N)
    if wide:  # 2**[-40, 40]: beyond fp16's range both ways; and a few infinities and NaNs
        x *= np.ldexp(1.0, rng.integers(-40, 41, N))
        x[::100_003] = np.inf
        x[7::100_003] = np.nan
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.fixture(scope="module", params=[np.float32, np.float16], ids=["float32", "float16"])
def dtype(request):
    return request.param


@pytest.fixture(scope="module")
def operands(dtype):
    return tuple(_data(dtype, False, seed) for seed in range(3))


@pytest.fixture(scope="module")
def wide_operands(dtype):
    return tuple(_data(dtype, True, seed) for seed in range(3))


def test_the_bound_is_below_one_temporary() -> None:
    assert CHUNK_BYTES < N * 2  # a full-size float16 array would break it


@pytest.mark.parametrize("fmt,mode", CASES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt", "fma"])
def test_arithmetic_holds_one_chunk(operands, op: str, fmt: str, mode: str) -> None:
    a, b, c = operands
    args = {"sqrt": (np.abs(a),), "fma": (a, b, c)}.get(op, (a, b))
    fn = getattr(fpsim, op)
    extra, out = peak_beyond_output(lambda: fn(*args, fmt, mode, rng=0),
                                    lambda: fn(*(x[:3 * CHUNK] for x in args), fmt, mode, rng=0))
    assert out == N * 8
    assert extra <= CHUNK_BYTES, f"{op} {fmt} {mode}: {extra / 1e6:.1f} MB beyond the output"


@pytest.mark.parametrize("op", ["add", "mul", "fma"])
def test_arithmetic_on_wide_data_holds_one_chunk(wide_operands, op: str) -> None:
    """Chunks with overflow, infinities and NaNs (the float32 path hands them to the
    general kernel, chunk by chunk)."""
    a, b, c = wide_operands
    cases = [("fp16", "nearest_even"), ("bf16", "nearest_even"), ("fp8_e4m3", "nearest_even"),
             ("e5m7", "up")]
    if a.dtype == np.float16:  # (a third of them inf: every chunk takes the general path)
        cases = cases[:1]
    for fmt, mode in cases:
        args = (a, b, c) if op == "fma" else (a, b)
        fn = getattr(fpsim, op)
        with np.errstate(all="ignore"):
            extra, _ = peak_beyond_output(
                lambda: fn(*args, fmt, mode),  # noqa: B023
                lambda: fn(*(x[:3 * CHUNK] for x in args), fmt, mode))  # noqa: B023
        assert extra <= CHUNK_BYTES, f"{op} {fmt} {mode}: {extra / 1e6:.1f} MB"


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz",
                                 "e5m7"])
@pytest.mark.parametrize("fn", [fpsim.round, fpsim.cast], ids=["round", "cast"])
@pytest.mark.parametrize("wide", [False, True], ids=["normal", "wide"])
def test_round_and_cast_hold_one_chunk(operands, wide_operands, fn, fmt: str,
                                       wide: bool) -> None:
    a = (wide_operands if wide else operands)[0]
    if wide and fn is fpsim.cast:
        a = np.where(np.isnan(a), 0, a)  # (fp8 casts store NaN; some formats have none)
    for mode in ("nearest_even", "down", "stochastic"):
        with np.errstate(all="ignore"):
            extra, _ = peak_beyond_output(lambda mode=mode: fn(a, fmt, mode, rng=0),
                                          lambda mode=mode: fn(a[:3 * CHUNK], fmt, mode, rng=0))
        assert extra <= CHUNK_BYTES, f"{fn.__name__} {fmt} {mode}: {extra / 1e6:.1f} MB"
