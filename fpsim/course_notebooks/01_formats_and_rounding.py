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
# # 01 · Formats and rounding
#
# Every low-precision computation starts with one step: a real number is *rounded* to a format.
# This notebook takes that step apart, bit by bit, with `fpsim`, which rounds exactly (every
# result is checked against Berkeley TestFloat, NumPy / ml_dtypes casts and exact rational
# arithmetic).
#
# **Learning goals.** After this notebook you can
#
# 1. read the sign, exponent and mantissa bits of fp32, bf16, fp16 and fp8 numbers and say what
#    each format trades (range against precision);
# 2. describe where the representable numbers lie: binades, spacing, subnormals, overflow;
# 3. apply every IEEE rounding mode, round-to-odd and stochastic rounding, and explain why
#    stochastic rounding is unbiased;
# 4. use IEEE exception flags (`flag_context`, traps) and the integer conversions (saturate or wrap);
# 5. explain *double rounding* and why `fpsim.add` / `fpsim.fma` round once;
# 6. see why summing in bf16 stagnates, and how pairwise and Kahan summation fix it.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.

# %%
import math

import numpy as np

import fpsim
from fpsim import viz
from fpsim.course import checker
from fpsim.viz import style  # fpsim's figures are plain matplotlib Figures; we reuse its look

check = checker("01")  # check("question", answer) says right or wrong, never the answer
print("fpsim", fpsim.__version__)

# %% [markdown]
# ## 1 · The bits of a number
#
# A binary floating-point format has a sign bit, `E` exponent bits and `M` mantissa (fraction)
# bits. A normal number is $(-1)^s \cdot 2^{e - \text{bias}} \cdot 1.m_1 m_2 \dots m_M$.
# More exponent bits give more *range*, more mantissa bits more *precision*.

# %%
for name in ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"):
    f = fpsim.get_format(name)
    print(f"{name:9s} e{f.exponent_bits}m{f.mantissa_bits:<3d} max {f.max:<13.6g} "
          f"min normal {f.smallest_normal:<10.3g} eps {f.eps:<10.3g} "
          f"0.1 -> {fpsim.bit_string(0.1, f)}")

# %% [markdown]
# The same value in five formats: bf16 keeps fp32's 8 exponent bits (same range) but only 7
# mantissa bits; fp16 has more precision but a much smaller range.

# %%
viz.bit_layouts(0.1)

# %% [markdown]
# *What to see:* 0.1 has no exact binary form, so each format keeps as many bits of its repeating
# pattern as its mantissa holds; the relative error printed above each row grows from fp32's
# 1.5e-8 to several percent in fp8.

# %% [markdown]
# ## 2 · Where the numbers are: the number line
#
# Between two powers of two (a *binade*) the values are equally spaced; the spacing doubles from
# one binade to the next. Below the smallest normal number the **subnormals** fill the gap to
# zero with the same spacing as the first binade.

# %%
viz.number_line("fp8_e4m3")

# %% [markdown]
# *What to see:* a binade holds 8 values (3 mantissa bits), so the spacing doubles from one
# binade to the next; the 7 subnormals below 2^-6 are evenly spaced, and 448 is the end: e4m3 has
# no infinity. The top binade is the exception: the pattern that would be 480 is e4m3fn's NaN, so
# [256, 448] holds only 7 values (counted below).

# %%
e4m3 = fpsim.all_values("fp8_e4m3")
e4m3 = e4m3[e4m3 >= fpsim.get_format("fp8_e4m3").smallest_normal]
binades, counts = np.unique(np.floor(np.log2(e4m3)), return_counts=True)
print("e4m3 values per binade:", dict(zip(binades.astype(int).tolist(), counts.tolist(),
                                          strict=True)))
# fp16 near 2048: the spacing is 1 below 2048 and 2 above, so 2049 is not representable
print([float(fpsim.round(v, "fp16")) for v in (2047, 2048, 2049, 2050, 2051)])
viz.number_line("fp16", xmin=2036, xmax=2060, scale="linear")

