# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Underflow and overflow: experiments after Micikevicius et al. (2018)
#
# *Mixed Precision Training* (Micikevicius et al., ICLR 2018) made fp16 training work with three
# techniques: an **fp32 master copy of the weights**, **loss scaling**, and fp16 products
# accumulated in fp32. The first two exist because of the two ends of fp16's range: updates too
# small for the weights they are added to, and gradients too small (or, after scaling, too
# large) for the format. This notebook measures both on a real, small training run, with
# `fpsim`'s exact rounding.
#
# **Learning goals.** After this notebook you can
#
# 1. state fp16's limits exactly ($2^{-24}$, $2^{-14}$, 65504, 65520) and the IEEE flags they
#    raise;
# 2. explain the "2048 rule": predict whether $w + u$ in fp16 loses the update $u$, ties
#    included;
# 3. record the gradients of a training run (weights and activations) and read their exponent
#    histogram against fp16's subnormal, normal and overflow ranges;
# 4. choose a loss scale: what share of the gradients it rescues from underflow and when it
#    overflows;
# 5. follow what PyTorch's dynamic `GradScaler` does: growth, backoff and skipped steps.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.

# %%
import time
from types import SimpleNamespace

import numpy as np

import fpsim
from fpsim import amp, optim
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F
from fpsim.course import checker
from fpsim.datasets import load_digits, minibatches
from fpsim.quant.experiment import accuracy  # top-1 accuracy of a model on (x, y)
from fpsim.viz import style  # fpsim's colours and helpers; figures are plain matplotlib
from fpsim.viz.training import (
    gradient_exponent_histogram,
    gradient_histogram_grid,
    loss_curves,
    loss_scale_trajectory,
)

check = checker("02")  # check("question", answer) says right or wrong, never the answer
print("fpsim", fpsim.__version__)

# %% [markdown]
# **Predict first.** fp16's smallest positive number is $2^{-24}$. What does rounding
# $2^{-25}$, exactly half of it, to fp16 give? Enter your prediction, then read on.

# %% tags=["solution"]
check("fp16(2**-25)", float(fpsim.round(2**-25, "fp16")))

# %% [markdown]
# ## 1 · fp16's limits, exactly
#
# fp16 has 5 exponent bits and 10 mantissa bits: normal numbers from $2^{-14}$ to
# $65504 = (2 - 2^{-10}) \cdot 2^{15}$, subnormals down to $2^{-24}$. Rounding to nearest even
# decides the borderline cases: $2^{-25}$ lies exactly half way between 0 and $2^{-24}$ and
# goes to the even neighbour, 0; $65520$ lies half way between 65504 (significand
# $1.1111111111_2$, odd) and $2^{16}$ (significand $1.0$, even, in the next binade), so ties to
# even picks $2^{16}$; that value is beyond fp16's range, so the result overflows to infinity.
# (Were 65504's significand the even one, 65520 would round down to it.)

# %%
f16 = fpsim.FP16
print(f"smallest subnormal {f16.smallest_subnormal!r} = 2**-24, smallest normal "
      f"{f16.smallest_normal!r} = 2**-14, max {f16.max!r}, eps {f16.eps!r} = 2**-10")
cases = {
    "2**-24": 2.0**-24, "2**-25 (tie)": 2.0**-25, "2**-25 + 2**-40": 2.0**-25 + 2.0**-40,
    "3 * 2**-26": 3 * 2.0**-26, "1e-8": 1e-8, "2**-14 + 2**-30": 2.0**-14 + 2.0**-30,
    "65504": 65504.0, "65519": 65519.0, "65520 (tie)": 65520.0, "1e5": 1e5,
}
values, flags = fpsim.round(list(cases.values()), f16, flags=True)
for (label, _x), v, fl in zip(cases.items(), values, flags, strict=True):
    print(f"{label:17s} -> {float(v)!r:<23} {fpsim.Flags(int(fl))!r}")

