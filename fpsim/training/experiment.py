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

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..checks import as_int
from ..datasets import load_digits
from .recipes import PRECISIONS
from .trainer import RunResult, TrainConfig, train

__all__ = ["DEMO_CONFIG", "QUICK_CONFIG", "DEFAULT_OUT", "CONTROL", "demo_config", "run_demo",
           "run_demo_and_control", "default_workers", "check_out_dir"]

DEFAULT_OUT = Path("fpsim-output")

# The full demo and --quick; see docs/demo.md ("What was chosen, and why"). --quick is the
# full run shortened: half the steps at 1.5 times the learning rate, small enough that most
# weight updates stay below half a bf16 ulp of their weight (the regime where pure bf16
# loses them; at 0.025 over 300 steps pure bf16's deficit depended on the seed). The loss
# scaler's window fits its climb from 2^16 to fp16's ceiling (16 doublings) into the first
# two thirds of the run; once there it skips one step per window + 1.
DEMO_CONFIG: dict[str, Any] = dict(
    sizes=(64, 128, 128, 128, 10), out_init_scale=0.01, batch_size=256, lr=0.01,
    momentum=0.9, schedule="cosine", steps=1000, eval_every=50, scale_window=25,
    initial_loss_scale=2.0**16, grad_shift=13, measure_every=10)
QUICK_CONFIG: dict[str, Any] = dict(DEMO_CONFIG, steps=500, lr=0.015, eval_every=25,
                                    scale_window=20, measure_every=20)
# The control run printed under the demo's table: fp16 with fp32 master weights and no loss
# scaling, as the fp16-master row, but without the gradient scale-down; level with fp32, it
# shows the row's failure is the scale-down's underflow, not fp16 as such.
CONTROL: tuple[str, dict[str, Any]] = ("fp16-master", dict(grad_shift=0))


def demo_config(quick: bool = False, **overrides: Any) -> TrainConfig:
    """The demo's :class:`TrainConfig` (``quick`` for the short one), with overrides.

    >>> demo_config(quick=True).steps < demo_config().steps
    True
    """
    base = QUICK_CONFIG if quick else DEMO_CONFIG
    return TrainConfig(**{**base, **overrides})


def default_workers(n_runs: int) -> int:
    """How many processes ``fpsim demo`` trains its recipes in: the CPUs this process may
    use, at most one per run.

    >>> 1 <= default_workers(7) <= 7
    True
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, n_runs))


def run_demo(quick: bool = False, seed: int = 0, precisions: Sequence[str] | None = None,
             progress: bool = True, workers: int = 1, **overrides: Any) -> list[RunResult]:
    """Train the demo model once per precision recipe (all seven by default) with the same
    seed, data order and hyper-parameters; returns the :class:`RunResult` s in recipe order.

    ``workers > 1`` trains the recipes in that many processes at once (each run is
    deterministic for its seed and uses one BLAS thread, so the results are the same as in
    one process); ``progress`` then counts finished recipes instead of steps.

    >>> runs = run_demo(quick=True, precisions=["fp32"], progress=False, steps=2,
    ...                 eval_every=1)
    >>> runs[0].precision
    'fp32'
    """
    names = list(PRECISIONS) if precisions is None else list(precisions)
    configs = []
    for name in names:  # refuse a bad name or setting before any run
        cfg = demo_config(quick, precision=name, seed=seed, **overrides)
        cfg.validate()
        configs.append(cfg)
    return _train_all(configs, progress, workers)


def run_demo_and_control(quick: bool = False, seed: int = 0, progress: bool = True,
                         workers: int = 1, **overrides: Any) -> tuple[list[RunResult],
                                                                       RunResult]:
    """:func:`run_demo`'s seven runs and the :data:`CONTROL` run (trained beside them, in
    the same processes); returns (the runs, the control).

    >>> runs, control = run_demo_and_control(quick=True, progress=False, steps=1,
    ...                                      eval_every=1, sizes=(64, 8, 10))
    >>> len(runs), control.precision, control.config.grad_shift
    (7, 'fp16-master', 0)
    """
    name, changes = CONTROL
    configs = [demo_config(quick, precision=p, seed=seed, **overrides) for p in PRECISIONS]
    configs.append(demo_config(quick, precision=name, seed=seed, **{**overrides, **changes}))
    for cfg in configs:  # refuse a bad setting before any run
        cfg.validate()
    results = _train_all(configs, progress, workers)
    return results[:-1], results[-1]


def _train_all(configs: list[TrainConfig], progress: bool, workers: int) -> list[RunResult]:
    workers = as_int("workers", workers, 1)
    workers = min(workers, len(configs))
    if workers <= 1:
        data = load_digits()
        return [train(cfg, data=data, progress=progress) for cfg in configs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(configs), desc=f"{len(configs)} runs, {workers} processes",
                   unit="run")
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context()) as pool:
        futures = [pool.submit(train, cfg) for cfg in configs]
        for _ in as_completed(futures):
            if bar is not None:
                bar.update(1)
        results = [f.result() for f in futures]
    if bar is not None:
        bar.close()
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
