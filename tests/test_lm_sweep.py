"""The training sweep of issue 31 (fpsim.training.lm_sweep.train_sweep, gap_stats,
format_train_sweep and ``python -m fpsim.training.lm_sweep``) on a tiny GPT; the
underflow-at-initialisation sweep is tested in tests/test_lm.py."""

from __future__ import annotations

import json
import math

import pytest

from fpsim.training import lm_sweep
from fpsim.training.lm import train_lm
from fpsim.training.lm_sweep import format_train_sweep, gap_stats, main, train_sweep

TINY = dict(d_model=16, n_heads=2, n_layers=1, context=8)


def _run(axis, value, recipe, seed, val, under=0.0):
    return dict(axis=axis, value=value, tokens=value * 64, recipe=recipe, seed=seed,
                val_loss=val, grad_underflow=under)


def test_gap_stats_against_a_hand_computation():
    runs = [
        # batch 4: fp32 2.0, 2.1, 2.3; fp16-master 2.05, 2.05, 2.45 -> gaps +0.05, -0.05,
        # +0.15 (mean 0.05, sd sqrt((0 + 0.01 + 0.01) / 2) = 0.1); fp32 range 0.3, sd
        # sqrt(((-2/15)^2 + (-1/30)^2 + (1/6)^2) / 2) = sqrt(7/300)
        _run("batch_size", 4, "fp32", 0, 2.0), _run("batch_size", 4, "fp32", 1, 2.1),
        _run("batch_size", 4, "fp32", 2, 2.3),
        _run("batch_size", 4, "fp16-master", 0, 2.05, 0.01),
        _run("batch_size", 4, "fp16-master", 1, 2.05, 0.02),
        _run("batch_size", 4, "fp16-master", 2, 2.45, 0.06),
        # depth 8: a recipe 0.1 and 0.09 behind a baseline that spreads 0.01; seed 5 has no
        # baseline and is left out; another recipe 0.2 ahead on one seed
        _run("n_layers", 8, "fp32", 0, 2.0), _run("n_layers", 8, "fp32", 1, 2.01),
        _run("n_layers", 8, "fp16-master", 0, 2.1, 0.1),
        _run("n_layers", 8, "fp16-master", 1, 2.1, 0.2),
        _run("n_layers", 8, "fp16-master", 5, 9.0, 0.9),
        _run("n_layers", 8, "mixed-fp16", 1, 1.81, 0.0),
    ]
    a, b, c = gap_stats(runs)
    assert (a["axis"], a["value"], a["recipe"], a["seeds"]) == ("batch_size", 4,
                                                                 "fp16-master", [0, 1, 2])
    assert a["gaps"] == pytest.approx([0.05, -0.05, 0.15], abs=1e-12)
    assert a["mean_gap"] == pytest.approx(0.05, abs=1e-12)
    assert a["gap_sd"] == pytest.approx(0.1, abs=1e-12)
    assert a["baseline_mean"] == pytest.approx(6.4 / 3, abs=1e-12)
    assert a["baseline_sd"] == pytest.approx(math.sqrt(7 / 300), abs=1e-12)
    assert a["baseline_range"] == pytest.approx(0.3, abs=1e-12)
    assert a["grad_underflow"] == pytest.approx(0.03, abs=1e-12)
    assert a["verdict"] == "within"
    # paired: 2 of 3 gaps positive; two-sided sign test 2 * P(X >= 2) = 2 * 4/8, capped at 1
    assert (a["behind_seeds"], a["paired_n"], a["sign_p"]) == (2, 3, 1.0)
    assert (b["recipe"], b["seeds"]) == ("fp16-master", [0, 1])
    assert b["gaps"] == pytest.approx([0.1, 0.09], abs=1e-12)
    assert b["mean_gap"] == pytest.approx(0.095, abs=1e-12)
    assert b["baseline_range"] == pytest.approx(0.01, abs=1e-12)
    assert b["grad_underflow"] == pytest.approx(0.15, abs=1e-12)
    assert b["verdict"] == "behind"
    assert (b["behind_seeds"], b["paired_n"], b["sign_p"]) == (2, 2, 0.5)  # 2 * 1/4
    assert (c["recipe"], c["seeds"], c["gap_sd"], c["verdict"]) == ("mixed-fp16", [1], 0.0,
                                                                     "one seed")
    assert c["mean_gap"] == pytest.approx(-0.2, abs=1e-12)
    # ahead: the mean gap (-0.5 on every seed) below minus the baseline's range (0.3)
    ahead = runs[:3] + [dict(r, recipe="fp16-master", val_loss=r["val_loss"] - 0.5)
                        for r in runs[:3]]
    assert gap_stats(ahead)[0]["mean_gap"] == pytest.approx(-0.5, abs=1e-12)
    assert gap_stats(ahead)[0]["verdict"] == "ahead"
    assert [gap_stats(ahead)[0][k] for k in ("behind_seeds", "paired_n", "sign_p")] == [
        0, 3, 0.25]  # 2 * P(X >= 3) = 2/8
    # mixed: a mean gap of +0.05 beyond a range of 0.01, the seeds on either side
    mixed = runs[6:8] + [dict(runs[8], val_loss=2.2), dict(runs[9], val_loss=1.91)]
    st = gap_stats(mixed)[0]
    assert st["gaps"] == pytest.approx([0.2, -0.1], abs=1e-12)
    assert st["verdict"] == "mixed"
    # within the range on average, whatever the seeds do
    assert gap_stats(runs[6:8] + [dict(runs[8], val_loss=2.3), dict(runs[9], val_loss=1.72)]
                     )[0]["verdict"] == "within"


