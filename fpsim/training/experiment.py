"""The ``fpsim demo`` experiment: the same model trained on the digits under five precision
recipes, with the measurements of :mod:`fpsim.training.trainer`, a results table and plots.

The configuration (model, initialisation, loss reduction, learning rate) and why it was
chosen are explained in docs/demo.md; every number printed comes from the runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..datasets import load_digits
from .recipes import PRECISIONS
from .trainer import RunResult, TrainConfig, train

__all__ = ["DEMO_CONFIG", "QUICK_CONFIG", "DEFAULT_OUT", "demo_config", "run_demo",
           "save_plots"]

DEFAULT_OUT = Path("fpsim-output")

# The full demo (a few minutes on 2 cores) and --quick (well under a minute); see docs/demo.md.
DEMO_CONFIG: dict[str, Any] = dict(
    sizes=(64, 128, 128, 128, 10), out_init_scale=0.01, batch_size=256, lr=0.006,
    momentum=0.9, schedule="cosine", steps=1500, eval_every=50, scale_window=100,
    initial_loss_scale=2.0**16)
QUICK_CONFIG: dict[str, Any] = dict(DEMO_CONFIG, steps=300, lr=0.03, eval_every=25,
                                    scale_window=25)


def demo_config(quick: bool = False, **overrides: Any) -> TrainConfig:
    """The demo's :class:`TrainConfig` (``quick`` for the short one), with overrides.

    >>> demo_config(quick=True).steps < demo_config().steps
    True
    """
    base = QUICK_CONFIG if quick else DEMO_CONFIG
    return TrainConfig(**{**base, **overrides})


def run_demo(quick: bool = False, seed: int = 0, precisions: Sequence[str] | None = None,
             progress: bool = True, **overrides: Any) -> list[RunResult]:
    """Train the demo model once per precision recipe (all five by default) with the same
    seed, data order and hyper-parameters; returns the :class:`RunResult` s.

    >>> runs = run_demo(quick=True, precisions=["fp32"], progress=False, steps=2,
    ...                 eval_every=1)
    >>> runs[0].precision
    'fp32'
    """
    names = list(PRECISIONS) if precisions is None else list(precisions)
    data = load_digits()
    results = []
    for name in names:
        cfg = demo_config(quick, precision=name, seed=seed, **overrides)
        results.append(train(cfg, data=data, progress=progress))
    return results


def save_plots(runs: Sequence[RunResult], out: str | Path = DEFAULT_OUT) -> list[Path]:
    """Save loss_curves.png, loss_scale.png and gradient_histogram.png (+ the results as
    results.json) under ``out``; returns the paths.

    >>> import tempfile
    >>> runs = run_demo(precisions=["fp32"], progress=False, steps=2, eval_every=1)
    >>> [p.name for p in save_plots(runs, tempfile.mkdtemp())]
    ['loss_curves.png', 'loss_scale.png', 'gradient_histogram.png', 'results.json']
    """
    import json

    from ..viz import style
    from ..viz.training import gradient_exponent_histogram, loss_curves, loss_scale_trajectory

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [style.save_figure(loss_curves(runs), out / "loss_curves.png")]
    scaled = [r for r in runs if r.step_scale.size and (r.step_scale != 1.0).any()]
    paths.append(style.save_figure(loss_scale_trajectory(scaled or runs), out / "loss_scale.png"))
    by_name = {r.precision: r for r in runs}
    series, labels = [], []
    if "fp32" in by_name and by_name["fp32"].histograms:
        series.append(by_name["fp32"].histograms)
        labels.append("FP32 run (what FP16 must hold without scaling)")
    for r in runs:
        if r is not by_name.get("fp32") and r.histograms and scaled and r is scaled[0]:
            series.append(r.histograms)
            labels.append(f"{r.precision} run, times its loss scale")
    if not series:
        series = [runs[0].histograms]
        labels = [f"{runs[0].precision} run"]
    if any(series):
        fig = gradient_exponent_histogram(series, "fp16", labels=labels,
                                          title="Exact gradient values of every step "
                                                "(weights and activations)")
        paths.append(style.save_figure(fig, out / "gradient_histogram.png"))
    path = out / "results.json"
    path.write_text(json.dumps([r.summary() for r in runs], indent=1) + "\n")
    paths.append(path)
    return paths
