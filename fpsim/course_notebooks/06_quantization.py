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
# # 06 · Quantization: INT8, QAT, NF4 and FP8
#
# Inference and fine-tuning run on integers and 8- or 4-bit floats. This notebook quantizes one
# small network (an MLP on the UCI 8×8 digits shipped with fpsim) every way fpsim models, with
# the numerics of the real systems: PyTorch's observers and fake quantization, TensorFlow Lite's
# integer requantization, bitsandbytes' NF4 and Transformer Engine's delayed FP8 scaling.
#
# **Learning goals**
#
# 1. Compute a scale and zero point as PyTorch's observers do, fake-quantize a tensor, and see
#    where the straight-through gradient is zero.
# 2. Calibrate and convert a model to integer-only layers (int8 × int8 → int32 accumulator →
#    requantized int8), and see why per-channel weight scales matter.
# 3. Make the model sensitive to quantization (narrow grids) and watch quantization-aware
#    training, with PyTorch's fake quantizers or LSQ's learned step sizes, win back accuracy
#    that post-training quantization loses.
# 4. Store weights in NF4 (4.127 bits per parameter) and fine-tune them QLoRA-style: a frozen
#    4-bit base plus bf16 LoRA adapters, with the memory of training measured.
# 5. Train in FP8: E4M3 forward, E5M2 backward, per-tensor scales that lag one step behind.
#
# Tools: `fpsim.quant` (observers, `fake_quantize_ste`, `prepare` / `prepare_qat` / `convert`,
# `Int8Linear`, `NF4Linear`, `LoRALinear`, `FP8Linear`, `training_memory`) and
# `fpsim.quant.experiment` (the `fpsim quant` command).

# %%
import copy

import numpy as np

from fpsim import nn
from fpsim import quant as q
from fpsim.autograd import Tensor, no_grad
from fpsim.autograd import functional as F
from fpsim.course import checker
from fpsim.datasets import load_digits
from fpsim.optim import Adam
from fpsim.quant import experiment as ex
from fpsim.viz import style

data = load_digits()                  # 64 features in [0, 1]
print(f"digits: {len(data.x_train):,} training and {len(data.x_test):,} test images "
      "(load_digits() holds out a quarter)")
check = checker("06")  # check("question", answer) says right or wrong, never the answer


def acc(model, x=data.x_test, y=data.y_test):
    return ex.accuracy(model, x, y)

net = ex.make_mlp(64, seed=0)         # Linear(64, 64), ReLU, Linear(64, 10), fp32
ex.train(net, data.x_train, data.y_train, epochs=20, lr=1e-2)
print(f"FP32 test accuracy: {acc(net):.3f}")

# %% [markdown]
# ## 1. Scale, zero point and fake quantization
#
# An 8-bit affine quantizer maps a real range [min, max] (widened to contain 0, so that 0 is
# exact) onto the integers [0, 255]: `s = (max - min) / 255`, `z = 0 - round(min / s)`, and
# `q = clamp(round(x / s) + z, 0, 255)`. PyTorch computes this in float32, multiplying by the
# float32 reciprocal of `s`. Where `x / s` lands on a tie the order of rounding and adding `z`
# matters: PyTorch's `quantize_per_tensor` adds the zero point first (59 + 195.5 = 254.5 → 254,
# ties to even), rounding first gives 196 + 59 = 255. The cell compares fpsim's `quantize` with
# results recorded from PyTorch and prints how many agree. *Fake* quantization (below, and
# PyTorch's `fake_quantize_per_tensor_affine`) does it the other way round: it rounds `x / s`
# first and then adds `z`, so at a tie its code can differ by one from `quantize_per_tensor`'s
# (the last column; tests/data/torch/quant_ties.md has both recorded from PyTorch).

