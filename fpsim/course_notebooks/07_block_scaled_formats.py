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
# # 07 · Block-scaled formats: MXFP8, MXFP6, MXFP4, MXINT8 and NVFP4
#
# Per-tensor FP8 (notebook 06) gives a whole tensor one scale, so one large value decides the
# resolution of every other. Blackwell and AMD CDNA 4 tensor cores read **block-scaled** formats
# instead: every block of 16 or 32 consecutive values shares one scale, and each value keeps a
# tiny element (8, 6 or 4 bits). `fpsim.mx` simulates them bit for bit (checked against torchao
# and an exact model of the OCP spec); `fpsim.quant.mx_layers.MXLinear` trains with them.
#
# **Learning goals**
#
# 1. Read the bits of each format: element, scale, block size, bits per value, and the packed
#    storage `pack()` / `nbytes` really takes.
# 2. Compute a block's E8M0 scale by hand, and see what the four scale rules (`floor`, `ceil`,
#    `even`, `rceil`) keep and lose.
# 3. Measure quantization error against block size and outlier size: why blocks, and why small
#    ones.
# 4. Follow one outlier through per-tensor FP8, MXFP8 and two-level NVFP4, and see where each
#    fails.
# 5. Know what NaN, infinity and all-zero blocks become, how a block-scaled GEMM accumulates over
#    a long reduction, and what training with MXFP8 / NVFP4 recipes gives on a small network.
# 6. See FP4 training fail (gradients below the reach of NVFP4's block scales) and what fixes it.
#
# Tools: `fpsim.mx` (`MX_FORMATS`, `quantize`, `MXArray.pack` / `nbytes` / `dequantize`,
# `matmul`), `fpsim.quant.mx_layers` (`MXLinear`) and `fpsim.quant.experiment` (the
# `fpsim quant` command's block-scaled table).

# %%
import numpy as np
from matplotlib.patches import Rectangle

import fpsim
import fpsim.mx as mx
from fpsim import nn
from fpsim.course import checker
from fpsim.datasets import load_digits
from fpsim.quant import MXLinear
from fpsim.quant import experiment as ex
from fpsim.viz import style

check = checker("07")  # check("question", answer) says right or wrong, never the answer
rng = np.random.default_rng(0)
print(f"{'format':11s} {'element':9s} {'block':>5s} {'scale':>5s} {'elem max':>9s} "
      f"{'bits/value':>10s}")
for name, f in mx.MX_FORMATS.items():
    print(f"{name:11s} {f.element.name:9s} {f.block_size:5d} {f.scale:>5s} {f.elem_max:9g} "
          f"{f.bits_per_value:10g}")

# %% [markdown]
# Each MX format stores one **E8M0** scale per block of 32: eight exponent bits, no sign, no
# mantissa, so the scale is a bare power of two `2**(code - 127)` (code 255 is NaN). NVFP4 stores
# an **fp8 e4m3** scale per block of 16 (a real multiplier with 3 mantissa bits) and, optionally,
# one fp32 scale for the whole tensor. Bits per value = element bits + scale bits / block size.
#
# *Predict, then run:* how many bytes do 1,024 values take in MXFP4 (elements packed two per
# byte) and in NVFP4 with its per-tensor scale? The next cell counts them from the packed arrays.

# %%
x = rng.standard_normal(1024).astype(np.float32)
print(f"{'format':11s} {'elements':>8s} {'scales':>6s} {'total':>6s}  bits/value")
for name in mx.MX_FORMATS:
    pts = mx.nvfp4_per_tensor_scale(x) if name == "nvfp4" else None
    q = mx.quantize(x, name, per_tensor_scale=pts)
    print(f"{name:11s} {q.pack().nbytes:8d} {q.scales.nbytes:6d} {q.nbytes:6d}  "
          f"{q.nbytes * 8 / x.size:g}")
print(f"fp32 {x.nbytes}, bf16 {x.size * 2}, fp8 per tensor {x.size + 4} bytes")

# %% [markdown]
# NVFP4's 4 extra bytes are its fp32 per-tensor scale. `q.elements` holds one element per byte
# (ml_dtypes' `float4_e2m1fn`, ...); `q.pack()` is the real-width layout (fp4: two per byte,
# the first in the low nibble; fp6: four per three bytes).
#
# ## 1. One block and its scale
#
# The spec's rule (`scale_mode="floor"`): the shared exponent is `floor(log2(amax))` minus the
# element format's largest exponent `emax_elem`, so the block's largest value lands in the
# element's top binade. Each element is `x / X` rounded to nearest even, clamped at the element
# maximum. The figure shows one block of 32 Gaussian values quantized to MXFP4 (fp4 e2m1
# elements, `emax_elem = 2`, largest element 6).

