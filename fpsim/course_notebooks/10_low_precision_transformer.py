# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · A low-precision transformer
#
# Notebooks 02 and 03 trained an MLP on digits, and needed a documented gradient scale-down to
# put its gradients where large networks put them. This notebook trains a transformer instead:
# `fpsim.models.GPT`, nanoGPT's layout, character by character on Tiny Shakespeare, under the
# recipes of `fpsim lm` (fp32, pure fp16, fp16 with master weights, PyTorch AMP in fp16 and
# bf16, pure bf16 with and without stochastic rounding; the FP8 and FP4 recipes in an
# exercise). Nothing is staged: no gradient shift, no learning-rate trick, the same weights and
# batches for every recipe. Everything runs on a tiny model for a few dozen steps, so that the
# notebook runs in well under a minute; the last section says what such a run can and cannot
# show.
#
# **Learning goals.** After this notebook you can
#
# 1. say where low precision enters a GPT under `autocast`: which ops run in fp16 / bf16 and
#    which in fp32;
# 2. show the overflow cases a transformer has and an MLP does not (attention logits in a
#    softmax without the max subtracted, layer-norm statistics, the loss) and the standard fix
#    of each;
# 3. read per-layer gradient histograms against a format's range and measure the share of
#    gradients that underflow;
# 4. explain why pure bf16 loses weight updates and what stochastic rounding changes;
# 5. run a few recipes and say which of their differences a run of this size can resolve.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.

# %%
import math
import time

import numpy as np

import fpsim
from fpsim.amp import autocast, get_autocast_policy, lost_updates
from fpsim.autograd import functional as F
from fpsim.course import checker
from fpsim.datasets import shakespeare_chars
from fpsim.models import GPT
from fpsim.training import lm, lm_overflow, lm_report, lm_sweep
from fpsim.training.lm_recipes import LM_RECIPES
from fpsim.viz import lm as lm_plots
from fpsim.viz import style

check = checker("10")  # check("question", answer) says right or wrong, never the answer
data = shakespeare_chars()
train_ids, val_ids, vocab = data
print(f"Tiny Shakespeare: {len(train_ids):,} training and {len(val_ids):,} validation "
      f"characters, a vocabulary of {len(vocab)}")

# %% [markdown]
# ## 1 · The model, and where low precision enters
#
# The configuration of this notebook, against `fpsim lm --quick` (docs/lm.md): the same
# hyper-parameters (AdamW, warm-up, cosine decay), a model half as wide on windows half as
# long in batches half as large, and a fifth of the steps.

# %%
cfg = lm.LMConfig(d_model=32, n_layers=2, n_heads=4, context=32, batch_size=8, steps=80,
                  warmup=8, eval_every=10, eval_batches=2, final_eval_batches=8,
                  measure_every=40)
quick = lm.lm_config(quick=True)
for name, c in (("this notebook", cfg), ("fpsim lm --quick", quick)):
    print(f"{name:17s} d_model {c.d_model}, {c.n_layers} layers, {c.n_heads} heads, context "
          f"{c.context}, batch {c.batch_size} x {c.context} = {c.batch_size * c.context} "
          f"tokens, {c.steps} steps, lr {c.lr:g} -> {c.min_lr:g}")
model = GPT(len(vocab), cfg.context, cfg.d_model, cfg.n_layers, cfg.n_heads, rng=cfg.seed)
print(f"{sum(p.data.size for p in model.parameters()):,} parameters")
print(model)

# %% [markdown]
# Under PyTorch's `autocast` (and fpsim's, `fpsim.amp.autocast`) the weights stay fp32 and
# each op casts its inputs by a list: matrix products (`linear`, `matmul`) run in the low
# format; `softmax`, `layer_norm`, the losses and the reductions in fp32; `add` and `mul` take
# the widest of their inputs; every other op (GELU, reshapes, `masked_fill`) runs in its
# input's format. The ops of the GPT's forward pass, by policy:

# %%
gpt_ops = ("embedding", "add", "layer_norm", "linear", "matmul", "mul", "masked_fill",
           "softmax", "gelu", "cross_entropy")
