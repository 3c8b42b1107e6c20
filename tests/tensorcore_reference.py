"""A slow, exact, scalar reference of the tensor-core block-FMA model, on fractions.Fraction.

Written straight from docs/tensorcore-model.md ("One block FMA" steps 1-7 and "A longer K"),
one block and one term at a time, independently of fpsim.tensorcore's vectorised kernel:
exponents by integer bit lengths, alignment and truncation on exact rationals, the final
rounding by its own floor / tie rule (not fpsim.round). Step 4's "if neab < 0 the term first
loses -neab low bits" is done literally (two truncations), which the kernel folds into one.

Parameters are a plain :class:`Unit`; inputs are exact values already in the input format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction


def pow2(k: int) -> Fraction:
    """2**k exactly."""
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def floor_log2(x: Fraction) -> int:
    """floor(log2(x)) for x > 0, exactly."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while pow2(e) > x:
        e -= 1
    while pow2(e + 1) <= x:
        e += 1
    return e


@dataclass(frozen=True)
class Unit:
    """Block size n, extra bits neab, 'rz' or 'rne', the floor mel (None: none), the input
    format's emin, and the output format (mantissa bits, emin, emax)."""

    n: int
    neab: int
    rounding: str
    mel: int | None
    in_emin: int
    out_mant: int = 23
    out_emin: int = -126
    out_emax: int = 127


# (in_emin of the input formats) and the doc's parameter table
IN_EMIN = {"fp16": -14, "bf16": -126, "tf32": -126, "fp8_e4m3": -6, "fp8_e5m2": -14}
FP32_OUT = (23, -126, 127)
FP16_OUT = (10, -14, 15)


def unit_for(gpu: str, fin: str, fout: str) -> Unit:
    """The doc's table, typed in again (not read from fpsim)."""
    out = FP32_OUT if fout == "fp32" else FP16_OUT
    rz = "rz" if fout == "fp32" else "rne"
    fp8 = fin.startswith("fp8")
    if gpu == "V100":
        n, neab, mel = 4, 0, (None if fout == "fp32" else -19)
    elif gpu in ("A100", "A30", "A2", "Ada", "L40S"):
        n, neab, mel = (4 if fin == "tf32" else 8), 1, (-132 if fout == "fp32" else -20)
        if fp8:
            n, neab = 16, -10
    elif gpu in ("H100", "H200", "B200"):
        n, neab, mel = (8 if fin == "tf32" else 16), 2, (-133 if fout == "fp32" else -21)
        if fp8:
            n, neab = 32, -10
    else:
        raise ValueError(gpu)
    return Unit(n, neab, rz, mel, IN_EMIN[fin], *out)


def round_to(x: Fraction, mant: int, emin: int, emax: int, mode: str) -> float:
    """x rounded to a binary format (subnormals kept); an exact value whose exponent exceeds
    emax, or a rounding up to 2**(emax+1), gives +-inf (the model's overflow rule)."""
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    ax = abs(x)
    e_true = floor_log2(ax)
    if e_true > emax:
        return sign * math.inf
    e = max(e_true, emin)
    t = ax / pow2(e - mant)
    n = t.numerator // t.denominator
    if mode == "rne":
        rem = t - n
        if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
            n += 1
    elif mode != "rz":
        raise ValueError(mode)
    r = n * pow2(e - mant)
    if r >= pow2(emax + 1):
        return sign * math.inf
    return sign * float(r)  # r is representable: float() is exact


