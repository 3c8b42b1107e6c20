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
# # 09 · Tensor cores in depth: hardware tests, custom units, NVIDIA vs AMD, performance
#
# Notebook 04 introduced the block-FMA model of tensor cores: exact products aligned to the
# largest exponent, truncated to `23 + neab` fraction bits, added exactly and rounded once per
# block. This notebook goes deeper.
#
# **Learning goals.** After this notebook you can
#
# 1. unit-test a numerical model against measured hardware data, and see a wrong model fail;
# 2. experiment with a custom accumulator (`BlockFMA`) and reason about the B200 fp8 rule,
#    which the measured rows cannot settle;
# 3. say where NVIDIA's tensor cores and AMD's matrix cores give different results for the
#    same dot product, and why (output rounding, a late-added c, subnormal flushing, exact and
#    pairwise sums, odd/even groups, the fnuz fp8 formats);
# 4. fingerprint a unit you are not told from black-box calls, and recognise it in the GPU
#    table (and read a summation's order);
# 5. rerun DeepSeek-V3's fp8 accumulation experiment, and see what promotion to fp32 fixes;
# 6. estimate GEMM efficiency from tile and wave quantization and the alignment rules.

# %%
from dataclasses import fields
from fractions import Fraction
from pathlib import Path

import numpy as np

import fpsim
import fpsim.tensorcore as tc
from fpsim import viz
from fpsim.course import checker
from fpsim.probe import OrderError, fingerprint, reveal_order
from fpsim.tensorcore import perf
from fpsim.viz import style

check = checker("09")  # check("question", answer) says right or wrong, never the answer

# %% [markdown]
# ## 1 · Unit-testing the model against hardware
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
# ## 2 · What if the accumulator kept 3 extra bits?
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
# The measured data pins A100 at exactly one extra bit. Extra bits shrink the truncation of
# each aligned product (notebook 04, exercise 2), but with round toward zero the error cannot
# fall below the bias of rounding every block's result **toward zero**, which adds up block
# after block. Round to nearest removes that bias; the truncation bias stays until enough extra
# bits make it negligible.
#
# ### Exercise 1
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
# ## 3 · An open question: B200 fp8
#
# For B200 fp8 inputs the published parameters (block 32, 2 extra bits, round toward zero,
# c joining the alignment) reproduce only about 64% of the measured rows
# (`tests/data/tensorcore/open/`). Fitting the data gives a variant: blocks of 32 rounded to
# **nearest even** with at least 7 extra bits. The data cannot tell 7 extra bits from more, up
# to the exact sum (`B200-fp8-exact`), nor from issue 33's rule: the 32 products aligned as
# the published model does (2 extra bits) and their sum truncated toward zero to fp32, then c
# added by one fp32 addition rounded to nearest even (`BlockFMA(...,
# c_addition="rounded_sum")`). fpsim's default for `gpu="B200"` is that rule
# (`B200-fp8-rz-then-c`): further held-out B200 e5m2 rows are reported to fit it and to miss
# the exact sum, and a user measured a 25-bit accumulator on B200's fp8 MMA (DeepGEMM issue
# 176), which an exact sum would not show (docs/tensorcore-model.md). New measurements
# (`tools/record_tensorcore.py`'s `wide_products` and `c_late` probes) could still prove it
# wrong.

# %%
OPEN = sorted((DATA / "open").glob("*.txt.gz")) if DATA.is_dir() else []
if not OPEN:
    print("no open B200 fp8 data found: skipped")
else:
    for g in ("B200-fp8-published", "B200-fp8-variant", "B200-fp8-exact", "B200"):
        r = tc.check_hardware(OPEN, gpu=g)
        print(f"{g:19s} {r.rows - r.mismatch_count}/{r.rows} rows match")
    # off the measured rows they differ: a tie 1 + 2**-24 broken by a product 2**-32 (kept by
    # the exact sum; dropped by the variant's window, then the tie goes to even; B200's rule
    # truncates the products' sum toward zero)
    a = [1.0, 2.0**-12, 2.0**-16]
    for g in ("B200-fp8-exact", "B200-fp8-variant", "B200"):
        d = float(tc.dot(a, a, gpu=g, input_format="e5m2"))
        print(f"{g:19s} 1 + 2**-24 + 2**-32 -> 1 + {d - 1:.3g}")
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
# published rule, matches under two thirds whatever the width. These bars all let c join the
# alignment: B200's default also rounds toward zero, but only the products' sum, and adds c
# afterwards to nearest even, which fits every row.

