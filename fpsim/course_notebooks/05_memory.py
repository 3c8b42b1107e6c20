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
# # 05 · Memory of training, measured
#
# Where do the bytes of a training step go, and what do the classic memory techniques buy? This
# notebook *measures* them on fpsim's autograd engine, where every tensor is stored at its
# format's real width, and checks the measurements against the formulas of the papers.
#
# **Learning goals**
#
# 1. Split the memory of a training step into parameters, master weights, gradients, optimizer
#    states and *saved activations* (the tensors the forward pass keeps for backward), and see
#    how the number format changes each of them.
# 2. Measure gradient checkpointing's trade-off: with k segments of an n-layer chain the peak
#    of saved activations follows k + n/k, smallest near k = √n, for one extra forward pass of
#    the checkpointed segments, with gradients that stay bitwise the same.
# 3. Run ZeRO stages 0-3 (and ZeRO-Offload) on simulated data-parallel ranks and check each
#    rank's model-state bytes and communication against the ZeRO paper's formulas.
# 4. Decide what fits on one 80 GB GPU.
#
# Tools: `fpsim.memory.meter()` (a context manager around the engine), `fpsim.autograd.checkpoint`
# (and `fpsim.memory.checkpoint_sweep`, which measures it for every segment count),
# `fpsim.distributed.ZeroEngine`, and the calculators of `fpsim.memory`.

# %%
import numpy as np

from fpsim import memory, nn
from fpsim.autograd import Tensor, manual_seed
from fpsim.autograd import functional as F
from fpsim.autograd.checkpoint import checkpoint_sequential
from fpsim.course import checker
from fpsim.distributed import ZeroEngine
from fpsim.optim import Adam
from fpsim.viz import style

check = checker("05")  # check("question", answer) says right or wrong, never the answer


def mlp(width, layers, fmt, act=nn.ReLU, seed=0):
    mods = []
    for i in range(layers):
        mods += [nn.Linear(width, width, rng=seed + i), act()]
    return nn.Sequential(*mods).to(fmt)


# %% [markdown]
# ## 1. One training step, byte by byte
#
# A meter watches the engine inside its `with` block: after every operation and every backward
# node it adds up the live arrays by category. *Saved activations* follow PyTorch's derivative
# formulas: `linear` keeps its input (and the weight, which is already counted as a parameter),
# `relu` keeps its output, `sum` keeps nothing, and a tensor kept by two operations counts once.
#
# Below: a 6-layer MLP (width 256, batch 512) trained in mixed precision, fp16 parameters with fp32
# master weights and Adam. The first step creates the optimizer's state; we measure the second.

# %%
B, D, L = 512, 256, 6
net = mlp(D, L, "fp16")
opt = Adam(net.parameters(), lr=1e-3, master_weights=True)
x = Tensor(np.random.default_rng(0).normal(size=(B, D)), "fp16")
y = np.arange(B) % D

def train_step():
    opt.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()

train_step()            # creates master weights and Adam moments
opt.zero_grad()
with memory.meter(net, opt) as m:
    train_step()
    m.sample()
report = m.report()
print(report.table("KiB"))
psi = sum(p.numel() for p in net.parameters())
print(f"\nPsi = {psi} parameters; model states = {sum(report.current.values()) / psi:.0f} bytes "
      "per parameter (2 + 2 + 12, the ZeRO paper's 16)")

# %% [markdown]
# The timeline shows the shape of a step: saved activations pile up during the forward pass and
# are released node by node in backward, while the gradients appear. Here the peak is at the
# end of the forward pass: at batch 512 the saved activations (2 MiB) outweigh the gradients
# (0.75 MiB) that replace them during backward. With a small batch the peak moves to the end of
# backward (try `B = 16`).

# %%
act = np.array([a for a, t in report.timeline]) / 2**10
tot = np.array([t for a, t in report.timeline]) / 2**10
with style.context():
    fig, ax = style.new_figure((7, 3.2))
    ax.plot(tot, label="total", color="#404040")
    ax.plot(act, label="saved activations", color=style.format_color("fp16"))
    ax.set_xlabel("sample (one per op / backward node)")
    ax.set_ylabel("KiB")
    ax.set_title("Memory during one mixed-precision step")
    ax.legend()
fig

# %% [markdown]
# *What to see:* the saved activations grow layer by layer through the forward pass and are freed
# one by one in backward; the peak of the step is where forward ends, on top of the constant model
# states.

