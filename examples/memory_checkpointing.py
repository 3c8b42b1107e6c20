"""Memory of training, measured: gradient checkpointing's sqrt(n) trade-off and ZeRO's
per-rank model states and communication, against the formulas.

Part 1 trains an n-layer MLP (Linear + ReLU) once without and then with k = 1..n checkpointed
segments, measuring with fpsim's memory meter the peak of saved activations (in units of one
layer's output) and the operations recomputed in backward; Chen et al.'s k + ceil(n/k) is the
formula. Part 2 runs ZeRO stages 0-3 (and stage 2 with offload) on 4 simulated ranks and prints
each rank's model-state bytes and elements sent per step next to the ZeRO paper's formulas.

Run: python examples/memory_checkpointing.py [--layers 16]
(writes fpsim-output/examples/checkpointing.png; --out FILE changes it)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: runs on machines without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fpsim import memory, nn  # noqa: E402
from fpsim.autograd import Tensor  # noqa: E402
from fpsim.distributed import ZeroEngine  # noqa: E402


def checkpointing(n: int, width: int = 32, batch: int = 16, fmt: str = "fp16"
                  ) -> list[memory.CheckpointPoint]:
    """One row per k = 1..n: (k, measured peak units, formula units, recomputed share of
    forward FLOPs), measured by fpsim.memory.checkpoint_sweep on a chain of Linear + ReLU."""
    layers = [nn.Sequential(nn.Linear(width, width, rng=i), nn.ReLU()).to(fmt)
              for i in range(n)]
    x = Tensor(np.random.default_rng(0).normal(size=(batch, width)), fmt)
    return memory.checkpoint_sweep(layers, x)


def zero_rows(world_size: int = 4):
    def factory():
        return nn.Sequential(nn.Linear(16, 32, rng=0), nn.ReLU(), nn.Linear(32, 4, rng=1))

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 16)), rng.integers(0, 4, size=16)
    rows = []
    for stage, offload in ((0, False), (1, False), (2, False), (3, False), (2, True)):
        eng = ZeroEngine(factory, stage, world_size, lr=1e-3, offload=offload)
        eng.step(x, y)
        rows.append((stage, offload, memory.zero_measured_vs_formula(eng)))
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16, help="layers n of the MLP")
    p.add_argument("--out", default="fpsim-output/examples/checkpointing.png",
                   help="PNG file to write")
    args = p.parse_args(argv)
    rows = checkpointing(args.layers)
    print(f"gradient checkpointing, n = {args.layers} layers (units: one layer's output)")
    print(f"{'k':>3s} {'measured':>9s} {'k+ceil(n/k)':>12s} {'recomputed':>11s}")
    for k, meas, formula, over in rows:
        print(f"{k:3d} {meas:9.0f} {formula:12d} {100 * over:10.1f}%")
    print("\nZeRO on 4 ranks, per rank (bytes; elements sent in one step)")
    print(f"{'stage':>5s} {'offload':>7s} {'held':>6s} {'formula':>8s} {'on GPU':>7s} "
          f"{'sent':>6s} {'ring':>6s} {'paper':>6s}")
    for stage, off, d in zero_rows():
        print(f"{stage:5d} {off!s:>7s} {d['measured_bytes']:6d} {d['formula_bytes']:8.0f} "
              f"{d['device_bytes']:7d} {d['measured_comm_elements']:6d} "
              f"{d['ring_comm_elements']:6.0f} {d['paper_comm_elements']:6.0f}")
    ks = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(ks, [r[1] for r in rows], "o-", label="measured peak")
    ax.plot(ks, [r[2] for r in rows], "s--", label="k + ceil(n/k)")
    ax.set_xlabel("segments k")
    ax.set_ylabel("saved activations (layer outputs)")
    ax2 = ax.twinx()
    ax2.bar(ks, [100 * r[3] for r in rows], alpha=0.2, color="gray")
    ax2.set_ylabel("recomputed forward FLOPs (%)")
    ax.legend(loc="upper center")
    ax.set_title(f"Gradient checkpointing, {args.layers} layers")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # under the ignored fpsim-output/
    fig.savefig(args.out, dpi=120)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