def test_the_table_is_printed_from_the_runs():
    # large batches of a tiny model: few evaluation batches (512 windows in all)
    runs = train_sweep([("batch_size", [32, 64])], seeds=[0, 1], steps=3, **TINY)
    assert [(r["value"], r["seed"], r["recipe"]) for r in runs] == [
        (v, s, r) for v in (32, 64) for s in (0, 1) for r in ("fp32", "fp16-master")]
    assert [r["tokens"] for r in runs[::4]] == [256, 512]
    # each run is train_lm's with the sweep's configuration
    direct = train_lm("fp16-master", steps=3, warmup=0, eval_every=3, measure_every=1,
                      batch_size=64, seed=1, eval_batches=1,
                      final_eval_batches=lm_sweep.EVAL_WINDOWS // 64, **TINY)
    assert runs[7]["val_loss"] == direct.val_loss
    assert runs[7]["grad_underflow"] == direct.grad_underflow > 0
    assert all(r["grad_underflow"] == 0 for r in runs if r["recipe"] == "fp32")
    stats = gap_stats(runs)
    lines = format_train_sweep(stats).splitlines()
    assert len(lines) == 5  # header, rule, two settings, the recipe's summary
    means = []
    for line, v in zip(lines[2:4], (32, 64), strict=True):
        mine = {r["seed"]: r["val_loss"] for r in runs if r["value"] == v
                and r["recipe"] == "fp16-master"}
        base = {r["seed"]: r["val_loss"] for r in runs if r["value"] == v
                and r["recipe"] == "fp32"}
        gaps = [mine[s] - base[s] for s in (0, 1)]
        under = sum(r["grad_underflow"] for r in runs if r["value"] == v
                    and r["recipe"] == "fp16-master") / 2
        words = line.split()
        assert words[:5] == ["batch_size", str(v), str(8 * v), "fp16-master", "2"]
        assert words[5:8] == [f"{g:+.3f}" for g in gaps] + [f"{sum(gaps) / 2:+.3f}"]
        assert words[9] == f"{(base[0] + base[1]) / 2:.3f}"
        assert words[11] == f"{abs(base[0] - base[1]):.3f}"
        assert words[12] == f"{100 * under:.2f}%"
        spread = abs(base[0] - base[1])
        m = sum(gaps) / 2
        k = sum(g > 0 for g in gaps)  # paired: seeds behind of 2, sign test by hand
        assert words[13:15] == [f"{k}/2", f"{min(1.0, 2 * (1 if k in (0, 2) else 3) / 4):.3f}"]
        assert words[15] == ("within" if abs(m) <= spread else
                             "behind" if min(gaps) > spread else
                             "ahead" if max(gaps) < -spread else "mixed")
        means.append((m, v, 100 * under))
    counts = {w: sum(s["verdict"] == w for s in stats)
              for w in ("behind", "within", "mixed", "ahead")}
    top = max(means)
    assert lines[4] == (
        f"fp16-master vs fp32: behind {counts['behind']}, within {counts['within']}, mixed "
        f"{counts['mixed']}, ahead {counts['ahead']} of 2 settings with 2+ seeds; "
        f"largest mean gap "
        f"{top[0]:+.3f} (batch_size "
        f"{top[1]}); gradient underflow {min(u for *_, u in means):.2f}-"
        f"{max(u for *_, u in means):.2f}%")


def test_train_sweep_checks_its_arguments():
    for bad, what in (([("width", [2])], "sweep axis must be one of"),
                      ([("batch_size", [])], "non-empty sequence"),
                      ([("batch_size", [0])], "batch_size"),
                      ([("batch_size",)], "(axis, values)")):
        with pytest.raises(ValueError, match=what.replace("(", r"\(").replace(")", r"\)")):
            train_sweep(bad, seeds=[0], steps=1, **TINY)
    with pytest.raises(ValueError, match="at least one seed"):
        train_sweep(seeds=[], steps=1, **TINY)
    with pytest.raises(ValueError, match="fp33"):
        train_sweep(recipes=["fp33"], steps=1, **TINY)


def test_sign_test_against_the_binomial_by_hand():
    """Six seeds: 6 of 6 behind is 2/64 two-sided, 5 of 6 is 2 * 7/64, 3 of 6 is capped at 1;
    a gap of exactly 0 is a tie and leaves the count."""
    def stats(gaps):
        runs = [_run("batch_size", 64, "fp32", s, 2.0) for s in range(len(gaps))]
        runs += [_run("batch_size", 64, "fp16-master", s, 2.0 + g) for s, g in enumerate(gaps)]
        st = gap_stats(runs)[0]
        return st["behind_seeds"], st["paired_n"], st["sign_p"]

    assert stats([0.5] * 6) == (6, 6, 2 / 64)
    assert stats([0.5] * 5 + [-0.5]) == (5, 6, 2 * 7 / 64)
    assert stats([-0.5] * 5 + [0.5]) == (1, 6, 2 * 7 / 64)
    assert stats([0.5, -0.5] * 3) == (3, 6, 1.0)
    assert stats([0.5, 0.5, 0.5, 0.0]) == (3, 3, 0.25)


@pytest.mark.parametrize("argv, what", [
    (["--train", "--steps", "x"], "--steps takes an integer, got 'x'"),
    (["--train", "--steps", "0"], "steps must be >= 1, got 0"),
    (["--train", "--seeds", "0,a"], "--seeds takes comma-separated integers, got '0,a'"),
    (["--train", "--sweep", "width=2"], "sweep axis must be one of"),
    (["--train", "--sweep", "batch_size"], "--sweep takes AXIS=V,V,..., got 'batch_size'"),
    (["--train", "--recipes", "fp33"], "fp33"),
    (["--train", "--jobs"], "--jobs needs a value"),
    (["--steps", "5"], "go with --train"),
    (["--from", "x.jsonl", "--train"], "--from takes no other option"),
    (["--from", "/nonexistent/runs.jsonl"], "No such file"),
    (["--trian"], "unknown argument '--trian'"),
])
def test_cli_bad_arguments_give_one_clear_error_line(argv, what, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("lm_sweep: error: ") and err.count("\n") == 1
    assert what in err


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_cli_help_prints_usage_and_every_option(flag, capsys):
    assert main(["--train", flag]) == 0  # as argparse: help wins over the other arguments
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("usage: python -m fpsim.training.lm_sweep")
    takes = ("--train", "--steps", "--seeds", "--recipes", "--sweep", "--jobs", "--json",
             "--from")
    assert all(f"  {o}" in out for o in takes)
    assert all(axis in out for axis in lm_sweep._AXES)


def test_cli_trains_records_and_reprints(tmp_path, monkeypatch, capsys):
    real = lm_sweep.train_sweep
    monkeypatch.setattr(lm_sweep, "train_sweep",  # the CLI's call, on the tiny model
                        lambda *a, **k: real(*a, **TINY, **k))
    path = tmp_path / "runs.jsonl"
    argv = ["--train", "--steps", "2", "--seeds", "0,1", "--sweep", "batch_size=64",
            "--recipes", "fp32,fp16-master", "--json", str(path)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    runs = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((r["seed"], r["recipe"]) for r in runs) == [
        (0, "fp16-master"), (0, "fp32"), (1, "fp16-master"), (1, "fp32")]
    table = format_train_sweep(gap_stats(runs))
    cpu = f"4 runs, {sum(r['cpu_time_s'] for r in runs):.0f} s of CPU time"
    assert out[-5:] == table.splitlines() + [cpu]
    assert len(out) == 4 + 5  # a line per finished run, the table, its summary, the time
    assert main(["--from", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == table.splitlines() + [cpu]


@pytest.mark.parametrize("runs", ["lm_train_sweep.jsonl", "lm_train_sweep_400.jsonl"])
def test_the_docs_table_is_the_recorded_runs(runs, capsys):
    """docs/lm.md's training-sweep tables are what ``--from`` prints from the runs recorded in
    docs/data (200 steps along the axes; 400 steps at 32,768 tokens)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert main(["--from", str(root / "docs/data" / runs)]) == 0
    printed = capsys.readouterr().out
    assert f"```\n{printed}```" in (root / "docs/lm.md").read_text()
