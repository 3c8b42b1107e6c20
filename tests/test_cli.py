"""The fpsim command line's own commands (formats, show, help): output checked against the
exact Fraction reference of tests/exact.py, exit codes, and the help a newcomer reads."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

import fpsim
from fpsim.cli import main
from fpsim.flags import Flags
from fpsim.formats import NaNEncoding
from fpsim.modes import Rounding, rounding_aliases
from tests.exact import MODES, round_exact


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def field(out: str, name: str) -> list[str]:
    return [ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith(name)]


VALUES = ["0.1", "1e999", "-1e999", "1e-999", "-1e-999", "65519.99999999999999999999",
          "65520", "1267650600228229401496703205375", "0.333333333333333333333333333333",
          "-2.5", "0.0000000298023223876953125", "3.4028235677973366e38", "-0"]


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "e3m4", "fp8_e4m3"])
def test_show_rounds_the_exact_decimal_once(capsys, fmt):
    """'rounded' and 'flags' of every value in every deterministic mode equal the exact
    rounding of the decimal string read as a Fraction (never through a float64 first)."""
    f = fpsim.get_format(fmt)
    for mode in MODES:
        for v in VALUES:
            rc, out, _ = run(capsys, "show", v, "--format", fmt, "--rounding", mode)
            assert rc == 0
            want, want_fl = round_exact(Fraction(v), f, mode, negative_zero=v.startswith("-"))
            assert field(out, "rounded")[0] == repr(want), (fmt, mode, v, out)
            flags = field(out, "flags")[0]
            assert flags == (Flags(want_fl).name if want_fl else "none"), (fmt, mode, v, out)


def test_show_examples_of_the_issue(capsys):
    rc, out, _ = run(capsys, "show", "1e999", "--rounding", "toward_zero")
    assert rc == 0 and field(out, "rounded") == ["65504.0"]
    assert set(field(out, "flags")[0].split("|")) == {"OVERFLOW", "INEXACT"}
    rc, out, _ = run(capsys, "show", "1267650600228229401496703205375", "--format", "fp32",
                     "--rounding", "toward_zero")
    assert float(field(out, "rounded")[0]) == 2.0**100 - 2.0**76 != 2.0**100


def test_show_accepts_exmy_aliases_and_refuses_junk(capsys):
    rc, out, _ = run(capsys, "show", "0.1", "-f", "e3m4", "-f", "e5m2fnuz", "-r", "rtz")
    assert rc == 0 and "-> e3m4, rounding toward_zero" in out and "fp8_e5m2fnuz" in out
    rc, _, err = run(capsys, "show", "abc")
    assert rc == 2 and "VALUE must be a decimal number" in err
    rc, _, err = run(capsys, "show", "1", "-f", "fp17")
    assert rc == 2 and "unknown format 'fp17'" in err and "eXmY" in err
    rc, _, err = run(capsys, "show", "1", "-r", "sideways")
    assert rc == 2 and "unknown rounding mode 'sideways'" in err
    rc, out, _ = run(capsys, "show", "nan", "-f", "fp4_e2m1")
    assert rc == 0 and "has no NaN" in out and field(out, "flags") == ["INVALID"]


def test_show_help_lists_every_mode_and_alias(capsys):
    with pytest.raises(SystemExit) as e:
        main(["show", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for mode, aliases in rounding_aliases().items():
        assert mode.value in out
        for a in aliases:
            assert re.search(rf"[ (]{a}[,)]", out), a


def test_no_command_prints_help_and_fails(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and "usage: fpsim" in err and "show" in err and out == ""


def test_top_level_help_has_no_rest_markup(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "usage: fpsim" in out
    assert "``" not in out and ":func:" not in out


def test_formats_explains_its_nan_column(capsys):
    rc, out, _ = run(capsys, "formats")
    assert rc == 0
    rows = [ln.split() for ln in out.splitlines()]
    used = {r[-1] for r in rows if r and r[0] in fpsim.PRESETS}
    assert used == {e.value for e in NaNEncoding}
    for e in NaNEncoding:
        assert f"  {e.value:5s} {e.meaning}" in out
    assert all(ln == ln.rstrip() for ln in out.splitlines())


def test_rounding_aliases_are_documented():
    doc = " ".join(Rounding.__doc__.split())
    for aliases in rounding_aliases().values():
        for a in aliases:
            assert f"``{a}``" in doc


def test_readme_lists_every_rounding_alias():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for mode, aliases in rounding_aliases().items():
        for a in aliases:
            assert re.search(rf"`{mode.value}` \([^)]*`{a}`", " ".join(readme.split())), a


def test_every_command_help_is_plain_text(capsys):
    from fpsim.cli import _COMMANDS

    for name in _COMMANDS:
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        out = capsys.readouterr().out
        assert e.value.code == 0 and f"usage: fpsim {name}" in out
        assert "``" not in out and ":func:" not in out and ":class:" not in out, name
