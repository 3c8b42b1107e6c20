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
# # 03 · Mixed-precision training
#
# Notebook 02 measured the two failure modes of fp16 training: updates lost against the weights,
# and gradients lost below $2^{-24}$. This notebook trains one network under five precision
# recipes, side by side, and measures what each does: the recipes of Micikevicius et al. (2018)
# and of NVIDIA's Apex, built by hand from `fpsim.nn`, `fpsim.optim` and `fpsim.amp`, so that
# every cast is in plain sight.
#
# **Learning goals.** After this notebook you can
#
# 1. build the five recipes (FP32, pure FP16, FP16 with FP32 master weights, master weights +
#    loss scaling, BF16 with master weights) as training loops;
# 2. measure what each recipe does: final loss and accuracy, the share of gradients lost to
#    underflow, the share of updates lost against the weights, skipped steps;
# 3. find out *when* the differences matter, by moving the gradients down exactly;
# 4. account for the memory of each recipe: weights, gradients, master copy and optimizer state
#    by format, and the activations;
# 5. relate the recipes to Apex's opt levels O0-O3 and to autocast's per-op cast policy.
#
# Exercises are marked **Exercise**; each has a hidden solution below it (click to expand).
# The student edition (`fpsim notebooks --student OUT/`) has a cell for your code instead.

# %%
import time
from collections import namedtuple

import numpy as np

import fpsim
from fpsim import amp, nn, optim
from fpsim.autograd import Tensor, no_grad
from fpsim.autograd import functional as F
from fpsim.course import checker
from fpsim.datasets import load_digits
from fpsim.viz import style

data = load_digits()  # 64 features in [0, 1]
print(f"digits: {len(data.x_train):,} training and {len(data.x_test):,} test images "
      "(load_digits() holds out a quarter)")
check = checker("03")  # check("question", answer) says right or wrong, never the answer
print("fpsim", fpsim.__version__)


# %% [markdown]
# ## 1 · The model, the data and five recipes
#
# The network of notebook 02: an MLP 64 → 64 → 64 → 10 with ReLU and PyTorch's default
# initialisation, trained with SGD (learning rate 0.1, momentum 0.9, batches of 64, mean
# cross-entropy) for 15 epochs (315 steps). Every recipe starts from the same initial weights
# (rounded to its format) and sees the same batches.
#
# | recipe | weights and activations | fp32 master copy | loss scaling | momentum buffer |
# |---|---|---|---|---|
# | `fp32` | fp32 | – | – | fp32 |
# | `fp16` ("pure fp16") | fp16 | no | no | fp16 |
# | `fp16 + master` | fp16 | yes | no | fp32 |
# | `fp16 + master + scaling` | fp16 | yes | `GradScaler` (dynamic) | fp32 |
# | `bf16 + master` | bf16 | yes | no (fp32's exponent range) | fp32 |
#
# In every recipe the logits are cast to fp32 before the loss (`.to("fp32")`), as autocast and
# Apex do: softmax and the loss are computed in fp32, and a scaled fp16 loss cannot overflow.

# %%
class MLP(nn.Module):
    """Linear -> ReLU -> Linear -> ReLU -> Linear (64 pixels -> 10 classes), PyTorch's default
    initialisation. After each forward, `outputs` holds every Linear layer's output; their
    gradients are kept by retain_grad() (backpropagation's activation gradients)."""

    def __init__(self, sizes=(64, 64, 64, 10), seed=0):
        super().__init__()
        self.names = [f"fc{i + 1}" for i in range(len(sizes) - 1)]
        for i, name in enumerate(self.names):
            setattr(self, name, nn.Linear(sizes[i], sizes[i + 1], rng=seed + i))

    def forward(self, x):
        self.outputs = {}
        h = x
        for i, name in enumerate(self.names):
            h = getattr(self, name)(h)
            if h.requires_grad:
                h.retain_grad()
            self.outputs[name] = h
            if i < len(self.names) - 1:
                h = F.relu(h)
        return h


Recipe = namedtuple("Recipe", "fmt master scaling state_fmt")
RECIPES = {
    "fp32": Recipe("fp32", master=False, scaling=False, state_fmt="fp32"),
    "fp16": Recipe("fp16", master=False, scaling=False, state_fmt="fp16"),
    "fp16 + master": Recipe("fp16", master=True, scaling=False, state_fmt="fp32"),
    "fp16 + master + scaling": Recipe("fp16", master=True, scaling=True, state_fmt="fp32"),
    "bf16 + master": Recipe("bf16", master=True, scaling=False, state_fmt="fp32"),
}
EPOCHS, LR, MOMENTUM, BATCH = 15, 0.1, 0.9, 64


