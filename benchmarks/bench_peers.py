"""Benchmark: fpsim against the emulators it is compared with, QPyTorch and APyTypes.

Times, in one run with every library on one thread (threadpoolctl for BLAS,
``torch.set_num_threads(1)``, ``apytypes.reset_thread_pool(1)``):

- rounding float32 data (N(0, 1), and wide-range N(0, 1) * 2**k, k uniform in [-40, 40]) to
  e4m3, e5m2, e5m7, fp16 and bf16, nearest even and stochastic: ``fpsim.round`` against
  QPyTorch's ``float_quantize`` and APyTypes' ``APyFloatArray.cast`` (from float32 values);
- add, mul, div, sqrt and fma in e4m3, e5m7, fp16 and bf16, nearest even, on float32 arrays
  holding values of the format: ``fpsim.add`` ... against QPyTorch (the float32 operation,
  then ``float_quantize``) and APyTypes (the operators on ``APyFloatArray`` operands of the
  format; it has no sqrt or fma);
- the native casts (NumPy's float16, ml_dtypes' bfloat16 / float8, nearest even): ``round``
  against the cast followed by widening to float64 (the same output: float64 values), and
  ``cast`` (the values at their real width) against ``round``.

Prints each time and the speed = peer time / fpsim time (the convention of every fpsim
benchmark: 1.0 is as fast as the peer, > 1 faster, < 1 slower, marked ``<``), then the slowest
case per peer. The peers are optional: a missing one is skipped with the reason. The emulators
differ in what they compute (QPyTorch rounds the float32 result of an operation a second time,
keeps no subnormals in some versions and has its own overflow rule; fpsim's e4m3 is OCP's
e4m3fn), so this compares speed, not results.

    python benchmarks/bench_peers.py [--n 1000000] [--repeat 5] [--only round,add,native]

QPyTorch needs torch; its C++ extension is compiled on first import (a minute, ``ninja``).
"""

from __future__ import annotations

import argparse
import importlib.metadata

import ml_dtypes
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
NATIVE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2}
NATIVE_TARGET = 0.8  # issue 35: round to fp16 / bf16 at >= 0.8x the native cast + widening


class QPyTorch:
    name = "QPyTorch"
    packages = ("qtorch", "torch")

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
    packages = ("apytypes",)

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


def versions(peers) -> str:
    names = ["numpy", "ml_dtypes"] + [p for peer in peers for p in peer.packages]
    out = []
    for name in names:
        try:
            out.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} (unknown version)")
    return ", ".join(out)


