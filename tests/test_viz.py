"""fpsim.viz: every figure builds headless, and the data it draws is right, checked against
NumPy / ml_dtypes enumerations and casts, numpy/ml_dtypes finfo, and the exact Fraction
reference of tests/exact.py (never against fpsim's own rounding)."""

from __future__ import annotations

import argparse
import math

import matplotlib

matplotlib.use("Agg")  # headless; fpsim.viz never touches pyplot, the tests use it only to check

import matplotlib.pyplot as plt  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import fpsim  # noqa: E402
from fpsim import viz  # noqa: E402
from fpsim.cli import figures as figures_cli  # noqa: E402
from fpsim.viz import gallery, style  # noqa: E402
from fpsim.viz._common import values_between  # noqa: E402
from fpsim.viz.formats import _pct  # noqa: E402
from fpsim.viz.training import gradient_histogram_grid  # noqa: E402
from tests.exact import round_exact, stochastic_neighbours  # noqa: E402
from tests.intlike import Count as _Count

DTYPES = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
    "fp32": np.float32,
}


def dtype_values(name: str) -> np.ndarray:
    """Every finite value of a <= 16-bit dtype, by viewing all bit patterns (NumPy /
    ml_dtypes decoding, independent of fpsim), sorted, zero once."""
    dt = np.dtype(DTYPES[name])
    bits = 8 * dt.itemsize
    pats = np.arange(1 << bits, dtype=np.uint8 if bits == 8 else np.uint16)
    if name.startswith(("fp6", "fp4")):
        width = 6 if name.startswith("fp6") else 4
        pats = pats[: 1 << width]  # ml_dtypes keeps the sub-byte formats in the low bits
    with np.errstate(invalid="ignore"):
        v = pats.view(dt).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


def pattern(x: float, name: str) -> int:
    """The bit pattern of x cast to the dtype (NumPy / ml_dtypes rounding, nearest even)."""
    dt = np.dtype(DTYPES[name])
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.array([x]).astype(dt)
    return int(a.view(np.uint8 if dt.itemsize == 1 else np.uint16)[0])


def finfo(name: str):
    dt = DTYPES[name]
    return np.finfo(dt) if dt in (np.float16, np.float32) else ml_dtypes.finfo(dt)


def gid_items(container, prefix: str) -> list:
    return [a for a in container if (a.get_gid() or "").startswith(prefix)]


def vline_x(ax, prefix: str = "values:") -> np.ndarray:
    xs = [seg[0][0] for c in gid_items(ax.collections, prefix) for seg in c.get_segments()]
    return np.sort(np.array(xs, dtype=np.float64))


@pytest.fixture(autouse=True)
def no_pyplot_state():
    """The figures are pyplot-free: nothing may be left registered with pyplot."""
    before = set(plt.get_fignums())
    yield
    assert set(plt.get_fignums()) == before


# --------------------------------------------------------------------------- number line
@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp6_e3m2",
                                  "fp4_e2m1"])
def test_number_line_draws_every_positive_value(name):
    fig = viz.number_line(name)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    ref = dtype_values(name)
    ref = ref[ref > 0]
    np.testing.assert_array_equal(vline_x(ax), ref)
    tiny = finfo(name).smallest_normal
    np.testing.assert_array_equal(vline_x(ax, "values:subnormal"), ref[ref < tiny])
    np.testing.assert_array_equal(vline_x(ax, "values:normal"), ref[ref >= tiny])
    marks = {a.get_gid(): a.xy[0] for a in gid_items(ax.texts, "mark:")}
    fi = finfo(name)
    assert marks == {"mark:min subnormal": float(fi.smallest_subnormal),
                     "mark:min normal": float(fi.smallest_normal), "mark:max": float(fi.max)}
    plt.close(fig)


def test_number_line_linear_window_with_zero_and_negatives():
    fig = viz.number_line("e4m3", xmin=-3, xmax=3, scale="linear")
    ax = fig.axes[0]
    ref = dtype_values("fp8_e4m3")
    np.testing.assert_array_equal(vline_x(ax), ref[(ref >= -3) & (ref <= 3)])
    np.testing.assert_array_equal(vline_x(ax, "values:zero"), [0.0])
    assert ax.get_xscale() == "linear"
    plt.close(fig)