def batches(n_epochs, seed=0):
    """Indices of shuffled mini-batches, epoch after epoch (the last partial batch dropped)."""
    rng = np.random.default_rng(seed)
    n = len(data.x_train)
    for _ in range(n_epochs):
        order = rng.permutation(n)
        for i in range(0, n - BATCH + 1, BATCH):
            yield order[i:i + BATCH]


# %% [markdown]
# ## 2 · One training step, every recipe
#
# The step below is the whole of mixed-precision training. With a loss scaler the gradients
# are scaled in backward, widened to fp32 (`p.grad_fmt = "fp32"`: Apex's fp32 *master
# gradients*, an exact copy; PyTorch's `GradScaler` refuses to unscale fp16 gradients),
# unscaled and checked for inf/NaN; an overflowing step is skipped. `shift` multiplies the loss
# by $2^{-\text{shift}}$ and the learning rate by $2^{\text{shift}}$ (used in section 4).

# %%
def make_run(recipe, shift=0, seed=0):
    """A model, optimizer and loss scaler (or None) for a recipe."""
    model = MLP(seed=seed).to(recipe.fmt)
    opt = optim.SGD(model.parameters(), lr=LR * 2.0**shift, momentum=MOMENTUM,
                    master_weights=recipe.master, state_fmt=recipe.state_fmt)
    scaler = amp.GradScaler(init_scale=2.0**16, growth_interval=100) if recipe.scaling else None
    return model, opt, scaler


def step(model, opt, scaler, recipe, idx, shift=0, between=None):
    """One training step on the batch idx; returns (loss, skipped). between(scale) runs after
    backward, before the update (used to measure)."""
    params = list(model.parameters())
    opt.zero_grad()
    for p in params:
        p.grad_fmt = None  # gradients in the parameters' own format
    logits = model(Tensor(data.x_train[idx], recipe.fmt))
    loss = F.cross_entropy(logits.to("fp32"), data.y_train[idx]) * 2.0**-shift
    scale = scaler.get_scale() if scaler is not None else 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected, and caught
        (scaler.scale(loss) if scaler is not None else loss).backward()
    if between is not None:
        between(scale)
    if scaler is None:
        opt.step()
        return loss.item() * 2.0**shift, False
    for p in params:
        p.grad_fmt = "fp32"  # fp32 master gradients (exact copies of the fp16 ones)
    scaler.step(opt)         # unscale, check for inf/NaN, step unless found
    scaler.update()
    return loss.item() * 2.0**shift, scaler.history[-1]["skipped"]


# %% [markdown]
# What we measure, and how:
#
# - **Gradient underflow.** An exact shadow repeats every step in fp64 with the run's own
#   weights, batch and loss scale, and yields the exact gradients of the weights and of the
#   layer outputs. `amp.underflow_stats` counts the non-zero ones that round to zero in the
#   format the run holds them in: the values the format cannot hold.
# - **Lost updates.** After each step the update of every weight is $-\text{lr} \cdot b$ with
#   $b$ the momentum buffer as stored; `amp.lost_updates` counts the non-zero updates for which
#   the weight that receives them (the fp32 master copy, or the weight itself) plus the update
#   rounds back to the weight. (Checked against the plain observation, a weight left unchanged
#   by a non-zero update: the counts agree to a few in $10^5$.)
# - **Skipped steps** from the scaler's history; at the end the loss over the whole training
#   set and the test accuracy.

# %%
def exact_gradients(shadow, model, idx, shift, scale):
    """The step's gradients (weights and layer outputs) in fp64 at the run's weights, times the
    loss scale: what the run's gradient format has to hold."""
    for sp, p in zip(shadow.parameters(), model.parameters(), strict=True):
        sp.data = p.data  # exact: every format's values are fp64 values
    shadow.zero_grad()
    loss = F.cross_entropy(shadow(Tensor(data.x_train[idx], "fp64")), data.y_train[idx])
    (loss * (2.0**-shift * scale)).backward()
    gs = [p.grad for p in shadow.parameters()] + [shadow.outputs[k].grad for k in shadow.names]
    return np.concatenate([g.ravel() for g in gs])


def evaluate(model, fmt):
    """(loss over the training set, test accuracy)."""
    with no_grad():
        train_logits = model(Tensor(data.x_train, fmt)).to("fp32")
        test_logits = model(Tensor(data.x_test, fmt)).numpy(np.float64)
    return (F.cross_entropy(train_logits, data.y_train).item(),
            float(np.mean(test_logits.argmax(axis=1) == data.y_test)))


