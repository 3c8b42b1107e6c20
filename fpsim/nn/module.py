"""``Module`` and ``Parameter``: the bookkeeping of PyTorch's ``torch.nn.Module``.

A module registers the :class:`Parameter` s, buffers (tensors saved in ``state_dict`` but not
trained, e.g. running statistics) and sub-modules assigned to its attributes.
``module.to(fmt)`` rounds parameters and floating-point buffers to ``fmt`` in place (nearest
even), as ``model.half()`` does in PyTorch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ..autograd.tensor import Tensor, as_format
from ..formats import FP32, Format

__all__ = ["Module", "Parameter", "Sequential"]


def as_module(obj: object, what: str) -> Module:
    """``obj`` if it is a :class:`Module`, else a TypeError naming the argument ``what`` (not
    the AttributeError of the first method called on it). An internal API of the layers that
    take a model (quantization, LoRA, memory meters).

    >>> as_module("net", "prepare: model")
    Traceback (most recent call last):
    ...
    TypeError: prepare: model must be an fpsim.nn.Module, got str 'net'
    """
    if not isinstance(obj, Module):
        shown = repr(obj)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise TypeError(f"{what} must be an fpsim.nn.Module, got {type(obj).__name__} {shown}")
    return obj


def _check_name(name, what: str) -> None:
    """PyTorch's rules for a registered name: a non-empty str without '.'."""
    if not isinstance(name, str):
        raise TypeError(f"{what} name should be a string, got {type(name).__name__} {name!r}")
    if not name or "." in name:
        raise ValueError(f"{what} name must be a non-empty string without '.', got {name!r}")


class Parameter(Tensor):
    """A tensor a :class:`Module` trains: ``requires_grad=True`` by default; ``fmt`` defaults to
    the format of a Tensor argument, else fp32.

    >>> import fpsim
    >>> p = Parameter([1.0, 2.0], fpsim.FP16)
    >>> p.requires_grad, p.fmt.name
    (True, 'fp16')
    """

    __slots__ = ()

    def __init__(self, data, fmt: Format | str | None = None, requires_grad: bool = True, *,
                 grad_fmt: Format | str | None = None) -> None:
        if fmt is None:
            fmt = data.fmt if isinstance(data, Tensor) else FP32
        super().__init__(data, fmt, requires_grad, grad_fmt=grad_fmt)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


# The attributes Module.__init__ sets on every instance: never mirrored (see Module._mirror).
_OWN = frozenset(("_parameters", "_buffers", "_modules", "_no_cast", "training"))


