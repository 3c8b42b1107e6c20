"""The memory calculator against the ZeRO paper's Table 1 (Rajbhandari et al., SC'20), its
formulas in exact arithmetic, and the arithmetic of gradient checkpointing."""

from __future__ import annotations

import argparse
import math
import re
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from fractions import Fraction

import numpy as np
import pytest

from fpsim.cli.memory import configure_parser, run_cli
from fpsim.memory import (
    activation_bytes,
    checkpoint_peak_activations,
    fits_on_gpu,
    format_zero_table,
    optimal_checkpoint_segments,
    zero_communication_bytes,
    zero_communication_volume,
    zero_model_state_bytes,
    zero_table,
)
from tests.intlike import Count

# Table 1 of the ZeRO paper: per-device model-state memory in GB, columns P_os, P_os+g,
# P_os+g+p. The 7.5B column is quoted in docs/facts.md; the 128B and 1T columns are the
# paper's, as printed (integers where it drops the fraction: 513 for 513.5, 4187 for 4187.5).
TABLE1 = {
    7.5e9: {1: ("120", "120", "120"), 4: ("52.5", "41.3", "30"), 16: ("35.6", "21.6", "7.5"),
            64: ("31.4", "16.6", "1.88"), 256: ("30.4", "15.4", "0.47"),
            1024: ("30.1", "15.1", "0.12")},
    128e9: {1: ("2048", "2048", "2048"), 4: ("896", "704", "512"), 16: ("608", "368", "128"),
            64: ("536", "284", "32"), 256: ("518", "263", "8"), 1024: ("513", "257", "2")},
    1e12: {1: ("16000", "16000", "16000"), 4: ("7000", "5500", "4000"),
           16: ("4750", "2875", "1000"), 64: ("4187", "2218", "250"),
           256: ("4046", "2054", "62.5"), 1024: ("4011", "2013", "15.6")},
}


def published_matches(exact: Fraction, printed: str) -> bool:
    """The exact value, rounded half up or truncated to the printed precision, is the printed
    number (the paper does both)."""
    quantum = Decimal(1).scaleb(Decimal(printed).as_tuple().exponent)
    d = Decimal(exact.numerator) / Decimal(exact.denominator)
    return Decimal(printed) in (d.quantize(quantum, ROUND_HALF_UP),
                                d.quantize(quantum, ROUND_DOWN))


def exact_gb(psi: float, stage: int, nd: int, k: int = 12) -> Fraction:
    p = Fraction(psi)
    per = {0: (4 + k) * p, 1: 4 * p + k * p / nd, 2: 2 * p + (2 + k) * p / nd,
           3: (4 + k) * p / nd}[stage]
    return per / 10**9


def test_every_cell_of_table1():
    table = zero_table(list(TABLE1), [1, 4, 16, 64, 256, 1024])
    cells = 0
    for psi, rows in TABLE1.items():
        for nd, printed in rows.items():
            for stage, text in zip((1, 2, 3), printed, strict=True):
                got = Fraction(table[psi][nd][stage - 1])
                assert abs(got - exact_gb(psi, stage, nd)) <= exact_gb(psi, stage, nd) * 1e-15
                assert published_matches(exact_gb(psi, stage, nd), text), (psi, nd, stage, text)
                cells += 1
    assert cells == 54


def test_7_5b_column_is_rounded_not_truncated():
    # 41.25 -> 41.3 and 21.5625 -> 21.6 show the 7.5B column rounds half up
    assert float(exact_gb(7.5e9, 2, 4)) == 41.25
    assert round(float(exact_gb(7.5e9, 2, 16)), 1) == 21.6


def test_formulas_and_baseline():
    for stage in (0, 1, 2, 3):
        for nd in (1, 3, 8, 1000):
            got = zero_model_state_bytes(1.3e9, stage, nd)
            assert got == float(exact_gb(1.3e9, stage, nd) * 10**9)
    assert zero_model_state_bytes(7.5e9, 0, 64) == 16 * 7.5e9  # 120 GB, independent of N_d
    assert zero_model_state_bytes(1e9, 1, 4, k=8) == 4e9 + 8e9 / 4
    for nd in (1, 2):
        assert zero_model_state_bytes(1e9, 0, nd) == zero_model_state_bytes(1e9, 3, 1)