def train(recipe, shift=0, seed=0, underflow_every=1, updates=True, epochs=EPOCHS):
    """Train under a recipe; returns a dict of measurements (and the model, optimizer and
    scaler). underflow_every: measure gradient underflow every n-th step (0: never);
    updates: count lost updates."""
    model, opt, scaler = make_run(recipe, shift, seed)
    shadow = MLP(seed=seed).to("fp64")
    params = list(model.parameters())
    upd_fmt = "fp32" if recipe.master else recipe.fmt  # the copy the update is added to
    out = {"loss": [], "underflow": [], "zeroed": 0, "nonzero": 0, "lost": 0, "updates": 0,
           "skipped": 0}

    def measure_underflow(scale):
        s = amp.underflow_stats(exact_gradients(shadow, model, idx, shift, scale), recipe.fmt)
        out["zeroed"] += s.zeroed
        out["nonzero"] += s.nonzero
        out["underflow"].append(s.fraction)

    t0 = time.perf_counter()
    for i, idx in enumerate(batches(epochs, seed)):
        before = [np.array(opt.state.get(p, {}).get("master", p.data), np.float64)
                  for p in params]
        measure = underflow_every and i % underflow_every == 0
        loss, skipped = step(model, opt, scaler, recipe, idx, shift,
                             measure_underflow if measure else None)
        out["loss"].append(loss)
        out["skipped"] += skipped
        if updates and not skipped:
            lr = np.float32(opt.param_groups[0]["lr"])
            for p, w in zip(params, before, strict=True):
                u = -(lr * opt.state[p]["momentum_buffer"].astype(np.float32))
                r = amp.lost_updates(w, u.astype(np.float64), upd_fmt)
                out["lost"] += r.lost
                out["updates"] += r.nonzero
    out["time"] = time.perf_counter() - t0
    out["final_loss"], out["accuracy"] = evaluate(model, recipe.fmt)
    out["model"], out["opt"], out["scaler"] = model, opt, scaler
    return out


def pct(a, b):
    return f"{100 * a / b:.2f}%" if b else "-"


# %% [markdown]
# ## 3 · The five recipes side by side
#
# **Predict, then run.** Before the table appears: which recipe will lose the most weight
# updates, which ones will lose no gradient to underflow, and will any of them end clearly
# worse than fp32? Write your three answers down, then run the cell.

# %%
t0 = time.perf_counter()
runs = {name: train(r) for name, r in RECIPES.items()}
print(f"5 runs of {len(runs['fp32']['loss'])} steps in {time.perf_counter() - t0:.1f} s "
      "(exact shadow and measurements included)")
print()
print(f"{'recipe':24s} {'train loss':>10s} {'test acc':>8s} {'grads -> 0':>10s} "
      f"{'updates lost':>12s} {'skipped':>7s} {'final scale':>11s}")
for name, r in runs.items():
    sc = r["scaler"]
    final_scale = f"2**{np.log2(sc.get_scale()):.0f}" if sc else "-"
    print(f"{name:24s} {r['final_loss']:10.4f} {r['accuracy']:8.3f} "
          f"{pct(r['zeroed'], r['nonzero']):>10s} {pct(r['lost'], r['updates']):>12s} "
          f"{r['skipped']:7d} {final_scale:>11s}")

# %% [markdown]
# How much of that is noise? The same fp32 training with other seeds (initial weights and
# batch order):

# %%
seeds = [train(RECIPES["fp32"], seed=s, underflow_every=0, updates=False) for s in range(1, 6)]
noise = [r["final_loss"] for r in seeds]
print(f"fp32, seeds 1-5: train loss {min(noise):.4f} to {max(noise):.4f}, test accuracy "
      f"{min(r['accuracy'] for r in seeds):.3f} to {max(r['accuracy'] for r in seeds):.3f}")


# %%
def smooth(v, n=15):
    return np.convolve(v, np.ones(n) / n, mode="valid")


colors = {"fp32": style.format_color("fp32"), "fp16": "#D55E00",
          "fp16 + master": style.format_color("fp16"), "fp16 + master + scaling": "#8C564B",
          "bf16 + master": style.format_color("bf16")}
fig, (ax1, ax2) = style.new_figure((10, 3.8), ncols=2)
for name, r in runs.items():
    ax1.plot(smooth(r["loss"]), color=colors[name], lw=1.4, label=name)
    ax2.plot(smooth(r["underflow"]), color=colors[name], lw=1.4, label=name)
