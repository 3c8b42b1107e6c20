"""The demo's model: a ReLU multilayer perceptron that keeps its layers' outputs, so that the
gradients of the activations can be measured as well as those of the weights."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..autograd import functional as F
from ..autograd.tensor import Tensor
from ..checks import as_int
from ..nn import Linear, Module
from ..state import as_generator

__all__ = ["MLP"]


class MLP(Module):
    """``Linear -> ReLU -> ... -> Linear`` with layer widths ``sizes`` (input first, classes
    last) and PyTorch's default initialisation drawn from ``rng``; ``init_scale`` multiplies
    every initial weight and bias (1: PyTorch's default). ``layer_seeds`` (one int per layer)
    draws layer i from its own seed instead, as ``nn.Linear(..., rng=layer_seeds[i])`` does
    (the initialisation of the examples, notebook 02 and the training-step benchmark).

    After each forward, ``activations`` maps ``fc1``, ``fc2``, ... to the outputs of the linear
    layers (pre-activations and logits); when they require grad, their gradients are retained
    (``.grad`` after backward), as the layer outputs whose gradients backpropagation stores;
    ``retain_grads=False`` keeps none (a plain ``nn.Sequential``'s cost, for benchmarks).

    >>> net = MLP((64, 32, 10), rng=0)
    >>> out = net(Tensor(np.zeros((5, 64), np.float32)))
    >>> out.shape, list(net.activations)
    ((5, 10), ['fc1', 'fc2'])
    """

    def __init__(self, sizes: Sequence[int] = (64, 64, 10), *,
                 rng: np.random.Generator | int | None = 0, init_scale: float = 1.0,
                 out_init_scale: float = 1.0, layer_seeds: Sequence[int] | None = None,
                 retain_grads: bool = True) -> None:
        super().__init__()
        # widths and seeds are counts (fpsim.checks.as_int): int() took 2.7 as 2, True as 1
        sizes = tuple(as_int(f"sizes[{i}]", s, None) for i, s in enumerate(sizes))
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"sizes must list at least an input and an output width, all "
                             f"positive, got {sizes}")
        gen = np.random.default_rng() if rng is None else as_generator(rng)  # fpsim's one rule
        if layer_seeds is not None:
            layer_seeds = [as_int(f"layer_seeds[{i}]", s, 0) for i, s in enumerate(layer_seeds)]
            if len(layer_seeds) != len(sizes) - 1:
                raise ValueError(f"layer_seeds must give one seed per layer ({len(sizes) - 1}), "
                                 f"got {len(layer_seeds)}")
        self.sizes = sizes
        self.retain_grads = bool(retain_grads)
        self.init_scale = float(init_scale)
        self.out_init_scale = float(out_init_scale)
        self.names = [f"fc{i + 1}" for i in range(len(sizes) - 1)]
        for i, name in enumerate(self.names):
            fan_in, fan_out = sizes[i], sizes[i + 1]
            layer = Linear(fan_in, fan_out, rng=gen if layer_seeds is None else layer_seeds[i])
            factor = self.init_scale * (self.out_init_scale if name == self.names[-1] else 1.0)
            if factor != 1.0:
                for p in layer.parameters():
                    p.data = p.numpy(np.float64) * factor
            self.add_module(name, layer)
        self.activations: dict[str, Tensor] = {}

    def forward(self, x: Tensor) -> Tensor:
        acts: dict[str, Tensor] = {}
        h = x
        last = self.names[-1]
        layers = self._modules  # where getattr finds them, without its failed first lookup
        for name in self.names:
            h = layers[name](h)
            acts[name] = h
            if self.retain_grads and h.requires_grad:
                h.retain_grad()
            if name != last:
                h = F.relu(h)
        self.activations = acts
        return h

    def extra_repr(self) -> str:
        return (f"sizes={self.sizes}, init_scale={self.init_scale:g}, "
                f"out_init_scale={self.out_init_scale:g}")
