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
# # 08 · Stable kernels and optimizers in low precision
#
# Mixed precision keeps most arithmetic in fp16 or bf16. A handful of kernels break there unless
# they are written with the format in mind: softmax and log-sum-exp, attention logits, the
# variance of a layer norm, Adam's epsilon, the weight update of a pure-bf16 model, and the
# sum of an all-reduce. Each section shows the failure with `fpsim` (every operation rounded to
# the format, exactly), then the fix that real kernels use, then an exercise.
#
# **Learning goals.** After this notebook you can
#
# 1. explain why softmax and log-sum-exp subtract the maximum, and where attention's
#    $1/\sqrt{d}$ has to be applied in fp16;
# 2. compare one-pass, two-pass and Welford variance in fp16 and bf16;
# 3. say what Adam's `eps=1e-8` becomes in fp16 and what that does to an update;
# 4. keep small weight updates alive in pure bf16 with Kahan summation or stochastic rounding;
# 5. see that an fp16 all-reduce depends on the order of the ranks, and remove the dependence.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.
# `check("question", answer)` says whether a numeric answer is right, without giving it away.

# %%
import math

import numpy as np

import fpsim
from fpsim import optim
from fpsim.autograd import Tensor
from fpsim.course import checker
from fpsim.nn import Parameter
from fpsim.viz import style

check = checker("08")  # check("question", answer) says right or wrong, never the answer
f16 = fpsim.FP16
print(f"fp16: max {f16.max}, smallest subnormal {f16.smallest_subnormal!r}; "
      f"ln(max) = {math.log(f16.max):.4f}")

# %% [markdown]
# ## 1 · Softmax and log-sum-exp overflow
#
# $\mathrm{softmax}(z)_i = e^{z_i} / \sum_j e^{z_j}$. In fp16, $e^{z}$ is infinite as soon as
# it rounds above 65504, i.e. for $z$ a little above $\ln 65504 \approx 11.09$: logits of 12 are
# ordinary, yet the textbook formula returns NaN (∞/∞).
#
# **Predict, then run.** What is the largest integer $x$ for which $e^x$ is finite in fp16?

# %% tags=["solution"]
check("largest integer x with exp(x) finite in fp16", math.floor(math.log(f16.max)))

# %%
z = Tensor([[2.0, 9.0, 11.5, 12.0]], "fp16")  # four logits, each op rounded to fp16
e = z.exp()
naive = e / e.sum(dim=1, keepdim=True)
print("exp(z) in fp16      :", e.numpy())
print("naive softmax       :", naive.numpy())
# the fix: subtract the row's maximum first; every exponent is then <= 0 and exp(...) <= 1
shifted = (z - z.max(dim=1, keepdim=True).values).exp()
stable = shifted / shifted.sum(dim=1, keepdim=True)
print("max-subtracted      :", stable.numpy())
exact = np.exp(z.numpy(np.float64) - 12.0) / np.exp(z.numpy(np.float64) - 12.0).sum()
print("exact, rounded fp16 :", fpsim.round(exact, "fp16"))

# %% [markdown]
# The same shift saves log-sum-exp, the normaliser of cross-entropy:
# $\log \sum_j e^{z_j} = m + \log \sum_j e^{z_j - m}$ with $m = \max_j z_j$.

# %%
lse_naive = z.exp().sum(dim=1).log()
m = z.max(dim=1).values
lse_stable = m + (z - z.max(dim=1, keepdim=True).values).exp().sum(dim=1).log()
print(f"naive log-sum-exp {lse_naive.item()}, shifted {lse_stable.item()}, exact "
      f"{float(np.log(np.exp(z.numpy(np.float64)).sum())):.4f}")

# %% [markdown]
# ### Exercise 1
#
# The other end: logits $[-20, -21, -22]$. Compute the naive fp16 softmax, explain the result
# (compare $e^{-20}$ with fp16's smallest subnormal), and show that subtracting the maximum
# fixes this case too.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
z2 = Tensor([[-20.0, -21.0, -22.0]], "fp16")
e2 = z2.exp()
print("exp:", e2.numpy(), "(e**-20 =", f"{math.exp(-20):.2e} < 2**-24 = {2.0**-24:.2e})")
print("naive:", (e2 / e2.sum(dim=1, keepdim=True)).numpy())  # 0 / 0
s2 = (z2 - z2.max(dim=1, keepdim=True).values).exp()
print("shifted:", (s2 / s2.sum(dim=1, keepdim=True)).numpy())

