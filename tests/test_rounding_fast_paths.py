"""Every fast path of the rounding core, from its registry (``fpsim.rounding.fast.REGISTRY``,
issue 35 item 2), against the general bit kernel (``fpsim.rounding.kernel.kernel_general``,
no fast path involved) on one grid, for each preset format, mode, overflow policy and input
dtype in the row's domain. The kernel itself is checked on the same grid against the exact
Fraction reference of tests/exact.py, so no path is compared with a copy of itself.

The grid (per format and input dtype, both signs): the format's neighbours around 1 and the
midpoints between them, around the subnormal boundary 2**emin, the first subnormals (all of
them for formats with at most 64), deep underflow (a half, a quarter and three quarters of
the smallest subnormal), the largest finite values, the overflow edge (the midpoint above the
largest finite value) and beyond; each point with its input-dtype neighbours on both sides
(just below / just above every midpoint); +-0, +-inf, quiet and signalling NaNs with
payloads, the input dtype's largest and smallest values. Every row runs on the grid and on
the grid tiled past its dispatcher's size threshold (the fp16 kernels, native casts and the
byte table switch implementation by size)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fpsim.formats import PRESETS, Format
from fpsim.modes import Overflow, Rounding
from fpsim.rounding import fast, kernel, policy_of
from fpsim.rounding.convert import via_float32, widen
from tests.exact import round_exact, same

ROWS = {row.name: row for row in fast.REGISTRY}
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
SIGNALLING = {np.dtype(np.float64): 0x7FF0000000000001, np.dtype(np.float32): 0x7F800001}
QUIET_PAYLOAD = {np.dtype(np.float64): 0x7FF8000000000123, np.dtype(np.float32): 0x7FC00123}
TILE = 4096  # past every dispatcher's threshold (512, 2048, 4096 elements)
# the paths whose implementation changes with the array's size (NumPy's cast below 512 / 2048
# elements, the table above): their runs of 8 are tiled past TILE too
SIZE_SWITCHING = {"native_cast", "fp16_from_float32", "fp16_from_float64", "byte_table",
                  "bf16_cast", "fp16_via_float32"}


def _points(fmt: Format) -> list[Fraction]:
    """The format's values in the grid's regions, and the midpoints between neighbours."""
    m, emin, emax = fmt.mantissa_bits, fmt.emin, fmt.emax
    q = Fraction(2) ** (emin - m)  # the subnormal spacing, also the spacing just above 2**emin
    top = Fraction(2) ** (emax - m)  # the spacing of the top binade
    big = Fraction(fmt.max)
    runs = [
        [1 - k * Fraction(2) ** (-m - 1) for k in (3, 2, 1)]
        + [1 + k * Fraction(2) ** -m for k in range(4)],  # around 1
        [Fraction(2) ** emin + k * q for k in range(-3, 4)],  # around 2**emin
        [k * q for k in range(min(2**m, 64) + 1)],  # the (first) subnormals from 0
        [big - k * top for k in (3, 2, 1, 0)] + [big + top],  # max; its midpoint: the edge
    ]
    pts = set()
    for run in runs:
        pts.update(run)
        pts.update((a + b) / 2 for a, b in zip(run, run[1:], strict=False))
    pts.update([q / 2, q / 4, 3 * q / 4, 2 * big, big + 3 * top / 2])
    return sorted(p for p in pts if p >= 0)


def grid(fmt: Format, dtype: np.dtype) -> np.ndarray:
    """The grid of the module docstring, in ``dtype``."""
    finfo = np.finfo(dtype)
    vals = []
    for p in _points(fmt):
        v = float(p)
        if Fraction(v) != p or v > float(finfo.max):
            continue  # not a float64 number, or beyond the input dtype
        x = np.array(v, dtype)
        if Fraction(float(x)) != p:
            continue  # not a number of the input dtype (float32 input, fine formats)
        with np.errstate(over="ignore"):  # the neighbour above the dtype's max: inf
            vals += [x, np.nextafter(x, dtype.type(np.inf)),
                     np.nextafter(x, dtype.type(-np.inf))]
    vals += [np.array(v, dtype) for v in (0.0, np.inf, finfo.max, finfo.smallest_subnormal)]
    x = np.array(vals, dtype)
    x = np.concatenate([x, -x])
    u = np.dtype(f"u{dtype.itemsize}")
    nans = np.array([SIGNALLING[dtype], QUIET_PAYLOAD[dtype]], u)
    nans = np.concatenate([nans, nans | u.type(1 << (8 * dtype.itemsize - 1))]).view(dtype)
    return np.concatenate([x, np.array([np.nan], dtype), nans])


def kernel_values(x: np.ndarray, fmt: Format, mode: Rounding, overflow: Overflow):
    """The general kernel's float64 values (stochastic: a fixed seed)."""
    rng = np.random.default_rng(0) if mode is Rounding.STOCHASTIC else None
    b = widen(x) if x.dtype != np.float64 else x  # exact, NaN payloads kept
    r, _ = kernel.kernel_general(np.ascontiguousarray(b).view(np.uint64),
                                 kernel.kernel_params(fmt), policy_of(fmt, mode, overflow), rng)
    return r.view(np.float64)