# %% [markdown]
# ## 4 · NVIDIA against AMD
#
# AMD's matrix cores (CDNA) compute the same `D = A B + C`, but the published models of
# Khattak & Mikaitis describe different units. fpsim builds them from the generic parameters
# of `BlockFMA` (no measured AMD rows exist yet: these are the published models, checked
# against them run in GNU Octave):

# %%
for g in ("A100", "H100", "MI100", "MI210", "MI300X"):
    print(f"{g:6s} fp16->fp32: {tc.get_gpu(g).unit_for('fp16', 'fp32').describe()}")
print(f"MI300X fp8_e4m3fnuz->fp32: "
      f"{tc.get_gpu('MI300X').unit_for('fp8_e4m3fnuz', 'fp32').describe()}")

# %% [markdown]
# **Predict, then run.** Each row below is one fp16 dot product with fp32 output, computed by
# the models of three NVIDIA and three AMD GPUs. The exact values are in the second column.
# Before running: in the row "c far below", $1 \cdot 1 + c$ with $c = -2^{-30}$, which GPUs
# return exactly 1, and can any return something else?

# %%
cases = {  # name: (a, b, c)
    "rounding: 1 + 3*2^-25": ([1.0, 2.0**-12], [1.0, 1.5 * 2.0**-12], 0.0),
    "c far below: 1 - 2^-30": ([1.0], [1.0], -(2.0**-30)),
    "cancellation: 2^-24 + 2^-30": ([1.0, 1.0, 2.0**-11], [1.0, -1.0, 2.0**-13], 2.0**-30),
    "subnormal input 2^-24": ([1.0, 1.0], [1.0, 2.0**-24], -(1 - 2.0**-24)),
}
gpus = ("A100", "H100", "B200", "MI100", "MI210", "MI300X")
print(f"{'case':28s}{'exact':>22s}" + "".join(f"{g:>22s}" for g in gpus))
for name, (a, b, c) in cases.items():
    exact = sum(Fraction(x) * Fraction(y) for x, y in zip(a, b, strict=True)) + Fraction(c)
    res = [float(tc.dot(a, b, c, gpu=g)).hex() for g in gpus]
    print(f"{name:28s}{float(exact).hex():>22s}" + "".join(f"{r:>22s}" for r in res))