# %% [markdown]
# Tiny results raise UNDERFLOW (with INEXACT) whether they become 0 or a subnormal; $2^{-24}$
# itself is exact and raises nothing. $2^{-14} + 2^{-30}$ is normal but inexact. In training the
# danger is silent: an underflowed gradient is a plain zero and no error is reported.
#
# ## 2 · The 2048 rule: when a weight update is lost
#
# An optimizer adds an update $u$ (learning rate × gradient) to a weight $w$. If $w$ is stored in
# fp16, $w + u$ is rounded to fp16. Near $w = 1$ the fp16 numbers are $2^{-10}$ apart, so any
# update of at most half that spacing, $2^{-11} = 1/2048$, rounds back to $w$: the update is
# **lost**. Micikevicius et al.: an update is lost when the weight is 2048 times larger than
# it. `fpsim.add` rounds the exact sum once; `amp.lost_updates` counts the lost ones.

# %%
updates = {
    "2**-11 - 2**-21 (just below half an ulp)": 2.0**-11 - 2.0**-21,
    "2**-11 (exactly half an ulp: a tie)": 2.0**-11,
    "2**-11 + 2**-21 (just above)": 2.0**-11 + 2.0**-21,
    "2**-10 (one ulp)": 2.0**-10,
    "-2**-12 (below 1 the spacing halves: a tie)": -(2.0**-12),
    "-(2**-12 + 2**-22) (just past that tie)": -(2.0**-12 + 2.0**-22),
}
w = 1.0
for label, u in updates.items():
    new = float(fpsim.add(w, u, "fp16"))
    print(f"w = 1, u = {label:44s} -> {new!r:<20} {'LOST' if new == w else 'kept'}")
r = amp.lost_updates(np.full(len(updates), w), np.array(list(updates.values())), "fp16")
print(f"amp.lost_updates: {r.lost} of {r.nonzero} non-zero updates lost")

# %% [markdown]
# The tie is lost because 1 is the *even* neighbour. On an odd weight the same tie goes the
# other way, and the update is **doubled**:

# %%
w_odd = 1 + 2.0**-10  # last mantissa bit 1
print(f"{w_odd!r} + 2**-11 -> {float(fpsim.add(w_odd, 2.0**-11, 'fp16'))!r}  "
      f"(= w + 2**-10: twice the update)")

# %% [markdown]
# In general, for $|w|$ in the binade $[2^e, 2^{e+1})$ an update is lost when
# $|u| \le 2^{e-11}$ (half an ulp; ties to even). Measured as the ratio $|u| / |w|$: every
# update below $2^{-12}\,|w|$ is lost, every update above $2^{-11}\,|w|$ is kept, and in between
# it depends on where $w$ sits in its binade ("2048" is the worst case, a weight at the bottom of
# its binade). The same holds for every format with $2^{-(M+1)}$ and $2^{-(M+2)}$, $M$ the
# mantissa bits: bf16 loses updates 256 times smaller than the weight, fp32 only below
# $2^{-24}$.

# %%
rng = np.random.default_rng(0)
ks = np.arange(-30.0, -4.0, 0.25)          # log2 of the ratio |u| / |w|
fig, ax = style.new_figure((8, 3.6))
for name in ("fp32", "bf16", "fp16"):
    w = fpsim.round(np.exp2(rng.uniform(-8, 4, 4000)), name)  # weights over 12 binades
    sign = rng.choice([-1.0, 1.0], w.size)
    lost = [amp.lost_updates(w, sign * np.exp2(k) * w, name).fraction for k in ks]
    ax.plot(ks, lost, color=style.format_color(name), lw=2, label=style.format_label(name))
    m = fpsim.get_format(name).mantissa_bits
    ax.axvline(-(m + 1), color=style.format_color(name), lw=0.8, ls=":")
ax.set_xticks(range(-30, -3, 2), [style.pow2_label(k) for k in range(-30, -3, 2)])
ax.set_xlabel("|update| / |weight|")
ax.set_ylabel("share of updates lost")
ax.set_title("w + u rounded to the weight's format (4000 random weights; dotted: "
             "2**-(M+1))", loc="left")
ax.legend(loc="upper right")
fig

# %% [markdown]
# *What to see:* each format loses every update below 2^-(M+2) of the weight and keeps every one
# above 2^-(M+1) (dotted); fp16's cliff is at 2^-11 = 1/2048, bf16's at 2^-8, fp32's at 2^-24.

