"""Measured memory of training: the bytes of live tensors by category and format, with the peak
over a step.

A :class:`MemoryMeter` watches the autograd engine while it is active (``with MemoryMeter() as
m:``, or ``with fpsim.memory.meter() as m:``) and samples, after every operation and every
backward node, the bytes of

- ``parameters``: the trainable tensors' values (``model`` / ``optimizer`` / ``params`` given;
  else every leaf tensor that requires grad and enters an operation);
- ``master_weights``: the optimizer's fp32 master copies (``optimizer.state[p]["master"]``);
- ``gradients``: the parameters' ``.grad`` arrays, from the moment backward has computed them
  (the engine keeps a parameter's gradient aside until the end of backward before it assigns
  ``.grad``; PyTorch accumulates it into ``.grad`` at once: the bytes are the same);
- ``optimizer_states``: the optimizer's other state arrays (momentum, Adam moments);
- ``activations``: the saved activations (below).

Every array counts at its real width (``ndarray.nbytes``: 2 bytes per fp16 / bf16 element, 1 per
fp8). **Saved activations** are the tensors an operation keeps for its backward pass, as
PyTorch's derivative formulas define them (``tools/autograd/derivatives.yaml``), not fpsim's
own closures (which keep float64 working copies for exact arithmetic):

- linear and conv2d: their input and weight (not the bias);
- matmul, mul, div, pow, abs, log, gelu, nll_loss, mse_loss, max_pool2d, layer_norm,
  batch_norm and any operation not listed here: their tensor inputs;
- relu, exp, sqrt, tanh, sigmoid, softmax, log_softmax: their output;
- dropout: its mask, one byte per element (PyTorch's boolean mask); max_pool2d also its int64
  indices;
- max: its int64 indices;
- add, sub, neg, sum, mean, reshapes / views, indexing, cat, clone, casts: nothing.

A saved tensor that is a parameter counts as a parameter, not again as an activation. A tensor
kept by several operations, or several views of one array, count once: the unit is the storage
(the NumPy base array), alive from the operation that saves it until its backward has run
(``retain_graph=False``) or its graph is dropped. Small per-row statistics (layer_norm's mean and
rstd, batch_norm's) are not counted. The peak is the largest total over all samples; the
largest saved-activation total is reported on its own (``report().max["activations"]``).

The meter also counts operations and an estimate of their FLOPs (2 m n k for matmul, linear and
conv2d; one per output element otherwise), and, separately, the forward calls and operations
that gradient checkpointing (:mod:`fpsim.autograd.checkpoint`) recomputes during backward.

>>> import fpsim
>>> from fpsim.autograd import Tensor
>>> w = Tensor([[1.0, 2.0], [3.0, 4.0]], fpsim.FP16, requires_grad=True)
>>> x = Tensor([[1.0, 1.0]], fpsim.FP16)
>>> with MemoryMeter() as m:
...     loss = (x @ w).relu().sum()   # matmul keeps x (4 bytes), relu its output (4 bytes)
...     loss.backward()
>>> r = m.report()
>>> r.max["activations"], r.current["activations"], r.current["gradients"]
(8, 0, 8)
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .. import state as _state
from .tensor import Tensor

__all__ = ["MemoryMeter", "MemoryReport", "CATEGORIES", "SAVED_FOR_BACKWARD"]

CATEGORIES = ("parameters", "master_weights", "gradients", "optimizer_states", "activations")

# What an op keeps for backward (PyTorch's derivative formulas): "inputs" (its tensor inputs),
# "output", "mask" (one byte per output element), "indices" (int64 per output element),
# "token_indices" (int64 per looked-up row: embedding's index array).
SAVED_FOR_BACKWARD: dict[str, tuple[str, ...]] = {
    **{op: () for op in ("add", "sub", "neg", "sum", "mean", "reshape", "flatten",
                         "transpose", "permute", "unsqueeze", "squeeze", "getitem", "cat",
                         "stack", "clone", "to")},
    **{op: ("output",) for op in ("relu", "exp", "sqrt", "tanh", "sigmoid", "softmax",
                                  "log_softmax")},
    **{op: ("inputs",) for op in ("matmul", "mul", "div", "pow", "abs", "log", "gelu",
                                  "nll_loss", "mse_loss", "layer_norm", "batch_norm",
                                  "checkpoint")},
    "linear": ("input", "weight"),  # not the bias (addmm keeps mat1 and mat2)
    "conv2d": ("input", "weight"),
    "dropout": ("mask",),
    "masked_fill": ("mask",),
    "max": ("indices",),
    "max_pool2d": ("inputs", "indices"),
    "embedding": ("token_indices",),  # not the weight (a parameter)
}
_DEFAULT_SAVED = ("inputs",)
_MATMUL_OPS = ("linear", "matmul", "conv2d")

# Leaf tensors that stand for activations although they require grad (the detached inputs of a
# checkpointed segment during its recomputation): never counted as parameters.
_ACTIVATION_LEAVES: weakref.WeakSet = weakref.WeakSet()


def _root(arr: np.ndarray) -> np.ndarray:
    """The array owning the memory of ``arr`` (the end of its chain of ndarray bases)."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def _fmt_name(arr: np.ndarray) -> str:
    from ..formats import get_format

    try:
        return get_format(arr.dtype).name
    except (TypeError, ValueError):
        return arr.dtype.name


