"""Record PyTorch's Adam with fp16 parameters (pure fp16: its state is fp16 too, as PyTorch
keeps the moments in the parameter's dtype) on notebook 08's case (section 4, "Adam's epsilon in
fp16"): the gradients [1e-2, 1e-4, 1e-5, 1e-6] rounded to fp16, lr 1e-3, eps 1e-8 and 1e-4,
three steps, with and without amsgrad, plus a sweep of random fp16 gradients (both signs, from
1e-7 to 1), and SGD with momentum on the sweep, into tests/data/torch/adam_fp16.npz, the
independent reference of tests/test_optim_adam_fp16.py. Needs torch (not a dependency of
fpsim):

    python -m venv /tmp/torch && /tmp/torch/bin/pip install torch==2.13.0 numpy
    /tmp/torch/bin/python tools/record_torch_adam_fp16.py

After every step it stores the parameter and the state (Adam's two moments, SGD's buffer) as
fp16 bit patterns, with the default (single-tensor) implementation on the CPU,
``foreach=False``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch" / "adam_fp16.npz"
NOTEBOOK_GRADS = [1e-2, 1e-4, 1e-5, 1e-6]
STEPS = 3


def main() -> int:
    import torch

    arrays: dict[str, np.ndarray] = {"torch_version": np.array(torch.__version__)}
    rng = np.random.default_rng(2034)
    sweep = (rng.choice([-1.0, 1.0], 256) * 10.0 ** rng.uniform(-7, 0, 256)).astype(np.float16)
    cases = {"notebook": np.array(NOTEBOOK_GRADS, dtype=np.float16), "sweep": sweep}
    for case, grads in cases.items():
        arrays[f"{case}/grad"] = grads.view(np.uint16)
        for eps in (1e-8, 1e-4):
            for amsgrad in (False, True):
                key = f"{case}/eps={eps:g}/amsgrad={int(amsgrad)}"
                w = torch.ones(grads.size, dtype=torch.float16, requires_grad=True)
                opt = torch.optim.Adam([w], lr=1e-3, eps=eps, amsgrad=amsgrad, foreach=False)
                for t in range(1, STEPS + 1):
                    w.grad = torch.from_numpy(grads.copy())
                    opt.step()
                    st = opt.state[w]
                    for name, value in (("w", w.detach()), ("exp_avg", st["exp_avg"]),
                                        ("exp_avg_sq", st["exp_avg_sq"])):
                        assert value.dtype == torch.float16, (name, value.dtype)
                        arrays[f"{key}/step{t}/{name}"] = value.view(torch.int16).numpy().view(
                            np.uint16).copy()
    # SGD's momentum buffer is state too: momentum 0.9, dampening 0 and 0.5, lr 0.1
    for damp in (0.0, 0.5):
        key = f"sweep/sgd/dampening={damp:g}"
        w = torch.ones(sweep.size, dtype=torch.float16, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1, momentum=0.9, dampening=damp, foreach=False)
        for t in range(1, STEPS + 1):
            w.grad = torch.from_numpy(sweep.copy())
            opt.step()
            for name, value in (("w", w.detach()), ("momentum_buffer",
                                                     opt.state[w]["momentum_buffer"])):
                assert value.dtype == torch.float16, (name, value.dtype)
                arrays[f"{key}/step{t}/{name}"] = value.view(torch.int16).numpy().view(
                    np.uint16).copy()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    nb = {k: v for k, v in arrays.items() if k.startswith("notebook/eps=1e-08/amsgrad=0/")}
    for k, v in nb.items():
        print(k, v.view(np.float16))
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
