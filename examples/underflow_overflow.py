"""Underflow and overflow experiments after Micikevicius et al. (2018): the plain-script
version of fpsim/course_notebooks/02_underflow_and_overflow.ipynb.

1. fp16's limits (2**-24, 65504, 65520) rounded exactly, with their IEEE flags.
2. The 2048 rule: w + u in fp16 loses the update u when it is at most half an ulp of w
   (ties to even); the share of updates lost against |u| / |w| for fp16, bf16 and fp32.
3. A real training run: an MLP 64-64-64-10 (ReLU) on the shipped digits, trained in fp32
   with SGD (lr 0.1, momentum 0.9, batches of 64, cross-entropy averaged over the batch);
   the gradients of every weight matrix and layer output at every step, their share that
   fp16 flushes to zero or holds as subnormals, and their exponent histograms against
   fp16's range.
4. Loss scales of 1, 8, 128, 2**16 (and larger): the share flushed to zero and overflowing.
5. The same network in fp16 with fp32 master weights and PyTorch's GradScaler
   (growth_interval 20, to see growth and backoff): the loss-scale trajectory.

Run: python examples/underflow_overflow.py [--out fpsim-output/examples] [--epochs 15]
Writes underflow_overflow_{lost_updates, gradient_histograms, underflow_per_epoch, loss_scales,
grad_scaler}.png into --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import fpsim
from fpsim import amp, optim
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F
from fpsim.datasets import Split, load_digits, minibatches
from fpsim.quant.experiment import accuracy  # top-1, inputs in the model's format
from fpsim.training import MLP
from fpsim.viz import style
from fpsim.viz.training import (
    gradient_exponent_histogram,
    gradient_histogram_grid,
    loss_curves,
    loss_scale_trajectory,
)


def digits_mlp(seed: int = 0) -> MLP:
    """The demo's MLP (fpsim.training.MLP) as 64-64-64-10, layer i initialised from seed + i;
    after each forward ``activations`` holds every Linear layer's output, gradient retained."""
    return MLP((64, 64, 64, 10), layer_seeds=range(seed, seed + 3))


# ------------------------------------------------------------------------------ 1 and 2
def fp16_limits() -> None:
    cases = {"2**-24": 2.0**-24, "2**-25 (tie)": 2.0**-25, "3 * 2**-26": 3 * 2.0**-26,
             "1e-8": 1e-8, "65504": 65504.0, "65519": 65519.0, "65520 (tie)": 65520.0}
    values, flags = fpsim.round(list(cases.values()), "fp16", flags=True)
    print("fp16 rounding (nearest even):")
    for (label, _), v, fl in zip(cases.items(), values, flags, strict=True):
        print(f"  {label:13s} -> {float(v)!r:<23} {fpsim.Flags(int(fl))!r}")


def lost_update_table() -> None:
    updates = {"+ (2**-11 - 2**-21)": 2.0**-11 - 2.0**-21, "+ 2**-11 (tie)": 2.0**-11,
               "+ (2**-11 + 2**-21)": 2.0**-11 + 2.0**-21, "- 2**-12 (tie)": -(2.0**-12),
               "- (2**-12 + 2**-22)": -(2.0**-12 + 2.0**-22)}
    print("\nthe 2048 rule: w = 1 in fp16")
    for label, u in updates.items():
        new = float(fpsim.add(1.0, u, "fp16"))
        print(f"  1 {label:19s} -> {new!r:<16} {'LOST' if new == 1.0 else 'kept'}")
    r = amp.lost_updates(np.ones(len(updates)), np.array(list(updates.values())), "fp16")
    print(f"  amp.lost_updates: {r.lost} of {r.nonzero} lost")


def lost_update_figure() -> style.Figure:
    rng = np.random.default_rng(0)
    ks = np.arange(-30.0, -4.0, 0.25)
    with style.context():
        fig, ax = style.new_figure((8, 3.6))
        for name in ("fp32", "bf16", "fp16"):
            w = fpsim.round(np.exp2(rng.uniform(-8, 4, 4000)), name)
            sign = rng.choice([-1.0, 1.0], w.size)
            lost = [amp.lost_updates(w, sign * np.exp2(k) * w, name).fraction for k in ks]
            ax.plot(ks, lost, color=style.format_color(name), lw=2,
                    label=style.format_label(name))
            m = fpsim.get_format(name).mantissa_bits
            ax.axvline(-(m + 1), color=style.format_color(name), lw=0.8, ls=":")
        ax.set_xticks(range(-30, -3, 2), [style.pow2_label(k) for k in range(-30, -3, 2)])
        ax.set_xlabel("|update| / |weight|")
        ax.set_ylabel("share of updates lost")
        ax.set_title("w + u rounded to the weight's format (4000 random weights)", loc="left")
        ax.legend(loc="upper right")
    return fig