# %%
block = (rng.standard_normal(32) * 1.5).astype(np.float32)
q = mx.quantize(block, "mxfp4")
code = int(q.scales.view(np.uint8)[0])
amax = float(np.abs(block).max())
print(f"amax {amax:.4f}: floor(log2 amax) = {int(np.floor(np.log2(amax)))}, minus emax 2 -> "
      f"exponent {code - 127}, E8M0 code {code} = {code:08b}b, scale {float(q.scale_values[0])}")
grid = np.unique(np.abs(mx.quantize(np.linspace(-6, 6, 10001, dtype=np.float32), "mxfp4",
                                    block_size=10001).dequantize()))
with style.context():
    fig, (ax1, ax2) = style.new_figure((9, 3.4), ncols=2, width_ratios=[3, 1])
    k = np.arange(32)
    scale = float(q.scale_values[0])
    for g in grid * scale:
        ax1.axhline(g, color="#dddddd", lw=0.6, zorder=0)
        ax1.axhline(-g, color="#dddddd", lw=0.6, zorder=0)
    ax1.plot(k, block, "o", color=style.format_color("fp32"), label="x (fp32)")
    ax1.plot(k, q.dequantize(), "_", ms=12, mew=2, color=style.format_color("fp4_e2m1"),
             label="MXFP4: X * element")
    ax1.set_xlabel("position in the block")
    ax1.set_title(f"one block of 32; grey: the fp4 grid times X = {scale:g}")
    ax1.legend(loc="lower left", fontsize=8)
    bits = f"{code:08b}"
    for i, bit in enumerate(bits):
        ax2.add_patch(Rectangle((i, 0), 1, 1, fill=True, alpha=0.35,
                                color=style.format_color("fp8_e4m3")))
        ax2.text(i + 0.5, 0.5, bit, ha="center", va="center", fontsize=12)
    ax2.text(4, 1.5, f"E8M0 code {code}\nX = 2**({code} - 127) = {scale:g}", ha="center")
    ax2.text(4, -0.8, "8 exponent bits:\nno sign, no mantissa", ha="center", fontsize=8)
    ax2.set_xlim(-0.2, 8.2)
    ax2.set_ylim(-1.5, 2.4)
    ax2.axis("off")
    ax2.set_title("the shared scale")
fig

# %% [markdown]
# *What to see:* every value of the block is on the same grid (the fp4 values ±{0, 0.5, 1, 1.5,
# 2, 3, 4, 6} times X); the grid is fine near 0 and coarse at the top, and the largest value sits
# in the top binade [4X, 6X]. The scale costs 8 bits for 32 values: 0.25 bits per value.
#
# ## 2. Four rules for the scale
#
# The spec's `floor` can clamp the block maximum (amax / X may exceed the element max: 7 / 1
# becomes 6). Libraries round the scale up instead: `ceil` (`ceil(log2(amax)) - emax_elem`,
# torchao's CEIL), `even` (amax rounded to the element's mantissa width first, torchao's EVEN,
# from the MX authors' recipe for MXFP4) and `rceil` (`ceil(log2(amax / elem_max))`, the smallest
# scale that clamps nothing: NVIDIA cuBLAS and Transformer Engine's MXFP8, torchao's RCEIL).
#
# *Predict, then run:* for the block `[7, 1.25, 0.3, -2]` in MXFP4, which rule keeps 7 exactly,
# and what does 0.3 become under each?

# %%
small = np.array([7.0, 1.25, 0.3, -2.0], np.float32)
for mode in ("floor", "ceil", "even", "rceil"):
    qm = mx.quantize(small, "mxfp4", block_size=4, scale_mode=mode)
    d = qm.dequantize()
    print(f"{mode:5s}  X = {float(qm.scale_values[0]):g}  ->  {d}   "
          f"max error {np.abs(d - small).max():.2f}")

# %% [markdown]
# None keeps 7: `floor` clamps it to 6, the others double the scale (X = 2), where 7 / 2 = 3.5
# rounds to 4 (a tie, to even) and 0.3 / 2 falls below fp4's smallest step and becomes 0. A
# larger scale trades the block maximum's clamping for resolution everywhere else; on Gaussian
# blocks that trade depends on the element format (exercise 1).
#
# ## 3. Error against block size and outlier size
#
# Blocks exist because of outliers: one scale per block means one outlier spoils only its own
# block. The next cell quantizes 4,096 Gaussian values holding one outlier and measures the
# relative RMS error of the *other* values: against the outlier's size for per-tensor FP8,
# MXFP8, MXFP4 and NVFP4 (left), and against the block size (right).