# %% [markdown]
# ## 2 · Attention logits and the $1/\sqrt{d}$ scale
#
# Attention computes $QK^\top/\sqrt{d}$. The scale exists for the softmax: for queries and keys
# of unit-variance entries, $q \cdot k$ is a sum of $d$ products and its variance grows as $d$;
# dividing by $\sqrt{d}$ keeps the logits' variance independent of $d$, so the softmax does not
# saturate into a one-hot (with vanishing gradients) as $d$ grows (Vaswani et al. 2017). In fp16
# it has a second role. Without the scale, a query that matches its key
# gives $q \cdot q = \sum_i q_i^2$, which grows with the dimension $d$: with $d = 1024$ and
# activations of standard deviation 8 it is about $1024 \cdot 64 = 65536$, beyond fp16's
# maximum. The product is accumulated in fp32 (fpsim's default, as on tensor cores) but its
# result is stored in fp16, where it overflows; softmax then sees ∞ and returns NaN.

# %%
rng = np.random.default_rng(0)
d = 1024
x = rng.normal(0.0, 8.0, (4, d))          # four tokens; Q = K = x (self-matching queries)
q = Tensor(x, "fp16")
logits = q @ q.T
print("QK^T in fp16 (diagonal):", np.diag(logits.numpy()))
print("softmax of row 1:", logits.softmax(dim=1).numpy()[1])
# the fix: scale *before* the product is stored in fp16 (here on Q, as many kernels do)
scaled = (q * (1.0 / math.sqrt(d))) @ q.T
print("(Q/sqrt(d)) K^T (diagonal):", np.diag(scaled.numpy()))
print("softmax of row 1:", scaled.softmax(dim=1).numpy()[1])

# %% [markdown]
# Scaling the fp16 result afterwards does not help: it is already ∞. Fused attention kernels
# (FlashAttention) apply the scale to the fp32 accumulator, before anything is rounded to
# fp16.
#
# ### Exercise 2
#
# For activations of standard deviation 8, what is the largest $d$ (a power of two) for which
# the unscaled diagonal logits stay finite in fp16? Check with a few values of $d$.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
for dd in (256, 512, 1024, 2048):
    xd = Tensor(np.random.default_rng(1).normal(0.0, 8.0, (4, dd)), "fp16")
    diag = np.diag((xd @ xd.T).numpy())
    print(f"d = {dd:5d}: diagonal max {diag.max():8.0f}, all finite: {np.isfinite(diag).all()}")
# q.q ~ 64 d, so d = 512 (about 32768) is safe and d = 1024 (about 65536) is not.

# %% [markdown]
# ## 3 · Layer norm's variance: one pass, two passes, Welford
#
# A layer norm needs the variance of each row. The one-pass formula
# $\mathrm{E}[x^2] - \mathrm{E}[x]^2$ reads the data once but subtracts two large, nearly
# equal numbers; the two-pass formula $\mathrm{E}[(x - \bar x)^2]$ subtracts the mean first;
# Welford's algorithm updates a running mean and sum of squared deviations in one pass. Below,
# rows of 64 values with mean $\mu$ and standard deviation 1, every operation rounded to fp16
# or bf16 (sums as a pairwise tree, as a GPU reduction does), against the exact variance of the
# same rounded data.

# %%
def variances(xs, fmt):
    """One-pass, two-pass and Welford variance of each row of xs, every op rounded to fmt."""
    n = xs.shape[-1]
    total = fpsim.sum(xs, fmt, axis=-1, order="pairwise")
    mean = fpsim.div(total, n, fmt)
    sq = fpsim.sum(fpsim.mul(xs, xs, fmt), fmt, axis=-1, order="pairwise")
    one = fpsim.sub(fpsim.div(sq, n, fmt), fpsim.mul(mean, mean, fmt), fmt)
    dev = fpsim.sub(xs, mean[..., None], fmt)
    two = fpsim.div(fpsim.sum(fpsim.mul(dev, dev, fmt), fmt, axis=-1, order="pairwise"), n, fmt)
    run_mean, m2 = np.zeros(xs.shape[:-1]), np.zeros(xs.shape[:-1])
    for i in range(n):  # Welford: one pass over the columns, vectorised over the rows
        delta = fpsim.sub(xs[..., i], run_mean, fmt)
        run_mean = fpsim.add(run_mean, fpsim.div(delta, i + 1, fmt), fmt)
        m2 = fpsim.add(m2, fpsim.mul(delta, fpsim.sub(xs[..., i], run_mean, fmt), fmt), fmt)
    welford = fpsim.div(m2, n, fmt)
    return {"one-pass": one, "two-pass": two, "Welford": welford}


