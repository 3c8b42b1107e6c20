"""Print the seed sweep tables of docs/demo.md: the demo's recipes under several seeds (each
seed draws the initial weights and the batch order; every recipe of a seed shares them), test
accuracy per recipe, whether each printed finding holds, and each recipe's range of gaps to
fp32 over the seeds (points of test accuracy; positive: below fp32).

    python docs/demo/seed_sweep.py [--seeds 0 1 2 3 4] [--full] [--jobs N]

The statistics are sampled every 25 steps here (underflow and lost-update fractions are
estimates from those steps; the accuracies do not depend on the instrumentation).
"""

from __future__ import annotations

import argparse
import sys
import time

from fpsim.training import PRECISIONS
from fpsim.training.experiment import default_workers, demo_config, run_demo
from fpsim.training.report import findings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--full", action="store_true", help="the full demo (default: --quick)")
    ap.add_argument("--jobs", type=int, default=default_workers(len(PRECISIONS)),
                    help="processes per seed (default: the CPUs available)")
    args = ap.parse_args(argv)
    names = list(PRECISIONS)
    cfg = demo_config(not args.full)
    t0 = time.perf_counter()
    print(f"`fpsim demo{'' if args.full else ' --quick'}` ({cfg.steps} steps, lr {cfg.lr}, "
          f"{cfg.schedule}), test accuracy (%) by seed; the last column counts the findings "
          "that hold")
    print()
    print("| seed | " + " | ".join(names) + " | findings |")
    print("|---|" + "---|" * (len(names) + 1))
    held = []
    gaps: dict[str, list[float]] = {n: [] for n in names[1:]}
    for seed in args.seeds:
        runs = run_demo(quick=not args.full, seed=seed, progress=False, measure_every=25,
                        workers=args.jobs)
        acc = {r.precision: 100 * r.test_accuracy for r in runs}
        for n in gaps:
            gaps[n].append(acc["fp32"] - acc[n])
        found = findings(runs)
        ok = sum(f.holds for f in found)
        held.append(ok == len(found))
        failed = ", ".join(f.recipe for f in found if not f.holds)
        print(f"| {seed} | " + " | ".join(f"{acc[n]:.2f}" for n in names)
              + f" | {ok}/{len(found)}{' (not: ' + failed + ')' if failed else ''} |",
              flush=True)
    print()
    print(f"all findings hold in {sum(held)} of {len(held)} seeds")
    print()
    print("gap to fp32 over the seeds (points; positive: below fp32), smallest to largest:")
    for n, g in gaps.items():
        print(f"  {n:12s} {min(g):6.2f} .. {max(g):6.2f}")
    print(f"({time.perf_counter() - t0:.0f} s wall, {args.jobs} processes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
