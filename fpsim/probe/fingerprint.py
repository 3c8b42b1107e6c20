"""The block-FMA parameters of a black-box matrix unit, from designed queries.

Contract: :func:`fingerprint` calls ``fn(A, B, C)`` (``A @ B + C`` on the unit under test, for
float64 arrays of ``input_format`` values, C of ``output_format`` values) on designed inputs
and returns a :class:`~fpsim.tensorcore.gpus.BlockFMA` that reproduces every answer, so that
``fpsim.tensorcore.matmul(..., gpu=unit)`` runs the unit bit for bit; or raises
:class:`FingerprintError` when no BlockFMA fits.

Method. Every query is a batch of dot products (row r of A with column r of B, plus C[r, r];
the rest of the product is not used), each designed so that one question decides it. A
question is answered by running the candidate units through fpsim's model and keeping those
whose results equal ``fn``'s bit for bit, stage by stage, each stage's queries built so that
the parameters of later stages do not change them:

1. alignment width (``extra_bits``), read first: c = 2**s, a product -2**s and a product
   2**(s - t), for t = 1, 2, ...: the small one survives the alignment while t <= 23 +
   extra_bits (Fasi et al. 2021's probe, scanned);
2. structure (block size, c joined, added late or added to the rounded product sum, odd/even
   product groups, aligned, exact or pairwise summation, a sticky bit): FPRev's masks on
   products (+M and -M, units elsewhere, c masked too): where M and -M cancel tells which
   terms share a block and where c joins; then the width again, per structure, from the width
   read and its neighbours;
3. output rounding, normalised products and the sticky bit (and the rounding of a c added to
   the rounded product sum): dot products of random significands over a few binades, with
   sums that need rounding;
4. for a late c: the two-operand alignment's rounding, its extra bits and the far-c rule, with
   c and product sums at random exponent gaps;
5. subnormal inputs, the overflow rule and the product limit: subnormal operands, sums past
   the output's largest value, overflowing products that cancel;
6. the alignment floor (``min_exponent``) and subnormal results: the cancellation of 1 at
   exponents scanned down to the inputs' smallest, where the floor starts to cut. A unit with
   a sticky bit keeps the far term alive below its floor, so these rows cannot place the
   floor: where the inputs reach it (bf16, not fp16) such a unit is refused with
   :class:`FingerprintError` rather than given a floor its answers do not fix.

The unit found is finally checked against ``fn`` on every query above plus random and
adversarial ones (mixed exponents, ties, cancellations, several blocks); a mismatch raises
:class:`FingerprintError`.

>>> import fpsim.tensorcore as tc
>>> fn = lambda A, B, C: tc.matmul(A, B, C, gpu="A100", input_format="fp16")
>>> fingerprint(fn, "fp16")
BlockFMA(block_size=8, extra_bits=1, output_rounding='toward_zero', min_exponent=None)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np

from ..formats import Format, get_float_format
from ..modes import Rounding
from ..rounding import round as fp_round
from ..tensorcore.gpus import BlockFMA
from ..tensorcore.model import matmul

__all__ = ["fingerprint", "FingerprintError"]

#: Largest block size looked for, and the K of the structure queries (two blocks of it).
MAX_BLOCK = 32
_BLOCKS = (1, 2, 4, 8, 16, 32)
#: Rows per batched query: fn gets (R x K) @ (K x R) and the diagonal is used.
_BATCH = 64
#: Extra alignment bits tried (the fp8 units have -10, the exact sum needs none).
_EXTRA_BITS = range(-16, 13)
_ROUNDINGS = (Rounding.TOWARD_ZERO, Rounding.NEAREST_EVEN, Rounding.DOWN, Rounding.UP)
_RANDOM_ROWS = 96
_SEED = 33


class FingerprintError(ValueError):
    """No :class:`BlockFMA` reproduces the unit under test (or ``fn`` misbehaves)."""


@dataclass
class _Rows:
    """A batch of dot products: rows of a (K), b (K) and c."""

    K: int
    a: list
    b: list
    c: list

    @classmethod
    def empty(cls, K: int) -> _Rows:
        return cls(K, [], [], [])

    def add(self, a: Iterable[float], b: Iterable[float], c: float) -> None:
        a, b = np.asarray(list(a), dtype=np.float64), np.asarray(list(b), dtype=np.float64)
        self.a.append(np.pad(a, (0, self.K - len(a))))  # zero products take no part
        self.b.append(np.pad(b, (0, self.K - len(b))))
        self.c.append(float(c))

    def __len__(self) -> int:
        return len(self.c)

    def extend(self, other: _Rows) -> None:
        if other.K == self.K:
            self.a += other.a
            self.b += other.b
            self.c += other.c
        else:
            raise AssertionError("K differs")


def _run_rows(call: Callable, rows: _Rows) -> np.ndarray:
    """Each row's d, through ``call(A, B, C)`` in batches of _BATCH rows."""
    out = np.empty(len(rows))
    A, B, C = np.array(rows.a), np.array(rows.b), np.array(rows.c)
    for s in range(0, len(rows), _BATCH):
        e = min(s + _BATCH, len(rows))
        r = e - s
        Cm = np.zeros((r, r))
        np.fill_diagonal(Cm, C[s:e])
        D = call(A[s:e], np.ascontiguousarray(B[s:e].T), Cm)
        out[s:e] = np.diagonal(D)
    return out


