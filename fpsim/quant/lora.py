"""LoRA adapters and QLoRA fine-tuning in miniature, with the memory of training accounted.

- :class:`LoRALinear`: ``y = base(x) + (alpha / r) * B(A(dropout(x)))`` with the base layer
  frozen (an :class:`~fpsim.quant.layers.NF4Linear` for QLoRA, or an ``nn.Linear``), ``A``
  (r, in) initialised as PEFT does (``kaiming_uniform_(a=sqrt(5))``, or ``"gaussian"``:
  N(0, 1/r)), ``B`` (out, r) zeros, so the adapted layer starts as the base layer exactly.
  The adapters live in ``fmt`` (bf16 by default, as QLoRA trains them); both matmuls are the
  engine's linear op in that format (fp32 accumulation, output rounded to bf16).
- :func:`prepare_qlora`: every ``nn.Linear`` of a model becomes ``LoRALinear(NF4Linear(...))``
  (block 64, double quantization, bf16 compute): only the adapters train.
- :func:`training_memory`: the bytes a training step holds for the model states, measured on
  the objects: stored weights (NF4 codes and absmax constants, frozen and trainable
  parameters, buffers, FP8 copies), gradients of the trainable parameters (their gradient
  format), and the optimizer's state arrays (Adam's moments, fp32 master copies). Activations
  are not counted. :func:`full_finetune_memory` gives the same breakdown by formula for full
  fine-tuning of ``n`` parameters in fp32 (4 + 4 + 8 bytes each) or mixed precision (16-bit
  weights and gradients, an fp32 master copy and fp32 Adam moments: 2 + 2 + 12, ZeRO's
  ``K = 12``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from .. import nn
from ..autograd import functional as F
from ..autograd.generator import get_generator
from ..autograd.tensor import Tensor, as_format
from ..checks import as_int
from ..formats import BF16, Format
from ..nn import init
from ..nn.module import Module, Parameter, as_module
from .layers import NF4Linear

__all__ = [
    "LoRALinear",
    "prepare_qlora",
    "lora_parameters",
    "TrainingMemory",
    "training_memory",
    "full_finetune_memory",
]


def _features(base: Module) -> tuple[int, int]:
    if isinstance(base, NF4Linear) or hasattr(base, "in_features"):
        return int(base.in_features), int(base.out_features)
    raise TypeError(f"LoRA needs a linear base layer (nn.Linear, NF4Linear, ...), got "
                    f"{type(base).__name__}")


class LoRALinear(Module):
    """A frozen base layer plus a trainable low-rank update (module docstring).

    >>> base = nn.Linear(4, 3, rng=0)
    >>> lora = LoRALinear(base, r=2, alpha=4, fmt="fp32", rng=0)
    >>> x = Tensor(np.ones((1, 4)))
    >>> lora(x).tolist() == base(x).tolist()  # B = 0: the base output exactly
    True
    >>> [n for n, p in lora.named_parameters() if p.requires_grad]
    ['lora_A', 'lora_B']
    """

    def __init__(self, base: Module, r: int = 8, alpha: float = 16, *, dropout: float = 0.0,
                 fmt: Format | str = BF16, init_a: str = "kaiming",
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        r = as_int("the rank r", r, 1)
        if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a positive number, got {alpha!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if init_a not in ("kaiming", "gaussian"):
            raise ValueError(f"unknown init_a {init_a!r}; valid: 'kaiming', 'gaussian'")
        in_f, out_f = _features(base)
        self.in_features, self.out_features = in_f, out_f
        self.r, self.alpha, self.scaling = int(r), float(alpha), float(alpha) / int(r)
        self.dropout = float(dropout)
        self.fmt = as_format(fmt)
        base.requires_grad_(False)  # the base is frozen
        self.base = base
        gen = get_generator(rng)
        self.lora_A = Parameter(np.zeros((self.r, in_f)), self.fmt)
        if init_a == "kaiming":  # PEFT: nn.init.kaiming_uniform_(lora_A.weight, a=sqrt(5))
            init.kaiming_uniform_(self.lora_A, a=math.sqrt(5), rng=gen)
        else:  # PEFT's init_lora_weights="gaussian"
            self.lora_A.data = gen.normal(0.0, 1.0 / self.r, size=(self.r, in_f))
        self.lora_B = Parameter(np.zeros((out_f, self.r)), self.fmt)
        self._drop_rng = gen

    def forward(self, x: Tensor) -> Tensor:
        y = self.base(x)
        h = F.cast_to(x, self.fmt) if isinstance(x, Tensor) else Tensor(x, self.fmt)
        if self.dropout and self.training:
            h = F.dropout(h, self.dropout, True, rng=self._drop_rng)
        delta = F.linear(F.linear(h, self.lora_A), self.lora_B) * self.scaling
        return y + delta

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha}, fmt={self.fmt.name}, dropout={self.dropout}"


def prepare_qlora(model: Module, r: int = 8, alpha: float = 16, *, block_size: int = 64,
                  double_quant: bool = True, compute_fmt: Format | str = BF16,
                  dropout: float = 0.0, inplace: bool = False,
                  rng: np.random.Generator | int | None = None) -> Module:
    """QLoRA: replace every ``nn.Linear`` of ``model`` by ``LoRALinear(NF4Linear(linear))``
    (adapters in ``compute_fmt``) and freeze everything else; a copy unless ``inplace``.

    >>> net = nn.Sequential(nn.Linear(64, 8, rng=0), nn.ReLU(), nn.Linear(8, 2, rng=1))
    >>> q = prepare_qlora(net, r=2, alpha=4, rng=0)
    >>> type(q[0].base).__name__, len(lora_parameters(q))
    ('NF4Linear', 4)
    """
    as_module(model, "prepare_qlora: model")
    model = model if inplace else copy.deepcopy(model)
    gen = get_generator(rng)
    model.requires_grad_(False)

    def make(lin: Module) -> LoRALinear:
        base = NF4Linear.from_linear(lin, block_size=block_size, double_quant=double_quant,
                                     compute_fmt=compute_fmt)
        return LoRALinear(base, r, alpha, dropout=dropout, fmt=compute_fmt, rng=gen)

    if type(model) is nn.Linear:
        return make(model)
    found = 0
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if type(child) is nn.Linear:
                mod.add_module(name, make(child))
                found += 1
    if not found:
        raise ValueError("the model has no nn.Linear layer to adapt")
    return model


def lora_parameters(model: Module) -> list[Parameter]:
    """The trainable LoRA parameters (``lora_A`` / ``lora_B`` of every :class:`LoRALinear`).

    >>> len(lora_parameters(LoRALinear(nn.Linear(2, 2, rng=0), r=1)))
    2
    """
    as_module(model, "lora_parameters: model")
    out = []
    for mod in model.modules():
        if isinstance(mod, LoRALinear):
            out += [mod.lora_A, mod.lora_B]
    return out


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes of the model states of a training step (activations not included)."""

    weights: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        """weights + gradients + optimizer."""
        return self.weights + self.gradients + self.optimizer

    def per_parameter(self, n: int) -> float:
        """Total bytes divided by ``n`` (e.g. the base model's parameter count)."""
        return self.total / n


