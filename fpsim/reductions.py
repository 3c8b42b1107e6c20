"""Sums and dot products in a low-precision format, with the accumulation order made explicit.

Every addition (and, for :func:`dot`, every product) is one correctly rounded operation of
:mod:`fpsim.arithmetic`, so the classic effects of low-precision accumulation show bit for bit:
summing 1.0 ten thousand times in bf16 stops at 256 (256 + 1 is a tie that rounds back to 256).

Orders (the accumulation model; ``x`` the values along the reduced axis, converted to ``fmt``):

- ``"sequential"``: ``s = x[0]; s = fl(s + x[k])`` for k = 1, 2, ..., every add rounded in fmt.
- ``"pairwise"``: NumPy's blocked pairwise summation, the same tree as ``np.add.reduce`` on a
  contiguous float32 axis, every add rounded in fmt: a run of ``n < 8`` values is summed
  sequentially; ``8 <= n <= 128`` values go into eight strided partial sums
  ``r[j] = x[j] + x[j+8] + x[j+16] + ...`` (each sequential, over the largest multiple of 8),
  combined as ``((r0+r1) + (r2+r3)) + ((r4+r5) + (r6+r7))``, then the ``n % 8`` leftover values
  are added one by one; ``n > 128`` splits at ``n2 = n//2 - (n//2) % 8`` and adds the sums of
  the two halves. (NumPy starts a run shorter than 8 from +0.0, which differs only in the sign
  of a zero sum. NumPy before 2.3 reduced a contiguous axis longer than its buffer, 8192
  values, buffer by buffer, adding the buffers' trees in order; fpsim's tree is the one of
  NumPy 2.3 on, under every NumPy.)
- ``"kahan"``: compensated summation, ``y = x[k] - c; t = s + y; c = (t - s) - y; s = t``, every
  operation rounded in fmt.
- ``"wide"``: a wider accumulator: each value (for :func:`dot` the *exact* product) is added
  to an accumulator of format ``accumulator`` (default fp32) with one rounding per add, in
  sequential order, and the accumulator is rounded once to ``fmt`` at the end. When every
  partial sum is exactly representable in the accumulator (e.g. short fp8 sums in fp32), the
  adds are exact and the sum is taken in float64 directly; ``accumulator="fp64"`` accumulates
  in NumPy float64 (round to nearest even only).

The sequential order in fp16, bf16 or fp32 with round to nearest even, IEEE policies and no
flags runs as NumPy's ``add.accumulate`` on the format's own type (the same correctly rounded
add per element, see :func:`fpsim.add`'s native path), and so does the ``"wide"`` accumulator
in those formats when every term is one of its values. With at most 16 outputs and a
deterministic mode, the sequential and Kahan orders run the same correctly rounded adds (and
flags) on Python floats: a step costs a few Python operations, not the fixed cost of a dozen
NumPy calls; with stochastic rounding they draw the same random values from the generator, in the
same order and amount (raw 64-bit draws taken in blocks), and round them on Python integers.
Long sequential sums on those few outputs go faster still: while the exact sum of the
running total and the next value stays in one binade, every add has the same quantum and is
the running total plus the value rounded to that quantum, so such runs are summed vectorised
(directed and nearest modes; stochastic rounding on one output, with the same draws), and the
common case of each remaining add is inline Python-float arithmetic. Kahan's four operations
run inline in one loop too, the running sum's binade cached (its quantum known, ``t - s``
exact by Sterbenz's lemma), in every mode; with stochastic rounding on one output, the same
raw draw per operation as the loop takes (drawn in blocks). The element-by-element loop,
vectorised across independent rows, runs everywhere else.

The rounding mode and policies apply to every operation (the accumulator's adds too), on every
path: each add is :func:`fpsim.add` with the same options, so ``subnormals="daz"`` reads a
subnormal running total (or product, or Kahan compensation) as zero at the next add, and a tie
breaks the kernel's way in every format (with a 0-bit mantissa, "even" is the last bit of the
exponent: ``1 + 2`` is 2 in ``Format(2, 0, nan_encoding="fn")``). In the ``"wide"`` order the
first value enters the accumulator as the result of ``0 + x`` would (mode, flush-to-zero, DAZ)
and the final rounding to ``fmt`` is a result's (flush-to-zero, not DAZ); with stochastic
rounding, adds the accumulator makes exactly draw nothing. With ``flags=True`` the result comes
with the OR of the IEEE flags of every operation that produced each output element.

NaNs: an add (or product) with a NaN operand returns the first NaN operand's float64 pattern,
quieted, and an invalid one (inf - inf, 0 * inf) the canonical quiet NaN (+, payload 0):
:func:`fpsim.rounding.scalar.nan_of`'s rule, on every route, CPU and NumPy version (NumPy
2.2's float64 add of long arrays returns the second NaN, 2.4's the first; x86's inf - inf is
negative, ARM's positive). So a sum of finite values and NaNs is its first NaN value,
quieted, in the sequential, Kahan and "wide" orders (the first NaN leaf of the tree in the
pairwise order), where :func:`fpsim.add` alone returns the canonical NaN for every NaN.

Axes: as in NumPy, ``axis`` may be a tuple of axes, which is a set (a repeated axis is NumPy's
``ValueError``). The values of each output are accumulated in C (row-major) order over the
reduced axes, whatever order the tuple lists them in: ``axis=(1, 0)`` gives the same sums as
``axis=(0, 1)``, and a full reduction (``axis=None``) is the sum of ``x.ravel()``.
"""

from __future__ import annotations

import enum
import math

import numpy as np

try:
    from numpy.lib.array_utils import normalize_axis_tuple
except ImportError:  # NumPy < 2
    from numpy.core.numeric import normalize_axis_tuple

from . import flags as _flags
from .arithmetic import (
    MAX_MANTISSA,
    OpContext,
    add_flat,
    context,
    context_of,
    convert_operand,
    daz_operand,
    fast_paths_on,
    mul_flat,
    native_ok,
    plan_for,
    quiet_flags,
    round_result,
)
from .checks import broadcast_shape
from .flags import Flags
from .formats import FP64, Format, NaNEncoding, get_float_format
from .modes import Overflow, Rounding, Subnormals, Tininess
from .rounding import RoundingPolicy
from .rounding.scalar import DRAW_BLOCK, StochasticAdder, bits64, nans_of, scalar_adder

__all__ = ["Order", "sum", "dot"]


class Order(str, enum.Enum):
    """Accumulation order of :func:`sum` and :func:`dot`."""

    SEQUENTIAL = "sequential"
    PAIRWISE = "pairwise"
    KAHAN = "kahan"
    WIDE = "wide"


def _as_order(order: Order | str) -> Order:
    try:
        return Order(order.lower() if isinstance(order, str) else order)
    except ValueError:
        valid = ", ".join(repr(o.value) for o in Order)
        raise ValueError(f"unknown order {order!r}; valid: {valid}") from None


class _Acc:
    """Runs rounded operations on arrays of any shape and ORs their flags per output row."""

    def __init__(self, c: OpContext, rows: int):
        self.c = c
        self.fl = np.zeros(rows, np.uint8) if c.want else None

    def _note(self, fl, inv, shape, rows_of):
        if self.fl is None:
            return
        if inv is not None and inv.any():
            fl[inv] = np.uint8(Flags.INVALID)
        per_row = np.bitwise_or.reduce(fl.reshape(shape).reshape(shape[0], -1), axis=1)
        self.fl[rows_of] |= per_row

    def add(self, a, b, rows_of=slice(None), exact_operands=True):
        """fl(a + b) elementwise; arrays of shape (rows, ...). Under DAZ every add reads its
        subnormal operands (a running total too) as zero, as :func:`fpsim.add` does."""
        shape = a.shape
        if self.c.conversion.daz:
            a, b = daz_operand(a, self.c), daz_operand(b, self.c)
        out, fl, inv = add_flat(a.reshape(-1), b.reshape(-1), self.c,
                                 exact_operands=exact_operands)
        self._note(fl, inv, shape, rows_of)
        return out.reshape(shape)

    def sub(self, a, b, rows_of=slice(None)):
        return self.add(a, -b, rows_of)


_NATIVE_BLOCK = 1 << 16  # columns per native accumulate: bounded scratch memory


def _native_sequential(X, c: OpContext):
    """The sequential sum by the native add of the format's own type (np.add.accumulate runs
    ``out[k] = out[k-1] + x[k]`` with one correctly rounded add per element), or None when
    that is not fpsim's rounding: as for the native arithmetic (:func:`fpsim.arithmetic._native`:
    fp16, bf16 or fp32, nearest even, IEEE policies, no flags), each add of two values of
    the format computed in float32 and rounded once to the format equals the correctly rounded
    add (float32 has >= 2p + 2 bits). X holds values of the format (exact to cast)."""
    if not native_ok(c):
        return None
    with np.errstate(all="ignore"):
        return _accumulate(X, c.result.fmt.dtype).astype(np.float64)


def _accumulate(X, dt=None):
    """``s = X[:, 0]; s = s + X[:, k]`` for k = 1, 2, ... in the type ``dt`` (X's own by
    default) by NumPy's add.accumulate, a block of columns at a time (bounded scratch)."""
    s = None
    for j in range(0, X.shape[1], _NATIVE_BLOCK):
        blk = X[:, j:j + _NATIVE_BLOCK].astype(dt if dt is not None else X.dtype)
        if s is not None:
            blk[:, 0] = s + blk[:, 0]  # the same add, carried across blocks
        s = np.add.accumulate(blk, axis=1)[:, -1]
    return s


