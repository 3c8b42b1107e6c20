"""``fpsim lm`` (issue 31): the recipes, the JSON contract, the CLI's checks, the findings'
conditions, and (slow) the quick configuration's numbers and every finding it prints."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fpsim.cli import main
from fpsim.training import lm_report
from fpsim.training.lm import (
    QUICK_CPU_S,
    LMConfig,
    batch_offsets,
    expected_cost,
    lm_config,
    longest_first,
    run_lm,
    train_lm,
)
from fpsim.training.lm_recipes import LM_RECIPES, get_lm_recipe, parse_recipes

TINY = dict(steps=3, d_model=16, n_heads=2, n_layers=1, context=8, batch_size=4,
            eval_batches=1, final_eval_batches=1, warmup=1, eval_every=2, measure_every=1)
FIRST = ["fp32", "fp16", "fp16-master", "mixed-fp16", "mixed-bf16", "bf16", "bf16-sr"]
JSON_KEYS = {"recipe", "val_loss", "train_loss", "steps", "skipped_steps", "grad_underflow",
             "nonfinite_steps", "time_s", "cpu_time_s"}


def test_recipe_names_are_the_issues():
    assert list(LM_RECIPES) == FIRST + ["fp8-delayed", "fp8-blockwise", "mxfp8", "mxfp8-floor",
                                        "nvfp4"]
    assert parse_recipes(None) == list(LM_RECIPES)
    assert parse_recipes(" FP32 ,bf16") == ["fp32", "bf16"]
    for bad, what in (("fp33", "valid: fp32"), ("fp32,fp32", "more than once"),
                      (" , ", "needs recipe names")):
        with pytest.raises(ValueError, match=what):
            parse_recipes(bad)
    with pytest.raises(ValueError, match="unknown lm recipe"):
        get_lm_recipe(3)


def test_config_checks_and_schedule():
    with pytest.raises(ValueError, match="multiple of n_heads"):
        LMConfig(d_model=10, n_heads=4).validate()
    with pytest.raises(ValueError, match="steps"):
        LMConfig(steps=0).validate()
    with pytest.raises(ValueError, match="lr"):
        LMConfig(lr=float("nan")).validate()
    c = LMConfig(steps=50, warmup=5, lr=1.0, min_lr=0.1)
    lrs = [c.lr_at(s) for s in range(50)]
    assert lrs[4] == 1.0 and math.isclose(lrs[-1], 0.1)
    assert all(a <= b for a, b in zip(lrs[:5], lrs[1:5], strict=False))  # warm-up rises
    assert all(a >= b for a, b in zip(lrs[5:], lrs[6:], strict=False))  # cosine falls


def test_batches_depend_on_the_seed_only():
    a = batch_offsets(10_000, lm_config(True, seed=1))
    assert np.array_equal(a, batch_offsets(10_000, lm_config(True, seed=1, lr=0.5)))
    assert not np.array_equal(a, batch_offsets(10_000, lm_config(True, seed=2)))
    assert a.min() >= 0 and a.max() < 10_000 - 64 - 1


@pytest.fixture(scope="module")
def tiny_runs():
    return run_lm(FIRST, **TINY)


def test_same_start_for_every_recipe(tiny_runs):
    # same initial weights and first batch: the first losses agree to the formats' precision
    first = {r.recipe: r.step_loss[0] for r in tiny_runs}
    for name, v in first.items():
        tol = 1e-6 if name == "fp32" else 3e-2
        assert abs(v - first["fp32"]) <= tol * first["fp32"], name


def test_json_lines_have_the_contract_fields(tiny_runs):
    lines = lm_report.lm_json_lines(tiny_runs).splitlines()
    assert len(lines) == len(FIRST)
    for line, name in zip(lines, FIRST, strict=True):
        d = json.loads(line)
        assert JSON_KEYS <= d.keys()
        assert d["recipe"] == name and d["steps"] == TINY["steps"]
        assert 0.0 <= d["grad_underflow"] <= 1.0
        assert d["cpu_time_s"] > 0 and d["time_s"] > 0


def test_json_is_strict_for_a_diverged_run(tiny_runs):
    r = tiny_runs[0]
    saved = r.val_loss
    try:
        r.val_loss = float("nan")
        d = json.loads(lm_report.lm_json_lines([r]))  # no bare NaN in the line
        assert d["val_loss"] is None
    finally:
        r.val_loss = saved


def test_scaling_and_formats_measured(tiny_runs):
    by = {r.recipe: r for r in tiny_runs}
    # fp32 gradients keep every value an fp16 without scaling loses some of
    assert by["fp16-master"].grad_underflow > by["mixed-fp16"].grad_underflow
    assert by["mixed-fp16"].final_loss_scale == 2.0**16  # PyTorch's init, no growth yet
    assert by["fp32"].lost_update_fraction == 0.0
    assert by["bf16"].lost_update_fraction > 0.0
    for r in tiny_runs:
        assert set(r.histograms) == {"start", "end"}


@pytest.mark.parametrize("recipe", ["mixed-fp16", "mxfp8"])
def test_histograms_of_the_kept_steps_only(monkeypatch, recipe):
    """The histograms are drawn on the first and the last sampled step only: the same as
    drawing them on every sampled step (the route before), where each step's replaced the
    previous one's."""
    from fpsim.training import lm

    kw = {**TINY, "steps": 4}  # sampled steps 0 to 3: histograms of 0 and 3
    fast = train_lm(recipe, **kw)
    real, seen = lm._measure, []

    def every_step(*args):
        args = list(args)
        seen.append(args[11] is not None)
        if args[11] is None:  # the dict the kept steps fill (step 0 has it first)
            args[11] = every_step.hists
        every_step.hists = args[11]
        return real(*args)

    monkeypatch.setattr(lm, "_measure", every_step)
    slow = train_lm(recipe, **kw)
    assert seen == [True, False, False, True]
    assert fast.histograms == slow.histograms
    assert fast.histograms["end"]["step"] == 3 and fast.histograms["start"]["step"] == 0


