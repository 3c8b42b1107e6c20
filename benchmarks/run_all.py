"""Run every benchmark script in this folder, one after another, printing their tables.

    python benchmarks/run_all.py            # all of them
    python benchmarks/run_all.py rounding   # only those whose name contains "rounding"

Each script times fpsim against NumPy / ml_dtypes doing the same work in the same run and
prints the ratios, all in one convention: speed vs reference = reference time / fpsim time
(1.0 = as fast as the reference, < 1 slower), with BLAS pinned to one thread (threadpoolctl).
Nothing here is a pass/fail test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    scripts = sorted(here.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if any(a in s.stem for a in argv)]
    if not scripts:
        print(f"no benchmark matches {argv}; available: "
              + ", ".join(s.stem for s in sorted(here.glob('bench_*.py'))))
        return 2
    status = 0
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        status |= subprocess.call([sys.executable, str(script)])
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