def test_number_line_fp16_near_2048_spacing_doubles():
    fig = viz.number_line("fp16", xmin=2036, xmax=2060, scale="linear")
    xs = vline_x(fig.axes[0])
    ref = dtype_values("fp16")
    np.testing.assert_array_equal(xs, ref[(ref >= 2036) & (ref <= 2060)])
    gaps = np.diff(xs)
    assert set(gaps[xs[:-1] < 2048]) == {1.0} and set(gaps[xs[:-1] >= 2048]) == {2.0}
    plt.close(fig)


def test_number_line_default_window_of_a_wide_format_is_near_one():
    fig = viz.number_line("bf16")
    xs = vline_x(fig.axes[0])
    ref = dtype_values("bf16")
    assert 1.0 in xs and len(xs) == 33
    np.testing.assert_array_equal(xs, ref[(ref >= xs[0]) & (ref <= xs[-1])])
    plt.close(fig)


def test_number_line_fp32_narrow_window():
    lo = np.float32(1.0)
    b0 = int(np.array([lo]).view(np.uint32)[0])
    ref = np.arange(b0, b0 + 9, dtype=np.uint32).view(np.float32).astype(np.float64)
    fig = viz.number_line("fp32", xmin=1.0, xmax=float(ref[-1]))
    np.testing.assert_array_equal(vline_x(fig.axes[0]), ref)
    plt.close(fig)


def test_number_line_into_given_axes():
    fig, axes = style.new_figure((8, 4), nrows=2)
    out = viz.number_line("fp4_e2m1", ax=axes[1])
    assert out is fig and len(vline_x(axes[1])) == 7 and len(vline_x(axes[0])) == 0


@pytest.mark.parametrize("kwargs, match", [
    ({"fmt": "fp7"}, "unknown format"),
    ({"fmt": "int8"}, "integer format"),
    ({"fmt": "e4m3", "xmin": 2.0, "xmax": 1.0}, "xmin < xmax"),
    ({"fmt": "e4m3", "xmin": 1.0, "xmax": 1.0}, "xmin < xmax"),
    ({"fmt": "e4m3", "xmin": 0.0, "xmax": 1.0}, "xmin > 0"),
    ({"fmt": "e4m3", "scale": "log10"}, "valid: 'log2', 'linear'"),
    ({"fmt": "e4m3", "xmin": float("nan"), "xmax": 1.0}, "finite"),
    ({"fmt": "fp32", "xmin": 1.0, "xmax": 2.0}, "narrower range"),
])
def test_number_line_bad_input(kwargs, match):
    fmt = kwargs.pop("fmt")
    with pytest.raises(ValueError, match=match):
        viz.number_line(fmt, **kwargs)


def test_values_between_matches_dtype_enumeration():
    ref = dtype_values("fp8_e5m2")
    for lo, hi in [(-1.0, 1.0), (0.0, 1e-4), (-57344.0, -1000.0), (3.0, 3.0), (0.3, 0.31)]:
        np.testing.assert_array_equal(values_between("e5m2", lo, hi),
                                      ref[(ref >= lo) & (ref <= hi)])


# --------------------------------------------------------------------------- bit layout
def panel_bits(ax) -> str:
    digits = sorted(gid_items(ax.texts, "bitval:"), key=lambda t: int(t.get_gid()[7:]))
    return "".join(t.get_text() for t in digits)


def meaning(ax, field: str) -> str:
    return next(t.get_text() for t in ax.texts if t.get_gid() == f"meaning:{field}")


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1"])
@pytest.mark.parametrize("x", [0.1, -1.5, 3e-3, -2.0**-15, 448.0, 1e5, 0.0])
def test_bit_layout_bits_match_the_dtype_cast(name, x):
    fmt = fpsim.get_format(name)
    fig = viz.bit_layout(x, name)
    ax = fig.axes[0]
    bits = format(pattern(x, name), f"0{fmt.bits}b")
    assert panel_bits(ax) == bits
    kinds = [p.get_gid() for p in ax.patches]
    assert kinds == (["bit:sign"] + ["bit:exponent"] * fmt.exponent_bits
                     + ["bit:mantissa"] * fmt.mantissa_bits)
    with np.errstate(over="ignore", invalid="ignore"):
        stored = float(np.array([x]).astype(DTYPES[name])[0])
    value_line = meaning(ax, "value")
    if math.isnan(stored):
        assert value_line.endswith("NaN")
    else:
        assert float(value_line.split()[-1].replace("−", "-").lstrip("≈")) == stored
        if stored != 0 and math.isfinite(stored):
            lead = "0." if abs(stored) < finfo(name).smallest_normal else "1."
            assert meaning(ax, "mantissa").split()[1].startswith(lead)
    plt.close(fig)