# %% [markdown]
# Row by row (all values in hexadecimal: `0x1.000002p+0` is $1 + 2^{-23}$):
#
# - **Output rounding.** The exact $1 + 3 \cdot 2^{-25}$ lies between the fp32 numbers 1 and
#   $1 + 2^{-23}$, three quarters of the way up. The NVIDIA units round toward zero (1); MI100
#   (exact sum) and MI210 (fp32 additions) round to nearest ($1 + 2^{-23}$); MI300X keeps only
#   24 fraction bits before rounding, truncates the product to $2^{-24}$, and rounds the tie
#   $1 + 2^{-24}$ to the even neighbour, 1.
# - **c far below.** On NVIDIA, c joins the alignment and is truncated toward zero: it
#   vanishes. MI300X adds c *late*, after the products' sum, with an alignment that rounds
#   **down**: $-2^{-30}$ becomes one unit of $2^{-24}$ below, and the result is $1 - 2^{-24}$.
#   Only MI100's exact sum rounds the true value, $1 - 2^{-30}$, to nearest: 1.
# - **Cancellation.** The products 1, -1 and $2^{-24}$ cancel to $2^{-24}$, and c is
#   $2^{-30}$. NVIDIA aligns every term to the largest product, 1, with 24 or 25 fraction bits:
#   c is truncated away. MI300X aligns the products the same way and then adds c late, rounded
#   down onto the same grid: c is lost again. MI100's exact sum and MI210's pairwise fp32
#   additions (1 - 1 cancels first, then $2^{-24} + 2^{-30}$ is an fp32 number) keep it.
# - **Subnormal input.** $2^{-24}$ is fp16's smallest subnormal. MI210 (CDNA 2) flushes
#   subnormal inputs to zero, so its result misses that product; the others keep it.
#
# ### fp8 on AMD: the fnuz formats and odd/even groups
#
# CDNA 3 takes fp8 in the **fnuz** encodings (`fp8_e4m3fnuz`, `fp8_e5m2fnuz`): no infinity, a
# single NaN, no negative zero, and the exponent bias one larger. The larger bias moves the
# *bottom* of the range down by one binade; the top moves only where the NaN encoding took
# values: e4m3fnuz tops at 240 (e4m3's 448 lived in the binade the bias gives up), while
# e5m2fnuz keeps e5m2's largest finite value, 57,344, because its top exponent field, which
# e5m2 reserves for infinities and NaNs, holds finite values in fnuz (the table below prints
# both). The same real values convert differently:

# %%
for f in ("fp8_e4m3", "fp8_e4m3fnuz", "fp8_e5m2", "fp8_e5m2fnuz"):
    fmt = fpsim.get_format(f)
    tiny = np.log2(fmt.smallest_subnormal)
    print(f"{f:13s} largest {fmt.max:8g}, smallest subnormal 2**{tiny:g}")
print(f"{'value':>12s}" + "".join(f"{f:>15s}" for f in ("fp8_e4m3", "fp8_e4m3fnuz")))
for v in (448.0, 300.0, 240.0, 2.0**-9, 2.0**-10, 0.1):
    print(f"{v:12.6g}" + "".join(f"{float(tc.convert_input(v, f)):15.6g}"
                                 for f in ("fp8_e4m3", "fp8_e4m3fnuz")))

# %% [markdown]
# e4m3's largest value 448 is out of e4m3fnuz's range (240): it becomes NaN (fpsim converts
# with round to nearest even, as ml_dtypes does; the published MATLAB model saturates instead).
# $2^{-10}$ is below e4m3's smallest subnormal ($2^{-9}$): a tie, rounded to 0; in e4m3fnuz it
# is the smallest subnormal, kept exactly.
#
# MI300X's fp8 unit also sums the products in even and odd positions of a block as two
# separate groups, each aligned to its own largest exponent, and then merges the two sums,
# rounding the smaller one **down** onto the larger one's grid. A tiny negative product in the
# odd group therefore still costs one unit of the last place, where one alignment of all
# products would truncate it to nothing:

# %%
a, b = [128.0, 2.0**-10], [128.0, -(2.0**-10)]  # products 2^14 (even) and -2^-20 (odd)
one_group = tc.BlockFMA(16, 1, "nearest_even", None, c_addition="late",
                        alignment_rounding="down", c_far_truncation=25, product_limit=True,
                        name="MI300X fp8 without odd/even groups")
for g, fin in (("H100", "fp8_e4m3"), ("MI300X", "fp8_e4m3fnuz"), (one_group, "fp8_e4m3fnuz")):
    label = g if isinstance(g, str) else g.name
    print(f"{label:36s} {fin:13s} d = {float(tc.dot(a, b, 0.0, gpu=g, input_format=fin))!r}")
d, rec = tc.dot(a, b, 0.0, gpu="MI300X", input_format="fp8_e4m3fnuz", explain=True)
print()
print("\n".join(line for line in str(rec).splitlines()
                if line.strip().startswith(("even:", "odd:", "odd/even", "exact integer"))))