def _nan_rows_again(s: np.ndarray, X, c: OpContext, redo) -> np.ndarray:
    """The native sums ``s`` of X's rows, those that are NaN redone by ``redo(X[nan],
    _Acc(c, rows))`` (the order's loop route; for 'wide', the accumulator's). A NaN sum's
    pattern is the loop's, not the native type's: the loop carries a NaN operand's float64
    pattern (payload, sign) where a cast to float32, float16
    or bfloat16 drops the low payload bits; fp16's and bf16's native add of two NaNs returns
    the second where the rule takes the first (nan_of); and the native Kahan's a - b is
    not the loop's a + (-b) for a NaN b (see _kahan). No flags here (native_ok)."""
    nan = np.isnan(s)
    if nan.any():
        s[nan] = redo(X[nan], _Acc(c, int(nan.sum())))
    return s


def _sequential(X, acc: _Acc, native: bool = True):
    if native and (s := _native_sequential(X, acc.c)) is not None:
        return _nan_rows_again(s, X, acc.c, lambda Xn, a: _sequential(Xn, a, native=False))
    if _stochastic_ok(acc.c, X.shape[0]):
        return _sequential_stochastic(X, acc)
    if _scalar_ok(acc.c, X.shape[0]):
        add, fl = _scalar_adder(acc.c)
        if acc.c.result.rounding in _STEP_MODES:  # runs of adds at one quantum, vectorised
            return _run_rows(X, _sequential_runs(add, fl, acc.c), fl, acc.fl)
        return _python_rows(X, _sequential_row(add), fl, acc.fl)
    return _sequential_loop(X, acc)


# -- long sequential sums: inline steps, and runs of adds at one quantum, vectorised ------------
#
# Steps: for a deterministic mode other than stochastic, the Python-float adder's rounding of
# s + x, written inline for the common case: s + x exact in float64 (TwoSum's error zero, or
# the format's adds always exact) and in a normal binade below the top one (e in [emin,
# emax): no overflow, no NaN pattern of an 'fn' format). Its quantum is q = ulp(s + x) *
# 2**(52 - m) (a power of two: math.ulp's binade), v - fmod(v, q) is v truncated toward zero
# to a multiple of q (both exact), and the mode moves it one q (or not). Anything else
# (zeros, subnormal or non-finite sums, the top binade, an inexact float64 sum, DAZ, ties in a
# format with no mantissa bit) is the adder's call.
#
# Runs: while the exact sum s + x of the running total and the next value stays in one binade
# [2**e, 2**(e+1)) of one sign (e >= emin, no overflow), every rounding of the sequential sum
# has the same quantum q = 2**(e - m), and s is a multiple of q: rounding s + x to a multiple
# of q is s plus x rounded to a multiple of q, in every mode whose choice depends on the sign
# and the position between two multiples of q only (toward +-inf, toward zero, nearest away,
# nearest even except at a tie, where the parity of s decides). So a run of such adds is
# s + cumsum(x rounded to multiples of q), all exact in float64 (multiples of q below
# 2**(e+2)), checked element by element against the binade's bounds (exact comparisons); the
# first value that leaves the run goes to the steps. Round to odd depends on s's parity too,
# which a run tracks vectorised (_odd_increments; rounding to odd never reaches 2**(e+1)).
# Where runs stay short (sums near zero or a binade boundary), the steps take ever longer
# stretches between tries, so the cost stays near theirs at worst.

_RUN_MODES = frozenset({Rounding.UP, Rounding.DOWN, Rounding.TOWARD_ZERO,
                        Rounding.NEAREST_EVEN, Rounding.NEAREST_AWAY})
_STEP_MODES = _RUN_MODES | {Rounding.ODD}
_RUN_FIRST, _RUN_MAX = 256, 1 << 16  # values per vectorised try: first, most
_RUN_SHORT = 16  # a run shorter than this: the steps take the next stretch
_STEPS_FIRST, _STEPS_MAX = 64, 1 << 13  # the steps' stretch between tries: first, most


def _run_rows(X, row_sum, fl: list[int], out_fl) -> np.ndarray:
    """:func:`_python_rows` for row sums on NumPy rows: ``row_sum(first value, the rest)``."""
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        fl[0] = 0
        out[i] = row_sum(float(X[i, 0]), X[i, 1:])
        if out_fl is not None:
            out_fl[i] |= fl[0]
    return out


def _sequential_steps(add, fl: list[int], c: OpContext):
    """``steps(s, xs)``: s + xs[0] + xs[1] + ... (a list of floats), each add rounded as the
    Python-float adder ``add`` (flag cell ``fl``) rounds it, the common case inline."""
    fmt, mode, want = c.result.fmt, c.result.rounding, c.want
    m = fmt.mantissa_bits
    if (c.conversion.daz or mode not in _STEP_MODES
            or (m == 0 and mode in (Rounding.NEAREST_EVEN, Rounding.ODD))):
        def plain(s: float, xs: list) -> float:
            for x in xs:
                s = add(s, x)
            return s
        return plain
    K = 2.0 ** (52 - m)  # ulp(v) * K: v's quantum in the format
    # the normal binades' quanta, the top binade's (overflow, fn formats' NaN) left to add
    qlo, qhi = 2.0 ** (fmt.emin - m), 2.0 ** (fmt.emax - m)
    two_sum = not plan_for(fmt).add_exact
    ulp, fmod = math.ulp, math.fmod
    inexact_f = int(Flags.INEXACT)
    up, down = mode is Rounding.UP, mode is Rounding.DOWN
    nearest = mode in (Rounding.NEAREST_EVEN, Rounding.NEAREST_AWAY)
    away, odd = mode is Rounding.NEAREST_AWAY, mode is Rounding.ODD

    def steps(s: float, xs: list) -> float:
        for x in xs:
            v = s + x
            q = ulp(v) * K
            if not qlo <= q < qhi or (two_sum and (s - (v - (b := v - s))) + (x - b)):
                s = add(s, x)
                continue
            rem = fmod(v, q)  # v's bits below q, with v's sign
            if rem:
                r = v - rem  # toward zero
                if up:
                    if r < v:
                        r += q
                elif down:
                    if r > v:
                        r -= q
                elif nearest:
                    h = rem + rem
                    if h > q or h < -q or ((h == q or h == -q)
                                           and (away or (r / q) % 2.0 == 1.0)):
                        r += q if v > 0 else -q
                elif odd and (r / q) % 2.0 == 0.0:
                    r += q if v > 0 else -q
                if want:
                    fl[0] |= inexact_f
                s = r
            else:
                s = v
        return s

    return steps


# -- long Kahan sums on few outputs: the four operations inline, s's binade cached ---------------
#
# Kahan's step is y = fl(x - c), t = fl(s + y), d = fl(t - s), c = fl(d - y). y is rounded
# inline as in _sequential_steps (v % q: v's bits below its quantum q1, v - rem its floor).
# While s lies in a normal binade [2**e, 2**(e+1)) below the top one (quantum Q = 2**(e - m))
# and s + y lands in it too, t is s + y rounded to a multiple of Q (no ulp call), d = t - s is
# exact (Sterbenz; t == s: the exact zero, -0 when rounding down), and d - y, a multiple of
# min(Q, q1), is exact when it is below min(Q, q1) * 2**(m+1) in magnitude (at most p bits),
# else rounded inline as y is (its own quantum) when it is exact in float64 and normal. When
# s + y leaves s's binade (a walk across a power of two), t is rounded inline as y is, and
# d = t - s checked to be a normal value of the format (else the exact adder rounds it); then
# s's binade is found again (kept per running sum: _memo). In the top binade a result beyond
# the largest finite value is that value where the adder's overflow gives it (toward zero, odd,
# the saturate policy, up / down on one side: a saturated sum stays inline). Anything else
# (the sum at zero, subnormal or overflowing to inf / NaN, an inexact float64 sum, zero or
# special operands) is the exact adder's. A NaN running sum
# with a NaN compensation absorbs every further value but a NaN (_kahan_rows). The
# stochastic variant rounds by the kernel's carry: the draw's increment inc (c = 52 - m bits)
# carries a magnitude with r = |v| % q up when r >= q * (1 - inc / 2**c).

def _binade(s: float, fmt: Format):
    """(sign, 2**e, 2**(e+1), 2**(e - m)) of s's binade [2**e, 2**(e+1)), or None where the
    cached steps do not apply (zero, subnormal, not finite, top binade: overflow)."""
    a = -s if s < 0 else s
    if not fmt.smallest_normal <= a < 2.0 ** fmt.emax:
        return None
    e = math.frexp(a)[1] - 1
    return (-1.0 if s < 0 else 1.0, math.ldexp(1.0, e), math.ldexp(1.0, e + 1),
            math.ldexp(1.0, e - fmt.mantissa_bits))


_MEMO_MAX = 1 << 12  # running sums whose binade a Kahan row sum keeps