policy = get_autocast_policy()
for op in gpt_ops:
    print(f"{op:14s} {policy.get(op, 'runs in its input format')}")

# %% [markdown]
# Below, the first block's attention is written out op by op, exactly as
# `fpsim/models/gpt.py` computes it, and run under `autocast("fp16")` on one batch; the format
# of every intermediate is recorded, and the result is compared with the block's own attention
# module.

# %%
starts = lm.batch_offsets(len(train_ids), cfg)[0]  # the first training batch
pos = starts[:, None] + np.arange(cfg.context)
x, y = train_ids[pos], train_ids[pos + 1]


def trace_block(model, x, y, fmt):
    """The formats of block 0's intermediates under autocast(fmt), and whether the written-out
    attention equals the model's own."""
    blk, (b, t), d = model.h[0], x.shape, model.d_model
    nh = model.n_heads
    hs = d // nh
    rows = []

    def show(what, tensor):
        rows.append((what, tensor.fmt.name))
        return tensor

    with autocast(fmt):
        e = show("token + position embeddings (add)",
                 F.add(F.embedding(x, model.wte.weight),
                       F.embedding(np.arange(t), model.wpe.weight)))
        h = show("ln_1 (layer_norm)", blk.ln_1(e))
        qkv = show("c_attn (linear)", blk.attn.c_attn(h))
        qkv = F.permute(F.reshape(qkv, (b, t, 3, nh, hs)), (2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]
        s = show("q k^T (matmul)", F.matmul(q, F.transpose(k, -2, -1)))
        s = show("times 1/sqrt(head size) (mul)", F.mul(s, 1.0 / math.sqrt(hs)))
        s = show("causal mask (masked_fill)",
                 F.masked_fill(s, np.triu(np.ones((t, t), dtype=bool), k=1), -math.inf))
        p = show("attention weights (softmax)", F.softmax(s, dim=-1))
        o = show("weights times v (matmul)", F.matmul(p, v))
        a = show("c_proj (linear)", blk.attn.c_proj(F.reshape(F.transpose(o, 1, 2), (b, t, d))))
        same = np.array_equal(a.numpy(), blk.attn(h).numpy())
        r = show("residual stream (add)", F.add(e, a))
        f = show("mlp.c_fc (linear)", blk.mlp.c_fc(blk.ln_2(r)))
        show("gelu", F.gelu(f, approximate="tanh"))
        logits = show("output head, tied to wte (linear)", model(x))
        show("loss (cross_entropy)",
             F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))
    return rows, same


rows, same = trace_block(model, x, y, "fp16")
for what, fmt in rows:
    print(f"{what:36s} {fmt}")
print("the written-out attention equals the model's own, bit for bit:", same)

# %% [markdown]
# *What to see:* the matrix products and everything between them inside the attention
# (the scaled, masked logits) are fp16; the softmax reads fp16 logits and computes in fp32; the
# residual stream stays fp32, because `add` promotes an fp16 branch to the fp32 stream; the
# logits leave the tied head in fp16, and the loss is computed in fp32. In the backward pass
# each op's gradient is computed in its forward formats: the gradients of the fp16 linear
# outputs are fp16 values, and that is where gradient underflow happens (section 4).
#
# ### Exercise 1
#
# Trace the same block under `autocast("bf16")` (`trace_block(model, x, y, "bf16")`). Which
# formats change? What is the largest logit whose `exp` bf16 can hold, against fp16's
# $\ln 65504 \approx 11.09$?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
rows_bf16, _ = trace_block(model, x, y, "bf16")
for (what, f16), (_, b16) in zip(rows, rows_bf16, strict=True):
    print(f"{what:36s} {f16:5s} -> {b16}")
print(f"largest x with exp(x) in range: fp16 {math.log(fpsim.FP16.max):.2f}, "
      f"bf16 {math.log(fpsim.BF16.max):.2f}")
# Every fp16 becomes bf16 and nothing else moves: the policy names formats by role (the low
# one, fp32), not fp16 itself. bf16 has fp32's exponent range, so a naive exp overflows only
# past about 88.7; its cost is precision (8 significant bits against fp16's 11).

