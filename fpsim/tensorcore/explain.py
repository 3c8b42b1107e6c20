"""A step-by-step record of one tensor-core dot product (``dot(..., explain=True)``): each
block's terms, alignment, exact integer sum and rounding, recomputed with Python integers and
Fractions from the kernel's trace and checked against it. (The error-against-K experiment is
:mod:`fpsim.tensorcore.accuracy`.)

>>> import fpsim.tensorcore as tc
>>> d, rec = tc.dot([1.0, 1.0], [1.0, -2.0**-24], -1 + 2.0**-24, gpu="V100", explain=True)
>>> rec.blocks[0].max_exponent, rec.blocks[0].exact_sum, float(d)
(0, 1, 1.1920928955078125e-07)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..formats import Format
from .gpus import C_MIN_EXPONENT, BlockFMA

__all__ = ["TermStep", "BlockStep", "DotExplanation", "build_explanation"]


def _exponent(x: Fraction, emin: int) -> int:
    """max(floor(log2|x|), emin) for x != 0, with integer arithmetic."""
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:  # bit lengths can overestimate floor(log2) by one
        e -= 1
    return max(e, emin)


def _binary(x: Fraction, frac_bits: int) -> str:
    """|x| (a multiple of 2**-frac_bits) in binary with a point: '1.0110'."""
    n = int(abs(x) * 2**frac_bits)
    s = format(n, "b").rjust(frac_bits + 1, "0")
    return s[:-frac_bits] + "." + s[-frac_bits:] if frac_bits else s


def _fmt(x: float | Fraction) -> str:
    return repr(float(x))  # every value here is dyadic with at most 53 significant bits


@dataclass
class TermStep:
    """One term of a block: a product ``a*b`` or the accumulator input ``c``."""

    label: str  # "a3*b3" or "c"
    value: Fraction  # exact value of the term
    significand: Fraction  # in [0, 4) for products, [0, 2) for c
    exponent: int | None  # None for a zero term (it takes no part in the alignment)
    significand_bits: int  # fraction bits of the significand, for display
    aligned: int  # signed integer with F fraction bits below 2**maxE (magnitude truncated)
    truncated: Fraction  # |value| - |aligned| * 2**(maxE - F) >= 0: what the alignment dropped
    group: str = ""  # generic units: "even" / "odd" products, "products", "c (late)"
    cut: int | None = None  # generic units: weight 2**cut of the last bit this term keeps


@dataclass
class BlockStep:
    """One block FMA: its terms, alignment, exact integer sum and rounding."""

    index: int
    k_start: int
    k_stop: int
    c: float
    terms: list[TermStep]
    largest_exponent: int | None  # of the terms; None if all are zero
    min_exponent: int | None  # the unit's floor mel
    max_exponent: int  # maxE = max(largest, mel)
    fraction_bits: int  # F
    exact_sum: int  # sum of the aligned integers
    value: Fraction  # exact_sum * 2**(maxE - F)
    rounding: str
    result_format: str
    result: float
    stages: list[str] = field(default_factory=list)  # generic units: the summation, in words


@dataclass
class DotExplanation:
    """Step-by-step record of a tensor-core dot product; ``str()`` prints it as tables."""

    gpu: str
    unit: BlockFMA
    input_format: str
    output_format: str
    a: list[float]
    b: list[float]
    c: float
    result: float
    blocks: list[BlockStep] = field(default_factory=list)
    special: str | None = None  # why the result is NaN / inf, when it is a special value

    def __str__(self) -> str:
        u = self.unit
        out = [f"Tensor-core dot product d = c + sum a_k*b_k on {self.gpu}",
               f"  unit: {u.describe()}",
               f"  inputs {self.input_format} (K = {len(self.a)}), c and d {self.output_format}"]
        if self.special:
            out.append(f"  special values: {self.special} -> d = {self.result!r}")
            return "\n".join(out)
        for blk in self.blocks:
            out.append("")
            out.append(f"Block {blk.index + 1}: k = {blk.k_start}..{blk.k_stop - 1}, "
                       f"c = {blk.c!r}")
            if u.summation != "aligned":
                for t in blk.terms:
                    out.append(f"  {t.label:<10} {_fmt(t.value)}")
                out.extend(f"  {line}" for line in blk.stages)
                what = "sum of the products" if u.c_addition == "rounded_sum" else "c + sum"
                out.append(f"  exact value {what} = {_fmt(blk.value)}" if
                           blk.value == Fraction(float(blk.value)) else
                           f"  exact value {what} ~ {float(blk.value)!r}")
                out.append(f"  result ({blk.rounding}, {blk.result_format}): {blk.result!r}")
                continue
            floor = "none" if blk.min_exponent is None else f"2^{blk.min_exponent}"
            largest = "none (all zero)" if blk.largest_exponent is None else \
                f"2^{blk.largest_exponent}"
            out.append(f"  alignment exponent maxE = {blk.max_exponent} (largest term {largest}"
                       f", floor {floor}); each term -> integer with F = {blk.fraction_bits} "
                       f"fraction bits below 2^{blk.max_exponent}, magnitude truncated")
            rows = [("term", "value", "significand x 2^exp", "aligned integer", "dropped")]
            for t in blk.terms:
                sig = "0 (zero: not aligned)" if t.exponent is None else \
                    f"{_binary(t.significand, t.significand_bits)} x 2^{t.exponent}"
                label = f"{t.label} [{t.group}]" if t.group else t.label
                rows.append((label, _fmt(t.value), sig, str(t.aligned),
                             "0" if t.truncated == 0 else f"{float(t.truncated):.6g}"))
            widths = [max(len(r[i]) for r in rows) for i in range(5)]
            for j, r in enumerate(rows):
                out.append("  " + "  ".join(s.ljust(w) if i != 3 else s.rjust(w)
                                            for i, (s, w) in enumerate(zip(r, widths,
                                                                          strict=True))))
                if j == 0:
                    out.append("  " + "  ".join("-" * w for w in widths))
            for line in blk.stages:
                out.append(f"  {line}")
            out.append(f"  exact integer sum = {blk.exact_sum} -> value = {blk.exact_sum} x "
                       f"2^{blk.max_exponent - blk.fraction_bits} = {_fmt(blk.value)}")
            if blk.value != 0:
                e = _exponent(blk.value, -100000)
                sig = abs(blk.value) / Fraction(2) ** e
                nb = max(1, (sig.denominator.bit_length() - 1))
                sign = "-" if blk.value < 0 else ""
                out.append(f"  normalised: {sign}{_binary(sig, nb)} x 2^{e}")
            out.append(f"  rounded ({blk.rounding}) to {blk.result_format}: {blk.result!r}")
        out.append("")
        out.append(f"d = {self.result!r}")
        return "\n".join(out)


def _special_reason(a: np.ndarray, b: np.ndarray, c: float) -> str | None:
    if np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c):
        return None
    with np.errstate(invalid="ignore"):
        p = a * b
    if np.isnan(a).any() or np.isnan(b).any() or np.isnan(c):
        return "a NaN input gives NaN"
    if np.isnan(p).any():
        return "0 x inf gives NaN"
    terms = np.append(p, c)
    if (terms == np.inf).any() and (terms == -np.inf).any():
        return "+inf together with -inf gives NaN"
    return "an infinite term gives that infinity"


def build_explanation(a: np.ndarray, b: np.ndarray, c: float, d: float, unit: BlockFMA,
                      fi: Format, fo: Format, label: str, trace: list) -> DotExplanation:
    """The record of one dot product, from the converted inputs and the kernel's trace.

    The per-term details (significands, aligned integers, dropped bits) are recomputed here
    with Python integers and checked against the kernel's exact sums."""
    rec = DotExplanation(label, unit, fi.name, fo.name, a.tolist(), b.tolist(), c, d)
    rec.special = _special_reason(a, b, c)
    if rec.special:
        return rec
    F = unit.fraction_bits
    m_in = fi.mantissa_bits
    rfmt = unit.result_format(fo)
    if not unit.is_plain:
        for i, step in enumerate(trace):
            rec.blocks.append(_generic_block(i, step, a, b, unit, fi, fo, rfmt))
        return rec
    for i, step in enumerate(trace):
        k0, k1 = step["k0"], step["k1"]
        cin = float(step["c"].reshape(-1)[0])
        mx = int(step["max_exponent"].reshape(-1)[0])
        terms = []
        largest = None
        for k in range(k0, k1):
            x, y = Fraction(float(a[k])), Fraction(float(b[k]))
            v = x * y
            if v == 0:
                terms.append(TermStep(f"a{k}*b{k}", v, Fraction(0), None, 2 * m_in, 0,
                                      Fraction(0)))
                continue
            ex, ey = _exponent(x, fi.emin), _exponent(y, fi.emin)
            e = ex + ey
            largest = e if largest is None else max(largest, e)
            terms.append(TermStep(f"a{k}*b{k}", v, abs(v) / Fraction(2) ** e, e, 2 * m_in, 0,
                                  Fraction(0)))
        cv = Fraction(cin)
        if cv != 0:
            ec = _exponent(cv, C_MIN_EXPONENT)
            largest = ec if largest is None else max(largest, ec)
            terms.append(TermStep("c", cv, abs(cv) / Fraction(2) ** ec, ec,
                                  fo.mantissa_bits, 0, Fraction(0)))
        else:
            terms.append(TermStep("c", cv, Fraction(0), None, fo.mantissa_bits, 0, Fraction(0)))
        for t in terms:
            if t.exponent is None:
                continue
            q = abs(t.value) * Fraction(2) ** (F - mx)
            mag = q.numerator // q.denominator
            t.aligned = -mag if t.value < 0 else mag
            t.truncated = abs(t.value) - mag * Fraction(2) ** (mx - F)
        total = sum(t.aligned for t in terms)
        s = int(step["sum"].reshape(-1)[0])
        if total != s:
            raise RuntimeError(f"internal error: explanation sum {total} != kernel sum {s}")
        rec.blocks.append(BlockStep(
            i, k0, k1, cin, terms, largest, unit.min_exponent, mx, F, s,
            s * Fraction(2) ** (mx - F), unit.output_rounding.value, rfmt.name,
            float(step["result"].reshape(-1)[0])))
    return rec


