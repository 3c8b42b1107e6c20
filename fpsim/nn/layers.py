"""Layers of ``torch.nn`` on :mod:`fpsim.functional`, with PyTorch's default initialisation.

Every layer with parameters takes ``fmt`` (the parameters' format, default fp32) and ``rng`` (a
Generator or seed for the initial values; default: :func:`fpsim.autograd.manual_seed`'s).
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import functional as F
from ..autograd.generator import get_generator
from ..autograd.operands import IntPair as _IntPair
from ..autograd.operands import check_padding_string as _check_padding_string
from ..autograd.operands import ints as _ints
from ..autograd.operands import pair as _pair
from ..autograd.tensor import Tensor, as_format
from ..checks import as_int, check_allocation
from ..formats import FP32, FP64, Format
from . import init
from .module import Module, Parameter

__all__ = ["Linear", "Embedding", "Conv2d", "MaxPool2d", "AvgPool2d", "LayerNorm", "BatchNorm1d",
           "BatchNorm2d", "Dropout", "ReLU", "GELU", "Tanh", "Sigmoid", "Flatten", "Identity"]


def _size(value, name: str, op: str) -> int:
    """A layer size: what range() takes (:func:`fpsim.checks.as_int`), >= 1 (TypeError for
    other types, ValueError below 1)."""
    try:
        n = as_int(name, value, None)
    except TypeError:  # bool, float, str, None, arrays ...
        raise TypeError(f"{op}: {name} must be a positive integer, got "
                        f"{type(value).__name__} {value!r}") from None
    if n < 1:
        raise ValueError(f"{op}: {name} must be a positive integer (>= 1), got {value!r}")
    check_allocation(f"{op}: {name}", n, 8, "parameters")  # a layer holds >= n float64s
    return n


def _real(value, name: str, op: str, lo: float, hi: float = math.inf) -> float:
    """A finite real number in [lo, hi] (TypeError for other types)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__} "
                        f"{value!r}")
    if not (math.isfinite(value) and lo <= value <= hi):
        rng = f">= {lo}" if hi == math.inf else f"in [{lo}, {hi}]"
        raise ValueError(f"{op}: {name} must be a finite number {rng}, got {value!r}")
    return float(value)


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
        in_features = _size(in_features, "in_features", "Linear")
        out_features = _size(out_features, "out_features", "Linear")
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