def _memo(binade_of):
    """``binade_of`` with its results kept per running sum (a sum that hovers in narrow
    binades, e.g. fp8's, finds its binade again every few steps; a dict lookup costs less
    than frexp and three ldexp). Zero's two signs share their entry, as their binade does."""
    memo: dict[float, tuple] = {}
    # a miss (every new running sum, as fp32's are) looks the binade up by its sign and
    # exponent, on which alone binade_of's result depends for a finite non-zero s (each
    # binade_of call, thousands a 1e6-value fp32 sum, cost several microseconds)
    at: dict[tuple, tuple] = {}
    frexp = math.frexp

    def binade(s: float):
        b = memo.get(s)
        if b is None:
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            if s and s - s == 0.0:
                k = (s < 0, frexp(s)[1])
                b = at.get(k)
                if b is None:
                    b = at[k] = binade_of(s)
            else:
                b = binade_of(s)
            memo[s] = b
        return b

    return binade


def _kahan_fast_ok(c: OpContext) -> bool:
    """The inline Kahan steps apply: no DAZ, subnormal results kept (exact d - y below
    2**emin stays), ties and round-to-odd only with a mantissa bit (parity is the
    significand's)."""
    fmt, mode = c.result.fmt, c.result.rounding
    return (not c.conversion.daz and c.result.subnormals is Subnormals.KEEP and fmt.subnormals
            and (mode is Rounding.STOCHASTIC or mode in _STEP_MODES)
            and (fmt.mantissa_bits > 0
                 or mode not in (Rounding.NEAREST_EVEN, Rounding.ODD)))


_NAN_TRY = 1 << 12  # values per stretch of Kahan steps between looks for a NaN running sum


def _kahan_rows(steps, take=None):
    """The Kahan order's row sum for :func:`_python_rows` from ``steps(s, comp, values) ->
    (s, comp)`` (the inline steps), a stretch at a time. A NaN running sum with a NaN
    compensation is absorbing: every operation has a NaN operand and returns its NaN, so
    once one step from such a state gives back the same two patterns, every further value
    that is not a NaN gives them too (and the same flags, already ORed). Those values are
    skipped up to the next NaN value (``take(k)``: the k raw draws of the skipped
    operations, stochastic rounding), instead of four operations each in the exact adder
    (an fp8 sum that overflowed to NaN took seconds per 1e6 values)."""

    def row_sum(s: float, xs: list) -> float:
        comp, i, n = 0.0, 0, len(xs)
        nans = None  # the row's NaN positions, found once at the first skip
        while i < n:
            if s != s and comp != comp:
                s1, c1 = steps(s, comp, xs[i:i + 1])
                i += 1
                if bits64(s1) == bits64(s) and bits64(c1) == bits64(comp):
                    if nans is None:  # (once per row: a search per skip, not a scan)
                        nans = np.flatnonzero(np.isnan(np.asarray(xs, np.float64)))
                    at = int(np.searchsorted(nans, i))
                    j = int(nans[at]) if at < nans.size else n  # the next NaN value, or the end
                    if take is not None:
                        for k in range(i, j, DRAW_BLOCK):  # draws per take: bounded memory
                            take(4 * (min(j, k + DRAW_BLOCK) - k))
                    i = j
                s, comp = s1, c1
                continue
            s, comp = steps(s, comp, xs[i:i + _NAN_TRY])
            i += _NAN_TRY
        return s

    return row_sum


# The inline steps' source, specialised per rounding mode: the loop below is written once;
# each rounding in it is one of _ROUNDINGS' lines (and _T_BINADE's block), chosen by the mode
# and compiled once per (mode, two_sum), as the stdlib's dataclasses generate code. The
# tie-free modes (directed, odd: v's neighbour taken by a rule that never compares v % q with
# q / 2) leave most of the general rounding's comparisons constant-false: a directed rounding
# is a floor (v - v % q: Python's float % takes the divisor's sign, so rem is in [0, q),
# exact), plus q where it goes up. Also only there: float64's rounding to nearest of an
# inexact x - comp (or s + y) cannot cross a multiple of q (a float64 value), so with
# rem != 0 it rounds as the exact value does; the exactness checks run where rem == 0.
# Nearest rounding keeps the general lines.
_ROUNDINGS = {  # {out} = {val} rounded to a multiple of {q}, given rem = {val} % {q} != 0
    "general": ("{out} = {val} - rem",
                "h = (hp if {val} > 0 else hn) * {q}",
                "if (rem > h or (rem == h and (({out} / {q}) % 2.0 == 1.0 if ne else {val} > 0))",
                "        or (odd and ({out} / {q}) % 2.0 == 0.0)):",
                "    {out} += {q}"),
    Rounding.DOWN: ("{out} = {val} - rem",),
    Rounding.UP: ("{out} = {val} - rem + {q}",),
    Rounding.TOWARD_ZERO: ("{out} = {val} - rem + {q} if {val} < 0 else {val} - rem",),
    Rounding.ODD: ("{out} = {val} - rem",
                   "if ({out} / {q}) % 2.0 == 0.0:",
                   "    {out} += {q}"),
}
# t = fl(s + y) in s's binade (L <= a < H), rounded to a multiple of its quantum Q. General:
# on its magnitude a, th the binade's threshold. Tie-free modes: L <= u < H, the binade's
# signed bounds (the top binade's end at fmax: beyond, the walk below takes u), th =
# 1.5 * 2**52 * Q, so u + th - th is u rounded to the nearest multiple of Q by float64's own
# add (fewer operations than a % Q), moved a Q toward u where the mode takes the other
# neighbour
_T_BINADE = {
    "general": """\
            a = u * sg
            if L <= a < H{t_exact_first}:
                rem = a % Q
                if rem:
                    t = a - rem
                    if (rem > th or (rem == th and (not ne or (t / Q) % 2.0 == 1.0))
                            or (odd and (t / Q) % 2.0 == 0.0)):
                        t += Q
                    ix = True
                else:
                    t = a
                if t > fmax:  # the top binade: overflow
                    if not (max_pos if sg > 0 else max_neg):
                        t = add(s, y)
                        comp = add(add(t, -s), -y)
                        s = t
                        sg, L, H, Q, th, Qt, Qr, sH = binade(s)
                        continue
                    t, ov = fmax, True
                t *= sg""",
    "tie_free": """\
            if L <= u < H:
                t = u + th - th
                if t != u:
                    if {t_beyond}:
                        t {t_back}
                    ix = True{t_exact_late}
                if q1 >= Qr:  # c = t - (s + y), s + y exact: |c| < Q <= q1 * 2**(m+1)
                    comp = (t - s) - y or zd
                    s = t
                    if t == sH:  # rounded to the top of the binade
                        sg, L, H, Q, th, Qt, Qr, sH = binade(s)
                    continue""",
}
_T_TIE_FREE = {  # (t is not the mode's neighbour of u, the step to the other)
    Rounding.DOWN: ("t > u", "-= Q"),
    Rounding.UP: ("t < u", "+= Q"),
    Rounding.TOWARD_ZERO: ("(t > u) if sg > 0 else (t < u)", "-= sg * Q"),
    Rounding.ODD: ("(t / Q) % 2.0 == 0.0", "+= Q if u > t else -Q"),
}

_KAHAN_STEPS_SRC = '''
def make_steps(consts, fl, inexact_f, over_f):
    def steps(s, comp, xs):
        (K, qlo, qhi, P, ulp, inf, ne, odd, hp, hn, zd, fmax, max_pos, max_neg,
         add, binade) = consts
        ix = ov = False
        sg, L, H, Q, th, Qt, Qr, sH = binade(s)
        for x in xs:
            v = x - comp  # y = fl(x - comp); exact in float64 when x - v == comp (that is
            q1 = ulp(v) * K  # fl(v - x) == -comp: rounding is symmetric) and v + comp == x
            if qlo <= q1 < qhi{y_exact_first}:
                rem = v % q1
                if rem:
{round_y}
                    ix = True{y_exact_late}
                else:
                    y = v
            elif qhi <= q1 < inf{y_exact_top}:  # the top binade
                rem = v % q1
                if rem:
{round_y}
                    ix = True
                else:
                    y = v
                if not -fmax <= y <= fmax:  # overflow
                    if max_pos if y > 0 else max_neg:
                        y, ov = (fmax if y > 0 else -fmax), True
                    else:
                        y, q1 = add(x, -comp), 0.0
            else:
                y, q1 = add(x, -comp), 0.0
            u = s + y  # t = fl(s + y), in s's binade
{t_binade}
                d = t - s{or_zd}  # exact (Sterbenz)
                r = (Q if Q < q1 else q1) * P
                moved = t == sH  # rounded up to the top of the binade
            elif (s and y and qlo <= (qt := ulp(u) * K) < inf{u_exact}):
                # t leaves s's binade (a walk across a power of two): rounded as y above
                rem = u % qt
                if rem:
{round_u}
                    ix = True
                else:
                    t = u
                if qt >= qhi and not -fmax <= t <= fmax:  # overflow
                    if not (max_pos if u > 0 else max_neg):
                        t = add(s, y)
                        comp = add(add(t, -s), -y)
                        s = t
                        sg, L, H, Q, th, Qt, Qr, sH = binade(s)
                        continue
                    t, ov = (fmax if u > 0 else -fmax), True
                d = t - s{or_zd}
                qd = ulp(d) * K
                if d and not (qlo <= qd < qhi and not d % qd{d_exact}):
                    d = add(t, -s)  # not a normal value of the format, or inexact
                r, moved = 0.0, True
            else:
                t = add(s, y)
                comp = add(add(t, -s), -y)
                s = t
                sg, L, H, Q, th, Qt, Qr, sH = binade(s)
                continue
            w = d - y
            if w and -r < w < r:
                comp = w  # exact
            elif not w and y:
                comp = zd
            elif w and qlo <= (qw := ulp(w) * K) < qhi{w_exact}:
                rem = w % qw  # c = fl(d - y) rounded inline as y above (directed modes
                if rem:  # leave a c of more than p bits after each add that rounds up)
{round_w}
                    ix = True
                else:
                    comp = w
            else:
                comp = add(d, -y)
            s = t
            if moved:
                sg, L, H, Q, th, Qt, Qr, sH = binade(s)
        if ix:
            fl[0] |= inexact_f
        if ov:
            fl[0] |= over_f
        return s, comp

    return steps
'''

