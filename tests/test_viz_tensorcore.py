"""fpsim.viz.tensorcore: the figures draw exactly the data of the tensor-core model.

block_alignment: every drawn bit row adds up to the exact product a_k*b_k (exact Fraction
arithmetic on inputs converted by NumPy / ml_dtypes casts), the kept / truncated split equals
the explain record, and the sum and result rows equal the record and ``tc.dot``. error_vs_k: the
fp32 baselines equal NumPy float32 summation (sequential adds, and np.add.reduce's pairwise
tree), the tensor-core curves the model's dot products, against exact Fraction sums."""

from __future__ import annotations

import math
from fractions import Fraction

import matplotlib

matplotlib.use("Agg")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import fpsim.tensorcore as tc  # noqa: E402
from fpsim import viz  # noqa: E402
from fpsim.tensorcore.perf import gemm_time_estimate  # noqa: E402
from fpsim.viz import gallery  # noqa: E402
from fpsim.viz import tensorcore as vtc  # noqa: E402
from tests.intlike import Count as _Count

CASTS = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
         "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz}


def cast(x, fmt: str) -> list[Fraction]:
    """Inputs converted by NumPy / ml_dtypes (round to nearest even), as exact Fractions."""
    return [Fraction(float(v)) for v in np.asarray(x, dtype=np.float64).astype(CASTS[fmt])]


def drawn_rows(fig) -> dict[str, list[tuple[int, int, str]]]:
    """Bit boxes by row: row -> [(weight exponent, digit, state)] from the patch gids."""
    rows: dict[str, list[tuple[int, int, str]]] = {}
    for p in fig.axes[0].patches:
        gid = p.get_gid() or ""
        if gid.startswith("bit:"):
            _, row, w, state, digit = gid.split(":")
            rows.setdefault(row, []).append((int(w), int(digit), state))
    return rows


def value(bits, states=None) -> Fraction:
    return sum((Fraction(2) ** w * d for w, d, s in bits if states is None or s in states),
               Fraction(0))


CASES = [
    # (a, b, c, gpu, input format, output format)
    (vtc.README_ALIGNMENT_EXAMPLE["a"], vtc.README_ALIGNMENT_EXAMPLE["b"], 1 / 3, "A100",
     "fp16", "fp32"),
    (vtc.README_ALIGNMENT_EXAMPLE["a"], vtc.README_ALIGNMENT_EXAMPLE["b"], 1 / 3, "H100",
     "fp16", "fp32"),
    ([1.0] * 4, [2.0**-24] * 4, 1 - 2.0**-24, "V100", "fp16", "fp32"),  # probe D5
    ([1.0] * 4, [2.0**-24] * 4, 1 - 2.0**-24, "V100", "fp16", "fp16"),
    ([0.1, -3.0, 2.0**-130, 7.5, 1e-3, 0.0, -0.2, 5.0], [0.3, 1.0, 0.5, -2.0**-9, 11.0, 1.0,
                                                        0.25, 1e-2], -0.7, "A100", "bf16",
     "fp32"),
    ([0.5, -1.75, 0.0625, 3.0] * 8, [1.25, 0.375, -0.5, 2.0**-6] * 8, 0.0, "H100", "fp8_e4m3",
     "fp32"),
]


@pytest.mark.parametrize("a, b, c, gpu, fin, fout", CASES)
def test_block_alignment_rows_equal_exact_products_and_explain_record(a, b, c, gpu, fin, fout):
    fig = viz.block_alignment(a, b, c, gpu, input_format=fin, output_format=fout,
                              max_bits=400)  # nothing clipped: every bit is drawn
    d, rec = tc.dot(a, b, c, gpu=gpu, input_format=fin, output_format=fout, explain=True)
    blk = rec.blocks[0]
    q = blk.max_exponent - blk.fraction_bits
    rows = drawn_rows(fig)
    xa, xb = cast(a, fin), cast(b, fin)
    for k in range(blk.k_start, blk.k_stop):
        exact = abs(xa[k] * xb[k])  # independent: ml_dtypes conversion, Fraction product
        label = f"a{k}*b{k}"
        if exact == 0:
            assert label not in rows
            continue
        bits = rows[label]
        assert value(bits) == exact
        assert {s for _, _, s in bits} <= {"kept", "dropped"}
        assert all((s == "kept") == (w >= q) for w, _, s in bits)  # the cut at 2**(maxE - F)
        term = next(t for t in blk.terms if t.label == label)
        assert value(bits, {"kept"}) == abs(term.aligned) * Fraction(2) ** q
        assert value(bits, {"dropped"}) == term.truncated
    cterm = next(t for t in blk.terms if t.label == "c")
    if cterm.value != 0:
        assert value(rows["c"]) == abs(cterm.value)
        assert value(rows["c"], {"kept"}) == abs(cterm.aligned) * Fraction(2) ** q
    # the sum row: the signed sum of the kept bits; the result row: tc.dot's value
    signed = sum((t.aligned for t in blk.terms), 0) * Fraction(2) ** q
    assert value(rows["sum"]) == abs(signed) == abs(blk.value)
    assert value(rows["result"]) == abs(Fraction(float(d)))
    lo = min(w for w, _, _ in rows["result"])
    assert all((s == "rounded") == (w < lo) for w, _, s in rows["sum"])
    if blk.rounding == "toward_zero":  # truncation: the result is the sum's leading bits
        assert value(rows["sum"], {"sum"}) == value(rows["result"])


