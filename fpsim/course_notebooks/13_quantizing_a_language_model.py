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
# # 13 · Quantizing a language model: INT4 / NF4 weights, SmoothQuant, a quantized KV cache
#
# Notebook 06 quantized one layer; this one quantizes a whole language model after training,
# the way models are shipped for inference. Three techniques, each aimed at a different part
# of the memory and the compute:
#
# - **weight-only INT4 / NF4** with one scale per *group* of 128 input channels (GPTQ's and
#   AWQ's round-to-nearest baseline, QLoRA's NF4): the weights shrink about 4× against fp16,
#   the matmuls still run in 16 bits;
# - **W8A8 with SmoothQuant**: weights *and* activations in int8, so the matmuls can run on
#   int8 tensor cores. Activations have outlier channels that make int8 hard, and SmoothQuant
#   moves that difficulty into the weights;
# - **a quantized KV cache**: the keys and values kept for every past token, in int8 or fp8.
#
# **Learning goals.** After this notebook you can
#
# 1. quantize a weight matrix group-wise (INT4 symmetric / asymmetric, NF4) and count its
#    bytes per parameter, scales included;
# 2. say why activations are harder to quantize than weights, and what an outlier channel
#    does to per-tensor and per-token int8;
# 3. compute SmoothQuant's factors $s_j$ and fold them into a LayerNorm without changing the
#    model's function;
# 4. quantize the K and V of attention and measure the effect on attention and on the loss;
# 5. tell which of these effects a tiny model can show, and which only appear at scale.
#
# **The model.** The small GPT of `fpsim lm` (`fpsim.models.GPT`, nanoGPT's layout), trained
# here for 200 steps in fp32 on Tiny Shakespeare, characters as tokens. It is tiny (two
# layers, $d = 64$), so its numbers are not those of a 7B model, and the notebook says where
# that matters.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.

# %%
import copy
import time

import numpy as np
from threadpoolctl import threadpool_limits

import fpsim.quant as q
from fpsim.autograd import functional as F
from fpsim.course import checker
from fpsim.datasets import shakespeare_chars
from fpsim.models import GPT
from fpsim.optim import AdamW

check = checker("13")  # check("question", answer) says right or wrong, never the answer

# %% [markdown]
# ## 1 · A tiny GPT, trained in fp32
#
# The loop below is the usual one: random windows of 64 characters, AdamW, a short warm-up
# and a cosine decay of the learning rate. It takes a few seconds (one BLAS thread).

# %%
train_ids, val_ids, vocab = shakespeare_chars()
CONTEXT, STEPS, BATCH = 64, 200, 16
model = GPT(len(vocab), context=CONTEXT, d_model=64, n_layers=2, n_heads=4, rng=0)
opt = AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
rng = np.random.default_rng(0)
t0 = time.perf_counter()
with threadpool_limits(limits=1, user_api="blas"):
    for step in range(STEPS):
        warm = min(1.0, (step + 1) / 20)
        for group in opt.param_groups:
            group["lr"] = 1e-2 * warm * (0.1 + 0.45 * (1 + np.cos(np.pi * step / STEPS)))
        pos = rng.integers(0, len(train_ids) - CONTEXT - 1, BATCH)[:, None] + np.arange(CONTEXT)
        opt.zero_grad()
        logits = model(train_ids[pos])
        loss = F.cross_entropy(logits.reshape(-1, len(vocab)), train_ids[pos + 1].reshape(-1))
        loss.backward()
        opt.step()
print(f"trained {STEPS} steps in {time.perf_counter() - t0:.1f} s, last batch loss "
      f"{loss.item():.3f}")

VAL = dict(windows=32)  # the same 32 validation windows for every model below
idx = np.stack([val_ids[i:i + CONTEXT] for i in (0, 30_000, 60_000, 90_000)])  # for logits
base = q.lm_loss(model, val_ids, **VAL)
print(f"validation loss (fp32 model): {base:.4f} nats per character "
      f"(uniform guessing: {np.log(len(vocab)):.4f})")

# %% [markdown]
# ## 2 · Weight-only quantization, group by group
#
# A weight $W$ (out × in) is cut along its input dimension into groups of $g$ values. Each
# group gets its own scale, stored in fp16:
#
# - **INT4 symmetric** (AWQ's `zero_point=False`): $s = \max|w| / 7$, code
#   $\mathrm{round}(w / s) \in [-8, 7]$;
# - **INT4 asymmetric** (AWQ's default): $s = (\max w - \min w) / 15$, a zero point
#   $z = -\mathrm{round}(\min w / s)$, code $\mathrm{round}(w/s) + z \in [0, 15]$;
# - **NF4** (QLoRA): $s = \max|w|$, the code of the NF4 value nearest $w / s$, 16 values
#   placed at quantiles of a normal distribution.
#
# Smaller groups follow the weights more closely, but each one costs a scale. Here is one row
# of eight weights, in two groups of four:

