"""How accurate is a tensor-core dot product as K grows? V100, A100 and H100 against fp32.

Each GPU adds blocks of n exact products (4, 8, 16) aligned with 0, 1 or 2 extra bits and
truncated, then rounds each block toward zero: the error grows linearly with the number of
blocks and is biased (always toward zero). fp32 sequential summation with round to nearest
grows more slowly on average and fp32 pairwise summation slowest. Inputs are fp16 values on
[0, 1) (all positive: the classic worst case, errors never cancel); the exact value is
``math.fsum`` of the exact products.

Run: python examples/tensorcore_error_vs_k.py [--quick]
(writes fpsim-output/examples/tensorcore_error_vs_k.png; --out FILE changes it)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: runs on machines without a display
import matplotlib.pyplot as plt  # noqa: E402

import fpsim  # noqa: E402
import fpsim.tensorcore as tc  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="fpsim-output/examples/tensorcore_error_vs_k.png",
                   help="PNG file to write")
    p.add_argument("--quick", action="store_true", help="fewer K values and trials")
    p.add_argument("--distribution", default="uniform", choices=("uniform", "normal"))
    args = p.parse_args(argv)
    ks = (16, 64, 256, 1024) if args.quick else (16, 64, 256, 1024, 4096, 16384)
    r = tc.error_vs_k(ks=ks, gpus=("V100", "A100", "H100"), trials=5 if args.quick else 20,
                      distribution=args.distribution)
    print(r)
    u = fpsim.FP32.unit_roundoff
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, errs in r.mean.items():
        ax.loglog(r.ks, errs, "o-" if name in ("V100", "A100", "H100") else "s--", label=name)
    ax.loglog(r.ks, [k * u for k in r.ks], ":", color="gray", label="K u (fp32 bound)")
    ax.set_xlabel("K (length of the dot product)")
    ax.set_ylabel("mean relative error")
    ax.set_title(f"Tensor-core dot products, {r.input_format} inputs, fp32 output")
    ax.legend()
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # under the ignored fpsim-output/
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
