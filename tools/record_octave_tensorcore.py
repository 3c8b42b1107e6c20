#!/usr/bin/env python
"""Reference rows for the AMD matrix-core and RTX PRO 6000 units from the published models.

The published MATLAB models of Khattak & Mikaitis (north-numerical-computing/MATLAB-tensor-core)
are run in GNU Octave on adversarial inputs, and their results are written in the format of
``tests/data/tensorcore/README.md`` into ``tests/data/tensorcore/octave/``, so that the test
suite compares fpsim with them bit for bit without Octave. No upstream code is copied here:
this script only generates inputs, writes a small Octave driver that calls the models, and
reads the results back.

Inputs (per file; bit patterns of the input format, never NaN or inf):

- ``wide``: random signs, exponents over the whole range (subnormals included), random
  significands, about one zero in eight; c likewise over fp32's whole range;
- ``tiny``: subnormal and near-subnormal inputs and c (input and output flushing);
- ``cancel``: pairs of products that cancel exactly or to the last bits, and c equal to minus
  the fp32-rounded sum of the products (massive cancellation);
- ``near``: values near 1 with exponents within a few binades (the alignment bits).

Every supported (input, output) pair, at K = one block and K = three blocks (plus a remainder
for the unit whose block does not divide the file's K). Rows where the Octave model raises are
counted and left out (listed in the output folder's README).

Setup (Debian): ``apt-get install octave octave-dev``; fetch the upstream repository (models/
at HEAD, plus models/MI300MC.m from commit b4bf135, deleted upstream in d12a5b3) and CPFloat;
build CPFloat's MEX with ``mkoctfile --mex -I<cpfloat>/src <cpfloat>/mex/cpfloat.c``; add two
shims missing in Octave 7 (``fma``, used with a factor of 1, computed in double and rounded to
single when an argument is single; and ``string``, returning ``cellstr`` of a char matrix).
CPFloat rounds bfloat16 subnormals away unless told otherwise (its bfloat16 default), which
would flush subnormal bf16 inputs before the models see them, although the models describe
units that keep them (``in_subnormals = 1``). Octave's ``bitshift`` wraps a shift count of
the integer's width or more (uint64 >> 66 is >> 2), where MATLAB gives 0: a third shim
``bitshift.m`` calls the builtin and zeroes those elements. Compile the MEX as
``cpfloat_mex`` and put a ``cpfloat.m`` wrapper in the --cpfloat folder that sets
``subnormal = 1`` for bfloat16 when the caller did not choose (the inputs are exact bf16
values, so nothing else changes)::

    python tools/record_octave_tensorcore.py --models /tmp/oct16/models \\
        --cpfloat /tmp/oct16/cpfw --shims /tmp/oct16/shims --rows 300 \\
        --out tests/data/tensorcore/octave
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import fpsim
import fpsim.tensorcore as tc
from fpsim.encoding import from_bits, to_bits

# (file label, Octave function, Octave input name, fpsim input, output, block size, rows factor)
UNITS = [
    ("MI100", "MI100MC", "fp16", "fp16", "fp32", 4, 1.0),
    ("MI100", "MI100MC", "bf16", "bf16", "fp32", 2, 1.0),
    ("MI210", "MI210MC", "fp16", "fp16", "fp32", 4, 1.0),
    ("MI210", "MI210MC", "bf16", "bf16", "fp32", 4, 1.0),
    ("MI250", "MI250MC", "fp16", "fp16", "fp32", 4, 0.3),
    ("MI250", "MI250MC", "bf16", "bf16", "fp32", 4, 0.3),
    ("MI300X", "MI300XMC", "fp16", "fp16", "fp32", 8, 1.0),
    ("MI300X", "MI300XMC", "bf16", "bf16", "fp32", 8, 1.0),
    ("MI300X", "MI300XMC", "tf32", "tf32", "fp32", 4, 1.0),
    ("MI300X", "MI300XMC", "fp8-e4m3", "fp8_e4m3fnuz", "fp32", 16, 1.0),
    ("MI300X", "MI300XMC", "fp8-e5m2", "fp8_e5m2fnuz", "fp32", 16, 1.0),
    ("MI300A", "MI300AMC", "fp16", "fp16", "fp32", 8, 0.3),
    ("MI300A", "MI300AMC", "fp8-e4m3", "fp8_e4m3fnuz", "fp32", 16, 0.3),
    ("RTXPRO6000", "RTXPRO6000TC", "fp16", "fp16", "fp32", 16, 0.5),
    ("RTXPRO6000", "RTXPRO6000TC", "fp16", "fp16", "fp16", 16, 0.5),
    ("RTXPRO6000", "RTXPRO6000TC", "bf16", "bf16", "fp32", 16, 0.5),
    ("RTXPRO6000", "RTXPRO6000TC", "tf32", "tf32", "fp32", 8, 0.5),
    # The published B200 fp8 models, for the B200 fp8 comparison (docs/tensorcore-model.md).
    ("B200TC", "B200TC", "fp8-e4m3", "fp8_e4m3", "fp32", 32, 0.3),
    ("B200TCRN", "B200TCRN", "fp8-e4m3", "fp8_e4m3", "fp32", 32, 0.3),
    ("B200TCRN", "B200TCRN", "fp8-e5m2", "fp8_e5m2", "fp32", 32, 0.3),
]
_FILE_IN = {"fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2", "fp8_e4m3fnuz": "e4m3fnuz",
            "fp8_e5m2fnuz": "e5m2fnuz"}
KINDS = ("wide", "tiny", "cancel", "near")


def _pattern_fmt(fin: str) -> fpsim.Format:
    return fpsim.get_float_format("fp32" if fin == "tf32" else fin)


def _finite_patterns(rng, fin: str, n: int, lo_exp: int | None = None,
                     hi_exp: int | None = None) -> np.ndarray:
    """Random finite patterns of ``fin`` (tf32: fp32 patterns with the low 13 bits zero),
    exponent field in [lo_exp, hi_exp] (biased, 0 = subnormal)."""
    f = fpsim.get_float_format(fin)
    pf = _pattern_fmt(fin)
    mbits = f.mantissa_bits
    top = (1 << pf.exponent_bits) - 1
    lo = 0 if lo_exp is None else lo_exp
    hi = (top - 1 if f.has_infinity or f.name == "fp8_e5m2" else top) if hi_exp is None \
        else hi_exp
    e = rng.integers(lo, hi + 1, n)
    m = rng.integers(0, 1 << mbits, n)
    s = rng.integers(0, 2, n)
    if fin == "tf32":
        bits = (s << 31) | (e << 23) | (m << 13)
    else:
        bits = (s << (pf.bits - 1)) | (e << pf.mantissa_bits) | m
    bits = bits.astype(np.uint64)
    vals = from_bits(bits, pf)
    bad = ~np.isfinite(vals)
    if f.name.endswith("fnuz"):
        bad |= bits == (1 << (pf.bits - 1))  # the fnuz NaN pattern
    bits[bad] = 0
    return bits


def make_rows(rng, kind: str, fin: str, fout: str, rows: int, k: int):
    """(a_bits (rows, k), b_bits (rows, k), c fp32 bits (rows,)) for one kind of input."""
    pf = _pattern_fmt(fin)
    f = fpsim.get_float_format(fin)
    nexp = (1 << f.exponent_bits) - 1
    if kind == "wide":
        # 8-bit exponents: up to 2**64 per input, so that overflow stays occasional
        hi = f.bias + 64 if f.exponent_bits == 8 else None
        a = _finite_patterns(rng, fin, rows * k, None, hi).reshape(rows, k)
        b = _finite_patterns(rng, fin, rows * k, None, hi).reshape(rows, k)
        c = _finite_patterns(rng, "fp32", rows)
    elif kind == "tiny":
        a = _finite_patterns(rng, fin, rows * k, 0, 3).reshape(rows, k)
        b = _finite_patterns(rng, fin, rows * k, 0, min(nexp - 1, f.bias + 2)).reshape(rows, k)
        c = _finite_patterns(rng, "fp32", rows, 0, 3)
    elif kind == "near":
        mid = f.bias
        a = _finite_patterns(rng, fin, rows * k, mid - 3, mid + 2).reshape(rows, k)
        b = _finite_patterns(rng, fin, rows * k, mid - 3, mid + 2).reshape(rows, k)
        c = _finite_patterns(rng, "fp32", rows, 127 - 2, 127 + 4)
    else:  # cancel
        mid = f.bias
        a = _finite_patterns(rng, fin, rows * k, max(1, mid - 6), min(nexp - 1, mid + 6))
        b = _finite_patterns(rng, fin, rows * k, max(1, mid - 6), min(nexp - 1, mid + 6))
        a = a.reshape(rows, k)
        b = b.reshape(rows, k)
        av = from_bits(a, pf)
        bv = from_bits(b, pf)
        # odd positions: the negated neighbour product, sometimes off by the last bit
        sign = np.uint64(1) << np.uint64(pf.bits - 1)
        a[:, 1::2] = a[:, 0:k - k % 2:2]
        b[:, 1::2] = b[:, 0:k - k % 2:2] ^ sign
        nudge = rng.random((rows, k // 2)) < 0.5
        b[:, 1::2] = np.where(nudge, b[:, 1::2] + np.uint64(1 << (13 if fin == "tf32" else 0)),
                              b[:, 1::2])
        bv = from_bits(b, pf)
        bv = np.where(np.isfinite(bv), bv, 0.0)
        b = to_bits(tc.convert_input(bv, fin) if fin != "tf32" else bv.astype(np.float32),
                    pf).astype(np.uint64)
        av = tc.convert_input(from_bits(a, pf), fin)
        bv = tc.convert_input(from_bits(b, pf), fin)
        s = (av * bv).sum(axis=1)
        c = to_bits(np.asarray(fpsim.round(-s * rng.choice([1.0, 1.0 + 2.0**-20], rows),
                                           "fp32"), dtype=np.float32), fpsim.FP32)
        c = np.asarray(c, dtype=np.uint64)
        cv = from_bits(c, fpsim.FP32)
        c[~np.isfinite(cv)] = 0
    # sprinkle zeros
    a[rng.random(a.shape) < 0.08] = 0
    if fout == "fp16":  # c must be an fp16 value: round it there (finite)
        cv = from_bits(c, fpsim.FP32)
        c16 = np.asarray(fpsim.round(cv, "fp16"), dtype=np.float64)
        c16 = np.where(np.isfinite(c16), c16, 0.0)
        c = to_bits(c16.astype(np.float32), fpsim.FP32).astype(np.uint64)
    return a.astype(np.uint64), b.astype(np.uint64), c.astype(np.uint64)


_DRIVER = r"""
addpath('{cpfloat}'); addpath('{shims}'); addpath('{models}'); addpath('{models}/tools');
warning('off', 'all');
X = dlmread('{inp}');
K = {k};
fid = fopen('{outp}', 'w');
for r = 1:rows(X)
  a = X(r, 1:K); b = X(r, K+1:2*K)'; c = X(r, 2*K+1);
  try
    d = {call};
    fprintf(fid, '%s\n', num2hex(double(d)));
  catch err
    msg = strrep(err.message, sprintf('\n'), ' ');
    fprintf(fid, 'ERR %s\n', msg);
  end
