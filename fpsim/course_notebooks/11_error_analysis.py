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
# # 11 · Error analysis: what a bound promises and what a sum does
#
# A sum of $n$ numbers in floating point makes $n - 1$ roundings. Classical error analysis
# bounds their effect in the worst case; probabilistic error analysis (Higham & Mary 2019)
# bounds it with high probability, and the two differ by a factor of about $\sqrt{n}$. This
# notebook measures fpsim's sums, in every accumulation order, and a tensor core's dot
# products against both.
#
# **Learning goals.** After this notebook you can
#
# 1. state the deterministic bound $\gamma_{n-1} = (n-1)u / (1 - (n-1)u)$ of recursive
#    summation and say where it stops saying anything;
# 2. state the probabilistic bound, about $\sqrt{n}\,u$, and when its assumption (independent,
#    mean-zero rounding errors) fails;
# 3. compare sequential, pairwise and Kahan summation in fp16 against both bounds, and read a
#    tensor core's error against K in the same terms.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.

# %%
import math
from fractions import Fraction

import numpy as np

import fpsim
import fpsim.tensorcore as tc
from fpsim.course import checker

check = checker("11")  # check("question", answer) says right or wrong, never the answer
u16 = 2.0 ** -(fpsim.FP16.mantissa_bits + 1)  # fp16's unit roundoff, 2**-11
print("fp16: u =", u16, "= 2**-11")

# %% [markdown]
# ## 1 · The deterministic bound
#
# Recursive (sequential) summation $\hat s = \mathrm{fl}(\dots\mathrm{fl}(x_1 + x_2) + \dots
# + x_n)$ satisfies $|\hat s - s| \le \gamma_{n-1} \sum_i |x_i|$ with
# $\gamma_k = k u / (1 - k u)$, for every input and every rounding error pattern (Higham,
# *Accuracy and Stability of Numerical Algorithms*, 2002, section 4.2). The bound needs
# $k u < 1$: beyond that it says nothing at all.
#
# **Predict first.** What is the smallest $n$ for which $n u \ge 1$ in fp16?
# `check("smallest n with n u >= 1 in fp16", ...)`

# %% tags=["solution"]
check("smallest n with n u >= 1 in fp16", 2 ** (fpsim.FP16.mantissa_bits + 1))

# %% [markdown]
# ## 2 · Measured: every order, against both bounds
#
# Below, $n$ values drawn uniformly from $[0, 1)$ and from a standard normal distribution are
# rounded to fp16 and summed in fp16 by `fpsim.sum` in three orders; the exact sum of the same
# fp16 values is computed with fractions. The error is reported relative to $\sum |x_i|$, the
# scale of both bounds, as the largest over 5 draws.

# %%
def gamma(k, u):
    return k * u / (1 - k * u) if k * u < 1 else math.inf


def relative_errors(n, dist, orders, trials=5, seed=0):
    rng = np.random.default_rng(seed)
    worst = dict.fromkeys(orders, 0.0)
    for _ in range(trials):
        x = rng.random(n) if dist == "uniform" else rng.standard_normal(n)
        x = fpsim.round(x, "fp16")
        exact = sum((Fraction(float(v)) for v in x), Fraction(0))
        scale = float(np.abs(x).sum())
        for o in orders:
            err = abs(Fraction(float(fpsim.sum(x, "fp16", order=o))) - exact)
            worst[o] = max(worst[o], float(err) / scale)
    return worst


orders = ("sequential", "pairwise", "kahan")
print(f"{'dist':8s} {'n':>5s} " + "".join(f"{o:>12s}" for o in orders)
      + f"{'gamma_n-1':>12s}{'sqrt(n) u':>12s}")
for dist in ("uniform", "normal"):
    for n in (16, 128, 1024, 4096):
        w = relative_errors(n, dist, orders)
        print(f"{dist:8s} {n:5d} " + "".join(f"{w[o]:12.2e}" for o in orders)
              + f"{gamma(n - 1, u16):12.2e}{math.sqrt(n) * u16:12.2e}")