# %% [markdown]
# *What to see:* the integers are all there up to 2048; above it fp16's spacing is 2, so every odd
# integer is missing.

# %% [markdown]
# ### Exercise 1
#
# What is the largest $N$ such that *every* integer $0, 1, \dots, N$ is exactly representable,
# in bf16, fp16 and fp8 e4m3? Find it with `fpsim.round` and explain it from the number of
# mantissa bits. Check your fp16 value with `check("largest N in fp16", N)`.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
for name in ("bf16", "fp16", "fp8_e4m3"):
    f = fpsim.get_format(name)
    n = np.arange(0, 5000, dtype=np.float64)
    first_bad = int(n[fpsim.round(n, f) != n][0])
    print(f"{name}: all integers up to {first_bad - 1} are exact; "
          f"2**(M + 1) = {2 ** (f.mantissa_bits + 1)}")
# With M mantissa bits the spacing in [2**(M+1), 2**(M+2)) is 2, so 2**(M+1) + 1 is the first
# integer that is missing.

# %% tags=["solution"]
check("largest N in fp16", 2 ** (fpsim.FP16.mantissa_bits + 1))

# %% [markdown]
# ## 3 · Every rounding mode
#
# A real number that is not representable lies between two neighbours; the rounding mode picks
# one. `fpsim` implements the IEEE modes (`nearest_even`, `nearest_away`, `toward_zero`, `up`,
# `down`), round-to-**odd** (truncate, then set the last bit if anything was lost: the mode that
# makes a later rounding safe) and **stochastic** rounding.

# %%
modes = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"]
xs = [1.0625, 1.1875, 1.2, -1.2, 1.4375]  # 1.0625 and 1.1875 are ties in e4m3 (spacing 1/8)
print("x".rjust(8) + "".join(m.rjust(14) for m in modes))
for x in xs:
    row = [float(fpsim.round(x, "fp8_e4m3", m)) for m in modes]
    print(f"{x:8g}" + "".join(f"{v:14g}" for v in row))

# %%
viz.rounding_modes("fp8_e4m3", 1.0, 1.5)

# %% [markdown]
# *What to see:* the nearest modes step at the midpoints (dotted) and part only at the ties; up
# and down stay on one side of y = x (toward_zero is down for positive x); odd sends every inexact
# x to an odd neighbour (1.125 or 1.375).

# %% [markdown]
# ### Exercise 2
#
# Round $x = -0.1$ to fp8 e5m2 with every mode in `modes`. Which modes agree? Why does
# `toward_zero` give the same result as `up` for a negative number?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
res = {m: float(fpsim.round(-0.1, "fp8_e5m2", m)) for m in modes}
for m, v in res.items():
    print(f"{m:13s} {v}")
print("down neighbour", float(fpsim.round(-0.1, "fp8_e5m2", "down")),
      "up neighbour", float(fpsim.round(-0.1, "fp8_e5m2", "up")))
# For x < 0, rounding toward zero moves up (toward +inf): toward_zero == up.

# %% [markdown]
# ## 4 · Subnormals and underflow
#
# fp16's smallest normal number is $2^{-14}$; subnormals go down to $2^{-24}$ with spacing
# $2^{-24}$. Their *relative* precision shrinks towards zero. Values below half the smallest
# subnormal underflow to zero; $2^{-25}$ is exactly half way and ties to even (zero).

# %%
f16 = fpsim.FP16
print("min normal", f16.smallest_normal, "= 2**-14;  min subnormal", f16.smallest_subnormal,
      "= 2**-24")
vals = np.array([1e-5, 3 * 2.0**-26, 2.0**-25, 1e-8])
print("keep :", fpsim.round(vals, f16), fpsim.classify(vals, f16))
print("flush:", fpsim.round(vals, f16, subnormals="flush"))

# %%
viz.relative_error(["fp16", "bf16"], 2.0**-28, 2.0**4)