mus = 2.0 ** np.arange(0, 8)                       # row means 1 ... 128
rows = 32
errors = {}
for fmt in ("fp16", "bf16"):
    xs = fpsim.round(mus[:, None, None] + rng.normal(0, 1, (mus.size, rows, 64)), fmt)
    exact = xs.var(axis=-1)                           # float64, of the same rounded data
    for method, v in variances(xs, fmt).items():
        with np.errstate(invalid="ignore"):
            rel = np.abs(v - exact) / exact
        errors[fmt, method] = np.where(np.isfinite(rel), rel, np.inf).max(axis=1)
for (fmt, method), err in errors.items():
    print(f"{fmt} {method:9s} worst relative error at mu = 1, 4, 16, 64, 128: "
          + ", ".join(f"{e:.2g}" for e in err[[0, 2, 4, 6, 7]]))

# %%
with style.context():
    fig, axes = style.new_figure((9, 3.4), ncols=2)
    for ax, fmt in zip(axes, ("fp16", "bf16"), strict=True):
        for method, ls in (("one-pass", "-"), ("two-pass", "--"), ("Welford", ":")):
            err = np.minimum(errors[fmt, method], 1e3)  # infinite / NaN drawn at the top
            ax.loglog(mus, np.maximum(err, 1e-6), ls, lw=2, base=2, label=method)
        ax.set_xlabel("row mean mu (std 1)")
        ax.set_title(f"variance in {fmt}", loc="left")
    axes[0].set_ylabel("worst relative error (capped)")
    axes[0].legend()
fig

# %% [markdown]
# *What to see:* the one-pass error grows with the mean until the variance is lost (bf16, 8
# significant bits) or the sum of squares overflows (fp16, drawn at the top); two passes are
# far more accurate, limited by how finely the mean itself is rounded. Welford, run entirely in
# the low format, sits in between: its running mean is rounded at every step. This is why layer-norm kernels keep their statistics in
# fp32 (two-pass or Welford there).
#
# ### Exercise 3
#
# Compute the one-pass variance in fp32 (`fmt="fp32"`) of fp32 data with standard deviation 1.
# From which mean (a power of two) on does it lose more than 1% of the variance?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
mus32 = 2.0 ** np.arange(0, 15)
xs = fpsim.round(mus32[:, None, None] + rng.normal(0, 1, (mus32.size, rows, 64)), "fp32")
exact = xs.var(axis=-1)
one32 = variances(xs, "fp32")["one-pass"]
worst = (np.abs(one32 - exact) / exact).max(axis=1)
for mu, w in zip(mus32, worst, strict=True):
    print(f"mu = {mu:6.0f}: one-pass fp32 worst relative error {w:.2g}")
# fp32 has 24 bits: E[x^2] ~ mu^2 carries an absolute error of order mu^2 * 2**-24 (times the
# rounding errors of the sum), which reaches 1% of the variance (1) a few hundred units up.

# %% [markdown]
# ## 4 · Adam's epsilon in fp16
#
# Adam divides by $\sqrt{\hat v} + \epsilon$ with $\epsilon = 10^{-8}$ by default.
#
# **Predict, then run.** What is $10^{-8}$ in fp16?

# %% tags=["solution"]
check("fp16(1e-8)", float(fpsim.round(1e-8, "fp16")))

# %%
print("fp16(1e-8) =", float(fpsim.round(1e-8, "fp16")), "| smallest subnormal", 2.0**-24)
grads = np.array([1e-2, 1e-4, 1e-5, 1e-6], dtype=np.float16)
print("grad**2 in fp16:", fpsim.round(grads.astype(np.float64) ** 2, "fp16"))
for state_fmt, eps in (("fp16", 1e-8), ("fp16", 1e-4), (None, 1e-8)):
    w = Parameter(np.ones(4), "fp16")
    opt = optim.Adam([w], lr=1e-3, eps=eps, state_fmt=state_fmt)
    for _ in range(3):
        w.grad = grads.copy()
        opt.step()
    state = opt.state[w]
    print(f"state {state_fmt or 'fp32 (fpsim default)':21s} eps {eps:g}: moved "
          f"{1 - w.numpy(np.float64)}, v {np.asarray(state['exp_avg_sq'], dtype=np.float64)}")

