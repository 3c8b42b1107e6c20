"""Print the two measurements behind the quick configuration's choices in docs/demo.md.

1. Pure bf16 against fp32 under two quick configurations, the former (lr 0.025 over 300
   steps) and today's (lr 0.015 over 500 steps), for five seeds: the gap in test accuracy
   (points; positive: bf16 below fp32) and the share of bf16's weight updates lost to
   rounding (sampled every 25 steps).
2. mixed-fp16 without the gradient scale-down (grad_shift 0) under the dynamic scaler's
   window of the quick run and PyTorch's default of 2000 good steps: skipped steps and the
   gap to fp32.

    python docs/demo/choices.py [--jobs N]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from fpsim.training.experiment import QUICK_CONFIG, default_workers, run_demo

SEEDS = (0, 1, 2, 3, 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=default_workers(2))
    args = ap.parse_args(argv)
    configs = {"lr 0.025, 300 steps (former)": dict(lr=0.025, steps=300),
               f"lr {QUICK_CONFIG['lr']}, {QUICK_CONFIG['steps']} steps (--quick)": {}}
    print("1. pure bf16 vs fp32, quick configurations (gap in points; lost: share of bf16's "
          "weight updates lost)")
    print()
    print("| configuration | " + " | ".join(f"seed {s}" for s in SEEDS) + " | smallest gap |")
    print("|---|" + "---|" * (len(SEEDS) + 1))
    for label, kw in configs.items():
        cells, gaps = [], []
        for seed in SEEDS:
            fp32, bf16 = run_demo(quick=True, seed=seed, precisions=["fp32", "bf16"],
                                  progress=False, measure_every=25, workers=args.jobs, **kw)
            gap = 100 * (fp32.test_accuracy - bf16.test_accuracy)
            gaps.append(gap)
            cells.append(f"{gap:.2f} (lost {100 * bf16.lost_update_fraction:.0f}%)")
        print(f"| {label} | " + " | ".join(cells) + f" | {min(gaps):.2f} |", flush=True)
    print()
    window = QUICK_CONFIG["scale_window"]
    print(f"2. mixed-fp16 at grad_shift 0 (--quick otherwise): the scaler's window of {window} "
          "good steps against PyTorch's default 2000")
    print()
    print("| seed | fp32 | window | mixed-fp16 | gap | skipped | first skip | final scale |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in SEEDS[:3]:
        fp32 = run_demo(quick=True, seed=seed, precisions=["fp32"], progress=False,
                        instrument=False, grad_shift=0)[0]
        runs = [run_demo(quick=True, seed=seed, precisions=["mixed-fp16"], progress=False,
                         instrument=False, grad_shift=0, scale_window=w)[0]
                for w in (window, 2000)]
        for w, r in zip((window, 2000), runs, strict=True):
            skipped = np.nonzero(r.step_skipped)[0]
            first = str(skipped[0]) if skipped.size else "-"
            print(f"| {seed} | {100 * fp32.test_accuracy:.2f} | {w} | "
                  f"{100 * r.test_accuracy:.2f} | "
                  f"{100 * (fp32.test_accuracy - r.test_accuracy):.2f} | {skipped.size} | "
                  f"{first} | 2^{np.log2(r.final_loss_scale):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