class Embedding(Module):
    """A lookup table (``torch.nn.Embedding``): ``weight`` (num_embeddings, embedding_dim)
    drawn from N(0, 1) as PyTorch, the ``padding_idx`` row (if any) zero and never updated
    by its gradient; ``forward(indices)`` is :func:`fpsim.functional.embedding` (an integer
    array of any shape in, ``indices.shape + (embedding_dim,)`` out). ``max_norm``,
    ``scale_grad_by_freq`` and ``sparse`` are not supported.

    >>> emb = Embedding(10, 3, padding_idx=0, rng=0)
    >>> emb.weight.shape, emb(np.array([[0, 4], [9, 9]])).shape, emb.weight.tolist()[0]
    ((10, 3), (2, 2, 3), [0.0, 0.0, 0.0])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int,
                 padding_idx: int | None = None, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False,  # noqa: ARG002
                 sparse: bool = False, *, fmt: Format | str = FP32,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        fmt = as_format(fmt)
        num = _size(num_embeddings, "num_embeddings", "Embedding")
        dim = _size(embedding_dim, "embedding_dim", "Embedding")
        if max_norm is not None or scale_grad_by_freq is not False or sparse is not False:
            raise ValueError("Embedding: max_norm, scale_grad_by_freq and sparse are "
                                      "not supported; leave them at None / False")
        if padding_idx is not None:
            padding_idx = as_int("Embedding: padding_idx", padding_idx, None)
            if not -num <= padding_idx < num:
                raise ValueError(f"Embedding: padding_idx must be within the {num} rows "
                                 f"(-{num} .. {num - 1}), got {padding_idx}")
            padding_idx %= num
        self.num_embeddings, self.embedding_dim, self.padding_idx = num, dim, padding_idx
        self.weight = Parameter(np.zeros((num, dim)), fmt)
        values = get_generator(rng).normal(0.0, 1.0, size=(num, dim))
        if padding_idx is not None:
            values[padding_idx] = 0.0
        self.weight.data = values

    def forward(self, indices) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}, fmt={self.weight.fmt.name}"

class Conv2d(Module):
    """2-D convolution (cross-correlation) as ``torch.nn.Conv2d``: stride, zero padding (an
    int, a pair, 'valid' or 'same'), dilation and groups; weight (out_channels,
    in_channels / groups, kh, kw), initialised as PyTorch (fan_in = in_channels / groups * kh *
    kw).

    >>> conv = Conv2d(1, 8, 3, padding=1, rng=0)
    >>> conv(Tensor(np.zeros((2, 1, 8, 8)))).shape
    (2, 8, 8, 8)
    >>> depthwise = Conv2d(4, 4, 3, padding="same", dilation=2, groups=4, bias=False, rng=0)
    >>> depthwise.weight.shape, depthwise(Tensor(np.zeros((1, 4, 6, 6)))).shape
    ((4, 1, 3, 3), (1, 4, 6, 6))
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: _IntPair,
                 stride: _IntPair = 1, padding: _IntPair | str = 0, dilation: _IntPair = 1,
                 groups: int = 1, bias: bool = True, *, fmt: Format | str = FP32,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        fmt = as_format(fmt)
        in_channels = _size(in_channels, "in_channels", "Conv2d")
        out_channels = _size(out_channels, "out_channels", "Conv2d")
        groups = _size(groups, "groups", "Conv2d")
        _ints(kernel_size, "kernel_size", "Conv2d", 1)
        _ints(stride, "stride", "Conv2d", 1)
        _ints(dilation, "dilation", "Conv2d", 1)
        if not isinstance(padding, str):
            _ints(padding, "padding", "Conv2d", 0)
        if in_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) must be divisible by groups "
                             f"({groups})")
        if out_channels % groups:
            raise ValueError(f"Conv2d: out_channels ({out_channels}) must be divisible by "
                             f"groups ({groups})")
        kh, kw = _pair(kernel_size, "kernel_size")
        _check_padding_string(padding, stride, "Conv2d")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = (kh, kw), _pair(stride, "stride")
        self.padding = padding if isinstance(padding, str) else _pair(padding, "padding")
        self.dilation, self.groups = _pair(dilation, "dilation"), int(groups)
        self.weight = Parameter(np.zeros((out_channels, in_channels // groups, kh, kw)), fmt)
        if bias:
            self.bias = Parameter(np.zeros(out_channels), fmt)
        else:
            self.register_parameter("bias", None)
        _reset_weight_and_bias(self.weight, self.bias, rng)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, padding={self.padding}")
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s + f", fmt={self.weight.fmt.name}"


class MaxPool2d(Module):
    """2-D max pooling as ``torch.nn.MaxPool2d`` (stride defaults to the kernel size); with
    ``return_indices`` the forward returns ``(values, indices)``.

    >>> MaxPool2d(2)(Tensor(np.zeros((1, 1, 4, 4)))).shape
    (1, 1, 2, 2)
    >>> MaxPool2d(2, ceil_mode=True)(Tensor(np.zeros((1, 1, 5, 5)))).shape
    (1, 1, 3, 3)
    """

    def __init__(self, kernel_size: _IntPair, stride: _IntPair | None = None,
                 padding: _IntPair = 0, dilation: _IntPair = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        _ints(kernel_size, "kernel_size", "MaxPool2d", 1)
        if stride is not None:
            _ints(stride, "stride", "MaxPool2d", 1)
        _ints(padding, "padding", "MaxPool2d", 0)
        _ints(dilation, "dilation", "MaxPool2d", 1)
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size  # as PyTorch
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, np.ndarray]:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """2-D average pooling as ``torch.nn.AvgPool2d`` (one rounding per output; see
    :func:`fpsim.autograd.functional.avg_pool2d` for the divisor).

    >>> AvgPool2d(2)(Tensor(np.arange(16.0).reshape(1, 1, 4, 4))).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """

    def __init__(self, kernel_size: _IntPair, stride: _IntPair | None = None,
                 padding: _IntPair = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> None:
        super().__init__()
        _ints(kernel_size, "kernel_size", "AvgPool2d", 1)
        if stride is not None:
            _ints(stride, "stride", "AvgPool2d", 1)
        _ints(padding, "padding", "AvgPool2d", 0)
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size  # as PyTorch
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

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
        if hasattr(normalized_shape, "__index__") and np.ndim(normalized_shape) == 0:
            ns = (normalized_shape,)  # one size (int, NumPy integer, 0-d array): _size checks it
        elif (hasattr(normalized_shape, "__iter__") and not isinstance(normalized_shape, str)
              and len(ns := tuple(normalized_shape)) > 0):
            pass
        else:
            raise TypeError(f"LayerNorm: normalized_shape must be an int or a non-empty "
                            f"list/tuple of ints, got {normalized_shape!r}")
        ns = tuple(_size(n, "normalized_shape", "LayerNorm") for n in ns)
        eps = _real(eps, "eps", "LayerNorm", 0.0)
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
        op = type(self).__name__
        num_features = _size(num_features, "num_features", op)
        eps = _real(eps, "eps", op, 0.0)
        if momentum is not None:  # None: the cumulative moving average
            momentum = _real(momentum, "momentum", op, 0.0, 1.0)
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

    def __init__(self, p: float = 0.5, inplace: bool = False, *,  # noqa: ARG002
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
            raise TypeError(f"Dropout: p must be a real number in [0, 1], got "
                            f"{type(p).__name__} {p!r}")
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
        for name, v in (("start_dim", start_dim), ("end_dim", end_dim)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"Flatten: {name} must be an int, got {type(v).__name__} {v!r}")
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_dim, self.end_dim)


class Identity(Module):
    """Returns its input.

    >>> Identity()(Tensor([1.0])).tolist()
    [1.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return x
