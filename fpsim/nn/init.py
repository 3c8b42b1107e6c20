"""Parameter initialisers (``torch.nn.init``): values drawn in float64 from a seedable generator
(``rng``, else :func:`fpsim.autograd.manual_seed`'s), then rounded to the tensor's format.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..autograd.generator import get_generator
from ..autograd.tensor import Tensor

__all__ = ["calculate_fan_in_and_fan_out", "kaiming_uniform_", "uniform_", "zeros_", "ones_",
           "calculate_gain", "normal_"]


def calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight (out, in, *kernel): in * kernel, out * kernel.

    >>> calculate_fan_in_and_fan_out(Tensor(np.zeros((8, 3, 2, 2))))
    (12, 32)
    """
    if tensor.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor with at least 2 dimensions, got "
                         f"shape {tensor.shape}")
    receptive = int(np.prod(tensor.shape[2:])) if tensor.ndim > 2 else 1
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gains: linear / sigmoid 1, tanh 5/3, relu sqrt(2), leaky_relu
    sqrt(2 / (1 + slope**2)) (slope ``param``, default 0.01), selu 3/4.

    >>> round(calculate_gain("leaky_relu", math.sqrt(5)), 6)
    0.57735
    """
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}; valid: "
                     f"{', '.join(linear + ('tanh', 'relu', 'leaky_relu', 'selu'))}")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, *,
             rng: np.random.Generator | int | None = None) -> Tensor:
    """Fill with U(a, b) values (drawn in float64, rounded to the tensor's format).

    >>> t = uniform_(Tensor(np.zeros(3)), -1, 1, rng=0)
    >>> bool((np.abs(t.numpy()) <= 1).all())
    True
    """
    for name, v in (("a", a), ("b", b)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"uniform_: {name} must be a real number, got {type(v).__name__} "
                            f"{v!r}")
        if not math.isfinite(v):
            raise ValueError(f"uniform_: {name} must be finite, got {v!r}")
    if a > b:
        raise ValueError(f"uniform_ expects a <= b (the range [a, b)), got a={a} > b={b}")
    tensor.data = get_generator(rng).uniform(a, b, size=tensor.shape)
    return tensor



def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, *,
            rng: np.random.Generator | int | None = None) -> Tensor:
    """Fill with N(mean, std**2) values (drawn in float64, rounded to the tensor's format).

    >>> t = normal_(Tensor(np.zeros(1000)), 0.0, 0.02, rng=0)
    >>> bool(abs(float(t.numpy().std()) - 0.02) < 0.002)
    True
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"normal_: tensor must be an fpsim Tensor, got {type(tensor).__name__}")
    for name, v in (("mean", mean), ("std", std)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"normal_: {name} must be a real number, got {type(v).__name__} "
                            f"{v!r}")
        if not math.isfinite(v):
            raise ValueError(f"normal_: {name} must be finite, got {v!r}")
    if std < 0:
        raise ValueError(f"normal_: std must be >= 0, got {std!r}")
    tensor.data = get_generator(rng).normal(mean, std, size=tensor.shape)
    return tensor

def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", *,
                     rng: np.random.Generator | int | None = None) -> Tensor:
    """He initialisation: U(-bound, bound), bound = gain * sqrt(3 / fan) (PyTorch's formula;
    Linear and Conv2d use a = sqrt(5), giving bound = 1 / sqrt(fan_in)).

    >>> t = kaiming_uniform_(Tensor(np.zeros((4, 9))), a=math.sqrt(5), rng=0)
    >>> bool((np.abs(t.numpy()) <= 1 / 3).all())
    True
    """
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    if 0 in tensor.shape:  # as PyTorch: nothing to fill
        warnings.warn("Initializing zero-element tensors is a no-op", UserWarning, stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, rng=rng)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros.

    >>> zeros_(Tensor([1.0])).tolist()
    [0.0]
    """
    tensor.data = np.zeros(tensor.shape)
    return tensor


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones.

    >>> ones_(Tensor([0.0])).tolist()
    [1.0]
    """
    tensor.data = np.ones(tensor.shape)
    return tensor
