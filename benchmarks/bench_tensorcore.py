"""Speed of the bit-exact tensor-core model (fpsim.tensorcore.matmul); speed vs reference =
float32 ``A @ B`` time (NumPy's BLAS sgemm) / fpsim time, both measured in the same run (1.0 =
as fast as BLAS, below 1 slower).

Units, fp32 output: the NVIDIA A100 (blocks of 8) and H100 (blocks of 16) with fp16 and bf16
inputs, B200's fp8 e4m3 default (issue 33's rule, ``B200-fp8-rz-then-c``: blocks of 32 summed
toward zero, then c added to nearest even), and the AMD units built on the generic block FMA:
MI100 (exact block sums), MI210 (pairwise fp32 additions), MI300X (late-added c; fp8
e4m3fnuz / e5m2fnuz with odd/even groups), and the other AMD input formats (bf16, tf32).
Prints the time, MAC/s, each unit's MAC/s as a fraction of H100 fp16's in the same run (issue
16's target: the AMD units at least 0.5), and the speed against float32 BLAS (which neither
rounds like a tensor core nor models its accumulator), with BLAS pinned to one thread
(threadpoolctl); units with issue 33's target (at least 1,000 M MAC/s at 512**3: A100 and H100
fp16 / bf16, B200 fp8) are marked "met" or "MISSED". Each time is the best of several runs, so
that other load on the machine disturbs it least; the load average is printed first, since a
shared machine slows every figure (the MAC/s by the process's CPU time, printed beside them,
less so). Memory stays bounded: the model builds its (k, m, n) temporaries for chunks of about
``fpsim.tensorcore.CHUNK_ELEMENTS``.

Run: python benchmarks/bench_tensorcore.py [--quick] [--size N ...]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from threadpoolctl import threadpool_limits
from timing import best_time as best_of  # benchmarks/ is on sys.path when a script runs
from timing import best_wall_and_cpu

import fpsim.tensorcore as tc

#: (gpu, input format, issue 33's target applies)
UNITS = (("H100", "fp16", True), ("A100", "fp16", True), ("H100", "bf16", True),
         ("A100", "bf16", True), ("B200", "fp8_e4m3", True),
         ("MI100", "fp16", False), ("MI210", "fp16", False), ("MI300X", "fp16", False),
         ("MI300X", "fp8_e4m3fnuz", False), ("MI300X", "fp8_e5m2fnuz", False),
         ("MI100", "bf16", False), ("MI300X", "bf16", False), ("MI300X", "tf32", False))
TARGET_MACS = 1.0e9  # issue 33: M MAC/s at 512**3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="256**3 only, one repeat")
    parser.add_argument("--size", type=int, nargs="+", help="matrix sizes (default 512)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per unit (best is kept)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sizes = args.size or ((256,) if args.quick else (512,))
    repeat = 1 if args.quick else args.repeat
    print(f"load average (1, 5, 15 min) at start: {os.getloadavg()}, {os.cpu_count()} CPUs; "
          f"BLAS pinned to 1 thread", flush=True)
    with threadpool_limits(1):
        for n in sizes:
            x = rng.standard_normal((n, n))
            y = rng.standard_normal((n, n))
            t_h100 = None
            for gpu, fin, target in UNITS:
                A = tc.convert_input(x, fin)
                B = tc.convert_input(y, fin)
                A32, B32 = A.astype(np.float32), B.astype(np.float32)
                t_blas = best_of(lambda A32=A32, B32=B32: A32 @ B32, 5)
                t, t_cpu = best_wall_and_cpu(lambda A=A, B=B, gpu=gpu, fin=fin:
                                             tc.matmul(A, B, gpu=gpu, input_format=fin), repeat)
                t_h100 = t if t_h100 is None else t_h100  # H100 fp16 runs first
                macs = n**3 / t
                mark = ""
                if target and n == 512:
                    mark = "  target met" if macs >= TARGET_MACS else "  target MISSED"
                print(f"matmul {n}x{n}x{n} {fin:>12}->fp32 {gpu:<6}: {t * 1e3:8.1f} ms  "
                      f"{macs / 1e6:7.1f} M MAC/s (CPU time {n**3 / t_cpu / 1e6:7.1f}) "
                      f"({t_h100 / t:.2f} of H100)   "
                      f"float32 BLAS {t_blas * 1e3:6.2f} ms  speed vs reference "
                      f"{t_blas / t:.4f}{mark}", flush=True)


if __name__ == "__main__":
    main()