# %% [markdown]
# With fp16 state, $g^2$ underflows to 0 for the gradients of $10^{-4}$ and below, so $v = 0$.
# fpsim's `state_fmt="fp16"` computes as PyTorch does with fp16 parameters, whose moments are
# fp16 tensors: each op of the moments and of the denominator $\sqrt{\hat v} + \epsilon$ rounds
# to fp16, and the step uses the stored moments. With $\epsilon = 10^{-8}$ the denominator is
# $0 + 10^{-8}$ rounded to fp16, which is 0: the step $m / 0$ is infinite and those weights go
# to $-\infty$ at the first step, as PyTorch 2.13's pure-fp16 Adam does (recorded in
# tests/data/torch/adam_fp16.npz). $\epsilon = 10^{-4}$ keeps the denominator finite, but it
# does not damp the small updates, it **loses** them: with $v = 0$ the denominator is
# $\epsilon$, so a weight moves by about $\text{lr} \cdot \hat m / \epsilon$, which for the
# gradients of $10^{-5}$ and $10^{-6}$ is below half the fp16 spacing just below 1: the rounded
# weight does not move at all (the distances above), where Adam's step is about lr for every
# weight.
# Moments kept in fp32 (fpsim's default; PyTorch keeps them in the parameter's dtype, so an fp32
# master copy does that there) hold $g^2$ and give every weight Adam's step of about lr.
#
# ### Exercise 4
#
# Find the smallest power of ten $\epsilon = 10^{-k}$ that is not 0 in fp16, and the smallest
# that is a *normal* fp16 number.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
for kk in range(3, 10):
    v = float(fpsim.round(10.0**-kk, "fp16"))
    print(f"1e-{kk}: fp16 {v!r:24s} {fpsim.classify(10.0**-kk, 'fp16')}")

# %% [markdown]
# ## 5 · Weight updates in pure bf16: Kahan summation and stochastic rounding
#
# Training entirely in bf16 (no fp32 master copy) loses every update smaller than half an ulp
# of the weight: at $w = 1$ that is $2^{-8} \approx 0.0039$. Two cheap remedies: a Kahan
# compensation buffer (also bf16) that remembers what each rounding dropped, and stochastic
# rounding, which keeps each update with a probability proportional to its size.

# %%
steps, n_w = 1000, 256
u = np.full(n_w, 1e-3)                              # a constant update, about 1/8 of the ulp
w_rne = np.ones(n_w)
w_kahan, comp = np.ones(n_w), np.zeros(n_w)
w_sr = np.ones(n_w)
sr_rng = np.random.default_rng(0)
hist = []
for _ in range(steps):
    w_rne = fpsim.add(w_rne, u, "bf16")
    y = fpsim.sub(u, comp, "bf16")                  # Kahan: add what was lost last time
    new = fpsim.add(w_kahan, y, "bf16")
    comp = fpsim.sub(fpsim.sub(new, w_kahan, "bf16"), y, "bf16")
    w_kahan = new
    w_sr = fpsim.add(w_sr, u, "bf16", "stochastic", rng=sr_rng)
    hist.append((w_rne.mean(), w_kahan.mean(), w_sr.mean()))
hist = np.array(hist)
exact = 1 + np.arange(1, steps + 1) * 1e-3
print(f"after {steps} steps: exact {exact[-1]:.4f}, round to nearest {hist[-1, 0]:.4f}, "
      f"Kahan {hist[-1, 1]:.4f}, stochastic (mean of {n_w}) {hist[-1, 2]:.4f}")

