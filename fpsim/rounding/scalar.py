"""The rounded add on Python floats, for loops that run one add at a time (internal API: the
reductions' sequential, Kahan and 'wide' orders on few outputs, issue 35 item 2).

With few output rows, each step of a sequential or Kahan sum is a handful of NumPy calls on
arrays of one or a few elements: their fixed cost (microseconds each), not arithmetic, is the
time. For deterministic modes, :func:`scalar_adder` runs the same correctly rounded add (and its
flags) on Python floats instead. It is the IEEE rounding of the exact sum, as the kernel
computes it: s = fl(a + b) and its exact error lo (TwoSum), the value's binade from s (one lower
where s is a power of two and lo < 0), its quantum q = 2**(max(e, emin) - m), the position of (s
+ lo) / q between two multiples of q (exact: a multiple of q scaled by a power of two; lo only
decides ties, exact hits and which side of a grid point), the mode's choice, overflow and flush-
to-zero as the kernel's policies. tests/test_reductions_steps.py checks it against the Fraction
reference and the vectorised loop, values and zero signs. Mirror, on Python floats, of the
rounding package's bit kernel (fpsim/rounding/kernel.py: _increment_round, _round_low,
_overflow; fast.round_patterns' dispatch; pair.py's stochastic branch for
:class:`StochasticAdder`): a change to the rounding there must be made here too, and the other
way round; tests/test_reductions_steps.py, test_reductions_fast.py,
test_reductions_stochastic_fast.py and tests/test_rounding_scalar.py compare the two.

With stochastic rounding (:class:`StochasticAdder`), each rounded add of the vectorised loop
draws exactly one random value per row, in row order, from the policy's generator:
rng.integers(0, 2**64, dtype=uint64) when the step's sums are exact in float64 for every row
(round_flat -> run_chunks -> the kernel), else (TwoSum errors, formats whose adds are not exact
in float64, e.g. bf16) the pair path's rng.random() or, with random_bits = r, rng.integers(0,
2**r) (round_pair's stochastic branch). Every one of these consumes one next_uint64 of the bit
generator per value (r > 32: Lemire's bounded integer with a power-of-two range never rejects
and is u >> (64 - r); random() is (u >> 11) * 2**-53 for PCG64, PCG64DXSM, Philox and SFC64, not
MT19937), and a batch of n raw draws is the stream of n single ones. So the raw values are drawn
in blocks, exactly as many as the loop consumes (the generator ends in the same state), and each
op's rounding mirrors the kernel's integer code on float64 patterns. Where random() or 32-bit
integers would be needed and the identity does not hold, each op draws as the loop does.
tests/test_reductions_stochastic_fast.py checks values, flags and the generator's state.

The NaN an add returns is fpsim's one rule (:func:`nan_of`), whose home is here: the kernel's
float64 adds and products (``fpsim.arithmetic.add_flat``, ``mul_flat``) apply it to arrays by
:func:`nans_of`.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from ..flags import Flags
from ..formats import NaNEncoding
from ..modes import Overflow, Rounding, Tininess
from .kernel import EXP_MASK, FRAC, HIDDEN, QUIET, SIGN, kernel_params
from .policy import RoundingPolicy

__all__ = ["scalar_adder", "StochasticAdder", "bits64", "float64_of", "nan_of", "nans_of",
           "RAW_DOUBLE_BITGENS"]


def scalar_adder(policy: RoundingPolicy, daz: bool | None = None, want: bool = False):
    """fl(a + b) by a deterministic ``policy`` for Python floats a, b (values of the format,
    or any float64 values whose sum and TwoSum error neither overflow nor underflow: the
    exact products of fpsim.dot's order='wide'): the vectorised kernel's result, value and
    sign (see the module docstring). ``daz``: subnormal operands read as zero first (as
    :func:`fpsim.add` reads them; None: the policy's own, ``subnormals='daz'`` /
    ``'flush_daz'``). Returns ``(add, flags)``: with ``want``, ``add`` ORs each
    op's IEEE flags into ``flags[0]`` (as the kernel and the reductions' vectorised loop give
    them: INEXACT, UNDERFLOW by the tininess rule, OVERFLOW, INVALID for inf - inf and for
    NaN in a format without NaN).

    >>> from fpsim.rounding import policy_of
    >>> add, flags = scalar_adder(policy_of("bf16"), want=True)
    >>> add(256.0, 1.0), flags  # 257 is not a bf16 number: ties to even
    (256.0, [1])
    >>> scalar_adder(policy_of("fp16", "down"))[0](1.0, -1.0)
    -0.0
    """
    fmt, mode = policy.fmt, policy.rounding
    m, emin = fmt.mantissa_bits, fmt.emin
    fmax = fmt.max
    tiny = fmt.smallest_normal
    flush = policy.flush  # FLUSH and FLUSH_DAZ, or a format without subnormals
    daz = policy.daz if daz is None else daz
    before = policy.tininess is Tininess.BEFORE
    fnuz = fmt.nan_encoding is NaNEncoding.FNUZ
    no_nan = fmt.nan_encoding is NaNEncoding.NONE
    if policy.overflow is Overflow.SATURATE or no_nan:
        beyond = fmax  # what an overflow "away" gives
    elif fmt.nan_encoding is NaNEncoding.IEEE:
        beyond = math.inf
    else:
        beyond = math.nan
    saturate = policy.overflow is Overflow.SATURATE
    frexp, ldexp, isfinite, copysign = math.frexp, math.ldexp, math.isfinite, math.copysign
    inexact_f, under_f = int(Flags.INEXACT), int(Flags.UNDERFLOW)
    over_f, invalid_f = int(Flags.OVERFLOW | Flags.INEXACT), int(Flags.INVALID)
    flags = [0]

    def up_from(odd: bool, frac: float, lo: float, neg: bool) -> bool:
        """Round the inexact magnitude (n + frac) * q (+ lo) up to (n + 1) * q? (``odd``: is
        the lower neighbour n * q odd, i.e. its last kept bit set?)"""
        if mode is Rounding.TOWARD_ZERO:
            return False
        if mode is Rounding.UP:
            return not neg
        if mode is Rounding.DOWN:
            return neg
        if mode is Rounding.ODD:
            return not odd
        if frac == 0.5 and lo == 0.0:  # a tie
            return mode is Rounding.NEAREST_AWAY or odd
        return frac > 0.5 or (frac == 0.5 and lo > 0.0)

    def rounded(mag: float, lo: float, e: int, neg: bool) -> tuple[float, bool]:
        """(mag + lo) rounded with the quantum 2**(e - m), and whether inexact (mag, lo:
        magnitude and error, lo's sign relative to mag's). Exact scalings by powers of two:
        the position of the value between two multiples of q is t's fraction, and lo only
        decides a tie, an exact hit, or the side of a grid point (|lo| is at most half the
        spacing of the fractions t can have)."""
        q = ldexp(1.0, e - m)
        t = mag / q
        n = math.floor(t)
        frac = t - n
        if frac == 0.0:
            if lo == 0.0:
                return mag, False  # exact
            if lo < 0.0:  # just below the grid point n * q: above half of the step below
                n -= 1.0
                frac = 0.75
        # The kernel's last kept bit: the significand's (n's) for m >= 1; with no mantissa
        # bit, a normal n * q = 2**e is odd when the last bit of its (float64) biased exponent
        # is set, e even, while the subnormal range's n (0) is even, as in the kernel.
        odd = n % 2.0 == 1.0 if m or n == 0.0 else e % 2 == 0
        return (n + (1.0 if up_from(odd, frac, lo, neg) else 0.0)) * q, True

    def add(a: float, b: float) -> float:
        if daz:  # subnormal operands (a running total too) read as zero, as in fpsim.add
            if -tiny < a < tiny:
                a = copysign(0.0, a)
            if -tiny < b < tiny:
                b = copysign(0.0, b)
        s = a + b
        if not isfinite(s):  # inf or NaN operands, inf - inf: the kernel keeps the value
            if s != s:
                if want and (no_nan or (a == a and b == b)):
                    flags[0] |= invalid_f
                return nan_of(a, b)
            return s
        bb = s - a
        lo = (a - (s - bb)) + (b - bb)  # TwoSum: s + lo == a + b exactly
        if s == 0.0:  # an exact zero
            if mode is Rounding.DOWN:
                s = -0.0 if (copysign(1.0, a) < 0 or copysign(1.0, b) < 0) else 0.0
            return 0.0 if fnuz else s
        neg = s < 0.0
        mag = -s if neg else s
        if neg:
            lo = -lo
        f, ex = frexp(mag)
        e = ex - 1  # 2**e <= mag < 2**(e+1)
        if f == 0.5 and lo < 0.0:
            e -= 1  # a power of two minus a little: the binade below
        if e < emin:  # below 2**emin: subnormal results
            is_tiny = True
            if (flush or want) and not before:
                is_tiny = rounded(mag, lo, e, neg)[0] < tiny  # unbounded exponent
            if flush and is_tiny:
                if want:
                    flags[0] |= under_f | inexact_f
                return 0.0 if fnuz else copysign(0.0, s)
            r, inexact = rounded(mag, lo, emin, neg)
            if want and inexact:
                flags[0] |= (under_f | inexact_f) if is_tiny else inexact_f
        else:
            r, inexact = rounded(mag, lo, e, neg)
            if want and inexact:
                flags[0] |= inexact_f
        if r > fmax:
            if want:
                flags[0] |= over_f
            if saturate:
                r = fmax
            elif mode in (Rounding.NEAREST_EVEN, Rounding.NEAREST_AWAY):
                r = beyond
            elif mode is Rounding.UP:
                r = fmax if neg else beyond
            elif mode is Rounding.DOWN:
                r = beyond if neg else fmax
            else:
                r = fmax
        if r == 0.0 and fnuz:
            return 0.0
        return -r if neg else r

    return add, flags


RAW_DOUBLE_BITGENS = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)
DRAW_BLOCK = 1 << 14  # raw values per bulk draw: bounded memory
_M64 = (1 << 64) - 1
# the kernel's float64 pattern constants as Python ints
_SIGN64, _EXP64, _QUIET64, _HIDDEN64, _FRAC64 = (
    int(v) for v in (SIGN, EXP_MASK, QUIET, HIDDEN, FRAC))
_pack_d, _unpack_q = struct.Struct("<d").pack, struct.Struct("<Q").unpack
_pack_q, _unpack_d = struct.Struct("<Q").pack, struct.Struct("<d").unpack


def nan_of(a: float, b: float) -> float:
    """The NaN of ``a + b`` (a NaN) by fpsim's one rule for a NaN result: the first
    NaN operand's pattern, quieted; the canonical quiet NaN (+, payload 0) where neither
    operand is a NaN (inf - inf). IEEE 754 leaves the choice open, and the hardware and
    NumPy make it differently (CPython's float add picked either operand's NaN as the
    interpreter specialised the expression; NumPy 2.2's float64 add of long arrays returns
    the second operand's, 2.4's the first; x86's inf - inf is negative, ARM's positive), so
    no result may take it from them. :func:`nans_of` is the rule on arrays.

    >>> hex(bits64(nan_of(-math.nan, math.nan)))
    '0xfff8000000000000'
    >>> hex(bits64(nan_of(math.inf, -math.inf)))
    '0x7ff8000000000000'
    """
    if a != a:
        return a + 0.0  # one NaN operand: its payload, quieted, whatever the order
    if b != b:
        return b + 0.0
    return math.nan  # (CPython's NaN: the canonical 0x7FF8000000000000 everywhere)


def nans_of(s: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``s`` (= a + b or a * b in float64, arrays of one shape) with each NaN element made
    :func:`nan_of`'s: the first NaN operand's pattern with the quiet bit set, else the
    canonical quiet NaN. In place where ``s`` has a NaN (one isnan pass where it has none).

    >>> x = np.array([1.0, np.inf]); y = np.array([-np.nan, -np.inf])
    >>> [hex(v) for v in nans_of(x + y, x, y).view(np.uint64)]
    ['0xfff8000000000000', '0x7ff8000000000000']
    """
    nan = np.isnan(s)
    if not nan.any():
        return s
    a, b = np.broadcast_to(a, s.shape)[nan], np.broadcast_to(b, s.shape)[nan]
    pick = np.where(np.isnan(a), a, np.where(np.isnan(b), b, np.nan))
    s[nan] = (pick.view(np.uint64) | QUIET).view(np.float64)
    return s


