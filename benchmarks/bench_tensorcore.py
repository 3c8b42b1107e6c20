"""Speed of the bit-exact tensor-core model (fpsim.tensorcore.matmul); speed vs reference =
float64 ``A @ B`` time / fpsim time, both measured in the same run (1.0 = as fast as NumPy's
BLAS, below 1 slower).

fp16 inputs, fp32 output: the NVIDIA A100 (blocks of 8) and H100 (blocks of 16) models, and the
AMD units built on the generic block FMA: MI100 (exact block sums), MI210 (pairwise fp32
additions), MI300X (late-added c; fp8 e4m3fnuz / e5m2fnuz with odd/even groups), and the other
AMD input formats (bf16, tf32). Prints the time, MAC/s and the speed against NumPy's float64
matmul (which neither rounds nor models the accumulator), with BLAS pinned to one thread
(threadpoolctl), and each unit's MAC/s as a fraction of H100's in the same run (issue 16's
target: the AMD units within 2x of the NVIDIA ones, i.e. at least 0.5); each time is the best
of several runs, so that other load on the machine disturbs it least. Memory stays bounded:
the model builds its (k, m, n) temporaries for chunks of ``fpsim.tensorcore.CHUNK_ELEMENTS``.

Run: python benchmarks/bench_tensorcore.py [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits
from timing import best_time as best_of  # benchmarks/ is on sys.path when a script runs

import fpsim.tensorcore as tc

UNITS = (("H100", "fp16"), ("A100", "fp16"), ("MI100", "fp16"), ("MI210", "fp16"),
         ("MI300X", "fp16"), ("MI300X", "fp8_e4m3fnuz"), ("MI300X", "fp8_e5m2fnuz"),
         ("MI100", "bf16"), ("MI300X", "bf16"), ("MI300X", "tf32"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="256**3 only, one repeat")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sizes = (256,) if args.quick else (256, 1024)
    with threadpool_limits(1):
        for n in sizes:
            repeat = 1 if (args.quick or n > 512) else 5
            x = rng.standard_normal((n, n))
            y = rng.standard_normal((n, n))
            t_h100 = None
            for gpu, fin in UNITS:
                if n > 512 and gpu not in ("A100", "H100"):
                    continue
                A = tc.convert_input(x, fin)
                B = tc.convert_input(y, fin)
                t_np = best_of(lambda A=A, B=B: A @ B, 5)
                t = best_of(lambda A=A, B=B, gpu=gpu, fin=fin:
                            tc.matmul(A, B, gpu=gpu, input_format=fin), repeat)
                t_h100 = t if t_h100 is None else t_h100  # H100 runs first
                macs = n**3
                print(f"matmul {n}x{n}x{n} {fin:>12}->fp32 {gpu:<6}: {t * 1e3:8.1f} ms  "
                      f"{macs / t / 1e6:6.1f} M MAC/s ({t_h100 / t:.2f} of H100)   "
                      f"float64 A @ B {t_np * 1e3:6.2f} ms  speed vs reference {t_np / t:.4f}",
                      flush=True)


if __name__ == "__main__":
    main()