def test_communication_volume():
    assert zero_communication_volume(7.5e9, 0) == 15e9
    assert zero_communication_volume(7.5e9, 1) == 15e9
    assert zero_communication_volume(7.5e9, 2) == 15e9
    assert zero_communication_volume(7.5e9, 3) == 22.5e9  # 1.5x
    assert zero_communication_bytes(7.5e9, 3) == 45e9  # fp16: 2 bytes each


def test_fits_on_gpu():
    assert not fits_on_gpu(7.5e9, 0, 1024)  # 120 GB
    assert fits_on_gpu(7.5e9, 1, 4)  # 52.5 GB
    assert not fits_on_gpu(7.5e9, 1, 4, gpu_memory_gb=40)
    assert fits_on_gpu(1e12, 3, 1024)  # 15.6 GB
    assert fits_on_gpu(5e9, 0, 1, gpu_memory_gb=80)  # exactly 80 GB fits


def test_activation_bytes():
    shapes = [(8, 128, 1024), (8, 128, 4096)]
    n = 8 * 128 * 1024 + 8 * 128 * 4096
    assert activation_bytes(shapes, "fp32") == 4 * n
    assert activation_bytes(shapes, "bf16") == 2 * n
    assert activation_bytes(shapes, "fp8_e4m3") == n
    assert activation_bytes(shapes, "int8") == n
    assert activation_bytes(shapes, "fp4_e2m1") == n  # one byte each unpacked
    assert activation_bytes(shapes, "fp4_e2m1", packed=True) == n // 2
    assert activation_bytes([(3,)], "fp6_e2m3", packed=True) == 3  # 18 bits -> 3 bytes
    assert activation_bytes([], "fp16") == 0


def test_zero_stage_shares_the_as_int_rule():
    # stage is checked by fpsim.checks.as_int, then against the stages 0-3
    ref = zero_model_state_bytes(7.5e9, 2, 64)
    for s in (np.int8(2), np.array(2), Count(2)):
        assert zero_model_state_bytes(7.5e9, s, 64) == ref
        assert zero_communication_volume(1e9, s) == zero_communication_volume(1e9, 2)
    for bad in (True, 2.0, "2", None, np.array([2]), np.timedelta64(2)):
        with pytest.raises(TypeError, match=f"stage must be an int, got {type(bad).__name__}"):
            zero_model_state_bytes(7.5e9, bad, 64)
    for bad in (-1, 4, np.int64(7)):
        with pytest.raises(ValueError, match=re.escape(f"unknown ZeRO stage {bad!r}; valid: 0")):
            zero_model_state_bytes(7.5e9, bad, 64)
    # each dimension is checked by fpsim.checks.as_int: NumPy integers count (they were
    # refused), other types are a TypeError, negative sizes a ValueError
    assert activation_bytes([(np.int64(8), np.array(128))], "bf16") == 2 * 8 * 128
    for bad in (True, 8.0, "8", None, np.timedelta64(8)):
        with pytest.raises(TypeError, match="a shape must be a sequence of non-negative ints"):
            activation_bytes([(8, bad)], "bf16")
    with pytest.raises(TypeError, match="a shape must be a sequence of non-negative ints"):
        activation_bytes([8], "bf16")
    with pytest.raises(ValueError, match=r"non-negative ints, got \(8, -1\)"):
        activation_bytes([(8, -1)], "bf16")