ax1.set_yscale("log")
ax1.set_title("training loss", loc="left", fontsize=10)
ax1.set_ylabel("batch loss (running mean of 15)")
ax1.legend(fontsize=8)
ax2.set_title("gradient underflow per step (running mean of 15)", loc="left", fontsize=10)
ax2.set_ylabel("share of non-zero gradients -> 0")
for ax in (ax1, ax2):
    ax.set_xlabel("step")
fig

# %% [markdown]
# *What to see:* the five losses overlap for most of the run; the fp16 runs without loss scaling
# lose a growing share of their gradients to underflow (over 10% by the end), loss scaling keeps
# it near 1%, and bf16 loses none.

# %% [markdown]
# What the measurements say:
#
# - **All five recipes reach about the same loss and accuracy.** The test accuracies (0.953 to
#   0.958) lie inside the spread of fp32 runs with other seeds (0.953 to 0.978). The final
#   training losses (0.020 to 0.044) vary by a factor of two, as fp32's own do across seeds
#   (0.009 to 0.030): this late in training the loss over the training set is small and swings
#   from step to step. The digits network is small and forgiving, like the ImageNet CNNs of
#   the paper, which matched FP32 without loss scaling. The loss curves are the same until
#   about step 150; then the runs part, as the rounding differences have added up.
# - **Pure fp16 loses updates**: a large share of its weight updates are smaller than half an
#   ulp of the fp16 weight and vanish. With an fp32 master copy far fewer do (fp32 loses only
#   updates below about $2^{-24}$ of the weight: those of gradients that are practically zero).
# - **Without loss scaling a growing share of the gradients underflows** in fp16 as the network
#   becomes confident (notebook 02 showed why); the dynamic scaler brings it down, at the cost of
#   a skipped step. bf16 has fp32's range: nothing underflows (its curve lies on fp32's zero
#   line), but every gradient carries only 8 significant bits.
# - The gradients that underflow here are the smallest ones, of images the network already
#   classifies well: they matter little. Section 4 makes them matter.
#
# ### Exercise 1
#
# Stochastic rounding is an alternative to master weights: an update below half an ulp is kept
# *with a probability* proportional to its size, so on average nothing is lost. The optimizer
# rounds the new weights with the mode of `fpsim.autograd.rounding`. Train the pure `fp16`
# recipe with every step inside `with fpsim.autograd.rounding("stochastic", rng=0):` (use
# `make_run`, `batches`, `step` and `evaluate`; forward and backward then round stochastically
# too) and compare the final loss and accuracy with the `fp16` and `fp16 + master` runs.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
model, opt, scaler = make_run(RECIPES["fp16"])
with fpsim.autograd.rounding("stochastic", rng=0):
    for idx in batches(EPOCHS):
        step(model, opt, scaler, RECIPES["fp16"], idx)
loss_sr, acc_sr = evaluate(model, "fp16")
for name in ("fp16", "fp16 + master"):
    print(f"{name:24s} train loss {runs[name]['final_loss']:.4f}, test acc "
          f"{runs[name]['accuracy']:.3f}")
print(f"{'fp16, stochastic':24s} train loss {loss_sr:.4f}, test acc {acc_sr:.3f}")

# %% [markdown]
# ## 4 · When does underflow matter? Moving the gradients down exactly
#
# The digits network's gradients are large because the network is small. Deeper networks, and
# losses averaged over many more elements (tokens, pixels), have smaller ones. In the paper's
# histogram of the SSD detector's activation gradients (Micikevicius et al. 2018, figure 3),
# 67% of the values are exactly zero (a zero stays zero in any format); of the rest, a part lies
# below fp16's $2^{-24}$, and the values in $[2^{-27}, 2^{-24})$ mattered: a loss scale of 8 was
# enough to match fp32. We can move *all*
# gradients down by exactly $k$ binades without changing the training: multiply the loss by
# $2^{-k}$ and the learning rate by $2^{k}$. Powers of two scale exactly, so in fp32 (and in
# bf16, which has fp32's range) the run stays **bit for bit the same**. A claim to check:

# %%
for name in ("fp32", "bf16 + master"):
    a = runs[name]["model"]  # trained in section 3 (measuring does not change the training)
    b = train(RECIPES[name], shift=20, underflow_every=0, updates=False)["model"]
    same = all(np.array_equal(p.data, q.data)
               for p, q in zip(a.parameters(), b.parameters(), strict=True))
    print(f"{name:14s}: weights after training with gradients x 2**-20 identical: {same}")

