"""Record PyTorch's exact elementwise ops (relu, abs, neg) and their gradients on the special
bit patterns of fp16 and bf16 (every pattern whose exponent field is all zeros or all ones:
zeros of both signs, subnormals, infinities, NaNs of both signs, with their payloads) and a
sample of the others, and its rounding ones (exp, log, sqrt, tanh, sigmoid, gelu both ways)
and their gradients at zeros, infinities and NaNs, into tests/data/torch/special_values.npz,
the independent reference of tests/test_torch_special_values.py. Needs torch (not a
dependency of fpsim):

    pip install torch && python tools/record_torch_special_values.py

Each op runs on the CPU in the format itself; the upstream gradient is a fixed array of normal
values (its bit patterns are recorded too), so the gradient shows both where it passes and the
sign it is multiplied by. Outputs and gradients are stored as 16-bit patterns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "special_values.npz"
OPS = ("relu", "abs", "neg")
# ops that round: compared at the inputs whose results are exact either way (zeros of both
# signs, infinities, NaNs), where the op's rules for special values decide
ROUNDING_OPS = ("exp", "log", "sqrt", "tanh", "sigmoid", "gelu", "gelu_tanh")


def main() -> int:
    import ml_dtypes
    import torch

    rng = np.random.default_rng(2026)
    arrays: dict[str, np.ndarray] = {}
    every = np.arange(1 << 16, dtype=np.uint16)
    fns = {"gelu": torch.nn.functional.gelu, "sigmoid": torch.sigmoid,
           "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}

    def record(fmt, tdt, ndt, key: str, bits: np.ndarray, ops) -> None:
        """Each op on the patterns ``bits`` and its backward from an upstream gradient of
        normal values of both signs, exact in the format (a few values: the file compresses);
        the patterns reach torch through int16 (torch has no uint16 view on the CPU)."""
        g = rng.choice([-1.5, -1.0, -0.75, -0.5, 0.5, 0.75, 1.0, 1.5], bits.size).astype(ndt)
        arrays[f"{fmt}/{key}x"], arrays[f"{fmt}/{key}g"] = bits, g.view(np.uint16)
        for op in ops:
            x = torch.from_numpy(bits.view(np.int16).copy()).view(tdt).requires_grad_()
            out = fns.get(op, getattr(torch, op, None))(x)
            out.backward(torch.from_numpy(g.view(np.int16).copy()).view(tdt))
            arrays[f"{fmt}/{op}/out"] = out.detach().view(torch.int16).numpy().view(np.uint16)
            arrays[f"{fmt}/{op}/grad"] = x.grad.view(torch.int16).numpy().view(np.uint16)

    for fmt, tdt, ndt, frac in (("fp16", torch.float16, np.float16, 10),
                                ("bf16", torch.bfloat16, ml_dtypes.bfloat16, 7)):
        top = (1 << (15 - frac)) - 1  # the exponent field of infinities and NaNs
        field, fraction = (every >> frac) & top, every & ((1 << frac) - 1)
        special = (field == 0) | (field == top)
        record(fmt, tdt, ndt, "", np.concatenate(
            [every[special], rng.choice(every[~special], 2048, False)]), OPS)
        record(fmt, tdt, ndt, "edge/", every[(field == top) | ((field == 0) & (fraction == 0))],
               ROUNDING_OPS)
    arrays["torch_version"] = np.array(torch.__version__)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"{len(OPS) + len(ROUNDING_OPS)} ops x 2 formats -> {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
