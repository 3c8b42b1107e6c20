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
# Notebook 02 measured the two failure modes of fp16 training: updates lost against the
# weights, and gradients lost below $2^{-24}$. This notebook runs `fpsim demo`, the experiment
# behind the README, and reads what it shows: one network trained under seven precision
# recipes from the same weights on the same batches, with every gradient and every update
# measured against an exact (fp64) shadow.
#
# **Learning goals.** After this notebook you can
#
# 1. name the three techniques of Micikevicius et al. (2018) and the failure each one fixes;
# 2. read the demo's results table: which recipe fails, and for which measured reason;
# 3. explain the gradient scale-down the demo uses, and why it leaves fp32 bit for bit unchanged;
# 4. find out *when* underflow starts to matter, by moving the gradients down exactly;
# 5. count the bytes per parameter a recipe keeps.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.

# %%
import time
from pathlib import Path

import numpy as np

import fpsim
from fpsim import optim
from fpsim.autograd import Tensor
from fpsim.autograd import functional as F
from fpsim.course import checker
from fpsim.datasets import load_digits
from fpsim.training import experiment, report
from fpsim.training.model import MLP
from fpsim.training.recipes import PRECISIONS
from fpsim.viz import style
from fpsim.viz import training as training_plots

data = load_digits()  # 64 features in [0, 1]
print(f"digits: {len(data.x_train):,} training and {len(data.x_test):,} test images")
check = checker("03")  # check("question", answer) says right or wrong, never the answer
print("fpsim", fpsim.__version__)

# %% [markdown]
# ## 1 · The paper's three techniques, and seven recipes
#
# Mixed precision (Micikevicius et al. 2018) is three techniques, each against one failure:
#
# - **fp32 master weights** against *lost updates*: an update smaller than half an ulp of an
#   fp16 weight rounds away; added to an fp32 copy of the weight it survives.
# - **Loss scaling** against *gradient underflow*: gradients below $2^{-24}$ are zero in fp16;
#   multiplying the loss by $S$ moves every gradient up by $\log_2 S$ binades, and the update
#   divides by $S$ again in fp32.
# - **fp32 accumulation** against the imprecision and overflow of long fp16 sums: the products
#   of a matrix product are summed in fp32 and rounded to fp16 once; softmax and the loss run
#   in fp32. Every run here does this (fpsim's default accumulation model, `"fp32"`).
#
# The demo's recipes (`fpsim.training.recipes.PRECISIONS`), each an Apex opt level; `bf16` and
# `bf16-sr` go beyond the paper (pure bf16, and pure bf16 whose optimizer rounds
# stochastically, Gupta et al. 2015, Zamirai et al. 2020):

# %%
for r in PRECISIONS.values():
    print(f"{r.name:12s} {r.opt_level}  master={str(r.master_weights):5s} "
          f"loss scale={str(r.loss_scale):8s} {r.description}")

# %% [markdown]
# ## 2 · Putting the gradients where large networks put them
#
# In the paper's histogram of the SSD detector's activation gradients (its figure 3) most
# values are exactly zero, and a large share of the non-zero ones lies below fp16's $2^{-24}$.
# A small MLP on 8x8 digits does not get there: its gradients are too large. Large networks get
# small gradients from losses averaged over many outputs (pixels, tokens) and from depth. The
# demo stands in for both with a documented **gradient scale-down** (docs/demo.md): the loss is
# multiplied by $2^{-k}$ and the learning rate by $2^{k}$ (`grad_shift`). Powers of two are
# exact, so in fp32 the training is unchanged bit for bit; only a narrow format sees the shift.
# The demo's configuration:

# %%
cfg = experiment.demo_config(quick=True)
print(f"quick demo: MLP {cfg.sizes}, batches of {cfg.batch_size}, {cfg.steps} steps, "
      f"lr {cfg.lr} ({cfg.schedule}), grad_shift {cfg.grad_shift} "
      f"(loss x 2**-{cfg.grad_shift}, lr x 2**{cfg.grad_shift})")

# %% [markdown]
# A claim to check, after the runs of section 3: fp32 trained with and without the
# scale-down gives the same loss at every step, to the bit.