class _Probe:
    """The unit under test and the candidates' predictions, on shared queries."""

    def __init__(self, fn: Callable, fi: Format, fo: Format) -> None:
        self.fn, self.fi, self.fo = fn, fi, fo
        self.calls = 0

    def ask(self, rows: _Rows) -> np.ndarray:
        def call(A, B, C):
            self.calls += 1
            with np.errstate(all="ignore"):
                D = np.asarray(self.fn(A.copy(), B.copy(), C.copy()), dtype=np.float64)
            if D.shape != C.shape:
                raise FingerprintError(
                    f"fn(A, B, C) must return A @ B + C of shape {C.shape}, got shape "
                    f"{D.shape}")
            return D
        return _run_rows(call, rows)

    def predict(self, unit: BlockFMA, rows: _Rows) -> np.ndarray:
        return _run_rows(lambda A, B, C: matmul(A, B, C, gpu=unit, input_format=self.fi,
                                                output_format=self.fo), rows)

    def keep(self, candidates: list[BlockFMA], rows: _Rows, what: str) -> list[BlockFMA]:
        """The candidates whose results on ``rows`` equal fn's, bit for bit."""
        if not len(rows):
            return candidates
        want = self.ask(rows)
        kept = []
        for u in candidates:
            try:
                got = self.predict(u, rows)
            except ValueError:
                continue
            if _same(got, want):
                kept.append(u)
        if not kept:
            raise FingerprintError(
                f"no BlockFMA fits the unit's {what} answers ({len(rows)} dot products; "
                f"{len(candidates)} candidates tried, e.g. {candidates[0]!r})")
        return kept


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    """Bit for bit: equal values with equal signs of zero, NaN where NaN."""
    both_nan = np.isnan(x) & np.isnan(y)
    eq = (x == y) & (np.signbit(x) == np.signbit(y))
    return bool(np.all(both_nan | eq))


def _valid(**kw) -> BlockFMA | None:
    try:
        return BlockFMA(**kw)
    except ValueError:
        return None


# -- exponents the inputs can reach ----------------------------------------------------------