# %% [markdown]
# In fp16 the same shift pushes the gradients into the subnormals and below. Without a loss
# scale the network stops learning once the bulk of its gradients falls below $2^{-24}$; the
# dynamic scaler finds a scale that brings them back:

# %%
t0 = time.perf_counter()
shifts = [0, 8, 12, 16, 20]
sweep = {name: [runs[name]] + [train(RECIPES[name], shift=k, underflow_every=3, updates=False)
                               for k in shifts[1:]]
         for name in ("fp16 + master", "fp16 + master + scaling")}
print(f"{(len(shifts) - 1) * len(sweep)} runs in {time.perf_counter() - t0:.1f} s "
      "(shift 0: the runs of section 3; underflow measured every third step)")
print(f"{'':8s}{'fp16 + master':>26s}   {'fp16 + master + scaling':>36s}")
print(f"{'shift k':>7s} {'loss':>9s} {'grads -> 0':>11s} {'loss':>12s} {'grads -> 0':>11s} "
      f"{'skipped':>8s} {'scale':>6s}")
for i, k in enumerate(shifts):
    a, b = sweep["fp16 + master"][i], sweep["fp16 + master + scaling"][i]
    scale_label = f"2**{int(np.log2(b['scaler'].get_scale()))}"
    print(f"{k:7d} {a['final_loss']:9.4f} {pct(a['zeroed'], a['nonzero']):>11s} "
          f"{b['final_loss']:12.4f} {pct(b['zeroed'], b['nonzero']):>11s} {b['skipped']:8d} "
          f"{scale_label:>6s}")

# %%
fig, (ax1, ax2) = style.new_figure((10, 3.6), ncols=2)
ax1.axhline(runs["fp32"]["final_loss"], color=colors["fp32"], lw=1, ls="--",
            label="fp32 (the same for any shift)")
ax1.axhspan(min(noise), max(noise), color=colors["fp32"], alpha=0.12, lw=0,
            label="fp32, seeds 1-5")
for name, rs in sweep.items():
    ax1.plot(shifts, [r["final_loss"] for r in rs], "o-", color=colors[name], label=name)
    ax2.plot(shifts, [r["zeroed"] / r["nonzero"] for r in rs], "o-", color=colors[name],
             label=name)
ax1.set_yscale("log")
for ax in (ax1, ax2):
    ax.set_xticks(shifts, [style.pow2_label(-k) for k in shifts])
    ax.set_xlabel("every gradient multiplied by")
ax1.set_ylabel("final training loss")
ax2.set_ylabel("share of non-zero gradients -> 0")
ax1.legend(fontsize=8)
ax1.set_title("result", loc="left", fontsize=10)
ax2.set_title("gradient underflow over the run", loc="left", fontsize=10)
fig

# %% [markdown]
# *What to see:* as every gradient is shifted down, master weights alone hold fp32's loss only
# while the underflow stays moderate and stop learning at 2^-16; with loss scaling the loss stays
# close to fp32's at every shift and the underflow stays small.

# %% [markdown]
# The network tolerates a lot: with gradients $2^{8}$ times smaller a quarter of the non-zero
# gradient values underflow and the result is unchanged, because the large gradients that carry
# the learning survive. At $2^{-12}$ (more than 40% lost) the loss starts to suffer; from
# $2^{-16}$ on the large gradients go too and the network does not learn at all. With the
# dynamic scaler every shift trains about as well as fp32 (inside or close to the band of fp32
# seeds); its remaining underflow grows with the shift because in 315 steps, growing every 100,
# the scale only climbs from $2^{16}$ to $2^{19}$. Loss scaling exists for networks whose
# gradients live where fp16 cannot hold them.
#
# ### Exercise 2
#
# A *static* loss scale (`amp.StaticLossScaler(S)`) is what the paper used (8 to 32K). With the
# gradients multiplied by $2^{-16}$, which static scales $S = 2^j$ recover the fp32 result?
# Train with `make_run` (recipe `fp16 + master + scaling`, `shift=16`), replace its scaler by
# `amp.StaticLossScaler(2.0**j)` for a few `j`, and report the final loss and the number of
# skipped steps.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
recipe = RECIPES["fp16 + master + scaling"]
for j in (4, 16, 33):
    model, opt, _ = make_run(recipe, shift=16)
    scaler = amp.StaticLossScaler(2.0**j)
    skipped = sum(step(model, opt, scaler, recipe, idx, shift=16)[1] for idx in batches(EPOCHS))
    print(f"S = 2**{j:<2d}: final train loss {evaluate(model, 'fp16')[0]:.4f}, "
          f"skipped {skipped} steps")
