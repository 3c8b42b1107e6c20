"""Gradient checkpointing (Chen et al. 2016; ``torch.utils.checkpoint``): keep a segment's
inputs, recompute its inside during backward.

:func:`checkpoint` runs ``fn(*inputs)`` without recording a graph, so none of the segment's
intermediate tensors are saved for backward; one graph node stands for the whole segment and
keeps only its tensor inputs. When backward reaches it, the segment runs again with gradients
enabled, in the conditions of the first run:

- fpsim's ambient state (:mod:`fpsim.state`) is restored from the snapshot taken before the
  forward run, except the observers (a :class:`~fpsim.autograd.memory_meter.MemoryMeter` active
  at backward time counts the recomputation): the engine's settings
  (:func:`fpsim.autograd.rounding_context`, :func:`matmul_accumulation`, ...), the flag
  contexts, the autocast region, and the random generators with their states, so dropout masks (and
  stochastic rounding) repeat exactly: the generator of :func:`fpsim.autograd.manual_seed`,
  fpsim's default stochastic-rounding generator, the rounding context's generator; likewise
  any ``numpy.random.Generator`` held by the segment's modules (e.g.
  ``nn.Dropout(p, rng=...)``) or passed in ``rngs``. Afterwards the state (generator states
  included) is put back as it was, so the recomputation consumes no randomness;
- every other ``contextvars`` variable is re-entered as it was (``contextvars.copy_context()``).

The recomputed segment is then backpropagated with the incoming gradient (its backward ops use
the settings active at backward time, as the other ops do). Each gradient that reaches one of
its inputs or of the parameters it used goes to the engine the moment it arrives
(:class:`~fpsim.autograd.tensor.OrderedGrads`), which rounds it and adds it where it adds the
others, as if the segment's ops were in the graph: the gradients are bitwise those without
checkpointing, and PyTorch's (whose non-reentrant checkpoint gives the same), even where an
input or a parameter is also used outside the segment (``tests/test_torch_grad_order.py``), in
every rounding mode, stochastic rounding's draws included (``tests/test_checkpoint.py``).
PyTorch's reentrant form, which sums the segment's gradients of an input before handing them on,
differs there. The price is one more forward pass of every checkpointed segment, which
:class:`~fpsim.autograd.memory_meter.MemoryMeter` counts.

:func:`checkpoint_sequential` cuts a chain of n layers into ``segments`` pieces; all but the last
are checkpointed (the last one's activations are needed first in backward, so it runs
normally, as in PyTorch). Pieces are as equal as possible with the longer ones first (PyTorch
gives the remainder to the last piece): the peak of saved activations is then the k - 1 kept
segment inputs plus the largest live segment, at most ``k + ceil(n / k)`` layer outputs
(:func:`fpsim.memory.checkpoint_peak_activations`), smallest near ``k = sqrt(n)``.

>>> import fpsim
>>> from fpsim import nn
>>> from fpsim.autograd import Tensor
>>> net = nn.Sequential(*[nn.Linear(4, 4, rng=i) for i in range(4)])
>>> x = Tensor(np.ones((2, 4)))
>>> checkpoint_sequential(net, 2, x).sum().backward()
>>> g = net[0].weight.grad.copy(); net.zero_grad()
>>> net(x).sum().backward()
>>> bool((net[0].weight.grad == g).all())
True
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence

import numpy as np

from .. import state as _state
from ..checks import as_int
from . import memory_meter as _meter
from .tensor import Tensor, backward_ordered, is_grad_enabled, make_result, no_grad

__all__ = ["checkpoint", "checkpoint_sequential"]


class _Uses:
    """Observer of the forward run: the leaf tensors requiring grad the segment reads (its
    parameters), and tensors requiring grad from outside that are neither inputs nor leaves."""

    def __init__(self, inputs: Sequence[Tensor]) -> None:
        self.inside: set[int] = set()
        self.known = {id(t) for t in inputs}
        self.leaves: dict[int, Tensor] = {}
        self.foreign: list[Tensor] = []

    def on_op(self, out: Tensor, parents, _op: str) -> None:
        self.inside.add(id(out))
        for p in parents:
            if not isinstance(p, Tensor) or not p._requires_grad or id(p) in self.known:
                continue
            if p._parents is None:
                self.leaves.setdefault(id(p), p)
            elif id(p) not in self.inside:
                self.foreign.append(p)

    def on_release(self, node: Tensor) -> None:
        pass


def _module_generators(obj, found: dict) -> None:
    """numpy Generators held as attributes of ``obj``'s modules (``nn.Dropout(rng=...)``)."""
    owner = getattr(obj, "__self__", obj)  # a bound method's module
    modules = getattr(owner, "modules", None)
    if not callable(modules):
        return
    for m in modules():
        for v in vars(m).values():
            if isinstance(v, np.random.Generator):
                found.setdefault(id(v), v)


class _ForwardState:
    """The forward-time ambient state (:func:`fpsim.state.snapshot`) and the states of the
    segment's own generators (held by its modules or passed in ``rngs``)."""

    def __init__(self, fn, extra: Sequence[np.random.Generator]) -> None:
        self.ambient = _state.snapshot()
        gens: dict[int, np.random.Generator] = {}
        for g in extra:
            if isinstance(g, np.random.Generator):
                gens.setdefault(id(g), g)
        _module_generators(fn, gens)
        self.states = [(g, g.bit_generator.state) for g in gens.values()]

    def run(self, call: Callable):
        """``call()`` under the forward's ambient state (the observers and grad mode on
        excepted) with every generator back in its forward-time state; afterwards the ambient
        state and every generator involved is as it was before."""
        now = _state.snapshot()
        touched = {id(g): g for g, _ in self.states}
        for snap in (self.ambient, now):
            for g, _ in snap["rng_states"]:
                touched.setdefault(id(g), g)
        saved = [(g, g.bit_generator.state) for g in touched.values()]
        try:
            _state.restore(self.ambient.without("observers").replace(grad_enabled=True))
            for g, st in self.states:
                g.bit_generator.state = st
            return call()
        finally:
            _state.restore(now)
            for g, st in saved:
                g.bit_generator.state = st