def test_block_alignment_clips_far_bits_and_counts_them():
    ex = vtc.README_ALIGNMENT_EXAMPLE
    fig = viz.block_alignment(ex["a"], ex["b"], ex["c"], "A100")  # max_bits=40
    rows = drawn_rows(fig)
    cols = {w for bits in rows.values() for w, _, _ in bits}
    assert max(cols) - min(cols) + 1 <= 40
    # a4*b4 = 2**-12 * 2**-14: 22 significand bits from 2**-25 down to 2**-46
    drawn = len(rows["a4*b4"])
    note = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "note:term:a4*b4"]
    assert note == [f"all bits dropped → 0 (+{22 - drawn} bits)"]
    assert 0 < drawn < 22
    title = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "title"]
    assert title == ["One block FMA on A100 (fp16 inputs, fp32 output): d = c + Σ a_k·b_k, "
                     "k = 0..7"]


def test_block_alignment_second_block_starts_from_the_first_blocks_result():
    rng = np.random.default_rng(3)
    a, b = rng.random(16), rng.random(16)
    fig = viz.block_alignment(a, b, 0.5, "A100", block=1, max_bits=400)
    first = float(tc.dot(a[:8], b[:8], 0.5, gpu="A100"))
    rows = drawn_rows(fig)
    assert value(rows["c"]) == Fraction(first)
    assert value(rows["result"]) == Fraction(float(tc.dot(a, b, 0.5, gpu="A100")))
    assert {int(r.split("*")[0][1:]) for r in rows if r.startswith("a")} <= set(range(8, 16))


@pytest.mark.parametrize("args, kwargs, match", [
    (([1.0], [1.0]), {"gpu": "Z80"}, "unknown GPU"),
    (([1.0], [1.0]), {"gpu": "V100", "input_format": "bf16"}, "V100 has no tensor-core mode"),
    (([1.0] * 8, [1.0] * 8), {"block": 1}, "block 1 out of range"),
    (([[1.0]], [[1.0]]), {}, "1-D a and b"),
    (([1.0], [1.0], [0.0, 1.0]), {}, "c must be one number"),
    (([float("nan")], [1.0]), {}, "finite values only"),
    (([1.0], [1.0]), {"max_bits": 4}, "max_bits"),
    (([1.0], [1.0]), {"block": -1}, "block must be >= 0, got -1"),
    (([1.0], [1.0]), {"max_bits": np.int64(7)}, "max_bits must be >= 8, got 7"),
])
def test_block_alignment_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.block_alignment(*args, **kwargs)


# counts and indices are checked by fpsim.checks.as_int: what range() takes is accepted, other
# types are a TypeError naming the argument
_NOT_INTS = [True, 0.5, 8.0, "8", None, np.array([8]), np.timedelta64(8)]


@pytest.mark.parametrize("bad", _NOT_INTS)
def test_block_alignment_and_error_vs_k_refuse_non_integers(bad):
    for kwargs, name in (({"block": bad}, "block"), ({"max_bits": bad}, "max_bits")):
        with pytest.raises(TypeError, match=f"{name} must be an int, got {type(bad).__name__}"):
            viz.block_alignment([1.0], [1.0], **kwargs)
    base = {"ks": (16,), "trials": 1}
    for kwargs, name in (({"ks": [4, bad]}, r"ks\[1\]"), ({"trials": bad}, "trials")):
        with pytest.raises(TypeError, match=f"{name} must be an int, got {type(bad).__name__}"):
            viz.error_vs_k(**{**base, **kwargs})


def _drawn(fig) -> list:
    """Every line's data of every panel: two figures drawn alike compare equal."""
    return [(ln.get_gid(), np.asarray(ln.get_xdata()).tolist(),
             np.asarray(ln.get_ydata()).tolist()) for ax in fig.axes for ln in ax.lines]