# %% [markdown]
# This is why the paper keeps an **fp32 master copy** of the weights: the update is computed and
# applied in fp32, where it survives down to $2^{-24}$ of the weight, and the fp16 copy used by
# the forward and backward passes is refreshed from it after every step
# (`fpsim.optim.SGD(..., master_weights=True)` does exactly that).
#
# ### Exercise 1
#
# For the fp16 weights $w = 0.1$ (rounded to fp16), $3$ and $2048$, find the smallest positive
# fp16 update $u$ for which `fpsim.add(w, u, "fp16")` differs from $w$. (*Hint:* `fpsim.ulp`,
# `fpsim.next_up`, and mind the ties.) What does $2048 + 1$ give in fp16? Check it with
# `check("fp16 2048 + 1", ...)`.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
for w in (float(fpsim.round(0.1, "fp16")), 3.0, 2048.0):
    half = float(fpsim.ulp(w, "fp16")) / 2
    # a tie rounds to even: it changes w only when w's last mantissa bit is 1 (w is odd)
    u = half if fpsim.add(w, half, "fp16") != w else float(fpsim.next_up(half, "fp16"))
    print(f"w = {w!r}: half an ulp = {half!r}; smallest update that changes w: {u!r} "
          f"(w/u = {w / u:.0f}) -> {float(fpsim.add(w, u, 'fp16'))!r}")
print("2048 + 1 in fp16:", float(fpsim.add(2048.0, 1.0, "fp16")))  # a tie: 2048 is even

# %% tags=["solution"]
check("fp16 2048 + 1", float(fpsim.add(2048.0, 1.0, "fp16")))

# %% [markdown]
# ### Exercise 2
#
# Stochastic rounding rounds up with probability proportional to the distance, so *on
# average* no update is lost. Add $u = 2^{-13}$ (a quarter of the lost threshold) to 200
# independent fp16 weights $w = 1$, 1000 times, once with round-to-nearest and once with
# `"stochastic"` (`fpsim.add(..., rng=...)`). Compare the mean final weight with the exact
# $1 + 1000 \cdot 2^{-13}$.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
u, steps = 2.0**-13, 1000
rng = np.random.default_rng(1)
w_rne = np.ones(200)
w_sr = np.ones(200)
for _ in range(steps):
    w_rne = fpsim.add(w_rne, u, "fp16")
    w_sr = fpsim.add(w_sr, u, "fp16", "stochastic", rng=rng)
print(f"exact {1 + steps * u:.5f}; round to nearest {w_rne.mean():.5f}; "
      f"stochastic mean {w_sr.mean():.5f} (std {w_sr.std():.5f} over 200 weights)")


# %% [markdown]
# ## 3 · The gradients of a real training run
#
# Now the other end: gradients too small for fp16. We train a small network **in fp32** and
# record every gradient fp16 would have to hold. What we chose, and why:
#
# - **Model**: a multilayer perceptron 64 → 64 → 64 → 10 with ReLU (PyTorch's default
#   initialisation) on the 8×8 digits shipped with fpsim (the training split, printed below).
# - **Loss**: cross-entropy averaged over the batch of 64 (`reduction="mean"`, PyTorch's
#   default). The mean divides every gradient by 64, six binades lower than a summed loss, which
#   is what makes small gradients appear in a network this small.
# - **Optimizer**: SGD, learning rate 0.1, momentum 0.9, for 15 epochs (the run prints its
#   number of steps): long enough for the network to become confident, which is when its
#   gradients shrink.
# - **Recorded at every step**: the gradients of the three weight matrices (`.grad`) and of the
#   three layer outputs (pre-activations and logits, kept with `retain_grad()`): the
#   *activation gradients* that backpropagation passes from layer to layer.

# %%
from fpsim.training import MLP  # the demo's MLP: Linear -> ReLU -> ... -> Linear


def digits_mlp():
    """64 pixels -> 10 classes, PyTorch's default initialisation (layer i from seed i). After
    each forward, `activations` holds every Linear layer's output; their gradients are kept by
    retain_grad() (backpropagation's activation gradients)."""
    return MLP((64, 64, 64, 10), layer_seeds=(0, 1, 2))


