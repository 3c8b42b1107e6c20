"""Record PyTorch CPU's float32 sums as fpsim.probe.reveal_order sees them, into
tests/data/torch/probe_order.npz, the reference of tests/test_probe_order.py. Needs torch (not
a dependency of fpsim) and fpsim on the path, in a separate environment:

    PYTHONPATH=. /path/to/torchenv/bin/python tools/record_torch_probe_order.py

For each case (a torch function and a length n): every input ``reveal_order`` gives the
function (its masked queries and its checks) with torch's output, so the test can run
``reveal_order`` again on a function that replays torch; the tree it revealed here; and 64
random float32 inputs (a few binades, both signs) with torch's sums, which the test
recomputes in the recorded tree's order, one float32 rounding per add. Written as float64
(every float32 value is one), one group of arrays per case.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from fpsim.probe import reveal_order

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "probe_order.npz"
RANDOM_ROWS = 64
SEED = 20261205

CASES = {
    "torch.sum": lambda x: torch.sum(torch.from_numpy(x)).item(),
    "torch.dot": lambda x: torch.dot(torch.from_numpy(x), torch.ones(len(x))).item(),
    "torch.Tensor.sum(strided)": lambda x: torch.from_numpy(
        np.repeat(x, 2))[::2].sum().item(),
    "torch.cumsum[-1]": lambda x: torch.cumsum(torch.from_numpy(x), 0)[-1].item(),
}
LENGTHS = (7, 16, 33, 64, 100)


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)
    arrays: dict[str, np.ndarray] = {}
    index = []
    for name, f in CASES.items():
        for n in LENGTHS:
            queries: list[np.ndarray] = []
            outs: list[float] = []

            def fn(x: np.ndarray, f=f, queries=queries, outs=outs) -> float:
                out = float(f(np.ascontiguousarray(x, dtype=np.float32)))
                queries.append(np.asarray(x, dtype=np.float64).copy())
                outs.append(out)
                return out

            tree = reveal_order(fn, n, fmt="fp32")
            e = rng.integers(-5, 6, size=(RANDOM_ROWS, n))
            x = (rng.uniform(1, 2, size=(RANDOM_ROWS, n)) * np.exp2(e)
                 * rng.choice((-1.0, 1.0), size=(RANDOM_ROWS, n))).astype(np.float32)
            y = np.array([float(f(row.copy())) for row in x])
            key = f"case{len(index)}"
            arrays[f"{key}/queries"] = np.array(queries)
            arrays[f"{key}/outputs"] = np.array(outs)
            arrays[f"{key}/random"] = x.astype(np.float64)
            arrays[f"{key}/random_sums"] = y
            index.append({"key": key, "function": name, "n": n, "tree": json.dumps(tree)})
            print(f"{name} n={n}: {len(queries)} calls, tree {json.dumps(tree)[:100]}")
    arrays["index"] = np.array(json.dumps({"torch": torch.__version__, "cases": index}))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