# %% [markdown]
# ## 2 · The overflow cases a transformer has and an MLP does not
#
# An MLP on digits has small activations and a loss over ten classes. A transformer adds three
# places where fp16's largest value, 65504, is within reach:
#
# - **the attention softmax**: $\exp(s)$ of a logit above $\ln 65504 \approx 11.09$ is inf,
#   and a row of many moderate logits can overflow the sum even when each exp fits;
# - **layer-norm statistics**: the variance squares deviations from the mean, and a residual
#   feature far from the rest (large models have such outlier features: Dettmers et al. 2022)
#   squares past 65504;
# - **the loss**: a sum over many tokens, or a mean loss multiplied by the GradScaler's
#   initial $2^{16}$.
#
# `fpsim.training.lm_overflow` builds each case from fpsim's fp16 ops, the naive way and the
# standard way, against float64:

# %%
for c in lm_overflow.overflow_cases():
    print(f"{c.name:10s} {c.what}")
    print(f"{'':10s} naive fp16: error {c.naive_error:.3g} (fails: {c.naive_failed});   "
          f"fix: error {c.fixed_error:.3g} (within {c.tol:.3g}: {c.fixed_ok})")

# %% [markdown]
# The fixes: subtract the row's maximum before `exp` (every softmax kernel does, `F.softmax`
# too: $\mathrm{softmax}(s) = \mathrm{softmax}(s - \max s)$ exactly, and no exponent is then
# positive); compute layer norm's statistics in fp32 (autocast's fp32 list; fpsim's
# `F.layer_norm` rounds once); compute the loss in fp32 (autocast's fp32 list, and Apex's fp32
# cast of the model's output). Notebook 08 derives the first two kernels in detail.
#
# How close does this model come? The softmax case needs logits past 11.09. The runs of
# section 3 record the largest |attention logit| on their sampled steps; here they are ahead
# of time, for the fp32 run (`r.max_logit`):

# %%
probe = lm.train_lm("fp32", cfg, data=data)
print(f"fp32, {cfg.steps} steps: the largest |attention logit| on the sampled steps "
      f"{probe.max_logit:.2f} (ln 65504 = {math.log(fpsim.FP16.max):.2f})")

# %% [markdown]
# A logit past $\ln 65504$, if positive, makes a naive fp16 softmax return NaN; with the max
# subtracted the same row is harmless. (The layer-norm and loss cases are built from chosen
# inputs; this notebook does not measure how close the model's own residual stream comes.)
#
# **Predict first.** Layer norm's variance squares each deviation $x_i - \mu$. What is the
# smallest integer deviation whose square is inf in fp16 (round to nearest)?
# `check("smallest integer deviation whose fp16 square is inf", ...)`

# %% tags=["solution"]
with np.errstate(over="ignore"):
    dev = next(d for d in range(1, 1000) if math.isinf(fpsim.mul(d, d, "fp16")))
check("smallest integer deviation whose fp16 square is inf", dev)

# %% [markdown]
# ### Exercise 2
#
# PyTorch's `GradScaler` starts at $S = 2^{16}$. If the loss were an fp16 value, $S$ times it
# would be rounded to fp16. What is the largest fp16 loss $L$ for which $L \cdot 2^{16}$ is
# still finite in fp16? Compare with the loss of an untrained character model, about
# $\ln 65 \approx 4.17$ nats. Check with
# `check("largest fp16 loss whose product with 2**16 is finite in fp16", ...)`.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
largest = fpsim.FP16.max / 2**16  # 65504 / 65536 = 1 - 2**-11, an fp16 number
above = float(fpsim.add(largest, fpsim.ulp(largest, "fp16"), "fp16"))  # the next fp16 up
for loss in (largest, above, float(fpsim.round(math.log(65), "fp16"))):
    # the product with 2**16 is exact in float64; fp16 rounds it once (2**16 itself is not an
    # fp16 number, so fpsim.mul, which rounds its operands to fp16 first, would overflow)
    print(f"L = {loss!r:14}: L * 2**16 in fp16 = {float(fpsim.round(loss * 2**16, 'fp16'))}")