end
fclose(fid);
"""


def run_octave(args, func: str, oin: str, fout: str, a, b, c, k: int) -> list[str]:
    """The model's results for each row (16-hex-digit double patterns, or 'ERR msg')."""
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "in.txt"
        outp = Path(tmp) / "out.txt"
        X = np.concatenate([a, b, c[:, None]], axis=1)
        np.savetxt(inp, X, fmt="%.17g", delimiter=",")
        if func.startswith("MI"):
            call = f"{func}(1, a, b, 1, c, '{oin}')"
        else:
            call = f"{func}(1, a, b, 1, c, '{oin}', '{fout}')"
        script = _DRIVER.format(cpfloat=args.cpfloat, shims=args.shims, models=args.models,
                                inp=inp, outp=outp, k=k, call=call)
        (Path(tmp) / "drive.m").write_text(script)
        subprocess.run(["octave", "--no-gui", "-q", str(Path(tmp) / "drive.m")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return outp.read_text().splitlines()


def record_unit(args, label, func, oin, fin, fout, n, factor, rng) -> list[str]:
    notes = []
    pf = _pattern_fmt(fin)
    fo = fpsim.get_float_format(fout)
    for k in (n, 3 * n):
        rows = max(8, int(args.rows * factor / (1 if k == n else 3)))
        parts = [make_rows(rng, kind, fin, fout, rows, k) for kind in KINDS]
        a = np.concatenate([p[0] for p in parts])
        b = np.concatenate([p[1] for p in parts])
        c = np.concatenate([p[2] for p in parts])
        av = tc.convert_input(from_bits(a, pf), fin) if fin != "tf32" else from_bits(a, pf)
        bv = tc.convert_input(from_bits(b, pf), fin) if fin != "tf32" else from_bits(b, pf)
        cv = from_bits(c, fpsim.FP32)
        lines = run_octave(args, func, oin, fout, av, bv, cv, k)
        ok = np.array([not ln.startswith("ERR") for ln in lines])
        errs = sorted({ln for ln in lines if ln.startswith("ERR")})
        d = np.array([float.fromhex("0x0p0") if not o else
                      np.frombuffer(bytes.fromhex(ln), dtype=">f8")[0]
                      for ln, o in zip(lines, ok, strict=True)])
        with np.errstate(over="ignore"):
            d_out = np.asarray(d, dtype=np.float32).astype(np.float64)  # beyond fp32: +-inf
        if fout == "fp16":
            with np.errstate(over="ignore"):
                d_out = d.astype(np.float16).astype(np.float64)
        d_bits = np.asarray(to_bits(d_out, fo), dtype=np.uint64)
        name = f"{label}_{_FILE_IN.get(fin, fin)}_to_{fout}_k{k}.txt.gz"
        tc.write_hardware_file(Path(args.out) / name, label, fin, fout, a[ok], b[ok], c[ok],
                               d_bits[ok])
        notes.append(f"{name}: {int(ok.sum())} rows; upstream raised on {int((~ok).sum())}"
                     + (f" ({'; '.join(e[4:][:120] for e in errs)})" if errs else ""))
        print(notes[-1], flush=True)
    return notes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", required=True, help="upstream models/ folder (with tools/)")
    p.add_argument("--cpfloat", required=True,
                   help="folder holding cpfloat (the MEX and its wrapper)")
    p.add_argument("--shims", required=True,
                   help="folder holding fma.m, string.m and bitshift.m")
    p.add_argument("--out", default="tests/data/tensorcore/octave")
    p.add_argument("--rows", type=int, default=300, help="rows per kind at K = one block")
    p.add_argument("--only", default=None, help="comma-separated file labels to record")
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    notes = []
    only = None if args.only is None else set(args.only.split(","))
    for unit in UNITS:
        if only is not None and unit[0] not in only:
            continue
        notes += record_unit(args, *unit, rng)
    (Path(args.out) / f"record_log_{args.seed}.txt").write_text("\n".join(notes) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
