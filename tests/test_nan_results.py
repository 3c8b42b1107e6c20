"""The NaN an operation returns is the same on every path, CPU and NumPy version (issue 32,
item 5: a result must not depend on a dependency's version): a NaN operand or an invalid
operation gives the canonical quiet NaN (+, payload 0), an overflow to NaN in a format
without inf keeps its sign (as fpsim.round does)."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim.arithmetic import add, div, fma, mul, sqrt, sub

CANONICAL = np.float64(np.nan).view(np.uint64)
NEG_NAN = np.uint64(CANONICAL | np.uint64(1 << 63))
FORMATS = ["fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz"]
BIG = 70_000  # above arithmetic._CHUNK: the chunked path


def _bits(x) -> np.ndarray:
    return np.asarray(x, np.float64).view(np.uint64)


def _cases(dtype) -> dict[str, tuple]:
    """name -> operands whose result is a NaN of a NaN operand or of an invalid operation;
    NaNs of both signs and with payloads, in either position."""
    pay = np.uint64(CANONICAL | np.uint64(12345))
    nans = np.array([np.nan, -np.nan, pay.view(np.float64), (pay | NEG_NAN).view(np.float64)])
    nan = np.resize(nans, 16).astype(dtype)
    one = np.full(16, 1.5, dtype)
    inf = np.full(16, np.inf, dtype)
    zero = np.zeros(16, dtype)
    return {
        "add nan, x": (add, nan, one), "add x, nan": (add, one, nan),
        "add nan, nan": (add, nan, nan[::-1].copy()), "sub x, nan": (sub, one, nan),
        "sub inf, inf": (sub, inf, inf), "add inf, -inf": (add, inf, -inf),
        "mul 0, inf": (mul, zero, -inf), "mul nan, x": (mul, nan, -one),
        "div 0, 0": (div, zero, -zero), "div inf, inf": (div, -inf, inf),
        "div nan, x": (div, nan, one), "sqrt -x": (sqrt, -one), "sqrt nan": (sqrt, nan),
        "fma 0, inf, x": (fma, zero, inf, one), "fma x, x, nan": (fma, one, one, nan),
    }


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero"])
def test_nan_results_are_the_canonical_quiet_nan(fmt, dtype, mode):
    for name, (op, *args) in _cases(dtype).items():
        if op is fma and fmt == "fp32":
            continue  # fma takes formats of at most 25 precision bits
        results = {
            "array": op(*args, fmt, mode),
            "flags": op(*args, fmt, mode, flags=True)[0],
            "scalar": np.array([op(*(a[i] for a in args), fmt, mode)
                                for i in range(len(args[0]))]),
            "chunked": op(*(np.resize(a, BIG) for a in args), fmt, mode),
        }
        for how, got in results.items():
            got = _bits(got)
            assert (got == CANONICAL).all(), (fmt, name, how, [hex(g) for g in set(got)])


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e4m3fnuz"])
def test_an_overflow_to_nan_keeps_its_sign(fmt):
    """Formats without inf: an overflow rounds to NaN with the sign of the result, on every
    path, also from operands that overflow in the conversion (to a NaN of their sign)."""
    x = np.array([200.0, -200.0, 240.0, -240.0])  # values of both formats
    want = np.array([False, True, False, True])  # sign of the result: of x * 4
    for got in (mul(x, 4.0, fmt), mul(x.astype(np.float32), np.float32(4.0), fmt),
                np.array([mul(v, 4.0, fmt) for v in x]), mul(x, 4.0, fmt, flags=True)[0],
                mul(np.resize(x, BIG), 4.0, fmt)[:4], div(x, 0.25, fmt),
                div(x.astype(np.float16), np.float16(0.0), fmt)):
        assert np.isnan(got).all() and (np.signbit(got) == want).all(), got
    # an operand that is a NaN once converted (1e6 -> NaN of its sign) then gives the
    # canonical NaN: the result is a NaN operand's, not an overflow
    assert _bits(sub(np.float64(1e6), np.float64(-1e6), fmt)) == CANONICAL