# Any loss of 1 nat or more overflows: with an fp16 loss the GradScaler's first steps would
# hold inf gradients and be skipped, S halving each time until S * L fits. Autocast computes
# the loss in fp32, where S * L is finite for any loss below about 2**112.

# %% tags=["solution"]
check("largest fp16 loss whose product with 2**16 is finite in fp16", largest)

# %% [markdown]
# ## 3 · A short training run of seven recipes
#
# The recipes (`fpsim.training.lm_recipes`; docs/lm.md says where each comes from):

# %%
recipes = ["fp32", "fp16", "fp16-master", "mixed-fp16", "mixed-bf16", "bf16", "bf16-sr"]
for name in recipes:
    print(f"{name:12s} {LM_RECIPES[name].description}")

# %% [markdown]
# **Predict, then run.** Which recipe fails outright, and for what measured reason? Does
# fp16 with master weights but no loss scaling end far from fp32? Does stochastic rounding
# bring pure bf16 back to fp32? Write your answers down, then run the cell. Every run starts
# from the same fp32 weights and sees the same batches; the table is `fpsim lm`'s own
# (`lm_report.lm_table`), and the findings below it are sentences `fpsim lm` prints only when
# the runs support them (`lm_report.lm_findings`).

# %%
t0 = time.perf_counter()
with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # pure fp16 diverges
    runs = [probe] + [lm.train_lm(name, cfg, data=data) for name in recipes[1:]]
print(f"{len(runs)} recipes, {cfg.steps} steps each, in {time.perf_counter() - t0:.1f} s")
print()
print(lm_report.lm_table(runs))
print()
for sentence in lm_report.lm_findings(runs):
    print("-", sentence)

# %%
lm_plots.val_loss_figure(runs)

# %% [markdown]
# Two references for these losses, from the text alone: the validation cross-entropy of a
# model that knows only how often each character occurs (unigram), and of one that also
# knows which character follows which (bigram, counted on the training text, add-0.001
# smoothed):

# %%
counts = np.bincount(train_ids, minlength=len(vocab)).astype(np.float64)
unigram = -np.mean(np.log(counts[val_ids] / counts.sum()))
pairs = np.full((len(vocab), len(vocab)), 1e-3)
np.add.at(pairs, (train_ids[:-1], train_ids[1:]), 1)
bigram = -np.mean(np.log((pairs / pairs.sum(1, keepdims=True))[val_ids[:-1], val_ids[1:]]))
print(f"unigram {unigram:.3f} nats/char, bigram {bigram:.3f} nats/char")

# %% [markdown]
# *What to see:* pure fp16 has no curve (its validation loss is NaN from the first
# evaluation); the findings name its cause, AdamW's second moment $v = g^2$ underflowing in
# fp16 and the update $m / (\sqrt{v} + \epsilon)$ dividing by zero ($\epsilon = 10^{-8}$ is
# below half of fp16's smallest subnormal, so it rounds away). Are the differences between the
# other curves real? One way to tell: another seed (other initial weights, other batches).
# Below, fp32 and every recipe that ended more than `lm_report.NOISE` nats from fp32 are run
# again with seed 1 (without the fp64 shadow, which only measures, and evaluated at the end
# only), and `lm_report.seed_table` lays the losses out by seed:

# %%
again = ["fp32"] + [r.recipe for r in runs[1:] if math.isfinite(r.val_loss)
                    and abs(r.val_loss - probe.val_loss) > lm_report.NOISE]
print("run again with seed 1:", ", ".join(again))
t0 = time.perf_counter()
seeds = [lm.train_lm(name, cfg, data=data, seed=1, instrument=False, eval_every=cfg.steps)
         for name in again]
print(f"{len(seeds)} runs in {time.perf_counter() - t0:.1f} s")
print()
print(lm_report.seed_table([r.summary() for r in [*runs, *seeds]]))
fp32s = [r.val_loss for r in [probe, *seeds] if r.recipe == "fp32"]
print(f"\nfp32, seeds 0 and 1: the validation losses differ by {max(fp32s) - min(fp32s):.3f} "
      "nats")