_KAHAN_STEPS: dict = {}  # (mode, two_sum, want) -> make_steps


def _kahan_steps(mode: Rounding, two_sum: bool, want: bool):
    """``make_steps(consts, fl, inexact_f, over_f) -> steps``: _KAHAN_STEPS_SRC for the mode,
    whether float64's sums need the exactness checks and whether flags are wanted, compiled
    on first use."""
    key = (mode, two_sum, want)
    if key not in _KAHAN_STEPS:
        tie_free = mode in _ROUNDINGS

        def rounding(out: str, val: str, q: str) -> str:
            lines = _ROUNDINGS[mode if tie_free else "general"]
            return "\n".join(" " * 20 + ln.format(out=out, val=val, q=q) for ln in lines)

        ts = two_sum
        fields = {
            "round_y": rounding("y", "v", "q1"),
            "round_u": rounding("t", "u", "qt"),
            "round_w": rounding("comp", "w", "qw"),
            "y_exact_first": "" if tie_free or not ts else
            " and (x - v == comp and v + comp == x)",
            "y_exact_top": " and (x - v == comp and v + comp == x)" if ts else "",
            "y_exact_late": "" if not (tie_free and ts) else
            "\n                elif not (x - v == comp and v + comp == x):"
            "\n                    y, q1 = add(x, -comp), 0.0",
            "t_exact_first": "" if tie_free or not ts else " and q1 >= Qt",
            "t_exact_late": "" if not (tie_free and ts) else
            "\n                elif q1 < Qt:  # s + y may be inexact in float64"
            "\n                    t = add(s, y)"
            "\n                    comp = add(add(t, -s), -y)"
            "\n                    s = t"
            "\n                    sg, L, H, Q, th, Qt, Qr, sH = binade(s)"
            "\n                    continue",
            "u_exact": " and (u - s == y and u - y == s)" if ts else "",
            "d_exact": " and d + s == t and t - d == s" if ts else "",
            "w_exact": " and w + y == d and d - w == y" if ts else "",
            "or_zd": " or zd" if mode is Rounding.DOWN else "",
        }
        t_binade = _T_BINADE["tie_free" if tie_free else "general"]
        beyond, back = _T_TIE_FREE.get(mode, ("", ""))
        fields["t_binade"] = t_binade.format(t_beyond=beyond, t_back=back, **fields)
        src = _KAHAN_STEPS_SRC.format(**fields)
        if not want:  # no flags: nothing reads the inexact one (an operation less a rounding)
            src = src.replace("ix = True", "pass")
        ns: dict = {}
        exec(compile(src, f"<kahan steps {mode.name}>", "exec"), ns)
        _KAHAN_STEPS[key] = ns["make_steps"]
    return _KAHAN_STEPS[key]


def _kahan_fast(add, fl: list[int], c: OpContext):
    """The Kahan order's row sum for :func:`_python_rows` in a deterministic mode, the
    common case of each operation inline (see above; the steps' source: _kahan_steps),
    ``add`` (the Python-float adder of ``c``, flag cell ``fl``) for the rest;
    :func:`_kahan_row` where that does not apply."""
    fmt, mode = c.result.fmt, c.result.rounding
    if not _kahan_fast_ok(c):
        return _kahan_row(add)
    m = fmt.mantissa_bits
    K = 2.0 ** (52 - m)  # ulp(v) * K: v's quantum in the format
    qlo, qhi = 2.0 ** (fmt.emin - m), 2.0 ** (fmt.emax - m)
    P = 2.0 ** (m + 1)  # a multiple of q below q * P has at most p bits
    two_sum = not plan_for(fmt).add_exact
    ulp, inf, next_up = math.ulp, math.inf, lambda v: math.nextafter(v, math.inf)
    ne, odd = mode is Rounding.NEAREST_EVEN, mode is Rounding.ODD
    tie_free = mode in _ROUNDINGS
    # v > 0 (< 0) goes up from its floor when v % q > hp * q (hn * q); at a tie (0.5 q)
    # when the floor is odd (ne) or v > 0 (nearest away); round to odd: when the floor is even
    hp, hn = {Rounding.UP: (0.0, 0.0), Rounding.DOWN: (2.0, 2.0), Rounding.ODD: (2.0, 2.0),
              Rounding.TOWARD_ZERO: (2.0, 0.0)}.get(mode, (0.5, 0.5))
    zd = -0.0 if mode is Rounding.DOWN and fmt.nan_encoding is not NaNEncoding.FNUZ else 0.0
    inexact_f, over_f = int(Flags.INEXACT), int(Flags.OVERFLOW | Flags.INEXACT)
    # the top binade inline too: a result beyond fmax is fmax where the adder's overflow
    # gives fmax for its sign (saturating sums: fp8's e4m3 in toward-zero and odd rounding)
    fmax, top = fmt.max, 2.0**fmt.emax
    sat = c.result.overflow is Overflow.SATURATE or fmt.nan_encoding is NaNEncoding.NONE
    max_pos = sat or mode in (Rounding.TOWARD_ZERO, Rounding.ODD, Rounding.DOWN)
    max_neg = sat or mode in (Rounding.TOWARD_ZERO, Rounding.ODD, Rounding.UP)

    def binade_of(s: float):
        """(sign, L, H, Q, th, Qt, Qr, sH): th, the magnitude's threshold in s's binade (as
        hp, hn); Qt: s + y is exact in float64 when y is a multiple of Qt; sH = sign * H,
        the binade's signed top. L = inf: none. Tie-free modes (_T_BINADE): L, H the signed
        bounds (L <= u < H), the top binade's ending at fmax, th = 1.5 * 2**52 * Q, and
        Qr: c = t - (s + y) is exact (and in the format) when y is a multiple of Qr."""
        b = _binade(s, fmt) if s - s == 0.0 else None
        if b is None:
            if not (s - s == 0.0 and top <= (-s if s < 0 else s) <= fmax):
                return 1.0, inf, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0
            b = -1.0 if s < 0 else 1.0, top, inf, qhi  # the top binade: t > fmax checked
        sg, L, H, Q = b
        if tie_free:
            lo, hi = (L, min(H, next_up(fmax))) if sg > 0 else (max(-H, -fmax), -L)
            if sg < 0:  # -H < u <= -L
                lo, hi = next_up(lo) if lo == -H else lo, next_up(hi)
            return (sg, lo, hi, Q, 1.5 * 2.0**52 * Q, L * 2.0**-52,
                    max(Q / P, L * 2.0**-52), sg * H)
        away = (mode is Rounding.UP and sg > 0) or (mode is Rounding.DOWN and sg < 0)
        return (sg, L, H, Q, (0.0 if away else 0.5 if hp == 0.5 else 2.0) * Q, L * 2.0**-52,
                inf, sg * H)

    # the steps' constants, read as locals (faster than closure cells in the loop)
    consts = (K, qlo, qhi, P, ulp, inf, ne, odd, hp, hn, zd, fmax, max_pos, max_neg,
              add, _memo(binade_of))
    return _kahan_rows(_kahan_steps(mode, two_sum, c.want)(consts, fl, inexact_f, over_f))


def _sequential_runs(add, fl: list[int], c: OpContext):
    """The sequential order's row sum (for :func:`_run_rows`) by runs at one quantum and
    inline steps between them (see above); ``add`` is the Python-float adder of ``c``."""
    mode = c.result.rounding

    def increments(neg: bool, _r, f, frac, a0):
        if mode is Rounding.ODD:
            return _odd_increments(f, frac, a0), None
        if mode is Rounding.NEAREST_EVEN:
            return f + (frac > 0.5), frac != 0.5  # a tie: the parity of s decides
        if mode is Rounding.NEAREST_AWAY:
            return f + (frac >= 0.5), None
        if (mode is Rounding.UP) != neg and mode is not Rounding.TOWARD_ZERO:
            return f + (frac > 0.0), None  # away from zero: toward +inf above 0, -inf below
        return f, None  # toward zero

    # round to odd with no mantissa bit: the kernel's parity is the exponent's, not n's
    runs_ok = mode in _RUN_MODES or (mode is Rounding.ODD and c.result.fmt.mantissa_bits > 0)
    return _runs(c, fl, add, _sequential_steps(add, fl, c), increments if runs_ok else None)