def checkpoint(fn: Callable, *inputs, rngs: Sequence[np.random.Generator] = ()):
    """``fn(*inputs)`` without saving its intermediate tensors for backward; backward runs it
    again (same random draws, same engine settings) and backpropagates through it.

    ``fn`` must return one Tensor and may read parameters (leaf tensors) that are not among
    ``inputs``; any other tensor requiring grad that it uses must be passed in ``inputs``.
    ``rngs``: further generators ``fn`` draws from (module-held ones are found). Without grad
    mode (``no_grad``) this simply returns ``fn(*inputs)``.

    >>> import fpsim
    >>> from fpsim.autograd import Tensor
    >>> w = Tensor([2.0], requires_grad=True)
    >>> y = checkpoint(lambda x: (x * w).exp(), Tensor([1.0]))
    >>> y.backward(); round(float(w.grad[0]), 4)  # d/dw exp(2w) at w = 2: exp(2)
    7.3891
    """
    if not callable(fn):
        raise TypeError(f"checkpoint: fn must be callable, got {type(fn).__name__}")
    if not is_grad_enabled():
        return fn(*inputs)
    tensors = [a for a in inputs if isinstance(a, Tensor)]
    forward = _ForwardState(fn, rngs)
    ctx = contextvars.copy_context()
    uses = _Uses(tensors)
    _meter.count_checkpointed_forward()
    _state.local.observers.append(uses)
    try:
        with no_grad():
            out = fn(*inputs)
    finally:
        _state.local.observers.remove(uses)
    if not isinstance(out, Tensor):
        raise TypeError(f"checkpoint: fn must return one Tensor, got {type(out).__name__}")
    if uses.foreign:
        raise ValueError(f"checkpoint: fn uses {len(uses.foreign)} tensor(s) that require grad "
                         "and come from outside the segment; pass them as inputs")
    if out._requires_grad and out._parents is None:  # fn returned a parameter itself (no op)
        uses.leaves.setdefault(id(out), out)
    params = [p for p in uses.leaves.values()]
    parents = tensors + [p for p in params if all(p is not t for t in tensors)]

    def backward(g):
        detached = []
        for t in tensors:
            d = Tensor._wrap(t._data, t.fmt)
            d._requires_grad = t._requires_grad
            d._grad_fmt = t._grad_fmt
            _meter.mark_activation_leaf(d)
            detached.append(d)
        sub = iter(detached)
        args = [next(sub) if isinstance(a, Tensor) else a for a in inputs]
        with _meter.recomputing():
            again = ctx.copy().run(forward.run, lambda: fn(*args))
        if not isinstance(again, Tensor):
            return (None,) * len(parents)
        # every gradient reaching an input or a parameter goes to the engine as it arrives,
        # rounded and added where it adds the others: as without checkpointing
        return backward_ordered(again, g, detached + parents[len(tensors):])

    return make_result(out._data, out.fmt, parents, backward, "checkpoint")


def _split(n: int, k: int) -> list[int]:
    """Segment lengths: as equal as possible, the longer ones first."""
    q, r = divmod(n, k)
    return [q + 1] * r + [q] * (k - r)


def checkpoint_sequential(functions, segments: int, input, *,
                          rngs: Sequence[np.random.Generator] = ()):
    """Run the chain ``functions`` (an ``nn.Sequential`` or a list of modules / callables) on
    ``input`` in ``segments`` pieces, checkpointing all but the last (see the module
    docstring for the cut and the memory it saves).

    >>> from fpsim import nn
    >>> from fpsim.autograd import Tensor
    >>> net = nn.Sequential(*[nn.Linear(3, 3, rng=i) for i in range(6)])
    >>> checkpoint_sequential(net, 3, Tensor(np.ones((1, 3)))).shape
    (1, 3)
    """
    fns = list(functions)
    if not fns:
        raise ValueError("checkpoint_sequential: no functions to run")
    # what range() takes; TypeError for bool, float, str, None, ...; the range checked below
    n = as_int("checkpoint_sequential: segments", segments, None)
    if not 1 <= n <= len(fns):
        raise ValueError(f"checkpoint_sequential: segments must be in [1, {len(fns)}] (the number "
                         f"of functions), got {n}")
    for i, f in enumerate(fns):
        if not callable(f):
            raise TypeError(f"checkpoint_sequential: function {i} is not callable "
                            f"({type(f).__name__})")
    x = input
    start = 0
    lengths = _split(len(fns), n)
    for j, length in enumerate(lengths):
        part = fns[start:start + length]
        start += length
        run = _Chain(part)
        x = run(x) if j == len(lengths) - 1 else checkpoint(run, x, rngs=rngs)
    return x


class _Chain:
    """A piece of a chain; exposes its modules so their generators are found."""

    def __init__(self, fns: list) -> None:
        self.fns = fns

    def __call__(self, x):
        for f in self.fns:
            x = f(x)
        return x

    def modules(self):
        for f in self.fns:
            owner = getattr(f, "__self__", f)
            mods = getattr(owner, "modules", None)
            if callable(mods):
                yield from mods()