# %% [markdown]
# *What to see:* read each recipe's distance from fp32 seed by seed (the "vs fp32 by seed"
# column), and compare it with how far fp32 itself moves between the two seeds, printed last.
# A gap that one seed shows and the other does not is the timing of the run's descent from
# its plateau, not the format. Section 6 comes back to this.
#
# ### Exercise 3
#
# Run the FP8 and FP4 recipes on the same configuration: `fp8-delayed` (Transformer Engine's
# delayed scaling) and `nvfp4` (NVIDIA's NVFP4 recipe, its last block in bf16), with
# `lm.train_lm(name, cfg, data=data)`, and print the table with them. Which gradient
# underflow do they report, and in which format is it measured?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
low = [lm.train_lm(name, cfg, data=data) for name in ("fp8-delayed", "nvfp4")]
print(lm_report.lm_table([probe, *low]))
for r in low:
    fmts = sorted(set(r.histograms["start"]["formats"].values()))
    print(f"{r.recipe}: gradients measured against {', '.join(fmts)}")
print(lm_report.f_fp8([probe, *low]))
# The block linears' output gradients are quantized by the layer's own gradient quantizer
# (e5m2 with a delayed per-tensor scale; NVFP4's e2m1 blocks with their scales): a share of
# them rounds to zero there, while the weights' gradients leave the GEMMs in fp32. Before
# reading anything into their losses, compare them with the seed table above.

# %% [markdown]
# ## 4 · Per-layer gradient histograms against fp16's range
#
# On sampled steps every run recomputes its step exactly (an fp64 shadow of the model with the
# run's working weights, the same batch and the same loss scale $S$) and keeps, per weight and
# per linear layer's output, the histogram of the exponents $\lfloor \log_2 |g S| \rfloor$ of
# the exact gradients (`r.histograms`). Below, six of them at the first step, where every
# recipe has the same weights, so that the two runs differ only by $S$: fp16 with master
# weights and no scaling ($S = 1$) and mixed-fp16 (the GradScaler's $S = 2^{16}$), against
# fp16's smallest subnormal ($2^{-24}$), smallest normal ($2^{-14}$) and largest value.

# %%
by = {r.recipe: r for r in runs}
layers = ["h.0.attn.c_attn.out", "h.1.attn.c_attn.out", "h.1.mlp.c_fc.out",
          "h.1.mlp.c_proj.out", "wte.weight", "h.1.attn.c_attn.bias"]
exps = np.array(lm.HIST_BINS)
fp16 = fpsim.FP16
with style.context():
    fig, axes = style.new_figure((11, 5.2), nrows=2, ncols=3, sharex=True)
    for ax, name in zip(axes.ravel(), layers, strict=True):
        for recipe, color in (("fp16-master", "tab:blue"), ("mixed-fp16", "tab:orange")):
            h = by[recipe].histograms["start"]
            ax.bar(exps, h["grads"][name]["counts"], width=1.0, color=color, alpha=0.6,
                   label=f"{recipe} (S = {h['scale']:g})")
        for v, ls in ((fp16.smallest_subnormal, ":"), (fp16.smallest_normal, "--"),
                      (fp16.max, "-")):
            ax.axvline(math.log2(v), color="black", ls=ls, lw=1)
        ax.set_title(name, fontsize="small", loc="left")
        ax.set_xlim(-70, 20)
    for ax in axes[1]:
        ax.set_xlabel("exponent  floor(log2 |g S|)")
    axes[0][0].legend(fontsize="x-small")
fig

# %% [markdown]
# *What to see:* each layer's gradients span many binades, and the layers sit at different
# exponents. Where a histogram reaches left of the dotted line ($2^{-24}$), those values are
# zero in fp16; the GradScaler's $2^{16}$ moves every histogram 16 binades right. The
# measured share per layer, over the sampled steps, is in
# `r.summary()["grad_underflow_by_layer"]`:

# %%
shares = {name: by[name].summary()["grad_underflow_by_layer"]
          for name in ("fp16-master", "mixed-fp16")}
print(f"{'gradient of':28s} {'fp16-master':>12s} {'mixed-fp16':>12s}")
for name in shares["fp16-master"]:
    if name.startswith("h.1.") or name in ("wte.weight", "ln_f.weight"):
        print(f"{name:28s} {shares['fp16-master'][name]:12.2%} "
              f"{shares['mixed-fp16'][name]:12.2%}")
