"""Where fp16 gradient underflow starts to matter: the exact gradients of one GPT step at
initialisation, over width, depth, tokens per batch and sequence length (issue 31, docs/lm.md).

For each configuration an fp64 GPT (nanoGPT's initialisation, seed ``seed``) takes one batch of
Tiny Shakespeare windows and backpropagates the mean cross-entropy; the share of the non-zero
gradient values (every weight, every linear layer's output) that round to zero in fp16 is
the underflow an unscaled fp16 run would meet on its first step. Beside the count, the share
of the gradient's norm those values carry (``*_norm_lost``: the L2 norm of the values that
underflow over the L2 norm of all, per kind) says how much of the step the underflow takes
away: many tiny values can carry almost none of it. The loss is a mean over tokens, so the
gradients of the activations shrink as 1 / (tokens per batch): this is the axis along which
unscaled fp16 runs out of range first.

>>> r = underflow_at_init(d_model=16, n_layers=1, n_heads=2, context=8, batch_size=2)
>>> 0.0 <= r["underflow"] <= 1.0, r["tokens"]
(True, 16)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..autograd import functional as F
from ..checks import as_int
from ..formats import FP16, FP64
from ..rounding import round as fp_round
from ..state import as_seed
from .lm import (
    LMConfig,
    OutputRecorder,
    build_gpt,
    lm_config,
    load_text,
    train_lm,
    without_key_bias_noise,
)
from .lm_recipes import get_lm_recipe

__all__ = ["underflow_at_init", "underflow_sweep", "SWEEP", "TRAIN_SWEEP", "train_sweep",
           "gap_stats", "format_train_sweep", "main"]

# (axis, values): each varies one setting of the quick configuration
SWEEP: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("d_model", (32, 64, 128, 256)),
    ("n_layers", (1, 2, 4, 8)),
    ("batch_size", (4, 16, 64, 256)),
    ("context", (16, 64, 256)),
)


def underflow_at_init(seed: int = 0, data: Any = None, **settings: Any) -> dict[str, Any]:
    """The fp16 underflow of one exact step at initialisation with ``settings`` (fields of
    :class:`~fpsim.training.lm.LMConfig`): a dict with the settings, ``tokens`` per batch,
    ``underflow`` (all values), ``activation_underflow`` (linear outputs) and
    ``weight_underflow``, and the share of each kind's gradient norm that underflows,
    ``activation_norm_lost`` and ``weight_norm_lost``."""
    cfg = LMConfig(**{"seed": seed, **settings})
    cfg.validate()
    train_ids, _, vocab = load_text() if data is None else data
    model = build_gpt(cfg, len(vocab)).to(FP64)
    rec = OutputRecorder(model)
    rec.active = True
    starts = np.random.default_rng([seed, 7]).integers(0, len(train_ids) - cfg.context - 1,
                                                        cfg.batch_size)
    pos = starts[:, None] + np.arange(cfg.context)
    x, y = train_ids[pos], train_ids[pos + 1]
    logits = model(x)
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
    counts = {"weights": [0, 0], "activations": [0, 0]}
    sq = {"weights": [0.0, 0.0], "activations": [0.0, 0.0]}  # lost, all: sums of squares
    arrays = [("weights", without_key_bias_noise(n, np.asarray(p.grad, np.float64)))
              for n, p in model.named_parameters()] + \
        [("activations", t.grad) for t in rec.outputs.values()]
    for kind, g in arrays:
        g = np.asarray(g, np.float64)
        nz = g != 0
        lost = nz & (np.asarray(fp_round(g, FP16)) == 0)
        counts[kind][0] += int(np.count_nonzero(lost))
        counts[kind][1] += int(np.count_nonzero(nz))
        sq[kind][0] += float(np.sum(np.square(g[lost])))
        sq[kind][1] += float(np.sum(np.square(g)))
    z = sum(c[0] for c in counts.values())
    n = sum(c[1] for c in counts.values())
    return {**settings, "tokens": cfg.batch_size * cfg.context,
            "underflow": z / n if n else 0.0,
            "activation_underflow": counts["activations"][0] / max(counts["activations"][1], 1),
            "weight_underflow": counts["weights"][0] / max(counts["weights"][1], 1),
            "activation_norm_lost": _norm_share(*sq["activations"]),
            "weight_norm_lost": _norm_share(*sq["weights"])}


def _norm_share(lost_sq: float, all_sq: float) -> float:
    """||lost|| / ||all|| from the sums of squares (0 for an all-zero gradient)."""
    return float(np.sqrt(lost_sq / all_sq)) if all_sq > 0 else 0.0


def underflow_sweep(seed: int = 0) -> list[dict[str, Any]]:
    """:func:`underflow_at_init` over :data:`SWEEP`, one setting varied at a time from the
    quick configuration (d 64, 2 layers, 4 heads, context 64, batch 16)."""
    data = load_text()
    out = []
    for axis, values in SWEEP:
        for v in values:
            r = underflow_at_init(seed, data, **{axis: v})
            out.append({"axis": axis, **r})
    return out


# -- training runs along the sweep's axes ---------------------------------------------------

# (axis, values) of the training sweep: tokens per batch at the quick context (256, 1,024
# and 4,096 tokens) and the deepest model of SWEEP; each varies one setting of the quick model
TRAIN_SWEEP: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("batch_size", (4, 16, 64)),
    ("n_layers", (8,)),
)
_AXES = ("d_model", "n_layers", "batch_size", "context")
EVAL_WINDOWS = 512  # windows of the final losses, the same text for every batch size


def _check_sweep(settings: Sequence[tuple[str, Sequence[int]]]) -> list[tuple[str, int]]:
    """``settings`` as (axis, value) pairs; ValueError naming a bad axis or value."""
    out = []
    for item in settings:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"a sweep setting is (axis, values), got {item!r}")
        axis, values = item
        if axis not in _AXES:
            raise ValueError(f"sweep axis must be one of {', '.join(_AXES)}, got {axis!r}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"the values of axis {axis} must be a non-empty sequence of "
                             f"integers, got {values!r}")
        out.extend((axis, as_int(axis, v, 1)) for v in values)
    return out


def _sweep_config(axis: str, value: int, seed: int, steps: int,
                  overrides: dict[str, Any]) -> LMConfig:
    """The quick configuration with ``axis`` set to ``value``, ``steps`` steps (warm-up a
    tenth of them, as the quick and full runs), evaluated once at the end on
    :data:`EVAL_WINDOWS` windows whatever the batch size."""
    base = {"steps": steps, "warmup": steps // 10, "eval_every": steps,
            "measure_every": max(steps // 4, 1), axis: value}
    bs = base.get("batch_size", overrides.get("batch_size", LMConfig.batch_size))
    base["final_eval_batches"] = max(EVAL_WINDOWS // bs, 1)
    base["eval_batches"] = 1
    cfg = lm_config(True, seed=seed, **{**base, **overrides})
    cfg.validate()
    return cfg


def _train_one(task: tuple[str, int, str, LMConfig], data: Any = None) -> dict[str, Any]:
    """One run of the training sweep as a JSON-ready dict."""
    axis, value, recipe, cfg = task
    s = train_lm(recipe, cfg, data=data).summary()
    return {"axis": axis, "value": value, "tokens": cfg.batch_size * cfg.context,
            **{k: getattr(cfg, k) for k in _AXES},
            **{k: s[k] for k in ("recipe", "seed", "steps", "val_loss", "train_loss",
                                 "grad_underflow", "skipped_steps", "nonfinite_steps",
                                 "time_s", "cpu_time_s")}}


def train_sweep(settings: Sequence[tuple[str, Sequence[int]]] = TRAIN_SWEEP,
                seeds: Sequence[int] = (0, 1, 2),
                recipes: Sequence[str] = ("fp32", "fp16-master"), steps: int = 200,
                jobs: int = 1, data: Any = None,
                progress: Callable[[dict[str, Any]], None] | None = None,
                **overrides: Any) -> list[dict[str, Any]]:
    """Train ``recipes`` (names of :data:`fpsim.training.lm_recipes.LM_RECIPES`) for
    ``steps`` steps at every setting of ``settings`` ((axis, values) pairs, one setting of
    the quick configuration varied at a time) and every seed: one dict per run with the
    setting (``axis``, ``value``, ``tokens`` per batch and the model's sizes), ``recipe``,
    ``seed``, ``val_loss``, ``train_loss``, ``grad_underflow`` (measured against the exact
    fp64 gradients on a step in four, :func:`~fpsim.training.lm.train_lm`), skipped and
    non-finite steps and times. ``overrides`` are further :class:`LMConfig` fields;
    ``jobs`` > 1 trains in that many processes (same results); ``progress`` is called with
    each run's dict as it finishes (in the order they finish). Runs in the order
    setting, seed, recipe.

    >>> rs = train_sweep([("batch_size", [2])], seeds=[0], steps=2, d_model=16, n_heads=2,
    ...                  n_layers=1, context=8)
    >>> [(r["recipe"], r["tokens"]) for r in rs]
    [('fp32', 16), ('fp16-master', 16)]
    """
    pairs = _check_sweep(settings)
    steps = as_int("steps", steps, 1)
    seeds = [as_seed(s) for s in seeds]
    if not seeds:
        raise ValueError("train_sweep needs at least one seed")
    names = [get_lm_recipe(r).name for r in recipes]
    if not names:
        raise ValueError("train_sweep needs at least one recipe")
    jobs = as_int("jobs", jobs, 1)
    tasks = [(axis, v, r, _sweep_config(axis, v, s, steps, overrides))
             for axis, v in pairs for s in seeds for r in names]
    out: list[dict[str, Any] | None] = [None] * len(tasks)
    if jobs <= 1 or len(tasks) == 1:
        data = load_text() if data is None else data
        for i, t in enumerate(tasks):
            out[i] = _train_one(t, data)
            if progress is not None:
                progress(out[i])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(min(jobs, len(tasks)),
                                 mp_context=multiprocessing.get_context()) as pool:
            futures = {pool.submit(_train_one, t): i for i, t in enumerate(tasks)}
            for f in as_completed(futures):
                out[futures[f]] = f.result()
                if progress is not None:
                    progress(out[futures[f]])
    return [r for r in out if r is not None]


def gap_stats(runs: Sequence[dict[str, Any]], baseline: str = "fp32") -> list[dict[str, Any]]:
    """Per setting and per recipe other than ``baseline``, over the seeds both ran: the
    gaps ``val_loss(recipe) - val_loss(baseline)`` by seed, their mean and sample standard
    deviation (ddof 1; 0 for one seed), the baseline's own spread over those seeds (sample
    standard deviation and range, max - min), the recipe's mean ``grad_underflow``, and
    ``verdict``: "within" where the mean gap is within the baseline's range (in absolute
    value), else "behind" / "ahead" where every seed's gap is beyond that range on the same
    side, "mixed" where the seeds disagree ("one seed" where there is no spread to compare
    with). The paired view beside it (each seed's recipe against its own baseline run, on
    the same initial weights and batches): ``behind_seeds``, the seeds whose gap is positive,
    of ``paired_n`` (the seeds whose gap is not 0), and ``sign_p``, the two-sided sign test's
    p-value, 2 P(X >= max(k, n - k)) for X ~ Binomial(n, 1/2) capped at 1 (3 of 3 seeds on
    one side: 0.25; 6 of 6: 0.031). Settings and recipes in the order they first appear in
    ``runs``.

    >>> runs = [dict(axis="batch_size", value=4, tokens=256, recipe=r, seed=s, val_loss=v,
    ...              grad_underflow=u) for r, s, v, u in [("fp32", 0, 2.0, 0.0),
    ...         ("fp32", 1, 2.2, 0.0), ("fp16", 0, 2.1, 0.1), ("fp16", 1, 2.1, 0.3)]]
    >>> st = gap_stats(runs)[0]
    >>> st["recipe"], [round(g, 6) for g in st["gaps"]], round(st["mean_gap"], 6)
    ('fp16', [0.1, -0.1], 0.0)
    >>> round(st["baseline_range"], 6), round(st["grad_underflow"], 6), st["verdict"]
    (0.2, 0.2, 'within')
    >>> st["behind_seeds"], st["paired_n"], st["sign_p"]
    (1, 2, 1.0)
    >>> gap_stats(runs[::-1])[0]["gaps"] == st["gaps"]  # by seed, whatever the runs' order
    True
    """
    by: dict[tuple[str, int], dict[str, dict[int, dict[str, Any]]]] = {}
    for r in runs:
        by.setdefault((r["axis"], r["value"]), {}).setdefault(r["recipe"], {})[r["seed"]] = r
    out = []
    for (axis, value), recs in by.items():
        base = recs.get(baseline, {})
        for name, seeds in recs.items():
            if name == baseline:
                continue
            common = sorted(s for s in seeds if s in base)  # by seed, in any file order
            if not common:
                continue
            gaps = np.array([seeds[s]["val_loss"] - base[s]["val_loss"] for s in common])
            b = np.array([base[s]["val_loss"] for s in common])
            mean = float(gaps.mean())
            rng = float(b.max() - b.min())
            behind, n = int((gaps > 0).sum()), int((gaps != 0).sum())
            tail = sum(math.comb(n, i) for i in range(max(behind, n - behind), n + 1))
            # beyond the baseline's spread on average is not enough: the seeds must agree
            verdict = "one seed" if len(common) < 2 else "within" if abs(mean) <= rng else \
                "behind" if (gaps > rng).all() else "ahead" if (gaps < -rng).all() else \
                "mixed"
            out.append({
                "axis": axis, "value": value, "tokens": seeds[common[0]]["tokens"],
                "recipe": name, "seeds": common, "gaps": gaps.tolist(), "mean_gap": mean,
                "gap_sd": float(gaps.std(ddof=1)) if len(common) > 1 else 0.0,
                "baseline": baseline, "baseline_mean": float(b.mean()),
                "baseline_sd": float(b.std(ddof=1)) if len(common) > 1 else 0.0,
                "baseline_range": rng,
                "behind_seeds": behind, "paired_n": n,
                "sign_p": min(1.0, 2 * tail / 2**n) if n else 1.0,
                "grad_underflow": float(np.mean([seeds[s]["grad_underflow"]
                                                 for s in common])),
                "verdict": verdict})
    return out


def format_train_sweep(stats: Sequence[dict[str, Any]]) -> str:
    """The table of :func:`gap_stats`' rows, one line per setting and recipe, then a line
    per recipe counting its verdicts (over the settings with more than one seed) and giving
    its largest mean gap and the range of its gradient underflow.

    >>> st = [dict(axis="batch_size", value=4, tokens=256, recipe="fp16-master",
    ...            seeds=[0, 1], gaps=[0.01, -0.03], mean_gap=-0.01, gap_sd=0.028284,
    ...            baseline="fp32", baseline_mean=2.5, baseline_sd=0.02, baseline_range=0.03,
    ...            grad_underflow=0.0123, behind_seeds=1, paired_n=2, sign_p=1.0,
    ...            verdict="within")]
    >>> row = format_train_sweep(st).splitlines()[2].split()
    >>> row[:5]
    ['batch_size', '4', '256', 'fp16-master', '2']
    >>> row[-6:]
    ['0.020', '0.030', '1.23%', '1/2', '1.000', 'within']
    >>> print(format_train_sweep(st).splitlines()[-1].replace("; ", "\\n"))
    fp16-master vs fp32: behind 0, within 1, mixed 0, ahead 0 of 1 settings with 2+ seeds
    largest mean gap -0.010 (batch_size 4)
    gradient underflow 1.23-1.23%
    """
    gaps = [" ".join(f"{g:+.3f}" for g in s["gaps"]) for s in stats]
    w = max([20, *map(len, gaps)])  # the gaps of six seeds need more than three's
    head = (f"setting         tokens  recipe       n  {'gap by seed':{w}s}  mean    sd     "
            "fp32    sd     range  underflow  paired      verdict")
    lines = [head, "-" * len(head)]
    for s, g in zip(stats, gaps, strict=True):
        setting = f"{s['axis']} {s['value']}"
        paired = f"{s['behind_seeds']}/{s['paired_n']} {s['sign_p']:.3f}"
        lines.append(
            f"{setting:14s} {s['tokens']:7d}  {s['recipe']:11s} {len(s['seeds']):2d}  "
            f"{g:{w}s}  {s['mean_gap']:+.3f}  {s['gap_sd']:.3f}  {s['baseline_mean']:.3f}  "
            f"{s['baseline_sd']:.3f}  {s['baseline_range']:.3f}  "
            f"{100 * s['grad_underflow']:8.2f}%  {paired:10s}  {s['verdict']}")
    for name in dict.fromkeys(s["recipe"] for s in stats):
        mine = [s for s in stats if s["recipe"] == name]
        n = {v: sum(s["verdict"] == v for s in mine)
             for v in ("behind", "within", "mixed", "ahead")}
        top = max(mine, key=lambda s: s["mean_gap"])
        under = [100 * s["grad_underflow"] for s in mine]
        lines.append(f"{name} vs {mine[0]['baseline']}: behind {n['behind']}, within "
                     f"{n['within']}, mixed {n['mixed']}, ahead {n['ahead']} of "
                     f"{sum(n.values())} settings with 2+ seeds; "
                     f"largest mean gap {top['mean_gap']:+.3f} ({top['axis']} {top['value']}); "
                     f"gradient underflow {min(under):.2f}-{max(under):.2f}%")
    return "\n".join(lines)


def _print_table(runs: Sequence[dict[str, Any]]) -> None:
    print(format_train_sweep(gap_stats(runs)))
    print(f"{len(runs)} runs, {sum(r['cpu_time_s'] for r in runs):.0f} s of CPU time")


_USAGE = ("usage: python -m fpsim.training.lm_sweep [--train [--steps N] [--seeds S,S,...] "
          "[--recipes R,R,...] [--sweep AXIS=V,V,...]... [--jobs N] [--json PATH]] "
          "| --from PATH")


def _help() -> str:
    """The --help text, its defaults read from :func:`train_sweep`'s signature and the axes
    from ``_AXES`` (so the text cannot drift from the code)."""
    import inspect

    d = {k: v.default for k, v in inspect.signature(train_sweep).parameters.items()}
    return f"""Without options: the fp16 underflow of one exact step at initialisation along each
