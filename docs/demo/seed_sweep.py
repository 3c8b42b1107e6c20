"""Print the seed sweep table of docs/demo.md: the demo's recipes under several seeds (each
seed draws the initial weights and the batch order; every recipe of a seed shares them), test
accuracy per recipe and whether each printed finding holds.

    python docs/demo/seed_sweep.py [--seeds 0 1 2 3 4] [--full]

The statistics are sampled every 25 steps here (underflow and lost-update fractions are
estimates from those steps; the accuracies do not depend on the instrumentation).
"""

from __future__ import annotations

import argparse
import sys

from fpsim.training import PRECISIONS
from fpsim.training.experiment import run_demo
from fpsim.training.report import findings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--full", action="store_true", help="the full demo (default: --quick)")
    args = ap.parse_args(argv)
    names = list(PRECISIONS)
    print(f"`fpsim demo{'' if args.full else ' --quick'}`, test accuracy (%) by seed; the last "
          "column counts the findings that hold")
    print()
    print("| seed | " + " | ".join(names) + " | findings |")
    print("|---|" + "---|" * (len(names) + 1))
    held = []
    for seed in args.seeds:
        runs = run_demo(quick=not args.full, seed=seed, progress=False, measure_every=25)
        acc = {r.precision: 100 * r.test_accuracy for r in runs}
        found = findings(runs)
        ok = sum(f.holds for f in found)
        held.append(ok == len(found))
        failed = ", ".join(f.recipe for f in found if not f.holds)
        print(f"| {seed} | " + " | ".join(f"{acc[n]:.2f}" for n in names)
              + f" | {ok}/{len(found)}{' (not: ' + failed + ')' if failed else ''} |",
              flush=True)
    print()
    print(f"all findings hold in {sum(held)} of {len(held)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