print(f"{'all':28s} {by['fp16-master'].grad_underflow:12.2%} "
      f"{by['mixed-fp16'].grad_underflow:12.2%}")

# %% [markdown]
# *What to see:* compare the outputs of `c_attn` (the gradients of $q$, $k$ and $v$) with the
# other linear outputs, and each row with and without the GradScaler. One gradient is left out
# of these counts on purpose: the key's third of `c_attn.bias`. The key's bias has no gradient
# at all: adding $b_k$ to every key adds $q \cdot b_k$ to a whole row of logits, which the
# softmax ignores. Its exact gradient is 0, but the fp64 shadow that `fpsim lm` measures
# against returns rounding noise there, which no loss scale lifts into fp16's range: counted,
# it would look like underflow under every recipe. The q, k and v thirds of that gradient in
# one exact fp64 step:

# %%
exact = GPT(len(vocab), cfg.context, cfg.d_model, cfg.n_layers, cfg.n_heads,
            rng=cfg.seed).to(fpsim.FP64)
out = exact(x)
F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
g_bias = exact.h[1].attn.c_attn.bias.grad
d = cfg.d_model
for i, part in enumerate("qkv"):
    print(f"h.1 c_attn.bias, {part} third: largest |gradient| "
          f"{np.abs(g_bias[i * d:(i + 1) * d]).max():.3g}")
n_params = sum(p.data.size for p in exact.parameters())
print(f"key biases: {cfg.n_layers} x {d} of the {n_params:,} parameters, "
      f"{cfg.n_layers * d / n_params:.2%}")

# %% [markdown]
# So the key bias's tiny values are not a gradient that fp16 loses (nothing was there to
# lose): `fpsim.training.lm.without_key_bias_noise` sets them to their exact 0 before
# `fpsim lm` and `lm_sweep` count.
#
# Why do transformers, and not the digits MLP, reach fp16's floor on their own? The loss is a
# mean over the batch's tokens, so every activation gradient carries a factor
# 1 / (tokens per batch). `lm_sweep.underflow_at_init` takes one exact step at initialisation
# and counts the share of non-zero gradient values fp16 would flush, here over the batch size
# (this notebook's model otherwise):

# %%
print(f"{'batch':>5s} {'tokens':>7s} {'all':>8s} {'activations':>12s} {'weights':>8s}")
for b in (2, 8, 32, 128):
    u = lm_sweep.underflow_at_init(cfg.seed, data, d_model=cfg.d_model, n_layers=cfg.n_layers,
                                   n_heads=cfg.n_heads, context=cfg.context, batch_size=b)
    print(f"{b:5d} {u['tokens']:7d} {u['underflow']:8.2%} {u['activation_underflow']:12.2%} "
          f"{u['weight_underflow']:8.2%}")

# %% [markdown]
# *What to see:* the activation share grows with the tokens per batch; the weights' share
# barely moves (a weight's gradient sums over the batch what each token's activation gradient
# divides by it). Production runs use millions of tokens per batch: along this
# trend most activation gradients would be zero in unscaled fp16. That is where loss scaling
# becomes necessary. Whether it matters at this notebook's batch, the seed table of section 3
# says for fp16-master (fp16 without loss scaling): compare its gap from fp32 seed by seed.
#
# ## 5 · Lost weight updates: pure bf16 and stochastic rounding
#
# A recipe with fp32 master weights adds each update to an fp32 copy. Pure bf16 adds it to the
# bf16 weight, and round to nearest returns the old weight whenever the update is at most half
# the spacing of bf16 numbers there.
#
# **Predict first.** bf16 keeps 7 fraction bits. A layer-norm gain starts at 1.0: what is
# the largest positive update $u$ for which $1 + u$ rounds back to 1.0 in bf16 (a tie goes to
# the even neighbour)?
# `check("largest update to a bf16 weight of 1.0 that rounds away", ...)`

# %% tags=["solution"]
check("largest update to a bf16 weight of 1.0 that rounds away",
      2.0 ** -(fpsim.BF16.mantissa_bits + 1))