# %% [markdown]
# *What to see:* every measured error is below $\gamma_{n-1}$ while that bound is finite
# (here for $n$ up to 2048), and the deterministic bound is pessimistic by orders of magnitude
# for pairwise and Kahan summation. Sequential summation of the normal data stays well below
# $\sqrt{n}\,u$: its rounding errors have both signs and partly cancel, as the probabilistic
# analysis assumes. On the uniform data its error grows steadily with $n$, far faster than on
# the normal data, and approaches $\sqrt{n}\,u$: the running sum only grows, and once it is
# large every addend loses its low bits to rounding, so the errors are no longer independent
# and mean-zero. Pairwise summation's bound has $\log_2 n$ in place of $n$, and Kahan's is
# $2u$ plus a term in $n u^2$: both stay at or below about $u$ at every $n$ here.
#
# ### Exercise 1
#
# The probabilistic bound (Higham & Mary 2019, Theorem 3.1) says that with probability at
# least $1 - 2\exp(-\lambda^2/2)$ the error of recursive summation is at most
# $\lambda \sqrt{n}\,u \sum_i |x_i|$ (to first order), if the rounding errors are independent
# random variables of mean zero. For $n = 4096$ in fp16, what is $\sqrt{n}\,u$ in units of
# $u$? And for which $\lambda$ does the bound hold with probability 99%? Check the first with
# `check("sqrt(n) u for n = 4096, in units of u", ...)`.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
n = 4096
lam = math.sqrt(-2 * math.log(0.01 / 2))  # 1 - 2 exp(-lam**2 / 2) = 0.99
print(f"sqrt(n) = {math.sqrt(n):g} units of u; lambda for 99%: {lam:.3f}; "
      f"the bound: {lam * math.sqrt(n) * u16:.3e} against gamma_(n-1) = {gamma(n - 1, u16)}")

# %% tags=["solution"]
check("sqrt(n) u for n = 4096, in units of u", math.sqrt(n))

# %% [markdown]
# ## 3 · A tensor core's error against K
#
# A tensor core accumulates a dot product of length $K$ in blocks (notebook 04): each block
# aligns its products to the largest exponent and truncates them, and each block result is
# rounded toward zero to fp32. Truncation and rounding toward zero always err in the same
# direction, so the errors do not cancel: the analysis to expect is the deterministic one, with
# fp32's $u = 2^{-24}$ and the number of truncations in place of $n$.

# %%
u32 = 2.0**-24
ks = (16, 64, 256, 1024, 4096)
r = tc.error_vs_k(ks=ks, gpus=("V100", "A100", "H100"), trials=5)
print(f"{'':18s}" + "".join(f"{'K=' + str(k):>10s}" for k in ks))
for name, errs in r.mean.items():
    print(f"{name:18s}" + "".join(f"{e:10.2e}" for e in errs))
print(f"{'K u (fp32)':18s}" + "".join(f"{k * u32:10.2e}" for k in ks))
print(f"{'sqrt(K) u (fp32)':18s}" + "".join(f"{math.sqrt(k) * u32:10.2e}" for k in ks))

# %% [markdown]
# *What to see:* on these positive inputs the tensor-core errors grow about linearly in K, a
# fixed fraction of $K u$ and far above $\sqrt{K}\,u$; fp32 sequential summation, whose
# round-to-nearest errors partly cancel, grows more slowly, and pairwise summation stays near
# $u$.
#
# ### Exercise 2
#
# Repeat the measurement with `distribution="normal"` (inputs of both signs). Which bound do
# the tensor cores follow now, and why does the answer depend on the data and not only on the
# hardware?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
rn = tc.error_vs_k(ks=ks, gpus=("A100", "H100"), trials=5, distribution="normal")
for name, errs in rn.mean.items():
    print(f"{name:18s}" + "".join(f"{e:10.2e}" for e in errs))
# With mixed signs the running sum stays small and the truncations of products of both signs
# err in both directions relative to the exact sum; the errors then partly cancel and grow
# like sqrt(K) u rather than K u. The deterministic bound is a bound for every input; the growth you
# see depends on whether the data make the errors cancel.

# %% [markdown]
# ## Summary
#
# - Recursive summation's deterministic bound $\gamma_{n-1}$ holds for every input, is far
#   from tight, and says nothing once $n u \ge 1$ (n = 2048 in fp16).
# - The probabilistic bound, about $\lambda\sqrt{n}\,u$, describes sums whose rounding errors
#   cancel; sums of one sign, truncation and rounding toward zero break its assumption.
# - Pairwise and Kahan summation keep the error near $u$; a tensor core's truncating blocks
#   make it grow like $K u$ on data of one sign.
