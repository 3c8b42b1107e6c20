"""The command line's plumbing, as a class (issue 32): every subcommand's every option given a
bad, negative-looking or absurd value must end in a clear one-line error (exit status 2 or 1),
or be taken as a value; never a traceback, a hang, or "expected one argument" for a value
such as ``-inf``. Output paths (``--json PATH``, ``--out DIR``, ``fpsim notebooks DIR``) are checked
before a command works, by the one helper of :mod:`fpsim.cli.common`.

The sweep replaces the work each command does once its arguments are read (training,
experiments, rendering, MPI jobs, writing notebooks) by a stop: what it checks is the plumbing
before that work, in well under a minute, never the experiments themselves (they run as long
as they were asked to; tests/test_training.py, test_quant_experiment.py, test_zero_*.py run
them)."""

from __future__ import annotations

import argparse
import contextlib
import io
import signal
from pathlib import Path

import pytest

from fpsim import cli
from fpsim.cli.common import NEGATIVE_NUMBER, Output, OutputKind, check_output_path, error_line

ROOT = Path(__file__).resolve().parents[1]
HARDWARE_FILE = str(ROOT / "tests" / "data" / "tensorcore" / "V100_fp16_to_fp16.txt.gz")
# the smallest valid command line of each command (figures: renders nothing heavy: stopped)
BASE = {"show": ["1"], "formats": [], "tour": [], "demo": ["--quick", "--no-plots"],
        "train": ["--precision", "fp16", "--no-plots"], "check-hardware": [HARDWARE_FILE],
        "figures": [], "quant": ["--quick"], "memory": ["--params", "1e9", "--gpus", "8"],
        "zero": ["--ranks", "2", "--stage", "1"], "notebooks": ["out", "--student"],
        "lm": ["--quick", "--no-plots"], "probe": ["--order", "numpy.sum"]}
BAD = ["abc", "-1", "-inf", "-nan", "-1e-5", "nan", "inf", "0", "1" + "0" * 30, "", "-",
       "1e999", "-0", "1.5", "-.5"]
NEGATIVE_LOOKING = ["-1", "-inf", "-nan", "-1e-5", "-0", "-.5", "-Infinity", "-1E+3"]
# what each command does once its arguments are read: replaced by a stop in the sweep
WORK = [("fpsim.cli.demo", "run_demo"), ("fpsim.cli.demo", "run_demo_and_control"),
        ("fpsim.cli.train", "train"),
        ("fpsim.quant.experiment", "run_experiment"), ("fpsim.cli.zero", "run_zero"),
        ("fpsim.cli.zero", "_launch"), ("fpsim.cli.zero", "_run_rank"),
        ("fpsim.cli.figures", "render"), ("fpsim.cli.figures", "prime_demo_runs"),
        ("fpsim.cli.notebooks", "write_student_editions"),
        ("fpsim.cli.notebooks", "write_teacher_editions"), ("fpsim.cli.lm", "run_lm"),
        ("fpsim.cli.probe", "reveal_order"), ("fpsim.cli.probe", "fingerprint")]


class WouldWork(BaseException):
    """The arguments were read and the command was about to work (not an error)."""


def _stop(*args, **kwargs):
    raise WouldWork


@pytest.fixture
def stopped(monkeypatch, tmp_path):
    import importlib

    monkeypatch.chdir(tmp_path)
    for mod, name in WORK:
        monkeypatch.setattr(importlib.import_module(mod), name, _stop)


def _main(argv: list[str], seconds: int = 20) -> tuple[object, str, str]:
    """(exit status or "worked", stdout, stderr) of ``fpsim argv``; TimeoutError on a hang."""
    def hang(signum, frame):
        raise TimeoutError(f"fpsim {' '.join(argv)} hung")

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    except WouldWork:
        rc = "worked"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


def _options():
    """(command, option string or None for a positional, its argparse action)."""
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in subs.choices.items():
        for act in sp._actions:
            if act.nargs == 0 or isinstance(act, argparse._HelpAction):
                continue  # flags take no value
            yield name, (act.option_strings[0] if act.option_strings else None), act


