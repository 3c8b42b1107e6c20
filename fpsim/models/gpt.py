"""A small GPT in fpsim's autograd, laid out as nanoGPT's ``model.py`` (Karpathy), so that its
parameters, logits and gradients can be compared with a PyTorch model of the same weights
(tests/test_torch_gpt.py, from tools/record_torch_gpt.py).

Contract (issue 31):

- ``GPT(vocab_size, context, d_model, n_layers, n_heads, *, rng=None)``;
  ``named_parameters()`` yields exactly ``wte.weight`` (vocab, d), ``wpe.weight`` (context,
  d), then per block i ``h.{i}.ln_1.weight``, ``h.{i}.ln_1.bias``, ``h.{i}.attn.c_attn.weight``
  (3d, d), ``h.{i}.attn.c_attn.bias``, ``h.{i}.attn.c_proj.weight`` (d, d),
  ``h.{i}.attn.c_proj.bias``, ``h.{i}.ln_2.weight``, ``h.{i}.ln_2.bias``,
  ``h.{i}.mlp.c_fc.weight`` (4d, d), ``h.{i}.mlp.c_fc.bias``, ``h.{i}.mlp.c_proj.weight`` (d,
  4d), ``h.{i}.mlp.c_proj.bias``, and ``ln_f.weight``, ``ln_f.bias``. Linear weights are (out,
  in) as in torch.
- Pre-norm blocks ``x + attn(ln_1(x))``, ``x + mlp(ln_2(x))``; q, k, v are the thirds of
  c_attn's output in that order, the heads split d in order; attention is the causal softmax
  of ``q k^T * (1 / sqrt(d / n_heads))`` (future positions filled with -inf before the
  softmax), times v; LayerNorm eps 1e-5; GELU with the tanh approximation; no dropout; the
  output head is ``linear(ln_f(x), wte.weight)`` (tied: no parameter of its own).
- ``model(idx)``: int array (B, T), 1 <= T <= context, ids in [0, vocab_size) -> logits
  Tensor (B, T, vocab_size) in the parameters' format; ``model.to(fmt)`` as every module.
  In a format without infinities (e4m3, the fnuz formats) the -inf of the causal mask rounds
  to NaN, as in PyTorch, and so do the logits of every position but the last (and the
  loss): a whole model in such a format is not trainable; low-precision recipes keep the
  attention scores in a format with infinities.
- Initialisation as nanoGPT's ``_init_weights``: every Linear and Embedding weight N(0,
  0.02**2), the c_proj weights N(0, (0.02 / sqrt(2 n_layers))**2), biases 0, LayerNorm weight
  1 and bias 0; the weights are drawn from ``rng`` (a Generator, an int seed, or None for
  :func:`fpsim.autograd.manual_seed`'s generator) in ``named_parameters()`` order, in
  float64, rounded to fp32.

Every op is one of :mod:`fpsim.functional`'s, with its rounding (the precision table in
:mod:`fpsim.autograd.functional`): embedding, add, layer_norm, linear, reshape, permute,
getitem, transpose, matmul, mul, masked_fill, softmax, gelu.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import functional as F
from ..autograd.generator import get_generator
from ..autograd.tensor import Tensor
from ..checks import as_array, as_int
from ..nn import Embedding, LayerNorm, Linear, Module, Sequential

__all__ = ["GPT"]

_STD = 0.02  # nanoGPT's init std
_MAX_PARAMS = 2**40  # no model this large fits in memory (4 TiB in fp32): refused up front


def _positive(name: str, value) -> int:
    try:
        n = as_int(f"GPT: {name}", value, None)
    except TypeError:
        raise TypeError(f"GPT: {name} must be a positive integer, got "
                        f"{type(value).__name__} {value!r}") from None
    if n < 1:
        raise ValueError(f"GPT: {name} must be a positive integer (>= 1), got {value!r}")
    return n


class _Attention(Module):
    """Causal multi-head self-attention (nanoGPT's ``CausalSelfAttention``, its explicit
    path: no flash kernel, no dropout)."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = Linear(d_model, 3 * d_model, rng=0)  # values drawn by GPT
        self.c_proj = Linear(d_model, d_model, rng=0)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        nh = self.n_heads
        hs = d // nh
        qkv = self.c_attn(x)  # (B, T, 3d): q | k | v, each split into heads in order
        qkv = F.permute(F.reshape(qkv, (b, t, 3, nh, hs)), (2, 0, 3, 1, 4))  # (3, B, nh, T, hs)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = F.mul(F.matmul(q, F.transpose(k, -2, -1)), 1.0 / math.sqrt(hs))
        future = np.triu(np.ones((t, t), dtype=bool), k=1)
        att = F.softmax(F.masked_fill(att, future, -math.inf), dim=-1)
        y = F.matmul(att, v)  # (B, nh, T, hs)
        y = F.reshape(F.transpose(y, 1, 2), (b, t, d))
        return self.c_proj(y)


