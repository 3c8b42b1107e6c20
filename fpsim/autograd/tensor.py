"""The :class:`Tensor` of the autograd engine, gradient mode, and the backward pass.

A tensor holds its values in its format's real width (``fmt.storage_dtype``: ``np.float16``,
``ml_dtypes.bfloat16`` / float8, ``float32``; formats without a NumPy type in float32 or
float64). An operation computes its result exactly or in float64 and rounds it once to the
output format (see :mod:`fpsim.autograd.functional` for the table), and records a closure that
maps the output's gradient to its inputs' gradients. ``backward()`` visits the graph in
PyTorch's order, the most recently recorded op first (a reverse topological order), and adds the
gradients a tensor receives as they arrive, so sums of several round as PyTorch's do; every
gradient is rounded to the gradient format of the tensor it belongs to (by default the tensor's
own format, so fp16 gradients underflow as on a GPU).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Sequence

import numpy as np

from .. import state as _state
from ..formats import BF16, FP16, FP32, Format, get_float_format
from ..modes import Rounding
from ..rounding import round as fpsim_round
from ..rounding.fp16 import SMALL, f16_to_wide, f32_to_f16
from .context import bf16_sum32, plain_rounding, round_to, widen

__all__ = [
    "Tensor",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "as_format",
]

# Grad mode is ambient state, per thread: fpsim.state.local.grad_enabled.
# Objects notified by the engine (the memory meter, checkpointing): ``on_op(out, parents, op)``
# after every operation result (recorded or not), ``on_release(node)`` after a node's backward
# has run and its closure was freed: the calling thread's list fpsim.state.local.observers.
_LOCAL = _state.local
_BF16 = BF16.storage_dtype


def is_grad_enabled() -> bool:
    """Whether operations record the graph (False inside :class:`no_grad`).

    >>> is_grad_enabled()
    True
    """
    return _LOCAL.grad_enabled


class set_grad_enabled:  # noqa: N801 - named as in PyTorch
    """Turn graph recording on or off: as a call, or as a context manager restoring the
    previous state.

    >>> with set_grad_enabled(False):
    ...     is_grad_enabled()
    False
    """

    def __init__(self, mode: bool) -> None:
        self.prev = _LOCAL.grad_enabled  # the calling thread's (exit restores it there)
        _LOCAL.grad_enabled = bool(mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        _LOCAL.grad_enabled = self.prev


class no_grad(_state.scoped):  # noqa: N801 - named as in PyTorch
    """Context manager (or decorator): operations inside record no graph.

    >>> from fpsim.autograd import Tensor
    >>> w = Tensor([1.0], requires_grad=True)
    >>> with no_grad():
    ...     y = w * 2
    >>> y.requires_grad
    False
    """

    __slots__ = ()
    _mode = False

    def __init__(self) -> None:
        # the calling thread's grad mode, restored per thread and per entry (one object may
        # be shared by threads, or entered again inside its own block)
        super().__init__(grad_enabled=self._mode)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)

        return wrapper


class enable_grad(no_grad):  # noqa: N801 - named as in PyTorch
    """Context manager (or decorator): record the graph, also inside :class:`no_grad`.

    >>> with no_grad():
    ...     with enable_grad():
    ...         is_grad_enabled()
    True
    """

    __slots__ = ()
    _mode = True


def as_format(fmt: Format | str) -> Format:
    """A float :class:`~fpsim.Format` from a Format, name or dtype (ValueError / TypeError for
    unknown names or integer formats).

    >>> as_format("half").name
    'fp16'
    """
    if isinstance(fmt, Format):
        return fmt
    return get_float_format(fmt)


def _freed(_g):
    raise RuntimeError(
        "Trying to backward through the graph a second time (or directly access saved tensors "
        "after they have already been freed). Specify retain_graph=True if you need to "
        "backward through the graph a second time.")


class Tensor:
    """An array of values of one floating-point format, with reverse-mode autodiff.

    - ``data``: the stored array, in ``fmt.storage_dtype`` (rounded on construction to nearest
      even with :func:`fpsim.cast`).
    - ``grad``: None or a NumPy array in the gradient format (``grad_fmt``, default ``fmt``).
    - ``numpy()``: the stored array itself (shares memory, real width); ``numpy(np.float64)``
      gives an exact float64 copy.

    >>> import fpsim
    >>> x = Tensor([0.1, 2.0], fpsim.FP16, requires_grad=True)
    >>> x.data
    array([0.1, 2. ], dtype=float16)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad
    array([0.2, 4. ], dtype=float16)
    """

    __slots__ = ("_data", "fmt", "_requires_grad", "_grad", "_grad_fmt", "_parents",
                 "_backward", "_op", "_retains_grad", "_seq", "__weakref__")
    __array_ufunc__ = None  # NumPy defers `ndarray + Tensor` to Tensor.__radd__

    def __init__(self, data, fmt: Format | str = FP32, requires_grad: bool = False, *,
                 grad_fmt: Format | str | None = None) -> None:
        fmt = as_format(fmt)
        if isinstance(data, Tensor):
            data = data._data
        src = _real_array(data, fmt)
        if src.dtype == fmt.storage_dtype and fmt.dtype is not None:
            arr = src.copy()
        else:
            arr = round_to(src, fmt, Rounding.NEAREST_EVEN)
            if arr is src or not arr.flags.owndata or not arr.flags.writeable:
                arr = arr.copy()
        self._data = arr
        self.fmt = fmt
        self._grad = None
        self._grad_fmt = None if grad_fmt is None else as_format(grad_fmt)
        self._parents = None
        self._backward = None
        self._op = ""
        self._retains_grad = False
        self._requires_grad = False
        self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, arr: np.ndarray, fmt: Format) -> Tensor:
        """A tensor around an array already holding values of ``fmt`` (no copy, no check)."""
        t = object.__new__(cls)
        t._data = arr
        t.fmt = fmt
        t._requires_grad = False
        t._grad = None
        t._grad_fmt = None
        t._parents = None
        t._backward = None
        t._op = ""
        t._retains_grad = False
        return t

    # ------------------------------------------------------------------ attributes
    @property
    def data(self) -> np.ndarray:
        """The stored array (``fmt.storage_dtype``). Assigning rounds to ``fmt`` (nearest
        even)."""
        return self._data

    @data.setter
    def data(self, value) -> None:
        if isinstance(value, Tensor):
            value = value._data
        self._data = Tensor(value, self.fmt)._data

    @property
    def grad_fmt(self) -> Format:
        """The format gradients of this tensor are rounded to (default: ``fmt``)."""
        return self._grad_fmt if self._grad_fmt is not None else self.fmt

    @grad_fmt.setter
    def grad_fmt(self, fmt: Format | str | None) -> None:
        self._grad_fmt = None if fmt is None else as_format(fmt)
        if self._grad is not None:
            self._grad = round_to(self._grad, self.grad_fmt)

    @property
    def grad(self) -> np.ndarray | None:
        """The accumulated gradient (None until a backward pass reaches this leaf)."""
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is None:
            self._grad = None
            return
        if isinstance(value, Tensor):
            value = value._data
        arr = np.asarray(value)
        if arr.shape != self.shape:
            raise ValueError(f"assigned grad has shape {arr.shape}, but the tensor has shape "
                             f"{self.shape}")
        self._grad = Tensor(arr, self.grad_fmt)._data

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to this tensor."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self._parents is not None and not value:
            raise RuntimeError("you can only change requires_grad flags of leaf variables; "
                               "use detach() for a non-differentiable copy")
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place and return self.

        >>> Tensor([1.0]).requires_grad_().requires_grad
        True
        """
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        """True for tensors not produced by a recorded operation."""
        return self._parents is None

    def retain_grad(self) -> None:
        """Keep ``.grad`` of this non-leaf tensor after backward (as PyTorch).

        >>> x = Tensor([1.0], requires_grad=True); y = x * 2; y.retain_grad()
        >>> (y * 3).sum().backward(); y.grad.tolist()
        [3.0]
        """
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        self._retains_grad = True

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, as a tuple."""
        return self._data.shape

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return self._data.ndim

    @property
    def dtype(self) -> np.dtype:
        """The storage dtype of the values."""
        return self._data.dtype

    def size(self, dim: int | None = None):
        """The shape, or one of its entries (as PyTorch's ``size``).

        >>> Tensor(np.zeros((2, 3))).size(1)
        3
        """
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        """The number of elements.

        >>> Tensor(np.zeros((2, 3))).numel()
        6
        """
        return int(self._data.size)

    def dim(self) -> int:
        """The number of dimensions (PyTorch's name).

        >>> Tensor(np.zeros((2, 3))).dim()
        2
        """
        return self._data.ndim

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        body = np.array2string(self._data.astype(np.float64), separator=", ", prefix="Tensor(")
        extra = ", requires_grad=True" if self._requires_grad else ""
        if self._op:
            extra += f", op={self._op}"
        return f"Tensor({body}, fmt={self.fmt.name}{extra})"

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if dtype is None:
            return self._data
        with np.errstate(invalid="ignore"):  # a stored signalling NaN: quieted, not a warning
            return self._data.astype(dtype)

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._data.astype(np.float64).reshape(()))

    def __float__(self) -> float:
        return self.item()

    __hash__ = object.__hash__

    # ---------------------------------------------------------------- conversions
    def numpy(self, dtype=None) -> np.ndarray:
        """The stored array itself (shares memory, dtype ``fmt.storage_dtype``), or a copy
        converted to ``dtype`` (``numpy(np.float64)``: the exact values as float64).

        >>> import fpsim
        >>> Tensor([1/3], fpsim.BF16).numpy(np.float64)
        array([0.33398438])
        """
        if dtype is None:
            return self._data
        with np.errstate(invalid="ignore"):  # a stored signalling NaN: quieted, not a warning
            return self._data.astype(dtype)

    def item(self) -> float:
        """The value of a one-element tensor as a Python float.

        >>> Tensor([0.1], "fp16").item()
        0.0999755859375
        """
        if self._data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return float(self._data.reshape(-1)[0])  # a NumPy or ml_dtypes scalar: exact

    def tolist(self):
        """Values as (nested) Python floats.

        >>> Tensor([[1.0, 2.0]]).tolist()
        [[1.0, 2.0]]
        """
        return self._data.astype(np.float64).tolist()

    def cast_(self, fmt: Format | str) -> None:
        """Move this tensor's values (and gradient) to ``fmt`` in place, rounding to nearest even
        (what ``Module.to`` does to parameters).

        >>> t = Tensor([1.0 + 2.0**-20]); t.cast_("fp16"); t.fmt.name, t.tolist()
        ('fp16', [1.0])
        """
        fmt = as_format(fmt)
        if fmt == self.fmt:
            return
        follow = self._grad_fmt is None
        self._data = Tensor(self._data, fmt)._data
        self.fmt = fmt
        if self._grad is not None and follow:
            self._grad = Tensor(self._grad, fmt)._data


    # Internal API for fpsim's other packages (ZeRO's flat buffers, Apex O2's fp32 gradients,
    # quantized layers' outputs): they store an array as it is, without the rounding copy of
    # the public setters; the caller guarantees the values are exact in the target format.
    wrap = _wrap

    def set_data_(self, arr: np.ndarray) -> None:
        """Store ``arr`` as the values, as it is: no copy, no rounding (it may be a view into a
        shared buffer). It must have this tensor's shape and ``fmt.storage_dtype``.

        >>> t = Tensor([1.0, 2.0], "fp16"); buf = np.zeros(4, np.float16)
        >>> t.set_data_(buf[:2]); buf[0] = 3; t.tolist()
        [3.0, 0.0]
        """
        if not isinstance(arr, np.ndarray) or arr.shape != self.shape \
                or arr.dtype != self.fmt.storage_dtype:
            raise ValueError(f"set_data_ takes an array of shape {self.shape} and dtype "
                             f"{np.dtype(self.fmt.storage_dtype)}, got "
                             f"{getattr(arr, 'shape', type(arr).__name__)} "
                             f"{getattr(arr, 'dtype', '')}".rstrip())
        self._data = arr

    def set_grad_(self, arr: np.ndarray) -> None:
        """Store ``arr`` as the gradient, as it is: no copy, no rounding to ``grad_fmt`` (Apex
        O2 keeps an fp32 copy of an fp16 gradient until the update). Shape must match.

        >>> t = Tensor([1.0], "fp16"); t.set_grad_(np.array([2.0**-30], np.float32)); t.grad
        array([9.313226e-10], dtype=float32)
        """
        if not isinstance(arr, np.ndarray) or arr.shape != self.shape:
            raise ValueError(f"set_grad_ takes an array of shape {self.shape}, got "
                             f"{getattr(arr, 'shape', type(arr).__name__)}")
        self._grad = arr

    def detach(self) -> Tensor:
        """A tensor sharing the values, cut from the graph.

        >>> (Tensor([1.0], requires_grad=True) * 2).detach().requires_grad
        False
        """
        return Tensor._wrap(self._data, self.fmt)

    def clone(self) -> Tensor:
        """A copy of the values that stays in the graph (gradient passes through).

        >>> Tensor([1.0], requires_grad=True).clone().requires_grad
        True
        """
        return _F.identity(self, copy=True)

    def to(self, fmt: Format | str, rounding: Rounding | str = "nearest_even") -> Tensor:
        """Differentiable cast to ``fmt`` with ``rounding``; the gradient flows back rounded to
        this tensor's gradient format. Returns self when the format is unchanged.

        >>> import fpsim
        >>> Tensor([1/3]).to("bf16").data.dtype.name
        'bfloat16'
        """
        return _F.cast_to(self, fmt, rounding)

    # --------------------------------------------------------------------- backward
    def backward(self, gradient=None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) * gradient into ``.grad`` of every leaf that requires it.

        ``gradient`` may be omitted only for a one-element tensor (PyTorch's rule). Gradients
        are rounded to each tensor's gradient format, in the active :func:`rounding_context` mode.
        ``retain_graph=True`` keeps the graph for another backward pass.

        >>> x = Tensor([2.0], requires_grad=True)
        >>> (x * x).backward(np.array([1.0])); x.grad.tolist()
        [4.0]
        """
        if not self._requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a "
                               "grad_fn")
        if gradient is None:
            if self._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = np.empty(self._data.shape, dtype=self.grad_fmt.storage_dtype)
            g.fill(1)  # np.ones, without its Python wrapper (once a step)
        else:
            if isinstance(gradient, Tensor):
                gradient = gradient._data
            g = np.asarray(gradient)
            if g.shape != self.shape:
                raise ValueError(f"Mismatch in shape: gradient has a shape of {g.shape} and the "
                                 f"output has a shape of {self.shape}")
            g = Tensor(g, self.grad_fmt)._data
        _run_backward(self, g, retain_graph)

    # ------------------------------------------------------- operators and methods
    # Thin aliases of fpsim.autograd.functional (the one place of each op's forward and
    # backward, and of its precision rule).
    def __add__(self, other) -> Tensor:
        return _F.add(self, other)

    def __radd__(self, other) -> Tensor:
        return _F.add(other, self)

    def __sub__(self, other) -> Tensor:
        return _F.sub(self, other)

    def __rsub__(self, other) -> Tensor:
        return _F.sub(other, self)

    def __mul__(self, other) -> Tensor:
        return _F.mul(self, other)

    def __rmul__(self, other) -> Tensor:
        return _F.mul(other, self)

    def __truediv__(self, other) -> Tensor:
        return _F.div(self, other)

    def __rtruediv__(self, other) -> Tensor:
        return _F.div(other, self)

    def __neg__(self) -> Tensor:
        return _F.neg(self)

    def __pos__(self) -> Tensor:
        return self

    def __pow__(self, exponent) -> Tensor:
        return _F.pow(self, exponent)

    def __rpow__(self, base) -> Tensor:
        return _F.pow(base, self)

    def __matmul__(self, other) -> Tensor:
        return _F.matmul(self, other)

    def __rmatmul__(self, other) -> Tensor:
        return _F.matmul(other, self)

    def __getitem__(self, index) -> Tensor:
        return _F.getitem(self, index)

    def add(self, other) -> Tensor:
        """``self + other`` (:func:`fpsim.autograd.functional.add`).

        >>> Tensor([1.0]).add(2).item()
        3.0
        """
        return _F.add(self, other)

    def sub(self, other) -> Tensor:
        """``self - other``.

        >>> Tensor([1.0]).sub(2).item()
        -1.0
        """
        return _F.sub(self, other)

    def mul(self, other) -> Tensor:
        """``self * other``.

        >>> Tensor([3.0]).mul(2).item()
        6.0
        """
        return _F.mul(self, other)

    def div(self, other) -> Tensor:
        """``self / other``.

        >>> Tensor([3.0]).div(2).item()
        1.5
        """
        return _F.div(self, other)

    def neg(self) -> Tensor:
        """``-self``.

        >>> Tensor([3.0]).neg().item()
        -3.0
        """
        return _F.neg(self)

    def pow(self, exponent) -> Tensor:
        """``self ** exponent``.

        >>> Tensor([3.0]).pow(2).item()
        9.0
        """
        return _F.pow(self, exponent)

    def matmul(self, other) -> Tensor:
        """``self @ other`` under the active accumulation model.

        >>> Tensor([[1.0, 2.0]]).matmul(Tensor([[3.0], [4.0]])).item()
        11.0
        """
        return _F.matmul(self, other)

    def sum(self, dim=None, keepdim: bool = False) -> Tensor:
        """Sum over ``dim`` (int, tuple or None for all).

        >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).sum(1).tolist()
        [3.0, 7.0]
        """
        return _F.sum(self, dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False) -> Tensor:
        """Mean over ``dim`` (int, tuple or None for all).

        >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).mean().item()
        2.5
        """
        return _F.mean(self, dim, keepdim)

    def max(self, dim: int | None = None, keepdim: bool = False):
        """The maximum; with ``dim``, a ``(values, indices)`` named tuple as PyTorch.

        >>> Tensor([[1.0, 5.0], [7.0, 2.0]]).max(dim=0).indices.tolist()
        [1, 0]
        """
        return _F.max(self, dim, keepdim)

    def reshape(self, *shape) -> Tensor:
        """Same values, new shape (-1 infers one dimension).

        >>> Tensor([1.0, 2.0, 3.0, 4.0]).reshape(2, -1).shape
        (2, 2)
        """
        return _F.reshape(self, _shape_arg(shape))

    def view(self, *shape) -> Tensor:
        """Alias of :meth:`reshape`.

        >>> Tensor([1.0, 2.0]).view(2, 1).shape
        (2, 1)
        """
        return _F.reshape(self, _shape_arg(shape))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims ``start_dim..end_dim`` into one.

        >>> Tensor(np.zeros((2, 3, 4))).flatten(1).shape
        (2, 12)
        """
        return _F.flatten(self, start_dim, end_dim)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """Swap two dimensions.

        >>> Tensor(np.zeros((2, 3))).transpose(0, 1).shape
        (3, 2)
        """
        return _F.transpose(self, dim0, dim1)

    def permute(self, *dims) -> Tensor:
        """Reorder the dimensions.

        >>> Tensor(np.zeros((2, 3, 4))).permute(2, 0, 1).shape
        (4, 2, 3)
        """
        return _F.permute(self, _shape_arg(dims))

    def masked_fill(self, mask, value: float) -> Tensor:
        """``value`` where the boolean ``mask`` is True (see :func:`fpsim.functional.masked_fill`).

        >>> Tensor([1.0, 2.0]).masked_fill(np.array([True, False]), -1.0).tolist()
        [-1.0, 2.0]
        """
        return _F.masked_fill(self, mask, value)

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a dimension of size 1.

        >>> Tensor([1.0]).unsqueeze(0).shape
        (1, 1)
        """
        return _F.unsqueeze(self, dim)

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Drop dimensions of size 1.

        >>> Tensor([[1.0]]).squeeze().shape
        ()
        """
        return _F.squeeze(self, dim)

    @property
    def T(self) -> Tensor:  # noqa: N802 - PyTorch's name
        """The dimensions reversed (the transpose of a matrix).

        >>> Tensor(np.zeros((2, 3))).T.shape
        (3, 2)
        """
        return _F.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    def exp(self) -> Tensor:
        """Elementwise exp.

        >>> Tensor([0.0]).exp().item()
        1.0
        """
        return _F.exp(self)

    def log(self) -> Tensor:
        """Elementwise natural log.

        >>> Tensor([1.0]).log().item()
        0.0
        """
        return _F.log(self)

    def sqrt(self) -> Tensor:
        """Elementwise square root.

        >>> Tensor([4.0]).sqrt().item()
        2.0
        """
        return _F.sqrt(self)

    def tanh(self) -> Tensor:
        """Elementwise tanh.

        >>> Tensor([0.0]).tanh().item()
        0.0
        """
        return _F.tanh(self)

    def sigmoid(self) -> Tensor:
        """Elementwise logistic sigmoid.

        >>> Tensor([0.0]).sigmoid().item()
        0.5
        """
        return _F.sigmoid(self)

    def relu(self) -> Tensor:
        """Elementwise max(x, 0).

        >>> Tensor([-1.0, 2.0]).relu().tolist()
        [0.0, 2.0]
        """
        return _F.relu(self)

    def abs(self) -> Tensor:
        """Elementwise absolute value.

        >>> Tensor([-1.5]).abs().item()
        1.5
        """
        return _F.abs(self)

    def softmax(self, dim: int) -> Tensor:
        """Softmax along ``dim``.

        >>> Tensor([0.0, 0.0]).softmax(0).tolist()
        [0.5, 0.5]
        """
        return _F.softmax(self, dim)

    def log_softmax(self, dim: int) -> Tensor:
        """Log-softmax along ``dim``.

        >>> Tensor([0.0, 0.0], "fp64").log_softmax(0).tolist()[0] < 0
        True
        """
        return _F.log_softmax(self, dim)


def _real_array(data, fmt: Format) -> np.ndarray:
    """``data`` as a real NumPy array; a Python int beyond int64 is rounded once from its exact
    value to ``fmt`` (nearest even; float64 holds the result exactly). Anything else that is
    not real numbers is a TypeError."""
    if isinstance(data, int) and not isinstance(data, bool) and \
            not -(1 << 63) <= data < (1 << 63):
        return np.asarray(fpsim_round(data, fmt))  # the exact integer, one rounding
    try:
        src = np.asarray(data)
    except ValueError as e:  # ragged nested lists
        raise ValueError(f"Tensor: data must be a rectangular array of real numbers ({e})") \
            from None
    if src.dtype.kind not in "biufV":
        raise TypeError(
            f"Tensor: data must hold real numbers (Python floats / ints within int64, NumPy or "
            f"ml_dtypes arrays), got {type(data).__name__} of dtype {src.dtype}")
    return src


def _shape_arg(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def make_result(data: np.ndarray, fmt: Format, parents: Sequence[Tensor],
                backward: Callable, op: str) -> Tensor:
    """Wrap an op's rounded result; record the graph edge when grad mode is on and an input
    requires grad. ``backward(g)`` returns one gradient (or None) per parent: a fresh array,
    a view of ``g`` or ``g`` itself, never an array the op keeps (saved at forward time or
    cached between calls): a leaf adopts a fresh-looking array as its ``.grad`` without a
    copy (see ``_gradients``), and changing that ``.grad`` in place would change it."""
    if isinstance(data, np.generic):  # NumPy ops on 0-d arrays (neg, relu, casts) give scalars
        data = np.asarray(data)
    out = Tensor._wrap(data, fmt)
    loc = _LOCAL
    if loc.grad_enabled:
        for p in parents:
            if p._requires_grad:
                out._requires_grad = True
                out._parents = tuple(parents)
                out._backward = backward
                out._op = op
                out._seq = _next_seq()
                break
    observers = loc.observers
    if observers:
        for o in tuple(observers):
            o.on_op(out, parents, op)
    return out


# Recording order: every recorded result takes the next number (_seq), after its inputs took
# theirs, so descending numbers are a topological order of any graph, outputs first (as
# PyTorch's engine, which runs ready nodes by descending sequence number). itertools.count's
# __next__ is one C call, atomic under the GIL.
_next_seq = itertools.count().__next__
_BY_SEQ = operator.attrgetter("_seq")


def _topo_order(root: Tensor) -> list[Tensor]:
    """The op results (tensors with parents) reachable from ``root``, outputs before inputs
    (descending recording order); leaves are left out (the backward pass takes their gradients
    as they arrive). ``root`` has parents. An op result always requires grad (make_result
    records only those; the requires_grad setter refuses to clear it)."""
    order = [root]
    seen = {id(root)}
    add, push = seen.add, order.append
    for node in order:  # grows as it goes: each reachable op result once
        for p in node._parents:
            if p._parents is not None:
                key = id(p)
                if key not in seen:
                    add(key)
                    push(p)
    order.sort(key=_BY_SEQ, reverse=True)
    return order


def add_grads(a: np.ndarray, b: np.ndarray, fmt: Format) -> np.ndarray:
    """Two gradients of one tensor added, rounded once to ``fmt``."""
    if a.dtype == np.float32 and b.dtype == np.float32 and fmt == FP32:
        if plain_rounding():
            return np.asarray(a + b)  # an IEEE float32 add is the one rounding (0-d: an array)
    elif a.dtype == np.float16 and b.dtype == np.float16 and a.size >= SMALL \
            and (fmt is FP16 or fmt == FP16) and a.shape == b.shape and plain_rounding():
        # fp16 + fp16 in float32, then one cast: the float32 sum is the exact sum rounded to
        # fp32 (operands' sums stay in float32's normal range), and rounding that to fp16
        # equals rounding the exact sum once (24 >= 2 * 11 + 2 bits, Figueroa's theorem: the
        # F32_SAFE rule); the float64 route's result bit for bit, NaNs included
        # (tests/test_autograd_add_grads.py): from SMALL elements both casts store every NaN
        # as the quiet NaN 0x7E00 (below, NumPy's casts keep the payload of the NaN its
        # float32 and float64 adds pick, which can differ for NaN + NaN)
        return f32_to_f16(np.add(f16_to_wide(a, np.float32), f16_to_wide(b, np.float32)))
    elif a.dtype == _BF16 and b.dtype == _BF16 and (fmt is BF16 or fmt == BF16) \
            and a.shape == b.shape and plain_rounding():
        r = bf16_sum32(np.add, a, b)  # in float32, rounded by the bits (None: a NaN, small)
        if r is not None:
            return r
    # widen: fp16 by its table, exact as astype and without astype's slow subnormals
    return np.asarray(round_to(np.asarray(widen(a) + widen(b)), fmt))


class OrderedGrads:
    """What the backward function of a node standing for a sub-graph (a checkpoint) returns:
    ``run(deliver)`` runs the sub-graph's backward and calls ``deliver(parent index,
    gradient)`` for every gradient reaching one of the node's inputs, the moment it arrives.
    The engine delivers each as a gradient of its own, rounded and added where it adds the
    others, interleaved with the sub-graph's own work, so the roundings (and the random draws
    of stochastic rounding) happen in the order they would with the sub-graph's ops in the
    graph."""

    __slots__ = ("run",)

    def __init__(self, run: Callable[[Callable[[int, np.ndarray], None]], None]) -> None:
        self.run = run


def backward_ordered(root: Tensor, g: np.ndarray, inputs: Sequence[Tensor]) -> OrderedGrads:
    """The backward pass from ``root`` (gradient ``g``) as an :class:`OrderedGrads`: when run,
    every gradient that reaches one of the leaves ``inputs`` goes, unrounded and unsummed, to
    ``deliver(index in inputs, gradient)`` instead of their ``.grad``; other leaves get their
    ``.grad`` as usual. Used by :func:`fpsim.autograd.checkpoint.checkpoint`."""
    index = {id(t): i for i, t in enumerate(inputs)}

    def run(deliver: Callable[[int, np.ndarray], None]) -> None:
        if root._parents is None and id(root) in index:  # root is one of them (fn returned it)
            deliver(index[id(root)], g)
        elif root._requires_grad:
            _run_backward(root, g, False, (index, deliver))

    return OrderedGrads(run)


def _run_backward(root: Tensor, g: np.ndarray, retain_graph: bool,
                  collect: tuple[dict, Callable] | None = None) -> None:
    """The backward pass from ``root`` (gradient ``g``), micrograd's loop: for each op result,
    outputs first, take the gradient it received, run its backward, deliver each parent its
    gradient, release the node; then the leaves adopt this pass's sums. ``collect``
    (:func:`backward_ordered`): (leaf ids -> index, deliver) of the leaves whose gradients go to
    ``deliver`` as they arrive."""
    order = [] if root._parents is None else _topo_order(root)
    grads, deliver, adopt = _gradients(root, g, collect)
    observers = _LOCAL.observers  # this thread's list (changed in place, never replaced)
    # the ops' backward arithmetic meets infinities and NaNs (an fp16 overflow's inf times
    # a zero weight): silent, as PyTorch, for every op's backward here (none needs its own
    # errstate); IEEE flags are fpsim's own (flag_context)
    with np.errstate(all="ignore"):
        for node in order:
            g = grads.pop(id(node), None)
            if g is None:  # no gradient reached it
                continue
            if node._retains_grad:
                _retain(node, g)
            pgrads = node._backward(g)
            if not retain_graph:
                _release(node, observers)
            if type(pgrads) is OrderedGrads:  # a checkpointed segment
                _deliver_ordered(node, pgrads, deliver)
            else:
                for p, pg in zip(node._parents, pgrads, strict=True):
                    deliver(p, pg, node)
    adopt()


def _gradients(root: Tensor, g: np.ndarray, collect: tuple[dict, Callable] | None) -> tuple:
    """One pass's gradients: the pending gradients by tensor id (``root``'s ``g`` first),
    ``deliver(p, pg, node)``, which gives tensor ``p`` one gradient from ``node``'s backward,
    and ``adopt()``, which adds each leaf's sum to its ``.grad`` at the end.

    A tensor's .grad never shares memory with another's (nor with anything else), so that
    changing one in place changes nothing else. A leaf adopts its gradient without a copy only
    when the array is its alone: ``sole`` holds the tensors whose pending gradient is an array
    that owns its memory (not a view) and was handed to no other tensor in this pass
    (``handed``: ids of every array handed out; an id reused after its array died only costs a
    copy). The ops' backward functions return fresh arrays, views of ``g`` or ``g`` itself;
    none returns an array it keeps."""
    grads: dict[int, np.ndarray] = {id(root): g}
    get = grads.get
    handed, sole = {id(g)}, set()
    leaves = []  # in the order their first gradient arrived
    if root._parents is None:  # a leaf's own backward: the gradient is its alone if fresh
        leaves.append(root)
        if g.base is None:
            sole.add(id(root))
    collect_index, hand_on = collect if collect is not None else ({}, None)

    def deliver(p: Tensor, pg, node: Tensor) -> None:
        """One gradient for ``p``: rounded to its gradient format, then kept or added to what
        this pass gave it already (or handed on, for a leaf of ``collect``)."""
        if pg is None or not p._requires_grad:
            return
        if isinstance(pg, np.generic):  # NumPy ops on 0-d arrays return scalars
            pg = np.array(pg)
        if pg.shape != p._data.shape:
            raise RuntimeError(f"internal error: {node._op} backward gave shape {pg.shape} for "
                               f"an input of shape {p._data.shape}")
        key, arr = id(p), id(pg)
        if collect_index:
            i = collect_index.get(key)
            if i is not None:  # the outer pass rounds and adds it, as it would its own
                hand_on(i, pg.copy() if arr in handed else pg)
                handed.add(arr)  # handed out: no leaf of this pass adopts it too
                return
        fmt = p._grad_fmt
        if fmt is None:
            fmt = p.fmt
        # round_to's own first test, without the call: a gradient already in the storage
        # dtype of a format that has a NumPy type holds values of the format
        if pg.dtype != fmt.storage_dtype or fmt.dtype is None:
            pg = round_to(pg, fmt)
            arr = id(pg)
        prev = get(key)
        if prev is None:
            grads[key] = pg
            if pg.base is None and arr not in handed:
                sole.add(key)
            handed.add(arr)
            if p._parents is None:
                leaves.append(p)
        else:
            grads[key] = add_grads(prev, pg, fmt)  # a fresh array
            sole.add(key)

    def adopt() -> None:
        """This pass's sum of each leaf, added to what its .grad held (adopted if its own)."""
        for leaf in leaves:
            key = id(leaf)
            g = grads.pop(key)
            if leaf._grad is None:
                leaf._grad = g if key in sole else g.copy()
            else:
                leaf._grad = add_grads(leaf._grad, g, leaf.grad_fmt)

    return grads, deliver, adopt


def _deliver_ordered(node: Tensor, ordered: OrderedGrads, deliver: Callable) -> None:
    """Run a checkpointed segment's backward, delivering each gradient that reaches one of
    ``node``'s inputs the moment it arrives, amid the segment's own work."""
    parents = node._parents
    ordered.run(lambda i, pg: deliver(parents[i], pg, node))


def _retain(node: Tensor, g: np.ndarray) -> None:
    """Keep a copy of a non-leaf's gradient in its ``.grad`` (``retain_grad``)."""
    node._grad = g.copy() if node._grad is None else add_grads(node._grad, g, node.grad_fmt)


def _release(node: Tensor, observers: list) -> None:
    """Free the node's closure (what it saved for the backward) and tell the observers."""
    node._backward = _freed
    if observers:
        for o in tuple(observers):
            o.on_release(node)


# The ops module, fpsim.autograd.functional: it imports this module and, once its ops are
# defined, binds itself here, so Tensor's methods reach the ops without an import circle.
_F = None


def bind_ops(ops) -> None:
    """Install the module whose ops Tensor's methods call (internal: called once by
    :mod:`fpsim.autograd.functional`)."""
    global _F
    _F = ops
