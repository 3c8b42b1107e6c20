"""Measured GPU results: read and write the files, and check the model against them row by row.

File format (``tests/data/tensorcore/README.md``): a first line ``# <GPU> <in> x <in> + fp32 ->
<out>; K=<K>``, then one dot product a line, four fields separated by a space::

    a_1,...,a_K  b_1,...,b_K  c  d

all hexadecimal bit patterns: ``a``, ``b`` in the input format (tf32: the 8-digit fp32 pattern
fed to the GPU), ``c`` as fp32, ``d`` in the output format. Files may be gzip-compressed.

>>> import fpsim.tensorcore as tc
>>> tc.parse_file_name("A100_fp16_to_fp32.txt.gz")
('A100', 'fp16', 'fp32')
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from ..encoding import from_bits, to_bits
from ..formats import FP32, Format, get_float_format
from ..rounding import round as fp_round
from .gpus import BlockFMA, GpuModel, get_gpu, resolve_unit
from .model import convert_input, dot_rows

__all__ = [
    "HardwareFile",
    "load_hardware_file",
    "write_hardware_file",
    "parse_file_name",
    "Mismatch",
    "FileReport",
    "HardwareReport",
    "check_hardware",
    "get_gpu_or_none",
]

_FILE_RE = re.compile(r"^(?P<gpu>[^_]+)_(?P<inp>[a-z0-9]+)_to_(?P<out>[a-z0-9]+)"
                      r"(?:_(?P<tag>[a-z0-9-]+))?\.txt(\.gz)?$", re.IGNORECASE)
_HEADER_RE = re.compile(r"^#\s*(?P<gpu>\S+)\s+(?P<inp>\S+)\s+x\s+\S+\s+\+\s+(?P<c>\S+)\s+->\s+"
                        r"(?P<out>\S+?)\s*;\s*K\s*=\s*(?P<k>\d+)")
# File-name spelling of the input formats -> fpsim names (and back).
_NAMES = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2"}
_FILE_NAMES = {v: k for k, v in _NAMES.items()}


def _fmt_name(name: str) -> str:
    key = name.strip().lower()
    return get_float_format(_NAMES.get(key, key)).name


def _pattern_format(fmt: Format) -> Format:
    """The format whose patterns a file stores for inputs of ``fmt`` (tf32: fp32 patterns)."""
    return FP32 if fmt.name == "tf32" else fmt


def _digits(fmt: Format) -> int:
    return _pattern_format(fmt).bits // 4


def parse_file_name(path: str | os.PathLike) -> tuple[str, str, str]:
    """(gpu, input format, output format) from ``<GPU>_<in>_to_<out>[_<tag>].txt[.gz]``.

    >>> parse_file_name("/x/H100_e4m3_to_fp32.txt.gz")
    ('H100', 'fp8_e4m3', 'fp32')
    >>> parse_file_name("B200_fp16_to_fp16_overflow.txt")
    ('B200', 'fp16', 'fp16')
    """
    m = _FILE_RE.match(Path(path).name)
    if m is None:
        raise ValueError(f"file name {Path(path).name!r} is not <GPU>_<input>_to_<output>.txt"
                         f"[.gz]; give the GPU and formats explicitly")
    return m["gpu"], _fmt_name(m["inp"]), _fmt_name(m["out"])


@dataclass
class HardwareFile:
    """One file of measured results: patterns as integer arrays (rows x K for a and b).

    ``a``, ``b``, ``c`` and ``d`` give the exact values (tf32 inputs as the fp32 values that
    were fed to the GPU, before it drops their low 13 bits)."""

    path: str
    gpu: str
    input_format: str
    output_format: str
    k: int
    a_bits: np.ndarray
    b_bits: np.ndarray
    c_bits: np.ndarray
    d_bits: np.ndarray
    header: str = ""

    @property
    def rows(self) -> int:
        """Number of dot products in the file."""
        return int(self.d_bits.shape[0])

    @property
    def a(self) -> np.ndarray:
        """Values of a (rows x K)."""
        return from_bits(self.a_bits, _pattern_format(get_float_format(self.input_format)))

    @property
    def b(self) -> np.ndarray:
        """Values of b (rows x K)."""
        return from_bits(self.b_bits, _pattern_format(get_float_format(self.input_format)))

    @property
    def c(self) -> np.ndarray:
        """Values of c (fp32)."""
        return from_bits(self.c_bits, FP32)

    @property
    def d(self) -> np.ndarray:
        """Measured results (output format values)."""
        return from_bits(self.d_bits, get_float_format(self.output_format))


def _open_text(path: str | os.PathLike) -> str:
    # Path() refuses what open() would take as a file descriptor: True or 1 opened (and, on
    # closing, closed) standard output
    with Path(path).open("rb") as fh:
        raw = fh.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("ascii")


def _parse_hex(fields: list[str], count: int, digits: int, what: str, path) -> np.ndarray:
    """Fixed-width hex tokens -> uint64 array (rows x count), checking every width."""
    width = count * digits + (count - 1)
    for i, f in enumerate(fields):
        if len(f) != width:
            raise ValueError(f"{path}: row {i + 1}: {what} should be {count} comma-separated "
                             f"patterns of {digits} hex digits, got {f[:80]!r}")
    joined = "".join(fields).replace(",", "")
    try:
        raw = bytes.fromhex(joined)
    except ValueError:
        raise ValueError(f"{path}: {what} holds characters that are not hexadecimal") from None
    if digits == 2:
        arr = np.frombuffer(raw, dtype=np.uint8)
    elif digits == 4:
        arr = np.frombuffer(raw, dtype=">u2")
    elif digits == 8:
        arr = np.frombuffer(raw, dtype=">u4")
    else:
        raise ValueError(f"unsupported pattern width of {digits} hex digits")
    return arr.astype(np.uint64).reshape(len(fields), count)


def load_hardware_file(path: str | os.PathLike, *, gpu: str | None = None,
                       input_format: str | None = None,
                       output_format: str | None = None) -> HardwareFile:
    """Read a results file (plain or gzip). GPU and formats come from the header line, else
    from the file name (``<GPU>_<in>_to_<out>.txt.gz``), unless given.

    >>> import tempfile, fpsim.tensorcore as tc
    >>> p = Path(tempfile.mkdtemp()) / "V100_fp16_to_fp32.txt.gz"
    >>> _ = tc.write_hardware_file(p, "V100", "fp16", "fp32", [[0x3c00] * 4], [[0x3c00] * 4],
    ...                            [0x3f800000], [0x40a00000])
    >>> f = tc.load_hardware_file(p)
    >>> f.gpu, f.input_format, f.output_format, f.k, f.rows, f.d.tolist()
    ('V100', 'fp16', 'fp32', 4, 1, [5.0])
    """
    text = _open_text(path)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = ""
    h_gpu = h_in = h_out = None
    h_k = None
    if lines and lines[0].startswith("#"):
        header = lines[0]
        m = _HEADER_RE.match(header)
        if m:
            h_gpu, h_in, h_out, h_k = m["gpu"], m["inp"], m["out"], int(m["k"])
        lines = lines[1:]
    lines = [ln for ln in lines if not ln.startswith("#")]
    if h_gpu is None:
        try:
            h_gpu, h_in, h_out = parse_file_name(path)
        except ValueError:
            if input_format is None or output_format is None:
                raise
            h_gpu = "unknown"  # the caller names the GPU to check against
    gpu_name = gpu or h_gpu
    fi = get_float_format(_fmt_name(input_format or h_in))
    fo = get_float_format(_fmt_name(output_format or h_out))
    if not lines:
        raise ValueError(f"{path}: no data rows")
    parts = [ln.split() for ln in lines]
    bad = [i for i, p in enumerate(parts) if len(p) != 4]
    if bad:
        raise ValueError(f"{path}: row {bad[0] + 1} has {len(parts[bad[0]])} fields, expected 4 "
                         f"(a_1,...,a_K b_1,...,b_K c d)")
    k = parts[0][0].count(",") + 1
    if h_k is not None and h_k != k:
        raise ValueError(f"{path}: header says K={h_k} but rows hold {k} values")
    dig = _digits(fi)
    a_bits = _parse_hex([p[0] for p in parts], k, dig, "a", path)
    b_bits = _parse_hex([p[1] for p in parts], k, dig, "b", path)
    c_bits = _parse_hex([p[2] for p in parts], 1, 8, "c", path)[:, 0]
    d_bits = _parse_hex([p[3] for p in parts], 1, fo.bits // 4, "d", path)[:, 0]
    return HardwareFile(str(path), gpu_name, fi.name, fo.name, k, a_bits, b_bits, c_bits,
                        d_bits, header)


def write_hardware_file(path: str | os.PathLike, gpu: str, input_format: str,
                        output_format: str, a_bits, b_bits, c_bits, d_bits) -> Path:
    """Write results in the same format (gzip when the name ends in .gz).

    >>> import tempfile, numpy as np, fpsim.tensorcore as tc
    >>> p = Path(tempfile.mkdtemp()) / "X_fp16_to_fp32.txt"
    >>> _ = tc.write_hardware_file(p, "X", "fp16", "fp32", [[0x3c00]], [[0x3c00]], [0],
    ...                            [0x3f800000])
    >>> p.read_text().splitlines()[1]
    '3c00 3c00 00000000 3f800000'
    """
    fi = get_float_format(_fmt_name(input_format))
    fo = get_float_format(_fmt_name(output_format))
    a = np.atleast_2d(np.asarray(a_bits, dtype=np.uint64))
    b = np.atleast_2d(np.asarray(b_bits, dtype=np.uint64))
    c = np.asarray(c_bits, dtype=np.uint64).reshape(-1)
    d = np.asarray(d_bits, dtype=np.uint64).reshape(-1)
    if not (a.shape == b.shape and a.shape[0] == c.size == d.size):
        raise ValueError(f"shapes differ: a {a.shape}, b {b.shape}, c {c.shape}, d {d.shape}")
    k = a.shape[1]
    dig = _digits(fi)
    dd = fo.bits // 4
    in_name = _FILE_NAMES.get(fi.name, fi.name)
    lines = [f"# {gpu} {in_name} x {in_name} + fp32 -> {fo.name}; K={k}"]
    for ra, rb, rc, rd in zip(a.tolist(), b.tolist(), c.tolist(), d.tolist(), strict=True):
        lines.append(",".join(f"{x:0{dig}x}" for x in ra) + " "
                     + ",".join(f"{x:0{dig}x}" for x in rb) + f" {rc:08x} {rd:0{dd}x}")
    text = "\n".join(lines) + "\n"
    path = Path(path)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode("ascii"), mtime=0))
    else:
        path.write_text(text)
    return path


# -- checking --------------------------------------------------------------------------------

@dataclass
class Mismatch:
    """One row where the model and the GPU differ (patterns as ints)."""

    row: int
    a_bits: list[int]
    b_bits: list[int]
    c_bits: int
    expected_bits: int
    model_bits: int
    exact: Fraction  # c + sum a_k b_k of the converted inputs, exactly

    @property
    def exact_decimal(self) -> str:
        """The exact value as a decimal string (20 significant digits)."""
        return _decimal(self.exact)


def _decimal(x: Fraction, digits: int = 20) -> str:
    if x == 0:
        return "0"
    from decimal import Context, Decimal

    ctx = Context(prec=digits)
    return str(ctx.divide(Decimal(x.numerator), Decimal(x.denominator)))


@dataclass
class FileReport:
    """Per-file result of :func:`check_hardware`."""

    path: str
    gpu: str
    input_format: str
    output_format: str
    k: int
    rows: int
    matches: int
    mismatches: list[Mismatch] = field(default_factory=list)
    mismatch_count: int = 0

    @property
    def ok(self) -> bool:
        """True when every row matches."""
        return self.mismatch_count == 0


@dataclass
class HardwareReport:
    """Result of :func:`check_hardware` over several files; ``str()`` is a readable table."""

    files: list[FileReport]
    show: int = 5

    @property
    def ok(self) -> bool:
        """True when every row of every file matches."""
        return all(f.ok for f in self.files)

    @property
    def rows(self) -> int:
        """Rows checked."""
        return sum(f.rows for f in self.files)

    @property
    def mismatch_count(self) -> int:
        """Rows that differ."""
        return sum(f.mismatch_count for f in self.files)

    def mismatches_total(self) -> int:
        """Rows that differ (same as ``mismatch_count``)."""
        return self.mismatch_count

    def __str__(self) -> str:
        out = []
        width = max((len(Path(f.path).name) for f in self.files), default=10)
        gw = max((len(f.gpu) for f in self.files), default=4)
        pw = max((len(f"{f.input_format}->{f.output_format}") for f in self.files), default=4)
        kw = max((len(str(f.k)) for f in self.files), default=1)
        rw = max((len(str(f.rows)) for f in self.files), default=1)
        for f in self.files:
            status = "ok" if f.ok else f"{f.mismatch_count} MISMATCHES"
            pair = f"{f.input_format}->{f.output_format}"
            out.append(f"{Path(f.path).name:<{width}}  {f.gpu:<{gw}}  {pair:<{pw}}  "
                       f"K={f.k:<{kw}}  {f.matches:>{rw}}/{f.rows:<{rw}} rows match  "
                       f"{status}")
            fo = get_float_format(f.output_format)
            dd = fo.bits // 4
            for m in f.mismatches[:self.show]:
                exp_v = float(from_bits(m.expected_bits, fo))
                mod_v = float(from_bits(m.model_bits, fo))
                out.append(f"    row {m.row + 1}: GPU {m.expected_bits:0{dd}x} ({exp_v!r}) model "
                           f"{m.model_bits:0{dd}x} ({mod_v!r}) exact {m.exact_decimal}")
                out.append(f"      a={','.join(f'{x:x}' for x in m.a_bits)} "
                           f"b={','.join(f'{x:x}' for x in m.b_bits)} c={m.c_bits:08x}")
        out.append(f"total: {self.rows - self.mismatch_count}/{self.rows} rows match"
                   f" in {len(self.files)} file(s)")
        return "\n".join(out)


def _exact_sum(a: np.ndarray, b: np.ndarray, c: float) -> Fraction:
    s = Fraction(c) if np.isfinite(c) else Fraction(0)
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        if np.isfinite(x) and np.isfinite(y):
            s += Fraction(x) * Fraction(y)
    return s


def model_results(hf: HardwareFile, gpu: str | GpuModel | BlockFMA | None = None
                  ) -> np.ndarray:
    """The model's output patterns for every row of a file (uint64 array).

    >>> import tempfile, fpsim.tensorcore as tc
    >>> p = Path(tempfile.mkdtemp()) / "V100_fp16_to_fp32.txt"  # probe B3 of Fasi et al.
    >>> _ = tc.write_hardware_file(p, "V100", "fp16", "fp32", [[0x3c00] * 4], [[0x0001] * 4],
    ...                            [0x3f800000], [0x3f800000])
    >>> [hex(x) for x in tc.model_results(tc.load_hardware_file(p))]
    ['0x3f800000']
    """
    if not isinstance(hf, HardwareFile):
        raise TypeError(f"model_results takes a HardwareFile (load_hardware_file's result), got "
                        f"{type(hf).__name__} {hf!r}")
    unit, fi, fo, _ = resolve_unit(gpu if gpu is not None else hf.gpu, hf.input_format,
                                   hf.output_format)
    a = convert_input(hf.a, fi)
    b = convert_input(hf.b, fi)
    c = np.asarray(fp_round(hf.c, fo), dtype=np.float64)
    d = dot_rows(a, b, c, unit, fi, fo)
    return np.asarray(to_bits(d, fo)).astype(np.uint64)


def check_hardware(paths, gpu: str | GpuModel | BlockFMA | None = None, *,
                   input_format: str | None = None, output_format: str | None = None,
                   show: int = 5, keep: int = 100) -> HardwareReport:
    """Run the model on every row of each file and compare bit for bit.

    ``gpu`` overrides the GPU named in the files (a name or a :class:`BlockFMA`). NaN results
    match any NaN pattern (GPUs return their own canonical NaN). Up to ``keep`` mismatches per
    file are kept with their inputs and exact value; ``show`` of them are printed by ``str()``.

    >>> import tempfile, fpsim.tensorcore as tc
    >>> p = Path(tempfile.mkdtemp()) / "A100_fp16_to_fp32.txt"  # probe D1: one extra bit
    >>> _ = tc.write_hardware_file(p, "A100", "fp16", "fp32", [[0x3c00] + [0] * 7],
    ...                            [[0x3c00] + [0] * 7], [0xbf7fffff], [0x33800000])
    >>> r = tc.check_hardware([p])
    >>> r.ok, r.rows
    (True, 1)
    >>> tc.check_hardware([p], gpu="V100").mismatches_total()  # V100 has no extra bit
    1
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    reports = []
    for p in paths:
        hf = load_hardware_file(p, input_format=input_format, output_format=output_format)
        model = model_results(hf, gpu)
        fo = get_float_format(hf.output_format)
        exp = hf.d_bits
        same = model == exp
        nan_m = np.isnan(from_bits(model, fo))
        nan_e = np.isnan(from_bits(exp, fo))
        same |= nan_m & nan_e
        bad = np.nonzero(~same)[0]
        if gpu is None:
            label = hf.gpu
        elif isinstance(gpu, (BlockFMA, GpuModel)):
            label = gpu.name
        else:
            label = get_gpu(gpu).name
        fr = FileReport(str(p), str(label), hf.input_format, hf.output_format, hf.k, hf.rows,
                        int(same.sum()), mismatch_count=int(bad.size))
        if bad.size:
            fi = get_float_format(hf.input_format)
            a = convert_input(hf.a[bad[:keep]], fi)
            b = convert_input(hf.b[bad[:keep]], fi)
            c = np.asarray(fp_round(hf.c[bad[:keep]], fo), dtype=np.float64)
            for j, r in enumerate(bad[:keep].tolist()):
                fr.mismatches.append(Mismatch(
                    r, hf.a_bits[r].tolist(), hf.b_bits[r].tolist(), int(hf.c_bits[r]),
                    int(exp[r]), int(model[r]), _exact_sum(a[j], b[j], float(c[j]))))
        reports.append(fr)
    return HardwareReport(reports, show)


def get_gpu_or_none(name: str) -> GpuModel | None:
    """The GPU of that name, or None when no modelled GPU has it.

    >>> get_gpu_or_none("MI300X").architecture, get_gpu_or_none("nope")
    ('CDNA 3', None)
    """
    try:
        return get_gpu(name)
    except ValueError:
        return None