# %%
with style.context():
    fig, ax = style.new_figure((7, 3.2))
    ax.plot(exact, color="black", lw=1, label="exact")
    for k, label in enumerate(("bf16 round to nearest", "bf16 + Kahan", "bf16 stochastic")):
        ax.plot(hist[:, k], lw=2, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("mean weight")
    ax.set_title("w += 0.001 in bf16, no master copy", loc="left")
    ax.legend()
fig

# %% [markdown]
# *What to see:* round to nearest never moves (every update is lost); the Kahan weights and the
# mean of the stochastically rounded ones both follow the exact line.
#
# ### Exercise 5
#
# Kahan's buffer costs one more bf16 value per weight. How far is a single weight with
# stochastic rounding from the exact value after 1000 steps (the spread over the 256 weights)?
# Compare with the Kahan weight's error.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
print(f"stochastic: std over weights {w_sr.std():.4f}, worst {np.abs(w_sr - exact[-1]).max():.4f}")
print(f"Kahan: worst error {np.abs(w_kahan - exact[-1]).max():.4f} "
      f"(bf16 ulp at 2: {float(fpsim.ulp(2.0, 'bf16'))})")

# %% [markdown]
# ## 6 · An fp16 all-reduce depends on the order of the ranks
#
# Data-parallel training sums every gradient over the ranks. In fp16 each addition rounds, so
# the result depends on the order. A ring all-reduce reduces each chunk of the gradient
# starting at a different rank; a tree pairs the ranks. Below, 8 ranks each hold an fp16
# gradient of 4096 values; we sum them in rank order, in the ring's per-chunk order, and as a
# tree, every addition rounded to fp16, and compare with the exact sum rounded once.

# %%
ranks, size = 8, 4096
g = fpsim.round(rng.normal(0, 1, (ranks, size)) * np.exp2(rng.integers(-6, 3, (ranks, 1))),
                "fp16")
exact_once = fpsim.round(g.sum(axis=0), "fp16")  # float64 sum of 8 fp16 values is exact


def sum_in_order(order_of):
    """Sum over ranks in fp16; order_of(j) gives the rank order for element j's chunk."""
    out = np.empty(size)
    chunk = size // ranks
    for c in range(ranks):
        sl = slice(c * chunk, (c + 1) * chunk)
        order = order_of(c)
        acc = g[order[0], sl]
        for r in order[1:]:
            acc = fpsim.add(acc, g[r, sl], "fp16")
        out[sl] = acc
    return out


rank_order = sum_in_order(lambda _c: list(range(ranks)))
ring = sum_in_order(lambda c: [(c + 1 + i) % ranks for i in range(ranks)])
level = g.copy()
while level.shape[0] > 1:                            # a binary tree over the ranks
    level = fpsim.add(level[0::2], level[1::2], "fp16")
tree = level[0]
for name, r in (("rank order", rank_order), ("ring", ring), ("tree", tree)):
    print(f"{name:10s}: differs from the exact sum rounded once in "
          f"{np.mean(r != exact_once):5.1%} of the elements")
print(f"ring vs rank order differ in {np.mean(ring != rank_order):.1%} of the elements")
wide = fpsim.round(fpsim.sum(g, "fp32", axis=0, order="sequential"), "fp16")
print(f"accumulated in fp32, rounded to fp16 once: differs in {np.mean(wide != exact_once):.1%}")

# %% [markdown]
# Two runs that differ only in how the ranks are wired give different gradients, and every
# order is further from the exact sum than one rounding. The usual fixes: communicate and sum
# the gradients in fp32 and round once (e.g. PyTorch FSDP's `MixedPrecision(reduce_dtype=
# torch.float32)`), and fix the order (a deterministic tree) when bitwise reproducibility
# matters.
#
# ### Exercise 6
#
# Repeat the rank-order sum in bf16 instead of fp16 and compare the typical (median) relative
# error of the two against the exact float64 sum. How many times larger is bf16's?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
gb = fpsim.round(g, "bf16")
acc_b = gb[0]
for r in range(1, ranks):
    acc_b = fpsim.add(acc_b, gb[r], "bf16")
med = {}
for name, total, data in (("fp16", rank_order, g), ("bf16", acc_b, gb)):
    ref = data.sum(axis=0)                          # exact: float64 sum of 8 short values
    med[name] = np.median(np.abs(total - ref) / np.abs(ref))
    print(f"{name}: median relative error {med[name]:.2e}")
print(f"bf16 / fp16: {med['bf16'] / med['fp16']:.1f}x (3 fewer significand bits: 2**3 = 8)")

# %% [markdown]
# ## Summary
#
# - Softmax and log-sum-exp subtract the row maximum; attention scales before its product is
#   stored in fp16.
# - Variances need the mean subtracted first (two-pass or Welford), and in practice fp32
#   statistics.
# - Adam's $\epsilon = 10^{-8}$ is 0 in fp16: keep the moments in fp32 or use a larger
#   $\epsilon$.
# - Pure-bf16 weights need Kahan compensation or stochastic rounding to keep small updates.
# - A low-precision all-reduce depends on the order of the ranks; reduce in fp32 and round once.
