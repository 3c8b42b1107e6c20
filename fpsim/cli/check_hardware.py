"""``fpsim check-hardware FILE... [--gpu NAME] [--input-format F] [--output-format F]
[--show N]``: the tensor-core model against results measured on a GPU, row by row
(:func:`fpsim.tensorcore.check_hardware`); exit status 1 when a row differs.

A command module of :mod:`fpsim.cli`: ``HELP``, ``OUTPUTS`` (none), :func:`configure_parser`
and :func:`run_cli`.

>>> p = argparse.ArgumentParser(); configure_parser(p)
>>> p.parse_args(["x.txt", "--gpu", "A100"]).gpu
'A100'
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..formats import get_float_format
from ..tensorcore.gpus import GPUS
from ..tensorcore.hardware import check_hardware, get_gpu_or_none, parse_file_name
from .common import Output

__all__ = ["HELP", "OUTPUTS", "configure_parser", "run_cli"]

HELP = "compare the tensor-core model with measured GPU results"
OUTPUTS: tuple[Output, ...] = ()


def configure_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``fpsim check-hardware FILE... [--gpu NAME] [--show N]``.

    >>> p = argparse.ArgumentParser(); configure_parser(p)
    >>> p.parse_args(["x.txt", "--show", "2"]).show
    2
    """
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="results files <GPU>_<in>_to_<out>.txt[.gz] (format: see "
                        "tests/data/tensorcore/README.md)")
    p.add_argument("--gpu", default=None,
                   help="GPU model to check against (default: the GPU named in each file)")
    p.add_argument("--input-format", default=None, dest="input_format",
                   help="input format, if the file does not name it")
    p.add_argument("--output-format", default=None, dest="output_format",
                   help="output format, if the file does not name it")
    p.add_argument("--show", type=int, default=5, metavar="N",
                   help="mismatches to print per file (default 5)")


def run_cli(args: argparse.Namespace) -> int:
    """Handler of ``fpsim check-hardware``: prints the report; exit code 1 on mismatches.

    >>> import tempfile, fpsim.tensorcore as tc
    >>> p = Path(tempfile.mkdtemp()) / "A2_tf32_to_fp32.txt"  # A100 tf32 probe: truncation
    >>> _ = tc.write_hardware_file(p, "A2", "tf32", "fp32", [[0x3f7fffff] + [0] * 3],
    ...                            [[0x3f7fffff] + [0] * 3], [0], [0x3f7fc004])
    >>> run_cli(argparse.Namespace(files=[str(p)], gpu=None, input_format=None,
    ...                            output_format=None, show=3))  # doctest: +NORMALIZE_WHITESPACE
    A2_tf32_to_fp32.txt  A2  tf32->fp32  K=4  1/1 rows match  ok
    total: 1/1 rows match in 1 file(s)
    0
    """
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        raise ValueError(f"no such file: {', '.join(missing)}")
    for f in args.files:
        _check_pair_is_modelled(f, args)
    report = check_hardware(args.files, args.gpu, input_format=args.input_format,
                            output_format=args.output_format, show=args.show)
    print(report)
    return 0 if report.ok else 1


def _check_pair_is_modelled(path: str, args: argparse.Namespace) -> None:
    """A short ValueError, before any file is read, when the GPU to check against (``--gpu``
    or the one the file's name gives) has no unit for the file's format pair: it names the
    valid ``--gpu`` choices for that pair. Names it cannot parse are left to check_hardware.

    >>> ns = argparse.Namespace(gpu=None, input_format=None, output_format=None)
    >>> _check_pair_is_modelled("B200_e5m2_to_fp32.txt", ns)  # modelled: B200's fp8 default
    >>> _check_pair_is_modelled("RTXPRO6000_e4m3_to_fp32.txt", ns)
    Traceback (most recent call last):
    ...
    ValueError: RTXPRO6000_e4m3_to_fp32.txt: RTXPRO6000 has no modelled fp8_e4m3->fp32 unit; ...
    """
    try:
        g, fin, fout = parse_file_name(path)
        # a format named on the command line, as the file names spell it (e4m3, E5M2, ...)
        fin = get_float_format(args.input_format).name if args.input_format else fin
        fout = get_float_format(args.output_format).name if args.output_format else fout
    except ValueError:
        return
    model = get_gpu_or_none(args.gpu if args.gpu is not None else g)
    if model is None or (fin, fout) in model.units:
        return
    valid = [m.name for m in GPUS.values() if (fin, fout) in m.units]
    choices = (f"valid --gpu choices for {fin}->{fout}: {', '.join(valid)}" if valid
               else f"no modelled GPU has a {fin}->{fout} unit")
    raise ValueError(f"{Path(path).name}: {model.name} has no modelled {fin}->{fout} unit; "
                     f"{choices}")