# A static S = 2**j on gradients shifted by 2**-16 is, bit for bit, the unscaled run shifted
# by 2**(j - 16): S = 2**4 gives the loss of shift 12 above, S = 2**16 that of shift 0. Too
# small a scale leaves the gradients underflowing; a wide range works (S * 2**-16 * max|g|
# must stay below 65504); beyond it gradients overflow and every such step is skipped (a
# static scaler never backs off).

# %% [markdown]
# ## 5 · Memory: what each recipe keeps
#
# The model states, from the real arrays (`ndarray.nbytes`: 2 bytes per fp16 / bf16 value):
# weights, gradients, the fp32 master copy and the momentum buffer, per parameter. Then one more
# training step under `fpsim.memory.meter`, which also counts the activations saved for
# backward (at their real width) and the peak of the step.

# %%
n_params = sum(p.data.size for p in runs["fp32"]["model"].parameters())
print(f"{n_params} parameters; bytes per parameter:")
print(f"{'recipe':24s} {'weights':>8s} {'grads':>6s} {'master':>7s} {'momentum':>9s} "
      f"{'total':>6s}")
for name, r in runs.items():
    params, opt = list(r["model"].parameters()), r["opt"]
    b = [sum(p.data.nbytes for p in params),
         sum(p.grad.nbytes for p in params),
         sum(opt.state[p]["master"].nbytes for p in params if "master" in opt.state[p]),
         sum(opt.state[p]["momentum_buffer"].nbytes for p in params)]
    print(f"{name:24s} {b[0] / n_params:8.0f} {b[1] / n_params:6.0f} {b[2] / n_params:7.0f} "
          f"{b[3] / n_params:9.0f} {sum(b) / n_params:6.0f}")

# %%
print(f"{'bytes':24s} {'params':>7s} {'master':>7s} {'grads':>7s} {'optim':>7s} "
      f"{'activ.':>7s} {'peak':>7s}   saved activations by format")
idx = next(batches(1))
for name, r in runs.items():
    with fpsim.memory.meter(r["model"], r["opt"]) as meter:
        step(r["model"], r["opt"], r["scaler"], RECIPES[name], idx)
    rep = meter.report()
    m = rep.max  # each category's own maximum during the step
    print(f"{name:24s} {m['parameters']:7d} {m['master_weights']:7d} {m['gradients']:7d} "
          f"{m['optimizer_states']:7d} {m['activations']:7d} {rep.peak_total:7d}   "
          f"{rep.activations_by_format}")

# %% [markdown]
# With SGD and momentum, mixed precision keeps **as many bytes of model state as fp32**:
# 2 + 2 + 4 + 4 = 12 per parameter against 4 + 4 + 4 (the scaled recipe's fp32 master
# gradients replace the fp16 ones here; Apex briefly holds both). What it halves are the saved
# activations (and the memory traffic and time of every matrix product, which fpsim does not
# model). With Adam the model states are 16 bytes per parameter (2 + 2 + 12), the figure ZeRO
# starts from. Pure fp16 halves everything, and pays with lost updates.
#
# ### Exercise 3
#
# Replace SGD by `optim.Adam(..., master_weights=True)` on the fp16 model, take one step, and
# count the bytes per parameter of the weights, gradients and optimizer state (`master`,
# `exp_avg`, `exp_avg_sq`). Do you get ZeRO's $2 + 2 + 12 = 16$? Check your total with
# `check("bytes per parameter, Adam + master", ...)`.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
model = MLP().to("fp16")
opt = optim.Adam(model.parameters(), lr=1e-3, master_weights=True)
idx = next(batches(1))
loss = F.cross_entropy(model(Tensor(data.x_train[idx], "fp16")).to("fp32"), data.y_train[idx])
loss.backward()
opt.step()
params = list(model.parameters())
n = sum(p.data.size for p in params)
per_param = {"weights": sum(p.data.nbytes for p in params) / n,
             "gradients": sum(p.grad.nbytes for p in params) / n}
per_param |= {k: sum(opt.state[p][k].nbytes for p in params) / n
              for k in ("master", "exp_avg", "exp_avg_sq")}
print(per_param, "total", sum(per_param.values()))

# %% tags=["solution"]
check("bytes per parameter, Adam + master", sum(per_param.values()))

