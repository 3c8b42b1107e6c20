"""Peak memory of the arithmetic and of round / cast: the inputs, the output and one chunk's
work arrays, for float32 and float16 operands alike, on every path (the native fp16 / bf16 /
fp32 one, the general kernel, directed modes). Measured with tracemalloc, which NumPy reports
its array allocations to: a memory test, not a timed one."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import fpsim
from fpsim import arithmetic, rounding

N = 1 << 22  # 4.2e6 elements: a full-size float16 temporary alone is 8 MB
# what one chunk may hold: 8 float64 work arrays of the larger chunk (about 3 are used)
CHUNK_BYTES = 8 * 8 * max(arithmetic._CHUNK, rounding.CHUNK)
CASES = [("fp16", "nearest_even"), ("bf16", "nearest_even"), ("fp32", "nearest_even"),
         ("fp8_e4m3", "nearest_even"), ("fp16", "up")]


def peak_beyond_output(fn) -> tuple[int, int]:
    tracemalloc.start()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - out.nbytes, out.nbytes


@pytest.fixture(scope="module", params=[np.float32, np.float16], ids=["float32", "float16"])
def operands(request):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(N).astype(request.param) for _ in range(3))
    return a, b, c


def test_the_bound_is_below_one_temporary() -> None:
    assert CHUNK_BYTES < N * 2  # a full-size float16 array would break it


@pytest.mark.parametrize("fmt,mode", CASES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt", "fma"])
def test_arithmetic_holds_one_chunk(operands, op: str, fmt: str, mode: str) -> None:
    a, b, c = operands
    args = {"sqrt": (np.abs(a),), "fma": (a, b, c)}.get(op, (a, b))
    extra, out = peak_beyond_output(lambda: getattr(fpsim, op)(*args, fmt, mode))
    assert out == N * 8
    assert extra <= CHUNK_BYTES, f"{op} {fmt} {mode}: {extra / 1e6:.1f} MB beyond the output"


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "e5m7"])
@pytest.mark.parametrize("fn", [fpsim.round, fpsim.cast], ids=["round", "cast"])
def test_round_and_cast_hold_one_chunk(operands, fn, fmt: str) -> None:
    a = operands[0]
    for mode in ("nearest_even", "down"):
        extra, _ = peak_beyond_output(lambda mode=mode: fn(a, fmt, mode))
        assert extra <= CHUNK_BYTES, f"{fn.__name__} {fmt} {mode}: {extra / 1e6:.1f} MB"
