"""Benchmark: fpsim.quant's fake_quantize and nf4_quantize against plain NumPy expressions of
the same formulas, in one run.

- fake_quantize (per tensor, int8 affine) vs ``(clip(rint(x * inv) + z, qmin, qmax) - z) * s``
  in float32, with the STE mask as a second NumPy expression;
- nf4_quantize (block 64) vs block absmax + ``searchsorted`` on the thresholds;
- quantize (int8) vs ``clip(rint(x * inv) + z).astype(int8)``.

Ratio convention: speed vs numpy = NumPy time / fpsim time (1.0 = as fast as the bare
expression, < 1 slower); BLAS pinned to one thread. fpsim pays for argument checks, the exact
C++ order of operations and NaN handling.

    python benchmarks/bench_quant.py [--n 10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import best_time, pinned_blas  # benchmarks/ is on sys.path when a script runs

from fpsim.quant import NF4_THRESHOLDS, fake_quantize, nf4_quantize, quantize


def numpy_fake_quant(x: np.ndarray, s: float, z: int, qmin: int, qmax: int):
    s32 = np.float32(s)
    inv = np.float32(1.0) / s32
    q = np.rint(x * inv) + np.float32(z)
    mask = (q >= qmin) & (q <= qmax)
    return (np.clip(q, qmin, qmax) - np.float32(z)) * s32, mask


def numpy_nf4(x: np.ndarray, block: int = 64):
    b = x.reshape(-1, block)
    absmax = np.abs(b).max(axis=1)
    normed = b * (np.float32(1.0) / absmax)[:, None]
    return np.searchsorted(NF4_THRESHOLDS, normed).astype(np.uint8), absmax


def numpy_quantize(x: np.ndarray, s: float, z: int):
    inv = np.float32(1.0) / np.float32(s)
    return np.clip(np.rint(x * inv) + np.float32(z), -128, 127).astype(np.int8)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**7)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    n = args.n - args.n % 64
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    s, z = 0.02, 3
    # same results first: the benchmark compares equal work
    fq = fake_quantize(x[:100000], s, z, -128, 127)
    assert np.array_equal(fq, numpy_fake_quant(x[:100000], s, z, -128, 127)[0])
    assert np.array_equal(nf4_quantize(x[:6400])[0], numpy_nf4(x[:6400])[0].reshape(-1))
    cases = [
        ("fake_quantize int8", lambda: fake_quantize(x, s, z, -128, 127),
         lambda: numpy_fake_quant(x, s, z, -128, 127)),
        ("quantize int8", lambda: quantize(x, s, z), lambda: numpy_quantize(x, s, z)),
        ("nf4_quantize b64", lambda: nf4_quantize(x), lambda: numpy_nf4(x)),
    ]
    print(f"fpsim.quant vs plain NumPy, {n:.0e} float32 values, best of {args.repeat}; "
          "speed vs numpy = NumPy time / fpsim time (1.0 = as fast, < 1 slower)")
    print(f"{'operation':20s} {'fpsim ms':>9s} {'numpy ms':>9s} {'speed vs numpy':>15s}")
    for label, fp, ref in cases:
        t_fp = best_time(fp, args.repeat)
        t_np = best_time(ref, args.repeat)
        print(f"{label:20s} {t_fp * 1e3:9.1f} {t_np * 1e3:9.1f} {t_np / t_fp:15.2f}")


if __name__ == "__main__":
    with pinned_blas():
        main()