# %%
w = np.array([[0.31, -0.02, 0.05, -0.12, 1.4, 0.2, -0.6, 0.03]])
for mode in ("sym", "asym"):
    gq = q.groupwise_quantize(w, group_size=4, mode=mode)
    print(f"{mode:>4s}, groups of 4: codes {gq.codes[0].tolist()}, scales "
          f"{gq.scales[0].astype(float).round(5).tolist()}")
    print(f"      back: {q.groupwise_dequantize(gq, np.float64)[0].round(3).tolist()}")
    gq = q.groupwise_quantize(w, group_size=None, mode=mode)
    print(f"{mode:>4s}, one group:   back: "
          f"{q.groupwise_dequantize(gq, np.float64)[0].round(3).tolist()}")
# NF4 takes bitsandbytes' block sizes (32 and up): the row repeated to fill one group of 32
gq = q.groupwise_quantize(np.tile(w, 4), group_size=32, mode="nf4")
print(f" nf4, one group:   codes {gq.codes[0, :8].tolist()}, scale {float(gq.scales[0, 0])}")
print(f"      back: {q.groupwise_dequantize(gq, np.float64)[0, :8].round(3).tolist()}")

# %% [markdown]
# *What to see:* the first group gets a small scale, so its values keep their detail. With one
# scale for the whole row, set by the 1.4, the small weights round to a few codes near zero. Asymmetric INT4 spends its 16 levels on $[\min, \max]$ instead of
# $[-\max|w|, \max|w|]$, which helps a lopsided group. NF4 puts more levels near zero, where
# normally distributed weights are dense.
#
# Now the whole model. `quantize_model_weights` quantizes every linear layer on a copy: c_attn,
# the two c_proj, c_fc. The embeddings, and the output head tied to them, stay in fp32, as
# GPTQ and AWQ leave them. This model is only $d = 64$ wide: three of its four linear layers
# have 64 inputs, so a group of 128 cannot be used there. "per-channel" below means one group
# per output row (64 or 256 values). Three measures: the relative error of all the linear
# weights together, the RMS change of the logits on four validation windows, and the change
# of the validation loss. The 3- and 2-bit rows show where the cost starts to be seen.

# %%
weights = {n: p.numpy(np.float64) for n, p in model.named_parameters()}
print(f"{'mode':>5s} {'bits':>4s} {'group':>11s} {'bytes/param':>11s} {'weight err':>10s} "
      f"{'logit rms':>9s} {'loss change':>11s}")
for mode, bits in (("sym", 4), ("asym", 4), ("nf4", 4), ("sym", 3), ("sym", 2)):
    for group in (None, 64, 32):
        qmodel, layers = q.quantize_model_weights(model, group, mode, bits)
        nbytes = sum(gq.nbytes() for gq in layers.values())
        n = sum(gq.codes.size for gq in layers.values())
        err2 = sum(np.sum((q.groupwise_dequantize(gq, np.float64) - weights[f"{k}.weight"])**2)
                   for k, gq in layers.items())
        ref2 = sum(np.sum(weights[f"{k}.weight"] ** 2) for k in layers)
        rms = q.logits_difference(qmodel, model, idx)["rms"]
        loss_q = q.lm_loss(qmodel, val_ids, **VAL)
        label = "per-channel" if group is None else str(group)
        print(f"{mode:>5s} {bits:4d} {label:>11s} {nbytes / n:11.4f} {np.sqrt(err2 / ref2):10.4f} "
              f"{rms:9.4f} {loss_q - base:+11.4f}")

