"""``fpsim lm``: a small GPT (:class:`fpsim.models.GPT`) trained on Tiny Shakespeare under
the precision recipes of :mod:`fpsim.training.lm_recipes`, measured, with nothing staged.

Every recipe starts from the same fp32 initial weights (drawn from ``seed``), sees the same
batches (random windows of the training text, drawn from ``seed`` by their own generator)
and uses the same AdamW hyper-parameters and schedule (linear warm-up, cosine decay to
``min_lr``). No gradient shift, no learning-rate factor: the gradients are the model's own.

What is measured, and how
=========================

- **Losses.** ``val_loss`` / ``train_loss``: the mean cross-entropy in nats per character
  over fixed windows spread evenly over the validation / training text, computed in float64
  from the logits the recipe's own forward pass produces (the model as the recipe runs it;
  the loss arithmetic adds nothing). The curve is evaluated every ``eval_every`` steps.
- **Gradient underflow** (``grad_underflow``). On sampled steps (every ``measure_every``) an
  exact shadow recomputes the step in fp64: a copy of the model holding the run's working
  weights (the values its forward used) takes the same batch and the same loss scale S. Its
  gradients, of every weight and of every linear layer's output, are the exact gradients of
  the step up to fp64 rounding; ``grad_underflow`` is the share of the non-zero exact values
  that round to zero in the format the run stores that gradient in (as ``fpsim demo``,
  :func:`fpsim.amp.underflow_stats`), ``grad_overflow`` the share that overflow it.
- **Non-finite and skipped steps**: steps whose gradients held inf/NaN; steps the loss
  scaler skipped; the loss scale of every step.
- **Lost updates**: non-zero AdamW updates for which ``weight + update`` rounds back to the
  weight in the format the update is written to (fp32 master or the weight's own format),
  on the sampled steps (:func:`fpsim.amp.lost_updates`).
- **Histograms** (``histograms``): exponent histograms of the exact gradients times S (weights
  and linear outputs, per layer) and of the attention logits (from the q and k each block's
  c_attn returned, :func:`attention_logits`), at the first and the last sampled step, to
  hold against each format's range; ``max_logit`` the largest |logit| seen.
- ``time_s`` (wall) and ``cpu_time_s`` (this process's CPU time) of the run.

A run that died: where a recipe keeps no state but the weights and the optimizer's (no loss
scaler that backs off, no master weights, no layer with state or random bits of its own, no
stochastic update rounding) and every weight is NaN, every later step's loss and gradients
and every evaluation are NaN whatever the batch; such steps are recorded (loss NaN, a
non-finite step, the scale unchanged) without being computed, the sampled steps still run in
full. Pure fp16 dies so on its second step; the results equal those of the run computed in
full (tests/test_lm.py; the time saved: docs/lm.md, "A run that died").

Every run uses one BLAS thread (threadpoolctl); ``run_lm(..., jobs=N)`` trains recipes in N
processes at once, with the same results as in one.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..amp import GradScaler, autocast, exponent_histogram, initialize, lost_updates, scale_loss
from ..autograd import functional as F
from ..autograd.context import matmul_accumulation, rounding_context
from ..autograd.tensor import Tensor, no_grad
from ..checks import as_int
from ..formats import FP32, FP64, Format
from ..models.text_eval import mean_loss, spread_starts, windows
from ..optim import AdamW
from ..rounding import round as fp_round
from ..state import as_seed
from .lm_recipes import LMRecipe, get_lm_recipe

__all__ = ["LMConfig", "LMRunResult", "LM_QUICK", "LM_FULL", "lm_config", "train_lm",
           "without_key_bias_noise",
           "run_lm", "batch_offsets", "attention_logits", "HIST_BINS", "QUICK_CPU_S",
           "expected_cost", "longest_first"]

HIST_BINS = range(-80, 21)  # exponents of the histograms (others counted below / above)


@dataclass
class LMConfig:
    """Model size, data and hyper-parameters of one ``fpsim lm`` run.

    >>> LMConfig().validate()
    """

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    context: int = 64
    batch_size: int = 16
    steps: int = 400
    lr: float = 1e-2
    min_lr: float = 1e-3
    warmup: int = 40
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-8
    seed: int = 0
    eval_every: int = 50
    eval_batches: int = 8  # windows of batch_size x context for each evaluation
    final_eval_batches: int = 32
    measure_every: int = 50
    init_scale: float = 2.0**16  # GradScaler's defaults (PyTorch)
    growth_interval: int = 2000
    instrument: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        for name in ("d_model", "n_layers", "n_heads", "context", "batch_size", "steps",
                     "eval_every", "eval_batches", "final_eval_batches", "measure_every",
                     "growth_interval"):
            as_int(name, getattr(self, name), 1)
        as_int("warmup", self.warmup, 0)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads "
                             f"({self.n_heads})")
        for name in ("lr", "min_lr", "eps", "init_scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if not 0 <= self.weight_decay < 1:
            raise ValueError(f"weight_decay must be in [0, 1), got {self.weight_decay!r}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        as_seed(self.seed)

    def lr_at(self, step: int) -> float:
        """The learning rate of ``step`` (0-based): linear warm-up over ``warmup`` steps, then
        cosine decay from ``lr`` to ``min_lr`` at the last step (nanoGPT's schedule).

        >>> c = LMConfig(steps=100, warmup=10, lr=1.0, min_lr=0.0)
        >>> c.lr_at(0), c.lr_at(9), round(c.lr_at(99), 6)
        (0.1, 1.0, 0.0)
        """
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        span = max(self.steps - 1 - self.warmup, 1)
        frac = min((step - self.warmup) / span, 1.0)
        return self.min_lr + 0.5 * (1.0 + math.cos(math.pi * frac)) * (self.lr - self.min_lr)


# The quick and the full configuration (docs/lm.md says why these): the reference
# model (d 64, 2 layers, batch 16 x 64, AdamW at 1e-2 with warm-up and cosine decay).
LM_QUICK: dict[str, Any] = dict(steps=400, warmup=40, eval_every=50, measure_every=50)
LM_FULL: dict[str, Any] = dict(steps=1500, warmup=100, eval_every=100, measure_every=100)


def lm_config(quick: bool = False, **overrides: Any) -> LMConfig:
    """The quick or full :class:`LMConfig` with overrides (None values ignored).

    >>> lm_config(quick=True).steps < lm_config().steps
    True
    """
    base = LM_QUICK if quick else LM_FULL
    return LMConfig(**{**base, **{k: v for k, v in overrides.items() if v is not None}})


def batch_offsets(n_tokens: int, cfg: LMConfig) -> np.ndarray:
    """The start of every training window, (steps, batch_size), from ``seed`` only (the same
    for every recipe).

    >>> batch_offsets(1000, LMConfig(steps=3, batch_size=2, context=8)).shape
    (3, 2)
    """
    rng = np.random.default_rng([as_seed(cfg.seed), 7])
    return rng.integers(0, n_tokens - cfg.context - 1, size=(cfg.steps, cfg.batch_size))


@dataclass
class _Counts:
    zeroed: int = 0
    overflowed: int = 0
    nonzero: int = 0

    def add(self, zeroed: int, overflowed: int, nonzero: int) -> None:
        self.zeroed += zeroed
        self.overflowed += overflowed
        self.nonzero += nonzero


@dataclass
class LMRunResult:
    """What one ``fpsim lm`` run measured (``summary()``: the JSON-ready part)."""

    recipe: str
    config: LMConfig
    val_loss: float
    train_loss: float
    skipped_steps: int
    nonfinite_steps: int
    grad: dict[str, dict[str, int]]  # "all" / "weights" / "activations" / per layer
    updates: dict[str, int]
    final_loss_scale: float
    first_nonfinite_step: int | None
    adam_v_underflow: float  # share of AdamW entries with v == 0 and m != 0 (sampled steps)
    max_logit: float  # the largest |attention logit| of the sampled steps
    time_s: float
    cpu_time_s: float
    step_loss: np.ndarray
    step_scale: np.ndarray
    step_skipped: np.ndarray
    eval_steps: np.ndarray
    eval_val_loss: np.ndarray
    histograms: dict[str, dict[str, Any]] = field(default_factory=dict)  # "start"/"end"

    def _frac(self, key: str, part: str = "zeroed") -> float:
        c = self.grad.get(key, {})
        return c.get(part, 0) / c["nonzero"] if c.get("nonzero") else 0.0

    @property
    def grad_underflow(self) -> float:
        """Share of the non-zero exact gradient values (sampled steps) that the run's gradient
        format rounds to zero."""
        return self._frac("all")

    @property
    def lost_update_fraction(self) -> float:
        """Share of the non-zero weight updates (sampled steps) lost to rounding."""
        n = self.updates.get("nonzero", 0)
        return self.updates.get("lost", 0) / n if n else 0.0

    def summary(self) -> dict[str, Any]:
        """The run's numbers as a JSON-ready dict."""
        layers = {k: round(self._frac(k), 8) for k in self.grad
                  if k not in ("all", "weights", "activations")}
        return {
            "recipe": self.recipe,
            "val_loss": self.val_loss,
            "train_loss": self.train_loss,
            "steps": self.config.steps,
            "seed": self.config.seed,
            "skipped_steps": self.skipped_steps,
            "grad_underflow": self.grad_underflow,
            "weight_grad_underflow": self._frac("weights"),
            "activation_grad_underflow": self._frac("activations"),
            "grad_overflow": self._frac("all", "overflowed"),
            "grad_underflow_by_layer": layers,
            "nonfinite_steps": self.nonfinite_steps,
            "first_nonfinite_step": self.first_nonfinite_step,
            "adam_v_underflow": self.adam_v_underflow,
            "max_attention_logit": self.max_logit,
            "lost_update_fraction": self.lost_update_fraction,
            "final_loss_scale": self.final_loss_scale,
            "val_curve": [[int(s), float(v)] for s, v in zip(self.eval_steps,
                                                             self.eval_val_loss, strict=True)],
            "time_s": self.time_s,
            "cpu_time_s": self.cpu_time_s,
        }


def load_text() -> tuple[np.ndarray, np.ndarray, str]:
    """Tiny Shakespeare as (train ids, validation ids, vocabulary) (internal: for lm_sweep)."""
    from ..datasets import shakespeare_chars

    return shakespeare_chars()


def build_gpt(cfg: LMConfig, vocab: int) -> Any:
    """The fp32 GPT of ``cfg`` with its seed's weights (internal: for lm_sweep)."""
    from ..models import GPT

    return GPT(vocab, cfg.context, cfg.d_model, cfg.n_layers, cfg.n_heads, rng=cfg.seed)


class OutputRecorder:
    """(Internal: for lm and lm_sweep.) Wraps the forward of every linear layer (a module
    with ``in_features`` and ``out_features``) to keep its output of the last forward, with
    ``retain_grad`` while ``active``."""

    def __init__(self, model: Any) -> None:
        self.active = False
        self.outputs: dict[str, Tensor] = {}
        self.n_heads = model.n_heads
        for name, mod in model.named_modules():
            if hasattr(mod, "in_features") and hasattr(mod, "out_features"):
                self._wrap(name, mod)

    def _wrap(self, name: str, mod: Any) -> None:
        old = mod.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            out = old(*args, **kwargs)
            if self.active and isinstance(out, Tensor) and out.requires_grad:
                out.retain_grad()
                self.outputs[name] = out
            return out

        object.__setattr__(mod, "forward", forward)

    def scores(self) -> dict[str, np.ndarray]:
        """The attention logits ``q k^T / sqrt(d / n_heads)`` of the last forward, by
        attention module, from the q and k its c_attn returned (exact products in float64,
        the causal entries only: the values the attention's matmul rounds)."""
        return {name[:-len(".c_attn")]: attention_logits(out.numpy(np.float64), self.n_heads)
                for name, out in self.outputs.items() if name.endswith("attn.c_attn")}


def attention_logits(qkv: np.ndarray, n_heads: int) -> np.ndarray:
    """The causal attention logits (float64, the lower triangle of every head, flattened) of
    c_attn's output ``qkv`` (B, T, 3d), as nanoGPT's attention forms them.

    >>> attention_logits(np.ones((1, 2, 6)), n_heads=1).round(6).tolist()  # 2 / sqrt(2)
    [1.414214, 1.414214, 1.414214]
    """
    b, t, d3 = qkv.shape
    d = d3 // 3
    hs = d // n_heads
    x = qkv.reshape(b, t, 3, n_heads, hs).transpose(2, 0, 3, 1, 4)
    s = x[0] @ x[1].swapaxes(-1, -2) / math.sqrt(hs)
    return s[..., np.tril(np.ones((t, t), bool))].ravel()


class _UpdateRecorder:
    """An optimizer update hook keeping (old, new, state) of every parameter on the steps
    it is active (the lost-update count)."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.records: list[tuple[np.ndarray, np.ndarray, dict]] = []
        self.active = False
        # AdamW entries whose stored second moment is 0 while the first is not (the second
        # moment underflowed in its storage format; in fp16, eps = 1e-8 rounds away in
        # sqrt(v) + eps, so the update is m / 0)
        self.v_zero = 0
        self.entries = 0
        optimizer.register_update_hook(self)

    def __call__(self, update: Any, w: np.ndarray, g: np.ndarray, state: dict, group: dict,
                 dtype: Any) -> np.ndarray:
        if not self.active:
            return update(w, g, state, group, dtype)
        old = np.array(w, copy=True)
        new = update(w, g, state, group, dtype)
        self.records.append((old, np.asarray(new), state))
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        if m is not None and v is not None:
            m, v = np.asarray(m), np.asarray(v)
            self.v_zero += int(np.count_nonzero((v == 0) & (m != 0)))
            self.entries += int(m.size)
        return new

    def take(self) -> list[tuple[np.ndarray, np.ndarray, Format, bool]]:
        owner = {id(s): p for p, s in self.optimizer.state.items()}
        out = []
        for old, new, st in self.records:
            master = "master" in st
            out.append((old, new, FP32 if master else owner[id(st)].fmt, master))
        self.records = []
        return out


def without_key_bias_noise(name: str, exact: np.ndarray) -> np.ndarray:
    """``exact`` (a parameter's fp64 gradient) with the key third of an attention's
    ``c_attn.bias`` set to 0, its exact value: adding b_k to every key adds q . b_k to a whole
    row of logits, which the softmax ignores. fp64 leaves rounding noise there (~1e-21), which
    would count as gradient underflow in every format and under any loss scale.

    >>> without_key_bias_noise("h.0.attn.c_attn.bias", np.array([1.0, 1e-21, 2.0])).tolist()
    [1.0, 0.0, 2.0]
    """
    if not name.endswith("attn.c_attn.bias"):
        return exact
    d = exact.shape[-1] // 3
    out = np.array(exact, dtype=np.float64, copy=True)
    out[..., d:2 * d] = 0.0
    return out


def _count(exact: np.ndarray, fmt: Any) -> tuple[int, int, int]:
    """(zeroed, overflowed, non-zero) of the exact values rounded to ``fmt`` (a Format, or a
    :class:`_Quantizer` of a scaled format: overflow there is saturation)."""
    nz = exact != 0
    if isinstance(fmt, Format):
        with np.errstate(over="ignore"):
            r = np.asarray(fp_round(exact, fmt), dtype=np.float64)
        over = np.isinf(r)
    else:
        r, over = fmt(exact)
    return (int(np.count_nonzero(nz & (r == 0))), int(np.count_nonzero(nz & over)),
            int(np.count_nonzero(nz)))


@dataclass
class _Quantizer:
    """How an FP8 / MX layer turns the gradient of its output into GEMM operands (the data
    gradient's operand, round to nearest): ``q(exact)`` -> (values, saturated mask)."""

    name: str
    fn: Any

    def __call__(self, exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.fn(exact)


def _grad_quantizer(layer: Any) -> _Quantizer:
    from ..quant import FP8Linear
    from ..quant.fp8_scaling import fp8_quantize
    from ..quant.mx_layers import fake_quantize_mx

    if isinstance(layer, FP8Linear):
        gs, fmt = layer.grad_scaling, layer.bwd_fmt

        def fp8(e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            with np.errstate(over="ignore"):
                sat = np.abs(e.astype(np.float32) * gs.scale) > fmt.max
                return np.asarray(fp8_quantize(e, gs.scale, fmt), np.float64), sat

        return _Quantizer(f"{fmt.name} x delayed scale", fp8)
    if hasattr(layer, "quantize_grad"):  # the DeepSeek-V3 blockwise layer
        return _Quantizer(layer.grad_format_name, layer.quantize_grad)

    def mx(e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e2 = e.reshape(-1, e.shape[-1])
        q = fake_quantize_mx(e2, layer.fmt, 1, layer.scale_mode, "nearest_even", None,
                             layer.tensor_scale)
        return np.asarray(q, np.float64).reshape(e.shape), np.zeros(e.shape, bool)

    return _Quantizer(f"{layer.fmt} blocks", mx)


def _swap_linears(model: Any, recipe: LMRecipe, seed: int) -> dict[str, Any]:
    """Replace the blocks' nn.Linear layers by the recipe's layer (same weights and bias, same
    parameter names); the last ``recipe.keep_last`` blocks keep theirs (at most all but one).
    Returns the new
    layers by module name."""
    if recipe.linear is None:
        return {}
    from ..nn import Linear
    from ..quant import FP8Linear, MXLinear

    mods = dict(model.named_modules())
    n_layers = len(model.h)
    keep = min(recipe.keep_last, n_layers - 1)  # a one-block model keeps none in bf16
    out = {}
    for i, (name, mod) in enumerate([(n, m) for n, m in mods.items() if isinstance(m, Linear)
                                     and n.startswith("h.")]):
        if int(name.split(".")[1]) >= n_layers - keep:
            continue
        rng = np.random.default_rng([seed, 10, i])  # SR draws and Hadamard signs per layer
        if recipe.linear == "fp8-delayed":
            new = FP8Linear.from_linear(mod, amax_history_len=1024, amax_compute_algo="max",
                                        margin=0, rng=rng)
        elif recipe.linear in ("mxfp8", "mxfp8-floor"):
            new = MXLinear.from_linear(mod, recipe="mxfp8", rng=rng)
            if recipe.linear == "mxfp8-floor":
                new.scale_mode = "floor"  # the OCP rule instead of TE's RCEIL
        elif recipe.linear == "nvfp4":
            new = MXLinear.from_linear(mod, recipe="nvfp4", rng=rng, **dict(recipe.options))
        elif recipe.linear == "fp8-blockwise":
            from ..quant.blockwise_fp8 import BlockwiseFP8Linear

            new = BlockwiseFP8Linear.from_linear(mod)
        else:
            raise ValueError(f"unknown linear layer {recipe.linear!r}")
        parent, attr = name.rsplit(".", 1)
        setattr(mods[parent], attr, new)
        out[name] = new
    return out


def train_lm(recipe: str | LMRecipe, config: LMConfig | None = None, *,
             data: tuple[np.ndarray, np.ndarray, str] | None = None,
             **overrides: Any) -> LMRunResult:
    """Train the GPT under ``recipe`` with ``config`` (fields also as keywords) and measure
    it (module docstring). One BLAS thread.

    >>> r = train_lm("fp32", steps=2, d_model=16, n_heads=2, n_layers=1, context=8,
    ...              batch_size=2, eval_batches=1, final_eval_batches=1, warmup=1)
    >>> r.recipe, len(r.step_loss), r.val_loss > 0
    ('fp32', 2, True)
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return _train_lm(get_lm_recipe(recipe), config, data, overrides)


def _train_lm(recipe: LMRecipe, config: LMConfig | None, data: Any,
              overrides: dict[str, Any]) -> LMRunResult:
    if config is not None and not isinstance(config, LMConfig):
        raise TypeError(f"train_lm: config must be an LMConfig or None, got "
                        f"{type(config).__name__}")
    cfg = LMConfig(**{**(asdict(config) if config is not None else {}), **overrides})
    cfg.validate()
    train_ids, val_ids, vocab = load_text() if data is None else data
    t0, c0 = time.perf_counter(), time.process_time()

    model = build_gpt(cfg, len(vocab))
    swapped = _swap_linears(model, recipe, cfg.seed)
    params0 = dict(model.named_parameters())
    decay = [p for p in params0.values() if p.ndim >= 2]
    no_decay = [p for p in params0.values() if p.ndim < 2]
    adamw = AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr,
                  betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    rec = OutputRecorder(model)
    amp_opt = None
    if recipe.opt_level in ("O2", "O3"):
        model, amp_opt = initialize(model, adamw, recipe.opt_level, dtype=recipe.fmt,
                                    loss_scale=1.0)
    scaler = GradScaler(init_scale=cfg.init_scale, growth_interval=cfg.growth_interval) \
        if recipe.grad_scaler else None
    fwd_ctx = (lambda: autocast(recipe.autocast)) if recipe.autocast is not None \
        else contextlib.nullcontext
    # the recipe's accumulation model covers the model's forward, backward and evaluation (a
    # backward's GEMMs take the model active when they run), not the fp64 shadow's
    acc_ctx = (lambda: matmul_accumulation(recipe.accumulation)) \
        if recipe.accumulation is not None else contextlib.nullcontext
    sr_rng = np.random.default_rng([cfg.seed, 1])
    update_ctx = (lambda: rounding_context("stochastic", rng=sr_rng)) \
        if recipe.update_rounding == "stochastic" else contextlib.nullcontext
    lost_rng = np.random.default_rng([cfg.seed, 2])
    params = dict(model.named_parameters())
    upd = _UpdateRecorder(adamw) if cfg.instrument else None
    shadow = build_gpt(cfg, len(vocab)).to(FP64) if cfg.instrument else None
    srec = OutputRecorder(shadow) if shadow is not None else None
    shadow_params = dict(shadow.named_parameters()) if shadow is not None else {}

    starts = batch_offsets(len(train_ids), cfg)
    val_starts = spread_starts(len(val_ids), cfg.eval_batches * cfg.batch_size, cfg.context)
    counts: dict[str, _Counts] = {"all": _Counts(), "weights": _Counts(),
                                  "activations": _Counts()}
    updates = {"lost": 0, "nonzero": 0}
    hists: dict[str, dict[str, Any]] = {}
    step_loss = np.zeros(cfg.steps)
    step_scale = np.ones(cfg.steps)
    step_skipped = np.zeros(cfg.steps, dtype=bool)
    evals: list[tuple[int, float]] = []
    nonfinite = 0
    first_bad: int | None = None
    max_logit = 0.0
    measured_steps = [s for s in range(cfg.steps) if s % cfg.measure_every == 0]
    if cfg.steps - 1 not in measured_steps:
        measured_steps.append(cfg.steps - 1)
    # the histograms kept: the first and the last sampled step's (those of the steps between
    # would be replaced by the next one's)
    hist_steps = {measured_steps[0], measured_steps[-1]}

    # a run of a recipe that keeps no other state, once every weight is NaN, stays so: its
    # later steps and evaluations are NaN by construction and are recorded as such without
    # being computed (the sampled steps still run; tests/test_lm.py compares with the run
    # computed in full)
    may_die = _nan_is_final(recipe, scaler, amp_opt, swapped)
    dead = False

    def eval_due(step: int) -> bool:
        return (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps

    def evaluate(ids: np.ndarray, st: np.ndarray) -> float:
        if dead:
            return math.nan
        model.eval()  # FP8Linear records no amax outside training
        with no_grad(), acc_ctx(), fwd_ctx():
            loss = mean_loss(lambda x: model(x).numpy(np.float64), ids, st, cfg.context,
                             cfg.batch_size)
        model.train()
        return loss

    for step in range(cfg.steps):
        lr = cfg.lr_at(step)
        for group in adamw.param_groups:
            group["lr"] = lr
        x, y = windows(train_ids, starts[step], cfg.context)
        measured = cfg.instrument and step in measured_steps
        rec.active = measured
        if upd is not None:
            upd.active = measured
        if dead and not measured:
            step_loss[step] = math.nan
            step_scale[step] = amp_opt.scaler.get_scale() if amp_opt is not None else 1.0
            nonfinite += 1
            if eval_due(step):
                evals.append((step + 1, evaluate(val_ids, val_starts)))
            continue
        adamw.zero_grad()
        with acc_ctx(), fwd_ctx():
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        step_loss[step] = loss.item()
        scores = rec.scores() if measured else {}  # before backward: outputs are kept
        for v in scores.values():
            if v.size:
                max_logit = max(max_logit, float(np.max(np.abs(v))))
        if scaler is not None:
            scaled_loss = scaler.scale(loss)
            scale = scaler.get_scale()
            with acc_ctx():
                scaled_loss.backward()
        elif amp_opt is not None:
            scale = amp_opt.scaler.get_scale()
        else:
            scale = 1.0
            with acc_ctx():
                loss.backward()
        step_scale[step] = scale
        if amp_opt is not None:
            with scale_loss(loss, amp_opt) as scaled:
                with acc_ctx():
                    scaled.backward()
                grads = {n: p.grad for n, p in params.items() if p.grad is not None}
                bad = any(not np.isfinite(g).all() for g in grads.values())
                if measured:
                    _measure(recipe, rec, srec, shadow, shadow_params, params, grads, x, y,
                             scale, counts, hists if step in hist_steps else None, step,
                             scores, swapped)
        else:
            grads = {n: p.grad for n, p in params.items() if p.grad is not None}
            bad = any(not np.isfinite(g).all() for g in grads.values())
            if measured:
                _measure(recipe, rec, srec, shadow, shadow_params, params, grads, x, y, scale,
                         counts, hists if step in hist_steps else None, step, scores, swapped)
        nonfinite += bad
        if bad and first_bad is None:
            first_bad = step + 1
        rec.outputs = {}
        with update_ctx():
            if scaler is not None:
                scaler.step(adamw)
                scaler.update()
                step_skipped[step] = bool(scaler.history[-1]["skipped"])
            elif amp_opt is not None:
                amp_opt.step()
                step_skipped[step] = amp_opt.last_step_skipped
            else:
                adamw.step()
        if upd is not None and measured:
            for old, new, fmt, master in upd.take():
                with np.errstate(invalid="ignore", over="ignore"):
                    u = new.astype(np.float64) - old.astype(np.float64)
                sr = recipe.update_rounding == "stochastic" and not master
                r = lost_updates(old.astype(np.float64), u, fmt,
                                 "stochastic" if sr else "nearest_even",
                                 **({"rng": lost_rng} if sr else {}))
                updates["lost"] += r.lost
                updates["nonzero"] += r.nonzero
        if may_die and bad and not dead:
            dead = _all_nan(params.values())
        if eval_due(step):
            evals.append((step + 1, evaluate(val_ids, val_starts)))

    n_final = cfg.final_eval_batches * cfg.batch_size
    val_loss = evaluate(val_ids, spread_starts(len(val_ids), n_final, cfg.context))
    train_loss = evaluate(train_ids, spread_starts(len(train_ids), n_final, cfg.context))
    final_scale = scaler.get_scale() if scaler is not None else (
        amp_opt.scaler.get_scale() if amp_opt is not None else 1.0)
    return LMRunResult(
        recipe=recipe.name, config=cfg, val_loss=val_loss, train_loss=train_loss,
        skipped_steps=int(step_skipped.sum()), nonfinite_steps=int(nonfinite),
        grad={k: asdict(v) for k, v in counts.items()}, updates=updates,
        final_loss_scale=float(final_scale), first_nonfinite_step=first_bad,
        max_logit=max_logit,
        adam_v_underflow=upd.v_zero / upd.entries if upd is not None and upd.entries else 0.0,
        time_s=time.perf_counter() - t0,
        cpu_time_s=time.process_time() - c0, step_loss=step_loss, step_scale=step_scale,
        step_skipped=step_skipped, eval_steps=np.array([e[0] for e in evals]),
        eval_val_loss=np.array([e[1] for e in evals]), histograms=hists)


def _nan_is_final(recipe: LMRecipe, scaler: GradScaler | None, amp_opt: Any,
                  swapped: dict[str, Any]) -> bool:
    """Whether a run of ``recipe`` whose weights are all NaN stays NaN with nothing else
    changing: no loss scaler that backs off (GradScaler, Apex's dynamic scale), no master
    weights, no swapped layer with state or random bits of its own (FP8 amax histories, MX
    stochastic rounding), no stochastically rounded update; the AdamW state then matters no
    more (a NaN weight's update is NaN)."""
    if scaler is not None or swapped or recipe.update_rounding == "stochastic":
        return False
    return amp_opt is None or not (amp_opt.scaler.dynamic
                                   or amp_opt.properties.master_weights)


def _all_nan(params: Any) -> bool:
    """Whether every value of every parameter is NaN."""
    return all(bool(np.isnan(p.data).all()) for p in params)


def _hist(values: np.ndarray) -> dict[str, Any]:
    h = exponent_histogram(values, HIST_BINS)
    return {"counts": h.counts.tolist(), "zeros": h.zeros, "nonfinite": h.nonfinite,
            "below": h.below, "above": h.above}


def _measure(recipe: LMRecipe, rec: OutputRecorder, srec: OutputRecorder, shadow: Any,
             shadow_params: dict, params: dict, grads: dict, x: np.ndarray, y: np.ndarray,
             scale: float, counts: dict[str, _Counts], hists: dict | None, step: int,
             scores: dict[str, np.ndarray], swapped: dict[str, Any]) -> None:
    """The exact fp64 shadow of this step and the counts against it (module docstring); the
    step's histograms into ``hists`` unless it is None."""
    for name, p in params.items():
        shadow_params[name].data = p.numpy(np.float64)
    shadow.zero_grad()
    srec.active = True
    logits = shadow(x)
    loss64 = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss64.backward()
    srec.active = False
    pairs = []
    for name in grads:
        # under autocast a weight's gradient is computed in the autocast format (its cast
        # copy's) and only then widened into the fp32 weight's gradient (linear weights and
        # biases, and the tied head's wte; layer norms compute in fp32); an FP8 / MX layer's
        # weight gradient leaves its GEMM in fp32
        owner = name.rsplit(".", 1)[0]
        lowered = params[name].ndim >= 2 or (name.endswith(".bias") and ".ln_" not in name
                                              and not name.startswith("ln_"))
        fmt = recipe.autocast if recipe.autocast is not None and lowered \
            and owner not in swapped else params[name].grad_fmt
        exact = np.asarray(shadow_params[name].grad, np.float64)
        pairs.append(("weights", name, without_key_bias_noise(name, exact), fmt))
    for name, out in rec.outputs.items():
        s = srec.outputs.get(name)
        if out.grad is not None and s is not None and s.grad is not None:
            q = _grad_quantizer(swapped[name]) if name in swapped else out.grad_fmt
            pairs.append(("activations", f"{name}.out", s.grad, q))
    srec.outputs = {}
    phase = "start" if step == 0 else "end"
    if hists is not None:
        hists[phase] = {"step": step, "scale": scale, "grads": {}, "formats": {},
                        "scores": {k: _hist(v) for k, v in scores.items()}}
    for kind, name, exact, fmt in pairs:
        exact = np.asarray(exact, np.float64) * scale
        z, o, n = _count(exact, fmt)
        counts["all"].add(z, o, n)
        counts[kind].add(z, o, n)
        counts.setdefault(name, _Counts()).add(z, o, n)
        if hists is not None:
            hists[phase]["grads"][name] = _hist(exact)
            hists[phase]["formats"][name] = fmt.name


# Each recipe's CPU seconds in the quick configuration: the runs' own cpu_time_s of
# `fpsim lm --quick --json` (all twelve recipes, two jobs, the idle 2-core machine,
# 2026-12-07 11:07 UTC, the first run with pure fp16's dead steps not computed; 228.0 s in
# all, docs/lm.md, "A run that died"). Only their ratios matter: run_lm starts the costliest
# recipes first.
QUICK_CPU_S: dict[str, float] = {
    "fp32": 8.7, "fp16": 1.2, "fp16-master": 26.3, "mixed-fp16": 21.9, "mixed-bf16": 17.5,
    "bf16": 17.2, "bf16-sr": 21.5, "fp8-delayed": 20.0, "fp8-blockwise": 20.5, "mxfp8": 22.7,
    "mxfp8-floor": 22.4, "nvfp4": 28.6}


def expected_cost(name: str) -> float:
    """The relative CPU cost of training recipe ``name`` (:data:`QUICK_CPU_S`). NVFP4's
    ablations cost nvfp4's (the same layers); a recipe not measured costs the most measured
    one's, so that it starts early (a long run started last stretches the whole run most).

    >>> expected_cost("fp32") < expected_cost("nvfp4") == expected_cost("nvfp4-no-rht")
    True
    """
    recipe = get_lm_recipe(name)
    if recipe.name in QUICK_CPU_S:
        return QUICK_CPU_S[recipe.name]
    if recipe.linear in QUICK_CPU_S:
        return QUICK_CPU_S[recipe.linear]
    return max(QUICK_CPU_S.values())


def longest_first(names: Sequence[str]) -> list[int]:
    """The indices of ``names`` by decreasing :func:`expected_cost`, ties in their order: the
    longest-processing-time-first order, in which a pool of workers that each take the next
    job when free ends its last jobs closest together.

    >>> longest_first(["fp32", "nvfp4", "bf16"])
    [1, 2, 0]
    """
    costs = [expected_cost(n) for n in names]
    return sorted(range(len(names)), key=lambda i: -costs[i])


def run_lm(recipes: Sequence[str] | None = None, quick: bool = False, seed: int = 0,
           jobs: int = 1, **overrides: Any) -> list[LMRunResult]:
    """Train each recipe (all by default) with the same seed, batches and hyper-parameters;
    ``jobs`` > 1 trains them in that many processes, the costliest first
    (:func:`longest_first`; the results depend on neither). Returns the results in the order
    of ``recipes``.

    >>> rs = run_lm(["fp32"], steps=1, d_model=16, n_heads=2, n_layers=1, context=8,
    ...             batch_size=2, eval_batches=1, final_eval_batches=1, warmup=0)
    >>> [r.recipe for r in rs]
    ['fp32']
    """
    from .lm_recipes import LM_RECIPES

    names = list(LM_RECIPES) if recipes is None else [get_lm_recipe(n).name for n in recipes]
    cfg = lm_config(quick, seed=seed, **overrides)
    cfg.validate()
    jobs = min(as_int("jobs", jobs, 1), len(names))
    # the text once, for every job: decompressing it costs ~25 ms, sending it ~1 ms
    data = load_text()
    if jobs <= 1:
        return [train_lm(n, cfg, data=data) for n in names]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context()) as pool:
        futures = {i: pool.submit(train_lm, names[i], cfg, data=data)
                   for i in longest_first(names)}
        return [futures[i].result() for i in range(len(names))]
