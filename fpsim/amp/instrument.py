"""Measuring what a low-precision format does to training, on plain NumPy arrays.

- :func:`underflow_stats`: how many gradient values that are non-zero in exact (FP32/FP64)
  arithmetic become zero, or subnormal, when rounded to a format (Micikevicius et al. 2018:
  loss scaling exists because of these).
- :func:`lost_updates`: how many weight updates vanish because ``weight + update`` rounds back
  to ``weight`` (an fp16 weight 2048 times its update loses it: the reason for FP32 master
  weights).
- :func:`nonfinite_count`, :func:`exponent_histogram` (``floor(log2|x|)`` from the float64 bit
  fields, zeros and non-finite values counted apart) and :func:`fp16_range_shading` (the
  exponents to shade on a histogram plot).
- :class:`StepRecord` / :class:`TrainingMonitor`: per-step records for the training demo.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..checks import broadcast_shape
from ..formats import FP16, Format, get_float_format
from ..modes import Rounding
from ..rounding import as_float64, round_pair
from ..rounding import round as _round

__all__ = [
    "UnderflowStats",
    "underflow_stats",
    "nonfinite_count",
    "LostUpdates",
    "lost_updates",
    "ExponentHistogram",
    "exponent_histogram",
    "merge_histograms",
    "RangeShading",
    "fp16_range_shading",
    "StepRecord",
    "TrainingMonitor",
]


def _float64(x: Any, what: str) -> np.ndarray:
    hi, lo, _ = as_float64(x)
    if lo is not None:
        raise TypeError(f"{what}: integers beyond 2**53 are not exact in float64; pass floats")
    return np.asarray(hi, dtype=np.float64)


def _frac(num: int, den: int) -> float:
    return num / den if den else 0.0


@dataclass(frozen=True)
class UnderflowStats:
    """Counts over the elements of one array (see :func:`underflow_stats`)."""

    total: int
    nonzero: int  # finite and non-zero in exact arithmetic
    zeroed: int  # ... and zero after rounding (flushed away)
    subnormal: int  # ... and subnormal after rounding (precision partly lost)
    overflowed: int  # finite in exact arithmetic, inf/NaN after rounding
    nonfinite: int = 0  # inf / NaN in exact arithmetic: not compared

    @property
    def fraction(self) -> float:
        """zeroed / nonzero: the share of the non-zero values lost to underflow; NaN
        (undefined) when no value was finite and non-zero but some were inf / NaN (an all-NaN
        gradient underflows 0 of 0 values: not "0%")."""
        return self._undefined() or _frac(self.zeroed, self.nonzero)

    @property
    def subnormal_fraction(self) -> float:
        """subnormal / nonzero (NaN as :attr:`fraction`)."""
        return self._undefined() or _frac(self.subnormal, self.nonzero)

    def _undefined(self) -> float:
        return math.nan if self.nonzero == 0 and self.nonfinite else 0.0

    @property
    def overflow_fraction(self) -> float:
        """overflowed / total."""
        return _frac(self.overflowed, self.total)

    def as_dict(self) -> dict[str, float]:
        """Counts and fractions as a plain dict."""
        return {**asdict(self), "fraction": self.fraction,
                "subnormal_fraction": self.subnormal_fraction}


def underflow_stats(
    exact_grad: Any,
    fmt: Format | str = FP16,
    rounding: Rounding | str = "nearest_even",
    **round_kwargs: Any,
) -> UnderflowStats:
    """Count the elements of ``exact_grad`` (values computed in higher precision) that are
    non-zero but round to zero in ``fmt``, or to a subnormal, or overflow to inf/NaN.
    ``round_kwargs`` go to :func:`fpsim.round` (``subnormals="flush"``, ``rng``, ...).

    >>> import numpy as np
    >>> s = underflow_stats(np.array([0.0, 1.0, 2.0**-20, 2.0**-25, 2.0**-30, 1e6]), "fp16")
    >>> s.nonzero, s.zeroed, s.subnormal, s.overflowed, s.fraction
    (5, 2, 1, 1, 0.4)
    """
    fmt = get_float_format(fmt)
    x = _float64(exact_grad, "exact_grad")
    r = np.asarray(_round(x, fmt, rounding, **round_kwargs))
    finite = np.isfinite(x)
    nonzero = finite & (x != 0)
    ar = np.abs(r)
    return UnderflowStats(
        total=int(x.size),
        nonzero=int(np.count_nonzero(nonzero)),
        zeroed=int(np.count_nonzero(nonzero & (r == 0))),
        subnormal=int(np.count_nonzero(nonzero & (ar > 0) & (ar < fmt.smallest_normal))),
        overflowed=int(np.count_nonzero(finite & ~np.isfinite(r))),
        nonfinite=int(x.size - np.count_nonzero(finite)),
    )


def nonfinite_count(arrays: Any) -> int:
    """How many elements are inf or NaN, over one array or an iterable (or mapping) of them.

    >>> import numpy as np
    >>> nonfinite_count([np.array([1.0, np.inf]), np.array([np.nan], np.float16)])
    2
    """
    if isinstance(arrays, Mapping):
        arrays = list(arrays.values())
    if isinstance(arrays, np.ndarray) or np.isscalar(arrays) or not isinstance(arrays, Iterable):
        arrays = [arrays]
    total = 0
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind in "iub":
            continue  # integers are always finite
        if a.dtype.kind != "f":
            a = _float64(a, "nonfinite_count")
        total += int(a.size - np.count_nonzero(np.isfinite(a)))
    return total


@dataclass(frozen=True)
class LostUpdates:
    """Counts over the elements of one weight array (see :func:`lost_updates`)."""

    total: int
    nonzero: int  # updates that are non-zero
    lost: int  # ... but leave the weight unchanged after rounding
    nonfinite: int = 0  # ... and inf / NaN (never lost: NaN != weight)

    @property
    def fraction(self) -> float:
        """lost / nonzero; NaN (undefined) when every non-zero update is inf / NaN (an
        all-NaN step loses 0 of its updates only because none can be compared)."""
        if self.nonzero and self.nonfinite == self.nonzero:
            return math.nan
        return _frac(self.lost, self.nonzero)

    def as_dict(self) -> dict[str, float]:
        """Counts and fraction as a plain dict."""
        return {**asdict(self), "fraction": self.fraction}


def lost_updates(
    weight: Any,
    update: Any,
    fmt: Format | str = FP16,
    rounding: Rounding | str = "nearest_even",
    **round_kwargs: Any,
) -> LostUpdates:
    """Count the non-zero updates for which ``weight + update``, rounded once to ``fmt``, is
    ``weight`` again. ``weight`` must hold values of ``fmt``; the sum is exact (TwoSum, then
    :func:`fpsim.round_pair`), so no double rounding decides the outcome.

    With round to nearest an update is lost when it is at most half an ulp of the weight (the
    tie goes to the even neighbour): an fp16 weight ``2**k`` loses a positive update of
    ``2**(k-11)`` = weight / 2048 and keeps anything larger.

    >>> import numpy as np
    >>> w = np.array([1.0, 1.0, 1.0, 2048.0])
    >>> r = lost_updates(w, np.array([2.0**-11, 2.0**-10, 0.0, 1.0]), "fp16")
    >>> r.nonzero, r.lost, r.fraction
    (3, 2, 0.6666666666666666)
    """
    fmt = get_float_format(fmt)
    w = _float64(weight, "weight")
    u = _float64(update, "update")
    shape = broadcast_shape("lost_updates", w.shape, u.shape)
    w, u = np.broadcast_to(w, shape), np.broadcast_to(u, shape)
    rw = np.asarray(_round(w, fmt))
    if not np.array_equal(rw, w, equal_nan=True):
        bad = int(np.count_nonzero(~((rw == w) | (np.isnan(rw) & np.isnan(w)))))
        raise ValueError(
            f"weight holds {bad} value(s) that {fmt.name} cannot represent; round the weights "
            f"to {fmt.name} first (fpsim.round(weight, fmt))"
        )
    with np.errstate(invalid="ignore", over="ignore"):
        s = w + u
        # TwoSum (Knuth): s + err == w + u exactly whenever s is finite
        bp = s - w
        err = (w - (s - bp)) + (u - bp)
    err = np.where(np.isfinite(s), err, 0.0)
    new = np.asarray(round_pair(s, err, fmt, rounding, **round_kwargs))
    nonzero = u != 0  # NaN updates count as non-zero and are never "lost" (NaN != weight)
    lost = nonzero & (new == w)
    return LostUpdates(total=int(w.size), nonzero=int(np.count_nonzero(nonzero)),
                       lost=int(np.count_nonzero(lost)),
                       nonfinite=int(np.count_nonzero(~np.isfinite(u))))


@dataclass(frozen=True)
class ExponentHistogram:
    """Counts of ``floor(log2|x|)`` per exponent; zeros and non-finite values apart, and the
    finite values below / above the requested bins."""

    exponents: np.ndarray
    counts: np.ndarray
    zeros: int = 0
    nonfinite: int = 0
    below: int = 0
    above: int = 0

    @property
    def total(self) -> int:
        """All elements counted (bins, zeros, non-finite, outside the bins)."""
        return int(self.counts.sum()) + self.zeros + self.nonfinite + self.below + self.above

    def as_dict(self) -> dict[int, int]:
        """{exponent: count} for the non-empty bins."""
        return {int(e): int(c) for e, c in zip(self.exponents, self.counts, strict=True) if c}


def exponent_histogram(values: Any, bins: Iterable[int] | None = None) -> ExponentHistogram:
    """Histogram of the binary exponents ``floor(log2|x|)`` of ``values`` (taken from the
    float64 exponent field with ``np.frexp``, exact for subnormals too).

    ``bins``: consecutive integer exponents (e.g. ``range(-30, 16)``); finite non-zero values
    outside go to ``below`` / ``above``. None: every exponent from the smallest to the largest
    present.

    >>> import numpy as np
    >>> h = exponent_histogram(np.array([0.0, 1.0, 1.5, 0.25, -3.0, np.inf]))
    >>> h.as_dict(), h.zeros, h.nonfinite
    ({-2: 1, 0: 2, 1: 1}, 1, 1)
    """
    x = _float64(values, "values").ravel()
    finite = np.isfinite(x)
    nz = finite & (x != 0)
    # frexp: x = m * 2**e with 0.5 <= |m| < 1, so floor(log2|x|) = e - 1
    exps = np.frexp(x[nz])[1].astype(np.int64) - 1
    zeros = int(np.count_nonzero(finite & (x == 0)))
    nonfinite = int(x.size - np.count_nonzero(finite))
    if bins is None:
        if exps.size == 0:
            return ExponentHistogram(np.zeros(0, np.int64), np.zeros(0, np.int64), zeros,
                                     nonfinite)
        lo, hi = int(exps.min()), int(exps.max())
    else:
        b = np.asarray(list(bins))
        if b.size == 0 or b.dtype.kind not in "iu" or np.any(np.diff(b) != 1):
            raise ValueError(
                "bins must be consecutive increasing integer exponents, e.g. range(-30, 16)"
            )
        lo, hi = int(b[0]), int(b[-1])
    below = int(np.count_nonzero(exps < lo))
    above = int(np.count_nonzero(exps > hi))
    inside = exps[(exps >= lo) & (exps <= hi)]
    counts = np.bincount(inside - lo, minlength=hi - lo + 1).astype(np.int64)
    return ExponentHistogram(np.arange(lo, hi + 1, dtype=np.int64), counts, zeros, nonfinite,
                             below, above)


def merge_histograms(hists: Iterable[ExponentHistogram]) -> ExponentHistogram:
    """Sum histograms (over steps or layers) on the union of their exponents.

    >>> import numpy as np
    >>> h = merge_histograms([exponent_histogram(np.array([1.0])),
    ...                       exponent_histogram(np.array([4.0, 0.0]))])
    >>> h.as_dict(), h.zeros
    ({0: 1, 2: 1}, 1)
    """
    hists = list(hists) if not isinstance(hists, (str, bytes)) else [hists]
    for h in hists:
        if not isinstance(h, ExponentHistogram):
            raise TypeError(f"merge_histograms takes ExponentHistograms "
                            f"(exponent_histogram's results), got {type(h).__name__} {h!r}")
    spans = [(int(h.exponents[0]), int(h.exponents[-1])) for h in hists if h.exponents.size]
    zeros = sum(h.zeros for h in hists)
    nonfinite = sum(h.nonfinite for h in hists)
    below = sum(h.below for h in hists)
    above = sum(h.above for h in hists)
    if not spans:
        return ExponentHistogram(np.zeros(0, np.int64), np.zeros(0, np.int64), zeros, nonfinite,
                                 below, above)
    lo = min(s[0] for s in spans)
    hi = max(s[1] for s in spans)
    counts = np.zeros(hi - lo + 1, np.int64)
    for h in hists:
        if h.exponents.size:
            counts[h.exponents - lo] += h.counts
    return ExponentHistogram(np.arange(lo, hi + 1, dtype=np.int64), counts, zeros, nonfinite,
                             below, above)


class RangeShading(NamedTuple):
    """Binary exponents bounding a format's range, for shading histogram plots."""

    smallest_subnormal: int
    smallest_normal: int
    max: int