@pytest.mark.parametrize("mode", ["toward_zero", "up", "down", "nearest_away", "odd"])
def test_bit_layout_rounding_modes_against_exact_reference(mode):
    for x in (0.1, -0.1, 1 / 3, -2.7e-5):
        ref, _ = round_exact(x, fpsim.FP16, mode)
        fig = viz.bit_layout(x, "fp16", rounding=mode)
        assert panel_bits(fig.axes[0]) == format(pattern(ref, "fp16"), "016b")
        plt.close(fig)


def test_bit_layouts_one_panel_per_format_equal_box_sizes():
    fig = viz.bit_layouts(0.1, ["fp32", "fp16", "e4m3"])
    assert len(fig.axes) == 3
    widths = [ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0]
              for ax in fig.axes]
    assert max(widths) - min(widths) < 1e-6  # one box is equally wide in every panel
    assert [len(panel_bits(ax)) for ax in fig.axes] == [32, 16, 8]
    assert panel_bits(fig.axes[0]) == format(int(np.array([0.1], np.float32).view(np.uint32)[0]),
                                             "032b")
    plt.close(fig)


def test_bit_layout_into_given_axes():
    fig, ax = style.new_figure((6, 2))
    assert viz.bit_layout(2.5, "e5m2", ax=ax) is fig
    assert panel_bits(ax) == format(pattern(2.5, "fp8_e5m2"), "08b")


@pytest.mark.parametrize("args, match", [
    ((0.1, "fp7"), "unknown format"),
    ((0.1, "int8"), "integer format"),
    (("abc", "fp16"), "real number"),
    (([1.0, 2.0], "fp16"), "one real number"),
    ((True, "fp16"), "real number"),
])
def test_bit_layout_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        viz.bit_layout(*args)


def test_bit_layout_bad_rounding():
    with pytest.raises(ValueError, match="stochastic"):
        viz.bit_layout(0.1, "fp16", rounding="stochastic")
    with pytest.raises(ValueError, match="unknown rounding mode"):
        viz.bit_layout(0.1, "fp16", rounding="sideways")
    with pytest.raises(ValueError, match="at least one format"):
        viz.bit_layouts(0.1, [])


# --------------------------------------------------------------------------- rounding modes
MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd")


def step_line(ax, mode):
    return next(ln for ln in ax.lines if ln.get_gid() == f"step:{mode}")


@pytest.mark.parametrize("name, lo, hi", [("fp8_e4m3", 1.0, 1.5), ("fp4_e2m1", -2.0, 2.0),
                                          ("fp16", 2040.0, 2056.0)])
def test_rounding_modes_steps_equal_exact_rounding(name, lo, hi):
    fmt = fpsim.get_format(name)
    fig = viz.rounding_modes(name, lo, hi, n=301)
    assert len(fig.axes) == 6
    vals = dtype_values(name)
    ties_ref = (vals[:-1] + vals[1:]) / 2
    ties_ref = ties_ref[(ties_ref >= lo) & (ties_ref <= hi)]
    for ax, mode in zip(fig.axes, MODES, strict=True):
        line = step_line(ax, mode)
        x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
        assert x[0] == lo and x[-1] == hi and np.isin(ties_ref, x).all()
        ref = np.array([round_exact(float(v), fmt, mode)[0] for v in x])
        np.testing.assert_array_equal(y, ref)
        if mode == "nearest_even":
            np.testing.assert_array_equal(y, x.astype(DTYPES[name]).astype(np.float64))
        ties = next(ln for ln in ax.lines if ln.get_gid() == f"ties:{mode}")
        np.testing.assert_array_equal(ties.get_xdata(), ties_ref)
        np.testing.assert_array_equal(
            ties.get_ydata(), [round_exact(float(t), fmt, mode)[0] for t in ties_ref])
    plt.close(fig)


