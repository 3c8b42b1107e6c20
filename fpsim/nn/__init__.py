"""Neural-network layers on the format-aware autograd engine, as ``torch.nn``.

>>> import fpsim
>>> from fpsim import nn
>>> net = nn.Sequential(nn.Linear(4, 8, rng=0), nn.ReLU(), nn.Linear(8, 2, rng=1)).to("fp16")
>>> net(fpsim.autograd.Tensor([[1.0, 2.0, 3.0, 4.0]], "fp16")).fmt.name
'fp16'
"""

from . import init
from .layers import (
    GELU,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    Linear,
    MaxPool2d,
    ReLU,
    Sigmoid,
    Tanh,
)
from .module import Module, Parameter, Sequential

__all__ = [
    "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "Flatten",
    "GELU", "Identity",
    "LayerNorm", "Linear", "MaxPool2d", "Module", "Parameter", "ReLU", "Sequential", "Sigmoid",
    "Tanh", "init",
]
