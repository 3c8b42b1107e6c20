"""``fpsim probe``: --order on library sums, --fingerprint on fpsim's own GPU models."""

from __future__ import annotations

import ast

import pytest

from fpsim.cli import main


def test_order_numpy_sum(capsys):
    assert main(["probe", "--order", "numpy.sum", "--n", "8"]) == 0
    out = capsys.readouterr().out
    tree = ast.literal_eval(out.splitlines()[0].split(": ", 1)[1])
    flat = str(tree).replace("(", "").replace(")", "").split(", ")
    assert sorted(map(int, flat)) == list(range(8))
    assert "calls" in out


def test_order_tensor_core_multi_term(capsys):
    assert main(["probe", "--order", "fpsim.tensorcore.dot-H100-fp16", "--n", "20"]) == 0
    out = capsys.readouterr().out
    assert "((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 16, 17, 18, 19)" in out


def test_order_refuses_exact_sum(capsys):
    assert main(["probe", "--order", "math.fsum"]) == 2
    assert "fixed tree" in capsys.readouterr().err


def test_fingerprint_self_check(capsys):
    assert main(["probe", "--fingerprint", "--gpu", "V100", "--input-format", "fp16",
                 "--output-format", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "found: BlockFMA(block_size=4, extra_bits=0, output_rounding='nearest_even', " \
           "min_exponent=-19)" in out
    assert "the same parameters" in out


@pytest.mark.parametrize("argv, match", [
    (["--fingerprint", "--gpu", "A100"], "--input-format"),
    (["--fingerprint", "--gpu", "nope", "--input-format", "fp16"], "unknown GPU"),
    (["--fingerprint", "--gpu", "V100", "--input-format", "bf16"], "no tensor-core mode"),
    (["--order", "numpy.sum", "--n", "0"], "n must be"),
    (["--order", "numpy.sum", "--fmt", "nope"], "format"),
])
def test_bad_arguments(capsys, argv, match):
    assert main(["probe", *argv]) == 2
    assert match in capsys.readouterr().err


def test_order_or_fingerprint_required(capsys):
    with pytest.raises(SystemExit):
        main(["probe"])
    with pytest.raises(SystemExit):
        main(["probe", "--order", "numpy.nope"])


def test_docs_examples_run():
    """docs/probe.md's examples run and print what the page says."""
    import doctest
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "probe.md"
    result = doctest.testfile(str(page), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