# %%
obs = q.MinMaxObserver(dtype="quint8")     # PyTorch's activation observer: affine, [0, 255]
obs(np.array([-0.7, 0.2, 2.3], np.float32))
scale, zp = obs.calculate_qparams()
print(f"scale {scale[0]:.6g}, zero point {zp[0]}")
xs = np.array([-0.7, -0.35, 0.0, 0.2, 0.5, 1.0, 1.5, 2.0, 2.3], np.float32)
# Recorded with PyTorch 2.13.0 (CPU): MinMaxObserver(dtype=torch.quint8) on [-0.7, 0.2, 2.3] gives
# scale 0.0117647061124444 and zero point 59, and torch.quantize_per_tensor(xs, scale, 59,
# torch.quint8).int_repr() gives these (the same on the qnnpack, onednn, x86, fbgemm engines).
torch_scale, torch_zp = 0.0117647061124444, 59
torch_q = np.array([0, 29, 59, 76, 102, 144, 186, 229, 254])
fpsim_q = q.quantize(xs, scale[0], zp[0], dtype="uint8")
same = float(scale[0]) == torch_scale and zp[0] == torch_zp
print(f"same scale and zero point as PyTorch: {same}")
x_over_s = xs * (np.float32(1) / np.float32(scale[0]))  # float32, as PyTorch computes it
# the code fake quantization rounds to: round(x / s) + z, recovered from its output
fake_q = np.rint(q.fake_quantize(xs, scale[0], zp[0], 0, 255) / scale[0]).astype(int) + zp[0]
print("    x   x/s (fp32)  fpsim  PyTorch  fake-quant code")
for x, t, a, b, f in zip(xs, x_over_s, fpsim_q, torch_q, fake_q, strict=True):
    print(f"{x:5.2f}  {t:10.4f}  {a:5d}  {b:7d}  {f:15d}  {'tie' if t % 1 == 0.5 else '   '}"
          f"{'' if a == b else '  differ'}")
print(f"fpsim agrees with PyTorch on {np.sum(fpsim_q == torch_q)} of {xs.size} values; "
      "0.0 -> the zero point exactly")
print(f"quantize and fake quantization give different codes for {np.sum(fake_q != torch_q)} "
      f"of {xs.size} values: {torch_q[fake_q != torch_q].tolist()} vs "
      f"{fake_q[fake_q != torch_q].tolist()}")

# %% [markdown]
# *Fake* quantization rounds to the grid and maps back to floats, so a float network sees the
# quantization error while it trains. Rounding has a zero derivative almost everywhere, so QAT
# uses the **straight-through estimator**: the gradient passes unchanged where the value landed
# inside the integer range, and is 0 where it was clamped. Here with a 3-bit grid (8 levels) to
# make the steps visible:

# %%
s3, z3 = q.calculate_qparams(-0.7, 2.3, 0, 7)          # a 3-bit affine grid on [-0.7, 2.3]
x = Tensor(np.linspace(-1.5, 3.2, 941), requires_grad=True)
y = q.fake_quantize_ste(x, s3[0], z3[0], 0, 7)
y.sum().backward()
with style.context():
    fig, (ax1, ax2) = style.new_figure((8, 3), ncols=2)
    ax1.plot(x.numpy(), x.numpy(), color="#bbbbbb", lw=1, label="x")
    ax1.plot(x.numpy(), y.numpy(), color=style.format_color("uint8"), label="fake_quantize(x)")
    ax1.set_xlabel("x")
    ax1.set_title("3-bit fake quantization")
    ax1.legend()
    ax2.plot(x.numpy(), x.grad, color=style.format_color("fp32"))
    ax2.set_xlabel("x")
    ax2.set_ylabel("d out / d x")
    ax2.set_title("straight-through gradient (clipped)")
fig

# %% [markdown]
# *What to see:* 8 levels and flat ends on the left; on the right the straight-through gradient is
# 1 wherever x rounds to a level inside the range (up to half a step beyond it) and 0 where it was
# clamped.