def block_fma(a: list, b: list, c: float, u: Unit) -> float:
    """d = c + sum a_i b_i for one block of finite values (steps 1-6)."""
    F = 23 + u.neab
    terms = []  # (exact value, exponent, fraction bits of its own significand)
    for x, y in zip(a, b, strict=True):
        x, y = Fraction(x), Fraction(y)
        if x == 0 or y == 0:
            continue  # zero products take no part in the alignment
        ex = max(floor_log2(abs(x)), u.in_emin)
        ey = max(floor_log2(abs(y)), u.in_emin)
        terms.append((x * y, ex + ey))
    cf = Fraction(c)
    if cf != 0:
        terms.append((cf, max(floor_log2(abs(cf)), -126)))
    if not terms:
        return 0.0
    max_e = max(e for _, e in terms)
    if u.mel is not None:
        max_e = max(max_e, u.mel)
    total = 0
    for v, e in terms:
        mag = abs(v)
        if u.neab < 0:  # first lose -neab low bits of the term's own 23-bit fraction
            q = mag * pow2(23 + u.neab - e)
            mag = (q.numerator // q.denominator) * pow2(e - 23 - u.neab)
        q = mag * pow2(F - max_e)
        t = q.numerator // q.denominator  # truncate the magnitude
        total += t if v > 0 else -t
    if total == 0:
        return 0.0  # exactly zero: +0
    mant = u.out_mant + min(u.neab, 0)
    return round_to(total * pow2(max_e - F), mant, u.out_emin, u.out_emax,
                    "rz" if u.rounding == "rz" else "rne")


def dot(a: list, b: list, c: float, u: Unit) -> float:
    """Chained blocks over K (step 7 first: special values over the whole dot product)."""
    nan = math.isnan(c) or any(math.isnan(x) for x in a) or any(math.isnan(y) for y in b)
    pos = c == math.inf
    neg = c == -math.inf
    for x, y in zip(a, b, strict=True):
        if math.isinf(x) or math.isinf(y):
            if x == 0 or y == 0:
                nan = True
            elif (x > 0) == (y > 0):
                pos = True
            else:
                neg = True
    if nan or (pos and neg):
        return math.nan
    if pos:
        return math.inf
    if neg:
        return -math.inf
    d = c
    k = len(a)
    for k0 in range(0, max(k, 1), u.n):
        if math.isinf(d):
            break  # an overflowed block result stays infinite
        d = block_fma(list(a[k0:k0 + u.n]), list(b[k0:k0 + u.n]), d, u)
    return d


def matmul(A, B, C, u: Unit) -> list[list[float]]:
    """D[i][j] = dot(row i of A, column j of B, C[i][j])."""
    M, K, N = len(A), len(B), len(B[0])
    return [[dot([A[i][k] for k in range(K)], [B[k][j] for k in range(K)], C[i][j], u)
             for j in range(N)] for i in range(M)]


# -- the generic block FMA's aligned-summation parameters (docs/tensorcore-model.md) -----------

@dataclass(frozen=True)
class Generic:
    """The aligned-summation parameters beyond :class:`Unit`: sticky bit, normalised products,
    late c (two-operand alignment rounding 'rz' / 'rd' / 'ru' / 'rne', extra bits of the
    product sum), odd/even groups, truncation of a c far below the products."""

    sticky: bool = False
    normalised: bool = False
    late: bool = False
    armode: str = "rz"
    late_bits: int = 7
    odd_even: bool = False
    c_far: int | None = None


def _round_int(q: Fraction, mode: str) -> int:
    """q rounded to an integer: 'rz', 'rd' (floor), 'ru' (ceiling), 'rne'."""
    fl = q.numerator // q.denominator
    if mode == "rd" or (mode == "rz" and q >= 0):
        return fl
    if mode == "ru" or mode == "rz":
        return fl if fl == q else fl + 1
    rem = q - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        return fl + 1
    return fl


def _align(terms: list, F: int, mel: int | None, sticky: bool) -> tuple[int, int, int] | None:
    """Terms (value, exponent) aligned to their largest exponent (floored by mel), magnitudes
    truncated to F fraction bits (plus a sticky bit): (integer sum, exponent, fraction bits),
    or None for no non-zero term."""
    live = [(v, e) for v, e in terms if v != 0]
    if not live:
        return None
    mx = max(e for _, e in live)
    if mel is not None:
        mx = max(mx, mel)
    total = 0
    for v, _ in live:
        q = abs(v) * pow2(F - mx)
        t = q.numerator // q.denominator
        if sticky:
            t = 2 * t + (1 if t != q else 0)
        total += t if v > 0 else -t
    return total, mx, F + int(sticky)


def _two(x: int, ex: int, y: int, ey: int, extra: int, mode: str, far: int | None):
    """Two signed integer sums with the same fraction bits: the smaller shifted to the larger
    exponent and rounded by mode (x gaining ``extra`` bits first when it is the smaller)."""
    if ex < ey:
        x, y = x << extra, y << extra
        return _round_int(Fraction(x, 1 << (ey - ex)), mode) + y, ey, extra
    if ey < ex:
        m = "rz" if far is not None and ex - ey > far else mode
        return x + _round_int(Fraction(y, 1 << (ex - ey)), m), ex, 0
    return x + y, ex, 0


def block_generic(a: list, b: list, c: float, u: Unit, g: Generic) -> float:
    """One block of the aligned family with the generic parameters (finite values)."""
    F = 23 + u.neab
    prods = []
    for x, y in zip(a, b, strict=True):
        x, y = Fraction(x), Fraction(y)
        if x == 0 or y == 0:
            prods.append((Fraction(0), 0))
            continue
        e = max(floor_log2(abs(x)), u.in_emin) + max(floor_log2(abs(y)), u.in_emin)
        v = x * y
        if g.normalised and abs(v) >= pow2(e + 1):
            e += 1
        prods.append((v, e))
    cf = Fraction(c)
    ec = max(floor_log2(abs(cf)), -126) if cf != 0 else -126
    mant = u.out_mant + min(u.neab, 0)
    if not g.late:
        r = _align(prods + [(cf, ec)], F, u.mel, g.sticky)
        if r is None or r[0] == 0:
            return 0.0
        total, mx, Fe = r
        return round_to(total * pow2(mx - Fe), mant, u.out_emin, u.out_emax, u.rounding)
    if g.odd_even:
        re = _align(prods[0::2], F, u.mel, g.sticky)
        ro = _align(prods[1::2], F, u.mel, g.sticky)
        Fe = F + int(g.sticky)
        if re is None and ro is None:
            rp = None
        elif re is None or ro is None:
            rp = re or ro
        else:
            s, mx, _ = _two(re[0], re[1], ro[0], ro[1], 0, g.armode, None)
            rp = (s, mx, Fe)
    else:
        rp = _align(prods, F, u.mel, g.sticky)
        Fe = F + int(g.sticky)
    ic = cf * pow2(Fe - ec)
    assert ic.denominator == 1
    if rp is None:
        total, mx, gain = int(ic), ec, 0
    else:
        total, mx, gain = _two(rp[0], rp[1], int(ic), ec, g.late_bits, g.armode, g.c_far)
    if total == 0:
        return 0.0
    return round_to(total * pow2(mx - Fe - gain), mant, u.out_emin, u.out_emax, u.rounding)


def dot_generic(a: list, b: list, c: float, u: Unit, g: Generic) -> float:
    """Chained blocks of :func:`block_generic` (finite inputs)."""
    d = c
    for k0 in range(0, max(len(a), 1), u.n):
        if math.isinf(d):
            break
        d = block_generic(list(a[k0:k0 + u.n]), list(b[k0:k0 + u.n]), d, u, g)
    return d


def adversarial(rng, shape, lo: int = -40, hi: int = 40, *, fp16_subnormals: bool = False):
    """float64 test inputs mixing N(0, 1), wide exponents, powers of two, both zeros and
    values near 1 (cancellation); with ``fp16_subnormals`` also values in fp16's subnormal
    range (an eighth kind, so each choice keeps its own random stream)."""
    import numpy as np

    kind = rng.integers(0, 8 if fp16_subnormals else 7, size=shape)
    x = rng.standard_normal(shape)
    x = np.where(kind == 1, x * 2.0 ** rng.integers(lo, hi, size=shape), x)
    x = np.where(kind == 2, rng.choice([-1.0, 1.0], size=shape)
                 * 2.0 ** rng.integers(lo, 5, size=shape), x)
    x = np.where(kind == 3, 0.0, x)
    x = np.where(kind == 4, -0.0, x)
    x = np.where(kind == 5, 1 + rng.integers(-4, 4, size=shape) * 2.0**-10, x)
    if fp16_subnormals:
        x = np.where(kind == 6, rng.standard_normal(shape) * 2.0**-20, x)
    return x
