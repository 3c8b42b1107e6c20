"""A small autograd engine whose every tensor lives in a floating-point format.

Readable as micrograd, on NumPy arrays: a :class:`Tensor` stores its values in its format's real
width (fp32, fp16, bf16, fp8, ...), every operation rounds its result once to the output format
(the rules are tabulated in :mod:`fpsim.autograd.functional`), and gradients are rounded to
each tensor's gradient format, so the roundings of a real mixed-precision step happen here too
and can be inspected. A NaN result is NaN where IEEE arithmetic makes one; its sign and
payload are NumPy's (as PyTorch leaves them to the hardware), which NumPy's versions and the
CPUs choose differently, so compare NaN-ness, not NaN bits (the array functions,
:func:`fpsim.add` to :func:`fpsim.sum`, define theirs).

>>> import fpsim
>>> from fpsim.autograd import Tensor
>>> w = Tensor([[0.5, -1.0]], fpsim.FP16, requires_grad=True)
>>> x = Tensor([[2.0], [1.0]], fpsim.FP16)
>>> loss = (w @ x).sum()
>>> loss.backward()
>>> w.grad
array([[2., 1.]], dtype=float16)
"""

from . import functional
from .accumulate import gemm
from .context import (
    Accumulation,
    contains,
    get_accumulation,
    get_rounding,
    matmul_accumulation,
    promote_formats,
    round_to,
    rounding_context,
)
from .generator import get_generator, manual_seed
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, set_grad_enabled

__all__ = [
    "Accumulation",
    "Tensor",
    "contains",
    "enable_grad",
    "functional",
    "gemm",
    "get_accumulation",
    "get_generator",
    "get_rounding",
    "is_grad_enabled",
    "manual_seed",
    "matmul_accumulation",
    "no_grad",
    "promote_formats",
    "round_to",
    "rounding_context",
    "set_grad_enabled",
]
