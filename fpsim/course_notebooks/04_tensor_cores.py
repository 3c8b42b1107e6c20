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
# # 04 · Tensor cores: what the hardware actually computes
#
# NVIDIA tensor cores (and AMD's matrix cores) multiply fp16 / bf16 / tf32 / fp8 matrices and
# accumulate in fp32. The documentation promises only "at least single precision": the order of
# the additions, the rounding and the handling of tiny terms are unspecified, and they **differ
# between GPU generations**. `fpsim.tensorcore` implements the *block-FMA model* (Khattak &
# Mikaitis 2025), which reproduces, bit for bit, all 78,000 measured results shipped in
# `tests/data/tensorcore/`.
#
# This notebook is the introduction. **Notebook 09** goes deeper: unit-testing the model
# against measured GPU data, custom accumulators and the open B200 fp8 question, NVIDIA
# against AMD, and GEMM performance.
#
# **Learning goals.** After this notebook you can
#
# 1. describe one block FMA: exact products, alignment to the largest exponent, truncation to
#    `23 + neab` fraction bits, one rounding;
# 2. read an `explain=True` record and use probe vectors that tell V100, A100 and H100 apart;
# 3. explain why tensor-core errors grow with K faster than fp32 summation, and which parameter
#    of the unit matters most.

# %%
import fpsim.tensorcore as tc
from fpsim import viz
from fpsim.course import checker

check = checker("04")  # check("question", answer) says right or wrong, never the answer

# %% [markdown]
# ## 1 · The block FMA model
#
# A tensor core computes $d = c + a_1 b_1 + \dots + a_n b_n$ for a **block** of $n$ products:
#
# 1. every product $a_k b_k$ is exact (its significand lies in $[0, 4)$, not normalised);
# 2. all terms (the products and $c$) are aligned to the largest exponent, $\text{maxE}$;
# 3. each term keeps $F = 23 + \text{neab}$ fraction bits below $2^{\text{maxE}}$, the rest is
#    **truncated** (neab: number of extra alignment bits);
# 4. the integers are added exactly and the sum is rounded **once**: toward zero for fp32 output,
#    to nearest even for fp16 output;
# 5. a longer $K$ chains blocks: each block's result is the next block's $c$.
#
# The GPUs differ in $n$, neab and the floor of the alignment exponent:

# %%
for g in ("V100", "A100", "Ada", "H100", "B200"):
    unit = tc.get_gpu(g).unit_for("fp16", "fp32")
    print(f"{g:5s} fp16->fp32: {unit.describe()}")

# %% [markdown]
# **Read the table.** How many fraction bits $F = 23 + \text{neab}$ below $2^{\text{maxE}}$
# does an A100 keep of every term, for fp16 inputs and fp32 output?
# `check("A100 fraction bits F", ...)`

# %% tags=["solution"]
check("A100 fraction bits F", 23 + tc.get_gpu("A100").unit_for("fp16", "fp32").extra_bits)

# %% [markdown]
# ## 2 · Step by step: `explain=True`
#
# `tc.dot(a, b, c, gpu=..., explain=True)` returns the result and a record of every block: the
# exponents, the aligned integers, what the truncation dropped and how the sum was rounded.

# %%
ex = viz.tensorcore.README_ALIGNMENT_EXAMPLE
d, rec = tc.dot(ex["a"], ex["b"], ex["c"], gpu="A100", explain=True)
print(rec)

# %% [markdown]
# The same block drawn bit by bit: each row is one term's significand placed by its exponent;
# bits right of the red cut are truncated; the bottom rows show the exact sum and the rounding.

# %%
viz.block_alignment(ex["a"], ex["b"], ex["c"], gpu="A100")

# %% [markdown]
# *What to see:* every product is aligned to the largest exponent (maxE) and cut after 24 fraction
# bits: bits right of the red line are dropped before the sum, and the exact sum is then rounded
# toward zero to fp32.

# %% [markdown]
# ## 3 · Same inputs, different answers
#
# **Predict, then run.** The first probe below computes $1 \cdot 1 - (1 - 2^{-24})$ with fp32
# output, whose exact result $2^{-24}$ is an fp32 number. Will V100 and A100 both return it?
#
# Fasi, Higham, Mikaitis and Pranesh (2021) designed *probe vectors* whose results reveal the
# hidden parameters. A few of them (from `docs/tensorcore-model.md`; the last column lists
# what the real GPUs returned):

# %%
probes = {  # id: (a, b, c, measured results)
    "D1": ([1.0], [1.0], -(1 - 2.0**-24), "V100 2^-23, A100 2^-24"),
    "D3": ([1.0, 1.0], [1.0, -2.0**-24], -1 + 2.0**-24, "V100 2^-23, A100 0"),
    "D4c": ([1.0] * 4, [1.0] * 4, 1 + 2.0**-22 + 2.0**-23, "A100 5"),
    "D5": ([1.0] * 4, [2.0**-24] * 4, 1 - 2.0**-24, "V100 1 + 2^-23"),
    "B3": ([0.5] * 4, [2.0**-24] * 4, 1.0, "A100 1"),
}
gpus = ("V100", "A100", "H100")
print("probe " + "".join(g.rjust(24) for g in gpus) + "   measured")
for name, (a, b, c, measured) in probes.items():
    res = [float(tc.dot(a, b, c, gpu=g)) for g in gpus]
    print(f"{name:5s} " + "".join(f"{v!r:>24}" for v in res) + f"   {measured}")