def reference(row, x, fmt, mode, overflow):
    if row.via is not None:  # two roundings by design: to ``via`` first (nearest even)
        x = kernel_values(x, row.via, Rounding.NEAREST_EVEN, Overflow.INF)
    v = kernel_values(x, fmt, mode, overflow)
    if not row.stores:
        return v
    store = fmt.storage_dtype
    with np.errstate(invalid="ignore", over="ignore"):
        return via_float32(v, store).astype(store)  # NumPy's / ml_dtypes' cast of exact values


def assert_same_bits(row, got, want, x, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    u = np.dtype(f"u{got.dtype.itemsize}")
    gb, wb = got.view(u), want.view(u)
    with np.errstate(invalid="ignore"):
        gnan, wnan = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    if row.nan_payload:
        bad = gb != wb
    else:  # some NaN where the kernel gives one; the bits elsewhere
        bad = (gnan != wnan) | ((gb != wb) & ~wnan)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {x.size} differ; first: input "
                             f"{x[i]!r} ({int(x.view(f'u{x.itemsize}')[i]):#x}), got "
                             f"{int(gb[i]):#x}, want {int(wb[i]):#x}")


def _cases():
    for row in fast.REGISTRY:
        for fmt in PRESETS.values():
            if row.formats(fmt):
                for dtype in sorted(row.inputs, key=str):
                    yield pytest.param(row.name, fmt.name, dtype, id=f"{row.name}-{fmt.name}-"
                                       f"{dtype.name}")


def _apply(row, x, fmt, mode, overflow, what):
    """The row on ``x`` (in its domain: it must not decline)."""
    got = row.apply(x.copy(), policy_of(fmt, mode, overflow))
    assert got is not None, f"{what}: declined an input in its domain"
    return got


@pytest.mark.parametrize(("name", "fmt_name", "dtype"), list(_cases()))
def test_fast_path_equals_the_kernel(name: str, fmt_name: str, dtype: np.dtype) -> None:
    """On the grid as one array, tiled past the size thresholds, and in runs of 8 elements
    of neighbouring magnitude (tiled where the size matters): whole-array decisions (any
    overflow? any NaN?) are then taken on arrays without the grid's infinities and NaNs too."""
    row, fmt = ROWS[name], PRESETS[fmt_name]
    x0 = grid(fmt, dtype)
    x0 = x0[np.argsort(np.abs(x0), kind="stable")]  # NaNs last
    reps = math.ceil(max(TILE, row.min_size) / 8) if name in SIZE_SWITCHING else 1
    for mode in sorted(row.modes, key=lambda m: m.value):
        for overflow in sorted(row.overflows, key=lambda o: o.value):
            what = f"{name} {fmt_name} {dtype.name} {mode.value} {overflow.value}"
            x = x0[~np.isnan(x0)] if row.declines_nan else x0
            for xs in ([x, np.tile(x, math.ceil(TILE / x.size))],
                       [np.tile(x[i:i + 8], reps) for i in range(0, x.size, 8)]):
                got = [_apply(row, xi, fmt, mode, overflow, what) for xi in xs]
                want = [reference(row, xi, fmt, mode, overflow) for xi in xs]  # same draws
                assert_same_bits(row, np.concatenate(got), np.concatenate(want),
                                 np.concatenate(xs), what)
            if row.declines_nan:  # and it does decline NaN input
                assert row.apply(x0.copy(), policy_of(fmt, mode, overflow)) is None, what


