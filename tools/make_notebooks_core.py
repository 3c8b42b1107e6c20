"""Generate and execute the core course notebooks:

- notebooks/01_formats_and_rounding.ipynb: bits, number lines, rounding modes, subnormals,
  overflow, stochastic rounding, exception flags, integer conversion, correctly rounded
  arithmetic against double rounding, bf16 sum stagnation;
- notebooks/04_tensor_cores.ipynb: the block-FMA model, GPUs that disagree, explain=True,
  checking the model against measured GPU data, a custom accumulator, the B200 fp8 open
  question, error against K, tile and wave quantization.

The notebooks are built with nbformat, executed with nbclient (kernel "python3", working
directory a temporary folder, as tests/test_notebooks.py does) and saved with their outputs.

Run: /tmp/venv/bin/python tools/make_notebooks_core.py [01] [04]
"""

from __future__ import annotations

import nbtools
from nbtools import code, md, solution


# --------------------------------------------------------------------------------------- 01
def notebook_01() -> list:
    cells = [md(r"""
# 01 · Formats and rounding

Every low-precision computation starts with one step: a real number is *rounded* to a format.
This notebook takes that step apart, bit by bit, with `fpsim`, which rounds exactly (every
result is checked against Berkeley TestFloat, NumPy / ml_dtypes casts and exact rational
arithmetic).

**Learning goals.** After this notebook you can

1. read the sign, exponent and mantissa bits of fp32, bf16, fp16 and fp8 numbers and say what
   each format trades (range against precision);
2. describe where the representable numbers lie: binades, spacing, subnormals, overflow;
3. apply every IEEE rounding mode, round-to-odd and stochastic rounding, and explain why
   stochastic rounding is unbiased;
4. use IEEE exception flags (`flag_context`, traps) and the integer conversions (saturate or wrap);
5. explain *double rounding* and why `fpsim.add` / `fpsim.fma` round once;
6. see why summing in bf16 stagnates, and how pairwise and Kahan summation fix it.

Exercises are marked **Exercise**; each has a hidden solution below it (click to expand).
"""),
        code("""
import math

import numpy as np

import fpsim
from fpsim import viz
from fpsim.viz import style  # fpsim's figures are plain matplotlib Figures; we reuse its look

print("fpsim", fpsim.__version__)
"""),
        md(r"""
## 1 · The bits of a number

A binary floating-point format has a sign bit, `E` exponent bits and `M` mantissa (fraction)
bits. A normal number is $(-1)^s \cdot 2^{e - \text{bias}} \cdot 1.m_1 m_2 \dots m_M$.
More exponent bits give more *range*, more mantissa bits more *precision*.
"""),
        code("""
for name in ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"):
    f = fpsim.get_format(name)
    print(f"{name:9s} e{f.exponent_bits}m{f.mantissa_bits:<3d} max {f.max:<13.6g} "
          f"min normal {f.smallest_normal:<10.3g} eps {f.eps:<10.3g} "
          f"0.1 -> {fpsim.bit_string(0.1, f)}")
"""),
        md("""
The same value in five formats: bf16 keeps fp32's 8 exponent bits (same range) but only 7
mantissa bits; fp16 has more precision but a much smaller range.
"""),
        code("viz.bit_layouts(0.1)"),
        md(r"""
## 2 · Where the numbers are: the number line

Between two powers of two (a *binade*) the values are equally spaced; the spacing doubles from
one binade to the next. Below the smallest normal number the **subnormals** fill the gap to
zero with the same spacing as the first binade.
"""),
        code('viz.number_line("fp8_e4m3")'),
        code("""
# fp16 near 2048: the spacing is 1 below 2048 and 2 above, so 2049 is not representable
print([float(fpsim.round(v, "fp16")) for v in (2047, 2048, 2049, 2050, 2051)])
viz.number_line("fp16", xmin=2036, xmax=2060, scale="linear")
"""),
        md(r"""
### Exercise 1

What is the largest $N$ such that *every* integer $0, 1, \dots, N$ is exactly representable,
in bf16, fp16 and fp8 e4m3? Find it with `fpsim.round` and explain it from the number of
mantissa bits.
"""),
        code("# your code here\n"),
        *solution("""
for name in ("bf16", "fp16", "fp8_e4m3"):
    f = fpsim.get_format(name)
    n = np.arange(0, 5000, dtype=np.float64)
    first_bad = int(n[fpsim.round(n, f) != n][0])
    print(f"{name}: all integers up to {first_bad - 1} are exact; "
          f"2**(M + 1) = {2 ** (f.mantissa_bits + 1)}")
# With M mantissa bits the spacing in [2**(M+1), 2**(M+2)) is 2, so 2**(M+1) + 1 is the first
# integer that is missing.
"""),
        md(r"""
## 3 · Every rounding mode

A real number that is not representable lies between two neighbours; the rounding mode picks
one. `fpsim` implements the IEEE modes (`nearest_even`, `nearest_away`, `toward_zero`, `up`,
`down`), round-to-**odd** (truncate, then set the last bit if anything was lost: the mode that
makes a later rounding safe) and **stochastic** rounding.
"""),
        code("""
modes = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"]
xs = [1.0625, 1.1875, 1.2, -1.2, 1.4375]  # 1.0625 and 1.1875 are ties in e4m3 (spacing 1/8)
print("x".rjust(8) + "".join(m.rjust(14) for m in modes))
for x in xs:
    row = [float(fpsim.round(x, "fp8_e4m3", m)) for m in modes]
    print(f"{x:8g}" + "".join(f"{v:14g}" for v in row))
"""),
        code('viz.rounding_modes("fp8_e4m3", 1.0, 1.5)'),
        md("""
### Exercise 2

Round $x = -0.1$ to fp8 e5m2 with every mode in `modes`. Which modes agree? Why does
`toward_zero` give the same result as `up` for a negative number?
"""),
        code("# your code here\n"),
        *solution("""
res = {m: float(fpsim.round(-0.1, "fp8_e5m2", m)) for m in modes}
for m, v in res.items():
    print(f"{m:13s} {v}")
print("down neighbour", float(fpsim.round(-0.1, "fp8_e5m2", "down")),
      "up neighbour", float(fpsim.round(-0.1, "fp8_e5m2", "up")))
# For x < 0, rounding toward zero moves up (toward +inf): toward_zero == up.
"""),
        md(r"""
## 4 · Subnormals and underflow

fp16's smallest normal number is $2^{-14}$; subnormals go down to $2^{-24}$ with spacing
$2^{-24}$. Their *relative* precision shrinks towards zero. Values below half the smallest
subnormal underflow to zero; $2^{-25}$ is exactly half way and ties to even (zero).
"""),
        code("""
f16 = fpsim.FP16
print("min normal", f16.smallest_normal, "= 2**-14;  min subnormal", f16.smallest_subnormal,
      "= 2**-24")
vals = np.array([1e-5, 3 * 2.0**-26, 2.0**-25, 1e-8])
print("keep :", fpsim.round(vals, f16), fpsim.classify(vals, f16))
print("flush:", fpsim.round(vals, f16, subnormals="flush"))
"""),
        code('viz.relative_error(["fp16", "bf16"], 2.0**-28, 2.0**4)'),
        md(r"""
## 5 · Overflow

Above the largest value the result depends on the mode and the format: IEEE round-to-nearest
gives infinity once $x \ge \text{max} + \tfrac12\text{ulp}$ (65520 in fp16), rounding toward
zero stays at max. fp8 e4m3 (OCP "fn") has **no infinity**: overflow gives NaN, and training
code therefore *saturates* (clamps to ±448).
"""),
        code("""
for x in (65519.0, 65520.0, 70000.0):
    print(x, "->", float(fpsim.round(x, "fp16")), "| toward_zero:",
          float(fpsim.round(x, "fp16", "toward_zero")))
print("e4m3: 500 ->", float(fpsim.round(500.0, "fp8_e4m3")), "| saturate:",
      float(fpsim.round(500.0, "fp8_e4m3", overflow="saturate")))
"""),
        md(r"""
## 6 · Stochastic rounding is unbiased

Stochastic rounding rounds up with probability $(x - \text{down}) / (\text{up} - \text{down})$,
so the *expected* result is exactly $x$. One rounding is noisier than round-to-nearest, but the
errors average out instead of adding up.
"""),
        code('viz.stochastic_rounding("fp16", 1 + 2.0**-12, n=4000)'),
        code("""
x = 1 + 2.0**-12  # a quarter of the way from 1 to the next fp16 number (1 + 2**-10)
rng = np.random.default_rng(0)
r = fpsim.round(np.full(100_000, x), "fp16", "stochastic", rng=rng)
print("mean of 100000 stochastic roundings:", r.mean(), " x =", x,
      " round-to-nearest:", float(fpsim.round(x, "fp16")))
"""),
        md("""
## 7 · Exception flags

IEEE 754 defines five sticky flags: inexact, underflow, overflow, divide-by-zero and invalid.
`flags=True` returns them per element; `fpsim.flag_context()` collects them over a block of
code (like `numpy.errstate`), and `trap=` turns chosen flags into an exception.
"""),
        code("""
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
"""),
        md("""
## 8 · Converting to integers

Quantized inference converts to int8. Out-of-range values either **saturate** (clamp to
[-128, 127], what quantization kernels do) or **wrap** modulo 256 (what a C cast of an int32
to int8 does). Rounding is to nearest even by default.
"""),
        code("""
x = [2.5, 3.5, -2.5, 127.5, 300.0, -129.0]
print("x                 ", x)
print("saturate (default)", fpsim.to_int(x, "int8").tolist())
print("wrap              ", fpsim.to_int(x, "int8", overflow="wrap").tolist())
print("toward_zero       ", fpsim.to_int(x, "int8", "toward_zero").tolist())
"""),
        md(r"""
## 9 · Correctly rounded arithmetic and double rounding

`fpsim.add`, `sub`, `mul`, `div`, `sqrt` and `fma` round the *exact* result once. A tempting
shortcut computes in float64 and rounds the float64 result to the target format: that rounds
**twice**. For round-to-nearest and a single `+ - * / sqrt` of fp32 operands the shortcut is
safe (float64 has $53 \ge 2 \cdot 24 + 2$ bits), but not for directed rounding, nor for an fma.
"""),
        code("""
# directed rounding: 1 + 2**-60 rounded up in fp32 is 1 + 2**-23; float64 first loses the 2**-60
exact_up = fpsim.add(1.0, 2.0**-60, "fp32", "up")
naive_up = fpsim.round(1.0 + 2.0**-60, "fp32", "up")  # the float64 sum is already 1.0
print("fpsim.add up:", float(exact_up).hex(), "  float64 then up:", float(naive_up).hex())

# fma in round-to-nearest: a*a + c with a = 1 + 2**-12, c = 2**-60
a, c = 1 + 2.0**-12, 2.0**-60
exact = fpsim.fma(a, a, c, "fp32")
naive = np.float32(a * a + c)  # a*a + c rounded to float64 lands exactly on an fp32 tie
print("fpsim.fma:   ", float(exact).hex(), "  float64 then fp32:", float(naive).hex())
"""),
        md(r"""
### Exercise 3

Rounding to **odd** first makes double rounding safe: rounding $x$ to fp32 with `"odd"` and
then to fp16 with `"nearest_even"` always equals rounding $x$ to fp16 directly (fp32 has at
least two more bits than fp16). Show a value where rounding to fp32 with `nearest_even` first
gives the *wrong* fp16 result (hint: $1 + 2^{-11} + 2^{-30}$), then check the round-to-odd
claim on $10^5$ random float64 values.
"""),
        code("# your code here\n"),
        *solution("""
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
"""),
        md(r"""
## 10 · Summing in bf16: stagnation

bf16 has 8 significant bits. Once a running sum $s$ reaches $2^8 = 256$, adding 1 is a tie
that rounds back to $s$: the sum **stagnates**. `fpsim.sum` makes the accumulation order
explicit: `sequential` (one rounded add after another), `pairwise` (NumPy's tree), `kahan`
(compensated) and `wide` (an fp32 accumulator).
"""),
        code("""
ones = np.ones(1000)
for order in ("sequential", "pairwise", "kahan", "wide"):
    print(f"{order:10s} sum of 1000 ones in bf16 = {float(fpsim.sum(ones, 'bf16', order=order))}")
"""),
        code("""
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
"""),
        md(r"""
With round-to-nearest the sum first runs *ahead* (between 16 and 32 the spacing is 0.125, and
$s + 0.1$ rounds to $s + 0.125$), then stops growing for good once half the spacing exceeds
0.1 (at $s = 32$, where the spacing is 0.25). Kahan summation carries the lost low part in `c`
and follows the exact sum. Stochastic rounding keeps growing: *on average* it is exact, but a
single run wanders around the exact sum (its spread grows like $\sqrt{n}$).

### Exercise 4

Sum 2000 copies of 0.01 in bf16 sequentially with stochastic rounding, for 20 different seeds.
Compare the mean and spread of the results with the exact sum of the bf16 value of 0.01
and with round-to-nearest.
"""),
        code("# your code here\n"),
        *solution("""
x = np.full(2000, 0.01)
exact = 2000 * float(fpsim.round(0.01, "bf16"))
runs = [float(fpsim.sum(x, "bf16", rounding="stochastic", rng=seed)) for seed in range(20)]
print(f"exact {exact:.4f}  round-to-nearest {float(fpsim.sum(x, 'bf16')):.4f}")
print(f"stochastic: mean {np.mean(runs):.4f}, std {np.std(runs):.4f} "
      f"(standard error of the mean {np.std(runs) / math.sqrt(20):.4f})")
"""),
        md("""
## Summary

- A format is a trade: exponent bits for range, mantissa bits for precision.
- Rounding is exact and mode-dependent; round-to-odd and stochastic rounding have special uses.
- Subnormals, overflow and the IEEE flags are where low precision fails loudly or silently.
- Round once: computing in float64 and rounding again can give a different answer.
- Accumulation order matters as much as the format: see notebook 04 for what tensor cores do.

`examples/formats_tour.py` runs the main experiments of this notebook as a script.
"""),
    ]
    return cells