def _odd_increments(f: np.ndarray, frac: np.ndarray, a0: float) -> np.ndarray:
    """Round to odd's increments of a run (units of q; f, frac as in :func:`_runs`; a0: the
    running total's magnitude before it). An inexact add goes up from its floor when that
    floor is even, so it depends on the total's parity: after an inexact add the total is
    odd; an exact add (frac 0) adds f's parity. So the parity before add i is that of the
    last inexact add before i (odd; a0's where none) plus the exact f's since, a cumsum."""
    inex = frac != 0.0
    g = np.where(inex, 0.0, f % 2.0)  # exact adds' parities (0 at inexact ones)
    cg = np.cumsum(g)
    last = np.maximum.accumulate(np.where(inex, np.arange(f.size), -1))
    last = np.concatenate(([-1], last[:-1]))  # the last inexact add before each
    # parity before add i: base + (the exact f's since); base 1 - cg[last] (cg[last] counts
    # those before it) after an inexact add, a0 at the run's start
    base = np.where(last < 0, a0 % 2.0, 1.0 - cg[last])
    par = (base + cg - g) % 2.0
    return f + (inex & ((par + f) % 2.0 == 0.0))


def _runs(c: OpContext, fl: list[int], add, steps, increments, unused=None, skip=None):
    """The row sum of :func:`_sequential_runs` and :func:`_stochastic_runs`: runs while
    ``increments(neg, r, f, frac, a0)`` (r: the values in units of q, with the run's sign; f,
    frac: floor(r) and r - floor(r); a0: the total's magnitude in units of q) gives each add's
    increment of the magnitude in units of q (and a mask of the values it may take, or None),
    ``steps(s, values)`` between runs, ``add`` for the value after an infinite running total.
    ``unused(k)``: the run's increments for its last k values were not used (stochastic
    rounding: their draws go back); ``skip(k)``: k adds to a non-finite running total were
    skipped (their draws are taken)."""
    fmt, want = c.result.fmt, c.want
    m, tiny, fmax = fmt.mantissa_bits, fmt.smallest_normal, fmt.max
    lo_u, hi_u = float(2**m), float(2 ** (m + 1))  # the binade's bounds in units of q
    frexp, ldexp = math.frexp, math.ldexp
    inexact_f = int(Flags.INEXACT)

    def row_sum(s: float, x: np.ndarray) -> float:
        if c.conversion.daz:  # the rounded add reads subnormal values as zero (dot's products)
            x = daz_operand(x, c)
        n, i, w, stretch = x.size, 0, _RUN_FIRST, _STEPS_FIRST
        while i < n:
            if s - s != 0.0:  # inf or NaN: it stays unless a NaN or the other inf comes
                if s != s:  # NaN: every later add gives NaN and the same flags
                    if want:
                        s = add(s, float(x[i]))
                        i += 1
                    if skip is not None:
                        skip(n - i)
                    return s
                hit = np.flatnonzero(np.isnan(x[i:]) | (x[i:] == -s))
                k = int(hit[0]) if hit.size else n - i  # inf + finite: inf, exact
                if skip is not None:
                    skip(k)
                i += k
                if i < n:
                    s = add(s, float(x[i]))
                    i += 1
                continue
            a = -s if s < 0 else s
            if increments is None or not tiny <= a <= fmax:  # no run from 0, subnormals, ...
                s = steps(s, x[i:i + stretch].tolist())
                i += stretch
                stretch = min(2 * stretch, _STEPS_MAX)
                continue
            neg = s < 0
            q = ldexp(1.0, frexp(a)[1] - 1 - m)
            with np.errstate(invalid="ignore", over="ignore"):  # inf, NaN: no run
                r = x[i:i + w] * (-1.0 / q if neg else 1.0 / q)  # exact: units of q
                f = np.floor(r)
                frac = r - f
                d, may = increments(neg, r, f, frac, a / q)
                tot = np.cumsum(d)
            tot += a / q
            prev = np.empty_like(tot)
            prev[0] = a / q
            prev[1:] = tot[:-1]
            ok = (r >= lo_u - prev) & (r < hi_u - prev) & (tot <= fmax / q)
            if may is not None:
                ok &= may
            run = r.size if ok.all() else int(np.argmin(ok))
            if unused is not None and run < r.size:
                unused(r.size - run)
            if run:
                s = float(tot[run - 1]) * (-q if neg else q)
                if want and frac[:run].any():
                    fl[0] |= inexact_f
            i += run
            if run == r.size:
                w, stretch = min(2 * w, _RUN_MAX), _STEPS_FIRST
                continue
            w = _RUN_FIRST
            if run < _RUN_SHORT:  # short runs: a stretch of steps before the next try
                s = steps(s, x[i:i + stretch].tolist())
                i += stretch
                stretch = min(2 * stretch, _STEPS_MAX)
            else:  # the value that leaves the run; runs pay again
                s = steps(s, [float(x[i])])
                i += 1
                stretch = _STEPS_FIRST
        return s

    return row_sum


# -- few outputs: the rounded add on Python floats ---------------------------------------------
#
# With few output rows, each step of the sequential / Kahan loop is a handful of NumPy calls
# on arrays of one or a few elements: their fixed cost (microseconds each), not arithmetic,
# is the time. For deterministic modes, the same correctly rounded add (and its flags) runs on
# Python floats instead: fpsim.rounding.scalar (scalar_adder, StochasticAdder, the same
# rounding and flags, the same draws with stochastic rounding).

_SCALAR_ROWS = 16  # at most this many outputs take the Python-float path


def _python_rows(X, row_sum, fl: list[int], out_fl, starts: list | None = None) -> np.ndarray:
    """The row loop of every Python-float path (sequential, Kahan and the 'wide' accumulator;
    deterministic, and stochastic with one row): row i's sum is ``row_sum(starts[i], rest)``
    (default start: the row's first value; ``rest``: the row's further values, in order).
    ``fl`` is the adder's one-element flag cell, reset per row and ORed into ``out_fl[i]``
    (None: no flags). Returns the sums (float64)."""
    rows = X.tolist()
    if starts is None:
        starts = [row[0] for row in rows]
    out = []
    for i, (s, row) in enumerate(zip(starts, rows, strict=True)):
        fl[0] = 0
        out.append(row_sum(s, row[1:]))
        if out_fl is not None:
            out_fl[i] |= fl[0]
    return np.array(out, dtype=np.float64)


def _sequential_row(add):
    """The sequential order's row sum for :func:`_python_rows`, ``add`` the rounded add (a
    for loop: Python 3.11+ runs its Python-to-Python calls faster than functools.reduce's)."""

    def row_sum(s: float, xs: list) -> float:
        for x in xs:
            s = add(s, x)
        return s

    return row_sum


def _kahan_row(add):
    """The Kahan order's row sum for :func:`_python_rows`: _kahan_loop's four rounded ops per
    value, with ``add`` the rounded add (sub(a, b) is add(a, -b))."""

    def row_sum(s: float, xs: list) -> float:
        comp = 0.0
        for x in xs:
            y = add(x, -comp)
            t = add(s, y)
            comp = add(add(t, -s), -y)
            s = t
        return s

    return row_sum


def _scalar_ok(c: OpContext, rows: int) -> bool:
    fmt = c.result.fmt
    return (rows <= _SCALAR_ROWS and c.result.rounding is not Rounding.STOCHASTIC
            and plan_for(fmt).add_fast and fmt.emax - fmt.emin <= 900
            and fmt.mantissa_bits <= MAX_MANTISSA and fast_paths_on())


def _scalar_adder(c: OpContext):
    """rounding.scalar.scalar_adder by the add's result policy, DAZ and flags."""
    return scalar_adder(c.result, c.conversion.daz, c.want)


def _stochastic_adder(c: OpContext, rows: int, ops: int) -> StochasticAdder:
    """rounding.scalar.StochasticAdder for ``ops`` adds on ``rows`` rows in c's policy (its
    pair path skipped where every add of two values of the format is exact in float64)."""
    return StochasticAdder(c.result, rows, ops, exact=plan_for(c.result.fmt).add_exact,
                           daz=c.conversion.daz, want=c.want)


def _stochastic_ok(c: OpContext, rows: int) -> bool:
    fmt = c.result.fmt
    return (rows <= _SCALAR_ROWS and c.result.rounding is Rounding.STOCHASTIC
            and plan_for(fmt).add_fast and fmt.mantissa_bits <= MAX_MANTISSA
            and fast_paths_on())


_INEXACT = int(Flags.INEXACT)


def _columns(X, block: int = 4096):
    """X's columns as lists of Python floats, a block at a time (bounded memory)."""
    for j in range(0, X.shape[1], block):
        yield from X[:, j:j + block].T.tolist()


def _sequential_stochastic(X, acc: _Acc):
    rows, n = X.shape
    st = _stochastic_adder(acc.c, rows, n - 1)
    if rows == 1 and st.bulk:  # runs at one quantum: the same draws, taken in blocks
        return _run_rows(X, _stochastic_runs(st, acc.c), st.fl, acc.fl)
    if rows == 1:  # floats rather than lists of one (the same draws)
        return _python_rows(X, _sequential_row(st.add1), st.fl, acc.fl)
    cols = _columns(X)
    s = next(cols)
    for x in cols:
        s = st.add(s, x)
    if acc.fl is not None:
        acc.fl |= np.array(st.fl, dtype=np.uint8)
    return np.array(s, dtype=np.float64)