class _MLP(Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.c_fc = Linear(d_model, 4 * d_model, rng=0)  # values drawn by GPT
        self.c_proj = Linear(4 * d_model, d_model, rng=0)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class _Block(Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(d_model, eps=1e-5)
        self.attn = _Attention(d_model, n_heads)
        self.ln_2 = LayerNorm(d_model, eps=1e-5)
        self.mlp = _MLP(d_model)

    def forward(self, x: Tensor) -> Tensor:
        x = F.add(x, self.attn(self.ln_1(x)))
        return F.add(x, self.mlp(self.ln_2(x)))


class GPT(Module):
    """nanoGPT's GPT (see the module's contract): token and position embeddings, ``n_layers``
    pre-norm transformer blocks of ``n_heads`` causal attention heads and a 4x GELU MLP, a
    final LayerNorm, and the output head tied to the token embedding.

    >>> model = GPT(vocab_size=11, context=8, d_model=16, n_layers=2, n_heads=4, rng=0)
    >>> [n for n, _ in model.named_parameters()][:4]
    ['wte.weight', 'wpe.weight', 'h.0.ln_1.weight', 'h.0.ln_1.bias']
    >>> logits = model(np.array([[1, 2, 3], [4, 5, 6]]))
    >>> logits.shape, logits.fmt.name
    ((2, 3, 11), 'fp32')
    """

    def __init__(self, vocab_size: int, context: int, d_model: int, n_layers: int,
                 n_heads: int, *, rng: np.random.Generator | int | None = None) -> None:
        super().__init__()
        vocab_size = _positive("vocab_size", vocab_size)
        context = _positive("context", context)
        d_model = _positive("d_model", d_model)
        n_layers = _positive("n_layers", n_layers)
        n_heads = _positive("n_heads", n_heads)
        if d_model % n_heads:
            raise ValueError(f"GPT: d_model ({d_model}) must be divisible by n_heads "
                             f"({n_heads})")
        n_params = (vocab_size + context) * d_model + n_layers * (12 * d_model + 13) * d_model \
            + 2 * d_model
        if n_params > _MAX_PARAMS:
            raise ValueError(f"GPT: these sizes give {n_params:.3g} parameters, more than "
                             f"2**40 ({4 * n_params:.3g} bytes in fp32): too large to simulate")
        gen = get_generator(rng)  # checked before any work: state.as_generator's rule
        self.vocab_size, self.context, self.d_model = vocab_size, context, d_model
        self.n_layers, self.n_heads = n_layers, n_heads
        self.wte = Embedding(vocab_size, d_model, rng=0)  # values drawn below
        self.wpe = Embedding(context, d_model, rng=0)
        self.h = Sequential(*[_Block(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = LayerNorm(d_model, eps=1e-5)
        proj_std = _STD / math.sqrt(2 * n_layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.data = np.zeros(p.shape)
            elif ".ln_" in name or name.startswith("ln_"):
                p.data = np.ones(p.shape)
            else:
                std = proj_std if name.endswith("c_proj.weight") else _STD
                p.data = gen.normal(0.0, std, size=p.shape)

    def forward(self, idx) -> Tensor:
        ids = self._ids(idx)
        t = ids.shape[1]
        x = F.add(F.embedding(ids, self.wte.weight), F.embedding(np.arange(t), self.wpe.weight))
        x = self.ln_f(self.h(x))
        return F.linear(x, self.wte.weight)  # the tied output head

    def _ids(self, idx) -> np.ndarray:
        if isinstance(idx, Tensor):
            raise TypeError("GPT: idx must be an integer array (B, T) of token ids, not an "
                            "fpsim Tensor (whose values are floating-point)")
        ids = as_array(idx, "GPT: idx")
        if ids.dtype.kind not in "iu":
            raise TypeError(f"GPT: idx must be an integer array (B, T) of token ids, got dtype "
                            f"{ids.dtype}")
        if ids.ndim != 2 or ids.shape[0] < 1 or not 1 <= ids.shape[1] <= self.context:
            raise ValueError(f"GPT: idx must have shape (B, T) with B >= 1 and 1 <= T <= "
                             f"context ({self.context}), got shape {ids.shape}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.vocab_size:
            raise IndexError(f"GPT: token id {lo if lo < 0 else hi} is out of range for "
                             f"vocab_size {self.vocab_size} (valid: 0 .. "
                             f"{self.vocab_size - 1})")
        return ids

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, context={self.context}, "
                f"d_model={self.d_model}, n_layers={self.n_layers}, n_heads={self.n_heads}")

