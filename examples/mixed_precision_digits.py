"""Mixed-precision training of a small MLP on the UCI digits, written out by hand.

Two loops, both on fpsim's autograd engine:

1. PyTorch's recipe: FP32 weights, ``autocast("fp16")`` around the forward pass and the loss,
   a ``GradScaler`` for the backward pass and the step.
2. Apex's recipe: ``fpsim.amp.initialize(model, optimizer, "O2")`` (FP16 model, FP32 master
   weights, dynamic loss scale) and ``with scale_loss(loss, optimizer)``.

Run: ``python examples/mixed_precision_digits.py`` (a few seconds). For the instrumented
five-recipe experiment, run ``fpsim demo``.
"""

from __future__ import annotations

import itertools

import numpy as np

from fpsim import nn, optim
from fpsim.amp import GradScaler, autocast, autocast_policy_table, initialize, scale_loss
from fpsim.autograd import Tensor, no_grad
from fpsim.autograd import functional as F
from fpsim.datasets import load_digits, minibatches

STEPS, BATCH = 200, 128


def make_model() -> nn.Module:
    gen = np.random.default_rng(0)
    return nn.Sequential(nn.Linear(64, 128, rng=gen), nn.ReLU(), nn.Linear(128, 10, rng=gen))


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, fp16: bool = False) -> float:
    with no_grad(), autocast("fp16", enabled=fp16):
        out = model(Tensor(x, "fp32"))
    return float(np.mean(out.numpy(np.float64).argmax(axis=1) == y))


def batches(n: int, seed: int = 0):
    """The indices of STEPS shuffled full batches of BATCH, a fresh permutation an epoch."""
    epochs = -(-STEPS // (n // BATCH))  # enough epochs for STEPS batches
    return itertools.islice((idx for _, idx in minibatches(n, BATCH, epochs, rng=seed)), STEPS)


def pytorch_style(data) -> None:
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = GradScaler(growth_interval=50)
    for idx in batches(len(data.x_train)):
        opt.zero_grad()
        with autocast("fp16"):  # matmuls in fp16, softmax / loss in fp32
            logits = model(Tensor(data.x_train[idx], "fp32"))
            loss = F.cross_entropy(logits, data.y_train[idx])
        scaler.scale(loss).backward()  # gradients flow back through the fp16 casts
        scaler.step(opt)  # unscales in fp32; skips the step on inf/NaN
        scaler.update()
    skipped = sum(h["skipped"] for h in scaler.history)
    print(f"autocast + GradScaler: logits {logits.fmt.name}, loss {loss.fmt.name}, "
          f"test accuracy {100 * accuracy(model, data.x_test, data.y_test, True):.2f}%, "
          f"final scale {scaler.get_scale():g}, {skipped} skipped steps")


def apex_style(data) -> None:
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = initialize(model, opt, opt_level="O2", scale_window=50)
    for idx in batches(len(data.x_train)):
        opt.zero_grad()
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        with scale_loss(loss, opt) as scaled:
            scaled.backward()
        opt.step()
    w = model[0].weight
    print(f"Apex O2: weights {w.fmt.name}, master copy "
          f"{opt.state[w]['master'].dtype}, test accuracy "
          f"{100 * accuracy(model, data.x_test, data.y_test):.2f}%, final scale "
          f"{opt.scaler.get_scale():g}, {opt.skipped_steps} skipped steps")


if __name__ == "__main__":
    print(autocast_policy_table())
    print()
    digits = load_digits()
    pytorch_style(digits)
    apex_style(digits)