def _stochastic_runs(st: StochasticAdder, c: OpContext):
    """The sequential order's row sum (one row, raw draws in bulk) by runs at one quantum, as
    :func:`_sequential_runs`, with the stochastic adder's rounding of each add in the run:
    add k uses raw draw k. Which branch rounds it depends on x alone: s + x is exact in
    float64 (the kernel's branch) unless x has bits below 2**(e - 52), i.e. frac * 2**c is
    not an integer (c = 52 - m; s is a multiple of q). The kernel adds the draw's low c bits
    (random_bits: its top bits, shifted) to the pattern's c low bits, frac * 2**c: up on a
    carry. The pair branch goes up when the draw's uniform is below (hi - t0 + lo) / q, which
    is frac exactly (x's bits below q are a float64 number)."""
    cb, rb, exact = st.c, st.rb, st.exact
    mask = np.uint64((1 << cb) - 1)
    carry = np.uint64(1 << cb)
    scale = 2.0**cb

    def increments(_neg: bool, r, f, frac, _a0):
        u = st.take(r.size)
        low = frac * scale
        if rb is None:
            inc = u & mask
        else:
            inc = ((u >> np.uint64(64 - rb)) << np.uint64(max(cb - rb, 0))) & mask
        with np.errstate(invalid="ignore"):
            up = (low.astype(np.uint64) + inc) >= carry
        if not exact:
            pair = low != np.floor(low)
            if pair.any():
                if rb is None:
                    up_p = (u >> np.uint64(11)).astype(np.float64) * 2.0**-53 < frac
                else:
                    up_p = (u >> np.uint64(64 - rb)).astype(np.float64) < np.floor(frac * 2.0**rb)
                up = np.where(pair, up_p, up)
        return f + up, None

    def steps(s: float, xs: list) -> float:
        for x in xs:
            s = st.add1(s, x)
        return s

    return _runs(c, st.fl, st.add1, steps, increments, st.unget, st.take)


def _kahan_stochastic(X, acc: _Acc):
    rows, n = X.shape
    st = _stochastic_adder(acc.c, rows, 4 * (n - 1))
    if rows == 1 and st.bulk and _kahan_fast_ok(acc.c):  # inline steps, draws in blocks
        return _python_rows(X, _kahan_fast_stochastic(st, acc.c), st.fl, acc.fl)
    if rows == 1:  # floats rather than lists of one (the same draws)
        return _python_rows(X, _kahan_row(st.add1), st.fl, acc.fl)
    add = st.add
    cols = _columns(X)
    s = next(cols)
    comp = [0.0] * rows
    for x in cols:  # _kahan_loop's ops: sub(a, b) is add(a, -b)
        y = add(x, [-v for v in comp])
        t = add(s, y)
        comp = add(add(t, [-v for v in s]), [-v for v in y])
        s = t
    if acc.fl is not None:
        acc.fl |= np.array(st.fl, dtype=np.uint8)
    return np.array(s, dtype=np.float64)


_KAHAN_BLOCK = 1 << 12  # values per block of draws of the inline stochastic steps


def _kahan_fast_stochastic(st: StochasticAdder, c: OpContext):
    """:func:`_kahan_fast` with stochastic rounding (one row, raw draws in bulk): operation
    j of the row uses raw draw j, as :meth:`StochasticAdder.add1` would take it; the inline
    rounding is the kernel's carry (see above: up when |v| % q >= q * W, W = 1 - inc / 2**c),
    every other case :meth:`StochasticAdder.add_raw` with the same draw."""
    fmt = c.result.fmt
    m, cb, rb = fmt.mantissa_bits, st.c, st.rb
    K = 2.0**cb  # ulp(v) * K: v's quantum in the format
    qlo, qhi = 2.0 ** (fmt.emin - m), 2.0 ** (fmt.emax - m)
    P = 2.0 ** (m + 1)
    two_sum = not st.exact
    ulp, inf, add = math.ulp, math.inf, st.add_raw
    mask = np.uint64((1 << cb) - 1)

    def binade_of(s: float):
        b = _binade(s, fmt) if s - s == 0.0 else None
        if b is None:
            return 1.0, inf, 0.0, 1.0, 0.0, 0.0, 0.0
        sg, L, H, Q = b
        return sg, L, H, Q, L * 2.0**-52, max(Q / P, L * 2.0**-52), sg * H

    binade = _memo(binade_of)

    def steps(s: float, comp: float, xs: list) -> tuple[float, float]:
        ix = False
        sg, L, H, Q, Qt, Qr, sH = binade(s)
        for j in range(0, len(xs), _KAHAN_BLOCK):
            block = xs[j:j + _KAHAN_BLOCK]
            U = st.take(4 * len(block))  # ops 4i .. 4i + 3 of value i
            if rb is None:
                inc = U & mask
            else:
                inc = ((U >> np.uint64(64 - rb)) << np.uint64(max(cb - rb, 0))) & mask
            W = 1.0 - inc.astype(np.float64) * 2.0**-cb
            # value i's draws for y and t as loop variables (fewer operations than W[k + 1]),
            # the only ones made Python floats up front (c's: where c is rounded inline)
            for k, x, w0, w1 in zip(range(0, W.size, 4), block, W[0::4].tolist(),
                                    W[1::4].tolist(), strict=True):
                v = x - comp  # y = fl(x - comp)
                q1 = ulp(v) * K
                if qlo <= q1 < qhi and (not two_sum or (x - v == comp and v + comp == x)):
                    rem = v % q1
                    if rem:
                        y = v - rem
                        qw = q1 * w0
                        if (rem >= qw) if v > 0 else (rem > q1 - qw):
                            y += q1
                        ix = True
                    else:
                        y = v
                else:
                    y, q1 = add(x, -comp, int(U[k])), 0.0
                u = s + y  # t = fl(s + y), in s's binade
                a = u * sg
                if L <= a < H and (not two_sum or q1 >= Qt):
                    rem = a % Q
                    if rem:
                        t = a - rem
                        if rem >= Q * w1:
                            t += Q
                        ix = True
                        t *= sg
                    else:
                        t = u
                    if q1 >= Qr:  # c = t - (s + y), s + y exact: |c| < Q <= q1 * 2**(m+1)
                        comp = (t - s) - y or 0.0  # (draw k + 3 unused, as w's below)
                        s = t
                        if t == sH:  # rounded up to the top of the binade (sH = sg * H)
                            sg, L, H, Q, Qt, Qr, sH = binade(s)
                        continue
                    d = t - s  # exact (Sterbenz), +0 if t == s
                    r = (Q if Q < q1 else q1) * P
                    moved = t == sH
                elif (s and y and qlo <= (qt := ulp(u) * K) < qhi
                      and (not two_sum or (u - s == y and u - y == s))):
                    rem = u % qt  # t leaves s's binade: rounded as y above (draw k + 1)
                    if rem:
                        t = u - rem
                        qw = qt * w1
                        if (rem >= qw) if u > 0 else (rem > qt - qw):
                            t += qt
                        ix = True
                    else:
                        t = u
                    d = t - s
                    qd = ulp(d) * K
                    if d and not (qlo <= qd < qhi and not d % qd
                                  and (not two_sum or (d + s == t and t - d == s))):
                        d = add(t, -s, int(U[k + 2]))  # not a normal value, or inexact
                    r, moved = 0.0, True
                else:
                    t = add(s, y, int(U[k + 1]))
                    comp = add(add(t, -s, int(U[k + 2])), -y, int(U[k + 3]))
                    s = t
                    sg, L, H, Q, Qt, Qr, sH = binade(s)
                    continue
                w = d - y
                if w and -r < w < r:
                    comp = w  # exact
                elif not w and y:
                    comp = 0.0
                elif (w and qlo <= (q3 := ulp(w) * K) < qhi
                      and (not two_sum or (w + y == d and d - w == y))):
                    rem = w % q3  # c = fl(d - y) inline, as y above (draw k + 3)
                    if rem:
                        comp = w - rem
                        qw = q3 * float(W[k + 3])
                        if (rem >= qw) if w > 0 else (rem > q3 - qw):
                            comp += q3
                        ix = True
                    else:
                        comp = w
                else:
                    comp = add(d, -y, int(U[k + 3]))
                s = t
                if moved:
                    sg, L, H, Q, Qt, Qr, sH = binade(s)
        if ix:
            st.fl[0] |= _INEXACT
        return s, comp

    return _kahan_rows(steps, st.take)


def _sequential_loop(X, acc: _Acc):
    """The reference loop: one rounded add per column, vectorised across the rows."""
    s = X[:, 0].copy()
    for k in range(1, X.shape[1]):
        s = acc.add(s, X[:, k])
    return s


def _kahan(X, acc: _Acc, native: bool = True):
    # x - c is add(x, -c) on every route, as in the loop (and fpsim.sub's kernel): -c is
    # IEEE 754's negate, which flips a NaN's sign too, and the add returns its first NaN
    # operand, quieted (nan_of). IEEE 754 leaves the sign of a subtraction's NaN result
    # unspecified and np.subtract returns a NaN c unnegated (x86): the loop's rule is kept
    # as the definition (every other route follows it); the native route redoes NaN rows.
    if _scalar_ok(acc.c, X.shape[0]) and acc.c.result.rounding in _STEP_MODES:
        add, fl = _scalar_adder(acc.c)  # few outputs: Python floats, the common case inline
        return _python_rows(X, _kahan_fast(add, fl, acc.c), fl, acc.fl)
    if native and native_ok(acc.c):  # each op one native rounded op (see _native_sequential)
        cols = np.ascontiguousarray(X.T).astype(acc.c.result.fmt.dtype)
        s = cols[0].copy()
        comp = np.zeros_like(s)
        with np.errstate(all="ignore"):
            for k in range(1, X.shape[1]):
                y = cols[k] - comp
                t = s + y
                comp = (t - s) - y
                s = t
        return _nan_rows_again(s.astype(np.float64), X, acc.c,
                               lambda Xn, a: _kahan(Xn, a, native=False))
    if _stochastic_ok(acc.c, X.shape[0]):  # few outputs: the same draws and roundings
        return _kahan_stochastic(X, acc)
    if _scalar_ok(acc.c, X.shape[0]):  # few outputs: the same ops on Python floats
        add, fl = _scalar_adder(acc.c)
        return _python_rows(X, _kahan_row(add), fl, acc.fl)
    return _kahan_loop(X, acc)


