"""One instrumented training run: a model trained on the digits under one precision recipe,
measuring on every step what the formats do to it.

What is measured, and how
=========================

- **Gradient underflow.** Each step, an exact shadow recomputes the same step in fp64: a copy
  of the model holding the run's working weights (the values the run's forward used: fp16 /
  bf16 model weights, or fp32 under O0 / O1) takes the same mini-batch and the same loss
  scale S. Its gradients, of every weight and of every layer output (pre-activations and
  logits), are the exact gradients of this step up to fp64 rounding: fp64 has 53 bits and
  goes down to 2^-1074, so a value that is non-zero in exact arithmetic is non-zero there
  (zeros in fp64 are structural: ReLU masks, pixels that are always 0).
  ``grad_underflow_fraction`` is the share of these non-zero exact values that round to zero
  in the format the run stores that gradient in (:func:`fpsim.amp.underflow_stats`): the
  values a format cannot hold, Micikevicius et al.'s measure. It is attributed to the
  format, not to accidents of the run's trajectory. ``grad_zero_fraction`` is the cruder
  observed count: exact value non-zero, the run's own gradient exactly zero (this also
  counts zeros propagated from underflow upstream, and the rare ReLU whose sign flipped
  because the forward rounded).
- **Non-finite gradients and skipped steps**: steps whose gradients held inf/NaN, and the
  steps the loss scaler skipped; the scale of every step (the loss-scale history).
- **Lost updates**: the optimizer's update of every weight element is captured as it
  computes it (new value in fp32 before rounding, minus the old value), and
  :func:`fpsim.amp.lost_updates` counts the non-zero updates for which old + update rounds
  back to the old value in the format the weight is stored in (the fp32 master under
  master weights, the weight's own format otherwise): the update was smaller than half an
  ulp of the weight. An element with a non-zero gradient whose update the optimizer's fp32
  arithmetic already dropped (below half an fp32 ulp) counts as lost too.
- **Exponent histograms** per layer of the exact gradients times S (the values the format
  has to hold), accumulated over the run (:func:`fpsim.amp.exponent_histogram`).
- **Memory** by format, measured by fpsim's memory meter
  (:class:`fpsim.autograd.memory_meter.MemoryMeter`, ``fpsim.memory.meter()``) over the first
  step (forward, backward, unscaling, optimizer step; the fp64 shadow is hidden from it):
  weights, fp32 master weights and optimizer state after the step, gradients as backward
  stores them, fp32 master gradients (O2: the gradients after ``scale_loss`` promoted them),
  saved activations at their peak (the tensors PyTorch's derivative formulas keep for
  backward, see the meter) and the peak total of the step (``peak_bytes``).

The shadow and the statistics cost time; ``instrument=False`` turns them off.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..amp import (
    ExponentHistogram,
    exponent_histogram,
    initialize,
    lost_updates,
    nonfinite_count,
    scale_loss,
    underflow_stats,
)
from ..autograd import functional as F
from ..autograd.context import rounding_context
from ..autograd.memory_meter import MemoryMeter
from ..autograd.tensor import Tensor, no_grad
from ..datasets import Split, load_digits, minibatches
from ..formats import FP32, FP64, Format
from ..optim import SGD
from ..state import as_seed
from .model import MLP
from .recipes import get_recipe, parse_loss_scale

__all__ = ["TrainConfig", "RunResult", "train", "HIST_BINS", "PHASES"]

HIST_BINS = range(-64, 17)  # exponents of the gradient histograms (others counted apart)
SCHEDULES = ("constant", "cosine")


@dataclass
class TrainConfig:
    """Hyper-parameters of one run (defaults: the demo's; see docs/demo.md).

    >>> TrainConfig(precision="fp32").steps > 0
    True
    """

    precision: str = "mixed-fp16"
    loss_scale: str | float | None = None  # None: the recipe's (see recipes.py)
    sizes: tuple[int, ...] = (64, 128, 128, 128, 10)
    batch_size: int = 256
    lr: float = 0.006
    momentum: float = 0.9
    steps: int = 1500
    schedule: str = "cosine"
    init_scale: float = 1.0
    out_init_scale: float = 0.01
    initial_loss_scale: float = 2.0**16
    scale_window: int = 100
    grad_shift: int = 0  # the loss times 2^-grad_shift, the learning rate times 2^grad_shift
    max_loss_scale: float = 2.0**64  # PyTorch's GradScaler has no maximum; Apex caps at 2^24
    seed: int = 0
    eval_every: int = 50
    instrument: bool = True
    measure_every: int = 1  # the exact shadow and the statistics run every this many steps

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        get_recipe(self.precision)
        parse_loss_scale(self.loss_scale)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        for name in ("batch_size", "steps", "eval_every", "scale_window", "measure_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if isinstance(self.grad_shift, bool) or not isinstance(self.grad_shift, int) \
                or not 0 <= self.grad_shift <= 40:
            raise ValueError(f"grad_shift must be an int from 0 to 40, got {self.grad_shift!r}")
        for name in ("lr", "initial_loss_scale", "init_scale", "out_init_scale",
                     "max_loss_scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        try:
            as_seed(self.seed)  # the one seed rule; this method's errors are ValueErrors
        except TypeError as e:
            raise ValueError(str(e)) from None
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if len(self.sizes) < 2 or self.sizes[0] != 64 or self.sizes[-1] != 10:
            raise ValueError(f"sizes must start with 64 (pixels) and end with 10 (classes), got "
                             f"{self.sizes}")


@dataclass
class _Counts:
    zeroed: int = 0
    nonzero: int = 0
    subnormal: int = 0
    observed_zero: int = 0

    def add(self, other: _Counts) -> None:
        self.zeroed += other.zeroed
        self.nonzero += other.nonzero
        self.subnormal += other.subnormal
        self.observed_zero += other.observed_zero

    def fraction(self) -> float:
        return self.zeroed / self.nonzero if self.nonzero else 0.0


@dataclass
class RunResult:
    """What one run measured (``summary()`` gives the JSON-ready part)."""

    config: TrainConfig
    loss_scale: str
    final_loss: float
    train_accuracy: float
    test_accuracy: float
    skipped_steps: int
    nonfinite_steps: int
    final_loss_scale: float
    grad: dict[str, dict[str, int]]  # "all" / "weights" / "activations" / per layer -> counts
    updates: dict[str, int]  # "lost", "nonzero"
    memory: dict[str, dict[str, int]]  # category -> {format name: bytes}
    time_s: float
    instrument_time_s: float
    step_loss: np.ndarray  # mini-batch loss of every step
    step_scale: np.ndarray  # loss scale used at every step
    step_skipped: np.ndarray  # bool per step
    step_underflow: np.ndarray  # underflow fraction per step (all gradients)
    step_lost: np.ndarray  # lost-update fraction per step (NaN when no update)
    eval_steps: np.ndarray
    eval_test_accuracy: np.ndarray
    eval_train_loss: np.ndarray
    histograms: dict[str, ExponentHistogram] = field(default_factory=dict)
    peak_bytes: int = 0  # the memory meter's peak total over the measured (first) step
    cpu_time_s: dict[str, float] = field(default_factory=dict)  # CPU seconds by phase

    @property
    def precision(self) -> str:
        """The recipe's name."""
        return self.config.precision

    @property
    def nonfinite_run(self) -> bool:
        """Whether the run went non-finite: inf / NaN gradients reached the weights (steps with
        them that the scaler did not skip) or the final loss is inf / NaN. Its fractions
        (underflow, subnormal, lost updates) are then undefined: NaN here, null in
        :meth:`summary` (they counted 0 of the values an all-NaN run never compared)."""
        return self.nonfinite_steps > self.skipped_steps or not math.isfinite(self.final_loss)

    def _frac(self, key: str, part: str = "zeroed") -> float:
        if self.nonfinite_run:
            return math.nan
        c = self.grad.get(key, {})
        return c.get(part, 0) / c["nonzero"] if c.get("nonzero") else 0.0

    @property
    def grad_underflow_fraction(self) -> float:
        """Share of the non-zero exact gradient values (weights and activations, all steps)
        that round to zero in their gradient format."""
        return self._frac("all")

    @property
    def lost_update_fraction(self) -> float:
        """Share of the non-zero weight updates lost to rounding (all steps); NaN for a
        non-finite run."""
        if self.nonfinite_run:
            return math.nan
        n = self.updates.get("nonzero", 0)
        return self.updates.get("lost", 0) / n if n else 0.0

    def summary(self) -> dict[str, Any]:
        """The run's numbers as a JSON-ready dict."""
        layers = {k: _defined(round(self._frac(k), 6)) for k in self.grad
                  if k not in ("all", "weights", "activations")}
        out = {
            "precision": self.precision,
            "loss_scale": self.loss_scale,
            "final_loss": self.final_loss,
            "train_accuracy": self.train_accuracy,
            "test_accuracy": self.test_accuracy,
            "skipped_steps": self.skipped_steps,
            "nonfinite_grad_steps": self.nonfinite_steps,
            "final_loss_scale": self.final_loss_scale,
            "grad_underflow_fraction": self.grad_underflow_fraction,
            "weight_grad_underflow_fraction": self._frac("weights"),
            "activation_grad_underflow_fraction": self._frac("activations"),
            "grad_subnormal_fraction": self._frac("all", "subnormal"),
            "grad_zero_fraction": self._frac("all", "observed_zero"),
            "grad_underflow_by_layer": layers,
            "lost_update_fraction": self.lost_update_fraction,
            "lost_updates": self.updates.get("lost", 0),
            "updates": self.updates.get("nonzero", 0),
            "loss_scale_changes": _changes(self.step_scale),
            "memory_bytes": self.memory,
            "peak_bytes": self.peak_bytes,
            "steps": self.config.steps,
            "time_s": round(self.time_s, 3),
            "instrument_time_s": round(self.instrument_time_s, 3),
            "cpu_time_s": {k: round(v, 3) for k, v in self.cpu_time_s.items()},
            "config": {k: (list(v) if isinstance(v, tuple) else v)
                       for k, v in asdict(self.config).items()},
            "nonfinite_run": self.nonfinite_run,
        }
        # JSON has no NaN (json.dumps wrote a bare NaN, which JSON readers refuse): an
        # undefined figure is null
        return {k: _defined(v) for k, v in out.items()}


def _defined(v: Any) -> Any:
    """None for a float NaN (an undefined figure), else ``v``."""
    return None if isinstance(v, float) and math.isnan(v) else v


def _changes(scales: np.ndarray) -> list[list[float]]:
    """[[step, scale], ...] at the first step and wherever the scale changed."""
    if scales.size == 0:
        return []
    idx = np.concatenate([[0], np.nonzero(np.diff(scales))[0] + 1])
    return [[int(i), float(scales[i])] for i in idx]


def _meter_snapshot(model: Any, opt: Any) -> dict[str, dict[str, int]]:
    """Bytes by category and format the memory meter counts now (a meter with no operation
    inside: its peak is the present)."""
    with MemoryMeter(model, opt) as m:
        pass
    return m.report().by_format


@contextlib.contextmanager
def _hidden_from(meter: MemoryMeter | None):
    """Hide the fp64 shadow's operations from ``meter``: they are instrumentation, not part
    of the measured step."""
    if meter is None:
        yield
        return
    with meter.paused():
        yield


def _is_zero(arr: np.ndarray) -> np.ndarray:
    """arr == 0, on the bit patterns for 2-byte floats (NumPy compares float16 slowly)."""
    if arr.dtype.itemsize == 2:
        return (arr.view(np.uint16) & 0x7FFF) == 0
    return arr == 0


def _underflow(exact: np.ndarray, fmt: Format, run: np.ndarray | None) -> _Counts:
    """Underflow counts of the exact values ``exact`` in ``fmt``; only values below the
    smallest normal or above the largest finite value can underflow, become subnormal or
    overflow, so only those go through the exact rounding of underflow_stats."""
    a = np.abs(exact)
    nonzero = (a != 0) & np.isfinite(a)
    cand = nonzero & ((a < fmt.smallest_normal) | (a > fmt.max))
    zeroed = subnormal = 0
    if cand.any():
        st = underflow_stats(exact[cand], fmt)
        zeroed, subnormal = st.zeroed, st.subnormal
    observed = 0
    if run is not None:
        observed = int(np.count_nonzero(nonzero & _is_zero(run)))
    return _Counts(zeroed, int(np.count_nonzero(nonzero)), subnormal, observed)


def _lost(w: np.ndarray, u: np.ndarray, fmt: Format, g: np.ndarray | None = None,
          rounding: str = "nearest_even",
          rng: np.random.Generator | None = None) -> tuple[int, int]:
    """(lost, non-zero) weight updates of one parameter: ``u`` = the optimizer's new value
    (fp32 arithmetic) minus the old value ``w`` (a value of ``fmt``), ``g`` its gradient.

    Counted non-zero: u != 0, or g != 0 (asked to move). Lost: u != 0 and w + u rounds back
    to w in ``fmt`` (:func:`fpsim.amp.lost_updates`), or g != 0 and u == 0 (the optimizer's
    own fp32 arithmetic already dropped the update: it was below half an fp32 ulp of w).
    ``rounding="stochastic"`` (the bf16-sr recipe) draws the rounding of w + u from ``rng``: an
    update of a fraction f of the ulp is lost with probability 1 - f.
    Only |u| <= eps |w| + smallest subnormal can round back to w (ulp(w) <= eps |w| for
    normal w), so only those go through the exact test."""
    moved = u != 0
    with np.errstate(invalid="ignore", over="ignore"):
        cand = moved & (np.abs(u) <= np.abs(w) * fmt.eps + fmt.smallest_subnormal)
    kw = {"rng": rng} if rounding == "stochastic" else {}
    lost = lost_updates(w[cand], u[cand], fmt, rounding, **kw).lost if cand.any() else 0
    asked = moved
    if g is not None:
        dropped = (g != 0) & ~moved
        lost += int(np.count_nonzero(dropped))
        asked = moved | (g != 0)
    return lost, int(np.count_nonzero(asked))


class _UpdateRecorder:
    """An update hook of the optimizer (:meth:`~fpsim.optim.Optimizer.register_update_hook`)
    capturing (weight, new value, state) per parameter on the steps it is active."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.records: list[tuple[np.ndarray, np.ndarray, np.ndarray, dict]] = []
        self.active = True  # record this step (the statistics are sampled)
        self.handle = optimizer.register_update_hook(self)

    def __call__(self, update: Any, w: np.ndarray, g: np.ndarray, state: dict, group: dict,
                 dtype: Any) -> np.ndarray:
        if not self.active:
            return update(w, g, state, group, dtype)
        old = np.array(w, copy=True)  # the update may change w in place
        new = update(w, g, state, group, dtype)
        self.records.append((old, np.asarray(new), np.array(g, copy=True), state))
        return new

    def take(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, Format]]:
        """The captured (old, new, gradient, format of the updated copy) since the last
        call."""
        owner = {id(s): p for p, s in self.optimizer.state.items()}
        out = []
        for old, new, g, st in self.records:
            p = owner[id(st)]
            out.append((old, new, g, FP32 if "master" in st else p.fmt))
        self.records = []
        return out


PHASES = ("forward", "backward", "unscale", "optimizer", "instrumentation", "evaluation",
          "other")


class _PhaseClock:
    """CPU time of this thread by phase of the training step (``time.thread_time``: what
    the run costs, whatever else loads the machine; BLAS runs in this thread). ``lap(phase)``
    charges the time since the previous lap to ``phase``."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.last = time.thread_time()

    def lap(self, phase: str) -> None:
        now = time.thread_time()
        self.seconds[phase] += now - self.last
        self.last = now

    def totals(self) -> dict[str, float]:
        self.lap("other")
        return dict(self.seconds)


def _accuracy(model: Any, x: np.ndarray, y: np.ndarray) -> float:
    with no_grad():
        out = model(Tensor(x, FP32))
    return float(np.mean(out.numpy(np.float64).argmax(axis=1) == y))


def _full_loss(model: Any, x: np.ndarray, y: np.ndarray) -> float:
    with no_grad():
        return float(F.cross_entropy(model(Tensor(x, FP32)), y).item())


def train(config: TrainConfig | None = None, *, data: Split | None = None,
          progress: Callable[[int], Any] | bool = False, **overrides: Any) -> RunResult:
    """Train the :class:`~fpsim.training.model.MLP` on the digits with ``config`` (fields
    can also be given as keywords) and measure every step (see the module docstring).

    ``progress``: True for a tqdm bar, or a callable receiving the number of steps done.
    The run uses one BLAS thread (threadpoolctl): its matrices are small, and several
    threads only wait for each other, many times slower on a busy machine.

    >>> r = train(precision="fp16", steps=3, sizes=(64, 16, 10), eval_every=3)
    >>> r.precision, len(r.step_loss), 0.0 <= r.lost_update_fraction <= 1.0
    ('fp16', 3, True)
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return _train(config, data, progress, overrides)


def _train(config: TrainConfig | None, data: Split | None,
           progress: Callable[[int], Any] | bool, overrides: dict[str, Any]) -> RunResult:
    if config is not None and not isinstance(config, TrainConfig):
        raise TypeError(f"train: config must be a TrainConfig or None, got "
                        f"{type(config).__name__} {config!r}")
    if data is not None and not isinstance(data, Split):
        raise TypeError(f"train: data must be a Split (fpsim.datasets.load_digits()) or None, "
                        f"got {type(data).__name__} {data!r}")
    cfg = TrainConfig(**{**asdict(config), **overrides}) if config is not None \
        else TrainConfig(**overrides)
    cfg.sizes = tuple(cfg.sizes)
    cfg.validate()
    recipe = get_recipe(cfg.precision)
    scale_spec = parse_loss_scale(cfg.loss_scale)
    loss_scale = recipe.loss_scale if scale_spec is None else scale_spec
    data = load_digits() if data is None else data
    t_start = time.perf_counter()

    model = MLP(cfg.sizes, rng=cfg.seed, init_scale=cfg.init_scale,
                out_init_scale=cfg.out_init_scale)
    shadow = MLP(cfg.sizes, rng=cfg.seed).to(FP64)  # its weights are the run's, every step
    sgd = SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    low = recipe.fmt if recipe.fmt != FP32 else "fp16"
    model, opt = initialize(model, sgd, recipe.opt_level, dtype=low, loss_scale=loss_scale,
                            init_scale=cfg.initial_loss_scale, scale_window=cfg.scale_window,
                            max_loss_scale=cfg.max_loss_scale)
    shift = 2.0**-cfg.grad_shift  # exact in every format: only the exponents move
    # bf16-sr: the optimizer's writes (weights, momentum) round stochastically, from their own
    # generator so that the batches stay those of every other recipe
    update_ctx = (lambda: rounding_context("stochastic", rng=sr_rng)) \
        if recipe.update_rounding == "stochastic" else contextlib.nullcontext
    sr_rng = np.random.default_rng([cfg.seed, 1])
    lost_rng = np.random.default_rng([cfg.seed, 2])
    props = opt.properties
    autocast_fmt = props.autocast_dtype if props.patch_torch_functions else None
    recorder = _UpdateRecorder(sgd) if cfg.instrument else None
    params = dict(model.named_parameters())
    shadow_params = dict(shadow.named_parameters())

    bar = None
    if progress is True:
        from tqdm.auto import tqdm
        bar = tqdm(total=cfg.steps, desc=f"{cfg.precision:<12}", leave=True, unit="step")
        tick: Callable[[int], Any] | None = bar.update
    else:
        tick = progress if callable(progress) else None

    n = len(data.x_train)
    if n == 0:
        raise ValueError("data.x_train is empty: train needs at least one training sample")
    # full batches of a fresh permutation an epoch (minibatches' drop_last rule); a batch_size
    # above n takes the whole training set, reshuffled, every step
    per_epoch = max(n // cfg.batch_size, 1)
    batches = minibatches(n, cfg.batch_size, epochs=-(-cfg.steps // per_epoch),
                          rng=np.random.default_rng(cfg.seed),
                          drop_last=cfg.batch_size <= n)
    counts = {"all": _Counts(), "weights": _Counts(), "activations": _Counts()}
    updates = {"lost": 0, "nonzero": 0}
    hist: dict[str, list] = {}
    memory: dict[str, dict[str, int]] = {}
    peak_bytes = 0
    step_loss = np.zeros(cfg.steps)
    step_scale = np.zeros(cfg.steps)
    step_skipped = np.zeros(cfg.steps, dtype=bool)
    step_uf = np.full(cfg.steps, np.nan)  # measured steps only
    step_lost = np.full(cfg.steps, np.nan)
    evals: list[tuple[int, float, float]] = []
    nonfinite_steps = 0
    t_instr = 0.0
    clock = _PhaseClock()

    for step, (_, idx) in enumerate(itertools.islice(batches, cfg.steps)):
        lr = cfg.lr if cfg.schedule == "constant" else \
            cfg.lr * 0.5 * (1.0 + math.cos(math.pi * step / cfg.steps))
        lr /= shift  # the gradients are 2^-grad_shift times smaller; the updates are not
        for group in opt.param_groups:
            group["lr"] = lr
        x = Tensor(data.x_train[idx], FP32)
        y = data.y_train[idx]
        # the first step runs inside the memory meter: the run's memory figures
        meter = MemoryMeter(model, opt) if step == 0 else None
        measured = cfg.instrument and step % cfg.measure_every == 0
        if recorder is not None:
            recorder.active = measured
        clock.lap("other")
        with meter if meter is not None else contextlib.nullcontext():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            step_loss[step] = loss.item()
            if shift != 1.0:
                loss = loss * shift
            scale = opt.scaler.get_scale()  # 1.0 where scale_loss does not scale
            step_scale[step] = scale
            clock.lap("forward")
            with scale_loss(loss, opt) as scaled:
                scaled.backward()
                clock.lap("backward")
                if meter is not None:
                    memory["gradients"] = _meter_snapshot(model, opt)["gradients"]
                    clock.lap("other")
                if cfg.instrument:
                    t0 = time.perf_counter()
                    grads = {name: p.grad for name, p in params.items() if p.grad is not None}
                    if nonfinite_count(list(grads.values())):
                        nonfinite_steps += 1
                    if measured:
                        with _hidden_from(meter):
                            step_counts = _measure(model, shadow, shadow_params, params, grads,
                                                   data, idx, y, scale * shift, autocast_fmt,
                                                   counts, hist)
                        step_uf[step] = step_counts.fraction()
                    t_instr += time.perf_counter() - t0
                    clock.lap("instrumentation")
            clock.lap("unscale")  # scale_loss's exit: master gradients, unscaling, inf check
            if meter is not None and props.master_weights:
                # scale_loss promoted every gradient to an fp32 array (Apex's master
                # gradients); the meter names a gradient by its parameter's gradient format
                promoted = _meter_snapshot(model, opt)["gradients"]
                memory["master_gradients"] = {"fp32": sum(promoted.values())}
                clock.lap("other")
            with update_ctx():
                opt.step()
            clock.lap("optimizer")
        if meter is not None:
            rep = meter.report()
            after = _meter_snapshot(model, opt)
            memory["weights"] = after["parameters"]
            memory["master_weights"] = after["master_weights"]
            memory["optimizer_state"] = after["optimizer_states"]
            memory["activations"] = rep.activations_by_format
            peak_bytes = rep.peak_total
        step_skipped[step] = opt.last_step_skipped if opt.scaler.history else False
        if recorder is not None and measured:
            t0 = time.perf_counter()
            lost = nz = 0
            for old, new, g, fmt in recorder.take():
                with np.errstate(invalid="ignore", over="ignore"):
                    u = new.astype(np.float64) - old.astype(np.float64)
                master = fmt == FP32 and recipe.master_weights
                a, b = _lost(old.astype(np.float64), u, fmt, g,
                             "nearest_even" if master else recipe.update_rounding, lost_rng)
                lost += a
                nz += b
            updates["lost"] += lost
            updates["nonzero"] += nz
            if nz:
                step_lost[step] = lost / nz
            t_instr += time.perf_counter() - t0
            clock.lap("instrumentation")
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            clock.lap("other")
            evals.append((step + 1, _accuracy(model, data.x_test, data.y_test),
                          _full_loss(model, data.x_train, data.y_train)))
            clock.lap("evaluation")
        if tick is not None:
            tick(1)
    if bar is not None:
        bar.close()

    memory = {k: memory.get(k, {}) for k in ("weights", "master_weights", "gradients",
                                             "master_gradients", "optimizer_state",
                                             "activations")}

    final_loss = evals[-1][2]
    result = RunResult(
        config=cfg,
        loss_scale=str(loss_scale if isinstance(loss_scale, str) else
                       ("none" if loss_scale == 1.0 else f"{loss_scale:g}")),
        final_loss=final_loss,
        train_accuracy=_accuracy(model, data.x_train, data.y_train),
        test_accuracy=evals[-1][1],
        skipped_steps=int(step_skipped.sum()),
        nonfinite_steps=nonfinite_steps,
        final_loss_scale=float(opt.scaler.get_scale()),
        grad={k: asdict(v) for k, v in counts.items()},
        updates=updates,
        memory=memory,
        peak_bytes=peak_bytes,
        time_s=time.perf_counter() - t_start,
        instrument_time_s=t_instr,
        cpu_time_s=clock.totals(),
        step_loss=step_loss,
        step_scale=step_scale,
        step_skipped=step_skipped,
        step_underflow=step_uf,
        step_lost=step_lost,
        eval_steps=np.array([e[0] for e in evals]),
        eval_test_accuracy=np.array([e[1] for e in evals]),
        eval_train_loss=np.array([e[2] for e in evals]),
        histograms={name: ExponentHistogram(np.arange(HIST_BINS.start, HIST_BINS.stop),
                                            c[0], c[1], c[2], c[3], c[4])
                    for name, c in hist.items()},
    )
    return result


def _measure(model: Any, shadow: MLP, shadow_params: dict, params: dict, grads: dict,
             data: Split, idx: np.ndarray, y: np.ndarray, scale: float,
             autocast_fmt: Format | None, counts: dict[str, _Counts],
             hist: dict[str, list]) -> _Counts:
    """The exact fp64 shadow of this step and the counts against it (see module doc)."""
    for name, p in params.items():
        shadow_params[name].data = p.data
    shadow.zero_grad()
    loss64 = F.cross_entropy(shadow(Tensor(data.x_train[idx], FP64)), y)
    loss64.backward()
    step = _Counts()
    pairs = []
    for name, g in grads.items():
        # under autocast a weight's gradient is computed in the autocast format (its fp16
        # cast copy) and only then widened into the fp32 weight's gradient
        fmt = autocast_fmt if autocast_fmt is not None else params[name].grad_fmt
        pairs.append(("weights", name, shadow_params[name].grad, g, fmt))
    for name, a in model.activations.items():
        if a.grad is not None:
            pairs.append(("activations", f"{name}.out", shadow.activations[name].grad, a.grad,
                          a.grad_fmt))
    for kind, name, exact, run, fmt in pairs:
        exact = exact * scale  # the values the format must hold (the scale is exact in fp64)
        c = _underflow(exact, fmt, run)
        step.add(c)
        counts[kind].add(c)
        counts.setdefault(name, _Counts()).add(c)
        h = exponent_histogram(exact, HIST_BINS)
        acc = hist.setdefault(name, [np.zeros(len(HIST_BINS), np.int64), 0, 0, 0, 0])
        acc[0] += h.counts
        acc[1] += h.zeros
        acc[2] += h.nonfinite
        acc[3] += h.below
        acc[4] += h.above
    counts["all"].add(step)
    return step
