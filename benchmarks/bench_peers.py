"""Benchmark: fpsim against the emulators it is compared with, QPyTorch and APyTypes.

Times, in one run with every library on one thread (threadpoolctl for BLAS,
``torch.set_num_threads(1)``, ``apytypes.reset_thread_pool(1)``):

- rounding float32 data (N(0, 1), and wide-range N(0, 1) * 2**k, k uniform in [-40, 40]) to
  e4m3, e5m2, e5m7, fp16 and bf16, nearest even and stochastic: ``fpsim.round`` against
  QPyTorch's ``float_quantize`` and APyTypes' ``APyFloatArray.cast`` (from float32 values);
- add, mul, div, sqrt and fma in e4m3, e5m7, fp16 and bf16, nearest even, on float32 arrays
  holding values of the format: ``fpsim.add`` ... against QPyTorch (the float32 operation,
  then ``float_quantize``) and APyTypes (the operators on ``APyFloatArray`` operands of the
  format; it has no sqrt or fma).

Prints each time and the speed vs each peer = peer time / fpsim time (the convention of every
fpsim benchmark: 1.0 is as fast as the peer, < 1 slower). The peers are optional: a missing one
is skipped with the reason. The emulators differ in what they compute (QPyTorch rounds the
float32 result of an operation a second time, keeps no subnormals in some versions and has
its own overflow rule; fpsim's e4m3 is OCP's e4m3fn), so this compares speed, not results.

    python benchmarks/bench_peers.py [--n 1000000] [--repeat 5]

QPyTorch needs torch; its C++ extension is compiled on first import (a minute).
"""

from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits
from timing import RATIO_CONVENTION, best_time  # benchmarks/ is on sys.path when a script runs

import fpsim

# name -> (fpsim format, exponent bits, mantissa bits)
FORMATS = {"e4m3": ("fp8_e4m3", 4, 3), "e5m2": ("fp8_e5m2", 5, 2), "e5m7": ("e5m7", 5, 7),
           "fp16": ("fp16", 5, 10), "bf16": ("bf16", 8, 7)}
ROUND_FORMATS = ["e4m3", "e5m2", "e5m7", "fp16", "bf16"]
OP_FORMATS = ["e4m3", "e5m7", "fp16", "bf16"]
OPS = ["add", "mul", "div", "sqrt", "fma"]


class QPyTorch:
    name = "QPyTorch"

    def __init__(self) -> None:
        import torch
        from qtorch.quant import float_quantize

        torch.set_num_threads(1)
        self.torch, self.q = torch, float_quantize

    def data(self, x: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    def rounder(self, x, fmt: str, mode: str):
        _, e, m = FORMATS[fmt]
        r = "nearest" if mode == "nearest_even" else "stochastic"
        return lambda: self.q(x, e, m, r)

    def op(self, name: str, args, fmt: str):
        _, e, m = FORMATS[fmt]
        t, q = self.torch, self.q
        fn = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
              "sqrt": t.sqrt, "fma": lambda a, b, c: t.addcmul(c, a, b)}[name]
        return lambda: q(fn(*args), e, m, "nearest")


class APyTypes:
    name = "APyTypes"

    def __init__(self) -> None:
        import apytypes

        apytypes.reset_thread_pool(1)
        self.a = apytypes

    def _mode(self, mode: str):
        qm = self.a.QuantizationMode
        return qm.TIES_EVEN if mode == "nearest_even" else qm.STOCH_WEIGHTED

    def data(self, x: np.ndarray):
        return self.a.APyFloatArray.from_float(np.asarray(x, np.float64), 8, 23)  # float32

    def rounder(self, x, fmt: str, mode: str):
        _, e, m = FORMATS[fmt]
        qm = self._mode(mode)
        return lambda: x.cast(e, m, quantization=qm)

    def op(self, name: str, args, fmt: str):
        if name in ("sqrt", "fma"):  # APyTypes has neither on float arrays
            return None
        _, e, m = FORMATS[fmt]
        ops = [x.cast(e, m) for x in args]
        self.a.set_float_quantization_mode(self._mode("nearest_even"))
        fn = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b}[name]
        return lambda: fn(*ops)


def load_peers():
    peers, skipped = [], []
    for cls in (QPyTorch, APyTypes):
        try:
            peers.append(cls())
        except Exception as exc:  # noqa: BLE001 - any failure to import or build: skip it
            skipped.append(f"{cls.name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    return peers, skipped


def make_data(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(n).astype(np.float32)
    wide = (rng.standard_normal(n) * np.ldexp(1.0, rng.integers(-40, 41, n))).astype(np.float32)
    return {"normal": normal, "wide": wide}


def row(label: str, t_fpsim: float, peer_times: list[float | None]) -> str:
    cells = []
    for t in peer_times:
        cells.append(f"{'n/a':>9s} {'':>6s}" if t is None else f"{t * 1e3:9.2f} {t / t_fpsim:6.2f}")
    return f"{label:34s} {t_fpsim * 1e3:9.2f} " + " ".join(cells)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**6)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    peers, skipped = load_peers()
    for s in skipped:
        print(f"skipped {s}")
    print(f"{args.n:.0e} float32 values, best of {args.repeat}, 1 thread; {RATIO_CONVENTION}")
    head = " ".join(f"{p.name + ' ms':>9s} {'speed':>6s}" for p in peers)
    print(f"{'case':34s} {'fpsim ms':>9s} {head}")
    with threadpool_limits(limits=1), np.errstate(all="ignore"):
        data = make_data(args.n)
        for label, x in data.items():
            px = [p.data(x) for p in peers]
            for fmt in ROUND_FORMATS:
                for mode in ("nearest_even", "stochastic"):
                    kw = {"rng": 0} if mode == "stochastic" else {}
                    t = best_time(lambda: fpsim.round(x, FORMATS[fmt][0], mode, **kw),  # noqa: B023
                                  args.repeat)
                    pt = [best_time(p.rounder(d, fmt, mode), args.repeat)
                          for p, d in zip(peers, px, strict=True)]
                    print(row(f"round {label} {fmt} {mode}", t, pt))
        rng = np.random.default_rng(1)
        raw = [rng.standard_normal(args.n).astype(np.float32) for _ in range(3)]
        for fmt in OP_FORMATS:
            vals = [fpsim.round(v, FORMATS[fmt][0]).astype(np.float32) for v in raw]
            pvals = [[p.data(v) for v in vals] for p in peers]
            for op in OPS:
                k = {"sqrt": 1, "fma": 3}.get(op, 2)
                xs = [np.abs(v) for v in vals[:1]] if op == "sqrt" else vals[:k]
                fn = getattr(fpsim, op)
                t = best_time(lambda: fn(*xs, FORMATS[fmt][0]), args.repeat)  # noqa: B023
                pt = []
                for p, pv in zip(peers, pvals, strict=True):
                    operands = [p.data(xs[0])] if op == "sqrt" else pv[:k]
                    f = p.op(op, operands, fmt)
                    pt.append(None if f is None else best_time(f, args.repeat))
                print(row(f"{op} {fmt} nearest_even", t, pt))


if __name__ == "__main__":
    main()