def _factors(fi: Format, e: int, *, normal: bool = False) -> tuple[float, float] | None:
    """Two ``fi`` values (normal ones if ``normal``) whose product is 2**e, or None."""
    lo, hi = fi.emin - (0 if normal else fi.mantissa_bits), fi.emax
    first, last = max(lo, e - hi), min(hi, e - lo)
    if first > last:
        return None
    # balanced, and normal where it can be (a subnormal input may be flushed)
    ea = min(last, max(first, e // 2, min(fi.emin, last)))
    eb = e - ea
    return 2.0 ** ea, 2.0 ** eb


def _top(fi: Format, fo: Format) -> int:
    """The exponent of the big products: within both formats, with room for sums."""
    return min(2 * fi.emax, fo.emax - 2, 2 * fi.emax)


# -- the stages' queries ---------------------------------------------------------------------

def _mask_exponents(fi: Format, fo: Format) -> tuple[int, int]:
    """Exponents of the masks' M and units: the unit's counts (multiples of 2**low) must be
    exact in the output format."""
    top = _top(fi, fo)
    return top, max(2 * fi.emin, top - 60, fo.emin - fo.mantissa_bits)


def _structure_rows(fi: Format, fo: Format) -> _Rows:
    """FPRev's masks over K = 2 * MAX_BLOCK products and c."""
    K = 2 * MAX_BLOCK
    top, low = _mask_exponents(fi, fo)
    big, small = _factors(fi, top, normal=True), _factors(fi, low, normal=True)
    assert big is not None and small is not None
    c_unit = 2.0 ** low if low >= fo.emin else 0.0
    rows = _Rows.empty(K)

    def masked(plus: int | None, minus: int | None, c_sign: float = 0.0) -> None:
        a = np.full(K, small[0])
        b = np.full(K, small[1])
        for pos, s in ((plus, 1.0), (minus, -1.0)):
            if pos is not None:
                a[pos], b[pos] = s * big[0], big[1]
        c = c_sign * 2.0 ** top if c_sign else c_unit
        rows.add(a, b, c)

    for j in range(1, K):
        masked(0, j)
    for j in range(K):
        masked(None, j, c_sign=1.0)
    for j in range(K - 1):
        masked(j, j + 1)
    for j in range(K - 2):
        masked(j, j + 2)
    return rows


def _structures(fi: Format, fo: Format, width: int | None) -> list[BlockFMA]:
    """The structures, aligned ones with ``width`` fraction bits (read from the unit), or if
    that is unknown an alignment narrow enough for the masks to absorb the units (the
    structure rows' M / u is 2**(top - low); K units must stay below M's cut)."""
    rne = Rounding.NEAREST_EVEN
    top, low = _mask_exponents(fi, fo)
    x = min(2, top - low - (2 * MAX_BLOCK).bit_length() - 3 - 23)
    if width is not None:
        x = min(max(width - 23, min(_EXTRA_BITS)), max(_EXTRA_BITS))
    out = []
    for n in _BLOCKS:
        out.append(_valid(block_size=n, extra_bits=x))
        # a sticky bit changes where the masks cancel, and adds one bit to the width read
        out += [_valid(block_size=n, extra_bits=y, sticky_bit=True) for y in (x, x - 1)]
        out.append(_valid(block_size=n, extra_bits=min(x, 1), c_addition="late",
                          alignment_rounding=Rounding.DOWN))
        out.append(_valid(block_size=n, extra_bits=min(x, 1), c_addition="late",
                          grouping="odd_even", alignment_rounding=Rounding.DOWN))
        out.append(_valid(block_size=n, extra_bits=0, output_rounding=rne, summation="exact"))
        out.append(_valid(block_size=n, extra_bits=0, output_rounding=rne,
                          summation="pairwise"))
        # c added to the rounded product sum (issue 33's B200 fp8 rule): where +M and -M
        # cancel inside a block, c (a unit) survives, where a joined or late c is cut with
        # the block's units
        out.append(_valid(block_size=n, extra_bits=x, c_addition="rounded_sum"))
        out.append(_valid(block_size=n, extra_bits=0, output_rounding=rne, summation="exact",
                          c_addition="rounded_sum"))
    return [u for u in out if u is not None]


def _width_rows(fi: Format, fo: Format, n: int) -> tuple[_Rows, np.ndarray, np.ndarray]:
    """c = 2**s, -2**s and 2**(s - t) (c joined or late), and 2**s, -2**s, 2**(s - t) (three
    products), for t = 1, 2, ...; returns the rows, each row's t and whether it has c."""
    K = max(n, 3)
    top = _top(fi, fo)
    rows = _Rows.empty(K)
    ts, with_c = [], []
    one = _factors(fi, top, normal=True)
    for t in range(1, 64):
        d = _factors(fi, top - t)
        if d is None or top - t < fo.emin - fo.mantissa_bits:
            break
        rows.add([-one[0], d[0]], [one[1], d[1]], 2.0 ** top)
        rows.add([one[0], -one[0], d[0]], [one[1], one[1], d[1]], 0.0)
        ts += [t, t]
        with_c += [True, False]
    return rows, np.array(ts), np.array(with_c)


def _read_width(probe: _Probe, fi: Format, fo: Format) -> int | None:
    """The largest t for which 2**(s - t) survives beside 2**s and -2**s (c joined or late,
    two products of one block): 23 + extra_bits for an aligned unit; None if every t
    survives (an exact sum) or none does."""
    rows, ts, with_c = _width_rows(fi, fo, MAX_BLOCK)
    got = probe.ask(rows)
    delta = 2.0 ** (_top(fi, fo) - ts)
    for form in (with_c, ~with_c):
        alive = got[form] == delta[form]
        if alive.all() or not alive[0]:
            continue
        return int(ts[form][np.argmin(alive)] - 1)
    return None


def _random_values(rng, fmt: Format, shape, lo: int, hi: int) -> np.ndarray:
    e = rng.integers(lo, hi + 1, size=shape)
    v = np.minimum(rng.uniform(1, 2, size=shape) * np.exp2(e), fmt.max)
    v *= rng.choice((-1.0, 1.0), size=shape)
    return np.asarray(fp_round(v, fmt), dtype=np.float64)


def _rounding_rows(fi: Format, fo: Format, n: int, rng) -> _Rows:
    """Random significands over a few binades, one block and several; c of a similar size."""
    K = 2 * n + 1
    rows = _Rows.empty(K)
    spread = min(6, fi.emax - 1)
    for r in range(_RANDOM_ROWS):
        k = K if r % 2 else n
        a = _random_values(rng, fi, k, -spread // 2, spread // 2)
        b = _random_values(rng, fi, k, -spread // 2, spread // 2)
        c = float(_random_values(rng, fo, 1, -2, spread)[0]) if r % 3 else 0.0
        rows.add(np.pad(a, (0, K - k)), np.pad(b, (0, K - k)), c)
    # sums that need rounding: c = +-(1 + k 2**-m) and a product +-1 (ties and 1.5 ulps)
    for m in sorted({fo.mantissa_bits, min(fo.mantissa_bits, 13)}):
        for k in (1, 3, 5, 7):
            for s in (1.0, -1.0):
                rows.add([s], [1.0], s * (1 + k * 2.0 ** -m))
                rows.add([s, s * 2.0 ** -(m + 1)], [1.0, 1.0], s * (1 + k * 2.0 ** -m))
    return rows


def _floor_rows(fi: Format, fo: Format, n: int, F: int, rng) -> tuple[_Rows, np.ndarray]:
    """The cancellation of stage 2 at every reachable exponent e (2**e, -2**e and a term
    about 2**(e - F)), also as a tie (or the smallest result) at the output's smallest
    subnormal broken by the far term; then tiny random dot products. Returns the rows and
    each row's e (a large negative number for the random ones)."""
    K = max(n, 4)
    rows = _Rows.empty(K)
    tags: list[int] = []
    top = _top(fi, fo)
    qmin = fo.emin - fo.mantissa_bits
    for e in range(top, 2 * (fi.emin - fi.mantissa_bits) - 1, -1):
        one = _factors(fi, e)
        if one is None:
            continue
        for t in (F - 1, F, F + 1):
            d = _factors(fi, e - t)
            if d is not None:
                rows.add([one[0], -one[0], d[0]], [one[1], one[1], d[1]], 0.0)
                tags.append(e)
        far = _factors(fi, e - F)
        for h in (_factors(fi, qmin - 1), _factors(fi, qmin)):
            if h is None or far is None:
                continue
            for sign in (1.0, -1.0):
                rows.add([one[0], -one[0], h[0], sign * far[0]],
                         [one[1], one[1], h[1], far[1]], 0.0)
                tags.append(e)
    for _ in range(32):
        e0 = int(rng.integers(2 * fi.emin, 2 * fi.emin + 40))
        a = _random_values(rng, fi, K, e0 // 2 - 2, e0 // 2 + 2)
        b = _random_values(rng, fi, K, e0 // 2 - 2, e0 // 2 + 2)
        rows.add(a, b, 0.0)
        tags.append(-(10 ** 6))
    return rows, np.array(tags)


def _special_rows(fi: Format, fo: Format, n: int, rng) -> _Rows:
    """Subnormal inputs, overflowing sums and products, overflowing products that cancel."""
    K = max(n, 4)
    rows = _Rows.empty(K)
    sub = fi.smallest_subnormal
    for k in (1, 3, 2 ** fi.mantissa_bits - 1):
        rows.add([k * sub, 1.0], [1.0, 1.0], 0.0)
        rows.add([k * sub], [2.0 ** fi.emax], 0.0)
        rows.add([k * sub, -1.0], [2.0 ** fi.emax, 2.0 ** (fi.emin + fi.emax)], 0.0)
    big = fi.max
    prod = big * big
    limit = 2.0 ** (fo.emax + 1)
    cmax = fo.max
    rows.add([big, big], [big, big], 0.0)
    rows.add([big, -big], [big, big], 0.0)
    rows.add([big, big], [big, -big], 1.0)
    rows.add([-big, -big], [big, big], 0.0)
    rows.add([1.0], [1.0], cmax)
    rows.add([1.0], [1.0], -cmax)
    rows.add([big], [big], cmax)
    rows.add([-big], [big], -cmax)
    rows.add([big], [big], -cmax)
    if prod < limit:
        # sums past the largest value, from products alone
        m = max(1, min(K, int(math.ceil(2 * cmax / prod)) + 1))
        rows.add([big] * m, [big] * m, cmax)
    for _ in range(16):
        a = _random_values(rng, fi, K, fi.emin, fi.emin + 3) * rng.integers(0, 2, K)
        b = _random_values(rng, fi, K, -2, 2)
        rows.add(a, b, 0.0)
    return rows


def _wide_rows(fi: Format, fo: Format, K: int, rng, count: int, *,
               high: bool = False) -> _Rows:
    """Random signs and exponents over the inputs' whole range (up to 2**64 each: overflow
    stays occasional), about one input in ten zero, c over the output's range; ``high``:
    exponents in the inputs' top 24 binades (products overflow often)."""
    rows = _Rows.empty(K)
    lo, hi = fi.emin - fi.mantissa_bits, min(fi.emax, 64)
    if high:
        lo, hi = max(lo, fi.emax - 24), fi.emax
    for _ in range(count):
        a, b = (_random_values(rng, fi, K, lo, hi) * (rng.random(K) > 0.1) for _ in range(2))
        c = float(_random_values(rng, fo, 1, fo.emin, fo.emax - 1)[0])
        rows.add(a, b, c)
    return rows


def _late_rows(fi: Format, fo: Format, n: int, rng, far: int) -> _Rows:
    """c and a product sum at random exponent gaps up to ``far``, both signs, both larger."""
    K = n
    rows = _Rows.empty(K)
    spread = min(3, fi.emax - 1)
    for r in range(160):
        gap = int(rng.integers(-far, far + 1)) if r % 4 else int(rng.integers(-6, 7))
        a = _random_values(rng, fi, K, -spread, spread)
        b = _random_values(rng, fi, K, -spread, spread)
        c = float(fp_round(rng.uniform(1, 2) * 2.0 ** gap * rng.choice((-1, 1)), fo))
        rows.add(a, b, c)
    # every gap: c = +-1.f * 2**-g below a product sum of +-1.f (one product)
    for g in range(1, far + 1):
        for sp in (1.0, -1.0):
            for sc in (1.0, -1.0):
                p = float(_random_values(rng, fi, 1, 0, 0)[0])
                c = float(fp_round(sc * rng.uniform(1, 2) * 2.0 ** -g, fo))
                rows.add([sp * abs(p)], [1.0], c)
                # and beside a product sum that cancels to a small value (its alignment
                # exponent stays high), the products in random places
                d = float(_random_values(rng, fi, 1, -min(g, fi.emax) // 2 - 1, -1)[0])
                a = np.zeros(min(K, 4))
                a[rng.permutation(len(a))[:3]] = (sp, -sp, d)[:len(a)] if len(a) >= 3 else 0
                rows.add(a, np.ones(len(a)), c)
    return rows


def _check_rows(fi: Format, fo: Format, n: int, rng) -> _Rows:
    """Random and adversarial dot products over several blocks."""
    K = 3 * n + 1
    rows = _Rows.empty(K)
    for r in range(128):
        lo = -3 if r % 2 else max(fi.emin, -12)
        a = _random_values(rng, fi, K, lo, 3)
        b = _random_values(rng, fi, K, lo, 3)
        if r % 3 == 0:  # cancellation: the second half undoes the first, almost
            h = K // 2
            a[h:2 * h] = -a[:h]
            b[h:2 * h] = b[:h]
            a[h] = float(fp_round(a[h] * (1 + 2.0 ** -fi.mantissa_bits), fi))
        c = float(_random_values(rng, fo, 1, -4, 6)[0]) if r % 5 else 0.0
        rows.add(a, b, c)
    rows.extend(_wide_rows(fi, fo, K, rng, 64))
    return rows


# -- the search ------------------------------------------------------------------------------

def _ordered_unique(units: Iterable[BlockFMA | None]) -> list[BlockFMA]:
    out: list[BlockFMA] = []
    for u in units:
        if u is not None and u not in out:
            out.append(u)
    return out


def fingerprint(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], object],
                input_format: Format | str, output_format: Format | str = "fp32") -> BlockFMA:
    """A :class:`BlockFMA` that computes what ``fn(A, B, C) = A @ B + C`` computes, for
    ``input_format`` inputs and an ``output_format`` result (see the module docstring).

    >>> import fpsim.tensorcore as tc
    >>> fn = lambda A, B, C: tc.matmul(A, B, C, gpu="V100", input_format="fp16",
    ...                                output_format="fp16")
    >>> fingerprint(fn, "fp16", "fp16")
    BlockFMA(block_size=4, extra_bits=0, output_rounding='nearest_even', min_exponent=-19)
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable fn(A, B, C) returning A @ B + C, got {fn!r}")
    fi, fo = get_float_format(input_format), get_float_format(output_format)
    for fmt, role in ((fi, "input"), (fo, "output")):
        if fmt.mantissa_bits > 23 or fmt.emax > 127 or fmt.emin < -126:
            raise ValueError(f"{role} format {fmt.name} is outside what a BlockFMA models "
                             f"(at most 23 mantissa bits, exponents within fp32's)")
    probe = _Probe(fn, fi, fo)
    rng = np.random.default_rng(_SEED)
    seen = _read_width(probe, fi, fo)
    kept = probe.keep(_structures(fi, fo, seen), _structure_rows(fi, fo),
                      "structure (where +M and -M cancel)")
    # 2. the alignment width, per structure: the width read first, then its neighbours
    near = 0 if seen is None else seen - 23
    width = []
    for u in kept:
        if u.summation != "aligned":
            width.append(u)
            continue
        tries = _ordered_unique(_valid(**{**_fields(u), "extra_bits": x})
                                for x in sorted(_EXTRA_BITS, key=lambda x: abs(x - near)))
        rows = _width_rows(fi, fo, u.block_size)[0]
        try:
            width += probe.keep(tries, rows, "alignment width")[:1]
        except FingerprintError:
            continue
    if not width:
        raise FingerprintError("no BlockFMA fits the unit's alignment-width answers (a term "
                               "2**-t below the others survives for t up to some bound)")
    final_errors = []
    for base in width:
        try:
            unit = _refine(probe, base, fi, fo, rng)
        except FingerprintError as e:
            final_errors.append(str(e))
            continue
        rows = _check_rows(fi, fo, unit.block_size, rng)
        if _same(probe.predict(unit, rows), probe.ask(rows)):
            return replace(unit, name=f"fingerprint {fi.name}->{fo.name}")
        final_errors.append(f"{unit!r} misses random or adversarial dot products")
    raise FingerprintError("no BlockFMA reproduces the unit: " + "; ".join(final_errors))



def _fields(u: BlockFMA) -> dict:
    return {f: getattr(u, f) for f in (
        "block_size", "extra_bits", "output_rounding", "min_exponent", "output_fraction_bits",
        "overflow", "summation", "grouping", "c_addition", "alignment_rounding",
        "late_extra_bits", "c_far_truncation", "sticky_bit", "products", "product_limit",
        "input_subnormals", "output_subnormals", "c_rounding")}


def _vary(units: list[BlockFMA], **choices) -> list[BlockFMA]:
    """Every unit with every combination of the given fields' values (first: preferred)."""
    out: list[BlockFMA | None] = []
    for u in units:
        combos = [{}]
        for k, values in choices.items():
            combos = [{**c, k: v} for c in combos for v in values]
        out += [_valid(**{**_fields(u), **c}) for c in combos]
    return _ordered_unique(out)


def _refine(probe: _Probe, base: BlockFMA, fi: Format, fo: Format, rng) -> BlockFMA:
    n = base.block_size
    rne = Rounding.NEAREST_EVEN
    aligned = base.summation == "aligned"
    # 3. rounding (pairwise needs nearest even), normalised products, sticky bit
    cands = _vary([base], output_rounding=(base.output_rounding, *_ROUNDINGS),
                  products=("unnormalised", "normalised"),
                  sticky_bit=(False, True) if aligned else (False,))
    if base.summation == "pairwise":
        cands = [u for u in cands if u.output_rounding is rne]
    late = base.c_addition == "late"
    if late:  # the late addition's rounding matters to every sum with c
        cands = _vary(cands, alignment_rounding=(base.alignment_rounding, *_ROUNDINGS))
    if base.c_addition == "rounded_sum":  # and so does the rounding of the addition of c
        cands = _vary(cands, c_rounding=(base.c_rounding, *_ROUNDINGS))
    cands = probe.keep(cands, _rounding_rows(fi, fo, n, rng), "rounding")
    unit = cands[0]
    # 6. a late c's alignment, before the tiny and special values
    if late:
        cands = _vary([unit], alignment_rounding=(unit.alignment_rounding, *_ROUNDINGS),
                      late_extra_bits=(unit.late_extra_bits, *range(0, 17)),
                      c_far_truncation=(None,))
        # c at most 12 binades from the product sum first (no far-c rule applies), then far
        unit = probe.keep(cands, _late_rows(fi, fo, n, rng, 12), "late c")[0]
        cands = _vary([unit], c_far_truncation=(None, *range(13, 48)))
        unit = probe.keep(cands, _late_rows(fi, fo, n, rng, 48), "far c")[0]
    # 5. subnormal inputs and results, overflow, product limit
    cands = _vary([unit], input_subnormals=("keep", "daz"),
                  overflow=("always_inf", "inf", "saturate"),
                  product_limit=(False, True), output_subnormals=("keep", "flush"))
    cands = probe.keep(cands, _special_rows(fi, fo, n, rng), "special values")
    wide = _wide_rows(fi, fo, 3 * n + 1, rng, 64)
    wide.extend(_wide_rows(fi, fo, 3 * n + 1, rng, 64, high=True))
    unit = probe.keep(cands, wide, "wide-range values")[0]
    # 4. the alignment floor: the largest exponent at which fn departs from no floor, + 1
    F = unit.fraction_bits if aligned else fo.mantissa_bits + 1
    rows, tags = _floor_rows(fi, fo, n, F, rng)
    want = probe.ask(rows)
    free = probe.predict(replace(unit, min_exponent=None), rows)
    differ = ~((free == want) & (np.signbit(free) == np.signbit(want))
               | (np.isnan(free) & np.isnan(want)))
    if not differ.any():
        return replace(unit, min_exponent=None)
    tagged = differ & (tags > -(10 ** 6))
    if not tagged.any():
        return probe.keep([replace(unit, min_exponent=None)], rows, "alignment floor")[0]
    m = int(tags[tagged].max()) + 1
    cands = _vary([unit], min_exponent=(m, m - 1, m + 1, m - 2, m + 2))
    return probe.keep(cands, rows, "alignment floor")[0]