# %% [markdown]
# *What to see:* the bytes per parameter are the bits of the code over 8, plus 2 bytes of fp16
# scale per group (and half a byte of zero point per group, asymmetric). Smaller groups and
# more bits lower the weight error; at the same bytes, asymmetric INT4 and NF4 have a lower
# error than symmetric INT4. The logits mostly follow the weight error, though not in every
# 4-bit row. The loss column is honest about the size of this model: at 4 bits its changes
# are of the order of a thousandth of a nat, some of them negative. That is within what 2048
# validation characters can resolve, and it does not rank the group sizes. Only at 2 bits does
# the loss clearly rise, and there the smaller groups clearly help. In large models
# the gap between per-channel and group-128 INT4 is large (the GPTQ and AWQ papers report it
# on OPT and LLaMA), because their rows are thousands of values long and a few large weights
# set the scale of a whole row.
#
# ### Exercise 1
#
# How many bytes per parameter does INT4 with groups of 128 and fp16 scales take
# (symmetric: no zero points)? Work it out by hand, then with fpsim on a weight of 128-value
# rows. `check("bytes per parameter of INT4 group 128 with fp16 scales", ...)`

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
print("by hand:", 4 / 8 + 2 / 128)  # half a byte of code, a 2-byte scale shared by 128
gq128 = q.groupwise_quantize(np.ones((4, 256)), group_size=128)
print("fpsim:  ", gq128.bytes_per_parameter())

# %% tags=["solution"]
check("bytes per parameter of INT4 group 128 with fp16 scales",
      q.groupwise_quantize(np.ones((4, 256)), group_size=128).bytes_per_parameter())

# %% [markdown]
# ### Exercise 2
#
# **Predict first.** A group of 32 weights has absmax 1.0, and one of its weights is 0.3. Which
# value does NF4 give back for it? Look at `q.NF4_VALUES` and decide, then check with
# `q.groupwise_fake_quantize` (use `scale_dtype="float32"`, so the scale is exactly 1).
# `check("NF4 value of 0.3 in a group of absmax 1", ...)`

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
print(q.NF4_VALUES.round(4))  # 0.3 lies between 0.2461 and 0.3379, nearer the second
group = np.zeros((1, 32))
group[0, :2] = [1.0, 0.3]
print(q.groupwise_fake_quantize(group, None, "nf4", scale_dtype="float32")[0, :2])

# %% tags=["solution"]
check("NF4 value of 0.3 in a group of absmax 1",
      q.groupwise_fake_quantize(np.array([[1.0, 0.3] + [0.0] * 30]), None, "nf4",
                                scale_dtype="float32")[0, 1])

# %% [markdown]
# ## 3 · Activations, outliers and SmoothQuant
#
# Weight-only quantization keeps the matmuls in 16 bits. To run them on int8 tensor cores the
# activations must be int8 too (**W8A8**). Here the weights are int8 per output channel, and
# the activations int8 per tensor (one scale for the whole input of a layer) or per token (one
# per row), taken from the input at hand.
#
# Large language models have **outlier channels**: a few input features of a layer are large
# on every token, up to 100× the others (Dettmers et al. 2022 saw them emerge from about 6.7B
# parameters). Under per-tensor or per-token int8, the outlier sets the scale and every other
# feature of the token rounds to a few levels. Per-channel scales would fix that, but an int8
# GEMM cannot apply a scale per input channel: the scales must factor out of the sum over $k$.
#
# First, how large are the channel maxima of our model's activations? The cell below runs a
# few training windows through it and prints, for each linear layer's input, the largest
# channel maximum against the median one.

# %%
calib = [train_ids[rng.integers(0, len(train_ids) - CONTEXT, 8)[:, None] + np.arange(CONTEXT)]]
amax = q.calibrate_activation_max(model, calib)
for name, m in amax.items():
    print(f"{name:16s} largest channel max {m.max():6.2f}, median {np.median(m):5.2f}, "
          f"ratio {m.max() / np.median(m):5.1f}")

# %% [markdown]
# The ratios are small: this tiny model has no outlier channels of the kind large models
# grow. So W8A8 works on it without help, as the next cell shows (the loss change is small for
# both granularities).

# %%
def w8a8_report(gpt, label):
    for gran in ("per_tensor", "per_token"):
        w8a8 = q.quantize_w8a8(gpt, gran)
        rms = q.logits_difference(w8a8, model, idx)["rms"]
        print(f"{label}, W8A8 activations {gran:10s}: logit rms {rms:.4f}, val loss change "
              f"{q.lm_loss(w8a8, val_ids, **VAL) - base:+.4f}")


w8a8_report(model, "model")

# %% [markdown]
# To see the problem, we give the model outlier channels by hand, without changing what it
# computes. In each block, multiply channels 5 and 40 of `ln_1`'s weight and bias by 50, and
# divide the same columns of `c_attn`'s weight by 50; the same for `ln_2` and `c_fc`. The
# product $X W^T$ is unchanged, but the activations now have two channels 50× larger. This is
# SmoothQuant's operation run backwards.