# %%
def rel_err(d, x, keep):
    return float(np.linalg.norm(d[keep] - x[keep]) / np.linalg.norm(x[keep]))


def fp8_per_tensor(v):
    s = np.abs(v).max() / 448
    return fpsim.cast(v / s, "fp8_e4m3", overflow="saturate").astype(np.float32) * s


def nvfp4_two_level(v):
    return mx.quantize(v, "nvfp4", per_tensor_scale=mx.nvfp4_per_tensor_scale(v)).dequantize()


base = rng.standard_normal(4096).astype(np.float32)
keep = np.arange(base.size) != 100
sizes = 2.0 ** np.arange(0, 25, 2)
curves = {"FP8 per tensor": fp8_per_tensor,
          "MXFP8 (block 32)": lambda v: mx.quantize(v, "mxfp8_e4m3").dequantize(),
          "MXFP4 (block 32)": lambda v: mx.quantize(v, "mxfp4").dequantize(),
          "NVFP4 two-level (block 16)": nvfp4_two_level}
err_size = {k: [] for k in curves}
for big in sizes:
    w = base.copy()
    w[100] = big
    for k, f in curves.items():
        err_size[k].append(rel_err(f(w), w, keep))
blocks = [2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096]
w = base.copy()
w[100] = 2.0**20
err_block = {e: [rel_err(mx.quantize(w, e, block_size=b, scale_mode="rceil").dequantize(), w,
                         keep) for b in blocks] for e in ("mxfp8_e4m3", "mxfp4")}
with style.context():
    fig, (ax1, ax2) = style.new_figure((9, 3.4), ncols=2)
    for k, v in err_size.items():
        ax1.loglog(sizes, v, "o-", ms=3, label=k)
    ax1.set_xlabel("outlier size (the others ~ N(0, 1))")
    ax1.set_ylabel("relative RMS error of the others")
    ax1.set_title("one outlier among 4,096 values")
    ax1.legend(fontsize=7)
    for e, v in err_block.items():
        ax2.loglog(blocks, v, "o-", ms=3, label=e,
                   color=style.format_color(mx.MX_FORMATS[e].element.name))
    ax2.set_xlabel("block size (rceil scales; 32 is the spec's)")
    ax2.loglog(blocks, np.sqrt((np.array(blocks) - 1) / 4095), ":", color="#888888",
               label="sqrt((k - 1) / 4095)")
    ax2.set_title("outlier 2**20: error against block size k")
    ax2.legend(fontsize=7)
fig

# %% [markdown]
# *What to see:* per-tensor FP8 is as good as MXFP8 for small outliers, but its error grows from
# about 2**14 on, and near 2**20 everything is flushed to 0 (100 %): e4m3 spans only
# 448 / 2**-9 ≈ 2**17.8. The block formats stay flat until the outlier flushes the 31 other
# values of its own block (MXFP8 beyond about 2**17, MXFP4 much earlier); then the error stops
# growing. NVFP4's two-level scheme breaks like per-tensor FP8: its fp32 per-tensor scale
# `amax / (6 * 448)` follows the outlier and pushes the other blocks' e4m3 scales below e4m3's
# range. On the right, with an outlier beyond both element ranges, the error grows with the
# block size k as the outlier's k - 1 flushed neighbours do (dotted); smaller blocks cost a
# scale byte per block: 8 + 8/k bits per value for MXFP8.
#
# ## 4. The outlier story on a real network
#
# LLM activations have *outlier channels*: a few features, always in the same place, hundreds of
# times larger than the rest (LLM.int8, Dettmers et al. 2022). `fpsim quant` builds one on the
# digits MLP: the input is padded from 64 to 96 features, feature 64 holds 2**20, and its weights
# are 0, so the FP32 model computes exactly what it did. Then the inputs are quantized.
#
# *Predict, then run:* which of per-tensor FP8, MXFP8, two-level NVFP4 and NVFP4 with block
# scales only keep the accuracy? And what if the outlier is pixel 0 instead, inside a block of
# ordinary pixels?