def test_every_row_has_a_preset_and_a_domain() -> None:
    """No row that the parametrisation above skips; the domains say what they serve."""
    covered = {c.values[0] for c in _cases()}
    assert covered == set(ROWS), set(ROWS) - covered
    assert len(ROWS) == len(fast.REGISTRY)
    for row in fast.REGISTRY:
        assert row.modes and row.overflows and row.inputs and row.where
    bf16, e4m3 = PRESETS["bf16"], PRESETS["fp8_e4m3"]
    assert fast.BF16_ROUND.serves(policy_of(bf16), np.float32)
    assert not fast.BF16_ROUND.serves(policy_of(bf16, Rounding.UP), np.float32)
    assert not fast.BF16_ROUND.serves(policy_of(bf16, subnormals="flush"), np.float32)
    assert not fast.BYTE_TABLE.serves(policy_of(e4m3, overflow=Overflow.SATURATE), np.float32)
    assert not fast.STOCHASTIC32.serves(policy_of(e4m3, "stochastic", random_bits=8),
                                        np.float32)


@pytest.mark.parametrize("args", [("bf16", {}, False, "bf16_round"),
                                  ("bf16", {}, True, "bf16_cast"),
                                  ("fp8_e4m3", {}, True, "cast_by_addition"),
                                  ("fp8_e4m3fnuz", {}, True, "byte_table"),
                                  ("fp16", {}, True, "cast_by_addition"),
                                  ("fp16", {}, False, None),
                                  ("fp16", {"rounding": "up"}, True, None),
                                  ("fp4_e2m1", {}, True, "byte_table"),
                                  ("fp8_e4m3", {}, False, None),
                                  ("bf16", {"subnormals": "flush"}, False, None),
                                  ("fp8_e5m2", {"overflow": "saturate"}, True, None)])
def test_round_and_cast_dispatch_through_the_registry(args) -> None:
    fmt, opts, cast, name = args
    row = fast.array_path(policy_of(fmt, **opts), np.dtype(np.float32), cast)
    assert (row and row.name) == name
    assert fast.array_path(policy_of(fmt, **opts), np.dtype(np.float64), cast) is None


CHUNKED = ["float32_float_domain", "bf16_round", "bf16_cast", "cast_by_addition",
           "byte_table"]  # the rows that go chunk by chunk (kernel.CHUNK)


@pytest.mark.parametrize("name", CHUNKED)
def test_chunked_rows_across_chunk_boundaries(monkeypatch, name: str) -> None:
    """With small chunks, the grid shuffled (chunks with and without NaN, infinities,
    overflow or subnormals, and a short last chunk): the same bits as the kernel."""
    monkeypatch.setattr(kernel, "CHUNK", 1000)
    row = ROWS[name]
    for fmt in PRESETS.values():
        if not row.formats(fmt):
            continue
        x0 = grid(fmt, np.dtype(np.float32))
        if row.declines_nan:
            x0 = x0[~np.isnan(x0)]
        x = np.random.default_rng(0).permutation(np.tile(x0, math.ceil(5500 / x0.size)))
        with np.errstate(invalid="ignore"):  # (NaN)
            x[:2200] = np.abs(x[:2200]) * 2.0**-10  # chunks without overflow or NaN
        x[:1000] = np.where(np.isfinite(x[:1000]), x[:1000], 0.5)
        for mode in sorted(row.modes, key=lambda m: m.value):
            for overflow in sorted(row.overflows, key=lambda o: o.value):
                what = f"{name} {fmt.name} {mode.value} {overflow.value}"
                assert_same_bits(row, _apply(row, x, fmt, mode, overflow, what),
                                 reference(row, x, fmt, mode, overflow), x, what)