def fp16_range_shading(fmt: Format | str = FP16) -> RangeShading:
    """Exponents of the smallest subnormal, the smallest normal and the largest finite value
    (``floor(log2(max))``) of ``fmt`` (FP16 by default): shade below the first as "flushed to
    zero", between the first two as "subnormal", above the last as "overflow".

    >>> fp16_range_shading()
    RangeShading(smallest_subnormal=-24, smallest_normal=-14, max=15)
    >>> tuple(fp16_range_shading("bf16"))
    (-133, -126, 127)
    """
    fmt = get_float_format(fmt)
    sub = fmt.emin - fmt.mantissa_bits if fmt.subnormals else fmt.emin
    return RangeShading(sub, fmt.emin, fmt.emax)


def _loss_value(loss: Any) -> float:
    """A scalar loss (Python / NumPy number, 1-element array, or a tensor with .item()/.data)
    as a float."""
    for attr in ("item", "data"):
        if not isinstance(loss, (np.ndarray, np.generic)) and hasattr(loss, attr):
            v = getattr(loss, attr)
            loss = v() if callable(v) else v
            break
    arr = np.asarray(loss)
    if arr.size != 1:
        raise ValueError(f"loss must be a scalar, got shape {arr.shape}")
    return float(_float64(arr, "loss").reshape(()))