# %% [markdown]
# ### Activation memory by format
#
# The same network in five formats. The saved activations are the input plus the 6 ReLU outputs,
# 7 arrays of 512 × 256 elements, at 8, 4, 2, 2 and 1 byte per element: the meter's peaks equal
# `fpsim.memory.activation_bytes`.

# %%
formats = ["fp64", "fp32", "bf16", "fp16", "fp8_e4m3"]
peaks = {}
for fmt in formats:
    n = mlp(D, L, fmt)
    with memory.meter(n) as m:
        n(Tensor(x.data, fmt)).sum().backward()
    peaks[fmt] = m.report().max["activations"]
    assert peaks[fmt] == memory.activation_bytes([(B, D)] * (L + 1), fmt)
print({f: f"{v / 2**10:.0f} KiB" for f, v in peaks.items()})
with style.context():
    fig, ax = style.new_figure((6, 3))
    ax.bar(formats, [peaks[f] / 2**10 for f in formats],
           color=[style.format_color(f) for f in formats])
    ax.set_ylabel("peak saved activations (KiB)")
    ax.set_title("Saved activations of a 6-layer MLP, batch 512")
fig

# %% [markdown]
# *What to see:* the activations scale with the format's width: bf16 and fp16 halve fp32, fp8
# halves them again.

# %% [markdown]
# ### Exercise 1
#
# Replace `nn.ReLU` by `nn.GELU` in the fp16 network. GELU's backward needs its *input*
# (PyTorch saves `self`), not its output. Predict the peak of saved activations in units of one
# layer's output (512 × 256 fp16 = 256 KiB), then measure it.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
g = mlp(D, L, "fp16", act=nn.GELU)
with memory.meter(g) as m:
    g(x).sum().backward()
unit = B * D * 2
# each layer keeps the linear's input and the GELU's input (= the linear's output): 2 per layer
print(m.report().max["activations"] / unit, "layer outputs; predicted", 2 * L)


# %% [markdown]
# ## 2. Gradient checkpointing: √n memory for one more forward
#
# `checkpoint_sequential(layers, k, x)` cuts the chain in k pieces and runs all but the last
# without saving anything inside them; each keeps only its input. In backward, a piece is run
# again (with the random generators and the engine settings of the first run) and
# backpropagated. Chen et al. (2016): the peak holds the k kept inputs plus one piece,
# k + ⌈n/k⌉ layer outputs, smallest near k = √n.
#
# First, the gradients do not change, not even in the last bit, with dropout in the network:

# %%
def with_dropout(fmt):
    mods = []
    for i in range(8):
        mods += [nn.Linear(64, 64, rng=i), nn.ReLU(), nn.Dropout(0.2)]
    return nn.Sequential(*mods).to(fmt)

def grads(model, segments):
    model.zero_grad()
    manual_seed(1)
    inp = Tensor(np.random.default_rng(2).normal(size=(16, 64)), "fp16")
    out = model(inp) if segments is None else checkpoint_sequential(model, segments, inp)
    F.cross_entropy(out, np.arange(16)).backward()
    return [p.grad.tobytes() for p in model.parameters()]

dnet = with_dropout("fp16")
print("bitwise identical gradients:",
      all(grads(dnet, k) == grads(dnet, None) for k in (2, 3, 6)))

# %% [markdown]
# Now the memory, for n = 16 layers (Linear + ReLU, width 128, batch 32) and every k. The meter
# also counts the operations recomputed in backward.

# %%
n, W, Bc = 16, 128, 32
layers = [nn.Sequential(nn.Linear(W, W, rng=i), nn.ReLU()).to("fp16") for i in range(n)]
chain = nn.Sequential(*layers)
xc = Tensor(np.random.default_rng(3).normal(size=(Bc, W)), "fp16")
unit = Bc * W * 2  # bytes of one layer output: the unit of the peaks
# For each k = 1..n, memory.checkpoint_sweep runs under a meter
#     with memory.meter(chain) as m:
#         checkpoint_sequential(layers, k, xc).sum().backward()
# and returns the row (k, m.report().max["activations"] / unit,
# memory.checkpoint_peak_activations(n, k), m.report().recompute_overhead).
rows = memory.checkpoint_sweep(layers, xc)
print(" k  measured  k+ceil(n/k)  recomputed")
for k, meas, form, over in rows:
    print(f"{k:2d}  {meas:8.0f}  {form:11d}  {100 * over:9.1f}%")
