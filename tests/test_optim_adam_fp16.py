"""Adam with fp16 state against PyTorch 2.13's pure-fp16 Adam (tests/data/torch/adam_fp16.npz,
recorded by tools/record_torch_adam_fp16.py): fpsim's ``state_fmt="fp16"`` computes each step
from the stored (rounded) moments, and the moments and the denominator round to fp16 at each of
their ops, as PyTorch's fp16 state tensors do. Cases: notebook 08's (gradients 1e-2 ... 1e-6,
whose squares underflow in fp16) and 256 random gradients from 1e-7 to 1, eps 1e-8 and 1e-4,
with and without amsgrad, three steps; parameter and both moments compared bit for bit after
every step; and SGD's fp16 momentum buffer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fpsim import optim
from fpsim.nn import Parameter

DATA = np.load(Path(__file__).parent / "data" / "torch" / "adam_fp16.npz")
STEPS = 3
CASES = [(case, eps, amsgrad) for case in ("notebook", "sweep") for eps in (1e-8, 1e-4)
         for amsgrad in (False, True)]


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit for bit, any NaN equal to any NaN (PyTorch's and NumPy's NaN payloads differ)."""
    fa, fb = a.view(np.float16), b.view(np.float16)
    return (a == b) | (np.isnan(fa) & np.isnan(fb))


@pytest.mark.parametrize(("case", "eps", "amsgrad"), CASES)
def test_fp16_state_matches_pytorch(case: str, eps: float, amsgrad: bool) -> None:
    grads = DATA[f"{case}/grad"].view(np.float16)
    w = Parameter(np.ones(grads.size), "fp16")
    opt = optim.Adam([w], lr=1e-3, eps=eps, amsgrad=amsgrad, state_fmt="fp16")
    key = f"{case}/eps={eps:g}/amsgrad={int(amsgrad)}"
    for t in range(1, STEPS + 1):
        w.grad = grads.copy()
        opt.step()
        st = opt.state[w]
        for name, ours in (("w", w.data), ("exp_avg", st["exp_avg"]),
                           ("exp_avg_sq", st["exp_avg_sq"])):
            theirs = DATA[f"{key}/step{t}/{name}"]
            ours = np.asarray(ours, dtype=np.float16).view(np.uint16)
            bad = ~_same(ours, theirs)
            assert not bad.any(), (f"step {t} {name}: {bad.sum()} differ, e.g. "
                                   f"{ours[bad][:4].view(np.float16)} vs "
                                   f"{theirs[bad][:4].view(np.float16)}")


def test_the_notebook_case_goes_to_minus_infinity() -> None:
    """What notebook 08 section 4 says: the weights whose g*g underflows are driven to -inf
    at the first step with eps = 1e-8, and stay finite with eps = 1e-4."""
    grads = DATA["notebook/grad"].view(np.float16)
    for eps, finite in ((1e-8, [True, False, False, False]), (1e-4, [True] * 4)):
        w = Parameter(np.ones(4), "fp16")
        opt = optim.Adam([w], lr=1e-3, eps=eps, state_fmt="fp16")
        w.grad = grads.copy()
        opt.step()
        assert np.isfinite(w.numpy(np.float64)).tolist() == finite


@pytest.mark.parametrize("dampening", [0.0, 0.5])
def test_sgd_fp16_momentum_matches_pytorch(dampening: float) -> None:
    """The same rule for SGD's momentum buffer: ``buf.mul_(momentum).add_(g, ...)`` rounds to
    fp16 at each op and the step uses the stored buffer. The buffer is compared bit for bit; the
    weight to one fp16 ulp, as PyTorch's fp16 ``param.add_(buf, alpha=-lr)`` rounds ``lr * buf``
    to fp16 before the add (1 of the 256 weights at the first step), where fpsim computes the new
    weight in float32 and rounds it once (fpsim.optim.optimizer's rule for a parameter updated
    in its own format)."""
    grads = DATA["sweep/grad"].view(np.float16)
    w = Parameter(np.ones(grads.size), "fp16")
    opt = optim.SGD([w], lr=0.1, momentum=0.9, dampening=dampening, state_fmt="fp16")
    key = f"sweep/sgd/dampening={dampening:g}"
    for t in range(1, STEPS + 1):
        w.grad = grads.copy()
        opt.step()
        ours = np.asarray(opt.state[w]["momentum_buffer"], dtype=np.float16).view(np.uint16)
        bad = ~_same(ours, DATA[f"{key}/step{t}/momentum_buffer"])
        assert not bad.any(), f"step {t}: {bad.sum()} of {bad.size} buffer values differ"
        theirs = DATA[f"{key}/step{t}/w"].view(np.float16).astype(np.float64)
        assert np.all(np.abs(w.numpy(np.float64) - theirs) <= 2.0**-10 * np.abs(theirs))
