"""Generate and execute the training course notebooks:

- notebooks/02_underflow_and_overflow.ipynb: fp16's limits, the 2048 rule for weight updates,
  the gradient-exponent histogram of a real training run against fp16's range, what a loss
  scale of 8, 128 or 2**16 does to it, and PyTorch's dynamic GradScaler at work (after
  Micikevicius et al. 2018);
- notebooks/03_mixed_precision_training.ipynb: FP32, pure FP16, FP16 with master weights,
  master weights + loss scaling and BF16 trained side by side on the digits (loss, accuracy,
  gradient underflow, lost updates, skipped steps, memory by format), Apex's opt levels and
  autocast's op policy.

The notebooks are built with nbformat, executed with nbclient (kernel "python3", working
directory a temporary folder, as tests/test_notebooks.py does) and saved with their outputs.

Run: /tmp/venv/bin/python tools/make_notebooks_training.py [02] [03]
"""

from __future__ import annotations

import nbtools
from nbtools import code, md, solution

# The model both notebooks train: defined in each notebook so that it reads on its own.
MLP_SOURCE = '''
class MLP(nn.Module):
    """Linear -> ReLU -> Linear -> ReLU -> Linear (64 pixels -> 10 classes), PyTorch's default
    initialisation. After each forward, `outputs` holds every Linear layer's output; their
    gradients are kept by retain_grad() (backpropagation's activation gradients)."""

    def __init__(self, sizes=(64, 64, 64, 10), seed=0):
        super().__init__()
        self.names = [f"fc{i + 1}" for i in range(len(sizes) - 1)]
        for i, name in enumerate(self.names):
            setattr(self, name, nn.Linear(sizes[i], sizes[i + 1], rng=seed + i))

    def forward(self, x):
        self.outputs = {}
        h = x
        for i, name in enumerate(self.names):
            h = getattr(self, name)(h)
            if h.requires_grad:
                h.retain_grad()
            self.outputs[name] = h
            if i < len(self.names) - 1:
                h = F.relu(h)
        return h
'''


