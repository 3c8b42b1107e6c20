"""Benchmark: fpsim.round to fp16, bf16, e4m3 and e5m2 in every mode against NumPy /
ml_dtypes casts.

Times, in one run, on float32 data (10**7 values by default):
- normal-range data: N(0, 1);
- wide-range data: N(0, 1) scaled by 2**k, k uniform in [-40, 40] (subnormals, flushes to zero
  and overflows in fp16);
and prints the time of each and its speed vs reference = native cast time / fpsim time (the
convention of every fpsim benchmark: 1.0 means as fast as the cast, 0.5 half as fast). Three
more rows per format: ``fpsim.cast`` (the values at real width, as the native cast gives them),
``fpsim.round`` (float64 values) against the native cast followed by widening to float64, and
``fpsim.cast`` against ``fpsim.round`` (the reference column is round's time there).

    python benchmarks/bench_rounding.py [--n 10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from timing import best_time  # benchmarks/ is on sys.path when a script runs

import fpsim


def make_data(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The two data sets: normal-range and wide-range float32 values."""
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(n).astype(np.float32)
    wide = (rng.standard_normal(n) * np.ldexp(1.0, rng.integers(-40, 41, n))).astype(np.float32)
    return {"normal N(0,1)": normal, "wide 2^[-40,40]": wide}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**7)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    natives = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16,
               "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}
    print(f"fpsim.round vs native casts, {args.n:.0e} float32 values, best of {args.repeat}; "
          "speed vs reference = native cast time / fpsim time (1.0 = as fast, < 1 slower)")
    print(f"{'data':18s} {'format':8s} {'mode':14s} {'fpsim ms':>9s} {'native ms':>9s} "
          f"{'speed':>6s}")
    with np.errstate(over="ignore"):
        for label, x in make_data(args.n).items():
            for fname, dt in natives.items():
                t_native = best_time(lambda: x.astype(dt), args.repeat)  # noqa: B023
                for mode in fpsim.Rounding:
                    kw = {"rng": 0} if mode is fpsim.Rounding.STOCHASTIC else {}
                    t = best_time(lambda: fpsim.round(x, fname, mode, **kw), args.repeat)  # noqa: B023
                    print(f"{label:18s} {fname:8s} {mode.value:14s} {t * 1e3:9.1f} "
                          f"{t_native * 1e3:9.1f} {t_native / t:6.2f}")
                t_cast = best_time(lambda: fpsim.cast(x, fname), args.repeat)  # noqa: B023
                print(f"{label:18s} {fname:8s} {'cast (storage)':14s} {t_cast * 1e3:9.1f} "
                      f"{t_native * 1e3:9.1f} {t_native / t_cast:6.2f}")
                # round returns float64: against the native cast followed by its widening,
                # the same output (the 8-byte write alone costs about as much as the cast)
                t_wide = best_time(lambda: x.astype(dt).astype(np.float64), args.repeat)  # noqa: B023
                t = best_time(lambda: fpsim.round(x, fname), args.repeat)  # noqa: B023
                print(f"{label:18s} {fname:8s} {'round vs wide':14s} {t * 1e3:9.1f} "
                      f"{t_wide * 1e3:9.1f} {t_wide / t:6.2f}")
                # cast against round (the reference here: cast should be no slower)
                print(f"{label:18s} {fname:8s} {'cast vs round':14s} {t_cast * 1e3:9.1f} "
                      f"{t * 1e3:9.1f} {t / t_cast:6.2f}")
                kw = {"rng": 0, "random_bits": 8}
                t = best_time(lambda: fpsim.round(x, fname, "stochastic", **kw), args.repeat)  # noqa: B023
                print(f"{label:18s} {fname:8s} {'sr 8 bits':14s} {t * 1e3:9.1f} "
                      f"{t_native * 1e3:9.1f} {t_native / t:6.2f}")


if __name__ == "__main__":
    main()
