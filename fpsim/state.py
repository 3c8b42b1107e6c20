"""fpsim's ambient state, in one place: what every operation reads without being passed it.

Every piece is per thread (issue 32): two threads using :func:`fpsim.no_grad`, a rounding
context, a seed or an autocast region at the same time never see each other's settings, and a
new thread starts from the defaults (grad mode on, no observers, its own OS-seeded generators,
the default autograd settings, no flag context, no autocast region). The plain pieces live in
``local``, a :class:`threading.local`; ``flag_stack``, ``autocast_hook`` and
``autocast_cache`` are ContextVars (per thread, and per asyncio task). ``state.grad_enabled``
and the other plain pieces, read or set as module attributes, are the calling thread's.

The pieces, by name (each is documented where it is set):

- ``grad_enabled``: graph recording on or off (:func:`fpsim.no_grad`, ``enable_grad``,
  ``set_grad_enabled``); a plain bool.
- ``observers``: the objects the autograd engine notifies of every op (active
  :class:`~fpsim.autograd.memory_meter.MemoryMeter` s, checkpointing's observer); one list
  per thread, changed in place, so the engine may hold it under a local name for a pass.
- ``rounding_rng``: the generator stochastic rounding draws from when no ``rng`` is given
  (:func:`fpsim.seed`).
- ``init_rng``: the generator of parameter initialisation and dropout
  (:func:`fpsim.autograd.manual_seed`).
- ``autograd_settings``: the autograd engine's rounding policy (mode, generator, overflow,
  subnormals, ...) and matmul accumulation (:func:`fpsim.autograd.rounding_context`,
  :func:`~fpsim.autograd.matmul_accumulation`); an immutable object whose default is installed
  by :mod:`fpsim.autograd.context` (None until that module is imported).
- ``autocast_overrides``: :func:`fpsim.amp.autocast_policy.set_autocast_policy`'s changes to
  the autocast table (an immutable mapping).
- ``flag_stack``: the active :func:`fpsim.flag_context` s, innermost last (a ContextVar).
- ``autocast_hook``: the cast policy of the active :class:`fpsim.amp.autocast` region, or None
  (a ContextVar).
- ``autocast_cache``: the weight-cast cache of the outermost autocast region (a ContextVar).
- ``rng_states``: the bit-generator states of the generators above (``rounding_rng``,
  ``init_rng`` and the autograd settings' generator), so that a restore repeats their draws.

:func:`snapshot` returns an immutable :class:`Snapshot` of all pieces (or of the named ones);
:func:`restore` puts back exactly the pieces a snapshot holds; :class:`scoped` sets pieces for a
block and restores them after (the flag and rounding contexts and ``no_grad`` are built on it;
gradient checkpointing recomputes a segment under the snapshot taken at its forward run). A
scoped object keeps its entries' saved values per thread, so one object (a cached context) may
be entered by several threads at once.

Hot paths read the plain pieces as attributes of ``local`` (``state.local.grad_enabled``: one
thread-local lookup) or, for the ContextVars, with ``.get()``; nothing here is called per
operation. This module is the bottom layer of fpsim: it imports only NumPy. It also holds
:func:`as_generator`, the one rule that turns an ``rng`` argument (a Generator, an int seed or
None) into a generator, and :func:`as_seed`, the one check of an int seed.

>>> from fpsim import state
>>> snap = state.snapshot()
>>> state.grad_enabled = False
>>> state.restore(snap)
>>> state.grad_enabled
True
"""

from __future__ import annotations

import contextvars
import sys
import threading
import types
from typing import Any

import numpy as np

__all__ = ["PIECES", "Snapshot", "as_generator", "as_seed", "local", "restore", "scoped",
           "snapshot"]