# %% [markdown]
# AdamW's first step moves every weight by exactly the learning rate, $\pm$lr (the
# bias-corrected $m / \sqrt{v}$ is $g / |g|$, up to $\epsilon$; the decoupled weight decay
# adds $\mathrm{lr} \cdot 0.1 \cdot w$), and later steps by about lr at most (Kingma & Ba
# 2015, section 2.1). So what a format loses depends on the weights' sizes against the
# schedule's learning rates, lr at its peak and at the end. With the GPT's initial weights, an
# update of $\pm$lr on each (`fpsim.amp.lost_updates`, which adds exactly and rounds once):

# %%
params = dict(model.named_parameters())
kinds = {"layer-norm gains": [p for n, p in params.items()
                              if (".ln_" in n or n.startswith("ln_f")) and n.endswith("weight")],
         "weight matrices": [p for p in params.values() if p.ndim >= 2]}
sign_rng = np.random.default_rng(0)
print(f"{'':17s} {'lr':>6s} " + "".join(f"{f:>8s}" for f in ("fp32", "bf16", "fp16")))
for kind, ps in kinds.items():
    w = np.concatenate([p.numpy(np.float64).ravel() for p in ps])
    signs = sign_rng.choice([-1.0, 1.0], w.size)
    for lr_ in (cfg.lr, cfg.min_lr):
        lost = [lost_updates(fpsim.round(w, f), lr_ * signs, f).fraction
                for f in ("fp32", "bf16", "fp16")]
        print(f"{kind:17s} {lr_:6g} " + "".join(f"{v:8.1%}" for v in lost))

# %% [markdown]
# *What to see:* where the gains sit, at 1.0, an update at the end of the schedule's decay is
# below bf16's half spacing and is lost every time, while fp32 and fp16 keep it. The matrix
# weights (initialised with standard deviation 0.02) are small, so bf16's spacing there is
# fine enough for both learning rates at initialisation (their row). What pure bf16 loses in
# training, where Adam's steps vary and the weights move, is measured below.
#
# Stochastic rounding (`bf16-sr`: the optimizer's writes round up with probability equal to
# the distance to the lower neighbour over the spacing) does not promise fewer lost updates on
# a given step: it keeps some that round to nearest loses, and loses some that round to
# nearest keeps. What it does is make the rounding unbiased: an update of a fraction of the
# spacing moves a weight by one whole spacing with that fraction's probability, so on average
# the weight moves by the update. One step of 100,000 gains at 1.0 by the final learning
# rate:

# %%
gains = np.ones(100_000)
nearest = fpsim.round(gains + cfg.min_lr, "bf16")
stochastic = fpsim.round(gains + cfg.min_lr, "bf16", "stochastic", rng=np.random.default_rng(1))
spacing = float(fpsim.ulp(1.0, "bf16"))
print(f"update {cfg.min_lr:g} = {cfg.min_lr / spacing:.3f} of bf16's spacing at 1.0")
print(f"round to nearest: {np.mean(nearest != 1):.1%} of the gains move; mean change "
      f"{np.mean(nearest - 1):.3g}")
print(f"stochastic:       {np.mean(stochastic != 1):.1%} of the gains move, each by "
      f"{np.max(stochastic - 1):g}; mean change {np.mean(stochastic - 1):.3g}")

# %% [markdown]
# In the training runs of section 3 (lost updates counted on the sampled steps; with
# stochastic rounding, an update counts as lost when its draw rounds back to the old weight):

# %%
for name in ("mixed-bf16", "bf16", "bf16-sr"):
    r = by[name]
    print(f"{name:11s} lost updates {r.lost_update_fraction:7.2%}   val loss "
          f"{r.val_loss:.4f} ({r.val_loss - by['fp32'].val_loss:+.3f} vs fp32)")

