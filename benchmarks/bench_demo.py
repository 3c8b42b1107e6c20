"""The wall and CPU time of ``fpsim demo`` (``--quick`` by default) and where a step goes.

Ratio convention: speed vs reference = reference time / fpsim time (1.0 = as fast as the
reference, < 1 slower). The reference of the instrumentation row is the same run without
instrumentation; that of the BLAS row is the run with BLAS's default thread count (the demo
pins one thread: > 1 means pinning is faster); that of the processes row is the demo in one
process (> 1: the demo's default of one process per CPU is faster).

For every recipe it prints the run's wall time and CPU time (this thread's: what the run
costs whatever else loads the machine; wall time is not), and the CPU milliseconds per
training step by phase (``RunResult.cpu_time_s``: forward, backward, unscaling, optimizer,
the instrumentation's exact fp64 shadow and statistics on every ``measure_every``-th step,
the evaluations, the rest). The header gives the date, the CPUs and the load average, the
conditions the wall times were measured under.

    python benchmarks/bench_demo.py [--full] [--seed 0] [--no-blas-compare] [--no-jobs-compare]
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

from threadpoolctl import threadpool_limits

from fpsim.datasets import load_digits
from fpsim.training import PRECISIONS, train
from fpsim.training.experiment import default_workers, demo_config, run_demo
from fpsim.training.trainer import PHASES

SHORT_PHASE = {"forward": "fwd", "backward": "bwd", "unscale": "unscale", "optimizer": "optim",
               "instrumentation": "instr", "evaluation": "eval", "other": "other"}


def _conditions() -> str:
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    cpus = default_workers(10**6)
    return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {cpus} CPUs "
            f"available, load average {load} (1, 5, 15 min)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the full demo (default: --quick)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-blas-compare", action="store_true",
                    help="skip the run with BLAS's default thread count")
    ap.add_argument("--no-jobs-compare", action="store_true",
                    help="skip the demo in several processes")
    args = ap.parse_args(argv)
    quick = not args.full
    data = load_digits()
    cfg0 = demo_config(quick)
    print(f"fpsim demo{' --quick' if quick else ''}: {cfg0.steps} steps per recipe, batch "
          f"{cfg0.batch_size}, instrumentation every {cfg0.measure_every} steps; speed vs "
          "reference = reference time / fpsim time (1.0 = as fast, < 1 slower)")
    print(f"measured {_conditions()}")
    print()
    print("one process, one recipe after the other; CPU ms per step by phase:")
    head = f"{'recipe':12s} {'wall s':>7s} {'CPU s':>6s} {'ms/step':>7s}  " + " ".join(
        f"{SHORT_PHASE[p]:>7s}" for p in PHASES)
    print(head)
    wall_total = cpu_total = 0.0
    phase_total = dict.fromkeys(PHASES, 0.0)
    steps_total = 0
    for name in PRECISIONS:
        cfg = demo_config(quick, precision=name, seed=args.seed)
        t0 = time.perf_counter()
        run = train(cfg, data=data)
        wall = time.perf_counter() - t0
        cpu = sum(run.cpu_time_s.values())
        wall_total += wall
        cpu_total += cpu
        steps_total += cfg.steps
        for p in PHASES:
            phase_total[p] += run.cpu_time_s[p]
        print(f"{name:12s} {wall:7.1f} {cpu:6.1f} {cpu / cfg.steps * 1e3:7.2f}  " + " ".join(
            f"{run.cpu_time_s[p] / cfg.steps * 1e3:7.2f}" for p in PHASES), flush=True)
    print(f"{'all':12s} {wall_total:7.1f} {cpu_total:6.1f} {cpu_total / steps_total * 1e3:7.2f}  "
          + " ".join(f"{phase_total[p] / steps_total * 1e3:7.2f}" for p in PHASES))
    print(f"{'share':12s} {'':7s} {'':6s} {'':7s}  " + " ".join(
        f"{100 * phase_total[p] / cpu_total:6.1f}%" for p in PHASES))

    if not args.no_jobs_compare:
        jobs = default_workers(len(PRECISIONS))
        t0 = time.perf_counter()
        run_demo(quick=quick, seed=args.seed, progress=False, workers=jobs)
        wall = time.perf_counter() - t0
        print(f"the demo in {jobs} processes (fpsim demo's default here): {wall:.1f} s wall, "
              f"speed vs one process {wall_total / wall:.2f}")

    # one recipe, short: the instrumentation's cost and BLAS pinning, measured in this run
    short = dict(precision="mixed-fp16", steps=60, eval_every=60, seed=args.seed)
    timings = {}
    for label, kw in (("instrumented", {}), ("not instrumented", {"instrument": False})):
        c0 = time.thread_time()
        train(demo_config(quick, **short, **kw), data=data)
        timings[label] = time.thread_time() - c0
    print(f"mixed-fp16, 60 steps: instrumented {timings['instrumented']:.2f} CPU s, speed vs "
          f"not instrumented {timings['not instrumented'] / timings['instrumented']:.2f}")
    if not args.no_blas_compare:
        from fpsim.training import trainer

        walls = {}
        for label, threads in (("pinned", 1), ("default", None)):
            t0 = time.perf_counter()
            # train() pins one thread itself; the default run lifts that limit
            with threadpool_limits(limits=threads, user_api="blas"):
                if threads is None:
                    trainer._train(demo_config(quick, **short), data, False, {})
                else:
                    train(demo_config(quick, **short), data=data)
            walls[label] = time.perf_counter() - t0
        print(f"BLAS pinned to one thread: {walls['pinned']:.2f} s wall, speed vs BLAS's "
              f"default threads {walls['default'] / walls['pinned']:.2f}")
    print(f"done {_conditions()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
