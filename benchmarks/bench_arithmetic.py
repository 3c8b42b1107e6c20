"""Benchmark: fpsim's correctly rounded arithmetic: the default path, and add, mul, fma.

The second table: add, mul and fma in fp16 and fp32, every rounding mode.

Ratio convention (every table): speed vs reference = reference time / fpsim time, measured in
the same run (1.0 = as fast as the reference, < 1 slower).

First table, the default path (round to nearest even, no flags) on arrays of the format's own
dtype against the native operation on the same arrays (NumPy float16, ml_dtypes bfloat16):
fp16 and bf16 add, mul, div and sqrt. Target: fp16 div and sqrt, bf16 add, mul, div and sqrt
>= 0.5.

Operands are arrays of the format's own dtype (np.float16 / np.float32; N(0, 1) values, 10**6
by default). Prints, for each operation, mode and format, the best time, the rate in millions
of operations per second, and the ratio to NumPy's own float16 arithmetic (a + b, a * b on
np.float16 arrays; for fma: a * b + c, two NumPy operations) measured in the same run
(ratio = NumPy time / fpsim time: 1.0 is as fast as NumPy, 0.1 ten times slower).

    python benchmarks/bench_arithmetic.py [--n 1000000] [--repeat 5] [--flags]
        [--overhead-only]

The overhead table: the per-call cost on small arrays (1, 16, 256 elements), where parsing the
options and dispatching dominate, against NumPy's float16 add on the same arrays (speed vs
NumPy = NumPy time / fpsim time), microseconds per call.

Targets: fp16 add/mul round-to-nearest-even >= 20 M ops/s; fp32 fma >= 5 M ops/s.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from timing import best_time  # benchmarks/ is on sys.path when a script runs

from fpsim import arithmetic

MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd", "stochastic"]




def _overhead_cases(fpsim, a, b, c, up16):
    cases = [
        ("add fp16 nearest_even (native)", lambda: fpsim.add(a, b, "fp16")),
        ("add fp16 up", lambda: fpsim.add(a, b, "fp16", "up")),
        ("add fp16 up, policy=", (lambda: fpsim.add(a, b, policy=up16)) if up16 else None),
        ("add bf16 up, flags", lambda: fpsim.add(a, b, "bf16", "up", flags=True)),
        ("mul fp8_e4m3 nearest_even", lambda: fpsim.mul(a, b, "fp8_e4m3")),
        ("fma fp16 toward_zero", lambda: fpsim.fma(a, b, c, "fp16", "toward_zero")),
        ("round bf16 down", lambda: fpsim.round(a, "bf16", "down")),
    ]
    return [(label, fn) for label, fn in cases if fn is not None]


def _calls(fn, k: int = 200):
    def loop():
        for _ in range(k):
            fn()
    return loop


def overhead_table(repeat: int) -> None:
    """Per-call cost on small arrays: option parsing and dispatch dominate there."""
    import fpsim
    rng = np.random.default_rng(2)
    policy = getattr(fpsim, "RoundingPolicy", None)  # absent before the policy object
    up16 = policy("fp16", "up") if policy else None
    print(f"per-call overhead on small arrays, best of {repeat} x 200 calls; speed vs NumPy = "
          "NumPy float16 add time / fpsim time")
    print(f"{'call':34s} {'n':>4s} {'numpy us':>9s} {'fpsim us':>9s} {'vs numpy':>9s}")
    for n in (1, 16, 256):
        a, b, c = (rng.standard_normal(n).astype(np.float16) for _ in range(3))
        tn = best_time(_calls(lambda a=a, b=b: a + b), repeat) / 200  # one reference per n
        for label, fn in _overhead_cases(fpsim, a, b, c, up16):
            tf = best_time(_calls(fn), repeat) / 200
            print(f"{label:34s} {n:4d} {tn * 1e6:9.2f} {tf * 1e6:9.2f} {tn / tf:9.3f}")
    print()


def native_table(n: int, repeat: int) -> None:
    """The default path against native float16 / bfloat16 operations on the same arrays."""
    import fpsim
    rng = np.random.default_rng(1)
    x32 = rng.standard_normal(n).astype(np.float32)
    y32 = rng.standard_normal(n).astype(np.float32)
    cases = []
    for name, dt in (("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        a, b = x32.astype(dt), y32.astype(dt)
        pos = np.abs(a)
        cases += [
            (name, "add", lambda a=a, b=b: a + b, lambda a=a, b=b, f=name: fpsim.add(a, b, f)),
            (name, "mul", lambda a=a, b=b: a * b, lambda a=a, b=b, f=name: fpsim.mul(a, b, f)),
            (name, "div", lambda a=a, b=b: a / b, lambda a=a, b=b, f=name: fpsim.div(a, b, f)),
            (name, "sqrt", lambda p=pos: np.sqrt(p), lambda p=pos, f=name: fpsim.sqrt(p, f)),
        ]
    print(f"default path (nearest even, no flags), {n:.0e} elements, best of {repeat}; "
          "speed vs native = native time / fpsim time")
    print(f"{'format':6s} {'op':10s} {'native ms':>10s} {'fpsim ms':>9s} {'vs native':>10s}")
    with np.errstate(all="ignore"):
        for fmt, op, nat, ours in cases:
            tn = tf = float("inf")
            for _ in range(repeat):  # alternate, so that both see the same load
                tn, tf = min(tn, best_time(nat, 1)), min(tf, best_time(ours, 1))
            print(f"{fmt:6s} {op:10s} {tn * 1e3:10.2f} {tf * 1e3:9.2f} {tn / tf:10.2f}")
    print()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**6)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--flags", action="store_true", help="also compute the IEEE flags")
    p.add_argument("--native-only", action="store_true", help="only the default-path table")
    p.add_argument("--overhead-only", action="store_true", help="only the small-array table")
    args = p.parse_args(argv)
    overhead_table(args.repeat)
    if args.overhead_only:
        return
    if args.native_only:
        native_table(args.n, args.repeat)
        return
    rng = np.random.default_rng(0)
    data = {dt: [rng.standard_normal(args.n).astype(dt) for _ in range(3)]
            for dt in (np.float16, np.float32)}
    a16, b16, c16 = data[np.float16]
    native = {
        "add": best_time(lambda: a16 + b16, args.repeat),
        "mul": best_time(lambda: a16 * b16, args.repeat),
        "fma": best_time(lambda: a16 * b16 + c16, args.repeat),
    }
    native_table(args.n, args.repeat)
    print(f"fpsim arithmetic, {args.n:.0e} elements, best of {args.repeat}"
          f"{', with flags' if args.flags else ''}")
    print("NumPy float16: " + ", ".join(f"{k} {args.n / t / 1e6:.0f} M ops/s"
                                        for k, t in native.items()))
    print(f"{'op':4s} {'format':6s} {'mode':13s} {'ms':>8s} {'M ops/s':>8s} {'vs np16':>8s}")
    ops = {"add": arithmetic.add, "mul": arithmetic.mul, "fma": arithmetic.fma}
    for name, op in ops.items():
        for fmt, dt in (("fp16", np.float16), ("fp32", np.float32)):
            a, b, c = data[dt]
            operands = (a, b, c) if name == "fma" else (a, b)
            for mode in MODES:
                t = best_time(lambda op=op, operands=operands, fmt=fmt, mode=mode:
                              op(*operands, fmt, mode, flags=args.flags, rng=1
                                 if mode == "stochastic" else None), args.repeat)
                print(f"{name:4s} {fmt:6s} {mode:13s} {t * 1e3:8.2f} {args.n / t / 1e6:8.1f} "
                      f"{native[name] / t:8.3f}")


if __name__ == "__main__":
    main()