# --------------------------------------------------------------------------------------- 02
def notebook_02() -> list:
    cells = [md(r"""
# 02 · Underflow and overflow: experiments after Micikevicius et al. (2018)

*Mixed Precision Training* (Micikevicius et al., ICLR 2018) made fp16 training work with three
techniques: an **fp32 master copy of the weights**, **loss scaling**, and fp16 products
accumulated in fp32. The first two exist because of the two ends of fp16's range: updates too
small for the weights they are added to, and gradients too small (or, after scaling, too
large) for the format. This notebook measures both on a real, small training run, with
`fpsim`'s exact rounding.

**Learning goals.** After this notebook you can

1. state fp16's limits exactly ($2^{-24}$, $2^{-14}$, 65504, 65520) and the IEEE flags they
   raise;
2. explain the "2048 rule": predict whether $w + u$ in fp16 loses the update $u$, ties
   included;
3. record the gradients of a training run (weights and activations) and read their exponent
   histogram against fp16's subnormal, normal and overflow ranges;
4. choose a loss scale: what share of the gradients it rescues from underflow and when it
   overflows;
5. follow what PyTorch's dynamic `GradScaler` does: growth, backoff and skipped steps.

Exercises are marked **Exercise**; each has a hidden solution below it (click to expand).
"""),
        code("""
import time

import numpy as np

import fpsim
from fpsim import amp, nn, optim
from fpsim.autograd import Tensor, no_grad
from fpsim.autograd import functional as F
from fpsim.datasets import load_digits
from fpsim.viz import style  # fpsim's colours and helpers; figures are plain matplotlib

print("fpsim", fpsim.__version__)
"""),
        md(r"""
## 1 · fp16's limits, exactly

fp16 has 5 exponent bits and 10 mantissa bits: normal numbers from $2^{-14}$ to
$65504 = (2 - 2^{-10}) \cdot 2^{15}$, subnormals down to $2^{-24}$. Rounding to nearest even
decides the borderline cases: $2^{-25}$ lies exactly half way between 0 and $2^{-24}$ and
goes to the even neighbour, 0; $65520$ lies half way between 65504 and the next binade's first
value $2^{16}$, which does not exist, so it overflows to infinity.
"""),
        code("""
f16 = fpsim.FP16
print(f"smallest subnormal {f16.smallest_subnormal!r} = 2**-24, smallest normal "
      f"{f16.smallest_normal!r} = 2**-14, max {f16.max!r}, eps {f16.eps!r} = 2**-10")
cases = {
    "2**-24": 2.0**-24, "2**-25 (tie)": 2.0**-25, "2**-25 + 2**-40": 2.0**-25 + 2.0**-40,
    "3 * 2**-26": 3 * 2.0**-26, "1e-8": 1e-8, "2**-14 + 2**-30": 2.0**-14 + 2.0**-30,
    "65504": 65504.0, "65519": 65519.0, "65520 (tie)": 65520.0, "1e5": 1e5,
}
values, flags = fpsim.round(list(cases.values()), f16, flags=True)
for (label, _x), v, fl in zip(cases.items(), values, flags, strict=True):
    print(f"{label:17s} -> {float(v)!r:<23} {fpsim.Flags(int(fl))!r}")
"""),
        md(r"""
Tiny results raise UNDERFLOW (with INEXACT) whether they become 0 or a subnormal; $2^{-24}$
itself is exact and raises nothing. $2^{-14} + 2^{-30}$ is normal but inexact. In training the
danger is silent: an underflowed gradient is a plain zero and no error is reported.

## 2 · The 2048 rule: when a weight update is lost

An optimizer adds an update $u$ (learning rate × gradient) to a weight $w$. If $w$ is stored in
fp16, $w + u$ is rounded to fp16. Near $w = 1$ the fp16 numbers are $2^{-10}$ apart, so any
update of at most half that spacing, $2^{-11} = 1/2048$, rounds back to $w$: the update is
**lost**. Micikevicius et al.: an update is lost when the weight is 2048 times larger than
it. `fpsim.add` rounds the exact sum once; `amp.lost_updates` counts the lost ones.
"""),
        code("""
updates = {
    "2**-11 - 2**-21 (just below half an ulp)": 2.0**-11 - 2.0**-21,
    "2**-11 (exactly half an ulp: a tie)": 2.0**-11,
    "2**-11 + 2**-21 (just above)": 2.0**-11 + 2.0**-21,
    "2**-10 (one ulp)": 2.0**-10,
    "-2**-12 (below 1 the spacing halves: a tie)": -(2.0**-12),
    "-(2**-12 + 2**-22) (just past that tie)": -(2.0**-12 + 2.0**-22),
}
w = 1.0
for label, u in updates.items():
    new = float(fpsim.add(w, u, "fp16"))
    print(f"w = 1, u = {label:44s} -> {new!r:<20} {'LOST' if new == w else 'kept'}")
r = amp.lost_updates(np.full(len(updates), w), np.array(list(updates.values())), "fp16")
print(f"amp.lost_updates: {r.lost} of {r.nonzero} non-zero updates lost")
"""),
        md(r"""
The tie is lost because 1 is the *even* neighbour. On an odd weight the same tie goes the
other way, and the update is **doubled**:
"""),
        code("""
w_odd = 1 + 2.0**-10  # last mantissa bit 1
print(f"{w_odd!r} + 2**-11 -> {float(fpsim.add(w_odd, 2.0**-11, 'fp16'))!r}  "
      f"(= w + 2**-10: twice the update)")
"""),
        md(r"""
In general, for $|w|$ in the binade $[2^e, 2^{e+1})$ an update is lost when
$|u| \le 2^{e-11}$ (half an ulp; ties to even). Measured as the ratio $|u| / |w|$: every
update below $2^{-12}\,|w|$ is lost, every update above $2^{-11}\,|w|$ is kept, and in between
it depends on where $w$ sits in its binade ("2048" is the worst case, a weight at the bottom of
its binade). The same holds for every format with $2^{-(M+1)}$ and $2^{-(M+2)}$, $M$ the
mantissa bits: bf16 loses updates 256 times smaller than the weight, fp32 only below
$2^{-24}$.
"""),
        code("""
rng = np.random.default_rng(0)
ks = np.arange(-30.0, -4.0, 0.25)          # log2 of the ratio |u| / |w|
fig, ax = style.new_figure((8, 3.6))
for name in ("fp32", "bf16", "fp16"):
    w = fpsim.round(np.exp2(rng.uniform(-8, 4, 4000)), name)  # weights over 12 binades
    sign = rng.choice([-1.0, 1.0], w.size)
    lost = [amp.lost_updates(w, sign * np.exp2(k) * w, name).fraction for k in ks]
    ax.plot(ks, lost, color=style.format_color(name), lw=2, label=style.format_label(name))
    m = fpsim.get_format(name).mantissa_bits
    ax.axvline(-(m + 1), color=style.format_color(name), lw=0.8, ls=":")
ax.set_xticks(range(-30, -3, 2), [style.pow2_label(k) for k in range(-30, -3, 2)])
ax.set_xlabel("|update| / |weight|")
ax.set_ylabel("share of updates lost")
ax.set_title("w + u rounded to the weight's format (4000 random weights; dotted: "
             "2**-(M+1))", loc="left")
ax.legend(loc="upper right")
fig
"""),
        md(r"""
This is why the paper keeps an **fp32 master copy** of the weights: the update is computed and
applied in fp32, where it survives down to $2^{-24}$ of the weight, and the fp16 copy used by
the forward and backward passes is refreshed from it after every step
(`fpsim.optim.SGD(..., master_weights=True)` does exactly that).

### Exercise 1

For the fp16 weights $w = 0.1$ (rounded to fp16), $3$ and $2048$, find the smallest positive
fp16 update $u$ for which `fpsim.add(w, u, "fp16")` differs from $w$. (*Hint:* `fpsim.ulp`,
`fpsim.next_up`, and mind the ties.) What does $2048 + 1$ give in fp16?
"""),
        code("# your code here\n"),
        *solution("""
for w in (float(fpsim.round(0.1, "fp16")), 3.0, 2048.0):
    half = float(fpsim.ulp(w, "fp16")) / 2
    # a tie rounds to even: it changes w only when w's last mantissa bit is 1 (w is odd)
    u = half if fpsim.add(w, half, "fp16") != w else float(fpsim.next_up(half, "fp16"))
    print(f"w = {w!r}: half an ulp = {half!r}; smallest update that changes w: {u!r} "
          f"(w/u = {w / u:.0f}) -> {float(fpsim.add(w, u, 'fp16'))!r}")
print("2048 + 1 in fp16:", float(fpsim.add(2048.0, 1.0, "fp16")))  # a tie: 2048 is even
"""),
        md(r"""
### Exercise 2

Stochastic rounding rounds up with probability proportional to the distance, so *on
average* no update is lost. Add $u = 2^{-13}$ (a quarter of the lost threshold) to 200
independent fp16 weights $w = 1$, 1000 times, once with round-to-nearest and once with
`"stochastic"` (`fpsim.add(..., rng=...)`). Compare the mean final weight with the exact
$1 + 1000 \cdot 2^{-13}$.
"""),
        code("# your code here\n"),
        *solution("""
u, steps = 2.0**-13, 1000
rng = np.random.default_rng(1)
w_rne = np.ones(200)
w_sr = np.ones(200)
for _ in range(steps):
    w_rne = fpsim.add(w_rne, u, "fp16")
    w_sr = fpsim.add(w_sr, u, "fp16", "stochastic", rng=rng)
print(f"exact {1 + steps * u:.5f}; round to nearest {w_rne.mean():.5f}; "
      f"stochastic mean {w_sr.mean():.5f} (std {w_sr.std():.5f} over 200 weights)")
"""),
        md(r"""
## 3 · The gradients of a real training run

Now the other end: gradients too small for fp16. We train a small network **in fp32** and
record every gradient fp16 would have to hold. What we chose, and why:

- **Model**: a multilayer perceptron 64 → 64 → 64 → 10 with ReLU (PyTorch's default
  initialisation) on the 8×8 digits shipped with fpsim (1,347 training images).
- **Loss**: cross-entropy averaged over the batch of 64 (`reduction="mean"`, PyTorch's
  default). The mean divides every gradient by 64, six binades lower than a summed loss, which
  is what makes small gradients appear in a network this small.
- **Optimizer**: SGD, learning rate 0.1, momentum 0.9, for 15 epochs (315 steps): long enough
  for the network to become confident, which is when its gradients shrink.
- **Recorded at every step**: the gradients of the three weight matrices (`.grad`) and of the
  three layer outputs (pre-activations and logits, kept with `retain_grad()`): the
  *activation gradients* that backpropagation passes from layer to layer.
"""),
        code(MLP_SOURCE + '''

data = load_digits()  # 1,347 training and 450 test images, 64 features in [0, 1]


def batches(n_epochs, batch=64, seed=0):
    """Indices of shuffled mini-batches, epoch after epoch (the last partial batch dropped)."""
    rng = np.random.default_rng(seed)
    n = len(data.x_train)
    for epoch in range(n_epochs):
        order = rng.permutation(n)
        for i in range(0, n - batch + 1, batch):
            yield epoch, order[i:i + batch]


def accuracy(model, fmt="fp32"):
    with no_grad():
        logits = model(Tensor(data.x_test, fmt)).numpy(np.float64)
    return float(np.mean(logits.argmax(axis=1) == data.y_test))


t0 = time.perf_counter()
model = MLP()
opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
record, epoch_of, fp32_loss = [], [], []
for epoch, idx in batches(15):
    opt.zero_grad()
    loss = F.cross_entropy(model(Tensor(data.x_train[idx])), data.y_train[idx])
    loss.backward()
    g = {f"{k} output": model.outputs[k].grad.copy() for k in model.names}
    g |= {f"{k} weight": getattr(model, k).weight.grad.copy() for k in model.names}
    record.append(g)
    epoch_of.append(epoch)
    fp32_loss.append(loss.item())
    opt.step()
epoch_of = np.array(epoch_of)
print(f"{len(record)} steps in {time.perf_counter() - t0:.1f} s; last batch loss "
      f"{fp32_loss[-1]:.4f}; test accuracy {accuracy(model):.3f}")
'''),
        md(r"""
For each recorded tensor, over all 315 steps: the share of values that are exactly zero in fp32
(not an fp16 matter: a ReLU that was off passes no gradient), and of the non-zero ones the
share that fp16 would flush to zero or hold only as a subnormal (`amp.underflow_stats`, which
rounds exactly):
"""),
        code("""
grads = {name: np.concatenate([g[name].ravel() for g in record]).astype(np.float64)
         for name in record[0]}
print(f"{'gradient of':12s} {'values':>9s} {'exact zero':>11s} {'-> 0 in fp16':>13s} "
      f"{'subnormal':>10s} {'largest':>9s}")
for name, g in grads.items():
    s = amp.underflow_stats(g, "fp16")
    print(f"{name:12s} {g.size:9d} {np.mean(g == 0):11.1%} {s.fraction:13.1%} "
          f"{s.subnormal_fraction:10.1%} {np.abs(g).max():9.2e}")
"""),
        md(r"""
The exponent histograms make it visible. Each bar counts the values with
$\lfloor \log_2 |g| \rfloor = e$ (`amp.exponent_histogram`), that is the binade
$[2^e, 2^{e+1})$; the shading is fp16's range (`amp.fp16_range_shading()`): flushed to zero
below $2^{-24}$ (values in $[2^{-25}, 2^{-24})$ round to 0 or $2^{-24}$), subnormal up to
$2^{-14}$, overflow from $2^{16}$.
"""),
        code('''
R = amp.fp16_range_shading()  # binary exponents: smallest subnormal -24, normal -14, max 15
SHADES = [(-200, R.smallest_subnormal, style.ROLE_COLORS["underflow"], "-> 0 in fp16"),
          (R.smallest_subnormal, R.smallest_normal, style.format_color("fp16"), "subnormal"),
          (R.max + 1, 200, style.ROLE_COLORS["overflow"], "overflow")]
XLIM = (-88, 24)  # binary exponents shown: the run's gradients reach down to 2**-80


def exponent_panel(ax, values, title, shift=0, color="#7F7F7F"):
    """Histogram of floor(log2|values|) + shift as a share of the non-zero values, on fp16's
    shaded range."""
    h = amp.exponent_histogram(values, range(XLIM[0] - shift, XLIM[1] - shift))
    nonzero = h.total - h.zeros
    for lo, hi, col, label in SHADES:
        ax.axvspan(max(lo, XLIM[0]), min(hi, XLIM[1]), facecolor=col, lw=0, label=label,
                   alpha=0.35 if label == "subnormal" else 0.6,
                   hatch="//" if label == "overflow" else None, edgecolor="#A0412D")
    edges = np.append(h.exponents, h.exponents[-1] + 1) + shift
    ax.stairs(h.counts / nonzero, edges, fill=True, color=color, alpha=0.85)
    ax.set_xlim(*XLIM)
    ax.set_title(title, loc="left", fontsize=10)
    ticks = range(-80, 17, 16)
    ax.set_xticks(ticks, [style.pow2_label(k) for k in ticks])


fig, axes = style.new_figure((11, 5), nrows=2, ncols=3, sharex=True)
for ax, name in zip(axes.ravel(), grads, strict=True):
    exponent_panel(ax, grads[name], f"gradient of {name}")
for ax in axes[:, 0]:
    ax.set_ylabel("share per binade")
for ax in axes[1]:
    ax.set_xlabel("|gradient| (binade)")
axes[0, 0].legend(loc="upper left", fontsize=8)
fig.suptitle("Gradients of 315 fp32 training steps against fp16's range", x=0.01,
             ha="left")
fig
'''),
        md(r"""
The logits' gradient is $(\mathrm{softmax}(z) - y)/64$: once an image is classified with
confidence, its entries shrink towards zero, and many fall below $2^{-24}$. The hidden layers'
output gradients spread over 30 or more binades. The weight gradients sum over the batch and
sit higher. The underflow **grows as training proceeds**, because the network becomes
confident:
"""),
        code("""
fig, ax = style.new_figure((8, 3.4))
for name, _g in grads.items():
    per_epoch = [amp.underflow_stats(np.concatenate(
        [r[name].ravel() for r, e in zip(record, epoch_of, strict=True) if e == ep]),
        "fp16").fraction
        for ep in range(epoch_of.max() + 1)]
    ls = "-" if "output" in name else "--"
    ax.plot(np.arange(1, len(per_epoch) + 1), per_epoch, ls, marker="o", ms=3, label=name)
ax.set_xlabel("epoch")
ax.set_ylabel("share flushed to 0 in fp16")
ax.set_title("Non-zero fp32 gradients that fp16 would lose, per epoch", loc="left")
ax.legend(ncols=2, fontsize=8)
fig
"""),
        md(r"""
## 4 · Loss scaling moves the histogram

Multiplying the loss by $S$ multiplies every gradient by $S$ (the chain rule is linear), and a
power of two does so exactly: the histogram moves $\log_2 S$ binades to the right, out of the
underflow region. Dividing the fp32 (master) gradients by $S$ before the update undoes it. The
risk is the other end: $S \cdot \max|g|$ must stay below 65504. Here are all the recorded
gradient values (5.6 million), scaled by 1, 8, 128 and $2^{16}$:
"""),
        code('''
pooled = np.concatenate(list(grads.values()))
scales = {"1": 1.0, "8": 8.0, "128": 128.0, "2**16": 2.0**16}
fig, axes = style.new_figure((9, 6.4), nrows=4, sharex=True, sharey=True)
for ax, (label, S) in zip(axes, scales.items(), strict=True):
    s = amp.underflow_stats(pooled * S, "fp16")
    exponent_panel(ax, pooled, f"S = {label}: {s.fraction:.1%} flushed to 0, "
                   f"{s.subnormal_fraction:.1%} subnormal, {s.overflowed} overflow",
                   shift=int(np.log2(S)), color=style.format_color("fp32"))
    ax.set_ylabel("share")
axes[0].legend(loc="upper right", fontsize=8)
axes[-1].set_xlabel("|S x gradient| (binade)")
fig
'''),
        code("""
h = amp.exponent_histogram(pooled)
print(f"{pooled.size} values; non-zero ones from 2**{h.exponents[0]} to "
      f"{np.abs(pooled).max():.3f} ({h.exponents.size} binades)")
print(f"{'scale S':>8s} {'-> 0':>8s} {'subnormal':>10s} {'overflow':>9s}")
for k in (0, 3, 7, 10, 13, 16, 17, 18, 20):
    s = amp.underflow_stats(pooled * 2.0**k, "fp16")
    print(f"{'2**' + str(k):>8s} {s.fraction:8.2%} {s.subnormal_fraction:10.2%} "
          f"{s.overflow_fraction:9.4%}")
"""),
        md(r"""
What the numbers say, honestly:

- A scale of 8 (what the paper needed for its SSD detector) halves the flushed share; 128
  and $2^{16}$ rescue most of the rest.
- With the mean over the batch this network's largest gradient is 0.92 (an fc3 weight, in
  the third epoch), so $S = 2^{16}$ just fits (0.92 · 65536 ≈ 60200 < 65504) and $2^{17}$ overflows.
  A summed loss (64 times larger gradients) would overflow six binades earlier.
- Some values cannot be rescued at any scale: the gradients span 80 binades, fp16
  (subnormals included) only 40. Scaling moves the window; it does not widen it. The values
  far below the rest are also the ones that matter least for the update.

### Exercise 3

The paper's rule: choose $S$ with $S \cdot \max|g| < 65504$. Find the largest power of two
that satisfies it **for every step** of the recorded run, and the largest that satisfies it
for the **last** step only. What share of the values is flushed to zero with each? Why does
a scale chosen at the end of training risk overflow early in training?
"""),
        code("# your code here\n"),
        *solution("""
step_max = np.array([max(np.abs(g[name]).max() for name in g) for g in record])
for label, m in (("every step", step_max.max()), ("last step", step_max[-1])):
    k = int(np.floor(np.log2(fpsim.FP16.max / m)))
    while 2.0**k * m >= fpsim.FP16.max:  # guard the boundary exactly
        k -= 1
    s = amp.underflow_stats(pooled * 2.0**k, "fp16")
    print(f"{label:10s}: max|g| = {m:.3e}, S = 2**{k}, flushed {s.fraction:.2%}, "
          f"overflowing values over the run: {s.overflowed}")
print("largest gradient per epoch:",
      [f"{step_max[epoch_of == e].max():.3f}" for e in range(epoch_of.max() + 1)])
# The gradients shrink as training proceeds; a scale fitted to the end overflows early steps.
"""),
        md(r"""
## 5 · Dynamic loss scaling: PyTorch's GradScaler

The right scale is not known in advance and changes during training. PyTorch's `GradScaler`
(fpsim's is step for step the same algorithm) starts at $2^{16}$; after `growth_interval`
consecutive steps without inf/NaN gradients it doubles the scale; a step whose gradients
overflowed is **skipped** and the scale halved. PyTorch's default interval is 2000 steps; we
use **20** so that the growth is visible in 315 steps.

We now train the same network **in fp16** with fp32 master weights
(`SGD(..., master_weights=True)`). Two details matter:

1. The loss is computed from the logits cast to fp32 (`.to("fp32")`), as autocast and Apex
   O2 do: an fp16 loss of 2.3 times $2^{16}$ would itself overflow.
2. `GradScaler` refuses fp16 gradients (PyTorch expects fp32 master gradients): after
   backward we widen each fp16 gradient to fp32 (`p.grad_fmt = "fp32"`, exact), as Apex O2
   copies the model's gradients into its master gradients. Before the next backward the
   gradient format goes back to fp16.
"""),
        code('''
def train_fp16(scaler, n_epochs=15):
    """The run of section 3 in fp16 with fp32 master weights and a loss scaler; returns the
    batch losses, the scaler's history and the test accuracy."""
    model = MLP().to("fp16")
    params = list(model.parameters())
    opt = optim.SGD(params, lr=0.1, momentum=0.9, master_weights=True)
    losses = []
    for _epoch, idx in batches(n_epochs):
        opt.zero_grad()
        for p in params:
            p.grad_fmt = None  # gradients in the parameters' format (fp16) again
        logits = model(Tensor(data.x_train[idx], "fp16"))
        loss = F.cross_entropy(logits.to("fp32"), data.y_train[idx])
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected, and caught
            scaler.scale(loss).backward()
        for p in params:
            p.grad_fmt = "fp32"  # fp32 master gradients: an exact copy of the fp16 ones
        scaler.step(opt)  # unscale, check for inf/NaN, step unless found
        scaler.update()   # grow or back off
        losses.append(loss.item())
    return np.array(losses), scaler.history, accuracy(model, "fp16")


t0 = time.perf_counter()
losses16, history, acc16 = train_fp16(amp.GradScaler(init_scale=2.0**16, growth_interval=20))
scale = np.array([h["scale"] for h in history])
skipped = np.array([h["skipped"] for h in history])
print(f"{len(history)} steps in {time.perf_counter() - t0:.1f} s; skipped {skipped.sum()}; "
      f"final scale 2**{np.log2(history[-1]['new_scale']):.0f}; test accuracy {acc16:.3f} "
      f"(fp32 run: {accuracy(model):.3f})")
'''),
        code("""
steps = np.arange(len(history))
fig, (ax1, ax2) = style.new_figure((9, 5.2), nrows=2, sharex=True, height_ratios=[3, 2])
ax1.step(steps, np.log2(scale), where="post", color=style.format_color("fp16"), lw=1.8,
         label="loss scale used at the step")
ax1.plot(steps[skipped], np.log2(scale[skipped]), "x", color=style.ROLE_COLORS["mean"], ms=7,
         mew=2, label="overflow: step skipped, scale halved")
ax1.set_yticks(range(15, 22), [style.pow2_label(k) for k in range(15, 22)])
ax1.set_ylabel("scale")
ax1.set_title("GradScaler(init_scale=2**16, growth_interval=20) on fp16 training", loc="left")
ax1.legend(loc="upper left")
ax2.plot(steps, fp32_loss, color=style.format_color("fp32"), lw=1, label="fp32 run")
ax2.plot(steps, losses16, color=style.format_color("fp16"), lw=1, alpha=0.8,
         label="fp16 + master weights + GradScaler")
ax2.set_yscale("log")
ax2.set_xlabel("step")
ax2.set_ylabel("batch loss")
ax2.legend(loc="lower left")
fig
"""),
        md(r"""
The trajectory is the textbook sawtooth: 20 good steps, the scale doubles; once
$S \cdot \max|g|$ passes 65504 a gradient overflows, that step is skipped and the scale
halves. As the network grows confident its gradients shrink and the scaler follows them
upwards, well past $2^{16}$. The loss follows the fp32 run's (they differ because every
rounding differs, and a skipped step changes the trajectory).

### Exercise 4

DeepSpeed's scaler (`amp.DynamicLossScaler`) adds *hysteresis*: with `hysteresis=2` the first
overflow only skips the step, the second halves the scale. Run `train_fp16` with
`amp.DynamicLossScaler(init_scale=2**16, scale_window=20, hysteresis=2)` and compare the
number of skipped steps and the final scale with the GradScaler run.
"""),
        code("# your code here\n"),
        *solution("""
_, hist_ds, acc_ds = train_fp16(amp.DynamicLossScaler(init_scale=2.0**16, scale_window=20,
                                                      hysteresis=2))
for name, h in (("GradScaler", history), ("DynamicLossScaler", hist_ds)):
    print(f"{name:18s} skipped {sum(r['skipped'] for r in h):3d} steps, final scale "
          f"2**{np.log2(h[-1]['new_scale']):.0f}, scales used "
          f"{sorted({int(np.log2(r['scale'])) for r in h})}")
print(f"test accuracy with DeepSpeed's scaler: {acc_ds:.3f}")
# Hysteresis keeps the scale after an isolated overflow, at the price of more skipped steps
# when overflows come in a row.
"""),
        md("""
## Summary

- fp16 holds magnitudes from $2^{-24}$ to 65504; values below half the smallest subnormal
  become zero silently (with an UNDERFLOW flag nobody reads).
- An fp16 weight loses every update at most half its ulp, about $1/2048$ of the weight: hence
  fp32 master weights.
- Real gradients span many binades, and the small ones grow in number as a network becomes
  confident; with a mean-reduced loss a noticeable share falls below $2^{-24}$.
- A loss scale shifts the whole histogram by $\\log_2 S$ binades; it must stop short of 65504.
- A dynamic scaler finds the scale on its own: it grows after a run of good steps, and skips
  and halves on overflow.

`examples/underflow_overflow.py` runs these experiments as a script and writes the figures.
Notebook 03 trains the same network under the full precision recipes (FP32, pure FP16, master
weights, loss scaling, BF16) and compares results and memory.
"""),
    ]
    return cells