def training_memory(model: Module, optimizer=None) -> TrainingMemory:
    """Measure the model states (module docstring): every module's ``weight_nbytes()`` /
    ``state_nbytes()`` where it has one (NF4 codes + constants, FP8 copies), every parameter
    and buffer at its storage width, a gradient (``grad_fmt`` width) per trainable
    parameter, and the nbytes of every array in ``optimizer.state`` (take it after a step,
    when the state exists).

    >>> from fpsim.optim import Adam
    >>> lin = nn.Linear(4, 2, rng=0)
    >>> opt = Adam(lin.parameters()); lin(Tensor(np.ones((1, 4)))).sum().backward(); opt.step()
    >>> training_memory(lin, opt)  # 10 fp32 parameters: 40 + 40 + 80 bytes
    TrainingMemory(weights=40, gradients=40, optimizer=80)
    """
    as_module(model, "training_memory: model")
    weights = grads = 0
    seen: set[int] = set()
    for mod in model.modules():
        for meth in ("weight_nbytes", "state_nbytes"):
            fn = getattr(mod, meth, None)
            if fn is not None:
                weights += int(fn())
        for p in mod.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            weights += p.data.nbytes
            if p.requires_grad:
                grads += p.numel() * np.dtype(p.grad_fmt.storage_dtype).itemsize
        for _, b in mod.named_buffers(recurse=False):
            weights += b.data.nbytes
    opt_bytes = 0
    if optimizer is not None:
        for st in optimizer.state.values():
            for v in st.values():
                if isinstance(v, np.ndarray):
                    opt_bytes += v.nbytes
    return TrainingMemory(weights, grads, opt_bytes)


def full_finetune_memory(num_params: int, precision: str = "fp32") -> TrainingMemory:
    """Full fine-tuning with Adam by formula: ``"fp32"``: weights 4, gradients 4, moments 8
    bytes per parameter; ``"mixed"``: 16-bit weights 2, gradients 2, fp32 master copy and
    moments 12 (= 16 bytes, ZeRO's ``2 + 2 + K`` with K = 12).

    >>> full_finetune_memory(1000, "mixed")
    TrainingMemory(weights=2000, gradients=2000, optimizer=12000)
    """
    # a count people write as 7e9: whole floats taken, 2.5 / True / "10" refused (int() took them)
    n = as_int("num_params", num_params, 0, whole_floats=True)
    if precision == "fp32":
        return TrainingMemory(4 * n, 4 * n, 8 * n)
    if precision == "mixed":
        return TrainingMemory(2 * n, 2 * n, 12 * n)
    raise ValueError(f"unknown precision {precision!r}; valid: 'fp32', 'mixed'")
