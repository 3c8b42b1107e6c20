"""Quantize a digits classifier every way fpsim models: INT8 post-training quantization to
integer-only layers, quantization-aware training on a narrow grid, NF4 weights with a QLoRA
fine-tune, and FP8 training with delayed scaling.

The network is an MLP 64-64-10 on the UCI 8x8 digits shipped with fpsim. At 8 bits it loses
nothing to PTQ; at 3 bits ("W3A3": 3-bit weights and activations) PTQ loses several points and
QAT wins part of them back. The full comparison, with more seeds, is ``fpsim quant``.

Run: python examples/quantization_digits.py [--bits 3]
(writes fpsim-output/examples/quantization_digits.png; --out FILE changes it)
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: runs on machines without a display
import matplotlib.pyplot as plt  # noqa: E402

from fpsim import nn  # noqa: E402
from fpsim import quant as q  # noqa: E402
from fpsim.autograd import Tensor, no_grad  # noqa: E402
from fpsim.datasets import load_digits  # noqa: E402
from fpsim.quant import experiment as ex  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bits", type=int, default=3, help="bit width of the narrow setting (2-8)")
    p.add_argument("--epochs", type=int, default=20, help="fp32 training epochs")
    p.add_argument("--out", default="fpsim-output/examples/quantization_digits.png",
                   help="PNG file to write")
    args = p.parse_args(argv)
    data = load_digits()

    def acc(model, x=data.x_test):
        return ex.accuracy(model, x, data.y_test)

    net = ex.make_mlp(64, seed=0)
    ex.train(net, data.x_train, data.y_train, args.epochs, 1e-2)
    res = {"FP32": acc(net)}

    def ptq(qconfig):
        prepared = q.prepare(net, qconfig)  # observers on each layer's input and output
        with no_grad():
            for b in range(8):  # calibration batches
                prepared(Tensor(data.x_train[64 * b:64 * (b + 1)]))
        return q.convert(prepared)  # Int8Linear: int8 x int8 -> int32, TFLite requantization

    res["INT8 PTQ"] = acc(ptq(q.get_default_qconfig(8)))
    res[f"W{args.bits}A{args.bits} PTQ"] = acc(ptq(q.get_default_qconfig(args.bits)))
    qat = q.prepare_qat(net, q.get_default_qat_qconfig(args.bits))
    ex.train(qat, data.x_train, data.y_train, 5, 1e-3,
             hook=lambda ep, m: m.apply(q.disable_observer) if ep == 4 else None)
    res[f"W{args.bits}A{args.bits} QAT"] = acc(q.convert(qat))
    ctrl = copy.deepcopy(net)  # the same 5 extra epochs without quantization
    ex.train(ctrl, data.x_train, data.y_train, 5, 1e-3)
    res["FP32 +5 epochs"] = acc(ctrl)

    nf4 = nn.Sequential(q.NF4Linear.from_linear(net[0]), nn.ReLU(),
                        q.NF4Linear.from_linear(net[2]))
    res["NF4 weights"] = acc(nf4)
    fp8 = nn.Sequential(q.FP8Linear(64, 64, rng=0), nn.ReLU(), q.FP8Linear(64, 10, rng=1))
    ex.train(fp8, data.x_train, data.y_train, args.epochs, 1e-2)
    res["FP8 training"] = acc(fp8)
    for name, v in res.items():
        print(f"{name:16s} {100 * v:5.1f}%")

    # QLoRA: adapt the model to digits shifted one pixel right, with a frozen NF4 base
    xs_train, xs_test = ex.shift_images(data.x_train, 1), ex.shift_images(data.x_test, 1)
    qlora = q.prepare_qlora(net, r=8, alpha=16, rng=0)
    opt = ex.train(qlora, xs_train, data.y_train, 10, 1e-2, params=q.lora_parameters(qlora),
                   master_weights=True)
    full = copy.deepcopy(net)
    opt_full = ex.train(full, xs_train, data.y_train, 10, 1e-2)
    print(f"\nshifted digits: fp32 model {100 * acc(net, xs_test):.1f}%, full fine-tune "
          f"{100 * acc(full, xs_test):.1f}% ({q.training_memory(full, opt_full).total:,} bytes "
          f"of model states), QLoRA {100 * acc(qlora, xs_test):.1f}% "
          f"({q.training_memory(qlora, opt).total:,} bytes)")

    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.bar(list(res), [100 * v for v in res.values()], color="#0072B2")
    ax.set_ylim(min(80, 100 * min(res.values()) - 2), 100)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Digits MLP: quantized every way")
    ax.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # under the ignored fpsim-output/
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