@pytest.mark.parametrize("fmt_name", sorted(PRESETS))
def test_the_kernel_on_the_grid_equals_exact_fractions(fmt_name: str) -> None:
    """The reference of the test above, against tests/exact.py (deterministic modes)."""
    fmt = PRESETS[fmt_name]
    if fmt.mantissa_bits > 50:
        pytest.skip("fp64: nothing to round")
    x = grid(fmt, np.dtype(np.float64))
    for mode in Rounding:
        if mode is Rounding.STOCHASTIC:
            continue
        for overflow in Overflow:
            got = kernel_values(x, fmt, mode, overflow)
            for xi, gi in zip(x.tolist(), got.tolist(), strict=True):
                want, _ = round_exact(xi, fmt, mode.value, overflow=overflow.value)
                assert same(gi, want), f"{fmt_name} {mode.value} {overflow.value}: {xi!r}"


class _Draws:
    """A generator that hands out given 64-bit draws: both sides of a stochastic comparison
    see the same chosen values (seeded draws never hit the thresholds below)."""

    def __init__(self, rnd: np.ndarray) -> None:
        self.rnd = rnd

    def integers(self, low, high, size, dtype, endpoint):  # noqa: ARG002 - Generator's API
        assert tuple(np.atleast_1d(size)) == self.rnd.shape
        return self.rnd.copy()


def _thresholds(x: float, fmt) -> list[int]:
    """Draws at and next to where kernel_general's stochastic decision for ``x`` flips: the
    increment that carries exactly (s < 52), ``floor(f * 2**64)`` (s >= 52), and the
    extremes."""
    p = kernel.kernel_params(fmt)
    a = int(np.array(abs(x), np.float64).view(np.uint64))
    s = max(p.k - (a >> 52), p.c)
    top = (1 << 64) - 1
    if s < 52:
        t = (1 << s) - (a & ((1 << s) - 1))  # the smallest increment that carries
        cut = [t, t - 1, t | (top ^ ((1 << s) - 1))]
    else:
        sig = (a & ((1 << 52) - 1)) | (1 << 52) if a >> 52 else a & ((1 << 52) - 1)
        rem = sig & ((1 << min(s, 63)) - 1)
        count = rem << (64 - s) if s <= 64 else rem >> min(s - 64, 63)
        cut = [count, count - 1, count + 1]
    return [v for v in cut + [0, top, top >> 1] if 0 <= v <= top]


@pytest.mark.parametrize("fmt_name", sorted(n for n, f in PRESETS.items()
                                            if fast.STOCHASTIC32.formats(f)))
def test_stochastic32_at_the_draw_thresholds(fmt_name: str) -> None:
    """float32_stochastic against the general kernel on the grid with chosen draws: for
    each value the draws where its decision flips (either side, exactly at it) and the
    extremes 0 and 2**64 - 1, both overflow policies."""
    fmt = PRESETS[fmt_name]
    x0 = grid(fmt, np.dtype(np.float32))
    xs, rs = [], []
    for v in x0.tolist():
        cuts = _thresholds(v, fmt) if np.isfinite(v) else [0, 12345]
        xs += [v] * len(cuts)
        rs += cuts
    x = np.array(xs, np.float32)
    rnd = np.array(rs, np.uint64)
    # NaNs whose payload a carry would take past the exponent field, with large draws
    nans = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7FBFFFFF, 0xFFC00001], np.uint32).view(np.float32)
    x = np.concatenate([x, np.repeat(nans, 2)])
    rnd = np.concatenate([rnd, np.tile(np.array([(1 << 64) - 1, 1 << 63], np.uint64), 4)])
    for overflow in Overflow:
        b = widen(x).view(np.uint64)
        pol = policy_of(fmt, Rounding.STOCHASTIC, overflow)
        want, _ = kernel.kernel_general(b, kernel.kernel_params(fmt), pol, _Draws(rnd))
        out = np.empty(x.size, np.uint64)
        fast.run_float32(x, out, kernel.kernel_params(fmt), pol, None, _Draws(rnd))
        bad = out != want
        i = np.flatnonzero(bad)
        assert not bad.any(), (f"{fmt_name} {overflow.value}: {i.size} differ; first x="
                               f"{x[i[0]]!r}, draw {int(rnd[i[0]]):#x}: got "
                               f"{int(out[i[0]]):#x}, want {int(want[i[0]]):#x}")