class Module:
    """Base class of layers and models: subclasses assign parameters / sub-modules in
    ``__init__`` and define ``forward``; calling the module calls ``forward``.

    >>> import fpsim
    >>> class Scale(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.s = Parameter([2.0])
    ...     def forward(self, x):
    ...         return x * self.s
    >>> m = Scale()
    >>> [name for name, _ in m.named_parameters()], m(fpsim.autograd.Tensor([3.0])).item()
    (['s'], 6.0)
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_no_cast", set())
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    # Parameters, buffers and sub-modules live in the three stores (their order is the
    # state_dict's) and are mirrored in the instance __dict__, so that ``self.weight`` is a
    # plain attribute read (a miss falling back to __getattr__ costs much more, on every
    # layer call). Every write below keeps the mirror equal to the stores.
    def _store(self, store: dict, name: str, value) -> None:
        store[name] = value
        self._mirror(name)

    def _mirror(self, name: str) -> None:
        """Mirror what __getattr__ finds for ``name`` (the parameter, else the buffer, else the
        sub-module). Module's own attributes and class attributes are found before
        __getattr__, so a name among them is not mirrored: reads find what they found
        before the mirror."""
        d = self.__dict__
        if name in _OWN or any(name in vars(k) for k in type(self).__mro__):
            return
        for store in (d["_parameters"], d["_buffers"], d["_modules"]):
            if name in store:
                d[name] = store[name]
                return
        d.pop(name, None)

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError("call super().__init__() before assigning attributes of a "
                                 "Module")
        params, bufs, mods = d["_parameters"], d["_buffers"], d["_modules"]
        if isinstance(value, (Parameter, Module)):
            for store in (params, bufs, mods):
                store.pop(name, None)
            d.pop(name, None)
            self._store(params if isinstance(value, Parameter) else mods, name, value)
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as parameter {name!r} "
                                "(fpsim.nn.Parameter or None expected)")
            self._store(params, name, None)
        elif name in bufs:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} "
                                "(Tensor or None expected)")
            self._store(bufs, name, value)
        elif name in mods:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as child module "
                                f"{name!r} (Module or None expected)")
            self._store(mods, name, None)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        # Python calls this only after the normal lookup failed: registered names are found in
        # the __dict__ mirror first, so this is the miss path (no fast path needed here)
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __copy__(self) -> Module:
        """A shallow copy: the same parameters, buffers and sub-modules, in stores of its own
        (shared stores would leave one module's mirror stale when the other registers)."""
        cls = type(self)
        clone = object.__new__(cls)
        d = clone.__dict__
        d.update(self.__dict__)
        for own in ("_parameters", "_buffers", "_modules", "_no_cast"):
            if own in d:
                d[own] = d[own].copy()
        for k in cls.__mro__:  # a subclass's __slots__, as copy.copy's default copies them
            slots = k.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__") and hasattr(self, slot):
                    object.__setattr__(clone, slot, getattr(self, slot))
        return clone

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._mirror(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or None) under ``name``.

        >>> m = Module(); m.register_parameter("w", Parameter([1.0])); list(m.state_dict())
        ['w']
        """
        _check_name(name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign {type(param).__name__} as parameter {name!r} "
                            "(fpsim.nn.Parameter or None required)")
        self._store(self._parameters, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, *, cast: bool = True) -> None:
        """Register a buffer: a tensor saved in ``state_dict`` but not trained. ``cast=False``
        keeps it out of ``to(fmt)`` (integer counters).

        >>> m = Module(); m.register_buffer("count", Tensor(0.0)); [n for n, _ in m.named_buffers()]
        ['count']
        """
        _check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"buffer {name!r} must be a Tensor or None, got "
                            f"{type(tensor).__name__}")
        self._store(self._buffers, name, tensor)
        if not cast:
            self._no_cast.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register a sub-module under ``name``.

        >>> m = Module(); m.add_module("inner", Module()); [n for n, _ in m.named_children()]
        ['inner']
        """
        _check_name(name, "module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"module {name!r} must be an fpsim.nn.Module or None, got "
                            f"{type(module).__name__}")
        self._store(self._modules, name, module)

    # ------------------------------------------------------------------- traversal
    def forward(self, *args, **kwargs):
        """The computation; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(name, module) for this module and every descendant, each once, depth first (the
        order of PyTorch's ``named_modules`` and ``state_dict``)."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if id(mod) in seen:
                continue
            seen.add(id(mod))
            yield name, mod
            children = [(f"{name}.{child_name}" if name else child_name, child)
                        for child_name, child in mod._modules.items() if child is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        """This module and every descendant.

        >>> len(list(Sequential(Module(), Module()).modules()))
        3
        """
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) of the direct sub-modules.

        >>> [n for n, _ in Sequential(Module()).named_children()]
        ['0']
        """
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        """The direct sub-modules.

        >>> len(list(Sequential(Module(), Module()).children()))
        2
        """
        for _, m in self.named_children():
            yield m

    def named_parameters(self, prefix: str = "", recurse: bool = True
                         ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter), each parameter once.

        >>> from fpsim.nn import Linear
        >>> [n for n, _ in Sequential(Linear(1, 1, rng=0)).named_parameters()]
        ['0.weight', '0.bias']
        """
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_name, mod in mods:
            for name, p in mod._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The parameters, each once.

        >>> from fpsim.nn import Linear
        >>> len(list(Linear(2, 2, rng=0).parameters()))
        2
        """
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True
                      ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer).

        >>> from fpsim.nn import BatchNorm1d
        >>> [n for n, _ in BatchNorm1d(2).named_buffers()]
        ['running_mean', 'running_var', 'num_batches_tracked']
        """
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_name, mod in mods:
            for name, b in mod._buffers.items():
                if b is not None:
                    yield (f"{mod_name}.{name}" if mod_name else name), b

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers.

        >>> from fpsim.nn import BatchNorm1d
        >>> len(list(BatchNorm1d(2).buffers()))
        3
        """
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every sub-module, then on self.

        >>> names = []; _ = Sequential(Module()).apply(lambda m: names.append(type(m).__name__))
        >>> names
        ['Module', 'Sequential']
        """
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------------ modes
    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active, batch norm on batch statistics) recursively.

        >>> Sequential(Module()).train(False)[0].training
        False
        """
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode (``train(False)``).

        >>> Module().eval().training
        False
        """
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters (to None, or to zeros).

        >>> from fpsim.nn import Linear
        >>> lin = Linear(1, 1, rng=0); lin.weight.grad = [[1.0]]; lin.zero_grad()
        >>> lin.weight.grad is None
        True
        """
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = np.zeros_like(p.grad)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` of every parameter.

        >>> from fpsim.nn import Linear
        >>> Linear(1, 1, rng=0).requires_grad_(False).weight.requires_grad
        False
        """
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def to(self, fmt: Format | str, *, recurse: bool = True) -> Module:
        """Round every parameter and floating-point buffer to ``fmt`` in place (nearest even);
        gradients follow unless a parameter has its own ``grad_fmt``. ``recurse=False``: only
        this module's own parameters and buffers, not its children's (Apex's convert_network
        keeps batch norm layers in fp32 that way).

        >>> import fpsim
        >>> from fpsim.nn import Linear, Sequential
        >>> Linear(2, 2, rng=0).to("fp16").weight.data.dtype
        dtype('float16')
        >>> Sequential(Linear(2, 2, rng=0)).to("fp16", recurse=False)[0].weight.data.dtype
        dtype('float32')
        """
        if not isinstance(recurse, bool):
            raise TypeError(f"recurse must be a bool, got {recurse!r}")
        fmt = as_format(fmt)
        for p in self.parameters(recurse=recurse):
            p.cast_(fmt)
        for mod in (self.modules() if recurse else (self,)):
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._no_cast:
                    b.cast_(fmt)
        return self

    # ------------------------------------------------------------------- state dict
    def state_dict(self) -> OrderedDict:
        """Name -> a copy of the stored array (real width) of every parameter and buffer.

        >>> from fpsim.nn import Linear
        >>> list(Linear(2, 3, rng=0).state_dict())
        ['weight', 'bias']
        """
        out: OrderedDict = OrderedDict()
        for mod_name, mod in self.named_modules():
            for store in (mod._parameters, mod._buffers):
                for name, t in store.items():
                    if t is not None:
                        out[f"{mod_name}.{name}" if mod_name else name] = t.data.copy()
        return out

    def load_state_dict(self, state_dict, strict: bool = True) -> tuple[list[str], list[str]]:
        """Copy values into the parameters and buffers (rounded to each one's format); with
        ``strict`` a missing or unexpected key is a ValueError. Returns (missing, unexpected).

        >>> from fpsim.nn import Linear
        >>> Linear(2, 2, rng=1).load_state_dict(Linear(2, 2, rng=0).state_dict())
        ([], [])
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a mapping of names to arrays (from "
                            f"state_dict()), got {type(state_dict).__name__}")
        own: dict[str, Tensor] = {}
        for mod_name, mod in self.named_modules():
            for store in (mod._parameters, mod._buffers):
                for name, t in store.items():
                    if t is not None:
                        own[f"{mod_name}.{name}" if mod_name else name] = t
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise ValueError(f"Error(s) in loading state_dict for {type(self).__name__}: "
                             f"missing keys {missing}, unexpected keys {unexpected}")
        for k, t in own.items():
            if k not in state_dict:
                continue
            v = state_dict[k]
            arr = v.data if isinstance(v, Tensor) else np.asarray(v)
            if arr.shape != t.shape:
                raise ValueError(f"size mismatch for {k}: copying a param with shape "
                                 f"{arr.shape}, the shape in the current model is {t.shape}")
            t._data = Tensor(arr, t.fmt)._data
        return missing, unexpected

    # ------------------------------------------------------------------------ repr
    def extra_repr(self) -> str:
        """The text between the parentheses of this module's repr.

        >>> Module().extra_repr()
        ''
        """
        return ""

    def __repr__(self) -> str:
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ")
                 for name, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n" + "\n".join(lines) + "\n)"


_MODULE_CALL = Module.__call__


class Sequential(Module):
    """Modules applied one after another.

    >>> from fpsim.nn import Linear, ReLU
    >>> net = Sequential(Linear(2, 4, rng=0), ReLU(), Linear(4, 1, rng=1))
    >>> len(net), type(net[1]).__name__
    (3, 'ReLU')
    """

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential takes Modules, got {type(m).__name__} at {i}")
            self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            # Module.__call__ is forward: called directly unless a subclass calls otherwise
            x = m.forward(x) if type(m).__call__ is _MODULE_CALL else m(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        """Add a module at the end.

        >>> len(Sequential().append(Module()))
        1
        """
        self.add_module(str(len(self)), module)
        return self
