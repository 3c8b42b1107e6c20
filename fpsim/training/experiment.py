"""The ``fpsim demo`` experiment: the same model trained on the digits under the seven
precision recipes of :mod:`fpsim.training.recipes`, with the measurements of
:mod:`fpsim.training.trainer`, a results table, the findings it supports, and plots.

The configuration (model, initialisation, the gradient scale-down ``grad_shift``, learning
rate) and why it was chosen are explained in docs/demo.md; every number printed comes from
the runs. Every recipe starts from the same weights and sees the same batches (both drawn
from ``seed``); the small matrix products run with one BLAS thread (threadpoolctl), which is
faster than several on a small or busy machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..datasets import load_digits
from .recipes import PRECISIONS, get_recipe
from .trainer import RunResult, TrainConfig, train

__all__ = ["DEMO_CONFIG", "QUICK_CONFIG", "DEFAULT_OUT", "demo_config", "run_demo",
           "save_plots", "check_out_dir"]

DEFAULT_OUT = Path("fpsim-output")

# The full demo (a few minutes on 2 cores) and --quick (well under a minute); see docs/demo.md.
DEMO_CONFIG: dict[str, Any] = dict(
    sizes=(64, 128, 128, 128, 10), out_init_scale=0.01, batch_size=256, lr=0.01,
    momentum=0.9, schedule="cosine", steps=1000, eval_every=50, scale_window=25,
    initial_loss_scale=2.0**16, grad_shift=13, measure_every=5)
QUICK_CONFIG: dict[str, Any] = dict(DEMO_CONFIG, steps=300, lr=0.025, eval_every=25,
                                    scale_window=10, measure_every=10)


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
    for name in names:
        get_recipe(name)  # refuse a bad name before any run
    data = load_digits()
    results = []
    for name in names:
        cfg = demo_config(quick, precision=name, seed=seed, **overrides)
        results.append(train(cfg, data=data, progress=progress))
    return results


def check_out_dir(out: str | Path) -> Path:
    """Create ``out`` if needed and check that a file can be written there; raises
    ValueError naming the folder and the reason otherwise (the CLI prints it in one line).

    >>> import tempfile
    >>> check_out_dir(tempfile.mkdtemp()).is_dir()
    True
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".fpsim-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"cannot write to --out {str(out)!r}: {exc.strerror or exc}") from None
    return out


def save_plots(runs: Sequence[RunResult], out: str | Path = DEFAULT_OUT) -> list[Path]:
    """Save loss_curves.png, loss_scale.png and gradient_histogram.png (+ the results as
    results.json, and the runs for ``fpsim figures`` as demo_runs.pickle) under ``out``;
    returns the paths of the figures and of results.json.

    >>> import tempfile
    >>> runs = run_demo(precisions=["fp32"], progress=False, steps=2, eval_every=1)
    >>> [p.name for p in save_plots(runs, tempfile.mkdtemp())]
    ['loss_curves.png', 'loss_scale.png', 'gradient_histogram.png', 'results.json']
    """
    import json
    import pickle

    from ..viz import style
    from ..viz.training import DEMO_CACHE_FILE, demo_figures

    out = check_out_dir(out)
    paths = [style.save_figure(fig, out / f"{name}.png")
             for name, fig in demo_figures(runs).items()]
    cache = out / DEMO_CACHE_FILE  # `fpsim figures` reuses these runs instead of training
    with cache.open("wb") as fh:
        pickle.dump({"runs": list(runs)}, fh)
    path = out / "results.json"
    path.write_text(json.dumps([r.summary() for r in runs], indent=1) + "\n")
    paths.append(path)
    return paths