def test_rounding_modes_stochastic_panel_picks_a_neighbour():
    fmt = fpsim.FP8_E4M3
    fig = viz.rounding_modes("e4m3", 1.0, 1.5, modes=["stochastic", "rz"], n=201, seed=3)
    assert len(fig.axes) == 2
    line = step_line(fig.axes[0], "stochastic")
    for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
        down, up = round_exact(float(x), fmt, "down")[0], round_exact(float(x), fmt, "up")[0]
        assert y in (down, up)
    assert len({float(y) for y in line.get_ydata()}) > 3
    step_line(fig.axes[1], "toward_zero")  # the alias names the canonical mode
    plt.close(fig)


@pytest.mark.parametrize("args, kwargs, match", [
    (("e4m3", 2.0, 1.0), {}, "lo < hi"),
    (("e4m3", 1.0, 1.0), {}, "lo < hi"),
    (("e4m3", float("nan"), 1.0), {}, "finite"),
    (("e9m9q", 1.0, 2.0), {}, "unknown format"),  # e9m9 itself is a valid eXmY name
    (("e4m3", 1.0, 2.0), {"modes": ["sideways"]}, "unknown rounding mode"),
    (("e4m3", 1.0, 2.0), {"modes": []}, "at least one"),
    (("e4m3", 1.0, 2.0), {"n": 1}, "n must be"),
])
def test_rounding_modes_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.rounding_modes(*args, **kwargs)


# --------------------------------------------------------------------------- stochastic
@pytest.mark.parametrize("name, x", [("fp16", 1.0 + 2.0**-12), ("bf16", -0.1),
                                     ("fp8_e4m3", 0.3)])
def test_stochastic_rounding_histogram_is_unbiased(name, x):
    fmt = fpsim.get_format(name)
    n = 20000
    fig = viz.stochastic_rounding(name, x, n=n, seed=1)
    ax = fig.axes[0]
    bars = gid_items(ax.patches, "sr:counts")
    pos = [b.get_x() + b.get_width() / 2 for b in bars]
    heights = np.array([b.get_height() for b in bars])
    toward0, away, p_away = stochastic_neighbours(x, fmt)
    assert sorted(pos) == pytest.approx(sorted([toward0, away]), rel=0, abs=1e-12 * abs(x))
    assert heights.sum() == n
    observed = heights[np.argmin(np.abs(np.array(pos) - away))] / n
    sd = math.sqrt(float(p_away) * (1 - float(p_away)) / n)
    assert abs(observed - float(p_away)) < 5 * sd
    lines = {ln.get_gid(): ln.get_xdata()[0] for ln in ax.lines if ln.get_gid()}
    assert lines["sr:x"] == x
    assert lines["sr:nearest"] == float(np.array([x]).astype(DTYPES[name])[0])
    mean = sum(h * v for h, v in zip(heights, pos, strict=True)) / n
    assert lines["sr:mean"] == pytest.approx(mean, rel=1e-12)
    # the running mean ends at the sample mean, in ulps from x
    run = next(ln for ln in fig.axes[1].lines if ln.get_gid() == "sr:running")
    assert run.get_ydata()[-1] == pytest.approx((mean - x) / abs(away - toward0), abs=1e-9)
    plt.close(fig)


def test_stochastic_rounding_of_a_representable_value_and_seed():
    fig = viz.stochastic_rounding("fp16", 1.5, n=500)
    bars = gid_items(fig.axes[0].patches, "sr:counts")
    assert len(bars) == 1 and bars[0].get_height() == 500
    plt.close(fig)
    a = viz.stochastic_rounding("bf16", 0.1, n=300, seed=7)
    b = viz.stochastic_rounding("bf16", 0.1, n=300, seed=7)
    assert [p.get_height() for p in a.axes[0].patches] == [p.get_height() for p in
                                                           b.axes[0].patches]
    plt.close(a)
    plt.close(b)


@pytest.mark.parametrize("args, kwargs, match", [
    (("e4m3", 500.0), {}, "beyond the largest"),
    (("e4m3", float("nan")), {}, "finite"),
    (("e4m3", 1.1), {"n": 0}, "n must be >= 1, got 0"),
    (("fp7", 1.1), {}, "unknown format"),
])
def test_stochastic_rounding_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.stochastic_rounding(*args, **kwargs)
    # a seed of the wrong type is a TypeError, as NumPy's (tests/test_state.py: every seed)
    with pytest.raises(TypeError, match="seed must be a numpy.random.Generator"):
        viz.stochastic_rounding("e4m3", 1.1, seed="abc")


