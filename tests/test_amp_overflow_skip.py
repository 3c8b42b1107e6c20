"""Which loss scalers skip a step whose gradients hold inf or NaN, as a class: every scaler,
static and dynamic, fp32 / bf16 / fp16 gradients, +inf / -inf / NaN.

The expected rule of each scaler is its reference's, read from the reference's source:

- PyTorch ``torch.amp.GradScaler`` (torch/amp/grad_scaler.py): ``step`` skips whenever
  ``found_inf`` and ``update`` multiplies the scale by ``backoff_factor``; there is no static
  mode (a huge ``growth_interval`` stops the growth, not the skipping or the backoff).
  fp32 gradients with inf / -inf / NaN are also recorded from PyTorch in
  tests/data/torch/reference.npz (tests/test_torch_reference.py).
- NVIDIA Apex ``apex.amp`` (apex/amp/scaler.py at 6729b2b, the last commit before amp was
  removed): ``unscale_python`` passes ``check_overflow=self.dynamic`` and ``update_scale``
  sets ``should_skip = True`` only ``if self._has_overflow and self.dynamic``: a static
  ``loss_scale`` never checks and never skips, and the inf / NaN reach the weights (as the
  older ``apex.fp16_utils.LossScaler``, whose ``has_overflow`` returns False).
- DeepSpeed's ``DynamicLossScaler`` (deepspeed/runtime/fp16/loss_scaler.py): every overflow
  skips the step (the hysteresis only delays the halving).
- fpsim's ``StaticLossScaler``: skips by default (Micikevicius et al. 2018 skip an
  overflowing step); ``skip_on_overflow=False`` is Apex's static scale.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

from fpsim import nn, optim
from fpsim.amp import (
    ApexLossScaler,
    DynamicLossScaler,
    GradScaler,
    StaticLossScaler,
    initialize,
    scale_loss,
)
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F

# name -> (constructor, skips on inf/NaN, accepts fp16 gradients, scale after a bad step)
SCALERS = {
    "GradScaler": (lambda: GradScaler(init_scale=2.0**10), True, False, 2.0**9),
    "GradScaler, no growth": (lambda: GradScaler(init_scale=2.0**10, growth_interval=10**9),
                              True, False, 2.0**9),
    "StaticLossScaler": (lambda: StaticLossScaler(2.0**10), True, False, 2.0**10),
    "StaticLossScaler, Apex": (lambda: StaticLossScaler(2.0**10, skip_on_overflow=False),
                               False, False, 2.0**10),
    "ApexLossScaler dynamic": (lambda: ApexLossScaler("dynamic", init_scale=2.0**10),
                               True, True, 2.0**9),
    "ApexLossScaler static": (lambda: ApexLossScaler(2.0**10), False, True, 2.0**10),
    "DeepSpeed": (lambda: DynamicLossScaler(init_scale=2.0**10, hysteresis=1), True, False,
                  2.0**9),
}
DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}
BAD = {"+inf": np.inf, "-inf": -np.inf, "nan": np.nan}


class Param:
    def __init__(self, grad):
        self.grad = grad
        self.data = np.zeros(3)


class Opt:
    """Applies w -= g, so a step that was not skipped carries the inf / NaN into w."""

    def __init__(self, p):
        self.param_groups = [{"params": [p]}]

    def step(self):
        p = self.param_groups[0]["params"][0]
        p.data = p.data - np.asarray(p.grad, np.float64)
        return "stepped"


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(SCALERS))
def test_skip_rule(name, dtype, bad):
    make, skips, takes_fp16, after = SCALERS[name]
    s = make()
    s.scale(np.float32(1.0))
    g = np.array([2.0**10, BAD[bad], -2.0**11], np.float64).astype(DTYPES[dtype])
    p = Param(g)
    opt = Opt(p)
    if dtype == "fp16" and not takes_fp16:  # GradScaler's interface: fp32 masters only
        with pytest.raises(ValueError, match="FP16"):
            s.step(opt)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Apex's "not fp32" warning
        ret = s.step(opt)
    s.update()
    h = s.history[-1]
    assert h["found_inf"] is True  # every scaler sees the inf / NaN (Apex's static records it)
    assert h["skipped"] is skips and (ret is None) is skips
    if skips:
        assert np.array_equal(p.data, np.zeros(3))  # the weights are untouched
    else:
        assert not np.isfinite(p.data[1]) and np.isfinite(p.data[[0, 2]]).all()
    assert s.get_scale() == after
    # the finite gradients were unscaled all the same: 2**10 / 2**10 = 1
    assert float(np.asarray(p.grad)[0]) == 1.0


def _o2(loss_scale, dtype="fp16"):
    model = nn.Linear(2, 1, rng=0)
    model, opt = initialize(model, optim.SGD(model.parameters(), lr=0.1), "O2",
                            loss_scale=loss_scale, dtype=dtype)
    return model, opt


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("loss_scale, skips", [("dynamic", True), (2.0**40, False)])
def test_amp_o2_overflow(loss_scale, skips, dtype):
    """Through initialize / scale_loss: a loss scale that overflows the low format. bf16
    reaches 2^127, so only an inf loss overflows it: the loss is multiplied by inf there."""
    model, opt = _o2(loss_scale, dtype)
    before = [p.numpy(np.float64).copy() for p in model.parameters()]
    x = Tensor(np.array([[3.0e4, 1.0]], np.float32))
    loss = F.sum(model(x))
    if dtype == "bf16":
        loss = loss * np.inf
    with np.errstate(over="ignore", invalid="ignore"), scale_loss(loss, opt) as scaled:
        scaled.backward()
    with np.errstate(over="ignore", invalid="ignore"):
        opt.step()
    after = [p.numpy(np.float64) for p in model.parameters()]
    assert opt.last_step_skipped is skips and opt.skipped_steps == int(skips)
    if skips:
        assert all(np.array_equal(a, b) for a, b in zip(after, before, strict=True))
        assert opt.scaler.get_scale() == 2.0**15  # Apex's dynamic scale halves from 2^16
    else:  # Apex's static scale: no check, no skip, the weights are no longer finite
        assert not all(np.isfinite(a).all() for a in after)
        assert opt.scaler.get_scale() == 2.0**40


def test_train_with_an_overflowing_static_scale_says_why(capsys):
    """``fpsim train --loss-scale 2^40`` (Apex's static scale): the overflowing steps are
    counted, none is skipped, and the CLI names the reason under the table; a dynamic scale
    on the same run skips them."""
    import argparse

    from fpsim.cli import train as cli

    p = argparse.ArgumentParser()
    cli.configure_parser(p)
    common = ["--precision", "fp16-master", "--steps", "3", "--hidden", "16", "--no-progress",
              "--no-plots"]
    with np.errstate(over="ignore", invalid="ignore"):
        assert cli.run_cli(p.parse_args([*common, "--loss-scale", str(2.0**40)])) == 0
    out = capsys.readouterr().out
    assert "note: fp16-master: 3 steps had inf/NaN gradients and none was skipped" in out
    with np.errstate(over="ignore", invalid="ignore"):
        assert cli.run_cli(p.parse_args([*common, "--loss-scale", "dynamic"])) == 0
    assert "note:" not in capsys.readouterr().out
