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
# NVIDIA tensor cores multiply fp16 / bf16 / tf32 / fp8 matrices and accumulate in fp32. The
# documentation promises only "at least single precision": the order of the additions, the
# rounding and the handling of tiny terms are unspecified, and they **differ between GPU
# generations**. `fpsim.tensorcore` implements the *block-FMA model* (Khattak & Mikaitis 2025),
# which reproduces, bit for bit, all 78,000 measured results shipped in `tests/data/tensorcore/`.
#
# **Learning goals.** After this notebook you can
#
# 1. describe one block FMA: exact products, alignment to the largest exponent, truncation to
#    `23 + neab` fraction bits, one rounding;
# 2. use probe vectors that tell V100, A100 and H100 apart, and read `explain=True` records;
# 3. unit-test a numerical model against measured hardware data;
# 4. experiment with a custom accumulator (`BlockFMA`) and reason about the B200 fp8 open question;
# 5. explain why tensor-core errors grow with K faster than fp32 summation;
# 6. estimate GEMM efficiency from tile and wave quantization and the alignment rules.

# %%
from pathlib import Path

import numpy as np

import fpsim
import fpsim.tensorcore as tc
from fpsim import viz
from fpsim.course import checker
from fpsim.tensorcore import perf
from fpsim.viz import style

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
print()
print(tc.support_matrix().replace("; ", "\n"))

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
# ## 4 · Unit-testing the model against hardware
#
# `tests/data/tensorcore/` holds results measured on real GPUs (V100 to B200): each row is one
# dot product (inputs and the GPU's output as bit patterns). `tc.check_hardware` runs the model
# on every row and compares bit for bit. (The data ships with the repository, not with the
# installed package: the cell below finds it next to the `fpsim` sources.)

# %%
DATA = Path(fpsim.__file__).resolve().parents[1] / "tests" / "data" / "tensorcore"
FILES = sorted(DATA.glob("*.txt.gz")) if DATA.is_dir() else []
if not FILES:
    print(f"no measured data found at {DATA}: the hardware checks below are skipped "
          "(clone the fpsim repository to run them)")
else:
    report = tc.check_hardware(FILES)
    print(report)

# %% [markdown]
# A good test must be able to fail. Checking the A100 data against the V100 model shows the
# mismatches, with the inputs and the exact value of each failing row:

# %%
if FILES:
    print(tc.check_hardware([DATA / "A100_fp16_to_fp32.txt.gz"], gpu="V100", show=2))

# %% [markdown]
# ## 5 · What if the accumulator kept 3 extra bits?
#
# A `BlockFMA` describes any unit: block size, extra bits, output rounding, alignment floor. Is
# an A100 with 3 extra bits more accurate? Does the hardware data rule it out?

# %%
a100 = tc.get_gpu("A100")
wider = tc.BlockFMA(8, 3, "toward_zero", -132, name="A100 + 2 bits")
rne = tc.BlockFMA(8, 3, "nearest_even", -132, name="3 bits, RNE")
if FILES:
    for unit in (a100, wider, rne):
        r = tc.check_hardware([DATA / "A100_fp16_to_fp32.txt.gz"], gpu=unit, keep=0)
        print(f"{unit.name:14s} {r.rows - r.mismatch_count}/{r.rows} measured A100 rows match")
viz.error_vs_k((16, 64, 256, 1024, 4096), ["A100", wider, rne], trials=10)

# %% [markdown]
# *What to see:* the tensor-core error grows about linearly with K and above fp32 summation; two
# more extra bits lower it a little, rounding each block to nearest (with 3 extra bits) lowers it
# most.

# %% [markdown]
# The measured data pins A100 at exactly one extra bit. More bits help only a little: the
# error is dominated by rounding each block's result **toward zero**, a bias that adds up block
# after block. With round-to-nearest the bias of the alignment truncation remains.
#
# ### Exercise 2
#
# Which combination of output rounding and extra bits brings the tensor-core error at
# $K = 4096$ down to that of fp32 sequential summation? Use
# `tc.error_vs_k(ks=(4096,), gpus=[...], trials=10)` with several `BlockFMA` units.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
short = {"toward_zero": "RZ", "nearest_even": "RNE"}
units = [tc.BlockFMA(8, e, m, -132, name=f"{short[m]}, {e} extra bits")
         for m in short for e in (1, 3, 6, 10)]
r = tc.error_vs_k(ks=(4096,), gpus=units, trials=10)
for name, err in r.mean.items():
    print(f"{name:18s} {err[0]:.2e}")
# Toward zero stays biased whatever the extra bits; nearest-even with enough extra bits
# (the truncation of the aligned products must become negligible) approaches fp32 summation.

# %% [markdown]
# ## 6 · An open question: B200 fp8
#
# For B200 fp8 inputs the published parameters (block 32, 2 extra bits, round toward zero)
# reproduce only about 64% of the measured rows (`tests/data/tensorcore/open/`). Fitting the data
# gives a variant: blocks of 32 rounded to **nearest even** with at least 7 extra bits. The data
# cannot tell 7 extra bits from more; new measurements (`tools/record_tensorcore.py`) could.

# %%
OPEN = sorted((DATA / "open").glob("*.txt.gz")) if DATA.is_dir() else []
if not OPEN:
    print("no open B200 fp8 data found: skipped")