def _round_int(q: Fraction, mode: str) -> int:
    fl = q.numerator // q.denominator
    if mode == "down" or (mode == "toward_zero" and q >= 0):
        return fl
    if mode in ("up", "toward_zero"):
        return fl if fl == q else fl + 1
    rem = q - fl
    return fl + 1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2) else fl


def _generic_block(i: int, step: dict, a, b, unit: BlockFMA, fi: Format, fo: Format,
                   rfmt: Format) -> BlockStep:
    """A block of a generic unit, recomputed on Fractions stage by stage (groups, merge, late
    c) and checked against the kernel's integer sum."""
    k0, k1 = step["k0"], step["k1"]
    cin = float(step["c"].reshape(-1)[0])
    result = float(step["result"].reshape(-1)[0])
    F = unit.fraction_bits
    m_in = fi.mantissa_bits
    mode = unit.alignment_rounding.value
    terms: list[TermStep] = []
    for k in range(k0, k1):
        x, y = Fraction(float(a[k])), Fraction(float(b[k]))
        v = x * y
        grp = ("even" if (k - k0) % 2 == 0 else "odd") if unit.grouping == "odd_even" else \
            ("products" if unit.c_addition != "joined" else "")
        if v == 0:
            terms.append(TermStep(f"a{k}*b{k}", v, Fraction(0), None, 2 * m_in, 0, Fraction(0),
                                  grp))
            continue
        e = _exponent(x, fi.emin) + _exponent(y, fi.emin)
        if unit.products == "normalised" and abs(v) >= Fraction(2) ** (e + 1):
            e += 1
        terms.append(TermStep(f"a{k}*b{k}", v, abs(v) / Fraction(2) ** e, e, 2 * m_in + 1, 0,
                              Fraction(0), grp))
    cv = Fraction(cin)
    stages: list[str] = []
    after = unit.c_addition == "rounded_sum"
    if after:  # the rounded product sum and the addition of c, for the stage lines
        ps = float(step["product_sum"].reshape(-1)[0])
        c_line = (f"c added to it: {_fmt(cv)} + {ps!r}, one addition rounded "
                  f"{unit.c_rounding.value} to {rfmt.name}: {result!r}")
        how_rounded = f"{unit.output_rounding.value}, then c added {unit.c_rounding.value}"
    if unit.summation != "aligned" and after:
        value = sum((t.value for t in terms), Fraction(0))
        stages.append(f"the products summed exactly (Kulisch accumulator), rounded "
                      f"{unit.output_rounding.value} to {rfmt.name}: {ps!r}")
        stages.append(c_line)
        terms.append(TermStep("c", cv, Fraction(0), None, fo.mantissa_bits, 0, Fraction(0)))
        return BlockStep(i, k0, k1, cin, terms, None, unit.min_exponent, 0, 0, 0, value,
                         how_rounded, rfmt.name, result, stages)
    if unit.summation != "aligned":
        how = "exactly (Kulisch accumulator)" if unit.summation == "exact" else \
            "pairwise, each addition rounded to nearest even in the output format"
        stages.append(f"c and the products summed {how}; no alignment")
        value = cv + sum((t.value for t in terms), Fraction(0))
        terms.append(TermStep("c", cv, Fraction(0), None, fo.mantissa_bits, 0, Fraction(0)))
        return BlockStep(i, k0, k1, cin, terms, None, unit.min_exponent, 0, 0, 0, value,
                         unit.output_rounding.value, rfmt.name, result, stages)
    late = unit.c_addition == "late"
    ec = max(_exponent(cv, C_MIN_EXPONENT), C_MIN_EXPONENT) if cv != 0 else C_MIN_EXPONENT
    cterm = TermStep("c", cv, abs(cv) / Fraction(2) ** ec,
                     ec if (cv != 0 or late) and not (after and cv == 0) else None,
                     fo.mantissa_bits, 0, Fraction(0),
                     "c (late)" if late else "c (added after)" if after else "")
    groups: dict[str, list[TermStep]] = {}
    for t in terms + ([] if late or after else [cterm]):
        groups.setdefault(t.group, []).append(t)
    sums: dict[str, tuple[int, int]] = {}
    Fe = F + int(unit.sticky_bit)
    for g, ts in groups.items():
        live = [t for t in ts if t.exponent is not None and t.value != 0]
        if not live:
            continue
        mx = max(t.exponent for t in live)
        if unit.min_exponent is not None:
            mx = max(mx, unit.min_exponent)
        total = 0
        for t in live:
            q = abs(t.value) * Fraction(2) ** (F - mx)
            mag = q.numerator // q.denominator
            t.truncated = abs(t.value) - mag * Fraction(2) ** (mx - F)
            if unit.sticky_bit:
                mag = 2 * mag + (1 if mag != q else 0)
            t.aligned = -mag if t.value < 0 else mag
            t.cut = mx - Fe
            total += t.aligned
        sums[g] = (total, mx)
        name = g or "all terms"
        stages.append(f"{name}: aligned to 2^{mx}, F = {Fe} fraction bits (truncated): "
                      f"sum {total} x 2^{mx - Fe}")
    largest = max((t.exponent for t in terms + [cterm] if t.exponent is not None
                   and t.value != 0), default=None)
    if after:  # c takes no part in the products' alignment
        total, mx = sums.get("products", (0, unit.min_exponent if unit.min_exponent
                                          is not None else 0))
        gain = 0
        stages.append(f"the product sum rounded {unit.output_rounding.value} to {rfmt.name}: "
                      f"{ps!r}")
        stages.append(c_line)
        terms.append(cterm)
    elif not late:
        total, mx = sums.get("", (0, unit.min_exponent if unit.min_exponent is not None
                                  else 0))
        gain = 0
    else:
        if unit.grouping == "odd_even" and "even" in sums and "odd" in sums:
            (se, me), (so, mo) = sums["even"], sums["odd"]
            if me < mo:
                se, me, so, mo = so, mo, se, me
            so_s = _round_int(Fraction(so, 1 << (me - mo)), mode)
            stages.append(f"odd/even merge: the smaller group sum shifted {me - mo} places to "
                          f"2^{me} and rounded {mode}: {so} -> {so_s}; sum {se + so_s}")
            sp, mp = se + so_s, me
        elif sums:
            sp, mp = next(iter(sums.values()))
        else:
            sp, mp = 0, ec
        ic = abs(cv) * Fraction(2) ** (Fe - ec)
        ic_i = int(ic) if cv >= 0 else -int(ic)
        cterm.aligned, cterm.cut = ic_i, ec - Fe
        gain = 0
        if mp < ec:
            gain = unit.late_extra_bits
            sp2 = _round_int(Fraction(sp << gain, 1 << (ec - mp)), mode)
            stages.append(f"c added late: the product sum gains {gain} bits and is shifted "
                          f"{ec - mp} places to c's exponent 2^{ec}, rounded {mode}: {sp2}")
            total, mx = sp2 + (ic_i << gain), ec
        elif ec < mp:
            far = unit.c_far_truncation is not None and mp - ec > unit.c_far_truncation
            m = "toward_zero" if far else mode
            ic2 = _round_int(Fraction(ic_i, 1 << (mp - ec)), m)
            stages.append(f"c added late: c shifted {mp - ec} places to the products' 2^{mp}, "
                          f"rounded {m}: {ic_i} -> {ic2}")
            total, mx = sp + ic2, mp
        else:
            stages.append("c added late at the same exponent: exact")
            total, mx = sp + ic_i, mp
        terms.append(cterm)
    s = int(step["sum"].reshape(-1)[0])
    if total != s:
        raise RuntimeError(f"internal error: explanation sum {total} != kernel sum {s}")
    Ftot = Fe + gain
    value = s * Fraction(2) ** (mx - Ftot)
    if not (late or after):
        terms_out = [t for t in terms if t.label != "c"] + [cterm]
        if cv == 0:
            cterm.exponent = None
    else:
        terms_out = terms
    if after:  # the largest exponent among the aligned terms: the products'
        largest = max((t.exponent for t in terms if t.exponent is not None and t.value != 0
                       and t.label != "c"), default=None)
    return BlockStep(i, k0, k1, cin, terms_out, largest, unit.min_exponent, mx, Ftot, s, value,
                     how_rounded if after else unit.output_rounding.value, rfmt.name, result,
                     stages)