def _argv(command: str, option: str | None, value: str) -> list[str]:
    base = list(BASE[command])
    if option is None:  # the (first) positional argument takes the value
        pos = 0
        return [command, value, *base[1:]] if pos == 0 and base else [command, value, *base]
    if option in base:
        base[base.index(option) + 1] = value
        return [command, *base]
    return [command, *base, option, value]


def test_every_command_is_in_the_sweep():
    assert set(BASE) == set(cli._COMMANDS), "give a new command its smallest valid command line"


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM to catch a hang")
def test_every_option_of_every_command_fails_clearly_or_takes_the_value(stopped):
    failures, calls = [], 0
    for command, option, _ in _options():
        for value in BAD:
            argv = _argv(command, option, value)
            calls += 1
            try:
                rc, _, err = _main(argv)
            except TimeoutError as exc:
                failures.append(str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - what escaped main is the failure
                failures.append(f"{argv}: {type(exc).__name__} escaped main: {exc}")
                continue
            lines = [ln for ln in err.splitlines() if ln.strip()]
            where = f"fpsim {' '.join(argv)} -> {rc}"
            if "Traceback" in err:
                failures.append(f"{where}: a traceback")
            elif rc in (0, "worked"):
                continue
            elif rc not in (1, 2):
                failures.append(f"{where}: exit status {rc}")
            elif not lines or not lines[-1].startswith(f"fpsim {command}: "):
                failures.append(f"{where}: no one-line 'fpsim {command}: ...' error: {lines}")
            elif value in NEGATIVE_LOOKING and "expected one argument" in lines[-1]:
                failures.append(f"{where}: the value {value} was taken for an option")
            elif "internal error" in lines[-1]:
                failures.append(f"{where}: {lines[-1]}")
    assert calls > 300
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("command,option,act", [o for o in _options() if o[1] is not None
                                                and o[2].type in (int, float)],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_negative_looking_values_reach_the_command(stopped, command, option, act):
    """A numeric option given -inf, -nan, -1e-5, ...: argparse hands it over (the command
    then refuses it in its own words or takes it), never "expected one argument"."""
    for value in NEGATIVE_LOOKING:
        rc, _, err = _main(_argv(command, option, value))
        assert "expected one argument" not in err and "Traceback" not in err, (value, err)
        if act.type is int and value not in ("-1", "-0"):  # not an int: argparse's words
            assert rc == 2 and "invalid int value" in err, (value, err)


@pytest.mark.parametrize("value,rounded", [("-inf", "-inf"), ("-nan", "nan"),
                                           ("-Infinity", "-inf"), ("-1e-5", None),
                                           ("-.5", "-0.5"), ("-65520", "-inf"),
                                           ("-1E+1", "-10.0")])
def test_show_takes_negative_looking_values(capsys, value, rounded):
    assert cli.main(["show", value, "-f", "fp16"]) == 0
    out = capsys.readouterr().out
    got = [ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("rounded")]
    assert got == [rounded or repr(float(__import__("fpsim").round(-1e-5, "fp16")))]
    assert NEGATIVE_NUMBER.match(value)


# -- output paths: one helper, every command that writes files ------------------------------

WRITERS = {name: outs for name, outs in cli._OUTPUTS.items() if outs}


def test_every_command_that_writes_files_declares_its_outputs():
    """The commands with an option naming a file or folder to write (their parsers' --out,
    --json PATH, the notebooks DIR) are the ones whose outputs are checked."""
    assert {(n, o.dest) for n, outs in WRITERS.items() for o in outs} == {
        ("demo", "out"), ("train", "out"), ("figures", "out"), ("quant", "json"),
        ("notebooks", "out"), ("lm", "out")}


def _bad_paths(tmp: Path, kind: OutputKind) -> dict[str, str]:
    a_file = tmp / "a_file"
    a_file.write_text("x")
    bad = {"under a file": str(a_file / "x"), "empty": "",
           "nul byte": str(tmp / "x\0y")}
    if kind is OutputKind.FILE:
        bad |= {"a folder": str(tmp), "missing folder": str(tmp / "nope" / "x.json")}
    else:
        bad |= {"a file": str(a_file), "deep under a file": str(a_file / "x" / "y")}
    return bad


@pytest.mark.parametrize("command,out", [(n, o) for n, outs in WRITERS.items() for o in outs],
                         ids=lambda v: v if isinstance(v, str) else v.dest)
def test_output_paths_are_checked_before_the_command_works(stopped, tmp_path, command, out):
    def argv(path: str) -> list[str]:  # the writing on (demo's BASE turns the plots off)
        opt = None if out.positional else out.option
        return [a for a in _argv(command, opt, path) if a != "--no-plots"]

    for why, path in _bad_paths(tmp_path, out.kind).items():
        before = sorted(tmp_path.rglob("*"))
        rc, _, err = _main(argv(path))
        assert rc == 2, (why, rc, err)  # not "worked": refused before any work
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"fpsim {command}: {out.option} "), err
        assert sorted(tmp_path.rglob("*")) == before  # no probe file, no folder left behind
    good = tmp_path / "new" / "deeper" if out.kind is OutputKind.DIR else tmp_path / "r.json"
    assert _main(argv(str(good)))[0] == "worked"
    if out.unless:  # the flag that turns the writing off also turns the check off
        opt = None if out.positional else out.option
        argv = _argv(command, opt, str(tmp_path / "a_file" / "x"))
        argv += [] if f"--{out.unless.replace('_', '-')}" in argv else \
            [f"--{out.unless.replace('_', '-')}"]
        assert _main(argv)[0] in ("worked", 0)


def test_output_path_check_reads_no_file_and_changes_none(tmp_path):
    deep = tmp_path / "new" / "deeper"
    assert check_output_path(str(deep), Output("out", OutputKind.DIR)) == deep
    assert sorted(tmp_path.rglob("*")) == []  # no folder made, no probe file left
    f = tmp_path / "r.json"
    f.write_text("kept")
    assert check_output_path(str(f), Output("json", OutputKind.FILE)) == f
    assert f.read_text() == "kept"
    with pytest.raises(TypeError, match="--json takes a path"):
        check_output_path(3, Output("json", OutputKind.FILE))


# -- every error of a command is one line ---------------------------------------------------

@pytest.mark.parametrize("exc,status,words", [
    (ValueError("--x must be positive"), 2, "--x must be positive"),
    (FileNotFoundError(2, "No such file or directory", "a/b"), 1, "No such file"),
    (PermissionError(13, "Permission denied", "/x"), 1, "Permission denied: '/x'"),
    (MemoryError(), 1, "out of memory"),
    (KeyboardInterrupt(), 130, "interrupted"),
    (RuntimeError("boom"), 1, "internal error, a bug in fpsim"),
    (ZeroDivisionError("division by zero"), 1, "ZeroDivisionError: division by zero"),
])
def test_main_turns_every_exception_into_one_line(monkeypatch, exc, status, words):
    def handler(args):
        raise exc

    help_text, configure, _ = cli._COMMANDS["formats"]
    monkeypatch.setitem(cli._COMMANDS, "formats", (help_text, configure, handler))
    rc, out, err = _main(["formats"])
    assert rc == status and "Traceback" not in err
    assert err.strip().count("\n") == 0 and err.startswith("fpsim formats: ")
    assert words in err
    assert error_line("formats", exc) == (status, err.strip())


def test_figures_dpi_is_bounded(stopped):
    from fpsim.cli.figures import MAX_DPI

    for dpi in ("100000", str(MAX_DPI + 1), "0", "-5"):
        rc, _, err = _main(["figures", "--dpi", dpi])
        words = f"--dpi must be from 1 to {MAX_DPI}" if int(dpi) > 0 else "must be positive"
        assert rc == 2 and words in err and err.count("\n") == 1, err
    assert _main(["figures", "--dpi", str(MAX_DPI)])[0] == "worked"


def test_notebooks_student_file_is_refused(tmp_path, stopped):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    rc, _, err = _main(["notebooks", "--student", str(f)])
    assert rc == 2 and "is a file, not a folder" in err and f.read_text() == "mine"