def _base_op(op: str) -> str:
    return op.split("(", 1)[0]


def _flops(out: Tensor, parents, op: str) -> int:
    base = _base_op(op)
    size = int(out._data.size)
    if base in _MATMUL_OPS and len(parents) >= 2 and parents[1]._data.ndim >= 1:
        w = parents[1]._data
        if base == "linear":
            k = w.shape[-1]
        elif base == "conv2d":
            k = w.size // max(w.shape[0], 1)
        else:
            k = w.shape[0] if w.ndim == 1 else w.shape[-2]
        return 2 * size * int(k)
    return size


@dataclass
class MemoryReport:
    """What a :class:`MemoryMeter` measured (bytes).

    - ``current``: category -> bytes at the last sample;
    - ``peak``: category -> bytes at the sample with the largest total (``peak_total``);
    - ``max``: category -> the largest value of that category alone (``max["activations"]``
      is the peak of saved activations);
    - ``by_format``: category -> {format name -> bytes} at the peak;
    - ``activations_by_format``: format name -> saved bytes at the activations' peak;
    - ``ops`` / ``flops``: operations run (first forward and backward recomputation alike are
      in ``ops`` only when outside recomputation); ``recomputed_ops`` / ``recomputed_flops`` /
      ``recomputed_forward_calls``: the extra forward work of gradient checkpointing;
      ``checkpointed_forward_calls``: checkpointed segments run in the forward pass;
    - ``timeline``: (saved activation bytes, total bytes) per sample.
    """

    current: dict
    peak: dict
    peak_total: int
    max: dict
    by_format: dict
    activations_by_format: dict
    ops: int
    flops: int
    recomputed_ops: int
    recomputed_flops: int
    recomputed_forward_calls: int
    checkpointed_forward_calls: int
    timeline: list = field(repr=False, default_factory=list)

    @property
    def recompute_overhead(self) -> float:
        """Recomputed FLOPs / forward FLOPs (0 without checkpointing)."""
        return self.recomputed_flops / self.flops if self.flops else 0.0

    def as_dict(self) -> dict:
        """Plain dict (for JSON): every field except the timeline."""
        return {k: v for k, v in self.__dict__.items() if k != "timeline"} | {
            "recompute_overhead": self.recompute_overhead}

    def table(self, unit: str = "KiB") -> str:
        """The report as text: one row per category (current, at peak, own max) with the
        formats at the peak, then the operation counts.

        ``unit``: ``B``, ``KiB``, ``MiB``, ``GiB``, ``KB``, ``MB`` or ``GB``.
        """
        div = _UNITS.get(unit)
        if div is None:
            raise ValueError(f"unknown unit {unit!r}; valid: {', '.join(_UNITS)}")
        lines = [f"{'category':17s} {'current':>11s} {'at peak':>11s} {'max':>11s}  "
                 f"formats at peak ({unit})"]
        for c in CATEGORIES:
            fm = ", ".join(f"{k} {v / div:.4g}" for k, v in sorted(self.by_format[c].items()))
            lines.append(f"{c:17s} {self.current[c] / div:11.4g} {self.peak[c] / div:11.4g} "
                         f"{self.max[c] / div:11.4g}  {fm}")
        lines.append(f"{'total':17s} {sum(self.current.values()) / div:11.4g} "
                     f"{self.peak_total / div:11.4g}")
        lines.append(f"ops {self.ops} ({self.flops:.4g} FLOPs); recomputed in backward: "
                     f"{self.recomputed_forward_calls} segment calls, {self.recomputed_ops} ops "
                     f"({self.recomputed_flops:.4g} FLOPs, {100 * self.recompute_overhead:.1f}% "
                     "of the forward)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6,
          "GB": 10**9}