def test_low_precision_linears_swapped_and_measured():
    runs = run_lm(["fp8-delayed", "fp8-blockwise", "mxfp8", "mxfp8-floor", "nvfp4"], **TINY)
    for r in runs:
        assert np.isfinite(r.val_loss), r.recipe
        fmts = set(r.histograms["end"]["formats"].values())
        assert any("e5m2" in f or "e4m3" in f or "mxfp8" in f or "nvfp4" in f for f in fmts), \
            (r.recipe, fmts)
    # fp8-delayed's first step quantizes gradients with scale 1 (no amax seen yet: TE's
    # delayed scaling), so more of them underflow e5m2 than MXFP8's per-block scales lose
    by = {r.recipe: r for r in runs}
    assert by["fp8-delayed"].grad_underflow > by["mxfp8"].grad_underflow
    # the figure takes scaled quantizers' names (no fixed range) beside formats
    from fpsim.viz.lm import histogram_figure

    assert len(histogram_figure(runs).axes) == 2 * len(runs)


def test_nvfp4_ablations_run_by_name():
    from fpsim.training.lm_recipes import ABLATIONS

    assert parse_recipes("nvfp4-no-rht,nvfp4") == ["nvfp4-no-rht", "nvfp4"]
    assert not set(ABLATIONS) & set(parse_recipes(None))  # not in the default set
    r = train_lm("nvfp4-no-sr", **TINY)
    assert np.isfinite(r.val_loss)
    with pytest.raises(ValueError, match="nvfp4-no-rht"):
        get_lm_recipe("nvfp4-nope")


@pytest.mark.parametrize("recipe, kind", [("fp32", "sgemm"), ("fp32-dgemm", "fp32"),
                                           ("mixed-bf16", "fp32")])
def test_recipe_gemms_run_under_its_accumulation_model(monkeypatch, recipe, kind):
    # every GEMM of the trained model (forward, backward, evaluation) under the recipe's
    # model; the fp64 shadow's (the exact gradients of grad_underflow) under the default
    import fpsim.autograd.accumulate as acc

    seen = set()
    real = acc.gemm_acc

    def spy(a, b, model, in_fmt):
        seen.add((model.kind, in_fmt.name))
        return real(a, b, model, in_fmt)

    monkeypatch.setattr(acc, "gemm_acc", spy)
    r = train_lm(recipe, **TINY)
    assert np.isfinite(r.val_loss) and r.grad_underflow is not None
    assert {k for k, f in seen if f != "fp64"} == {kind}
    assert {k for k, f in seen if f == "fp64"} == {"fp32"}  # the shadow (fp64 skips fp32)
    assert (recipe in LM_RECIPES) != recipe.endswith("-dgemm")  # a control: not by default


DYING = dict(TINY, steps=12, eval_every=4, measure_every=5)