# %% [markdown]
# The exact value is $2^{14} - 2^{-20}$. H100 (13 fraction bits for fp8) and the single
# alignment return $2^{14}$; MI300X's groups return $2^{14} - 2^{-10}$ = 16383.9990234375: the
# odd group's $-2^{-20}$, 28 binades below the even group, is rounded down to $-2^{-10}$ by the
# merge. The `explain=True` lines show both group sums and the merge.
#
# ### Exercise 2
#
# Construct a K = 2 fp16 dot product with c = 0 whose H100 and MI300X results differ, and
# explain the difference. *Hint:* the two units differ in extra bits (2 against 1) and in the
# output rounding (toward zero against nearest even); look for an exact sum that is not an fp32
# number and that MI300X keeps without truncation.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
a, b = [1.0, 2.0**-12], [1.0, 1.5 * 2.0**-11]  # exact sum 1 + 3 * 2**-24
for g in ("H100", "MI300X"):
    print(f"{g:6s} d = {float(tc.dot(a, b, 0.0, gpu=g)).hex()}")
# 1 + 3 * 2**-24 needs 24 fraction bits: both units keep it exactly (H100 has 25, MI300X 24).
# H100 rounds toward zero to 1 + 2**-23; MI300X rounds to nearest even, and the value lies
# exactly halfway between 1 + 2**-23 and 1 + 2**-22: the tie goes to the even one, 1 + 2**-22.

# %% [markdown]
# ## 5 · Fingerprinting a mystery unit
#
# Sections 1 to 3 started from a model and asked whether the hardware agrees. Turn it around:
# you are handed a matrix unit, a function `D = A @ B + C` and nothing else, and you want the
# `BlockFMA` that computes what it computes. `fpsim.probe.fingerprint(fn, input_format)` finds
# it from designed queries only (docs/probe.md): each query is a batch of dot products built so
# that one question decides it. Fasi et al.'s probe (c = $2^s$, products $-2^s$ and
# $2^{s-t}$: the last $t$ whose term survives gives the extra bits), FPRev's masks ($+M$ and
# $-M$ among small units: where they cancel tells which terms share a block and where c joins),
# then ties and near-ties for the rounding, subnormals and overflows for the special rules. The
# candidates are run through fpsim's model and kept only where they give the black box's
# results bit for bit.
#
# The cell below hides one of fpsim's GPUs (fp16 inputs, fp32 output) behind such a function.
# Which one is drawn from the list of GPUs and not shown: no peeking.

# %%
POOL = [g for g in tc.list_gpus() if "-fp8-" not in g]  # B200's fp8 variants: same fp16 unit


def hidden_unit(seed: int):
    """A @ B + C on one GPU of POOL, drawn by ``seed``: fp16 inputs, fp32 output."""
    secret = str(np.random.default_rng(seed).choice(POOL))

    def fn(A, B, C):
        fn.calls += 1
        return tc.matmul(A, B, C, gpu=secret, input_format="fp16", output_format="fp32")

    fn.calls = 0
    fn.reveal = lambda: secret  # for the reveal below
    return fn


mystery = hidden_unit(seed=0)
print(f"one of {len(POOL)} GPUs: {', '.join(POOL)}")

# %% [markdown]
# **Predict first.** The fingerprint returns a `BlockFMA`. Will it equal the mystery GPU's entry
# in fpsim's table field for field? *Hint:* an fp16 product lies between $2^{-48}$ and $2^{32}$
# in magnitude; can any fp16 query reach a floor of the alignment near $2^{-132}$, or a product
# limit at $2^{128}$?

# %%
found = fingerprint(mystery, "fp16")
print(f"{mystery.calls} calls to the black box")
print(repr(found))
print(found.describe())

# %% [markdown]
# A fingerprint that fits its own queries could still be wrong elsewhere. Check it on inputs it
# never saw: random fp16 values with random signs over 25 binades, C random fp32 values, K = 256
# (several blocks for any block size). For contrast, an ordinary float32 GEMM (NumPy's BLAS) on
# the same inputs:

# %%
rng = np.random.default_rng(9)