# %% [markdown]
# D1 exposes the extra bit: $1 - (1 - 2^{-24})$ needs one bit below fp32's 23 fraction bits;
# V100 (neab = 0) loses it, A100 keeps it. B3 exposes H100's *second* extra bit: its products
# $2^{-25}$ are truncated away on A100 and kept on H100. D5 shows that V100 is not even monotone:
# with $c = 1 - 2^{-24}$ the result is $1 + 2^{-23}$, with the larger $c = 1$ it is 1.

# %%
for c in (1 - 2.0**-24, 1.0):
    print(f"V100, c = {c!r}: d = {float(tc.dot([1.0] * 4, [2.0**-24] * 4, c, gpu='V100'))!r}")

# %% [markdown]
# ### Exercise 1
#
# H100 differs from A100 in two ways: two extra bits instead of one, and blocks of 16 products
# instead of 8. Probe B3 shows the extra bit. Construct inputs with $K = 16$ that give different
# results on H100 and on a hypothetical unit with H100's extra bits but blocks of 8,
# `tc.BlockFMA(8, 2, "toward_zero", -133)`. *Hint:* every block is rounded toward zero, so a
# remainder that one block drops is lost for good; check your idea with `explain=True`.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
half_blocks = tc.BlockFMA(8, 2, "toward_zero", -133, name="H100 with blocks of 8")
a = [1.0] * 16
b = [1.0, 2.0**-24] + [0.0] * 6 + [2.0**-24] + [0.0] * 7  # one 2**-24 in each half
for g in ("H100", half_blocks):
    d, rec = tc.dot(a, b, 0.0, gpu=g, explain=True)
    steps = [float(blk.result).hex() for blk in rec.blocks]
    print(f"{rec.gpu:22s} d = {float(d).hex()}  (block results: {steps})")
# Blocks of 8: 1 + 2**-24 is rounded toward zero to 1, twice. One block of 16 adds both:
# 1 + 2**-23 is an fp32 number and is kept.

# %% [markdown]
# ## 4 · Error against K
#
# **Predict, then run.** The inputs below are uniform on [0, 1), so no error can cancel
# another. Which of V100, A100 and H100 will have the largest relative error at K = 4096? Will
# the tensor-core errors grow with K like fp32 sequential summation, or faster?

# %%
viz.error_vs_k((16, 64, 256, 1024, 4096), ("V100", "A100", "H100"), trials=10)

# %% [markdown]
# *What to see:* the error falls from V100 to A100 to H100 (more extra bits, larger blocks), but
# all three grow about linearly with K; beyond K = 16 they stay above fp32 sequential summation,
# and far above pairwise.
#
# Why linearly? Once the running sum c is large, every product of a block is aligned to c's
# exponent and **truncated**: each loses on average half of its last kept bit, always toward
# zero, and the block result is rounded toward zero too. These losses never cancel, so they add
# up block after block, while the round-to-nearest errors of fp32 summation partly cancel.
#
# ### Exercise 2
#
# H100 differs from A100 in two parameters: blocks of 16 instead of 8, and 2 extra bits
# instead of 1. Which of the two lowers the error? Compare A100 and H100 with the two units
# that change one parameter only, `tc.BlockFMA(16, 1, "toward_zero", -133)` and
# `tc.BlockFMA(8, 2, "toward_zero", -132)`, at K = 1024 and 4096 with
# `tc.error_vs_k(ks=..., gpus=[...], trials=10)`, and explain the result with the paragraph
# above.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
units = ["A100", "H100",
         tc.BlockFMA(16, 1, "toward_zero", -133, name="blocks of 16, 1 extra bit"),
         tc.BlockFMA(8, 2, "toward_zero", -132, name="blocks of 8, 2 extra bits")]
r = tc.error_vs_k(ks=(1024, 4096), gpus=units, trials=10, baselines=False)
for name in r.mean:
    print(f"{name:26s} K=1024: {r.mean[name][0]:.2e}   K=4096: {r.mean[name][1]:.2e}")
# The second extra bit does most of the work: the error is dominated by the truncation of every
# product to the running sum's grid (n products per block, each losing up to one last bit), and
# one more bit halves that grid. Larger blocks halve the number of block roundings but not the
# number of truncated products, so they change little.

# %% [markdown]
# ## Summary
#
# - A tensor core adds a block of exact products after aligning them to the largest exponent and
#   truncating; the block size, the extra bits and the rounding differ between GPUs, and probe
#   vectors reveal them.
# - `explain=True` and `viz.block_alignment` show every bit a block keeps and drops.
# - Truncating every product and rounding every block toward zero makes tensor-core dot products
#   lose accuracy linearly in K; the number of extra bits matters most.
# - Notebook 09 tests the model against measured GPU data, compares NVIDIA with AMD's matrix
#   cores, and turns to GEMM performance.