# %% [markdown]
# ### Exercise 1
#
# A tensor ranges over [-1, 3]. Predict the quint8 scale and zero point, and the value that 1.0
# becomes after fake quantization. Check with `q.calculate_qparams` and `q.fake_quantize`, and
# your predictions with `check("quint8 scale for [-1, 3]", ...)` and
# `check("quint8 zero point for [-1, 3]", ...)`.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
# s = 4 / 255; z = 0 - round(-1 / s) = round(63.75) = 64; 1.0 -> round(63.75) + 64 = 128
s, z = q.calculate_qparams(-1.0, 3.0, 0, 255)
print(s[0], 4 / 255, z[0])
print(q.fake_quantize(np.float32(1.0), s[0], z[0], 0, 255), "=", (128 - 64) * 4 / 255)

# %% tags=["solution"]
print(check("quint8 scale for [-1, 3]", s[0]), check("quint8 zero point for [-1, 3]", z[0]))


# %% [markdown]
# ## 2. Post-training quantization to integer-only layers
#
# The steps are PyTorch's eager-mode workflow: `prepare` puts observers on the inputs and
# outputs of each Linear (a ReLU right after a Linear is fused into it), a few *calibration*
# batches run through the model, and `convert` replaces each layer by an integer one. The
# integer layers, though, follow **TensorFlow Lite's** integer-only arithmetic, not PyTorch's
# quantized kernels: the input quantized to uint8, the weights to int8, products summed exactly
# in an int32 accumulator (what IMMA tensor cores and DP4A do), an int32 bias added, and the
# accumulator requantized to the output's uint8 grid with TFLite's fixed-point multiplier.
# PyTorch's own quantized `LinearReLU` requantizes in floating point, so a few of its output
# codes differ from these by one.
#
# `q.get_default_qconfig` borrows PyTorch's name but not its choices: fpsim's observes
# activations with a `MinMaxObserver` over the full [0, 255], where PyTorch's default for the
# x86 and fbgemm engines uses a `HistogramObserver` (which clips outliers to minimise the
# quantization error) with `reduce_range=True` (activations on [0, 127]).

# %%
def ptq(model, qconfig, batches=8):
    p = q.prepare(model, qconfig)                      # observers, float forward
    with no_grad():
        for b in range(batches):                       # calibration
            p(Tensor(data.x_train[64 * b:64 * (b + 1)]))
    return q.convert(p)                                # integer-only layers

int8_pt = ptq(net, q.get_default_qconfig(8, per_channel=False))
int8_pc = ptq(net, q.get_default_qconfig(8, per_channel=True))
print(int8_pc)
print(f"INT8 PTQ: per-tensor {acc(int8_pt):.3f}, per-channel {acc(int8_pc):.3f} "
      f"(FP32 {acc(net):.3f})")

# %% [markdown]
# Inside an `Int8Linear`, everything is integer arithmetic. Below, the accumulator computed by
# hand with NumPy int64, and a float shortcut for the requantization (`round(acc * M)`, with
# `M = s_x s_w / s_out`) compared with TFLite's fixed-point `MultiplyByQuantizedMultiplier`:
# they round ties differently (half to even vs. half away from zero) and the fixed-point
# multiplier keeps 31 bits of M.

# %%
lin = int8_pc[0]
xq = lin.quantize_input(data.x_test)                    # uint8 codes of the input
zx, zo = lin.input_qparams.zero_point[0], lin.output_qparams.zero_point[0]
acc32 = (xq.astype(np.int64) - zx) @ lin.weight_q.astype(np.int64).T + lin.bias_q
print("accumulator range:", acc32.min(), "..", acc32.max(), "(int32 holds +-2.1e9)")
M = (np.float64(lin.input_qparams.scale[0]) * lin.weight_qparams.scale
     / lin.output_qparams.scale[0])
lo = zo if lin.relu else 0
approx = np.clip(np.round(acc32 * M) + zo, lo, 255)
exact = lin.forward_int(xq)
print(f"float shortcut differs from TFLite's fixed point in {int((approx != exact).sum())} of "
      f"{exact.size} outputs")

# %% [markdown]
# Why per-channel? One scale per tensor is set by the largest weight of the whole matrix; every
# output channel with smaller weights then uses only part of the 256 levels. Per-channel scales
# give each row its own range:

# %%
wmax = np.abs(net[0].weight.numpy()).max(axis=1)
with style.context():
    fig, ax = style.new_figure((7, 2.8))
    ax.bar(np.arange(wmax.size), wmax, color=style.format_color("int8"))
    ax.axhline(wmax.max(), color="#D55E00", lw=1, label="per-tensor range")
    ax.set_xlabel("output channel of layer 1")
    ax.set_ylabel("max |w|")
    ax.set_title("Weight range per output channel")
    ax.legend()
fig

# %% [markdown]
# *What to see:* several output channels have weights far smaller than the largest: one per-tensor
# scale leaves them only a few of the int8 levels, a per-channel scale fits each.

# %% [markdown]
# ### Exercise 2
#
# Make the network sensitive to per-tensor scales *without changing what it computes*: multiply
# the incoming weights and bias of two hidden units by 32 and divide their outgoing weights by
# 32 (ReLU(32 z) = 32 ReLU(z)). Predict which of per-tensor / per-channel PTQ suffers more, then
# measure. (Hint: the activations are quantized per tensor in both.)

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
out = copy.deepcopy(net)
w1, b1, w2 = (out[0].weight.numpy().copy(), out[0].bias.numpy().copy(),
              out[2].weight.numpy().copy())
w1[:2] *= 32
b1[:2] *= 32
w2[:, :2] /= 32
out[0].weight.data, out[0].bias.data, out[2].weight.data = w1, b1, w2
print(f"float {acc(out):.3f}")
print(f"per-tensor {acc(ptq(out, q.get_default_qconfig(8, False))):.3f}, "
      f"per-channel {acc(ptq(out, q.get_default_qconfig(8, True))):.3f}")
# per-tensor weights lose resolution in every other channel; the hidden activations are per
# tensor in both cases, so per-channel suffers from the 32x activation range too

# %% [markdown]
# ## 3. When PTQ is not enough: quantization-aware training
#
# At 8 bits this network loses nothing to PTQ, so there is nothing to recover. Narrow the grids
# to 3 bits (weights in [-4, 3], activations in [0, 7]: "W3A3") and PTQ loses several points.
# QAT fine-tunes the float weights *through* the fake quantizers (PyTorch's default QAT
# qconfig: moving-average observers, per-channel weights), so the network learns weights that
# survive the rounding. LSQ (Esser et al., 2020) also learns the step sizes. QAT trains 5 more
# epochs; an fp32 model fine-tuned for the same 5 epochs is the control.

# %%
bits = 3
def qat(model, qconfig, epochs=5):
    m = q.prepare_qat(model, qconfig)

    def freeze(ep, mm):  # freeze the observers for the final epoch
        if ep == epochs - 1:
            mm.apply(q.disable_observer)

    ex.train(m, data.x_train, data.y_train, epochs, 1e-3, hook=freeze)
    return m

ctrl = copy.deepcopy(net)
ex.train(ctrl, data.x_train, data.y_train, 5, 1e-3)
qat3 = qat(net, q.get_default_qat_qconfig(bits))
lsq3 = qat(net, q.get_default_qat_qconfig(bits, learnable=True))
res = {"FP32": acc(net), "FP32 +5 ep": acc(ctrl),
       "PTQ": acc(ptq(net, q.get_default_qconfig(bits))),
       "QAT": acc(q.convert(qat3)), "LSQ": acc(q.convert(lsq3))}
print({k: round(v, 3) for k, v in res.items()})
print("LSQ steps learned for layer 1 (input, weight, output):",
      [round(m.scale.item(), 4) for m in (lsq3[0].input_quant, lsq3[0].weight_quant,
                                          lsq3[0].output_quant)])

# %%
with style.context():
    fig, ax = style.new_figure((6.5, 3))
    colors = [style.format_color("fp32")] * 2 + [style.format_color("int4")] * 3
    ax.bar(list(res), [100 * v for v in res.values()], color=colors)
    ax.set_ylim(80, 100)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"W{bits}A{bits}: post-training vs quantization-aware")
