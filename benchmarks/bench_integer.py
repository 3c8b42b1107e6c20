"""Speed of fpsim.integer against plain NumPy, measured in the same run.

- to_int float32 -> int8 (round to nearest even, saturating) on 10**7 elements against
  ``np.clip(np.rint(x), -128, 127).astype(np.int8)`` (which has no flags, no NaN rule and no
  other rounding modes);
- int8_matmul (int32 accumulation, wrapping) at 256**3 and 1024**3 against NumPy's int32
  ``matmul`` (whose int32 accumulation also wraps, silently).

Ratio convention: speed vs numpy = NumPy time / fpsim time (1.0 = as fast as NumPy, < 1
slower); BLAS pinned to one thread.

Run: python benchmarks/bench_integer.py [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import best_time as best_of  # benchmarks/ is on sys.path when a script runs
from timing import pinned_blas

from fpsim.integer import int8_matmul, to_int


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    args = parser.parse_args()
    repeat = 1 if args.quick else 5
    print("speed vs numpy = NumPy time / fpsim time (1.0 = as fast as NumPy, < 1 slower)")
    rng = np.random.default_rng(0)

    n = 10**6 if args.quick else 10**7
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    ours = to_int(x, "int8")
    ref = np.clip(np.rint(x), -128, 127).astype(np.int8)
    assert np.array_equal(ours, ref), "to_int disagrees with NumPy"
    t_ours = best_of(lambda: to_int(x, "int8"), repeat)
    t_np = best_of(lambda: np.clip(np.rint(x), -128, 127).astype(np.int8), repeat)
    print(f"to_int float32->int8, n={n:.0e}: fpsim {t_ours * 1e3:8.1f} ms   "
          f"numpy {t_np * 1e3:8.1f} ms   speed vs numpy {t_np / t_ours:6.2f}")
    t_fl = best_of(lambda: to_int(x, "int8", flags=True), repeat)
    t_sr = best_of(lambda: to_int(x, "int8", "stochastic", rng=1), repeat)
    print(f"  speed vs numpy: with flags=True {t_np / t_fl:6.2f}   stochastic {t_np / t_sr:6.2f}")

    sizes = (256,) if args.quick else (256, 1024)
    for s in sizes:
        A = rng.integers(-128, 128, (s, s)).astype(np.int8)
        B = rng.integers(-128, 128, (s, s)).astype(np.int8)
        A32, B32 = A.astype(np.int32), B.astype(np.int32)
        assert np.array_equal(int8_matmul(A, B), A32 @ B32), "int8_matmul disagrees with NumPy"
        t_ours = best_of(lambda A=A, B=B: int8_matmul(A, B), repeat)
        # NumPy's integer matmul has no BLAS: seconds at 1024**3, where one run suffices
        t_np = best_of(lambda A32=A32, B32=B32: A32 @ B32, 1 if s > 256 else repeat)
        print(f"int8_matmul {s}^3: fpsim {t_ours * 1e3:8.1f} ms   numpy int32 matmul "
              f"{t_np * 1e3:8.1f} ms   speed vs numpy {t_np / t_ours:6.2f}")
        if s == 256:
            t_sat = best_of(lambda A=A, B=B: int8_matmul(A, B, overflow="saturate"), repeat)
            print(f"  overflow='saturate' (no group can saturate: fast path): speed vs numpy "
                  f"{t_np / t_sat:6.2f}")


if __name__ == "__main__":
    with pinned_blas():
        main()