def random_fp16(shape):
    """Random significands and signs, exponents from -12 to 12, rounded to fp16."""
    x = rng.uniform(1, 2, shape) * rng.choice([-1.0, 1.0], shape)
    return tc.convert_input(x * 2.0 ** rng.integers(-12, 13, shape), "fp16")


A, B = random_fp16((64, 256)), random_fp16((256, 64))
C = rng.standard_normal((64, 64)).astype(np.float32).astype(np.float64)
D = mystery(A, B, C)
same = tc.matmul(A, B, C, gpu=found, input_format="fp16") == D
blas = (A.astype(np.float32) @ B.astype(np.float32) + C.astype(np.float32)) == D
print(f"the fingerprint gives the black box's result in {same.sum()} of {D.size} outputs")
print(f"a float32 GEMM gives it in {blas.sum()} of {D.size}")

# %% [markdown]
# Now the reveal. Run every GPU's table entry on the same inputs and keep those that give the
# black box's results; then compare the fingerprint with the table's unit field by field.

# %%
FIELDS = [f.name for f in fields(tc.BlockFMA) if f.compare]  # every parameter, not the name


def value(unit, field):
    x = getattr(unit, field)
    return getattr(x, "value", x)  # an enum's value: 'flush', not <Subnormals.FLUSH: 'flush'>


matches = [g for g in POOL
           if np.array_equal(tc.matmul(A, B, C, gpu=g, input_format="fp16"), D)]
print("GPUs whose fp16->fp32 model gives the same results:", ", ".join(matches))
for g in matches:
    table = tc.get_gpu(g).unit_for("fp16", "fp32")
    differ = [f"{f}: table {value(table, f)!r}, found {value(found, f)!r}"
              for f in FIELDS if value(table, f) != value(found, f)]
    print(f"  {g:6s} {table.describe()}")
    print(f"         fields that differ: {'; '.join(differ) or 'none'}")
print(f"the mystery GPU was: {mystery.reveal()}")

# %% [markdown]
# Two lessons, both in the output above:
#
# - **A fingerprint identifies a unit, not a chip.** Every GPU in the list of matches has the
#   same fp16 unit in fpsim's table (GPUs of one architecture share their tensor cores), so no
#   dot product can tell them apart; the draw picked one of them.
# - **A field the queries cannot see is left at its default.** Where the found unit differs
#   from the table, the difference is in a rule that fp16 inputs never trigger (the hint of the
#   prediction): an fp16 product lies between $2^{-48}$ and $2^{32}$, so no such sum reaches an
#   alignment floor near $2^{-132}$, a product limit at $2^{128}$, or an fp32 subnormal result.
#   Both units give the same results on every fp16 input; with bf16 inputs (fp32's exponent
#   range) the same rules become visible.
#
# ### The order of a sum
#
# `fpsim.probe.reveal_order(fn, n)` asks a narrower question of any summation: in which tree
# does it add? It plants $+M$ and $-M$ among small units; where they meet, they cancel and the
# units added after survive (FPRev, Xie et al. 2025). A tuple is one node: two leaves for an
# ordinary addition, more for a multi-term fused adder. NumPy's `sum` first, then the mystery
# unit's dot product with a vector of ones (`OrderError` if the function is no fixed tree, as an
# exact sum is not):

# %%
print("np.sum, 10 float32 values:", reveal_order(np.sum, 10))
try:
    tree = reveal_order(lambda x: mystery(x[None, :], np.ones((len(x), 1)),
                                          np.zeros((1, 1)))[0, 0], 12, fmt="fp16")
    print("mystery unit, 12 fp16 products:", tree)
except OrderError as e:
    print("mystery unit: no fixed tree:", e)