# %%
def with_outlier_channels(gpt, channels, factor):
    """A copy of ``gpt`` computing the same function, with outlier input channels."""
    out = copy.deepcopy(gpt)
    s = np.ones(gpt.d_model)
    s[channels] = factor
    for block in out.h:
        for ln, lin in ((block.ln_1, block.attn.c_attn), (block.ln_2, block.mlp.c_fc)):
            ln.weight.data = ln.weight.numpy(np.float64) * s
            ln.bias.data = ln.bias.numpy(np.float64) * s
            lin.weight.data = lin.weight.numpy(np.float64) / s
    return out


spiky = with_outlier_channels(model, [5, 40], 50.0)
print(f"same function: val loss change {q.lm_loss(spiky, val_ids, **VAL) - base:+.2e}")
amax_spiky = q.calibrate_activation_max(spiky, calib)
m = amax_spiky["h.0.attn.c_attn"]
print(f"h.0.attn.c_attn input: ratio of largest to median channel max "
      f"{m.max() / np.median(m):.1f}")
w8a8_report(spiky, "spiky")

# %% [markdown]
# **Predict first.** Does per-token quantization rescue the outlier model? Each token gets its
# own scale, but the outlier channels are large on *every* token.
#
# **SmoothQuant** (Xiao et al. 2023) divides each input channel $j$ by a factor $s_j$ and
# multiplies the weight's column $j$ by it, which leaves $X W^T$ unchanged:
#
# $$ (X / s)\,(W s)^T = X W^T, \qquad s_j = \frac{\max|X_j|^{\alpha}}{\max|W_j|^{1-\alpha}}. $$
#
# $\max|X_j|$ comes from calibration samples, and $\alpha$ (0.5 by default) sets how much of
# the difficulty moves into the weights. Where the layer follows a LayerNorm, $1/s$ folds
# into the LayerNorm's weight and bias, so the smoothed model costs nothing extra at run time.
# `smooth_gpt` does that for `ln_1 → c_attn` and `ln_2 → c_fc`.

# %%
def spread(v):
    """Largest over median of a vector of channel maxima."""
    return v.max() / np.median(v)


print(f"{'alpha':>5s} {'act spread':>10s} {'wt spread':>9s} {'logit rms':>9s} "
      f"{'loss change':>11s}   (h.0.attn.c_attn; W8A8 per tensor)")
for alpha in (0.0, 0.5, 0.8, 1.0):
    smoothed, factors = q.smooth_gpt(spiky, amax_spiky, alpha)
    sf = factors["h.0.attn.c_attn"]
    w_col = np.abs(smoothed.h[0].attn.c_attn.weight.numpy(np.float64)).max(axis=0)
    w8a8 = q.quantize_w8a8(smoothed, "per_tensor")
    print(f"{alpha:5.1f} {spread(amax_spiky['h.0.attn.c_attn'] / sf):10.1f} "
          f"{spread(w_col):9.1f} {q.logits_difference(w8a8, model, idx)['rms']:9.4f} "
          f"{q.lm_loss(w8a8, val_ids, **VAL) - base:+11.4f}")
s = q.smooth_gpt(spiky, amax_spiky, 0.5)[1]["h.0.attn.c_attn"]
print("s of h.0.attn.c_attn, channels 5 and 40 against the median:",
      (s[[5, 40]] / np.median(s)).round(1))

# %% [markdown]
# *What to see:* with the outliers, W8A8 moves the logits many times more than on the
# original model (compare the logit rms of the two cells above). Per-token scales help only
# part of the way, because the outlier channels are large on every token. The loss of this
# small model moves much less than its logits do.
#
# In the table, "act spread" and "wt spread" are the largest channel maximum over the median
# one, of the smoothed activations and of the smoothed weight columns. SmoothQuant brings the
# logit change back near the original model's. $\alpha = 0.5$ makes the two spreads equal
# (exercise 3 shows why), and $\alpha = 1$ moves all the spread into the weights. Here even
# $\alpha = 0$ works, but only because of how we made the outliers: we shrank the weight
# columns of the outlier channels, and $s_j = 1 / \max|W_j|$ undoes exactly that. In a real
# LLM the outlier channels' weights are not small, and $\alpha = 0$ leaves the outliers in the
# activations. The paper uses $\alpha = 0.5$ for most models and up to 0.75–0.85 for models
# with stronger outliers (GLM, some LLaMAs). Too large an $\alpha$ moves the outliers into the
# weights, where per-channel int8 meets them instead.
#
# ### Exercise 3
#
# A channel's activations reach $\max|X_j| = 16$, and the largest weight of column $j$ is
# $\max|W_j| = 0.25$. What is its SmoothQuant factor for $\alpha = 0.5$? After smoothing, what
# are the channel's activation maximum and the column's weight maximum?
# `check("SmoothQuant factor for max|X| = 16, max|W| = 0.25, alpha = 0.5", ...)`

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
s_j = q.smoothing_factors([16.0], [[0.25]], alpha=0.5)[0]
print("s =", s_j, "= sqrt(16) / sqrt(0.25)")
print("after: max|X_j| / s =", 16 / s_j, " max|W_j| * s =", 0.25 * s_j)  # both sqrt(16 * 0.25)