data = load_digits()  # 64 features in [0, 1]
print(f"digits: {len(data.x_train):,} training and {len(data.x_test):,} test images "
      "(load_digits() holds out a quarter)")


# minibatches(n, 64, epochs) yields (epoch, indices): every epoch a fresh shuffle of the n
# training images cut into batches of 64 (the last partial batch dropped), from one seeded
# generator, so a second run with rng=0 sees the same batches. accuracy(model, x, y): the share
# of images whose largest logit is the right class (inputs in the model's format, no graph).
t0 = time.perf_counter()
model = digits_mlp()
opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
record, epoch_of, fp32_loss = [], [], []
for epoch, idx in minibatches(len(data.x_train), 64, epochs=15, rng=0):
    opt.zero_grad()
    loss = F.cross_entropy(model(Tensor(data.x_train[idx])), data.y_train[idx])
    loss.backward()
    g = {f"{k} output": model.activations[k].grad.copy() for k in model.names}
    g |= {f"{k} weight": getattr(model, k).weight.grad.copy() for k in model.names}
    record.append(g)
    epoch_of.append(epoch)
    fp32_loss.append(loss.item())
    opt.step()
epoch_of = np.array(epoch_of)
print(f"{len(record)} steps in {time.perf_counter() - t0:.1f} s; last batch loss "
      f"{fp32_loss[-1]:.4f}; test accuracy {accuracy(model, data.x_test, data.y_test):.3f}")

# %% [markdown]
# For each recorded tensor, over all the recorded steps: the share of values that are exactly
# zero in fp32 (not an fp16 matter: a ReLU that was off passes no gradient), and of the
# non-zero ones the share that fp16 would flush to zero or hold only as a subnormal
# (`amp.underflow_stats`, which rounds exactly):

# %%
grads = {name: np.concatenate([g[name].ravel() for g in record]).astype(np.float64)
         for name in record[0]}
print(f"{'gradient of':12s} {'values':>9s} {'exact zero':>11s} {'-> 0 in fp16':>13s} "
      f"{'subnormal':>10s} {'largest':>9s} {'binades':>8s}")
for name, g in grads.items():
    s = amp.underflow_stats(g, "fp16")
    span = amp.exponent_histogram(g).exponents.size  # from the smallest non-zero to the largest
    print(f"{name:12s} {g.size:9d} {np.mean(g == 0):11.1%} {s.fraction:13.1%} "
          f"{s.subnormal_fraction:10.1%} {np.abs(g).max():9.2e} {span:8d}")

# %% [markdown]
# The exponent histograms make it visible. Each bar counts the values with
# $\lfloor \log_2 |g| \rfloor = e$ (`amp.exponent_histogram`), that is the binade
# $[2^e, 2^{e+1})$; the shading is fp16's range (`amp.fp16_range_shading()`): flushed to zero
# below $2^{-25}$ (values in $[2^{-25}, 2^{-24})$ round to 0 or $2^{-24}$), subnormal up to
# $2^{-14}$, overflow from $2^{16}$. `fpsim.viz.training.gradient_exponent_histogram` draws
# such a panel (each with its own window of binades), `gradient_histogram_grid` one per tensor.

# %%
# One panel per recorded tensor (gradient_histogram_grid): gradient_exponent_histogram draws
# the histogram of amp.exponent_histogram(values) (share of the non-zero values per binade) on
# fp16's shaded range, amp.fp16_range_shading(), and gives in its key the share below 2**-25.
fig = gradient_histogram_grid(
    grads, "fp16", title=f"Gradients of {len(record)} fp32 training steps against fp16's range")
fig

# %% [markdown]
# *What to see:* the weight gradients sit mostly inside fp16's normal range, while the output
# layer's activation gradient (fc3 output) has a long tail into the subnormal and flush-to-zero
# bands; nothing comes near overflow.

# %% [markdown]
# The logits' gradient is $(\mathrm{softmax}(z) - y)/64$: once an image is classified with
# confidence, its entries shrink towards zero, and many fall below $2^{-24}$. The hidden layers'
# output gradients spread over dozens of binades (the table's last column). The weight gradients
# sum over the batch and sit higher. The underflow **grows as training proceeds**, because the network becomes
# confident:

# %%
fig, ax = style.new_figure((8, 3.4))
for name, _g in grads.items():
    per_epoch = [amp.underflow_stats(np.concatenate(
        [r[name].ravel() for r, e in zip(record, epoch_of, strict=True) if e == ep]),
        "fp16").fraction
        for ep in range(epoch_of.max() + 1)]
    ls = "-" if "output" in name else "--"
    ax.plot(np.arange(1, len(per_epoch) + 1), per_epoch, ls, marker="o", ms=3, label=name)
ax.set_xlabel("epoch")
ax.set_ylabel("share flushed to 0 in fp16")
ax.set_title("Non-zero fp32 gradients that fp16 would lose, per epoch", loc="left")
ax.legend(ncols=2, fontsize=8)
fig

# %% [markdown]
# *What to see:* the share that fp16 would flush to zero grows as training goes on, most for the
# logits' gradient (fc3 output): a confident network has smaller gradients.

# %% [markdown]
# ## 4 · Loss scaling moves the histogram
#
# Multiplying the loss by $S$ multiplies every gradient by $S$ (the chain rule is linear), and a
# power of two does so exactly: the histogram moves $\log_2 S$ binades to the right, out of the
# underflow region. Dividing the fp32 (master) gradients by $S$ before the update undoes it. The
# risk is the other end: $S \cdot \max|g|$ must stay below 65504. Here are all the recorded
# gradient values (how many is printed below), scaled by 1, 8, 128 and $2^{16}$:

# %%
pooled = np.concatenate(list(grads.values()))
scales = {"1": 1.0, "8": 8.0, "128": 128.0, "2**16": 2.0**16}
h = amp.exponent_histogram(pooled)
fig, axes = style.new_figure((9, 8), nrows=4, sharex=True, sharey=True)
for ax, (label, S) in zip(axes, scales.items(), strict=True):
    s = amp.underflow_stats(pooled * S, "fp16")  # a power of two: S * g is exact in float64
    gradient_exponent_histogram(  # unscaled (grey) and scaled, the shift as an arrow
        [h, amp.exponent_histogram(pooled * S)], "fp16", ax=ax, shift=int(np.log2(S)),
        labels=["gradient", f"{label} x gradient"],
        title=f"S = {label}: {s.fraction:.1%} flushed to 0, "
              f"{s.subnormal_fraction:.1%} subnormal, {s.overflowed} overflow")
    ax.set_ylabel("share")
for ax in axes[1:]:
    ax.get_legend().remove()  # the key once
for ax in axes[:-1]:
    ax.set_xlabel("")
fig

# %% [markdown]
# *What to see:* a loss scale S slides the whole histogram right by log2 S binades (from grey
# to orange, the arrow) without changing its shape, moving values out of the flush and
# subnormal bands; at 2^16 the panel's title still counts no overflow, but the right end of the
# histogram is close to it: the table below shows 2^17 overflowing.

# %%
h = amp.exponent_histogram(pooled)
print(f"{pooled.size} values; non-zero ones from 2**{h.exponents[0]} to "
      f"{np.abs(pooled).max():.3f} ({h.exponents.size} binades)")
print(f"{'scale S':>8s} {'-> 0':>8s} {'subnormal':>10s} {'overflow':>9s}")
for k in (0, 3, 7, 10, 13, 16, 17, 18, 20):
    s = amp.underflow_stats(pooled * 2.0**k, "fp16")
    print(f"{'2**' + str(k):>8s} {s.fraction:8.2%} {s.subnormal_fraction:10.2%} "
          f"{s.overflow_fraction:9.4%}")