def make_data(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(n).astype(np.float32)
    wide = (rng.standard_normal(n) * np.ldexp(1.0, rng.integers(-40, 41, n))).astype(np.float32)
    return {"normal": normal, "wide": wide}


def cell(t_ref: float | None, t_fpsim: float) -> str:
    """A peer's time and the speed (peer / fpsim), marked '<' where fpsim is slower."""
    if t_ref is None:
        return f"{'n/a':>9s} {'':>7s}"
    s = t_ref / t_fpsim
    return f"{t_ref * 1e3:9.2f} {s:6.2f}{'<' if s < 1 else ' '}"


class Table:
    """Rows of (case, fpsim time, peer times), printed as they come; remembers the lowest
    speed per peer for the summary."""

    def __init__(self, title: str, peers) -> None:
        self.peers = peers
        self.worst: dict[str, tuple[float, str]] = {}
        head = " ".join(f"{p.name + ' ms':>12s} {'speed':>7s}" for p in peers)
        print(f"\n{title}\n{'case':34s} {'fpsim ms':>9s} {head}")

    def row(self, label: str, t_fpsim: float, peer_times: list[float | None]) -> None:
        cells = [f"{cell(t, t_fpsim):>20s}" for t in peer_times]
        print(f"{label:34s} {t_fpsim * 1e3:9.2f} " + " ".join(cells), flush=True)
        for p, t in zip(self.peers, peer_times, strict=True):
            if t is not None and t / t_fpsim < self.worst.get(p.name, (np.inf, ""))[0]:
                self.worst[p.name] = (t / t_fpsim, label)


def bench_rounding(peers, data, repeat: int, worst: dict) -> None:
    table = Table("Rounding float32 arrays (fpsim.round; speed = peer ms / fpsim ms)", peers)
    for label, x in data.items():
        px = [p.data(x) for p in peers]
        for fmt in ROUND_FORMATS:
            for mode in ("nearest_even", "stochastic"):
                kw = {"rng": 0} if mode == "stochastic" else {}
                t = best_time(lambda: fpsim.round(x, FORMATS[fmt][0], mode, **kw),  # noqa: B023
                              repeat)
                pt = [best_time(p.rounder(d, fmt, mode), repeat)
                      for p, d in zip(peers, px, strict=True)]
                table.row(f"round {label} {fmt} {mode}", t, pt)
    worst.update({k: min(v, worst.get(k, v)) for k, v in table.worst.items()})


def bench_ops(peers, n: int, repeat: int, worst: dict) -> None:
    table = Table("Arithmetic on float32 arrays of format values, nearest even (speed = peer "
                  "ms / fpsim ms)", peers)
    rng = np.random.default_rng(1)
    raw = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    for fmt in OP_FORMATS:
        vals = [fpsim.round(v, FORMATS[fmt][0]).astype(np.float32) for v in raw]
        pvals = [[p.data(v) for v in vals] for p in peers]
        for op in OPS:
            k = {"sqrt": 1, "fma": 3}.get(op, 2)
            xs = [np.abs(v) for v in vals[:1]] if op == "sqrt" else vals[:k]
            fn = getattr(fpsim, op)
            t = best_time(lambda: fn(*xs, FORMATS[fmt][0]), repeat)  # noqa: B023
            pt = []
            for p, pv in zip(peers, pvals, strict=True):
                operands = [p.data(xs[0])] if op == "sqrt" else pv[:k]
                f = p.op(op, operands, fmt)
                pt.append(None if f is None else best_time(f, repeat))
            table.row(f"{op} {fmt} nearest_even", t, pt)
    worst.update({k: min(v, worst.get(k, v)) for k, v in table.worst.items()})


def bench_native(data, repeat: int) -> list[str]:
    """round against the native cast + widening, cast against round; returns the lines
    that miss a target."""
    print("\nNative casts, nearest even: round (float64 out) vs the cast + widening to float64 "
          f"(target >= {NATIVE_TARGET} for fp16 / bf16); cast (real width) vs round "
          "(speed = round ms / cast ms, target >= 1)")
    print(f"{'data':8s} {'format':6s} {'round ms':>9s} {'cast+wide':>10s} {'speed':>7s} "
          f"{'cast ms':>9s} {'vs round':>9s}")
    missed = []
    for label, x in data.items():
        for fmt, dt in NATIVE.items():
            name = FORMATS[fmt][0]
            t_wide = best_time(lambda: x.astype(dt).astype(np.float64), repeat)  # noqa: B023
            t_round = best_time(lambda: fpsim.round(x, name), repeat)  # noqa: B023
            t_cast = best_time(lambda: fpsim.cast(x, name), repeat)  # noqa: B023
            s_wide, s_cast = t_wide / t_round, t_round / t_cast
            print(f"{label:8s} {fmt:6s} {t_round * 1e3:9.2f} {t_wide * 1e3:10.2f} "
                  f"{s_wide:6.2f}{'<' if s_wide < 1 else ' '} {t_cast * 1e3:9.2f} "
                  f"{s_cast:8.2f}{'<' if s_cast < 1 else ' '}", flush=True)
            if fmt in ("fp16", "bf16") and s_wide < NATIVE_TARGET:
                missed.append(f"round {label} {fmt}: {s_wide:.2f}x the native cast + widening")
            if s_cast < 1:
                missed.append(f"cast {label} {fmt}: {s_cast:.2f}x round's speed")
    return missed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**6)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", default="round,ops,native",
                   help="comma-separated tables to run: round, ops, native")
    args = p.parse_args(argv)
    only = set(args.only.split(","))
    peers, skipped = load_peers()
    for s in skipped:
        print(f"skipped {s}")
    print(f"{args.n:.0e} float32 values, best of {args.repeat}, 1 thread; {RATIO_CONVENTION}")
    print(f"versions: fpsim {importlib.metadata.version('fpsim')}, {versions(peers)}")
    worst: dict[str, tuple[float, str]] = {}
    missed: list[str] = []
    with threadpool_limits(limits=1), np.errstate(all="ignore"):
        data = make_data(args.n)
        if "round" in only:
            bench_rounding(peers, data, args.repeat, worst)
        if "ops" in only:
            bench_ops(peers, args.n, args.repeat, worst)
        if "native" in only:
            missed = bench_native(data, args.repeat)
    print()
    for name, (s, label) in sorted(worst.items()):
        verdict = "fpsim faster everywhere" if s >= 1 else "fpsim SLOWER here"
        print(f"slowest vs {name}: speed {s:.2f} ({label}): {verdict}")
    for m in missed:
        print(f"target missed: {m}")


if __name__ == "__main__":
    main()
