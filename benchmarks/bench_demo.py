"""The wall and CPU time of ``fpsim demo`` (``--quick`` by default) and where a step goes.

Ratio convention: speed vs reference = reference time / fpsim time (1.0 = as fast as the
reference, < 1 slower). Here the reference of the instrumentation row is the same run without
instrumentation, and that of the BLAS row is the run with BLAS's default thread count (the
demo pins one thread; > 1 means pinning is faster).

For every recipe it prints the run's wall time and CPU time (process time: what the run costs
when other jobs load the machine, as wall time does not), the milliseconds per training step
without the instrumentation, and the instrumentation's share (the exact fp64 shadow and the
statistics run on every ``measure_every``-th step).

    python benchmarks/bench_demo.py [--full] [--seed 0] [--no-blas-compare]
"""

from __future__ import annotations

import argparse
import time

from threadpoolctl import threadpool_limits

from fpsim.datasets import load_digits
from fpsim.training import PRECISIONS, train
from fpsim.training.experiment import demo_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the full demo (default: --quick)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-blas-compare", action="store_true",
                    help="skip the run with BLAS's default thread count")
    args = ap.parse_args(argv)
    quick = not args.full
    data = load_digits()
    cfg0 = demo_config(quick)
    print(f"fpsim demo{' --quick' if quick else ''}: {cfg0.steps} steps per recipe, batch "
          f"{cfg0.batch_size}, instrumentation every {cfg0.measure_every} steps; speed vs "
          "reference = reference time / fpsim time (1.0 = as fast, < 1 slower)")
    print(f"{'recipe':12s} {'wall s':>7s} {'CPU s':>7s} {'ms/step':>8s} {'instr. %':>9s}")
    wall_total = cpu_total = 0.0
    for name in PRECISIONS:
        cfg = demo_config(quick, precision=name, seed=args.seed)
        t0, c0 = time.perf_counter(), time.process_time()
        run = train(cfg, data=data)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        wall_total += wall
        cpu_total += cpu
        train_ms = (run.time_s - run.instrument_time_s) / cfg.steps * 1e3
        print(f"{name:12s} {wall:7.1f} {cpu:7.1f} {train_ms:8.2f} "
              f"{100 * run.instrument_time_s / run.time_s:8.1f}%")
    print(f"{'all':12s} {wall_total:7.1f} {cpu_total:7.1f}")

    # one recipe, short: the instrumentation's cost and BLAS pinning, measured in this run
    short = dict(precision="mixed-fp16", steps=60, eval_every=60, seed=args.seed)
    timings = {}
    for label, kw in (("instrumented", {}), ("not instrumented", {"instrument": False})):
        c0 = time.process_time()
        train(demo_config(quick, **short, **kw), data=data)
        timings[label] = time.process_time() - c0
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