# %% [markdown]
# What the numbers say, honestly:
#
# - A scale of 8 (what the paper needed for its SSD detector) halves the flushed share; 128
#   and $2^{16}$ rescue most of the rest.
# - With the mean over the batch this network's largest gradient (printed above) lies in
#   $[2^{-1}, 1)$, so $S = 2^{16}$ just fits ($2^{16} \max|g| < 65504$) and $2^{17}$ overflows
#   (the table's last column). A summed loss (64 times larger gradients) would overflow six
#   binades earlier.
# - Some values cannot be rescued at any scale: the gradients span the binades printed above,
#   fp16 (subnormals included) only 40, $2^{-24}$ to $2^{15}$. Scaling moves the window; it
#   does not widen it. The values far below the rest are also the ones that matter least for
#   the update.
#
# ### Exercise 3
#
# The paper's rule: choose $S$ with $S \cdot \max|g| < 65504$. Find the largest power of two
# that satisfies it **for every step** of the recorded run, and the largest that satisfies it
# for the **last** step only. What share of the values is flushed to zero with each? Why does
# a scale chosen at the end of training risk overflow early in training?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
step_max = np.array([max(np.abs(g[name]).max() for name in g) for g in record])
for label, m in (("every step", step_max.max()), ("last step", step_max[-1])):
    k = int(np.floor(np.log2(fpsim.FP16.max / m)))
    while 2.0**k * m >= fpsim.FP16.max:  # guard the boundary exactly
        k -= 1
    s = amp.underflow_stats(pooled * 2.0**k, "fp16")
    print(f"{label:10s}: max|g| = {m:.3e}, S = 2**{k}, flushed {s.fraction:.2%}, "
          f"overflowing values over the run: {s.overflowed}")
print("largest gradient per epoch:",
      [f"{step_max[epoch_of == e].max():.3f}" for e in range(epoch_of.max() + 1)])
# The gradients shrink as training proceeds; a scale fitted to the end overflows early steps.

# %% [markdown]
# ## 5 · Dynamic loss scaling: PyTorch's GradScaler
#
# The right scale is not known in advance and changes during training. PyTorch's `GradScaler`
# (fpsim's is step for step the same algorithm) starts at $2^{16}$; after `growth_interval`
# consecutive steps without inf/NaN gradients it doubles the scale; a step whose gradients
# overflowed is **skipped** and the scale halved. PyTorch's default interval is 2000 steps; we
# use **20** so that the growth is visible in a run of the same 15 epochs.
#
# We now train the same network **in fp16** with fp32 master weights
# (`SGD(..., master_weights=True)`). Two details matter:
#
# 1. The loss is computed from the logits cast to fp32 (`.to("fp32")`), as autocast and Apex
#    O2 do: an fp16 loss of 2.3 times $2^{16}$ would itself overflow.
# 2. `GradScaler` refuses fp16 gradients (PyTorch expects fp32 master gradients): after
#    backward we widen each fp16 gradient to fp32 (`p.grad_fmt = "fp32"`, exact), as Apex O2
#    copies the model's gradients into its master gradients. Before the next backward the
#    gradient format goes back to fp16.

# %%
def train_fp16(scaler, n_epochs=15):
    """The run of section 3 in fp16 with fp32 master weights and a loss scaler; returns the
    batch losses, the scaler's history and the test accuracy."""
    model = digits_mlp().to("fp16")
    params = list(model.parameters())
    opt = optim.SGD(params, lr=0.1, momentum=0.9, master_weights=True)
    losses = []
    # the fp32 run's batches: the same seed gives the same shuffles
    for _epoch, idx in minibatches(len(data.x_train), 64, epochs=n_epochs, rng=0):
        opt.zero_grad()
        for p in params:
            p.grad_fmt = None  # gradients in the parameters' format (fp16) again
        logits = model(Tensor(data.x_train[idx], "fp16"))
        loss = F.cross_entropy(logits.to("fp32"), data.y_train[idx])
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected, and caught
            scaler.scale(loss).backward()
        for p in params:
            p.grad_fmt = "fp32"  # fp32 master gradients: an exact copy of the fp16 ones
        scaler.step(opt)  # unscale, check for inf/NaN, step unless found
        scaler.update()   # grow or back off
        losses.append(loss.item())
    return np.array(losses), scaler.history, accuracy(model, data.x_test, data.y_test)


t0 = time.perf_counter()
losses16, history, acc16 = train_fp16(amp.GradScaler(init_scale=2.0**16, growth_interval=20))
scale = np.array([h["scale"] for h in history])
skipped = np.array([h["skipped"] for h in history])
print(f"{len(history)} steps in {time.perf_counter() - t0:.1f} s; skipped {skipped.sum()}; "
      f"final scale 2**{np.log2(history[-1]['new_scale']):.0f}; test accuracy {acc16:.3f} "
      f"(fp32 run: {accuracy(model, data.x_test, data.y_test):.3f})")