def _kahan_loop(X, acc: _Acc):
    """The reference loop: four rounded ops per column, vectorised across the rows."""
    s = X[:, 0].copy()
    comp = np.zeros_like(s)
    for k in range(1, X.shape[1]):
        y = acc.sub(X[:, k], comp)
        t = acc.add(s, y)
        comp = acc.sub(acc.sub(t, s), y)
        s = t
    return s


def _pairwise_tree(n: int):
    """NumPy's recursion as (leaves [(start, length)], internal nodes [(left, right)] in
    children-first order; node ids: leaves first, then internal nodes)."""
    leaves: list[tuple[int, int]] = []
    nodes: list[tuple[int, int]] = []
    pending: list[tuple[int, int]] = []

    def build(start: int, m: int) -> tuple[str, int]:
        if m <= 128:
            leaves.append((start, m))
            return ("leaf", len(leaves) - 1)
        m2 = m // 2
        m2 -= m2 % 8
        left = build(start, m2)
        right = build(start + m2, m - m2)
        pending.append((left, right))
        return ("node", len(pending) - 1)

    build(0, n)
    nl = len(leaves)
    for left, right in pending:
        ids = [i if kind == "leaf" else nl + i for kind, i in (left, right)]
        nodes.append((ids[0], ids[1]))
    return leaves, nodes