# --------------------------------------------------------------------------------------- 03
def packaged_cells() -> list:
    """Section 7 of notebook 03: the same recipes through fpsim's packaged APIs."""
    return [md(r"""
## 7 · The packaged way: autocast, `amp.initialize` and `fpsim.training`

Everything above was written by hand. fpsim also packages it, with the APIs of the real
libraries: PyTorch's `autocast` and `GradScaler`, Apex's `amp.initialize` and
`amp.scale_loss`, and the instrumented runner behind `fpsim demo`.

**autocast**'s policy table (`fpsim.amp.autocast_policy_table()`): the op, what autocast does
to its tensor inputs, and where PyTorch lists the op:
"""),
        code("""
print(amp.autocast_policy_table())
"""),
        md("""
PyTorch's recipe: fp32 weights, the forward pass and the loss inside `autocast("fp16")`,
`GradScaler` around backward and the step. The casts of section 6, done by autocast:
"""),
        code('''
model = MLP()  # fp32 weights
opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
scaler = amp.GradScaler(init_scale=2.0**16, growth_interval=100)
for idx in batches(EPOCHS):
    opt.zero_grad()
    with amp.autocast("fp16"):  # linear: fp16 inputs and output; softmax and loss: fp32
        loss = F.cross_entropy(model(Tensor(data.x_train[idx])), data.y_train[idx])
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected, and caught
        scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
with amp.autocast("fp16"):
    final_loss, acc = evaluate(model, "fp32")
print(f"logits {model.outputs['fc3'].fmt.name}, loss {loss.fmt.name}, weights "
      f"{model.fc1.weight.fmt.name}, weight gradients {model.fc1.weight.grad.dtype}")
autocast_loss = final_loss
print(f"autocast + GradScaler: train loss {final_loss:.4f}, test accuracy {acc:.3f}, "
      f"{sum(h['skipped'] for h in scaler.history)} skipped steps, final scale "
      f"2**{np.log2(scaler.get_scale()):.0f}")
'''),
        md("""
Apex's recipe: `model, opt = amp.initialize(model, opt, opt_level=...)` prepares both for an
opt level (casts the model, patches its forward, turns on master weights, attaches Apex's loss
scaler), and `with amp.scale_loss(loss, opt) as scaled: scaled.backward()` scales, unscales
and checks. The four levels on our network (Apex's dynamic scaler with a window of 100 steps
instead of 2000):
"""),
        code('''
same_as = {"O0": runs["fp32"]["final_loss"], "O1": autocast_loss,  # the hand-built runs
           "O2": runs["fp16 + master + scaling"]["final_loss"], "O3": runs["fp16"]["final_loss"]}
print(f"{'level':5s} {'weights':>7s} {'master':>6s} {'train loss':>10s} {'test acc':>8s} "
      f"{'skipped':>7s} {'scale':>6s}  same loss as the hand-built run")
for level in amp.OPT_LEVELS:
    model = MLP()
    model, opt = amp.initialize(model, optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                                opt_level=level, scale_window=100)
    for idx in batches(EPOCHS):
        opt.zero_grad()
        loss = F.cross_entropy(model(Tensor(data.x_train[idx])), data.y_train[idx])
        with np.errstate(over="ignore", invalid="ignore"), amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
        opt.step()
    final_loss, acc = evaluate(model, "fp32")
    scale_label = f"2**{int(np.log2(opt.scaler.get_scale()))}"
    print(f"{level:5s} {model.fc1.weight.fmt.name:>7s} {str(opt.master_weights):>6s} "
          f"{final_loss:10.4f} {acc:8.3f} {opt.skipped_steps:7d} "
          f"{scale_label:>6s}  {final_loss == same_as[level]}")
'''),
        md("""
The opt levels reproduce the hand-built runs exactly: O0 is the `fp32` recipe, O1 the
autocast loop above, O2 `fp16 + master + scaling` (Apex's scaler with a window of 100 steps
is `GradScaler` with a growth interval of 100) and O3 pure `fp16`.
"""),
        md("""
Finally `fpsim.training`, the runner of `fpsim demo`: its own model (a wider MLP, 64 → 128 →
128 → 128 → 10, with a small initial output layer), batches of 256 and a cosine learning-rate
schedule (docs/demo.md explains the choices), the five recipes as Apex levels, and the same
kind of exact shadow to measure every step. `run_demo(quick=True)` is `fpsim demo --quick`;
the report functions print its tables:
"""),
        code('''
from fpsim.training import experiment, report
from fpsim.viz import training as training_plots

t0 = time.perf_counter()
demo = experiment.run_demo(quick=True, progress=False)
print(f"fpsim demo --quick: {len(demo)} runs in {time.perf_counter() - t0:.1f} s")
print()
print(report.results_table(demo))
print()
print(report.memory_table(demo))
'''),
        code("""
training_plots.loss_curves(demo)
"""),
        md(r"""
The demo's wider network tells the same story as ours: pure fp16 loses about half of its
weight updates and its loss stays above fp32's; with master weights the run follows fp32
although it loses the same gradients to underflow (about 0.8% of them, half of the rest held
as subnormals); dynamic loss scaling cuts the underflow to a few in ten thousand at the cost
of a few skipped steps; bf16 loses no gradient. `fpsim demo` runs the full 1500 steps per
recipe and writes the plots; docs/demo.md discusses the results.
"""),
    ]