# %% [markdown]
# *What to see:* for normal numbers the error stays under each format's u (a sawtooth per binade),
# fp16's 8 times lower; below 2^-14 fp16's subnormals lose precision until 2^-25 and less round to
# 0 (error 1), while bf16 keeps its precision: the curves cross near 2^-17.

# %% [markdown]
# ## 5 · Overflow
#
# Above the largest value the result depends on the mode and the format: IEEE round-to-nearest
# gives infinity once $x \ge \text{max} + \tfrac12\text{ulp}$ (65520 in fp16), rounding toward
# zero stays at max. fp8 e4m3 (OCP "fn") has **no infinity**: overflow gives NaN, and training
# code therefore *saturates* (clamps to ±448).
#
# **Predict, then run.** `fpsim.add(65519, 1, "fp16")` computes in fp16: its operands are fp16
# numbers (65519 is rounded to fp16 first), and then the exact sum is rounded once. Is the result
# 65504, 65520 or infinity? Enter your prediction in the next cell, then run the one after it.
# (The exact 65520 itself, rounded once, is the tie between 65504 and $2^{16}$: see below.)

# %% tags=["solution"]
check("fp16 add(65519, 1)", float(fpsim.add(65519, 1, "fp16")))

# %%
print("fpsim.round(65519, 'fp16') ->", float(fpsim.round(65519, "fp16")),
      "| fpsim.add(65519, 1, 'fp16') ->", float(fpsim.add(65519, 1, "fp16")))
for x in (65519.0, 65520.0, 70000.0):
    print(x, "->", float(fpsim.round(x, "fp16")), "| toward_zero:",
          float(fpsim.round(x, "fp16", "toward_zero")))
print("e4m3: 500 ->", float(fpsim.round(500.0, "fp8_e4m3")), "| saturate:",
      float(fpsim.round(500.0, "fp8_e4m3", overflow="saturate")))

# %% [markdown]
# ## 6 · Stochastic rounding is unbiased
#
# Stochastic rounding rounds up with probability $(x - \text{down}) / (\text{up} - \text{down})$,
# so the *expected* result is exactly $x$. One rounding is noisier than round-to-nearest, but the
# errors average out instead of adding up.

# %%
viz.stochastic_rounding("fp16", 1 + 2.0**-12, n=4000)

# %% [markdown]
# *What to see:* left, about three quarters of the roundings go down and one quarter up, so their
# mean lands on x while round-to-nearest always gives 1; right, the running mean's error shrinks
# like 1/√k inside the ±2 standard-error band, round-to-nearest's stays at −0.25 ulp.

# %%
x = 1 + 2.0**-12  # a quarter of the way from 1 to the next fp16 number (1 + 2**-10)
rng = np.random.default_rng(0)
r = fpsim.round(np.full(100_000, x), "fp16", "stochastic", rng=rng)
print("mean of 100000 stochastic roundings:", r.mean(), " x =", x,
      " round-to-nearest:", float(fpsim.round(x, "fp16")))

# %% [markdown]
# ## 7 · Exception flags
#
# IEEE 754 defines five sticky flags: inexact, underflow, overflow, divide-by-zero and invalid.
# `flags=True` returns them per element; `fpsim.flag_context()` collects them over a block of
# code (like `numpy.errstate`), and `trap=` turns chosen flags into an exception.

# %%
v, fl = fpsim.round([1.0, 0.1, 1e-8, 1e5], "fp16", flags=True)
for x, f in zip(v, fl, strict=True):
    print(f"{x:<14g} {fpsim.Flags(int(f))!r}")

with fpsim.flag_context() as ctx:
    fpsim.add(np.full(1000, 60000.0), 10000.0, "fp16")   # overflows
    fpsim.div(1.0, 0.0, "fp32")                           # divide by zero
print("sticky flags:", ctx.flags, " counts:", {k.name: n for k, n in ctx.counts.items() if n})

try:
    with fpsim.flag_context(trap="overflow"):
        fpsim.mul(300.0, 300.0, "fp16")
except fpsim.FloatingPointTrap as exc:
    print("trapped:", exc)

