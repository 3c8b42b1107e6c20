"""fpsim.tensorcore.perf: tile / wave quantization and the peak table, against cases worked out
by hand from the rules of NVIDIA's Matrix Multiplication Background guide (docs/facts.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fpsim.tensorcore.perf import alignment, gemm_time_estimate, get_perf_gpu, peak_tflops
from tests.intlike import Count as _Count


def test_a100_fp16_4096_cube_by_hand():
    r = gemm_time_estimate(4096, 4096, 4096, "A100", "fp16")
    # 4096 / 128 = 32 tiles a side: 1024 tiles; 108 SMs: 9 full waves (972) + 52 = 10 waves
    assert (r.tiles_m, r.tiles_n, r.tiles, r.concurrent, r.waves) == (32, 32, 1024, 108, 10)
    assert r.tile_efficiency == 1.0
    assert r.wave_efficiency == 1024 / 1080 == r.utilisation
    assert r.flops == 137_438_953_472  # 2 * 4096**3
    # one wave: 108 tiles x 2 * 128 * 128 * 4096 operations at 312e12 per second
    assert math.isclose(r.time_s, 10 * 108 * 134_217_728 / 312e12, rel_tol=1e-12)
    assert math.isclose(r.ideal_time_s, 137_438_953_472 / 312e12, rel_tol=1e-12)
    assert math.isclose(r.achieved_tflops, 312 * 1024 / 1080, rel_tol=1e-12)
    assert math.isclose(r.arithmetic_intensity, 4096 / 3, rel_tol=1e-12)  # 2n^3 / (3 n^2 * 2 B)
    assert r.aligned and r.best_aligned and not r.notes


def test_tile_quantization_partial_tiles_cost_full_tiles():
    r = gemm_time_estimate(129, 129, 64, "H100", "bf16")
    assert (r.tiles_m, r.tiles_n, r.tiles, r.waves) == (2, 2, 4, 1)
    assert r.tile_efficiency == 129 * 129 / (4 * 128 * 128)
    assert r.wave_efficiency == 4 / 132
    assert r.utilisation == r.tile_efficiency * r.wave_efficiency
    assert math.isclose(r.time_s, 132 * 2 * 128 * 128 * 64 / 989e12, rel_tol=1e-12)
    # one row more than a tile doubles the tiles of that dimension
    assert gemm_time_estimate(128, 128, 64, "H100", "bf16").tiles == 1


@pytest.mark.parametrize("gpu, sms", [("A100", 108), ("H100", 132), ("V100", 80)])
def test_wave_quantization_at_the_sm_count(gpu, sms):
    full = gemm_time_estimate(128, 128 * sms, 512, gpu, "fp16")  # exactly one wave
    assert (full.tiles, full.waves, full.utilisation) == (sms, 1, 1.0)
    over = gemm_time_estimate(256, 128 * sms, 512, gpu, "fp16")
    assert (over.tiles, over.waves, over.utilisation) == (2 * sms, 2, 1.0)
    one_more = gemm_time_estimate(128, 128 * sms + 1, 512, gpu, "fp16")  # a 2nd, near-empty wave
    assert (one_more.tiles, one_more.waves) == (sms + 1, 2)
    assert one_more.wave_efficiency == (sms + 1) / (2 * sms)
    assert one_more.time_s == 2 * full.time_s


def test_blocks_per_sm_and_tile_shape():
    r = gemm_time_estimate(128, 128 * 216, 256, "A100", "fp16", blocks_per_sm=2)
    assert (r.concurrent, r.waves, r.utilisation) == (216, 1, 1.0)
    r = gemm_time_estimate(1000, 1000, 256, "A100", "tf32", tile=(256, 64))
    assert (r.tiles_m, r.tiles_n, r.tiles) == (4, 16, 64)
    assert r.tile_efficiency == 1000 * 1000 / (64 * 256 * 64)
    assert r.wave_efficiency == 64 / 108


def test_peak_table_from_the_guide():
    table = {"V100": {"fp32": 15.7, "fp16": 125},
             "A100": {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312, "int8": 624},
             "H100": {"fp32": 67, "tf32": 495, "fp16": 989, "bf16": 989, "fp8": 1979}}
    for gpu, peaks in table.items():
        for dtype, v in peaks.items():
            assert peak_tflops(gpu, dtype) == v
    assert peak_tflops("H100 SXM", "fp8_e4m3") == peak_tflops("hopper", "e5m2") == 1979
    assert peak_tflops("a100", "half") == 312
    assert [get_perf_gpu(g).sms for g in ("V100", "A100", "H100")] == [80, 108, 132]


def test_alignment_rule():
    assert alignment("fp16") == (8, 8) and alignment("bf16") == (8, 8)
    assert alignment("int8") == (16, 16) and alignment("fp8") == (16, 16)
    assert alignment("tf32") == (4, 4) and alignment("fp32") == (1, 1)
    assert alignment("fp16", "A100") == (8, 64)  # 128 bytes on A100
    assert alignment("int8", "A100") == (16, 128) and alignment("tf32", "A100") == (4, 32)
    assert alignment("fp16", "H100") == (8, 8)
    r = gemm_time_estimate(4096, 4096, 4095, "A100", "fp16")
    assert not r.aligned and not r.best_aligned
    assert "K=4095 not a multiple of 8" in r.notes[0]
    r = gemm_time_estimate(4104, 4096, 4096, "A100", "fp16")  # 4104 = 8 * 513, not 64 * k
    assert r.aligned and not r.best_aligned
    r = gemm_time_estimate(1000, 1000, 1000, "A100", "int8")
    assert not r.aligned  # 1000 = 16 * 62.5
    assert "fp32 runs on the CUDA cores" in gemm_time_estimate(8, 8, 8, "V100", "fp32").notes[0]


def test_report_text():
    text = str(gemm_time_estimate(4096, 4096, 4095, "A100", "fp16"))
    assert "1024 (tile efficiency 100.0%)" in text
    assert "10 (wave efficiency 94.8%)" in text
    assert "multiples of 8 NOT met" in text


@pytest.mark.parametrize("args, kwargs, match", [
    ((64, 64, 64, "T4"), {}, "no performance data for GPU 'T4'; valid: V100, A100, H100"),
    ((64, 64, 64, "V100", "bf16"), {}, "V100 has no bf16 peak.*valid for V100: fp32, fp16"),
    ((64, 64, 64, "H100", "int8"), {}, "H100 has no int8 peak"),
    ((64, 64, 64, "A100", "fp64"), {}, "unknown dtype 'fp64'; valid: fp32, tf32"),
    ((0, 64, 64), {}, "M must be >= 1, got 0"),
    ((64, -2, 64), {}, "N must be >= 1, got -2"),
    ((64, 64, np.int64(0)), {}, "K must be >= 1, got 0"),
    ((64, 64, 64), {"tile": (128,)}, "tile must be a pair"),
    ((64, 64, 64), {"tile": (0, 128)}, r"tile\[0\] must be >= 1, got 0"),
    ((64, 64, 64), {"blocks_per_sm": 0}, "blocks_per_sm must be >= 1, got 0"),
])
def test_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gemm_time_estimate(*args, **kwargs)


def test_numpy_integers_are_accepted():
    r = gemm_time_estimate(np.int64(256), np.int32(256), np.uint16(256), "A100", "fp16")
    assert r.tiles == 4


def test_sizes_share_the_as_int_rule():
    # M, N, K, the tile and blocks_per_sm are checked by fpsim.checks.as_int: what range()
    # takes gives the int's estimate; other types are a TypeError naming the argument
    ref = gemm_time_estimate(300, 200, 100, "A100", "fp16", tile=(64, 128), blocks_per_sm=2)
    for conv in (np.int32, np.array, _Count):
        r = gemm_time_estimate(conv(300), conv(200), conv(100), "A100", "fp16",
                               tile=(conv(64), conv(128)), blocks_per_sm=conv(2))
        assert r == ref
    for bad in (True, 1.5, 64.0, "64", None, np.array([64]), np.timedelta64(64)):
        for args, kwargs, name in (((bad, 64, 64), {}, "M"), ((64, bad, 64), {}, "N"),
                                   ((64, 64, bad), {}, "K"),
                                   ((64, 64, 64), {"tile": (64, bad)}, r"tile\[1\]"),
                                   ((64, 64, 64), {"blocks_per_sm": bad}, "blocks_per_sm")):
            with pytest.raises(TypeError, match=f"{name} must be an int, got "
                                                f"{type(bad).__name__}"):
                gemm_time_estimate(*args, "A100", "fp16", **kwargs)