def _same_result(a, b) -> None:
    """Every field of two LMRunResults equal (NaN equal to NaN), but the times."""
    import dataclasses

    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in ("time_s", "cpu_time_s"):
            continue
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y, equal_nan=True), f.name
        elif isinstance(x, float) and math.isnan(x):
            assert math.isnan(y), f.name
        else:
            assert repr(x) == repr(y), f.name  # nested dicts: NaN prints alike


@pytest.mark.parametrize("recipe, kill", [
    ("fp16", {}),  # dies by itself (AdamW's second moment underflows fp16)
    # the other recipes that may stop, made to die by a learning rate that overflows
    ("bf16", {"lr": 1e30}), ("mixed-bf16", {"lr": 1e30}), ("fp32", {"lr": 1e30}),
    ("fp32-dgemm", {"lr": 1e30}),
])
def test_a_dead_run_records_what_computing_it_gives(monkeypatch, recipe, kill):
    # every weight is NaN after the second step: the later unsampled steps and the
    # evaluations are recorded as NaN without running, with the result of the run computed
    # in full (the shortcut turned off), sampled steps and histograms included
    from fpsim.autograd import functional
    from fpsim.training import lm

    calls = []
    real = functional.cross_entropy

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(functional, "cross_entropy", counted)
    config = dict(DYING, **kill)
    short = train_lm(recipe, **config)
    n_short = len(calls)
    monkeypatch.setattr(lm, "_nan_is_final", lambda *args: False)
    full = train_lm(recipe, **config)
    assert full.nonfinite_steps == DYING["steps"] - 1 and math.isnan(full.val_loss)
    _same_result(short, full)
    # steps 0, 5, 10 and 11 sampled (each with its fp64 shadow), 1 before the weights died
    assert n_short == 4 * 2 + 1 < len(calls) - n_short


@pytest.mark.parametrize("recipe, final", [
    ("fp16", True), ("bf16", True), ("mixed-bf16", True), ("fp32", True),
    ("fp16-master", False),  # fp32 master weights
    ("mixed-fp16", False),  # a GradScaler backs off
    ("bf16-sr", False),  # random bits in every update
    ("mxfp8", False), ("fp8-delayed", False),  # layers with state of their own
])
def test_only_recipes_without_other_state_stop_at_nan(monkeypatch, recipe, final):
    from fpsim.training import lm

    seen = []
    real = lm._nan_is_final
    monkeypatch.setattr(lm, "_nan_is_final", lambda *args: seen.append(real(*args)) or False)
    train_lm(recipe, **dict(TINY, steps=1))
    assert seen == [final]


def test_jobs_do_not_change_results():
    # the pool starts nvfp4, then bf16-sr, then fp32 (longest first); results in this order
    names = ["fp32", "bf16-sr", "nvfp4"]
    assert longest_first(names) == [2, 1, 0]
    one = run_lm(names, jobs=1, **TINY)
    two = run_lm(names, jobs=2, **TINY)
    assert [r.recipe for r in one] == [r.recipe for r in two] == names
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a.step_loss, b.step_loss)
        assert a.val_loss == b.val_loss and a.train_loss == b.train_loss
        assert a.grad == b.grad and a.updates == b.updates
        assert a.histograms == b.histograms


def test_jobs_share_the_parents_text(monkeypatch, tmp_path):
    # every process that loads the text writes its id: only the parent does (forked workers
    # would run this patched loader too)
    import os

    from fpsim.training import lm

    real = lm.load_text

    def spy():
        with open(tmp_path / "loads", "a") as f:
            f.write(f"{os.getpid()}\n")
        return real()

    monkeypatch.setattr(lm, "load_text", spy)
    run_lm(["fp32", "bf16"], jobs=2, **TINY)
    assert (tmp_path / "loads").read_text().split() == [str(os.getpid())]


def test_expected_costs_cover_every_recipe():
    assert set(QUICK_CPU_S) == set(LM_RECIPES)
    assert longest_first(list(LM_RECIPES))[0] == list(LM_RECIPES).index("nvfp4")
    # the cheapest: pure fp16, whose steps after its weights turn NaN are not computed
    assert longest_first(list(LM_RECIPES))[-1] == list(LM_RECIPES).index("fp16")
    assert longest_first(["bf16", "bf16"]) == [0, 1]  # ties keep their order
    assert expected_cost("fp32-dgemm") == max(QUICK_CPU_S.values())  # not measured: early
    with pytest.raises(ValueError, match="unknown lm recipe"):
        expected_cost("fp33")


