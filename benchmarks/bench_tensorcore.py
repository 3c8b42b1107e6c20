"""Speed of the bit-exact tensor-core model (fpsim.tensorcore.matmul) against a float64
``A @ B`` measured in the same run.

fp16 inputs, fp32 output, A100 (blocks of 8) and H100 (blocks of 16) models, at 256**3 and
1024**3 multiply-accumulates. Prints the time, MAC/s and the ratio to NumPy's BLAS float64
matmul (which neither rounds to fp16 nor models the accumulator). Memory stays bounded: the
model builds its (k, m, n) temporaries for chunks of ``fpsim.tensorcore.CHUNK_ELEMENTS``.

Run: python benchmarks/bench_tensorcore.py [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import best_time as best_of  # benchmarks/ is on sys.path when a script runs

import fpsim.tensorcore as tc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="256**3 only, one repeat")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sizes = (256,) if args.quick else (256, 1024)
    for n in sizes:
        repeat = 1 if (args.quick or n > 512) else 3
        A = tc.convert_input(rng.standard_normal((n, n)), "fp16")
        B = tc.convert_input(rng.standard_normal((n, n)), "fp16")
        t_np = best_of(lambda A=A, B=B: A @ B, 3)
        for gpu in ("A100", "H100"):
            t = best_of(lambda A=A, B=B, gpu=gpu: tc.matmul(A, B, gpu=gpu), repeat)
            macs = n**3
            print(f"matmul {n}x{n}x{n} fp16->fp32 {gpu}: {t * 1e3:9.1f} ms  "
                  f"{macs / t / 1e6:7.1f} M MAC/s   float64 A @ B {t_np * 1e3:7.2f} ms  "
                  f"ratio {t / t_np:7.1f}x")


if __name__ == "__main__":
    main()
