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
# # 12 · Why low precision is fast: bytes, rooflines and tensor-core peaks
#
# The notebooks so far asked what low precision costs in accuracy. This one asks what it buys
# in speed. A matrix multiplication takes time in two ways: its operands move between memory
# and the chip, and its multiply-adds run on the tensor cores. A narrower format helps both:
# fewer bits per value means fewer bytes to move, and narrower multipliers mean more
# operations per second. Which of the two limits a given GEMM depends on its **arithmetic
# intensity**, and the **roofline** puts the two limits in one picture.
#
# **Learning goals.** After this notebook you can
#
# 1. count the bytes of a tensor in every format, the block scales of MX and NVFP4 included;
# 2. say what low precision saves in the memory of a model, and what it leaves untouched;
# 3. compute the arithmetic intensity of a GEMM $(M, N, K)$ per format, and a GPU's ridge
#    point from its peak rate and its memory bandwidth;
# 4. tell when a GEMM is memory-bound and when it is compute-bound, and what a narrower format
#    gains in each case;
# 5. combine the roofline with the tile and wave quantization of notebook 09.
#
# **Where the numbers come from.** Bits per value: fpsim's formats (`fpsim.get_format`) and
# block sizes (`fpsim.mx`, from OCP MX v1.0 and NVIDIA's NVFP4). Peak rates and SM counts:
# `fpsim.tensorcore.perf`, from NVIDIA's *Matrix Multiplication Background* guide (the
# project's `docs/facts.md`): V100, A100 and H100 SXM, dense. Training memory:
# `fpsim.memory`, from the ZeRO paper. **fpsim holds no memory bandwidths and no fp6 or fp4
# peak rates**, because the reference facts it is built from list none. This notebook does not
# make them up. The bandwidth $B$ stays a variable: results are given as functions of $B$, and
# where a figure needs one number the cell says it is an assumption. Put your GPU's datasheet
# value there.
#
# Exercises are marked **Exercise**. In the instructor edition (`fpsim notebooks DIR`) a
# solution follows each, hidden (click to expand); in the student edition
# (`fpsim notebooks --student DIR`) a cell for your code stands in its place.

# %%
import numpy as np

import fpsim
import fpsim.mx as mx
from fpsim import memory
from fpsim.course import checker
from fpsim.tensorcore import perf
from fpsim.viz import style

check = checker("12")  # check("question", answer) says right or wrong, never the answer

# %% [markdown]
# ## 1 · Bytes per value, format by format
#
# A plain format stores `bits` per value. `fpsim.memory.tensor_bytes(shape, fmt)` counts the
# bytes of a tensor packed to that width. With `packed=False` it counts them the way NumPy and
# ml_dtypes hold them, where an fp6 or fp4 value takes a whole byte. tf32 is a special case:
# it is 19 bits, but it is the form in which tensor cores *read fp32 data*, so a tf32 tensor
# in memory is an fp32 tensor (`perf.DTYPE_BYTES` says the same).

# %%
N_VALUES = 1 << 20
bf16_bytes = memory.tensor_bytes((N_VALUES,), "bf16")
print(f"{'format':10s} {'bits':>5s} {'bytes/value':>12s} {'unpacked':>9s} {'vs bf16':>8s}")
for name in ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2",
             "fp4_e2m1"):
    packed = memory.tensor_bytes((N_VALUES,), name) / N_VALUES
    unpacked = memory.tensor_bytes((N_VALUES,), name, packed=False) / N_VALUES
    print(f"{name:10s} {fpsim.get_format(name).bits:5d} {packed:12.4g} {unpacked:9.4g} "
          f"{packed * N_VALUES / bf16_bytes:8.4g}")

# %% [markdown]
# A block-scaled format adds one scale byte per block: an E8M0 power of two per 32 values in
# OCP MX, an E4M3 scale per 16 values in NVFP4, which also has one optional fp32 scale for
# the whole tensor. The blocks run along the last axis, and a row whose length is not a
# multiple of the block is padded with zeros. `tensor_bytes` counts all of this without
# quantizing anything. Below it is checked against the real packed size (`nbytes`) of
# tensors quantized by `fpsim.mx.quantize`:

# %%
print(f"{'format':11s} {'element':9s} {'block':>5s} {'scale':>5s} {'bits/value':>10s} "
      f"{'vs bf16':>8s}")
