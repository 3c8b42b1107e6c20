"""Text reports of training runs: the results table, the memory table and JSON lines, the
findings the runs support, the control run and what the demo chose on purpose."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["format_bytes", "memory_cell", "results_table", "memory_table", "json_lines",
           "markdown_table", "Finding", "CLAIMS", "findings", "findings_text", "control_text",
           "choices_text"]

_MEMORY_COLUMNS = (("weights", "weights"), ("master_weights", "master weights"),
                   ("gradients", "gradients"), ("master_gradients", "master grads"),
                   ("optimizer_state", "optim. state"), ("activations", "activations"))


def format_bytes(n: float) -> str:
    """Bytes in B / KiB / MiB with three significant digits.

    >>> format_bytes(512), format_bytes(37_416), format_bytes(3 * 2**20)
    ('512 B', '36.5 KiB', '3.00 MiB')
    """
    if n < 1024:
        return f"{int(n)} B"
    for unit, size in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30)):
        v = n / size
        if v < 1000 or unit == "GiB":
            decimals = max(0, 2 - int(math.floor(math.log10(v))))
            return f"{v:.{decimals}f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def memory_cell(by_format: dict[str, int]) -> str:
    """``{"fp16": 2048, "fp32": 512}`` -> ``'fp16 2.00 KiB + fp32 512 B'`` (``-`` when empty).

    >>> memory_cell({"fp32": 4096}), memory_cell({})
    ('fp32 4.00 KiB', '-')
    """
    if not by_format:
        return "-"
    return " + ".join(f"{k} {format_bytes(v)}" for k, v in sorted(by_format.items()))


UNDEFINED = "undefined"  # a fraction of a run that went non-finite (RunResult.nonfinite_run)


def _pct(v: float | None) -> str:
    if v is None or math.isnan(v):
        return UNDEFINED
    if v == 0:
        return "0"
    if v < 1e-4:
        return "<0.01%"
    return f"{100 * v:.2f}%"


def _scale(v: float) -> str:
    if v >= 1024 and math.log2(v).is_integer():
        return f"2^{int(math.log2(v))}"
    return f"{v:g}"


def _rows(runs: Sequence[Any]) -> list[list[str]]:
    rows = []
    for r in runs:
        s = r.summary()
        rows.append([
            s["precision"], s["loss_scale"],
            f"{s['final_loss']:.4f}" if s["final_loss"] is not None else "nan",
            f"{100 * s['test_accuracy']:.2f}%", _pct(s["grad_underflow_fraction"]),
            _pct(s["grad_subnormal_fraction"]), str(s["skipped_steps"]),
            _scale(s["final_loss_scale"]), _pct(s["lost_update_fraction"]),
            f"{s['time_s']:.1f}s",
        ])
    return rows


_HEAD = ["precision", "loss scale", "final loss", "test acc", "grad underflow",
         "grad subnormal", "skipped", "final scale", "lost updates", "time"]


def _table(head: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def results_table(runs: Sequence[Any]) -> str:
    """One row per run: final training loss, test accuracy, share of the gradient values lost
    to underflow (and rounded to subnormals), skipped steps, final loss scale, share of
    weight updates lost to rounding, wall time (instrumentation included). The fractions of a
    run that went non-finite (``RunResult.nonfinite_run``) read "undefined".

    >>> from fpsim.training import train
    >>> run = train(precision="fp16", steps=2, sizes=(64, 8, 10), eval_every=2)
    >>> print(results_table([run]).splitlines()[0])  # doctest: +NORMALIZE_WHITESPACE
    precision loss scale final loss test acc grad underflow grad subnormal skipped
    final scale lost updates time
    """
    return _table(_HEAD, _rows(runs), right=set(range(2, len(_HEAD))))


def memory_table(runs: Sequence[Any]) -> str:
    """One row per run: bytes of weights, master weights, gradients, master gradients,
    optimizer state and saved activations, by format, and the peak total of the measured
    step, as fpsim's memory meter (:mod:`fpsim.autograd.memory_meter`) measured them.

    >>> from fpsim.training import train
    >>> run = train(precision="mixed-bf16", steps=1, sizes=(64, 8, 10), eval_every=1)
    >>> memory_table([run]).splitlines()[2].split()[:3]
    ['mixed-bf16', 'bf16', '1.19']
    """
    head = ["precision"] + [label for _, label in _MEMORY_COLUMNS] + ["peak"]
    rows = [[r.precision] + [memory_cell(r.memory.get(key, {})) for key, _ in _MEMORY_COLUMNS]
            + [format_bytes(r.peak_bytes)] for r in runs]
    return _table(head, rows, right=set())


def markdown_table(runs: Sequence[Any]) -> str:
    """The results table as GitHub markdown (for docs/demo.md).

    >>> from fpsim.training import train
    >>> markdown_table([train(precision="fp32", steps=1, sizes=(64, 8, 10))])[:13]
    '| precision |'
    """
    rows = _rows(runs)
    out = ["| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def json_lines(runs: Sequence[Any]) -> str:
    """One JSON object per run (``RunResult.summary()``), one per line.

    >>> from fpsim.training import train
    >>> json.loads(json_lines([train(precision="fp32", steps=1, sizes=(64, 8, 10))]))["steps"]
    1
    """
    return "\n".join(json.dumps(r.summary(), sort_keys=False) for r in runs)


@dataclass(frozen=True)
class Finding:
    """One statement the demo prints about its runs, and whether the runs bear it out."""

    recipe: str
    text: str
    holds: bool


def _points(a: float, b: float) -> float:
    return 100.0 * (a - b)


def _acc(a: float) -> str:
    return f"{100.0 * a:.2f}%"


@dataclass(frozen=True)
class _Claim:
    """One row of :data:`CLAIMS`: the recipe it is about, the sentence printed (``message``)
    and the test of the runs (``check``); both take the recipe's run ``r``, its gap to fp32
    in points ``gap`` (positive: below fp32) and all runs by name ``by``."""

    recipe: str
    message: Callable[[Any, float, dict[str, Any]], str]
    check: Callable[[Any, float, dict[str, Any]], bool]


def _mixed_fp16_check(r: Any, gap: float, by: dict[str, Any]) -> bool:
    # scaling must cut the underflow fp16 has without it (fp16-master) tenfold, when it ran
    uf0 = by["fp16-master"].grad_underflow_fraction if "fp16-master" in by else None
    return abs(gap) <= 1 and (uf0 is None or r.grad_underflow_fraction < uf0 / 10)


# The statements of docs/demo.md, one row per recipe, in the order printed. Thresholds are the
# issue's, in points of test accuracy against fp32.
CLAIMS: tuple[_Claim, ...] = (
    _Claim("fp16",
           lambda r, gap, _by: (
               f"pure fp16 (Apex O3, no scaling) fails: {_pct(r.grad_underflow_fraction)} of "
               f"the gradient values underflow to zero and {_pct(r.lost_update_fraction)} of "
               f"the weight updates are lost; test accuracy {gap:.1f} points below fp32"),
           lambda r, gap, _by: r.grad_underflow_fraction > 0.5 and gap >= 10),
    _Claim("fp16-master",
           lambda r, gap, _by: (
               f"fp32 master weights alone do not fix underflow: without loss scaling "
               f"{_pct(r.grad_underflow_fraction)} of the gradient values underflow in fp16; "
               f"test accuracy {gap:.1f} points below fp32 (claim: >= 10)"),
           lambda r, gap, _by: r.grad_underflow_fraction > 0.5 and gap >= 10),
    _Claim("mixed-fp16",
           lambda r, gap, _by: (
               f"dynamic loss scaling (final scale {_scale(r.final_loss_scale)}, "
               f"{r.skipped_steps} steps skipped on overflow) cuts the underflow to "
               f"{_pct(r.grad_underflow_fraction)}; test accuracy within {abs(gap):.2f} points "
               f"of fp32 (claim: <= 1)"),
           _mixed_fp16_check),
    _Claim("mixed-bf16",
           lambda r, gap, _by: (
               f"bf16 with master weights needs no scaling (fp32's exponent range: "
               f"{_pct(r.grad_underflow_fraction)} underflow); test accuracy within "
               f"{abs(gap):.2f} points of fp32 (claim: <= 1)"),
           lambda r, gap, _by: abs(gap) <= 1 and r.grad_underflow_fraction < 1e-4),
    _Claim("bf16",
           lambda r, gap, _by: (
               f"pure bf16 (no master copy) loses {_pct(r.lost_update_fraction)} of its weight "
               f"updates to rounding (8 significant bits: an update below 1/512 of the weight "
               f"vanishes) and stagnates {gap:.1f} points below fp32 (claim: >= 5); with fp32 "
               f"master weights the same format (mixed-bf16) is level with fp32: this pair is "
               f"the master-weight lesson"),
           lambda r, gap, by: (gap >= 5 and r.lost_update_fraction > 0.5
                               and r.grad_underflow_fraction < 1e-4
                               and ("mixed-bf16" not in by or abs(_points(
                                   by["fp32"].test_accuracy,
                                   by["mixed-bf16"].test_accuracy)) <= 1))),
    _Claim("bf16-sr",
           lambda r, gap, _by: (
               f"stochastic rounding of the update keeps them in expectation: pure bf16 with "
               f"SR ends within {abs(gap):.2f} points of fp32 (claim: <= 2), although "
               f"{_pct(r.lost_update_fraction)} of the single updates still round away"),
           lambda _r, gap, _by: abs(gap) <= 2),
)


def findings(runs: Sequence[Any]) -> list[Finding]:
    """The statements of docs/demo.md (:data:`CLAIMS`), each checked on ``runs`` (those
    whose recipes ran): the thresholds are the issue's (test accuracy in points against fp32;
    the test set has 449 digits, one digit is 0.22 point).

    >>> from types import SimpleNamespace as NS
    >>> def run(p, acc, uf=0.0, lost=0.0):
    ...     return NS(precision=p, test_accuracy=acc, grad_underflow_fraction=uf,
    ...               lost_update_fraction=lost, skipped_steps=0, final_loss_scale=1.0)
    >>> [f.holds for f in findings([run("fp32", 0.9), run("mixed-bf16", 0.895)])]
    [True]
    """
    by = {r.precision: r for r in runs}
    if "fp32" not in by:
        return []
    ref = by["fp32"].test_accuracy
    out = []
    for claim in CLAIMS:
        r = by.get(claim.recipe)
        if r is None:
            continue
        gap = _points(ref, r.test_accuracy)
        out.append(Finding(claim.recipe, claim.message(r, gap, by),
                           bool(claim.check(r, gap, by))))
    return out


def findings_text(runs: Sequence[Any]) -> str:
    """The findings as printed lines: ``[yes]`` where the runs bear the statement out,
    ``[NO]`` where they do not.

    >>> findings_text([])
    ''
    """
    return "\n".join(f"  [{'yes' if f.holds else 'NO'}] {f.recipe}: {f.text}"
                     for f in findings(runs))


def control_text(control: Any, runs: Sequence[Any]) -> str:
    """The control run, printed under the findings: ``fp16-master`` without the gradient
    scale-down (``--grad-shift 0``), checked level with fp32 (within 1 point), so that the
    fp16-master row above reads as the scale-down's doing, not fp16's alone.

    >>> from types import SimpleNamespace as NS
    >>> def run(p, acc, uf=0.0, shift=13):
    ...     return NS(precision=p, test_accuracy=acc, grad_underflow_fraction=uf,
    ...               config=NS(grad_shift=shift))
    >>> print(control_text(run("fp16-master", 0.9, 0.0065, 0), [run("fp32", 0.9)]))
    ... # doctest: +NORMALIZE_WHITESPACE
    Control (the same runs without the scale-down):
      [yes] fp16-master with --grad-shift 0: 0.65% of the gradient values underflow in fp16;
      test accuracy 90.00%, 0.00 points from fp32's 90.00% (claim: level, <= 1)
    """
    by = {r.precision: r for r in runs}
    if "fp32" not in by:
        return ""
    gap = _points(by["fp32"].test_accuracy, control.test_accuracy)
    holds = abs(gap) <= 1
    return ("Control (the same runs without the scale-down):\n"
            f"  [{'yes' if holds else 'NO'}] {control.precision} with --grad-shift "
            f"{control.config.grad_shift}: {_pct(control.grad_underflow_fraction)} of the "
            f"gradient values underflow in fp16; test accuracy {_acc(control.test_accuracy)}, "
            f"{abs(gap):.2f} points from fp32's {_acc(by['fp32'].test_accuracy)} "
            "(claim: level, <= 1)")


def choices_text(config: Any, pytorch_growth_interval: int) -> str:
    """One line naming what the demo's configuration chose on purpose (docs/demo.md, "What
    was chosen, and why").

    >>> from types import SimpleNamespace as NS
    >>> print(choices_text(NS(grad_shift=13, scale_window=25, out_init_scale=0.01), 2000))
    ... # doctest: +NORMALIZE_WHITESPACE
    Chosen on purpose (docs/demo.md): gradients scaled down by 2^-13 (--grad-shift 13, a
    large network's small gradients); the loss scaler grows every 25 good steps (PyTorch's
    default: 2000), so that it climbs within the run; the output layer's initial weights
    scaled by 0.01.
    """
    return (f"Chosen on purpose (docs/demo.md): gradients scaled down by 2^-{config.grad_shift} "
            f"(--grad-shift {config.grad_shift}, a large network's small gradients); the loss "
            f"scaler grows every {config.scale_window} good steps (PyTorch's default: "
            f"{pytorch_growth_interval}), so that it climbs within the run; the output layer's "
            f"initial weights scaled by {config.out_init_scale:g}.")