# %% [markdown]
# *What to see:* mixed-bf16 runs the same bf16 matrix products with fp32 weights and loses no
# update; both pure-bf16 runs lose a large share of their updates on the sampled steps,
# rounded to nearest in one and stochastically (and so unbiased) in the other. Whether that
# shows in the loss at this length is a question for the seed table of section 3, not for one
# run.
#
# ### Exercise 4
#
# In `fpsim lm --quick` (`quick = lm.lm_config(quick=True)`, its schedule `quick.lr_at(step)`,
# steps counted from 0), from which step on is the learning rate at most the largest lost
# update you found above, so that even an update of the full $\pm$lr is lost on a bf16 gain at
# 1.0? How many of its steps is that?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
half_spacing = 2.0 ** -(fpsim.BF16.mantissa_bits + 1)  # at 1.0, a tie goes to 1.0
first = next(s for s in range(quick.warmup, quick.steps) if quick.lr_at(s) <= half_spacing)
print(f"from step {first} (lr {quick.lr_at(first):.5f}): the last {quick.steps - first} of "
      f"{quick.steps} steps")
# From that step on the cosine decay keeps lr at most half of bf16's spacing in [1, 2): in
# pure bf16 with round to nearest a gain there no longer moves by an update of size lr or
# less; fp32 master weights (mixed-bf16) or stochastic rounding keep it moving.

# %% [markdown]
# ## 6 · What this run shows, and what it cannot
#
# **What does show at this scale**, in the outputs above:
#
# - where autocast puts fp16 / bf16 (the matrix products and the attention logits between
#   them) and fp32 (softmax, layer norm, the loss, the residual stream): section 1;
# - each overflow case failing the naive fp16 way and working the standard way, and how large
#   this small model's attention logits get against $\ln 65504$: section 2;
# - pure fp16 breaking down, and the measured cause (the findings of section 3): AdamW's state
#   in fp16, not the gradients;
# - the shares of gradient values below fp16's range, per layer, with and without the
#   GradScaler, and their growth with tokens per batch: section 4;
# - the share of weight updates pure bf16 loses, and stochastic rounding's unbiasedness:
#   section 5.
#
# **What does not show**, and why:
#
# - *Which working recipe trains best.* After 80 steps of a 2-layer, 32-wide model the losses
#   lie between the unigram and bigram references printed in section 3: the runs are on their
#   way down, and when a run descends is a matter of chance (of the seed, and of every
#   rounding). The seed table shows what that does to a recipe's gap from fp32; docs/lm.md
#   finds the same at the 400-step quick configuration over three seeds.
# - *Loss scaling being necessary.* Micikevicius et al.'s failure (unscaled fp16 falling
#   behind for good) comes with the gradients of large batches and deep models (section 4's
#   sweep). This notebook's batch flushes the share of gradients the table's "grad underflow"
#   column prints for fp16-master; whether that costs loss is for the seed table to say, and
#   one more seed is little.
# - *FP8 and FP4 at scale*, outlier features, long sequences: this model reaches none of them.
#
# The full runs: `fpsim lm --quick` (every recipe, d 64, 400 steps; the results table, the
# findings and the figures `lm_val_loss.png` and `lm_histograms.png`), `fpsim lm` (1500 steps),
# `--seed` for a seed sweep, and `python -m fpsim.training.lm_sweep` for the underflow sweep
# over width, depth, batch and sequence length; docs/lm.md discusses their results.

# %% [markdown]
# ## Summary
#
# - Under autocast a GPT's matrix products and attention logits run in the low format; softmax,
#   layer norm and the loss run in fp32, and the residual stream stays fp32.
# - A transformer has overflow cases an MLP lacks: attention logits past $\ln 65504$ in a
#   softmax without its max subtracted, squared outliers in layer-norm statistics, and a summed
#   or scaled fp16 loss; subtracting the max and computing statistics and loss in fp32 fix them.
# - Gradient histograms per layer show what a format's range flushes; the activation gradients'
#   share grows with tokens per batch, which is where loss scaling starts to matter. The key
#   bias's gradient is exactly zero, and counts as "underflow" only because fp64 rounds.
# - Pure bf16 loses every update up to half the spacing of bf16 numbers at the weight (at a
#   gain of 1.0, the learning rate of a cosine schedule's tail); stochastic rounding keeps them
#   on average; fp32 master weights keep them all.
# - A run this small separates failures from successes, not good recipes from slightly better
#   ones: for that, `fpsim lm` and docs/lm.md.