# %%
data = load_digits()
net = ex.make_mlp(64, seed=0)
ex.train(net, data.x_train, data.y_train, epochs=12, lr=1e-2)
print(f"FP32 accuracy {ex.accuracy(net, data.x_test, data.y_test):.3f}")
for row, a in ex.outlier_accuracies(net, data, 2.0**20).items():
    print(f"{row:42s} {a:.3f}")

# %% [markdown]
# Per-tensor FP8 sees the outlier channel and scales every pixel by 448 / 2**20: a pixel of 1
# becomes 2**-11.2, below half of e4m3's smallest subnormal 2**-9, and rounds to 0; the network
# sees blank images (chance, ~10 %). MXFP8 gives the outlier channel a block and a scale of its
# own, and the pixels (multiples of 1/16) are exact. Two-level NVFP4 fails like per-tensor FP8:
# the per-tensor scale follows the outlier, the pixel blocks' e4m3 scales clamp at 2**-6, and
# their values round to 0 in fp4; without the per-tensor scale NVFP4 keeps them. When the
# outlier sits *inside* a block, its neighbours are flushed: 1x32 blocks lose the top half of
# the image, 1x8 blocks only the top row (at 9 bits per value instead of 8.25).
#
# ## 5. NaN, infinity and all-zero blocks

# %%
z = np.zeros((4, 32), np.float32)
z[1, 4] = np.nan
z[2, :] = 1.0
z[2, 7] = np.inf
z[3, :] = 2.0**-140  # float32 subnormals: amax below E8M0's smallest scale times the element
qz = mx.quantize(z, "mxfp8_e4m3")
dz = qz.dequantize()
for i, what in enumerate(["all zero", "one NaN", "one inf", "tiny (2**-140)"]):
    print(f"{what:15s} scale code {int(qz.scales.view(np.uint8).ravel()[i]):3d}  ->  "
          f"{np.unique(dz[i])}")
qn = mx.quantize(z, "nvfp4")
print("NVFP4 block scales (two per row):", qn.scale_values.ravel())
print("NVFP4 NaN block:", np.unique(qn.dequantize()[1, :16]))

# %% [markdown]
# An all-zero block gets the smallest scale (code 0, 2**-127) and decodes to zeros. A NaN makes
# the block's scale NaN (code 255), which makes the whole block NaN (spec section 5.3.1). An
# infinity is scaled as if amax were 2**128 (what torchao does; the spec leaves it to the
# implementation): it saturates and decodes back to inf, and the finite values of its block are
# lost. Values far below the smallest scale flush to 0.
#
# ## 6. Block-scaled GEMMs over a long reduction
#
# The spec's dot product multiplies two blocks' scales and sums the element products "at an
# implementation-defined precision". `mx.matmul` offers `"exact"` (one rounding at the end),
# `"fp32"` (each block's exact dot rounded to fp32, blocks added in fp32) and a tensor-core
# block-FMA model (a GPU name). None of the block-scaled units has been measured on hardware:
# the `"fp32"` and block-FMA models are plausible, not measured (`tools/record_tensorcore.py
# --block-scaled` holds probes that would decide between them on a B200; docs/mx.md). Here a positive dot product of
# length K, relative to `"exact"`:

# %%
print(f"{'K':>5s} {'fp32':>10s} {'H100 fp8 unit':>14s} {'B200-fp8-variant':>17s}")
for K in (256, 1024, 4096):
    a = np.abs(rng.standard_normal((1, K)))
    b = np.abs(rng.standard_normal((K, 1)))
    qa, qb = mx.quantize(a, "mxfp8_e4m3", axis=1), mx.quantize(b, "mxfp8_e4m3", axis=0)
    exact = mx.matmul(qa, qb, "exact")[0, 0]
    errs = [(mx.matmul(qa, qb, acc)[0, 0] - exact) / exact
            for acc in ("fp32", "H100", "B200-fp8-variant")]
    print(f"{K:5d} " + " ".join(f"{e:+14.2e}" for e in errs))

# %% [markdown]
# fp32 accumulation stays near fp32's rounding error. The H100 FP8 tensor-core model (H100 has
# no MX instructions; here it runs one block at a time with the scales applied outside) keeps
# 13 fraction bits of the running sum, truncated, so small products lose their low bits and
# the error grows with K: this is why DeepSeek-V3 promotes FP8 partial sums to fp32 every 128
# products. The B200 FP8 model fitted to measured rows (7 extra bits, nearest even) matches
# fp32 here.
#
# ## 7. Training with block scaling
#
# `MXLinear` quantizes the operands of every GEMM of a training step along that GEMM's
# reduction dimension: the forward `x W^T`, the data gradient `g W` and the weight gradient
# `g^T x`. Two recipes: Transformer Engine's MXFP8 (E4M3 everywhere, 1x32 blocks, rceil
# scales) and NVIDIA's NVFP4 pretraining recipe (16x16 weight blocks, stochastic rounding of
# gradients, random Hadamard transforms on the weight-gradient inputs, the last layer in BF16).
# A short run on the digits (32 hidden units, 6 epochs, a few seconds):