late = np.log2(scale[epoch_of >= epoch_of.max() - 4])  # the same batches as the fp32 run
print(f"scale over the last five epochs: 2**{late.min():.0f} to 2**{late.max():.0f}, "
      f"median 2**{np.median(late):.1f}")

# %%
# fpsim.viz.training plots runs of fpsim's training demo (fpsim demo); any object with the
# same attributes will do: the scale and skipped flag of every step, the batch losses
fp16_run = SimpleNamespace(precision="mixed-fp16", step_scale=scale, step_skipped=skipped,
                           step_loss=losses16)
fp32_run = SimpleNamespace(precision="fp32", step_loss=np.array(fp32_loss))
fig, (ax1, ax2) = style.new_figure((9, 5.2), nrows=2, sharex=True, height_ratios=[3, 2])
loss_scale_trajectory([fp16_run], ax=ax1)  # the scale per step, x: a skipped step
ax1.set_title("GradScaler(init_scale=2**16, growth_interval=20) on fp16 training", fontsize=10)
ax1.set_xlabel("")
loss_curves([fp32_run, fp16_run], smooth=1, ax=ax2, title="")  # batch losses, log scale
ax2.set_ylabel("batch loss")
fig

# %% [markdown]
# *What to see:* the scale climbs every 20 good steps and halves at each overflow (crosses),
# settling in the range printed above; the loss of the fp16 run tracks the fp32 run's.

# %% [markdown]
# The trajectory is the textbook sawtooth: 20 good steps, the scale doubles; once
# $S \cdot \max|g|$ passes 65504 a gradient overflows, that step is skipped and the scale
# halves. As the network grows confident its gradients shrink and the scaler follows them
# upwards, well past $2^{16}$. The loss follows the fp32 run's (they differ because every
# rounding differs, and a skipped step changes the trajectory).
#
# ### Exercise 4
#
# DeepSpeed's scaler (`amp.DynamicLossScaler`) adds *hysteresis*: with `hysteresis=2` the first
# overflow only skips the step, the second halves the scale. Run `train_fp16` with
# `amp.DynamicLossScaler(init_scale=2**16, scale_window=20, hysteresis=2)` and compare the
# number of skipped steps and the final scale with the GradScaler run.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
_, hist_ds, acc_ds = train_fp16(amp.DynamicLossScaler(init_scale=2.0**16, scale_window=20,
                                                      hysteresis=2))
for name, h in (("GradScaler", history), ("DynamicLossScaler", hist_ds)):
    print(f"{name:18s} skipped {sum(r['skipped'] for r in h):3d} steps, final scale "
          f"2**{np.log2(h[-1]['new_scale']):.0f}, scales used "
          f"{sorted({int(np.log2(r['scale'])) for r in h})}")
print(f"test accuracy with DeepSpeed's scaler: {acc_ds:.3f}")
# Hysteresis keeps the scale after an isolated overflow, at the price of more skipped steps
# when overflows come in a row.

# %% [markdown]
# ## Summary
#
# - fp16 holds magnitudes from $2^{-24}$ to 65504; values below half the smallest subnormal
#   become zero silently (with an UNDERFLOW flag nobody reads).
# - An fp16 weight loses every update below half its ulp, which is between $2^{-12}$ and
#   $2^{-11} = 1/2048$ of the weight depending on where the weight sits in its binade; an update
#   of exactly half an ulp is a tie: lost on an even weight, doubled on an odd one (section 2).
#   Hence fp32 master weights.
# - Real gradients span many binades, and the small ones grow in number as a network becomes
#   confident; with a mean-reduced loss a noticeable share falls below $2^{-24}$.
# - A loss scale shifts the whole histogram by $\log_2 S$ binades; it must stop short of 65504.
# - A dynamic scaler finds the scale on its own: it grows after a run of good steps, and skips
#   and halves on overflow.
#
# `examples/underflow_overflow.py` runs these experiments as a script and writes the figures.
# Notebook 03 trains the same network under the full precision recipes (FP32, pure FP16, master
# weights, loss scaling, BF16) and compares results and memory.