# --------------------------------------------------------------------------------------- 04
def notebook_04() -> list:
    cells = [md(r"""
# 04 · Tensor cores: what the hardware actually computes

NVIDIA tensor cores multiply fp16 / bf16 / tf32 / fp8 matrices and accumulate in fp32. The
documentation promises only "at least single precision": the order of the additions, the
rounding and the handling of tiny terms are unspecified, and they **differ between GPU
generations**. `fpsim.tensorcore` implements the *block-FMA model* (Khattak & Mikaitis 2025),
which reproduces, bit for bit, all 78,000 measured results shipped in `tests/data/tensorcore/`.

**Learning goals.** After this notebook you can

1. describe one block FMA: exact products, alignment to the largest exponent, truncation to
   `23 + neab` fraction bits, one rounding;
2. use probe vectors that tell V100, A100 and H100 apart, and read `explain=True` records;
3. unit-test a numerical model against measured hardware data;
4. experiment with a custom accumulator (`BlockFMA`) and reason about the B200 fp8 open question;
5. explain why tensor-core errors grow with K faster than fp32 summation;
6. estimate GEMM efficiency from tile and wave quantization and the alignment rules.
"""),
        code("""
from pathlib import Path

import numpy as np

import fpsim
import fpsim.tensorcore as tc
from fpsim import viz
from fpsim.tensorcore import perf
from fpsim.viz import style
"""),
        md(r"""
## 1 · The block FMA model

A tensor core computes $d = c + a_1 b_1 + \dots + a_n b_n$ for a **block** of $n$ products:

1. every product $a_k b_k$ is exact (its significand lies in $[0, 4)$, not normalised);
2. all terms (the products and $c$) are aligned to the largest exponent, $\text{maxE}$;
3. each term keeps $F = 23 + \text{neab}$ fraction bits below $2^{\text{maxE}}$, the rest is
   **truncated** (neab: number of extra alignment bits);
4. the integers are added exactly and the sum is rounded **once**: toward zero for fp32 output,
   to nearest even for fp16 output;
5. a longer $K$ chains blocks: each block's result is the next block's $c$.

The GPUs differ in $n$, neab and the floor of the alignment exponent:
"""),
        code("""
for g in ("V100", "A100", "Ada", "H100", "B200"):
    unit = tc.get_gpu(g).unit_for("fp16", "fp32")
    print(f"{g:5s} fp16->fp32: {unit.describe()}")
print()
print(tc.support_matrix().replace("; ", "\\n"))
"""),
        md(r"""
## 2 · Step by step: `explain=True`

`tc.dot(a, b, c, gpu=..., explain=True)` returns the result and a record of every block: the
exponents, the aligned integers, what the truncation dropped and how the sum was rounded.
"""),
        code("""
ex = viz.tensorcore.README_ALIGNMENT_EXAMPLE
d, rec = tc.dot(ex["a"], ex["b"], ex["c"], gpu="A100", explain=True)
print(rec)
"""),
        md("""
The same block drawn bit by bit: each row is one term's significand placed by its exponent;
bits right of the red cut are truncated; the bottom rows show the exact sum and the rounding.
"""),
        code('viz.block_alignment(ex["a"], ex["b"], ex["c"], gpu="A100")'),
        md(r"""
## 3 · Same inputs, different answers

Fasi, Higham, Mikaitis and Pranesh (2021) designed *probe vectors* whose results reveal the
hidden parameters. A few of them (from `docs/tensorcore-model.md`; the last column lists
what the real GPUs returned):
"""),
        code("""
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
"""),
        md(r"""
D1 exposes the extra bit: $1 - (1 - 2^{-24})$ needs one bit below fp32's 23 fraction bits;
V100 (neab = 0) loses it, A100 keeps it. B3 exposes H100's *second* extra bit: its products
$2^{-25}$ are truncated away on A100 and kept on H100. D5 shows that V100 is not even monotone:
with $c = 1 - 2^{-24}$ the result is $1 + 2^{-23}$, with the larger $c = 1$ it is 1.
"""),
        code("""
for c in (1 - 2.0**-24, 1.0):
    print(f"V100, c = {c!r}: d = {float(tc.dot([1.0] * 4, [2.0**-24] * 4, c, gpu='V100'))!r}")
"""),
        md("""
### Exercise 1

H100 differs from A100 in two ways: two extra bits instead of one, and blocks of 16 products
instead of 8. Probe B3 shows the extra bit. Construct inputs with $K = 16$ that give different
results on H100 and on a hypothetical unit with H100's extra bits but blocks of 8,
`tc.BlockFMA(8, 2, "toward_zero", -133)`. *Hint:* every block is rounded toward zero, so a
remainder that one block drops is lost for good; check your idea with `explain=True`.
"""),
        code("# your code here\n"),
        *solution("""
half_blocks = tc.BlockFMA(8, 2, "toward_zero", -133, name="H100 with blocks of 8")
a = [1.0] * 16
b = [1.0, 2.0**-24] + [0.0] * 6 + [2.0**-24] + [0.0] * 7  # one 2**-24 in each half
for g in ("H100", half_blocks):
    d, rec = tc.dot(a, b, 0.0, gpu=g, explain=True)
    steps = [float(blk.result).hex() for blk in rec.blocks]
    print(f"{rec.gpu:22s} d = {float(d).hex()}  (block results: {steps})")
# Blocks of 8: 1 + 2**-24 is rounded toward zero to 1, twice. One block of 16 adds both:
# 1 + 2**-23 is an fp32 number and is kept.
"""),
        md(r"""
## 4 · Unit-testing the model against hardware

`tests/data/tensorcore/` holds results measured on real GPUs (V100 to B200): each row is one
dot product (inputs and the GPU's output as bit patterns). `tc.check_hardware` runs the model
on every row and compares bit for bit. (The data ships with the repository, not with the
installed package: the cell below finds it next to the `fpsim` sources.)
"""),
        code("""
DATA = Path(fpsim.__file__).resolve().parents[1] / "tests" / "data" / "tensorcore"
FILES = sorted(DATA.glob("*.txt.gz")) if DATA.is_dir() else []
if not FILES:
    print(f"no measured data found at {DATA}: the hardware checks below are skipped "
          "(clone the fpsim repository to run them)")
else:
    report = tc.check_hardware(FILES)
    print(report)
"""),
        md("""
A good test must be able to fail. Checking the A100 data against the V100 model shows the
mismatches, with the inputs and the exact value of each failing row:
"""),
        code("""
if FILES:
    print(tc.check_hardware([DATA / "A100_fp16_to_fp32.txt.gz"], gpu="V100", show=2))
"""),
        md(r"""
## 5 · What if the accumulator kept 3 extra bits?

A `BlockFMA` describes any unit: block size, extra bits, output rounding, alignment floor. Is
an A100 with 3 extra bits more accurate? Does the hardware data rule it out?
"""),
        code("""
a100 = tc.get_gpu("A100")
wider = tc.BlockFMA(8, 3, "toward_zero", -132, name="A100 + 2 bits")
rne = tc.BlockFMA(8, 3, "nearest_even", -132, name="3 bits, RNE")
if FILES:
    for unit in (a100, wider, rne):
        r = tc.check_hardware([DATA / "A100_fp16_to_fp32.txt.gz"], gpu=unit, keep=0)
        print(f"{unit.name:14s} {r.rows - r.mismatch_count}/{r.rows} measured A100 rows match")
viz.error_vs_k((16, 64, 256, 1024, 4096), ["A100", wider, rne], trials=10)
"""),
        md(r"""
The measured data pins A100 at exactly one extra bit. More bits help only a little: the
error is dominated by rounding each block's result **toward zero**, a bias that adds up block
after block. With round-to-nearest the bias of the alignment truncation remains.

### Exercise 2

Which combination of output rounding and extra bits brings the tensor-core error at
$K = 4096$ down to that of fp32 sequential summation? Use
`tc.error_vs_k(ks=(4096,), gpus=[...], trials=10)` with several `BlockFMA` units.
"""),
        code("# your code here\n"),
        *solution("""
short = {"toward_zero": "RZ", "nearest_even": "RNE"}
units = [tc.BlockFMA(8, e, m, -132, name=f"{short[m]}, {e} extra bits")
         for m in short for e in (1, 3, 6, 10)]
r = tc.error_vs_k(ks=(4096,), gpus=units, trials=10)
for name, err in r.mean.items():
    print(f"{name:18s} {err[0]:.2e}")
# Toward zero stays biased whatever the extra bits; nearest-even with enough extra bits
# (the truncation of the aligned products must become negligible) approaches fp32 summation.
"""),
        md(r"""
## 6 · An open question: B200 fp8

For B200 fp8 inputs the published parameters (block 32, 2 extra bits, round toward zero)
reproduce only about 64% of the measured rows (`tests/data/tensorcore/open/`). Fitting the data
gives a variant: blocks of 32 rounded to **nearest even** with at least 7 extra bits. The data
cannot tell 7 extra bits from more; new measurements (`tools/record_tensorcore.py`) could.
"""),
        code("""
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
"""),
        md(r"""
## 7 · Error against K

On the same inputs (uniform on [0, 1), where errors cannot cancel) the tensor cores lose more
accuracy than fp32 summation as $K$ grows: every block is rounded toward zero, so the error
grows linearly with the number of blocks. Larger blocks (H100: 16) mean fewer roundings.
"""),
        code('viz.error_vs_k((16, 64, 256, 1024, 4096), ("V100", "A100", "H100"), trials=10)'),
        md(r"""
## 8 · Performance: alignment, tiles and waves

Accuracy is one side; speed the other. NVIDIA's *Matrix Multiplication Background* guide
gives the rules `fpsim.tensorcore.perf` models:

- dimensions should be multiples of 16 bytes of elements (8 fp16, 16 int8, 4 tf32); on A100
  multiples of 64 fp16 elements (128 bytes) are best;
- **tile quantization**: the output is computed in tiles (e.g. 128×128) and a partial tile
  costs a whole one;
- **wave quantization**: tiles run in waves of (SMs × blocks per SM): 108 on A100, 132 on
  H100; a nearly empty last wave costs a full wave.
"""),
        code("""
for shape in [(4096, 4096, 4096), (4096, 4224, 4096), (4096, 4095, 4096)]:
    print(perf.gemm_time_estimate(*shape, gpu="A100", dtype="fp16"))
    print()
for dt in ("fp16", "int8", "tf32"):
    print(f"{dt}: alignment (required, best on A100) = {perf.alignment(dt, 'A100')}")
"""),
        code('viz.gemm_efficiency(range(256, 4097, 32), gpu="A100", dtype="fp16", K=4096)'),
        md(r"""
### Exercise 3

A layer computes an fp16 GEMM with $M = 8192$ tokens, $K = 4096$ and $N$ output features on an
A100. Among $N = 5000, \dots, 6000$, which multiples of 64 reach at least 98% utilisation? How
does the best one compare with $N = 5120$? Then repeat for an H100.
"""),
        code("# your code here\n"),
        *solution("""
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
"""),
        md("""
## Summary

- A tensor core adds a block of exact products after aligning them to the largest exponent and
  truncating; the block size, the extra bits and the rounding differ between GPUs, and probe
  vectors reveal them.
- A numerical model is only as good as its tests: `check_hardware` compares it with measured
  GPU results row by row, and a wrong model fails.
- Rounding every block toward zero makes tensor-core dot products lose accuracy linearly in K.
- Performance depends on shapes: alignment, tile quantization and wave quantization.
"""),
    ]
    return cells


NOTEBOOKS = {
    "01": ("01_formats_and_rounding.ipynb", notebook_01),
    "04": ("04_tensor_cores.ipynb", notebook_04),
}


def main(argv: list[str] | None = None) -> int:
    return nbtools.main(NOTEBOOKS, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