# %% [markdown]
# ## 8 · Converting to integers
#
# Quantized inference converts to int8. Out-of-range values either **saturate** (clamp to
# [-128, 127], what quantization kernels do) or **wrap** modulo 256 (what a C cast of an int32
# to int8 does). Rounding is to nearest even by default.

# %%
x = [2.5, 3.5, -2.5, 127.5, 300.0, -129.0]
print("x                 ", x)
print("saturate (default)", fpsim.to_int(x, "int8").tolist())
print("wrap              ", fpsim.to_int(x, "int8", overflow="wrap").tolist())
print("toward_zero       ", fpsim.to_int(x, "int8", "toward_zero").tolist())

# %% [markdown]
# ## 9 · Correctly rounded arithmetic and double rounding
#
# `fpsim.add`, `sub`, `mul`, `div`, `sqrt` and `fma` round the *exact* result once. A tempting
# shortcut computes in float64 and rounds the float64 result to the target format: that rounds
# **twice**. For round-to-nearest and a single `+ - * / sqrt` of fp32 operands the shortcut is
# safe (float64 has $53 \ge 2 \cdot 24 + 2$ bits), but not for directed rounding, nor for an fma.
# Directed roundings themselves compose (rounding up to float64, then up to fp32, is rounding up
# to fp32 once); what fails below is the shortcut's first step, float64's round-to-nearest,
# followed by a directed rounding.

# %%
# directed rounding: 1 + 2**-60 rounded up in fp32 is 1 + 2**-23; float64's round-to-nearest sum
# first loses the 2**-60
exact_up = fpsim.add(1.0, 2.0**-60, "fp32", "up")
naive_up = fpsim.round(1.0 + 2.0**-60, "fp32", "up")  # the float64 sum is already 1.0
print("fpsim.add up:", float(exact_up).hex(), "  float64 then up:", float(naive_up).hex())

# fma in round-to-nearest: a*a + c with a = 1 + 2**-12, c = 2**-60
a, c = 1 + 2.0**-12, 2.0**-60
exact = fpsim.fma(a, a, c, "fp32")
naive = np.float32(a * a + c)  # a*a + c rounded to float64 lands exactly on an fp32 tie
print("fpsim.fma:   ", float(exact).hex(), "  float64 then fp32:", float(naive).hex())

# %% [markdown]
# ### Exercise 3
#
# Rounding to **odd** first makes double rounding safe: rounding $x$ to fp32 with `"odd"` and
# then to fp16 with `"nearest_even"` always equals rounding $x$ to fp16 directly (fp32 has at
# least two more bits than fp16). Show a value where rounding to fp32 with `nearest_even` first
# gives the *wrong* fp16 result (hint: $1 + 2^{-11} + 2^{-30}$), then check the round-to-odd
# claim on $10^5$ random float64 values.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
x = 1 + 2.0**-11 + 2.0**-30
direct = fpsim.round(x, "fp16")
via_rne = fpsim.round(fpsim.round(x, "fp32"), "fp16")
via_odd = fpsim.round(fpsim.round(x, "fp32", "odd"), "fp16")
print("direct", float(direct), " via fp32 RNE", float(via_rne), " via fp32 odd", float(via_odd))

rng = np.random.default_rng(1)
xs = rng.standard_normal(100_000) * np.exp2(rng.integers(-20, 15, 100_000))
d = fpsim.round(xs, "fp16")
odd = fpsim.round(fpsim.round(xs, "fp32", "odd"), "fp16")
rne = fpsim.round(fpsim.round(xs, "fp32"), "fp16")
print("round-to-odd path differs:", int((odd != d).sum()), " RNE path differs:",
      int((rne != d).sum()))

# %% [markdown]
# ## 10 · Summing in bf16: stagnation
#
# bf16 has 8 significant bits. Once a running sum $s$ reaches $2^8 = 256$, adding 1 is a tie
# that rounds back to $s$: the sum **stagnates**. `fpsim.sum` makes the accumulation order
# explicit: `sequential` (one rounded add after another), `pairwise` (NumPy's tree), `kahan`
# (compensated) and `wide` (an fp32 accumulator).