def test_error_vs_k_and_block_alignment_take_what_range_takes():
    # one K, as an int or any integer-like, is a sequence of one; what is neither a TypeError
    # naming ks (a string was split into its digits: "ks[0] must be an int, got str '1'")
    one = _drawn(viz.error_vs_k(ks=[16], gpus=("A100",), baselines=(), trials=2))
    for k in (16, np.int64(16), np.array(16), _Count(16)):
        assert _drawn(viz.error_vs_k(ks=k, gpus=("A100",), baselines=(), trials=2)) == one
    for bad in ("16", b"16", None, 16.0):
        with pytest.raises(TypeError, match="ks must be an int or a sequence of ints"):
            viz.error_vs_k(ks=bad, trials=1)
    ref = _drawn(viz.error_vs_k(ks=(4, 16), gpus=("A100",), baselines=(), trials=2))
    for one, two in ((np.int64(4), np.uint8(2)), (np.array(4), np.array(2)),
                     (_Count(4), _Count(2))):
        fig = viz.error_vs_k(ks=(one, 16), gpus=("A100",), baselines=(), trials=two)
        assert _drawn(fig) == ref
    ref = [p.get_gid() for p in viz.block_alignment([1.0] * 8, [2.0] * 8, gpu="V100",
                                                    block=1, max_bits=40).axes[0].patches]
    for b, m in ((np.int8(1), np.int64(40)), (np.array(1), np.array(40)), (_Count(1), _Count(40))):
        fig = viz.block_alignment([1.0] * 8, [2.0] * 8, gpu="V100", block=b, max_bits=m)
        assert [p.get_gid() for p in fig.axes[0].patches] == ref


def _float32_sequential(p: np.ndarray) -> np.ndarray:
    s = p[:, 0].copy()
    for k in range(1, p.shape[1]):
        s = s + p[:, k]  # NumPy float32 adds: IEEE round to nearest even
    return s.astype(np.float64)


def test_error_vs_k_curves_equal_model_and_numpy_float32():
    ks, trials, seed = (8, 40, 256), 3, 7
    fig = viz.error_vs_k(ks, ("V100", "H100"), baselines=("sequential", "pairwise"),
                         trials=trials, seed=seed)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines}
    assert list(lines) == ["error:V100", "error:H100", "error:fp32 sequential",
                           "error:fp32 pairwise", "bound"]
    # the documented draws: one Generator(seed), per K first a then b, uniform on [0, 1)
    rng = np.random.default_rng(seed)
    want: dict[str, list[float]] = {n: [] for n in lines if n != "bound"}
    for k in ks:
        a = np.asarray(rng.random((trials, k))).astype(np.float16)
        b = np.asarray(rng.random((trials, k))).astype(np.float16)
        p32 = a.astype(np.float32) * b.astype(np.float32)  # exact: 22-bit significands
        exact = [sum((Fraction(float(x)) for x in row), Fraction(0)) for row in p32]
        got = {"error:V100": tc.dot(a, b, gpu="V100"), "error:H100": tc.dot(a, b, gpu="H100"),
               "error:fp32 sequential": _float32_sequential(p32),
               "error:fp32 pairwise": np.add.reduce(p32, axis=1).astype(np.float64)}
        for n, d in got.items():
            rel = [float(abs(Fraction(float(v)) - e) / e) for v, e in zip(d, exact, strict=True)]
            want[n].append(float(np.mean(rel)))
    for n, w in want.items():
        assert np.array_equal(lines[n].get_xdata(), ks)
        np.testing.assert_allclose(lines[n].get_ydata(), w, rtol=1e-9, err_msg=n)
    np.testing.assert_array_equal(lines["bound"].get_ydata(), [k * 2.0**-24 for k in ks])
    # truncating blocks accumulate a biased error: V100 worse than fp32 sequential at K = 256
    assert want["error:V100"][-1] > want["error:fp32 sequential"][-1]