# ------------------------------------------------------------------------ the pieces
class _Local(threading.local):
    """The calling thread's plain pieces. A thread starts from the defaults: grad mode on, no
    observers, its own OS-seeded generators and the default autograd settings (a class
    attribute, installed once by :mod:`fpsim.autograd.context`: immutable, so shared)."""

    autograd_settings: Any = None

    def __init__(self) -> None:
        self.grad_enabled = True
        self.observers: list = []
        self.rounding_rng = np.random.default_rng()
        self.init_rng = np.random.default_rng()
        self.autocast_overrides = _NO_OVERRIDES


_NO_OVERRIDES: types.MappingProxyType = types.MappingProxyType({})
local: _Local = _Local()  # hot paths read local.grad_enabled: one thread-local lookup
flag_stack: contextvars.ContextVar[tuple] = contextvars.ContextVar("fpsim_flag_stack",
                                                                   default=())
autocast_hook: contextvars.ContextVar = contextvars.ContextVar("fpsim_autocast_hook",
                                                              default=None)
autocast_cache: contextvars.ContextVar = contextvars.ContextVar("fpsim_autocast_cache",
                                                               default=None)

# rng_states comes last: a restore sets the generator objects first, then their states
PIECES: tuple[str, ...] = ("grad_enabled", "observers", "rounding_rng", "init_rng",
                           "autograd_settings", "autocast_overrides", "flag_stack",
                           "autocast_hook", "autocast_cache", "rng_states")
_PIECE_SET = frozenset(PIECES)
_VARS = {"flag_stack": flag_stack, "autocast_hook": autocast_hook,
         "autocast_cache": autocast_cache}
# the pieces held by the thread-local, read and set as its attributes (scoped's per-step path)
_PLAIN = frozenset(("grad_enabled", "rounding_rng", "init_rng", "autograd_settings",
                    "autocast_overrides"))


def set_default(name: str, value: Any) -> None:
    """Make ``value`` the default of piece ``name`` for every thread that has not set its own
    (internal: :mod:`fpsim.autograd.context` installs the default autograd settings). Only
    ``autograd_settings`` takes one: its values are immutable, so threads may share it."""
    if name != "autograd_settings":
        raise ValueError(f"set_default takes 'autograd_settings' (an immutable value shared "
                         f"by threads), got {name!r}")
    _Local.autograd_settings = value


class _Module(types.ModuleType):
    """This module's class: ``state.grad_enabled`` (and the other plain pieces) read and set
    the calling thread's value, as the module attributes they were before pieces became per
    thread. Hot paths use ``state.local`` directly (no property call)."""


def _thread_piece(name: str) -> property:
    def get(_module):
        return getattr(local, name)

    def set_(_module, value) -> None:
        setattr(local, name, value)

    return property(get, set_, doc=f"The calling thread's {name} (see the module docstring).")


for _name in (*_PLAIN, "observers"):
    setattr(_Module, _name, _thread_piece(_name))
del _name
sys.modules[__name__].__class__ = _Module