def test_cli_refuses_bad_arguments_before_training(tmp_path, capsys):
    assert main(["lm", "--recipes", "fp33"]) == 2
    assert "valid: fp32" in capsys.readouterr().err
    assert main(["lm", "--jobs", "0", "--no-plots"]) == 2
    assert "--jobs" in capsys.readouterr().err
    assert main(["lm", "--steps", "0", "--no-plots"]) == 2
    assert "steps" in capsys.readouterr().err


def test_cli_does_not_overwrite_files(tmp_path, capsys):
    (tmp_path / "lm_results.json").write_text("mine")
    assert main(["lm", "--steps", "1", "--recipes", "fp32", "--out", str(tmp_path)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (tmp_path / "lm_results.json").read_text() == "mine"


@pytest.mark.slow  # ~10 s: two short training runs through the command line
def test_cli_json_and_outputs(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["lm", "--steps", "2", "--recipes", "fp32,mixed-bf16", "--json", "--jobs",
                 "1", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x)["recipe"] for x in lines] == ["fp32", "mixed-bf16"]
    for f in ("lm_results.json", "lm_val_loss.png", "lm_histograms.png"):
        assert (out / f).stat().st_size > 0
    saved = json.loads((out / "lm_results.json").read_text())
    assert saved[0]["histograms"]["start"]["grads"]


def _fake(recipe, val, **kw):
    from types import SimpleNamespace

    base = dict(recipe=recipe, val_loss=val, train_loss=val, skipped_steps=0,
                nonfinite_steps=0, grad_underflow=0.0, lost_update_fraction=0.0,
                final_loss_scale=1.0, first_nonfinite_step=None, adam_v_underflow=0.0,
                max_logit=0.0,
                config=LMConfig())
    return SimpleNamespace(**{**base, **kw})


def test_findings_are_not_printed_when_the_runs_do_not_support_them():
    base = _fake("fp32", 2.5)
    # mixed precision far from fp32: the "matches" finding is gone, the "missed" one printed
    runs = [base, _fake("mixed-fp16", 2.6), _fake("mixed-bf16", 2.51)]
    assert "mixed-bf16" in lm_report.f_mixed_close(runs)
    assert "mixed-fp16" not in lm_report.f_mixed_close(runs)
    assert "mixed-fp16 +0.100" in lm_report.f_mixed_far(runs)
    assert lm_report.f_mixed_far([base, _fake("mixed-fp16", 2.52)]) is None
    # underflow finding needs more underflow without scaling than with
    same = [base, _fake("fp16-master", 2.5, grad_underflow=0.1),
            _fake("mixed-fp16", 2.5, grad_underflow=0.1)]
    assert lm_report.f_no_scaling_underflow(same) is None
    more = [base, _fake("fp16-master", 2.6, grad_underflow=0.1),
            _fake("mixed-fp16", 2.5, grad_underflow=0.01)]
    assert "+0.100 nats from fp32" in lm_report.f_no_scaling_underflow(more)
    # pure fp16: only when it had inf/NaN
    assert lm_report.f_pure_fp16([base, _fake("fp16", 2.5)]) is None
    s = lm_report.f_pure_fp16([base, _fake("fp16", math.nan, nonfinite_steps=5,
                                            first_nonfinite_step=3, adam_v_underflow=0.2)])
    assert "step 3" in s and "20%" in s
    # bf16-sr: only a gap larger than the noise
    b = [base, _fake("bf16", 2.51, lost_update_fraction=0.3), _fake("bf16-sr", 2.5)]
    assert lm_report.f_bf16_sr(b) is None
    b[1].val_loss = 2.6
    assert "+0.100 from fp32" in lm_report.f_bf16_sr(b)
    assert lm_report.lm_findings([]) == []
    # bf16 storage: only when pure bf16 misses fp32 and mixed-bf16 does not
    st = [base, _fake("bf16", 2.8, lost_update_fraction=0.2), _fake("mixed-bf16", 2.51),
          _fake("bf16-sr", 2.79)]
    assert "no better than round to nearest" in lm_report.f_bf16_storage(st)
    st[2].val_loss = 2.6
    assert lm_report.f_bf16_storage(st) is None
    # fp8: each recipe sorted by the tolerance
    f8 = lm_report.f_fp8([base, _fake("fp8-delayed", 2.55), _fake("nvfp4", 2.7)])
    assert "within 0.1 nats of fp32: fp8-delayed +0.050" in f8
    assert "further than 0.1 nats from fp32: nvfp4 +0.200" in f8
    assert lm_report.f_fp8([base]) is None


@pytest.mark.slow
def test_quick_configuration_and_its_findings():
    """The quick configuration (the first seven recipes): the issue's targets, and the
    condition of every finding it prints."""
    runs = run_lm(FIRST, quick=True, jobs=2)
    by = {r.recipe: r for r in runs}
    f32 = by["fp32"].val_loss
    assert f32 < 2.7
    for name in ("mixed-fp16", "mixed-bf16"):
        assert abs(by[name].val_loss - f32) <= lm_report.MIXED_TOL, name
    printed = lm_report.lm_findings(runs)
    assert printed[0].startswith("fp32 reached")
    for s in printed:
        if s.startswith("Pure fp16"):
            assert by["fp16"].nonfinite_steps > 0
        if s.startswith("Without loss scaling"):
            assert by["fp16-master"].grad_underflow > by["mixed-fp16"].grad_underflow
        if s.startswith("Pure bf16 lost"):
            assert by["bf16"].val_loss > by["bf16-sr"].val_loss + lm_report.NOISE
        if s.startswith("Pure bf16 ended"):
            assert by["bf16"].val_loss - f32 > lm_report.MIXED_TOL
            assert abs(by["mixed-bf16"].val_loss - f32) <= lm_report.MIXED_TOL
    assert not any(s.startswith("Mixed precision missed") for s in printed)


@pytest.mark.parametrize("max_logit", [11.1, 12.0, 30.0, 300.0])
def test_softmax_without_max_fails_and_the_fix_works(max_logit):
    from fpsim.training.lm_overflow import softmax_case

    for c in softmax_case(max_logit):
        assert c.naive_failed and c.fixed_ok, c.what


def test_softmax_below_the_edge_is_fine_both_ways():
    # the naive form only fails past fp16's range: 11.0 < ln(65504) with 64 small logits
    from fpsim.training.lm_overflow import softmax_case

    c = softmax_case(11.0)[0]
    assert not c.naive_failed and c.fixed_ok


@pytest.mark.parametrize("outlier", [300.0, 1000.0, 30000.0])
def test_layer_norm_statistics_in_fp16_fail_and_fp32_works(outlier):
    from fpsim.training.lm_overflow import layer_norm_case

    c = layer_norm_case(outlier)
    assert c.naive_failed and c.fixed_ok


def test_layer_norm_small_values_fine_in_fp16():
    from fpsim.training.lm_overflow import layer_norm_case

    assert not layer_norm_case(100.0).naive_failed  # 99^2 < 65504


def test_loss_in_fp16_fails_and_fp32_works():
    from fpsim.training.lm_overflow import loss_case

    for c in loss_case():
        assert c.naive_failed and c.fixed_ok, c.what
    small = loss_case(tokens=1024)[0]  # 1024 x 4.2 = 4300 fits fp16
    assert not np.isinf(small.naive).any()


def test_underflow_at_init_grows_with_tokens_per_batch():
    # the loss is a mean over tokens: activation gradients shrink as 1 / tokens, so more of
    # them fall below fp16's smallest subnormal (the sweep of docs/lm.md)
    from fpsim.training.lm_sweep import underflow_at_init

    few = underflow_at_init(d_model=32, n_heads=4, batch_size=2, context=32)
    many = underflow_at_init(d_model=32, n_heads=4, batch_size=32, context=32)
    assert many["tokens"] == 16 * few["tokens"]
    assert many["activation_underflow"] > few["activation_underflow"]
    assert many["activation_norm_lost"] > few["activation_norm_lost"]


def test_underflow_norm_share_against_a_direct_count(monkeypatch):
    """The norm share lost equals ||g[underflow]|| / ||g|| computed here from the exact
    gradients with NumPy's float16 cast (not fpsim's rounding): a gradient value is lost
    when float16 makes a non-zero value zero."""
    from fpsim.training import lm_sweep

    seen = {"arrays": []}
    real = lm_sweep.fp_round

    def spy(g, fmt):  # record each gradient the sweep rounds
        seen["arrays"].append(np.array(g, np.float64))
        return real(g, fmt)

    monkeypatch.setattr(lm_sweep, "fp_round", spy)
    cfg = dict(d_model=16, n_layers=1, n_heads=2, context=16, batch_size=8)
    r = lm_sweep.underflow_at_init(**cfg)
    g = np.concatenate([a.ravel() for a in seen["arrays"]])
    lost = (g != 0) & (g.astype(np.float16) == 0)
    assert lost.any()
    vocab = len(lm_sweep.load_text()[2])
    n_weights = sum(p.numpy().size for p in lm_sweep.build_gpt(lm_sweep.LMConfig(**cfg),
                                                       vocab).parameters())
    w, a = g[:n_weights], g[n_weights:]
    lw, la = lost[:n_weights], lost[n_weights:]
    assert r["weight_norm_lost"] == pytest.approx(np.linalg.norm(w[lw]) / np.linalg.norm(w),
                                                  rel=1e-12)
    assert r["activation_norm_lost"] == pytest.approx(np.linalg.norm(a[la]) / np.linalg.norm(a),
                                                      rel=1e-12)
    assert 0 < r["activation_norm_lost"] < r["activation_underflow"]


def test_val_loss_figure_tells_twelve_recipes_apart():
    """The colour cycle has 10 colours: the 11th and 12th recipe get another line style and
    marker, so no two of the twelve default recipes' lines look alike."""
    from types import SimpleNamespace as NS

    from fpsim.viz.lm import val_loss_figure

    runs = [NS(recipe=n, eval_steps=np.array([50, 100]), eval_val_loss=np.array([3.0, 2.5]))
            for n in LM_RECIPES]
    lines = val_loss_figure(runs).axes[0].lines
    looks = {(ln.get_color(), ln.get_linestyle(), ln.get_marker()) for ln in lines}
    assert len(lines) == len(runs) == len(looks)


def test_seed_table_means_and_targets():
    """The seed table's mean, largest gap and seeds within the issue's target, computed here
    from the rows (a NaN run counts as outside)."""
    rows = [{"recipe": "fp32", "seed": s, "val_loss": v} for s, v in enumerate((2.0, 2.5, 2.2))]
    rows += [{"recipe": "mixed-bf16", "seed": s, "val_loss": v}
             for s, v in enumerate((2.04, 2.4, 2.26))]
    rows += [{"recipe": "fp16", "seed": s, "val_loss": None} for s in range(3)]
    lines = {ln.split()[0]: ln for ln in lm_report.seed_table(rows).splitlines()[2:]}
    bf = lines["mixed-bf16"].split()
    gaps = [2.04 - 2.0, 2.4 - 2.5, 2.26 - 2.2]
    assert bf[5:10] == [f"{g:+.3f}" for g in gaps] + [f"{sum(gaps) / 3:+.3f}", "-0.100"]
    assert lines["mixed-bf16"].endswith("1 of 3 (0.05)")  # +0.04 only
    assert "nan" in lines["fp16"] and "of" not in lines["fp16"]


def test_key_bias_gradient_is_noise_and_not_counted():
    """The key third of c_attn.bias has an exact gradient of 0 (softmax ignores a constant
    added to a row of logits); fp64 leaves only rounding noise there, so the underflow counts
    read it as 0 (without_key_bias_noise) rather than as values fp16 flushes."""
    from fpsim.formats import FP64
    from fpsim.training.lm import build_gpt, load_text, without_key_bias_noise

    cfg = LMConfig(d_model=16, n_layers=1, n_heads=2, context=16, batch_size=4)
    train_ids, _, vocab = load_text()
    model = build_gpt(cfg, len(vocab)).to(FP64)
    pos = np.arange(4)[:, None] * 97 + np.arange(16)
    from fpsim.autograd import functional as F

    logits = model(train_ids[pos])
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), train_ids[pos + 1].reshape(-1)
                    ).backward()
    g = np.asarray(model.h[0].attn.c_attn.bias.grad, np.float64)
    q, k, v = np.split(g, 3)
    assert np.abs(k).max() < 1e-12 * min(np.abs(q).max(), np.abs(v).max())
    before = g.copy()
    kept = without_key_bias_noise("h.0.attn.c_attn.bias", g)
    assert np.array_equal(kept[:16], q) and np.array_equal(kept[32:], v)
    assert not kept[16:32].any() and np.array_equal(g, before)  # the input is not changed
    w = np.asarray(model.h[0].attn.c_attn.weight.grad, np.float64)
    assert without_key_bias_noise("h.0.attn.c_attn.weight", w) is w
