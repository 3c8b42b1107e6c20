"""Benchmark: fpsim's sequential sum (round to nearest even, no flags) in fp16, bf16 and fp32.

Ratio convention: speed vs reference = reference time / fpsim time, measured in the same run
(1.0 = as fast as the reference, < 1 slower). Two references: the native sequential sum
(``np.add.accumulate`` on the format's own NumPy / ml_dtypes type, last element), and the
element-by-element loop of correctly rounded adds (``fpsim.reductions._sequential_loop``, the
path every other mode takes; timed on ``--loop-n`` elements and scaled per element), whose
ratio is the speed-up of the native path (target: >= 20x for ``fpsim.sum(np.ones(10**6),
"bf16")``).

Second table: the sequential and Kahan orders where no native add applies (directed and
stochastic modes, flags, fp8), one long axis (``--modes-n`` values), 16 columns (the most
outputs the Python-float steps take, stochastic rounding included) and a matrix summed along
axis 0 (``--rows`` outputs, the vectorised loop), against NumPy's own sequential sum of the
same values (``np.add.accumulate`` in float32, last element; speed vs NumPy = NumPy time /
fpsim time) and against the element-by-element reference loops kept in the tests (speed-up =
loop time / fpsim time).

Third table (issue #35: a 1-D sequential or Kahan sum of 1e6 values in a directed or
stochastic mode "in well under a second"): one long axis (``--long-n`` values of N(0, 1)) in
every rounding mode, in seconds (wall and CPU: the machine may be shared), against ``np.sum``
of the same float64 array (speed vs np.sum = np.sum time / fpsim time) and against the target
of issue #35, 0.3 s of CPU ("well under a second": target / CPU time, >= 1 met). BLAS pinned
to one thread.

    python benchmarks/bench_reductions.py [--n 1000000] [--loop-n 20000] [--repeat 5]
        [--modes-n 20000] [--rows 1000] [--modes-only] [--long-n 1000000] [--long-only]
        [--long-formats bf16,fp16,fp8_e4m3,fp32]
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from timing import (  # benchmarks/ is on sys.path when a script runs
    best_time,
    best_wall_and_cpu,
    pinned_blas,
)

import fpsim
from fpsim import arithmetic, reductions


def _loop(X, c, order: str):
    """The element-by-element reference loops of the tests: one rounded op at a time."""
    acc = reductions._Acc(c, X.shape[0])
    if order == "sequential":
        return reductions._sequential_loop(X, acc)
    return getattr(reductions, "_kahan_loop", reductions._kahan)(X, acc)  # older trees: _kahan


MODE_CASES = [("bf16", "up", False), ("fp16", "toward_zero", False), ("bf16", "stochastic", False),
              ("fp8_e4m3", "nearest_even", False), ("fp16", "nearest_even", True),
              ("fp8_e4m3", "stochastic", False), ("bf16", "stochastic", True)]


def modes_table(n: int, rows: int, repeat: int) -> None:
    """Sequential and Kahan sums in the modes and formats without a native add."""
    print(f"sequential / kahan sums without a native add, best of {repeat}; speed vs NumPy = "
          "NumPy time / fpsim time; vs loop = loop time / fpsim time")
    print(f"{'format':9s} {'mode':13s} {'flags':5s} {'order':10s} {'shape':>12s} "
          f"{'fpsim ms':>9s} {'numpy ms':>9s} {'vs numpy':>9s} {'loop ms':>9s} {'vs loop':>8s}")
    rng = np.random.default_rng(3)
    for shape, axis in (((n,), None), ((n // 16, 16), 0), ((n // 20, rows), 0)):
        x = rng.standard_normal(shape)
        for fmt, mode, fl in MODE_CASES:
            xf = np.asarray(fpsim.round(x, fmt))
            x32 = xf.astype(np.float32)
            X = xf.reshape(-1, 1).T.copy() if axis is None else np.ascontiguousarray(xf.T)
            c = arithmetic.context(fmt, mode, rng=1 if mode == "stochastic" else None,
                                   flags=fl)
            t_np = best_time(lambda x32=x32: np.add.accumulate(x32, axis=0)[-1], repeat)
            for order in ("sequential", "kahan"):  # the same NumPy reference for both orders
                def ours(xf=xf, fmt=fmt, mode=mode, order=order, axis=axis, fl=fl):
                    return fpsim.sum(xf, fmt, axis=axis, order=order, rounding=mode, flags=fl,
                                     rng=1 if mode == "stochastic" else None)
                t_fp = best_time(ours, repeat)
                t_loop = best_time(lambda X=X, c=c, order=order: _loop(X, c, order), 1,
                                   warmup=False)
                print(f"{fmt:9s} {mode:13s} {str(fl):5s} {order:10s} {str(shape):>12s} "
                      f"{t_fp * 1e3:9.1f} {t_np * 1e3:9.2f} {t_np / t_fp:9.4f} "
                      f"{t_loop * 1e3:9.0f} {t_loop / t_fp:8.1f}")
    print()


LONG_FORMATS = ("bf16", "fp16", "fp8_e4m3", "fp32")
LONG_TARGET = 0.3  # seconds of CPU: issue #35's "well under a second"
LONG_MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd", "stochastic")


def long_table(n: int, repeat: int, formats=LONG_FORMATS) -> None:
    """1-D sequential and Kahan sums of n values in every rounding mode (issue #35)."""
    print(f"1-D sums of {n:.0e} N(0, 1) values, best of {max(1, repeat // 2)} (np.sum: of "
          f"{repeat}); speed vs np.sum = np.sum time / fpsim time (np.sum of the same "
          "float64 array)")
    print(f"{'format':9s} {'mode':13s} {'order':10s} {'fpsim s':>8s} {'cpu s':>7s} "
          f"{'np.sum ms':>10s} {'vs np.sum':>10s} {f'vs {LONG_TARGET:g} s':>9s}")
    x = np.random.default_rng(0).standard_normal(n)
    for fmt in formats:
        xf = np.asarray(fpsim.round(x, fmt))
        t_np = best_time(lambda xf=xf: np.sum(xf), repeat)
        for mode in LONG_MODES:
            for order in ("sequential", "kahan"):
                def ours(xf=xf, fmt=fmt, mode=mode, order=order):
                    return fpsim.sum(xf, fmt, order=order, rounding=mode,
                                     rng=1 if mode == "stochastic" else None)
                t_fp, t_cpu = best_wall_and_cpu(ours, max(1, repeat // 2))  # the same calls
                print(f"{fmt:9s} {mode:13s} {order:10s} {t_fp:8.3f} {t_cpu:7.3f} "
                      f"{t_np * 1e3:10.3f} {t_np / t_fp:10.5f} {LONG_TARGET / t_cpu:9.2f}",
                      flush=True)
    print()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**6)
    p.add_argument("--loop-n", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--modes-n", type=int, default=20000)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--modes-only", action="store_true", help="only the second table")
    p.add_argument("--long-n", type=int, default=10**6)
    p.add_argument("--long-only", action="store_true", help="only the third table")
    p.add_argument("--long-formats", default=",".join(LONG_FORMATS),
                   help="formats of the third table, comma-separated")
    args = p.parse_args(argv)
    with pinned_blas():
        _tables(args)


def _tables(args) -> None:
    long_table(args.long_n, args.repeat, args.long_formats.split(","))
    if args.long_only:
        return
    modes_table(args.modes_n, args.rows, args.repeat)
    if args.modes_only:
        return
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
