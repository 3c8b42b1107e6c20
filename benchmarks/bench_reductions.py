"""Benchmark: fpsim's sequential sum (round to nearest even, no flags) in fp16, bf16 and fp32.

Ratio convention: speed vs reference = reference time / fpsim time, measured in the same run
(1.0 = as fast as the reference, < 1 slower). Two references: the native sequential sum
(``np.add.accumulate`` on the format's own NumPy / ml_dtypes type, last element), and the
element-by-element loop of correctly rounded adds (``fpsim.reductions._sequential_loop``, the
path every other mode takes; timed on ``--loop-n`` elements and scaled per element), whose
ratio is the speed-up of the native path (target: >= 20x for ``fpsim.sum(np.ones(10**6),
"bf16")``).

    python benchmarks/bench_reductions.py [--n 1000000] [--loop-n 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from timing import best_time  # benchmarks/ is on sys.path when a script runs

import fpsim
from fpsim import arithmetic, reductions


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**6)
    p.add_argument("--loop-n", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    print(f"sequential sum of {args.n:.0e} values, best of {args.repeat}; speed vs reference = "
          "reference time / fpsim time")
    print(f"{'format':6s} {'data':6s} {'fpsim ms':>9s} {'native ms':>10s} {'vs native':>10s} "
          f"{'loop ms (scaled)':>17s} {'vs loop':>8s}")
    rng = np.random.default_rng(0)
    for name, dt in (("bf16", ml_dtypes.bfloat16), ("fp16", np.float16), ("fp32", np.float32)):
        for data_name, x in (("ones", np.ones(args.n)), ("normal", rng.standard_normal(args.n))):
            xs = x.astype(dt)
            t_fp = best_time(lambda xs=xs, name=name: fpsim.sum(xs, name), args.repeat)
            t_nat = best_time(lambda xs=xs: np.add.accumulate(xs)[-1], args.repeat)
            c = arithmetic.context(name)
            X = np.asarray(xs[:args.loop_n], np.float64).reshape(1, -1)
            t_loop = best_time(lambda X=X, c=c: reductions._sequential_loop(
                X, reductions._Acc(c, 1)), 1) * args.n / args.loop_n
            print(f"{name:6s} {data_name:6s} {t_fp * 1e3:9.2f} {t_nat * 1e3:10.2f} "
                  f"{t_nat / t_fp:10.2f} {t_loop * 1e3:17.0f} {t_loop / t_fp:8.0f}")


if __name__ == "__main__":
    main()