def notebook_03() -> list:
    cells = [md(r"""
# 03 · Mixed-precision training

Notebook 02 measured the two failure modes of fp16 training: updates lost against the weights,
and gradients lost below $2^{-24}$. This notebook trains one network under five precision
recipes, side by side, and measures what each does: the recipes of Micikevicius et al. (2018)
and of NVIDIA's Apex, built by hand from `fpsim.nn`, `fpsim.optim` and `fpsim.amp`, so that
every cast is in plain sight.

**Learning goals.** After this notebook you can

1. build the five recipes (FP32, pure FP16, FP16 with FP32 master weights, master weights +
   loss scaling, BF16 with master weights) as training loops;
2. measure what each recipe does: final loss and accuracy, the share of gradients lost to
   underflow, the share of updates lost against the weights, skipped steps;
3. find out *when* the differences matter, by moving the gradients down exactly;
4. account for the memory of each recipe: weights, gradients, master copy and optimizer state
   by format, and the activations;
5. relate the recipes to Apex's opt levels O0-O3 and to autocast's per-op cast policy.

Exercises are marked **Exercise**; each has a hidden solution below it (click to expand).
"""),
        code("""
import time
from collections import namedtuple

import numpy as np

import fpsim
from fpsim import amp, nn, optim
from fpsim.autograd import Tensor, no_grad
from fpsim.autograd import functional as F
from fpsim.datasets import load_digits
from fpsim.viz import style

data = load_digits()  # 1,347 training and 450 test images, 64 features in [0, 1]
print("fpsim", fpsim.__version__)
"""),
        md(r"""
## 1 · The model, the data and five recipes

The network of notebook 02: an MLP 64 → 64 → 64 → 10 with ReLU and PyTorch's default
initialisation, trained with SGD (learning rate 0.1, momentum 0.9, batches of 64, mean
cross-entropy) for 15 epochs (315 steps). Every recipe starts from the same initial weights
(rounded to its format) and sees the same batches.

| recipe | weights and activations | fp32 master copy | loss scaling | momentum buffer |
|---|---|---|---|---|
| `fp32` | fp32 | – | – | fp32 |
| `fp16` ("pure fp16") | fp16 | no | no | fp16 |
| `fp16 + master` | fp16 | yes | no | fp32 |
| `fp16 + master + scaling` | fp16 | yes | `GradScaler` (dynamic) | fp32 |
| `bf16 + master` | bf16 | yes | no (fp32's exponent range) | fp32 |

In every recipe the logits are cast to fp32 before the loss (`.to("fp32")`), as autocast and
Apex do: softmax and the loss are computed in fp32, and a scaled fp16 loss cannot overflow.
"""),
        code(MLP_SOURCE + '''

Recipe = namedtuple("Recipe", "fmt master scaling state_fmt")
RECIPES = {
    "fp32": Recipe("fp32", master=False, scaling=False, state_fmt="fp32"),
    "fp16": Recipe("fp16", master=False, scaling=False, state_fmt="fp16"),
    "fp16 + master": Recipe("fp16", master=True, scaling=False, state_fmt="fp32"),
    "fp16 + master + scaling": Recipe("fp16", master=True, scaling=True, state_fmt="fp32"),
    "bf16 + master": Recipe("bf16", master=True, scaling=False, state_fmt="fp32"),
}
EPOCHS, LR, MOMENTUM, BATCH = 15, 0.1, 0.9, 64


def batches(n_epochs, seed=0):
    """Indices of shuffled mini-batches, epoch after epoch (the last partial batch dropped)."""
    rng = np.random.default_rng(seed)
    n = len(data.x_train)
    for _ in range(n_epochs):
        order = rng.permutation(n)
        for i in range(0, n - BATCH + 1, BATCH):
            yield order[i:i + BATCH]
'''),
        md(r"""
## 2 · One training step, every recipe

The step below is the whole of mixed-precision training. With a loss scaler the gradients
are scaled in backward, widened to fp32 (`p.grad_fmt = "fp32"`: Apex's fp32 *master
gradients*, an exact copy; PyTorch's `GradScaler` refuses to unscale fp16 gradients),
unscaled and checked for inf/NaN; an overflowing step is skipped. `shift` multiplies the loss
by $2^{-\text{shift}}$ and the learning rate by $2^{\text{shift}}$ (used in section 4).
"""),
        code('''
def make_run(recipe, shift=0, seed=0):
    """A model, optimizer and loss scaler (or None) for a recipe."""
    model = MLP(seed=seed).to(recipe.fmt)
    opt = optim.SGD(model.parameters(), lr=LR * 2.0**shift, momentum=MOMENTUM,
                    master_weights=recipe.master, state_fmt=recipe.state_fmt)
    scaler = amp.GradScaler(init_scale=2.0**16, growth_interval=100) if recipe.scaling else None
    return model, opt, scaler


def step(model, opt, scaler, recipe, idx, shift=0, between=None):
    """One training step on the batch idx; returns (loss, skipped). between(scale) runs after
    backward, before the update (used to measure)."""
    params = list(model.parameters())
    opt.zero_grad()
    for p in params:
        p.grad_fmt = None  # gradients in the parameters' own format
    logits = model(Tensor(data.x_train[idx], recipe.fmt))
    loss = F.cross_entropy(logits.to("fp32"), data.y_train[idx]) * 2.0**-shift
    scale = scaler.get_scale() if scaler is not None else 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected, and caught
        (scaler.scale(loss) if scaler is not None else loss).backward()
    if between is not None:
        between(scale)
    if scaler is None:
        opt.step()
        return loss.item() * 2.0**shift, False
    for p in params:
        p.grad_fmt = "fp32"  # fp32 master gradients (exact copies of the fp16 ones)
    scaler.step(opt)         # unscale, check for inf/NaN, step unless found
    scaler.update()
    return loss.item() * 2.0**shift, scaler.history[-1]["skipped"]
'''),
        md(r"""
What we measure, and how:

- **Gradient underflow.** An exact shadow repeats every step in fp64 with the run's own
  weights, batch and loss scale, and yields the exact gradients of the weights and of the
  layer outputs. `amp.underflow_stats` counts the non-zero ones that round to zero in the
  format the run holds them in: the values the format cannot hold.
- **Lost updates.** After each step the update of every weight is $-\text{lr} \cdot b$ with
  $b$ the momentum buffer as stored; `amp.lost_updates` counts the non-zero updates for which
  the weight that receives them (the fp32 master copy, or the weight itself) plus the update
  rounds back to the weight. (Checked against the plain observation, a weight left unchanged
  by a non-zero update: the counts agree to a few in $10^5$.)
- **Skipped steps** from the scaler's history; at the end the loss over the whole training
  set and the test accuracy.
"""),
        code('''
def exact_gradients(shadow, model, idx, shift, scale):
    """The step's gradients (weights and layer outputs) in fp64 at the run's weights, times the
    loss scale: what the run's gradient format has to hold."""
    for sp, p in zip(shadow.parameters(), model.parameters(), strict=True):
        sp.data = p.data  # exact: every format's values are fp64 values
    shadow.zero_grad()
    loss = F.cross_entropy(shadow(Tensor(data.x_train[idx], "fp64")), data.y_train[idx])
    (loss * (2.0**-shift * scale)).backward()
    gs = [p.grad for p in shadow.parameters()] + [shadow.outputs[k].grad for k in shadow.names]
    return np.concatenate([g.ravel() for g in gs])


def evaluate(model, fmt):
    """(loss over the training set, test accuracy)."""
    with no_grad():
        train_logits = model(Tensor(data.x_train, fmt)).to("fp32")
        test_logits = model(Tensor(data.x_test, fmt)).numpy(np.float64)
    return (F.cross_entropy(train_logits, data.y_train).item(),
            float(np.mean(test_logits.argmax(axis=1) == data.y_test)))


def train(recipe, shift=0, seed=0, underflow_every=1, updates=True, epochs=EPOCHS):
    """Train under a recipe; returns a dict of measurements (and the model, optimizer and
    scaler). underflow_every: measure gradient underflow every n-th step (0: never);
    updates: count lost updates."""
    model, opt, scaler = make_run(recipe, shift, seed)
    shadow = MLP(seed=seed).to("fp64")
    params = list(model.parameters())
    upd_fmt = "fp32" if recipe.master else recipe.fmt  # the copy the update is added to
    out = {"loss": [], "underflow": [], "zeroed": 0, "nonzero": 0, "lost": 0, "updates": 0,
           "skipped": 0}

    def measure_underflow(scale):
        s = amp.underflow_stats(exact_gradients(shadow, model, idx, shift, scale), recipe.fmt)
        out["zeroed"] += s.zeroed
        out["nonzero"] += s.nonzero
        out["underflow"].append(s.fraction)

    t0 = time.perf_counter()
    for i, idx in enumerate(batches(epochs, seed)):
        before = [np.array(opt.state.get(p, {}).get("master", p.data), np.float64)
                  for p in params]
        measure = underflow_every and i % underflow_every == 0
        loss, skipped = step(model, opt, scaler, recipe, idx, shift,
                             measure_underflow if measure else None)
        out["loss"].append(loss)
        out["skipped"] += skipped
        if updates and not skipped:
            lr = np.float32(opt.param_groups[0]["lr"])
            for p, w in zip(params, before, strict=True):
                u = -(lr * opt.state[p]["momentum_buffer"].astype(np.float32))
                r = amp.lost_updates(w, u.astype(np.float64), upd_fmt)
                out["lost"] += r.lost
                out["updates"] += r.nonzero
    out["time"] = time.perf_counter() - t0
    out["final_loss"], out["accuracy"] = evaluate(model, recipe.fmt)
    out["model"], out["opt"], out["scaler"] = model, opt, scaler
    return out


def pct(a, b):
    return f"{100 * a / b:.2f}%" if b else "-"
'''),
        md("""
## 3 · The five recipes side by side
"""),
        code('''
t0 = time.perf_counter()
runs = {name: train(r) for name, r in RECIPES.items()}
print(f"5 runs of {len(runs['fp32']['loss'])} steps in {time.perf_counter() - t0:.1f} s "
      "(exact shadow and measurements included)")
print()
print(f"{'recipe':24s} {'train loss':>10s} {'test acc':>8s} {'grads -> 0':>10s} "
      f"{'updates lost':>12s} {'skipped':>7s} {'final scale':>11s}")
for name, r in runs.items():
    sc = r["scaler"]
    final_scale = f"2**{np.log2(sc.get_scale()):.0f}" if sc else "-"
    print(f"{name:24s} {r['final_loss']:10.4f} {r['accuracy']:8.3f} "
          f"{pct(r['zeroed'], r['nonzero']):>10s} {pct(r['lost'], r['updates']):>12s} "
          f"{r['skipped']:7d} {final_scale:>11s}")
'''),
        md("""
How much of that is noise? The same fp32 training with other seeds (initial weights and
batch order):
"""),
        code('''
seeds = [train(RECIPES["fp32"], seed=s, underflow_every=0, updates=False) for s in range(1, 6)]
noise = [r["final_loss"] for r in seeds]
print(f"fp32, seeds 1-5: train loss {min(noise):.4f} to {max(noise):.4f}, test accuracy "
      f"{min(r['accuracy'] for r in seeds):.3f} to {max(r['accuracy'] for r in seeds):.3f}")
'''),
        code('''
def smooth(v, n=15):
    return np.convolve(v, np.ones(n) / n, mode="valid")


colors = {"fp32": style.format_color("fp32"), "fp16": "#D55E00",
          "fp16 + master": style.format_color("fp16"), "fp16 + master + scaling": "#8C564B",
          "bf16 + master": style.format_color("bf16")}
fig, (ax1, ax2) = style.new_figure((10, 3.8), ncols=2)
for name, r in runs.items():
    ax1.plot(smooth(r["loss"]), color=colors[name], lw=1.4, label=name)
    ax2.plot(smooth(r["underflow"]), color=colors[name], lw=1.4, label=name)
ax1.set_yscale("log")
ax1.set_title("training loss", loc="left", fontsize=10)
ax1.set_ylabel("batch loss (running mean of 15)")
ax1.legend(fontsize=8)
ax2.set_title("gradient underflow per step (running mean of 15)", loc="left", fontsize=10)
ax2.set_ylabel("share of non-zero gradients -> 0")
for ax in (ax1, ax2):
    ax.set_xlabel("step")
fig
'''),
        md(r"""
What the measurements say:

- **All five recipes reach about the same loss and accuracy.** The test accuracies (0.953 to
  0.958) lie inside the spread of fp32 runs with other seeds (0.953 to 0.978). The final
  training losses (0.020 to 0.044) vary by a factor of two, as fp32's own do across seeds
  (0.009 to 0.030): this late in training the loss over the training set is small and swings
  from step to step. The digits network is small and forgiving, like the ImageNet CNNs of
  the paper, which matched FP32 without loss scaling. The loss curves are the same until
  about step 150; then the runs part, as the rounding differences have added up.
- **Pure fp16 loses updates**: a large share of its weight updates are smaller than half an
  ulp of the fp16 weight and vanish. With an fp32 master copy far fewer do (fp32 loses only
  updates below about $2^{-24}$ of the weight: those of gradients that are practically zero).
- **Without loss scaling a growing share of the gradients underflows** in fp16 as the network
  becomes confident (notebook 02 showed why); the dynamic scaler brings it down, at the cost of
  a skipped step. bf16 has fp32's range: nothing underflows (its curve lies on fp32's zero
  line), but every gradient carries only 8 significant bits.
- The gradients that underflow here are the smallest ones, of images the network already
  classifies well: they matter little. Section 4 makes them matter.

### Exercise 1

Stochastic rounding is an alternative to master weights: an update below half an ulp is kept
*with a probability* proportional to its size, so on average nothing is lost. The optimizer
rounds the new weights with the mode of `fpsim.autograd.rounding`. Train the pure `fp16`
recipe with every step inside `with fpsim.autograd.rounding("stochastic", rng=0):` (use
`make_run`, `batches`, `step` and `evaluate`; forward and backward then round stochastically
too) and compare the final loss and accuracy with the `fp16` and `fp16 + master` runs.
"""),
        code("# your code here\n"),
        *solution('''
model, opt, scaler = make_run(RECIPES["fp16"])
with fpsim.autograd.rounding("stochastic", rng=0):
    for idx in batches(EPOCHS):
        step(model, opt, scaler, RECIPES["fp16"], idx)
loss_sr, acc_sr = evaluate(model, "fp16")
for name in ("fp16", "fp16 + master"):
    print(f"{name:24s} train loss {runs[name]['final_loss']:.4f}, test acc "
          f"{runs[name]['accuracy']:.3f}")
print(f"{'fp16, stochastic':24s} train loss {loss_sr:.4f}, test acc {acc_sr:.3f}")
'''),
        md(r"""
## 4 · When does underflow matter? Moving the gradients down exactly

The digits network's gradients are large because the network is small. Deeper networks, and
losses averaged over many more elements (tokens, pixels), have smaller ones; the SSD detector
of the paper had most of its activation gradients below $2^{-24}$. We can move *all*
gradients down by exactly $k$ binades without changing the training: multiply the loss by
$2^{-k}$ and the learning rate by $2^{k}$. Powers of two scale exactly, so in fp32 (and in
bf16, which has fp32's range) the run stays **bit for bit the same**. A claim to check:
"""),
        code('''
for name in ("fp32", "bf16 + master"):
    a = runs[name]["model"]  # trained in section 3 (measuring does not change the training)
    b = train(RECIPES[name], shift=20, underflow_every=0, updates=False)["model"]
    same = all(np.array_equal(p.data, q.data)
               for p, q in zip(a.parameters(), b.parameters(), strict=True))
    print(f"{name:14s}: weights after training with gradients x 2**-20 identical: {same}")
'''),
        md("""
In fp16 the same shift pushes the gradients into the subnormals and below. Without a loss
scale the network stops learning once the bulk of its gradients falls below $2^{-24}$; the
dynamic scaler finds a scale that brings them back:
"""),
        code('''
t0 = time.perf_counter()
shifts = [0, 8, 12, 16, 20]
sweep = {name: [runs[name]] + [train(RECIPES[name], shift=k, underflow_every=3, updates=False)
                               for k in shifts[1:]]
         for name in ("fp16 + master", "fp16 + master + scaling")}
print(f"{(len(shifts) - 1) * len(sweep)} runs in {time.perf_counter() - t0:.1f} s "
      "(shift 0: the runs of section 3; underflow measured every third step)")
print(f"{'':8s}{'fp16 + master':>26s}   {'fp16 + master + scaling':>36s}")
print(f"{'shift k':>7s} {'loss':>9s} {'grads -> 0':>11s} {'loss':>12s} {'grads -> 0':>11s} "
      f"{'skipped':>8s} {'scale':>6s}")
for i, k in enumerate(shifts):
    a, b = sweep["fp16 + master"][i], sweep["fp16 + master + scaling"][i]
    scale_label = f"2**{int(np.log2(b['scaler'].get_scale()))}"
    print(f"{k:7d} {a['final_loss']:9.4f} {pct(a['zeroed'], a['nonzero']):>11s} "
          f"{b['final_loss']:12.4f} {pct(b['zeroed'], b['nonzero']):>11s} {b['skipped']:8d} "
          f"{scale_label:>6s}")
'''),
        code('''
fig, (ax1, ax2) = style.new_figure((10, 3.6), ncols=2)
ax1.axhline(runs["fp32"]["final_loss"], color=colors["fp32"], lw=1, ls="--",
            label="fp32 (the same for any shift)")
ax1.axhspan(min(noise), max(noise), color=colors["fp32"], alpha=0.12, lw=0,
            label="fp32, seeds 1-5")
for name, rs in sweep.items():
    ax1.plot(shifts, [r["final_loss"] for r in rs], "o-", color=colors[name], label=name)
    ax2.plot(shifts, [r["zeroed"] / r["nonzero"] for r in rs], "o-", color=colors[name],
             label=name)
ax1.set_yscale("log")
for ax in (ax1, ax2):
    ax.set_xticks(shifts, [style.pow2_label(-k) for k in shifts])
    ax.set_xlabel("every gradient multiplied by")
ax1.set_ylabel("final training loss")
ax2.set_ylabel("share of non-zero gradients -> 0")
ax1.legend(fontsize=8)
ax1.set_title("result", loc="left", fontsize=10)
ax2.set_title("gradient underflow over the run", loc="left", fontsize=10)
fig
'''),
        md(r"""
The network tolerates a lot: with gradients $2^{8}$ times smaller a quarter of the non-zero
gradient values underflow and the result is unchanged, because the large gradients that carry
the learning survive. At $2^{-12}$ (more than 40% lost) the loss starts to suffer; from
$2^{-16}$ on the large gradients go too and the network does not learn at all. With the
dynamic scaler every shift trains about as well as fp32 (inside or close to the band of fp32
seeds); its remaining underflow grows with the shift because in 315 steps, growing every 100,
the scale only climbs from $2^{16}$ to $2^{19}$. Loss scaling exists for networks whose
gradients live where fp16 cannot hold them.

### Exercise 2

A *static* loss scale (`amp.StaticLossScaler(S)`) is what the paper used (8 to 32K). With the
gradients multiplied by $2^{-16}$, which static scales $S = 2^j$ recover the fp32 result?
Train with `make_run` (recipe `fp16 + master + scaling`, `shift=16`), replace its scaler by
`amp.StaticLossScaler(2.0**j)` for a few `j`, and report the final loss and the number of
skipped steps.
"""),
        code("# your code here\n"),
        *solution('''
recipe = RECIPES["fp16 + master + scaling"]
for j in (4, 16, 33):
    model, opt, _ = make_run(recipe, shift=16)
    scaler = amp.StaticLossScaler(2.0**j)
    skipped = sum(step(model, opt, scaler, recipe, idx, shift=16)[1] for idx in batches(EPOCHS))
    print(f"S = 2**{j:<2d}: final train loss {evaluate(model, 'fp16')[0]:.4f}, "
          f"skipped {skipped} steps")
# A static S = 2**j on gradients shifted by 2**-16 is, bit for bit, the unscaled run shifted
# by 2**(j - 16): S = 2**4 gives the loss of shift 12 above, S = 2**16 that of shift 0. Too
# small a scale leaves the gradients underflowing; a wide range works (S * 2**-16 * max|g|
# must stay below 65504); beyond it gradients overflow and every such step is skipped (a
# static scaler never backs off).
'''),
        md(r"""
## 5 · Memory: what each recipe keeps

The model states, from the real arrays (`ndarray.nbytes`: 2 bytes per fp16 / bf16 value):
weights, gradients, the fp32 master copy and the momentum buffer, per parameter. Then one more
training step under `fpsim.memory.meter`, which also counts the activations saved for
backward (at their real width) and the peak of the step.
"""),
        code('''
n_params = sum(p.data.size for p in runs["fp32"]["model"].parameters())
print(f"{n_params} parameters; bytes per parameter:")
print(f"{'recipe':24s} {'weights':>8s} {'grads':>6s} {'master':>7s} {'momentum':>9s} "
      f"{'total':>6s}")
for name, r in runs.items():
    params, opt = list(r["model"].parameters()), r["opt"]
    b = [sum(p.data.nbytes for p in params),
         sum(p.grad.nbytes for p in params),
         sum(opt.state[p]["master"].nbytes for p in params if "master" in opt.state[p]),
         sum(opt.state[p]["momentum_buffer"].nbytes for p in params)]
    print(f"{name:24s} {b[0] / n_params:8.0f} {b[1] / n_params:6.0f} {b[2] / n_params:7.0f} "
          f"{b[3] / n_params:9.0f} {sum(b) / n_params:6.0f}")
'''),
        code('''
print(f"{'bytes':24s} {'params':>7s} {'master':>7s} {'grads':>7s} {'optim':>7s} "
      f"{'activ.':>7s} {'peak':>7s}   saved activations by format")
idx = next(batches(1))
for name, r in runs.items():
    with fpsim.memory.meter(r["model"], r["opt"]) as meter:
        step(r["model"], r["opt"], r["scaler"], RECIPES[name], idx)
    rep = meter.report()
    m = rep.max  # each category's own maximum during the step
    print(f"{name:24s} {m['parameters']:7d} {m['master_weights']:7d} {m['gradients']:7d} "
          f"{m['optimizer_states']:7d} {m['activations']:7d} {rep.peak_total:7d}   "
          f"{rep.activations_by_format}")
'''),
        md(r"""
With SGD and momentum, mixed precision keeps **as many bytes of model state as fp32**:
2 + 2 + 4 + 4 = 12 per parameter against 4 + 4 + 4 (the scaled recipe's fp32 master
gradients replace the fp16 ones here; Apex briefly holds both). What it halves are the saved
activations (and the memory traffic and time of every matrix product, which fpsim does not
model). With Adam the model states are 16 bytes per parameter (2 + 2 + 12), the figure ZeRO
starts from. Pure fp16 halves everything, and pays with lost updates.

### Exercise 3

Replace SGD by `optim.Adam(..., master_weights=True)` on the fp16 model, take one step, and
count the bytes per parameter of the weights, gradients and optimizer state (`master`,
`exp_avg`, `exp_avg_sq`). Do you get ZeRO's $2 + 2 + 12 = 16$?
"""),
        code("# your code here\n"),
        *solution('''
model = MLP().to("fp16")
opt = optim.Adam(model.parameters(), lr=1e-3, master_weights=True)
idx = next(batches(1))
loss = F.cross_entropy(model(Tensor(data.x_train[idx], "fp16")).to("fp32"), data.y_train[idx])
loss.backward()
opt.step()
params = list(model.parameters())
n = sum(p.data.size for p in params)
per_param = {"weights": sum(p.data.nbytes for p in params) / n,
             "gradients": sum(p.grad.nbytes for p in params) / n}
per_param |= {k: sum(opt.state[p][k].nbytes for p in params) / n
              for k in ("master", "exp_avg", "exp_avg_sq")}
print(per_param, "total", sum(per_param.values()))
'''),
        md(r"""
## 6 · Apex's opt levels and autocast

NVIDIA Apex packaged these recipes as four *opt levels* (`fpsim.amp.OPT_LEVELS`):
"""),
        code('''
for level in amp.OPT_LEVELS:
    print(amp.describe_opt_level(level))
    print()
'''),
        md(r"""
- **O0** is the `fp32` recipe, **O3** is pure `fp16` (no master weights, loss scale 1), and
  **O2** is `fp16 + master + scaling` (with Apex's own dynamic scaler: ×2 after 2000 good
  steps, ÷2 on overflow). `bf16 + master` is O2 in bf16, without the scaler.
- **O1** does something none of our recipes does: the weights stay fp32 and every *operation*
  decides its own precision, which is what PyTorch's **autocast** does. Its policy (CUDA,
  fp16; PyTorch uses the same lists for bf16): matrix products (`matmul`, `linear`, `conv*`,
  ...) run on fp16 inputs; range- or precision-hungry ops (`exp`, `log`, `pow`, `softmax`,
  `log_softmax`, `sum`, `layer_norm`, the losses) run in fp32; ops mixing formats (`add`,
  `cat`, ...) promote to the widest input. A weight is cast to fp16 once per region and its
  gradient flows back through that cast: computed in fp16, then accumulated into the fp32
  weight's gradient.

Here is that policy written out by hand for one layer and a loss, with the format of every
tensor and gradient:
"""),
        code('''
lin = nn.Linear(64, 10, rng=0)                            # fp32 weights: the master copy
x = Tensor(data.x_train[:8])                              # fp32 input
w16, b16 = lin.weight.to("fp16"), lin.bias.to("fp16")     # autocast's cached casts
w16.retain_grad()
logits = F.linear(x.to("fp16"), w16, b16)                 # "lower": fp16 inputs, fp16 out
logits.retain_grad()
loss = F.cross_entropy(logits.to("fp32"), data.y_train[:8])  # "fp32": softmax, loss in fp32
loss.backward()
print(f"logits {logits.fmt.name}, loss {loss.fmt.name}")
print(f"gradient of the logits {logits.grad.dtype}, of the fp16 weight copy "
      f"{w16.grad.dtype}, of the fp32 weight {lin.weight.grad.dtype}")
'''),
        *packaged_cells(),
        md("""
## Summary

- Mixed precision is three measures, each against one failure: fp32 master weights against
  lost updates, loss scaling against gradient underflow, fp32 for the reductions (softmax,
  loss) against overflow and imprecision.
- On an easy task every recipe gets there; the measurements (lost updates, underflow shares,
  skipped steps) show what each one protects against, and moving the gradients down shows
  when that protection becomes necessary.
- bf16 with master weights needs no loss scaling: it has fp32's exponent range.
- Master weights cost memory: with SGD and momentum a mixed-precision model keeps as many
  bytes of model state as fp32; the savings are in the activations and the arithmetic.
- fpsim packages the recipes with the real libraries' APIs: `amp.autocast` + `GradScaler`
  (PyTorch), `amp.initialize` + `amp.scale_loss` (Apex; O0, O2 and O3 reproduce the
  hand-written runs bit for bit) and `fpsim.training`, the instrumented runner of
  `fpsim demo`.
"""),
    ]
    return cells


NOTEBOOKS = {
    "02": ("02_underflow_and_overflow.ipynb", notebook_02),
    "03": ("03_mixed_precision_training.ipynb", notebook_03),
}


def main(argv: list[str] | None = None) -> int:
    return nbtools.main(NOTEBOOKS, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