def as_seed(value: int, name: str = "seed") -> int:
    """A seed argument checked: a non-negative int (NumPy's generators take no negative
    seeds) as a Python int; another type is a TypeError, a negative int a ValueError, each
    naming the argument ``name``. Every int seed of fpsim goes through here (and through
    :func:`as_generator`), so a bad one fails at the call, not deep inside NumPy.

    >>> as_seed(3)
    3
    >>> as_seed(-1)
    Traceback (most recent call last):
    ...
    ValueError: seed must be a non-negative int (NumPy's generators take no negative seeds), \
got -1
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a non-negative int, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int (NumPy's generators take no "
                         f"negative seeds), got {value!r}")
    return int(value)


def as_generator(rng: np.random.Generator | int | None,
                 default: np.random.Generator | None = None, *,
                 name: str = "rng") -> np.random.Generator | None:
    """The generator an ``rng`` argument names: ``rng`` itself, a new generator seeded by a
    non-negative int, or ``default`` for None; another type is a TypeError, a negative seed a
    ValueError, each naming the argument (``name``). Every ``rng`` (or ``seed``) argument of
    fpsim goes through here (:func:`fpsim.rounding.default_rng`,
    :func:`fpsim.autograd.get_generator`, :func:`fpsim.autograd.rounding_context`, the figures'
    seeds, ...).

    >>> bool(as_generator(3).integers(10**9) == as_generator(3).integers(10**9))
    True
    >>> as_generator(None) is None
    True
    >>> as_generator(1.5)
    Traceback (most recent call last):
    ...
    TypeError: rng must be a numpy.random.Generator, an int seed or None, got 1.5
    >>> as_generator(-1, name="seed")
    Traceback (most recent call last):
    ...
    ValueError: seed must be a non-negative int (NumPy's generators take no negative seeds), \
got -1
    """
    if rng is None:
        return default
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(as_seed(rng, name))  # the one seed rule
    raise TypeError(f"{name} must be a numpy.random.Generator, an int seed or None, "
                    f"got {rng!r}")


# ------------------------------------------------------------------ frozen rng states
def _freeze(v):
    """A bit-generator state (nested dicts of ints, strings and arrays) as an immutable value."""
    if isinstance(v, dict):
        return types.MappingProxyType({k: _freeze(x) for k, x in v.items()})
    if isinstance(v, np.ndarray):
        v = v.copy()
        v.setflags(write=False)
    return v


def _thaw(v):
    if isinstance(v, types.MappingProxyType):
        return {k: _thaw(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return v.copy()
    return v


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.dtype == b.dtype and np.array_equal(a, b))
    if isinstance(a, types.MappingProxyType) and isinstance(b, types.MappingProxyType):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.random.Generator) or isinstance(b, np.random.Generator):
        return a is b  # a generator is a piece of state by identity; its state is separate
    return bool(a == b)


def _generators() -> list[np.random.Generator]:
    gens: list[np.random.Generator] = []
    loc = local
    policy = getattr(loc.autograd_settings, "policy", None)  # the autograd engine's
    for g in (loc.rounding_rng, loc.init_rng, getattr(policy, "rng", None)):
        if isinstance(g, np.random.Generator) and all(g is not h for h in gens):
            gens.append(g)
    return gens


# ------------------------------------------------------------------------ get / set
def _get(name: str):
    var = _VARS.get(name)
    if var is not None:
        return var.get()
    if name == "observers":
        return tuple(local.observers)
    if name == "rng_states":
        return tuple((g, _freeze(g.bit_generator.state)) for g in _generators())
    return getattr(local, name)


def _set(name: str, value) -> None:
    var = _VARS.get(name)
    if var is not None:
        var.set(value)
    elif name == "observers":
        local.observers[:] = value  # in place: a meter's or checkpoint's list stays this one
    elif name == "rng_states":
        for g, st in value:
            g.bit_generator.state = _thaw(st)
    else:
        setattr(local, name, value)


def _check_names(names) -> None:
    bad = [n for n in names if n not in PIECES]
    if bad:
        raise ValueError(f"unknown state piece(s) {', '.join(map(repr, bad))}; valid: "
                         f"{', '.join(PIECES)}")


class Snapshot:
    """An immutable record of ambient-state pieces (see :data:`PIECES`): ``snap["name"]``,
    ``snap.names``, ``snap.replace(name=value)``, ``snap.without(*names)``.

    >>> s = snapshot("grad_enabled")
    >>> s.names, s["grad_enabled"]
    (('grad_enabled',), True)
    >>> s.replace(grad_enabled=False)["grad_enabled"]
    False
    """

    __slots__ = ("_items",)

    def __init__(self, items: tuple[tuple[str, Any], ...]) -> None:
        object.__setattr__(self, "_items", tuple(items))

    def __setattr__(self, name, value):
        raise AttributeError("a Snapshot is immutable; use replace()")

    def __delattr__(self, name):
        raise AttributeError("a Snapshot is immutable")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self._items)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def __getitem__(self, name: str):
        for n, v in self._items:
            if n == name:
                return v
        raise KeyError(f"{name!r} is not in this snapshot (it holds {', '.join(self.names)})")

    def replace(self, **values) -> Snapshot:
        """A snapshot with the named pieces set to ``values`` (added if absent)."""
        _check_names(values)
        if "observers" in values:
            values["observers"] = tuple(values["observers"])
        if "rng_states" in values:
            values["rng_states"] = tuple((g, _freeze(st) if isinstance(st, dict) else st)
                                         for g, st in values["rng_states"])
        have = dict(self._items)
        have.update(values)
        return Snapshot(tuple((n, have[n]) for n in PIECES if n in have))

    def without(self, *names: str) -> Snapshot:
        """A snapshot without the named pieces (a restore leaves them alone)."""
        _check_names(names)
        return Snapshot(tuple((n, v) for n, v in self._items if n not in names))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return self.names == other.names and all(
            _same(a, b) for (_, a), (_, b) in zip(self._items, other._items, strict=True))

    __hash__ = None  # type: ignore[assignment] - equal by value, holds unhashable pieces

    def __repr__(self) -> str:
        return f"Snapshot({', '.join(self.names)})"


def snapshot(*names: str) -> Snapshot:
    """An immutable record of the ambient state: every piece, or only the named ones.

    >>> snapshot().names[:2]
    ('grad_enabled', 'observers')
    """
    _check_names(names)
    return Snapshot(tuple((n, _get(n)) for n in PIECES if not names or n in names))


def restore(snap: Snapshot) -> None:
    """Put back exactly the pieces ``snap`` holds (the generator objects before their states).

    >>> import fpsim
    >>> snap = snapshot()
    >>> fpsim.seed(1); a = fpsim.rounding.default_rng().random()
    >>> restore(snap); fpsim.seed(1)
    >>> fpsim.rounding.default_rng().random() == a
    True
    """
    if not isinstance(snap, Snapshot):
        raise TypeError(f"restore takes a Snapshot (from fpsim.state.snapshot()), got "
                        f"{type(snap).__name__}")
    for name, value in snap._items:
        _set(name, value)


class scoped:  # noqa: N801 - a context manager, used like one
    """Context manager: set the named pieces for the block, restore them (only them) after.
    Cheap enough for a per-operation context (a ContextVar piece is set and reset by token).

    >>> import fpsim.state
    >>> with scoped(grad_enabled=False):
    ...     fpsim.state.grad_enabled
    False
    >>> fpsim.state.grad_enabled
    True
    """

    __slots__ = ("_values", "_saved")

    def __init__(self, **values) -> None:
        if not _PIECE_SET.issuperset(values):
            _check_names(values)
        self._values = values
        # the records of the active entries, per thread (a cached context object may be
        # entered by several threads at once, and again inside its own block): thread id ->
        # list, innermost last
        self._saved: dict[int, list] = {}

    def __enter__(self) -> None:
        loc = local
        saved = []
        for name, value in self._values.items():
            var = _VARS.get(name)
            if var is not None:
                saved.append((var, var.set(value)))
            elif name in _PLAIN:
                saved.append((name, getattr(loc, name)))
                setattr(loc, name, value)
            else:
                saved.append((name, _get(name)))
                _set(name, value)
        records = self._saved.get(_ident())
        if records is None:
            self._saved[_ident()] = [saved]
        else:
            records.append(saved)

    def __exit__(self, *exc) -> None:
        ident = _ident()
        records = self._saved[ident]
        saved = records.pop()
        if not records:
            del self._saved[ident]
        loc = local
        for key, old in reversed(saved):
            if key in _PLAIN:  # (a ContextVar is never in it)
                setattr(loc, key, old)
            elif isinstance(key, str):
                _set(key, old)
            else:
                key.reset(old)


_ident = threading.get_ident