def test_checkpointing_minimum_is_ceil_two_sqrt_n():
    for n in range(1, 400):
        peaks = [checkpoint_peak_activations(n, k) for k in range(1, n + 1)]
        assert min(peaks) == math.ceil(2 * math.sqrt(n))
        k = optimal_checkpoint_segments(n)
        assert peaks[k - 1] == min(peaks)
        assert abs(k - math.sqrt(n)) <= 0.5 * math.sqrt(n) + 1
    assert checkpoint_peak_activations(100, 1) == 101  # one segment: everything recomputed
    assert checkpoint_peak_activations(100, 100) == 101  # every layer a checkpoint
    assert optimal_checkpoint_segments(100) == 10
    assert checkpoint_peak_activations(1000, optimal_checkpoint_segments(1000)) == 64


def test_optimal_segments_is_the_scans_choice_and_instant_for_any_n():
    """The rule (least peak, then nearest sqrt(n), then the smaller) by a scan of every k,
    against the two-candidate form; and a huge n answers at once (the scan hung on it)."""
    for n in list(range(1, 2000)) + list(range(10**6 - 20, 10**6 + 20)):
        k = np.arange(1, n + 1)
        peak = k + -(-n // k)  # checkpoint_peak_activations of every k (its formula)
        scan = int(k[np.lexsort((k, np.abs(k - math.sqrt(n)), peak))[0]])
        assert optimal_checkpoint_segments(n) == scan, n
    k = optimal_checkpoint_segments(10**30)
    assert k == 10**15 and checkpoint_peak_activations(10**30, k) == 2 * 10**15


def test_cli_output(capsys):
    p = argparse.ArgumentParser()
    configure_parser(p)
    assert run_cli(p.parse_args(["--params", "7.5e9", "--gpus", "64"])) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 6
    assert lines[2].split()[:3] == ["0", "baseline", "120"] and lines[2].endswith("no")
    assert lines[3].split()[:3] == ["1", "P_os", "31.41"] and lines[3].endswith("yes")
    assert "111.8" in lines[2]  # 120e9 / 2**30 GiB
    assert lines[5].split()[:3] == ["3", "P_os+g+p", "1.875"]
    run_cli(p.parse_args(["--params", "1e12", "--gpus", "16", "--stage", "2", "--k", "12"]))
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[2].split()[:3] == ["2", "P_os+g", "2875"]
    with pytest.raises(SystemExit):
        p.parse_args(["--params", "1e9", "--gpus", "4", "--stage", "5"])
    assert "16000" in format_zero_table()


def test_bad_input():
    with pytest.raises(ValueError, match="valid: 0"):
        zero_model_state_bytes(1e9, 4, 8)
    with pytest.raises(ValueError, match="dp_degree"):
        zero_model_state_bytes(1e9, 1, 0)
    with pytest.raises(TypeError, match="dp_degree"):
        zero_model_state_bytes(1e9, 1, 2.5)
    with pytest.raises(ValueError, match="num_params"):
        zero_model_state_bytes(-1, 1, 8)
    with pytest.raises(ValueError, match="segments"):
        checkpoint_peak_activations(10, 11)
    with pytest.raises(ValueError, match="shape"):
        activation_bytes([(2, -1)], "fp16")
    with pytest.raises(ValueError, match="unknown format"):
        activation_bytes([(2,)], "fp7")


@pytest.mark.parametrize("bad,exc,message", [
    (-1, ValueError, "positive"), (-7.5e9, ValueError, "positive"), (0, ValueError, "positive"),
    (1.5, ValueError, "whole number"), (Fraction(3, 2), ValueError, "whole number"),
    (1j, TypeError, "number"), (complex(4, 0), TypeError, "number"), (None, TypeError, "number"),
    (float("inf"), ValueError, "finite"), (float("nan"), ValueError, "finite"),
])
def test_communication_sizes_refused(bad, exc, message):
    for stage in (0, 3):
        with pytest.raises(exc, match=f"num_params.*{message}"):
            zero_communication_bytes(bad, stage)
        with pytest.raises(exc, match=f"num_params.*{message}"):
            zero_communication_volume(bad, stage)
    with pytest.raises(exc, match="num_params"):
        zero_model_state_bytes(bad, 1, 4)


def test_communication_bytes_per_element():
    assert zero_communication_bytes(1e9, 2, bytes_per_element=4) == 8e9
    assert zero_communication_bytes(10, 3, bytes_per_element=0.5) == 15  # packed 4-bit
    for bad, exc in ((-2, ValueError), (0, ValueError), (1j, TypeError), ("2", TypeError),
                     (float("nan"), ValueError)):
        with pytest.raises(exc, match="bytes_per_element"):
            zero_communication_bytes(1e9, 2, bytes_per_element=bad)


def test_memory_report_bad_input():
    from fpsim.memory import memory_report

    with pytest.raises(TypeError, match="num_params must be a number, got None"):
        memory_report(None, 8)
    with pytest.raises(TypeError, match="gpus"):
        memory_report(1e9, None)
    with pytest.raises(ValueError, match="gpus must be >= 1"):
        memory_report(1e9, 0)
    with pytest.raises(ValueError, match="gpu_memory_gb"):
        memory_report(1e9, 8, gpu_memory_gb=-80)


@pytest.mark.parametrize("argv", [["--params", "7.5e9", "--gpus", "64"],
                                  ["--params", "1e12", "--gpus", "1024", "--gpu-memory", "1e5"],
                                  ["--params", "1000", "--gpus", "3", "--k", "8"]])
def test_cli_columns_aligned(argv, capsys):
    p = argparse.ArgumentParser()
    configure_parser(p)
    run_cli(p.parse_args(argv))
    table = capsys.readouterr().out.splitlines()[1:]
    head = table[0]
    # each column's header and cells share their span: text columns start where the header
    # starts, number columns end where it ends
    starts = [head.index(h) for h in ("stage", "split", "fits")]
    ends = [head.index(h) + len(h) for h in ("GB ", "GiB", "(elems)", "(fp16)")]
    ends[0] -= 1
    for row in table[1:]:
        cells = row.split()
        assert len(cells) == 7
        assert row[starts[0]:].startswith(cells[0]) and row[starts[1]:].startswith(cells[1])
        assert row[starts[2]:] == cells[6]
        for end, cell in zip(ends, cells[2:6], strict=True):
            assert row[:end].endswith(cell) and row[end] == " "


def test_checkpoint_sweep_takes_one_count():
    """checkpoint_sweep's segments: one count is a list of one (what range() takes, by
    fpsim.checks.as_int); what is neither a count nor a list of counts is a TypeError naming
    segments (segments=2 was Python's "'int' object is not iterable", "2" split into digits)."""
    from fpsim import nn
    from fpsim.autograd import Tensor
    from fpsim.memory import checkpoint_sweep

    layers = [nn.Sequential(nn.Linear(4, 4, rng=i), nn.ReLU()) for i in range(4)]
    x = Tensor(np.ones((2, 4)))
    ref = checkpoint_sweep(layers, x, segments=[2])
    for k in (2, np.int64(2), np.array(2), Count(2)):
        assert checkpoint_sweep(layers, x, segments=k) == ref
    assert checkpoint_sweep(layers, x, segments=np.array([2, 3])) == \
        checkpoint_sweep(layers, x, segments=[2, 3])
    for bad in ("2", b"2", 2.0, True):
        with pytest.raises(TypeError, match="segments must be"):
            checkpoint_sweep(layers, x, segments=bad)
    for bad in (0, 5, np.int64(-1)):
        with pytest.raises(ValueError, match="segments must be"):
            checkpoint_sweep(layers, x, segments=bad)


def test_zero_stages_are_one_vocabulary_for_the_calculator_and_the_engine():
    import fpsim.distributed as dist
    import fpsim.memory as mem
    from fpsim import zero_stages

    assert mem.ZERO_STAGES is dist.ZERO_STAGES is zero_stages.ZERO_STAGES
    for bad in (4, -1):
        with pytest.raises(ValueError) as calc:
            mem.zero_model_state_bytes(1e9, bad, 8)
        with pytest.raises(ValueError) as engine:
            zero_stages.as_zero_stage(bad)
        assert str(calc.value) == str(engine.value)
    with pytest.raises(TypeError):
        zero_stages.as_zero_stage(2.0)