# %%
cfg = dict(epochs=6, lr=1e-2, seed=0)


def mlp(**kw):  # 64 -> 32 -> ReLU -> 10 with both layers block-scaled
    return nn.Sequential(MXLinear(64, 32, rng=0, **kw), nn.ReLU(),
                         MXLinear(32, 10, rng=1000, **kw))


models = {
    "BF16 (fp32 master)": ex.make_mlp(32, 0).to("bf16"),
    "MXFP8": mlp(recipe="mxfp8"),
    "NVFP4, nearest even, no RHT": mlp(recipe="nvfp4", hadamard=False,
                                       stochastic_gradients=False, weight_2d=False),
    # the recipe keeps the last layer in BF16: its input is rounded to bf16 first
    "NVFP4 recipe": nn.Sequential(MXLinear(64, 32, recipe="nvfp4", rng=0), nn.ReLU(),
                                  ex.ToFormat("bf16"), nn.Linear(32, 10, rng=1000).to("bf16")),
}
for name, m in models.items():
    ex.train(m, data.x_train, data.y_train, master_weights=name.startswith("BF16"), **cfg)
    print(f"{name:28s} test accuracy {ex.accuracy(m, data.x_test, data.y_test):.3f}")
print(models["NVFP4 recipe"])

# %% [markdown]
# On a network this small every recipe trains (`fpsim quant` prints the full table with model
# and training bytes). Each accuracy above is one run of one seed: another seed moves each by
# about as much as the gaps between the rows, so their order here (NVFP4's above BF16's, say)
# is noise, not a ranking; docs/mx.md averages over seeds. The NVFP4 recipe's fixes matter at scale: in NVIDIA's ablations on a
# 12B-parameter model (arXiv:2509.25149), leaving out the Hadamard transforms, the stochastic
# rounding of gradients or the BF16 last layers makes the loss worse than the full recipe's.
#
# ## 8. Where FP4 fails: gradients below the block scales' reach
#
# NVFP4 has two scale levels: an e4m3 scale per 16 values and an fp32 scale per tensor. Drop
# the second (`tensor_scale=False`) and the e4m3 block scales are on their own: torchao clamps
# them at 2**-6, so in a block whose largest value is below 6 × 2**-6 every value up to 2**-8
# rounds to 0. *Predict:* where do the gradients of a loss averaged over 64 images sit?

# %%
xb, yb = data.x_train[:64], data.y_train[:64]
net0 = ex.make_mlp(32, 0)
w1, b1 = net0[0].weight.numpy(np.float64), net0[0].bias.numpy(np.float64)
w2, b2 = net0[2].weight.numpy(np.float64), net0[2].bias.numpy(np.float64)
pre = xb @ w1.T + b1
z = np.maximum(pre, 0) @ w2.T + b2
p = np.exp(z - z.max(1, keepdims=True))
p /= p.sum(1, keepdims=True)
p[np.arange(64), yb] -= 1
g_logits = p / 64
g_hidden = (g_logits @ w2) * (pre > 0)
for name, g in (("logits", g_logits), ("hidden layer", g_hidden)):
    nz = np.abs(g[g != 0])
    print(f"gradient of the {name:12s}: largest {nz.max():.1e}, share <= 2**-8: "
          f"{(nz <= 2.0**-8).mean():.2f}")

# %% [markdown]
# Nearly all of them. With round to nearest they flush and training stalls; stochastic rounding
# keeps each one in expectation (a value v below the threshold becomes 2**-7 with probability
# v / 2**-7), and the per-tensor scale moves the whole tensor into range:

# %%
plain = dict(recipe="nvfp4", hadamard=False, weight_2d=False)
runs = {
    "two-level NVFP4, nearest even": mlp(**plain, stochastic_gradients=False),
    "block scales only, nearest even": mlp(**plain, stochastic_gradients=False,
                                           tensor_scale=False),
    "block scales only, SR gradients": mlp(**plain, stochastic_gradients=True,
                                           tensor_scale=False),
}
for name, m in runs.items():
    ex.train(m, data.x_train, data.y_train, **cfg)
    print(f"{name:32s} test accuracy {ex.accuracy(m, data.x_test, data.y_test):.3f}")