# -- the widenings ----------------------------------------------------------------------------

def _widening_cases():
    sources = {np.dtype(np.float16), np.dtype(np.float32)}
    sources |= {f.storage_dtype for f in PRESETS.values() if f.storage_dtype.itemsize <= 4}
    for row in fast.WIDENINGS:
        for src in sorted(sources, key=str):
            for out in sorted(row.outputs, key=str):
                if row.serves(src, out):
                    yield pytest.param(row.name, src, out, id=f"{row.name}-{src}-{out}")


def _every_pattern(dtype: np.dtype) -> np.ndarray:
    """Every pattern of a one- or two-byte type; float32: a spread, and its specials."""
    if dtype.itemsize <= 2:
        return np.arange(1 << (8 * dtype.itemsize)).astype(f"u{dtype.itemsize}").view(dtype)
    spread = np.arange(0, 1 << 32, 65537, dtype=np.uint64).astype(np.uint32)
    special = np.array([0, 1, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00123, 0x00800000],
                       np.uint32)
    return np.concatenate([spread, special, special | np.uint32(1 << 31)]).view(dtype)


@pytest.mark.parametrize(("name", "src", "out"), list(_widening_cases()))
def test_widening_equals_astype(name: str, src: np.dtype, out: np.dtype) -> None:
    """Every WIDENINGS row against the library's astype: the same bits where that is not a
    NaN, a NaN where it is; on every pattern (tiled past the row's size switch) and on a
    short run below it."""
    row = {w.name: w for w in fast.WIDENINGS}[name]
    x0 = _every_pattern(src)
    for x in (np.tile(x0, math.ceil(max(TILE, row.min_size) / x0.size)), x0[:100]):
        got = row.apply(x, out)
        with np.errstate(invalid="ignore"):
            want = x.astype(out)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        u = f"u{want.itemsize}"
        nan = np.isnan(want)
        bad = np.isnan(got) != nan
        bad |= (got.view(u) != want.view(u)) & ~nan
        assert not bad.any(), (f"{name} {src} -> {out}: {int(bad.sum())} differ; first "
                               f"pattern {int(x.view(f'u{src.itemsize}')[np.argmax(bad)]):#x}")


def test_every_widening_has_a_case() -> None:
    assert {c.values[0] for c in _widening_cases()} == {w.name for w in fast.WIDENINGS}


def test_memoised_row_choice_equals_a_fresh_one_in_any_order() -> None:
    """array_path / float32_path memoise their row per policy: every policy field a row's
    serves() reads is in the key, so after any sequence of calls each answer is the row a
    fresh scan of the registry picks (a field left out of the key would hand one policy
    another's row, e.g. full-precision stochastic rounding for random_bits=8)."""
    pols = [policy_of(f, m, overflow=o, subnormals=s, random_bits=rb)
            for f in ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "e5m7")
            for m, rb in (("nearest_even", None), ("up", None), ("stochastic", None),
                          ("stochastic", 8))
            for o in ("inf", "saturate") for s in ("keep", "flush")]
    f32 = np.dtype(np.float32)
    for order in (pols, pols[::-1], pols[1::2] + pols[::2]):
        fast._ARRAY_PATHS.clear()
        fast._FLOAT32_PATHS.clear()
        for pol in order:
            for dtype in (f32, np.dtype(np.float64)):
                for cast in (False, True):
                    fresh = next((r for r in fast._ARRAY_ROWS
                                  if r.stores == cast and r.serves(pol, dtype)), None)
                    assert fast.array_path(pol, dtype, cast) is fresh, (pol, dtype, cast)
            fresh = next((r for r in fast._FLOAT32_ROWS if r.serves(pol, f32)), None)
            assert fast.float32_path(pol) is fresh, pol