# --------------------------------------------------------------------------- ranges
def patch_extent(ax, gid):
    p = next(p for p in ax.patches if p.get_gid() == gid)
    return p.get_x(), p.get_x() + p.get_width()


def test_format_ranges_regions_are_the_format_limits():
    names = ["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
    fig = viz.format_ranges(names)
    ax = fig.axes[-1]
    for name in names:
        fi = finfo(name)
        assert patch_extent(ax, f"underflow:{name}")[1] == float(fi.smallest_subnormal)
        assert patch_extent(ax, f"overflow:{name}")[0] == float(fi.max)
        assert patch_extent(ax, f"subnormal:{name}") == (float(fi.smallest_subnormal),
                                                         float(fi.smallest_normal))
        assert patch_extent(ax, f"normal:{name}") == (float(fi.smallest_normal), float(fi.max))
    assert [t.get_text() for t in ax.get_yticklabels()][2] == "fp16 (e5m10)"
    plt.close(fig)


def cast_stats(x: np.ndarray, name: str) -> dict:
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(DTYPES[name]).astype(np.float64)
    a = np.abs(r)
    tiny = float(finfo(name).smallest_normal)
    return {"underflow": float((a == 0).mean()), "subnormal": float(((a > 0) & (a < tiny)).mean()),
            "overflow": float((~np.isfinite(r)).mean())}


def test_range_stats_against_dtype_casts():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(20000) * np.exp2(rng.uniform(-30, 20, 20000))
    for name in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        got = viz.range_stats(x, name)
        ref = cast_stats(x, name)
        for key in ref:
            assert got[key] == ref[key], (name, key)
        assert got["count"] == x.size
        assert got["normal"] == pytest.approx(1 - sum(ref.values()))
    # fp4 saturates: IEEE overflow (7 rounds to 8 > max) counts, 6.5 rounding to 6 does not
    s = viz.range_stats([7.0, 6.5, 100.0, 0.1], "fp4_e2m1")
    assert (s["overflow"], s["normal"], s["underflow"]) == (0.5, 0.25, 0.25)


def test_format_ranges_with_data():
    rng = np.random.default_rng(2)
    data = np.concatenate([rng.standard_normal(5000) * 2.0**-20, [0.0, np.nan, np.inf]])
    fig = viz.format_ranges(["fp16", "e4m3"], data=data, data_label="grads")
    axh, axr = fig.axes
    hist = next(a for a in axh.patches if a.get_gid() == "data:histogram")
    heights, edges, _ = hist.get_data()
    assert heights.sum() == pytest.approx(1.0)  # zeros and non-finite values are left out
    mant = np.frexp(edges)[0]
    assert np.all(mant == 0.5)  # one bin per binade
    mags = np.abs(data[np.isfinite(data) & (data != 0)])
    counts = np.histogram(mags, bins=edges)[0]
    np.testing.assert_allclose(heights, counts / mags.size)
    for tick, name in zip(axr.get_yticklabels(), ["fp16", "fp8_e4m3"], strict=True):
        ref = cast_stats(mags, name)
        assert tick.get_text().split("\n")[1] == (
            f"under {_pct(ref['underflow'])} · sub {_pct(ref['subnormal'])} · "
            f"over {_pct(ref['overflow'])}")
    assert "5000 nonzero values" in axh.get_title(loc="left")
    plt.close(fig)


@pytest.mark.parametrize("kwargs, match", [
    ({"fmts": ["fp7"]}, "unknown format"),
    ({"fmts": []}, "at least one format"),
    ({"data": [0.0, 0.0]}, "no nonzero finite"),
    ({"data": ["a", "b"]}, "real numbers"),
    ({"xlim": (1.0, 0.5)}, "0 < lo < hi"),
])
def test_format_ranges_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.format_ranges(**kwargs)


# --------------------------------------------------------------------------- relative error
def test_relative_error_envelope_and_unit_roundoff():
    lo, hi, n = 2.0**-20, 2.0**4, 24000
    fig = viz.relative_error(["fp16", "bf16"], lo, hi, n=n)
    ax = fig.axes[0]
    x = np.geomspace(lo, hi, n)
    group = n // 120
    for name in ("fp16", "bf16"):
        fi = finfo(name)
        u = float(fi.eps) / 2
        uline = next(ln for ln in ax.lines if ln.get_gid() == f"u:{name}")
        assert uline.get_ydata()[0] == u
        env = next(ln for ln in ax.lines if ln.get_gid() == f"envelope:{name}")
        ex, ey = np.asarray(env.get_xdata()), np.asarray(env.get_ydata())
        rel = np.abs(x.astype(DTYPES[name]).astype(np.float64) - x) / x
        ref = rel[: (n // group) * group].reshape(-1, group).max(axis=1)
        floor = ey.min()
        np.testing.assert_array_equal(ey, np.maximum(ref, floor))
        normal = ex > 2 * float(fi.smallest_normal)
        assert (ey[normal] <= u).all()  # round to nearest: |error| <= u |x| for normal x
        assert ey[normal].max() > 0.9 * u  # ... and the bound is nearly reached
        if name == "fp16":
            assert ey[ex < float(fi.smallest_normal) / 4].min() > u  # subnormals exceed u
    plt.close(fig)


def test_relative_error_into_axes_and_bad_input():
    fig, ax = style.new_figure((5, 3))
    assert viz.relative_error("e5m2", 1.0, 4.0, n=50, ax=ax) is fig
    for kwargs, match in [({"lo": 0.0}, "0 < lo < hi"), ({"lo": 2.0, "hi": 1.0}, "0 < lo < hi"),
                          ({"n": 1}, "n must be"), ({"fmts": ["fp7"]}, "unknown format"),
                          ({"rounding": "sideways"}, "unknown rounding")]:
        with pytest.raises(ValueError, match=match):
            viz.relative_error(**kwargs)


def _drawn(fig) -> list:
    """Every line's and bar's data of every panel: two figures drawn alike compare equal."""
    lines = [(np.asarray(ln.get_xdata()).tolist(), np.asarray(ln.get_ydata()).tolist())
             for ax in fig.axes for ln in ax.lines]
    bars = [(type(p).__name__, p.get_path().vertices.tolist()) for ax in fig.axes
            for p in ax.patches]
    plt.close(fig)
    return [lines, bars]


_COUNT_ARGS = {  # figure function, its arguments, the count's name and a valid value
    "rounding_modes": (lambda n: viz.rounding_modes("e4m3", 1.0, 1.5, n=n), 2, 21),
    "stochastic_rounding": (lambda n: viz.stochastic_rounding("bf16", 0.1, n=n, seed=3), 1, 50),
    "relative_error": (lambda n: viz.relative_error("fp16", 1.0, 2.0, n=n), 2, 20),
    "gradient_histogram_grid": (lambda n: gradient_histogram_grid(
        {"w": np.array([2.0**-30, 0.5]), "x": np.ones(3), "y": np.array([1e-6])}, ncols=n),
        1, 2),
}


@pytest.mark.parametrize("name", list(_COUNT_ARGS))
def test_figure_counts_share_the_as_int_rule(name):
    # n / ncols are checked by fpsim.checks.as_int: what range() takes draws the figure the
    # int draws; other types are a TypeError, values below the minimum a ValueError
    draw, low, n = _COUNT_ARGS[name]
    arg = "ncols" if name == "gradient_histogram_grid" else "n"
    ref = _drawn(draw(n))
    for v in (np.int16(n), np.uint64(n), np.array(n), _Count(n)):
        assert _drawn(draw(v)) == ref
    for bad in (True, float(n), str(n), None, np.array([n]), np.timedelta64(n)):
        with pytest.raises(TypeError, match=f"{arg} must be an int, got {type(bad).__name__}"):
            draw(bad)
    for v in (low - 1, np.int64(low - 1), -5):
        with pytest.raises(ValueError, match=f"{arg} must be >= {low}, got {v}"):
            draw(v)


# --------------------------------------------------------------------------- style, gallery
def test_style_helpers():
    assert style.format_color("half") == style.format_color(fpsim.FP16) == "#E69F00"
    custom = fpsim.Format(5, 6)
    assert style.format_color(custom) == style.format_color(fpsim.Format(5, 6))
    assert style.format_label("e5m2") == "fp8_e5m2 (e5m2)"
    assert style.format_label(custom) == "e5m6"
    assert set(style.MODE_COLORS) == {m.value for m in fpsim.Rounding}
    assert set(style.FORMAT_COLORS) >= set(fpsim.PRESETS)
    with pytest.raises(TypeError, match="Axes"):
        style.new_figure((2, 2), ax="not an axes")
    fig, ax = style.new_figure((3, 2))
    with pytest.raises(ValueError, match="0 < lo < hi"):
        style.log2_axis(ax, 0.0, 1.0)
    style.log2_axis(ax, 2.0**-100, 2.0**100)
    locs = ax.xaxis.get_majorticklocs()
    assert len(locs) <= 13 and all(np.frexp(locs)[0] == 0.5)


def test_figures_show_inline_in_jupyter_without_pyplot():
    fig = viz.number_line("fp4_e2m1")
    assert isinstance(fig, style.Figure) and isinstance(fig, Figure)
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"  # what IPython displays
    sub = Figure().subfigures(1, 2)[1]
    ax = sub.subplots()
    assert viz.relative_error("fp16", 1.0, 2.0, n=20, ax=ax) is sub.figure


def test_gallery_cli_lists_and_rejects(capsys):
    parser = argparse.ArgumentParser()
    figures_cli.configure_parser(parser)
    assert figures_cli.run_cli(parser.parse_args(["--list"])) == 0
    listed = capsys.readouterr().out
    for name in ("number_line_e4m3", "bit_layout", "rounding_modes", "stochastic_rounding",
                 "format_ranges", "relative_error"):
        assert f"{name}:" in listed
    assert capsys.readouterr().err == ""  # the list is a result: stdout
    # errors: one line on stderr, nothing on stdout, as the other fpsim commands
    from fpsim.cli import main

    for argv, msg in ((["no_such_figure"], "unknown figure(s) no_such_figure; valid: "
                                           + ", ".join(gallery.names())),
                      (["bit_layout", "no_such_figure", "nor_this"],
                       "unknown figure(s) no_such_figure, nor_this; valid: "),
                      (["--dpi", "0"], "--dpi must be positive, got 0"),
                      (["--dpi", "-3"], "--dpi must be positive, got -3")):
        assert figures_cli.run_cli(parser.parse_args(argv)) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("fpsim figures: " + msg) and err.count("\n") == 1
        assert main(["figures", *argv]) == 2
        assert capsys.readouterr() == (out, err)
    with pytest.raises(ValueError, match="unknown gallery figure"):
        gallery.build("no_such_figure")
    with pytest.raises(ValueError, match="already registered"):
        gallery.register("bit_layout", "again")(lambda: None)


@pytest.mark.slow
def test_gallery_renders_small_pngs(tmp_path):
    paths = gallery.render(outdir=tmp_path)
    assert [p.stem for p in paths] == gallery.names()
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 150_000, p.name


def test_gradient_histogram_grid_panels_labels_and_shares():
    """One panel per tensor, in order; x labels only where no panel is below, y labels only in
    the first column, the unused cell removed; each panel's key gives the share of its
    values below fp16's round-to-zero edge 2^-25, counted here with NumPy."""
    rng = np.random.default_rng(0)
    grads = {n: rng.standard_normal(200) * 2.0 ** rng.uniform(-40, 0, 200) for n in "abcde"}
    fig = gradient_histogram_grid(grads, ncols=3, title="five tensors")
    assert fig._suptitle.get_text() == "five tensors"
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [f"gradient of {n}" for n in "abcde"]
    # panels a, b (row 0 over d, e) lose the x label; c (nothing below it), d, e keep it
    assert [bool(ax.get_xlabel()) for ax in axes] == [False, False, True, True, True]
    assert [bool(ax.get_ylabel()) for ax in axes] == [True, False, False, True, False]
    for ax, g in zip(axes, grads.values(), strict=True):
        below = np.count_nonzero(np.abs(g) < 2.0**-25) / np.count_nonzero(g)
        assert f"{100 * below:.2f}% below" in ax.get_legend().get_texts()[0].get_text()
    # the other input it takes: ExponentHistograms (fpsim.amp.exponent_histogram) draw the
    # same panels as the values
    hists = {n: fpsim.amp.exponent_histogram(g) for n, g in grads.items()}
    assert _drawn(gradient_histogram_grid(hists, ncols=3)) == \
        _drawn(gradient_histogram_grid(grads, ncols=3))
    with pytest.raises(TypeError, match="grads"):
        gradient_histogram_grid({})
    with pytest.raises(ValueError, match="ncols"):
        gradient_histogram_grid(grads, ncols=0)
