"""How the autograd ops read their arguments: operands as tensors, the result format of a
binary op, the accumulation model and operand width of a GEMM, and the int-or-pair arguments
of convolution and pooling.

Internal to fpsim (the ops of :mod:`fpsim.autograd.functional` and :mod:`~fpsim.autograd.conv`,
the layers of :mod:`fpsim.nn` and :mod:`fpsim.quant`); public names so that those modules import
them without reaching into each other's private helpers. This module imports only the Tensor
and the engine settings, never the ops, so the ops modules form no import circle.
"""

from __future__ import annotations

import numpy as np

from .. import state as _state
from ..checks import as_int
from ..formats import FP32, Format, get_format
from .context import Accumulation, as_accumulation, contains, promote_formats
from .tensor import Tensor, as_format

__all__ = [
    "IntPair",
    "accumulation_model",
    "as_tensor",
    "binary_operands",
    "check_padding_string",
    "ints",
    "is_number",
    "operand_dtype",
    "pair",
]

_F64 = np.float64
_F32 = np.float32


# ---------------------------------------------------------------------- operand helpers
def is_number(x) -> bool:
    """A Python or NumPy real scalar (a bool is an int, as in Python).

    >>> is_number(2), is_number(np.float16(1)), is_number([1.0])
    (True, True, False)
    """
    return isinstance(x, (int, float, np.integer, np.floating))


def as_tensor(x, int_fmt: Format = FP32) -> Tensor:
    """Tensors pass; numbers and arrays become tensors of their dtype's format (integers and
    Python numbers: ``int_fmt``).

    >>> as_tensor(np.ones(2, np.float16)).fmt.name, as_tensor(3).fmt.name
    ('fp16', 'fp32')
    """
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (int, float, np.integer, np.floating)):
        return Tensor(x, int_fmt)
    arr = np.asarray(x)
    if arr.dtype.kind in "iub":
        return Tensor(arr, int_fmt)
    if arr.dtype.kind in "fV":
        return Tensor(arr, as_format(get_format(arr.dtype)))
    raise TypeError(f"expected a Tensor, a number or a real array, got {type(x).__name__}")


def binary_operands(input, other, op: str):
    """(x, y, fmt) of a binary op: Tensors, or Python floats for scalars, and the result format
    (a scalar takes the tensor's format; two tensors promote).

    >>> x, y, fmt = binary_operands(Tensor([1.0], "bf16"), 2, "add")
    >>> y, fmt.name
    (2.0, 'bf16')
    """
    if isinstance(input, Tensor):
        if isinstance(other, Tensor):
            fmt = input.fmt if input.fmt is other.fmt else promote_formats(input.fmt, other.fmt)
            return input, other, fmt
        if is_number(other):
            return input, float(other), input.fmt
        other = as_tensor(other, input.fmt)
        return input, other, promote_formats(input.fmt, other.fmt)
    if isinstance(other, Tensor):
        if is_number(input):
            return float(input), other, other.fmt
        input = as_tensor(input, other.fmt)
        return input, other, promote_formats(input.fmt, other.fmt)
    raise TypeError(f"{op} needs at least one Tensor operand")


# --------------------------------------------------------------------------- GEMM
def accumulation_model(accumulation) -> Accumulation:
    """An op's ``accumulation=`` argument, or the active model
    (:func:`fpsim.autograd.matmul_accumulation`) for None.

    >>> accumulation_model(None).kind, accumulation_model("exact").kind
    ('fp32', 'exact')
    """
    if accumulation is None:
        # settings(), without the call (per op): the calling thread's
        return _state.local.autograd_settings.accumulation
    return as_accumulation(accumulation)


def operand_dtype(model: Accumulation, *fmts: Format):
    """The float type GEMM operands are widened to: float32 for the sgemm model (exact for
    formats inside fp32), float64 otherwise.

    >>> import fpsim
    >>> operand_dtype(accumulation_model("sgemm"), fpsim.FP16).__name__
    'float32'
    """
    if model.kind == "sgemm" and all(contains(FP32, f) for f in fmts):
        return _F32
    return _F64


# ------------------------------------------------------ convolution / pooling arguments
_PADDING_STRINGS = ("valid", "same")
IntPair = int | tuple[int, int]  # an int for both spatial dims, or (height, width)


def _items(v: IntPair, name: str, where: str) -> tuple:
    """The two items of an int-or-pair argument: one value stands for both dims."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__") or \
            (isinstance(v, np.ndarray) and v.ndim == 0):
        return v, v
    t = tuple(v)
    if len(t) != 2:
        raise ValueError(f"{where}{name} must be an int or a pair of ints, got {v!r}")
    return t


def pair(v: IntPair, name: str, minimum: int = 0) -> tuple[int, int]:
    """An int or a pair of ints as a pair (``torch.nn.modules.utils._pair``), each what
    ``range()`` takes (:func:`fpsim.checks.as_int`: a TypeError for other types) and at least
    ``minimum`` (a ValueError).

    >>> pair(3, "stride"), pair((1, 2), "stride")
    ((3, 3), (1, 2))
    """
    return ints(v, name, "", minimum)


def ints(v: IntPair, name: str, op: str, minimum: int) -> tuple[int, int]:
    """:func:`pair`, each at least ``minimum``; the errors name ``op`` and ``name``.

    >>> ints(0, "stride", "conv2d", 1)
    Traceback (most recent call last):
    ...
    ValueError: conv2d: stride must be positive, got 0
    """
    if type(v) is int and v >= minimum:  # the common case, without the general parse
        return v, v
    where = f"{op}: " if op else ""
    items = _items(v, name, where)
    try:
        h, w = (as_int(name, i, None) for i in items)
    except TypeError:  # bool, float, str, None, arrays ...
        raise TypeError(f"{where}{name} must be an int or a pair of ints, got {v!r}") from None
    if h < minimum or w < minimum:
        need = "positive" if minimum == 1 else "non-negative" if minimum == 0 else \
            f">= {minimum}"
        raise ValueError(f"{where}{name} must be {need}, got {v!r}")
    return h, w


def check_padding_string(padding: IntPair | str, stride: IntPair, op: str = "conv2d",
                         ) -> None:
    """PyTorch's checks of a string ``padding``: one of 'valid', 'same'; 'same' needs stride 1.
    Other values pass (they are checked as ints where used).

    >>> check_padding_string("same", 2)
    Traceback (most recent call last):
    ...
    ValueError: conv2d: padding='same' is not supported for strided convolutions (stride 2)
    """
    if not isinstance(padding, str):
        return
    if padding not in _PADDING_STRINGS:
        raise ValueError(f"{op}: invalid padding string {padding!r}, should be one of 'valid', "
                         "'same' (or an int or a pair of ints)")
    if padding == "same" and ints(stride, "stride", op, 1) != (1, 1):
        raise ValueError(f"{op}: padding='same' is not supported for strided convolutions "
                         f"(stride {stride!r})")