# %% tags=["solution"]
check("SmoothQuant factor for max|X| = 16, max|W| = 0.25, alpha = 0.5",
      q.smoothing_factors([16.0], [[0.25]], alpha=0.5)[0])

# %% [markdown]
# ## 4 · A quantized KV cache
#
# When a model generates text, each new token attends to the keys and values of all the tokens
# before it. These are kept in the **KV cache**, which grows with the context length and the
# batch size. For long contexts it outgrows the weights. Storing K and V in 8 bits halves it
# against fp16. The options here:
#
# - int8 with one absmax scale per token (over all heads), or per token and head;
# - fp8 E4M3 or E5M2 with one scale per tensor (Transformer Engine's `fp8_scale`, the
#   largest |value| mapped to the format's largest value).
#
# `attention_error` measures, layer by layer, the relative error of the attention output when
# that layer's K and V are quantized (its inputs are the unquantized model's).
# `quantize_kv_cache` quantizes K and V in every layer, for the loss.

# %%
print(f"{'format':>6s} {'scales':>10s} {'attn error h.0':>14s} {'h.1':>8s} "
      f"{'val loss change':>16s}")
for fmt, gran in (("int8", "per_token"), ("int8", "per_head"), ("e4m3", "per_tensor"),
                  ("e5m2", "per_tensor")):
    err = q.attention_error(model, idx, fmt, gran)
    loss_q = q.lm_loss(q.quantize_kv_cache(model, fmt, gran), val_ids, **VAL)
    print(f"{fmt:>6s} {gran:>10s} {err['h.0']:14.2e} {err['h.1']:8.2e} {loss_q - base:+16.4f}")

# %% [markdown]
# *What to see:* int8 keeps 8 bits of precision for every value, so its attention error is
# the smallest; per-head scales follow each head's own range and do a little better. fp8
# trades precision for range: E4M3 has 3 mantissa bits, so its relative error is about 2⁻⁴ per
# value, and E5M2, with 2, about twice that. Its exponent lets one scale per tensor serve keys
# of very different sizes. On this model every option changes the loss by little. In large models, int8 and fp8 KV caches are in everyday
# use (vLLM, TensorRT-LLM), and 4-bit and 2-bit caches need finer scales (KIVI: per-channel
# keys, per-token values).
#
# ### Exercise 4
#
# Quantize the KV cache of the outlier model `spiky` from section 3 (its K and V are not
# affected by the LayerNorm trick: why?), and compare int8 per token with fp8 E4M3 per
# tensor.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
for fmt, gran in (("int8", "per_token"), ("e4m3", "per_tensor")):
    loss_q = q.lm_loss(q.quantize_kv_cache(spiky, fmt, gran), val_ids, **VAL)
    print(f"{fmt} {gran}: val loss change {loss_q - base:+.4f}")
# The same as for `model`: c_attn's output, q | k | v, is X W^T, which the trick leaves
# unchanged. The outliers live in c_attn's *input*, not in the keys and values.

# %% [markdown]
# ## Summary
#
# - Group-wise weight-only quantization stores $b$-bit codes and one scale per group: INT4
#   with fp16 scales and groups of 128 costs $4/8 + 2/128$ bytes per parameter. Smaller groups
#   follow the weights more closely at the cost of more scales. NF4 puts its 16 levels where
#   normal weights are dense.
# - Activations are harder than weights because of outlier channels. Per-tensor and per-token
#   int8 both suffer from them, because the outliers sit in the same channels on every token.
# - SmoothQuant divides channel $j$ by $s_j = \max|X_j|^\alpha / \max|W_j|^{1-\alpha}$ and
#   multiplies the weights by it, folded into the LayerNorm. The function is unchanged, and
#   both sides become easy to quantize.
# - K and V can be cached in int8 (per-token or per-head scales) or fp8 (a per-tensor scale).
#   int8 is more precise, fp8 has more range.
# - This tiny model shows the arithmetic and the mechanisms, not the sizes of the effects in
#   large models. It has no natural outlier channels, and its 4-bit weights cost it little.
#   The outliers here were made by hand, and the papers' numbers are for models 10⁵× larger.