# %% [markdown]
# An aligned block-FMA shows each block as one node: its products, and in every block after the
# first the running sum too (c joins the alignment); a pairwise unit shows a binary tree of each
# block's products, to which the running sum is then added. Compare the tree with the
# `block_size` and `summation` the fingerprint printed.
#
# ### Exercise 3
#
# Make a unit of your own, `mine = tc.BlockFMA(...)` (say blocks of 8, 4 extra bits, rounding to
# nearest even, an alignment floor `min_exponent=-130`), hide it behind a function as above, and
# fingerprint it with fp16 inputs, then with bf16 inputs. Which fields come back different from
# yours, with which input format, and why? Then draw another mystery GPU (`hidden_unit(seed=1)`,
# ...) and fingerprint it.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
mine = tc.BlockFMA(8, 4, "nearest_even", -130, name="mine")
for fin in ("fp16", "bf16"):
    got = fingerprint(lambda A, B, C, fin=fin: tc.matmul(A, B, C, gpu=mine, input_format=fin),
                      fin)
    differ = [f for f in FIELDS if getattr(got, f) != getattr(mine, f)]
    print(f"{fin}: {got!r}")
    print(f"      fields that differ: {', '.join(differ) or 'none'}")
# With fp16 inputs the floor at 2**-130 is out of reach (every product is at least 2**-48 in
# magnitude, and the floor only cuts terms aligned below it): the fingerprint leaves it at None,
# which gives the same results on every fp16 input. bf16 has fp32's exponent range: products
# and sums reach the floor, and the fingerprint finds it.
other = hidden_unit(seed=1)
print(f"seed 1: {fingerprint(other, 'fp16').describe()} ({other.calls} calls)")
print(f"        it was {other.reveal()}; its table entry: "
      f"{tc.get_gpu(other.reveal()).unit_for('fp16', 'fp32').describe()}")

# %% [markdown]
# ## 6 · DeepSeek-V3's accumulation experiment
#
# DeepSeek-V3 trained in fp8 on Hopper GPUs and reports (technical report, section 3.5.2) that
# the fp8 GEMM of the tensor cores keeps only about 14 bits when accumulating; for K = 4096 with
# random matrices they measured a maximum relative error of nearly 2%. Their remedy: every
# $N_C = 128$ products, the tensor cores' partial sum is copied to CUDA cores and added to an
# fp32 accumulator ("promotion").
#
# In fpsim's model of H100's fp8 unit, products are aligned in blocks of 32 and kept to
# `23 + extra_bits` fraction bits (`extra_bits` is negative for fp8), and each block's result
# is c of the next block: as the running sum grows, each new product loses more of its bits.
#
# **Predict first.** How many fraction bits does fpsim's H100 fp8 unit keep when it accumulates
# (the report's "about 14 bits" counts the leading bit too)? Read it from
# `tc.get_gpu("H100").unit_for("fp8_e4m3", "fp32")`.
# `check("H100 fp8 accumulator fraction bits", ...)`

# %% tags=["solution"]
check("H100 fp8 accumulator fraction bits",
      23 + tc.get_gpu("H100").unit_for("fp8_e4m3", "fp32").extra_bits)

# %% [markdown]
# `tc.matmul(..., promote_every=N_C)` starts a fresh partial sum every $N_C$ products and adds
# it to an fp32 accumulator (rounded to nearest even), and `tc.promotion_experiment` runs the
# experiment: A and B uniform in [0, 1) rounded to e4m3 (the paper states no inputs), per K
# the maximum relative error over 8 x 8 outputs, with the tensor cores' own accumulation and
# with promotion every $N_C$.
#
# **Predict first.** At K = 128, which promoted columns must equal the tensor-core column
# exactly? And which of $N_C$ = 32, 128, 256 will have the smallest error at large K?

# %%
print(tc.get_gpu("H100").unit_for("fp8_e4m3", "fp32").describe())
promo = tc.promotion_experiment(ks=(128, 256, 512, 1024, 2048, 4096, 8192, 16384),
                                every=(32, 128, 256), outputs=8)
print(promo)

# %%
fig, ax = style.new_figure((8, 3.6))
ax.loglog(promo.ks, promo.plain, "o-", color="black", label="tensor cores only")
for n, err in promo.promoted.items():
    ax.loglog(promo.ks, err, "o-", label=f"promoted every $N_C$ = {n}")
