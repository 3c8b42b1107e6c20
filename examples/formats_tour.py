"""A tour of number formats and rounding: the main experiments of notebook 01 as a script.

Prints the bits of 0.1 in several formats, every rounding mode on fp8 e4m3, subnormals and
overflow in fp16, stochastic rounding's mean, IEEE exception flags, integer conversion
(saturate against wrap), correctly rounded arithmetic against float64-then-round double
rounding, and bf16 sum stagnation; saves three figures to the output folder.

Run: python examples/formats_tour.py [--out fpsim-output/examples]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import fpsim
from fpsim import viz
from fpsim.viz import style

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd")


def section(title: str) -> None:
    print(f"\n== {title}")


def bits() -> None:
    section("The bits of 0.1")
    for name in ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"):
        f = fpsim.get_format(name)
        print(f"{name:9s} {fpsim.bit_string(0.1, f):36s} = {float(fpsim.round(0.1, f))!r}"
              f"   (max {f.max:g}, eps {f.eps:g})")


def rounding_modes() -> None:
    section("Every rounding mode on fp8 e4m3 (spacing 1/8 in [1, 2))")
    print("x".rjust(8) + "".join(m.rjust(14) for m in MODES))
    for x in (1.0625, 1.1875, 1.2, -1.2):
        print(f"{x:8g}" + "".join(f"{float(fpsim.round(x, 'fp8_e4m3', m)):14g}"
                                  for m in MODES))


def range_limits() -> None:
    section("Subnormals and overflow in fp16")
    vals = [1e-5, 3 * 2.0**-26, 2.0**-25, 65519.0, 65520.0]
    for x, r, k in zip(vals, fpsim.round(vals, "fp16"), fpsim.classify(vals, "fp16"),
                       strict=True):
        print(f"{x!r:>24} -> {float(r)!r:<24} {k}")
    print("fp16(70000) toward_zero:", float(fpsim.round(70000.0, "fp16", "toward_zero")),
          "| e4m3(500):", float(fpsim.round(500.0, "fp8_e4m3")),
          "saturating:", float(fpsim.round(500.0, "fp8_e4m3", overflow="saturate")))


def stochastic() -> None:
    section("Stochastic rounding is unbiased")
    x = 1 + 2.0**-12
    r = fpsim.round(np.full(100_000, x), "fp16", "stochastic", rng=0)
    print(f"x = {x!r}: mean of 100000 stochastic roundings {float(r.mean())!r}, "
          f"round to nearest {float(fpsim.round(x, 'fp16'))!r}")


def flags() -> None:
    section("IEEE exception flags")
    with fpsim.flag_context() as ctx:
        fpsim.add(np.full(1000, 60000.0), 10000.0, "fp16")
        fpsim.div(1.0, 0.0, "fp32")
    print("sticky flags:", repr(ctx.flags), {k.name: n for k, n in ctx.counts.items() if n})
    try:
        with fpsim.flag_context(trap="overflow"):
            fpsim.mul(300.0, 300.0, "fp16")
    except fpsim.FloatingPointTrap as exc:
        print("trapped:", exc)


def integers() -> None:
    section("Float to int8: saturate against wrap")
    x = [2.5, 3.5, 127.5, 300.0, -129.0]
    print("x       ", x)
    print("saturate", fpsim.to_int(x, "int8").tolist())
    print("wrap    ", fpsim.to_int(x, "int8", overflow="wrap").tolist())


def double_rounding() -> None:
    section("Correctly rounded arithmetic against float64-then-round")
    exact = fpsim.add(1.0, 2.0**-60, "fp32", "up")
    naive = fpsim.round(1.0 + 2.0**-60, "fp32", "up")
    print(f"1 + 2**-60 rounded up to fp32: fpsim.add {float(exact).hex()}, "
          f"float64 first {float(naive).hex()}")
    a, c = 1 + 2.0**-12, 2.0**-60
    print(f"fma(a, a, 2**-60), a = 1 + 2**-12, to fp32: fpsim.fma "
          f"{float(fpsim.fma(a, a, c, 'fp32')).hex()}, float64 first "
          f"{float(np.float32(a * a + c)).hex()}")


def running_sums(n: int = 1500) -> dict[str, np.ndarray]:
    """Running sums of bf16(0.1) in bf16: sequential (nearest and stochastic) and Kahan."""
    x = float(fpsim.round(0.1, "bf16"))
    out = {k: np.empty(n) for k in ("sequential", "stochastic", "kahan")}
    s = s_sr = k_s = k_c = 0.0
    rng = np.random.default_rng(0)
    for i in range(n):
        s = fpsim.add(s, x, "bf16")
        s_sr = fpsim.add(s_sr, x, "bf16", "stochastic", rng=rng)
        y = fpsim.sub(x, k_c, "bf16")
        t = fpsim.add(k_s, y, "bf16")
        k_c = fpsim.sub(fpsim.sub(t, k_s, "bf16"), y, "bf16")
        k_s = t
        out["sequential"][i], out["stochastic"][i], out["kahan"][i] = s, s_sr, k_s
    return out


def stagnation(outdir: Path) -> Path:
    section("Summing in bf16")
    for order in ("sequential", "pairwise", "kahan", "wide"):
        total = float(fpsim.sum(np.ones(1000), "bf16", order=order))
        print(f"{order:10s} sum of 1000 ones: {total}")
    sums = running_sums()
    k = np.arange(1, len(sums["sequential"]) + 1)
    x = float(fpsim.round(0.1, "bf16"))
    with style.context():
        fig, ax = style.new_figure((8, 4))
        ax.plot(k, k * x, color="#202020", lw=1, ls="--", label="exact")
        ax.plot(k, sums["sequential"], color=style.format_color("bf16"), lw=2,
                label="sequential, round to nearest")
        ax.plot(k, sums["stochastic"], color=style.mode_color("stochastic"), lw=1.2,
                label="sequential, stochastic rounding")
        ax.plot(k, sums["kahan"], color=style.format_color("fp32"), lw=1.5, ls=":",
                label="Kahan")
        ax.set_xlabel("number of terms added")
        ax.set_ylabel("running sum in bf16")
        ax.set_title("Adding 0.1 (bf16) over and over in bf16", loc="left")
        ax.legend()
    print(f"after {len(k)} terms: sequential {sums['sequential'][-1]}, stochastic "
          f"{sums['stochastic'][-1]}, Kahan {sums['kahan'][-1]}, exact {len(k) * x:.4f}")
    return style.save_figure(fig, outdir / "formats_tour_bf16_stagnation.png")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="fpsim-output/examples", help="folder for the figures")
    args = p.parse_args(argv)
    outdir = Path(args.out)
    bits()
    rounding_modes()
    range_limits()
    stochastic()
    flags()
    integers()
    double_rounding()
    paths = [stagnation(outdir),
             style.save_figure(viz.bit_layouts(0.1), outdir / "formats_tour_bit_layout.png"),
             style.save_figure(viz.rounding_modes("fp8_e4m3", 1.0, 1.5),
                               outdir / "formats_tour_rounding_modes_e4m3.png")]
    section("Figures")
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