for name, f in mx.MX_FORMATS.items():
    bits = memory.tensor_bytes((N_VALUES // 32, 32), name) * 8 / N_VALUES
    print(f"{name:11s} {f.element.name:9s} {f.block_size:5d} {f.scale:>5s} {bits:10.4g} "
          f"{bits / 16:8.4g}")

x = np.random.default_rng(0).standard_normal((48, 100)).astype(np.float32)  # rows padded
agree = all(memory.tensor_bytes(x.shape, name) == mx.quantize(x, name).nbytes
            for name in mx.MX_FORMATS)
agree &= (memory.tensor_bytes(x.shape, "nvfp4", per_tensor_scale=True)
          == mx.quantize(x, "nvfp4", per_tensor_scale=mx.nvfp4_per_tensor_scale(x)).nbytes)
print("tensor_bytes equals the quantized arrays' nbytes for every format:", agree)

# %% [markdown]
# *What to see:* each halving of the element width halves the bytes. The scales cost a fixed
# share on top, `8 / block` bits per value: MXFP8 is not quite half of bf16, and NVFP4 pays
# twice MXFP4's overhead for its smaller blocks.
#
# Packing is not free everywhere. The reference facts (`recipes-and-hardware-2025.md`,
# after the huweim/emulation_sys README) note that on the RTX 5090 the `mxf8f6f4` MMA takes
# one FP4 value per byte, while `mxf4nvf4` takes two per byte. So the packed and the unpacked
# column can both be what a kernel really moves.
#
# **Predict first.** How many bytes does an 8192 × 8192 matrix take in NVFP4, with its E4M3
# block scales and its fp32 tensor scale? Work it out by hand before running the cell.
# `check("bytes of an 8192 x 8192 NVFP4 matrix, tensor scale included", ...)`

# %% tags=["solution"]
check("bytes of an 8192 x 8192 NVFP4 matrix, tensor scale included",
      memory.tensor_bytes((8192, 8192), "nvfp4", per_tensor_scale=True))

# %% [markdown]
# ## 2 · The memory of a model
#
# Take the weight matrices of a transformer with width $d = 4096$ and 32 layers. Each layer
# has four $d \times d$ attention projections and an MLP of $d \times 4d$ and $4d \times d$
# (embeddings, norms and biases are left out). Stored in each format, the weights take:

# %%
D, LAYERS = 4096, 32
shapes = [(D, D)] * 4 + [(4 * D, D), (D, 4 * D)]  # (out, in): the blocks run along K
psi = LAYERS * sum(r * c for r, c in shapes)
print(f"{psi:.4g} weights ({LAYERS} layers of 12 d^2)")
weight_bytes = {}
for name in ("fp32", "bf16", "fp8_e4m3", "mxfp8_e4m3", "mxfp4", "nvfp4"):
    weight_bytes[name] = LAYERS * sum(memory.tensor_bytes(s, name) for s in shapes)
    print(f"  {name:11s} {weight_bytes[name] / memory.GB:7.3f} GB")

# %% [markdown]
# Training needs much more than the weights. fpsim's memory model follows the ZeRO paper's
# mixed-precision Adam: fp16 weights (2 bytes per parameter), fp16 gradients (2), and
# $K = 12$ bytes of optimizer state (an fp32 master copy, momentum and variance). On one GPU
# (stage 0, one data-parallel rank):

# %%
total = memory.zero_model_state_bytes(psi, stage=0, dp_degree=1)
parts = {"fp16 weights": 2 * psi, "fp16 gradients": 2 * psi,
         "optimizer state (K = 12)": total - 4 * psi}
for label, b in parts.items():
    print(f"{label:26s} {b / memory.GB:8.2f} GB  ({b / total:.0%})")
print(f"{'total':26s} {total / memory.GB:8.2f} GB  ({total / psi:g} bytes per parameter)")

# %% [markdown]
# *What to see:* the fp32 optimizer state is most of the model state (the percentages above).
# Storing the weights in fp8 would change only the first line. Low precision's big win is not the memory
# a model *occupies*; it is the bytes every kernel *moves*, over and over, step after step.
#
# The plainest case is inference. To produce one token, a model reads all its weights once,
# so one sequence decodes at most $B / (\text{weight bytes})$ tokens per second. Per TB/s of
# bandwidth, that bound is:

# %%
for name, b in weight_bytes.items():
    print(f"  {name:11s} {1e12 / b:6.1f} tokens/s per TB/s  "
          f"({weight_bytes['bf16'] / b:.3g}x bf16)")

# %% [markdown]
# ## 3 · Arithmetic intensity of a GEMM
#
# $C = AB$ with $A$ of $M \times K$ and $B$ of $K \times N$ does $2MNK$ operations (a multiply
# and an add per term). It moves at least $A$ and $B$ in once and $C$ out once:
# $(MK + KN)\,b_\text{in} + MN\,b_\text{out}$ bytes. Their ratio is the **arithmetic
# intensity**, in operations per byte. For a square $n$ GEMM with $b$ bytes per value
# throughout, it is $2n / (3b)$.
#
# `perf.gemm_bytes` and `perf.arithmetic_intensity` take bits, not bytes, so that
# block-scaled formats fit. Low-precision GEMMs usually write their output in bf16, and the
# columns below say which:

# %%
variants = {  # label: (bits in, bits out)
    "fp32": (32, 32), "bf16": (16, 16), "fp8": (8, 8), "fp8 -> bf16": (8, 16),
    "mxfp8 -> bf16": (mx.get_mx_format("mxfp8_e4m3").bits_per_value, 16),
    "nvfp4 -> bf16": (mx.get_mx_format("nvfp4").bits_per_value, 16),
}
print("square GEMMs, operations per byte")
print(f"{'n':>6s}" + "".join(f"{v:>15s}" for v in variants))
for n in (256, 1024, 4096, 16384):
    print(f"{n:6d}" + "".join(f"{perf.arithmetic_intensity(n, n, n, bi, bo):15.4g}"
                              for bi, bo in variants.values()))
print("\nM tokens through a 4096 x 4096 layer (N = K = 4096), operations per byte")
print(f"{'M':>6s}" + "".join(f"{v:>15s}" for v in variants))
for m in (1, 16, 128, 1024, 8192):
    print(f"{m:6d}" + "".join(f"{perf.arithmetic_intensity(m, 4096, 4096, bi, bo):15.4g}"
                              for bi, bo in variants.values()))

# %% [markdown]
# *What to see:* the intensity of a square GEMM grows with $n$: its work grows like $n^3$ and
# its bytes like $n^2$. For a few tokens ($M$ small) it stays near $2M / b$ however large the
# layer is. Halving the bytes doubles the intensity in both cases, except where a bf16 output
# is a large share of the bytes.
#
# ### Exercise 1
#
# What is the arithmetic intensity of a square $n = 4096$ GEMM in bf16 (bf16 in and out)? How
# much higher is it in fp8 with an fp8 output, and with a bf16 output?
# `check("arithmetic intensity of a square 4096 bf16 GEMM", ...)` (operations per byte)

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
n = 4096
by_hand = 2 * n**3 / ((3 * n * n) * 2)  # 2 n^3 operations over 3 n^2 values of 2 bytes
print(f"bf16: {by_hand:.6g} operations per byte (2 n / 3b = {2 * n / (3 * 2):.6g})")
for bi, bo in ((8, 8), (8, 16)):
    ratio = perf.arithmetic_intensity(n, n, n, bi, bo) / perf.arithmetic_intensity(n, n, n, 16)
    print(f"fp8 in, {bo}-bit out: {ratio:.4g}x bf16's")

# %% tags=["solution"]
check("arithmetic intensity of a square 4096 bf16 GEMM", perf.arithmetic_intensity(4096, 4096,
                                                                                   4096, 16))

# %% [markdown]
# ## 4 · Peak rates and the roofline
#
# The other side is the tensor cores. fpsim's performance data holds each GPU's dense peak
# rate per input type. It is printed below next to the bytes each type reads per value and
# their product. fp32 runs on the CUDA cores; the other types run on the tensor cores.

# %%
for g in perf.PERF_GPUS.values():
    print(f"{g.name} ({g.sms} SMs)")
    for dt, p in g.peak_tflops.items():
        b = perf.DTYPE_BYTES[dt]
        print(f"  {dt:5s} {p:7g} TFLOPS  {p / g.peak_tflops['fp32']:5.3g}x fp32  "
              f"{b} bytes/value  peak x bytes = {p * b:g}")

# %% [markdown]
# Look at the last column: on A100 and H100 the peak times the bytes per value is (nearly)
# the same for every tensor-core type. Each halving of the input width doubles the peak.
# fpsim's data stops at fp8: it has no fp6 or fp4 rates. The only rate fact for them in the
# reference facts is a ratio for AMD's MI355X, "FP16 ≈16×, FP8 ≈32×, FP6/FP4 ≈64×" FP32 (ROCm
# blog, in `recipes-and-hardware-2025.md`): the same doubling once more, though it puts fp6
# at fp4's rate.
#
# A GPU with peak $P$ (operations per second) and memory bandwidth $B$ (bytes per second)
# runs a kernel of intensity $I$ at no more than $\min(P, B \cdot I)$: this is the
# **roofline**. Below the **ridge point** $I^* = P / B$ the memory limits the rate
# (memory-bound); above it the tensor cores do (compute-bound).
#
# The figure needs a bandwidth. fpsim has none, so the cell below **assumes** one round value
# for all three GPUs: **this is not a datasheet value**. Put your GPU's there and rerun.
# Because $B$ is the same in all three panels, only the peaks differ between them. The dots
# mark square $n = 4096$ GEMMs (one format in and out), the crosses 16 tokens through a
# 4096 × 4096 layer, and the small hollow circles the ridge points.

# %%
B_TBPS = 2.0  # ASSUMED memory bandwidth in TB/s (10**12 bytes/s), the same for every GPU here
COLORS = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "int8": "int8",
          "fp8": "fp8_e4m3"}
intensity = np.logspace(-0.5, 4.5, 400)
fig, axes = style.new_figure((13, 4.4), ncols=3, sharey=True)
for ax, g in zip(axes, perf.PERF_GPUS.values(), strict=True):
    for dt, p in g.peak_tflops.items():
        c = style.format_color(COLORS[dt])
        ax.plot(intensity, [perf.roofline_tflops(i, p, B_TBPS) for i in intensity], color=c,
                lw=1.8, label=f"{dt}: ridge {perf.ridge_point(p, B_TBPS):.4g} op/B")
        ax.plot([perf.ridge_point(p, B_TBPS)], [p], "o", color=c, ms=4, mfc="white")
        bits = 8 * perf.DTYPE_BYTES[dt]
        for (m, n_, k), marker in (((4096, 4096, 4096), "o"), ((16, 4096, 4096), "x")):
            i = perf.arithmetic_intensity(m, n_, k, bits)
            ax.plot([i], [perf.roofline_tflops(i, p, B_TBPS)], marker, color=c, ms=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (operations per byte)")
    ax.set_title(f"{g.name}, memory at an assumed {B_TBPS:g} TB/s", loc="left")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
axes[0].set_ylabel("attainable TFLOPS")
fig

# %% [markdown]
# *What to see:* all formats share the sloped memory roof, because at a given intensity the
# memory delivers the same operations per second whatever the format. Each format's flat roof
# is its peak. The ridge points move right as the peaks rise: at a fixed bandwidth, a faster
# format needs more operations per byte to be compute-bound. The markers move right too,
# because a narrower format has a higher intensity for the same shape. The 16-token GEMMs sit
# far down the slope in every format: their speed is set by bytes alone.

# %% [markdown]
# ## 5 · Where a GEMM becomes compute-bound
#
# A square $n$ GEMM with $b$ bytes per value is compute-bound when $2n / (3b) \ge P / B$, that
# is, from $n^* = 3bP / (2B)$ on. Turned around, it runs at peak only if the memory delivers
# at least $B_\text{need} = P / I = 3bP / (2n)$. This needs no assumed bandwidth: compare it
# with your GPU's.
#
# **Predict first.** On the H100, fp8 has twice bf16's peak and half its bytes. Does a square
# fp8 GEMM need more bandwidth than a bf16 GEMM of the same size to run at peak, less, or the
# same?

# %%
sizes = 2 ** np.arange(7, 16)
fig, ax = style.new_figure((8, 4))
for gname, dt, bi, bo, ls in (("H100", "fp32", 32, 32, "-"), ("H100", "tf32", 32, 32, "-"),
                              ("H100", "bf16", 16, 16, "-"), ("H100", "fp8", 8, 8, "--"),
                              ("H100", "fp8", 8, 16, ":"), ("A100", "bf16", 16, 16, "-.")):
    p = perf.peak_tflops(gname, dt)
    need = [p / perf.arithmetic_intensity(int(n_), int(n_), int(n_), bi, bo) for n_ in sizes]
    label = f"{gname} {dt}" + (f" -> {bo}-bit out" if bo != bi else "")
    ax.plot(sizes, need, ls=ls, marker=".", color=style.format_color(COLORS[dt]),
            lw=2 if gname == "H100" else 1, label=label)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("n of a square n x n x n GEMM")
ax.set_ylabel("bandwidth needed to run at peak (TB/s)")
ax.set_title("Memory-bound wherever the GPU's bandwidth lies below the line", loc="left")
ax.grid(True, which="major", alpha=0.3)
ax.legend(fontsize=8)
fig

# %%
for dt in ("tf32", "bf16", "fp8"):
    p, b = perf.peak_tflops("H100", dt), perf.DTYPE_BYTES[dt]
    print(f"H100 {dt:4s}: n* = 3 b P / (2 B) = {3 * b * p / 2:6.0f} / B  (B in TB/s)")

# %% [markdown]
# *What to see:* on the H100, the tf32, bf16 and fp8 lines lie on top of each other, since
# $bP$ is (nearly) the same for all three. A GEMM of a given shape therefore turns
# compute-bound at the same size in every tensor-core format. Below that size it is
# memory-bound, and a format with half the bytes is twice as fast. Above it, the format with
# twice the peak is twice as fast. Either way, each halving of the width buys about 2×. An fp8
# GEMM that writes a bf16 output needs more bandwidth: its output bytes did not shrink. The
# A100's line lies lower, because its peaks are lower.
#
# ### Exercise 2
#
# How much memory bandwidth does an H100 need to run a square $n = 4096$ fp8 GEMM (fp8 in and
# out) at its fp8 peak? Then: how large must a square bf16 GEMM be to be compute-bound on a
# GPU with the H100's bf16 peak and a memory of 3 TB/s (a round number for the exercise)?
# `check("bandwidth an H100 needs for a square 4096 fp8 GEMM at peak", ...)` (in TB/s)

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
p8 = perf.peak_tflops("H100", "fp8")
need = p8 / perf.arithmetic_intensity(4096, 4096, 4096, 8)
print(f"needed: {need:.4g} TB/s = P / I = {p8:g} / (2 * 4096 / 3) TB/s")
p16 = perf.peak_tflops("H100", "bf16")
n_star = 3 * 2 * p16 / (2 * 3.0)
print(f"bf16 at 3 TB/s: compute-bound from n = 3 b P / (2 B) = {n_star:.4g} on;",
      [perf.gemm_roofline(m, m, m, "H100", "bf16", bandwidth_tbps=3.0).bound
       for m in (int(n_star) - 1, int(n_star) + 1)])

# %% tags=["solution"]
check("bandwidth an H100 needs for a square 4096 fp8 GEMM at peak",
      perf.peak_tflops("H100", "fp8") / perf.arithmetic_intensity(4096, 4096, 4096, 8))

# %% [markdown]
# ## 6 · Tiles and waves meet the roofline
#
# The roofline assumes the tensor cores run at their peak. Notebook 09's model
# (`perf.gemm_time_estimate`) says they run at `utilisation` × peak: a partial output tile
# costs a whole one, and a partial last wave costs a full one. From its compute time and the
# bytes follows the **balance bandwidth**, at which moving the bytes takes as long as the
# compute. On a slower memory the GEMM takes bytes / $B$; on a faster one it takes the compute
# time. The last column takes the larger of the two at the assumed `B_TBPS`. The output is
# bf16 in every row.
#
# **Predict first.** 16 tokens through a 4096 × 4096 layer, with 128 × 128 output tiles: how
# many of the H100's 132 SMs have work, and how full is each tile?

# %%
print(f"{'shape (M, N, K)':19s} {'tile':>9s} {'dtype':5s} {'tiles':>5s} {'waves':>5s} "
      f"{'util':>6s} {'compute us':>10s} {'MB moved':>8s} {'balance TB/s':>12s} "
      f"{'us at B':>7s}")
for shape, tile in (((16, 4096, 4096), (128, 128)), ((16, 4096, 4096), (16, 128)),
                    ((512, 4096, 4096), (128, 128)), ((4096, 4096, 4096), (128, 128)),
                    ((8192, 8192, 8192), (128, 128))):
    for dt, bi in (("bf16", 16), ("fp8", 8)):
        est = perf.gemm_time_estimate(*shape, gpu="H100", dtype=dt, tile=tile)
        moved = perf.gemm_bytes(*shape, bi, 16)
        t = max(est.time_s, moved / (B_TBPS * 1e12))
        print(f"{str(shape):19s} {'x'.join(map(str, tile)):>9s} {dt:5s} {est.tiles:5d} "
              f"{est.waves:5d} {est.utilisation:6.1%} {est.time_s * 1e6:10.4g} "
              f"{moved / 1e6:8.4g} {moved / est.time_s / 1e12:12.4g} {t * 1e6:7.4g}")
print(f"(us at B: the larger of the compute time and the bytes at the assumed {B_TBPS:g} TB/s)")
est = perf.gemm_time_estimate(16, 4096, 4096, gpu="H100", dtype="bf16")
print(f"16 tokens, 128 x 128 tiles: {est.tiles} of {est.concurrent} SMs busy, each tile "
      f"{est.tile_efficiency:.1%} full")

# %% [markdown]
# *What to see:* with 128 × 128 tiles, 16 tokens fill a small part of each tile, and their
# few tiles leave most SMs idle (the last line). The model then charges a full wave, as long as the 512-token
# GEMM's, and the balance bandwidth falls to about the assumed $B$: the tiles, not the
# memory, set the time. Narrower tiles (16 × 128; real libraries also split K across SMs,
# which the model leaves out) cut the compute time, and the GEMM becomes clearly
# memory-bound: fp8 then gains by moving fewer bytes. The large GEMMs fill several waves at
# the same utilisation in both formats. Their balance bandwidth is low, so they are
# compute-bound, and fp8 gains by its peak.
#
# ### Exercise 3
#
# **Weight-only quantization** keeps activations in bf16 and stores only the weights in a
# narrow format; the kernel widens them on the fly and computes at the bf16 peak. For $M$
# tokens through one 4096 × 4096 layer on the H100's bf16 peak, with memory at the assumed
# `B_TBPS`, compute the time with bf16, fp8 and NVFP4 weights (count each operand's bytes with
# `memory.tensor_bytes`; the output is bf16) for $M$ = 1, 4, 16, 64, 256, 1024. Up to which
# $M$ do NVFP4 weights give at least a 2× speedup over bf16? Why does the gain fade?

# %%
# your code here

# %% [markdown] tags=["solution"]
# #### Solution
#
# *(Expand the hidden cell below to see one solution.)*

# %% jupyter={"source_hidden": true} tags=["solution"]
K_ = N_ = 4096
peak = perf.peak_tflops("H100", "bf16") * 1e12


def layer_time(m, weights):
    moved = (memory.tensor_bytes((m, K_), "bf16") + memory.tensor_bytes((N_, K_), weights)
             + memory.tensor_bytes((m, N_), "bf16"))
    return max(2 * m * N_ * K_ / peak, moved / (B_TBPS * 1e12))


print(f"{'M':>5s} {'bf16 us':>8s} {'fp8 x':>6s} {'nvfp4 x':>8s}")
for m in (1, 4, 16, 64, 256, 1024):
    t = {w: layer_time(m, w) for w in ("bf16", "fp8_e4m3", "nvfp4")}
    print(f"{m:5d} {t['bf16'] * 1e6:8.3g} {t['bf16'] / t['fp8_e4m3']:6.3g} "
          f"{t['bf16'] / t['nvfp4']:8.3g}")
# For a few tokens the weights are nearly all the bytes, and NVFP4 moves 4.5 bits for each 16
# of bf16: its gain is near 16 / 4.5. As M grows, the bf16 activations and outputs count, and
# then the GEMM turns compute-bound at the bf16 peak, which weight-only quantization does not
# raise: the gain is gone. Only a GEMM that also *computes* in a narrower format (section 5)
# keeps its gain.

# %% [markdown]
# ## Summary
#
# - Bytes per value follow the bits: each halving of the width halves the bytes. Block scales
#   add `8 / block` bits per value, and `memory.tensor_bytes` counts them, padding included.
# - In training, the fp32 optimizer state dominates the memory of the model. Low precision
#   pays off mainly in the bytes that kernels move, step after step, and in decoding, where
#   every token reads all the weights.
# - A GEMM's arithmetic intensity is $2MNK$ over its bytes. It grows with the size of a square
#   GEMM, stays near $2M/b$ for few tokens, and doubles when the bytes halve.
# - The roofline $\min(P, B \cdot I)$ has a ridge point at $P / B$. On A100 and H100 each
#   halving of the width doubles the tensor-core peak, so a GEMM turns compute-bound at the
#   same size in every format, and a narrower format is about 2× faster on both sides of the
#   ridge.
# - Tile and wave quantization lower the compute roof for small or awkward shapes; small
#   GEMMs are memory-bound anyway.
# - fpsim holds no memory bandwidths and no fp6 or fp4 peaks. Where a number was needed here,
#   it was an assumption, and it was labelled as one.