# %% [markdown]
# ## 6 · Apex's opt levels and autocast
#
# NVIDIA Apex packaged these recipes as four *opt levels* (`fpsim.amp.OPT_LEVELS`):

# %%
for level in amp.OPT_LEVELS:
    print(amp.describe_opt_level(level))
    print()

# %% [markdown]
# - **O0** is the `fp32` recipe, **O3** is pure `fp16` (no master weights, loss scale 1), and
#   **O2** is `fp16 + master + scaling` (with Apex's own dynamic scaler: ×2 after 2000 good
#   steps, ÷2 on overflow). `bf16 + master` is O2 in bf16, without the scaler.
# - **O1** does something none of our recipes does: the weights stay fp32 and every *operation*
#   decides its own precision, which is what PyTorch's **autocast** does. Its policy (CUDA,
#   fp16; PyTorch uses the same lists for bf16): matrix products (`matmul`, `linear`, `conv*`,
#   ...) run on fp16 inputs; range- or precision-hungry ops (`exp`, `log`, `pow`, `softmax`,
#   `log_softmax`, `sum`, `layer_norm`, the losses) run in fp32; ops mixing formats (`add`,
#   `cat`, ...) promote to the widest input. A weight is cast to fp16 once per region and its
#   gradient flows back through that cast: computed in fp16, then accumulated into the fp32
#   weight's gradient.
#
# Here is that policy written out by hand for one layer and a loss, with the format of every
# tensor and gradient:

# %%
lin = nn.Linear(64, 10, rng=0)                            # fp32 weights: the master copy
x = Tensor(data.x_train[:8])                              # fp32 input
w16, b16 = lin.weight.to("fp16"), lin.bias.to("fp16")     # autocast's cached casts
w16.retain_grad()
logits = F.linear(x.to("fp16"), w16, b16)                 # "lower": fp16 inputs, fp16 out
logits.retain_grad()
loss = F.cross_entropy(logits.to("fp32"), data.y_train[:8])  # "fp32": softmax, loss in fp32
loss.backward()
print(f"logits {logits.fmt.name}, loss {loss.fmt.name}")
print(f"gradient of the logits {logits.grad.dtype}, of the fp16 weight copy "
      f"{w16.grad.dtype}, of the fp32 weight {lin.weight.grad.dtype}")

# %% [markdown]
# ## 7 · The packaged way: autocast, `amp.initialize` and `fpsim.training`
#
# Everything above was written by hand. fpsim also packages it, with the APIs of the real
# libraries: PyTorch's `autocast` and `GradScaler`, Apex's `amp.initialize` and
# `amp.scale_loss`, and the instrumented runner behind `fpsim demo`.
#
# **autocast**'s policy table (`fpsim.amp.autocast_policy_table()`): the op, what autocast does
# to its tensor inputs, and where PyTorch lists the op:

# %%
print(amp.autocast_policy_table())

# %% [markdown]
# PyTorch's recipe: fp32 weights, the forward pass and the loss inside `autocast("fp16")`,
# `GradScaler` around backward and the step. The casts of section 6, done by autocast:

# %%
model = MLP()  # fp32 weights
opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
scaler = amp.GradScaler(init_scale=2.0**16, growth_interval=100)
for idx in batches(EPOCHS):
    opt.zero_grad()
    with amp.autocast("fp16"):  # linear: fp16 inputs and output; softmax and loss: fp32
        loss = F.cross_entropy(model(Tensor(data.x_train[idx])), data.y_train[idx])
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected, and caught
        scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
with amp.autocast("fp16"):
    final_loss, acc = evaluate(model, "fp32")
print(f"logits {model.outputs['fc3'].fmt.name}, loss {loss.fmt.name}, weights "
      f"{model.fc1.weight.fmt.name}, weight gradients {model.fc1.weight.grad.dtype}")
autocast_loss = final_loss
print(f"autocast + GradScaler: train loss {final_loss:.4f}, test accuracy {acc:.3f}, "
      f"{sum(h['skipped'] for h in scaler.history)} skipped steps, final scale "
      f"2**{np.log2(scaler.get_scale()):.0f}")

# %% [markdown]
# Apex's recipe: `model, opt = amp.initialize(model, opt, opt_level=...)` prepares both for an
# opt level (casts the model, patches its forward, turns on master weights, attaches Apex's loss
# scaler), and `with amp.scale_loss(loss, opt) as scaled: scaled.backward()` scales, unscales
# and checks. The four levels on our network (Apex's dynamic scaler with a window of 100 steps
# instead of 2000):