# %% [markdown]
# ## 3 · The seven recipes side by side
#
# **Predict, then run.** Before the table appears: which recipe ends far below fp32 because its
# gradients underflow? Which one because its updates round away? Does bf16 with master weights
# need loss scaling? Write your answers down, then run the cell (`fpsim demo --quick`).

# %%
t0 = time.perf_counter()
jobs = experiment.default_workers(len(PRECISIONS))  # the recipes train in parallel processes
runs = experiment.run_demo(quick=True, progress=False, workers=jobs)
print(f"{len(runs)} recipes, {cfg.steps} steps each, in {time.perf_counter() - t0:.1f} s "
      f"({jobs} processes)")
print()
print(report.results_table(runs))
print()
print(report.findings_text(runs))

# %%
demo_run = {r.precision: r for r in runs}
a = experiment.run_demo(quick=True, precisions=["fp32"], progress=False, grad_shift=0,
                        instrument=False)[0]
b = demo_run["fp32"]
print(f"fp32, shift 0 and shift {cfg.grad_shift}: every step's loss identical: "
      f"{np.array_equal(a.step_loss, b.step_loss)}; test accuracy "
      f"{a.test_accuracy:.2%} and {b.test_accuracy:.2%}")

# %% [markdown]
# The memory each recipe keeps, by category and format (the first step, measured by
# `fpsim.memory.meter`):

# %%
print(report.memory_table(runs))

# %% [markdown]
# ## 4 · The demo's figures

# %%
figs = training_plots.demo_figures(runs)
figs["loss_curves"]

# %% [markdown]
# *What to see:* the recipes that leave the grey fp32 curve are fp16 without loss scaling and
# pure bf16; master weights with scaling, and bf16 with master weights, stay on it.

# %%
figs["loss_scale"]

# %% [markdown]
# *What to see:* the dynamic scale rises until a scaled gradient overflows fp16, halves there
# (a skipped step, x), and climbs again: a saw-tooth under fp16's ceiling.

# %%
figs["gradient_histogram"]

# %% [markdown]
# *What to see:* without scaling most exact gradients lie left of fp16's smallest subnormal;
# the loss scale moves the whole histogram right, into fp16's range.

# %% [markdown]
# ## 5 · When does underflow start to matter? Moving the gradients down exactly
#
# The scale-down is a dial: with `grad_shift` $= k$ every gradient is $2^{k}$ times smaller
# and fp32 trains the same. Sweep it for fp16 with master weights, with and without the dynamic
# loss scaler (underflow sampled every few steps; the demo's own runs give the shift it uses).

# %%
t0 = time.perf_counter()
shifts = [0, 9, cfg.grad_shift, 17]
names = ("fp16-master", "mixed-fp16")
by_shift = {k: dict(zip(names, experiment.run_demo(
    quick=True, precisions=names, progress=False, grad_shift=k, measure_every=25,
    workers=jobs), strict=True)) for k in shifts if k != cfg.grad_shift}
by_shift[cfg.grad_shift] = demo_run
sweep = {name: [by_shift[k][name] for k in shifts] for name in names}
print(f"{(len(shifts) - 1) * len(names)} runs in {time.perf_counter() - t0:.1f} s")
print(f"{'shift k':>7s} " + " ".join(f"{n + ': acc':>18s} {'grads -> 0':>10s} {'skipped':>7s}"
                                     for n in names))
for i, k in enumerate(shifts):
    print(f"{k:7d} " + " ".join(f"{sweep[n][i].test_accuracy:18.2%} "
                                f"{sweep[n][i].grad_underflow_fraction:10.2%} "
                                f"{sweep[n][i].skipped_steps:7d}" for n in names))
print(f"fp32 (any shift): test accuracy {demo_run['fp32'].test_accuracy:.2%}")