axis of SWEEP (the first table of docs/lm.md's sweep section).

  --train             train --recipes at every --sweep setting and seed; print a line per
                      finished run, then the gap table and the CPU time
  --steps N           steps per run (default {d["steps"]})
  --seeds S,S,...     seeds (default {",".join(map(str, d["seeds"]))})
  --recipes R,R,...   recipes of `fpsim lm` (default {",".join(d["recipes"])})
  --sweep AXIS=V,...  one axis of {", ".join(_AXES)} varied from the
                      quick configuration (repeatable; default the sweep of docs/lm.md)
  --jobs N            processes (default {d["jobs"]}; the same results)
  --json PATH         append each run as one JSON line to PATH as it finishes
  --from PATH         the gap table of runs recorded with --json (no other option)
  -h, --help          this text"""


def _ints(option: str, text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"{option} takes comma-separated integers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fpsim.training.lm_sweep``: without options the underflow table of
    docs/lm.md (:func:`underflow_sweep`); ``--train``: :func:`train_sweep` (``--steps``,
    ``--seeds``, ``--recipes``, ``--sweep AXIS=V,V`` repeatable, ``--jobs``; ``--json PATH``
    appends each run's dict to PATH as one JSON line as it finishes) and the table of
    :func:`format_train_sweep`; ``--from PATH``: that table from runs recorded with
    ``--json``. A bad argument prints one error line and returns 2.

    >>> main(["--train", "--steps", "0"])  # the error line goes to stderr
    2
    """
    import json
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:  # as argparse: the usage and the options, exit 0
        print(f"{_USAGE}\n\n{_help()}")
        return 0
    opts: dict[str, Any] = {"sweep": []}
    takes = {"--steps", "--seeds", "--recipes", "--sweep", "--jobs", "--json", "--from"}
    try:
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--train":
                opts["train"] = True
                i += 1
                continue
            if a not in takes:
                raise ValueError(f"unknown argument {a!r} ({_USAGE})")
            if i + 1 >= len(args):
                raise ValueError(f"{a} needs a value")
            v = args[i + 1]
            i += 2
            if a == "--sweep":
                axis, eq, values = v.partition("=")
                if not eq:
                    raise ValueError(f"--sweep takes AXIS=V,V,..., got {v!r}")
                opts["sweep"].append((axis, _ints("--sweep", values)))
            elif a in ("--steps", "--jobs"):
                if not v.lstrip("-").isdigit():
                    raise ValueError(f"{a} takes an integer, got {v!r}")
                opts[a[2:]] = int(v)
            elif a == "--seeds":
                opts["seeds"] = _ints(a, v)
            elif a == "--recipes":
                opts["recipes"] = [r for r in v.split(",") if r]
            else:
                opts[a[2:]] = v
        given = {k for k, v in opts.items() if v}
        if "from" in given and given != {"from"}:
            raise ValueError("--from takes no other option")
        if given - {"train", "from"} and "train" not in given:
            raise ValueError(f"--steps, --seeds, --recipes, --sweep, --jobs and --json go "
                             f"with --train ({_USAGE})")
        if "from" in opts:
            with open(opts["from"], encoding="utf-8") as f:
                runs = [json.loads(line) for line in f if line.strip()]
            _print_table(runs)
            return 0
        if opts.get("train"):
            path = opts.get("json")

            def record(run: dict[str, Any]) -> None:
                print(f"{run['axis']} {run['value']} seed {run['seed']} {run['recipe']}: "
                      f"val {run['val_loss']:.4f}, underflow "
                      f"{100 * run['grad_underflow']:.2f}%, cpu {run['cpu_time_s']:.0f} s",
                      flush=True)
                if path is not None:
                    with open(path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(run) + "\n")

            kw = {k: opts[k] for k in ("steps", "seeds", "recipes", "jobs") if k in opts}
            runs = train_sweep(opts["sweep"] or TRAIN_SWEEP, progress=record, **kw)
            _print_table(runs)
            return 0
    except (ValueError, TypeError, KeyError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"lm_sweep: error: {msg}", file=sys.stderr)
        return 2
    for row in underflow_sweep():
        print(f"{row['axis']:10s} {row[row['axis']]:5d}  tokens {row['tokens']:6d}  "
              f"fp16 underflow {100 * row['underflow']:6.2f}%  (activations "
              f"{100 * row['activation_underflow']:6.2f}%, weights "
              f"{100 * row['weight_underflow']:6.2f}%); share of the norm lost: activations "
              f"{row['activation_norm_lost']:.1e}, weights {row['weight_norm_lost']:.1e}")
    return 0


if __name__ == "__main__":  # python -m fpsim.training.lm_sweep: the tables of docs/lm.md
    raise SystemExit(main())