# %%
same_as = {"O0": runs["fp32"]["final_loss"], "O1": autocast_loss,  # the hand-built runs
           "O2": runs["fp16 + master + scaling"]["final_loss"], "O3": runs["fp16"]["final_loss"]}
print(f"{'level':5s} {'weights':>7s} {'master':>6s} {'train loss':>10s} {'test acc':>8s} "
      f"{'skipped':>7s} {'scale':>6s}  same loss as the hand-built run")
for level in amp.OPT_LEVELS:
    model = MLP()
    model, opt = amp.initialize(model, optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                                opt_level=level, scale_window=100)
    for idx in batches(EPOCHS):
        opt.zero_grad()
        loss = F.cross_entropy(model(Tensor(data.x_train[idx])), data.y_train[idx])
        with np.errstate(over="ignore", invalid="ignore"), amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
        opt.step()
    final_loss, acc = evaluate(model, "fp32")
    scale_label = f"2**{int(np.log2(opt.scaler.get_scale()))}"
    print(f"{level:5s} {model.fc1.weight.fmt.name:>7s} {str(opt.master_weights):>6s} "
          f"{final_loss:10.4f} {acc:8.3f} {opt.skipped_steps:7d} "
          f"{scale_label:>6s}  {final_loss == same_as[level]}")

# %% [markdown]
# The opt levels reproduce the hand-built runs exactly: O0 is the `fp32` recipe, O1 the
# autocast loop above, O2 `fp16 + master + scaling` (Apex's scaler with a window of 100 steps
# is `GradScaler` with a growth interval of 100) and O3 pure `fp16`.

# %% [markdown]
# Finally `fpsim.training`, the runner of `fpsim demo`: its own model (a wider MLP, 64 → 128 →
# 128 → 128 → 10, with a small initial output layer), batches of 256 and a cosine learning-rate
# schedule (docs/demo.md explains the choices), the five recipes as Apex levels, and the same
# kind of exact shadow to measure every step. `run_demo(quick=True)` is `fpsim demo --quick`;
# the report functions print its tables:

# %%
from fpsim.training import experiment, report
from fpsim.viz import training as training_plots

t0 = time.perf_counter()
demo = experiment.run_demo(quick=True, progress=False)
print(f"fpsim demo --quick: {len(demo)} runs in {time.perf_counter() - t0:.1f} s")
print()
print(report.results_table(demo))
print()
print(report.memory_table(demo))

# %%
training_plots.loss_curves(demo)

# %% [markdown]
# *What to see:* the recipes with fp32 master weights follow FP32's loss and accuracy; the run
# that falls behind (dark grey) is a pure low-precision one.

# %% [markdown]
# The demo's wider network tells the same story as ours: pure fp16 loses about half of its
# weight updates and its loss stays above fp32's; with master weights the run follows fp32
# although it loses the same gradients to underflow (about 0.8% of them, half of the rest held
# as subnormals); dynamic loss scaling cuts the underflow to a few in ten thousand at the cost
# of a few skipped steps; bf16 loses no gradient. `fpsim demo` runs the full 1500 steps per
# recipe and writes the plots; docs/demo.md discusses the results.

# %% [markdown]
# ## Summary
#
# - Mixed precision is the paper's three techniques, each against one failure: fp32 master
#   weights against lost updates, loss scaling against gradient underflow, and fp16 arithmetic
#   that accumulates into fp32 (the products of a dot product summed in fp32, then rounded to
#   fp16 when written to memory; large reductions such as softmax and the loss in fp32) against
#   overflow and the imprecision of long fp16 sums. Every run here accumulates its matrix
#   products in fp32 (fpsim's default accumulation model, `"fp32"`).
# - On an easy task every recipe gets there; the measurements (lost updates, underflow shares,
#   skipped steps) show what each one protects against, and moving the gradients down shows
#   when that protection becomes necessary.
# - bf16 with master weights needs no loss scaling: it has fp32's exponent range.
# - Master weights cost memory: with SGD and momentum a mixed-precision model keeps as many
#   bytes of model state as fp32; the savings are in the activations and the arithmetic.
# - fpsim packages the recipes with the real libraries' APIs: `amp.autocast` + `GradScaler`
#   (PyTorch), `amp.initialize` + `amp.scale_loss` (Apex; O0, O2 and O3 reproduce the
#   hand-written runs bit for bit) and `fpsim.training`, the instrumented runner of
#   `fpsim demo`.