# %%
ones = np.ones(1000)
for order in ("sequential", "pairwise", "kahan", "wide"):
    print(f"{order:10s} sum of 1000 ones in bf16 = {float(fpsim.sum(ones, 'bf16', order=order))}")

# %%
# the running sums, one rounded bf16 operation at a time
n = 1500
x = np.full(n, fpsim.round(0.1, "bf16"))
seq = np.empty(n)
kah = np.empty(n)
sr = np.empty(n)
s = k_s = k_c = s_sr = 0.0
rng = np.random.default_rng(0)
for i in range(n):
    s = fpsim.add(s, x[i], "bf16")
    y = fpsim.sub(x[i], k_c, "bf16")             # Kahan: y = x - c; t = s + y;
    t = fpsim.add(k_s, y, "bf16")                #        c = (t - s) - y; s = t
    k_c = fpsim.sub(fpsim.sub(t, k_s, "bf16"), y, "bf16")
    k_s = t
    s_sr = fpsim.add(s_sr, x[i], "bf16", "stochastic", rng=rng)
    seq[i], kah[i], sr[i] = s, k_s, s_sr

fig, ax = style.new_figure((8, 4))
k = np.arange(1, n + 1)
ax.plot(k, k * x[0], color="#202020", lw=1, ls="--", label="exact")
ax.plot(k, seq, color=style.format_color("bf16"), lw=2, label="sequential, round to nearest")
ax.plot(k, sr, color=style.mode_color("stochastic"), lw=1.2, label="sequential, stochastic")
ax.plot(k, kah, color=style.format_color("fp32"), lw=1.5, ls=":", label="Kahan")
ax.set_xlabel("number of terms added")
ax.set_ylabel("running sum in bf16")
ax.set_title("Adding 0.1 (bf16) over and over in bf16", loc="left")
ax.legend()
fig

# %% [markdown]
# *What to see:* round to nearest stalls at 32 for good, stochastic rounding drifts around the
# exact line (unbiased, but one run is noisy), and Kahan's compensated sum stays on it.

# %% [markdown]
# With round-to-nearest the sum first runs *ahead* (between 16 and 32 the spacing is 0.125, and
# $s + 0.1$ rounds to $s + 0.125$), then stops growing for good once half the spacing exceeds
# 0.1 (at $s = 32$, where the spacing is 0.25). Kahan summation carries the lost low part in `c`
# and follows the exact sum. Stochastic rounding keeps growing: *on average* it is exact, but a
# single run wanders around the exact sum (its spread grows like $\sqrt{n}$).
#
# ### Exercise 4
#
# Sum 2000 copies of 0.01 in bf16 sequentially with stochastic rounding, for 20 different seeds.
# Compare the mean and spread of the results with the exact sum of the bf16 value of 0.01
# and with round-to-nearest.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
x = np.full(2000, 0.01)
exact = 2000 * float(fpsim.round(0.01, "bf16"))
runs = [float(fpsim.sum(x, "bf16", rounding="stochastic", rng=seed)) for seed in range(20)]
print(f"exact {exact:.4f}  round-to-nearest {float(fpsim.sum(x, 'bf16')):.4f}")
print(f"stochastic: mean {np.mean(runs):.4f}, std {np.std(runs):.4f} "
      f"(standard error of the mean {np.std(runs) / math.sqrt(20):.4f})")

# %% [markdown]
# ## Summary
#
# - A format is a trade: exponent bits for range, mantissa bits for precision.
# - Rounding is exact and mode-dependent; round-to-odd and stochastic rounding have special uses.
# - Subnormals, overflow and the IEEE flags are where low precision fails loudly or silently.
# - Round once: computing in float64 and rounding again can give a different answer.
# - Accumulation order matters as much as the format: see notebook 04 for what tensor cores do.
#
# `examples/formats_tour.py` runs the main experiments of this notebook as a script.