# %%
def underflow_shift_figure(sweep, shifts, fp32, demo_shift):
    """Test accuracy and gradient underflow against the gradient scale-down."""
    fig, (ax1, ax2) = style.new_figure((10, 3.6), ncols=2)
    ax1.axhline(fp32.test_accuracy, color=style.format_color("fp32"), lw=1, ls="--",
                label="fp32 (the same for any shift)")
    for name, rs in sweep.items():
        st = training_plots.precision_style(name)
        line = dict(color=st["color"], linestyle=st["linestyle"], marker="o", label=name)
        ax1.plot(shifts, [r.test_accuracy for r in rs], **line)
        ax2.plot(shifts, [r.grad_underflow_fraction for r in rs], **line)
    for ax in (ax1, ax2):
        ax.axvline(demo_shift, color="0.6", lw=0.8, ls=":")
        ax.set_xticks(shifts, [style.pow2_label(-k) for k in shifts])
        ax.set_xlabel("every gradient multiplied by (dotted: the demo's)")
    ax1.set_ylabel("test accuracy")
    ax2.set_ylabel("share of non-zero gradients -> 0 in fp16")
    ax1.legend(fontsize=8)
    ax1.set_title("result", loc="left", fontsize=10)
    ax2.set_title("gradient underflow over the run", loc="left", fontsize=10)
    return fig


fig = underflow_shift_figure(sweep, shifts, demo_run["fp32"], cfg.grad_shift)
training_plots.add_caption(fig, "As every gradient is shifted down, fp16 with master weights "
                           "alone loses more of them to underflow and, once most are lost, stops "
                           "learning; with the dynamic loss scaler the underflow stays small.")
# saved into a folder of yours, beside the notebook (the README's docs/demo/underflow_shift.png
# is this figure, copied there by hand when it changes)
figures = Path("course_output")
figures.mkdir(exist_ok=True)
style.save_figure(fig, figures / "underflow_shift.png")
print("saved", figures / "underflow_shift.png")
fig

# %% [markdown]
# *What to see:* without scaling, accuracy holds while the underflow stays moderate and
# collapses once the bulk of the gradients goes below $2^{-24}$; the dynamic scaler keeps the
# underflow small at every shift (where it ends below fp32, compare its skipped steps).
#
# The network tolerates a lot at small shifts: the gradients that underflow first are the
# smallest, of images it already classifies well, and the large ones that carry the learning
# survive. Loss scaling exists for networks whose gradients live where fp16 cannot hold them.
#
# ### Exercise 1
#
# A *static* loss scale is what the paper used (8 to 32K). At the demo's shift, which static
# scales $S = 2^j$ bring `fp16-master` back to fp32's accuracy? Use
# `experiment.run_demo(quick=True, precisions=["fp16-master"], progress=False,
# loss_scale=2.0**j, instrument=False)` for a few `j` and report the test accuracy and the
# skipped steps.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
for j in (4, 40):
    with np.errstate(over="ignore", invalid="ignore"):  # S = 2**40 overflows fp16
        r = experiment.run_demo(quick=True, precisions=["fp16-master"], progress=False,
                                loss_scale=2.0**j, instrument=False)[0]
    print(f"S = 2**{j:<2d}: test accuracy {r.test_accuracy:.2%}, "
          f"skipped {r.skipped_steps} steps")
# A static S = 2**j at shift k is, bit for bit, the unscaled run at shift k - j (compare the
# sweep's table): any S that lifts the bulk of the gradients into fp16's range works, and
# S = 2**k undoes the scale-down exactly. A scale so large that scaled gradients overflow
# fp16 is fatal: the printed count shows that this static scale skips no step, so the inf
# and NaN reach the weights, and a static scale never backs off.

# %% [markdown]
# ## 6 · Memory: bytes per parameter
#
# With SGD and momentum a mixed-precision model keeps *more* bytes of model state than fp32
# (the table of section 3): an fp16 weight and gradient, plus an fp32 master copy, an fp32
# master gradient and an fp32 momentum buffer, 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter
# against fp32's 4 + 4 + 4 = 12. What it halves are the saved activations (and the traffic and
# time of every matrix product, which fpsim does not model).
#
# ### Exercise 2
#
# Replace SGD by `optim.Adam(..., master_weights=True)` on an fp16 model
# (`MLP(cfg.sizes).to("fp16")`), take one step, and count the bytes per parameter of the
# weights, gradients and optimizer state (`master`, `exp_avg`, `exp_avg_sq`). Do you get
# ZeRO's $2 + 2 + 12 = 16$? Check your total with
# `check("bytes per parameter, Adam + master", ...)`.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
model = MLP(cfg.sizes).to("fp16")
opt = optim.Adam(model.parameters(), lr=1e-3, master_weights=True)
x, y = data.x_train[:64], data.y_train[:64]
F.cross_entropy(model(Tensor(x, "fp16")).to("fp32"), y).backward()
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
# ## 7 · The recipes by hand: `fpsim.amp.initialize` and `autocast`
#
# The demo builds every recipe with NVIDIA Apex's API: `fpsim.amp.initialize(model,
# optimizer, opt_level)` prepares both for one of Apex's opt levels, and
# `with fpsim.amp.scale_loss(loss, optimizer) as scaled: scaled.backward()` scales the loss
# and unscales the gradients. What each level does to the demo's model:

# %%
from fpsim.amp import autocast, describe_opt_level, initialize, scale_loss

for level in ("O0", "O1", "O2", "O3"):
    model = MLP(cfg.sizes, rng=0)
    model, opt = initialize(model, optim.SGD(model.parameters(), lr=0.01), level)
    # optimizer state: fp32 masters (O2), the fp16 model's format (O3), else fp32
    state = "fp32 + master" if opt.master_weights else (opt.state_fmt or fpsim.FP32).name
    print(f"{level}: weights {model.fc1.weight.fmt.name}, optimizer state {state}, "
          f"autocast {'on' if opt.properties.patch_torch_functions else 'off'}, "
          f"loss scale {opt.properties.loss_scale!r}")
print()
print(describe_opt_level("O2"))

# %% [markdown]
# Thirty steps of O2 (the `mixed-fp16` recipe without the demo's scale-down) written out:
# Apex's loop is `scale_loss`, `backward`, `step`. The dynamic scale starts at $2^{16}$ and
# halves on a step whose scaled gradients overflow fp16 (that step is skipped); it would
# double again after 2000 good steps (Apex's and PyTorch's default window).

# %%
model = MLP(cfg.sizes, rng=0)
model, opt = initialize(model, optim.SGD(model.parameters(), lr=0.05, momentum=0.9), "O2")
batch_rng = np.random.default_rng(0)
losses = []
for _ in range(30):
    idx = batch_rng.choice(len(data.x_train), cfg.batch_size, replace=False)
    loss = F.cross_entropy(model(Tensor(data.x_train[idx], "fp32")), data.y_train[idx])
    with scale_loss(loss, opt) as scaled:
        scaled.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} (computed in {loss.fmt.name}); weights "
      f"{model.fc1.weight.fmt.name}, master copy {opt.state[model.fc1.weight]['master'].dtype}; "
      f"scale {opt.scaler.get_scale():g}, skipped steps {opt.skipped_steps}")

# %% [markdown]
# PyTorch's way (and Apex's O1) keeps fp32 weights and casts per operation:
# `with fpsim.amp.autocast("fp16"):` runs matrix products in fp16 and softmax, the losses and
# the reductions in fp32 (`fpsim.amp.autocast_policy_table()` lists every op).

# %%
model = MLP(cfg.sizes, rng=0)
x = Tensor(data.x_train[:8], "fp32")
with autocast("fp16"):
    logits = model(x)
    loss = F.cross_entropy(logits, data.y_train[:8])
print(f"weights {model.fc1.weight.fmt.name}; inside autocast: linear -> {logits.fmt.name}, "
      f"cross_entropy -> {loss.fmt.name}")
loss.backward()
print(f"the gradient reaches the fp32 weight as {model.fc1.weight.grad.dtype}")

# %% [markdown]
# ## Summary
#
# - Mixed precision is three techniques: fp32 master weights (against lost updates), loss
#   scaling (against gradient underflow) and fp32 accumulation (against imprecise and
#   overflowing fp16 sums).
# - With the gradients where large networks put them, fp16 without loss scaling loses its
#   gradients to underflow; dynamic loss scaling brings it back; bf16 needs no scaling but
#   needs master weights or stochastic rounding to keep its small updates.
# - Moving the gradients down exactly shows when underflow starts to matter: not at the first
#   lost gradient, but once the bulk of them leaves fp16's range.
# - `fpsim demo` runs all of this; docs/demo.md discusses the full run and a seed sweep.