# ------------------------------------------------------------------------------ 3 and 4
def record_fp32_run(data: Split, epochs: int):
    """Train in fp32; return per-step gradients {name: array}, the epoch of each step, the
    batch losses and the model."""
    model = digits_mlp()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    record, epoch_of, losses = [], [], []
    for epoch, idx in minibatches(len(data.x_train), 64, epochs, rng=0):
        opt.zero_grad()
        loss = F.cross_entropy(model(Tensor(data.x_train[idx])), data.y_train[idx])
        loss.backward()
        g = {f"{k} output": model.activations[k].grad.copy() for k in model.names}
        g |= {f"{k} weight": getattr(model, k).weight.grad.copy() for k in model.names}
        record.append(g)
        epoch_of.append(epoch)
        losses.append(loss.item())
        opt.step()
    return record, np.array(epoch_of), np.array(losses), model


def underflow_per_epoch_figure(record, epoch_of) -> style.Figure:
    with style.context():
        fig, ax = style.new_figure((8, 3.4))
        for name in record[0]:
            per_epoch = [amp.underflow_stats(np.concatenate(
                [r[name].ravel() for r, e in zip(record, epoch_of, strict=True) if e == ep]),
                "fp16").fraction for ep in range(epoch_of.max() + 1)]
            ax.plot(np.arange(1, len(per_epoch) + 1), per_epoch,
                    "-" if "output" in name else "--", marker="o", ms=3, label=name)
        ax.set_xlabel("epoch")
        ax.set_ylabel("share flushed to 0 in fp16")
        ax.set_title("Non-zero fp32 gradients that fp16 would lose, per epoch", loc="left")
        ax.legend(ncols=2, fontsize=8)
    return fig


def loss_scale_figure(pooled: np.ndarray) -> style.Figure:
    with style.context():
        fig, axes = style.new_figure((9, 8), nrows=4, sharex=True, sharey=True)
        h = amp.exponent_histogram(pooled)
        for ax, k in zip(axes, (0, 3, 7, 16), strict=True):
            s = amp.underflow_stats(pooled * 2.0**k, "fp16")  # x 2**k is exact in float64
            gradient_exponent_histogram(
                [h, amp.exponent_histogram(pooled * 2.0**k)], "fp16", ax=ax, shift=k,
                labels=["gradient", f"2**{k} x gradient"],
                title=f"S = 2**{k}: {s.fraction:.1%} flushed to 0, "
                      f"{s.subnormal_fraction:.1%} subnormal, {s.overflowed} overflow")
            ax.set_ylabel("share")
        for ax in axes[1:]:
            ax.get_legend().remove()  # the key once (the shares are in the titles)
        for ax in axes[:-1]:
            ax.set_xlabel("")
    return fig


# ------------------------------------------------------------------------------------ 5
def train_fp16_scaled(data: Split, epochs: int, scaler):
    """fp16 model, fp32 master weights, a loss scaler; returns (losses, history, accuracy)."""
    model = digits_mlp().to("fp16")
    params = list(model.parameters())
    opt = optim.SGD(params, lr=0.1, momentum=0.9, master_weights=True)
    losses = []
    for _, idx in minibatches(len(data.x_train), 64, epochs, rng=0):  # fp32 run's batches
        opt.zero_grad()
        for p in params:
            p.grad_fmt = None  # fp16 gradients in backward
        logits = model(Tensor(data.x_train[idx], "fp16"))
        loss = F.cross_entropy(logits.to("fp32"), data.y_train[idx])  # fp32 loss: S * loss fits
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected, and caught
            scaler.scale(loss).backward()
        for p in params:
            p.grad_fmt = "fp32"  # fp32 master gradients (GradScaler refuses fp16 ones)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return np.array(losses), scaler.history, accuracy(model, data.x_test, data.y_test)