class MemoryMeter:
    """Context manager measuring the memory of the autograd engine (see the module docstring).

    ``model`` (anything with ``parameters()``), ``optimizer`` (an :mod:`fpsim.optim`
    optimizer, or anything with ``param_groups`` and ``state``) and ``params`` name the
    trainable tensors; without any, leaf tensors that require grad and enter an operation are
    taken as the parameters. Call :meth:`sample` to add a sample (e.g. after
    ``optimizer.step()``); entering and leaving the context sample too.

    >>> from fpsim.autograd import Tensor
    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> with MemoryMeter(params=[w]) as m:
    ...     y = (w * w).sum()     # mul keeps both inputs: w, a parameter, counts once
    >>> m.report().max["parameters"], m.report().max["activations"]
    (8, 0)
    """

    def __init__(self, model=None, optimizer=None, params: Iterable[Tensor] | None = None
                 ) -> None:
        explicit: list[Tensor] = []
        if model is not None:
            if not hasattr(model, "parameters"):
                raise TypeError(f"model must have parameters(), got {type(model).__name__}")
            explicit.extend(model.parameters())
        if optimizer is not None:
            if not hasattr(optimizer, "param_groups") or not hasattr(optimizer, "state"):
                raise TypeError("optimizer must have param_groups and state, got "
                                f"{type(optimizer).__name__}")
            for g in optimizer.param_groups:
                explicit.extend(g["params"])
        if params is not None:
            for p in params:
                if not isinstance(p, Tensor):
                    raise TypeError(f"params must be Tensors, got {type(p).__name__}")
                explicit.append(p)
        self._explicit = bool(explicit) or params is not None
        self._params: dict[int, Tensor] = {}
        for p in explicit:
            self._params.setdefault(id(p), p)
        self._found: weakref.WeakSet = weakref.WeakSet()
        self._pending: set[int] = set()  # parameters whose gradient backward has computed
        self.optimizer = optimizer
        self._reset()

    def _reset(self) -> None:
        self._store: dict = {}       # storage key -> [count, nbytes, format name, keep-alive]
        self._nodes: dict = {}       # id(node) -> (storage keys, finalizer)
        self._act = 0
        self._act_fmt: dict[str, int] = {}
        self._current = dict.fromkeys(CATEGORIES, 0)
        self._peak = dict.fromkeys(CATEGORIES, 0)
        self._peak_total = 0
        self._max = dict.fromkeys(CATEGORIES, 0)
        self._by_format = {c: {} for c in CATEGORIES}
        self._act_peak_fmt: dict[str, int] = {}
        self._timeline: list[tuple[int, int]] = []
        self.ops = self.flops = 0
        self.recomputed_ops = self.recomputed_flops = 0
        self.recomputed_forward_calls = 0
        self.checkpointed_forward_calls = 0
        self._recomputing = 0
        self._active = False

    # ------------------------------------------------------------------ context
    def __enter__(self) -> MemoryMeter:
        if self._active:
            raise RuntimeError("this MemoryMeter is already active")
        self._active = True
        _state.local.observers.append(self)
        self.sample()
        return self

    def __exit__(self, *exc) -> None:
        self.sample()
        self._active = False
        if self in _state.local.observers:
            _state.local.observers.remove(self)
        for _keys, fin in self._nodes.values():
            fin.detach()
        self._nodes.clear()
        self._store.clear()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop observing for the block (e.g. instrumentation that is not part of the measured
        step); tensors created inside are not counted.

        >>> import fpsim
        >>> with MemoryMeter() as m:
        ...     with m.paused():
        ...         _ = fpsim.Tensor([1.0, 2.0], requires_grad=True) * 2
        >>> m.ops
        0
        """
        observing = self in _state.local.observers
        if observing:
            _state.local.observers.remove(self)
        try:
            yield
        finally:
            if observing:
                _state.local.observers.append(self)

    # ---------------------------------------------------------- engine callbacks
    def _is_param(self, t: Tensor) -> bool:
        if self._explicit:
            return id(t) in self._params
        if t._parents is None and t._requires_grad and t not in _ACTIVATION_LEAVES:
            self._found.add(t)
            return True
        return False

    def on_op(self, out: Tensor, parents, op: str) -> None:
        """Called by the engine for every operation result (recorded in the graph or not)."""
        base = _base_op(op)
        if base != "checkpoint":
            fl = _flops(out, parents, op)
            if self._recomputing:
                self.recomputed_ops += 1
                self.recomputed_flops += fl
            else:
                self.ops += 1
                self.flops += fl
        if out._parents is None:  # not recorded: nothing is kept for backward
            for p in parents:
                if isinstance(p, Tensor):
                    self._is_param(p)
            return
        keys = []
        param_roots = None
        for what in SAVED_FOR_BACKWARD.get(base, _DEFAULT_SAVED):
            if what in ("inputs", "input", "weight"):
                chosen = parents if what == "inputs" else parents[:1] if what == "input" \
                    else parents[1:2]
                for p in chosen:
                    if not isinstance(p, Tensor) or self._is_param(p):
                        continue
                    if param_roots is None:  # a view of a parameter is parameter memory
                        param_roots = {id(_root(q._data)) for q in self._parameters()}
                    if id(_root(p._data)) not in param_roots:
                        keys.append(self._hold(p._data, p.fmt.name))
            elif what == "output":
                keys.append(self._hold(out._data, out.fmt.name))
            else:
                n = out._data.size
                if what == "token_indices":  # one int64 per row looked up
                    n //= max(out._data.shape[-1], 1)
                nbytes = n * (1 if what == "mask" else 8)
                keys.append(self._hold_new(("node", id(out), what), nbytes,
                                           "bool" if what == "mask" else "int64"))
        if not keys:
            self.sample()
            return
        fin = weakref.finalize(out, self._release, id(out))
        self._nodes[id(out)] = (keys, fin)
        self.sample()

    def on_release(self, node: Tensor) -> None:
        """Called by the engine after ``node``'s backward has run and its closure is freed."""
        for p in node._parents:  # their gradients now exist (the engine assigns .grad later)
            if p._requires_grad and p._grad is None and self._is_param(p):
                self._pending.add(id(p))
        entry = self._nodes.get(id(node))
        if entry is not None:
            entry[1].detach()
            self._release(id(node))
        else:
            self.sample()

    # ----------------------------------------------------------------- storages
    def _hold(self, arr: np.ndarray, fmt: str):
        root = _root(arr)
        key = id(root)
        entry = self._store.get(key)
        if entry is None:
            self._store[key] = [1, int(root.nbytes), fmt, root]
            self._add_act(int(root.nbytes), fmt)
        else:
            entry[0] += 1
        return key

    def _hold_new(self, key, nbytes: int, fmt: str):
        self._store[key] = [1, int(nbytes), fmt, None]
        self._add_act(int(nbytes), fmt)
        return key

    def _add_act(self, nbytes: int, fmt: str) -> None:
        self._act += nbytes
        self._act_fmt[fmt] = self._act_fmt.get(fmt, 0) + nbytes

    def _release(self, node_id: int) -> None:
        entry = self._nodes.pop(node_id, None)
        if entry is None:
            return
        for key in entry[0]:
            st = self._store[key]
            st[0] -= 1
            if st[0] == 0:
                del self._store[key]
                self._act -= st[1]
                self._act_fmt[st[2]] -= st[1]
        self.sample()

    # ------------------------------------------------------------------ samples
    def _parameters(self) -> list[Tensor]:
        if self._explicit:
            return list(self._params.values())
        return list(self._found)

    def _static(self) -> tuple[dict, dict]:
        """Bytes (and bytes by format) of parameters, gradients and optimizer state now."""
        cur = dict.fromkeys(CATEGORIES, 0)
        fmt = {c: {} for c in CATEGORIES}

        def add(cat, name, n):
            cur[cat] += n
            fmt[cat][name] = fmt[cat].get(name, 0) + n

        for p in self._parameters():
            add("parameters", p.fmt.name, int(p._data.nbytes))
            if p._grad is not None:
                # named by the array actually held (O2 promotes fp16 gradients to fp32 arrays)
                gfmt = p.grad_fmt
                name = gfmt.name if p._grad.dtype == gfmt.storage_dtype else _fmt_name(p._grad)
                add("gradients", name, int(p._grad.nbytes))
                self._pending.discard(id(p))
            elif id(p) in self._pending:
                add("gradients", p.grad_fmt.name,
                    p._data.size * np.dtype(p.grad_fmt.storage_dtype).itemsize)
        opt = self.optimizer
        if opt is not None:
            for st in opt.state.values():
                for k, v in st.items():
                    if isinstance(v, np.ndarray):
                        add("master_weights" if k == "master" else "optimizer_states",
                            _fmt_name(v), int(v.nbytes))
        return cur, fmt

    def sample(self) -> int:
        """Record a sample now; returns its total bytes."""
        cur, fmt = self._static()
        cur["activations"] = self._act
        fmt["activations"] = {k: v for k, v in self._act_fmt.items() if v}
        total = sum(cur.values())
        self._current = cur
        for c in CATEGORIES:
            if cur[c] > self._max[c]:
                self._max[c] = cur[c]
                if c == "activations":
                    self._act_peak_fmt = dict(fmt["activations"])
        if total >= self._peak_total:
            self._peak_total = total
            self._peak = dict(cur)
            self._by_format = fmt
        self._timeline.append((self._act, total))
        return total

    def report(self) -> MemoryReport:
        """What was measured so far (see :class:`MemoryReport`)."""
        return MemoryReport(
            current=dict(self._current), peak=dict(self._peak), peak_total=self._peak_total,
            max=dict(self._max), by_format={c: dict(v) for c, v in self._by_format.items()},
            activations_by_format=dict(self._act_peak_fmt), ops=self.ops, flops=self.flops,
            recomputed_ops=self.recomputed_ops, recomputed_flops=self.recomputed_flops,
            recomputed_forward_calls=self.recomputed_forward_calls,
            checkpointed_forward_calls=self.checkpointed_forward_calls,
            timeline=list(self._timeline))


# ----------------------------------------------------- hooks for gradient checkpointing
# Internal API of fpsim.autograd.checkpoint (not in __all__).
def _meters() -> list[MemoryMeter]:
    return [o for o in _state.local.observers if isinstance(o, MemoryMeter)]


def count_checkpointed_forward() -> None:
    """Every active meter counts one checkpointed forward call."""
    for m in _meters():
        m.checkpointed_forward_calls += 1


def mark_activation_leaf(t: Tensor) -> None:
    """``t`` (a detached input of a checkpointed segment, requiring grad while the segment is
    recomputed) stands for an activation: meters never count it as a parameter."""
    _ACTIVATION_LEAVES.add(t)


@contextlib.contextmanager
def recomputing() -> Iterator[None]:
    """The block is a checkpointed segment's recomputation: every active meter counts its
    forward call, and its ops and FLOPs as recomputed ones."""
    meters = _meters()
    for m in meters:
        m._recomputing += 1
        m.recomputed_forward_calls += 1
    try:
        yield
    finally:
        for m in meters:  # the ones counted in above: a meter entered inside stays at 0
            m._recomputing -= 1