best = min(r.peak for r in rows)
print(f"smallest measured peak: {best:.0f} at k =", [r.segments for r in rows if r.peak == best],
      "; formula's optimum:", memory.optimal_checkpoint_segments(n))

# %%
ks = [r.segments for r in rows]
with style.context():
    fig, ax = style.new_figure((7, 3.6))
    ax.plot(ks, [r.peak for r in rows], "o-", label="measured peak")
    ax.plot(ks, [r.formula for r in rows], "s--", label="k + ceil(n/k)")
    ax.axvline(np.sqrt(n), color="gray", lw=0.8, ls=":")
    ax.set_xlabel("segments k")
    ax.set_ylabel("saved activations (layer outputs)")
    ax2 = ax.twinx()
    ax2.bar(ks, [100 * r.recomputed for r in rows], alpha=0.2, color="gray")
    ax2.set_ylabel("recomputed forward FLOPs (%)")
    ax.legend(loc="upper center")
    ax.set_title("Checkpointing 16 layers: memory against recomputation")
fig

# %% [markdown]
# *What to see:* the measured peak falls from 17 layer outputs to 8 near k = √16 = 4 and rises
# again for many segments, never above k + ⌈n/k⌉; the grey bars, the recomputed share, only grow.

# %% [markdown]
# The measured peak never exceeds the formula and meets it whenever k divides n. fpsim cuts
# uneven pieces with the longer ones first (the last piece, run normally, is then a short one),
# which is why k = 3, 5, 6 do as well as k = 4 here. The grey bars: the share of the forward
# pass run a second time, (n − last piece) / n, approaching one whole extra forward pass
# (Chen et al.: about 33 % of a step, since backward costs about twice a forward).
#
# PyTorch's `torch.utils.checkpoint.checkpoint_sequential` cuts the other way round (its source
# in PyTorch 2.13: k − 1 pieces of ⌊n/k⌋ layers, the remainder added to the last piece), so
# its last piece, the one run without checkpointing, is the longest. The next cell cuts the same
# chain PyTorch's way, with fpsim's `checkpoint` on each piece but the last, and measures both.

# %%
from fpsim.autograd.checkpoint import checkpoint


def torch_cut(n, k):
    """Piece lengths of torch.utils.checkpoint.checkpoint_sequential (PyTorch 2.13)."""
    size = n // k
    return [size] * (k - 1) + [n - size * (k - 1)]


def fpsim_cut(n, k):
    """Piece lengths of fpsim's checkpoint_sequential: as equal as possible, longer first."""
    q_, r_ = divmod(n, k)
    return [q_ + 1] * r_ + [q_] * (k - r_)


def run_cut(lengths, x):
    start = 0
    for j, m in enumerate(lengths):
        piece = nn.Sequential(*layers[start:start + m])
        start += m
        x = piece(x) if j == len(lengths) - 1 else checkpoint(piece, x)
    return x