ax.axhline(0.02, color="grey", ls=":", label="DeepSeek-V3: about 2% at K = 4096")
ax.axvline(4096, color="grey", ls=":", lw=0.8)
ax.set_xlabel("K (products per output)")
ax.set_ylabel("max relative error")
ax.legend(loc="upper left", fontsize=8)
ax.set_title("H100 fp8 GEMM: the tensor cores' accumulation against promotion to fp32",
             loc="left")
display(fig)

# %% [markdown]
# *What to see* (the table and plot above):
#
# - **Without promotion** the error grows with K, about doubling each time K doubles: every
#   block truncates toward zero, and the larger the running sum, the more of each new product
#   is cut. At K = 4096 it is of the same order as the paper's figure of about 2%, and larger.
#   The inputs are not the paper's (it states none; here all positive, so the sum grows with K
#   and nothing cancels), so agreement in size, not in digits, is what the model can claim.
# - **With promotion** the error stops growing: each partial sum of $N_C$ products starts from
#   zero and never meets a large running sum, and each fp32 addition adds at most $2^{-24}$
#   relative. The smaller $N_C$, the smaller the error; at the paper's $N_C = 128$ it stays
#   flat, far below the unpromoted error at large K.
# - At K = 128 (and up to K = $N_C$) promotion changes nothing: one partial sum from zero,
#   added once to an fp32 zero, is the tensor cores' own result (the prediction above).
#
# The cost of promotion is not modelled here: the copies to CUDA cores and the extra fp32
# additions (the report overlaps one warpgroup's promotion with another's MMA).

# %% [markdown]
# ### Exercise 4
#
# B200's fp8 unit in fpsim sums each block of 32 products exactly (section 3). Does it need
# promotion? Run `tc.promotion_experiment(..., gpu="B200")` and compare with the H100 table.
# Then try `input_format="fp8_e5m2"` on H100.

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
print(tc.promotion_experiment(ks=(128, 1024, 4096, 16384), every=(128,), gpu="B200"))
print(tc.promotion_experiment(ks=(128, 1024, 4096, 16384), every=(128,),
                              input_format="fp8_e5m2"))
# B200's block of 32 is summed exactly and rounded once to fp32 (to nearest): its error stays
# at the level of fp32's rounding (2**-24 is about 6e-8), orders of magnitude below H100's.
# It still grows slowly with K (one rounding per block, each relative to a growing sum), and
# promotion trims that at the largest K, but there is no narrow accumulator to rescue. H100
# with e5m2 inputs shows the same growth as e4m3 without promotion, and the same cure with it.

# %% [markdown]
# ## 7 · Performance: alignment, tiles and waves
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
#
# The model prices tiles and waves only. A misaligned dimension is *flagged* (the `note` line
# below) but not priced: N = 4095 prints the same time as 4096, though cuBLAS then runs slower
# kernels (before cuBLAS 11, none on tensor cores). Measure such shapes; do not read their
# times from the model.

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
# ### Exercise 5
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
# - Custom `BlockFMA` units answer "what if" questions, and the measured rows say which
#   parameters a GPU really has (B200 fp8 is not settled: fpsim's default, the exact sum, is
#   chosen by reasoning until a B200 runs the probes).
# - A numerical model is only as good as its tests: `check_hardware` compares it with measured
#   GPU results row by row, and a wrong model fails.
# - NVIDIA and AMD units differ in the output rounding, where c is added, how subnormals and
#   tiny terms are treated, and how the products are grouped; the same dot product can give
#   different fp32 results, and the fnuz fp8 formats convert the same values differently.
# - A unit can be read from outside: `fingerprint` finds a `BlockFMA` that gives a black box's
#   results bit for bit from designed queries; it names a unit (GPUs sharing one cannot be told
#   apart) and leaves at their defaults the rules the input format never triggers.
# - H100's fp8 accumulation keeps few bits, and its error grows with K; adding partial sums to
#   fp32 every $N_C$ products (DeepSeek-V3) stops the growth.
# - Performance depends on shapes: alignment, tile quantization and wave quantization.
