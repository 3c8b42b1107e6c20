"""The rounded add on Python floats (``fpsim.rounding.scalar``, moved in from the reductions)
against the vectorised kernel (``fpsim.add`` with flags: the general path) on one grid of
operand pairs per format: sums at and between neighbours, ties, subnormal and zero results
(signs included), the overflow edge, infinities and NaN; every deterministic mode with the
policies, and stochastic rounding with the same generator (values, flags and the draws)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fpsim
from fpsim.arithmetic import plan_for
from fpsim.rounding import policy_of
from fpsim.rounding.scalar import StochasticAdder, bits64, float64_of, nan_of, scalar_adder

FORMATS = ["bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp6_e2m3",
           "fp4_e2m1"]
MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"]
POLICIES = [{}, {"overflow": "saturate"}, {"subnormals": "flush"}, {"subnormals": "flush_daz"},
            {"subnormals": "daz"}, {"tininess": "before"}]


def _pairs(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Operand pairs of values of the format whose exact sums land on the grid's regions."""
    fmt = fpsim.get_format(name)
    m, tiny, big = fmt.mantissa_bits, fmt.smallest_normal, float(fmt.max)
    q = 2.0 ** (fmt.emin - m)  # the subnormal spacing
    rng = np.random.default_rng(len(name))
    base = [1.0, 1.5, tiny, 2 * tiny, big, big / 2, 3 * q, q, 0.0, -0.0]
    deltas = [q, -q, 2.0 ** -(m + 1), -(2.0 ** -(m + 1)), 2.0 ** -(m + 2), 2.0 ** -m,
              tiny / 2, big / 4, -tiny, 0.0, -0.0, 1.0]
    a = [x for x in base for _ in deltas] + list(rng.standard_normal(200) * 4)
    b = [d for _ in base for d in deltas] + list(rng.standard_normal(200) * 2.0 ** -m)
    a += [math.inf, math.inf, -math.inf, math.nan, 1.0]
    b += [1.0, -math.inf, -math.inf, 1.0, math.nan]
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.asarray(fpsim.round(np.array(a), fmt)),
                np.asarray(fpsim.round(np.array(b), fmt)))


def _bits(v) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return np.where(np.isnan(v), np.uint64(0x7FF8 << 48), v.view(np.uint64))


@pytest.mark.parametrize("name", FORMATS)
def test_scalar_adder_equals_the_kernel(name: str) -> None:
    a, b = _pairs(name)
    for mode in MODES:
        for opts in POLICIES:
            add, flags = scalar_adder(policy_of(name, mode, **opts), want=True)
            got, fl = [], []
            for x, y in zip(a.tolist(), b.tolist(), strict=True):
                flags[0] = 0
                got.append(add(x, y))
                fl.append(flags[0])
            want, wfl = fpsim.add(a, b, name, mode, flags=True, **opts)
            assert np.array_equal(_bits(got), _bits(want)), (name, mode, opts)
            assert np.array_equal(np.array(fl, np.uint8), wfl), (name, mode, opts)


@pytest.mark.parametrize("name", FORMATS)
def test_stochastic_adder_equals_the_kernel(name: str) -> None:
    """One add of all pairs as rows (one draw per row, in order): the kernel's values and
    flags from a generator with the same seed, which ends in the same state."""
    a, b = _pairs(name)
    exact = plan_for(fpsim.get_format(name)).add_exact
    for rb in (None, 3, 40):
        g, ref = np.random.default_rng(4), np.random.default_rng(4)
        st = StochasticAdder(policy_of(name, "stochastic", rng=g, random_bits=rb), a.size, 1,
                             exact=exact, want=True)
        got = st.add(a.tolist(), b.tolist())
        want, wfl = fpsim.add(a, b, name, "stochastic", rng=ref, random_bits=rb, flags=True)
        assert np.array_equal(_bits(got), _bits(want)), (name, rb)
        assert np.array_equal(np.array(st.fl, np.uint8), wfl), (name, rb)
        assert g.integers(1 << 62) == ref.integers(1 << 62), (name, rb)


def test_patterns_round_trip() -> None:
    for v in (0.0, -0.0, 1.0, -2.5, 5e-324, math.inf):
        assert float64_of(bits64(v)) == v and math.copysign(1, float64_of(bits64(v))) == \
            math.copysign(1, v)


NANS = [float64_of(b) for b in (0x7FF8000000000000, 0xFFF8000000000123, 0x7FF0000000000456,
                                0xFFF4000000000000)]  # quiet and signalling, both signs


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32", "fp8_e4m3"])
def test_nan_plus_nan_is_the_vectorised_adds_every_time(name):
    """NaN operands: every adder returns nan_of's NaN (the first NaN operand's pattern with
    the quiet bit set, set here by bits; inf - inf the canonical quiet NaN), call after call
    (CPython's own float add picked either operand's NaN as the interpreter specialised the
    expression), and so does the vectorised kernel's add (NumPy 2.2's float64 add of long
    arrays returned the second NaN)."""
    others = NANS + [1.0, -np.inf]
    want = {(i, j): bits64(a) | (1 << 51) for i, a in enumerate(NANS)
            for j, _ in enumerate(others)}
    det = scalar_adder(policy_of(name))[0]
    st = StochasticAdder(policy_of(name, "stochastic", rng=0), 1, 10_000,
                         exact=plan_for(fpsim.get_format(name)).add_exact)
    assert bits64(nan_of(np.inf, -np.inf)) == 0x7FF8000000000000
    assert bits64(det(np.inf, -np.inf)) == 0x7FF8000000000000
    a64 = np.repeat(np.array(NANS), len(others))
    b64 = np.tile(np.array(others), len(NANS))
    with np.errstate(invalid="ignore"):
        got = fpsim.sum(np.stack([np.tile(a64, 2), np.tile(b64, 2)], axis=1), name, axis=1,
                        order="sequential", rounding="up")  # 40 rows: the vectorised loop
    assert [bits64(v) for v in got[:len(a64)]] == [want[k] for k in sorted(want)]
    for _ in range(3):  # repeated: the interpreter specialises hot code after a few runs
        for (i, j), w in want.items():
            a, b = NANS[i], others[j]
            assert bits64(nan_of(a, b)) == w
            assert bits64(det(a, b)) == w, (name, hex(w))
            assert bits64(st.add1(a, b)) == w
            assert bits64(st.add([a], [b])[0]) == w
            assert bits64(det(b, a)) == (bits64(b) | (1 << 51) if b != b else w)