print(" k  fpsim's cut               peak   PyTorch's cut             peak")
for k in range(2, 9):
    peaks = []
    for cut in (fpsim_cut, torch_cut):
        with memory.meter(chain) as m:
            run_cut(cut(n, k), xc).sum().backward()
        peaks.append(m.report().max["activations"] // unit)
    assert peaks[0] == rows[k - 1].peak  # fpsim's cut by hand measures as checkpoint_sequential
    print(f"{k:2d}  {str(fpsim_cut(n, k)):24s} {peaks[0]:4d}   {str(torch_cut(n, k)):24s} "
          f"{peaks[1]:4d}")

# %% [markdown]
# Where k divides n the two cuts are the same. Otherwise PyTorch's keeps its longest piece
# live through the backward pass and its peak is higher; at k = 6 its last piece holds 6 of
# the 16 layers. The formula k + ⌈n/k⌉ bounds fpsim's cut, not PyTorch's.
#
# ### Exercise 2
#
# For n = 36 layers: which k minimises the measured peak, and what does it cost in recomputed
# FLOPs? Compare with `memory.optimal_checkpoint_segments(36)`. (Use width 32 to keep it quick;
# `memory.checkpoint_sweep` runs the sweep of the previous cells on any chain.)

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
n2 = 36
l2 = [nn.Sequential(nn.Linear(32, 32, rng=i), nn.ReLU()) for i in range(n2)]
x2 = Tensor(np.ones((8, 32)))
res = {r.segments: r for r in memory.checkpoint_sweep(l2, x2)}
best = min(r.peak for r in res.values())
print(f"best peak {best:.0f} at k =", [k for k, r in res.items() if r.peak == best])
print("formula optimum:", memory.optimal_checkpoint_segments(n2), "peak",
      memory.checkpoint_peak_activations(n2, 6), "; recompute at k=6:",
      f"{res[6].recomputed:.0%}")


# %% [markdown]
# ## 3. ZeRO on simulated ranks
#
# `ZeroEngine(model, stage, world_size)` runs N data-parallel ranks in one process. Each rank
# keeps only its share of the model states (stage 1: optimizer states; 2: + gradients; 3: +
# parameters), and the ranks exchange data only through collectives that count what they move
# (ring algorithms: an all-reduce sends 2(N−1)/N × size per rank, reduce-scatter and all-gather
# (N−1)/N × size). Mixed precision as in the paper: fp16 parameters and gradients, fp32 master
# weights and Adam moments (K = 12 bytes per parameter) in the partitions.
#
# Every stage computes the same bits: gradients are averaged by one fixed reduction (float64 sum
# in rank order, rounded once to fp16), and Adam is elementwise, so partitioning it changes
# nothing.

# %%
def factory():
    return nn.Sequential(nn.Linear(32, 64, rng=0), nn.ReLU(), nn.Linear(64, 8, rng=1))

N = 4
rng = np.random.default_rng(0)
data = [(rng.normal(size=(32, 32)), rng.integers(0, 8, size=32)) for _ in range(3)]
configs = [(0, False), (1, False), (2, False), (3, False), (2, True), (3, True)]
engines = {}
for stage, off in configs:
    eng = ZeroEngine(factory, stage, N, lr=1e-3, offload=off)
    for xb, yb in data:
        eng.step(xb, yb)
    engines[(stage, off)] = eng
final = {c: e.full_params().tobytes() for c, e in engines.items()}
print("all stages give bitwise identical parameters:", len(set(final.values())) == 1)

psi = engines[(0, False)].num_params
print(f"Psi = {psi} parameters, N = {N} ranks\n")
print("stage offload  held B  formula B  on GPU B  sent/step  2or3(N-1)/N*Psi  paper")
for (stage, off), eng in engines.items():
    d = memory.zero_measured_vs_formula(eng)
    print(f"{stage:5d} {off!s:>7s} {d['measured_bytes']:7d} {d['formula_bytes']:10.0f} "
          f"{d['device_bytes']:9d} {d['measured_comm_elements']:10d} "
          f"{d['ring_comm_elements']:16.0f} {d['paper_comm_elements']:6.0f}")

# %%
kinds = ["parameters", "gradients", "optimizer_states"]
colors = {"parameters": "#E69F00", "gradients": "#CC79A7", "optimizer_states": "#0072B2"}
with style.context():
    fig, ax = style.new_figure((7, 3.4))
    labels = [f"stage {s}" + ("\n+offload" if o else "") for s, o in configs]
    bottom = np.zeros(len(configs))
    for kind in kinds:
        vals = []
        for c in configs:
            b = engines[c].model_state_bytes(0)
            on_host = engines[c].offload and kind != "parameters"
            vals.append(0 if on_host else b[kind])
        ax.bar(labels, vals, bottom=bottom, label=kind.replace("_", " "), color=colors[kind])
        bottom += vals
    ax.plot(labels, [memory.zero_model_state_bytes(psi, s, N) for s, _ in configs], "k_",
            markersize=30, label="ZeRO formula (all of it)")
    ax.set_ylabel("bytes per rank on the GPU")
    ax.set_title(f"Model states per rank, Psi = {psi}, N = {N}")
    ax.legend(fontsize=8)
fig

# %% [markdown]
# *What to see:* each stage partitions one more part (optimizer states, then gradients, then
# parameters) and every bar meets the ZeRO formula; with offload only the fp16 parameters stay on
# the GPU.

# %% [markdown]
# With offload the gradient and optimizer partitions sit in host memory (the formula line marks
# what the rank holds in total) and the GPU keeps only fp16 parameters. The price is PCIe
# traffic: per step each rank sends its fp16 gradient partition down and gets its fp16
# parameters back.

# %%
for c in [(2, True), (3, True)]:
    print(c, "per rank after 3 steps:", engines[c].ranks[0].transfers,
          "= 3 x 2 bytes x Psi/N each way:", 3 * 2 * psi // N)

# %% [markdown]
# ### Exercise 3
#
# With N = 8 ranks and the same model: predict the bytes per rank for stage 2, and the elements
# a rank sends per step in stage 3. Check with a `ZeroEngine` (one step is enough). Hint: Psi
# must divide by N for the formula to be exact (otherwise the flat buffer is padded).

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
e8 = ZeroEngine(factory, 2, 8)
e8.step(*data[0])
print(e8.model_state_bytes(0)["total"], "=", 2 * psi + 14 * psi / 8)
e8 = ZeroEngine(factory, 3, 8)
e8.step(*data[0])
print(e8.last_step_comm[0], "=", 3 * 7 * psi / 8)

# %% [markdown]
# ## 4. What fits on one 80 GB GPU?
#
# The same formulas at scale (model states only; activations come on top): the ZeRO paper's
# Table 1, and the largest model whose states fit in 80 GB for each stage and data-parallel
# degree.

# %%
print(memory.format_zero_table([7.5e9, 128e9], [1, 4, 16, 64, 256, 1024]))
print()
for stage in range(4):
    print(f"stage {stage}: 7.5B fits on 80 GB with N_d =",
          [nd for nd in (1, 4, 16, 64) if memory.fits_on_gpu(7.5e9, stage, nd)])

# %%
nds = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
with style.context():
    fig, ax = style.new_figure((7, 3.6))
    for stage in range(4):
        per_param = [memory.zero_model_state_bytes(1, stage, int(nd)) for nd in nds]
        ax.loglog(nds, 80e9 / np.array(per_param) / 1e9, "o-", label=f"stage {stage}")
    ax.set_xlabel("data-parallel ranks N_d")
    ax.set_ylabel("largest model (billions of parameters)")
    ax.set_title("Model states that fit in 80 GB per GPU")
    ax.legend()
fig

# %% [markdown]
# *What to see:* stage 0 never grows, stages 1 and 2 level off at the fp16 parameters (and
# gradients) every rank keeps, and only stage 3 grows in proportion to the number of ranks.

# %% [markdown]
# Stages 1 and 2 flatten out at 80 GB / 4 and 80 GB / 2 bytes (the fp16 parameters and
# gradients every rank still holds): 20 B and 40 B parameters. Only stage 3 keeps growing
# linearly with N_d.
#
# ### Exercise 4
#
# ZeRO-Offload trained 13 B parameters on one 32 GB V100. With the engine's offload model (GPU:
# fp16 parameters only), how many parameters fit in the model states of one 80 GB GPU with
# N_d = 1, and how much host memory do they need? Check the number of parameters with
# `check("parameters on 80 GB with offload", ...)`.

# %% [markdown] tags=["solution"]
# #### Solution

# %% jupyter={"source_hidden": true} tags=["solution"]
psi_max = 80e9 / 2                      # 2 bytes of fp16 parameters per parameter on the GPU
print(f"{psi_max / 1e9:.0f} B parameters; host: 14 bytes each = {14 * psi_max / 1e9:.0f} GB")
print("13 B on a V100: GPU", 2 * 13e9 / 1e9, "GB of 32; host", 14 * 13e9 / 1e9, "GB")

# %% tags=["solution"]
check("parameters on 80 GB with offload", psi_max)

# %% [markdown]
# ## ZeRO on real processes
#
# The engine above simulated N ranks one after another in one process. `fpsim zero --engine mpi`
# runs the same `ZeroEngine` on N MPI processes (`mpiexec -n N`), each holding only its own
# rank's state and sending fp16 payloads as real 2-byte messages; the gradient average keeps the
# simulation's fixed order (float64 sum in rank order), so the parameters must come out bit for
# bit the same. It needs the optional extra `fpsim[mpi]`; without it the cells below say so and
# skip.
#
# *Predict:* with N = 1, 2, 4 processes on a 2-core machine, does the wall time per step fall
# with N? Do the bytes each rank sends per step grow, shrink or level off?

# %%
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

from fpsim.cli import zero as zero_cli

HAVE_MPI = (importlib.util.find_spec("mpi4py") is not None
            and shutil.which("mpiexec") is not None)
env = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def zero_argv(ranks, stage, steps=2, batch=16):
    return ["--ranks", str(ranks), "--stage", str(stage), "--steps", str(steps),
            "--batch", str(batch)]


def fpsim_zero_mpi(ranks, stage):
    """Run `fpsim zero --engine mpi ... --json` (it starts mpiexec -n N); return its JSON."""
    cmd = [sys.executable, "-m", "fpsim.cli", "zero", "--engine", "mpi",
           *zero_argv(ranks, stage), "--json"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fpsim_zero_sim(ranks, stage):
    """The same run simulated in this process (what `fpsim zero --engine sim` does)."""
    parser = argparse.ArgumentParser()
    zero_cli.configure_parser(parser)
    return zero_cli.run_zero(parser.parse_args(zero_argv(ranks, stage)))


zero_runs = {}
if not HAVE_MPI:
    print("mpi4py or mpiexec not found: install the extra (pip install -e '.[mpi]') "
          "to run this section; skipping it.")
else:
    t_all = time.perf_counter()
    for stage in (0, 3):
        for n in (1, 2, 4):
            mpi, sim = fpsim_zero_mpi(n, stage), fpsim_zero_sim(n, stage)
            zero_runs[stage, n] = mpi
            same = mpi["params_sha256"] == sim["params_sha256"]
            print(f"stage {stage}, N={n}: pids {mpi['pids']}, params sha256 "
                  f"{mpi['params_sha256'][:12]}..., identical to the simulation: {same}")
            assert same, (stage, n)
    print(f"all runs (MPI and simulated): {time.perf_counter() - t_all:.1f} s")

# %%
if zero_runs:
    ns = np.array([1, 2, 4])
    with style.context():
        fig, (ax1, ax2) = style.new_figure((9, 3.4), ncols=2)
        for stage, marker in ((0, "o"), (3, "s")):
            runs = [zero_runs[stage, n] for n in ns]
            # the first step includes warm-up: take the median of the rest (or the only one)
            t = [np.median(r["step_seconds"][1:] or r["step_seconds"]) * 1e3 for r in runs]
            sent = [max(r["bytes_sent_per_rank"]) / r["steps"] for r in runs]
            ring = [r["ring_bytes_per_rank_per_step"] for r in runs]
            ax1.plot(ns, t, marker=marker, label=f"stage {stage}")
            ax2.plot(ns, sent, marker=marker, ls="", label=f"stage {stage}: measured")
            ax2.plot(ns, ring, ls="--", label=f"stage {stage}: ring {2 if stage < 3 else 3}"
                     "Ψ·2 B·(N−1)/N")
        ax1.set(xlabel="ranks N (processes)", ylabel="wall time per step (ms)",
                xticks=ns, title="2 cores: no speed-up")
        ax2.set(xlabel="ranks N (processes)", ylabel="bytes sent per rank per step",
                xticks=ns, title="traffic per rank")
        ax1.legend()
        ax2.legend(fontsize=7)
    print("measured / ring formula:",
          {f"stage {s}, N={n}": round(max(r["bytes_sent_per_rank"]) / r["steps"]
                                      / r["ring_bytes_per_rank_per_step"], 4)
           for (s, n), r in zero_runs.items() if n > 1})
    display(fig)  # noqa: F821 (IPython's display: the figure is inside an if)

# %% [markdown]
# *What to see:* the bytes each rank sends per step sit on the ring line 2Ψ·2 B·(N−1)/N (stage
# 0) and 3Ψ·2 B·(N−1)/N (stage 3): zero for one rank, half the payload at N = 2, levelling off
# towards the full payload. The wall time per step does not fall in proportion to N: at N = 4,
# more processes than cores, it rises above one rank's (N = 2 can land either side of N = 1;
# these milliseconds are noisy on a shared machine).
#
# What a 2-core machine can and cannot show: it *can* show the traffic (counted by the engine on
# real messages, matching the ring volumes) and the identical bits (every MPI run's parameters
# hash to the simulation's). It *cannot* show a speed-up: with N = 4 four processes share two
# cores, and this tiny model's step is dominated by process scheduling and message latency, not
# arithmetic. Measuring ZeRO's scaling needs at least one core (or GPU) per rank, e.g. the same
# command under `mpiexec -f hostfile` across machines.

# %% [markdown]
# ## Summary
#
# * A mixed-precision Adam step holds 16 bytes per parameter of model states (2 fp16 params,
#   2 fp16 grads, 12 fp32 master + moments); activations scale with batch and depth and with the
#   format's width.
# * Checkpointing trades one extra forward pass of the checkpointed segments for a peak of
#   about k + n/k layer outputs, 2√n at best, with identical gradients.
# * ZeRO partitions the 16 bytes across ranks: 4 + 12/N, 2 + 14/N, 16/N bytes per parameter,
#   for 2Ψ, 2Ψ and 3Ψ elements of communication per step (ring: × (N−1)/N).