def test_error_vs_k_max_statistic_custom_unit_and_kahan():
    unit = tc.BlockFMA(8, 3, "rz", -132, name="A100 + 2 bits")
    fig = viz.error_vs_k((64,), [unit, "A100"], baselines=("kahan",), trials=4,
                         statistic="max", distribution="normal", seed=1)
    gids = [ln.get_gid() for ln in fig.axes[0].lines]
    assert gids == ["error:A100 + 2 bits", "error:A100", "error:fp32 kahan", "bound"]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 64)).astype(np.float16)
    b = rng.standard_normal((4, 64)).astype(np.float16)
    exact = [sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(ra, rb,
                                                                           strict=True)),
                 Fraction(0)) for ra, rb in zip(a, b, strict=True)]
    d = tc.dot(a, b, gpu=unit)
    want = max(float(abs(Fraction(float(v)) - e) / abs(e)) for v, e in zip(d, exact,
                                                                              strict=True))
    assert math.isclose(fig.axes[0].lines[0].get_ydata()[0], want, rel_tol=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    ({"ks": []}, "ks must be positive ints"),
    ({"ks": [4, 0]}, r"ks\[1\] must be >= 1, got 0"),
    ({"gpus": ["Z80"]}, "unknown GPU"),
    ({"baselines": ["random"]}, "unknown baseline order"),
    ({"distribution": "cauchy"}, "distribution must be"),
    ({"statistic": "median"}, "statistic must be"),
    ({"trials": 0}, "trials must be >= 1, got 0"),
    ({"gpus": [], "baselines": []}, "at least one GPU or baseline"),
    ({"baseline_format": "int8"}, "integer format"),
])
def test_error_vs_k_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.error_vs_k(**{"ks": (16,), "trials": 1, **kwargs})


def test_gemm_efficiency_draws_the_perf_model():
    ns = [1280, 1281, 1536, 2304]
    fig = viz.gemm_efficiency(ns, gpu="A100", dtype="fp16", K=1024)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines}
    est = [gemm_time_estimate(n, n, 1024, "A100", "fp16") for n in ns]
    assert list(lines["utilisation"].get_ydata()) == [e.utilisation for e in est]
    # by hand: 1280 -> 10 x 10 = 100 tiles, one wave of 108; 2304 -> 18 x 18 = 324 = 3 waves
    assert lines["utilisation"].get_ydata()[0] == 100 / 108
    assert lines["utilisation"].get_ydata()[3] == 1.0
    assert lines["tile_efficiency"].get_ydata()[1] == 1281**2 / (11 * 11 * 128 * 128)
    with pytest.raises(ValueError, match="no performance data"):
        viz.gemm_efficiency([128], gpu="T4")
    with pytest.raises(ValueError, match="at least one N"):
        viz.gemm_efficiency([])


def test_gallery_has_the_readme_figures():
    names = gallery.names()
    assert "tensorcore_alignment" in names and "tensorcore_error_vs_k" in names
    fig = gallery.build("tensorcore_alignment")
    assert drawn_rows(fig)["result"]


@pytest.mark.parametrize("a, b, c, fin", [
    ([0.5, -1.75, 0.0625, 3.0, 2.0**-9, 0.0, -0.375, 1.25] * 2,
     [1.25, 0.375, -0.5, 2.0**-6, 7.0, 1.0, 0.875, -2.0**-5] * 2, 0.3, "fp8_e4m3fnuz"),
    ([0.1, -3.0, 2.0**-14, 7.5, 1e-3, 0.0, -0.2, 5.0], [0.3, 1.0, 0.5, -2.0**-9, 11.0, 1.0,
                                                        0.25, 1e-2], -1e-9, "fp16"),
])
def test_block_alignment_generic_groups_and_late_c(a, b, c, fin):
    """MI300X: odd/even groups each with their own cut, c added late: every drawn product row
    adds up to the exact product, its kept bits to the record's aligned integer at its own
    cut, and the result row to tc.dot."""
    fig = viz.block_alignment(a, b, c, "MI300X", input_format=fin, max_bits=400)
    d, rec = tc.dot(a, b, c, gpu="MI300X", input_format=fin, explain=True)
    blk = rec.blocks[0]
    assert blk.stages and any("late" in s for s in blk.stages)
    rows = drawn_rows(fig)
    xa, xb = cast(a, fin), cast(b, fin)
    groups = set()
    for t in blk.terms:
        if t.exponent is None or t.value == 0:
            continue
        bits = rows[t.label]
        groups.add(t.group)
        if t.label != "c":
            k = int(t.label.split("*")[0][1:])
            assert value(bits) == abs(xa[k] * xb[k])
        assert value(bits, {"kept"}) == abs(t.aligned) * Fraction(2) ** t.cut
        assert all((s == "kept") == (w >= t.cut) for w, _, s in bits)
    assert value(rows["result"]) == abs(Fraction(float(d)))
    assert "c (late)" in groups
    if fin.startswith("fp8"):
        assert {"even", "odd"} <= groups


def test_block_alignment_refuses_exact_and_pairwise_units():
    with pytest.raises(ValueError, match="draws aligned summation"):
        viz.block_alignment([1.0] * 4, [1.0] * 4, 0.0, "MI100")
