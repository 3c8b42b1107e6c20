"""The float-domain fast paths of the rounding core (``rounding.fast._kernel_float`` on
float64 patterns, ``rounding.fast._round32`` on float32 values, ``rounding.fast.store_values``'
fp16 bit path) against the general kernel on the patterns (``rounding.kernel.kernel_general``,
which ``flags=True`` takes)
and against independent references: NumPy's float16 cast, ml_dtypes' float32 -> float8 casts
and the exact Fraction reference of tests/exact.py. The grid: every binade of each format
(sampled above 2**8 significands), its values, the midpoints between neighbours and the
float64 / float32 numbers next to both, the subnormals, deep underflow around half the
smallest subnormal, the overflow threshold, float64 subnormals, the largest floats, signed
zeros, infinities and NaNs (quiet and signalling, with payloads)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import rounding
from fpsim.formats import Format, NaNEncoding
from fpsim.modes import Overflow, Rounding
from fpsim.rounding import fast as fast_paths
from fpsim.rounding import kernel
from tests.exact import round_exact, same

DETERMINISTIC = [m for m in Rounding if m is not Rounding.STOCHASTIC]
FORMATS = {
    "fp16": fpsim.get_format("fp16"),
    "fp8_e4m3": fpsim.get_format("fp8_e4m3"),
    "fp8_e5m2": fpsim.get_format("fp8_e5m2"),
    "fp8_e4m3fnuz": fpsim.get_format("fp8_e4m3fnuz"),
    "fp8_e5m2fnuz": fpsim.get_format("fp8_e5m2fnuz"),
    "fp6_e2m3": fpsim.get_format("fp6_e2m3"),
    "fp6_e3m2": fpsim.get_format("fp6_e3m2"),
    "fp4_e2m1": fpsim.get_format("fp4_e2m1"),
    "e5m7": Format(5, 7),
    "e8m7 (bf16's fields)": Format(8, 7),
    "e6m20": Format(6, 20),
    "e10m30": Format(10, 30),
    "e3m1": Format(3, 1),
    # the bottom of float64: the smallest subnormal is 2**-1022, the smallest normal quantum
    "e10m10 bias 1013": Format(10, 10, 1013),
    "e8m12 fnuz": Format(8, 12, nan_encoding=NaNEncoding.FNUZ),
}


def _values(fmt: Format, rng: np.random.Generator) -> np.ndarray:
    """Positive values of ``fmt`` (subnormals, every binade, beyond the largest finite one)
    as float64: significands all (m <= 8) or sampled."""
    m = fmt.mantissa_bits
    if m <= 8:
        sig = np.arange(1 << (m + 1), dtype=np.float64)
    else:
        top = 1 << (m + 1)
        sig = np.concatenate([np.arange(6), (1 << m) + np.arange(-3, 4), top - np.arange(1, 6),
                              rng.integers(0, top, 40)]).astype(np.float64)
    exps = np.arange(fmt.emin, fmt.emax + 2)  # one binade past the largest finite value
    if exps.size > 80:  # wide formats: both ends and a sample of the middle
        exps = np.unique(np.concatenate([exps[:30], exps[-30:], rng.choice(exps, 20)]))
    v = np.ldexp(sig[None, :], (exps - m)[:, None]).reshape(-1)
    return np.unique(v[np.isfinite(v)])


def grid(fmt: Format, dtype=np.float64, seed: int = 0) -> np.ndarray:
    """The inputs: the format's values, the midpoints between neighbours and the numbers of
    ``dtype`` next to both, deep underflow and the special values, both signs."""
    rng = np.random.default_rng(seed)
    v = _values(fmt, rng)
    q = np.ldexp(1.0, fmt.emin - fmt.mantissa_bits)
    mids = (v[:-1] + v[1:]) / 2  # exact in float64 (m <= 50)
    deep = q * np.array([0.125, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5])
    edge = np.array([fmt.max, fmt.max * (1 + 2.0 ** -(fmt.mantissa_bits + 1)), 2.0 * fmt.max])
    with np.errstate(over="ignore", invalid="ignore"):
        base = np.concatenate([v, mids, deep, edge]).astype(dtype)
        finfo = np.finfo(dtype)
        extra = np.array([0.0, finfo.smallest_subnormal, finfo.smallest_normal, finfo.max,
                          finfo.max / 3, np.inf], dtype=dtype)
        x = np.concatenate([base, np.nextafter(base, dtype(np.inf)),
                            np.nextafter(base, dtype(0)), extra])
    x = np.concatenate([x, -x])
    ubits = {4: np.uint32, 8: np.uint64}[x.itemsize]
    quiet = ubits(1) << ubits(8 * x.itemsize - 1 - (12 if x.itemsize == 8 else 9))
    inf_bits = np.array(np.inf, dtype).view(ubits)
    nans = np.array([inf_bits | quiet, inf_bits | quiet | ubits(5), inf_bits | ubits(1),
                     inf_bits | ubits(quiet >> ubits(1))], dtype=ubits)
    nans = np.concatenate([nans, nans | (ubits(1) << ubits(8 * x.itemsize - 1))])
    return np.concatenate([x, nans.view(dtype)])


def assert_bits(got: np.ndarray, want: np.ndarray, x: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(got.view(np.uint64) != want.view(np.uint64))
    if bad.size:
        i = bad[0]
        raise AssertionError(f"{what}: {bad.size} of {x.size} differ; first: input "
                             f"{x[i]!r}, got {got[i]!r}, want {want[i]!r}")


def _general(bits: np.ndarray, fmt: Format, mode: Rounding, overflow: Overflow) -> np.ndarray:
    p = rounding.kernel_params(fmt)
    r, _ = kernel.kernel_general(bits, p, rounding.policy_of(fmt, mode, overflow))
    return r


@pytest.mark.parametrize("name", list(FORMATS))
def test_kernel_float_equals_the_general_kernel(name: str) -> None:
    fmt = FORMATS[name]
    p = rounding.kernel_params(fmt)
    assert p.fast, f"{name} should take the float-domain path"
    x = grid(fmt)
    b = x.view(np.uint64)
    for mode in DETERMINISTIC:
        for overflow in Overflow:
            want = _general(b, fmt, mode, overflow)
            got = fast_paths._kernel_float(b, p, rounding.policy_of(fmt, mode, overflow))
            assert_bits(got.view(np.float64), want.view(np.float64), x,
                        f"{name} {mode.value} {overflow.value}")
            # and through the public function: no flags takes the fast path, flags the other
            fast = fpsim.round(x, fmt, mode, overflow=overflow.value)
            general, _ = fpsim.round(x, fmt, mode, overflow=overflow.value, flags=True)
            assert_bits(fast, general, x, f"round {name} {mode.value} {overflow.value}")


FORMATS32 = {k: f for k, f in FORMATS.items() if rounding.kernel_params(f).fast32}


def test_float32_formats_are_the_expected_ones() -> None:
    assert {"fp16", "fp8_e4m3", "fp8_e5m2", "e5m7", "fp4_e2m1"} <= set(FORMATS32)
    assert not rounding.kernel_params(fpsim.get_format("bf16")).fast32  # quanta below 2**-126
    assert not rounding.kernel_params(fpsim.get_format("fp32")).fast32


@pytest.mark.parametrize("name", list(FORMATS32))
def test_float32_path_equals_the_general_kernel(name: str) -> None:
    fmt = FORMATS32[name]
    x = grid(fmt, np.float32)
    for mode in DETERMINISTIC:
        for overflow in Overflow:
            fast = fpsim.round(x, fmt, mode, overflow=overflow.value)
            general, _ = fpsim.round(x, fmt, mode, overflow=overflow.value, flags=True)
            assert_bits(fast, general, x, f"{name} {mode.value} {overflow.value}")
            if fmt.nan_encoding is not NaNEncoding.NONE:  # cast refuses NaN there
                c = fpsim.cast(x, fmt, mode, overflow=overflow.value)
                cg, _ = fpsim.cast(x, fmt, mode, overflow=overflow.value, flags=True)
                assert c.dtype == cg.dtype == fmt.storage_dtype
                u = {1: np.uint8, 2: np.uint16, 4: np.uint32}[c.itemsize]
                np.testing.assert_array_equal(c.view(u), cg.view(u))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fp16_nearest_even_equals_numpys_cast(dtype) -> None:
    """NumPy's float32 / float64 -> float16 casts round once, to nearest even."""
    x = grid(fpsim.get_format("fp16"), dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    got = fpsim.round(x, "fp16")
    nan = np.isnan(x)
    assert_bits(got[~nan], want[~nan].astype(np.float64), x[~nan], "round")
    assert np.isnan(got[nan]).all()
    c = fpsim.cast(x, "fp16")
    # quiet NaNs too: the top 10 bits of the payload, as NumPy keeps them (fpsim quiets a
    # signalling NaN first, NumPy keeps it signalling)
    x16 = want.view(np.uint16)
    quiet = ~nan | ((x16 & np.uint16(0x200)) != 0)
    np.testing.assert_array_equal(c.view(np.uint16)[quiet], x16[quiet])
    assert np.isnan(c[nan]).all()


@pytest.mark.parametrize("name,dtype", [("fp8_e4m3", ml_dtypes.float8_e4m3fn),
                                        ("fp8_e5m2", ml_dtypes.float8_e5m2),
                                        ("fp8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz),
                                        ("fp8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz)])
def test_fp8_nearest_even_equals_ml_dtypes_float32_cast(name: str, dtype) -> None:
    """ml_dtypes' float32 -> float8 casts round once, to nearest even (overflow to NaN / inf
    as fpsim's overflow='inf')."""
    x = grid(FORMATS[name], np.float32)
    x = x[~np.isnan(x)]
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(dtype).astype(np.float64)
    got = fpsim.round(x, name)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert_bits(got[~nan], want[~nan], x[~nan], name)


@pytest.mark.parametrize("name", ["fp16", "fp8_e4m3", "e5m7", "fp4_e2m1", "e10m10 bias 1013",
                                  "e8m12 fnuz"])
@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_fast_paths_equal_the_exact_reference(name: str, mode: Rounding) -> None:
    """A sample of the grid against tests/exact.py's Fractions (IEEE 754's definitions)."""
    fmt = FORMATS[name]
    rng = np.random.default_rng(1)
    for dtype in (np.float64, np.float32):
        if dtype is np.float32 and name not in FORMATS32:
            continue
        x = grid(fmt, dtype)
        x = x[rng.choice(x.size, min(400, x.size), replace=False)]
        got = fpsim.round(x, fmt, mode)
        for xi, gi in zip(x.tolist(), got.tolist(), strict=True):
            want, _ = round_exact(float(xi), fmt, mode.value)
            assert same(gi, want), (name, mode.value, xi, gi, want)


def test_inputs_are_not_mutated_and_views_work() -> None:
    x = grid(fpsim.get_format("fp8_e4m3"), np.float32)
    with np.errstate(invalid="ignore"):  # widening a signalling NaN
        x64 = x.astype(np.float64)
    for arr in (x, x64):
        before = arr.copy()
        view = arr[::3]
        got = fpsim.round(view, "fp8_e4m3", "up")
        np.testing.assert_array_equal(arr.view(np.uint8), before.view(np.uint8))
        general, _ = fpsim.round(view, "fp8_e4m3", "up", flags=True)
        assert_bits(got, general, view, "strided view")


def test_many_chunks(monkeypatch) -> None:
    """Chunk boundaries (and a bad element at each end of a chunk) change nothing."""
    monkeypatch.setattr(kernel, "CHUNK", 7)
    for dtype in (np.float32, np.float64):
        x = grid(fpsim.get_format("fp16"), dtype)
        for mode in (Rounding.NEAREST_EVEN, Rounding.UP):
            fast = fpsim.round(x, "fp16", mode)
            general, _ = fpsim.round(x, "fp16", mode, flags=True)
            assert_bits(fast, general, x, f"{dtype} {mode.value}")
            c = fpsim.cast(x, "fp16", mode)
            np.testing.assert_array_equal(c.view(np.uint16),
                                          fpsim.cast(x, "fp16", mode, flags=True)[0]
                                          .view(np.uint16))


@pytest.mark.parametrize("name", ["fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz",
                                  "fp8_e5m2fnuz"])
@pytest.mark.parametrize("mode", [Rounding.NEAREST_EVEN, Rounding.DOWN, Rounding.STOCHASTIC])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cast_stores_the_bits_numpy_and_ml_dtypes_give(name: str, mode: Rounding,
                                                      dtype) -> None:
    """cast builds the storage patterns from the float32 bits (_store_values); NumPy's and
    ml_dtypes' own casts of the (exact) rounded values are the reference, NaNs included."""
    fmt = FORMATS[name]
    x = grid(fmt, dtype)
    store = fmt.storage_dtype
    for flags in (False, True):
        kw = {"rng": 0} if mode is Rounding.STOCHASTIC else {}
        got = fpsim.cast(x, fmt, mode, flags=flags, **kw)
        got = got[0] if flags else got
        with np.errstate(invalid="ignore"):
            want = fpsim.round(x, fmt, mode, **kw).astype(np.float32).astype(store)
        u = {1: np.uint8, 2: np.uint16}[store.itemsize]
        np.testing.assert_array_equal(got.view(u), want.view(u))