def bits64(x: float) -> int:
    """The float64 pattern of ``x`` as a Python int.

    >>> hex(bits64(1.0))
    '0x3ff0000000000000'
    """
    return _unpack_q(_pack_d(x))[0]


def float64_of(b: int) -> float:
    """The float64 whose pattern is the Python int ``b``.

    >>> float64_of(0x3FF0000000000000)
    1.0
    """
    return _unpack_d(_pack_q(b))[0]


class StochasticAdder:
    """fl(a + b) by a stochastic ``policy`` for lists of ``rows`` Python floats (values of the
    format), as the reductions' vectorised loop computes it (values, flags per row, the
    generator's draws); ``ops`` is the number of adds the caller will make (the raw draws
    taken), ``exact``: every add of two values of the format is exact in float64 (no pair
    path), ``daz`` and ``want`` as for :func:`scalar_adder`.

    >>> from fpsim.rounding import policy_of
    >>> st = StochasticAdder(policy_of("fp16", "stochastic", rng=1), 1, 2, exact=True)
    >>> st.add1(1.0, 2.0**-11) in (1.0, 1.0 + 2.0**-10), st.add1(1.0, 1.0)
    (True, 2.0)
    """

    def __init__(self, policy: RoundingPolicy, rows: int, ops: int, *, exact: bool,
                 daz: bool | None = None, want: bool = False):
        fmt = policy.fmt
        p = kernel_params(fmt)
        self.rows, self.want, self.rb = rows, want, policy.random_bits
        self.rng = policy.generator()
        self.m, self.emin, self.tiny = fmt.mantissa_bits, fmt.emin, fmt.smallest_normal
        self.c, self.k = int(p.c), int(p.k)
        self.max_bits, self.tiny_bits = int(p.max_bits), int(p.tiny_bits)
        self.qmin = float64_of(int(p.qmin_bits))
        self.ovf_bits, self.low_emin = int(p.ovf_bits), bool(p.low_emin)
        self.enc = p.enc
        self.flush = policy.flush  # FLUSH and FLUSH_DAZ, or a format without subnormals
        self.after = policy.tininess is Tininess.AFTER
        self.saturate = policy.overflow is Overflow.SATURATE
        self.exact = exact  # every add is exact in float64: no pair path
        self.daz = policy.daz if daz is None else daz
        self.fl = [0] * rows
        self.bulk = self.exact or (
            type(self.rng.bit_generator) in RAW_DOUBLE_BITGENS if self.rb is None
            else self.rb > 32)
        self.left = ops * rows  # raw draws still to take (bulk)
        self.buf = np.empty(0, np.uint64)  # drawn, not yet used: buf[pos:]
        self.pos = 0

    # -- the draws ---------------------------------------------------------------------------
    def _ensure(self, k: int) -> None:
        """At least k raw draws in the buffer (bulk draws of at most what is left to take)."""
        avail = self.buf.size - self.pos
        if avail < k:
            size = min(self.left, max(k - avail, DRAW_BLOCK * self.rows))
            new = self.rng.integers(0, 1 << 64, size=size, dtype=np.uint64)
            self.left -= size
            self.buf = np.concatenate([self.buf[self.pos:], new])
            self.pos = 0

    def _raw(self) -> list[int]:
        self._ensure(self.rows)
        i = self.pos
        self.pos = i + self.rows
        return self.buf[i:i + self.rows].tolist()

    def take(self, k: int) -> np.ndarray:
        """The next k raw draws (bulk only), as the next k adds of one row use them."""
        self._ensure(k)
        i = self.pos
        self.pos = i + k
        return self.buf[i:i + k]

    def unget(self, k: int) -> None:
        """The last k draws taken were not used: the next adds use them."""
        self.pos -= k

    def _kernel_draws(self) -> list[int]:
        if self.bulk:
            return self._raw()
        return self.rng.integers(0, 1 << 64, size=self.rows, dtype=np.uint64,
                                 endpoint=False).tolist()

    def _pair_draws(self) -> list:
        rb = self.rb
        if self.bulk:
            raw = self._raw()
            if rb is None:
                return [(u >> 11) * (1.0 / 9007199254740992.0) for u in raw]
            return [u >> (64 - rb) for u in raw]
        if rb is None:
            return self.rng.random(self.rows).tolist()
        return self.rng.integers(0, 1 << rb, size=self.rows).tolist()

    # -- rounding on float64 patterns (rounding._kernel and friends, one element) ------------
    def _inc(self, a: int, s: int, u: int) -> int:
        """_increment_round, stochastic: (a + the random increment) with s low bits cleared."""
        mask = (1 << s) - 1
        rb = self.rb
        if rb is None:
            inc = u & mask
        else:
            inc = ((u >> (64 - rb)) << max(s - rb, 0)) & mask
        return (a + inc) & ~mask

    def _low(self, a: int, u: int) -> int:
        """_round_low / _deep_round, stochastic."""
        eb = a >> 52
        if self.low_emin:
            eb = max(eb, 1)
        s = max(self.k - eb, self.c)
        r = self._inc(a, min(s, 52), u)
        if s >= max(52, self.c + 1) and a != 0:
            sig = (a & _FRAC64) | (_HIDDEN64 if a >> 52 else 0)
            s63 = min(s, 63)
            kept, rem = sig >> s63, sig & ((1 << s63) - 1)
            rb = 64 if self.rb is None else self.rb
            v = u if self.rb is None else u >> (64 - rb)
            sh = s - rb
            count = rem >> min(sh, 63) if sh >= 0 else (rem << min(-sh, 63)) & _M64
            r = bits64((kept + (1 if v < count else 0)) * self.qmin)
        return r

    def _round(self, b: int, u: int | None) -> tuple[int, int]:
        """rounding._kernel on one pattern: stochastic with the raw draw u, or (u None)
        round to nearest even of a value on the format's grid (the pair path's last step:
        only overflow, flush and specials act). Returns (pattern, flags)."""
        sign = b & _SIGN64
        a = b ^ sign
        if u is None:
            r = a  # on the grid: nearest even keeps it (below 2**emin too)
        else:
            r = self._inc(a, self.c, u)
        low = a < self.tiny_bits
        if low and u is not None:
            r = self._low(a, u)
        fl = (_INEXACT if r != a else 0) if self.want else 0
        if low and (self.want or self.flush):
            tiny = a != 0
            if tiny and self.after:
                al, lim = a, self.tiny_bits
                if self.low_emin and al < _HIDDEN64:
                    al, lim = bits64(float64_of(al) * 2.0**64), self.tiny_bits + (64 << 52)
                r_unb = al if u is None else self._inc(al, self.c, u)
                tiny = r_unb < lim
            if tiny:
                if self.flush:
                    r = 0
                    fl |= _UNDER | _INEXACT
                elif self.want and fl:
                    fl |= _UNDER
        if a > self.max_bits:
            if a >= _EXP64:  # inf or NaN
                enc = self.enc
                if a > _EXP64:
                    r = a | _QUIET64
                    fl = _INVALID if (not a & _QUIET64 or enc is NaNEncoding.NONE) else 0
                else:
                    if enc is NaNEncoding.IEEE:
                        r, fl = _EXP64, 0
                    elif enc is NaNEncoding.NONE or self.saturate:
                        r, fl = self.max_bits, _INEXACT
                    else:
                        r, fl = _EXP64 | _QUIET64, _INVALID
                fl = fl if self.want else 0
            elif r > self.max_bits:
                r = self.max_bits if self.saturate else self.ovf_bits
                if self.want:
                    fl |= _OVER | _INEXACT
        if self.enc is NaNEncoding.FNUZ and r == 0:
            sign = 0
        return r | sign, fl

    def _toward_zero(self, b: int) -> float:
        """rounding._kernel toward zero, saturating, on one finite pattern (the pair path's
        t0)."""
        sign = b & _SIGN64
        a = b ^ sign
        r = a & ~((1 << self.c) - 1)
        if a < self.tiny_bits:
            eb = a >> 52
            if self.low_emin:
                eb = max(eb, 1)
            s = max(self.k - eb, self.c)
            r = a & ~((1 << min(s, 52)) - 1)
            if s >= max(52, self.c + 1) and a != 0:
                sig = (a & _FRAC64) | (_HIDDEN64 if a >> 52 else 0)
                r = bits64((sig >> min(s, 63)) * self.qmin)
        if r > self.max_bits:
            r = self.max_bits
        if self.enc is NaNEncoding.FNUZ and r == 0:
            sign = 0
        return float64_of(r | sign)

    def _pair(self, hi: float, lo: float, d) -> tuple[float, int]:
        """rounding._round_pair_core's stochastic branch for one TwoSum pair, draw d."""
        if not math.isfinite(hi):
            r, fl = self._round(bits64(hi), None)
            return float64_of(r), fl
        hb = bits64(hi)
        inexact = 1 if lo != 0 else 0
        v = ((hb - (((hb ^ bits64(lo)) >> 63) & inexact)) | inexact) & _M64  # _odd_from_pair
        t0 = self._toward_zero(v)
        e = max((bits64(abs(t0)) >> 52) - 1023, self.emin)
        ulp = math.ldexp(1.0, e - self.m)
        prob = abs((hi - t0) + lo) / ulp
        if self.rb is None:
            up = d < prob
        else:
            up = float(d) < math.floor(prob * float(1 << self.rb))
        res = t0 + math.copysign(ulp, hi) if up else t0
        r, fl = self._round(bits64(res), None)
        if self.want and (hi != t0 or lo != 0):
            fl |= _INEXACT
            if abs(res) < self.tiny:
                fl |= _UNDER
        return float64_of(r), fl

    def add(self, a: list[float], b: list[float]) -> list[float]:
        """One vectorised add of the loop: row i gets fl(a[i] + b[i]); the flags OR into fl."""
        if self.daz:
            a, b = [self._daz(v) for v in a], [self._daz(v) for v in b]
        s = [x + y for x, y in zip(a, b, strict=True)]
        if any(h != h for h in s):  # NaN results: the first NaN operand's, every time
            s = [nan_of(x, y) if h != h else h for x, y, h in zip(a, b, s, strict=True)]
        out = []
        if self.exact:
            los = None
        else:
            los = []
            for x, y, h in zip(a, b, s, strict=True):
                bb = h - x
                los.append((x - (h - bb)) + (y - bb))
        if los is None or not any(lo != 0 for lo in los):
            for i, (h, u) in enumerate(zip(s, self._kernel_draws(), strict=True)):
                r, f = self._round(bits64(h), u)
                out.append(float64_of(r))
                if self.want:
                    self._note(i, f, h, a[i], b[i])
        else:
            for i, (h, lo, d) in enumerate(zip(s, los, self._pair_draws(), strict=True)):
                v, f = self._pair(h, lo, d)
                out.append(v)
                if self.want:
                    self._note(i, f, h, a[i], b[i])
        return out

    def add_raw(self, a: float, b: float, u: int | None) -> float:
        """:meth:`add1` with the raw draw ``u`` given (bulk draws: the caller took it); None
        draws as :meth:`add1` does (the pair's draw or the kernel's, only the one used)."""
        if self.daz:
            a, b = self._daz(a), self._daz(b)
        s = a + b
        if s != s:
            s = nan_of(a, b)
        if not self.exact:
            bb = s - a
            lo = (a - (s - bb)) + (b - bb)
            if lo != 0:
                if u is None:
                    d = self._pair_draws()[0]
                else:
                    rb = self.rb
                    d = (u >> 11) * (1.0 / 9007199254740992.0) if rb is None \
                        else u >> (64 - rb)
                v, f = self._pair(s, lo, d)
                if self.want:
                    self._note(0, f, s, a, b)
                return v
        r, f = self._round(bits64(s), self._kernel_draws()[0] if u is None else u)
        if self.want:
            self._note(0, f, s, a, b)
        return float64_of(r)

    def add1(self, a: float, b: float) -> float:
        """:meth:`add` for one row, on floats rather than lists (the same draws)."""
        return self.add_raw(a, b, None)

    def _daz(self, v: float) -> float:
        """A subnormal operand read as (signed) zero (DAZ)."""
        return math.copysign(0.0, v) if -self.tiny < v < self.tiny else v

    def _note(self, i: int, f: int, s: float, a: float, b: float) -> None:
        if s != s and a == a and b == b:  # inf - inf (the loop's flags: INVALID replaces)
            f = _INVALID
        self.fl[i] |= f


_INEXACT, _UNDER = int(Flags.INEXACT), int(Flags.UNDERFLOW)
_OVER, _INVALID = int(Flags.OVERFLOW), int(Flags.INVALID)