def _pairwise(X, acc: _Acc):
    rows, n = X.shape
    if n < 8:
        return _sequential(X, acc)
    leaves, nodes = _pairwise_tree(n)
    start = np.array([s for s, _ in leaves])
    length = np.array([m for _, m in leaves])
    body = length - length % 8
    j = np.arange(8)
    r = X[:, start[:, None] + j]  # (rows, leaves, 8): the eight strided partial sums
    for t in range(1, int(body.max()) // 8):
        act = np.flatnonzero(body > 8 * t)
        r[:, act] = acc.add(r[:, act], X[:, start[act, None] + 8 * t + j])
    while r.shape[2] > 1:  # ((r0+r1) + (r2+r3)) + ((r4+r5) + (r6+r7))
        r = acc.add(np.ascontiguousarray(r[:, :, 0::2]), np.ascontiguousarray(r[:, :, 1::2]))
    val = np.empty((rows, len(leaves) + len(nodes)))
    val[:, :len(leaves)] = r[:, :, 0]
    for i in range(7):  # the n % 8 leftovers, one by one
        act = np.flatnonzero(length % 8 > i)
        if act.size:
            val[:, act] = acc.add(val[:, act], X[:, start[act] + body[act] + i])
    # internal nodes level by level (children first): one vectorised add per tree height
    height = np.zeros(len(leaves) + len(nodes), np.int64)
    for k, (left, right) in enumerate(nodes):
        height[len(leaves) + k] = max(height[left], height[right]) + 1
    lr = np.array(nodes, dtype=np.int64).reshape(-1, 2)
    for h in range(1, int(height.max()) + 1):
        ids = np.flatnonzero(height == h)
        kids = lr[ids - len(leaves)]
        val[:, ids] = acc.add(val[:, kids[:, 0]], val[:, kids[:, 1]])
    return val[:, -1] if nodes else val[:, 0]


def _wide_exact(span: tuple[int, int], acc_fmt: Format, n: int, gradual: bool = True) -> bool:
    """Every partial sum of n terms that are multiples of 2**bottom below 2**top (span) is a
    number of the accumulator: the accumulator's adds are then exact. ``gradual``: the
    accumulator keeps subnormals (else no partial sum may be subnormal: flush-to-zero would
    flush it, DAZ read it as zero)."""
    bottom, top = span
    top += max(n - 1, 1).bit_length()
    low = acc_fmt.emin - acc_fmt.mantissa_bits if gradual else acc_fmt.emin
    return (top - bottom <= acc_fmt.precision_bits and top <= acc_fmt.emax
            and low <= bottom and acc_fmt.subnormals)


def _wide_loop(X, wacc: _Acc) -> np.ndarray:
    """The accumulator's rounded adds of X's terms, row by row (wacc: its context, flags)."""
    ca = wacc.c
    # the first value goes into the accumulator as an add's result would (0 + x: the mode,
    # flush-to-zero, and DAZ of a subnormal value)
    s, f0 = round_result(daz_operand(X[:, 0], ca), None, ca)
    if f0 is not None:
        wacc.fl |= f0
    if _scalar_ok(ca, X.shape[0]):
        # few outputs: Python floats (the rounding of s + lo holds for any float64 terms,
        # not only the accumulator's values: see _scalar_adder)
        add, fl = _scalar_adder(ca)
        return _python_rows(X, _sequential_row(add), fl, wacc.fl, s.tolist())
    for k in range(1, X.shape[1]):
        s = wacc.add(s, X[:, k], exact_operands=False)
    return s


def _wide(X, acc: _Acc, c: OpContext, acc_fmt: Format, span: tuple[int, int]):
    """Accumulate the exact terms X (float64, exact, within span) in acc_fmt, round once to
    c.result.fmt."""
    rows, n = X.shape
    gradual = not c.conversion.daz and c.result.subnormals is Subnormals.KEEP
    exact = _wide_exact(span, acc_fmt, n, gradual)
    if acc_fmt == FP64 and not exact and c.result.rounding is not Rounding.NEAREST_EVEN:
        raise ValueError("accumulator='fp64' accumulates in NumPy float64: "
                         "rounding='nearest_even' only")
    if acc_fmt == FP64 and not exact and c.conversion.daz:
        raise ValueError("accumulator='fp64' accumulates in NumPy float64, which keeps "
                         "subnormal operands: subnormals='daz' or 'flush_daz' needs partial "
                         "sums that cannot be subnormal in float64, or another accumulator")
    if acc_fmt == FP64 or exact:
        # the adds are exact (or float64's own): plain float64 sums
        with np.errstate(invalid="ignore", over="ignore"):
            s = _accumulate(X)
        if c.result.rounding is Rounding.DOWN:
            # float64's exact zero sums are +0 unless every term is -0; rounding down
            # makes them -0 unless every term is +0 (x + (-x) = -0 at each add)
            plus_zeros = ((X == 0) & ~np.signbit(X)).all(axis=1)
            s[(s == 0) & ~plus_zeros] = -0.0
        if acc.fl is not None:
            inv = np.isnan(s) & ~np.isnan(X).any(axis=1)  # inf - inf on the way
            acc.fl[inv] |= np.uint8(Flags.INVALID)
    else:
        # the accumulator's adds follow the policy: flush their results, DAZ their operands
        sub = ((Subnormals.FLUSH_DAZ if c.conversion.daz else Subnormals.FLUSH)
               if c.result.subnormals is Subnormals.FLUSH
               else (Subnormals.DAZ if c.conversion.daz else Subnormals.KEEP))
        ca = context_of(c.result.replace(fmt=acc_fmt, subnormals=sub), c.want)
        s = None
        if native_ok(ca):
            with np.errstate(all="ignore"):
                Xn = X.astype(acc_fmt.dtype)
            if np.array_equal(Xn.astype(np.float64), X, equal_nan=True):
                # every term is a value of the accumulator: its native add is the rounded add
                with np.errstate(all="ignore"):
                    s = _accumulate(Xn).astype(np.float64)
            del Xn
        if s is not None:  # NaN rows: the loop's pattern (no flags)
            s = _nan_rows_again(s, X, ca, _wide_loop)
        else:
            wacc = _Acc(ca, rows)
            s = _wide_loop(X, wacc)
            if acc.fl is not None:
                acc.fl |= wacc.fl
    out, fl = round_result(s, None, c)
    if acc.fl is not None:
        acc.fl |= fl
    return out


def _reduce(X, c: OpContext, order: Order, acc_fmt, span):
    rows, n = X.shape
    acc = _Acc(c, rows)
    if n == 0 or rows == 0:
        return np.zeros(rows), acc.fl
    if order is Order.SEQUENTIAL:
        out = _sequential(X, acc)
    elif order is Order.PAIRWISE:
        out = _pairwise(X, acc)
    elif order is Order.KAHAN:
        out = _kahan(X, acc)
    else:
        out = _wide(X, acc, c, acc_fmt, span)
    return out, acc.fl


def _accumulator(order: Order, accumulator) -> Format | None:
    if order is not Order.WIDE:
        if accumulator is not None:
            raise ValueError("accumulator only applies to order='wide'")
        return None
    fmt = get_float_format("fp32" if accumulator is None else accumulator)
    if fmt != FP64 and fmt.mantissa_bits > 50:
        raise ValueError(f"accumulator {fmt.name}: at most 50 mantissa bits, or 'fp64'")
    return fmt


def _finish(name, out, fl, snan_rows, out_shape, c: OpContext, flags: bool):
    if c.want:
        if snan_rows is not None:
            fl[snan_rows] |= np.uint8(Flags.INVALID)
        fl = fl.reshape(out_shape)
        if _flags.flags_active():
            _flags.record(fl, name)
    out = out.reshape(out_shape)
    if out_shape == ():
        out = out[()]
        fl = fl[()] if fl is not None else None
    return (out, fl) if flags else out


_MAX_DIMS = 64  # NumPy 2 arrays have at most 64 dimensions (NPY_MAXDIMS)


def _check_axis(axis, name: str = "axis") -> None:
    """axis: None, an int or a tuple of ints (a clear TypeError otherwise); an int beyond any
    array's dimensions is NumPy's AxisError here (NumPy's own axis check overflows on it)."""
    if axis is None:
        return
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{name} must be None, an int or a tuple of ints, got {axis!r}")
        if not -_MAX_DIMS <= a < _MAX_DIMS:
            raise np.exceptions.AxisError(f"{name} {a} is out of bounds for any array")


def _to_rows(v: np.ndarray, axis, keepdims: bool):
    """Move the reduced axes last: (rows, n) array and the output shape. The axis tuple is a
    set, as in NumPy (a repeated axis is NumPy's ValueError): the reduced axes keep their
    order in ``v``, so each row holds its values in C order whatever order the tuple lists
    them in (``axis=(1, 0)`` sums as ``axis=(0, 1)`` and ``axis=None``)."""
    if axis is None:
        axes = tuple(range(v.ndim))
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = tuple(sorted(normalize_axis_tuple(axes, v.ndim, "axis"))) if axes else ()
    keep = [i for i in range(v.ndim) if i not in axes]
    moved = np.transpose(v, keep + list(axes))
    kept_shape = tuple(v.shape[i] for i in keep)
    n = int(np.prod([v.shape[i] for i in axes], dtype=np.int64))
    X = np.ascontiguousarray(moved).reshape(int(np.prod(kept_shape, dtype=np.int64)), n)
    out_shape = tuple(1 if i in axes else v.shape[i] for i in range(v.ndim)) if keepdims \
        else kept_shape
    return X, out_shape


def sum(  # noqa: A001 - the natural name, as numpy.sum
    x,
    fmt: Format | str | None = None,
    *,
    axis: int | tuple[int, ...] | None = None,
    order: Order | str = "sequential",
    accumulator: Format | str | None = None,
    rounding: Rounding | str = "nearest_even",
    overflow: Overflow | str = "inf",
    subnormals: Subnormals | str = "keep",
    tininess: Tininess | str = "after",
    rng: np.random.Generator | int | None = None,
    random_bits: int | None = None,
    flags: bool = False,
    keepdims: bool = False,
    policy: RoundingPolicy | None = None,
):
    """Sum ``x`` over ``axis`` (all axes by default) in ``fmt`` with the accumulation order
    ``order`` (see the module docstring for the exact models); vectorised over the other axes.
    The values along several axes are taken in C order of those axes, whatever order ``axis``
    lists them in (a tuple of axes is a set, as in NumPy).

    Values are first converted to ``fmt`` (round to nearest even). Returns float64 values of
    ``fmt`` (a scalar for a full reduction); ``flags=True`` adds the OR of the flags of every
    operation per output element. The rounding options as :func:`fpsim.round` takes them (or
    ``policy=``, a :class:`fpsim.RoundingPolicy`).

    >>> import numpy as np
    >>> from fpsim.reductions import sum
    >>> ones = np.ones(1000)
    >>> [float(sum(ones, "bf16", order=o)) for o in ("sequential", "pairwise", "kahan", "wide")]
    [256.0, 1000.0, 1000.0, 1000.0]
    >>> sum(np.ones((2, 3)), "fp16", axis=1)
    array([3., 3.])
    """
    _check_axis(axis)
    c = context(fmt, rounding, overflow=overflow, subnormals=subnormals, tininess=tininess,
                rng=rng, random_bits=random_bits, flags=flags, what="sum", policy=policy)
    order = _as_order(order)
    acc_fmt = _accumulator(order, accumulator)
    with quiet_flags():
        v, snan = convert_operand(x, c)
        X, out_shape = _to_rows(np.asarray(v), axis, keepdims)
        snan_rows = None
        if snan is not None and c.want:
            S, _ = _to_rows(np.broadcast_to(snan, np.shape(v)), axis, keepdims)
            snan_rows = S.any(axis=1)
        fmt = c.result.fmt  # parsed
        span = (fmt.emin - fmt.mantissa_bits, fmt.emax + 1)
        out, fl = _reduce(X, c, order, acc_fmt, span)
    return _finish("sum", out, fl, snan_rows, out_shape, c, flags)


def dot(
    a,
    b,
    fmt: Format | str | None = None,
    *,
    axis: int = -1,
    order: Order | str = "sequential",
    accumulator: Format | str | None = None,
    rounding: Rounding | str = "nearest_even",
    overflow: Overflow | str = "inf",
    subnormals: Subnormals | str = "keep",
    tininess: Tininess | str = "after",
    rng: np.random.Generator | int | None = None,
    random_bits: int | None = None,
    flags: bool = False,
    policy: RoundingPolicy | None = None,
):
    """Inner products ``sum(a * b)`` along ``axis`` (the last by default; the other axes
    broadcast), in ``fmt``.

    ``sequential``, ``pairwise`` and ``kahan`` round every product to ``fmt`` and sum the
    products in that order; ``wide`` keeps every product exact and accumulates in
    ``accumulator`` (default fp32, one rounding per add, as a fused multiply-add into the
    accumulator), rounding once to ``fmt`` at the end.

    >>> import numpy as np
    >>> from fpsim.reductions import dot
    >>> a = np.full(4, 1 + 2.0**-7)  # bf16: a*a = 1 + 2**-6 + 2**-14 is rounded per product
    >>> float(dot(a, a, "bf16")), float(dot(a, a, "bf16", order="wide"))
    (4.0625, 4.0625)
    >>> float(dot(a, a, "bf16", rounding="up")), float(dot(a, a, "bf16", order="wide",
    ...                                                   rounding="up"))
    (4.125, 4.09375)
    """
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"dot: axis must be an int, got {axis!r}")
    _check_axis(axis, "dot: axis")
    c = context(fmt, rounding, overflow=overflow, subnormals=subnormals, tininess=tininess,
                rng=rng, random_bits=random_bits, flags=flags, what="dot", policy=policy)
    fmt = c.result.fmt  # parsed
    order = _as_order(order)
    acc_fmt = _accumulator(order, accumulator)
    if order is Order.WIDE and not plan_for(fmt).mul_fast:
        raise ValueError(f"order='wide' needs exact products in float64; {fmt.name} has "
                         f"{fmt.precision_bits} precision bits or too wide a range")
    with quiet_flags():
        va, sa = convert_operand(a, c, "a")  # the names an element's TypeError gives
        vb, sb = convert_operand(b, c, "b")
        shape = broadcast_shape("dot", np.shape(va), np.shape(vb))
        if len(shape) == 0:
            raise ValueError("dot needs arrays with at least one axis")
        for name, v in (("a", va), ("b", vb)):
            if np.ndim(v) == 0:
                raise ValueError(f"dot: {name} must have at least one axis, got a scalar")
        ax = int(normalize_axis_tuple(int(axis), len(shape), "axis")[0]) - len(shape)
        ka, kb = (np.shape(v)[ax] if -ax <= np.ndim(v) else 1 for v in (va, vb))
        if ka != kb:
            raise ValueError(f"dot: the reduced axis (axis={axis}) has length {ka} in a and "
                             f"{kb} in b; they must be equal")
        va, vb = np.broadcast_to(va, shape), np.broadcast_to(vb, shape)
        A, out_shape = _to_rows(va, axis, False)
        B, _ = _to_rows(vb, axis, False)
        snan_rows = None
        if c.want and (sa is not None or sb is not None):
            s = np.zeros(shape, bool)
            for m in (sa, sb):
                if m is not None:
                    s |= np.broadcast_to(m, shape)
            S, _ = _to_rows(s, axis, False)
            snan_rows = S.any(axis=1)
        rows, n = A.shape
        acc = _Acc(c, rows)
        if order is Order.WIDE:
            with np.errstate(invalid="ignore", over="ignore"):
                P = nans_of(A * B, A, B)  # exact (NaNs: the rule, not NumPy's loop)
            if c.want:
                inv = ((A == 0) & np.isinf(B)) | (np.isinf(A) & (B == 0))
                acc.fl[inv.any(axis=1)] |= np.uint8(Flags.INVALID)
            span = (2 * (fmt.emin - fmt.mantissa_bits), 2 * (fmt.emax + 1))
            out, fl = _reduce(P, c, order, acc_fmt, span)
            if acc.fl is not None:
                fl |= acc.fl
        else:
            pr, pfl, inv = mul_flat(A.reshape(-1), B.reshape(-1), c)
            acc._note(pfl, inv, (rows, n), slice(None))
            out, fl = _reduce(pr.reshape(rows, n), c, order, None, None)
            if acc.fl is not None:
                fl |= acc.fl
    return _finish("dot", out, fl, snan_rows, out_shape, c, flags)