fig

# %% [markdown]
# *What to see:* post-training quantization loses most at this width; QAT and LSQ win back about
# half of the loss, and the fp32 control, fine-tuned as long, shows that the extra epochs alone
# are not what helps.

# %% [markdown]
# The converted integer model computes what the QAT model computed (up to the requantization's
# rounding), because every fake quantizer has a twin in the integer layer. One caveat on LSQ: its
# gradient scale `1/sqrt(N Q_P)` balances step-size and weight updates under SGD, as in the
# paper; Adam (used here) normalises every parameter's update and makes that scale irrelevant.
#
# ### Exercise 3
#
# Repeat PTQ vs QAT at 4 and at 2 bits. Where is the gap largest? (One seed and 449 test images,
# as printed at the top: one image is 100/449 = 0.22 points, so small gaps are noise.)

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
for b in (4, 2):
    print(b, "bits: PTQ", round(acc(ptq(net, q.get_default_qconfig(b))), 3),
          " QAT", round(acc(q.convert(qat(net, q.get_default_qat_qconfig(b)))), 3))

# %% [markdown]
# ## 4. NF4 weights and QLoRA
#
# QLoRA stores the frozen weights in **NF4**: per block of 64 weights, the absmax scales the
# block to [-1, 1] and each weight becomes the nearest of 16 values placed at quantiles of a
# normal distribution. *Double quantization* stores the fp32 absmax constants as 8-bit codes in
# blocks of 256: 4 + 8/64 + 32/(64·256) = 4.127 bits per weight. The forward pass dequantizes to
# bf16 and multiplies with fp32 accumulation, as bitsandbytes does.

# %%
w = net[0].weight.numpy()
codes, absmax = q.nf4_quantize(w)
print("bits per parameter:", round(q.bits_per_parameter(64), 3), "(double quantization),",
      q.bits_per_parameter(64, double_quant=False), "(without)")
normed = (w.reshape(-1, 64) / absmax[:, None]).ravel()
with style.context():
    fig, ax = style.new_figure((7, 2.8))
    ax.hist(normed, bins=80, color="#bbbbbb")
    for v in q.NF4_VALUES:
        ax.axvline(v, color=style.format_color("int4"), lw=1)
    ax.set_xlabel("weight / block absmax")
    ax.set_title("Layer-1 weights and the 16 NF4 levels")
fig

# %% [markdown]
# *What to see:* the weights, divided by their block's absmax, crowd around 0 and thin out towards
# ±1, and NF4's levels are densest where the weights are; each block's largest weight sits on ±1.

# %%
nf4 = nn.Sequential(q.NF4Linear.from_linear(net[0]), nn.ReLU(), q.NF4Linear.from_linear(net[2]))
print(f"NF4 weight-only: accuracy {acc(nf4):.3f}, {q.model_size_bytes(nf4):,} bytes "
      f"(fp32: {q.model_size_bytes(net):,})")

# %% [markdown]
# Now a fine-tuning job: the same digits moved one pixel to the right. The fp32 model falls to
# about 50 %. Full fine-tuning updates every weight; **QLoRA** keeps the NF4 base frozen and
# trains a rank-8 update `(alpha / r) B A` per layer in bf16 (B starts at 0, so training starts
# from the base model exactly). `training_memory` measures the model states on the objects:
# stored weights, gradients and optimizer state (Adam's moments and fp32 master copies).

# %%
xs_train, xs_test = ex.shift_images(data.x_train, 1), ex.shift_images(data.x_test, 1)
print(f"FP32 model on shifted digits: {acc(net, xs_test):.3f}")

full = copy.deepcopy(net)
opt_full = ex.train(full, xs_train, data.y_train, 10, 1e-2)
mixed = copy.deepcopy(net).to("bf16")
opt_mixed = ex.train(mixed, xs_train, data.y_train, 10, 1e-2, master_weights=True)
qlora = q.prepare_qlora(net, r=8, alpha=16, rng=0)
opt_q = ex.train(qlora, xs_train, data.y_train, 10, 1e-2, params=q.lora_parameters(qlora),
                 master_weights=True)