# %% [markdown]
# `fpsim quant` trains the same failure with each piece of the recipe alone: stochastic
# rounding fixes it, the Hadamard transform mostly does, 16x16 weight blocks do not (they treat
# the weights), and the BF16 last layer only lets that layer learn. docs/mx.md has the sweep
# over seeds and configurations. Note the other side of the per-tensor scale in section 4: the
# same global scale that rescues small gradients is what flushes the pixels next to an input
# outlier.
#
# ### Exercise 1
#
# Which scale rule gives the smaller error on Gaussian data: `floor` or `rceil`? Predict for
# MXFP8 (e4m3, whose top binade ends at 448 = 1.75 × 2**8) and for MXFP4 (top binade [4, 6]),
# then measure the relative RMS error on 2**16 Gaussian values.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
g = rng.standard_normal(2**16).astype(np.float32)
for fmt in ("mxfp8_e4m3", "mxfp4"):
    e = {m: rel_err(mx.quantize(g, fmt, scale_mode=m).dequantize(), g, slice(None))
         for m in ("floor", "rceil")}
    print(fmt, {m: f"{v:.4f}" for m, v in e.items()})
# floor: amax / X in [2**emax, 2**(emax+1)); beyond the element max it clamps the block max.
# rceil: never clamps, but doubles X for those blocks, which coarsens every other value.
# e4m3 (max 448 in [256, 512)): clamping costs up to 1/8 of the max, doubling X costs little
# (e4m3's relative spacing is the same in every binade): rceil wins clearly.
# fp4 (max 6 in [4, 8)): a quarter of the blocks clamp under floor, but doubling X pushes the
# small values into fp4's few, coarse binades: the two come out about equal.

# %% [markdown]
# ### Exercise 2
#
# A 4096 × 4096 weight matrix: predict its bytes in bf16, MXFP8, MXFP4 and NVFP4 (with the
# per-tensor scale), then check with `nbytes`, and your MXFP4 count with
# `check("bytes of a 4096 x 4096 MXFP4 matrix", ...)`.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
n = 4096 * 4096
W = rng.standard_normal((4096, 4096)).astype(np.float32)
print("bf16", 2 * n)
for fmt, predicted in (("mxfp8_e4m3", n + n // 32), ("mxfp4", n // 2 + n // 32),
                       ("nvfp4", n // 2 + n // 16 + 4)):
    pts = mx.nvfp4_per_tensor_scale(W) if fmt == "nvfp4" else None
    got = mx.quantize(W, fmt, axis=1, per_tensor_scale=pts).nbytes
    print(fmt, predicted, got, predicted == got)

# %% tags=["solution"]
check("bytes of a 4096 x 4096 MXFP4 matrix", mx.quantize(W, "mxfp4", axis=1).nbytes)

# %% [markdown]
# ### Exercise 3
#
# Digit pixels are multiples of 1/16 up to 1. How large may an outlier be before per-tensor
# E4M3 (scale 448 / amax) flushes the smallest nonzero pixel, 1/16, to zero? Predict from
# e4m3's smallest subnormal 2**-9 (a value rounds to 0 below half of it), then find it by
# bisection over powers of two with `fp8_per_tensor`, and the smallest integer outlier that
# flushes it: `check("smallest integer outlier that flushes 1/16 in per-tensor E4M3", ...)`.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
# 1/16 * 448 / amax <= 2**-10 (a tie goes to even: 0)  <=>  amax >= 448 * 2**6 = 28672
print("predicted limit", 448 * 2**6)
for k in range(12, 18):
    v = np.array([1 / 16, 2.0**k], np.float32)
    print(f"outlier 2**{k} = {2**k:6d}: 1/16 -> {fp8_per_tensor(v)[0]:.5f}")
for big in (28671.0, 28672.0):  # just below the limit, and at it (a tie: rounds to 0)
    v = np.array([1 / 16, big], np.float32)
    print(f"outlier {big:g}: 1/16 -> {fp8_per_tensor(v)[0]:.5f}")

# %% tags=["solution"]
flushing = [big for big in range(2**14, 2**15)
            if fp8_per_tensor(np.array([1 / 16, big], np.float32))[0] == 0]
check("smallest integer outlier that flushes 1/16 in per-tensor E4M3", flushing[0])
