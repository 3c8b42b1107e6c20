"""The sweep behind docs/mx.md's "Where FP4 fails" section: NVFP4 training of the digits MLP
with each piece of NVIDIA's recipe alone and together, against BF16, over several seeds and
configurations chosen for a stated reason (each one stresses the mechanism one piece of the
recipe addresses). Prints test accuracy and final training loss per seed.

    python docs/mx/fp4_sweep.py            # every configuration (about 20 min on 2 busy cores)
    python docs/mx/fp4_sweep.py base deep  # some of them

Configurations (Adam, lr 1e-2, batch 64, 12 epochs unless said):

- base: the ``fpsim quant`` network, 64-64-10.
- fullbatch: the whole training set as one batch (300 steps): the weight-gradient GEMM reduces
  over 1,347 samples, so a rounding bias that does not average out has the most room to act
  (stochastic rounding's case), and near the optimum the true gradient is small beside the
  per-sample terms.
- noise30: 30 % of the training labels replaced at random: the largest per-sample gradients
  come from mislabelled images, and round to nearest keeps, in each 16-sample block, only the
  samples within 24x of the block's largest (stochastic rounding's case).
- deep: 64-64-64-64-64-10: errors compound through four data-gradient GEMMs, and 1x16 weight
  blocks quantize the weight differently in the forward and backward passes (the 2-D weight
  blocks' case).
- h16: 64-16-10: the hidden layer is one 16-block, so its largest activation sets the scale of
  all of them (the BF16 last layer's case).
- notensorscale: base without NVFP4's fp32 per-tensor scale (e4m3 block scales only, clamped at
  2**-6): gradients of the mean-reduced loss lie below 2**-8 and round to 0 (the failure case
  that ``fpsim quant`` prints).
"""

from __future__ import annotations

import sys

import numpy as np

from fpsim import nn, optim
from fpsim.autograd import functional as F
from fpsim.autograd.tensor import Tensor
from fpsim.datasets import load_digits
from fpsim.quant import experiment as ex
from fpsim.quant.mx_layers import MXLinear

PLAIN = dict(stochastic_gradients=False, hadamard=False, weight_2d=False)
VARIANTS = {
    "BF16": None,
    "NVFP4 plain (RNE)": PLAIN,
    "+ SR gradients": dict(PLAIN, stochastic_gradients=True),
    "+ RHT wgrad": dict(PLAIN, hadamard=True),
    "+ 16x16 W blocks": dict(PLAIN, weight_2d=True),
    "+ BF16 last layer": dict(PLAIN, last_bf16=True),
    "NVFP4 recipe (all)": dict(last_bf16=True),
}
CONFIGS = {
    "base": dict(widths=(64, 64, 10), seeds=(0, 1, 2, 3, 4)),
    "fullbatch": dict(widths=(64, 64, 10), epochs=300, batch=2000, seeds=(0, 1, 2)),
    "noise30": dict(widths=(64, 64, 10), noise=0.3, seeds=(0, 1, 2, 3, 4)),
    "deep": dict(widths=(64, 64, 64, 64, 64, 10), seeds=(0, 1, 2, 3)),
    "h16": dict(widths=(64, 16, 10), seeds=(0, 1, 2, 3)),
    "notensorscale": dict(widths=(64, 64, 10), tensor_scale=False, seeds=(0, 1, 2, 3, 4)),
}


def model(widths, seed, kw, tensor_scale=True):
    n = len(widths) - 1
    layers = []
    for i in range(n):
        last = i == n - 1
        if kw is None:
            layers.append(nn.Linear(widths[i], widths[i + 1], rng=seed + 1000 * i).to("bf16"))
        elif last and kw.get("last_bf16"):
            layers += [ex.ToFormat("bf16"),
                       nn.Linear(widths[i], widths[i + 1], rng=seed + 1000 * i).to("bf16")]
        else:
            mk = {k: v for k, v in kw.items() if k != "last_bf16"}
            if not tensor_scale:
                mk["tensor_scale"] = False
            layers.append(MXLinear(widths[i], widths[i + 1], recipe="nvfp4",
                                   rng=seed + 1000 * i, **mk))
        if not last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def run(cfg, kw, seed, data):
    m = model(cfg["widths"], seed, kw, cfg.get("tensor_scale", True))
    opt = optim.Adam(list(m.parameters()), lr=1e-2, master_weights=kw is None)
    y = np.array(data.y_train)
    if cfg.get("noise"):
        r = np.random.default_rng(100 + seed)
        flip = r.random(len(y)) < cfg["noise"]
        y[flip] = r.integers(0, 10, int(flip.sum()))
    x, n, bs = data.x_train, len(data.x_train), cfg.get("batch", 64)
    m.train()
    for ep in range(cfg.get("epochs", 12)):
        order = np.random.default_rng(seed * 1000 + ep).permutation(n)
        total = 0.0
        for i in range(0, n, bs):
            idx = order[i:i + bs]
            loss = F.cross_entropy(m(Tensor(x[idx], ex._input_format(m))), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.numpy(np.float64)) * len(idx)
    return ex.accuracy(m, data.x_test, data.y_test), total / n


def main(names):
    data = load_digits()
    for name in names:
        cfg = CONFIGS[name]
        print(f"{name}: widths {cfg['widths']}, seeds {cfg['seeds']}", flush=True)
        for label, kw in VARIANTS.items():
            res = [run(cfg, kw, s, data) for s in cfg["seeds"]]
            acc = np.array([a for a, _ in res]) * 100
            print(f"  {label:20s} acc {acc.mean():5.1f} (min {acc.min():5.1f})  per seed "
                  + " ".join(f"{a:5.1f}" for a in acc)
                  + "   final train loss " + " ".join(f"{v:.4f}" for _, v in res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(CONFIGS))