mem = {"full fp32": q.training_memory(full, opt_full),
       "full mixed bf16": q.training_memory(mixed, opt_mixed),
       "QLoRA r=8": q.training_memory(qlora, opt_q)}
for (name, m), model in zip(mem.items(), (full, mixed, qlora), strict=True):
    print(f"{name:16s} accuracy {acc(model, xs_test):.3f}  {m}")

# %%
with style.context():
    fig, ax = style.new_figure((6.5, 3))
    names = list(mem)
    bottom = np.zeros(len(names))
    for part, color in (("weights", "#0072B2"), ("gradients", "#E69F00"),
                        ("optimizer", "#009E73")):
        vals = np.array([getattr(mem[n], part) for n in names]) / 1024
        ax.bar(names, vals, bottom=bottom, label=part, color=color)
        bottom += vals
    ax.set_ylabel("KiB")
    ax.set_title("Model states of a fine-tuning step")
    ax.legend()
fig

# %% [markdown]
# *What to see:* full fine-tuning costs the same in fp32 and in mixed bf16 (halved weights and
# gradients, an fp32 master in the optimizer); QLoRA's frozen 4-bit base and small adapters cut it
# to about a third.

# %% [markdown]
# In this tiny model the adapters are a third of the parameters (r·(64+64) + r·(64+10) = 1,616
# vs 4,810), so QLoRA saves "only" 63 %; in a 7B-parameter transformer the adapters are well
# under 1 % of the weights and the frozen base shrinks from 2 to ~0.52 bytes per parameter.
#
# ### Exercise 4
#
# Predict the LoRA parameter count and the QLoRA training bytes for r = 2 and r = 32 (each LoRA
# parameter costs 2 bytes of bf16 weight, 2 of gradient and 12 of optimizer state), then
# measure them together with the accuracy.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
for r in (2, 32):
    m = q.prepare_qlora(net, r=r, alpha=2 * r, rng=0)
    o = ex.train(m, xs_train, data.y_train, 10, 1e-2, params=q.lora_parameters(m),
                 master_weights=True)
    n_lora = r * (64 + 64) + r * (64 + 10)
    base = q.training_memory(m).weights - 2 * n_lora
    print(f"r={r}: {n_lora} LoRA parameters, predicted {base + 16 * n_lora} bytes, measured "
          f"{q.training_memory(m, o).total}, accuracy {acc(m, xs_test):.3f}")

# %% [markdown]
# ## 5. Training in FP8 with delayed scaling
#
# E4M3 (max 448) is precise enough for activations and weights; gradients need range, so they
# use E5M2 (max 57344, smallest subnormal 2⁻¹⁶). Each tensor gets a per-tensor scale that maps
# its recent amax to the format's maximum, `scale = fmt.max / amax`, taken from a history of
# the amaxes of the previous steps (Transformer Engine's *delayed scaling*): the scale used at
# step t was computed from steps before t, so it always lags by one step. The history length
# here is fpsim's default for `FP8Linear`, 16 steps, chosen so that a run of about 130 steps
# shows an old amax leave the window; Transformer Engine's `DelayedScaling` recipe defaults to
# `amax_history_len=1024` (so does `q.DelayedScaling` used on its own). `FP8Linear` casts
# input and weight to E4M3 and the incoming gradient to E5M2, multiplies the fp8 values with
# fp32 accumulation, and descales.

