"""The results table of ``fpsim lm`` and the findings its runs support.

Each finding is a function of the runs that returns its sentence only when the runs support
it (the numbers in it are the runs'), else None; :func:`lm_findings` keeps the supported
ones. Tests run the quick configuration and assert each printed finding's condition.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from .lm import LMRunResult

__all__ = ["lm_table", "lm_findings", "lm_json_lines", "strict_json", "FINDINGS", "MIXED_TOL",
           "FP8_TOL", "NOISE", "seed_table"]

MIXED_TOL = 0.05  # nats: mixed-fp16 / mixed-bf16 against fp32 (issue 31)
FP8_TOL = 0.1  # nats: fp8-delayed / fp8-blockwise / mxfp8 against fp32
NOISE = 0.02  # nats: a gap smaller than this is not called a difference between recipes
# the targets per recipe (nats from fp32 at the end of training)
_TARGETS = {"mixed-fp16": MIXED_TOL, "mixed-bf16": MIXED_TOL, "fp8-delayed": FP8_TOL,
            "fp8-blockwise": FP8_TOL, "mxfp8": FP8_TOL}


def strict_json(v: Any) -> Any:
    """NaN / inf (a diverged run's losses) as JSON null: strict JSON has no NaN."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: strict_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [strict_json(x) for x in v]
    return v


def lm_json_lines(runs: Sequence[LMRunResult]) -> str:
    """One strict JSON object per run, one per line (a non-finite loss is null)."""
    return "\n".join(json.dumps(strict_json(r.summary()), allow_nan=False) for r in runs)


def lm_table(runs: Sequence[LMRunResult]) -> str:
    """The results table: one row per recipe."""
    base = {r.recipe: r for r in runs}.get("fp32")
    head = ("recipe", "val loss", "vs fp32", "train loss", "skipped", "inf/NaN steps",
            "grad underflow", "lost updates", "final scale", "wall s", "cpu s")
    rows = []
    for r in runs:
        d = "" if base is None or r is base else f"{r.val_loss - base.val_loss:+.3f}"
        rows.append((r.recipe, f"{r.val_loss:.4f}", d, f"{r.train_loss:.4f}",
                     str(r.skipped_steps), str(r.nonfinite_steps),
                     f"{100 * r.grad_underflow:.3g}%", f"{100 * r.lost_update_fraction:.3g}%",
                     f"{r.final_loss_scale:g}", f"{r.time_s:.1f}", f"{r.cpu_time_s:.1f}"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    return "\n".join(lines)


def _by(runs: Sequence[LMRunResult]) -> dict[str, LMRunResult]:
    return {r.recipe: r for r in runs}


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def f_fp32(runs: Sequence[LMRunResult]) -> str | None:
    """The baseline's loss (always supported when fp32 ran)."""
    r = _by(runs).get("fp32")
    if r is None:
        return None
    return (f"fp32 reached a validation loss of {r.val_loss:.3f} nats/char after "
            f"{r.config.steps} steps (train {r.train_loss:.3f}).")


def f_mixed_close(runs: Sequence[LMRunResult]) -> str | None:
    """mixed-fp16 / mixed-bf16 within MIXED_TOL of fp32 (the ones that are)."""
    by = _by(runs)
    if "fp32" not in by:
        return None
    ok = [(n, by[n].val_loss - by["fp32"].val_loss) for n in ("mixed-fp16", "mixed-bf16")
          if n in by and abs(by[n].val_loss - by["fp32"].val_loss) <= MIXED_TOL]
    if not ok:
        return None
    parts = ", ".join(f"{n} {d:+.3f}" for n, d in ok)
    return f"Mixed precision matches fp32 within {MIXED_TOL} nats ({parts})."


def f_mixed_far(runs: Sequence[LMRunResult]) -> str | None:
    """A mixed recipe more than MIXED_TOL from fp32 (reported, not hidden)."""
    by = _by(runs)
    if "fp32" not in by:
        return None
    bad = [(n, by[n].val_loss - by["fp32"].val_loss) for n in ("mixed-fp16", "mixed-bf16")
           if n in by and abs(by[n].val_loss - by["fp32"].val_loss) > MIXED_TOL]
    if not bad:
        return None
    parts = ", ".join(f"{n} {d:+.3f}" for n, d in bad)
    return f"Mixed precision missed fp32 by more than {MIXED_TOL} nats: {parts}."


def f_scaler(runs: Sequence[LMRunResult]) -> str | None:
    """What the GradScaler did: its skipped steps and final scale."""
    r = _by(runs).get("mixed-fp16")
    if r is None:
        return None
    return (f"mixed-fp16's GradScaler (init 2^16, growth interval {r.config.growth_interval}) "
            f"skipped {r.skipped_steps} of {r.config.steps} steps and ended at a scale of "
            f"{r.final_loss_scale:g}.")


def f_no_scaling_underflow(runs: Sequence[LMRunResult]) -> str | None:
    """Loss scaling's effect on underflow, and whether it mattered for the loss."""
    by = _by(runs)
    if not {"fp16-master", "mixed-fp16", "fp32"} <= by.keys():
        return None
    a, b, f = by["fp16-master"], by["mixed-fp16"], by["fp32"]
    if not a.grad_underflow > b.grad_underflow:
        return None
    d = a.val_loss - f.val_loss
    tail = (f"and it still ended within {MIXED_TOL} nats of fp32 ({d:+.3f}): at this scale the "
            "gradients that underflow carry too little to matter" if abs(d) <= MIXED_TOL
            else f"and it ended {d:+.3f} nats from fp32")
    return (f"Without loss scaling (fp16-master), {_pct(a.grad_underflow)} of the non-zero "
            f"exact gradient values underflowed to zero in fp16 (with the GradScaler: "
            f"{_pct(b.grad_underflow)}), {tail}.")


def f_pure_fp16(runs: Sequence[LMRunResult]) -> str | None:
    """Pure fp16 (no master copy, fp16 AdamW state) failing, and the measured cause."""
    by = _by(runs)
    p = by.get("fp16")
    if p is None:
        return None
    if p.nonfinite_steps == 0:
        return None
    cause = ""
    if p.adam_v_underflow > 0:
        cause = (f"; on the sampled steps {_pct(p.adam_v_underflow)} of its AdamW entries "
                 "held a second moment that had underflowed to 0 in fp16 beside a non-zero "
                 "first moment; eps = 1e-8 rounds away in fp16's sqrt(v) + eps (below half its "
                 "smallest subnormal), so their update was m / 0, infinite")
    return (f"Pure fp16 (Apex O3) broke down: its gradients held inf/NaN first at step "
            f"{p.first_nonfinite_step} and on {p.nonfinite_steps} of {p.config.steps} "
            f"steps{cause}.")


def f_bf16_sr(runs: Sequence[LMRunResult]) -> str | None:
    """Pure bf16 loses updates and ends above bf16-sr by more than NOISE."""
    by = _by(runs)
    if not {"bf16", "bf16-sr", "fp32"} <= by.keys():
        return None
    b, s, f = by["bf16"], by["bf16-sr"], by["fp32"]
    if not (b.val_loss > s.val_loss + NOISE and b.lost_update_fraction > 0):
        return None
    return (f"Pure bf16 lost {_pct(b.lost_update_fraction)} of its weight updates to "
            f"round-to-nearest and ended {b.val_loss - f.val_loss:+.3f} from fp32; with "
            f"stochastically rounded writes (bf16-sr) it ended {s.val_loss - f.val_loss:+.3f}.")


def f_bf16_storage(runs: Sequence[LMRunResult]) -> str | None:
    """Pure bf16 against mixed-bf16 (bf16 storage against bf16 compute): printed when pure
    bf16 misses fp32 by more than MIXED_TOL and mixed-bf16 does not."""
    by = _by(runs)
    if not {"bf16", "mixed-bf16", "fp32"} <= by.keys():
        return None
    b, m, f = by["bf16"], by["mixed-bf16"], by["fp32"]
    db, dm = b.val_loss - f.val_loss, m.val_loss - f.val_loss
    if not (db > MIXED_TOL and abs(dm) <= MIXED_TOL):
        return None
    tail = ""
    if "bf16-sr" in by:
        ds = by["bf16-sr"].val_loss - f.val_loss
        tail = (f"; stochastically rounded writes (bf16-sr) ended {ds:+.3f}"
                + (", no better than round to nearest beyond the noise"
                   if ds > db - NOISE else ""))
    return (f"Pure bf16 ended {db:+.3f} from fp32 while mixed-bf16 (the same bf16 compute "
            f"with fp32 weights and AdamW state) ended {dm:+.3f}; pure bf16 lost "
            f"{_pct(b.lost_update_fraction)} of its updates{tail} (one seed: gaps of this size "
            f"move between seeds at this length, docs/lm.md).")


def f_fp8(runs: Sequence[LMRunResult]) -> str | None:
    """The FP8 / MXFP8 recipes against fp32 and the issue's FP8_TOL, each as measured."""
    by = _by(runs)
    if "fp32" not in by:
        return None
    f = by["fp32"].val_loss
    parts = [(n, by[n].val_loss - f) for n in ("fp8-delayed", "fp8-blockwise", "mxfp8",
                                               "mxfp8-floor", "nvfp4") if n in by]
    if not parts:
        return None
    ok = [f"{n} {d:+.3f}" for n, d in parts if abs(d) <= FP8_TOL]
    bad = [f"{n} {d:+.3f}" for n, d in parts if not abs(d) <= FP8_TOL]
    out = []
    if ok:
        out.append(f"within {FP8_TOL} nats of fp32: {', '.join(ok)}")
    if bad:
        out.append(f"further than {FP8_TOL} nats from fp32: {', '.join(bad)}")
    return "Block-scaled and FP8 recipes " + "; ".join(out) + "."


def seed_table(summaries: Sequence[dict[str, Any]]) -> str:
    """Per recipe over seeds (``summary()`` dicts or ``--json`` lines of several runs): the
    validation loss of each seed, its difference from fp32 of the same seed, their mean and
    the largest difference (by magnitude), and the seeds on which the recipe is within
    ``MIXED_TOL`` (mixed-fp16 / mixed-bf16) or ``FP8_TOL`` (fp8-delayed, fp8-blockwise,
    mxfp8) of fp32: the issue's targets, seed by seed.

    >>> print(seed_table([{"recipe": "fp32", "seed": 0, "val_loss": 2.5},
    ...                   {"recipe": "mxfp8", "seed": 0, "val_loss": 2.6}]))
    recipe  seeds  val loss by seed  vs fp32 by seed  mean vs fp32  largest  within target
    ------  -----  ----------------  ---------------  ------------  -------  -------------
    fp32    0      2.500
    mxfp8   0      2.600             +0.100           +0.100        +0.100   0 of 1 (0.1)
    """
    base = {d["seed"]: d["val_loss"] for d in summaries if d["recipe"] == "fp32"}
    names = list(dict.fromkeys(d["recipe"] for d in summaries))
    head = ("recipe", "seeds", "val loss by seed", "vs fp32 by seed", "mean vs fp32",
            "largest", "within target")
    rows = []
    for n in names:
        ds = sorted((d for d in summaries if d["recipe"] == n), key=lambda d: d["seed"])
        vals = " ".join("nan" if d["val_loss"] is None else f"{d['val_loss']:.3f}" for d in ds)
        diffs = [float("nan") if d["val_loss"] is None or d["seed"] not in base
                 else d["val_loss"] - base[d["seed"]] for d in ds]
        mean = largest = within = ""
        if n != "fp32" and diffs:
            finite = all(math.isfinite(x) for x in diffs)
            mean = f"{sum(diffs) / len(diffs):+.3f}" if finite else "nan"
            largest = f"{max(diffs, key=abs):+.3f}" if finite else "nan"
            tol = _TARGETS.get(n)
            if tol is not None:
                ok = sum(1 for x in diffs if abs(x) <= tol)
                within = f"{ok} of {len(diffs)} ({tol:g})"
        rows.append((n, ",".join(str(d["seed"]) for d in ds), vals,
                     "" if n == "fp32" else " ".join(f"{x:+.3f}" if math.isfinite(x) else "nan"
                                                     for x in diffs),
                     mean, largest, within))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines)


FINDINGS: tuple[Callable[[Sequence[LMRunResult]], str | None], ...] = (
    f_fp32, f_mixed_close, f_mixed_far, f_scaler, f_no_scaling_underflow, f_pure_fp16,
    f_bf16_sr, f_bf16_storage, f_fp8)


def lm_findings(runs: Sequence[LMRunResult]) -> list[str]:
    """The findings these runs support, each a sentence with the runs' numbers."""
    out: list[Any] = [f(runs) for f in FINDINGS]
    return [s for s in out if s]