@dataclass
class StepRecord:
    """What :class:`TrainingMonitor` keeps for one training step (per-layer dicts keyed by
    parameter name)."""

    step: int
    loss: float
    scale: float = 1.0
    skipped: bool = False
    found_inf: bool = False
    underflow: dict[str, float] = field(default_factory=dict)
    lost_updates: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, ExponentHistogram] = field(default_factory=dict)


class TrainingMonitor:
    """Accumulates :class:`StepRecord` s and summarises them.

    ``record(loss=..., grads={name: exact_grad}, updates={name: (weight, update)})`` computes
    per layer the underflow fraction of the gradients in ``fmt`` (pass what the format would
    have to hold, e.g. the scaled gradients), the lost-update fraction in ``weight_fmt`` and
    the exponent histogram of the gradients. ``scaler=`` takes scale / skipped / found_inf from
    the scaler's last ``history`` entry (call it after ``scaler.update()``).

    >>> import numpy as np
    >>> m = TrainingMonitor()
    >>> g = np.array([1.0, 2.0**-26, 0.0, 2.0**-3])
    >>> r = m.record(loss=0.5, scale=1.0, grads={"fc": g},
    ...              updates={"fc": (np.array([1.0, 1.0]), np.array([1e-4, 1e-2]))})
    >>> r.underflow["fc"], r.lost_updates["fc"], r.histograms["fc"].as_dict()
    (0.3333333333333333, 0.5, {-26: 1, -3: 1, 0: 1})
    >>> s = m.summary(); s["steps"], s["skipped"], s["underflow_mean"]
    (1, 0, {'fc': 0.3333333333333333})
    """

    def __init__(
        self,
        fmt: Format | str = FP16,
        weight_fmt: Format | str | None = None,
        histograms: bool = True,
        rounding: Rounding | str = "nearest_even",
    ) -> None:
        self.fmt = get_float_format(fmt)
        self.weight_fmt = self.fmt if weight_fmt is None else get_float_format(weight_fmt)
        self.keep_histograms = bool(histograms)
        self.rounding = rounding
        self.records: list[StepRecord] = []

    def __len__(self) -> int:
        return len(self.records)

    def add(self, record: StepRecord) -> StepRecord:
        """Append a record computed elsewhere."""
        if not isinstance(record, StepRecord):
            raise TypeError(f"expected a StepRecord, got {type(record).__name__}")
        self.records.append(record)
        return record

    def record(
        self,
        *,
        loss: float,
        step: int | None = None,
        scale: float | None = None,
        skipped: bool | None = None,
        found_inf: bool | None = None,
        grads: Mapping[str, Any] | None = None,
        updates: Mapping[str, tuple[Any, Any]] | None = None,
        scaler: Any = None,
    ) -> StepRecord:
        """Measure one step and append its :class:`StepRecord` (see the class docstring)."""
        last = scaler.history[-1] if scaler is not None and scaler.history else {}
        if scale is None:
            scale = last.get("scale", scaler.get_scale() if scaler is not None else 1.0)
        if skipped is None:
            skipped = bool(last.get("skipped", False))
        if found_inf is None:
            found_inf = bool(last.get("found_inf", False))
        rec = StepRecord(
            step=len(self.records) if step is None else int(step),
            loss=_loss_value(loss),
            scale=float(scale),
            skipped=bool(skipped),
            found_inf=bool(found_inf),
        )
        for name, g in (grads or {}).items():
            rec.underflow[name] = underflow_stats(g, self.fmt, self.rounding).fraction
            if self.keep_histograms:
                rec.histograms[name] = exponent_histogram(g)
        for name, (w, u) in (updates or {}).items():
            rec.lost_updates[name] = lost_updates(w, u, self.weight_fmt, self.rounding).fraction
        self.records.append(rec)
        return rec

    def series(self, key: str, layer: str | None = None) -> np.ndarray:
        """One quantity over the steps: 'loss', 'scale', 'skipped', 'found_inf', or per layer
        'underflow' / 'lost_updates' (NaN where a step has no value for ``layer``)."""
        if key in ("loss", "scale"):
            return np.array([getattr(r, key) for r in self.records], dtype=np.float64)
        if key in ("skipped", "found_inf"):
            return np.array([getattr(r, key) for r in self.records], dtype=bool)
        if key in ("underflow", "lost_updates"):
            if layer is None:
                raise ValueError(f"series({key!r}) needs a layer name")
            return np.array([getattr(r, key).get(layer, np.nan) for r in self.records],
                            dtype=np.float64)
        raise ValueError(
            f"unknown series {key!r}; valid: loss, scale, skipped, found_inf, underflow, "
            "lost_updates"
        )

    def layers(self) -> list[str]:
        """Names of the layers seen, in first-seen order."""
        seen: dict[str, None] = {}
        for r in self.records:
            for d in (r.underflow, r.lost_updates, r.histograms):
                seen.update(dict.fromkeys(d))
        return list(seen)

    def summary(self) -> dict[str, Any]:
        """Totals over the recorded steps: counts of skipped steps, the scale and loss
        trajectories' ends and extremes, mean underflow / lost-update fraction per layer,
        merged exponent histograms per layer ({exponent: count}) and the format's range."""
        recs = self.records
        losses = self.series("loss")
        scales = self.series("scale")
        finite = losses[np.isfinite(losses)]
        layers = self.layers()

        def mean_of(attr: str) -> dict[str, float]:
            out = {}
            for name in layers:
                vals = [getattr(r, attr)[name] for r in recs if name in getattr(r, attr)]
                if vals:
                    out[name] = float(np.mean(vals))
            return out

        hists = {}
        for name in layers:
            hs = [r.histograms[name] for r in recs if name in r.histograms]
            if hs:
                merged = merge_histograms(hs)
                hists[name] = {"counts": merged.as_dict(), "zeros": merged.zeros,
                               "nonfinite": merged.nonfinite}
        n = len(recs)
        skipped = int(sum(r.skipped for r in recs))
        return {
            "steps": n,
            "skipped": skipped,
            "skip_fraction": _frac(skipped, n),
            "found_inf": int(sum(r.found_inf for r in recs)),
            "scale_first": float(scales[0]) if n else None,
            "scale_last": float(scales[-1]) if n else None,
            "scale_min": float(scales.min()) if n else None,
            "scale_max": float(scales.max()) if n else None,
            "loss_first": float(losses[0]) if n else None,
            "loss_last": float(losses[-1]) if n else None,
            "loss_min": float(finite.min()) if finite.size else None,
            "nonfinite_losses": int(n - finite.size),
            "underflow_mean": mean_of("underflow"),
            "lost_updates_mean": mean_of("lost_updates"),
            "exponent_histograms": hists,
            "format": self.fmt.name,
            "range": fp16_range_shading(self.fmt)._asdict(),
        }