else:
    for g in ("B200-fp8-published", "B200-fp8-variant"):
        r = tc.check_hardware(OPEN, gpu=g)
        print(f"{g:19s} {r.rows - r.mismatch_count}/{r.rows} rows match")
    share = {}
    for mode in ("toward_zero", "nearest_even"):
        for e in range(2, 10):
            unit = tc.BlockFMA(32, e, mode, -133, name=f"{mode} +{e}")
            r = tc.check_hardware(OPEN, gpu=unit, keep=0)
            share[(mode, e)] = 1 - r.mismatch_count / r.rows
    fig, ax = style.new_figure((8, 3.6))
    es = np.arange(2, 10)
    for j, mode in enumerate(("toward_zero", "nearest_even")):
        ax.bar(es + (j - 0.5) * 0.38, [share[(mode, e)] for e in es], width=0.38,
               color=style.mode_color(mode), label=mode)
    ax.set_xlabel("extra alignment bits (block of 32 fp8 products)")
    ax.set_ylabel("share of measured rows matched")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower right")
    ax.set_title("B200 fp8: which block-FMA parameters reproduce the measurements?", loc="left")
    display(fig)

# %% [markdown]
# *What to see:* rounding each block to nearest even matches (nearly) every measured row from
# about 4 extra bits on (the text above: at least 7 for all of them); rounding toward zero, the
# published rule, matches under two thirds whatever the width.

# %% [markdown]
# ## 7 · Error against K
#
# On the same inputs (uniform on [0, 1), where errors cannot cancel) the tensor cores lose more
# accuracy than fp32 summation as $K$ grows: every block is rounded toward zero, so the error
# grows linearly with the number of blocks. Larger blocks (H100: 16) mean fewer roundings.

# %%
viz.error_vs_k((16, 64, 256, 1024, 4096), ("V100", "A100", "H100"), trials=10)

# %% [markdown]
# *What to see:* the error falls from V100 to A100 to H100 (more extra bits, larger blocks), but
# all three grow about linearly with K; beyond K = 16 they stay above fp32 sequential summation,
# and far above pairwise.

# %% [markdown]
# ## 8 · Performance: alignment, tiles and waves
#
# Accuracy is one side; speed the other. NVIDIA's *Matrix Multiplication Background* guide
# gives the rules `fpsim.tensorcore.perf` models:
#
# - dimensions should be multiples of 16 bytes of elements (8 fp16, 16 int8, 4 tf32); on A100
#   multiples of 64 fp16 elements (128 bytes) are best;
# - **tile quantization**: the output is computed in tiles (e.g. 128×128) and a partial tile
#   costs a whole one;
# - **wave quantization**: tiles run in waves of (SMs × blocks per SM): 108 on A100, 132 on
#   H100; a nearly empty last wave costs a full wave.

# %%
for shape in [(4096, 4096, 4096), (4096, 4224, 4096), (4096, 4095, 4096)]:
    print(perf.gemm_time_estimate(*shape, gpu="A100", dtype="fp16"))
    print()
for dt in ("fp16", "int8", "tf32"):
    print(f"{dt}: alignment (required, best on A100) = {perf.alignment(dt, 'A100')}")

# %%
viz.gemm_efficiency(range(256, 4097, 32), gpu="A100", dtype="fp16", K=4096)

# %% [markdown]
# *What to see:* utilisation drops each time N crosses a multiple of 128 (a partial tile) and each
# time the tile count passes a multiple of 108 (a partial wave); the sawtooth flattens as N grows.

# %% [markdown]
# ### Exercise 3
#
# A layer computes an fp16 GEMM with $M = 8192$ tokens, $K = 4096$ and $N$ output features on an
# A100. Among $N = 5000, \dots, 6000$, which multiples of 64 reach at least 98% utilisation? How
# does the best one compare with $N = 5120$? Then repeat for an H100. How many waves does
# $N = 5120$ (2560 tiles of 128 × 128) take on the A100? `check("A100 waves for 2560 tiles", ...)`

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
for gpu in ("A100", "H100"):
    est = {n: perf.gemm_time_estimate(8192, n, 4096, gpu, "fp16")
           for n in range(5000, 6001) if n % 64 == 0}
    good = [n for n, r in est.items() if r.utilisation >= 0.98]
    best = max(est, key=lambda n: est[n].utilisation)
    print(gpu, "N with >= 98% utilisation:", good)
    for n in (5120, best):
        r = est[n]
        print(f"  N={n}: {r.tiles} tiles in {r.waves} waves, utilisation {r.utilisation:.1%}, "
              f"{r.time_s * 1e3:.3f} ms")

# %% tags=["solution"]
check("A100 waves for 2560 tiles", perf.gemm_time_estimate(8192, 5120, 4096, "A100", "fp16").waves)

# %% [markdown]
# ## Summary
#
# - A tensor core adds a block of exact products after aligning them to the largest exponent and
#   truncating; the block size, the extra bits and the rounding differ between GPUs, and probe
#   vectors reveal them.
# - A numerical model is only as good as its tests: `check_hardware` compares it with measured
#   GPU results row by row, and a wrong model fails.
# - Rounding every block toward zero makes tensor-core dot products lose accuracy linearly in K.
# - Performance depends on shapes: alignment, tile quantization and wave quantization.