# %%
fp8 = nn.Sequential(q.FP8Linear(64, 64, rng=0), nn.ReLU(), q.FP8Linear(64, 10, rng=1))
opt = Adam(fp8.parameters(), lr=1e-2)
scales, batch_sizes = [], []
for epoch in range(6):
    order = np.random.default_rng(epoch).permutation(len(data.x_train))
    fp8.train()
    for i in range(0, len(order), 64):
        idx = order[i:i + 64]
        loss = F.cross_entropy(fp8(Tensor(data.x_train[idx])), data.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        l2 = fp8[2]
        batch_sizes.append(len(idx))
        scales.append([float(l2.input_scaling.scale), float(l2.weight_scaling.scale),
                       float(l2.grad_scaling.scale)])
print(f"FP8-trained accuracy after 6 epochs: {acc(fp8):.3f}")
scales = np.array(scales)
steps = np.arange(1, len(scales) + 1)             # step 1 is the first
with style.context():
    fig, ax = style.new_figure((7, 3))
    for k, (name, fmt) in enumerate((("input (E4M3)", "fp8_e4m3"), ("weight (E4M3)", "fp32"),
                                     ("gradient (E5M2)", "fp8_e5m2"))):
        ax.semilogy(steps, scales[:, k], label=name, color=style.format_color(fmt), base=2)
    ax.set_xlabel("training step")
    ax.set_ylabel("scale")
    ax.set_title("Delayed scales of the output layer")
    ax.legend()
g = scales[:, 2]                                  # the gradient's scale used at each step
ratio = g[:-1] / g[1:]
fall = int(np.argmax(ratio)) + 1                  # index of the largest drop (step fall + 1)
back = fall + int(np.argmax(g[fall:] > g[fall]))  # index where it rises again
print(f"the gradient's scale drops {ratio[fall - 1]:.1f}x at step {fall + 1}, after step {fall} "
      f"had a batch of {batch_sizes[fall - 1]} images (a mean over {batch_sizes[fall - 1]}, not "
      f"64), and rises again {back - fall} steps later (history length "
      f"{l2.grad_scaling.amax_history.size})")
fig

# %% [markdown]
# *What to see:* every scale leaves 1 after step 1; the gradient's scale dips when an epoch's
# last, partial batch (printed above) divides the loss by a few images instead of 64, and comes
# back exactly one history length later, when that amax leaves the window.

# %% [markdown]
# Step 1 runs with every scale at 1 (nothing has been seen yet); from step 2 on, the gradient's
# scale lifts the small output gradients (about 1/64 × (p − y)) far above E5M2's 2⁻¹⁶.
#
# ### Exercise 5
#
# With `amax_history_len=16`, one batch whose inputs are 10× larger arrives at step 5. Predict
# for how many steps the input scale stays low, then check with a single `FP8Linear`.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
lin = q.FP8Linear(64, 10, amax_history_len=16, rng=0)
x = data.x_train[:64]
s = []
for step in range(25):
    lin(Tensor(x * (10 if step == 4 else 1)))
    s.append(float(lin.input_scaling.scale))
print(np.round(s, 1))
# the spike enters the history at step 6's update and is the max for 16 updates (steps 6-21)

# %% [markdown]
# ## 6. The whole picture: `fpsim quant`
#
# `fpsim.quant.experiment` runs everything above (and more seeds) and prints the tables; the
# command line is `fpsim quant` (`--quick` for one seed). docs/quantization.md holds the table
# of the full run.

# %%
result = ex.run_experiment(quick=True)
print(ex.format_result(result))

# %% [markdown]
# ## Summary
#
# * An affine quantizer is a scale and a zero point; PyTorch computes them from observed ranges
#   in float32, and fake quantization's straight-through gradient is zero where values clamp.
# * Integer-only inference multiplies int8 × int8 into an exact int32 accumulator and
#   requantizes with a fixed-point multiplier; per-channel weight scales protect channels with
#   small weights from the largest one.
# * At 8 bits this network loses nothing to PTQ; on narrow grids QAT and LSQ recover part of
#   what PTQ loses (compare with the fp32 control trained for the same epochs).
# * NF4 with double quantization stores 4.127 bits per weight; QLoRA fine-tunes a frozen NF4
#   base through small bf16 adapters at a fraction of the training memory.
# * FP8 training uses E4M3 forward and E5M2 backward with per-tensor scales derived from an
#   amax history, one step late.