def grad_scaler_figure(history, losses16, losses32, growth_interval: int) -> style.Figure:
    # fpsim.viz.training draws runs of the training demo: anything with these attributes
    fp16 = SimpleNamespace(precision="mixed-fp16", step_loss=losses16,
                           step_scale=np.array([h["scale"] for h in history]),
                           step_skipped=np.array([h["skipped"] for h in history]))
    fp32 = SimpleNamespace(precision="fp32", step_loss=losses32)
    with style.context():
        fig, (ax1, ax2) = style.new_figure((9, 5.2), nrows=2, sharex=True,
                                           height_ratios=[3, 2])
        loss_scale_trajectory([fp16], ax=ax1)
        ax1.set_title(f"GradScaler(init_scale=2**16, growth_interval={growth_interval}) on "
                      "fp16 training", fontsize=10)
        ax1.set_xlabel("")
        loss_curves([fp32, fp16], smooth=1, ax=ax2, title="")
        ax2.set_ylabel("batch loss")
    return fig


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="fpsim-output/examples", help="folder for the figures "
                   "(default ./fpsim-output)")
    p.add_argument("--epochs", type=int, default=15, help="training epochs (default 15)")
    p.add_argument("--growth-interval", type=int, default=20,
                   help="GradScaler's growth_interval (default 20; PyTorch's is 2000)")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.growth_interval < 1:
        p.error("--epochs and --growth-interval must be positive")
    out = Path(args.out)
    t0 = time.perf_counter()

    fp16_limits()
    lost_update_table()
    written = [style.save_figure(lost_update_figure(), out / "underflow_overflow_lost_updates.png")]

    data = load_digits()
    record, epoch_of, losses32, model = record_fp32_run(data, args.epochs)
    print(f"\nfp32 training: {len(record)} steps, test accuracy "
          f"{accuracy(model, data.x_test, data.y_test):.3f}")
    grads = {name: np.concatenate([g[name].ravel() for g in record]).astype(np.float64)
             for name in record[0]}
    print(f"  {'gradient of':12s} {'values':>9s} {'exact zero':>11s} {'-> 0 in fp16':>13s} "
          f"{'subnormal':>10s} {'largest':>9s}")
    for name, g in grads.items():
        s = amp.underflow_stats(g, "fp16")
        print(f"  {name:12s} {g.size:9d} {np.mean(g == 0):11.1%} {s.fraction:13.1%} "
              f"{s.subnormal_fraction:10.1%} {np.abs(g).max():9.2e}")
    title = f"Gradients of {len(record)} fp32 training steps against fp16's range"
    written.append(style.save_figure(gradient_histogram_grid(grads, "fp16", title=title),
                                     out / "underflow_overflow_gradient_histograms.png"))
    written.append(style.save_figure(underflow_per_epoch_figure(record, epoch_of),
                                     out / "underflow_overflow_underflow_per_epoch.png"))

    pooled = np.concatenate(list(grads.values()))
    print(f"\nloss scaling of all {pooled.size} recorded values (largest "
          f"{np.abs(pooled).max():.3f}):")
    print(f"  {'scale S':>8s} {'-> 0':>8s} {'subnormal':>10s} {'overflow':>9s}")
    for k in (0, 3, 7, 10, 13, 16, 17, 18, 20):
        s = amp.underflow_stats(pooled * 2.0**k, "fp16")
        print(f"  {'2**' + str(k):>8s} {s.fraction:8.2%} {s.subnormal_fraction:10.2%} "
              f"{s.overflow_fraction:9.4%}")
    written.append(style.save_figure(loss_scale_figure(pooled),
                                     out / "underflow_overflow_loss_scales.png"))

    scaler = amp.GradScaler(init_scale=2.0**16, growth_interval=args.growth_interval)
    losses16, history, acc16 = train_fp16_scaled(data, args.epochs, scaler)
    skipped = sum(h["skipped"] for h in history)
    print(f"\nfp16 + fp32 master weights + GradScaler(growth_interval={args.growth_interval}): "
          f"{skipped} of {len(history)} steps skipped, final scale "
          f"2**{np.log2(history[-1]['new_scale']):.0f}, test accuracy {acc16:.3f}")
    written.append(style.save_figure(grad_scaler_figure(history, losses16, losses32,
                                                        args.growth_interval),
                                     out / "underflow_overflow_grad_scaler.png"))
    print("\nwrote " + ", ".join(str(w) for w in written) +
          f" ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
