"""Layers of ``torch.nn`` on :mod:`fpsim.functional`, with PyTorch's default initialisation.

Every layer with parameters takes ``fmt`` (the parameters' format, default fp32) and ``rng`` (a
Generator or seed for the initial values; default: :func:`fpsim.autograd.manual_seed`'s).
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import functional as F
from ..autograd.conv import _pair
from ..autograd.generator import get_generator
from ..autograd.tensor import Tensor, as_format
from ..formats import FP32, FP64, Format
from . import init
from .module import Module, Parameter

__all__ = ["Linear", "Conv2d", "MaxPool2d", "LayerNorm", "BatchNorm1d", "BatchNorm2d",
           "Dropout", "ReLU", "GELU", "Tanh", "Sigmoid", "Flatten", "Identity"]


def _reset_weight_and_bias(weight: Parameter, bias: Parameter | None, rng) -> None:
    """PyTorch's reset_parameters of Linear / Conv: kaiming_uniform(a=sqrt(5)) weight, bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)); weight drawn first."""
    gen = get_generator(rng)
    init.kaiming_uniform_(weight, a=math.sqrt(5), rng=gen)
    if bias is not None:
        fan_in, _ = init.calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(bias, -bound, bound, rng=gen)


class Linear(Module):
    """y = x W^T + b (one fused op: the bias joins the accumulator before the rounding).

    >>> lin = Linear(3, 2, rng=0)
    >>> lin.weight.shape, lin.bias.shape, lin(Tensor(np.ones((5, 3)))).shape
    ((2, 3), (2,), (5, 2))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 fmt: Format | str = FP32, rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        fmt = as_format(fmt)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(np.zeros((out_features, in_features)), fmt)
        if bias:
            self.bias = Parameter(np.zeros(out_features), fmt)
        else:
            self.register_parameter("bias", None)
        _reset_weight_and_bias(self.weight, self.bias, rng)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, fmt={self.weight.fmt.name}")


class Conv2d(Module):
    """2-D convolution (cross-correlation) with square or rectangular kernels; stride and zero
    padding (``dilation`` and ``groups`` 1).

    >>> conv = Conv2d(1, 8, 3, padding=1, rng=0)
    >>> conv(Tensor(np.zeros((2, 1, 8, 8)))).shape
    (2, 8, 8, 8)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 bias: bool = True, *, fmt: Format | str = FP32,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        fmt = as_format(fmt)
        kh, kw = _pair(kernel_size, "kernel_size")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = (kh, kw), stride, padding
        self.weight = Parameter(np.zeros((out_channels, in_channels, kh, kw)), fmt)
        if bias:
            self.bias = Parameter(np.zeros(out_channels), fmt)
        else:
            self.register_parameter("bias", None)
        _reset_weight_and_bias(self.weight, self.bias, rng)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, fmt={self.weight.fmt.name}")


class MaxPool2d(Module):
    """2-D max pooling (stride defaults to the kernel size).

    >>> MaxPool2d(2)(Tensor(np.zeros((1, 1, 4, 4)))).shape
    (1, 1, 2, 2)
    """

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class LayerNorm(Module):
    """Layer normalisation over the trailing ``normalized_shape`` dims; weight 1, bias 0.

    >>> LayerNorm(4)(Tensor(np.arange(8.0).reshape(2, 4))).shape
    (2, 4)
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, *, fmt: Format | str = FP32) -> None:
        super().__init__()
        fmt = as_format(fmt)
        ns = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(
            normalized_shape)
        self.normalized_shape, self.eps = ns, eps
        if elementwise_affine:
            self.weight = Parameter(np.ones(ns), fmt)
            if bias:
                self.bias = Parameter(np.zeros(ns), fmt)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class _BatchNorm(Module):
    _dims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, *,
                 fmt: Format | str = FP32) -> None:
        super().__init__()
        fmt = as_format(fmt)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(np.ones(num_features), fmt)
            self.bias = Parameter(np.zeros(num_features), fmt)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", Tensor(np.zeros(num_features), fmt))
            self.register_buffer("running_var", Tensor(np.ones(num_features), fmt))
            # an integer count: fp64 holds it exactly; never cast by to(fmt)
            self.register_buffer("num_batches_tracked", Tensor(0.0, FP64), cast=False)
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._dims:
            raise ValueError(f"{type(self).__name__}: expected {' or '.join(map(str, self._dims))}"
                             f"D input, got {x.ndim}D input of shape {x.shape}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            count = self.num_batches_tracked.item() + 1
            self.num_batches_tracked.data = np.array(count)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / count
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if track else None,
                            self.running_var if track else None, self.weight, self.bias,
                            use_batch, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) inputs.

    >>> bn = BatchNorm1d(3)
    >>> bn(Tensor(np.arange(6.0).reshape(2, 3))).shape, bn.running_mean.tolist()
    ((2, 3), [0.15000000596046448, 0.25, 0.3499999940395355])
    """

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) inputs.

    >>> BatchNorm2d(2)(Tensor(np.ones((2, 2, 3, 3)))).shape
    (2, 2, 3, 3)
    """

    _dims = (4,)


class Dropout(Module):
    """Dropout with probability ``p`` in training mode; ``rng`` a Generator or seed (a seed is
    turned into one generator at construction, so successive calls draw new masks).

    >>> Dropout(0.5, rng=0).eval()(Tensor([1.0, 2.0])).tolist()
    [1.0, 2.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False, *,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.rng = None if rng is None else get_generator(rng)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, rng=self.rng)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    """Elementwise max(x, 0).

    >>> ReLU()(Tensor([-1.0, 1.0])).tolist()
    [0.0, 1.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    """GELU, exact erf form or ``approximate="tanh"``.

    >>> GELU()(Tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class Tanh(Module):
    """Elementwise tanh.

    >>> Tanh()(Tensor([0.0])).tolist()
    [0.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    """Elementwise logistic sigmoid.

    >>> Sigmoid()(Tensor([0.0])).tolist()
    [0.5]
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Flatten(Module):
    """Merge dims ``start_dim..end_dim`` (default: all but the batch dim).

    >>> Flatten()(Tensor(np.zeros((2, 3, 4)))).shape
    (2, 12)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_dim, self.end_dim)


class Identity(Module):
    """Returns its input.

    >>> Identity()(Tensor([1.0])).tolist()
    [1.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return x
